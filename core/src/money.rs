//! Money: integer minor units plus an ISO 4217 currency that knows its exponent. No floats anywhere.

use serde::{Deserialize, Serialize};

/// The largest amount accepted, in minor units (Stripe's own ceiling is 99,999,999 for most currencies).
pub const AMOUNT_MINOR_MAX: i64 = 99_999_999;

/// Why an amount or currency was refused at the boundary.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoneyError {
    /// Not a supported ISO 4217 code.
    #[error("unsupported currency {0:?}: expected a lowercase ISO 4217 code such as \"usd\"")]
    UnknownCurrency(String),
    /// Zero or negative.
    #[error("amount must be a positive number of minor units, got {0}")]
    NotPositive(i64),
    /// Above [`AMOUNT_MINOR_MAX`].
    #[error("amount {0} exceeds the limit of {AMOUNT_MINOR_MAX} minor units")]
    TooLarge(i64),
}

/// ISO 4217 currencies payonce accepts. The list is deliberately explicit (an unknown code is
/// refused, never guessed); their minor units and symbols come from the ISO 4217 data of the
/// `iso_currency` crate (docs/decisions.md), not from a table of ours.
const CURRENCIES: &[&str] = &[
    "aud", "bhd", "brl", "cad", "chf", "clp", "cny", "czk", "dkk", "eur", "gbp", "hkd", "huf",
    "inr", "isk", "jod", "jpy", "krw", "kwd", "mxn", "nok", "nzd", "omr", "pln", "sek", "sgd",
    "tnd", "usd", "vnd", "zar",
];

/// Digits between two group separators when an amount is shown to a person (`1,299`).
const GROUP_DIGITS: usize = 3;

/// A supported ISO 4217 currency, lowercase as Stripe writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(into = "String")]
pub struct Currency {
    code: &'static str,
    iso: iso_currency::Currency,
    exponent: u8,
}

impl Currency {
    /// Parses a currency code, case-insensitively.
    pub fn parse(raw: &str) -> Result<Self, MoneyError> {
        let lower = raw.trim().to_ascii_lowercase();
        let unknown = || MoneyError::UnknownCurrency(raw.to_string());
        let code = CURRENCIES
            .iter()
            .find(|code| **code == lower)
            .ok_or_else(unknown)?;
        let iso =
            iso_currency::Currency::from_code(&lower.to_ascii_uppercase()).ok_or_else(unknown)?;
        // Every accepted code has minor units in ISO 4217 (a unit test checks the whole list).
        let exponent = iso
            .exponent()
            .and_then(|e| u8::try_from(e).ok())
            .ok_or_else(unknown)?;
        Ok(Currency {
            code,
            iso,
            exponent,
        })
    }

    /// The lowercase code, e.g. `usd`.
    pub fn code(&self) -> &'static str {
        self.code
    }

    /// Number of minor-unit digits (2 for usd, 0 for jpy, 3 for kwd).
    pub fn exponent(&self) -> u8 {
        self.exponent
    }

    /// Human form of a non-negative total in this currency, zero included (refund totals):
    /// `20.48 USD`, `0.00 USD`, `1500 JPY`.
    pub fn display_total(&self, amount_minor: i64) -> String {
        let exp = u32::from(self.exponent);
        let code = self.code.to_ascii_uppercase();
        if exp == 0 {
            return format!("{amount_minor} {code}");
        }
        let unit = 10_i64.pow(exp);
        format!(
            "{}.{:0width$} {code}",
            amount_minor / unit,
            amount_minor % unit,
            width = exp as usize
        )
    }
}

impl Currency {
    /// A total as a person reads it: the currency's symbol, digits grouped by thousands and its own
    /// minor units (`$20.48`, `¥1,299`, `1,299.00 kr` for a symbol made of letters), zero included.
    pub fn for_people(&self, amount_minor: i64) -> String {
        let exp = u32::from(self.exponent);
        let unit = 10_i64.pow(exp);
        let whole = group_thousands(&(amount_minor / unit).to_string());
        let number = if exp == 0 {
            whole
        } else {
            format!(
                "{whole}.{:0width$}",
                amount_minor % unit,
                width = exp as usize
            )
        };
        let symbol = self.iso.symbol().symbol;
        if symbol.is_empty() {
            format!("{number} {}", self.code.to_ascii_uppercase())
        } else if symbol.chars().any(char::is_alphabetic) {
            format!("{number} {symbol}")
        } else {
            format!("{symbol}{number}")
        }
    }
}

/// `1234567` → `1,234,567` (digits only; callers pass a non-negative whole number).
fn group_thousands(digits: &str) -> String {
    let mut out = String::with_capacity(digits.len() + digits.len() / GROUP_DIGITS);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(GROUP_DIGITS) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl From<Currency> for String {
    fn from(c: Currency) -> String {
        c.code.to_string()
    }
}

impl<'de> Deserialize<'de> for Currency {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        Currency::parse(&raw).map_err(serde::de::Error::custom)
    }
}

/// A positive amount in minor units of one currency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Money {
    amount_minor: i64,
    currency: Currency,
}

impl Money {
    /// Builds an amount, refusing zero, negatives and anything above [`AMOUNT_MINOR_MAX`].
    pub fn new(amount_minor: i64, currency: Currency) -> Result<Self, MoneyError> {
        if amount_minor <= 0 {
            return Err(MoneyError::NotPositive(amount_minor));
        }
        if amount_minor > AMOUNT_MINOR_MAX {
            return Err(MoneyError::TooLarge(amount_minor));
        }
        Ok(Money {
            amount_minor,
            currency,
        })
    }

    /// The amount in minor units (cents for usd).
    pub fn amount_minor(&self) -> i64 {
        self.amount_minor
    }

    /// The currency.
    pub fn currency(&self) -> Currency {
        self.currency
    }

    /// Human form for a tool sentence or a log: `20.48 USD`, `1500 JPY`.
    pub fn display(&self) -> String {
        self.currency.display_total(self.amount_minor)
    }

    /// The form a customer reads on a page: `$20.48`, `¥1,299` ([`Currency::for_people`]).
    pub fn for_people(&self) -> String {
        self.currency.for_people(self.amount_minor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn currencies_parse_case_insensitively_and_unknown_ones_are_refused() {
        assert_eq!(Currency::parse("USD").unwrap().code(), "usd");
        assert_eq!(Currency::parse("jpy").unwrap().exponent(), 0);
        assert_eq!(Currency::parse("kwd").unwrap().exponent(), 3);
        assert!(matches!(
            Currency::parse("xxx"),
            Err(MoneyError::UnknownCurrency(_))
        ));
        assert!(matches!(
            Currency::parse(""),
            Err(MoneyError::UnknownCurrency(_))
        ));
    }

    #[test]
    fn amounts_are_bounded_and_positive() {
        let usd = Currency::parse("usd").unwrap();
        assert_eq!(Money::new(0, usd), Err(MoneyError::NotPositive(0)));
        assert_eq!(Money::new(-5, usd), Err(MoneyError::NotPositive(-5)));
        assert_eq!(
            Money::new(AMOUNT_MINOR_MAX + 1, usd),
            Err(MoneyError::TooLarge(AMOUNT_MINOR_MAX + 1))
        );
        assert_eq!(
            Money::new(AMOUNT_MINOR_MAX, usd).unwrap().amount_minor(),
            AMOUNT_MINOR_MAX
        );
    }

    #[test]
    fn display_uses_the_currency_exponent() {
        let m = |a, c| {
            Money::new(a, Currency::parse(c).unwrap())
                .unwrap()
                .display()
        };
        assert_eq!(m(2048, "usd"), "20.48 USD");
        assert_eq!(m(5, "eur"), "0.05 EUR");
        assert_eq!(m(1500, "jpy"), "1500 JPY");
        assert_eq!(m(1001, "kwd"), "1.001 KWD");
        // Totals (refunded so far) may be zero.
        let usd = Currency::parse("usd").unwrap();
        assert_eq!(usd.display_total(0), "0.00 USD");
        assert_eq!(usd.display_total(2048), "20.48 USD");
        assert_eq!(Currency::parse("jpy").unwrap().display_total(0), "0 JPY");
    }

    #[test]
    fn every_accepted_currency_has_iso_minor_units() {
        for code in CURRENCIES {
            let c = Currency::parse(code).unwrap();
            assert!(c.exponent() <= 3, "{code}");
        }
        assert_eq!(Currency::parse("usd").unwrap().exponent(), 2);
        assert_eq!(Currency::parse("isk").unwrap().exponent(), 0);
        assert_eq!(Currency::parse("bhd").unwrap().exponent(), 3);
    }

    #[test]
    fn people_read_symbols_grouping_and_the_currencys_minor_units() {
        let m = |a, c| {
            Money::new(a, Currency::parse(c).unwrap())
                .unwrap()
                .for_people()
        };
        assert_eq!(m(1299, "jpy"), "¥1,299");
        assert_eq!(m(2048, "usd"), "$20.48");
        assert_eq!(m(129_900, "eur"), "€1,299.00");
        assert_eq!(m(99_999_999, "usd"), "$999,999.99");
        assert_eq!(m(5, "gbp"), "£0.05");
        assert_eq!(m(1_234_567, "krw"), "₩1,234,567");
        assert_eq!(m(1001, "kwd"), "1.001 د.ك");
        assert_eq!(m(129_900, "huf"), "1,299.00 Ft");
        assert_eq!(group_thousands("100"), "100");
        assert_eq!(group_thousands("1000"), "1,000");
        assert_eq!(group_thousands("0"), "0");
    }
}

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

/// ISO 4217 currencies payonce accepts, with their minor-unit exponent.
/// The list is deliberately explicit: an unknown code is refused, never guessed.
const CURRENCIES: &[(&str, u8)] = &[
    ("aud", 2),
    ("bhd", 3),
    ("brl", 2),
    ("cad", 2),
    ("chf", 2),
    ("clp", 0),
    ("cny", 2),
    ("czk", 2),
    ("dkk", 2),
    ("eur", 2),
    ("gbp", 2),
    ("hkd", 2),
    ("huf", 2),
    ("inr", 2),
    ("isk", 0),
    ("jod", 3),
    ("jpy", 0),
    ("krw", 0),
    ("kwd", 3),
    ("mxn", 2),
    ("nok", 2),
    ("nzd", 2),
    ("omr", 3),
    ("pln", 2),
    ("sek", 2),
    ("sgd", 2),
    ("tnd", 3),
    ("usd", 2),
    ("vnd", 0),
    ("zar", 2),
];

/// A supported ISO 4217 currency, lowercase as Stripe writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(into = "String")]
pub struct Currency {
    code: &'static str,
    exponent: u8,
}

impl Currency {
    /// Parses a currency code, case-insensitively.
    pub fn parse(raw: &str) -> Result<Self, MoneyError> {
        let lower = raw.trim().to_ascii_lowercase();
        CURRENCIES
            .iter()
            .find(|(code, _)| *code == lower)
            .map(|(code, exponent)| Currency {
                code,
                exponent: *exponent,
            })
            .ok_or_else(|| MoneyError::UnknownCurrency(raw.to_string()))
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

    /// Human form for a confirmation page or a tool sentence: `20.48 USD`, `1500 JPY`.
    pub fn display(&self) -> String {
        self.currency.display_total(self.amount_minor)
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
}

//! The consequential details of an operation and their canonical hash, which approvals bind to.

use crate::money::{Currency, Money, MoneyError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Longest customer, payment method, invoice or destination reference accepted.
pub const REFERENCE_LEN_MAX: usize = 128;
/// Longest free-text description accepted (shown to the customer, not hashed).
pub const DESCRIPTION_LEN_MAX: usize = 500;

/// What an operation does at the processor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperationKind {
    /// Collect money from a customer (a Stripe PaymentIntent, confirmed off-session).
    Payment,
}

impl OperationKind {
    /// Stable text form, as stored.
    pub fn as_str(&self) -> &'static str {
        match self {
            OperationKind::Payment => "payment",
        }
    }

    /// Parses the stored or submitted form.
    pub fn parse(raw: &str) -> Result<Self, DetailsError> {
        match raw {
            "payment" => Ok(OperationKind::Payment),
            other => Err(DetailsError::Field {
                field: "kind",
                why: format!("unknown kind {other:?}; expected \"payment\""),
            }),
        }
    }
}

/// Why money is given back (Stripe's `reason` on `POST /v1/refunds`; the processor's own
/// `expired_uncaptured_charge` is never asked for by a caller).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefundReason {
    /// The customer was charged twice for the same thing.
    Duplicate,
    /// The payment was fraudulent.
    Fraudulent,
    /// The customer asked for their money back.
    RequestedByCustomer,
}

impl RefundReason {
    /// Stable text form, as stored and as sent to the processor.
    pub fn as_str(&self) -> &'static str {
        match self {
            RefundReason::Duplicate => "duplicate",
            RefundReason::Fraudulent => "fraudulent",
            RefundReason::RequestedByCustomer => "requested_by_customer",
        }
    }

    /// Parses the stored or submitted form.
    pub fn parse(raw: &str) -> Result<Self, DetailsError> {
        match raw {
            "duplicate" => Ok(RefundReason::Duplicate),
            "fraudulent" => Ok(RefundReason::Fraudulent),
            "requested_by_customer" => Ok(RefundReason::RequestedByCustomer),
            other => Err(DetailsError::Field {
                field: "reason",
                why: format!(
                    "unknown reason {other:?}; expected \"duplicate\", \"fraudulent\" or \"requested_by_customer\""
                ),
            }),
        }
    }
}

/// Why submitted details were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DetailsError {
    /// The amount or currency is invalid.
    #[error(transparent)]
    Money(#[from] MoneyError),
    /// A reference field is empty, too long or holds characters outside the allowed set.
    #[error("{field}: {why}")]
    Field {
        /// The field's name.
        field: &'static str,
        /// What is wrong.
        why: String,
    },
}

/// Details as submitted by a trusted upstream service, before parsing.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDetails {
    /// `payment`.
    #[serde(default = "default_kind")]
    pub kind: String,
    /// Minor units.
    pub amount: i64,
    /// ISO 4217, e.g. `usd`.
    pub currency: String,
    /// Processor customer reference, e.g. `cus_...`.
    pub customer: String,
    /// Processor payment method reference, e.g. `pm_card_visa`.
    pub payment_method: String,
    /// The invoice this pays.
    pub invoice: String,
    /// Optional connected-account destination.
    #[serde(default)]
    pub destination: Option<String>,
    /// Text shown to the customer on the confirmation page.
    #[serde(default)]
    pub description: Option<String>,
}

fn default_kind() -> String {
    "payment".to_string()
}

/// Parsed, validated details. Every field but `description` is consequential and hashed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Details {
    kind: OperationKind,
    money: Money,
    customer: String,
    payment_method: String,
    invoice: String,
    destination: Option<String>,
    description: Option<String>,
}

fn reference(field: &'static str, raw: &str) -> Result<String, DetailsError> {
    if raw.is_empty() || raw.len() > REFERENCE_LEN_MAX {
        return Err(DetailsError::Field {
            field,
            why: format!("must be 1 to {REFERENCE_LEN_MAX} characters"),
        });
    }
    if !raw
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | '/'))
    {
        return Err(DetailsError::Field {
            field,
            why: "may hold only letters, digits and _ - . : /".to_string(),
        });
    }
    Ok(raw.to_string())
}

impl Details {
    /// Parses untrusted input into validated details.
    pub fn parse(raw: &RawDetails) -> Result<Self, DetailsError> {
        let currency = Currency::parse(&raw.currency)?;
        let description = match &raw.description {
            Some(d) if d.chars().count() > DESCRIPTION_LEN_MAX => {
                return Err(DetailsError::Field {
                    field: "description",
                    why: format!("must be at most {DESCRIPTION_LEN_MAX} characters"),
                });
            }
            Some(d) if d.chars().any(char::is_control) => {
                return Err(DetailsError::Field {
                    field: "description",
                    why: "must not hold control characters".into(),
                });
            }
            other => other.clone(),
        };
        Ok(Details {
            kind: OperationKind::parse(&raw.kind)?,
            money: Money::new(raw.amount, currency)?,
            customer: reference("customer", &raw.customer)?,
            payment_method: reference("payment_method", &raw.payment_method)?,
            invoice: reference("invoice", &raw.invoice)?,
            destination: raw
                .destination
                .as_deref()
                .map(|d| reference("destination", d))
                .transpose()?,
            description,
        })
    }

    /// The raw form, for storage and for API responses.
    pub fn to_raw(&self) -> RawDetails {
        RawDetails {
            kind: self.kind.as_str().to_string(),
            amount: self.money.amount_minor(),
            currency: self.money.currency().code().to_string(),
            customer: self.customer.clone(),
            payment_method: self.payment_method.clone(),
            invoice: self.invoice.clone(),
            destination: self.destination.clone(),
            description: self.description.clone(),
        }
    }

    /// What the operation does.
    pub fn kind(&self) -> OperationKind {
        self.kind
    }
    /// Amount and currency.
    pub fn money(&self) -> Money {
        self.money
    }
    /// Processor customer reference.
    pub fn customer(&self) -> &str {
        &self.customer
    }
    /// Processor payment method reference.
    pub fn payment_method(&self) -> &str {
        &self.payment_method
    }
    /// Invoice reference.
    pub fn invoice(&self) -> &str {
        &self.invoice
    }
    /// Connected-account destination, if any.
    pub fn destination(&self) -> Option<&str> {
        self.destination.as_deref()
    }
    /// Customer-facing description, if any (not consequential, not hashed).
    pub fn description(&self) -> Option<&str> {
        self.description.as_deref()
    }

    /// Canonical hash of every consequential detail. Each field is written with its name and length,
    /// so no two different detail sets share an encoding.
    pub fn hash(&self) -> DetailsHash {
        let mut h = Sha256::new();
        let fields: [(&str, &str); 7] = [
            ("kind", self.kind.as_str()),
            ("amount", &self.money.amount_minor().to_string()),
            ("currency", self.money.currency().code()),
            ("customer", &self.customer),
            ("payment_method", &self.payment_method),
            ("invoice", &self.invoice),
            (
                "destination",
                self.destination.as_deref().unwrap_or("\u{0}none"),
            ),
        ];
        h.update(b"payonce-details-v1");
        for (name, value) in fields {
            h.update((name.len() as u64).to_be_bytes());
            h.update(name.as_bytes());
            h.update((value.len() as u64).to_be_bytes());
            h.update(value.as_bytes());
        }
        DetailsHash(hex::encode(h.finalize()))
    }
}

/// SHA-256 (hex) of an operation's consequential details.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DetailsHash(String);

impl DetailsHash {
    /// Parses a stored or submitted hash: 64 lowercase hex digits.
    pub fn parse(raw: &str) -> Result<Self, DetailsError> {
        if raw.len() != 64
            || !raw
                .chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
        {
            return Err(DetailsError::Field {
                field: "details_hash",
                why: "must be 64 lowercase hex digits".into(),
            });
        }
        Ok(DetailsHash(raw.to_string()))
    }
    /// The hex text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refund_reasons_round_trip_and_unknown_ones_are_refused() {
        for reason in [
            RefundReason::Duplicate,
            RefundReason::Fraudulent,
            RefundReason::RequestedByCustomer,
        ] {
            assert_eq!(RefundReason::parse(reason.as_str()), Ok(reason));
            let json = serde_json::to_string(&reason).unwrap();
            assert_eq!(json, format!("\"{}\"", reason.as_str()));
        }
        let err = RefundReason::parse("expired_uncaptured_charge").unwrap_err();
        assert!(
            matches!(
                &err,
                DetailsError::Field {
                    field: "reason",
                    ..
                }
            ),
            "{err:?}"
        );
    }

    pub(crate) fn raw() -> RawDetails {
        RawDetails {
            kind: "payment".into(),
            amount: 2048,
            currency: "usd".into(),
            customer: "cus_123".into(),
            payment_method: "pm_card_visa".into(),
            invoice: "INV-2048".into(),
            destination: None,
            description: Some("March hosting".into()),
        }
    }

    #[test]
    fn every_consequential_detail_changes_the_hash() {
        let base = Details::parse(&raw()).unwrap().hash();
        let variants: [fn(&mut RawDetails); 6] = [
            |r| r.amount = 2049,
            |r| r.currency = "eur".into(),
            |r| r.customer = "cus_124".into(),
            |r| r.payment_method = "pm_card_mastercard".into(),
            |r| r.invoice = "INV-2049".into(),
            |r| r.destination = Some("acct_1".into()),
        ];
        for change in variants {
            let mut r = raw();
            change(&mut r);
            assert_ne!(Details::parse(&r).unwrap().hash(), base);
        }
        let mut r = raw();
        r.description = Some("other words".into());
        assert_eq!(
            Details::parse(&r).unwrap().hash(),
            base,
            "description is not consequential"
        );
        assert_eq!(DetailsHash::parse(base.as_str()).unwrap(), base);
    }

    #[test]
    fn bad_fields_are_refused_with_their_name() {
        let mut r = raw();
        r.customer = String::new();
        assert!(matches!(
            Details::parse(&r),
            Err(DetailsError::Field {
                field: "customer",
                ..
            })
        ));
        let mut r = raw();
        r.invoice = "x".repeat(REFERENCE_LEN_MAX + 1);
        assert!(matches!(
            Details::parse(&r),
            Err(DetailsError::Field {
                field: "invoice",
                ..
            })
        ));
        let mut r = raw();
        r.description = Some("d".repeat(DESCRIPTION_LEN_MAX + 1));
        assert!(matches!(
            Details::parse(&r),
            Err(DetailsError::Field {
                field: "description",
                ..
            })
        ));
        let mut r = raw();
        r.amount = 0;
        assert!(matches!(Details::parse(&r), Err(DetailsError::Money(_))));
        let mut r = raw();
        r.kind = "transfer".into();
        assert!(matches!(
            Details::parse(&r),
            Err(DetailsError::Field { field: "kind", .. })
        ));
    }
}

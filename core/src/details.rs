//! The consequential details of an operation and their canonical hash, which approvals bind to.

use crate::id::OperationId;
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
    /// Give money back from a succeeded payment of the same tenant (a Stripe Refund).
    Refund,
}

impl OperationKind {
    /// Stable text form, as stored.
    pub fn as_str(&self) -> &'static str {
        match self {
            OperationKind::Payment => "payment",
            OperationKind::Refund => "refund",
        }
    }

    /// Parses the stored or submitted form.
    pub fn parse(raw: &str) -> Result<Self, DetailsError> {
        match raw {
            "payment" => Ok(OperationKind::Payment),
            "refund" => Ok(OperationKind::Refund),
            other => Err(DetailsError::Field {
                field: "kind",
                why: format!("unknown kind {other:?}; expected \"payment\" or \"refund\""),
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

/// The raw form of [`RefundOf`], as stored and as shown in API responses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRefundOf {
    /// The refunded payment operation, `op_...`.
    pub payment_operation: String,
    /// Its processor reference, e.g. `pi_...`.
    pub payment_reference: String,
    /// `duplicate`, `fraudulent` or `requested_by_customer`.
    pub reason: String,
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
    /// The payment a refund gives money back from; present exactly when `kind` is `refund`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refund_of: Option<RawRefundOf>,
}

fn default_kind() -> String {
    "payment".to_string()
}

/// The succeeded payment a refund gives money back from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundOf {
    payment_operation: OperationId,
    payment_reference: String,
    reason: RefundReason,
}

impl RefundOf {
    /// The refunded payment operation (same tenant).
    pub fn payment_operation(&self) -> &OperationId {
        &self.payment_operation
    }
    /// Its processor reference, e.g. `pi_...`, copied at creation.
    pub fn payment_reference(&self) -> &str {
        &self.payment_reference
    }
    /// Why the money is given back.
    pub fn reason(&self) -> RefundReason {
        self.reason
    }

    fn parse(raw: &RawRefundOf) -> Result<Self, DetailsError> {
        Ok(RefundOf {
            payment_operation: OperationId::parse(&raw.payment_operation).map_err(|e| {
                DetailsError::Field {
                    field: "payment_operation",
                    why: e.to_string(),
                }
            })?,
            payment_reference: reference("payment_reference", &raw.payment_reference)?,
            reason: RefundReason::parse(&raw.reason)?,
        })
    }
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
    /// Some exactly when `kind` is `Refund` (enforced by `parse` and `refund`, the only constructors).
    refund_of: Option<RefundOf>,
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
        let kind = OperationKind::parse(&raw.kind)?;
        let refund_of = match (kind, &raw.refund_of) {
            (OperationKind::Payment, None) => None,
            (OperationKind::Refund, Some(of)) => Some(RefundOf::parse(of)?),
            (OperationKind::Payment, Some(_)) => {
                return Err(DetailsError::Field {
                    field: "refund_of",
                    why: "only a refund refers to a payment".into(),
                });
            }
            (OperationKind::Refund, None) => {
                return Err(DetailsError::Field {
                    field: "refund_of",
                    why: "a refund must name the payment it gives money back from".into(),
                });
            }
        };
        Ok(Details {
            kind,
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
            refund_of,
        })
    }

    /// The details of a refund of `payment` (a payment operation's details): `amount_minor` in the
    /// payment's currency, at most the payment's amount (the ledger guards the sum of all refunds).
    /// Customer, payment method and invoice are the payment's; a refund has no destination and no
    /// customer-facing description.
    pub fn refund(
        payment: &Details,
        payment_operation: &OperationId,
        payment_reference: &str,
        amount_minor: i64,
        reason: RefundReason,
    ) -> Result<Self, DetailsError> {
        match payment.kind {
            OperationKind::Payment => {}
            OperationKind::Refund => {
                return Err(DetailsError::Field {
                    field: "payment_operation",
                    why: "is a refund, not a payment".into(),
                });
            }
        }
        let money = Money::new(amount_minor, payment.money.currency())?;
        if amount_minor > payment.money.amount_minor() {
            return Err(DetailsError::Field {
                field: "amount",
                why: format!(
                    "must be at most the payment's amount, {}",
                    payment.money.amount_minor()
                ),
            });
        }
        Ok(Details {
            kind: OperationKind::Refund,
            money,
            customer: payment.customer.clone(),
            payment_method: payment.payment_method.clone(),
            invoice: payment.invoice.clone(),
            destination: None,
            description: None,
            refund_of: Some(RefundOf {
                payment_operation: payment_operation.clone(),
                payment_reference: reference("payment_reference", payment_reference)?,
                reason,
            }),
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
            refund_of: self.refund_of.as_ref().map(|of| RawRefundOf {
                payment_operation: of.payment_operation.as_str().to_string(),
                payment_reference: of.payment_reference.clone(),
                reason: of.reason.as_str().to_string(),
            }),
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
    /// The payment a refund gives money back from: Some exactly when `kind()` is `Refund`.
    pub fn refund_of(&self) -> Option<&RefundOf> {
        self.refund_of.as_ref()
    }

    /// Canonical hash of every consequential detail. Each field is written with its name and length,
    /// so no two different detail sets share an encoding. A refund's fields follow the payment's
    /// seven, so every payment hash stored before refunds existed is unchanged.
    pub fn hash(&self) -> DetailsHash {
        let mut h = Sha256::new();
        let amount = self.money.amount_minor().to_string();
        let mut fields: Vec<(&str, &str)> = vec![
            ("kind", self.kind.as_str()),
            ("amount", &amount),
            ("currency", self.money.currency().code()),
            ("customer", &self.customer),
            ("payment_method", &self.payment_method),
            ("invoice", &self.invoice),
            (
                "destination",
                self.destination.as_deref().unwrap_or("\u{0}none"),
            ),
        ];
        if let Some(of) = &self.refund_of {
            fields.push(("refund_payment_operation", of.payment_operation.as_str()));
            fields.push(("refund_payment_reference", &of.payment_reference));
            fields.push(("refund_reason", of.reason.as_str()));
        }
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
mod tests;

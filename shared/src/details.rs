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
            refund_of: None,
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

    fn payment() -> (Details, OperationId) {
        (Details::parse(&raw()).unwrap(), OperationId::generate())
    }

    #[test]
    fn a_refund_takes_the_payments_parties_and_round_trips_through_its_raw_form() {
        let (payment, op) = payment();
        let refund = Details::refund(&payment, &op, "pi_1", 500, RefundReason::Duplicate).unwrap();
        assert_eq!(refund.kind(), OperationKind::Refund);
        assert_eq!(refund.money().amount_minor(), 500);
        assert_eq!(refund.money().currency(), payment.money().currency());
        assert_eq!(refund.customer(), "cus_123");
        assert_eq!(refund.payment_method(), "pm_card_visa");
        assert_eq!(refund.invoice(), "INV-2048");
        assert_eq!(refund.destination(), None);
        assert_eq!(refund.description(), None);
        let of = refund.refund_of().unwrap();
        assert_eq!(of.payment_operation(), &op);
        assert_eq!(of.payment_reference(), "pi_1");
        assert_eq!(of.reason(), RefundReason::Duplicate);
        assert_eq!(payment.refund_of(), None);

        let raw = refund.to_raw();
        assert_eq!(raw.kind, "refund");
        let json = serde_json::to_value(&raw).unwrap();
        assert_eq!(json["refund_of"]["payment_operation"], op.as_str());
        assert_eq!(json["refund_of"]["reason"], "duplicate");
        let back: RawDetails = serde_json::from_value(json).unwrap();
        assert_eq!(Details::parse(&back).unwrap(), refund);
        assert_eq!(Details::parse(&back).unwrap().hash(), refund.hash());
        // A payment's raw form has no refund_of key at all (responses are unchanged).
        let payment_json = serde_json::to_value(payment.to_raw()).unwrap();
        assert!(payment_json.get("refund_of").is_none(), "{payment_json}");
    }

    #[test]
    fn every_refund_detail_changes_the_hash_and_payment_hashes_are_unchanged() {
        // Pinned: refunds appended their fields after the payment's, so stored payment hashes hold.
        assert_eq!(
            Details::parse(&raw()).unwrap().hash().as_str(),
            PAYMENT_HASH_PINNED
        );
        let (payment, op) = payment();
        let base = Details::refund(&payment, &op, "pi_1", 500, RefundReason::Duplicate)
            .unwrap()
            .hash();
        let variants = [
            Details::refund(&payment, &op, "pi_1", 501, RefundReason::Duplicate),
            Details::refund(
                &payment,
                &OperationId::generate(),
                "pi_1",
                500,
                RefundReason::Duplicate,
            ),
            Details::refund(&payment, &op, "pi_2", 500, RefundReason::Duplicate),
            Details::refund(&payment, &op, "pi_1", 500, RefundReason::Fraudulent),
        ];
        for variant in variants {
            assert_ne!(variant.unwrap().hash(), base);
        }
        let mut other_payment = raw();
        other_payment.customer = "cus_999".into();
        let other = Details::parse(&other_payment).unwrap();
        assert_ne!(
            Details::refund(&other, &op, "pi_1", 500, RefundReason::Duplicate)
                .unwrap()
                .hash(),
            base
        );
    }

    /// `Details::parse(&raw()).hash()`, computed before refunds existed.
    const PAYMENT_HASH_PINNED: &str =
        "0adc909fe44b2cf4c1827ba21dcc619d05feb65391eb213cd3936a7c0e100372";

    #[test]
    fn refunds_and_payments_are_refused_in_each_others_shape() {
        let (payment, op) = payment();
        let refund = Details::refund(&payment, &op, "pi_1", 500, RefundReason::Duplicate).unwrap();
        let field = |r: Result<Details, DetailsError>| match r {
            Err(DetailsError::Field { field, .. }) => field,
            other => panic!("expected a field error, got {other:?}"),
        };
        assert_eq!(
            field(Details::refund(
                &refund,
                &op,
                "pi_1",
                1,
                RefundReason::Duplicate
            )),
            "payment_operation"
        );
        assert_eq!(
            field(Details::refund(
                &payment,
                &op,
                "pi_1",
                2049,
                RefundReason::Duplicate
            )),
            "amount"
        );
        assert!(matches!(
            Details::refund(&payment, &op, "pi_1", 0, RefundReason::Duplicate),
            Err(DetailsError::Money(_))
        ));
        assert_eq!(
            field(Details::refund(
                &payment,
                &op,
                "pi 1",
                1,
                RefundReason::Duplicate
            )),
            "payment_reference"
        );
        let mut r = refund.to_raw();
        r.refund_of = None;
        assert_eq!(field(Details::parse(&r)), "refund_of");
        let mut r = raw();
        r.refund_of = refund.to_raw().refund_of;
        assert_eq!(field(Details::parse(&r)), "refund_of");
        let mut r = refund.to_raw();
        r.refund_of.as_mut().unwrap().payment_operation = "op_nothex".into();
        assert_eq!(field(Details::parse(&r)), "payment_operation");
        let mut r = refund.to_raw();
        r.refund_of.as_mut().unwrap().reason = "expired_uncaptured_charge".into();
        assert_eq!(field(Details::parse(&r)), "reason");
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

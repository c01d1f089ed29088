//! The exact JSON a submission sends to Adyen Checkout v71, and the URLs the adapter calls.
//!
//! Payments: `POST {base}/v71/payments`, a stored card charged merchant-initiated (`ContAuth`,
//! `UnscheduledCardOnFile`), the operation id as `reference`, the customer as `shopperReference`.
//! Refunds: `POST {base}/v71/payments/{pspReference}/refunds`. A payment carries the tenant, business
//! key, details hash and invoice in `metadata`, within Adyen's metadata limits; a refund request has no
//! metadata in Adyen's schema and is named by its `reference` only.

use crate::{RefundRequest, SubmitRequest};
use payonce_core::details::RefundReason;
use serde_json::{Map, Value, json};

/// Adyen's longest `Idempotency-Key`, in characters.
pub const IDEMPOTENCY_KEY_LEN_MAX: usize = 64;
/// Adyen's most metadata entries per request (more is error 177).
pub const METADATA_ENTRIES_MAX: usize = 20;
/// Adyen's longest metadata key, in characters.
pub const METADATA_KEY_LEN_MAX: usize = 20;
/// Adyen's longest metadata value, in characters.
pub const METADATA_VALUE_LEN_MAX: usize = 80;
/// Adyen's longest `reference` (the operation id), in characters.
pub const REFERENCE_LEN_MAX: usize = 80;
/// Adyen's shortest `shopperReference`, in characters.
pub const SHOPPER_REFERENCE_LEN_MIN: usize = 3;
/// Adyen's longest `shopperReference`, in characters.
pub const SHOPPER_REFERENCE_LEN_MAX: usize = 256;

/// Metadata key carrying the operation id (also `reference`; kept beside the intention).
pub const METADATA_OPERATION_ID: &str = "payonce_operation_id";
/// Metadata key carrying the tenant.
pub const METADATA_TENANT: &str = "payonce_tenant";
/// Metadata key carrying the business key.
pub const METADATA_BUSINESS_KEY: &str = "payonce_business_key";
/// Metadata key carrying the approved details' hash.
pub const METADATA_DETAILS_HASH: &str = "payonce_details_hash";
/// Metadata key carrying the invoice (payments).
pub const METADATA_INVOICE: &str = "payonce_invoice";

// Every key payonce writes fits Adyen's key limit; checked at compile time.
const _: () = {
    assert!(METADATA_OPERATION_ID.len() <= METADATA_KEY_LEN_MAX);
    assert!(METADATA_TENANT.len() <= METADATA_KEY_LEN_MAX);
    assert!(METADATA_BUSINESS_KEY.len() <= METADATA_KEY_LEN_MAX);
    assert!(METADATA_DETAILS_HASH.len() <= METADATA_KEY_LEN_MAX);
    assert!(METADATA_INVOICE.len() <= METADATA_KEY_LEN_MAX);
};

/// Why a request cannot be put on Adyen's wire: the operation's own details exceed a limit Adyen
/// enforces, so every attempt would be refused the same way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The stored key is longer than Adyen accepts.
    #[error(
        "the idempotency key is {0} characters; Adyen accepts at most {IDEMPOTENCY_KEY_LEN_MAX}"
    )]
    KeyTooLong(usize),
    /// A metadata value is longer than Adyen accepts.
    #[error("metadata {key} is {len} characters; Adyen accepts at most {METADATA_VALUE_LEN_MAX}")]
    MetadataTooLong {
        /// The metadata key.
        key: &'static str,
        /// Its value's length.
        len: usize,
    },
    /// A field is outside Adyen's bounds.
    #[error("{field} is {len} characters; Adyen accepts {min} to {max}")]
    FieldLength {
        /// The field.
        field: &'static str,
        /// Its length.
        len: usize,
        /// Adyen's minimum.
        min: usize,
        /// Adyen's maximum.
        max: usize,
    },
    /// A consequential detail Adyen's wire cannot carry (a `destination`): sending the payment
    /// without it would execute something other than what was approved.
    #[error(transparent)]
    Uncarried(#[from] crate::carry::Uncarried),
}

impl WireError {
    /// Stable code the operation fails with.
    pub fn code(&self) -> &'static str {
        match self {
            WireError::KeyTooLong(_) => "adyen_idempotency_key_too_long",
            WireError::MetadataTooLong { .. } => "adyen_metadata_too_long",
            WireError::FieldLength { .. } => "adyen_field_length",
            WireError::Uncarried(_) => "adyen_destination_unsupported",
        }
    }
}

/// `POST {base}/v71/payments`.
pub(crate) fn payments_url(base: &str) -> String {
    format!("{base}/v71/payments")
}

/// `POST {base}/v71/payments/{pspReference}/refunds`; `None` for a reference that is not a plain
/// alphanumeric Adyen reference (it goes into the path).
pub(crate) fn refunds_url(base: &str, psp_reference: &str) -> Option<String> {
    let plain = !psp_reference.is_empty()
        && psp_reference.len() <= REFERENCE_LEN_MAX
        && psp_reference.chars().all(|c| c.is_ascii_alphanumeric());
    plain.then(|| format!("{base}/v71/payments/{psp_reference}/refunds"))
}

/// Checks the stored key fits Adyen's header (payonce's intention keys are `po2_` (or `po1_`) + 40 hex: 44).
pub fn check_key(key: &str) -> Result<(), WireError> {
    let len = key.chars().count();
    if len > IDEMPOTENCY_KEY_LEN_MAX {
        return Err(WireError::KeyTooLong(len));
    }
    Ok(())
}

fn bounded(field: &'static str, value: &str, min: usize, max: usize) -> Result<(), WireError> {
    let len = value.chars().count();
    if !(min..=max).contains(&len) {
        return Err(WireError::FieldLength {
            field,
            len,
            min,
            max,
        });
    }
    Ok(())
}

fn metadata(entries: &[(&'static str, &str)]) -> Result<Value, WireError> {
    debug_assert!(entries.len() <= METADATA_ENTRIES_MAX);
    let mut map = Map::new();
    for &(key, value) in entries {
        let len = value.chars().count();
        if len > METADATA_VALUE_LEN_MAX {
            return Err(WireError::MetadataTooLong { key, len });
        }
        map.insert(key.to_string(), Value::String(value.to_string()));
    }
    Ok(Value::Object(map))
}

fn amount(minor: i64, currency: &str) -> Value {
    json!({ "value": minor, "currency": currency.to_ascii_uppercase() })
}

/// The body of a payment. Built only from the ledger record, so every attempt under one key sends
/// the same JSON (Adyen refuses a key reused with another body).
pub fn payment_body(
    request: &SubmitRequest<'_>,
    merchant_account: &str,
    return_url: &str,
) -> Result<Value, WireError> {
    check_key(request.idempotency_key.as_str())?;
    let d = request.details;
    if let Some(uncarried) = crate::carry::uncarried(crate::ProcessorKind::Adyen, d) {
        return Err(uncarried.into());
    }
    bounded(
        "reference",
        request.operation_id.as_str(),
        1,
        REFERENCE_LEN_MAX,
    )?;
    bounded(
        "shopperReference",
        d.customer(),
        SHOPPER_REFERENCE_LEN_MIN,
        SHOPPER_REFERENCE_LEN_MAX,
    )?;
    let metadata = metadata(&[
        (METADATA_OPERATION_ID, request.operation_id.as_str()),
        (METADATA_TENANT, request.tenant.as_str()),
        (METADATA_BUSINESS_KEY, request.business_key.as_str()),
        (METADATA_DETAILS_HASH, request.details_hash.as_str()),
        (METADATA_INVOICE, d.invoice()),
    ])?;
    Ok(json!({
        "merchantAccount": merchant_account,
        "amount": amount(d.money().amount_minor(), d.money().currency().code()),
        "reference": request.operation_id.as_str(),
        "shopperReference": d.customer(),
        "paymentMethod": { "type": "scheme", "storedPaymentMethodId": d.payment_method() },
        // Merchant-initiated: the customer approved on payonce's page; nobody is there to authenticate.
        "shopperInteraction": "ContAuth",
        "recurringProcessingModel": "UnscheduledCardOnFile",
        // Required by Adyen's schema; a ContAuth card payment never redirects to it.
        "returnUrl": return_url,
        "metadata": metadata,
    }))
}

/// Adyen's `merchantRefundReason` for payonce's refund reason.
pub fn refund_reason(reason: RefundReason) -> &'static str {
    match reason {
        RefundReason::Duplicate => "DUPLICATE",
        RefundReason::Fraudulent => "FRAUD",
        RefundReason::RequestedByCustomer => "CUSTOMER REQUEST",
    }
}

/// The body of a refund.
pub fn refund_body(
    request: &RefundRequest<'_>,
    merchant_account: &str,
) -> Result<Value, WireError> {
    check_key(request.idempotency_key.as_str())?;
    bounded(
        "reference",
        request.operation_id.as_str(),
        1,
        REFERENCE_LEN_MAX,
    )?;
    // Adyen's refund request has no metadata (its schema names none, and Adyen refuses unknown
    // fields): the refund is identified by its `reference`, the refund operation's id.
    Ok(json!({
        "merchantAccount": merchant_account,
        "amount": amount(request.amount.amount_minor(), request.amount.currency().code()),
        "reference": request.operation_id.as_str(),
        "merchantRefundReason": refund_reason(request.reason),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use payonce_core::details::{Details, RawDetails};
    use payonce_core::id::{BusinessKey, IdempotencyKey, OperationId, TenantId};

    fn details(customer: &str, invoice: &str) -> Details {
        Details::parse(&RawDetails {
            kind: "payment".into(),
            amount: 2048,
            currency: "eur".into(),
            customer: customer.into(),
            payment_method: "pm_card_visa".into(),
            invoice: invoice.into(),
            destination: None,
            description: None,
            refund_of: None,
        })
        .unwrap()
    }

    #[test]
    fn a_payment_carries_every_field_and_fits_adyens_limits() {
        let op = OperationId::generate();
        let tenant = TenantId::parse("acme").unwrap();
        let key = IdempotencyKey::parse(&format!("po1_{}", "a".repeat(40))).unwrap();
        let business_key = BusinessKey::parse("invoice:INV-1:pay").unwrap();
        let d = details("cus_1", "INV-1");
        let req = SubmitRequest {
            operation_id: &op,
            tenant: &tenant,
            idempotency_key: &key,
            business_key: &business_key,
            details_hash: &d.hash(),
            details: &d,
        };
        let body = payment_body(&req, "PayonceECOM", "https://example.test/r").unwrap();
        assert_eq!(body["amount"], json!({"value": 2048, "currency": "EUR"}));
        assert_eq!(body["reference"], op.as_str());
        assert_eq!(body["shopperReference"], "cus_1");
        assert_eq!(
            body["paymentMethod"]["storedPaymentMethodId"],
            "pm_card_visa"
        );
        assert_eq!(body["metadata"]["payonce_invoice"], "INV-1");
        assert_eq!(
            body,
            payment_body(&req, "PayonceECOM", "https://example.test/r").unwrap()
        );

        // A key longer than Adyen's 64 characters is refused before anything is sent.
        let long = IdempotencyKey::parse(&"k".repeat(IDEMPOTENCY_KEY_LEN_MAX + 1)).unwrap();
        let at_max = IdempotencyKey::parse(&"k".repeat(IDEMPOTENCY_KEY_LEN_MAX)).unwrap();
        assert_eq!(
            payment_body(
                &SubmitRequest {
                    idempotency_key: &long,
                    ..req.clone()
                },
                "M",
                "u"
            ),
            Err(WireError::KeyTooLong(IDEMPOTENCY_KEY_LEN_MAX + 1))
        );
        assert!(
            payment_body(
                &SubmitRequest {
                    idempotency_key: &at_max,
                    ..req.clone()
                },
                "M",
                "u"
            )
            .is_ok()
        );

        // Metadata values over 80 characters and short shopper references are refused.
        let long_bk = BusinessKey::parse(&"b".repeat(METADATA_VALUE_LEN_MAX + 1)).unwrap();
        let err = payment_body(
            &SubmitRequest {
                business_key: &long_bk,
                ..req.clone()
            },
            "M",
            "u",
        );
        assert!(matches!(
            err,
            Err(WireError::MetadataTooLong {
                key: METADATA_BUSINESS_KEY,
                ..
            })
        ));
        let ok_bk = BusinessKey::parse(&"b".repeat(METADATA_VALUE_LEN_MAX)).unwrap();
        assert!(
            payment_body(
                &SubmitRequest {
                    business_key: &ok_bk,
                    ..req.clone()
                },
                "M",
                "u"
            )
            .is_ok()
        );
        // A destination is refused, never dropped.
        let mut raw = RawDetails {
            kind: "payment".into(),
            amount: 2048,
            currency: "eur".into(),
            customer: "cus_1".into(),
            payment_method: "pm_card_visa".into(),
            invoice: "INV-1".into(),
            destination: Some("acct_1Dest".into()),
            description: None,
            refund_of: None,
        };
        let to_another = Details::parse(&raw).unwrap();
        let err = payment_body(
            &SubmitRequest {
                details: &to_another,
                ..req.clone()
            },
            "M",
            "u",
        );
        assert_eq!(
            err.map_err(|e| e.code()),
            Err("adyen_destination_unsupported")
        );
        raw.destination = None;
        assert!(
            payment_body(
                &SubmitRequest {
                    details: &Details::parse(&raw).unwrap(),
                    ..req.clone()
                },
                "M",
                "u"
            )
            .is_ok()
        );
        let short = details("cu", "INV-1");
        let err = payment_body(
            &SubmitRequest {
                details: &short,
                ..req.clone()
            },
            "M",
            "u",
        );
        assert_eq!(err.map_err(|e| e.code()), Err("adyen_field_length"));
    }

    #[test]
    fn refund_urls_take_plain_references_only() {
        assert_eq!(
            refunds_url("http://x", "QFQTPCQ8HXSKGK82").as_deref(),
            Some("http://x/v71/payments/QFQTPCQ8HXSKGK82/refunds")
        );
        for bad in ["", "../x", "A/B", "pi_1"] {
            assert_eq!(refunds_url("http://x", bad), None, "{bad}");
        }
    }
}

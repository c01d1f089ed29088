//! The exact parameters a submission sends, in a fixed order, and the URLs the adapter calls.

use crate::{IntentionMetadata, SubmitRequest};
use payonce_core::details::DetailsHash;
use payonce_core::id::{BusinessKey, OperationId};

/// Metadata key carrying the operation id (lookups match on it).
pub(crate) const METADATA_OPERATION_ID: &str = "payonce_operation_id";

/// Metadata key carrying the tenant.
pub(crate) const METADATA_TENANT: &str = "payonce_tenant";
/// Metadata key carrying the business key (the intention outlives the operation id).
pub(crate) const METADATA_BUSINESS_KEY: &str = "payonce_business_key";
/// Metadata key carrying the approved details' hash.
pub(crate) const METADATA_DETAILS_HASH: &str = "payonce_details_hash";
/// Metadata key carrying the invoice (so a payment the ledger lost can be shown with its details).
pub(crate) const METADATA_INVOICE: &str = "payonce_invoice";

/// The operation id an object's metadata names.
pub(crate) fn operation_of(object: &serde_json::Value) -> Option<&str> {
    object.get("metadata")?.get(METADATA_OPERATION_ID)?.as_str()
}

/// The intention an object's metadata names, when it carries all three parts.
pub(crate) fn intention_of(object: &serde_json::Value) -> Option<IntentionMetadata> {
    let metadata = object.get("metadata")?;
    let text = |k: &str| {
        metadata
            .get(k)
            .and_then(serde_json::Value::as_str)
            .map(str::to_string)
    };
    Some(IntentionMetadata {
        tenant: text(METADATA_TENANT)?,
        business_key: text(METADATA_BUSINESS_KEY)?,
        details_hash: text(METADATA_DETAILS_HASH)?,
    })
}

/// Whether an object is the one a lookup looks for. One carrying intention metadata is when it
/// carries the same business key and details: the operation id alone no longer says so, since it
/// is derived from the tenant and business key and a ledger that lost a row may have made the
/// business key again with other details. One from before intention metadata is when it names the
/// operation.
pub(crate) fn belongs(
    object: &serde_json::Value,
    operation_id: &OperationId,
    business_key: &BusinessKey,
    details_hash: &DetailsHash,
) -> bool {
    match intention_of(object) {
        Some(i) => {
            i.business_key == business_key.as_str() && i.details_hash == details_hash.as_str()
        }
        None => operation_of(object) == Some(operation_id.as_str()),
    }
}

/// Whether a submission under `key` sends the intention metadata: an intention key (either form) does; a key of
/// the first form (`payonce-<id>`, a row created before issue 37) keeps the parameters its earlier
/// attempts sent, or Stripe would refuse the retry as the same key with other parameters.
pub(crate) fn carries_intention(key: &payonce_core::id::IdempotencyKey) -> bool {
    payonce_core::intention::is_intention_key(key)
}

/// `POST /v1/payment_intents`.
pub(crate) fn create_url(base: &str) -> String {
    format!("{base}/v1/payment_intents")
}

/// The form parameters of a submission. Built only from the ledger record, in a fixed order, so every attempt
/// under one key sends the same parameters (Stripe refuses a key reused with different ones).
pub(crate) fn submit_params(request: &SubmitRequest<'_>) -> Vec<(&'static str, String)> {
    let d = request.details;
    let mut params = vec![
        ("amount", d.money().amount_minor().to_string()),
        ("currency", d.money().currency().code().to_string()),
        ("customer", d.customer().to_string()),
        ("payment_method", d.payment_method().to_string()),
        ("confirm", "true".to_string()),
        // Off-session: the customer approved on our page, not in Stripe's checkout; nobody is there to authenticate.
        ("off_session", "true".to_string()),
    ];
    if let Some(description) = d.description() {
        params.push(("description", description.to_string()));
    }
    params.push((
        "metadata[payonce_operation_id]",
        request.operation_id.as_str().to_string(),
    ));
    params.push((
        "metadata[payonce_tenant]",
        request.tenant.as_str().to_string(),
    ));
    if carries_intention(request.idempotency_key) {
        params.push((
            "metadata[payonce_business_key]",
            request.business_key.as_str().to_string(),
        ));
        params.push((
            "metadata[payonce_details_hash]",
            request.details_hash.as_str().to_string(),
        ));
        params.push(("metadata[payonce_invoice]", d.invoice().to_string()));
    }
    if let Some(destination) = d.destination() {
        params.push(("transfer_data[destination]", destination.to_string()));
    }
    params
}

/// The encoded form body.
pub(crate) fn submit_body(
    request: &SubmitRequest<'_>,
) -> Result<String, serde_urlencoded::ser::Error> {
    serde_urlencoded::to_string(submit_params(request))
}

#[cfg(test)]
mod tests {
    use super::*;
    use payonce_core::details::{Details, RawDetails};
    use payonce_core::id::{IdempotencyKey, TenantId};

    #[test]
    fn parameters_are_complete_stable_and_ordered() {
        let op = OperationId::generate();
        let tenant = TenantId::parse("acme").unwrap();
        let key = IdempotencyKey::parse(&format!("po1_{}", "a".repeat(40))).unwrap();
        let business_key = BusinessKey::parse("invoice:INV-1:pay").unwrap();
        let details = Details::parse(&RawDetails {
            kind: "payment".into(),
            amount: 2048,
            currency: "usd".into(),
            customer: "cus_1".into(),
            payment_method: "pm_card_visa".into(),
            invoice: "INV-1".into(),
            destination: Some("acct_1".into()),
            description: Some("March & April".into()),
            refund_of: None,
        })
        .unwrap();
        let req = SubmitRequest {
            operation_id: &op,
            tenant: &tenant,
            idempotency_key: &key,
            business_key: &business_key,
            details_hash: &details.hash(),
            details: &details,
        };
        let keys: Vec<&str> = submit_params(&req).iter().map(|(k, _)| *k).collect();
        assert_eq!(
            keys,
            [
                "amount",
                "currency",
                "customer",
                "payment_method",
                "confirm",
                "off_session",
                "description",
                "metadata[payonce_operation_id]",
                "metadata[payonce_tenant]",
                "metadata[payonce_business_key]",
                "metadata[payonce_details_hash]",
                "metadata[payonce_invoice]",
                "transfer_data[destination]"
            ]
        );
        assert_eq!(submit_body(&req).unwrap(), submit_body(&req).unwrap());
        // A row from before intention keys sends what its earlier attempts sent.
        let legacy_key = IdempotencyKey::parse(&format!("payonce-{op}")).unwrap();
        let legacy = SubmitRequest {
            idempotency_key: &legacy_key,
            ..req.clone()
        };
        let legacy_keys: Vec<&str> = submit_params(&legacy).iter().map(|(k, _)| *k).collect();
        assert!(
            !legacy_keys.iter().any(|k| k.contains("business_key")),
            "{legacy_keys:?}"
        );
        assert!(
            submit_body(&req)
                .unwrap()
                .contains("description=March+%26+April")
        );
    }
}

//! The exact parameters a submission sends, in a fixed order, and the URLs the adapter calls.

use crate::processor::SubmitRequest;

/// Metadata key carrying the operation id (lookups match on it).
pub(crate) const METADATA_OPERATION_ID: &str = "payonce_operation_id";

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
    use crate::details::{Details, RawDetails};
    use crate::id::{IdempotencyKey, OperationId, TenantId};

    #[test]
    fn parameters_are_complete_stable_and_ordered() {
        let op = OperationId::generate();
        let tenant = TenantId::parse("acme").unwrap();
        let key = IdempotencyKey::derive(&op);
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
                "transfer_data[destination]"
            ]
        );
        assert_eq!(submit_body(&req).unwrap(), submit_body(&req).unwrap());
        assert!(
            submit_body(&req)
                .unwrap()
                .contains("description=March+%26+April")
        );
    }
}

//! Refunds on Stripe's wire: `POST /v1/refunds` with the refund operation's stored key, lookups by
//! reference (`GET /v1/refunds/{re}`) or by the refunded payment's list (`GET /v1/refunds?payment_intent=`,
//! newest first, bounded pages, matched on `metadata[payonce_operation_id]`), and the facts of a Refund
//! object. Both reads are read-after-write consistent, so "not found" after every page means "never created".
//!
//! | Refund `status` | submission | lookup |
//! | --- | --- | --- |
//! | `succeeded` | Succeeded | Succeeded |
//! | `pending`, `requires_action` | Unknown (with reference) | Pending |
//! | `failed`, `canceled` | Declined (code: `failure_reason`, else the status) | Failed |
//! | anything else | Unknown (with reference) | Pending |
//!
//! Errors: 400 `invalid_request_error` with a code in [`DEFINITIVE_REFUND_ERRORS`] is Declined (Stripe
//! refused this refund for what the payment is, and executing nothing); every other status follows the
//! payment table in [`super::classify`] (any other 4xx: Declined by its code, e.g. `resource_missing`;
//! 401, 403, 404: Misconfigured; 5xx and transport failures after sending: Unknown; 429: RateLimited).
//! A request that got an answer reached Stripe: it is never "not submitted".

use super::StripeProcessor;
use super::classify::classify_response;
use super::lookup::{Owner, by_reference, error_message, get_json, is_id, list_page, unavailable};
use super::wire::{belongs, intention_of, operation_of};
use crate::{
    FoundStatus, LookupOutcome, ProcessorObject, RefundLookupQuery, RefundRequest, Retrieved,
    SubmitOutcome,
};
use serde_json::Value;

/// Stripe's error codes that refuse a refund for good: nothing left to refund, more than what is left,
/// or a charge that cannot be refunded. Stripe answers them before creating anything.
pub const DEFINITIVE_REFUND_ERRORS: [&str; 4] = [
    "charge_already_refunded",
    "amount_too_large",
    "charge_not_refundable",
    "charge_disputed",
];
/// Most list pages read per refund lookup (a payment rarely has more than a handful of refunds).
pub const REFUND_LOOKUP_PAGES_MAX: usize = 10;
/// Page size of refund list lookups (Stripe's maximum).
const LIST_PAGE_LIMIT: u32 = 100;

fn text<'a>(v: &'a Value, field: &str) -> Option<&'a str> {
    v.get(field).and_then(Value::as_str)
}

fn failure_of(refund: &Value, status: &str) -> (String, String) {
    let code = text(refund, "failure_reason").unwrap_or(status).to_string();
    (code, format!("refund is {status}"))
}

/// What a Refund's status says about the refund operation.
pub(crate) fn found_status(refund: &Value) -> FoundStatus {
    let status = text(refund, "status").unwrap_or("").to_string();
    match status.as_str() {
        "succeeded" => FoundStatus::Succeeded {
            result: refund.clone(),
        },
        "failed" | "canceled" => {
            let (code, message) = failure_of(refund, &status);
            FoundStatus::Failed { code, message }
        }
        _ => FoundStatus::Pending {
            processor_status: status,
        },
    }
}

/// Whether a processor object is a Refund (Stripe's `object` field, else the id's prefix).
pub(crate) fn is_refund(reference: &str, object: &Value) -> bool {
    match text(object, "object") {
        Some(kind) => kind == "refund",
        None => reference.starts_with("re_"),
    }
}

/// The facts of a Refund payonce checks. A refund names no customer; its payment is `payment_intent`.
pub(crate) fn object_of(reference: &str, refund: &Value) -> ProcessorObject {
    ProcessorObject {
        reference: reference.to_string(),
        amount_minor: refund.get("amount").and_then(Value::as_i64),
        currency: text(refund, "currency").map(str::to_ascii_lowercase),
        customer: None,
        operation_id: operation_of(refund).map(str::to_string),
        intention: intention_of(refund),
        payment_reference: text(refund, "payment_intent").map(str::to_string),
        status: found_status(refund),
        object: refund.clone(),
    }
}

/// The form parameters of a refund submission, in a fixed order, from the ledger record only.
pub(crate) fn submit_params(request: &RefundRequest<'_>) -> Vec<(&'static str, String)> {
    let mut params = vec![
        ("payment_intent", request.payment_reference.to_string()),
        ("amount", request.amount.amount_minor().to_string()),
        ("reason", request.reason.as_str().to_string()),
        (
            "metadata[payonce_operation_id]",
            request.operation_id.as_str().to_string(),
        ),
        (
            "metadata[payonce_tenant]",
            request.tenant.as_str().to_string(),
        ),
    ];
    // As for payments (`wire::carries_intention`): a row from before intention keys keeps its
    // parameters.
    if super::wire::carries_intention(request.idempotency_key) {
        params.push((
            "metadata[payonce_business_key]",
            request.business_key.as_str().to_string(),
        ));
        params.push((
            "metadata[payonce_details_hash]",
            request.details_hash.as_str().to_string(),
        ));
        params.push((
            "metadata[payonce_payment_operation_id]",
            request.payment_operation.as_str().to_string(),
        ));
    }
    params
}

fn classify_success(body: &[u8]) -> SubmitOutcome {
    let Ok(refund) = serde_json::from_slice::<Value>(body) else {
        return SubmitOutcome::Unknown {
            reason: "HTTP 200 with an unparseable body".into(),
            reference: None,
        };
    };
    let Some(id) = text(&refund, "id").map(str::to_string) else {
        return SubmitOutcome::Unknown {
            reason: "HTTP 200 without a Refund id".into(),
            reference: None,
        };
    };
    let status = text(&refund, "status").unwrap_or("").to_string();
    match status.as_str() {
        "succeeded" => SubmitOutcome::Succeeded {
            reference: id,
            result: refund,
            replayed: false,
        },
        "failed" | "canceled" => {
            let (code, message) = failure_of(&refund, &status);
            SubmitOutcome::Declined {
                code,
                message,
                reference: Some(id),
            }
        }
        other => SubmitOutcome::Unknown {
            reason: format!("refund is {other:?}"),
            reference: Some(id),
        },
    }
}

/// Classifies an HTTP response to `POST /v1/refunds`.
pub fn classify_refund_response(status: u16, body: &[u8]) -> SubmitOutcome {
    if (200..300).contains(&status) {
        return classify_success(body);
    }
    let parsed: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let error = parsed.get("error").cloned().unwrap_or(Value::Null);
    let kind = text(&error, "type").unwrap_or("");
    let code = text(&error, "code").unwrap_or("");
    if status == 400 && kind == "invalid_request_error" && DEFINITIVE_REFUND_ERRORS.contains(&code)
    {
        return SubmitOutcome::Declined {
            code: code.to_string(),
            message: text(&error, "message").unwrap_or("").to_string(),
            reference: None,
        };
    }
    // Every other answer means for a refund what it means for a payment.
    classify_response(status, body)
}

/// `POST /v1/refunds` once, with the stored key.
pub(crate) async fn submit(p: &StripeProcessor, request: &RefundRequest<'_>) -> SubmitOutcome {
    let body = match serde_urlencoded::to_string(submit_params(request)) {
        Ok(b) => b,
        Err(e) => {
            return SubmitOutcome::NotSubmitted {
                reason: format!("could not encode the request: {e}"),
            };
        }
    };
    p.post_once(
        format!("{}/v1/refunds", p.config.api_base),
        request.idempotency_key,
        body,
        classify_refund_response,
    )
    .await
}

fn rank(status: &FoundStatus) -> u8 {
    match status {
        FoundStatus::Succeeded { .. } => 0,
        FoundStatus::Pending { .. } => 1,
        FoundStatus::Failed { .. } => 2,
    }
}

async fn by_list(p: &StripeProcessor, query: &RefundLookupQuery<'_>) -> LookupOutcome {
    if !is_id(query.payment_reference) {
        return unavailable(format!(
            "refunded payment {:?} is not a Stripe id",
            query.payment_reference
        ));
    }
    let mut starting_after: Option<String> = None;
    let mut best: Option<(String, FoundStatus)> = None;
    for _ in 0..REFUND_LOOKUP_PAGES_MAX {
        let mut params: Vec<(&str, String)> = vec![
            ("payment_intent", query.payment_reference.to_string()),
            ("limit", LIST_PAGE_LIMIT.to_string()),
        ];
        if let Some(after) = &starting_after {
            params.push(("starting_after", after.clone()));
        }
        let Ok(qs) = serde_urlencoded::to_string(&params) else {
            return unavailable("could not encode the list query");
        };
        let page = match list_page(p, format!("{}/v1/refunds?{qs}", p.config.api_base)).await {
            Ok(v) => v,
            Err(outcome) => return outcome,
        };
        let data = page
            .get("data")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for refund in &data {
            if !belongs(
                refund,
                query.operation_id,
                query.business_key,
                query.details_hash,
            ) {
                continue;
            }
            let Some(id) = text(refund, "id") else {
                continue;
            };
            let status = found_status(refund);
            if best.as_ref().is_none_or(|(_, b)| rank(&status) < rank(b)) {
                best = Some((id.to_string(), status));
            }
        }
        let has_more = page
            .get("has_more")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        match (has_more, data.last().and_then(|r| text(r, "id"))) {
            (true, Some(last)) => starting_after = Some(last.to_string()),
            _ => {
                return match best {
                    Some((reference, status)) => LookupOutcome::Found { reference, status },
                    None => LookupOutcome::NotFound { consistent: true },
                };
            }
        }
    }
    match best {
        Some((reference, status @ FoundStatus::Succeeded { .. })) => {
            LookupOutcome::Found { reference, status }
        }
        // What was not seen is not proven absent.
        _ => LookupOutcome::NotFound { consistent: false },
    }
}

/// Runs a refund lookup.
pub(crate) async fn lookup(p: &StripeProcessor, query: &RefundLookupQuery<'_>) -> LookupOutcome {
    match query.reference {
        Some(reference) => {
            let owner = Owner {
                operation_id: query.operation_id,
                business_key: query.business_key,
                details_hash: query.details_hash,
            };
            by_reference(p, "/v1/refunds", reference, &owner, object_of).await
        }
        None => by_list(p, query).await,
    }
}

/// `GET /v1/refunds/{reference}`: the Refund a webhook named, or why it cannot be had.
pub(crate) async fn retrieve(p: &StripeProcessor, reference: &str) -> Retrieved {
    if !is_id(reference) {
        return Retrieved::NotFound;
    }
    let url = format!("{}/v1/refunds/{reference}", p.config.api_base);
    match get_json(p, url).await {
        Ok((200, refund)) => match text(&refund, "id") {
            Some(id) if id == reference => {
                Retrieved::Found(Box::new(object_of(reference, &refund)))
            }
            other => Retrieved::Unavailable {
                reason: format!("retrieve of {reference} answered the object {other:?}"),
            },
        },
        Ok((404, _)) => Retrieved::NotFound,
        Ok((status, v)) => Retrieved::Unavailable {
            reason: format!("retrieve answered HTTP {status}: {}", error_message(&v)),
        },
        Err(why) => Retrieved::Unavailable {
            reason: why.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bytes(v: Value) -> Vec<u8> {
        serde_json::to_vec(&v).unwrap_or_default()
    }

    #[test]
    fn the_refund_table() {
        let refund =
            |status: &str| bytes(json!({"id": "re_1", "object": "refund", "status": status}));
        assert!(matches!(
            classify_refund_response(200, &refund("succeeded")),
            SubmitOutcome::Succeeded { ref reference, .. } if reference == "re_1"
        ));
        for pending in ["pending", "requires_action", "new_status"] {
            assert_eq!(
                classify_refund_response(200, &refund(pending)),
                SubmitOutcome::Unknown {
                    reason: format!("refund is {pending:?}"),
                    reference: Some("re_1".into())
                }
            );
        }
        let failed = bytes(
            json!({"id": "re_2", "status": "failed", "failure_reason": "lost_or_stolen_card"}),
        );
        assert_eq!(
            classify_refund_response(200, &failed),
            SubmitOutcome::Declined {
                code: "lost_or_stolen_card".into(),
                message: "refund is failed".into(),
                reference: Some("re_2".into())
            }
        );
        for code in DEFINITIVE_REFUND_ERRORS {
            let e = bytes(
                json!({"error": {"type": "invalid_request_error", "code": code, "message": "m"}}),
            );
            assert_eq!(
                classify_refund_response(400, &e),
                SubmitOutcome::Declined {
                    code: code.into(),
                    message: "m".into(),
                    reference: None
                },
                "{code}"
            );
        }
        let missing =
            bytes(json!({"error": {"type": "invalid_request_error", "code": "resource_missing"}}));
        assert!(matches!(
            classify_refund_response(400, &missing),
            SubmitOutcome::Declined { ref code, .. } if code == "resource_missing"
        ));
        let rate = bytes(json!({"error": {"type": "invalid_request_error", "code": "rate_limit"}}));
        assert!(matches!(
            classify_refund_response(429, &rate),
            SubmitOutcome::RateLimited { .. }
        ));
        for s in [409, 500, 502, 503] {
            assert!(
                matches!(
                    classify_refund_response(s, b"{}"),
                    SubmitOutcome::Unknown { .. }
                ),
                "{s}"
            );
        }
    }

    #[test]
    fn refund_facts_name_the_payment_and_no_customer() {
        let facts = object_of(
            "re_1",
            &json!({"id": "re_1", "object": "refund", "amount": 400, "currency": "USD",
                "payment_intent": "pi_9", "status": "pending",
                "metadata": {"payonce_operation_id": "op_x"}}),
        );
        assert_eq!(facts.amount_minor, Some(400));
        assert_eq!(facts.currency.as_deref(), Some("usd"));
        assert_eq!(facts.customer, None);
        assert_eq!(facts.payment_reference.as_deref(), Some("pi_9"));
        assert_eq!(facts.operation_id.as_deref(), Some("op_x"));
        assert_eq!(
            facts.status,
            FoundStatus::Pending {
                processor_status: "pending".into()
            }
        );
        assert!(is_refund("pi_1", &json!({"object": "refund"})));
        assert!(!is_refund("re_1", &json!({"object": "payment_intent"})));
        assert!(is_refund("re_1", &json!({})));
    }
}

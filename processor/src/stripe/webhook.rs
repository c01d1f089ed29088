//! Stripe webhooks on the wire: verify `Stripe-Signature` exactly as Stripe's own libraries do and
//! parse the signed body into a typed [`Event`] matched to its operation. Pure: nothing here touches
//! the ledger; [`crate::ingest::ingest`] stores what [`verify_event`] accepts as a hint.

use payonce_core::id::{IdempotencyKey, OperationId};
use payonce_ledger::LedgerError;
use serde::Deserialize;
use subtle::ConstantTimeEq;

/// Oldest signature timestamp accepted, in seconds behind now (Stripe's default). Future timestamps
/// are accepted, as Stripe's libraries do.
pub const SIGNATURE_TOLERANCE_S: i64 = 300;
/// Largest webhook body accepted.
pub const PAYLOAD_LEN_MAX: usize = 512 * 1024;
/// Longest `Stripe-Signature` header accepted.
pub const SIGNATURE_HEADER_LEN_MAX: usize = 8 * 1024;
/// Most `v1` signatures considered in one header (rotation uses two or three).
pub const SIGNATURES_MAX: usize = 8;
/// The processor name events are stored under.
pub const PROCESSOR: &str = "stripe";
/// Metadata key the Stripe adapter writes the operation id under.
pub const METADATA_OPERATION_ID: &str = "payonce_operation_id";

/// Why a webhook was refused or could not be stored.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// No `Stripe-Signature` header.
    #[error("missing Stripe-Signature header")]
    MissingSignature,
    /// The header has no timestamp or no v1 signature, or is too long.
    #[error("malformed Stripe-Signature header: {0}")]
    MalformedSignature(&'static str),
    /// The timestamp is older than the tolerance.
    #[error("signature timestamp outside the tolerance zone")]
    StaleTimestamp,
    /// No v1 signature matches any configured secret.
    #[error("no signature matches the payload")]
    BadSignature,
    /// The body is larger than [`PAYLOAD_LEN_MAX`].
    #[error("payload larger than {PAYLOAD_LEN_MAX} bytes")]
    PayloadTooLarge,
    /// The signed body is not a Stripe event.
    #[error("payload is not a Stripe event: {0}")]
    MalformedPayload(String),
    /// No secret is configured: every webhook is refused.
    #[error("no webhook secret configured")]
    NoSecret,
    /// The ledger failed; Stripe will redeliver.
    #[error("ledger error")]
    Ledger(#[from] LedgerError),
}

impl WebhookError {
    /// The HTTP status to answer with: 4xx for what a redelivery won't fix, 5xx so Stripe retries.
    pub fn status_code(&self) -> u16 {
        match self {
            WebhookError::MissingSignature
            | WebhookError::MalformedSignature(_)
            | WebhookError::StaleTimestamp
            | WebhookError::BadSignature
            | WebhookError::MalformedPayload(_) => 400,
            WebhookError::PayloadTooLarge => 413,
            WebhookError::NoSecret | WebhookError::Ledger(_) => 503,
        }
    }

    /// The signature reasons, in the order metrics label them.
    pub const SIGNATURE_CODES: [&'static str; 4] = [
        "signature_missing",
        "signature_malformed",
        "signature_stale",
        "signature_mismatch",
    ];

    /// Stable code for logs, metrics and API errors.
    pub fn code(&self) -> &'static str {
        match self {
            WebhookError::MissingSignature => "signature_missing",
            WebhookError::MalformedSignature(_) => "signature_malformed",
            WebhookError::StaleTimestamp => "signature_stale",
            WebhookError::BadSignature => "signature_mismatch",
            WebhookError::PayloadTooLarge => "payload_too_large",
            WebhookError::MalformedPayload(_) => "payload_malformed",
            WebhookError::NoSecret => "webhook_secret_missing",
            WebhookError::Ledger(_) => "ledger_unavailable",
        }
    }
}

/// The parts of a `Stripe-Signature` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureHeader {
    /// `t=`: unix seconds.
    pub timestamp: i64,
    /// Every `v1=` value, in order.
    pub signatures: Vec<String>,
}

/// Parses `t=…,v1=…[,v1=…][,v0=…]`. Keys compare exactly (`" v1"` is not `v1`); items without `=`
/// and other schemes are ignored, as Stripe's libraries do.
pub fn parse_signature_header(header: &str) -> Result<SignatureHeader, WebhookError> {
    if header.len() > SIGNATURE_HEADER_LEN_MAX {
        return Err(WebhookError::MalformedSignature("header too long"));
    }
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for item in header.split(',') {
        let Some((key, value)) = item.split_once('=') else {
            continue;
        };
        match key {
            "t" => {
                timestamp = Some(
                    value
                        .parse::<i64>()
                        .map_err(|_| WebhookError::MalformedSignature("bad timestamp"))?,
                )
            }
            "v1" if signatures.len() < SIGNATURES_MAX => signatures.push(value.to_string()),
            _ => {}
        }
    }
    let timestamp = timestamp.ok_or(WebhookError::MalformedSignature("no timestamp"))?;
    if signatures.is_empty() {
        return Err(WebhookError::MalformedSignature("no v1 signature"));
    }
    Ok(SignatureHeader {
        timestamp,
        signatures,
    })
}

/// The v1 signature Stripe computes: lowercase hex HMAC-SHA256 of `"{t}.{payload}"`, keyed by the
/// whole secret string (with its `whsec_` prefix).
pub fn sign(secret: &str, timestamp: i64, payload: &[u8]) -> String {
    // Stripe's v1 scheme is the one payonce signs its own outbound calls with: one MAC for both.
    payonce_core::signing::mac_hex(secret, timestamp, payload)
}

/// Verifies a header against a payload with any of `secrets` (several during rotation), in
/// constant time per comparison. `tolerance_s = None` skips the age check (for fixed test vectors).
pub fn verify_signature(
    secrets: &[String],
    header: &str,
    payload: &[u8],
    now_s: i64,
    tolerance_s: Option<i64>,
) -> Result<(), WebhookError> {
    if secrets.is_empty() {
        return Err(WebhookError::NoSecret);
    }
    let parsed = parse_signature_header(header)?;
    // Saturating: `t=-9223372036854775808` overflowed here (a panic in debug builds, and in release
    // a wrapped negative age that passed the check). Found by the fuzz seed corpus.
    if let Some(tolerance) = tolerance_s
        && now_s.saturating_sub(parsed.timestamp) > tolerance
    {
        return Err(WebhookError::StaleTimestamp);
    }
    let mut matched = subtle::Choice::from(0);
    for secret in secrets {
        let expected = sign(secret, parsed.timestamp, payload);
        for candidate in &parsed.signatures {
            matched |= expected.as_bytes().ct_eq(candidate.as_bytes());
        }
    }
    if bool::from(matched) {
        Ok(())
    } else {
        Err(WebhookError::BadSignature)
    }
}

/// A Stripe event, as far as payonce reads one.
#[derive(Debug, Clone, Deserialize)]
pub struct Event {
    /// `evt_…`: unique per event, the same on every redelivery.
    pub id: String,
    /// `payment_intent.succeeded` and the like (empty when absent).
    #[serde(rename = "type", default)]
    pub event_type: String,
    data: EventData,
    #[serde(default)]
    request: Option<EventRequest>,
}

#[derive(Debug, Clone, Deserialize)]
struct EventData {
    object: serde_json::Value,
}

#[derive(Debug, Clone, Deserialize)]
struct EventRequest {
    #[serde(default)]
    idempotency_key: Option<String>,
}

impl Event {
    /// The operation this event is about: metadata first, then the request's idempotency key when
    /// it has the first form (`payonce-` + id; an intention key names no operation).
    pub fn operation(&self) -> Option<OperationId> {
        let from_metadata = self
            .data
            .object
            .get("metadata")
            .and_then(|m| m.get(METADATA_OPERATION_ID));
        if let Some(id) = from_metadata
            .and_then(|v| v.as_str())
            .and_then(|s| OperationId::parse(s).ok())
        {
            return Some(id);
        }
        let key = self.request.as_ref()?.idempotency_key.as_deref()?;
        IdempotencyKey::legacy_operation(key)
    }

    /// The processor reference the event names (`data.object.id`), if any.
    pub fn reference(&self) -> Option<&str> {
        self.data.object.get("id").and_then(|v| v.as_str())
    }

    /// Whether the event may carry an outcome: an outcome type naming an object to retrieve.
    pub fn claims_outcome(&self) -> bool {
        OUTCOME_EVENT_TYPES.contains(&self.event_type.as_str()) && self.reference().is_some()
    }
}

/// The event types that may carry an outcome; only these are checked against the processor. The
/// refund ones carry a Refund (`re_...`, its metadata naming the refund operation); `charge.refunded`
/// carries the payment's Charge and is not one of them.
pub const OUTCOME_EVENT_TYPES: [&str; 7] = [
    "payment_intent.succeeded",
    "payment_intent.payment_failed",
    "payment_intent.canceled",
    "refund.created",
    "refund.updated",
    "refund.failed",
    "charge.refund.updated",
];

/// The status of the object a stored event carries (`data.object.status`), if it reads as an event.
pub fn object_status_of(payload: &str) -> Option<String> {
    let event: Event = serde_json::from_str(payload).ok()?;
    event
        .data
        .object
        .get("status")
        .and_then(|v| v.as_str())
        .map(str::to_string)
}

/// The processor reference a stored event names (`data.object.id`), if it reads as an event.
pub fn reference_of(payload: &str) -> Option<String> {
    let event: Event = serde_json::from_str(payload).ok()?;
    event.reference().map(str::to_string)
}

/// Checks one delivery and parses it: the body's size, the signature (with
/// [`SIGNATURE_TOLERANCE_S`] against `now`), then the payload as an [`Event`].
pub fn verify_event(
    secrets: &[String],
    signature_header: Option<&str>,
    body: &[u8],
    now: payonce_core::clock::Timestamp,
) -> Result<Event, WebhookError> {
    if body.len() > PAYLOAD_LEN_MAX {
        return Err(WebhookError::PayloadTooLarge);
    }
    let header = signature_header.ok_or(WebhookError::MissingSignature)?;
    verify_signature(
        secrets,
        header,
        body,
        now.as_millis().div_euclid(1000),
        Some(SIGNATURE_TOLERANCE_S),
    )?;
    serde_json::from_slice(body).map_err(|e| WebhookError::MalformedPayload(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Vector {
        name: String,
        secret: String,
        timestamp: i64,
        payload: String,
        header: String,
        v1: String,
    }

    fn vectors() -> Vec<Vector> {
        serde_json::from_str(include_str!(
            "../../../tests/fixtures/stripe/webhook_vectors.json"
        ))
        .unwrap()
    }

    #[test]
    fn stripe_library_vectors_sign_and_verify() {
        for v in vectors() {
            assert_eq!(
                sign(&v.secret, v.timestamp, v.payload.as_bytes()),
                v.v1,
                "{}",
                v.name
            );
            verify_signature(
                std::slice::from_ref(&v.secret),
                &v.header,
                v.payload.as_bytes(),
                v.timestamp,
                Some(300),
            )
            .unwrap_or_else(|e| panic!("{}: {e}", v.name));
        }
    }

    #[test]
    fn negative_cases_match_stripe_libraries() {
        let v = vectors()
            .into_iter()
            .find(|v| v.name == "compact_pi_succeeded")
            .unwrap();
        let p = v.payload.as_bytes();
        let s = [v.secret.clone()];
        let t = v.timestamp;
        let check = |secrets: &[String], header: &str, payload: &[u8], now: i64| {
            verify_signature(secrets, header, payload, now, Some(SIGNATURE_TOLERANCE_S))
        };
        assert!(matches!(
            check(&s, &v.header, p, t + 301),
            Err(WebhookError::StaleTimestamp)
        ));
        assert!(check(&s, &v.header, p, t + 300).is_ok());
        assert!(
            check(&s, &v.header, p, t - 3600).is_ok(),
            "future timestamps are accepted"
        );
        assert!(matches!(
            check(&["whsec_other".into()], &v.header, p, t),
            Err(WebhookError::BadSignature)
        ));
        assert!(matches!(
            check(&["test_secret".into()], &v.header, p, t),
            Err(WebhookError::BadSignature)
        ));
        let spaced = String::from_utf8(p.to_vec())
            .unwrap()
            .replacen(':', ": ", 1);
        assert!(matches!(
            check(&s, &v.header, spaced.as_bytes(), t),
            Err(WebhookError::BadSignature)
        ));
        let upper = format!("t={t},v1={}", v.v1.to_uppercase());
        assert!(matches!(
            check(&s, &upper, p, t),
            Err(WebhookError::BadSignature)
        ));
        let rotation = format!("t={t},v1={},v1={}", "0".repeat(64), v.v1);
        assert!(check(&s, &rotation, p, t).is_ok());
        let rotated_secrets = ["whsec_new".to_string(), v.secret.clone()];
        assert!(
            check(&rotated_secrets, &v.header, p, t).is_ok(),
            "either configured secret verifies"
        );
        assert!(
            check(&s, &format!("v1={},t={t}", v.v1), p, t).is_ok(),
            "order does not matter"
        );
        assert!(matches!(
            check(&s, &format!("t={t},v0={}", v.v1), p, t),
            Err(WebhookError::MalformedSignature(_))
        ));
        assert!(matches!(
            check(&s, &format!("t={t}, v1={}", v.v1), p, t),
            Err(WebhookError::MalformedSignature(_))
        ));
        assert!(matches!(
            check(&s, &format!("v1={}", v.v1), p, t),
            Err(WebhookError::MalformedSignature(_))
        ));
        assert!(matches!(
            check(&s, &format!("t=abc,v1={}", v.v1), p, t),
            Err(WebhookError::MalformedSignature(_))
        ));
        assert!(matches!(
            check(&[], &v.header, p, t),
            Err(WebhookError::NoSecret)
        ));
        let long = format!("t={t},v1={}", "a".repeat(SIGNATURE_HEADER_LEN_MAX));
        assert!(matches!(
            check(&s, &long, p, t),
            Err(WebhookError::MalformedSignature(_))
        ));
    }

    #[test]
    fn refund_events_are_outcome_hints_for_the_refund_operation_and_charge_refunded_is_not() {
        let refund_op = OperationId::generate();
        let payment_op = OperationId::generate();
        let refund = serde_json::json!({"id": "re_1", "object": "refund", "status": "failed",
            "payment_intent": "pi_1", "metadata": {"payonce_operation_id": refund_op.as_str()}});
        for kind in [
            "refund.created",
            "refund.updated",
            "refund.failed",
            "charge.refund.updated",
        ] {
            let event: Event = serde_json::from_value(serde_json::json!({
                "id": "evt_r", "type": kind, "data": {"object": refund.clone(),
                    "previous_attributes": {"status": "succeeded"}},
                "request": {"id": null, "idempotency_key": null}
            }))
            .unwrap();
            assert_eq!(event.operation(), Some(refund_op.clone()), "{kind}");
            assert_eq!(event.reference(), Some("re_1"), "{kind}");
            assert!(event.claims_outcome(), "{kind}");
        }
        // charge.refunded carries the payment's Charge (and the payment's metadata): no refund outcome.
        let charge: Event = serde_json::from_value(serde_json::json!({
            "id": "evt_c", "type": "charge.refunded",
            "data": {"object": {"id": "ch_1", "object": "charge",
                "metadata": {"payonce_operation_id": payment_op.as_str()}}},
            "request": {"id": "req_1", "idempotency_key": format!("payonce-{}", refund_op.as_str())}
        }))
        .unwrap();
        assert_eq!(charge.operation(), Some(payment_op));
        assert!(!charge.claims_outcome());
    }

    #[test]
    fn events_match_by_metadata_or_idempotency_key() {
        let id = OperationId::generate();
        let by_metadata: Event = serde_json::from_value(serde_json::json!({
            "id": "evt_1", "type": "payment_intent.succeeded",
            "data": {"object": {"id": "pi_1", "metadata": {"payonce_operation_id": id.as_str()}}}
        }))
        .unwrap();
        assert_eq!(by_metadata.operation(), Some(id.clone()));
        let by_key: Event = serde_json::from_value(serde_json::json!({
            "id": "evt_2", "type": "payment_intent.payment_failed",
            "data": {"object": {"id": "pi_2", "last_payment_error": {"code": "card_declined", "message": "Declined"}}},
            "request": {"id": "req_1", "idempotency_key": format!("payonce-{}", id.as_str())}
        }))
        .unwrap();
        assert_eq!(by_key.operation(), Some(id));
        let unrelated: Event = serde_json::from_value(serde_json::json!({
            "id": "evt_3", "type": "payment_intent.created", "data": {"object": {"id": "pi_3"}},
            "request": {"id": null, "idempotency_key": "someone-else"}
        }))
        .unwrap();
        assert_eq!(unrelated.operation(), None);
        assert_eq!(
            reference_of(
                &serde_json::to_string(&serde_json::json!({"id": "evt_4", "type": "x",
                "data": {"object": {"id": "pi_4"}}}))
                .unwrap()
            ),
            Some("pi_4".to_string())
        );
        assert_eq!(reference_of("not json"), None);
    }
}

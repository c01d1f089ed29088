//! The admin API under `/_sim` (loopback, no authentication): fault rules, audits and health.

use crate::app::Shared;
use crate::faults::FaultRule;
use crate::limits::{AUDIT_PAYMENTS_MAX, AUDIT_REFUNDS_MAX, CLOCK_ADVANCE_MS_MAX};
use crate::rate_limits::RateLimits;
use crate::settlement::settle_due;
use crate::store::detached;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

fn admin_error(status: StatusCode, message: impl Into<String>) -> Response {
    (
        status,
        Json(json!({ "error": { "type": "invalid_request_error", "message": message.into() } })),
    )
        .into_response()
}

/// `POST /_sim/faults`: appends rules (a JSON array of `{match, fault, times?, per_mille?}`).
pub(crate) async fn arm_faults(State(app): State<Shared>, body: Bytes) -> Response {
    let rules: Vec<FaultRule> = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return admin_error(
                StatusCode::BAD_REQUEST,
                format!("expected a JSON array of fault rules: {e}"),
            );
        }
    };
    if let Err(e) = app.faults.arm(rules) {
        return admin_error(StatusCode::BAD_REQUEST, e.to_string());
    }
    Json(json!({ "rules": app.faults.rules() })).into_response()
}

/// `POST /_sim/clock` `{"advance_ms": N}`: moves the simulator's clock forward by N ms (never back),
/// so a test can pass Stripe's key retention or a settle delay without waiting for it; answers the
/// simulator's new `now_ms`.
pub(crate) async fn advance_clock(State(app): State<Shared>, body: Bytes) -> Response {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Advance {
        advance_ms: i64,
    }
    let advance: Advance = match serde_json::from_slice(&body) {
        Ok(a) => a,
        Err(e) => {
            return admin_error(
                StatusCode::BAD_REQUEST,
                format!("expected {{\"advance_ms\": N}}: {e}"),
            );
        }
    };
    if !(0..=CLOCK_ADVANCE_MS_MAX).contains(&advance.advance_ms) {
        return admin_error(
            StatusCode::BAD_REQUEST,
            format!("advance_ms must be 0 to {CLOCK_ADVANCE_MS_MAX}; the clock never moves back"),
        );
    }
    app.clock_offset_ms
        .fetch_add(advance.advance_ms, std::sync::atomic::Ordering::SeqCst);
    Json(json!({ "now_ms": app.now_ms() })).into_response()
}

/// `DELETE /_sim/faults`: clears every rule.
pub(crate) async fn clear_faults(State(app): State<Shared>) -> Response {
    app.faults.clear();
    Json(json!({ "rules": [] })).into_response()
}

/// `GET /_sim/faults`: the armed rules with what is left of their `times`.
pub(crate) async fn list_faults(State(app): State<Shared>) -> Response {
    Json(json!({ "rules": app.faults.rules() })).into_response()
}

/// `GET /_sim/audit/payments?limit=&starting_after=`: PaymentIntents, oldest first, a page at a time
/// like a Stripe list (`limit` 1 to [`AUDIT_PAYMENTS_MAX`], which is also the default; `has_more`
/// says another page follows `starting_after` the last id). A page, never a silent cut.
pub(crate) async fn audit_payments(State(app): State<Shared>, RawQuery(raw): RawQuery) -> Response {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Page {
        limit: Option<i64>,
        starting_after: Option<String>,
    }
    let page: Page = match serde_urlencoded::from_str(raw.as_deref().unwrap_or("")) {
        Ok(p) => p,
        Err(e) => {
            return admin_error(
                StatusCode::BAD_REQUEST,
                format!("expected limit and starting_after only: {e}"),
            );
        }
    };
    let limit = page.limit.unwrap_or(AUDIT_PAYMENTS_MAX);
    if !(1..=AUDIT_PAYMENTS_MAX).contains(&limit) {
        return admin_error(
            StatusCode::BAD_REQUEST,
            format!("limit must be 1 to {AUDIT_PAYMENTS_MAX}"),
        );
    }
    let worker = app.clone();
    let rows = detached(async move {
        settle_due(&worker).await?;
        let after_seq = match &page.starting_after {
            None => 0,
            Some(id) => match worker.store.payment(id).await? {
                Some(row) => row.seq,
                None => return Ok(None),
            },
        };
        // One more than the page: whether another page follows.
        let rows = worker.store.payments_after(after_seq, limit + 1).await?;
        Ok(Some(rows))
    })
    .await;
    match rows {
        Ok(Some(mut rows)) => {
            let has_more = rows.len() as i64 > limit;
            rows.truncate(limit as usize);
            let data: Vec<Value> = rows
                .iter()
                .map(|r| {
                    json!({
                        "id": r.id,
                        "idempotency_key": r.idempotency_key,
                        "metadata": serde_json::from_str::<Value>(&r.metadata).unwrap_or_else(|_| json!({})),
                        "amount": r.amount,
                        "amount_refunded": r.amount_refunded,
                        "currency": r.currency,
                        "customer": r.customer,
                        "payment_method": r.payment_method,
                        "status": r.status,
                        "created": r.created,
                        "created_ms": r.created_ms,
                        // Adyen's `reference`, the merchant's own name for the payment (the
                        // operation); Stripe's wire has none.
                        "reference": if r.client_secret == crate::adyen::ADYEN_ROW {
                            r.description.clone()
                        } else {
                            None
                        },
                    })
                })
                .collect();
            Json(json!({ "object": "list", "data": data, "has_more": has_more })).into_response()
        }
        Ok(None) => admin_error(
            StatusCode::BAD_REQUEST,
            "no such payment_intent given as starting_after",
        ),
        Err(e) => {
            tracing::error!(error = %e, "simulator payment audit failed");
            admin_error(StatusCode::INTERNAL_SERVER_ERROR, "audit failed")
        }
    }
}

/// `GET /_sim/audit/refunds`: every Refund, oldest first, and how many were created per payment and
/// per idempotency key (a key under which more than one refund exists is a duplicate the processor's
/// idempotency did not prevent; failed refunds are counted too, they were created all the same).
pub(crate) async fn audit_refunds(State(app): State<Shared>) -> Response {
    let worker = app.clone();
    let rows = detached(async move {
        settle_due(&worker).await?;
        worker.store.all_refunds(AUDIT_REFUNDS_MAX).await
    })
    .await;
    match rows {
        Ok(rows) => {
            let mut by_payment = std::collections::BTreeMap::<&str, u64>::new();
            let mut by_key = std::collections::BTreeMap::<&str, u64>::new();
            let mut refunded_by_payment = std::collections::BTreeMap::<&str, i64>::new();
            for r in &rows {
                *by_payment.entry(&r.payment_intent).or_default() += 1;
                if let Some(key) = &r.idempotency_key {
                    *by_key.entry(key).or_default() += 1;
                }
                if r.status != "failed" && r.status != "canceled" {
                    *refunded_by_payment.entry(&r.payment_intent).or_default() += r.amount;
                }
            }
            let data: Vec<Value> = rows
                .iter()
                .map(|r| {
                    let object: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
                    json!({
                        "id": r.id,
                        "payment_intent": r.payment_intent,
                        "amount": r.amount,
                        "status": r.status,
                        "idempotency_key": r.idempotency_key,
                        "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
                        // Adyen's refund `reference` (its request carries no metadata); only
                        // Adyen's answer has one.
                        "reference": object.get("reference").cloned().unwrap_or(Value::Null),
                        "created": r.created,
                    })
                })
                .collect();
            Json(json!({
                "data": data,
                "count_by_payment_intent": by_payment,
                "count_by_idempotency_key": by_key,
                "amount_by_payment_intent": refunded_by_payment,
            }))
            .into_response()
        }
        Err(e) => {
            tracing::error!(error = %e, "simulator refund audit failed");
            admin_error(StatusCode::INTERNAL_SERVER_ERROR, "audit failed")
        }
    }
}

/// `GET /_sim/audit/requests`: the most recent API requests and the parameter names each sent.
pub(crate) async fn audit_requests(State(app): State<Shared>) -> Response {
    Json(json!({ "data": app.audit.all() })).into_response()
}

/// `GET /_sim/health`.
pub(crate) async fn health(State(app): State<Shared>) -> Response {
    Json(json!({
        "status": "ok",
        "in_flight": app.in_flight.len(),
        "contract": app.config.contract.name(),
        "key_retention_ms": app.config.key_retention.as_millis() as u64,
    }))
    .into_response()
}

/// `GET /_sim/rate_limits`: the limits in force.
pub(crate) async fn rate_limits(State(app): State<Shared>) -> Response {
    Json(json!({ "rate_limits": app.limiter.limits() })).into_response()
}

/// `PUT /_sim/rate_limits`: replaces the limits (a JSON [`RateLimits`] object); buckets start full.
pub(crate) async fn set_rate_limits(State(app): State<Shared>, body: Bytes) -> Response {
    let limits: RateLimits = match serde_json::from_slice(&body) {
        Ok(l) => l,
        Err(e) => {
            return admin_error(
                StatusCode::BAD_REQUEST,
                format!("expected a rate limits object: {e}"),
            );
        }
    };
    if let Err(e) = limits.validate() {
        return admin_error(StatusCode::BAD_REQUEST, e);
    }
    app.limiter.set(limits);
    Json(json!({ "rate_limits": app.limiter.limits() })).into_response()
}

/// `GET /_sim/audit/rate_limits`: per endpoint, how many authenticated requests reached the limiters and
/// how many they refused with 429 `rate_limit` (fault-injected 429s are counted in neither).
/// `GET /_sim/audit/connections`: TCP connections accepted since start.
pub(crate) async fn audit_connections(State(app): State<Shared>) -> Response {
    let accepted = app.accepted.load(std::sync::atomic::Ordering::Relaxed);
    Json(json!({ "accepted": accepted })).into_response()
}

pub(crate) async fn audit_rate_limits(State(app): State<Shared>) -> Response {
    let refused = app.limiter.refused();
    let total: u64 = refused.values().sum();
    let requests = app.limiter.checked();
    let requests_total: u64 = requests.values().sum();
    Json(json!({
        "refused_429": refused,
        "total_429": total,
        "requests": requests,
        "requests_total": requests_total,
    }))
    .into_response()
}

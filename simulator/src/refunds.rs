//! Refunds: `POST /v1/refunds` (whole or partial, never more than what is left), idempotent like every POST;
//! `GET /v1/refunds/{id}` and `GET /v1/refunds` (in `refund_reads`); and the settling of asynchronous
//! refunds (Stripe's `pm_card_pendingRefund` and `pm_card_refundFail`, see [`crate::cards::refund_behaviour`]).
//!
//! Events, as Stripe sends them: `refund.created` and `charge.refunded` at creation; `refund.updated`
//! and `charge.refund.updated` when an asynchronous refund takes its final status, with
//! `refund.failed` before them when it failed.

use crate::cards;
use crate::connection::ConnHandle;
use crate::error::ApiError;
use crate::faults::FaultKind;
use crate::form;
use crate::idempotency::{self, KeyState};
use crate::objects::{self, EventCause};
use crate::routes::{Ctx, Shared};
use crate::store::{KeyRecord, NewEvent, RefundCommit, RefundRow, RefundSettle};
use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

/// The refunds path.
pub(crate) const PATH: &str = "/v1/refunds";
/// Most asynchronous refunds settled in one pass.
const SETTLE_BATCH_MAX: i64 = 100;

fn exceeds(amount: i64, left: i64) -> ApiError {
    ApiError::invalid_param(
        "amount_too_large",
        "amount",
        format!("Refund amount ({amount}) is greater than unrefunded amount on charge ({left})"),
    )
}

/// `POST /v1/refunds`.
pub(crate) async fn create(
    State(app): State<Shared>,
    ConnectInfo(conn): ConnectInfo<ConnHandle>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let pairs = form::parse_pairs(&body);
    let ctx = match Ctx::begin(&app, conn, &headers, "POST", PATH, pairs.as_ref().ok()) {
        Ok(ctx) => ctx,
        Err(response) => return response,
    };
    let pairs = match pairs {
        Ok(p) => p,
        Err(e) => return ctx.error(&e),
    };
    let claim = match &ctx.key {
        None => None,
        Some(key) => {
            let fp = idempotency::fingerprint("POST", PATH, &pairs);
            match idempotency::begin(
                &app.in_flight,
                &app.store,
                app.config.contract,
                key,
                &fp,
                app.key_not_before_ms(ctx.now_ms),
            )
            .await
            {
                Ok(KeyState::Fresh(claim)) => Some((claim, fp)),
                Ok(KeyState::Replay(saved)) => return ctx.finish(ctx.replay(saved)),
                Ok(KeyState::Mismatch) => return ctx.error(&ApiError::idempotency_mismatch(key)),
                Ok(KeyState::InUse) => return ctx.error(&ApiError::key_in_use()),
                Err(e) => return ctx.internal("idempotency lookup", &e),
            }
        }
    };
    match ctx.fault {
        Some(FaultKind::Hang) => return ctx.hang(&app).await,
        Some(FaultKind::Error500BeforeCommit) => {
            return ctx.error(&ApiError::internal("An unknown error occurred."));
        }
        _ => {}
    }
    let params = match form::refund_params(&pairs) {
        Ok(p) => p,
        Err(e) => return ctx.error(&e),
    };
    let pi = match app.store.payment(&params.payment_intent).await {
        Ok(Some(pi)) => pi,
        Ok(None) => {
            return ctx.error(&ApiError::invalid_param(
                "resource_missing",
                "payment_intent",
                format!("No such payment_intent: '{}'", params.payment_intent),
            ));
        }
        Err(e) => return ctx.internal("refund lookup", &e),
    };
    if pi.status != "succeeded" {
        return ctx.error(&ApiError::invalid_param(
            "charge_not_refundable",
            "payment_intent",
            format!(
                "This PaymentIntent ({}) does not have a successful charge to refund.",
                pi.id
            ),
        ));
    }
    let left = pi.amount_received - pi.amount_refunded;
    let amount = params.amount.unwrap_or(left);
    if left == 0 {
        return ctx.error(&ApiError::invalid_param(
            "charge_already_refunded",
            "payment_intent",
            format!(
                "Charge {} has already been refunded.",
                pi.latest_charge.as_deref().unwrap_or("")
            ),
        ));
    }
    if amount > left {
        return ctx.error(&exceeds(amount, left));
    }
    let refund_id = app.ids.id("re");
    let created = ctx.now_ms / 1000;
    let behaviour = cards::refund_behaviour(pi.payment_method.as_deref());
    let refund = objects::refund(&objects::RefundFields {
        id: &refund_id,
        pi: &pi,
        amount,
        created,
        reason: params.reason.as_deref(),
        metadata: &params.metadata,
        status: behaviour.initial,
    });
    let cause = EventCause {
        request_id: Some(&ctx.request_id),
        idempotency_key: ctx.key.as_deref(),
        api_version: ctx.api_version(),
    };
    let mut events = Vec::new();
    for (kind, object) in [
        ("refund.created", refund.clone()),
        (
            "charge.refunded",
            objects::charge(&pi, pi.amount_refunded + amount),
        ),
    ] {
        events.push(new_event(&app, created, kind, object, None, cause));
    }
    let (status, body) = if ctx.fault == Some(FaultKind::Error500AfterCommit) {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::internal("An unknown error occurred.").body(),
        )
    } else {
        (
            StatusCode::OK,
            serde_json::to_vec(&refund).unwrap_or_default(),
        )
    };
    // What the contract saves: every answer of a request that began executing (Stripe), or only
    // 2xx ones (`only-2xx-saved`: a retry of this request executes it again).
    let key_record = claim
        .as_ref()
        .zip(ctx.key.as_ref())
        .filter(|_| app.config.contract.saves(status.as_u16()))
        .map(|((_, fp), key)| KeyRecord {
            key: key.clone(),
            fingerprint: fp.clone(),
            status: status.as_u16(),
            body: body.clone(),
            created_ms: ctx.now_ms,
        });
    let row = RefundRow {
        seq: 0,
        id: refund_id,
        payment_intent: pi.id.clone(),
        charge: pi.latest_charge.clone(),
        amount,
        status: behaviour.initial.to_string(),
        created,
        idempotency_key: ctx.key.clone(),
        request_id: ctx.request_id.clone(),
        settle_at_ms: behaviour
            .settles_to
            .map(|_| ctx.now_ms + app.config.refund_settle.as_millis() as i64),
        settle_to: behaviour.settles_to.map(str::to_string),
        body: serde_json::to_vec(&refund).unwrap_or_default(),
    };
    let store = app.store.clone();
    let due = app.webhooks_due_ms(ctx.now_ms);
    // Spawned: a client hanging up must not cancel the transaction, and the claim is held until it commits.
    let committed = tokio::spawn(async move {
        let result = store
            .commit_refund(&row, &events, key_record.as_ref(), due)
            .await;
        drop(claim);
        result
    })
    .await;
    match committed {
        Ok(Ok(RefundCommit::Done)) => {}
        // A concurrent refund took what was left.
        Ok(Ok(RefundCommit::Exceeds)) => return ctx.error(&exceeds(amount, 0)),
        Ok(Err(e)) => return ctx.internal("refund commit", &e),
        Err(e) => return ctx.internal("refund commit task", &e),
    }
    app.webhook_wake.notify_one();
    ctx.finish(ctx.respond(status, body, false))
}

fn new_event(
    app: &Shared,
    created: i64,
    kind: &'static str,
    object: serde_json::Value,
    previous: Option<serde_json::Value>,
    cause: EventCause<'_>,
) -> NewEvent {
    let id = app.ids.id("evt");
    let body = serde_json::to_vec(&objects::event_with_previous(
        &id, created, kind, object, previous, cause,
    ))
    .unwrap_or_default();
    NewEvent {
        id,
        created,
        kind,
        body,
    }
}

/// Moves every asynchronous refund whose time has come to its final status, with its events.
pub(crate) async fn settle_due(app: &Shared) -> Result<usize, sqlx::Error> {
    let now = app.now_ms();
    let due = app.store.refunds_settle_due(now, SETTLE_BATCH_MAX).await?;
    let mut settled = 0;
    for row in due {
        let Some(to) = row.settle_to.clone() else {
            continue;
        };
        let stored: serde_json::Value = serde_json::from_slice(&row.body).unwrap_or_default();
        let object = objects::refund_settled(stored, &to);
        let created = now / 1000;
        // Stripe's asynchronous events name no request: nobody asked for this change.
        let cause = EventCause {
            request_id: None,
            idempotency_key: None,
            api_version: objects::API_VERSION,
        };
        let previous = Some(serde_json::json!({ "status": row.status }));
        let kinds: &[&'static str] = if to == "failed" {
            &["refund.failed", "refund.updated", "charge.refund.updated"]
        } else {
            &["refund.updated", "charge.refund.updated"]
        };
        let events: Vec<NewEvent> = kinds
            .iter()
            .map(|kind| new_event(app, created, kind, object.clone(), previous.clone(), cause))
            .collect();
        let body = serde_json::to_vec(&object).unwrap_or_default();
        let settle = RefundSettle {
            row: &row,
            to: &to,
            body: &body,
            events: &events,
        };
        if app
            .store
            .settle_refund(&settle, app.webhooks_due_ms(now))
            .await?
        {
            settled += 1;
        }
    }
    if settled > 0 {
        app.webhook_wake.notify_one();
    }
    Ok(settled)
}

//! Refunds: `POST /v1/refunds` (whole or partial, never more than what is left), idempotent like every POST.

use crate::connection::ConnHandle;
use crate::error::ApiError;
use crate::faults::FaultKind;
use crate::form;
use crate::idempotency::{self, KeyState};
use crate::objects::{self, EventCause};
use crate::routes::{Ctx, Shared};
use crate::store::{KeyRecord, NewEvent, RefundCommit};
use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

const PATH: &str = "/v1/refunds";

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
    let refund = objects::refund(
        &refund_id,
        &pi,
        amount,
        created,
        params.reason.as_deref(),
        &params.metadata,
    );
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
        let id = app.ids.id("evt");
        let body = serde_json::to_vec(&objects::event(&id, created, kind, object, cause))
            .unwrap_or_default();
        events.push(NewEvent {
            id,
            created,
            kind,
            body,
        });
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
    let key_record = claim
        .as_ref()
        .zip(ctx.key.as_ref())
        .map(|((_, fp), key)| KeyRecord {
            key: key.clone(),
            fingerprint: fp.clone(),
            status: status.as_u16(),
            body: body.clone(),
            created_ms: ctx.now_ms,
        });
    let store = app.store.clone();
    let due = app.webhooks_due_ms(ctx.now_ms);
    let stored_body = serde_json::to_vec(&refund).unwrap_or_default();
    let pi_id = pi.id.clone();
    let committed = tokio::spawn(async move {
        let result = store
            .commit_refund(
                &refund_id,
                &pi_id,
                amount,
                &stored_body,
                &events,
                key_record.as_ref(),
                due,
            )
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

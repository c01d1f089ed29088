//! Refunds: `POST /v1/refunds` (whole or partial, never more than what is left), idempotent like every POST;
//! `GET /v1/refunds/{id}` and `GET /v1/refunds` (in `refund_reads`); asynchronous refunds settle in
//! `settlement` (Stripe's `pm_card_pendingRefund` and `pm_card_refundFail`, see [`crate::cards::refund_behaviour`]).
//!
//! Events, as Stripe sends them: `refund.created` and `charge.refunded` at creation; `refund.updated`
//! and `charge.refund.updated` when an asynchronous refund takes its final status, with
//! `refund.failed` before them when it failed.

use crate::app::Shared;
use crate::cards;
use crate::connection::ConnHandle;
use crate::context::Ctx;
use crate::creation::Creation;
use crate::error::ApiError;
use crate::form;
use crate::objects::{self, EventCause};
use crate::store::{NewEvent, PaymentRow, RefundCommit, RefundRow};
use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

/// The refunds path.
pub(crate) const PATH: &str = "/v1/refunds";

fn exceeds(amount: i64, left: i64) -> ApiError {
    ApiError::invalid_param(
        "amount_too_large",
        "amount",
        format!("Refund amount ({amount}) is greater than unrefunded amount on charge ({left})"),
    )
}

/// `POST /v1/refunds`: the shared create path ([`Creation`]) around a refund of what is left.
pub(crate) async fn create(
    State(app): State<Shared>,
    ConnectInfo(conn): ConnectInfo<ConnHandle>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (mut creation, params) =
        match Creation::begin(&app, conn, &headers, PATH, &body, form::refund_params).await {
            Ok(begun) => begun,
            Err(response) => return response,
        };
    let ctx = &creation.ctx;
    let (pi, amount) = match refundable(&app, ctx, &params).await {
        Ok(found) => found,
        Err(response) => return response,
    };
    let refund_id = app.ids.id("re");
    let behaviour = cards::refund_behaviour(pi.payment_method.as_deref());
    let refund = objects::refund(&objects::RefundFields {
        id: &refund_id,
        pi: &pi,
        amount,
        created: ctx.now_ms / 1000,
        reason: params.reason.as_deref(),
        metadata: &params.metadata,
        status: behaviour.initial,
    });
    let events = created_events(&app, ctx, &pi, amount, &refund);
    let (status, body) = creation.answer((
        StatusCode::OK,
        serde_json::to_vec(&refund).unwrap_or_default(),
    ));
    let key_record = creation.key_record(&app, status, &body);
    let row = RefundRow {
        seq: 0,
        id: refund_id,
        payment_intent: pi.id.clone(),
        charge: pi.latest_charge.clone(),
        amount,
        status: behaviour.initial.to_string(),
        created: ctx.now_ms / 1000,
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
    let held = creation.held.take();
    // Spawned: a client hanging up must not cancel the transaction, and the claim is held until it commits.
    let committed = tokio::spawn(async move {
        let result = store
            .commit_refund(&row, &events, key_record.as_ref(), due)
            .await;
        drop(held);
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
    creation.committed(&app, status, body)
}

/// The payment a refund takes from and the amount it takes: the payment must exist, have succeeded
/// and have something left, and the amount (all that is left by default) must fit. `Err` is the
/// response to send.
async fn refundable(
    app: &Shared,
    ctx: &Ctx,
    params: &form::RefundParams,
) -> Result<(PaymentRow, i64), Response> {
    let pi = match app.store.payment(&params.payment_intent).await {
        Ok(Some(pi)) => pi,
        Ok(None) => {
            return Err(ctx.error(&ApiError::invalid_param(
                "resource_missing",
                "payment_intent",
                format!("No such payment_intent: '{}'", params.payment_intent),
            )));
        }
        Err(e) => return Err(ctx.internal("refund lookup", &e)),
    };
    if pi.status != "succeeded" {
        return Err(ctx.error(&ApiError::invalid_param(
            "charge_not_refundable",
            "payment_intent",
            format!(
                "This PaymentIntent ({}) does not have a successful charge to refund.",
                pi.id
            ),
        )));
    }
    let left = pi.amount_received - pi.amount_refunded;
    let amount = params.amount.unwrap_or(left);
    if left == 0 {
        return Err(ctx.error(&ApiError::invalid_param(
            "charge_already_refunded",
            "payment_intent",
            format!(
                "Charge {} has already been refunded.",
                pi.latest_charge.as_deref().unwrap_or("")
            ),
        )));
    }
    if amount > left {
        return Err(ctx.error(&exceeds(amount, left)));
    }
    Ok((pi, amount))
}

/// The events of a refund's creation, as Stripe sends them: `refund.created`, then `charge.refunded`
/// with the charge's new refunded amount.
fn created_events(
    app: &Shared,
    ctx: &Ctx,
    pi: &PaymentRow,
    amount: i64,
    refund: &serde_json::Value,
) -> Vec<NewEvent> {
    let cause = EventCause {
        request_id: Some(&ctx.request_id),
        idempotency_key: ctx.key.as_deref(),
        api_version: ctx.api_version(),
    };
    [
        ("refund.created", refund.clone()),
        (
            "charge.refunded",
            objects::charge(pi, pi.amount_refunded + amount),
        ),
    ]
    .into_iter()
    .map(|(kind, object)| {
        objects::new_event(&app.ids, ctx.now_ms / 1000, kind, object, None, cause)
    })
    .collect()
}

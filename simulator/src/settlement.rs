//! Settling what is due: `processing` payments whose `processing_settle` has passed become
//! `succeeded` (an Adyen one says so by its AUTHORISATION notification), and asynchronous refunds whose
//! `refund_settle` has passed take their final status, each with its events. The maintenance task runs
//! it, and so does every lookup first, so a read never lags behind the configured delays.
//!
//! Bound: at most [`SETTLE_BATCH_MAX`] payments and as many refunds per pass; what is left waits for
//! the next. Failure: a store error ends the pass; a row another pass settled first is skipped.

use crate::app::Shared;
use crate::objects::{self, EventCause};
use crate::store::{NewEvent, RefundSettle};

/// Most `processing` payments, and most asynchronous refunds, settled in one pass.
const SETTLE_BATCH_MAX: i64 = 100;

/// Settles every `processing` payment whose time has come (`succeeded`, with `payment_intent.succeeded`),
/// then every asynchronous refund whose time has come ([`settle_refunds_due`]): every read
/// calls this first, so what it returns never lags behind the configured delays.
pub(crate) async fn settle_due(app: &Shared) -> Result<usize, sqlx::Error> {
    let payments = settle_payments_due(app).await?;
    Ok(payments + settle_refunds_due(app).await?)
}

async fn settle_payments_due(app: &Shared) -> Result<usize, sqlx::Error> {
    let now = app.now_ms();
    let due = app.store.processing_due(now, SETTLE_BATCH_MAX).await?;
    let mut settled = 0;
    for mut row in due {
        if row.client_secret == crate::adyen::ADYEN_ROW {
            // A received Adyen payment: authorised now, said by its AUTHORISATION notification.
            let event = crate::adyen::settled(app, &row, now);
            if app
                .store
                .settle(&row.id, &row.id, &event, app.webhooks_due_ms(now))
                .await?
            {
                settled += 1;
            }
            continue;
        }
        let charge = app.ids.id("ch");
        row.status = "succeeded".into();
        row.latest_charge = Some(charge.clone());
        row.amount_received = row.amount;
        row.settle_at_ms = None;
        let cause = EventCause {
            request_id: Some(&row.request_id),
            idempotency_key: row.idempotency_key.as_deref(),
            api_version: objects::API_VERSION,
        };
        let object = objects::payment_intent(&row);
        let event = objects::new_event(
            &app.ids,
            now / 1000,
            "payment_intent.succeeded",
            object,
            None,
            cause,
        );
        if app
            .store
            .settle(&row.id, &charge, &event, app.webhooks_due_ms(now))
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

/// Moves every asynchronous refund whose time has come to its final status, with its events.
async fn settle_refunds_due(app: &Shared) -> Result<usize, sqlx::Error> {
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
            .map(|kind| {
                objects::new_event(
                    &app.ids,
                    created,
                    kind,
                    object.clone(),
                    previous.clone(),
                    cause,
                )
            })
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

//! `POST /v71/payments/{pspReference}/refunds`: answered `201 received` at once; the `REFUND`
//! notification says whether it went through. A refund of another currency, of a payment that did not
//! succeed, or larger than what is left is received, then refused there (as Adyen's is), with the
//! answer saved under the key either way. Failure: a store error is an opaque 500.

use super::notifications::{Notice, notification};
use super::session::{Ctx, begin};
use super::{
    ADYEN_ROW, PAYMENTS_PATH, ServiceError, amount_of, executed_answer, merchant_of, psp_reference,
    text,
};
use crate::app::Shared;
use crate::connection::ConnHandle;
use crate::store::{NewEvent, PaymentRow, RefundCommit, RefundRow};
use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

/// The top-level fields a refund may carry here.
const REFUND_FIELDS: [&str; 4] = [
    "merchantAccount",
    "amount",
    "reference",
    "merchantRefundReason",
];

/// A refund request's checked fields and what it refunds.
struct Checked {
    account: String,
    value: i64,
    /// Lower case, as stored.
    currency: String,
    reference: String,
    /// The refunded payment's `pspReference`.
    payment: String,
}

/// Checks the merchant account and the amount; the reference is taken as sent.
fn check(app: &Shared, body: &Value, payment: String) -> Result<Checked, ServiceError> {
    let account = merchant_of(app, body)?;
    let (value, currency) = amount_of(body)?;
    let reference = text(body, "reference").unwrap_or("").to_string();
    Ok(Checked {
        account,
        value,
        currency,
        reference,
        payment,
    })
}

/// The refunded payment, if it was made on Adyen's wire. `Err` is the response to send.
async fn paid(app: &Shared, ctx: &Ctx, payment: &str) -> Result<PaymentRow, Response> {
    let found = match app.store.payment(payment).await {
        Ok(found) => found,
        Err(e) => return Err(ctx.internal("payment read", &e)),
    };
    found
        .filter(|p| p.client_secret == ADYEN_ROW)
        .ok_or_else(|| {
            ctx.error(&ServiceError::validation(
                "167",
                format!("Original pspReference {payment} not found"),
            ))
        })
}

/// Adyen's answer to the refund, whose own `pspReference` is `psp`.
fn answer(c: &Checked, psp: &str) -> Value {
    json!({
        "merchantAccount": c.account,
        "paymentPspReference": c.payment,
        "pspReference": psp,
        "reference": c.reference,
        "status": "received",
        "amount": { "currency": c.currency.to_ascii_uppercase(), "value": c.value },
    })
}

/// The refund's `REFUND` notification, saying it went through or why it did not.
fn notice(app: &Shared, ctx: &Ctx, c: &Checked, psp: &str, refusal: Option<&str>) -> NewEvent {
    notification(
        app,
        &Notice {
            event_code: "REFUND",
            psp_reference: psp,
            original_reference: Some(&c.payment),
            merchant_reference: &c.reference,
            value: c.value,
            currency: &c.currency.to_ascii_uppercase(),
            success: refusal.is_none(),
            reason: refusal,
        },
        ctx.now_ms,
    )
}

/// The stored refund (its id is its `pspReference`), succeeded if it commits at all.
fn row(ctx: &Ctx, c: &Checked, psp: &str, paid: &PaymentRow, answer: &Value) -> RefundRow {
    RefundRow {
        seq: 0,
        id: psp.to_string(),
        payment_intent: c.payment.clone(),
        charge: paid.latest_charge.clone(),
        amount: c.value,
        status: "succeeded".into(),
        created: ctx.now_ms / 1000,
        idempotency_key: ctx.key.clone(),
        request_id: ctx.request_id.clone(),
        settle_at_ms: None,
        settle_to: None,
        body: serde_json::to_vec(answer).unwrap_or_default(),
    }
}

/// `POST /v71/payments/{pspReference}/refunds`: answered `201 received`; the REFUND notification
/// says whether it went through (a refund larger than what is left fails there, as Adyen's does).
pub(crate) async fn refunds(
    State(app): State<Shared>,
    ConnectInfo(conn): ConnectInfo<ConnHandle>,
    headers: HeaderMap,
    Path(payment): Path<String>,
    body: Bytes,
) -> Response {
    let path = format!("{PAYMENTS_PATH}/{payment}/refunds");
    let (ctx, body, held) = match begin(&app, conn, &headers, &path, &body, &REFUND_FIELDS).await {
        Ok(begun) => begun,
        Err(response) => return response,
    };
    let checked = match check(&app, &body, payment) {
        Ok(c) => c,
        Err(e) => return ctx.error(&e),
    };
    let paid = match paid(&app, &ctx, &checked.payment).await {
        Ok(paid) => paid,
        Err(response) => return response,
    };
    let psp = psp_reference(&app);
    let answer = answer(&checked, &psp);
    let (status, answer_body) = executed_answer(&ctx, StatusCode::CREATED, &answer);
    let key = held
        .as_ref()
        .map(|held| held.record(status.as_u16(), &answer_body, ctx.now_ms));
    let fits = paid.currency == checked.currency && paid.status == "succeeded";
    let row = row(&ctx, &checked, &psp, &paid, &answer);
    let due = app.webhooks_due_ms(ctx.now_ms);
    let (accepted, refused) = (
        notice(&app, &ctx, &checked, &psp, None),
        notice(
            &app,
            &ctx,
            &checked,
            &psp,
            Some("Insufficient balance on payment"),
        ),
    );
    let store = app.store.clone();
    // In its own task, holding the key's claim to the end: a client hanging up cannot cancel it.
    let committed = crate::store::detached(async move {
        let done = if fits {
            store
                .commit_refund(&row, &[accepted], key.as_ref(), due)
                .await?
        } else {
            RefundCommit::Exceeds
        };
        if done == RefundCommit::Exceeds {
            // Received, then refused: the answer is saved under the key and the notification says no.
            store.commit_answer(&[refused], key.as_ref(), due).await?;
        }
        drop(held);
        Ok(())
    })
    .await;
    if let Err(e) = committed {
        return ctx.internal("refund commit", &e);
    }
    app.webhook_wake.notify_one();
    ctx.finish(ctx.respond(status, answer_body))
}

//! `POST /v71/payments`: a payment with a stored card (`storedPaymentMethodId`, one of the simulator's
//! test payment methods), answered `Authorised`, `Refused` (with Adyen's refusal reason),
//! `RedirectShopper` or `Received` (authorised `processing_settle` later), and notified by an
//! `AUTHORISATION` notification. Failure: a refused field is answered with Adyen's validation error
//! before anything is stored; a store error is an opaque 500.

use super::notifications::{Notice, notification};
use super::session::{Ctx, begin};
use super::{
    ADYEN_ROW, PAYMENTS_PATH, ServiceError, amount_of, executed_answer, merchant_of, psp_reference,
    text,
};
use crate::app::Shared;
use crate::cards::{self, CardOutcome};
use crate::connection::ConnHandle;
use crate::store::{NewEvent, PaymentCommit, PaymentRow};
use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Map, Value, json};

/// Adyen's most metadata entries (more is error 177).
const METADATA_ENTRIES_MAX: usize = 20;
/// Adyen's longest metadata key.
const METADATA_KEY_LEN_MAX: usize = 20;
/// Adyen's longest metadata value.
const METADATA_VALUE_LEN_MAX: usize = 80;
/// Adyen's longest `reference`.
const REFERENCE_LEN_MAX: usize = 80;
/// The top-level fields a payment may carry here (Adyen refuses unknown fields with 702).
const PAYMENT_FIELDS: [&str; 9] = [
    "merchantAccount",
    "amount",
    "reference",
    "shopperReference",
    "paymentMethod",
    "shopperInteraction",
    "recurringProcessingModel",
    "returnUrl",
    "metadata",
];

/// A payment request's checked fields.
struct Checked {
    value: i64,
    /// Lower case, as stored.
    currency: String,
    reference: String,
    metadata: Map<String, Value>,
    method: String,
    shopper: String,
}

/// What the card decided, in Adyen's words and the stored status.
struct Decision {
    result_code: &'static str,
    status: &'static str,
    refusal: Option<(&'static str, &'static str)>,
}

impl Decision {
    fn authorised(&self) -> bool {
        self.result_code == "Authorised"
    }
}

fn metadata_of(body: &Value) -> Result<Map<String, Value>, ServiceError> {
    let Some(m) = body.get("metadata") else {
        return Ok(Map::new());
    };
    let Some(map) = m.as_object() else {
        return Err(ServiceError::validation(
            "702",
            "metadata must be an object",
        ));
    };
    let fits = map.len() <= METADATA_ENTRIES_MAX
        && map.iter().all(|(k, v)| {
            k.chars().count() <= METADATA_KEY_LEN_MAX
                && v.as_str()
                    .is_some_and(|s| s.chars().count() <= METADATA_VALUE_LEN_MAX)
        });
    if !fits {
        return Err(ServiceError::validation(
            "177",
            "Metadata size exceeds limit",
        ));
    }
    Ok(map.clone())
}

fn reference_of(body: &Value) -> Result<String, ServiceError> {
    let reference = text(body, "reference").unwrap_or("");
    if reference.is_empty() || reference.chars().count() > REFERENCE_LEN_MAX {
        return Err(ServiceError::validation(
            "130",
            format!("reference must be 1 to {REFERENCE_LEN_MAX} characters"),
        ));
    }
    Ok(reference.to_string())
}

/// Checks the fields in Adyen's order: merchant account, amount, reference, metadata, card, shopper.
fn check(app: &Shared, body: &Value) -> Result<Checked, ServiceError> {
    merchant_of(app, body)?;
    let (value, currency) = amount_of(body)?;
    let reference = reference_of(body)?;
    let metadata = metadata_of(body)?;
    let method = body
        .get("paymentMethod")
        .and_then(|m| text(m, "storedPaymentMethodId"))
        .unwrap_or("");
    if !cards::is_known(method) {
        return Err(ServiceError::validation("800", "Contract not found"));
    }
    let shopper = text(body, "shopperReference").unwrap_or("");
    if shopper.chars().count() < 3 {
        return Err(ServiceError::validation(
            "702",
            "shopperReference must be at least 3 characters",
        ));
    }
    Ok(Checked {
        value,
        currency,
        reference,
        metadata,
        method: method.to_string(),
        shopper: shopper.to_string(),
    })
}

fn refusal_of(outcome: &CardOutcome) -> Option<(&'static str, &'static str)> {
    match outcome {
        CardOutcome::Declined(e) => Some(match e.decline_code {
            Some("insufficient_funds") => ("Not enough balance", "12"),
            Some("authentication_required") => ("Authentication required", "38"),
            _ => ("Refused", "2"),
        }),
        _ => None,
    }
}

/// Asks the card, as a merchant-initiated payment when `shopperInteraction` is `ContAuth`.
fn decide(checked: &Checked, body: &Value) -> Decision {
    let off_session = body.get("shopperInteraction").and_then(Value::as_str) == Some("ContAuth");
    let outcome = cards::confirm(&checked.method, off_session);
    let refusal = refusal_of(&outcome);
    let (result_code, status) = match (&outcome, refusal) {
        (_, Some(_)) => ("Refused", "requires_payment_method"),
        (CardOutcome::RequiresAction(_), None) => ("RedirectShopper", "requires_action"),
        // Authorised later: the AUTHORISATION notification says so `processing_settle` after.
        (CardOutcome::Processing, None) => ("Received", "processing"),
        (CardOutcome::Succeeded | CardOutcome::Declined(_), None) => ("Authorised", "succeeded"),
    };
    Decision {
        result_code,
        status,
        refusal,
    }
}

/// The stored payment (its id is its `pspReference`).
fn row(app: &Shared, ctx: &Ctx, psp: &str, checked: Checked, decision: &Decision) -> PaymentRow {
    let authorised = decision.authorised();
    PaymentRow {
        seq: 0,
        id: psp.to_string(),
        created: ctx.now_ms / 1000,
        created_ms: ctx.now_ms,
        amount: checked.value,
        currency: checked.currency,
        customer: Some(checked.shopper),
        // Adyen's `reference` (a settling payment's notification names it).
        description: Some(checked.reference),
        payment_method: Some(checked.method),
        status: decision.status.to_string(),
        metadata: Value::Object(checked.metadata).to_string(),
        transfer_destination: None,
        latest_charge: authorised.then(|| psp.to_string()),
        last_payment_error: None,
        next_action: None,
        amount_received: if authorised { checked.value } else { 0 },
        amount_refunded: 0,
        client_secret: ADYEN_ROW.to_string(),
        idempotency_key: ctx.key.clone(),
        request_id: ctx.request_id.clone(),
        settle_at_ms: (decision.status == "processing")
            .then(|| ctx.now_ms + app.config.processing_settle.as_millis() as i64),
    }
}

/// Adyen's answer to the payment.
fn answer(psp: &str, checked: &Checked, decision: &Decision) -> Value {
    let mut answer = json!({
        "pspReference": psp,
        "resultCode": decision.result_code,
        "merchantReference": checked.reference,
        "amount": { "currency": checked.currency.to_ascii_uppercase(), "value": checked.value },
    });
    if let Some((reason, code)) = decision.refusal {
        answer["refusalReason"] = json!(reason);
        answer["refusalReasonCode"] = json!(code);
    }
    answer
}

/// Adyen notifies refused authorisations too (success false); a redirect is not an authorisation
/// yet, and a received payment is notified when it settles.
fn events(
    app: &Shared,
    ctx: &Ctx,
    psp: &str,
    checked: &Checked,
    decision: &Decision,
) -> Vec<NewEvent> {
    if matches!(decision.result_code, "RedirectShopper" | "Received") {
        return Vec::new();
    }
    vec![notification(
        app,
        &Notice {
            event_code: "AUTHORISATION",
            psp_reference: psp,
            original_reference: None,
            merchant_reference: &checked.reference,
            value: checked.value,
            currency: &checked.currency.to_ascii_uppercase(),
            success: decision.authorised(),
            reason: decision.refusal.map(|(r, _)| r),
        },
        ctx.now_ms,
    )]
}

/// `POST /v71/payments`.
pub(crate) async fn payments(
    State(app): State<Shared>,
    ConnectInfo(conn): ConnectInfo<ConnHandle>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (ctx, body, held) =
        match begin(&app, conn, &headers, PAYMENTS_PATH, &body, &PAYMENT_FIELDS).await {
            Ok(begun) => begun,
            Err(response) => return response,
        };
    let checked = match check(&app, &body) {
        Ok(c) => c,
        Err(e) => return ctx.error(&e),
    };
    let psp = psp_reference(&app);
    let decision = decide(&checked, &body);
    let answer = answer(&psp, &checked, &decision);
    let events = events(&app, &ctx, &psp, &checked, &decision);
    let row = row(&app, &ctx, &psp, checked, &decision);
    let (status, answer) = executed_answer(&ctx, StatusCode::OK, &answer);
    let commit = PaymentCommit {
        row,
        events,
        key: held
            .as_ref()
            .map(|held| held.record(status.as_u16(), &answer, ctx.now_ms)),
        webhooks_due_ms: app.webhooks_due_ms(ctx.now_ms),
    };
    if let Err(e) = app.store.commit_payment(commit, held).await {
        return ctx.internal("payment commit", &e);
    }
    app.webhook_wake.notify_one();
    ctx.finish(ctx.respond(status, answer))
}

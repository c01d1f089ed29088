//! Adyen Checkout v71 on the simulator (started with `--adyen`): `POST /v71/payments` and
//! `POST /v71/payments/{pspReference}/refunds`, authenticated by `X-API-Key`, with Adyen's idempotency
//! (`Idempotency-Key` of at most 64 characters, remembered `key_retention`; another body under a used
//! key: 422 `704`; the same key while its first request runs: 409 `704` with `Transient-Error: true`;
//! the saved result replayed otherwise), and standard notifications (`AUTHORISATION`, `REFUND`)
//! HMAC-signed as Adyen signs them, delivered through the same outbox as Stripe's events.
//!
//! Payments and refunds are stored in the same tables as Stripe's, so the audits under `/_sim/audit`
//! count them (a payment's id is its `pspReference`). Cards are the simulator's test payment methods,
//! named by `storedPaymentMethodId`; a declining card answers `Refused` with a refusal reason.
//! Fault rules apply as on the Stripe wire.
//!
//! Modules: `session` (a request up to execution: auth, body, key claim, early faults), `payments`,
//! `refunds`, and `notifications` (signing and queueing them); the field checks both endpoints share
//! live here.

mod notifications;
mod payments;
mod refunds;
mod session;

pub(crate) use notifications::settled;
pub(crate) use payments::payments;
pub(crate) use refunds::refunds;

use crate::app::Shared;
use crate::faults::FaultKind;
use axum::http::StatusCode;
use serde_json::{Value, json};
use session::Ctx;

/// Adyen's longest `Idempotency-Key`, in characters.
pub(crate) const ADYEN_KEY_LEN_MAX: usize = 64;
/// The marker in a stored payment's `client_secret` column that says it was made on Adyen's wire.
pub(crate) const ADYEN_ROW: &str = "adyen";
/// Adyen's "request already processed or in progress".
const IN_PROGRESS: &str = "704";
const PAYMENTS_PATH: &str = "/v71/payments";

/// An Adyen `ServiceError`.
#[derive(Debug, Clone)]
struct ServiceError {
    status: StatusCode,
    code: &'static str,
    kind: &'static str,
    message: String,
    transient: bool,
}

impl ServiceError {
    fn new(
        status: StatusCode,
        code: &'static str,
        kind: &'static str,
        message: impl Into<String>,
    ) -> Self {
        ServiceError {
            status,
            code,
            kind,
            message: message.into(),
            transient: false,
        }
    }

    fn validation(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            code,
            "validation",
            message,
        )
    }

    /// Adyen's opaque 500.
    fn internal() -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "000",
            "internal",
            "An unknown error occurred.",
        )
    }

    fn body(&self) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "status": self.status.as_u16(),
            "errorCode": self.code,
            "message": self.message,
            "errorType": self.kind,
        }))
        .unwrap_or_default()
    }
}

/// A string field of `v`, if it is one.
fn text<'a>(v: &'a Value, field: &str) -> Option<&'a str> {
    v.get(field).and_then(Value::as_str)
}

/// The checked amount: a positive value and a three-letter upper-case currency.
fn amount_of(body: &Value) -> Result<(i64, String), ServiceError> {
    let amount = body
        .get("amount")
        .ok_or_else(|| ServiceError::validation("100", "No amount specified"))?;
    let value = amount
        .get("value")
        .and_then(Value::as_i64)
        .ok_or_else(|| ServiceError::validation("100", "No amount specified"))?;
    let currency = text(amount, "currency").unwrap_or("");
    if currency.len() != 3 || !currency.chars().all(|c| c.is_ascii_uppercase()) {
        return Err(ServiceError::validation(
            "702",
            format!("Invalid currency {currency:?}: three upper-case letters expected"),
        ));
    }
    if value <= 0 {
        return Err(ServiceError::validation("137", "Invalid amount specified"));
    }
    Ok((value, currency.to_ascii_lowercase()))
}

/// The merchant account, which must be the configured one (901 if missing, 010 if another).
fn merchant_of(app: &Shared, body: &Value) -> Result<String, ServiceError> {
    let account = text(body, "merchantAccount").unwrap_or("");
    if account.is_empty() {
        return Err(ServiceError::validation("901", "Invalid Merchant Account"));
    }
    if account != app.config.adyen.merchant_account {
        return Err(ServiceError::new(
            StatusCode::FORBIDDEN,
            "010",
            "security",
            "Not allowed",
        ));
    }
    Ok(account.to_string())
}

/// A fresh `pspReference`: 16 upper-case letters and digits.
fn psp_reference(app: &Shared) -> String {
    app.ids
        .id("psp")
        .trim_start_matches("psp_")
        .chars()
        .map(|c| c.to_ascii_uppercase())
        .take(16)
        .collect()
}

/// The answer to save and send: the executed one (`ok` with `answer`), or, under
/// `error_500_after_commit`, a non-transient 500 that Adyen stores as the key's final result.
fn executed_answer(ctx: &Ctx, ok: StatusCode, answer: &Value) -> (StatusCode, Vec<u8>) {
    if ctx.fault == Some(FaultKind::Error500AfterCommit) {
        let e = ServiceError::internal();
        (e.status, e.body())
    } else {
        (ok, serde_json::to_vec(answer).unwrap_or_default())
    }
}

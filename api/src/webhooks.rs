//! `POST /v1/webhooks/stripe` and `POST /v1/webhooks/adyen`. Stripe: the raw body and `Stripe-Signature` go to
//! [`payonce_processor::ingest::ingest`], which verifies (beside the Stripe adapter) and stores once;
//! the stored event is a hint the reconciler checks against the processor before anything changes.
//! Adyen: every item's HMAC signature and merchant account are verified and each item is stored once
//! ([`payonce_processor::ingest::ingest_adyen`]); the answer is `[accepted]`, as Adyen requires.

use crate::errors::{ErrorCode, HttpError};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::HeaderMap;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use payonce_processor::adyen::webhook::{self as adyen_webhook, AdyenWebhookError};
use payonce_processor::ingest as webhooks;
use payonce_processor::stripe::webhook::{PAYLOAD_LEN_MAX, WebhookError};
use serde_json::{Value, json};

/// Body limit of this route: the webhook parser's payload limit, so a large but genuine event is
/// judged by the parser (413 `body_too_large` beyond it).
pub const BODY_LIMIT_BYTES: usize = PAYLOAD_LEN_MAX;
/// Stripe's signature header.
pub const SIGNATURE_HEADER: &str = "stripe-signature";

/// The processors' webhook routes, each with its own body limit.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/v1/webhooks/stripe",
            post(stripe).layer(DefaultBodyLimit::max(BODY_LIMIT_BYTES)),
        )
        .route(
            "/v1/webhooks/adyen",
            post(adyen).layer(DefaultBodyLimit::max(ADYEN_BODY_LIMIT_BYTES)),
        )
}

fn refuse(e: WebhookError) -> HttpError {
    let message = format!("{} ({})", e, e.code());
    match e.status_code() {
        400 => match e {
            WebhookError::MalformedPayload(_) => {
                HttpError::new(ErrorCode::WebhookPayloadInvalid, message)
            }
            _ => HttpError::new(ErrorCode::WebhookSignatureInvalid, message),
        },
        413 => HttpError::new(ErrorCode::BodyTooLarge, message),
        _ => match e {
            // No secret configured: a deployment problem, say so (Stripe will retry).
            WebhookError::NoSecret => {
                tracing::error!("a Stripe webhook arrived but no webhook secret is configured");
                HttpError::new(
                    ErrorCode::Unavailable,
                    "webhooks are not configured on this server",
                )
            }
            other => {
                tracing::error!(cause = %crate::errors::cause_chain(&other), "webhook could not be stored");
                HttpError::new(
                    ErrorCode::Unavailable,
                    "the webhook could not be stored now; redeliver it",
                )
            }
        },
    }
}

/// `POST /v1/webhooks/stripe`: 200 for stored or duplicate events (a hint, not yet applied), 400 for
/// bad signatures.
pub async fn stripe(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, HttpError> {
    let body = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            HttpError::new(
                ErrorCode::BodyTooLarge,
                format!("webhook bodies are at most {BODY_LIMIT_BYTES} bytes"),
            )
        } else {
            HttpError::new(ErrorCode::WebhookPayloadInvalid, e.body_text())
        }
    })?;
    let signature = headers.get(SIGNATURE_HEADER).and_then(|v| v.to_str().ok());
    let outcome = webhooks::ingest(
        state.ledger().as_ref(),
        &state.config().webhook_secrets,
        signature,
        &body,
        state.now(),
    )
    .await
    .map_err(|e| {
        state.metrics().record_verify_failure(&e);
        refuse(e)
    })?;
    Ok(Json(json!({
        "received": true,
        "event_id": outcome.event_id,
        "duplicate": outcome.duplicate,
        "operation_id": outcome.operation.map(|o| o.as_str().to_string()),
        // A hint, not applied: the reconciler checks it against the processor (docs/api.md).
        "pending_check": outcome.pending_check,
    })))
}

/// Body limit of the Adyen route: the notification parser's payload limit.
pub const ADYEN_BODY_LIMIT_BYTES: usize = adyen_webhook::PAYLOAD_LEN_MAX;

fn refuse_adyen(e: AdyenWebhookError) -> HttpError {
    let message = format!("{} ({})", e, e.code());
    match e {
        AdyenWebhookError::MalformedPayload(_) => {
            HttpError::new(ErrorCode::WebhookPayloadInvalid, message)
        }
        AdyenWebhookError::MissingSignature
        | AdyenWebhookError::BadSignature
        | AdyenWebhookError::WrongMerchantAccount => {
            HttpError::new(ErrorCode::WebhookSignatureInvalid, message)
        }
        AdyenWebhookError::PayloadTooLarge => HttpError::new(ErrorCode::BodyTooLarge, message),
        AdyenWebhookError::NoKey => {
            tracing::error!("an Adyen notification arrived but no Adyen HMAC key is configured");
            HttpError::new(
                ErrorCode::Unavailable,
                "Adyen notifications are not configured on this server",
            )
        }
        other @ AdyenWebhookError::Ledger(_) => {
            tracing::error!(cause = %crate::errors::cause_chain(&other), "adyen notification could not be stored");
            HttpError::new(
                ErrorCode::Unavailable,
                "the notification could not be stored now; redeliver it",
            )
        }
    }
}

/// `POST /v1/webhooks/adyen`: `[accepted]` once every item is stored (or a duplicate); 400 with
/// nothing stored when any item's signature or merchant account is wrong.
pub async fn adyen(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<&'static str, HttpError> {
    let body = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            HttpError::new(
                ErrorCode::BodyTooLarge,
                format!("notification bodies are at most {ADYEN_BODY_LIMIT_BYTES} bytes"),
            )
        } else {
            HttpError::new(ErrorCode::WebhookPayloadInvalid, e.body_text())
        }
    })?;
    let config = state.config();
    webhooks::ingest_adyen(
        state.ledger().as_ref(),
        config.adyen_hmac_key.as_deref(),
        config.adyen_merchant_account.as_deref(),
        &body,
        state.now(),
    )
    .await
    .map_err(refuse_adyen)?;
    Ok(adyen_webhook::ACCEPTED)
}

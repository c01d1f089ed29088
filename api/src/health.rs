//! Liveness (`/healthz`: the process answers) and readiness (`/readyz`: the ledger answers).

use crate::app::AppState;
use crate::errors::{ErrorCode, HttpError, cause_chain};
use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

/// `GET /healthz`: always 200 while the process serves.
pub async fn live() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /readyz`: 200 when the ledger answers a cheap query, 503 `unavailable` otherwise.
pub async fn ready(State(state): State<AppState>) -> Result<Json<Value>, HttpError> {
    match state.ledger().ping().await {
        Ok(_) => Ok(Json(
            json!({"status": "ready", "store": state.ledger().store()}),
        )),
        Err(e) => {
            tracing::warn!(cause = %cause_chain(&e), "readiness check failed");
            Err(HttpError::new(
                ErrorCode::Unavailable,
                "the ledger is not reachable",
            ))
        }
    }
}

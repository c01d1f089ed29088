//! Liveness (`/healthz`: the process answers) and readiness (`/readyz`: the ledger takes a write).

use crate::errors::{ErrorCode, HttpError, cause_chain};
use crate::state::AppState;
use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

/// `/healthz` and `/readyz`.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(live))
        .route("/readyz", get(ready))
}

/// `GET /healthz`: always 200 while the process serves.
pub async fn live() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /readyz`: 200 when the ledger commits a one-row write and has room for new rows (SQLite:
/// pages left; Postgres: a write that needs a new page, rolled back: `Operations::probe_write`),
/// 503 `unavailable` otherwise, also when the database does not answer within
/// `READY_PROBE_TIMEOUT`. A ledger that answers reads but cannot store a create (a full disk) must
/// take its instance out of rotation.
pub async fn ready(State(state): State<AppState>) -> Result<Json<Value>, HttpError> {
    match state.ledger().probe_write(state.now()).await {
        Ok(_) => Ok(Json(
            json!({"status": "ready", "store": state.ledger().store()}),
        )),
        Err(e) => {
            tracing::warn!(cause = %cause_chain(&e), "readiness check failed");
            Err(HttpError::new(
                ErrorCode::Unavailable,
                "the ledger does not take writes",
            ))
        }
    }
}

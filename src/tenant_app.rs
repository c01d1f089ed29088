//! A stand-in for a tenant's own app, in process, for `payonce serve`: it receives payonce's signed
//! approval requests at its notification endpoint, checks their signature, and "texts" the
//! customer by printing the link and one-time code to this console. Only whoever reads the console
//! (the person trying payonce) sees a code; an assistant holding an API key does not. A real tenant
//! delivers by email or SMS instead (docs/runbook.md).

use anyhow::Context;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use payonce_core::clock::{Clock, SystemClock};
use payonce_core::signing::{SIGNATURE_HEADER, TIMESTAMP_TOLERANCE_S, verify};
use std::sync::Arc;
use tokio::sync::watch;

/// Largest notification body read.
const BODY_LEN_MAX: usize = 16 * 1024;

#[derive(Clone)]
struct AppState {
    secret: Arc<str>,
}

/// Starts the app on `listener` until `stop` turns true; returns the task.
pub fn start(
    listener: tokio::net::TcpListener,
    secret: String,
    mut stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let state = AppState {
        secret: secret.into(),
    };
    let app = Router::new()
        .route("/payonce/notifications", post(receive))
        .layer(axum::extract::DefaultBodyLimit::max(BODY_LEN_MAX))
        .with_state(state);
    tokio::spawn(async move {
        let stopped = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        if let Err(error) = axum::serve(listener, app)
            .with_graceful_shutdown(stopped)
            .await
        {
            tracing::error!(%error, "the demo tenant app stopped");
        }
    })
}

/// Binds the app's listener on loopback; returns it with its notification URL.
pub async fn bind() -> anyhow::Result<(tokio::net::TcpListener, String)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding the demo tenant app")?;
    let addr = listener.local_addr()?;
    Ok((listener, format!("http://{addr}/payonce/notifications")))
}

async fn receive(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let signature = headers
        .get(SIGNATURE_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let now_s = SystemClock.now().as_millis().div_euclid(1000);
    if verify(
        &state.secret,
        signature,
        &body,
        now_s,
        TIMESTAMP_TOLERANCE_S,
    )
    .is_err()
    {
        return StatusCode::UNAUTHORIZED;
    }
    let Ok(request) = serde_json::from_slice::<serde_json::Value>(&body) else {
        return StatusCode::BAD_REQUEST;
    };
    let field = |k: &str| request[k].as_str().unwrap_or("").to_string();
    // Marked so it stands out among the log lines: it is the one line the person trying payonce
    // must act on.
    println!(
        ">>> [tenant app] to customer {}: please confirm {} for invoice {} at {}{}",
        field("customer"),
        field("amount"),
        field("invoice"),
        field("confirmation_url"),
        match request["code"].as_str() {
            Some(code) => format!(" with code {code}"),
            None => String::new(),
        }
    );
    StatusCode::NO_CONTENT
}

//! The top of the api: the router, which assembles the routes of each audience, and the server:
//! bind, log the bound address, serve through the accept loop (`listener`), stop on the shutdown
//! signal after in-flight requests finish. Only `lib.rs` uses this module; no module imports it.

use crate::config::{ApiConfig, ConfigError, REQUEST_TIMEOUT};
use crate::errors::{ErrorCode, HttpError};
use crate::listener::ConnectionLimits;
use crate::state::AppState;
use crate::{assistants, confirm, console, health, metrics, openapi, operations, webhooks};
use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use payonce_core::clock::SharedClock;
use payonce_ledger::TenantLedger;
use payonce_processor::Processors;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Accepting or serving connections failed.
    #[error("serving HTTP failed")]
    Serve(#[source] std::io::Error),
    /// The configuration is refused (e.g. a published webhook secret).
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// Every route of the API (listed, with their roles, in docs/api.md and api/openapi.json): each
/// audience's routes, then what applies to all of them (fallbacks, body limit, time limit, counting).
pub fn router(state: AppState) -> Router {
    let api = Router::new()
        // The platform's: probes, scrapes, the API's description.
        .merge(health::routes())
        .merge(metrics::routes())
        .merge(openapi::routes())
        // Callers and services.
        .merge(operations::routes())
        // Assistants.
        .merge(assistants::routes(&state))
        // Processors.
        .merge(webhooks::routes())
        // Customers.
        .merge(confirm::routes())
        // On-call.
        .merge(console::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(state.config().body_limit_bytes))
        .layer(middleware::from_fn(time_limit))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            metrics::count,
        ));
    api.with_state(state)
}

async fn not_found() -> HttpError {
    HttpError::new(ErrorCode::NotFound, "no such route; see /openapi.json")
}

async fn method_not_allowed() -> HttpError {
    HttpError::new(
        ErrorCode::MethodNotAllowed,
        "this route does not take that method; see /openapi.json",
    )
}

/// Answers 503 `request_timeout` when a handler takes longer than [`REQUEST_TIMEOUT`] to produce its
/// response head. Dropping the handler is safe: every ledger method is one atomic statement or
/// transaction, and the ledger guards against cancelled transactions.
async fn time_limit(request: Request, next: Next) -> Response {
    match tokio::time::timeout(REQUEST_TIMEOUT, next.run(request)).await {
        Ok(response) => response,
        Err(_) => HttpError::new(
            ErrorCode::RequestTimeout,
            "the request took too long; retry it",
        )
        .into_response(),
    }
}

/// Binds `config.listen` and serves until `shutdown` resolves.
pub async fn serve(
    config: ApiConfig,
    ledger: Arc<dyn TenantLedger>,
    clock: SharedClock,
    processors: Option<Processors>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ApiError> {
    let addr = config.listen;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ApiError::Bind { addr, source })?;
    let mut state = AppState::new(ledger, clock, config);
    if let Some(processors) = processors {
        state = state.with_processors(processors);
    }
    serve_listener(listener, state, shutdown).await
}

/// Serves on an already bound listener (tests bind 127.0.0.1:0 first to learn the port).
pub async fn serve_listener(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ApiError> {
    let addr = listener.local_addr().map_err(ApiError::Serve)?;
    tracing::info!(%addr, store = state.ledger().store(), "api listening on http://{addr}");
    state.config().check()?;
    let token = state.shutdown_token().clone();
    let limits = ConnectionLimits {
        header_read_timeout: state.config().header_read_timeout,
        connections_max: state.config().connections_max,
    };
    crate::listener::serve(listener, router(state), limits, async move {
        shutdown.await;
        token.cancel();
    })
    .await
    .map_err(ApiError::Serve)?;
    tracing::info!(%addr, "api stopped");
    Ok(())
}

//! The state every handler reads, the router that ties the modules' routes together, and the server:
//! bind, log the bound address, stop on the shutdown signal after in-flight requests finish.

use crate::config::{ApiConfig, REQUEST_TIMEOUT};
use crate::errors::{ErrorCode, HttpError};
use crate::metrics::ApiMetrics;
use crate::{
    confirm, console, formats, health, intake, mcp, metrics, openapi, operations, profile, refunds,
    webhooks,
};
use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use payonce_shared::clock::{SharedClock, Timestamp};
use payonce_shared::ledger::{ApiKeyRecord, TenantLedger};
use payonce_shared::processor::{Processor, Processors};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

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
    Config(#[from] crate::config::ConfigError),
}

/// What every handler shares: the ledger, the clock, the settings.
#[derive(Clone)]
pub struct AppState {
    /// The tenant-facing ledger: no queue, no recovery, no reads across tenants.
    ledger: Arc<dyn TenantLedger>,
    clock: SharedClock,
    config: Arc<ApiConfig>,
    /// Cancelled at shutdown so long-lived MCP streams end and graceful shutdown can finish.
    shutdown: CancellationToken,
    /// Responses and latency, for `/metrics`.
    metrics: Arc<ApiMetrics>,
    /// Deliveries to tenants' notification endpoints (`None` if its client could not be built).
    notifier: Option<crate::notify::Notifier>,
    /// The processors, read only for what the customer's page and the console show (a payment
    /// method's card, the object behind a reference), each operation through its own processor's
    /// adapter; `None`: pages go without them. The api never submits anything.
    processors: Option<Processors>,
    /// Single creates with their approval, written in groups ([`crate::group_commit`]).
    group_commit: Arc<crate::group_commit::GroupCommit>,
    /// API keys read by digest, one read for the requests of a key that arrive together
    /// ([`crate::shared_reads`]).
    key_reads: Arc<crate::shared_reads::SharedReads<Option<ApiKeyRecord>>>,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("store", &self.ledger.store())
            .field("config", &self.config)
            .finish()
    }
}

impl AppState {
    /// Builds the state from its parts.
    pub fn new(ledger: Arc<dyn TenantLedger>, clock: SharedClock, config: ApiConfig) -> Self {
        AppState {
            ledger,
            clock,
            config: Arc::new(config),
            shutdown: CancellationToken::new(),
            metrics: Arc::new(ApiMetrics::default()),
            notifier: crate::notify::Notifier::new()
                .inspect_err(|e| tracing::error!(error = %e, "no notification client: customer requests will not be sent"))
                .ok(),
            processors: None,
            group_commit: Arc::default(),
            key_reads: Arc::default(),
        }
    }
    /// The same state, reading cards from `processor` for the confirmation page.
    pub fn with_processor(self, processor: Arc<dyn Processor>) -> Self {
        self.with_processors(Processors::single(processor))
    }
    /// The same state, reading from each operation's own processor among `processors`.
    pub fn with_processors(mut self, processors: Processors) -> Self {
        self.processors = Some(processors);
        self
    }
    /// The adapter of `op`'s processor, if this api is configured for it (never another's: a
    /// reference or payment method means nothing at a processor that did not issue it).
    pub fn processor_for(
        &self,
        op: &payonce_shared::ledger::Operation,
    ) -> Option<&Arc<dyn Processor>> {
        // Called by path: the route-table test reads every method call of that name here as a route.
        Processors::route(self.processors.as_ref()?, op).ok()
    }
    /// The tenant-facing ledger.
    pub fn ledger(&self) -> &Arc<dyn TenantLedger> {
        &self.ledger
    }
    /// Now, from the injected clock.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }
    /// Now as stored milliseconds, for the verification and console stores, whose times are still
    /// plain integers.
    pub fn now_ms(&self) -> i64 {
        self.clock.now().as_millis()
    }
    /// The settings.
    pub fn config(&self) -> &ApiConfig {
        &self.config
    }
    /// The token cancelled at shutdown.
    pub fn shutdown_token(&self) -> &CancellationToken {
        &self.shutdown
    }
    /// The API's counters.
    pub fn metrics(&self) -> &ApiMetrics {
        &self.metrics
    }
    /// The single creates waiting to be written with their neighbours.
    pub fn group_commit(&self) -> &Arc<crate::group_commit::GroupCommit> {
        &self.group_commit
    }
    /// The API keys' shared reads.
    pub fn key_reads(&self) -> &Arc<crate::shared_reads::SharedReads<Option<ApiKeyRecord>>> {
        &self.key_reads
    }
    /// The notification client.
    pub fn notifier(&self) -> Option<&crate::notify::Notifier> {
        self.notifier.as_ref()
    }
}

/// Every route of the API (listed, with their roles, in docs/api.md and api/openapi.json).
pub fn router(state: AppState) -> Router {
    let api = Router::new()
        .route("/healthz", get(health::live))
        .route("/readyz", get(health::ready))
        .route("/metrics", get(metrics::render))
        .route("/openapi.json", get(openapi::document))
        .route("/v1/operations", post(operations::create))
        .route(
            "/v1/operations/batch",
            post(intake::create_batch).layer(DefaultBodyLimit::max(intake::BATCH_BODY_LIMIT_BYTES)),
        )
        .route("/v1/operations/{id}", get(operations::read))
        .route(
            "/v1/operations/{id}/approval-requests",
            post(operations::request_approval),
        )
        .route("/v1/operations/{id}/approve", post(operations::approve))
        .route("/v1/operations/{id}/cancel", post(operations::cancel))
        .route("/v1/operations/{id}/execute", post(operations::execute))
        .route("/v1/operations/{id}/refunds", get(refunds::of_payment))
        .route("/v1/refunds", post(refunds::create))
        .route("/v1/refunds/{id}/approve", post(refunds::approve))
        .route("/v1/tenant/profile", get(profile::get).put(profile::put))
        .route("/v1/tools", get(formats::list))
        .route("/v1/tool-calls", post(formats::call))
        .route(
            "/v1/webhooks/stripe",
            post(webhooks::stripe).layer(DefaultBodyLimit::max(webhooks::BODY_LIMIT_BYTES)),
        )
        .route(
            "/v1/webhooks/adyen",
            post(webhooks::adyen).layer(DefaultBodyLimit::max(webhooks::ADYEN_BODY_LIMIT_BYTES)),
        )
        .merge(confirm::routes())
        .merge(console::routes())
        .merge(mcp::routes(&state))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(state.config.body_limit_bytes))
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
    tracing::info!(%addr, store = state.ledger.store(), "api listening on http://{addr}");
    state.config.check()?;
    let token = state.shutdown.clone();
    let limits = crate::listener::ConnectionLimits {
        header_read_timeout: state.config.header_read_timeout,
        connections_max: state.config.connections_max,
    };
    crate::listener::serve(listener, router(state), limits, async move {
        shutdown.await;
        token.cancel();
    })
    .await?;
    tracing::info!(%addr, "api stopped");
    Ok(())
}

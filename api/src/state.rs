//! The state every handler reads: the tenant-facing ledger, the clock, the settings, and the
//! process-wide parts built once (counters, the notification client, the group commit of single
//! creates, the API keys' shared reads). Built once per process by [`AppState::new`]; nothing in it
//! is read from a request. It names no route: the router lives in `server`, above every module.

use crate::config::ApiConfig;
use crate::counters::ApiMetrics;
use crate::group_commit::GroupCommit;
use crate::notify::Notifier;
use crate::shared_reads::SharedReads;
use payonce_core::clock::{SharedClock, Timestamp};
use payonce_ledger::{ApiKeyRecord, TenantLedger};
use payonce_processor::{Processor, Processors};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

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
    notifier: Option<Notifier>,
    /// The processors, read only for what the customer's page and the console show (a payment
    /// method's card, the object behind a reference), each operation through its own processor's
    /// adapter; `None`: pages go without them. The api never submits anything.
    processors: Option<Processors>,
    /// Single creates with their approval, written in groups ([`crate::group_commit`]).
    group_commit: Arc<GroupCommit>,
    /// API keys read by digest, one read for the requests of a key that arrive together
    /// ([`crate::shared_reads`]).
    key_reads: Arc<SharedReads<Option<ApiKeyRecord>>>,
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
        let group_commit = GroupCommit::new(ledger.clone(), clock.clone(), config.approval_ttl);
        AppState {
            ledger,
            clock,
            config: Arc::new(config),
            shutdown: CancellationToken::new(),
            metrics: Arc::new(ApiMetrics::default()),
            notifier: Notifier::new()
                .inspect_err(|e| tracing::error!(error = %e, "no notification client: customer requests will not be sent"))
                .ok(),
            processors: None,
            group_commit: Arc::new(group_commit),
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
    pub fn processor_for(&self, op: &payonce_ledger::Operation) -> Option<&Arc<dyn Processor>> {
        // Called by path: the route-table test reads every method call of that name here as a route.
        Processors::route(self.processors.as_ref()?, op).ok()
    }
    /// The processor an operation naming none is served by, if this api is configured for one.
    pub fn default_processor(&self) -> Option<payonce_processor::ProcessorKind> {
        self.processors.as_ref().map(Processors::default_kind)
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
    pub fn group_commit(&self) -> &Arc<GroupCommit> {
        &self.group_commit
    }
    /// The API keys' shared reads.
    pub fn key_reads(&self) -> &Arc<SharedReads<Option<ApiKeyRecord>>> {
        &self.key_reads
    }
    /// The notification client.
    pub fn notifier(&self) -> Option<&Notifier> {
        self.notifier.as_ref()
    }
}

//! The durable execution ledger: one interface per concern, two stores (Postgres for production,
//! SQLite embedded), one conformance suite. The ledger is the queue: an approved row is the job.
//!
//! Every write out of `executing` is fenced by the attempt; every transition is logged by a database
//! trigger from the `last_event`/`last_actor`/`last_detail` columns each statement sets.
//!
//! Layout: `interface.rs` holds one trait per concern ([`Operations`], [`Refunds`],
//! [`Inspection`], [`Approvals`], [`Queue`], [`Recovery`], [`Webhooks`], [`HintChecks`],
//! [`ToolCalls`], [`Keys`]) and [`Ledger`], all of them; each is implemented for [`Store`] in the
//! module of the same name, with its SQL (a state change is written where its trait method is
//! implemented, through a `moves.rs` statement or `recovery.rs::write_plan`);
//! `store.rs` holds the store itself and `dialect.rs` what differs between Postgres and SQLite;
//! `statement.rs` (a `Stmt` and its `Arg`s, and the one place they meet sqlx)
//! and `row.rs` (reading a row of either store) are the layer that keeps module code free of
//! sqlx's bounds; `error.rs`, `values.rs`, `requests.rs` and `record.rs` the types the traits speak
//! (`record.rs` also the column lists every statement names instead of `*`); `ownership.rs` the rows an
//! operation owns, read from the catalog for the prune; `migrate.rs` the
//! migrations `payonce migrate` applies, and `schema.rs` the check a serving process makes instead
//! (docs/decisions/004-expand-contract-migrations.md).

pub mod approvals;
pub mod console;
mod dialect;
mod error;
pub mod identity;
pub mod intake;
mod interface;
mod keys;
pub mod lanes;
pub mod lost_rows;
mod migrate;
mod moves;
mod operations;
pub mod outage;
pub mod ownership;
pub mod postgres;
pub mod profiles;
mod queue;
mod record;
mod recovery;
pub mod refunds;
pub mod report;
mod requests;
pub mod retention;
mod row;
pub mod schema;
pub mod sqlite;
mod statement;
mod store;
pub mod time;
mod tool_calls;
mod values;
pub mod verification;
mod webhooks;

pub use dialect::Dialect;
pub use error::{
    LedgerError, LimitError, SCHEMA_FAILURE_UNREADY, recent_schema_failure, storage_failures,
    storage_failures_counter,
};
pub use interface::{
    Approvals, HintChecks, Inspection, Keys, Ledger, LedgerTime, Operations, Queue, Recovery,
    Refunds, TenantLedger, ToolCalls, Webhooks,
};
pub use payonce_core::operation::{Claimed, Declined, Operation, Paid, Recorded, StatusCount};
pub use record::{ApiKeyRecord, Approval, ApprovalLink, ExpiredLease, OperationEvent, Role};
pub use requests::{
    ApplyReport, Cancel, ClaimUnknown, CustomerDecline, DeferCheck, Escalate, ExpireLease,
    ExpireLeases, Fence, LeaseHolder, LookupFound, MaintenanceLease, NewProcessorEvent,
    NewToolCall, ProcessorEventKey, RecordLookups, RecordOutcome, Resolve, RevokeKey, RotateKey,
    ToolAnswer,
};
pub use store::Store;
pub use values::{
    Applied, Created, LOST_ROW_RECREATED, ListFilter, NewApproval, NewOperation, Report,
    Resolution, StoredProcessorEvent,
};

use std::sync::Arc;
use std::time::Duration;

/// Largest claim batch a caller may ask for.
pub const CLAIM_BATCH_MAX: u32 = 1_000;
/// Largest sweep or listing page.
pub const PAGE_MAX: u32 = 10_000;
/// Longest free-text reason or detail written to the event log.
pub const DETAIL_LEN_MAX: usize = 2_000;
/// Fewest pages a SQLite ledger must still be able to grow by (under `max_page_count`, free pages
/// included) to call itself ready: readiness should fail while a few writes still fit (a create
/// touches a handful of pages), not after they started failing. 32 pages are 128 KiB at the
/// default page size.
pub const WRITE_HEADROOM_PAGES_MIN: i64 = 32;

/// Longest the readiness probe (`Operations::probe_write`) waits for the database: a `/readyz`
/// must answer 503 within 2 s when the database does not answer (issue 50), and a load balancer's
/// check times out on its own after a few seconds.
pub const READY_PROBE_TIMEOUT: Duration = Duration::from_millis(1_500);

/// Shared handle to a whole ledger store (the binaries hand out the narrow interfaces from it).
pub type SharedLedger = Arc<dyn Ledger>;

/// Truncates free text to [`DETAIL_LEN_MAX`] characters for the event log.
pub(crate) fn bounded(detail: &str) -> String {
    detail.chars().take(DETAIL_LEN_MAX).collect()
}

/// How long [`connect`] keeps trying a Postgres that is down, starting or out of connection slots
/// (the binaries pass their `db_connect_timeout_ms` to [`connect_within`]).
pub const CONNECT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);

/// Opens the store a URL names: `postgres://…` or `sqlite:…` (`sqlite::memory:` for tests), and
/// runs its migrations (`payonce migrate`, tools and tests; serving processes use
/// [`connect_serving`]), trying an unavailable Postgres for up to [`CONNECT_TIMEOUT_DEFAULT`].
pub async fn connect(url: &str, max_connections: u32) -> Result<SharedLedger, LedgerError> {
    connect_within(url, max_connections, CONNECT_TIMEOUT_DEFAULT).await
}

/// [`connect`], trying an unavailable Postgres (down, starting, out of connection slots,
/// unreachable) with backoff for up to `connect_timeout` before giving up with
/// [`LedgerError::Connect`].
pub async fn connect_within(
    url: &str,
    max_connections: u32,
    connect_timeout: Duration,
) -> Result<SharedLedger, LedgerError> {
    connect_routed(
        url,
        &postgres::Route::default(),
        max_connections,
        connect_timeout,
    )
    .await
}

/// [`connect_within`], a Postgres reached through `route` (a pooler, a direct URL beside it:
/// [`postgres::Route`]); SQLite ignores it.
pub async fn connect_routed(
    url: &str,
    route: &postgres::Route,
    max_connections: u32,
    connect_timeout: Duration,
) -> Result<SharedLedger, LedgerError> {
    open_url(url, route, max_connections, connect_timeout, false).await
}

/// Opens the store a URL names as a serving process (`api`, `worker`, `reconciler`, `serve`, the
/// on-call commands) does: a Postgres ledger's schema is checked, never migrated
/// ([`postgres::PostgresLedger::connect_serving`]: behind refuses with "run payonce migrate");
/// a SQLite ledger, one process's own file, is migrated as [`connect_within`] does.
pub async fn connect_serving(
    url: &str,
    route: &postgres::Route,
    max_connections: u32,
    connect_timeout: Duration,
) -> Result<SharedLedger, LedgerError> {
    open_url(url, route, max_connections, connect_timeout, true).await
}

/// The store `url` names: a Postgres ledger migrated or, `serving`, only checked; a SQLite ledger
/// migrated either way (its file is one process's own).
async fn open_url(
    url: &str,
    route: &postgres::Route,
    max_connections: u32,
    connect_timeout: Duration,
    serving: bool,
) -> Result<SharedLedger, LedgerError> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let (max, timeout) = (max_connections, connect_timeout);
        Ok(Arc::new(if serving {
            postgres::PostgresLedger::connect_serving(url, route, max, timeout).await?
        } else {
            postgres::PostgresLedger::connect_routed(url, route, max, timeout).await?
        }))
    } else if url.starts_with("sqlite:") {
        Ok(Arc::new(sqlite::SqliteLedger::connect(url).await?))
    } else {
        Err(LimitError::DatabaseUrl(url.to_string()).into())
    }
}

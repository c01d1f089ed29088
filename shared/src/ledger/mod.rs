//! The durable execution ledger: one trait, two stores (Postgres for production, SQLite embedded),
//! one conformance suite. The ledger is the queue: an approved row is the job.
//!
//! Every write out of `executing` is fenced by the attempt; every transition is logged by a database
//! trigger from the `last_event`/`last_actor`/`last_detail` columns each statement sets.
//!
//! Layout: this file holds the [`Ledger`] trait; `store.rs` its one implementation and the list of
//! modules by concern; `dialect.rs` what differs between the stores; `error.rs` and `values.rs` the
//! types the trait speaks.

mod approvals;
pub mod console;
mod dialect;
mod error;
mod keys;
mod migrate;
mod moves;
mod operations;
pub mod postgres;
mod queue;
mod record;
mod recovery;
pub mod refunds;
pub mod report;
pub mod sqlite;
mod store;
mod tool_calls;
mod values;
pub mod verification;
mod webhooks;

pub use dialect::Dialect;
pub use error::{LedgerError, LimitError};
pub use record::{
    ApiKeyRecord, Approval, ApprovalLink, Claimed, ExpiredLease, Operation, OperationEvent, Role,
    StatusCount,
};
pub use store::Store;
pub use values::{
    Applied, Created, ListFilter, NewApproval, NewOperation, Recorded, Report, Resolution,
    StoredProcessorEvent,
};

use crate::id::{OperationId, TenantId};
use crate::state::Status;
use async_trait::async_trait;
use std::sync::Arc;

/// Largest claim batch a caller may ask for.
pub const CLAIM_BATCH_MAX: u32 = 1_000;
/// Largest sweep or listing page.
pub const PAGE_MAX: u32 = 10_000;
/// Longest free-text reason or detail written to the event log.
pub const DETAIL_LEN_MAX: usize = 2_000;

/// Shared handle to a ledger store.
pub type SharedLedger = Arc<dyn Ledger>;

/// The ledger. Every method is atomic; none holds a transaction across a network call.
#[async_trait]
pub trait Ledger: Send + Sync {
    /// Store name (`postgres`, `sqlite`).
    fn store(&self) -> &'static str;
    /// The customer verification store (migration 0002) on the same database.
    fn verification(&self) -> &dyn verification::VerificationLedger;
    /// The on-call console's store (migration 0007) on the same database.
    fn console(&self) -> &dyn console::ConsoleLedger;

    /// Creates the operation, or returns the existing one for the same business key and details.
    /// Different details under an existing business key: [`LedgerError::Conflict`], never an update.
    /// A refund is created only under the over-refund guard (`refunds.rs`): its payment must be a
    /// succeeded payment of the tenant matching the refund's details ([`LedgerError::NotRefundable`],
    /// [`LedgerError::NotFound`]) with enough left unrefunded ([`LedgerError::OverRefund`]).
    async fn create_or_get(&self, new: NewOperation, now_ms: i64) -> Result<Created, LedgerError>;
    /// The refund operations of a payment in the tenant, oldest first, at most `limit` (capped at
    /// [`PAGE_MAX`]).
    async fn refunds_of(
        &self,
        tenant: &TenantId,
        payment: &OperationId,
        limit: u32,
    ) -> Result<Vec<Operation>, LedgerError>;
    /// How much of a payment in the tenant its refunds have given back or still hold.
    async fn refund_totals(
        &self,
        tenant: &TenantId,
        payment: &OperationId,
    ) -> Result<refunds::RefundTotals, LedgerError>;
    /// Reads an operation within a tenant.
    async fn get(&self, tenant: &TenantId, id: &OperationId) -> Result<Operation, LedgerError>;
    /// Reads an operation without tenant scope (workers, reconciler, on-call).
    async fn get_unscoped(&self, id: &OperationId) -> Result<Operation, LedgerError>;
    /// The operation's audit trail, oldest first.
    async fn events(&self, id: &OperationId) -> Result<Vec<OperationEvent>, LedgerError>;

    /// Records an approval and enqueues the operation in one transaction, only if the approved hash
    /// equals the current details hash.
    async fn approve(
        &self,
        tenant: &TenantId,
        id: &OperationId,
        approval: NewApproval,
        now_ms: i64,
    ) -> Result<Operation, LedgerError>;
    /// The newest unrevoked approval of the operation, if any.
    async fn latest_approval(&self, id: &OperationId) -> Result<Option<Approval>, LedgerError>;
    /// Withdraws an operation that has not started executing.
    async fn cancel(
        &self,
        tenant: &TenantId,
        id: &OperationId,
        actor: &str,
        now_ms: i64,
    ) -> Result<Operation, LedgerError>;

    /// Claims up to `batch` ready operations for `owner` with a lease; bumps each attempt.
    async fn claim(
        &self,
        owner: &str,
        batch: u32,
        lease_ttl_ms: i64,
        now_ms: i64,
    ) -> Result<Vec<Claimed>, LedgerError>;
    /// Extends the unexpired leases `owner` holds on the operations in `held` (the work it is still
    /// doing; a lease it gave up on must lapse to the reconciler); returns the (id, attempt) pairs
    /// renewed.
    async fn renew(
        &self,
        owner: &str,
        held: &[OperationId],
        lease_ttl_ms: i64,
        now_ms: i64,
    ) -> Result<Vec<(OperationId, i64)>, LedgerError>;
    /// Records, committed, that a request is about to leave for the processor. Fenced; refused
    /// once the lease has expired.
    async fn mark_submitting(
        &self,
        id: &OperationId,
        attempt: i64,
        now_ms: i64,
    ) -> Result<(), LedgerError>;
    /// Records a batch of `mark_submitting` in one transaction; returns which succeeded.
    async fn mark_submitting_batch(
        &self,
        items: &[(OperationId, i64)],
        now_ms: i64,
    ) -> Result<Vec<bool>, LedgerError>;
    /// Gives the lease back before anything was sent (shutdown). Fenced.
    async fn release(
        &self,
        id: &OperationId,
        attempt: i64,
        actor: &str,
        now_ms: i64,
    ) -> Result<(), LedgerError>;
    /// Records an outcome, fenced by `attempt` and `status = 'executing'`.
    async fn record(
        &self,
        id: &OperationId,
        attempt: i64,
        outcome: &Recorded,
        actor: &str,
        now_ms: i64,
    ) -> Result<Operation, LedgerError>;
    /// Records many outcomes in one transaction; each is fenced on its own. Returns per item
    /// whether it was recorded.
    async fn record_batch(
        &self,
        items: &[(OperationId, i64, Recorded)],
        actor: &str,
        now_ms: i64,
    ) -> Result<Vec<bool>, LedgerError>;

    /// Expired leases, oldest first (served by a partial index).
    async fn expired_leases(
        &self,
        now_ms: i64,
        limit: u32,
    ) -> Result<Vec<ExpiredLease>, LedgerError>;
    /// Moves an expired lease on: back to `ready` if nothing was submitted, to `unknown` if a
    /// submission was recorded. Fenced by the attempt the sweep saw.
    async fn expire_lease(
        &self,
        lease: &ExpiredLease,
        actor: &str,
        now_ms: i64,
        next_check_at_ms: i64,
    ) -> Result<Status, LedgerError>;
    /// Unknown operations whose check is due, soonest first (served by a partial index).
    async fn due_for_check(&self, now_ms: i64, limit: u32) -> Result<Vec<Operation>, LedgerError>;
    /// Schedules the next check of an unknown operation. Fenced by status and attempt.
    async fn defer_check(
        &self,
        id: &OperationId,
        attempt: i64,
        next_check_at_ms: i64,
        detail: &str,
        actor: &str,
        now_ms: i64,
    ) -> Result<(), LedgerError>;
    /// Takes a lease over an `unknown` operation so its owner may retry with the SAME key; `why`
    /// goes to the audit trail (same-key retry inside the window, or resubmission after it).
    async fn claim_unknown(
        &self,
        id: &OperationId,
        attempt: i64,
        owner: &str,
        lease_ttl_ms: i64,
        why: &str,
        now_ms: i64,
    ) -> Result<Claimed, LedgerError>;
    /// Moves an `unknown` operation to `needs_attention` with the reason. Fenced.
    async fn escalate(
        &self,
        id: &OperationId,
        attempt: i64,
        reason: &str,
        actor: &str,
        now_ms: i64,
    ) -> Result<(), LedgerError>;
    /// Applies a processor report in any arrival order, per the state machine.
    async fn apply_report(
        &self,
        id: &OperationId,
        report: &Report,
        source: &str,
        now_ms: i64,
    ) -> Result<Applied, LedgerError>;
    /// On-call resolution of an `unknown` or `needs_attention` operation; the reason is recorded.
    async fn resolve(
        &self,
        id: &OperationId,
        resolution: &Resolution,
        actor: &str,
        reason: &str,
        now_ms: i64,
    ) -> Result<Operation, LedgerError>;

    /// On-call listing, oldest update first.
    async fn list(&self, filter: &ListFilter) -> Result<Vec<Operation>, LedgerError>;
    /// One cheap round trip (`SELECT 1`), for readiness probes: unlike counting, its cost does not
    /// grow with the table.
    async fn ping(&self) -> Result<(), LedgerError>;
    /// Operations per state, and the oldest `updated_at` in each.
    async fn count_by_status(&self) -> Result<Vec<StatusCount>, LedgerError>;

    /// Stores a single-use confirmation link (only the token's hash), unless the operation already
    /// has `open_max` unused, unexpired links: then stores nothing and returns false. (Concurrent
    /// callers can overshoot the bound by their number; it bounds a retry loop, not a race.)
    async fn create_approval_link(
        &self,
        link: &ApprovalLink,
        open_max: u32,
    ) -> Result<bool, LedgerError>;
    /// Reads a link by token hash.
    async fn approval_link(&self, token_hash: &str) -> Result<Option<ApprovalLink>, LedgerError>;
    /// Marks a link used, once: true if this call used it.
    async fn use_approval_link(&self, token_hash: &str, now_ms: i64) -> Result<bool, LedgerError>;

    /// Stores a webhook once; false if (processor, event id) was already stored.
    async fn insert_processor_event(
        &self,
        processor: &str,
        event_id: &str,
        event_type: &str,
        operation: Option<&OperationId>,
        payload: &str,
        now_ms: i64,
    ) -> Result<bool, LedgerError>;
    /// Stored webhooks not yet checked against the processor, whose next check is due, oldest
    /// first, at most `limit` (served by a partial index).
    async fn pending_processor_events(
        &self,
        now_ms: i64,
        limit: u32,
    ) -> Result<Vec<StoredProcessorEvent>, LedgerError>;
    /// Leaves a stored webhook pending (the processor could not be asked): counts the try and
    /// puts the next one off until `check_after_ms`.
    async fn defer_processor_event(
        &self,
        processor: &str,
        event_id: &str,
        check_after_ms: i64,
        why: &str,
        now_ms: i64,
    ) -> Result<(), LedgerError>;
    /// Records what checking a stored webhook did; it is no longer pending.
    async fn mark_processor_event(
        &self,
        processor: &str,
        event_id: &str,
        outcome: &str,
        now_ms: i64,
    ) -> Result<(), LedgerError>;
    /// Records a provider tool call for correlation (never identity).
    async fn record_tool_call(
        &self,
        tenant: &TenantId,
        operation: Option<&OperationId>,
        provider: &str,
        provider_call_id: Option<&str>,
        tool: &str,
        now_ms: i64,
    ) -> Result<(), LedgerError>;
    /// Tool calls recorded for an operation: (provider, provider call id, tool).
    async fn tool_calls(
        &self,
        id: &OperationId,
    ) -> Result<Vec<(String, Option<String>, String)>, LedgerError>;

    /// Keeps `answer` as the answer to the tool call keyed `key` (with arguments `fingerprint`)
    /// unless the key already has one; returns the kept `(fingerprint, answer)` either way, so a
    /// concurrent first call and its retry agree on one answer.
    async fn keep_tool_answer(
        &self,
        tenant: &TenantId,
        key: &str,
        fingerprint: &str,
        answer: &str,
        now_ms: i64,
    ) -> Result<(String, String), LedgerError>;
    /// The `(fingerprint, answer)` kept for a tool-call key, if any.
    async fn tool_answer(
        &self,
        tenant: &TenantId,
        key: &str,
    ) -> Result<Option<(String, String)>, LedgerError>;

    /// Waits until new work may be ready (an approval was committed here or, on Postgres, anywhere),
    /// or until `max_wait` passes. Callers still poll: a wake-up can be missed.
    async fn wait_for_ready(&self, max_wait: std::time::Duration);

    /// Takes or renews the named maintenance lease (e.g. `sweep`) for `owner`; false if another
    /// owner holds an unexpired one.
    async fn try_maintenance_lease(
        &self,
        name: &str,
        owner: &str,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Result<bool, LedgerError>;
    /// Gives a maintenance lease back.
    async fn drop_maintenance_lease(&self, name: &str, owner: &str) -> Result<(), LedgerError>;

    /// Stores an API key's hash with its id, tenant, role and expiry.
    async fn insert_api_key(&self, key: &ApiKeyRecord) -> Result<(), LedgerError>;
    /// Finds the key whose secret hashes to `key_hash` if it is accepted at `now_ms`: unrevoked and
    /// unexpired.
    async fn find_api_key(
        &self,
        key_hash: &str,
        now_ms: i64,
    ) -> Result<Option<ApiKeyRecord>, LedgerError>;
    /// The key with public id `key_id`, in any state.
    async fn api_key(&self, key_id: &str) -> Result<Option<ApiKeyRecord>, LedgerError>;
    /// Keys, newest first, of one tenant or all; at most `limit` (capped at [`PAGE_MAX`]).
    async fn list_api_keys(
        &self,
        tenant: Option<&TenantId>,
        limit: u32,
    ) -> Result<Vec<ApiKeyRecord>, LedgerError>;
    /// Revokes a key. `Ok(false)`: it was already revoked (nothing changed); `NotFound`: no such id.
    async fn revoke_api_key(
        &self,
        key_id: &str,
        revoked_by: &str,
        reason: &str,
        now_ms: i64,
    ) -> Result<bool, LedgerError>;
    /// Rotation, in one transaction: stores `new` and makes the active key `old_id` expire at
    /// `old_until_ms` (or keep an earlier expiry), naming `new` as its replacement. `Ok(false)`: the
    /// old key is revoked, expired or already rotated (nothing changed); `NotFound`: no such id.
    async fn rotate_api_key(
        &self,
        old_id: &str,
        new: &ApiKeyRecord,
        old_until_ms: i64,
        now_ms: i64,
    ) -> Result<bool, LedgerError>;
    /// Records that the key was used at `now_ms` unless a use within `resolution_ms` is already
    /// recorded (so accepted requests write at most once per key per resolution).
    async fn touch_api_key(
        &self,
        key_id: &str,
        now_ms: i64,
        resolution_ms: i64,
    ) -> Result<(), LedgerError>;
}

/// Truncates free text to [`DETAIL_LEN_MAX`] characters for the event log.
pub(crate) fn bounded(detail: &str) -> String {
    detail.chars().take(DETAIL_LEN_MAX).collect()
}

/// Opens the store a URL names: `postgres://…` or `sqlite:…` (`sqlite::memory:` for tests), and
/// runs its migrations.
pub async fn connect(url: &str, max_connections: u32) -> Result<SharedLedger, LedgerError> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(
            postgres::PostgresLedger::connect(url, max_connections).await?,
        ))
    } else if url.starts_with("sqlite:") {
        Ok(Arc::new(sqlite::SqliteLedger::connect(url).await?))
    } else {
        Err(LimitError::DatabaseUrl(url.to_string()).into())
    }
}

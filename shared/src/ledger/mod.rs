//! The durable execution ledger: one trait, two stores (Postgres for production, SQLite embedded),
//! one conformance suite. The ledger is the queue: an approved row is the job.
//!
//! Every write out of `executing` is fenced by the attempt; every transition is logged by a database
//! trigger from the `last_event`/`last_actor`/`last_detail` columns each statement sets.

mod approvals;
mod dialect;
mod keys;
mod migrate;
mod moves;
mod operations;
pub mod postgres;
mod queue;
mod record;
mod recovery;
pub mod report;
pub mod sqlite;
mod store;
mod tool_calls;
pub mod verification;
mod webhooks;

pub use dialect::Dialect;
pub use record::{
    ApiKeyRecord, Approval, ApprovalLink, Claimed, ExpiredLease, Operation, OperationEvent, Role,
    StatusCount,
};
pub use store::Store;

use crate::details::{Details, DetailsHash};
use crate::id::{BusinessKey, OperationId, TenantId};
use crate::state::{IllegalTransition, Status};
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

/// What the ledger refuses, as callers branch on it.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The business key already names an operation with different details. Nothing was changed.
    #[error("business key already used for operation {existing} with different details")]
    Conflict {
        /// The operation that owns the business key.
        existing: OperationId,
    },
    /// No such operation in this tenant.
    #[error("operation not found")]
    NotFound,
    /// The approval's details hash is not the operation's current one.
    #[error("approval is for different details than the operation's current ones")]
    ApprovalMismatch,
    /// The operation's state does not allow the move.
    #[error("operation {id} is {status:?}: {why}")]
    WrongState {
        /// The operation.
        id: OperationId,
        /// Its current state.
        status: Status,
        /// What was refused.
        why: &'static str,
    },
    /// A fenced write lost: the attempt or state moved on (a stale worker, a racing reconciler).
    #[error("fenced write lost for {id} at attempt {attempt}")]
    Fenced {
        /// The operation.
        id: OperationId,
        /// The attempt the writer held.
        attempt: i64,
    },
    /// A caller asked for something outside a named limit; nothing was changed.
    #[error("limit exceeded: {0}")]
    Limit(#[from] LimitError),
    /// The state machine refused a move (a bug in the caller).
    #[error(transparent)]
    Illegal(#[from] IllegalTransition),
    /// A stored row could not be decoded (schema drift or corruption).
    #[error("stored row is invalid: {0}")]
    Corrupt(String),
    /// The database failed.
    #[error("database error")]
    Database(#[from] sqlx::Error),
}

/// Which named limit a request broke (the api answers each with `400 invalid_request`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// A claim asked for no rows or more than [`CLAIM_BATCH_MAX`].
    #[error("claim batch must be 1..={CLAIM_BATCH_MAX}")]
    ClaimBatch,
    /// A lease of zero or negative length.
    #[error("lease TTL must be positive")]
    LeaseTtl,
    /// A listing page of no rows or more than [`PAGE_MAX`].
    #[error("page size must be 1..={PAGE_MAX}")]
    PageSize,
    /// A sweep page of no rows or more than [`PAGE_MAX`].
    #[error("sweep batch must be 1..={PAGE_MAX}")]
    SweepBatch,
    /// An approval that would already have expired.
    #[error("approval expiry must be in the future")]
    ApprovalExpiry,
    /// An on-call resolution without a reason.
    #[error("a resolution needs a reason")]
    ResolutionReason,
    /// Resolving as succeeded without the processor's reference.
    #[error("resolving as succeeded needs the processor reference")]
    ResolutionReference,
    /// A database URL naming neither store.
    #[error("unsupported database URL {0:?}: expected postgres:// or sqlite:")]
    DatabaseUrl(String),
    /// An API key request outside the key limits (label, reason or duration; api's `KeyError`).
    #[error("{0}")]
    ApiKey(String),
}

/// A new operation from a trusted upstream service.
#[derive(Debug, Clone)]
pub struct NewOperation {
    /// Issued by the caller with [`OperationId::generate`]; used only when the business key is new.
    pub id: OperationId,
    /// The tenant from the authenticated key.
    pub tenant: TenantId,
    /// The trusted workflow's key.
    pub business_key: BusinessKey,
    /// The authoritative details.
    pub details: Details,
    /// Who created it (for the audit trail).
    pub actor: String,
}

/// Whether create-or-get made a row.
#[derive(Debug, Clone)]
pub struct Created {
    /// The operation (new or existing with the same details).
    pub operation: Operation,
    /// True if this call inserted it.
    pub inserted: bool,
}

/// An approval to record.
#[derive(Debug, Clone)]
pub struct NewApproval {
    /// The hash of the details that were shown and approved.
    pub details_hash: DetailsHash,
    /// Who approved (customer id, on-call user, service).
    pub approved_by: String,
    /// How (`confirmation_page`, `service`, ...).
    pub method: String,
    /// When it stops being valid, ms.
    pub expires_at_ms: i64,
}

/// The outcome a worker (or the reconciler under its own lease) records, fenced by the attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum Recorded {
    /// Paid.
    Succeeded {
        /// Processor reference.
        reference: String,
        /// Processor response.
        result: serde_json::Value,
    },
    /// Definitively declined.
    Failed {
        /// Decline code.
        code: String,
        /// Message.
        message: String,
        /// Processor reference, if one was created.
        reference: Option<String>,
    },
    /// Nothing was sent; back to `ready` at `available_at_ms`.
    RetryLater {
        /// Why.
        reason: String,
        /// When it may be claimed again.
        available_at_ms: i64,
    },
    /// Nothing was sent and the attempt limit is spent.
    Exhausted {
        /// Why.
        reason: String,
    },
    /// May have reached the processor; check at `next_check_at_ms`.
    Unknown {
        /// Why.
        reason: String,
        /// Processor reference, if known.
        reference: Option<String>,
        /// When the reconciler should look.
        next_check_at_ms: i64,
    },
    /// Server-side checks failed before any request.
    Rejected {
        /// Stable code.
        code: String,
        /// Human message.
        message: String,
    },
    /// Automatic progress would risk a duplicate.
    NeedsAttention {
        /// Why.
        reason: String,
    },
}

/// A processor's report about an operation (webhook or lookup), applied in any arrival order.
#[derive(Debug, Clone, PartialEq)]
pub enum Report {
    /// The processor says it is paid.
    Succeeded {
        /// Processor reference.
        reference: String,
        /// Processor object.
        result: serde_json::Value,
    },
    /// The processor says it definitively failed.
    Failed {
        /// Code.
        code: String,
        /// Message.
        message: String,
        /// Processor reference.
        reference: Option<String>,
    },
    /// A retrieved processor object names this operation but does not match its approved details
    /// (amount, currency, customer or operation id): never applied as an outcome, always sent to a
    /// human with both facts.
    Mismatch {
        /// Processor reference.
        reference: String,
        /// Whether the object says money moved (a succeeded payment).
        paid: bool,
        /// What differs: the processor's facts next to the approved ones.
        detail: String,
    },
}

/// A stored webhook: a hint that the processor has news about an operation, to be checked by
/// retrieving the object it names before anything is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredProcessorEvent {
    /// Processor name (`stripe`).
    pub processor: String,
    /// The processor's event id.
    pub event_id: String,
    /// The event type (`payment_intent.succeeded`).
    pub event_type: String,
    /// The operation the event named, if it named one of ours.
    pub operation: Option<OperationId>,
    /// The signed body as received.
    pub payload: String,
    /// Checks tried so far (the processor could not be asked).
    pub checks: i64,
}

/// What applying a report did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The row moved to a new state.
    Moved(Status),
    /// The row already said the same thing.
    AlreadyKnown,
    /// The report contradicts the row; it is in `needs_attention` with both facts.
    Conflict,
    /// The processor holds a payment for an operation that was never approved or was cancelled:
    /// the row is in `needs_attention` with both facts, and callers raise the loudest alert.
    PaymentWithoutApproval,
    /// The state does not take reports (e.g. not yet submitted); kept as an event only.
    Ignored(Status),
}

/// An on-call resolution, always with a reason.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolution {
    /// The payment happened; here is the processor reference.
    Succeeded {
        /// Processor reference.
        reference: String,
    },
    /// The payment did not happen.
    Failed,
    /// Retry with the SAME key (only safe while the processor remembers it).
    RetrySameKey,
}

/// A filter for on-call listings.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Only these states (empty: all).
    pub statuses: Vec<Status>,
    /// Only rows last updated before this time, ms.
    pub updated_before_ms: Option<i64>,
    /// Only this tenant.
    pub tenant: Option<TenantId>,
    /// Page size, at most [`PAGE_MAX`].
    pub limit: u32,
}

/// The ledger. Every method is atomic; none holds a transaction across a network call.
#[async_trait]
pub trait Ledger: Send + Sync {
    /// Store name (`postgres`, `sqlite`).
    fn store(&self) -> &'static str;
    /// The customer verification store (migration 0002) on the same database.
    fn verification(&self) -> &dyn verification::VerificationLedger;

    /// Creates the operation, or returns the existing one for the same business key and details.
    /// Different details under an existing business key: [`LedgerError::Conflict`], never an update.
    async fn create_or_get(&self, new: NewOperation, now_ms: i64) -> Result<Created, LedgerError>;
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

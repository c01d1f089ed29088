//! The ledger's interfaces, one trait per concern, each implemented for [`Store`](super::Store)
//! in the module of the same name (`Queue` in `queue.rs`, ...), where its SQL sits beside it.
//! [`Ledger`] is every one of them; a caller holds only the one it uses (the worker a
//! [`Queue`], the reconciler [`Recovery`], the api [`TenantLedger`]).
//!
//! Every tenant-scoped read and write takes the tenant as a [`TenantId`]. The reads across
//! tenants that workers and on-call need are in [`Inspection`], which the api's
//! [`TenantLedger`] does not include.

use super::lanes::{Pick, ReadyLane, Take};
use super::requests::{
    ApplyReport, Cancel, ClaimUnknown, DeferCheck, Escalate, ExpireLease, ExpireLeases, Fence,
    LeaseHolder, MaintenanceLease, NewProcessorEvent, NewToolCall, ProcessorEventKey,
    RecordLookups, RecordOutcome, Resolve, RevokeKey, RotateKey, ToolAnswer,
};
use super::{
    ApiKeyRecord, Applied, Approval, ApprovalLink, Claimed, Created, ExpiredLease, LedgerError,
    ListFilter, NewApproval, NewOperation, Operation, OperationEvent, Recorded, StatusCount,
    StoredProcessorEvent, console, refunds::RefundTotals, verification,
};
use async_trait::async_trait;
use payonce_core::clock::Timestamp;
use payonce_core::id::{OperationId, TenantId};
use payonce_core::state::Status;
use std::time::Duration;

/// Operation rows as a tenant sees them: create, read, cancel, the audit trail; plus the
/// store-wide health and counts (no row of any tenant).
#[async_trait]
pub trait Operations: Send + Sync {
    /// Store name (`postgres`, `sqlite`).
    fn store(&self) -> &'static str;
    /// The on-call console's store (migration 0007) on the same database.
    fn console(&self) -> &dyn console::ConsoleLedger;
    /// The processor's reachability as the submitting processes recorded it (migration
    /// `processor_reachability`), on the same database.
    fn outage(&self) -> &dyn super::outage::OutageLedger;
    /// Which key secret the ledger is used with (migration `key_secret_fingerprint`).
    fn identity(&self) -> &dyn super::identity::IdentityLedger;
    /// Creates the operation, or returns the existing one for the same business key and details.
    /// Different details under an existing business key: [`LedgerError::Conflict`], never an update.
    /// A refund is created only under the over-refund guard (`refunds.rs`): its payment must be a
    /// succeeded payment of the tenant matching the refund's details ([`LedgerError::NotRefundable`],
    /// [`LedgerError::NotFound`]) with enough left unrefunded ([`LedgerError::OverRefund`]).
    async fn create_or_get(
        &self,
        new: NewOperation,
        now: Timestamp,
    ) -> Result<Created, LedgerError>;
    /// Creates a batch of payments of one tenant and enqueues those carrying an approval, in one
    /// transaction of a fixed number of statements ([`super::intake`]): per item, in order, what
    /// `create_or_get` then `approve` would answer for it alone (a refused item changes nothing).
    /// An empty batch or one over [`BATCH_ITEMS_MAX`](super::intake::BATCH_ITEMS_MAX) items is
    /// refused whole ([`LimitError::BatchSize`](super::LimitError::BatchSize)).
    async fn create_batch(
        &self,
        batch: &super::intake::Batch,
        now: Timestamp,
    ) -> Result<Vec<super::intake::ItemResult>, LedgerError>;
    /// Reads an operation within a tenant.
    async fn get(&self, tenant: &TenantId, id: &OperationId) -> Result<Operation, LedgerError>;
    /// The audit trail, oldest first, of an operation within a tenant (empty if the tenant has no
    /// such operation).
    async fn events(
        &self,
        tenant: &TenantId,
        id: &OperationId,
    ) -> Result<Vec<OperationEvent>, LedgerError>;
    /// Withdraws an operation that has not started executing.
    async fn cancel(
        &self,
        tenant: &TenantId,
        request: &Cancel<'_>,
        now: Timestamp,
    ) -> Result<Operation, LedgerError>;
    /// On-call resolution (see [`Recovery::resolve`]) of an operation within a tenant: another
    /// tenant's operation is [`LedgerError::NotFound`] and nothing is written.
    async fn resolve_in_tenant(
        &self,
        tenant: &TenantId,
        request: &Resolve<'_>,
        now: Timestamp,
    ) -> Result<Operation, LedgerError>;
    /// Whether the store takes a write now, for readiness probes: one committed update of the
    /// one-row `write_probe` table (a full disk or a read-only server fails it), and on SQLite at
    /// least [`WRITE_HEADROOM_PAGES_MIN`](super::WRITE_HEADROOM_PAGES_MIN) pages of room under
    /// `max_page_count` ([`LedgerError::Full`] otherwise). Unlike counting, its cost does not grow
    /// with the table.
    async fn probe_write(&self, now: Timestamp) -> Result<(), LedgerError>;
    /// Operations per state over every tenant, and the oldest `updated_at` in each (metrics).
    async fn count_by_status(&self) -> Result<Vec<StatusCount>, LedgerError>;
    /// The ready queue at `now` (metrics): per class the ready rows, those due and the oldest due;
    /// per class the [`QUEUE_TENANTS_SHOWN`](payonce_core::queue_depth::QUEUE_TENANTS_SHOWN)
    /// tenants with the most ready rows and the rest summed. One pass over the ready rows' index.
    async fn queue_depth(
        &self,
        now: Timestamp,
    ) -> Result<payonce_core::queue_depth::QueueDepth, LedgerError>;
}

/// A payment's refunds, as its tenant sees them (refunds are created through
/// [`Operations::create_or_get`]).
#[async_trait]
pub trait Refunds: Send + Sync {
    /// The refund operations of a payment in the tenant, oldest first, at most `limit` (capped at
    /// [`PAGE_MAX`](super::PAGE_MAX)).
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
    ) -> Result<RefundTotals, LedgerError>;
}

/// Reads across tenants, for workers, the reconciler and on-call: never reachable from the api's
/// tenant-facing [`TenantLedger`].
#[async_trait]
pub trait Inspection: Send + Sync {
    /// Reads an operation of any tenant.
    async fn get_unscoped(&self, id: &OperationId) -> Result<Operation, LedgerError>;
    /// The audit trail of an operation of any tenant, oldest first.
    async fn events_unscoped(&self, id: &OperationId) -> Result<Vec<OperationEvent>, LedgerError>;
    /// On-call listing, oldest update first (one tenant if the filter names one).
    async fn list(&self, filter: &ListFilter) -> Result<Vec<Operation>, LedgerError>;
    /// The newest rows the ledger lost, as workers learned of them ([`super::lost_rows`]).
    async fn recent_lost_rows(
        &self,
        limit: u32,
    ) -> Result<Vec<super::lost_rows::LostRow>, LedgerError>;
}

/// Approving an operation and the confirmation links that lead a customer to the approval.
#[async_trait]
pub trait Approvals: Send + Sync {
    /// The customer verification store (migration 0002) on the same database.
    fn verification(&self) -> &dyn verification::VerificationLedger;
    /// Tenants' public profiles and operations' cards (migration `customer_pages`).
    fn profiles(&self) -> &dyn super::profiles::ProfileLedger;
    /// Records an approval and enqueues its operation in one transaction, only if the approved
    /// hash equals the current details hash.
    async fn approve(
        &self,
        tenant: &TenantId,
        approval: NewApproval,
        now: Timestamp,
    ) -> Result<Operation, LedgerError>;
    /// The customer declines an operation awaiting approval, for the details it holds now: it is
    /// cancelled with the customer as the actor, the proof's evidence as the detail and
    /// [`DECLINED_BY_CUSTOMER`](super::approvals::DECLINED_BY_CUSTOMER) as its failure code.
    /// Changed details are [`LedgerError::ApprovalMismatch`]; any other state is
    /// [`LedgerError::WrongState`].
    async fn decline(
        &self,
        tenant: &TenantId,
        decline: &super::CustomerDecline<'_>,
        now: Timestamp,
    ) -> Result<Operation, LedgerError>;
    /// The newest unrevoked approval of the tenant's operation, if any.
    async fn latest_approval(
        &self,
        tenant: &TenantId,
        id: &OperationId,
    ) -> Result<Option<Approval>, LedgerError>;
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
    /// The operation a confirmation link names, whatever its tenant: holding the token is the
    /// customer's authority (the page shows only what the token's holder may approve).
    async fn link_operation(&self, link: &ApprovalLink) -> Result<Operation, LedgerError>;
    /// Marks a link used, once: true if this call used it.
    async fn use_approval_link(
        &self,
        token_hash: &str,
        now: Timestamp,
    ) -> Result<bool, LedgerError>;
}

/// The ledger's clock, which every lease holder reads: the worker and the reconciler.
#[async_trait]
pub trait LedgerTime: Send + Sync {
    /// The ledger's time: the `now` that leases, expiries and retention windows are decided on.
    /// Postgres answers its server's clock (one round trip), so processes whose clocks disagree
    /// still agree on every lease; `local` is the caller's clock, answered as it is where the
    /// store has no clock of its own (SQLite, embedded in the caller's process) or was told to use
    /// its callers' ([`Store::on_callers_clock`](super::Store::on_callers_clock)).
    async fn now(&self, local: Timestamp) -> Result<Timestamp, LedgerError>;
}

/// The worker's queue: claim under a lease, renew, mark a submission, give back, record. The
/// reconciler's same-key retry uses it too, through the one execution path
/// (`payonce_execution::execute`).
#[async_trait]
pub trait Queue: LedgerTime {
    /// Claims up to `batch` ready operations for the holder with a lease; bumps each attempt.
    async fn claim(
        &self,
        holder: &LeaseHolder<'_>,
        batch: u32,
        now: Timestamp,
    ) -> Result<Vec<Claimed>, LedgerError>;
    /// Claims as `claim` does and records, in the same commit, that each claimed operation's
    /// request is about to leave (what `mark_submitting` records), logged as one
    /// `submission_started` event with the claim's move: the worker's claim, one row version, one
    /// commit and one audit row fewer per payment. From then on
    /// a lapsed lease is `unknown` (the reconciler looks it up), so a holder that sends nothing
    /// says so: `release`, or a `Rejected` or `RetryLater` outcome, withdraws this attempt's record.
    async fn claim_to_submit(
        &self,
        holder: &LeaseHolder<'_>,
        batch: u32,
        now: Timestamp,
    ) -> Result<Vec<Claimed>, LedgerError>;
    /// Extends the unexpired leases the holder has on the operations in `held` (the work it is
    /// still doing; a lease it gave up on must lapse to the reconciler); returns the (id, attempt)
    /// pairs renewed.
    async fn renew(
        &self,
        holder: &LeaseHolder<'_>,
        held: &[OperationId],
        now: Timestamp,
    ) -> Result<Vec<(OperationId, i64)>, LedgerError>;
    /// Records, committed, that a request is about to leave for the processor, for each fence
    /// in one transaction; returns per fence whether it still held (refused once the lease has
    /// expired).
    async fn mark_submitting(
        &self,
        fences: &[Fence],
        now: Timestamp,
    ) -> Result<Vec<bool>, LedgerError>;
    /// Gives the lease back before this attempt sent anything (shutdown): to `ready`, withdrawing
    /// this attempt's submission record if its claim made one, or to `unknown` when an earlier
    /// attempt submitted. Fenced.
    async fn release(&self, fence: &Fence, actor: &str, now: Timestamp) -> Result<(), LedgerError>;
    /// Records an outcome, fenced by the attempt and `status = 'executing'`.
    async fn record(
        &self,
        request: &RecordOutcome<'_>,
        now: Timestamp,
    ) -> Result<Operation, LedgerError>;
    /// Records many outcomes in one transaction; each is fenced on its own. Returns per item
    /// whether it was recorded.
    async fn record_batch(
        &self,
        items: &[(Fence, Recorded)],
        actor: &str,
        now: Timestamp,
    ) -> Result<Vec<bool>, LedgerError>;
    /// Records outcomes as `record_batch` does (`holder.owner` the actor) and, in the same
    /// commit, claims up to `batch` ready operations as `claim_to_submit` does: a busy worker
    /// refills the slots its outcomes free with one commit instead of two. Nothing is committed if
    /// either part fails. A `pick` of nothing claims nothing (and is not an error, as it is for a
    /// claim).
    async fn record_and_claim(
        &self,
        items: &[(Fence, Recorded)],
        holder: &LeaseHolder<'_>,
        pick: Pick<'_>,
        now: Timestamp,
    ) -> Result<(Vec<bool>, Vec<Claimed>), LedgerError>;
    /// Claims as `claim_to_submit` does, from the lanes `takes` names, up to its `n` oldest due
    /// rows from each: the worker's fair scheduler decides the plan. One statement on Postgres
    /// (`FOR UPDATE SKIP LOCKED` inside each lane), one transaction on SQLite. A plan of no lanes,
    /// a lane of no rows, or more than `CLAIM_BATCH_MAX` rows in all is refused.
    async fn claim_lanes(
        &self,
        holder: &LeaseHolder<'_>,
        takes: &[Take],
        now: Timestamp,
    ) -> Result<Vec<Claimed>, LedgerError>;
    /// The lanes (priority, tenant) that hold ready rows, each with its earliest `available_at`
    /// and its tenant's share, interactive first, at most `limit` (≤ `lanes::LANES_MAX`).
    async fn ready_lanes(&self, limit: u32) -> Result<Vec<ReadyLane>, LedgerError>;
    /// Reads the operation a worker holds (or held): what its fence lost to.
    async fn current(&self, fence: &Fence) -> Result<Operation, LedgerError>;
    /// Records that the processor answered `id`'s first submission with `reference` as a replay:
    /// a row this ledger lost had made it ([`super::lost_rows`]). Once per operation.
    async fn record_lost_row(
        &self,
        id: &OperationId,
        reference: &str,
        found_by: &str,
        now: Timestamp,
    ) -> Result<(), LedgerError>;
    /// Waits until new work may be ready (an approval was committed here or, on Postgres, anywhere),
    /// or until `max_wait` passes. Callers still poll: a wake-up can be missed.
    async fn wait_for_ready(&self, max_wait: Duration);
}

/// The reconciler's interface: expired leases, unknown outcomes, processor reports, on-call
/// resolution, and the sweep's maintenance lease. It includes reading across tenants and checking
/// the stored webhook hints; a same-key retry's writes go through the [`Queue`], as the worker's do.
#[async_trait]
pub trait Recovery: Inspection + HintChecks + LedgerTime {
    /// Expired leases, oldest first (served by a partial index).
    async fn expired_leases(
        &self,
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<ExpiredLease>, LedgerError>;
    /// Moves an expired lease on: back to `ready` if nothing was submitted, to `unknown` if a
    /// submission was recorded. Fenced by the attempt the sweep saw.
    async fn expire_lease(
        &self,
        request: &ExpireLease<'_>,
        now: Timestamp,
    ) -> Result<Status, LedgerError>;
    /// [`Recovery::expire_lease`] for many leases in one write (one statement on Postgres, one
    /// transaction on SQLite): per lease, the state it moved to, or `None` where its fence lost.
    async fn expire_leases(
        &self,
        request: &ExpireLeases<'_>,
        now: Timestamp,
    ) -> Result<Vec<Option<Status>>, LedgerError>;
    /// Unknown operations whose check is due, soonest first (served by a partial index).
    async fn due_for_check(
        &self,
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<Operation>, LedgerError>;
    /// Schedules the next check of an unknown operation. Fenced by status and attempt.
    async fn defer_check(
        &self,
        request: &DeferCheck<'_>,
        now: Timestamp,
    ) -> Result<(), LedgerError>;
    /// Takes a lease over an `unknown` operation so its owner may retry with the SAME key; `why`
    /// goes to the audit trail (same-key retry inside the window, or resubmission after it).
    async fn claim_unknown(
        &self,
        request: &ClaimUnknown<'_>,
        now: Timestamp,
    ) -> Result<Claimed, LedgerError>;
    /// Moves an `unknown` operation to `needs_attention` with the reason. Fenced.
    async fn escalate(&self, request: &Escalate<'_>, now: Timestamp) -> Result<(), LedgerError>;
    /// Applies a processor report in any arrival order, per the state machine.
    async fn apply_report(
        &self,
        request: &ApplyReport<'_>,
        now: Timestamp,
    ) -> Result<Applied, LedgerError>;
    /// Records lookups that found the approved object as `processor_succeeded`, in one write,
    /// each only while its row is still `unknown` at the attempt the lookup was made for. `false`
    /// where that fence lost: the caller applies that one as a report ([`Recovery::apply_report`]),
    /// which plans from the row's new state.
    async fn record_lookups(
        &self,
        request: &RecordLookups<'_>,
        now: Timestamp,
    ) -> Result<Vec<bool>, LedgerError>;
    /// On-call resolution of an `unknown` or `needs_attention` operation; the reason is recorded.
    async fn resolve(
        &self,
        request: &Resolve<'_>,
        now: Timestamp,
    ) -> Result<Operation, LedgerError>;
    /// Takes or renews the named maintenance lease (e.g. `sweep`) for its owner; false if another
    /// owner holds an unexpired one. A lease that expires more than `ttl` after `now` is taken
    /// too: no live holder set it on this database's clock.
    async fn try_maintenance_lease(
        &self,
        lease: &MaintenanceLease<'_>,
        ttl: Duration,
        now: Timestamp,
    ) -> Result<bool, LedgerError>;
    /// Creates the row of an operation the processor holds but the ledger lost (a restore, a
    /// failover), under the id the processor's metadata names, exactly as create-or-get would: an
    /// operation already holding the business key is answered instead (same details), or a
    /// [`LedgerError::Conflict`] names it (other details).
    async fn recreate(&self, new: NewOperation, now: Timestamp) -> Result<Created, LedgerError>;
    /// Deletes, in bounded batches, the rows `retention` lets go of at `now`
    /// ([`super::retention`]): never a pending hint, and an operation with its events only past its
    /// tenant's period (none set: never).
    async fn prune(
        &self,
        retention: &super::retention::Retention,
        now: Timestamp,
    ) -> Result<super::retention::Pruned, LedgerError>;
    /// Sets a tenant's retention period for its operations in days (checked against
    /// [`super::retention::OPERATION_RETENTION_DAYS_MIN`]), or clears it (`None`: kept for ever).
    async fn set_operation_retention(
        &self,
        tenant: &TenantId,
        days: Option<u32>,
        now: Timestamp,
    ) -> Result<(), LedgerError>;
    /// A tenant's retention period for its operations, days (`None`: kept for ever).
    async fn operation_retention(&self, tenant: &TenantId) -> Result<Option<u32>, LedgerError>;
    /// Where the scan for unknown payments at `processor` has read up to (`None`: never scanned).
    async fn scan_watermark(&self, processor: &str) -> Result<Option<Timestamp>, LedgerError>;
    /// Records that the scan has read every payment created from `watermark` on.
    async fn set_scan_watermark(
        &self,
        processor: &str,
        watermark: Timestamp,
        now: Timestamp,
    ) -> Result<(), LedgerError>;
    /// Gives a maintenance lease back.
    async fn drop_maintenance_lease(&self, lease: &MaintenanceLease<'_>)
    -> Result<(), LedgerError>;
    /// Lost rows ([`super::lost_rows`]) whose alert has not been raised, oldest first.
    async fn unreported_lost_rows(
        &self,
        limit: u32,
    ) -> Result<Vec<super::lost_rows::LostRow>, LedgerError>;
    /// Marks a lost row's alert raised and notes it on its operation's audit trail; false if
    /// another reconciler did first.
    async fn report_lost_row(
        &self,
        lost: &super::lost_rows::LostRow,
        actor: &str,
        now: Timestamp,
    ) -> Result<bool, LedgerError>;
}

/// Stored webhooks, as the api stores them: each a hint that a processor has news, kept once and
/// checked by the reconciler ([`HintChecks`]) before anything is applied.
#[async_trait]
pub trait Webhooks: Send + Sync {
    /// Stores a webhook once; false if (processor, event id) was already stored.
    async fn insert_processor_event(
        &self,
        event: &NewProcessorEvent<'_>,
        now: Timestamp,
    ) -> Result<bool, LedgerError>;
    /// Records what checking a stored webhook did (or that it needs no check); it is no longer
    /// pending.
    async fn mark_processor_event(
        &self,
        event: &ProcessorEventKey<'_>,
        outcome: &str,
        now: Timestamp,
    ) -> Result<(), LedgerError>;
}

/// The reconciler's side of stored webhooks, across tenants: the hints still to check, and putting
/// one off.
#[async_trait]
pub trait HintChecks: Webhooks {
    /// Stored webhooks not yet checked against the processor, whose next check is due, oldest
    /// first, at most `limit` (served by a partial index).
    async fn pending_processor_events(
        &self,
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<StoredProcessorEvent>, LedgerError>;
    /// An operation's stored webhooks, checked or not, oldest first, at most `limit` (an
    /// escalation names what they report).
    async fn processor_events_of(
        &self,
        id: &OperationId,
        limit: u32,
    ) -> Result<Vec<StoredProcessorEvent>, LedgerError>;
    /// The stored webhooks not yet checked: how many, and when the oldest arrived (`None`: none).
    async fn processor_event_backlog(&self) -> Result<(i64, Option<Timestamp>), LedgerError>;
    /// Closes, in one statement, those of the `limit` oldest due hints that say what their
    /// operation's row already says (the object the row names, `succeeded`, for a `succeeded`
    /// row): nothing to apply and no processor read to spend. How many (0: none of the oldest
    /// agree; they are for the one-by-one check).
    async fn close_known_hints(&self, now: Timestamp, limit: u32) -> Result<u64, LedgerError>;
    /// Leaves a stored webhook pending (the processor could not be asked): counts the try and
    /// puts the next one off until `check_after`.
    async fn defer_processor_event(
        &self,
        event: &ProcessorEventKey<'_>,
        check_after: Timestamp,
        why: &str,
    ) -> Result<(), LedgerError>;
}

/// Assistant tool calls: recorded for correlation (never identity), and the kept answers that make
/// a retried call agree with the first.
#[async_trait]
pub trait ToolCalls: Send + Sync {
    /// Records a provider tool call for correlation (never identity), unless a model provider's
    /// call id is already recorded for the tenant and operation (the same call sent again; MCP's
    /// JSON-RPC ids repeat across requests and are each recorded).
    async fn record_tool_call(
        &self,
        tenant: &TenantId,
        call: &NewToolCall<'_>,
        now: Timestamp,
    ) -> Result<(), LedgerError>;
    /// Tool calls recorded for the tenant's operation: (provider, provider call id, tool).
    async fn tool_calls(
        &self,
        tenant: &TenantId,
        id: &OperationId,
    ) -> Result<Vec<(String, Option<String>, String)>, LedgerError>;
    /// Keeps the answer to a tool call unless its key already has one; returns the kept
    /// `(fingerprint, answer)` either way, so a concurrent first call and its retry agree on one
    /// answer.
    async fn keep_tool_answer(
        &self,
        tenant: &TenantId,
        answer: &ToolAnswer<'_>,
        now: Timestamp,
    ) -> Result<(String, String), LedgerError>;
    /// The `(fingerprint, answer)` kept for a tool-call key, if any.
    async fn tool_answer(
        &self,
        tenant: &TenantId,
        key: &str,
    ) -> Result<Option<(String, String)>, LedgerError>;
}

/// API keys, stored as hashes.
#[async_trait]
pub trait Keys: Send + Sync {
    /// Stores an API key's hash with its id, tenant, role and expiry.
    async fn insert_api_key(&self, key: &ApiKeyRecord) -> Result<(), LedgerError>;
    /// Finds the key whose secret hashes to `key_hash` if it is accepted at `now`: unrevoked and
    /// unexpired.
    async fn find_api_key(
        &self,
        key_hash: &str,
        now: Timestamp,
    ) -> Result<Option<ApiKeyRecord>, LedgerError>;
    /// The key with public id `key_id`, in any state.
    async fn api_key(&self, key_id: &str) -> Result<Option<ApiKeyRecord>, LedgerError>;
    /// Keys, newest first, of one tenant or all; at most `limit` (capped at
    /// [`PAGE_MAX`](super::PAGE_MAX)).
    async fn list_api_keys(
        &self,
        tenant: Option<&TenantId>,
        limit: u32,
    ) -> Result<Vec<ApiKeyRecord>, LedgerError>;
    /// Revokes a key. `Ok(false)`: it was already revoked (nothing changed); `NotFound`: no such id.
    async fn revoke_api_key(
        &self,
        request: &RevokeKey<'_>,
        now: Timestamp,
    ) -> Result<bool, LedgerError>;
    /// Rotation, in one transaction: stores the new key and makes the active old one expire at
    /// `old_until` (or keep an earlier expiry), naming the new one as its replacement. `Ok(false)`:
    /// the old key is revoked, expired or already rotated (nothing changed); `NotFound`: no such id.
    async fn rotate_api_key(
        &self,
        request: &RotateKey<'_>,
        now: Timestamp,
    ) -> Result<bool, LedgerError>;
    /// Records that the key was used at `now` unless a use within `resolution` is already recorded
    /// (so accepted requests write at most once per key per resolution).
    async fn touch_api_key(
        &self,
        key_id: &str,
        now: Timestamp,
        resolution: Duration,
    ) -> Result<(), LedgerError>;
}

/// What the api may reach: a tenant's operations and refunds, approvals, tool calls, keys, and
/// storing webhooks. No queue, no recovery, no reads across tenants.
pub trait TenantLedger: Operations + Refunds + Approvals + ToolCalls + Keys + Webhooks {}
impl<T: Operations + Refunds + Approvals + ToolCalls + Keys + Webhooks + ?Sized> TenantLedger
    for T
{
}

/// The whole ledger, as a store implements it. Every method is atomic; none holds a transaction
/// across a network call.
pub trait Ledger: TenantLedger + Recovery + Queue {}
impl<T: TenantLedger + Recovery + Queue + ?Sized> Ledger for T {}

//! The one implementation of [`Ledger`]: [`Store`], generic over the store's [`Dialect`]
//! (`PostgresLedger` and `SqliteLedger` are `Store<Postgres>` and `Store<Sqlite>`). Each method
//! hands over to the module of its concern, where the SQL sits beside the code that runs it:
//!
//! - `operations.rs`: create, read, list, count;
//! - `approvals.rs`: approve, cancel, confirmation links;
//! - `queue.rs`: claim, renew, mark submitting, release, record an outcome (the worker's writes);
//! - `recovery.rs`: expired leases, unknown outcomes, processor reports, on-call resolution, the
//!   sweep's maintenance lease (the reconciler's writes);
//! - `refunds.rs`: refund creation under the over-refund guard, a payment's refunds and totals;
//! - `webhooks.rs`, `keys.rs`, `tool_calls.rs`: stored webhooks, API keys, assistant tool calls;
//! - `dialect.rs`: what differs between Postgres and SQLite.
//!
//! Every state change is written by a statement whose from-states, to-state and event name come
//! from [`crate::state`]'s table (`state::Move`).

use super::approvals::Approvals;
use super::dialect::Dialect;
use super::keys::Keys;
use super::operations::Operations;
use super::queue::Queue;
use super::recovery::Recovery;
use super::refunds::{RefundTotals, Refunds};
use super::tool_calls::ToolCalls;
use super::webhooks::Webhooks;
use super::{
    ApiKeyRecord, Applied, Approval, ApprovalLink, Claimed, Created, ExpiredLease, Ledger,
    LedgerError, ListFilter, NewApproval, NewOperation, Operation, OperationEvent, Recorded,
    Report, Resolution, StatusCount, StoredProcessorEvent, verification,
};
use crate::id::{OperationId, TenantId};
use crate::state::Status;
use async_trait::async_trait;
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, Pool, Type};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use tokio::sync::Notify;

/// A ledger on one database: the pool and the in-process wake-up for idle workers.
pub struct Store<DB: Database> {
    pub(crate) pool: Pool<DB>,
    pub(crate) ready: Arc<Notify>,
    /// Whether the store's listener (Postgres `LISTEN`) has been started.
    pub(crate) listening: Arc<AtomicBool>,
}

impl<DB: Database> Clone for Store<DB> {
    fn clone(&self) -> Self {
        Store {
            pool: self.pool.clone(),
            ready: self.ready.clone(),
            listening: self.listening.clone(),
        }
    }
}

impl<DB: Database> std::fmt::Debug for Store<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("pool", &self.pool).finish()
    }
}

impl<DB: Database> Store<DB> {
    /// Wraps an open, migrated pool.
    pub(crate) fn new(pool: Pool<DB>) -> Self {
        Store {
            pool,
            ready: Arc::new(Notify::new()),
            listening: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The pool, for tests and benchmarks that inspect the database directly.
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    /// Wakes this process's idle workers (other processes: the dialect's `NOTIFY_READY`).
    pub(crate) fn wake_local(&self) {
        self.ready.notify_waiters();
    }
}

#[async_trait]
impl<DB> Ledger for Store<DB>
where
    // LEDGER BOUNDS (see `dialect.rs`)
    DB: Dialect,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    &'static str: ColumnIndex<DB::Row>,
    for<'t> i64: Encode<'t, DB> + Decode<'t, DB> + Type<DB>,
    for<'t> String: Encode<'t, DB> + Decode<'t, DB> + Type<DB>,
    for<'t> &'t str: Encode<'t, DB> + Type<DB>,
    for<'t> Option<i64>: Encode<'t, DB>,
    for<'t> Option<String>: Encode<'t, DB>,
    for<'t> Option<&'t str>: Encode<'t, DB>,
{
    fn store(&self) -> &'static str {
        DB::STORE
    }

    fn verification(&self) -> &dyn verification::VerificationLedger {
        self
    }

    fn console(&self) -> &dyn super::console::ConsoleLedger {
        self
    }

    async fn create_or_get(&self, new: NewOperation, now_ms: i64) -> Result<Created, LedgerError> {
        Operations(self).create_or_get(new, now_ms).await
    }

    async fn refunds_of(
        &self,
        tenant: &TenantId,
        payment: &OperationId,
        limit: u32,
    ) -> Result<Vec<Operation>, LedgerError> {
        Refunds(self).refunds_of(tenant, payment, limit).await
    }

    async fn refund_totals(
        &self,
        tenant: &TenantId,
        payment: &OperationId,
    ) -> Result<RefundTotals, LedgerError> {
        Refunds(self).refund_totals(tenant, payment).await
    }

    async fn get(&self, tenant: &TenantId, id: &OperationId) -> Result<Operation, LedgerError> {
        Operations(self).get(tenant, id).await
    }

    async fn get_unscoped(&self, id: &OperationId) -> Result<Operation, LedgerError> {
        Operations(self).get_unscoped(id).await
    }

    async fn events(&self, id: &OperationId) -> Result<Vec<OperationEvent>, LedgerError> {
        Operations(self).events(id).await
    }

    async fn approve(
        &self,
        tenant: &TenantId,
        id: &OperationId,
        approval: NewApproval,
        now_ms: i64,
    ) -> Result<Operation, LedgerError> {
        Approvals(self).approve(tenant, id, approval, now_ms).await
    }

    async fn latest_approval(&self, id: &OperationId) -> Result<Option<Approval>, LedgerError> {
        Approvals(self).latest_approval(id).await
    }

    async fn cancel(
        &self,
        tenant: &TenantId,
        id: &OperationId,
        actor: &str,
        now_ms: i64,
    ) -> Result<Operation, LedgerError> {
        Approvals(self).cancel(tenant, id, actor, now_ms).await
    }

    async fn claim(
        &self,
        owner: &str,
        batch: u32,
        lease_ttl_ms: i64,
        now_ms: i64,
    ) -> Result<Vec<Claimed>, LedgerError> {
        Queue(self).claim(owner, batch, lease_ttl_ms, now_ms).await
    }

    async fn renew(
        &self,
        owner: &str,
        held: &[OperationId],
        lease_ttl_ms: i64,
        now_ms: i64,
    ) -> Result<Vec<(OperationId, i64)>, LedgerError> {
        Queue(self).renew(owner, held, lease_ttl_ms, now_ms).await
    }

    async fn mark_submitting(
        &self,
        id: &OperationId,
        attempt: i64,
        now_ms: i64,
    ) -> Result<(), LedgerError> {
        Queue(self).mark_submitting(id, attempt, now_ms).await
    }

    async fn mark_submitting_batch(
        &self,
        items: &[(OperationId, i64)],
        now_ms: i64,
    ) -> Result<Vec<bool>, LedgerError> {
        DB::mark_submitting_batch(self, items, now_ms).await
    }

    async fn release(
        &self,
        id: &OperationId,
        attempt: i64,
        actor: &str,
        now_ms: i64,
    ) -> Result<(), LedgerError> {
        Queue(self).release(id, attempt, actor, now_ms).await
    }

    async fn record(
        &self,
        id: &OperationId,
        attempt: i64,
        outcome: &Recorded,
        actor: &str,
        now_ms: i64,
    ) -> Result<Operation, LedgerError> {
        Queue(self)
            .record(id, attempt, outcome, actor, now_ms)
            .await
    }

    async fn record_batch(
        &self,
        items: &[(OperationId, i64, Recorded)],
        actor: &str,
        now_ms: i64,
    ) -> Result<Vec<bool>, LedgerError> {
        DB::record_batch(self, items, actor, now_ms).await
    }

    async fn expired_leases(
        &self,
        now_ms: i64,
        limit: u32,
    ) -> Result<Vec<ExpiredLease>, LedgerError> {
        Recovery(self).expired_leases(now_ms, limit).await
    }

    async fn expire_lease(
        &self,
        lease: &ExpiredLease,
        actor: &str,
        now_ms: i64,
        next_check_at_ms: i64,
    ) -> Result<Status, LedgerError> {
        Recovery(self)
            .expire_lease(lease, actor, now_ms, next_check_at_ms)
            .await
    }

    async fn due_for_check(&self, now_ms: i64, limit: u32) -> Result<Vec<Operation>, LedgerError> {
        Recovery(self).due_for_check(now_ms, limit).await
    }

    async fn defer_check(
        &self,
        id: &OperationId,
        attempt: i64,
        next_check_at_ms: i64,
        detail: &str,
        actor: &str,
        now_ms: i64,
    ) -> Result<(), LedgerError> {
        Recovery(self)
            .defer_check(id, attempt, next_check_at_ms, detail, actor, now_ms)
            .await
    }

    async fn claim_unknown(
        &self,
        id: &OperationId,
        attempt: i64,
        owner: &str,
        lease_ttl_ms: i64,
        why: &str,
        now_ms: i64,
    ) -> Result<Claimed, LedgerError> {
        Recovery(self)
            .claim_unknown(id, attempt, owner, lease_ttl_ms, why, now_ms)
            .await
    }

    async fn escalate(
        &self,
        id: &OperationId,
        attempt: i64,
        reason: &str,
        actor: &str,
        now_ms: i64,
    ) -> Result<(), LedgerError> {
        Recovery(self)
            .escalate(id, attempt, reason, actor, now_ms)
            .await
    }

    async fn apply_report(
        &self,
        id: &OperationId,
        report: &Report,
        source: &str,
        now_ms: i64,
    ) -> Result<Applied, LedgerError> {
        Recovery(self)
            .apply_report(id, report, source, now_ms)
            .await
    }

    async fn resolve(
        &self,
        id: &OperationId,
        resolution: &Resolution,
        actor: &str,
        reason: &str,
        now_ms: i64,
    ) -> Result<Operation, LedgerError> {
        Recovery(self)
            .resolve(id, resolution, actor, reason, now_ms)
            .await
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<Operation>, LedgerError> {
        Operations(self).list(filter).await
    }

    async fn ping(&self) -> Result<(), LedgerError> {
        Operations(self).ping().await
    }

    async fn count_by_status(&self) -> Result<Vec<StatusCount>, LedgerError> {
        Operations(self).count_by_status().await
    }

    async fn create_approval_link(
        &self,
        link: &ApprovalLink,
        open_max: u32,
    ) -> Result<bool, LedgerError> {
        Approvals(self).create_link(link, open_max).await
    }

    async fn approval_link(&self, token_hash: &str) -> Result<Option<ApprovalLink>, LedgerError> {
        Approvals(self).link(token_hash).await
    }

    async fn use_approval_link(&self, token_hash: &str, now_ms: i64) -> Result<bool, LedgerError> {
        Approvals(self).use_link(token_hash, now_ms).await
    }

    async fn insert_processor_event(
        &self,
        processor: &str,
        event_id: &str,
        event_type: &str,
        operation: Option<&OperationId>,
        payload: &str,
        now_ms: i64,
    ) -> Result<bool, LedgerError> {
        Webhooks(self)
            .insert(processor, event_id, event_type, operation, payload, now_ms)
            .await
    }

    async fn pending_processor_events(
        &self,
        now_ms: i64,
        limit: u32,
    ) -> Result<Vec<StoredProcessorEvent>, LedgerError> {
        Webhooks(self).pending(now_ms, limit).await
    }

    async fn defer_processor_event(
        &self,
        processor: &str,
        event_id: &str,
        check_after_ms: i64,
        why: &str,
        _now_ms: i64,
    ) -> Result<(), LedgerError> {
        Webhooks(self)
            .defer(processor, event_id, check_after_ms, why)
            .await
    }

    async fn mark_processor_event(
        &self,
        processor: &str,
        event_id: &str,
        outcome: &str,
        now_ms: i64,
    ) -> Result<(), LedgerError> {
        Webhooks(self)
            .mark(processor, event_id, outcome, now_ms)
            .await
    }

    async fn record_tool_call(
        &self,
        tenant: &TenantId,
        operation: Option<&OperationId>,
        provider: &str,
        provider_call_id: Option<&str>,
        tool: &str,
        now_ms: i64,
    ) -> Result<(), LedgerError> {
        ToolCalls(self)
            .record(tenant, operation, provider, provider_call_id, tool, now_ms)
            .await
    }

    async fn tool_calls(
        &self,
        id: &OperationId,
    ) -> Result<Vec<(String, Option<String>, String)>, LedgerError> {
        ToolCalls(self).of_operation(id).await
    }

    async fn keep_tool_answer(
        &self,
        tenant: &TenantId,
        key: &str,
        fingerprint: &str,
        answer: &str,
        now_ms: i64,
    ) -> Result<(String, String), LedgerError> {
        ToolCalls(self)
            .keep_answer(tenant, key, fingerprint, answer, now_ms)
            .await
    }

    async fn tool_answer(
        &self,
        tenant: &TenantId,
        key: &str,
    ) -> Result<Option<(String, String)>, LedgerError> {
        ToolCalls(self).answer(tenant, key).await
    }

    async fn wait_for_ready(&self, max_wait: std::time::Duration) {
        DB::wait_ready(self, max_wait).await
    }

    async fn try_maintenance_lease(
        &self,
        name: &str,
        owner: &str,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Result<bool, LedgerError> {
        Recovery(self)
            .try_maintenance_lease(name, owner, ttl_ms, now_ms)
            .await
    }

    async fn drop_maintenance_lease(&self, name: &str, owner: &str) -> Result<(), LedgerError> {
        Recovery(self).drop_maintenance_lease(name, owner).await
    }

    async fn insert_api_key(&self, key: &ApiKeyRecord) -> Result<(), LedgerError> {
        Keys(self).insert(key).await
    }

    async fn find_api_key(
        &self,
        key_hash: &str,
        now_ms: i64,
    ) -> Result<Option<ApiKeyRecord>, LedgerError> {
        Keys(self).find(key_hash, now_ms).await
    }

    async fn api_key(&self, key_id: &str) -> Result<Option<ApiKeyRecord>, LedgerError> {
        Keys(self).get(key_id).await
    }

    async fn list_api_keys(
        &self,
        tenant: Option<&TenantId>,
        limit: u32,
    ) -> Result<Vec<ApiKeyRecord>, LedgerError> {
        Keys(self).list(tenant, limit).await
    }

    async fn revoke_api_key(
        &self,
        key_id: &str,
        revoked_by: &str,
        reason: &str,
        now_ms: i64,
    ) -> Result<bool, LedgerError> {
        Keys(self).revoke(key_id, revoked_by, reason, now_ms).await
    }

    async fn rotate_api_key(
        &self,
        old_id: &str,
        new: &ApiKeyRecord,
        old_until_ms: i64,
        now_ms: i64,
    ) -> Result<bool, LedgerError> {
        Keys(self).rotate(old_id, new, old_until_ms, now_ms).await
    }

    async fn touch_api_key(
        &self,
        key_id: &str,
        now_ms: i64,
        resolution_ms: i64,
    ) -> Result<(), LedgerError> {
        Keys(self).touch(key_id, now_ms, resolution_ms).await
    }
}

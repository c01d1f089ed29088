//! Retention: what may be deleted, and when. Bounded batches of rows no live guarantee needs:
//! - webhook payloads ([`processor_events`]) once checked (`applied_at` set) and older than their
//!   period: a pending hint is never deleted, whatever its age;
//! - tool-call correlation rows and kept tool answers (`tool_call_keys`) older than their period: a
//!   call repeated later runs the tool again, which answers from the ledger's stored truth (an
//!   operation's identity is its business key, never the tool-call key), so only the check that a
//!   reused key carries the same arguments ends with the period;
//! - confirmation links and console sessions past their expiry by their period (with the codes
//!   sent for them);
//! - operations, with every row they own (each table whose foreign key leads to `operations`,
//!   read from the catalog: `ownership.rs`), only for a tenant that set a period
//!   (`payonce tenant set-retention`, at least [`OPERATION_RETENTION_DAYS_MIN`] days; without one,
//!   kept for ever): an operation in a final state with no refund referring to it, created and last
//!   changed more than the period ago. Operations are the evidence of what was paid: nothing
//!   unknown, waiting for a human, executing or ready is ever deleted, and a payment goes only
//!   after its refunds (each refund is its own operation and goes first). A tenant whose prune
//!   fails is logged and counted ([`Pruned::operation_tenants_failed`]), and the next goes on:
//!   one stuck row never holds every later tenant's back.

use super::dialect::Dialect;
use super::ownership::OwnedRows;
use super::row::LedgerRow;
use super::statement::Stmt;
use super::store::Store;
use super::{LedgerError, LimitError};
use payonce_core::clock::Timestamp;
use payonce_core::id::TenantId;
use serde::Serialize;
use std::time::Duration;

/// Most rows one prune statement deletes; a prune repeats it until a batch comes back short or
/// [`PRUNE_BATCHES_MAX`] is reached (the next run goes on).
pub const PRUNE_BATCH_DEFAULT: u32 = 1_000;
/// Most batches one prune runs per table.
pub const PRUNE_BATCHES_MAX: u32 = 100;

const PRUNE_WEBHOOKS: &str = "DELETE FROM processor_events WHERE (processor, event_id) IN \
     (SELECT processor, event_id FROM processor_events WHERE applied_at IS NOT NULL AND applied_at < $1 \
     ORDER BY applied_at LIMIT $2)";
const PRUNE_TOOL_CALLS: &str = "DELETE FROM tool_calls WHERE id IN \
     (SELECT id FROM tool_calls WHERE at < $1 ORDER BY id LIMIT $2)";
/// Kept tool answers past the tool-call period, oldest first (`tool_call_keys_created_idx`).
const PRUNE_TOOL_ANSWERS: &str = "DELETE FROM tool_call_keys WHERE (tenant_id, idempotency_key) IN \
     (SELECT tenant_id, idempotency_key FROM tool_call_keys WHERE created_at < $1 \
     ORDER BY created_at LIMIT $2)";
/// The codes sent for links a prune deletes (they refer to the link).
const PRUNE_LINK_CODES: &str = "DELETE FROM approval_codes WHERE delivery_id IN \
     (SELECT c.delivery_id FROM approval_codes c JOIN approval_links l ON l.token_hash = c.link_hash \
     WHERE l.expires_at < $1 LIMIT $2)";
const PRUNE_LINKS: &str = "DELETE FROM approval_links WHERE token_hash IN \
     (SELECT token_hash FROM approval_links WHERE expires_at < $1 LIMIT $2)";
const PRUNE_SESSIONS: &str = "DELETE FROM console_sessions WHERE session_hash IN \
     (SELECT session_hash FROM console_sessions WHERE expires_at < $1 LIMIT $2)";

/// How long each kind of row is kept once nothing needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// A checked webhook's payload, after it was checked.
    pub webhooks: Duration,
    /// A tool call's correlation row, and the answer kept for a tool-call key, after the call.
    pub tool_calls: Duration,
    /// A confirmation link or a console session, after it expired.
    pub expired_tokens: Duration,
    /// Rows per delete statement (at least one).
    pub batch: u32,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            webhooks: Duration::from_secs(7 * 24 * 60 * 60),
            tool_calls: Duration::from_secs(30 * 24 * 60 * 60),
            expired_tokens: Duration::from_secs(7 * 24 * 60 * 60),
            batch: PRUNE_BATCH_DEFAULT,
        }
    }
}

/// Rows one prune deleted, per kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Pruned {
    /// Checked webhook payloads.
    pub webhooks: u64,
    /// Tool-call correlation rows.
    pub tool_calls: u64,
    /// Answers kept for tool-call idempotency keys.
    pub tool_answers: u64,
    /// Expired confirmation links.
    pub links: u64,
    /// Expired console sessions.
    pub sessions: u64,
    /// Operations past their tenant's period, with every row they own.
    pub operations: u64,
    /// Tenants whose operations could not be pruned this time (each logged with its cause; the
    /// others were pruned).
    pub operation_tenants_failed: u64,
}

/// The shortest retention period a tenant may set for its operations, days: the longest window in
/// which a card network still accepts a dispute (Visa: 540 days from processing), so the evidence
/// of a payment outlives every dispute about it.
pub const OPERATION_RETENTION_DAYS_MIN: u32 = 540;
/// The longest, days (a century: beyond it, "for ever" is the honest setting).
pub const OPERATION_RETENTION_DAYS_MAX: u32 = 36_500;

const TENANT_PERIODS: &str =
    "SELECT tenant_id, operation_days FROM tenant_retention ORDER BY tenant_id";
const SET_TENANT_PERIOD: &str = "INSERT INTO tenant_retention (tenant_id, operation_days, updated_at) \
     VALUES ($1, $2, $3) ON CONFLICT (tenant_id) DO UPDATE SET operation_days = $2, updated_at = $3";
const CLEAR_TENANT_PERIOD: &str = "DELETE FROM tenant_retention WHERE tenant_id = $1";
const TENANT_PERIOD: &str = "SELECT operation_days FROM tenant_retention WHERE tenant_id = $1";
/// What makes an operation prunable at cutoff `$2`: final, unreferenced by a refund, untouched.
macro_rules! prunable {
    () => {
        "o.status IN ('succeeded', 'failed', 'rejected', 'cancelled', 'awaiting_approval') \
         AND o.created_at < $2 AND o.updated_at < $2 \
         AND NOT EXISTS (SELECT 1 FROM operations r WHERE r.refund_of = o.id)"
    };
}
/// A tenant's (`$1`) prunable operations at cutoff `$2`, oldest first, `$3` at most (walks the
/// search directory's `(tenant_id, created_at)` index, not the operations table).
const PRUNABLE: &str = concat!(
    "SELECT o.id FROM operation_search s JOIN operations o ON o.id = s.id \
     WHERE s.tenant_id = $1 AND s.created_at < $2 AND ",
    prunable!(),
    " ORDER BY s.created_at, s.id LIMIT $3"
);
/// [`Dialect::LOCK_PRUNABLE`] on Postgres.
pub(crate) const LOCK_PRUNABLE_POSTGRES: &str = concat!(
    "SELECT o.id FROM operations o WHERE o.id IN (SELECT jsonb_array_elements_text($1::jsonb)) AND ",
    prunable!(),
    " ORDER BY o.id FOR UPDATE"
);
/// [`Dialect::LOCK_PRUNABLE`] on SQLite.
pub(crate) const LOCK_PRUNABLE_SQLITE: &str = concat!(
    "SELECT o.id FROM operations o WHERE o.id IN (SELECT value FROM json_each($1)) AND ",
    prunable!(),
    " ORDER BY o.id"
);
/// Checks a period a tenant asks for.
pub fn operation_period(days: u32) -> Result<u32, LimitError> {
    if (OPERATION_RETENTION_DAYS_MIN..=OPERATION_RETENTION_DAYS_MAX).contains(&days) {
        Ok(days)
    } else {
        Err(LimitError::OperationRetention(days))
    }
}

impl<DB: Dialect> Store<DB> {
    /// Deletes, in bounded batches, every row `retention` lets go of at `now`.
    pub async fn prune(
        &self,
        retention: &Retention,
        now: Timestamp,
    ) -> Result<Pruned, LedgerError> {
        let cutoff = |period: Duration| now.saturating_sub_span(period);
        Ok(Pruned {
            webhooks: self
                .prune_table(PRUNE_WEBHOOKS, cutoff(retention.webhooks), retention.batch)
                .await?,
            tool_calls: self
                .prune_table(
                    PRUNE_TOOL_CALLS,
                    cutoff(retention.tool_calls),
                    retention.batch,
                )
                .await?,
            tool_answers: self
                .prune_table(
                    PRUNE_TOOL_ANSWERS,
                    cutoff(retention.tool_calls),
                    retention.batch,
                )
                .await?,
            links: {
                // A code refers to its link: the codes of the links about to go, first.
                self.prune_table(
                    PRUNE_LINK_CODES,
                    cutoff(retention.expired_tokens),
                    retention.batch,
                )
                .await?;
                self.prune_table(
                    PRUNE_LINKS,
                    cutoff(retention.expired_tokens),
                    retention.batch,
                )
                .await?
            },
            sessions: self
                .prune_table(
                    PRUNE_SESSIONS,
                    cutoff(retention.expired_tokens),
                    retention.batch,
                )
                .await?,
            ..self.prune_operations(now, retention.batch).await?
        })
    }

    /// Sets (`Some`, checked by [`operation_period`]) or clears (`None`: kept for ever) a tenant's
    /// retention period for its operations.
    pub async fn set_operation_retention(
        &self,
        tenant: &TenantId,
        days: Option<u32>,
        now: Timestamp,
    ) -> Result<(), LedgerError> {
        match days {
            Some(days) => {
                let days = operation_period(days)?;
                let stmt = Stmt::new(SET_TENANT_PERIOD).bind(tenant.as_str());
                self.execute(stmt.bind(i64::from(days)).bind(now)).await?;
            }
            None => {
                self.execute(Stmt::new(CLEAR_TENANT_PERIOD).bind(tenant.as_str()))
                    .await?;
            }
        }
        Ok(())
    }

    /// A tenant's retention period for its operations, days (`None`: kept for ever).
    pub async fn operation_retention(&self, tenant: &TenantId) -> Result<Option<u32>, LedgerError> {
        let days: Option<i64> = self
            .first(Stmt::new(TENANT_PERIOD).bind(tenant.as_str()), |r| {
                r.get("operation_days")
            })
            .await?;
        Ok(days.and_then(|d| u32::try_from(d).ok()))
    }

    /// Deletes every tenant's operations past its period, in bounded batches: how many, and how
    /// many tenants failed (logged, then the next tenant goes on).
    async fn prune_operations(&self, now: Timestamp, batch: u32) -> Result<Pruned, LedgerError> {
        let periods: Vec<(String, i64)> = self
            .all(Stmt::new(TENANT_PERIODS), |r| {
                Ok((r.get("tenant_id")?, r.get("operation_days")?))
            })
            .await?;
        let mut pruned = Pruned::default();
        if periods.is_empty() {
            return Ok(pruned);
        }
        // Read once a prune: a migration adding a table that refers to operations is followed by
        // the next prune without a release.
        let owned = self.owned_rows().await?;
        for (tenant, days) in periods {
            let period = Duration::from_secs(u64::try_from(days).unwrap_or(u64::MAX) * 86_400);
            let cutoff = now.saturating_sub_span(period);
            match self
                .prune_tenant(&owned, &tenant, cutoff, batch.max(1))
                .await
            {
                Ok(n) => pruned.operations += n,
                Err(error) => {
                    pruned.operation_tenants_failed += 1;
                    tracing::error!(
                        tenant,
                        %error,
                        "prune: this tenant's operations were not pruned; the other tenants go on"
                    );
                }
            }
        }
        Ok(pruned)
    }

    /// Deletes one tenant's operations prunable at `cutoff`, oldest first, in bounded batches.
    async fn prune_tenant(
        &self,
        owned: &OwnedRows,
        tenant: &str,
        cutoff: Timestamp,
        batch: u32,
    ) -> Result<u64, LedgerError> {
        let mut deleted = 0;
        for _ in 0..PRUNE_BATCHES_MAX {
            let ids: Vec<String> = self
                .all(
                    Stmt::new(PRUNABLE)
                        .bind(tenant)
                        .bind(cutoff)
                        .bind(i64::from(batch)),
                    |r| r.get("id"),
                )
                .await?;
            if ids.is_empty() {
                break;
            }
            deleted += self.delete_operations(owned, &ids, cutoff).await?;
            if ids.len() < usize::try_from(batch).unwrap_or(usize::MAX) {
                break;
            }
        }
        Ok(deleted)
    }

    /// Deletes, in one transaction, those of `ids` still prunable at `cutoff` (checked again under
    /// the row locks) with every row of theirs; how many operations.
    async fn delete_operations(
        &self,
        owned: &OwnedRows,
        ids: &[String],
        cutoff: Timestamp,
    ) -> Result<u64, LedgerError> {
        let json = serde_json::to_string(ids)
            .map_err(|e| LedgerError::Corrupt(format!("prune ids: {e}")))?;
        let mut tx = self.begin().await?;
        let rows = DB::fetch_all(
            &mut *tx,
            Stmt::new(DB::LOCK_PRUNABLE)
                .bind(json.as_str())
                .bind(cutoff),
        )
        .await?;
        let locked = rows
            .iter()
            .map(|r| r.get::<String>("id"))
            .collect::<Result<Vec<_>, _>>()?;
        if locked.is_empty() {
            tx.rollback().await?;
            return Ok(0);
        }
        let locked_json = serde_json::to_string(&locked)
            .map_err(|e| LedgerError::Corrupt(format!("prune ids: {e}")))?;
        let mut operations = 0;
        for sql in owned.deletes() {
            operations = DB::execute(
                &mut *tx,
                Stmt::built(sql.clone()).bind(locked_json.as_str()),
            )
            .await?;
        }
        tx.commit().await?;
        Ok(operations)
    }

    async fn prune_table(
        &self,
        sql: &'static str,
        before: Timestamp,
        batch: u32,
    ) -> Result<u64, LedgerError> {
        let batch = batch.max(1);
        let mut deleted = 0;
        for _ in 0..PRUNE_BATCHES_MAX {
            let n = self
                .execute(Stmt::new(sql).bind(before).bind(i64::from(batch)))
                .await?;
            deleted += n;
            if n < u64::from(batch) {
                break;
            }
        }
        Ok(deleted)
    }
}

//! Rows the ledger lost, as a worker learns of them (migration `key_secret_fingerprint`).
//!
//! A first submission the processor answers as a replay had been made before, under the same key,
//! for a row this ledger no longer has (a restore, an asynchronous failover). The replay is that
//! first payment, so recording it as the operation's is right, and the rows then agree with the
//! processor: the scan would never call it lost. So the worker records the finding here
//! ([`Queue::record_lost_row`](super::Queue::record_lost_row)), and the reconciler's next sweep
//! raises the scan's lost-money alert for it once, notes it on the operation's audit trail, and
//! `reconciler list` shows the recent ones.

use super::LedgerError;
use super::dialect::Dialect;
use super::row::LedgerRow;
use super::statement::Stmt;
use super::store::Store;
use payonce_core::clock::Timestamp;
use payonce_core::id::OperationId;
use payonce_core::state::Note;

/// Longest `found_by` kept.
pub const FOUND_BY_LEN_MAX: usize = 200;

/// One operation whose first submission met a payment a lost row had made.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LostRow {
    /// The operation (the same id the lost row had: ids come from the business action).
    pub operation: OperationId,
    /// The payment the processor replayed.
    pub reference: String,
    /// Which process learned it.
    pub found_by: String,
    /// When, ms.
    #[serde(rename = "found_at_ms")]
    pub found_at: Timestamp,
    /// When the reconciler raised its alert, ms; `None` until then.
    #[serde(rename = "reported_at_ms")]
    pub reported_at: Option<Timestamp>,
}

const INSERT: &str = "INSERT INTO lost_rows (operation_id, reference, found_by, found_at) \
     VALUES ($1, $2, $3, $4) ON CONFLICT (operation_id) DO NOTHING";
const UNREPORTED: &str = "SELECT operation_id, reference, found_by, found_at, reported_at \
     FROM lost_rows WHERE reported_at IS NULL ORDER BY found_at LIMIT $1";
const RECENT: &str = "SELECT operation_id, reference, found_by, found_at, reported_at \
     FROM lost_rows ORDER BY found_at DESC LIMIT $1";
const MARK_REPORTED: &str =
    "UPDATE lost_rows SET reported_at = $2 WHERE operation_id = $1 AND reported_at IS NULL";
/// The operation's audit trail gets the fact, its state unchanged.
const NOTE: &str = "UPDATE operations SET updated_at = $2, last_event = $3, last_actor = $4, \
     last_detail = $5 WHERE id = $1";

pub(crate) fn decode(row: &impl LedgerRow) -> Result<LostRow, LedgerError> {
    Ok(LostRow {
        operation: row.get("operation_id")?,
        reference: row.get("reference")?,
        found_by: row.get("found_by")?,
        found_at: row.get("found_at")?,
        reported_at: row.get("reported_at")?,
    })
}

/// The audit detail of a lost row on its operation.
pub fn detail(lost: &LostRow) -> String {
    format!(
        "LOST ROW: the processor answered this operation's first submission with {}, made \
         earlier under the same key for a row this ledger no longer has (a restore or a \
         failover); recorded as that payment. Check what else the loss took: `payonce \
         reconciler sweep --once` scans the processor for it",
        lost.reference
    )
}

impl<DB: Dialect> Store<DB> {
    /// [`Queue::record_lost_row`](super::Queue::record_lost_row).
    pub(crate) async fn insert_lost_row(
        &self,
        id: &OperationId,
        reference: &str,
        found_by: &str,
        now: Timestamp,
    ) -> Result<(), LedgerError> {
        let found_by: String = found_by.chars().take(FOUND_BY_LEN_MAX).collect();
        let stmt = Stmt::new(INSERT)
            .bind(id)
            .bind(reference)
            .bind(found_by.as_str());
        self.execute(stmt.bind(now)).await?;
        Ok(())
    }

    /// Lost rows whose alert has not been raised, oldest first, at most `limit`.
    pub(crate) async fn select_unreported_lost_rows(
        &self,
        limit: u32,
    ) -> Result<Vec<LostRow>, LedgerError> {
        self.all(Stmt::new(UNREPORTED).bind(i64::from(limit)), decode)
            .await
    }

    /// The newest lost rows, at most `limit`.
    pub(crate) async fn select_recent_lost_rows(
        &self,
        limit: u32,
    ) -> Result<Vec<LostRow>, LedgerError> {
        self.all(Stmt::new(RECENT).bind(i64::from(limit)), decode)
            .await
    }

    /// Marks `lost` reported and notes it on its operation; false if another reconciler did first.
    pub(crate) async fn mark_lost_row_reported(
        &self,
        lost: &LostRow,
        actor: &str,
        now: Timestamp,
    ) -> Result<bool, LedgerError> {
        let marked = self
            .execute(Stmt::new(MARK_REPORTED).bind(&lost.operation).bind(now))
            .await?;
        if marked == 0 {
            return Ok(false);
        }
        let note = Stmt::new(NOTE)
            .bind(&lost.operation)
            .bind(now)
            .bind(Note::LostRow.as_str())
            .bind(actor)
            .bind(detail(lost));
        self.execute(note).await?;
        Ok(true)
    }
}

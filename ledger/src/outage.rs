//! What the ledger keeps of a processor outage (migration `processor_reachability`): one row saying
//! whether the processes that submit payments last found the processor reachable, and since when
//! not, on the ledger's clock. Written only when a process sees a change; read by every api (its
//! console's banner and its `/metrics`), so an api running apart from the workers shows the outage
//! too. A trait of its own, reached through [`Operations::outage`](super::Operations::outage).

use super::LedgerError;
use super::dialect::Dialect;
use super::interface::LedgerTime;
use super::row::LedgerRow;
use super::statement::Stmt;
use super::store::Store;
use async_trait::async_trait;
use payonce_core::clock::Timestamp;

/// Longest process name kept as the row's `changed_by`.
pub const CHANGED_BY_LEN_MAX: usize = 200;

/// The processor's reachability as the ledger records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedReachability {
    /// Since when the processor has been unreachable; `None` while it is reachable.
    pub down_since: Option<Timestamp>,
    /// When a process last recorded a change (0: never).
    pub changed_at: Timestamp,
    /// Which process did (`worker-host-1234`).
    pub changed_by: String,
}

/// The outage store.
#[async_trait]
pub trait OutageLedger: Send + Sync {
    /// Records what process `by` found, at the ledger's time (`local` where the store has no clock
    /// of its own): unreachable (`down`; an outage already recorded keeps its start) or reachable
    /// again. Returns the row as written.
    async fn record_reachability(
        &self,
        down: bool,
        by: &str,
        local: Timestamp,
    ) -> Result<RecordedReachability, LedgerError>;
    /// The row as last written.
    async fn reachability(&self) -> Result<RecordedReachability, LedgerError>;
}

const RECORD_DOWN: &str = "UPDATE processor_reachability SET down_since = COALESCE(down_since, $1), \
     changed_at = $1, changed_by = $2 WHERE id = 1";
const RECORD_UP: &str = "UPDATE processor_reachability SET down_since = NULL, changed_at = $1, \
     changed_by = $2 WHERE id = 1";
const SELECT_REACHABILITY: &str =
    "SELECT down_since, changed_at, changed_by FROM processor_reachability WHERE id = 1";

fn decode(row: &impl LedgerRow) -> Result<RecordedReachability, LedgerError> {
    Ok(RecordedReachability {
        down_since: row.get("down_since")?,
        changed_at: row.get("changed_at")?,
        changed_by: row.get("changed_by")?,
    })
}

#[async_trait]
impl<DB: Dialect> OutageLedger for Store<DB> {
    async fn record_reachability(
        &self,
        down: bool,
        by: &str,
        local: Timestamp,
    ) -> Result<RecordedReachability, LedgerError> {
        let now = LedgerTime::now(self, local).await?;
        let by: String = by.chars().take(CHANGED_BY_LEN_MAX).collect();
        let statement = if down { RECORD_DOWN } else { RECORD_UP };
        match self
            .execute(Stmt::new(statement).bind(now).bind(by.as_str()))
            .await?
        {
            1 => self.reachability().await,
            n => Err(LedgerError::Corrupt(format!(
                "recording the processor's reachability changed {n} rows instead of its one"
            ))),
        }
    }

    async fn reachability(&self) -> Result<RecordedReachability, LedgerError> {
        self.first(Stmt::new(SELECT_REACHABILITY), decode)
            .await?
            .ok_or_else(|| LedgerError::Corrupt("the processor_reachability row is missing".into()))
    }
}

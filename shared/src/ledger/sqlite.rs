//! The embedded store: a file (single node) or memory (tests). One connection serializes every
//! statement, which is what SQLite does with writers anyway, and rules out `SQLITE_BUSY`.

use super::store::{impl_ledger, record_on};
use super::{LedgerError, Recorded, migrate, sql};
use crate::clock::{Clock, SystemClock};
use crate::id::OperationId;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Connection, SqlitePool};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// How long a caller waits for the connection before the call fails.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long SQLite itself waits on a lock held by another process sharing the file.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

pub(crate) const CLAIM: &str = "UPDATE operations SET status = 'executing', attempt = attempt + 1, \
       lease_owner = $3, lease_expires_at = $4, updated_at = $1, last_event = 'claim', last_actor = $3, \
       last_detail = NULL \
     WHERE id IN (SELECT id FROM operations WHERE status = 'ready' AND available_at <= $1 \
       ORDER BY available_at LIMIT $2) RETURNING *";
pub(crate) const NOTIFY_READY: Option<&str> = None;

/// The SQLite ledger.
#[derive(Debug, Clone)]
pub struct SqliteLedger {
    pool: SqlitePool,
    ready: Arc<Notify>,
}

impl SqliteLedger {
    /// Opens (creating if needed) the database and runs pending migrations. `sqlite::memory:` gives
    /// a private in-memory ledger.
    pub async fn connect(url: &str) -> Result<Self, LedgerError> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(BUSY_TIMEOUT);
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            // An in-memory database lives as long as its one connection: never let it be reaped.
            .idle_timeout(None)
            .max_lifetime(None)
            .after_release(|conn, _meta| {
                Box::pin(async move { Ok(!still_in_transaction(conn).await) })
            })
            .connect_with(options)
            .await?;
        let mut conn = pool.acquire().await?;
        migrate::sqlite(&mut conn, SystemClock.now_ms()).await?;
        drop(conn);
        Ok(SqliteLedger {
            pool,
            ready: Arc::new(Notify::new()),
        })
    }

    /// The pool, for tests that inspect the database directly.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    async fn wait_ready(&self, max_wait: Duration) {
        let _ = tokio::time::timeout(max_wait, self.ready.notified()).await;
    }

    fn wake_local(&self) {
        self.ready.notify_waiters();
    }
}

/// The same guard as Postgres's (see there). In SQLite, `BEGIN` fails inside a transaction; outside
/// it succeeds and is rolled back at once.
async fn still_in_transaction(conn: &mut sqlx::SqliteConnection) -> bool {
    if conn.is_in_transaction() {
        return true;
    }
    match sqlx::raw_sql("BEGIN").execute(&mut *conn).await {
        Ok(_) => sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await.is_err(),
        Err(_) => true,
    }
}

impl_ledger!(SqliteLedger, "sqlite", self_dialect);

/// Records submission starts for a claimed batch in one transaction, one statement each: SQLite
/// runs in-process (no round trips) and serializes writers, so there is no lock order to keep.
pub(crate) async fn mark_submitting_batch(
    pool: &SqlitePool,
    items: &[(OperationId, i64)],
    now_ms: i64,
) -> Result<Vec<bool>, LedgerError> {
    let mut tx = pool.begin().await?;
    let mut marked = Vec::with_capacity(items.len());
    for (id, attempt) in items {
        let done = sqlx::query(sql::MARK_SUBMITTING)
            .bind(id.as_str())
            .bind(*attempt)
            .bind(now_ms)
            .execute(&mut *tx)
            .await?;
        marked.push(done.rows_affected() == 1);
    }
    tx.commit().await?;
    Ok(marked)
}

/// Records outcomes in one transaction, one statement each, each fenced on its own.
pub(crate) async fn record_batch(
    pool: &SqlitePool,
    items: &[(OperationId, i64, Recorded)],
    actor: &str,
    now_ms: i64,
) -> Result<Vec<bool>, LedgerError> {
    let mut tx = pool.begin().await?;
    let mut recorded = Vec::with_capacity(items.len());
    for (id, attempt, outcome) in items {
        let result: Result<_, LedgerError> =
            record_on!(&mut *tx, id, *attempt, outcome, actor, now_ms);
        match result {
            Ok(_) => recorded.push(true),
            Err(LedgerError::Fenced { .. }) => recorded.push(false),
            Err(other) => return Err(other),
        }
    }
    tx.commit().await?;
    Ok(recorded)
}

/// The statements and batches only SQLite has.
mod self_dialect {
    pub(crate) use super::super::sql::RENEW;
    pub(crate) use super::{CLAIM, NOTIFY_READY, mark_submitting_batch, record_batch};
}

//! The embedded store: a file (single node) or memory (tests). One connection serializes every
//! statement, which is what SQLite does with writers anyway, and rules out `SQLITE_BUSY`.

use super::dialect::Dialect;
use super::moves::{legal, status_in, update_logged_as};
use super::queue::{record_on, submission_started_at_claim};
use super::recovery::{
    EXPIRE_SUBMITTED, EXPIRE_UNSUBMITTED, SET_SUCCEEDED, expiry_detail, found_detail,
};
use super::statement::{Driver, RowCount, Stmt};
use super::store::Store;
use super::{ExpireLeases, Fence, LedgerError, RecordLookups, Recorded, bounded, migrate};
use crate::clock::{Clock, SystemClock, Timestamp};
use crate::state::{Event, SUBMITTING_CLAIM, Status, transition};
use async_trait::async_trait;
use sqlx::Sqlite;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteQueryResult,
    SqliteSynchronous,
};
use std::str::FromStr;
use std::sync::LazyLock;
use std::time::Duration;

/// How long a caller waits for the connection before the call fails.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long SQLite itself waits on a lock held by another process sharing the file.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Claims the oldest ready rows (the `ready` partial index serves the inner select).
static CLAIM: LazyLock<String> = LazyLock::new(|| claim(Event::Claim.as_str(), ""));
/// The same claim, also recording in the same row version that each claimed operation's request is
/// about to leave (`Queue::claim_to_submit`), logged as one `submission_started` (`SUBMITTING_CLAIM`).
static CLAIM_TO_SUBMIT: LazyLock<String> =
    LazyLock::new(|| claim(SUBMITTING_CLAIM, &submission_started_at_claim("")));

/// The claim statement, logged as `logged`, with `also` (`, column = …` assignments) added to its update.
fn claim(logged: &str, also: &str) -> String {
    let claim = legal(&[Status::Ready], Event::Claim);
    update_logged_as(
        &claim,
        logged,
        &format!(
            "attempt = attempt + 1, lease_owner = $3, lease_expires_at = $4, updated_at = $1, \
             last_actor = $3, last_detail = NULL{also}"
        ),
        &format!(
            "id IN (SELECT id FROM operations WHERE {} AND available_at <= $1 ORDER BY available_at LIMIT $2)",
            status_in("status", &claim.from)
        ),
        true,
    )
}
/// Renews only the leases named in `$4` (a JSON array of ids): an owner-wide renewal would keep alive
/// a lease whose work the owner gave up on (an outcome it could not record through an outage).
const RENEW: &str = "UPDATE operations SET lease_expires_at = $3, last_event = NULL \
     WHERE status = 'executing' AND lease_owner = $1 AND lease_expires_at > $2 \
     AND id IN (SELECT value FROM json_each($4)) RETURNING id, attempt";

/// A note (no state change): a request is about to leave, for one fence. Refused once the lease
/// has expired.
const MARK_SUBMITTING: &str = "UPDATE operations SET first_submitted_at = COALESCE(first_submitted_at, $3), \
     first_submitted_attempt = COALESCE(first_submitted_attempt, $2), last_submitted_at = $3, \
     submit_count = submit_count + 1, updated_at = $3, last_event = 'submission_started', last_actor = lease_owner, \
     last_detail = NULL \
     WHERE id = $1 AND attempt = $2 AND status = 'executing' AND lease_expires_at > $3";
/// The SQLite ledger.
pub type SqliteLedger = Store<Sqlite>;

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
            .connect_with(options)
            .await?;
        let mut conn = pool.acquire().await?;
        migrate::sqlite(&mut conn, SystemClock.now()).await?;
        drop(conn);
        Ok(Store::new(pool))
    }
}

impl RowCount for SqliteQueryResult {
    fn rows(&self) -> u64 {
        self.rows_affected()
    }
}

#[async_trait]
impl Dialect for Sqlite {
    const STORE: &'static str = "sqlite";
    const RENEW: &'static str = RENEW;
    // One process owns the file: the in-process wake-up reaches every worker.
    const NOTIFY_READY: Option<&'static str> = None;
    const LOCK_OPERATION: Option<&'static str> = None;
    // SQLite is embedded: the process that runs a statement is the database, and its clock (the
    // caller's, injected) is the database's. Processes sharing one file share one machine's clock.
    const NOW: Option<&'static str> = None;

    fn claim(to_submit: bool) -> &'static str {
        if to_submit {
            CLAIM_TO_SUBMIT.as_str()
        } else {
            CLAIM.as_str()
        }
    }

    async fn wait_ready(store: &SqliteLedger, max_wait: Duration) {
        let _ = tokio::time::timeout(max_wait, store.ready.notified()).await;
    }

    /// One transaction, one statement each: SQLite runs in-process (no round trips) and
    /// serializes writers, so there is no lock order to keep.
    async fn mark_submitting(
        store: &SqliteLedger,
        fences: &[Fence],
        now: Timestamp,
    ) -> Result<Vec<bool>, LedgerError> {
        let mut tx = store.pool.begin().await?;
        let mut marked = Vec::with_capacity(fences.len());
        for fence in fences {
            let stmt = fence.stmt(MARK_SUBMITTING).bind(now);
            marked.push(Sqlite::execute(&mut *tx, stmt).await? == 1);
        }
        tx.commit().await?;
        Ok(marked)
    }

    /// One transaction, the per-lease statement of `Recovery::expire_lease` for each.
    async fn expire_leases(
        store: &SqliteLedger,
        request: &ExpireLeases<'_>,
        now: Timestamp,
    ) -> Result<Vec<Option<Status>>, LedgerError> {
        let actor = bounded(request.actor);
        let mut tx = store.pool.begin().await?;
        let mut moved = Vec::with_capacity(request.leases.len());
        for lease in request.leases {
            let (statement, event) = if lease.submitted {
                (&EXPIRE_SUBMITTED, Event::LeaseExpiredSubmitted)
            } else {
                (&EXPIRE_UNSUBMITTED, Event::LeaseExpiredUnsubmitted)
            };
            let stmt = Stmt::new(statement.as_str())
                .bind(&lease.id)
                .bind(lease.attempt)
                .bind(now)
                .bind(actor.as_str())
                .bind(expiry_detail(lease))
                .bind(request.next_check_at);
            let written = Sqlite::execute(&mut *tx, stmt).await? == 1;
            moved.push(written.then_some(transition(Status::Executing, event)?));
        }
        tx.commit().await?;
        Ok(moved)
    }

    /// One transaction, the report statement `Recovery::apply_report` writes for a lookup that
    /// found the payment of an `unknown` row, for each.
    async fn record_lookups(
        store: &SqliteLedger,
        request: &RecordLookups<'_>,
        now: Timestamp,
    ) -> Result<Vec<bool>, LedgerError> {
        let found = legal(&[Status::Unknown], Event::ProcessorSucceeded);
        let source = bounded(request.source);
        let mut tx = store.pool.begin().await?;
        let mut recorded = Vec::with_capacity(request.found.len());
        for item in request.found {
            let stmt = item
                .fence
                .stmt(SET_SUCCEEDED)
                .bind(Status::Unknown.as_str())
                .bind(found.to.as_str())
                .bind(found.event.as_str())
                .bind(item.reference.as_str())
                .bind(item.result.to_string())
                .bind(now)
                .bind(source.as_str())
                .bind(bounded(&found_detail(request.source, &item.reference)));
            recorded.push(Sqlite::fetch_optional(&mut *tx, stmt).await?.is_some());
        }
        tx.commit().await?;
        Ok(recorded)
    }

    /// One transaction, one statement each, each fenced on its own.
    async fn record_batch(
        store: &SqliteLedger,
        items: &[(Fence, Recorded)],
        actor: &str,
        now: Timestamp,
    ) -> Result<Vec<bool>, LedgerError> {
        let mut tx = store.pool.begin().await?;
        let recorded = Self::record_batch_on(&mut tx, items, actor, now).await?;
        tx.commit().await?;
        Ok(recorded)
    }

    async fn record_batch_on(
        conn: &mut sqlx::SqliteConnection,
        items: &[(Fence, Recorded)],
        actor: &str,
        now: Timestamp,
    ) -> Result<Vec<bool>, LedgerError> {
        let mut recorded = Vec::with_capacity(items.len());
        for (fence, outcome) in items {
            match record_on::<Sqlite>(&mut *conn, fence, outcome, actor, now).await {
                Ok(_) => recorded.push(true),
                Err(LedgerError::Fenced { .. }) => recorded.push(false),
                Err(other) => return Err(other),
            }
        }
        Ok(recorded)
    }
}

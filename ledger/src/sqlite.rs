//! The embedded store: a file (single node) or memory (tests). One connection serializes every
//! statement, which is what SQLite does with writers anyway, and rules out `SQLITE_BUSY`.

use super::dialect::Dialect;
use super::intake::{IntakeSql, JsonColumn};
use super::lanes::LanesClaim;
use super::moves::{legal, status_in, update_logged_as};
use super::queue::{record_on, submission_started_at_claim};
use super::recovery::{
    EXPIRE_SUBMITTED, EXPIRE_UNSUBMITTED, SET_SUCCEEDED, expiry_detail, found_detail,
};
use super::row::LedgerRow;
use super::statement::{Driver, RowCount, Stmt};
use super::store::Store;
use super::{ExpireLeases, Fence, LedgerError, RecordLookups, Recorded, bounded, migrate};
use async_trait::async_trait;
use payonce_core::clock::{Clock, SystemClock, Timestamp};
use payonce_core::state::{Event, SUBMITTING_CLAIM, Status, transition};
use sqlx::Sqlite;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteQueryResult,
    SqliteSynchronous,
};
use std::path::Path;
use std::str::FromStr;
use std::sync::LazyLock;
use std::time::Duration;

/// How long a caller waits for the connection before the call fails.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long SQLite itself waits on a lock held by another process sharing the file.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Claims ready rows, interactive first, then the oldest (the due rows read through
/// `operations_lanes_idx`, then sorted: the daemon claims by lanes instead).
static CLAIM: LazyLock<String> = LazyLock::new(|| claim(Event::Claim.as_str(), "", ORDER_OLDEST));
/// The same claim, also recording in the same row version that each claimed operation's request is
/// about to leave (`Queue::claim_to_submit`), logged as one `submission_started` (`SUBMITTING_CLAIM`).
static CLAIM_TO_SUBMIT: LazyLock<String> = LazyLock::new(|| {
    claim(
        SUBMITTING_CLAIM,
        &submission_started_at_claim(""),
        ORDER_OLDEST,
    )
});
/// One lane's claim (`Queue::claim_lanes`, run per lane in one transaction: SQLite takes no
/// per-row limit from a joined row): `$2` rows of priority `$5` and tenant `$6`, oldest first.
static CLAIM_LANE: LazyLock<String> = LazyLock::new(|| {
    claim(
        SUBMITTING_CLAIM,
        &submission_started_at_claim(""),
        "AND priority = $5 AND tenant_id = $6 ORDER BY available_at",
    )
});
const ORDER_OLDEST: &str = "ORDER BY priority, available_at";

/// The claim statement, logged as `logged`, with `also` (`, column = …` assignments) added to its
/// update, picking with `pick` (further conditions and the order).
fn claim(logged: &str, also: &str, pick: &str) -> String {
    let claim = legal(&[Status::Ready], Event::Claim);
    update_logged_as(
        &claim,
        logged,
        &format!(
            "attempt = attempt + 1, lease_owner = $3, lease_expires_at = $4, updated_at = $1, \
             last_actor = $3, last_detail = NULL{also}"
        ),
        &format!(
            "id IN (SELECT id FROM operations WHERE {} AND available_at <= $1 {pick} LIMIT $2)",
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
/// Pages the file may still grow by under `max_page_count` (its free pages included), the page
/// size, and the file (empty for `:memory:`).
const WRITE_HEADROOM: &str = "SELECT (SELECT max_page_count FROM pragma_max_page_count()) \
     - (SELECT page_count FROM pragma_page_count()) \
     + (SELECT freelist_count FROM pragma_freelist_count()) AS pages, \
     (SELECT page_size FROM pragma_page_size()) AS page_size, \
     (SELECT file FROM pragma_database_list() WHERE name = 'main') AS file";

/// The batch intake's statements: JSON rows through `json_each`; one connection serializes every
/// writer, so nothing is locked first.
static INTAKE: LazyLock<IntakeSql> =
    LazyLock::new(|| IntakeSql::build(json_rows, "*", None, false));

/// `(SELECT json_extract(value, '$.column') AS column, ... FROM json_each(param)) AS b`.
fn json_rows(param: &str, columns: &[(&str, JsonColumn)]) -> String {
    let columns: Vec<String> = columns
        .iter()
        .map(|(name, _)| format!("json_extract(value, '$.{name}') AS {name}"))
        .collect();
    format!(
        "(SELECT {} FROM json_each({param})) AS b",
        columns.join(", ")
    )
}

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
            .after_release(|conn, _| Box::pin(keep_after_release(conn)))
            .connect_with(options)
            .await?;
        let mut conn = pool.acquire().await?;
        migrate::sqlite(&mut conn, SystemClock.now()).await?;
        drop(conn);
        Ok(Store::new(pool))
    }
}

/// Whether a connection coming back to the pool may be used again: not while sqlx still counts
/// it inside a transaction. That happens when SQLite rolled the transaction back on its own: a
/// `COMMIT` that failed for a full disk or an I/O error (or a statement that did, without a
/// statement journal) ends the transaction in SQLite, sqlx's `ROLLBACK` then fails and its count
/// stays at one. The next `begin` on it sends `SAVEPOINT`, which opens a transaction in SQLite; a
/// rollback of that is `ROLLBACK TO`, which leaves it open; and every later write on the one
/// connection stays inside it, visible in this process and never committed (issue 43). sqlx resets
/// its count only with a new connection: returning `false` closes this one and the pool opens
/// another (`min_connections`). A `:memory:` ledger is lost with it, loudly (every later call
/// fails), instead of silently keeping nothing.
async fn keep_after_release(conn: &mut sqlx::SqliteConnection) -> Result<bool, sqlx::Error> {
    use sqlx::Connection;
    if !conn.is_in_transaction() {
        return Ok(true);
    }
    // A transaction dropped unfinished queued its `ROLLBACK` without waiting: the connection runs
    // commands in order, so after this ping the count is settled.
    conn.ping().await?;
    let stuck = conn.is_in_transaction();
    if stuck {
        tracing::error!(
            "a ledger connection left a transaction SQLite had already ended; reopening it"
        );
    }
    Ok(!stuck)
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
    // The single writer holds the file for the transaction: nothing changes between the statements.
    const LOCK_PRUNABLE: &'static str = super::retention::LOCK_PRUNABLE_SQLITE;
    const CLOSE_KNOWN_HINTS: &'static str = super::webhooks::CLOSE_KNOWN_HINTS_SQLITE;
    const FOREIGN_KEYS: &'static str = super::ownership::FOREIGN_KEYS_SQLITE;
    const KEYED_TABLES: &'static str = super::ownership::KEYED_TABLES_SQLITE;
    const JSON_IDS: &'static str = "(SELECT value FROM json_each($1))";

    fn json_rows(param: &str, columns: &[(&str, JsonColumn)]) -> String {
        json_rows(param, columns)
    }

    fn intake() -> &'static IntakeSql {
        &INTAKE
    }

    fn claim_lanes() -> LanesClaim {
        LanesClaim::PerLane(CLAIM_LANE.as_str())
    }

    const READY_LANES: &'static str = super::lanes::READY_LANES_SQLITE;

    fn claim(to_submit: bool) -> &'static str {
        if to_submit {
            CLAIM_TO_SUBMIT.as_str()
        } else {
            CLAIM.as_str()
        }
    }

    /// The least of the room under `max_page_count` and the filesystem's free space in pages: on
    /// a full disk a commit fails when the write-ahead log cannot grow, whatever the file's limit.
    async fn write_headroom(store: &SqliteLedger) -> Result<Option<i64>, LedgerError> {
        let (pages, page_size, file): (i64, i64, Option<String>) = store
            .first(Stmt::new(WRITE_HEADROOM), |r| {
                Ok((r.get("pages")?, r.get("page_size")?, r.get("file")?))
            })
            .await?
            .ok_or_else(|| {
                LedgerError::Corrupt("the page headroom query returned no row".into())
            })?;
        let dir = file
            .as_deref()
            .filter(|f| !f.is_empty())
            .and_then(|f| Path::new(f).parent());
        let Some(dir) = dir else {
            return Ok(Some(pages));
        };
        let fs = rustix::fs::statvfs(dir)
            .map_err(|e| LedgerError::Database(sqlx::Error::Io(e.into())))?;
        let free_bytes = fs.f_bavail.saturating_mul(fs.f_frsize);
        let free_pages =
            i64::try_from(free_bytes / page_size.max(1).unsigned_abs()).unwrap_or(i64::MAX);
        Ok(Some(pages.min(free_pages)))
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

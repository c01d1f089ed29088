//! The production store: many workers on many machines share one Postgres.

use super::dialect::Dialect;
use super::moves::{legal, status_in};
use super::queue::record_on;
use super::statement::RowCount;
use super::store::Store;
use super::{Fence, LedgerError, Recorded, bounded, migrate};
use crate::clock::{Clock, SystemClock, Timestamp};
use crate::state::{Event, Status};
use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions, PgQueryResult};
use sqlx::{Connection, PgPool, Postgres};
use std::collections::{HashMap, HashSet};
use std::str::FromStr;
use std::sync::LazyLock;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::Notify;

/// How long a caller waits for a pooled connection before the call fails.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);
/// Statement timeout set on every connection: no ledger statement may run longer.
pub const STATEMENT_TIMEOUT_MS: u64 = 15_000;
/// The channel approvals notify on, so idle workers wake at once.
pub const READY_CHANNEL: &str = "payonce_ready";
/// Pause before re-opening a failed LISTEN connection.
const LISTEN_RETRY: Duration = Duration::from_secs(1);

/// Claims the oldest ready rows, skipping rows another claimer holds locked.
static CLAIM: LazyLock<String> = LazyLock::new(|| {
    let claim = legal(&[Status::Ready], Event::Claim);
    format!(
        "WITH picked AS ( \
           SELECT id FROM operations WHERE {from} AND available_at <= $1 \
           ORDER BY available_at LIMIT $2 FOR UPDATE SKIP LOCKED) \
         UPDATE operations o SET status = '{to}', last_event = '{event}', attempt = o.attempt + 1, \
           lease_owner = $3, lease_expires_at = $4, updated_at = $1, last_actor = $3, last_detail = NULL \
         FROM picked WHERE o.id = picked.id AND {o_from} RETURNING o.*",
        from = status_in("status", &claim.from),
        o_from = status_in("o.status", &claim.from),
        to = claim.to.as_str(),
        event = claim.event.as_str(),
    )
});
const NOTIFY_READY: Option<&str> = Some("SELECT pg_notify('payonce_ready', '')");
/// Renewal locks the owner's rows in id order, as the batches below do: a renewal racing a batch
/// then waits instead of deadlocking (which cost a 1 s `deadlock_timeout` stall and a failed renewal).
/// Only the ids in `$4` (a JSON array) are renewed: those the owner is still working on.
const RENEW: &str = "WITH held AS MATERIALIZED ( \
       SELECT id FROM operations WHERE status = 'executing' AND lease_owner = $1 AND lease_expires_at > $2 \
       AND id IN (SELECT jsonb_array_elements_text($4::jsonb)) ORDER BY id FOR UPDATE) \
     UPDATE operations o SET lease_expires_at = $3, last_event = NULL FROM held WHERE o.id = held.id \
     RETURNING o.id, o.attempt";
/// A note (no state change): requests are about to leave, for one fence or a whole claimed batch
/// in one statement (one round trip, one commit), rows locked in id order. Refused once a lease has
/// expired. Returns the ids marked; the others lost their fence.
///
/// The fence (attempt, `executing`, unexpired lease) is the `locked` CTE's: `FOR UPDATE` re-checks
/// it on the newest row version and holds the row until commit, so the outer update, which joins
/// only locked rows by primary key, needs no second copy. A second copy would be harmful: it
/// matches `operations_lease_idx`'s predicate, whose statistics say almost no row is executing,
/// and the planner then scans every executing row once per batch row (measured: 150 ms for a
/// 128-row batch with 512 rows executing, 36 ms without; issue 16).
const MARK_SUBMITTING: &str = "WITH locked AS MATERIALIZED ( \
       SELECT o.id, o.attempt FROM operations o \
       JOIN unnest($1::text[], $2::bigint[]) AS b(id, attempt) ON o.id = b.id AND o.attempt = b.attempt \
       WHERE o.status = 'executing' AND o.lease_expires_at > $3 ORDER BY o.id FOR UPDATE OF o) \
     UPDATE operations o SET first_submitted_at = COALESCE(o.first_submitted_at, $3), \
       first_submitted_attempt = COALESCE(o.first_submitted_attempt, locked.attempt), last_submitted_at = $3, \
       submit_count = o.submit_count + 1, updated_at = $3, last_event = 'submission_started', \
       last_actor = o.lease_owner, last_detail = NULL \
     FROM locked WHERE o.id = locked.id AND o.attempt = locked.attempt \
     RETURNING o.id";
/// Locks a batch's rows in id order before any of them is written (see `RENEW`).
/// Two refunds of one payment queue here, so the second's guard reads a snapshot taken after the
/// first committed (READ COMMITTED: each statement sees what was committed before it began).
const LOCK_REFUNDED_PAYMENT: &str = "SELECT id FROM operations WHERE id = $1 FOR UPDATE";
const LOCK_BATCH: &str = "SELECT id FROM operations WHERE id = ANY($1) ORDER BY id FOR UPDATE";
/// The worker's `processor_succeeded` for many rows in one statement, each fenced by its own
/// attempt, rows locked in id order first (see `RENEW`). Needs no transaction of its own: it is the
/// batch's only statement when every outcome is a success (the common case), one commit per batch.
/// The fence (attempt, the move's from-state) is checked under the lock, as in `MARK_SUBMITTING`
/// (which says why the outer update must not repeat it).
static RECORD_SUCCEEDED_BATCH: LazyLock<String> = LazyLock::new(|| {
    let succeeded = legal(&[Status::Executing], Event::ProcessorSucceeded);
    format!(
        "WITH b AS MATERIALIZED ( \
           SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[]) AS b(id, attempt, reference, result)), \
         locked AS MATERIALIZED ( \
           SELECT o.id, b.attempt, b.reference, b.result FROM operations o JOIN b ON o.id = b.id AND o.attempt = b.attempt \
           WHERE {from} ORDER BY o.id FOR UPDATE OF o) \
         UPDATE operations o SET status = '{to}', last_event = '{event}', external_ref = l.reference, \
           result = l.result, failure_code = NULL, failure_message = NULL, lease_owner = NULL, \
           lease_expires_at = NULL, next_check_at = NULL, updated_at = $6, last_actor = $5, \
           last_detail = l.reference \
         FROM locked l WHERE o.id = l.id AND o.attempt = l.attempt \
         RETURNING o.id",
        to = succeeded.to.as_str(),
        event = succeeded.event.as_str(),
        from = status_in("o.status", &succeeded.from),
    )
});

/// The Postgres ledger.
pub type PostgresLedger = Store<Postgres>;

impl PostgresLedger {
    /// Connects, installs the release guard and runs pending migrations.
    pub async fn connect(url: &str, max_connections: u32) -> Result<Self, LedgerError> {
        let options = PgConnectOptions::from_str(url)?
            .options([("statement_timeout", STATEMENT_TIMEOUT_MS.to_string())])
            .application_name("payonce");
        let pool = PgPoolOptions::new()
            .max_connections(max_connections.max(1))
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .after_release(|conn, _meta| {
                Box::pin(async move { Ok(!still_in_transaction(conn).await) })
            })
            .connect_with(options)
            .await?;
        let mut conn = pool.acquire().await?;
        migrate::postgres(&mut conn, SystemClock.now()).await?;
        drop(conn);
        Ok(Store::new(pool))
    }

    fn ensure_listening(&self) {
        if self.listening.swap(true, Ordering::SeqCst) {
            return;
        }
        let pool = self.pool.clone();
        let ready = self.ready.clone();
        tokio::spawn(async move {
            loop {
                match listen(&pool, &ready).await {
                    Ok(()) => return,
                    Err(error) => {
                        tracing::warn!(%error, "LISTEN connection failed; polling until it is back")
                    }
                }
                tokio::time::sleep(LISTEN_RETRY).await;
            }
        });
    }
}

async fn listen(pool: &PgPool, ready: &Notify) -> Result<(), sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(READY_CHANNEL).await?;
    loop {
        listener.recv().await?;
        ready.notify_waiters();
    }
}

/// Guards against sqlx 0.9 returning a connection to the pool inside an open transaction (a
/// cancelled `begin()` leaves `BEGIN` sent but uncounted; later autocommit writes on it would never
/// commit). `SAVEPOINT` succeeds only inside a transaction block, so success means: close it.
async fn still_in_transaction(conn: &mut sqlx::PgConnection) -> bool {
    if conn.is_in_transaction() {
        return true;
    }
    match sqlx::raw_sql("SAVEPOINT payonce_release_probe")
        .execute(&mut *conn)
        .await
    {
        Ok(_) => true,
        // 25P01 no_active_sql_transaction: the healthy case.
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("25P01") => false,
        Err(_) => true,
    }
}

impl RowCount for PgQueryResult {
    fn rows(&self) -> u64 {
        self.rows_affected()
    }
}

#[async_trait]
impl Dialect for Postgres {
    const STORE: &'static str = "postgres";
    const RENEW: &'static str = RENEW;
    const NOTIFY_READY: Option<&'static str> = NOTIFY_READY;
    const LOCK_REFUNDED_PAYMENT: Option<&'static str> = Some(LOCK_REFUNDED_PAYMENT);

    fn claim() -> &'static str {
        CLAIM.as_str()
    }

    async fn wait_ready(store: &PostgresLedger, max_wait: Duration) {
        store.ensure_listening();
        let _ = tokio::time::timeout(max_wait, store.ready.notified()).await;
    }

    async fn mark_submitting(
        store: &PostgresLedger,
        fences: &[Fence],
        now: Timestamp,
    ) -> Result<Vec<bool>, LedgerError> {
        mark_submitting(&store.pool, fences, now).await
    }

    async fn record_batch(
        store: &PostgresLedger,
        items: &[(Fence, Recorded)],
        actor: &str,
        now: Timestamp,
    ) -> Result<Vec<bool>, LedgerError> {
        record_batch(&store.pool, items, actor, now).await
    }
}

/// Records submission starts (one or a claimed batch) in one statement.
async fn mark_submitting(
    pool: &PgPool,
    fences: &[Fence],
    now: Timestamp,
) -> Result<Vec<bool>, LedgerError> {
    let ids: Vec<String> = fences.iter().map(|f| f.id.as_str().to_string()).collect();
    let attempts: Vec<i64> = fences.iter().map(|f| f.attempt).collect();
    let marked: Vec<String> = sqlx::query_scalar(MARK_SUBMITTING)
        .bind(&ids)
        .bind(&attempts)
        .bind(now.as_millis())
        .fetch_all(pool)
        .await?;
    let marked: HashSet<&str> = marked.iter().map(String::as_str).collect();
    Ok(fences
        .iter()
        .map(|f| marked.contains(f.id.as_str()))
        .collect())
}

/// Records outcomes, each fenced on its own. All successes (the common case): one statement, one
/// commit. Otherwise one transaction: every row locked first in id order, the successes in one
/// statement, the rest one by one.
async fn record_batch(
    pool: &PgPool,
    items: &[(Fence, Recorded)],
    actor: &str,
    now: Timestamp,
) -> Result<Vec<bool>, LedgerError> {
    let mut recorded = vec![false; items.len()];
    let (mut ids, mut attempts, mut references, mut results) = (vec![], vec![], vec![], vec![]);
    // The first occurrence of an id is the one recorded; a repeat loses its fence, as it would
    // one by one.
    let mut position: HashMap<&str, usize> = HashMap::new();
    let mut others = Vec::new();
    for (i, (fence, outcome)) in items.iter().enumerate() {
        match outcome {
            Recorded::Succeeded { reference, result }
                if !position.contains_key(fence.id.as_str()) =>
            {
                position.insert(fence.id.as_str(), i);
                ids.push(fence.id.as_str().to_string());
                attempts.push(fence.attempt);
                references.push(reference.clone());
                results.push(result.to_string());
            }
            _ => others.push(i),
        }
    }
    let succeeded = |written: Vec<String>, recorded: &mut Vec<bool>| {
        for id in &written {
            if let Some(i) = position.get(id.as_str()) {
                recorded[*i] = true;
            }
        }
    };
    let statement = || {
        sqlx::query_scalar::<_, String>(RECORD_SUCCEEDED_BATCH.as_str())
            .bind(&ids)
            .bind(&attempts)
            .bind(&references)
            .bind(&results)
            .bind(bounded(actor))
            .bind(now.as_millis())
    };
    if others.is_empty() {
        if !ids.is_empty() {
            succeeded(statement().fetch_all(pool).await?, &mut recorded);
        }
        return Ok(recorded);
    }
    let mut tx = pool.begin().await?;
    let all: Vec<String> = items
        .iter()
        .map(|(fence, _)| fence.id.as_str().to_string())
        .collect();
    sqlx::query(LOCK_BATCH).bind(&all).execute(&mut *tx).await?;
    if !ids.is_empty() {
        succeeded(statement().fetch_all(&mut *tx).await?, &mut recorded);
    }
    for i in others {
        let (fence, outcome) = &items[i];
        match record_on::<Postgres>(&mut *tx, fence, outcome, actor, now).await {
            Ok(_) => recorded[i] = true,
            Err(LedgerError::Fenced { .. }) => {}
            Err(other) => return Err(other),
        }
    }
    tx.commit().await?;
    Ok(recorded)
}

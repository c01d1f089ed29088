//! The production store: many workers on many machines share one Postgres.

use super::dialect::Dialect;
use super::intake::{IntakeSql, JsonColumn};
use super::lanes::LanesClaim;
use super::moves::{legal, status_in};
use super::queue::{record_on, submission_started_at_claim};
use super::record::operation_columns;
use super::recovery::{expiry_detail, found_detail};
use super::statement::{Driver, RowCount, Single, Stmt, named_statements};
use super::store::Store;
use super::{ExpireLeases, Fence, LedgerError, RecordLookups, Recorded, bounded};
use crate::Paid;
use async_trait::async_trait;
use payonce_core::clock::Timestamp;
use payonce_core::state::{Event, SUBMITTING_CLAIM, Status, transition};
use sqlx::postgres::PgQueryResult;
use sqlx::{PgConnection, Postgres};
use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;
use std::time::Duration;

/// How long a caller waits for a pooled connection before the call fails.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);
/// Statement timeout set on every connection: no ledger statement may run longer.
pub const STATEMENT_TIMEOUT_MS: u64 = 15_000;
/// The channel approvals notify on, so idle workers wake at once.
pub const READY_CHANNEL: &str = "payonce_ready";
/// Pause before re-opening a failed LISTEN connection.
pub(crate) const LISTEN_RETRY: Duration = Duration::from_secs(1);
/// Longest one connection attempt of [`PostgresLedger::connect`] may take: a host that is gone
/// drops packets instead of refusing, and the OS would wait minutes for an answer.
pub const CONNECT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// First pause between connection attempts at start-up (doubling, with jitter).
pub(crate) const CONNECT_RETRY_MIN: Duration = Duration::from_millis(100);
/// Longest pause between connection attempts at start-up.
pub(crate) const CONNECT_RETRY_MAX: Duration = Duration::from_secs(5);

/// Claims ready rows, interactive before bulk and then the oldest, skipping rows another claimer
/// holds locked.
static CLAIM: LazyLock<String> = LazyLock::new(|| claim(Event::Claim.as_str(), "", &oldest()));
/// The same claim, also recording in the same row version that each claimed operation's request is
/// about to leave (`Queue::claim_to_submit`), logged as one `submission_started` (`SUBMITTING_CLAIM`).
static CLAIM_TO_SUBMIT: LazyLock<String> = LazyLock::new(|| {
    claim(
        SUBMITTING_CLAIM,
        &submission_started_at_claim("o."),
        &oldest(),
    )
});
/// The claim by lanes (`Queue::claim_lanes`): `$2` the plan, a JSON array of `{priority,
/// tenant_id, n}`; in each lane the `n` oldest due rows, one descent of `operations_lanes_idx`
/// each, rows another claimer holds locked skipped. One statement whatever the plan's length.
static CLAIM_LANES: LazyLock<String> = LazyLock::new(|| {
    let from = status_in("status", &legal(&[Status::Ready], Event::Claim).from);
    let picked = format!(
        "SELECT x.id FROM {rows} CROSS JOIN LATERAL ( \
           SELECT id FROM operations WHERE {from} AND priority = b.priority \
           AND tenant_id = b.tenant_id AND available_at <= $1 \
           ORDER BY available_at LIMIT b.n FOR UPDATE SKIP LOCKED) x",
        rows = json_rows("$2", &super::lanes::PLAN_COLUMNS),
    );
    claim(
        SUBMITTING_CLAIM,
        &submission_started_at_claim("o."),
        &picked,
    )
});

/// The unplanned claim's pick: `$2` due rows, interactive first, then the oldest.
fn oldest() -> String {
    let from = status_in("status", &legal(&[Status::Ready], Event::Claim).from);
    format!(
        "SELECT id FROM operations WHERE {from} AND available_at <= $1 \
         ORDER BY priority, available_at LIMIT $2 FOR UPDATE SKIP LOCKED"
    )
}

/// The claim statement, logged as `logged`, with `also` (`, column = …` assignments, on the old
/// row `o`) added to its update, of the rows `picked` selects (and locks). The update finds them
/// by primary key (`id = ANY(ARRAY(…))`): joined to the lanes' plan instead (`FROM picked`), whose
/// row count the planner cannot know, it hashed every row of the table (a claim of 128 among 20,000
/// ready rows: 15–22 ms against 3.5–4.3 ms, EXPLAIN ANALYZE).
fn claim(logged: &str, also: &str, picked: &str) -> String {
    let claim = legal(&[Status::Ready], Event::Claim);
    format!(
        "WITH picked AS MATERIALIZED ({picked}) \
         UPDATE operations o SET status = '{to}', last_event = '{logged}', attempt = o.attempt + 1, \
           lease_owner = $3, lease_expires_at = $4, updated_at = $1, last_actor = $3, last_detail = NULL{also} \
         WHERE o.id = ANY(ARRAY(SELECT id FROM picked)) AND {o_from} RETURNING {columns}",
        columns = operation_columns!("o."),
        o_from = status_in("o.status", &claim.from),
        to = claim.to.as_str(),
    )
}
const NOTIFY_READY: Option<&str> = Some("SELECT pg_notify('payonce_ready', '')");
/// Renewal locks the owner's rows in id order, as the batches below do: a renewal racing a batch
/// then waits instead of deadlocking (which cost a 1 s `deadlock_timeout` stall and a failed renewal).
/// Only the ids in `$4` (a JSON array) are renewed: those the owner is still working on.
///
/// Every batch statement here finds its rows by primary key alone (`id = ANY(…)`) and checks the
/// fence on the locked row afterwards. Naming the status in the locking step lets the planner
/// drive from `operations_lease_idx`, whose statistics say almost no row is executing, and compare
/// every executing row with every id of the batch: measured with 2,000 to 3,000 rows executing,
/// a 128-row batch took 250–300 ms and a renewal of 1,800 held rows 5.8 s (issue 16, auto_explain).
/// The lock re-reads the newest row version, so the fence checked after it is the row's current
/// state, held until commit.
const RENEW: &str = "WITH held AS MATERIALIZED ( \
       SELECT id, status, lease_owner, lease_expires_at FROM operations \
       WHERE id = ANY(ARRAY(SELECT jsonb_array_elements_text($4::jsonb))) ORDER BY id FOR UPDATE) \
     UPDATE operations o SET lease_expires_at = $3, last_event = NULL FROM held WHERE o.id = held.id \
       AND held.status = 'executing' AND held.lease_owner = $1 AND held.lease_expires_at > $2 \
     RETURNING o.id, o.attempt";
/// Every batch statement's shape: `locked` locks the batch's rows (`$1`, the ids) in id order,
/// found by primary key alone; `fenced` (alias `f`) keeps those whose locked, current version passes
/// the fence `check` (on `l`, the locked row) at the attempt the batch names, joined to the batch's
/// arrays (`unnest({arrays}) AS b({columns})`, whose first two are the ids and attempts) and
/// exposing `l.id`, `l.attempt` and `fields`; the update then sets `set` on exactly those rows and
/// returns their ids. See `RENEW` for why the fence is not in the lock step.
fn fenced_batch(arrays: &str, columns: &str, fields: &str, check: &str, set: &str) -> String {
    format!(
        "WITH locked AS MATERIALIZED ( \
           SELECT id, attempt, status, lease_expires_at, first_submitted_at FROM operations \
           WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE), \
         fenced AS MATERIALIZED ( \
           SELECT l.id, l.attempt{fields} FROM locked l JOIN unnest({arrays}) AS b({columns}) \
           ON l.id = b.id AND l.attempt = b.attempt WHERE {check}) \
         UPDATE operations o SET {set} FROM fenced f WHERE o.id = f.id RETURNING o.id"
    )
}

/// A note (no state change): requests are about to leave, for one fence or a whole claimed batch
/// in one statement (one round trip, one commit), rows locked in id order (see `RENEW` for why the
/// rows are found by id alone and the fence checked after the lock). Refused once a lease has
/// expired. Returns the ids marked; the others lost their fence.
static MARK_SUBMITTING: LazyLock<String> = LazyLock::new(|| {
    fenced_batch(
        "$1::text[], $2::bigint[]",
        "id, attempt",
        "",
        "l.status = 'executing' AND l.lease_expires_at > $3",
        "first_submitted_at = COALESCE(o.first_submitted_at, $3), \
         first_submitted_attempt = COALESCE(o.first_submitted_attempt, f.attempt), last_submitted_at = $3, \
         submit_count = o.submit_count + 1, updated_at = $3, last_event = 'submission_started', \
         last_actor = o.lease_owner, last_detail = NULL",
    )
});
/// Two refunds of one payment (or two links of one operation) queue here, so the second's count reads
/// a snapshot taken after the first committed (READ COMMITTED: each statement sees what was committed
/// before it began).
const LOCK_OPERATION: &str = "SELECT id FROM operations WHERE id = $1 FOR UPDATE";
/// The server's clock in the columns' unit (`clock_timestamp()`, not `now()`: the time of the
/// read, not of some transaction's start).
const NOW: &str = "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now";
/// Locks a batch's rows in id order before any of them is written (see `RENEW`).
const LOCK_BATCH: &str = "SELECT id FROM operations WHERE id = ANY($1) ORDER BY id FOR UPDATE";
/// `processor_succeeded` for many rows in one statement, each fenced by its own attempt and by
/// `from` (the worker's outcomes from `executing`, the sweep's found lookups from `unknown`), rows
/// locked in id order first (see `fenced_batch`). Arrays: ids, attempts, references, results,
/// details; `$6` the actor, `$7` now. The worker's write also clears the failure message (as its
/// one-row write does); a found lookup keeps the reason the row was unknown, as a report does.
fn succeeded_batch(from: Status, clear_failure_message: bool) -> String {
    let succeeded = legal(&[from], Event::ProcessorSucceeded);
    let failure_message = if clear_failure_message {
        "failure_message = NULL, "
    } else {
        ""
    };
    fenced_batch(
        "$1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[]",
        "id, attempt, reference, result, detail",
        ", b.reference, b.result, b.detail",
        &status_in("l.status", &succeeded.from),
        &format!(
            "status = '{to}', last_event = '{event}', external_ref = f.reference, result = f.result, \
             failure_code = NULL, {failure_message}lease_owner = NULL, lease_expires_at = NULL, \
             next_check_at = NULL, updated_at = $7, last_actor = $6, last_detail = f.detail",
            to = succeeded.to.as_str(),
            event = succeeded.event.as_str(),
        ),
    )
}
/// The worker's outcomes (`succeeded_batch`). Needs no transaction of its own: it is the batch's
/// only statement when every outcome is a success (the common case), one commit per batch.
static RECORD_SUCCEEDED_BATCH: LazyLock<String> =
    LazyLock::new(|| succeeded_batch(Status::Executing, true));

/// The sweep's lease expiries for many rows in one statement: each fenced as
/// `Recovery::expire_lease` fences one (the attempt the sweep saw, still `executing`, the lease
/// still expired, a submission recorded or not as the sweep saw it), rows locked in id order and
/// found by id alone (see `RENEW`). A row with a recorded submission moves to the table's target
/// for `lease_expired_submitted`, one without to that of `lease_expired_unsubmitted`.
static EXPIRE_LEASES: LazyLock<String> = LazyLock::new(|| {
    let submitted = legal(&[Status::Executing], Event::LeaseExpiredSubmitted);
    let unsubmitted = legal(&[Status::Executing], Event::LeaseExpiredUnsubmitted);
    fenced_batch(
        "$1::text[], $2::bigint[], $3::boolean[], $4::text[]",
        "id, attempt, submitted, detail",
        ", b.submitted, b.detail",
        &format!(
            "{} AND l.lease_expires_at <= $5 AND (l.first_submitted_at IS NOT NULL) = b.submitted",
            status_in("l.status", &submitted.from)
        ),
        &format!(
            "status = CASE WHEN f.submitted THEN '{s_to}' ELSE '{u_to}' END, \
             last_event = CASE WHEN f.submitted THEN '{s_event}' ELSE '{u_event}' END, \
             next_check_at = CASE WHEN f.submitted THEN $6 ELSE o.next_check_at END, \
             available_at = CASE WHEN f.submitted THEN o.available_at ELSE $5 END, \
             lease_owner = NULL, lease_expires_at = NULL, updated_at = $5, last_actor = $7, \
             last_detail = f.detail",
            s_to = submitted.to.as_str(),
            u_to = unsubmitted.to.as_str(),
            s_event = submitted.event.as_str(),
            u_event = unsubmitted.event.as_str(),
        ),
    )
});
/// Lookups that found the approved object, for many `unknown` rows in one statement
/// (`succeeded_batch`), each fenced by the attempt the lookup was made for.
static RECORD_LOOKUPS: LazyLock<String> = LazyLock::new(|| succeeded_batch(Status::Unknown, false));

/// The batch intake's statements: JSON rows through `jsonb_to_recordset`; the approval's update
/// returns the operation's columns only; the rows to approve that the batch did not insert are locked
/// in id order first (two batches approving the same rows would otherwise lock them in plan order
/// and could deadlock).
static INTAKE: LazyLock<IntakeSql> = LazyLock::new(|| {
    IntakeSql::build(
        json_rows,
        operation_columns!("operations."),
        Some(format!(
            "SELECT id FROM operations WHERE id IN (SELECT b.id FROM {}) ORDER BY id FOR UPDATE",
            json_rows("$1", IntakeSql::id_columns())
        )),
        true,
    )
});

/// `jsonb_to_recordset(param) AS b(column type, ...)`.
fn json_rows(param: &str, columns: &[(&str, JsonColumn)]) -> String {
    let columns: Vec<String> = columns
        .iter()
        .map(|(name, ty)| match ty {
            JsonColumn::Text => format!("{name} text"),
            JsonColumn::Int => format!("{name} bigint"),
        })
        .collect();
    format!(
        "jsonb_to_recordset({param}::jsonb) AS b({})",
        columns.join(", ")
    )
}

/// The Postgres ledger.
pub type PostgresLedger = Store<Postgres>;

mod connect;
pub use connect::{Pooler, Route};

/// Readiness's write that needs a new page, run in a transaction that is rolled back: `TRUNCATE`
/// gives the table a new, empty file, so the insert must extend it by a page (on a full disk:
/// `could not extend file`, `disk_full`), where the committed one-row update of `write_probe`
/// still fit in its page. The lock `TRUNCATE` takes lets concurrent probes queue, each a few
/// milliseconds; the rolled-back file is removed at once.
const WRITE_PROBE_PAGE: [&str; 2] = [
    "TRUNCATE write_probe_page",
    "INSERT INTO write_probe_page (probed_at) VALUES (0)",
];

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
    const LOCK_OPERATION: Option<&'static str> = Some(LOCK_OPERATION);
    const NOW: Option<&'static str> = Some(NOW);
    const LOCK_PRUNABLE: &'static str = super::retention::LOCK_PRUNABLE_POSTGRES;
    const CLOSE_KNOWN_HINTS: &'static str = super::webhooks::CLOSE_KNOWN_HINTS_POSTGRES;
    const FOREIGN_KEYS: &'static str = super::ownership::FOREIGN_KEYS_POSTGRES;
    const KEYED_TABLES: &'static str = super::ownership::KEYED_TABLES_POSTGRES;
    const JSON_IDS: &'static str = "(SELECT jsonb_array_elements_text($1::jsonb))";

    fn json_rows(param: &str, columns: &[(&str, JsonColumn)]) -> String {
        json_rows(param, columns)
    }

    fn intake() -> &'static IntakeSql {
        &INTAKE
    }

    /// Postgres says nothing of its room; instead a write that needs a new page is tried and
    /// rolled back (`WRITE_PROBE_PAGE`): a full disk fails it with `could not extend file`.
    async fn write_headroom(store: &PostgresLedger) -> Result<Option<i64>, LedgerError> {
        let mut tx = store.begin().await?;
        for statement in WRITE_PROBE_PAGE {
            Postgres::execute(&mut *tx, Stmt::new(statement)).await?;
        }
        tx.rollback().await?;
        Ok(None)
    }

    fn claim_lanes() -> LanesClaim {
        LanesClaim::Once(CLAIM_LANES.as_str())
    }

    const READY_LANES: &'static str = super::lanes::READY_LANES_POSTGRES;

    fn claim(to_submit: bool) -> &'static str {
        if to_submit {
            CLAIM_TO_SUBMIT.as_str()
        } else {
            CLAIM.as_str()
        }
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
        let mut one = Single::take(&store.pool).await?;
        let marked = mark_submitting(one.conn(), fences, now).await?;
        one.done().await?;
        Ok(marked)
    }

    async fn expire_leases(
        store: &PostgresLedger,
        request: &ExpireLeases<'_>,
        now: Timestamp,
    ) -> Result<Vec<Option<Status>>, LedgerError> {
        let firsts = Firsts::of(request.leases.iter().map(|l| l.id.as_str()));
        let (mut ids, mut attempts, mut submitted, mut details) = (vec![], vec![], vec![], vec![]);
        for &i in &firsts.order {
            let lease = &request.leases[i];
            ids.push(lease.id.as_str().to_string());
            attempts.push(lease.attempt);
            submitted.push(lease.submitted);
            details.push(expiry_detail(lease));
        }
        let mut one = Single::take(&store.pool).await?;
        let written: Vec<String> = sqlx::query_scalar(EXPIRE_LEASES.as_str())
            .persistent(named_statements())
            .bind(&ids)
            .bind(&attempts)
            .bind(&submitted)
            .bind(&details)
            .bind(now.as_millis())
            .bind(request.next_check_at.as_millis())
            .bind(bounded(request.actor))
            .fetch_all(one.conn())
            .await?;
        one.done().await?;
        let to = |submitted: bool| {
            let event = if submitted {
                Event::LeaseExpiredSubmitted
            } else {
                Event::LeaseExpiredUnsubmitted
            };
            transition(Status::Executing, event)
        };
        let mut moved = vec![None; request.leases.len()];
        for i in firsts.written(&written) {
            moved[i] = Some(to(request.leases[i].submitted)?);
        }
        Ok(moved)
    }

    async fn record_lookups(
        store: &PostgresLedger,
        request: &RecordLookups<'_>,
        now: Timestamp,
    ) -> Result<Vec<bool>, LedgerError> {
        let firsts = Firsts::of(request.found.iter().map(|f| f.fence.id.as_str()));
        let (mut ids, mut attempts, mut references, mut results, mut details) =
            (vec![], vec![], vec![], vec![], vec![]);
        for &i in &firsts.order {
            let item = &request.found[i];
            ids.push(item.fence.id.as_str().to_string());
            attempts.push(item.fence.attempt);
            references.push(item.reference.clone());
            results.push(item.result.to_string());
            details.push(bounded(&found_detail(request.source, &item.reference)));
        }
        let mut one = Single::take(&store.pool).await?;
        let written: Vec<String> = sqlx::query_scalar(RECORD_LOOKUPS.as_str())
            .persistent(named_statements())
            .bind(&ids)
            .bind(&attempts)
            .bind(&references)
            .bind(&results)
            .bind(&details)
            .bind(bounded(request.source))
            .bind(now.as_millis())
            .fetch_all(one.conn())
            .await?;
        one.done().await?;
        let mut recorded = vec![false; request.found.len()];
        for i in firsts.written(&written) {
            recorded[i] = true;
        }
        Ok(recorded)
    }

    async fn record_batch(
        store: &PostgresLedger,
        items: &[(Fence, Recorded)],
        actor: &str,
        now: Timestamp,
    ) -> Result<Vec<bool>, LedgerError> {
        // Successes of distinct rows (the common case): one statement, committed on its own.
        let mut seen = HashSet::new();
        if items
            .iter()
            .all(|(f, o)| matches!(o, Recorded::Succeeded(_)) && seen.insert(f.id.as_str()))
        {
            let mut one = Single::take(&store.pool).await?;
            let recorded = record_batch(one.conn(), items, actor, now).await?;
            one.done().await?;
            return Ok(recorded);
        }
        let mut tx = store.begin().await?;
        let recorded = record_batch(&mut tx, items, actor, now).await?;
        tx.commit().await?;
        Ok(recorded)
    }

    async fn record_batch_on(
        conn: &mut PgConnection,
        items: &[(Fence, Recorded)],
        actor: &str,
        now: Timestamp,
    ) -> Result<Vec<bool>, LedgerError> {
        record_batch(conn, items, actor, now).await
    }
}

/// Records submission starts (one or a claimed batch) in one statement.
async fn mark_submitting(
    conn: &mut PgConnection,
    fences: &[Fence],
    now: Timestamp,
) -> Result<Vec<bool>, LedgerError> {
    let ids: Vec<String> = fences.iter().map(|f| f.id.as_str().to_string()).collect();
    let attempts: Vec<i64> = fences.iter().map(|f| f.attempt).collect();
    let marked: Vec<String> = sqlx::query_scalar(MARK_SUBMITTING.as_str())
        .persistent(named_statements())
        .bind(&ids)
        .bind(&attempts)
        .bind(now.as_millis())
        .fetch_all(conn)
        .await?;
    let marked: HashSet<&str> = marked.iter().map(String::as_str).collect();
    Ok(fences
        .iter()
        .map(|f| marked.contains(f.id.as_str()))
        .collect())
}

/// Records outcomes, each fenced on its own, on `conn`: the successes in one statement; if there
/// is anything else, every row locked first in id order, then the successes, then the rest one by
/// one (the caller's transaction holds them together).
async fn record_batch(
    conn: &mut PgConnection,
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
            Recorded::Succeeded(Paid { reference, result })
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
    if !others.is_empty() {
        let all: Vec<String> = items
            .iter()
            .map(|(fence, _)| fence.id.as_str().to_string())
            .collect();
        sqlx::query(LOCK_BATCH)
            .persistent(named_statements())
            .bind(&all)
            .execute(&mut *conn)
            .await?;
    }
    if !ids.is_empty() {
        let written: Vec<String> = sqlx::query_scalar(RECORD_SUCCEEDED_BATCH.as_str())
            .persistent(named_statements())
            .bind(&ids)
            .bind(&attempts)
            .bind(&references)
            .bind(&results)
            .bind(&references)
            .bind(bounded(actor))
            .bind(now.as_millis())
            .fetch_all(&mut *conn)
            .await?;
        for id in &written {
            if let Some(i) = position.get(id.as_str()) {
                recorded[*i] = true;
            }
        }
    }
    for i in others {
        let (fence, outcome) = &items[i];
        match record_on::<Postgres>(&mut *conn, fence, outcome, actor, now).await {
            Ok(_) => recorded[i] = true,
            Err(LedgerError::Fenced { .. }) => {}
            Err(other) => return Err(other),
        }
    }
    Ok(recorded)
}

/// The first occurrence of each id in a batch: the one an array statement writes (a repeat
/// loses, as it would one by one, and would otherwise make one row match twice).
struct Firsts<'a> {
    /// Positions of first occurrences, in batch order.
    order: Vec<usize>,
    position: HashMap<&'a str, usize>,
}

impl<'a> Firsts<'a> {
    fn of(ids: impl Iterator<Item = &'a str>) -> Self {
        let mut firsts = Firsts {
            order: Vec::new(),
            position: HashMap::new(),
        };
        for (i, id) in ids.enumerate() {
            if !firsts.position.contains_key(id) {
                firsts.position.insert(id, i);
                firsts.order.push(i);
            }
        }
        firsts
    }

    /// Batch positions of the ids a statement returned.
    fn written<'w>(&'w self, returned: &'w [String]) -> impl Iterator<Item = usize> + 'w {
        returned
            .iter()
            .filter_map(|id| self.position.get(id.as_str()).copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeout_statements_set_the_named_limit() {
        let limit = format!("statement_timeout = {STATEMENT_TIMEOUT_MS}");
        assert!(connect::SET_STATEMENT_TIMEOUT.ends_with(&limit));
        assert!(super::super::statement::POOLED_BEGIN.ends_with(&limit));
        assert!(connect::SET_STATEMENT_TIMEOUT.starts_with("SET jit = off;"));
        assert!(super::super::statement::POOLED_BEGIN.contains("SET LOCAL jit = off;"));
    }
}

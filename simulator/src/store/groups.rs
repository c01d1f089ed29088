//! Payment commits and idempotency-key lookups that arrive together share statements.
//!
//! The simulator has one SQLite connection, and sqlx runs it on a thread of its own: every statement is a
//! message to that thread and a wake-up back. Measured at 64 requests in flight (docs/benchmarks.md), the
//! simulator spent more of its CPU switching threads than executing SQL: seven statements a payment
//! (the key lookup, `BEGIN`, the payment, two events, the key, `COMMIT`), each a round trip.
//!
//! One task owns the queue. It takes every job waiting (at most [`GROUP_MAX`]), answers the lookups with one
//! `SELECT … WHERE key IN (…)`, and commits the payments in one transaction with one multi-row `INSERT` per
//! table. Nothing waits for a group to fill: a group is what queued up while the previous one ran, so a lone
//! request is served at once.
//!
//! What each request sees is unchanged: a payment, its events, its webhook deliveries and its remembered
//! response still commit together or not at all, and the request is answered only after its commit. If a
//! group's transaction fails, every commit in it is retried on its own, so one bad payment fails only its
//! own request. A job, once queued, runs even if its request hangs up; the idempotency claim a commit holds
//! (its `hold`) is released only after the commit has finished.

use super::writes::{VARIABLES_MAX, insert_events_due, insert_payments, statement, upsert_keys};
use super::{KeyRecord, NewEvent, PaymentRow, SELECT_SAVED_RESPONSE, SavedResponse};
use sqlx::sqlite::{SqlitePool, SqliteRow};
use sqlx::{AssertSqlSafe, Row};
use std::collections::HashMap;
use tokio::sync::{mpsc, oneshot};

/// The most jobs (lookups and commits together) one group takes from the queue.
pub(crate) const GROUP_MAX: usize = 64;

/// A new PaymentIntent with everything committed beside it.
#[derive(Debug, Clone)]
pub(crate) struct PaymentCommit {
    pub(crate) row: PaymentRow,
    pub(crate) events: Vec<NewEvent>,
    /// The response to remember under the request's key, if it had one.
    pub(crate) key: Option<KeyRecord>,
    /// When its events' webhooks are due, if any endpoint is configured.
    pub(crate) webhooks_due_ms: Option<i64>,
}

type Reply<T> = oneshot::Sender<Result<T, sqlx::Error>>;

/// Something held until a commit has finished (the request's claim on its idempotency key).
pub(crate) type Hold = Box<dyn Send>;

pub(crate) enum Job {
    Lookup {
        key: String,
        not_before_ms: i64,
        reply: Reply<Option<SavedResponse>>,
    },
    Commit {
        commit: Box<PaymentCommit>,
        hold: Hold,
        reply: Reply<()>,
    },
}

/// The sending side, held by every clone of the store.
pub(crate) type Queue = mpsc::UnboundedSender<Job>;

/// Starts the task that runs the groups; it ends when every sender is gone.
pub(crate) fn start(pool: SqlitePool) -> Queue {
    let (queue, jobs) = mpsc::unbounded_channel();
    tokio::spawn(run(pool, jobs));
    queue
}

fn closed() -> sqlx::Error {
    sqlx::Error::PoolClosed
}

/// Queues a lookup and waits for its answer.
pub(crate) async fn lookup(
    queue: &Queue,
    key: &str,
    not_before_ms: i64,
) -> Result<Option<SavedResponse>, sqlx::Error> {
    let (reply, answer) = oneshot::channel();
    queue
        .send(Job::Lookup {
            key: key.to_string(),
            not_before_ms,
            reply,
        })
        .map_err(|_| closed())?;
    answer.await.map_err(|_| closed())?
}

/// Queues a commit (it runs even if the caller stops waiting) and waits for it.
pub(crate) async fn commit(
    queue: &Queue,
    commit: PaymentCommit,
    hold: Hold,
) -> Result<(), sqlx::Error> {
    let (reply, answer) = oneshot::channel();
    queue
        .send(Job::Commit {
            commit: Box::new(commit),
            hold,
            reply,
        })
        .map_err(|_| closed())?;
    answer.await.map_err(|_| closed())?
}

/// Takes the next group: waits for one job, then whatever else is already queued, up to `max`.
/// Empty once the queue is closed and drained.
pub(crate) async fn next_group(jobs: &mut mpsc::UnboundedReceiver<Job>, max: usize) -> Vec<Job> {
    let mut group = Vec::with_capacity(max);
    jobs.recv_many(&mut group, max).await;
    group
}

async fn run(pool: SqlitePool, mut jobs: mpsc::UnboundedReceiver<Job>) {
    loop {
        let group = next_group(&mut jobs, GROUP_MAX).await;
        if group.is_empty() {
            return;
        }
        let mut lookups = Vec::new();
        let mut commits = Vec::new();
        for job in group {
            match job {
                Job::Lookup {
                    key,
                    not_before_ms,
                    reply,
                } => lookups.push((key, not_before_ms, reply)),
                Job::Commit {
                    commit,
                    hold,
                    reply,
                } => commits.push((commit, hold, reply)),
            }
        }
        // Lookups first: a key being committed in this group is claimed by its request, so no lookup here
        // can be for it (a lookup for a key starts only after the key's claim is released).
        answer_lookups(&pool, lookups).await;
        commit_all(&pool, commits).await;
    }
}

async fn answer_lookups(
    pool: &SqlitePool,
    lookups: Vec<(String, i64, Reply<Option<SavedResponse>>)>,
) {
    if lookups.is_empty() {
        return;
    }
    let keys: Vec<&str> = lookups.iter().map(|(k, _, _)| k.as_str()).collect();
    match saved_responses(pool, &keys).await {
        Ok(found) => {
            for (key, not_before_ms, reply) in lookups {
                let saved = found
                    .get(&key)
                    .filter(|(created_ms, _)| *created_ms >= not_before_ms)
                    .map(|(_, saved)| saved.clone());
                let _ = reply.send(Ok(saved));
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "grouped key lookup failed; looking up one by one");
            for (key, not_before_ms, reply) in lookups {
                let _ = reply.send(saved_response(pool, &key, not_before_ms).await);
            }
        }
    }
}

const SELECT_SAVED_RESPONSES: &str =
    "SELECT key, created_ms, fingerprint, status, body FROM idempotency_keys WHERE key IN (";

/// Every remembered response under `keys`, with when it was saved.
async fn saved_responses(
    pool: &SqlitePool,
    keys: &[&str],
) -> Result<HashMap<String, (i64, SavedResponse)>, sqlx::Error> {
    let mut found = HashMap::new();
    for chunk in keys.chunks(VARIABLES_MAX) {
        let sql = statement(SELECT_SAVED_RESPONSES, "?", chunk.len(), ")");
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for key in chunk {
            query = query.bind(*key);
        }
        for row in query.fetch_all(pool).await? {
            found.insert(
                row.try_get("key")?,
                (row.try_get("created_ms")?, saved(&row)?),
            );
        }
    }
    Ok(found)
}

/// One key's remembered response, if saved at or after `not_before_ms`.
pub(crate) async fn saved_response(
    pool: &SqlitePool,
    key: &str,
    not_before_ms: i64,
) -> Result<Option<SavedResponse>, sqlx::Error> {
    sqlx::query(SELECT_SAVED_RESPONSE)
        .bind(key)
        .bind(not_before_ms)
        .fetch_optional(pool)
        .await?
        .map(|row| saved(&row))
        .transpose()
}

fn saved(row: &SqliteRow) -> Result<SavedResponse, sqlx::Error> {
    let status: i64 = row.try_get("status")?;
    Ok(SavedResponse {
        fingerprint: row.try_get("fingerprint")?,
        status: u16::try_from(status).unwrap_or(500),
        body: row.try_get("body")?,
    })
}

async fn commit_all(pool: &SqlitePool, commits: Vec<(Box<PaymentCommit>, Hold, Reply<()>)>) {
    if commits.is_empty() {
        return;
    }
    let group: Vec<&PaymentCommit> = commits.iter().map(|(c, _, _)| c.as_ref()).collect();
    match commit_group(pool, &group).await {
        Ok(()) => {
            for (_, hold, reply) in commits {
                drop(hold);
                let _ = reply.send(Ok(()));
            }
        }
        Err(e) if commits.len() == 1 => {
            if let Some((_, hold, reply)) = commits.into_iter().next() {
                drop(hold);
                let _ = reply.send(Err(e));
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, payments = commits.len(), "grouped payment commit failed; committing one by one");
            for (commit, hold, reply) in commits {
                let result = commit_group(pool, &[&commit]).await;
                drop(hold);
                let _ = reply.send(result);
            }
        }
    }
}

/// Payments in one transaction, one multi-row statement per table (a lone request: a group of one).
async fn commit_group(pool: &SqlitePool, group: &[&PaymentCommit]) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    let rows: Vec<&PaymentRow> = group.iter().map(|c| &c.row).collect();
    insert_payments(&mut tx, &rows).await?;
    let events: Vec<(&NewEvent, Option<i64>)> = group
        .iter()
        .flat_map(|c| c.events.iter().map(|e| (e, c.webhooks_due_ms)))
        .collect();
    insert_events_due(&mut tx, &events).await?;
    let keys: Vec<&KeyRecord> = group.iter().filter_map(|c| c.key.as_ref()).collect();
    upsert_keys(&mut tx, &keys).await?;
    tx.commit().await
}

#[cfg(test)]
mod tests {
    use super::super::Store;
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    fn payment(id: &str, key: &str) -> PaymentCommit {
        let row = PaymentRow {
            seq: 0,
            id: id.to_string(),
            created: 1,
            created_ms: 1_000,
            amount: 100,
            currency: "usd".into(),
            customer: None,
            description: None,
            payment_method: Some("pm_card_visa".into()),
            status: "succeeded".into(),
            metadata: "{}".into(),
            transfer_destination: None,
            latest_charge: Some(format!("ch_{id}")),
            last_payment_error: None,
            next_action: None,
            amount_received: 100,
            amount_refunded: 0,
            client_secret: format!("{id}_secret"),
            idempotency_key: Some(key.to_string()),
            request_id: "req_1".into(),
            settle_at_ms: None,
        };
        let events = ["payment_intent.created", "payment_intent.succeeded"]
            .into_iter()
            .map(|kind| NewEvent {
                id: format!("evt_{kind}_{id}"),
                created: 1,
                kind,
                body: b"{}".to_vec(),
            })
            .collect();
        PaymentCommit {
            row,
            events,
            key: Some(KeyRecord {
                key: key.to_string(),
                fingerprint: format!("fp_{key}"),
                status: 200,
                body: id.as_bytes().to_vec(),
                created_ms: 1_000,
            }),
            webhooks_due_ms: Some(5_000),
        }
    }

    async fn count(store: &Store, sql: &'static str) -> i64 {
        sqlx::query_scalar(sql)
            .fetch_one(&store.pool)
            .await
            .unwrap()
    }

    /// Sets its flag when dropped: stands for the request's claim on its key.
    struct Flag(Arc<AtomicBool>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn a_group_commits_every_payment_with_its_events_deliveries_and_key() {
        let store = Store::open("sqlite::memory:").await.unwrap();
        let commits: Vec<PaymentCommit> = (0..10)
            .map(|i| payment(&format!("pi_{i}"), &format!("k{i}")))
            .collect();
        let group: Vec<&PaymentCommit> = commits.iter().collect();
        commit_group(&store.pool, &group).await.unwrap();
        assert_eq!(
            count(&store, "SELECT COUNT(*) FROM payment_intents").await,
            10
        );
        assert_eq!(count(&store, "SELECT COUNT(*) FROM events").await, 20);
        assert_eq!(
            count(
                &store,
                "SELECT COUNT(*) FROM webhook_outbox o JOIN events e ON e.seq = o.event_seq \
                 WHERE o.state = 'pending' AND o.due_ms = 5000"
            )
            .await,
            20,
            "every event has its delivery, joined by its own sequence number"
        );
        // Rows keep the group's order.
        let ids: Vec<String> = sqlx::query_scalar("SELECT id FROM payment_intents ORDER BY seq")
            .fetch_all(&store.pool)
            .await
            .unwrap();
        let expected: Vec<String> = (0..10).map(|i| format!("pi_{i}")).collect();
        assert_eq!(ids, expected);
        // Read from the table itself: `commit_group` is below the store's key index.
        let saved = saved_response(&store.pool, "k7", 0).await.unwrap().unwrap();
        assert_eq!(
            (saved.fingerprint.as_str(), saved.body.as_slice()),
            ("fp_k7", b"pi_7".as_slice())
        );
        assert!(
            saved_response(&store.pool, "k7", 1_001)
                .await
                .unwrap()
                .is_none(),
            "saved before the window"
        );
        assert!(
            saved_response(&store.pool, "k99", 0)
                .await
                .unwrap()
                .is_none()
        );
    }

    #[tokio::test]
    async fn a_failed_group_is_retried_one_by_one_so_only_the_bad_payment_fails() {
        let store = Store::open("sqlite::memory:").await.unwrap();
        let (queue, mut jobs) = mpsc::unbounded_channel();
        // Queued before the task runs, so all five are one group; the fourth repeats the first's id.
        let ids = ["pi_a", "pi_b", "pi_c", "pi_a", "pi_d"];
        let mut answers = Vec::new();
        for (i, id) in ids.into_iter().enumerate() {
            let q = queue.clone();
            let p = payment(id, &format!("key{i}"));
            answers.push(tokio::spawn(
                async move { commit(&q, p, Box::new(())).await },
            ));
        }
        while jobs.len() < ids.len() {
            tokio::task::yield_now().await;
        }
        let group = next_group(&mut jobs, GROUP_MAX).await;
        assert_eq!(group.len(), 5);
        for job in group {
            queue.send(job).ok().unwrap();
        }
        drop(queue);
        run(store.pool.clone(), jobs).await;
        let mut results = Vec::new();
        for answer in answers {
            results.push(answer.await.unwrap().is_ok());
        }
        assert_eq!(results, [true, true, true, false, true]);
        assert_eq!(
            count(&store, "SELECT COUNT(*) FROM payment_intents").await,
            4
        );
        assert_eq!(count(&store, "SELECT COUNT(*) FROM events").await, 8);
        assert_eq!(
            count(&store, "SELECT COUNT(*) FROM idempotency_keys").await,
            4
        );
        assert!(
            saved_response(&store.pool, "key3", 0)
                .await
                .unwrap()
                .is_none(),
            "the failed payment's key is not remembered"
        );
    }

    #[tokio::test]
    async fn a_group_takes_at_most_group_max_jobs() {
        let (queue, mut jobs) = mpsc::unbounded_channel();
        let mut answers = Vec::new();
        for i in 0..(GROUP_MAX + 6) {
            let (reply, answer) = oneshot::channel();
            queue
                .send(Job::Lookup {
                    key: format!("k{i}"),
                    not_before_ms: 0,
                    reply,
                })
                .ok()
                .unwrap();
            answers.push(answer);
        }
        assert_eq!(next_group(&mut jobs, GROUP_MAX).await.len(), GROUP_MAX);
        assert_eq!(next_group(&mut jobs, GROUP_MAX).await.len(), 6);
        drop(queue);
        assert!(
            next_group(&mut jobs, GROUP_MAX).await.is_empty(),
            "closed and drained"
        );
    }

    #[tokio::test]
    async fn a_commit_whose_caller_stops_waiting_still_commits_then_releases_its_hold() {
        let store = Store::open("sqlite::memory:").await.unwrap();
        let released = Arc::new(AtomicBool::new(false));
        // Holding the store's one connection keeps the commit from running.
        let connection = store.pool.acquire().await.unwrap();
        let waiting = store.commit_payment(payment("pi_gone", "k_gone"), Flag(released.clone()));
        // Polled once (the job is queued), then dropped, as when a client hangs up mid-request.
        assert!(futures_poll_once(waiting).await);
        // On this single-threaded runtime the group task runs at each yield, up to its wait for the
        // connection; the hold must outlive that wait.
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert!(
            !released.load(Ordering::SeqCst),
            "the hold was released before its commit"
        );
        drop(connection);
        // The first lookup may share the commit's group, where lookups are answered first; the
        // second is queued only after that group began, so it runs after the commit.
        let mut saved = store.saved_response("k_gone", 0).await.unwrap();
        if saved.is_none() {
            saved = store.saved_response("k_gone", 0).await.unwrap();
        }
        let saved = saved.expect("the commit ran although its caller stopped waiting");
        assert_eq!(saved.body, b"pi_gone");
        assert!(
            released.load(Ordering::SeqCst),
            "the hold is dropped after the commit"
        );
    }

    /// Polls `f` once and drops it; true if it was still pending.
    async fn futures_poll_once<F: std::future::Future>(f: F) -> bool {
        let mut f = std::pin::pin!(f);
        std::future::poll_fn(|cx| std::task::Poll::Ready(f.as_mut().poll(cx).is_pending())).await
    }
}

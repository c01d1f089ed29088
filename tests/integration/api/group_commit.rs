//! `POST /v1/operations` with an approval, written in groups (`payonce_api::group_commit`), over
//! real HTTP on Postgres. The writers are held on a real table lock while requests queue, so the
//! groups are formed deliberately: every request is still answered as it would be alone, a
//! repeated business key is never written twice, another tenant's request is never in the group,
//! and an item the database refuses fails only its own request; each request keeps its own
//! priority, `not_before` and approval expiry. Held past the statement timeout, every request is
//! answered `503` and every request whose client gave up is still written.

use super::{TestApi, raw_details, spawn, tenant};
use crate::support::{postgres_ledger, wait_for};
use payonce_api::config::APPROVAL_TTL_DEFAULT;
use payonce_api::group_commit::GROUP_WRITERS_MAX;
use payonce_core::clock::Timestamp;
use payonce_core::details::{Details, RawDetails};
use payonce_core::id::OperationId;
use payonce_core::priority::Priority;
use payonce_core::state::Status;
use serde_json::{Value, json};
use sqlx::Connection;
use std::sync::Arc;
use std::time::Duration;

const CREATE: &str = "/v1/operations";

/// The single route's body for `invoice` at `amount`, carrying the approval of `approved` (its own
/// details when `None`).
fn approved(invoice: &str, amount: i64, approved: Option<&Value>) -> Value {
    let details = raw_details(invoice, amount);
    let of = approved.unwrap_or(&details);
    let raw: RawDetails = serde_json::from_value(of.clone()).unwrap();
    let hash = Details::parse(&raw).unwrap().hash();
    json!({
        "business_key": format!("invoice:{invoice}:pay"),
        "details": details,
        "approval": {"details_hash": hash.as_str(), "approved_by": format!("mandate:{invoice}")},
    })
}

/// A metric's value from the api's `/metrics`.
async fn metric(api: &TestApi, name: &str) -> u64 {
    let text = api.send("GET", "/metrics", None, None).await.text;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("{name} not in /metrics:\n{text}"))
}

/// Holds every group writer on an exclusive lock of a table each create reads, until dropped.
struct HeldWriters(sqlx::PgConnection);

impl HeldWriters {
    async fn hold(url: &str) -> Self {
        let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
        sqlx::raw_sql("BEGIN; LOCK TABLE tenant_processors IN ACCESS EXCLUSIVE MODE")
            .execute(&mut conn)
            .await
            .unwrap();
        HeldWriters(conn)
    }

    async fn release(mut self) {
        sqlx::raw_sql("ROLLBACK")
            .execute(&mut self.0)
            .await
            .unwrap();
    }
}

/// Sends every `(key, body)` to the single route at once; the answers in the same order.
async fn send_all(
    api: &Arc<TestApi>,
    requests: Vec<(String, Value)>,
) -> Vec<tokio::task::JoinHandle<super::Reply>> {
    requests
        .into_iter()
        .map(|(key, body)| {
            let api = Arc::clone(api);
            tokio::spawn(async move { api.post(CREATE, &key, body).await })
        })
        .collect()
}

/// Inserts into `operations` waiting on a lock for more than `seconds`.
async fn blocked_inserts(pool: &sqlx::PgPool, seconds: i64) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
         AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO operations%' \
         AND now() - query_start > make_interval(secs => $1)",
    )
    .bind(seconds as f64)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Waits until `writers` writers are blocked on the held lock and `waiting` requests are queued.
async fn queued(api: &TestApi, url: &str, writers: usize, waiting: u64) {
    let pool = sqlx::PgPool::connect(url).await.unwrap();
    wait_for(
        "the writers blocked and the rest queued",
        Duration::from_secs(20),
        || {
            let pool = pool.clone();
            async move {
                let blocked = blocked_inserts(&pool, 0).await;
                let queued = metric(api, "payonce_api_intake_waiting").await;
                (blocked == i64::try_from(writers).unwrap() && queued == waiting).then_some(())
            }
        },
    )
    .await;
    pool.close().await;
}

/// One request per writer, each taken alone by a writer that then blocks on the held lock.
async fn lone_requests(
    api: &Arc<TestApi>,
    url: &str,
) -> (usize, Vec<tokio::task::JoinHandle<super::Reply>>) {
    let mut sent = Vec::new();
    for i in 0..GROUP_WRITERS_MAX {
        let request = (api.service.clone(), approved(&format!("W{i}"), 2048, None));
        sent.extend(send_all(api, vec![request]).await);
        queued(api, url, i + 1, 0).await;
    }
    (GROUP_WRITERS_MAX, sent)
}

#[tokio::test]
async fn single_creates_that_arrive_together_are_written_in_groups_and_each_answered_alone() {
    let (ledger, url) = postgres_ledger().await;
    let api = Arc::new(spawn(ledger).await);
    let existing = api.create("EX", 2048).await;
    api.create("CF", 1000).await;
    let held = HeldWriters::hold(&url).await;
    let (lone, first) = lone_requests(&api, &url).await;
    // Then everything else arrives while they wait.
    let mut mismatch = approved("MM", 2048, None);
    mismatch["approval"]["details_hash"] = json!("0".repeat(64));
    let mut requests: Vec<(String, Value)> = (0..20)
        .map(|i| (api.service.clone(), approved(&format!("N{i}"), 2048, None)))
        .collect();
    requests.extend([
        (api.service.clone(), approved("N0", 2048, None)), // 20: the same business key again
        (api.service.clone(), approved("EX", 2048, None)), // 21: existing, approved now
        (api.service.clone(), approved("CF", 2048, None)), // 22: the key names other details
        (api.service.clone(), mismatch),                   // 23: approves other details
        (api.other_service.clone(), approved("N1", 2048, None)), // 24: another tenant's N1
    ]);
    let sent = requests.len();
    let rest = send_all(&api, requests).await;
    queued(&api, &url, GROUP_WRITERS_MAX, u64::try_from(sent).unwrap()).await;
    held.release().await;
    for lone in first {
        assert_eq!(lone.await.unwrap().status, 201);
    }
    let mut replies = Vec::new();
    for handle in rest {
        replies.push(handle.await.unwrap());
    }
    // N0 (0) and its repeat (20) were in two groups: one created it, the other found it.
    let mut pair = [replies[0].status, replies[20].status];
    pair.sort_unstable();
    assert_eq!(pair, [200, 201], "{replies:#?}");
    assert_eq!(replies[20].json()["id"], replies[0].json()["id"]);
    let statuses: Vec<u16> = replies[1..20]
        .iter()
        .chain(&replies[21..])
        .map(|r| r.status)
        .collect();
    let mut expected = vec![201; 19];
    expected.extend([200, 409, 409, 201]);
    assert_eq!(statuses, expected, "{replies:#?}");
    assert_eq!(replies[22].code(), "business_key_conflict");
    assert_eq!(replies[23].code(), "approval_mismatch");
    assert_eq!(replies[21].json()["id"], existing["id"]);
    assert_eq!(replies[21].json()["status"], "ready");
    assert_ne!(replies[24].json()["id"], replies[1].json()["id"]);
    // Each operation created for the tenant is ready, with the audit trail and the approval of a
    // create then an approve.
    for reply in &replies[..20] {
        let id = OperationId::parse(reply.json()["id"].as_str().unwrap()).unwrap();
        let op = api.ledger.get(&tenant(), &id).await.unwrap();
        assert_eq!(op.status, Status::Ready);
        let events = api.ledger.events(&tenant(), &id).await.unwrap();
        assert_eq!(events.len(), 2, "{events:?}");
        assert!(events[0].event == "create" && events[1].event == "approve");
        assert!(
            api.ledger
                .latest_approval(&tenant(), &id)
                .await
                .unwrap()
                .is_some()
        );
    }
    // The 25 queued requests were written in three groups, not one statement each: the tenant's
    // queue, its repeated key after it, the other tenant's (and before them the lone ones).
    assert_eq!(
        metric(&api, "payonce_api_intake_groups_total").await,
        u64::try_from(lone + 3).unwrap()
    );
    assert_eq!(
        metric(&api, "payonce_api_intake_grouped_total").await,
        u64::try_from(sent + lone).unwrap()
    );
    assert_eq!(metric(&api, "payonce_api_intake_waiting").await, 0);
}

#[tokio::test]
async fn an_item_the_database_refuses_fails_only_its_own_request_in_a_group() {
    let (ledger, url) = postgres_ledger().await;
    let api = Arc::new(spawn(ledger).await);
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::raw_sql(
        "ALTER TABLE operations ADD CONSTRAINT test_poison \
         CHECK (business_key <> 'invoice:POISON:pay')",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let held = HeldWriters::hold(&url).await;
    let (lone, first) = lone_requests(&api, &url).await;
    let mut requests: Vec<(String, Value)> = (0..5)
        .map(|i| (api.service.clone(), approved(&format!("G{i}"), 2048, None)))
        .collect();
    requests.insert(2, (api.service.clone(), approved("POISON", 2048, None)));
    let rest = send_all(&api, requests).await;
    queued(&api, &url, GROUP_WRITERS_MAX, 6).await;
    held.release().await;
    for lone in first {
        assert_eq!(lone.await.unwrap().status, 201);
    }
    let mut statuses = Vec::new();
    for handle in rest {
        statuses.push(handle.await.unwrap().status);
    }
    assert_eq!(statuses, [201, 201, 500, 201, 201, 201]);
    // Nothing was written for the refused item; the others once each.
    let found = api
        .post(CREATE, &api.service, approved("POISON", 2048, None))
        .await;
    assert_eq!(found.status, 500, "still refused, and still not written");
    let counts = api.ledger.count_by_status().await.unwrap();
    assert_eq!(counts.len(), 1);
    assert_eq!(
        (counts[0].status, counts[0].count),
        (Status::Ready, i64::try_from(lone + 5).unwrap())
    );
    // The six queued requests were one group (written again item by item when refused), then the
    // poisoned one alone again.
    assert_eq!(
        metric(&api, "payonce_api_intake_groups_total").await,
        u64::try_from(lone + 2).unwrap()
    );
}

#[tokio::test]
async fn each_request_of_a_group_keeps_its_own_priority_schedule_and_approval_expiry() {
    let (ledger, url) = postgres_ledger().await;
    let api = Arc::new(spawn(ledger).await);
    let held = HeldWriters::hold(&url).await;
    let (lone, first) = lone_requests(&api, &url).await;
    let day_ms = 86_400_000;
    let t0 = super::T0_MS;
    let schedules = [
        (json!({}), Priority::Interactive, None),
        (
            json!({"priority": "bulk", "not_before_ms": t0 + 3 * day_ms}),
            Priority::Bulk,
            Some(t0 + 3 * day_ms),
        ),
        (
            json!({"not_before": "2027-01-20T08:00:00Z"}),
            Priority::Interactive,
            Some(t0 + 5 * day_ms),
        ),
    ];
    let requests: Vec<(String, Value)> = schedules
        .iter()
        .enumerate()
        .map(|(i, (extra, _, _))| {
            let mut body = approved(&format!("SG{i}"), 2048, None);
            for (k, v) in extra.as_object().unwrap() {
                body[k] = v.clone();
            }
            (api.service.clone(), body)
        })
        .collect();
    let rest = send_all(&api, requests).await;
    queued(&api, &url, GROUP_WRITERS_MAX, 3).await;
    held.release().await;
    for lone in first {
        assert_eq!(lone.await.unwrap().status, 201);
    }
    let ttl_ms = i64::try_from(APPROVAL_TTL_DEFAULT.as_millis()).unwrap();
    for (handle, (_, priority, not_before)) in rest.into_iter().zip(schedules) {
        let reply = handle.await.unwrap();
        assert_eq!(reply.status, 201, "{}", reply.text);
        let id = OperationId::parse(reply.json()["id"].as_str().unwrap()).unwrap();
        let op = api.ledger.get(&tenant(), &id).await.unwrap();
        assert_eq!(op.priority, priority);
        assert_eq!(op.not_before, not_before.map(Timestamp::from_millis));
        let expires = Timestamp::from_millis(not_before.unwrap_or(t0) + ttl_ms);
        assert_eq!(op.approval_expires_at, Some(expires));
        let approval = api.ledger.latest_approval(&tenant(), &id).await.unwrap();
        assert_eq!(approval.unwrap().expires_at, expires);
    }
    // The three were written as one group (after the lone ones).
    assert_eq!(
        metric(&api, "payonce_api_intake_groups_total").await,
        u64::try_from(lone + 1).unwrap()
    );
}

/// Clients that give up on a create after this long: long enough for a loaded machine to queue
/// their request, well inside the statement timeout the ledger stalls past.
const GIVE_UP: Duration = Duration::from_secs(3);
/// Clients that wait: longer than two statement timeouts (15 s each) in a row.
const PATIENT: Duration = Duration::from_secs(60);

/// POSTs a create to `api` with a client of its own that gives up after `patience`: the answer,
/// or `None` when the client gave up first.
async fn create_within(api: &TestApi, body: Value, patience: Duration) -> Option<super::Reply> {
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(2))
        .timeout(patience)
        .build()
        .unwrap();
    let r = http
        .post(format!("{}{CREATE}", api.base))
        .bearer_auth(&api.service)
        .json(&body)
        .send()
        .await
        .ok()?;
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let text = r.text().await.ok()?;
    Some(super::Reply {
        status,
        headers,
        text,
    })
}

/// A retryable `503 unavailable`, with the pause to take.
fn assert_unavailable_503(r: &super::Reply) {
    assert_eq!(r.status, 503, "{}", r.text);
    assert_eq!(r.code(), "unavailable", "{}", r.text);
    assert!(!r.header("retry-after").is_empty(), "no Retry-After");
}

/// Issue 53, item 5: with the ledger stalled past its statement timeout (a lock held for longer
/// than the 15 s every ledger connection allows a statement), every create is answered `503
/// unavailable` with `Retry-After` (never `500`), and every create whose client gave up is written
/// once the ledger takes writes again, as the module promises.
#[tokio::test]
async fn a_ledger_stalled_past_its_statement_timeout_answers_503_and_still_writes_the_abandoned() {
    const GONE: usize = 6;
    const WAITING: usize = 4;
    let (ledger, url) = postgres_ledger().await;
    let api = Arc::new(spawn(ledger).await);
    let held = HeldWriters::hold(&url).await;
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    // One writer blocked on the lock with a patient request...
    let lone = {
        let api = Arc::clone(&api);
        tokio::spawn(async move { create_within(&api, approved("L0", 2048, None), PATIENT).await })
    };
    queued(&api, &url, GROUP_WRITERS_MAX, 0).await;
    // ...long enough that the next group's timeout comes well inside the server's request limit.
    wait_for(
        "the lone write blocked for 8 s",
        Duration::from_secs(20),
        || {
            let pool = pool.clone();
            async move {
                let blocked = blocked_inserts(&pool, 8).await;
                (blocked == 1).then_some(())
            }
        },
    )
    .await;
    let send = |invoice: String, patience: Duration| {
        let api = Arc::clone(&api);
        tokio::spawn(
            async move { create_within(&api, approved(&invoice, 2048, None), patience).await },
        )
    };
    let gone: Vec<_> = (0..GONE).map(|i| send(format!("G{i}"), GIVE_UP)).collect();
    let waiting: Vec<_> = (0..WAITING)
        .map(|i| send(format!("P{i}"), PATIENT))
        .collect();
    queued(
        &api,
        &url,
        GROUP_WRITERS_MAX,
        u64::try_from(GONE + WAITING).unwrap(),
    )
    .await;
    for g in gone {
        assert!(
            g.await.unwrap().is_none(),
            "a client that gave up heard an answer"
        );
    }
    // The lone write meets the statement timeout; then the queued group does.
    assert_unavailable_503(&lone.await.unwrap().expect("an answer within the patience"));
    for w in waiting {
        assert_unavailable_503(&w.await.unwrap().expect("an answer within the patience"));
    }
    held.release().await;
    // Every create whose client gave up is written (once: one row per business key).
    wait_for(
        "every abandoned create written",
        Duration::from_secs(60),
        || {
            let pool = pool.clone();
            async move {
                let written: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM operations WHERE business_key LIKE 'invoice:G%:pay' \
                     AND status = 'ready'",
                )
                .fetch_one(&pool)
                .await
                .unwrap();
                (written == i64::try_from(GONE).unwrap()).then_some(())
            }
        },
    )
    .await;
    pool.close().await;
}

//! Processes whose clocks are 10 minutes off the database's (issue 43), on Postgres: leases, expiries
//! and the key's retention window follow the database's clock, and each process reports its drift.
//! The skewed clocks are the system clock plus or minus an offset, so time still runs.

use crate::support::processes::{self, Hooked, SubmitHook, audit, payments_for};
use crate::support::reconciler;
use crate::support::{self, ready_operation, tenant, wait_for};
use payonce_core::clock::{Clock, SharedClock, SystemClock, Timestamp};
use payonce_core::metrics::Exposition;
use payonce_core::state::Status;
use payonce_ledger::{LeaseHolder, Operation, SharedLedger};
use payonce_processor::{Processor, SubmitRequest};
use payonce_reconciler::Reconciler;
use payonce_simulator::{Simulator, SimulatorConfig};
use payonce_worker::{Worker, WorkerConfig};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How far off the skewed processes' clocks are.
const SKEW: Duration = Duration::from_secs(600);
/// How close a measured drift must come to [`SKEW`]: a loaded machine's round trip, and then some.
const DRIFT_TOLERANCE_S: f64 = 5.0;

/// The system clock moved by a fixed offset, either way.
#[derive(Debug)]
struct SkewedClock {
    ahead: bool,
}

impl Clock for SkewedClock {
    fn now(&self) -> Timestamp {
        let now = SystemClock.now();
        if self.ahead {
            now + SKEW
        } else {
            now.saturating_sub_span(SKEW)
        }
    }
}

fn behind() -> SharedClock {
    Arc::new(SkewedClock { ahead: false })
}

fn ahead() -> SharedClock {
    Arc::new(SkewedClock { ahead: true })
}

/// The database server's clock, read by the test itself.
async fn database_now(url: &str) -> Timestamp {
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(url)
        .await
        .unwrap();
    let ms: i64 =
        sqlx::query_scalar("SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    Timestamp::from_millis(ms)
}

/// The value of `payonce_clock_drift_seconds` in a rendered `/metrics` document.
fn drift_seconds(metrics: &str) -> f64 {
    let line = metrics
        .lines()
        .find(|l| l.starts_with("payonce_clock_drift_seconds"))
        .unwrap_or_else(|| panic!("no payonce_clock_drift_seconds in:\n{metrics}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

fn worker_drift(worker: &Worker) -> f64 {
    let mut e = Exposition::default();
    worker.metrics().render(&mut e);
    drift_seconds(&e.finish())
}

async fn reconciler_drift(ledger: &SharedLedger, rec: &Reconciler) -> f64 {
    let mut e = Exposition::default();
    rec.metrics()
        .render(ledger.as_ref(), SystemClock.now(), &mut e)
        .await
        .unwrap();
    drift_seconds(&e.finish())
}

/// A reconciler with quick re-checks on `clock`.
fn reconciler_on(
    ledger: &SharedLedger,
    processor: Arc<dyn Processor>,
    clock: SharedClock,
) -> Reconciler {
    reconciler::build_on(
        ledger,
        processor,
        clock,
        "reconciler-skewed",
        reconciler::quick_rechecks,
    )
}

/// A worker with a short lease, renewed often.
fn worker_config(owner: &str, lease_ttl: Duration) -> WorkerConfig {
    let mut config = WorkerConfig::new(owner);
    config.lease_ttl = lease_ttl;
    config.renew_interval = lease_ttl / 5;
    config.poll_interval = Duration::from_millis(50);
    config
}

/// Holds every payment submission before it leaves until the gate opens (never, for a worker that
/// is killed while holding it); says when the first one arrived.
struct Gate {
    arrived: watch::Sender<bool>,
    open: watch::Receiver<bool>,
}

#[async_trait::async_trait]
impl SubmitHook for Gate {
    async fn before(&self, _request: &SubmitRequest<'_>) {
        self.arrived.send_replace(true);
        let _ = self.open.clone().wait_for(|open| *open).await;
    }
}

/// A processor whose submissions wait at a gate: (processor, arrived, open).
fn gated(
    sim: &Simulator,
) -> (
    Arc<dyn Processor>,
    watch::Receiver<bool>,
    watch::Sender<bool>,
) {
    let (arrived_tx, arrived) = watch::channel(false);
    let (open, open_rx) = watch::channel(false);
    let processor = Arc::new(Hooked {
        inner: processes::stripe(sim, None),
        hook: Gate {
            arrived: arrived_tx,
            open: open_rx,
        },
    });
    (processor, arrived, open)
}

/// Every operation was paid exactly once at the processor, and its row says succeeded.
async fn paid_once_each(ledger: &SharedLedger, sim: &Simulator, ops: &[Operation]) {
    let per_op = crate::support::processes::payments_per_operation(&audit(sim).await);
    for op in ops {
        assert_eq!(per_op.get(op.id.as_str()), Some(&1), "{} paid once", op.id);
        let row = ledger.get(&tenant(), &op.id).await.unwrap();
        assert_eq!(row.status, Status::Succeeded, "{}", op.id);
    }
    assert_eq!(per_op.len(), ops.len(), "no other payments: {per_op:?}");
}

/// Issue 43: a worker 10 minutes behind claimed nothing all run. On the database's clock it
/// claims and pays every operation, and reports the drift.
#[tokio::test]
async fn a_worker_ten_minutes_behind_claims_and_pays() {
    let (ledger, _db) = support::postgres_ledger().await;
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let mut ops = Vec::new();
    for i in 0..20 {
        ops.push(
            ready_operation(
                &ledger,
                &format!("INV-BEHIND-{i}"),
                "pm_card_visa",
                SystemClock.now(),
            )
            .await,
        );
    }
    let worker = Arc::new(
        Worker::new(
            ledger.clone(),
            processes::stripe(&sim, None),
            behind(),
            worker_config("worker-behind", Duration::from_secs(5)),
        )
        .unwrap(),
    );
    let (stop, mut stopping) = watch::channel(false);
    let run = tokio::spawn(worker.clone().run(async move {
        let _ = stopping.wait_for(|s| *s).await;
    }));
    wait_for(
        "the worker behind pays every operation",
        Duration::from_secs(30),
        || {
            let (ledger, ops) = (ledger.clone(), &ops);
            async move {
                for op in ops {
                    if ledger.get(&tenant(), &op.id).await.unwrap().status != Status::Succeeded {
                        return None;
                    }
                }
                Some(())
            }
        },
    )
    .await;
    stop.send_replace(true);
    let summary = run.await.unwrap();
    assert_eq!(summary.claimed, 20);
    paid_once_each(&ledger, &sim, &ops).await;
    // Behind: the database's clock is ahead of the process's.
    let drift = worker_drift(&worker);
    assert!(
        (drift - SKEW.as_secs_f64()).abs() < DRIFT_TOLERANCE_S,
        "drift {drift}"
    );
}

/// Issue 43: a reconciler 10 minutes ahead expired live leases early. A lease a healthy worker
/// keeps renewing is not expired by it, however long the submission takes.
#[tokio::test]
async fn a_reconciler_ten_minutes_ahead_leaves_a_renewed_lease_alone() {
    let (ledger, url) = support::postgres_ledger().await;
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let op = ready_operation(&ledger, "INV-LIVE", "pm_card_visa", SystemClock.now()).await;
    let lease_ttl = Duration::from_millis(1_000);
    let (processor, mut arrived, open) = gated(&sim);
    let worker = processes::run_worker(
        ledger.clone(),
        processor,
        worker_config("worker-healthy", lease_ttl),
    );
    arrived.wait_for(|a| *a).await.unwrap();
    let claimed = ledger.get(&tenant(), &op.id).await.unwrap();
    assert_eq!(claimed.status, Status::Executing);
    let first_expiry = claimed.lease_expires_at.unwrap();
    let rec = reconciler_on(&ledger, processes::stripe(&sim, None), ahead());
    // Sweep until the database's clock is a whole lease past the first lease's end: only renewal
    // can have kept the lease alive that long.
    wait_for(
        "the first lease is a lease past its end",
        Duration::from_secs(30),
        || {
            let (rec, url) = (&rec, &url);
            async move {
                rec.sweep_once(false).await.unwrap();
                (database_now(url).await > first_expiry + lease_ttl).then_some(())
            }
        },
    )
    .await;
    let m = rec.metrics();
    assert_eq!(
        (m.requeued.get(), m.marked_unknown.get()),
        (0, 0),
        "(requeued, marked unknown) by the reconciler ahead"
    );
    let held = ledger.get(&tenant(), &op.id).await.unwrap();
    assert_eq!(
        (held.status, held.attempt),
        (Status::Executing, claimed.attempt)
    );
    assert_eq!(held.lease_owner.as_deref(), Some("worker-healthy"));
    assert!(
        held.lease_expires_at > Some(first_expiry),
        "renewed: {held:?}"
    );
    open.send_replace(true);
    wait_for(
        "the healthy worker records its payment",
        Duration::from_secs(20),
        || {
            let (ledger, id) = (ledger.clone(), op.id.clone());
            async move {
                (ledger.get(&tenant(), &id).await.unwrap().status == Status::Succeeded)
                    .then_some(())
            }
        },
    )
    .await;
    worker.stop().await.unwrap();
    paid_once_each(&ledger, &sim, std::slice::from_ref(&op)).await;
    let done = ledger.get(&tenant(), &op.id).await.unwrap();
    assert_eq!(done.attempt, claimed.attempt, "one attempt: the worker's");
    let drift = reconciler_drift(&ledger, &rec).await;
    assert!(
        (drift + SKEW.as_secs_f64()).abs() < DRIFT_TOLERANCE_S,
        "drift {drift}"
    );
}

/// Issue 43: a killed worker 10 minutes ahead left its rows `executing` for 10 minutes. Its lease
/// ends a lease after its claim by the database's clock, and the reconciler (ahead too) takes the
/// row over then and pays it once.
#[tokio::test]
async fn a_killed_worker_ten_minutes_ahead_leaves_a_lease_that_ends_on_time() {
    let (ledger, url) = support::postgres_ledger().await;
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let op = ready_operation(&ledger, "INV-KILLED", "pm_card_visa", SystemClock.now()).await;
    let lease_ttl = Duration::from_millis(1_000);
    let (processor, mut arrived, _never_opened) = gated(&sim);
    let worker = Arc::new(
        Worker::new(
            ledger.clone(),
            processor,
            ahead(),
            worker_config("worker-ahead", lease_ttl),
        )
        .unwrap(),
    );
    let before_claim = database_now(&url).await;
    // `run_once` renews nothing: aborting it at the gate is a kill (no release, no renewal).
    let run = tokio::spawn({
        let worker = worker.clone();
        async move { worker.run_once().await }
    });
    arrived.wait_for(|a| *a).await.unwrap();
    let after_claim = database_now(&url).await;
    run.abort();
    let claimed = ledger.get(&tenant(), &op.id).await.unwrap();
    assert_eq!(claimed.status, Status::Executing);
    let expiry = claimed.lease_expires_at.unwrap();
    assert!(
        expiry >= before_claim + lease_ttl && expiry <= after_claim + lease_ttl,
        "the lease ends a lease after the claim by the database's clock: {} ms after the claim",
        expiry.as_millis() - after_claim.as_millis()
    );
    let first = claimed.first_submitted_at.unwrap();
    assert!(
        first >= before_claim && first <= after_claim,
        "first_submitted_at on the database's clock"
    );
    let drift = worker_drift(&worker);
    assert!(
        (drift + SKEW.as_secs_f64()).abs() < DRIFT_TOLERANCE_S,
        "drift {drift}"
    );
    // A reconciler whose clock is right finds the lapsed lease on time (the request never left: a
    // same-key retry pays it).
    let rec = reconciler_on(
        &ledger,
        processes::stripe(&sim, None),
        Arc::new(SystemClock),
    );
    wait_for(
        "the reconciler finishes the killed worker's row",
        Duration::from_secs(20),
        || {
            let (ledger, rec, id) = (ledger.clone(), &rec, op.id.clone());
            async move {
                rec.sweep_once(false).await.unwrap();
                (ledger.get(&tenant(), &id).await.unwrap().status == Status::Succeeded)
                    .then_some(())
            }
        },
    )
    .await;
    let trail = ledger.events(&tenant(), &op.id).await.unwrap();
    let lapsed = trail
        .iter()
        .find(|e| e.from_status.as_deref() == Some("executing") && e.to_status == "unknown")
        .unwrap_or_else(|| panic!("the lease lapsed to unknown: {trail:?}"));
    assert!(lapsed.at >= expiry, "not expired early: {lapsed:?}");
    assert!(
        lapsed.at <= expiry + Duration::from_secs(15),
        "expired on time, not {} ms late",
        lapsed.at.as_millis() - expiry.as_millis()
    );
    paid_once_each(&ledger, &sim, std::slice::from_ref(&op)).await;
    assert_eq!(payments_for(&sim, op.id.as_str()).await, 1);
}

/// Issue 43: `first_submitted_at + retention` was compared with a skewed process's `now`. A
/// reconciler 10 minutes ahead, with a 12-minute key retention and a 5-minute margin, sees the
/// window open (the submission is seconds old by the database's clock, 10 minutes by its own) and
/// retries with the same key instead of sending the payment to a human.
#[tokio::test]
async fn a_reconciler_ten_minutes_ahead_keeps_the_retention_window_open() {
    let (ledger, url) = support::postgres_ledger().await;
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let op = ready_operation(&ledger, "INV-WINDOW", "pm_card_visa", SystemClock.now()).await;
    // A worker on the database's clock claimed and recorded the submission start, then crashed
    // before its request left.
    let claimed = ledger
        .claim_to_submit(
            &LeaseHolder {
                owner: "crashed-worker",
                lease_ttl: Duration::from_millis(300),
            },
            1,
            database_now(&url).await,
        )
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    let retention = Duration::from_secs(12 * 60);
    let rec = reconciler_on(&ledger, processes::stripe(&sim, Some(retention)), ahead());
    wait_for(
        "the reconciler settles the crashed row",
        Duration::from_secs(20),
        || {
            let (ledger, rec, id) = (ledger.clone(), &rec, op.id.clone());
            async move {
                rec.sweep_once(false).await.unwrap();
                let row = ledger.get(&tenant(), &id).await.unwrap();
                (row.status.is_terminal() || row.status == Status::NeedsAttention).then_some(row)
            }
        },
    )
    .await;
    paid_once_each(&ledger, &sim, std::slice::from_ref(&op)).await;
    assert_eq!(rec.metrics().retried_same_key.get(), 1);
}

/// The api on a host 10 minutes ahead (or behind) of the database: an approval it records expires
/// `approval_ttl` after the database's now, not the host's (the worker checks it on the database's
/// clock, so a skewed api would hand out approvals 10 minutes too long or too short).
#[tokio::test]
async fn an_api_ten_minutes_off_gives_approvals_the_databases_expiry() {
    use payonce_api::{ApiConfig, AppState, database_clock, serve_listener};
    use payonce_ledger::Role;
    for (local, name) in [(ahead(), "ahead"), (behind(), "behind")] {
        let (ledger, url) = support::postgres_ledger().await;
        let key = support::api_key(&ledger, Role::Service, "billing").await;
        let clock = database_clock(ledger.clone(), local).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let config = ApiConfig {
            public_base_url: base.clone(),
            ..ApiConfig::default()
        };
        let ttl = config.approval_ttl;
        let state = AppState::new(ledger.clone(), clock, config);
        let (stop, stopped) = watch::channel(false);
        let mut stopped_rx = stopped.clone();
        let server = tokio::spawn(serve_listener(listener, state, async move {
            let _ = stopped_rx.wait_for(|s| *s).await;
        }));
        let http = reqwest::Client::new();
        let created: serde_json::Value = http
            .post(format!("{base}/v1/operations"))
            .bearer_auth(&key)
            .json(&serde_json::json!({"business_key": "invoice:INV-SKEW-API:pay",
                "details": {"kind": "payment", "amount": 2048, "currency": "usd", "customer": "cus_test",
                    "payment_method": "pm_card_visa", "invoice": "INV-SKEW-API"}}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let id = created["id"].as_str().unwrap().to_string();
        let before = database_now(&url).await;
        let approved = http
            .post(format!("{base}/v1/operations/{id}/approve"))
            .bearer_auth(&key)
            .json(&serde_json::json!({"details_hash": created["details_hash"], "approved_by": "customer:cus_test"}))
            .send()
            .await
            .unwrap();
        assert_eq!(approved.status(), 200, "{}", approved.text().await.unwrap());
        let after = database_now(&url).await;
        let op = ledger
            .get(
                &tenant(),
                &payonce_core::id::OperationId::parse(&id).unwrap(),
            )
            .await
            .unwrap();
        let expires = op.approval_expires_at.expect("approved");
        let tolerance = Duration::from_secs_f64(DRIFT_TOLERANCE_S);
        assert!(
            expires >= (before + ttl).saturating_sub_span(tolerance)
                && expires <= after + ttl + tolerance,
            "a host {name}: the approval expires at {expires:?}, the database's now was {before:?}..{after:?}, ttl {ttl:?}"
        );
        stop.send(true).unwrap();
        drop(stopped);
        server.await.unwrap().unwrap();
    }
}

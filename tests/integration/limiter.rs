//! The fleet limiter: one budget across connections on a real Redis (atomic per acquire), the read/write
//! split and the reserved share, the fallback while Redis is down (its own redis-server, killed and
//! restarted), and a worker that meets 429s without failing, duplicating or spending attempts.
//!
//! Keys on the shared Redis (127.0.0.1:6379) carry a prefix per test run; they expire on their own.

use crate::support::processes;
use crate::support::reconciler;
use crate::support::rows;
use crate::support::{self, ready_operation, tenant, wait_for};
use payonce_core::clock::{Clock, SystemClock};
use payonce_core::state::Status;
use payonce_processor::limiter::{
    Budget, Decision, Limiter, Rates, RedisLimiter, RedisLimiterConfig, acquire,
};
use payonce_simulator::{RateLimits, SimulatorConfig};
use payonce_worker::{Worker, WorkerConfig};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::task::JoinSet;

/// The machine's shared Redis.
const SHARED_REDIS: &str = "redis://127.0.0.1:6379";
/// Deadline for conditions (Redis coming up, a worker draining its queue).
const DEADLINE: Duration = Duration::from_secs(60);

fn prefix(test: &str) -> String {
    format!("payonce-test:{test}:{}", payonce_core::id::random_hex(6))
}

fn rates(write: u32, read: u32, burst: u32) -> Rates {
    Rates {
        write_per_second: write,
        read_per_second: read,
        global_per_second: None,
        read_reserved_percent: 0,
        write_reserved_percent: 0,
        burst,
    }
}

fn limiter(url: &str, prefix: &str, rates: Rates, timeout: Duration) -> RedisLimiter {
    RedisLimiter::new(RedisLimiterConfig {
        url: url.to_string(),
        ca_file: None,
        key_prefix: prefix.to_string(),
        account: "acct_test".to_string(),
        rates,
        expected_processes: 4,
        timeout,
    })
    .expect("valid limiter settings")
}

/// Permits `limiter` grants out of `tries` immediate asks.
async fn grants(limiter: &dyn Limiter, budget: Budget, tries: usize) -> usize {
    let mut n = 0;
    for _ in 0..tries {
        if limiter.try_acquire(budget).await == Decision::Granted {
            n += 1;
        }
    }
    n
}

/// The most a GCRA budget of `per_second` with `burst` may grant over `elapsed`.
fn budget_bound(per_second: u32, burst: u32, elapsed: Duration) -> usize {
    burst as usize + (elapsed.as_secs_f64() * f64::from(per_second)).ceil() as usize + 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_acquirers_on_separate_connections_never_exceed_one_budget() {
    let p = prefix("atomic");
    let (per_second, burst) = (2, 10);
    // Eight limiters: eight connections, as eight processes would have.
    let limiters: Vec<Arc<RedisLimiter>> = (0..8)
        .map(|_| {
            Arc::new(limiter(
                SHARED_REDIS,
                &p,
                rates(per_second, per_second, burst),
                Duration::from_secs(2),
            ))
        })
        .collect();
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for l in &limiters {
        for _ in 0..4 {
            let l = l.clone();
            tasks.spawn(async move { grants(l.as_ref(), Budget::Write, 25).await });
        }
    }
    let mut granted = 0;
    while let Some(n) = tasks.join_next().await {
        granted += n.unwrap();
    }
    let elapsed = started.elapsed();
    for l in &limiters {
        assert_eq!(
            l.metrics().backend_errors.get(),
            0,
            "Redis answered every call"
        );
        assert_eq!(l.metrics().fallback.get(), 0);
    }
    assert!(granted >= burst as usize, "the burst is granted: {granted}");
    assert!(
        granted <= budget_bound(per_second, burst, elapsed),
        "800 concurrent asks on 8 connections got {granted} permits in {elapsed:?}: more than the budget"
    );
}

/// A tenant's cap (`payonce tenant set-cap`) is one bucket in Redis for every process: four limiters
/// asking for one tenant's cap together get no more than the cap allows, another tenant's cap and
/// the write budget are untouched, and with Redis unreachable each process keeps to its share.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenants_cap_is_one_bucket_across_processes() {
    let p = prefix("cap");
    let (cap, burst) = (3, 10);
    let limiters: Vec<Arc<RedisLimiter>> = (0..4)
        .map(|_| {
            Arc::new(limiter(
                SHARED_REDIS,
                &p,
                rates(1_000, 1_000, burst),
                Duration::from_secs(2),
            ))
        })
        .collect();
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for l in &limiters {
        let l = l.clone();
        tasks.spawn(async move {
            let mut n = 0;
            for _ in 0..20 {
                if l.try_acquire_cap("capped", cap).await == Decision::Granted {
                    n += 1;
                }
            }
            n
        });
    }
    let mut granted = 0;
    while let Some(n) = tasks.join_next().await {
        granted += n.unwrap();
    }
    let elapsed = started.elapsed();
    // A cap's burst is at most one second's worth: 3.
    assert!(
        granted >= cap as usize,
        "the cap's burst is granted: {granted}"
    );
    assert!(
        granted <= budget_bound(cap, cap, elapsed),
        "80 asks on 4 connections got {granted} cap permits in {elapsed:?}: more than a 3/s cap"
    );
    assert_eq!(
        limiters[0].try_acquire_cap("other", cap).await,
        Decision::Granted
    );
    assert_eq!(
        limiters[0].try_acquire(Budget::Write).await,
        Decision::Granted
    );
    for l in &limiters {
        assert_eq!(
            l.metrics().backend_errors.get(),
            0,
            "Redis answered every call"
        );
    }
    // Redis unreachable: a process decides its share of the cap itself (3 / 4 processes: 1).
    let away = limiter(
        "redis://127.0.0.1:1",
        &p,
        rates(1_000, 1_000, burst),
        Duration::from_millis(200),
    );
    let started = Instant::now();
    let mut alone = 0;
    for _ in 0..10 {
        if away.try_acquire_cap("capped", cap).await == Decision::Granted {
            alone += 1;
        }
    }
    assert!(
        alone >= 1 && alone <= budget_bound(1, 1, started.elapsed()),
        "{alone} permits of a 1/s share in {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reads_and_writes_have_separate_budgets_and_reads_keep_their_reserved_share() {
    // Separate budgets: spent writes leave reads untouched.
    let split = limiter(
        SHARED_REDIS,
        &prefix("split"),
        rates(1, 100, 5),
        Duration::from_secs(2),
    );
    let started = Instant::now();
    let writes = grants(&split, Budget::Write, 30).await;
    assert!(writes <= budget_bound(1, 5, started.elapsed()), "{writes}");
    assert!(matches!(
        split.try_acquire(Budget::Write).await,
        Decision::Retry(_)
    ));
    assert_eq!(
        grants(&split, Budget::Read, 5).await,
        5,
        "reads have their own budget"
    );

    // A global cap with 30% reserved for reads: writes flooding as fast as they can (on four
    // connections) never take more than 70%, and lookups still get permits within a bounded wait.
    let p = prefix("reserve");
    let shared = Rates {
        write_per_second: 1000,
        read_per_second: 1000,
        global_per_second: Some(10),
        read_reserved_percent: 30,
        write_reserved_percent: 0,
        burst: 1,
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let started = Instant::now();
    let mut writers = JoinSet::new();
    for _ in 0..4 {
        let l = limiter(SHARED_REDIS, &p, shared, Duration::from_secs(2));
        let stop = stop_rx.clone();
        writers.spawn(async move {
            let mut n = 0;
            while !*stop.borrow() {
                if l.try_acquire(Budget::Write).await == Decision::Granted {
                    n += 1;
                }
            }
            n
        });
    }
    let reader = limiter(SHARED_REDIS, &p, shared, Duration::from_secs(2));
    for i in 0..4 {
        acquire(&reader, Budget::Read, Duration::from_secs(10))
            .await
            .unwrap_or_else(|e| panic!("read {i} starved by writes: {e}"));
    }
    stop_tx.send(true).unwrap();
    let mut writes = 0;
    while let Some(n) = writers.join_next().await {
        writes += n.unwrap();
    }
    let elapsed = started.elapsed();
    assert!(
        writes <= budget_bound(7, 1, elapsed),
        "writes took more than 70% of 10/s: {writes} in {elapsed:?}"
    );
    assert!(writes > 0);
}

/// A redis-server of the test's own, on a free port, to kill and restart.
struct OwnRedis {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl OwnRedis {
    async fn start() -> OwnRedis {
        let port = crate::serve::free_port();
        let dir = std::env::temp_dir().join(format!(
            "payonce-redis-{port}-{}",
            payonce_core::id::random_hex(4)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut r = OwnRedis {
            port,
            dir,
            child: None,
        };
        r.restart().await;
        r
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    async fn restart(&mut self) {
        let child = Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
            ])
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("redis-server is installed");
        self.child = Some(child);
        let port = self.port;
        wait_for("redis-server to answer PING", DEADLINE, || async move {
            let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .ok()?;
            s.write_all(b"PING\r\n").await.ok()?;
            let mut buf = [0_u8; 7];
            s.read_exact(&mut buf).await.ok()?;
            (&buf == b"+PONG\r\n").then_some(())
        })
        .await;
    }

    async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().await.unwrap();
        }
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test]
async fn with_redis_down_each_process_keeps_to_its_local_share_and_comes_back_when_it_returns() {
    let mut redis = OwnRedis::start().await;
    let budget = rates(40, 40, 8);
    let l = limiter(
        &redis.url(),
        &prefix("fallback"),
        budget,
        Duration::from_millis(200),
    );
    // A quarter of the budget each: the share four processes can take without coordinating.
    let share = l.fallback_rates();
    assert_eq!((share.write_per_second, share.burst), (10, 2));
    acquire(&l, Budget::Write, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(l.metrics().fallback.get(), 0);

    redis.kill().await;
    // Acquires continue, at the local share, and the fallback is visible.
    acquire(&l, Budget::Write, Duration::from_secs(5))
        .await
        .expect("the fallback grants permits while Redis is down");
    assert_eq!(l.metrics().fallback.get(), 1);
    assert_eq!(l.metrics().fallback_entered.get(), 1);
    let started = Instant::now();
    let granted = grants(&l, Budget::Write, 200).await;
    let elapsed = started.elapsed();
    assert!(
        granted <= budget_bound(share.write_per_second, share.burst, elapsed),
        "the fallback keeps to the local share: {granted} in {elapsed:?}"
    );
    assert!(l.metrics().fallback_decisions.get() >= 200);
    assert_eq!(
        l.metrics().fallback_entered.get(),
        1,
        "entered (and logged) once"
    );

    redis.restart().await;
    wait_for("the limiter to use Redis again", DEADLINE, || async {
        let _ = l.try_acquire(Budget::Read).await;
        (l.metrics().fallback.get() == 0).then_some(())
    })
    .await;
    let errors = l.metrics().backend_errors.get();
    acquire(&l, Budget::Read, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(
        l.metrics().backend_errors.get(),
        errors,
        "Redis answers again"
    );
    assert_eq!(l.metrics().fallback_entered.get(), 1);
    redis.kill().await;
}

#[tokio::test]
async fn a_worker_meeting_429s_pays_every_operation_once_without_failing_or_spending_attempts() {
    let (ledger, _url) = support::postgres_ledger().await;
    // A tight write limit and a worker that does not pace itself: it will meet many 429s.
    let sim = processes::simulator(SimulatorConfig {
        rate_limits: RateLimits {
            write_per_second: Some(5),
            ..RateLimits::default()
        },
        ..SimulatorConfig::default()
    })
    .await;
    let now = SystemClock.now();
    let mut ids = Vec::new();
    for i in 0..20 {
        ids.push(
            ready_operation(&ledger, &format!("INV-RL{i}"), "pm_card_visa", now)
                .await
                .id,
        );
    }
    let mut config = WorkerConfig::new("worker-429");
    config.concurrency = 20;
    config.batch_size = 20;
    // On the old classification a 429 was a not-submitted attempt: two of them exhausted an operation.
    config.submit.attempt_max = 2;
    config.submit.rate_limit_backoff_base = Duration::from_millis(20);
    config.submit.rate_limit_backoff_max = Duration::from_millis(300);
    let worker = Worker::new(
        ledger.clone(),
        processes::stripe(&sim, None),
        Arc::new(SystemClock),
        config,
    )
    .unwrap();
    wait_for("every operation to reach an outcome", DEADLINE, || async {
        worker.run_once().await.unwrap();
        let counts = ledger.count_by_status().await.unwrap();
        let open: i64 = counts
            .iter()
            .filter(|c| !c.status.is_terminal())
            .map(|c| c.count)
            .sum();
        (open == 0).then_some(())
    })
    .await;
    for id in &ids {
        let op = ledger.get(&tenant(), id).await.unwrap();
        assert_eq!(op.status, Status::Succeeded, "{id}");
        assert_eq!(op.attempt, 1, "{id}: a 429 is not a failed attempt");
    }
    let audit = processes::audit(&sim).await;
    let per_op = processes::payments_per_operation(&audit);
    for id in &ids {
        assert_eq!(per_op.get(id.as_str()), Some(&1), "{id} paid once");
    }
    assert_eq!(audit.len(), ids.len());
    let refused = processes::rate_limits(&sim).await;
    let total_429 = refused["total_429"].as_u64().unwrap();
    let m = worker.metrics();
    assert!(total_429 > 0, "the simulator refused some submissions");
    assert_eq!(
        m.execution.rate_limited.get(),
        total_429,
        "the worker saw every 429"
    );
    assert_eq!(
        m.execution.failed.get() + m.execution.unknown.get() + m.execution.needs_attention.get(),
        0
    );
    sim.shutdown().await;
}

/// An operation whose submission was recorded and never sent, now `unknown` and due for a check.
async fn unknown_never_sent(
    ledger: &payonce_ledger::SharedLedger,
    invoice: &str,
) -> payonce_ledger::Operation {
    let now = SystemClock.now();
    let op = ready_operation(ledger, invoice, "pm_card_visa", now).await;
    rows::unknown(
        ledger,
        &op.id,
        &rows::holder("crashed-worker", Duration::from_secs(60)),
        now,
        now,
    )
    .await;
    op
}

#[tokio::test]
async fn a_lookup_refused_by_the_processor_or_the_fleet_limiter_defers_the_check() {
    let (ledger, _url) = support::postgres_ledger().await;
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let op = unknown_never_sent(&ledger, "INV-LK1").await;

    // The fleet limiter has no read permit to give within the wait bound: deferred, nothing sent.
    let spent = Arc::new(payonce_processor::limiter::LocalLimiter::new(rates(
        1, 1, 1,
    )));
    assert_eq!(spent.try_acquire(Budget::Read).await, Decision::Granted);
    let rec = reconciler::build(&ledger, processes::stripe(&sim, None), "rec-limited", |c| {
        c.check_backoff_base = Duration::from_millis(20);
        c.lookup_permit_wait_max = Duration::from_millis(1);
        c.retry.limiter = spent.clone();
    });
    let before = processes::requests_served(&sim).await;
    let report = rec.sweep_once(false).await.unwrap();
    assert_eq!(report.deferred, 1, "{report:?}");
    assert_eq!(
        processes::requests_served(&sim).await,
        before,
        "no lookup was sent"
    );
    assert!(spent.metrics().denied.get() >= 1);
    assert_eq!(
        ledger.get(&tenant(), &op.id).await.unwrap().status,
        Status::Unknown
    );

    // The processor answers every request 429: the check is deferred, counted, never escalated.
    processes::arm_faults(
        &sim,
        serde_json::json!([{ "match": "*", "fault": "rate_limit_429" }]),
    )
    .await;
    let rec = reconciler::build(&ledger, processes::stripe(&sim, None), "rec-429", |c| {
        c.check_backoff_base = Duration::from_millis(20);
    });
    let deferred = wait_for("a sweep that checks the operation", DEADLINE, || async {
        let r = rec.sweep_once(false).await.unwrap();
        (r.deferred > 0).then_some(r)
    })
    .await;
    assert_eq!(
        (
            deferred.escalated,
            deferred.retried_same_key,
            deferred.resolved_succeeded
        ),
        (0, 0, 0),
        "{deferred:?}"
    );
    assert_eq!(rec.metrics().lookups_rate_limited.get(), 1);
    assert_eq!(
        ledger.get(&tenant(), &op.id).await.unwrap().status,
        Status::Unknown
    );
    // Once the processor answers, the check resolves it: not found, same-key retry, one payment.
    let r = reqwest::Client::new()
        .delete(format!("{}/_sim/faults", sim.base_url()))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    let done = wait_for("the operation to be resolved", DEADLINE, || async {
        rec.sweep_once(false).await.unwrap();
        let row = ledger.get(&tenant(), &op.id).await.unwrap();
        row.status.is_terminal().then_some(row)
    })
    .await;
    assert_eq!(done.status, Status::Succeeded);
    assert_eq!(processes::payments_for(&sim, op.id.as_str()).await, 1);
    sim.shutdown().await;
}

#[tokio::test]
async fn shutdown_does_not_wait_for_permits_and_unsent_operations_go_back_to_ready() {
    let (ledger, _url) = support::postgres_ledger().await;
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let now = SystemClock.now();
    let mut ids = Vec::new();
    for i in 0..30 {
        ids.push(
            ready_operation(&ledger, &format!("INV-SD{i}"), "pm_card_visa", now)
                .await
                .id,
        );
    }
    // One write permit per second: draining all thirty would take half a minute.
    let mut config = WorkerConfig::new("worker-shutdown");
    config.concurrency = 30;
    config.batch_size = 30;
    config.submit.limiter = Arc::new(payonce_processor::limiter::LocalLimiter::new(rates(
        1, 1, 1,
    )));
    let running = processes::run_worker(ledger.clone(), processes::stripe(&sim, None), config);
    wait_for("the first payment", DEADLINE, || async {
        (processes::audit(&sim).await.len() == 1).then_some(())
    })
    .await;
    let run = running.stop();
    // Well under the 29 s the remaining permits would take.
    tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("shutdown does not wait for permits")
        .unwrap();
    let paid = processes::audit(&sim).await.len();
    assert!(paid < ids.len(), "{paid}");
    let mut ready = 0;
    for id in &ids {
        let op = ledger.get(&tenant(), id).await.unwrap();
        match op.status {
            Status::Succeeded => {}
            Status::Ready => {
                ready += 1;
                assert_eq!(processes::payments_for(&sim, id.as_str()).await, 0);
            }
            other => panic!("{id} left {other:?}"),
        }
    }
    assert_eq!(
        ready,
        ids.len() - paid,
        "every unsent operation is ready again"
    );
    sim.shutdown().await;
}

/// A redis-server of the test's own that takes TLS only (`--port 0 --tls-port`), its certificate
/// signed by a CA the test made: the limiter reaches it through `rediss://` with that CA
/// (`limiter_redis_ca_file`), and its permits are Redis's (its keys are there), not the local
/// fallback's.
#[tokio::test]
async fn the_limiter_shares_its_budget_through_a_redis_that_requires_tls() {
    let certs = crate::managed_postgres::Scratch::new("redis-tls");
    let (ca, _) = crate::managed_postgres::server_certificate(&certs.0);
    let port = crate::serve::free_port();
    let file = |name: &str| certs.0.join(name).to_string_lossy().to_string();
    let _server = Command::new("redis-server")
        .args([
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .args([
            "--tls-cert-file",
            &file("server.pem"),
            "--tls-key-file",
            &file("server.key"),
        ])
        .args([
            "--tls-ca-cert-file",
            &file("ca.pem"),
            "--tls-auth-clients",
            "no",
        ])
        .args(["--save", "", "--appendonly", "no", "--dir", &file("")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("redis-server is installed");
    let url = format!("rediss://127.0.0.1:{port}");
    let pem = std::fs::read(&ca).unwrap();
    let client = redis::Client::build_with_tls(
        url.as_str(),
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(pem),
        },
    )
    .unwrap();
    let mut conn = wait_for("redis-server answers over TLS", DEADLINE, || {
        let client = client.clone();
        async move { client.get_multiplexed_async_connection().await.ok() }
    })
    .await;

    let key_prefix = prefix("tls");
    let limiter = RedisLimiter::new(RedisLimiterConfig {
        url: url.clone(),
        ca_file: Some(ca.clone()),
        key_prefix: key_prefix.clone(),
        account: "acct_test".to_string(),
        rates: rates(10, 10, 5),
        expected_processes: 4,
        timeout: Duration::from_secs(2),
    })
    .expect("valid limiter settings");
    let started = Instant::now();
    let granted = grants(&limiter, Budget::Write, 20).await;
    // The fleet's burst of 5 (the fallback's share is a quarter of it: 1 or 2).
    assert!(
        (4..=budget_bound(10, 5, started.elapsed())).contains(&granted),
        "Redis's budget, not the fallback's share: {granted}"
    );
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{key_prefix}*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(!keys.is_empty(), "the GCRA state is in the TLS Redis");
}

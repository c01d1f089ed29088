//! Start-up while the ledger's Postgres is down, out of connection slots or unreachable (issue 43):
//! the daemons keep trying for `PAYONCE_DB_CONNECT_TIMEOUT_MS`, not listening meanwhile, and then
//! either come up and work or exit naming the database's host, port and the cause.
//!
//! Every test runs on a throwaway cluster of its own (or on no server at all): the shared server on
//! 5432 is never stopped or filled.

use crate::serve::free_port;
use crate::support::cluster::Cluster;
use crate::support::postgres::postgres_bin_dir;
use crate::support::processes::simulator;
use crate::support::{self, KEY_SECRET, ready_operation, tenant, wait_for};
use payonce_core::clock::{Clock, SystemClock};
use payonce_core::state::Status;
use payonce_ledger::{self as ledger, postgres::ACQUIRE_TIMEOUT};
use payonce_simulator::{Simulator, SimulatorConfig};
use serde_json::Value;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// How long a test waits for a process to come up or to give up, on a loaded machine.
const DEADLINE: Duration = Duration::from_secs(60);

/// A child process's stderr, line by line, as it arrives; `ended` once the pipe closed (it exited).
#[derive(Default)]
pub(crate) struct Log {
    pub(crate) lines: Vec<String>,
    pub(crate) ended: bool,
}

pub(crate) type SharedLog = Arc<Mutex<Log>>;

/// Spawns `payonce {args}` on `database_url` with JSON logs collected in the returned [`Log`].
pub(crate) fn spawn(
    args: &[&str],
    database_url: &str,
    sim: &Simulator,
    env: &[(&str, &str)],
) -> (Child, SharedLog) {
    let mut cmd = Command::new(support::payonce_bin());
    cmd.args(args)
        .env("PAYONCE_DATABASE_URL", database_url)
        .env("PAYONCE_KEY_SECRET", KEY_SECRET)
        .env("PAYONCE_PROCESSOR_URL", sim.base_url())
        .env("PAYONCE_LOG_FORMAT", "json")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn payonce");
    let log = SharedLog::default();
    let mut lines = BufReader::new(child.stderr.take().expect("piped stderr")).lines();
    let sink = log.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            sink.lock().unwrap().lines.push(line);
        }
        sink.lock().unwrap().ended = true;
    });
    (child, log)
}

/// The JSON fields of every start-up retry the process logged so far. Panics with the whole log if
/// the process exited: it was meant to keep trying.
fn retries(log: &SharedLog) -> Vec<Value> {
    let log = log.lock().unwrap();
    assert!(
        !log.ended,
        "the process exited instead of retrying:\n{}",
        log.lines.join("\n")
    );
    log.lines
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|l| l["fields"].clone())
        .filter(|f| f["waited_ms"].is_u64())
        .collect()
}

/// Whether `GET http://{listen}/readyz` answers 200.
pub(crate) async fn ready(listen: &str) -> bool {
    reqwest::get(format!("http://{listen}/readyz"))
        .await
        .is_ok_and(|r| r.status().is_success())
}

/// A ready operation on `url`, paid by the worker under test.
pub(crate) async fn paid_by_the_worker(url: &str, invoice: &str) {
    let ledger = ledger::connect(url, 1).await.unwrap();
    let op = ready_operation(&ledger, invoice, "pm_card_visa", SystemClock.now()).await;
    let paid = wait_for("the worker pays", DEADLINE, || async {
        let row = ledger.get(&tenant(), &op.id).await.ok()?;
        row.status.is_terminal().then_some(row.status)
    })
    .await;
    assert_eq!(paid, Status::Succeeded);
}

/// The first case: Postgres is down when the worker starts and comes up later than the
/// pool's acquire timeout, after which the worker used to exit ("pool timed out"). It keeps trying,
/// does not listen meanwhile, and pays once the server is up.
#[tokio::test]
async fn a_worker_started_while_postgres_is_down_comes_up_when_it_starts() {
    let bin = postgres_bin_dir().expect("the Postgres binaries under /usr/lib/postgresql");
    let cluster = Cluster::initdb(bin, "");
    let url = cluster.url("postgres");
    // Migrated first, as `payonce migrate` would have (a worker never migrates: issue 56), then
    // down for the worker's start.
    cluster.pg_ctl(&["start"]);
    crate::support::postgres::migrate(&url).await;
    cluster.pg_ctl(&["stop"]);
    let sim = simulator(SimulatorConfig::default()).await;
    let listen = format!("127.0.0.1:{}", free_port());
    let (_worker, log) = spawn(
        &["worker"],
        &url,
        &sim,
        &[
            ("PAYONCE_METRICS_LISTEN", &listen),
            ("PAYONCE_POLL_MS", "50"),
            ("PAYONCE_DB_CONNECT_TIMEOUT_MS", "120000"),
        ],
    );
    let past_the_pool = ACQUIRE_TIMEOUT + Duration::from_secs(1);
    let last = wait_for("a retry past the pool's acquire timeout", DEADLINE, || {
        let found = retries(&log)
            .into_iter()
            .find(|r| r["waited_ms"].as_u64() >= Some(past_the_pool.as_millis() as u64));
        async move { found }
    })
    .await;
    assert!(
        last["address"]
            .as_str()
            .is_some_and(|a| a == format!("127.0.0.1:{}", cluster.port())),
        "{last}"
    );
    assert!(
        !ready(&listen).await,
        "not listening before the ledger is open"
    );

    cluster.pg_ctl(&["start"]);
    wait_for("the worker is ready", DEADLINE, || async {
        ready(&listen).await.then_some(())
    })
    .await;
    paid_by_the_worker(&url, "INV-START-DOWN").await;
}

/// The second case: every connection slot of the server is taken when the worker starts
/// (`53300 too many clients`). It reports the cause while it retries and comes up once slots free.
#[tokio::test]
async fn a_worker_started_while_postgres_has_no_free_slot_comes_up_when_one_frees() {
    use sqlx::Connection;
    // The worker's pool (3) and the test's ledger (1) fit once the slots free.
    const SLOTS: usize = 5;
    let bin = postgres_bin_dir().expect("the Postgres binaries under /usr/lib/postgresql");
    // No slots kept for superusers: the tests connect as `postgres`.
    let cluster = Cluster::initdb(
        bin,
        &format!("-c max_connections={SLOTS} -c superuser_reserved_connections=0"),
    );
    cluster.pg_ctl(&["start"]);
    let url = cluster.url("postgres");
    crate::support::postgres::migrate(&url).await;
    let mut taken = Vec::new();
    for _ in 0..SLOTS {
        taken.push(sqlx::PgConnection::connect(&url).await.unwrap());
    }
    let sim = simulator(SimulatorConfig::default()).await;
    let listen = format!("127.0.0.1:{}", free_port());
    let (_worker, log) = spawn(
        &["worker"],
        &url,
        &sim,
        &[
            ("PAYONCE_METRICS_LISTEN", &listen),
            ("PAYONCE_POLL_MS", "50"),
            ("PAYONCE_DB_CONNECT_TIMEOUT_MS", "120000"),
            ("PAYONCE_DB_MAX_CONNECTIONS", "3"),
        ],
    );
    wait_for("a retry naming the full server", DEADLINE, || {
        let found = retries(&log).into_iter().find(|r| {
            r["cause"]
                .as_str()
                .is_some_and(|c| c.contains("too many clients"))
        });
        async move { found }
    })
    .await;
    assert!(
        !ready(&listen).await,
        "not listening before the ledger is open"
    );

    for conn in taken {
        conn.close().await.unwrap();
    }
    wait_for("the worker is ready", DEADLINE, || async {
        ready(&listen).await.then_some(())
    })
    .await;
    paid_by_the_worker(&url, "INV-START-FULL").await;
}

/// A database nobody answers for: each daemon gives up after its connect timeout and says where it
/// tried and why, not "pool timed out".
#[tokio::test]
async fn daemons_give_up_on_an_unreachable_database_naming_its_address_and_the_cause() {
    let port = free_port();
    let url = format!("postgres://postgres@127.0.0.1:{port}/payonce");
    let sim = simulator(SimulatorConfig::default()).await;
    let api_listen = format!("127.0.0.1:{}", free_port());
    let commands: [&[&str]; 3] = [
        &["worker"],
        &["reconciler", "run"],
        &["api", "--listen", &api_listen],
    ];
    let mut exits = tokio::task::JoinSet::new();
    for args in commands {
        let (mut child, log) = spawn(
            args,
            &url,
            &sim,
            &[("PAYONCE_DB_CONNECT_TIMEOUT_MS", "1500")],
        );
        let name = args.join(" ");
        exits.spawn(async move {
            let status = tokio::time::timeout(DEADLINE, child.wait())
                .await
                .unwrap_or_else(|_| panic!("{name} still running {DEADLINE:?} after it started"))
                .unwrap();
            // The pipe closes when the process exits; the reader may still be draining it.
            wait_for("the whole log", DEADLINE, || {
                let ended = log.lock().unwrap().ended;
                async move { ended.then_some(()) }
            })
            .await;
            let text = log.lock().unwrap().lines.join("\n");
            (name, status, text)
        });
    }
    for (name, status, log) in exits.join_all().await {
        assert!(!status.success(), "{name} exited {status}:\n{log}");
        assert!(
            log.contains(&format!("database at 127.0.0.1:{port}")),
            "{name} names the host and port:\n{log}"
        );
        assert!(log.contains("refused"), "{name} names the cause:\n{log}");
        assert!(!log.contains("pool timed out"), "{name}:\n{log}");
        // "(attempts: N in M ms)": it retried, for about its 1.5 s, not the pool's 10 s.
        let tried = log
            .split("(attempts: ")
            .nth(1)
            .and_then(|t| t.split(" ms)").next())
            .and_then(|t| t.split_once(" in "))
            .and_then(|(n, ms)| Some((n.parse::<u32>().ok()?, ms.parse::<u64>().ok()?)));
        let Some((attempts, waited_ms)) = tried else {
            panic!("{name} says how long it tried:\n{log}")
        };
        assert!(attempts > 1, "{name} retried:\n{log}");
        assert!(
            (1_000..ACQUIRE_TIMEOUT.as_millis() as u64).contains(&waited_ms),
            "{name} tried for its connect timeout:\n{log}"
        );
    }
}

//! PgBouncer (Debian's package, installed by tests/pgbouncer/setup.sh) in front of real api, worker
//! and reconciler processes (issue 50): in transaction mode every later process used to exit with
//! `prepared statement "sqlx_s_1" already exists`, and PgBouncer's defaults refused sqlx's
//! `extra_float_digits` and the `options` that carried the statement timeout. Each test starts its
//! own cluster and its own pgbouncer on free ports, with PgBouncer's default startup parameters (no
//! `ignore_startup_parameters`) and fewer server connections than the processes hold, so that
//! transactions of different processes share server connections.

use crate::managed_postgres::Scratch;
use crate::serve::free_port;
use crate::startup::{ready, spawn};
use crate::support::cluster::Cluster;
use crate::support::processes::{audit, simulator};
use crate::support::{self, ready_operation, tenant, wait_for};
use payonce_core::clock::{Clock, SystemClock};
use payonce_core::state::Status;
use payonce_ledger as ledger;
use payonce_ledger::postgres::{Pooler, PostgresLedger, Route};
use payonce_simulator::SimulatorConfig;
use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::Duration;

/// How long a test waits for processes to come up and for payments, on a loaded machine.
const DEADLINE: Duration = Duration::from_secs(120);
/// Server connections PgBouncer keeps per database and user in transaction mode: fewer than the
/// processes' pools, so their transactions share server connections (what broke named prepared
/// statements).
const SERVER_CONNECTIONS_TRANSACTION: u32 = 3;
/// The same in session mode, where each client connection holds a server connection while it
/// lasts: room for every process's pool ([`SESSION_CLIENT_CONNECTIONS`] × 4) and the test's own
/// (runbook, "Connection budget per process").
const SERVER_CONNECTIONS_SESSION: u32 = 24;
/// `db_max_connections` of each process behind the session pooler.
const SESSION_CLIENT_CONNECTIONS: &str = "4";
/// Payments each test makes through the pooler.
const PAYMENTS: usize = 24;

/// A pgbouncer of the test's own in `pool_mode`, in front of `cluster`'s `postgres` database,
/// stopped on drop.
struct Bouncer {
    port: u16,
    child: std::process::Child,
    _dir: Scratch,
}

impl Bouncer {
    fn start(cluster: &Cluster, pool_mode: &str, server_connections: u32) -> Bouncer {
        let status = Command::new("bash")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/pgbouncer/setup.sh"
            ))
            .stdout(Stdio::null())
            .status()
            .expect("run tests/pgbouncer/setup.sh");
        assert!(status.success(), "tests/pgbouncer/setup.sh: {status}");
        let dir = Scratch::new("pgbouncer");
        let port = free_port();
        let d = dir.0.display();
        std::fs::write(dir.0.join("userlist.txt"), "\"postgres\" \"\"\n").unwrap();
        // PgBouncer's defaults otherwise: no ignore_startup_parameters.
        let config = format!(
            "[databases]\n\
             payonce = host=127.0.0.1 port={pg} dbname=postgres user=postgres\n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {port}\n\
             unix_socket_dir =\n\
             auth_type = trust\n\
             auth_file = {d}/userlist.txt\n\
             pool_mode = {pool_mode}\n\
             default_pool_size = {server_connections}\n\
             max_client_conn = 500\n\
             logfile = {d}/pgbouncer.log\n\
             pidfile = {d}/pgbouncer.pid\n",
            pg = cluster.port(),
        );
        std::fs::write(dir.0.join("pgbouncer.ini"), config).unwrap();
        let _ = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&dir.0)
            .status();
        // PgBouncer refuses to run as root.
        let child = Command::new("runuser")
            .args(["-u", "postgres", "--", "/usr/sbin/pgbouncer"])
            .arg(dir.0.join("pgbouncer.ini"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start pgbouncer");
        Bouncer {
            port,
            child,
            _dir: dir,
        }
    }

    /// The URL of the ledger through the pooler.
    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/payonce", self.port)
    }
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `payonce migrate` through the pooler, as each deployment's start runs it.
fn migrate(url: &str, pooler: &str) {
    let out = Command::new(support::payonce_bin())
        .args(["migrate", "--database-url", url, "--db-pooler", pooler])
        .env("PAYONCE_DB_CONNECT_TIMEOUT_MS", "30000")
        .output()
        .expect("run payonce migrate");
    assert!(
        out.status.success(),
        "migrate through pgbouncer ({pooler}): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Migrates twice (the second run was the first to fail), starts an api, two workers and a
/// reconciler with `PAYONCE_DB_POOLER={pooler}` through `bouncer`, and has them pay
/// [`PAYMENTS`] operations: every one succeeded, each paid exactly once at the processor (the
/// chaos soak's audit: 0 paid twice, 0 lost), and every process ready.
async fn pay_through(cluster: &Cluster, bouncer: &Bouncer, pooler: &str, direct: Option<&str>) {
    let url = bouncer.url();
    wait_for("pgbouncer listens", DEADLINE, || async {
        tokio::net::TcpStream::connect(("127.0.0.1", bouncer.port))
            .await
            .ok()
    })
    .await;
    migrate(&url, pooler);
    migrate(&url, pooler);

    let sim = simulator(SimulatorConfig::default()).await;
    let api = format!("127.0.0.1:{}", free_port());
    let mut listens = vec![api.clone()];
    let mut children = Vec::new();
    let mut env = vec![
        ("PAYONCE_DB_POOLER", pooler.to_string()),
        ("PAYONCE_POLL_MS", "50".to_string()),
        ("PAYONCE_DB_CONNECT_TIMEOUT_MS", "30000".to_string()),
    ];
    if let Some(direct) = direct {
        env.push(("PAYONCE_DIRECT_DATABASE_URL", direct.to_string()));
    }
    if pooler == "session" {
        env.push((
            "PAYONCE_DB_MAX_CONNECTIONS",
            SESSION_CLIENT_CONNECTIONS.to_string(),
        ));
    }
    for args in [
        vec!["api", "--listen", api.as_str()],
        vec!["worker"],
        vec!["worker"],
        vec!["reconciler", "run"],
    ] {
        let mut env = env.clone();
        if args[0] != "api" {
            let listen = format!("127.0.0.1:{}", free_port());
            env.push(("PAYONCE_METRICS_LISTEN", listen.clone()));
            listens.push(listen);
        }
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        children.push(spawn(&args, &url, &sim, &env));
    }
    for listen in &listens {
        wait_for(
            "every process is ready through the pooler",
            DEADLINE,
            || async { ready(listen).await.then_some(()) },
        )
        .await;
    }

    // The test's own ledger goes to the server directly.
    let ledger = ledger::connect(&cluster.url("postgres"), 2).await.unwrap();
    let mut ids = Vec::new();
    for i in 0..PAYMENTS {
        let op = ready_operation(
            &ledger,
            &format!("INV-POOL-{pooler}-{i}"),
            "pm_card_visa",
            SystemClock.now(),
        )
        .await;
        ids.push(op.id);
    }
    for id in &ids {
        let status = wait_for("the workers pay through the pooler", DEADLINE, || async {
            let row = ledger.get(&tenant(), id).await.ok()?;
            row.status.is_terminal().then_some(row.status)
        })
        .await;
        assert_eq!(status, Status::Succeeded, "{id}");
    }
    let mut paid: HashMap<String, usize> = HashMap::new();
    for payment in audit(&sim).await {
        let op = payment["metadata"]["payonce_operation_id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        *paid.entry(op).or_default() += 1;
    }
    for id in &ids {
        assert_eq!(paid.get(id.as_str()), Some(&1), "{id} paid exactly once");
    }
    assert_eq!(paid.len(), PAYMENTS, "no payment the ledger does not know");
    for (mut child, log) in children {
        let exited = child.try_wait().unwrap();
        assert!(
            exited.is_none(),
            "a process exited: {exited:?}\n{}",
            log.lock().unwrap().lines.join("\n")
        );
    }
}

/// Transaction pooling, PgBouncer's most common setup: unnamed statements, each in a transaction
/// that sets its own statement timeout; migrations under a transaction's advisory lock through the
/// pooler; no direct URL, so no LISTEN: idle workers poll.
#[tokio::test]
async fn api_workers_and_reconciler_pay_once_each_through_pgbouncer_transaction_pooling() {
    let cluster = Cluster::start();
    let bouncer = Bouncer::start(&cluster, "transaction", SERVER_CONNECTIONS_TRANSACTION);
    pay_through(&cluster, &bouncer, "transaction", None).await;
}

/// Session pooling with PgBouncer's defaults: no startup parameter it refuses, and the statement
/// timeout, which it used to drop silently with `options`, holds on the pool's connections; the
/// processes listen for wake-ups over the direct URL.
#[tokio::test]
async fn session_pooling_keeps_the_statement_timeout_and_pays_once_each() {
    let cluster = Cluster::start();
    let bouncer = Bouncer::start(&cluster, "session", SERVER_CONNECTIONS_SESSION);
    let direct = cluster.url("postgres");
    pay_through(&cluster, &bouncer, "session", Some(&direct)).await;
    let route = Route {
        pooler: Pooler::Session,
        direct_url: None,
    };
    let through = PostgresLedger::connect_routed(&bouncer.url(), &route, 2, DEADLINE)
        .await
        .unwrap();
    let timeout: String = sqlx::query_scalar("SHOW statement_timeout")
        .fetch_one(through.pool())
        .await
        .unwrap();
    assert_eq!(timeout, "15s", "set after connecting, kept by the session");
    let jit: String = sqlx::query_scalar("SHOW jit")
        .fetch_one(through.pool())
        .await
        .unwrap();
    assert_eq!(
        jit, "off",
        "JIT turned off after connecting, kept by the session"
    );
}

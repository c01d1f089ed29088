//! Processes for the failure-injection scenarios: `payonce` daemons whose stderr is captured, so a
//! test can wait for a failure point to pause and then deliver a real SIGKILL; and the checks every
//! scenario makes on both sides (the processor's audit and the ledger's history).

use crate::support::processes::audit;
use crate::support::{payonce_bin, tenant, wait_for};
use payonce_core::failpoint::PAUSED_MARKER;
use payonce_core::id::OperationId;
use payonce_core::state::Status;
use payonce_ledger::{OperationEvent, SharedLedger};
use payonce_simulator::Simulator;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// How long a scenario may take to reach a failure point or converge.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// Limits that make crashes resolve in seconds: short leases, fast polls and sweeps.
/// The submit timeout must end before a lease could lapse during shutdown (grace + TTL), and the
/// processor timeout inside it.
const FAST: [(&str, &str); 10] = [
    ("PAYONCE_LEASE_TTL_MS", "800"),
    ("PAYONCE_LEASE_RENEW_MS", "200"),
    ("PAYONCE_POLL_MS", "100"),
    ("PAYONCE_FIRST_CHECK_MS", "200"),
    ("PAYONCE_SWEEP_INTERVAL_MS", "200"),
    ("PAYONCE_CHECK_BACKOFF_MS", "100"),
    ("PAYONCE_SHUTDOWN_GRACE_MS", "2000"),
    ("PAYONCE_DB_MAX_CONNECTIONS", "4"),
    ("PAYONCE_PROCESSOR_TIMEOUT_MS", "2000"),
    ("PAYONCE_SUBMIT_TIMEOUT_MS", "2500"),
];

/// A running `payonce` process whose stderr lines are kept.
pub struct Proc {
    child: Child,
    pub lines: Arc<Mutex<Vec<String>>>,
}

/// Starts `payonce ARGS` on `database_url` and `processor_url` with the fast limits and `env`.
pub fn spawn(args: &[&str], database_url: &str, processor_url: &str, env: &[(&str, &str)]) -> Proc {
    let mut cmd = Command::new(payonce_bin());
    cmd.args(args)
        .env("PAYONCE_DATABASE_URL", database_url)
        .env("PAYONCE_KEY_SECRET", crate::support::KEY_SECRET)
        .env("PAYONCE_PROCESSOR_URL", processor_url)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .envs(FAST)
        .env_remove(payonce_core::failpoint::ENV)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn payonce");
    let lines = Arc::new(Mutex::new(Vec::new()));
    let stderr = child.stderr.take().expect("stderr is piped");
    let sink = lines.clone();
    // Drained for the whole life of the process so it never blocks on a full pipe.
    tokio::spawn(async move {
        let mut reader = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = reader.next_line().await {
            sink.lock().unwrap().push(line);
        }
    });
    Proc { child, lines }
}

/// `payonce worker` against the simulator.
pub fn worker(database_url: &str, sim: &Simulator, env: &[(&str, &str)]) -> Proc {
    spawn(&["worker"], database_url, &sim.base_url(), env)
}

/// `payonce reconciler run` against the simulator.
pub fn reconciler(database_url: &str, sim: &Simulator, env: &[(&str, &str)]) -> Proc {
    spawn(&["reconciler", "run"], database_url, &sim.base_url(), env)
}

/// A fresh `payonce worker`, then `payonce reconciler run`, against the simulator with no more
/// environment; both run until the pair is dropped.
pub fn worker_and_reconciler(database_url: &str, sim: &Simulator) -> (Proc, Proc) {
    (
        worker(database_url, sim, &[]),
        reconciler(database_url, sim, &[]),
    )
}

/// The webhook secret fleet apis accept; simulators that deliver to them sign with it (the api
/// refuses the simulator's published default).
pub const WEBHOOK_SECRET: &str = "whsec_fleet_c0ffee_not_the_published_default";

/// `payonce api` on a free port, accepting webhooks signed with [`WEBHOOK_SECRET`]; returns the
/// process and its base URL once it is ready.
pub async fn api(database_url: &str) -> (Proc, String) {
    let port = crate::serve::free_port();
    let listen = format!("127.0.0.1:{port}");
    let secret = WEBHOOK_SECRET;
    let p = spawn(
        &["api", "--listen", &listen],
        database_url,
        "http://127.0.0.1:9",
        &[("PAYONCE_WEBHOOK_SECRETS", secret)],
    );
    let base = format!("http://{listen}");
    crate::support::processes::wait_ready(&crate::api::http_client(), &base, DEADLINE).await;
    (p, base)
}

impl Proc {
    /// Whether any stderr line so far contains `needle`.
    pub fn said(&self, needle: &str) -> bool {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains(needle))
    }

    /// Waits until the process announces it paused at `point`.
    pub async fn wait_paused(&self, point: &str) {
        self.wait_said(&format!("{PAUSED_MARKER} {point}")).await;
    }

    /// Waits until a stderr line contains `needle`; on timeout, fails showing what the process said.
    pub async fn wait_said(&self, needle: &str) {
        let start = std::time::Instant::now();
        while !self.said(needle) {
            if start.elapsed() > DEADLINE {
                let lines = self.lines.lock().unwrap().join("\n");
                panic!(
                    "timed out after {DEADLINE:?} waiting for {needle:?}; the process said:\n{lines}"
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Delivers SIGKILL and checks the process died of it.
    pub async fn sigkill(&mut self) {
        self.child.start_kill().expect("send SIGKILL");
        let status = tokio::time::timeout(DEADLINE, self.child.wait())
            .await
            .expect("the process dies")
            .unwrap();
        assert_eq!(status.signal(), Some(9), "killed by SIGKILL: {status}");
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

/// Successful payments the simulator holds for `id`.
pub async fn successful_payments(sim: &Simulator, id: &OperationId) -> Vec<serde_json::Value> {
    audit(sim)
        .await
        .into_iter()
        .filter(|p| {
            p["metadata"]["payonce_operation_id"] == id.as_str() && p["status"] == "succeeded"
        })
        .collect()
}

/// Waits until the operation is final (terminal or needs_attention) and returns its status.
pub async fn settled(ledger: &SharedLedger, id: &OperationId, deadline: Duration) -> Status {
    wait_for(&format!("{id} settles"), deadline, || async {
        let row = ledger.get(&tenant(), id).await.ok()?;
        (row.status.is_terminal() || row.status == Status::NeedsAttention).then_some(row.status)
    })
    .await
}

/// Both sides for an approved operation that must have been paid: exactly one successful payment at
/// the processor, the row succeeded with that payment's reference, and a history that explains it
/// (created, approved, claimed, one move into succeeded, and the last event leads to the row's
/// state). Returns the history for scenario-specific checks.
pub async fn assert_paid_once(
    ledger: &SharedLedger,
    sim: &Simulator,
    id: &OperationId,
) -> Vec<OperationEvent> {
    let payments = successful_payments(sim, id).await;
    assert_eq!(
        payments.len(),
        1,
        "{id}: exactly one payment at the processor: {payments:?}"
    );
    let row = ledger.get(&tenant(), id).await.unwrap();
    assert_eq!(row.status, Status::Succeeded, "{id}");
    assert_eq!(
        row.external_ref.as_deref(),
        payments[0]["id"].as_str(),
        "{id}: the ledger holds the processor's reference"
    );
    assert_history_succeeded_once(ledger, id).await
}

/// The history of a row that succeeded once: created, approved, claimed, one move into
/// `succeeded`, and ending there. Returns it for scenario-specific checks.
pub async fn assert_history_succeeded_once(
    ledger: &SharedLedger,
    id: &OperationId,
) -> Vec<OperationEvent> {
    let events = ledger.events_unscoped(id).await.unwrap();
    let names: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(names.first(), Some(&"create"), "{id}: {names:?}");
    assert!(names.contains(&"approve"), "{id}: no approve in {names:?}");
    assert!(
        events.iter().any(|e| e.is_claim()),
        "{id}: no claim in {names:?}"
    );
    let into_succeeded = events
        .iter()
        .filter(|e| e.to_status == "succeeded" && e.from_status.as_deref() != Some("succeeded"))
        .count();
    assert_eq!(
        into_succeeded, 1,
        "{id}: one move into succeeded: {names:?}"
    );
    assert_eq!(
        events.last().unwrap().to_status,
        "succeeded",
        "{id}: {names:?}"
    );
    events
}

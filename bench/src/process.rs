//! A real `payonce worker` process draining operations over HTTP: its own peak memory (`VmHWM` of
//! that process, not of the bench), read from `/proc/PID/status` while it still runs.

use crate::database::ScratchDatabase;
use crate::load::{self, Kind};
use crate::report::Rate;
use anyhow::Context;
use payonce_shared::ledger::SharedLedger;
use payonce_shared::state::Status;
use payonce_simulator::{Simulator, SimulatorConfig};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::process::Command;

/// How often the bench looks at the ledger while the process drains (one cheap count).
const POLL: Duration = Duration::from_millis(50);
/// How long the process gets to exit after SIGTERM before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(10);

/// What the worker process did.
#[derive(Debug, Clone)]
pub struct WorkerProcess {
    /// Operations recorded, start of the process to the last outcome seen.
    pub rate: Rate,
    /// The process's peak resident set size, KiB.
    pub peak_kib: u64,
}

/// The `payonce` binary beside this executable (`target/release/payonce` next to
/// `target/release/payonce-bench`), if it was built.
pub fn sibling_binary() -> Option<PathBuf> {
    let path = std::env::current_exe().ok()?.with_file_name("payonce");
    path.is_file().then_some(path)
}

/// Loads `operations` ready rows, starts the simulator in this process with `latency`, runs
/// `payonce worker` with its defaults but `concurrency` in flight against both, waits until every operation succeeded, reads the process's peak
/// memory, and stops it with SIGTERM (it must exit 0). Checks one payment per operation.
pub async fn drain(
    admin_url: &str,
    payonce_bin: &Path,
    operations: u64,
    concurrency: usize,
    latency: Duration,
    deadline: Duration,
) -> anyhow::Result<WorkerProcess> {
    let db = ScratchDatabase::create(admin_url).await?;
    let ledger = db.ledger(2).await?;
    load::postgres(
        &db.url,
        Kind::Ready,
        1,
        i64::try_from(operations)?,
        crate::now_ms(),
    )
    .await?;
    let sim = Simulator::start(SimulatorConfig {
        latency,
        ..SimulatorConfig::default()
    })
    .await?;
    let started = Instant::now();
    let mut child = Command::new(payonce_bin)
        .arg("worker")
        .env("PAYONCE_DATABASE_URL", &db.url)
        .env("PAYONCE_PROCESSOR_URL", sim.base_url())
        .env(
            "PAYONCE_PROCESSOR_SECRET_KEY",
            payonce_simulator::config::API_KEY_DEFAULT,
        )
        .env("PAYONCE_WORKER_CONCURRENCY", concurrency.to_string())
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("spawn {} worker", payonce_bin.display()))?;
    let pid = child.id().context("the worker exited at once")?;
    let shared: SharedLedger = Arc::new(ledger.clone());
    let succeeded = loop {
        let done = succeeded(&shared).await?;
        if done >= operations {
            break done;
        }
        if let Some(exit) = child.try_wait()? {
            anyhow::bail!("the worker process exited early: {exit}");
        }
        anyhow::ensure!(
            started.elapsed() < deadline,
            "only {done} of {operations} operations succeeded within {deadline:?}"
        );
        tokio::time::sleep(POLL).await;
    };
    let elapsed = started.elapsed();
    let peak_kib = peak_kib_of(pid).context("read the worker's VmHWM")?;
    let term = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .await?;
    anyhow::ensure!(term.success(), "kill -TERM {pid} failed");
    let exit = tokio::time::timeout(EXIT_GRACE, child.wait())
        .await
        .context("the worker did not exit after SIGTERM")??;
    anyhow::ensure!(exit.success(), "the worker exited with {exit} on SIGTERM");
    crate::drive::check_all_succeeded(&shared, operations).await?;
    let payments = crate::http::simulator_payments(&sim.base_url()).await?;
    anyhow::ensure!(
        payments == operations,
        "the simulator holds {payments} payments for {operations} operations"
    );
    sim.shutdown().await;
    ledger.pool().close().await;
    db.drop_now().await?;
    Ok(WorkerProcess {
        rate: Rate::new(succeeded, elapsed),
        peak_kib,
    })
}

async fn succeeded(ledger: &SharedLedger) -> anyhow::Result<u64> {
    Ok(ledger
        .count_by_status()
        .await?
        .iter()
        .find(|c| c.status == Status::Succeeded)
        .map_or(0, |c| u64::try_from(c.count).unwrap_or(0)))
}

fn peak_kib_of(pid: u32) -> Option<u64> {
    crate::memory::vm_hwm_kib(&std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?)
}

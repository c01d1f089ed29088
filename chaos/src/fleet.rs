//! The soak's processes: `payonce api`, `payonce worker`s and a `payonce reconciler run`, spawned from
//! the binary under test, SIGKILLed at random and respawned, some with a failure point armed.

use anyhow::Context;
use payonce_shared::failpoint::{self, FailPoint};
use std::fs::File;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::process::{Child, Command};

/// Worker and reconciler limits for the soak: short leases so a killed process's work is taken over
/// within seconds, and processor timeouts short enough that a hanging request is given up quickly.
const DAEMON_ENV: [(&str, &str); 15] = [
    ("RUST_LOG", "warn"),
    ("PAYONCE_LEASE_TTL_MS", "1500"),
    ("PAYONCE_LEASE_RENEW_MS", "400"),
    ("PAYONCE_WORKER_CONCURRENCY", "16"),
    ("PAYONCE_WORKER_BATCH", "8"),
    ("PAYONCE_POLL_MS", "200"),
    ("PAYONCE_FIRST_CHECK_MS", "500"),
    ("PAYONCE_PROCESSOR_TIMEOUT_MS", "2000"),
    ("PAYONCE_SUBMIT_TIMEOUT_MS", "3000"),
    ("PAYONCE_SHUTDOWN_GRACE_MS", "2000"),
    ("PAYONCE_SWEEP_INTERVAL_MS", "300"),
    ("PAYONCE_CHECK_BACKOFF_MS", "300"),
    ("PAYONCE_CHECK_BACKOFF_MAX_MS", "5000"),
    // A killed reconciler holds off the next one for this long.
    ("PAYONCE_SWEEP_LEASE_TTL_MS", "3000"),
    ("PAYONCE_DB_MAX_CONNECTIONS", "8"),
];

/// What is needed to start any process of the fleet.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The `payonce` binary.
    pub bin: PathBuf,
    /// The ledger every process shares.
    pub database_url: String,
    /// The simulator's base URL.
    pub processor_url: String,
    /// Where every process's stderr goes.
    pub log: PathBuf,
}

impl Launch {
    fn command(&self, args: &[&str], failpoint: Option<FailPoint>) -> anyhow::Result<Command> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("opening the process log {}", self.log.display()))?;
        let mut cmd = Command::new(&self.bin);
        cmd.args(args)
            .env("PAYONCE_DATABASE_URL", &self.database_url)
            .env("PAYONCE_PROCESSOR_URL", &self.processor_url)
            .envs(DAEMON_ENV)
            .env_remove(failpoint::ENV)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true);
        if let Some(point) = failpoint {
            cmd.env(failpoint::ENV, point.name());
        }
        Ok(cmd)
    }

    /// Starts `payonce worker`, aborting at `failpoint` if given.
    pub fn worker(&self, failpoint: Option<FailPoint>) -> anyhow::Result<Child> {
        self.command(&["worker"], failpoint)?
            .spawn()
            .context("spawning payonce worker")
    }

    /// Starts `payonce reconciler run`, aborting at `failpoint` if given.
    pub fn reconciler(&self, failpoint: Option<FailPoint>) -> anyhow::Result<Child> {
        self.command(&["reconciler", "run"], failpoint)?
            .spawn()
            .context("spawning payonce reconciler run")
    }

    /// Starts `payonce api` on `port`, accepting webhooks signed with `webhook_secret`.
    pub fn api(&self, port: u16, webhook_secret: &str) -> anyhow::Result<Child> {
        let listen = format!("127.0.0.1:{port}");
        let mut cmd = self.command(&["api", "--listen", &listen], None)?;
        cmd.env("PAYONCE_WEBHOOK_SECRETS", webhook_secret)
            .spawn()
            .context("spawning payonce api")
    }
}

/// SIGKILLs `child` (tokio's `start_kill` sends SIGKILL on Unix) and reaps it.
pub async fn sigkill(child: &mut Child) {
    let _ = child.start_kill();
    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
}

/// Whether `child` has exited (e.g. aborted at its failure point).
pub fn exited(child: &mut Child) -> bool {
    matches!(child.try_wait(), Ok(Some(_)))
}

/// A free loopback port (bound and released; a race with another process is possible but harmless
/// here: the api then fails to start and the soak says so).
pub fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("binding a free port")?;
    Ok(l.local_addr()?.port())
}

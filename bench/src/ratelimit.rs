//! A fleet under the processor's rate limits: four `payonce worker` processes and a `payonce reconciler
//! run` on one Postgres drain operations against a simulator limited to 100 writes/s and 100 reads/s.
//! Three runs: the fleet limiter shared through Redis; no limiter (the 429s it prevents); and the shared
//! limiter with its Redis killed a third of the way through and restarted at two thirds (each process
//! falls back to its local share). Each run checks one payment per operation.

use crate::database::ScratchDatabase;
use crate::load::{self, Kind};
use crate::process::{free_port, metric_sum, sigterm, succeeded};
use anyhow::Context;
use payonce_ledger::SharedLedger;
use payonce_simulator::{RateLimits, Simulator, SimulatorConfig, payment_audit};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

/// The simulator's write and read limits, per second (Stripe's live-mode figures).
pub const LIMIT_PER_SECOND: u32 = 100;
/// Worker processes in the fleet.
pub const WORKERS: usize = 4;
/// How often the bench looks at the ledger (one cheap count).
const POLL: Duration = Duration::from_millis(50);
/// How long a process gets to exit after SIGTERM.
const EXIT_GRACE: Duration = Duration::from_secs(15);
/// How long a redis-server gets to answer after it was started.
const REDIS_START_MAX: Duration = Duration::from_secs(10);

/// Which limiter the fleet runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The shared limiter on a Redis of the bench's own.
    Shared,
    /// No limiter: each worker submits as fast as its slots allow.
    Off,
    /// The shared limiter, its Redis killed at a third of the run and restarted at two thirds.
    RedisKilled,
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct FleetRun {
    /// The limiter mode.
    pub mode: Mode,
    /// Operations drained (each succeeded, one payment each).
    pub operations: u64,
    /// From the first success to the last.
    pub elapsed: Duration,
    /// Requests that reached the simulator's limiters.
    pub requests: u64,
    /// Of them, refused with 429.
    pub refused_429: u64,
    /// Times a process fell back to its local share (from the processes' `/metrics`).
    pub fallback_entered: u64,
    /// Whether a scrape during the outage saw `payonce_limiter_fallback 1`.
    pub fallback_seen: bool,
}

impl FleetRun {
    /// Submissions per second, first success to last.
    pub fn per_second(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.operations.saturating_sub(1) as f64 / secs
        } else {
            0.0
        }
    }

    /// 429s as a share of requests.
    pub fn refused_share(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.refused_429 as f64 / self.requests as f64
        }
    }
}

/// A redis-server of the bench's own (never the machine's shared one: this one gets killed).
struct OwnRedis {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl OwnRedis {
    async fn start() -> anyhow::Result<OwnRedis> {
        let port = free_port()?;
        let dir = std::env::temp_dir().join(format!(
            "payonce-bench-redis-{port}-{}",
            payonce_core::id::random_hex(4)
        ));
        std::fs::create_dir_all(&dir)?;
        let mut r = OwnRedis {
            port,
            dir,
            child: None,
        };
        r.restart().await?;
        Ok(r)
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    async fn restart(&mut self) -> anyhow::Result<()> {
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
            .context("spawn redis-server (is it installed?)")?;
        self.child = Some(child);
        let started = Instant::now();
        while tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .is_err()
        {
            anyhow::ensure!(
                started.elapsed() < REDIS_START_MAX,
                "redis-server did not listen"
            );
            tokio::time::sleep(POLL).await;
        }
        Ok(())
    }

    async fn kill(&mut self) -> anyhow::Result<()> {
        if let Some(mut c) = self.child.take() {
            c.kill().await?;
        }
        Ok(())
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

struct Fleet {
    children: Vec<Child>,
    metrics: Vec<String>,
}

fn spawn(
    bin: &Path,
    args: &[&str],
    env: &[(String, String)],
    metrics_port: u16,
) -> anyhow::Result<Child> {
    Command::new(bin)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env(
            "PAYONCE_METRICS_LISTEN",
            format!("127.0.0.1:{metrics_port}"),
        )
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("spawn {} {args:?}", bin.display()))
}

impl Fleet {
    /// Starts the fleet: [`WORKERS`] workers and one `reconciler run`, each with `env` and its own
    /// metrics port.
    fn spawn(payonce_bin: &Path, env: &[(String, String)]) -> anyhow::Result<Fleet> {
        let mut fleet = Fleet {
            children: Vec::new(),
            metrics: Vec::new(),
        };
        for i in 0..=WORKERS {
            let port = free_port()?;
            let args: &[&str] = if i < WORKERS {
                &["worker"]
            } else {
                &["reconciler", "run"]
            };
            fleet.children.push(spawn(payonce_bin, args, env, port)?);
            fleet
                .metrics
                .push(format!("http://127.0.0.1:{port}/metrics"));
        }
        Ok(fleet)
    }

    /// Polls the ledger until every one of `operations` succeeded, failing if a process exits or
    /// `deadline` passes; in `RedisKilled` kills `redis` at a third and restarts it at two thirds.
    /// Returns the time from the first success to the last, and whether a scrape during the outage
    /// saw a process fall back to its local share.
    async fn wait_until_drained(
        &mut self,
        shared: &SharedLedger,
        http: &reqwest::Client,
        mut redis: Option<&mut OwnRedis>,
        (operations, mode): (u64, Mode),
        deadline: Duration,
    ) -> anyhow::Result<(Duration, bool)> {
        let started = Instant::now();
        let mut first: Option<Instant> = None;
        let (mut killed, mut restarted, mut fallback_seen) = (false, false, false);
        loop {
            let done = succeeded(shared).await?;
            if done > 0 && first.is_none() {
                first = Some(Instant::now());
            }
            if done >= operations {
                break;
            }
            for c in &mut self.children {
                if let Some(exit) = c.try_wait()? {
                    anyhow::bail!("a fleet process exited early: {exit}");
                }
            }
            if mode == Mode::RedisKilled
                && let Some(r) = redis.as_deref_mut()
            {
                if !killed && done >= operations / 3 {
                    r.kill().await?;
                    killed = true;
                } else if killed && !restarted {
                    if !fallback_seen {
                        fallback_seen = self.scrape_sum(http, "payonce_limiter_fallback").await > 0;
                    }
                    if done >= operations * 2 / 3 {
                        r.restart().await?;
                        restarted = true;
                    }
                }
            }
            anyhow::ensure!(
                started.elapsed() < deadline,
                "only {done} of {operations} operations succeeded within {deadline:?}"
            );
            tokio::time::sleep(POLL).await;
        }
        Ok((first.map_or(Duration::ZERO, |f| f.elapsed()), fallback_seen))
    }

    async fn scrape_sum(&self, http: &reqwest::Client, series: &str) -> u64 {
        let mut sum = 0;
        for url in &self.metrics {
            let Ok(r) = http.get(url).send().await else {
                continue;
            };
            let Ok(text) = r.text().await else { continue };
            sum += metric_sum(&text, series);
        }
        sum
    }

    async fn stop(mut self) -> anyhow::Result<()> {
        for c in &self.children {
            sigterm(c).await?;
        }
        for c in &mut self.children {
            let exit = tokio::time::timeout(EXIT_GRACE, c.wait())
                .await
                .context("a fleet process did not exit after SIGTERM")??;
            anyhow::ensure!(exit.success(), "a fleet process exited with {exit}");
        }
        Ok(())
    }
}

/// One run: loads `operations`, starts the simulator and the fleet in `mode`, waits until every
/// operation succeeded (killing and restarting Redis on the way in `RedisKilled`), stops the fleet
/// with SIGTERM, and checks one payment per operation.
pub async fn drain(
    admin_url: &str,
    payonce_bin: &Path,
    operations: u64,
    mode: Mode,
    deadline: Duration,
) -> anyhow::Result<FleetRun> {
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
        rate_limits: RateLimits {
            write_per_second: Some(LIMIT_PER_SECOND),
            read_per_second: Some(LIMIT_PER_SECOND),
            ..RateLimits::default()
        },
        ..SimulatorConfig::default()
    })
    .await?;
    let mut redis = match mode {
        Mode::Off => None,
        Mode::Shared | Mode::RedisKilled => Some(OwnRedis::start().await?),
    };
    let env = fleet_env(&db.url, &sim.base_url(), redis.as_ref());
    let mut fleet = Fleet::spawn(payonce_bin, &env)?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()?;
    let shared: SharedLedger = Arc::new(ledger.clone());
    let (elapsed, fallback_seen) = fleet
        .wait_until_drained(&shared, &http, redis.as_mut(), (operations, mode), deadline)
        .await?;
    let fallback_entered = fleet
        .scrape_sum(&http, "payonce_limiter_fallback_entered_total")
        .await;
    fleet.stop().await?;
    crate::drive::check_all_succeeded(&shared, operations).await?;
    let audit = payments_by_operation(&sim.base_url()).await?;
    anyhow::ensure!(
        audit.0 == operations && audit.1 == operations,
        "{} payments for {} distinct operations; expected {operations} of each",
        audit.0,
        audit.1
    );
    let limits: serde_json::Value = http
        .get(format!("{}/_sim/audit/rate_limits", sim.base_url()))
        .send()
        .await?
        .json()
        .await?;
    let count = |k: &str| limits[k].as_u64().unwrap_or(0);
    let run = FleetRun {
        mode,
        operations,
        elapsed,
        requests: count("requests_total"),
        refused_429: count("total_429"),
        fallback_entered,
        fallback_seen,
    };
    if let Some(mut r) = redis.take() {
        r.kill().await?;
    }
    sim.shutdown().await;
    ledger.pool().close().await;
    db.drop_now().await?;
    Ok(run)
}

/// The environment every fleet process runs with: the ledger, the simulator, the account's limits
/// shared among the fleet, and the shared limiter on `redis` (none: no limiter).
fn fleet_env(db_url: &str, sim_url: &str, redis: Option<&OwnRedis>) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = vec![
        ("PAYONCE_DATABASE_URL".into(), db_url.to_string()),
        ("PAYONCE_PROCESSOR_URL".into(), sim_url.to_string()),
        (
            "PAYONCE_PROCESSOR_SECRET_KEY".into(),
            payonce_simulator::config::API_KEY_DEFAULT.into(),
        ),
        ("PAYONCE_POLL_MS".into(), "50".into()),
        (
            "PAYONCE_LIMITER_WRITE_PER_SECOND".into(),
            LIMIT_PER_SECOND.to_string(),
        ),
        (
            "PAYONCE_LIMITER_READ_PER_SECOND".into(),
            LIMIT_PER_SECOND.to_string(),
        ),
        (
            "PAYONCE_LIMITER_EXPECTED_PROCESSES".into(),
            (WORKERS + 1).to_string(),
        ),
    ];
    match redis {
        Some(r) => {
            env.push(("PAYONCE_LIMITER".into(), "redis".into()));
            env.push(("PAYONCE_LIMITER_REDIS_URL".into(), r.url()));
        }
        None => env.push(("PAYONCE_LIMITER".into(), "off".into())),
    }
    env
}

/// (payments, distinct operation ids among them) at the simulator.
async fn payments_by_operation(base: &str) -> anyhow::Result<(u64, u64)> {
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(30))
        .build()?;
    let data = payment_audit::read_all(&http, base, payment_audit::PAGE_SIZE_MAX)
        .await
        .context("payments audit")?;
    let ops: HashSet<&str> = data
        .iter()
        .filter_map(|p| p["metadata"]["payonce_operation_id"].as_str())
        .collect();
    Ok((data.len() as u64, ops.len() as u64))
}

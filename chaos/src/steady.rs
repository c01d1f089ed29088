//! The steady soak (`payonce-soak`): a long day of ordinary traffic, no faults. Operations arrive at
//! a fixed rate for a fixed time against real `payonce api`, `payonce worker` and `payonce reconciler
//! run` processes on Postgres, with the simulator's webhooks and the assistant's tool calls (half of
//! them asked again with the same call id). It samples what must stay flat — each process's
//! resident memory, the webhook-hint backlog and its oldest age — and what must stay bounded — the
//! database's size; then it prunes as a prune after every retention period would, rewrites the
//! tables (`VACUUM FULL`) and reports the bytes each settled payment leaves behind, per table.
//!
//! It also checks what the failure soak checks: every approved operation paid exactly once.

use crate::fleet::{self, sigkill};
use crate::operations::{self, TENANT};
use anyhow::Context;
use payonce_core::clock::{Clock, SystemClock};
use payonce_core::id::TenantId;
use payonce_core::state::Status;
use payonce_ledger::retention::{Pruned, Retention};
use payonce_ledger::{self as ledger, Role, SharedLedger};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::process::Child;

mod summary;

/// The most bytes a settled payment may leave behind beyond its operation row and its events, once
/// every retention period has passed (issue 43's target).
pub const TARGET_BYTES_PER_PAYMENT: f64 = 2_048.0;
/// The tables that are the evidence of a payment (never pruned): the target is counted beyond them.
pub const EVIDENCE_TABLES: [&str; 2] = ["operations", "operation_events"];
/// Customers the soak's operations are spread over (the list lookup pages through one customer's
/// recent payments; a day's traffic has many customers).
const CUSTOMERS: usize = 1_000;
/// Operations created per tick of the driver (the rate is kept by ticks of `1 / rate × this`).
const TICK_OPERATIONS: u32 = 5;
/// Tool calls in flight at once.
const TOOL_CALLS_IN_FLIGHT: usize = 32;
/// How long after the last operation everything must be final and every hint checked.
const DRAIN_DEADLINE: Duration = Duration::from_secs(300);
/// The api's, workers' and reconciler's settings: production defaults, except a pool that fits
/// the shared server and a prune every minute (so the run exercises it under load).
const FLEET_ENV: [(&str, &str); 3] = [
    ("RUST_LOG", "warn"),
    ("PAYONCE_DB_MAX_CONNECTIONS", "8"),
    ("PAYONCE_PRUNE_INTERVAL_MS", "60000"),
];

/// Everything a steady soak is run with.
#[derive(Debug, Clone)]
pub struct SteadyConfig {
    /// The `payonce` binary under test.
    pub payonce_bin: PathBuf,
    /// A fresh Postgres ledger (it must hold no operations).
    pub database_url: String,
    /// Operations created per second.
    pub rate: u32,
    /// How long operations keep arriving.
    pub duration: Duration,
    /// Worker processes.
    pub workers: usize,
    /// Time between two samples.
    pub sample_every: Duration,
    /// Seed of the simulator's rolls.
    pub seed: u64,
    /// Where the processes' stderr goes.
    pub log: PathBuf,
}

/// One sample of the run.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Seconds since operations started arriving.
    pub at_s: f64,
    /// Operations created so far.
    pub created: usize,
    /// Operations in a final state.
    pub settled: i64,
    /// Resident memory (`VmRSS`) of each process, KiB, by name.
    pub rss_kib: Vec<(String, u64)>,
    /// Webhook hints not yet checked.
    pub hint_backlog: i64,
    /// Age of the oldest of them, s.
    pub hint_oldest_s: f64,
    /// `pg_database_size`, bytes.
    pub database_bytes: i64,
}

/// One table's share of what the run left behind.
#[derive(Debug, Clone)]
pub struct TableBytes {
    /// Table name.
    pub table: String,
    /// Live rows after the final prune.
    pub rows: i64,
    /// `pg_total_relation_size` (heap, indexes, TOAST) after `VACUUM FULL`.
    pub bytes: i64,
}

/// What a steady soak saw.
#[derive(Debug, Clone, Default)]
pub struct SteadyReport {
    /// Operations per second asked for, and how long.
    pub rate: u32,
    /// Seconds operations kept arriving.
    pub duration_s: f64,
    /// Operations created, and approved among them.
    pub created: usize,
    /// Operations in each final state at the end.
    pub statuses: HashMap<String, i64>,
    /// Successful processor payments.
    pub payments: usize,
    /// Payments beyond the first for one operation, or for an unapproved one.
    pub duplicates: usize,
    /// Approved operations `succeeded` in the ledger without a payment, or paid but not `succeeded`.
    pub mismatched: usize,
    /// Tool calls sent, and answers that were not the stored truth.
    pub tool_calls: usize,
    /// Bad tool answers.
    pub bad_tool_answers: usize,
    /// Every sample, in order.
    pub samples: Vec<Sample>,
    /// The database's size before the final prune (what the disk held), bytes.
    pub database_bytes_at_end: i64,
    /// What the final prune (every period elapsed) deleted.
    pub pruned: Pruned,
    /// Each table after the final prune and `VACUUM FULL`.
    pub tables: Vec<TableBytes>,
    /// Whether everything was final and every hint checked before the drain deadline.
    pub drained: bool,
}

impl SteadyReport {
    /// Settled (final) operations.
    pub fn settled(&self) -> i64 {
        self.statuses.values().sum()
    }

    /// Bytes per settled payment of the evidence tables, and of everything else.
    pub fn bytes_per_payment(&self) -> (f64, f64) {
        let settled = self.settled().max(1) as f64;
        let (evidence, rest): (Vec<_>, Vec<_>) = self
            .tables
            .iter()
            .partition(|t| EVIDENCE_TABLES.contains(&t.table.as_str()));
        let sum = |v: Vec<&TableBytes>| v.iter().map(|t| t.bytes).sum::<i64>() as f64;
        (sum(evidence) / settled, sum(rest) / settled)
    }

    /// Resident memory of `process` in the sample nearest `share` of the run, KiB.
    fn rss_at(&self, process: &str, share: f64) -> Option<u64> {
        let i = ((self.samples.len().saturating_sub(1)) as f64 * share).round() as usize;
        self.samples.get(i).and_then(|s| {
            s.rss_kib
                .iter()
                .find(|(name, _)| name == process)
                .map(|(_, kib)| *kib)
        })
    }

    /// Nothing paid twice, nothing contradicted, everything drained.
    pub fn is_clean(&self) -> bool {
        self.duplicates == 0 && self.mismatched == 0 && self.bad_tool_answers == 0 && self.drained
    }
}

/// Resident memory of `pid`, KiB (`VmRSS` of `/proc/PID/status`).
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The running processes, by name.
struct Fleet {
    api: Child,
    workers: Vec<Child>,
    reconciler: Child,
}

impl Fleet {
    /// Starts the api (and waits until it is ready), the workers and the reconciler on `stage`.
    async fn spawn(
        config: &SteadyConfig,
        http: &reqwest::Client,
        stage: &fleet::Stage,
    ) -> anyhow::Result<Fleet> {
        let mut api = stage.launch.spawn(
            &["api", "--listen", &format!("127.0.0.1:{}", stage.port)],
            &FLEET_ENV,
            |c| {
                let (setting, secret) = stage.signing.api_env();
                c.env(setting, secret);
            },
        )?;
        crate::wait_ready(http, &stage.api_base, &mut api).await?;
        let mut workers = Vec::with_capacity(config.workers);
        for _ in 0..config.workers {
            workers.push(stage.launch.spawn(&["worker"], &FLEET_ENV, |_| {})?);
        }
        let reconciler = stage
            .launch
            .spawn(&["reconciler", "run"], &FLEET_ENV, |_| {})?;
        Ok(Fleet {
            api,
            workers,
            reconciler,
        })
    }

    fn rss(&self) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        let mut one = |name: String, child: &Child| {
            if let Some(kib) = child.id().and_then(rss_kib) {
                out.push((name, kib));
            }
        };
        one("api".into(), &self.api);
        for (i, w) in self.workers.iter().enumerate() {
            one(format!("worker {}", i + 1), w);
        }
        one("reconciler".into(), &self.reconciler);
        out
    }

    fn exited(&mut self) -> Option<&'static str> {
        if fleet::exited(&mut self.api) {
            return Some("api");
        }
        if self.workers.iter_mut().any(fleet::exited) {
            return Some("a worker");
        }
        fleet::exited(&mut self.reconciler).then_some("the reconciler")
    }

    async fn stop(&mut self) {
        for w in &mut self.workers {
            sigkill(w).await;
        }
        sigkill(&mut self.reconciler).await;
        sigkill(&mut self.api).await;
    }
}

async fn sample(
    ledger: &SharedLedger,
    pool: &sqlx::PgPool,
    fleet: &Fleet,
    created: usize,
    at: Duration,
) -> anyhow::Result<Sample> {
    let settled = ledger
        .count_by_status()
        .await?
        .iter()
        .filter(|c| c.status.is_terminal() && c.status != Status::AwaitingApproval)
        .map(|c| c.count)
        .sum();
    let (hint_backlog, oldest) = ledger.processor_event_backlog().await?;
    let now = SystemClock.now();
    let database_bytes: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())")
        .fetch_one(pool)
        .await?;
    Ok(Sample {
        at_s: at.as_secs_f64(),
        created,
        settled,
        rss_kib: fleet.rss(),
        hint_backlog,
        hint_oldest_s: oldest.map_or(0.0, |t| now.saturating_sub(t).as_secs_f64()),
        database_bytes,
    })
}

/// Runs the steady soak; an error means it could not run (a process died, the database refused).
pub async fn run(config: SteadyConfig) -> anyhow::Result<SteadyReport> {
    let (mut soak, sim) = Soak::start(config).await?;
    soak.drive().await?;
    soak.drain().await?;
    soak.tally_payments(sim).await?;
    soak.prune_and_measure().await
}

/// What the soak's steps share: the fleet, the clients that watch them, the tool
/// calls in flight, and the report being filled in.
struct Soak {
    config: SteadyConfig,
    http: reqwest::Client,
    ledger: SharedLedger,
    /// One connection of the soak's own, for sizes and raw counts.
    pool: sqlx::PgPool,
    api_base: String,
    /// The assistant's API key.
    assistant: String,
    fleet: Fleet,
    /// Tool calls in flight, each (asks, good answers).
    call_tasks: tokio::task::JoinSet<(usize, usize)>,
    calls: Arc<tokio::sync::Semaphore>,
    created_count: usize,
    call_n: usize,
    report: SteadyReport,
}

impl Soak {
    /// Checks the settings and the fresh ledger, then starts the simulator, the api, the workers
    /// and the reconciler: the soak, and the simulator its payments are tallied at.
    async fn start(config: SteadyConfig) -> anyhow::Result<(Soak, payonce_simulator::Simulator)> {
        anyhow::ensure!(config.rate >= 1, "rate must be at least 1 operation/s");
        anyhow::ensure!(config.workers >= 1, "at least one worker");
        anyhow::ensure!(
            config.database_url.starts_with("postgres"),
            "the steady soak measures a Postgres ledger"
        );
        payonce_simulator::install_crypto_provider();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(2))
            .timeout(Duration::from_secs(30))
            .build()?;
        let ledger = ledger::connect(&config.database_url, 8)
            .await
            .context("opening the soak ledger")?;
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .connect(&config.database_url)
            .await?;
        anyhow::ensure!(
            ledger.count_by_status().await?.iter().all(|c| c.count == 0),
            "the soak needs a fresh ledger: this one already holds operations"
        );
        let tenant = TenantId::parse(TENANT).map_err(anyhow::Error::msg)?;
        let assistant = payonce_api::create_api_key(
            ledger.as_ref(),
            &tenant,
            Role::Assistant,
            "soak",
            SystemClock.now(),
        )
        .await?;
        let stage = fleet::stage(
            config.payonce_bin.clone(),
            config.database_url.clone(),
            config.log.clone(),
            0,
            config.seed,
            fleet::ContractRun::default(),
        )
        .await?;
        let fleet = Fleet::spawn(&config, &http, &stage).await?;
        let report = SteadyReport {
            rate: config.rate,
            ..SteadyReport::default()
        };
        let soak = Soak {
            config,
            http,
            ledger,
            pool,
            api_base: stage.api_base,
            assistant,
            fleet,
            call_tasks: tokio::task::JoinSet::new(),
            calls: Arc::new(tokio::sync::Semaphore::new(TOOL_CALLS_IN_FLIGHT)),
            created_count: 0,
            call_n: 0,
            report,
        };
        Ok((soak, stage.sim))
    }

    /// Operations arrive at the configured rate for the configured time, each asked about by the
    /// assistant; a sample every `sample_every`, and one at the end.
    async fn drive(&mut self) -> anyhow::Result<()> {
        let tick =
            Duration::from_secs_f64(f64::from(TICK_OPERATIONS) / f64::from(self.config.rate));
        let mut ticker = tokio::time::interval(tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let started = Instant::now();
        let mut next_sample = started;
        while started.elapsed() < self.config.duration {
            ticker.tick().await;
            if let Some(who) = self.fleet.exited() {
                self.fleet.stop().await;
                anyhow::bail!(
                    "{who} exited during the soak (see {})",
                    self.config.log.display()
                );
            }
            for (i, op) in self.create_tick().await? {
                self.ask_about(i, &op);
                self.created_count += 1;
            }
            self.collect_tool_calls();
            if Instant::now() >= next_sample {
                next_sample += self.config.sample_every;
                let s = self.sample(started.elapsed()).await?;
                print_sample(&s);
                self.report.samples.push(s);
            }
        }
        self.report.duration_s = started.elapsed().as_secs_f64();
        self.report.created = self.created_count;
        let last = self.sample(started.elapsed()).await?;
        self.report.samples.push(last);
        Ok(())
    }

    /// A tick's operations at once, as many upstream callers would: one after another, a loaded
    /// machine's round trips fell below the rate. In creation order.
    async fn create_tick(&self) -> anyhow::Result<Vec<(usize, operations::PlannedOp)>> {
        let now = SystemClock.now();
        let mut creates = tokio::task::JoinSet::new();
        for i in self.created_count..self.created_count + TICK_OPERATIONS as usize {
            let ledger = self.ledger.clone();
            creates.spawn(async move {
                (
                    i,
                    operations::create_one(&ledger, i, CUSTOMERS, true, now).await,
                )
            });
        }
        let mut created = Vec::with_capacity(TICK_OPERATIONS as usize);
        while let Some(done) = creates.join_next().await {
            let (i, op) = done.context("a create task panicked")?;
            created.push((i, op?));
        }
        created.sort_by_key(|(i, _)| *i);
        Ok(created)
    }

    /// The assistant asks about every operation once; every other one it asks again with the same
    /// call id (a regenerated answer, a retried request).
    fn ask_about(&mut self, i: usize, op: &operations::PlannedOp) {
        self.call_n += 1;
        let asks = if i.is_multiple_of(2) { 2 } else { 1 };
        let (http, base, key, id, n) = (
            self.http.clone(),
            self.api_base.clone(),
            self.assistant.clone(),
            op.id.clone(),
            self.call_n,
        );
        let permits = self.calls.clone();
        self.call_tasks.spawn(async move {
            let mut good = 0usize;
            for _ in 0..asks {
                let _permit = permits.acquire().await;
                good +=
                    usize::from(operations::call_until_answered(&http, &base, &key, &id, n).await);
            }
            (asks, good)
        });
    }

    /// Counts the tool calls that have finished.
    fn collect_tool_calls(&mut self) {
        while let Some(done) = self.call_tasks.try_join_next() {
            let (asks, good) = done.unwrap_or((1, 0));
            self.report.tool_calls += asks;
            self.report.bad_tool_answers += asks - good;
        }
    }

    /// One sample, `at` since operations started arriving.
    async fn sample(&self, at: Duration) -> anyhow::Result<Sample> {
        sample(
            &self.ledger,
            &self.pool,
            &self.fleet,
            self.created_count,
            at,
        )
        .await
    }

    /// Everything final, every tool call answered, every hint checked (or the drain deadline
    /// passed); then the fleet stops.
    async fn drain(&mut self) -> anyhow::Result<()> {
        let drain_start = Instant::now();
        while drain_start.elapsed() < DRAIN_DEADLINE {
            let counts = self.ledger.count_by_status().await?;
            let open: i64 = counts
                .iter()
                .filter(|c| {
                    matches!(
                        c.status,
                        Status::Ready | Status::Executing | Status::Unknown
                    )
                })
                .map(|c| c.count)
                .sum();
            let (backlog, _) = self.ledger.processor_event_backlog().await?;
            if open == 0 && backlog == 0 && self.call_tasks.is_empty() {
                self.report.drained = true;
                break;
            }
            self.collect_tool_calls();
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        self.fleet.stop().await;
        Ok(())
    }

    /// Both sides: the processor's payments (at `sim`, stopped once read) against the ledger's
    /// rows; then the database's size is read.
    async fn tally_payments(&mut self, sim: payonce_simulator::Simulator) -> anyhow::Result<()> {
        let paid =
            crate::tally::successful_payments(&self.http, &sim, payonce_simulator::Wire::Stripe)
                .await?;
        sim.shutdown().await;
        let rows: Vec<(String, String)> = sqlx::query_as("SELECT id, status FROM operations")
            .fetch_all(&self.pool)
            .await?;
        let report = &mut self.report;
        for (id, status) in &rows {
            *report.statuses.entry(status.clone()).or_default() += 1;
            let payments = paid.get(id).copied().unwrap_or(0);
            report.payments += payments;
            report.duplicates += payments.saturating_sub(1);
            if (payments > 0) != (status == "succeeded") && status != "needs_attention" {
                report.mismatched += 1;
            }
        }
        report.statuses.retain(|s, _| {
            Status::parse(s).is_some_and(|s| s.is_terminal() && s != Status::AwaitingApproval)
        });
        report.database_bytes_at_end =
            sqlx::query_scalar("SELECT pg_database_size(current_database())")
                .fetch_one(&self.pool)
                .await?;
        Ok(())
    }

    /// As a prune would after every retention period: nothing transient left, then the tables
    /// rewritten so the sizes are what the rows take, not the space deleted rows left.
    async fn prune_and_measure(mut self) -> anyhow::Result<SteadyReport> {
        let zero = Retention {
            webhooks: Duration::ZERO,
            tool_calls: Duration::ZERO,
            expired_tokens: Duration::ZERO,
            ..Retention::default()
        };
        loop {
            let p = self.ledger.prune(&zero, SystemClock.now()).await?;
            let pruned = &mut self.report.pruned;
            pruned.webhooks += p.webhooks;
            pruned.tool_calls += p.tool_calls;
            pruned.tool_answers += p.tool_answers;
            pruned.links += p.links;
            pruned.sessions += p.sessions;
            if p == Pruned::default() {
                break;
            }
        }
        // The fleet's connections are gone with its processes, but a backend whose client was
        // killed mid-statement can hold a snapshot until it notices: end every other session
        // first, or `VACUUM FULL` keeps the rows that snapshot could still see.
        drop(self.ledger);
        self.report.tables = table_sizes(&self.pool).await?;
        Ok(self.report)
    }
}

/// Prints one sample's line on stderr.
fn print_sample(s: &Sample) {
    eprintln!(
        "payonce-soak: {:>6.0} s: {} created, {} settled, {} unchecked hints (oldest {:.0} s), database {:.1} MiB, RSS MiB {}",
        s.at_s,
        s.created,
        s.settled,
        s.hint_backlog,
        s.hint_oldest_s,
        s.database_bytes as f64 / 1_048_576.0,
        s.rss_kib
            .iter()
            .map(|(n, k)| format!("{n} {:.1}", *k as f64 / 1024.0))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// Ends every other session, rewrites the tables (`VACUUM FULL`), and reads each one's live rows
/// and total size, largest first.
async fn table_sizes(pool: &sqlx::PgPool) -> anyhow::Result<Vec<TableBytes>> {
    sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .execute(pool)
    .await?;
    sqlx::query("VACUUM FULL").execute(pool).await?;
    let tables: Vec<(String, i64)> = sqlx::query_as(
        "SELECT c.relname::text, pg_total_relation_size(c.oid) FROM pg_class c \
         JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = current_schema() AND c.relkind = 'r' ORDER BY 2 DESC",
    )
    .fetch_all(pool)
    .await?;
    let mut sizes = Vec::with_capacity(tables.len());
    for (table, bytes) in tables {
        let rows: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            // A name read from pg_class just above, quoted.
            "SELECT count(*) FROM \"{table}\""
        )))
        .fetch_one(pool)
        .await?;
        sizes.push(TableBytes { table, rows, bytes });
    }
    Ok(sizes)
}

//! payonce-chaos: the failure-injection soak. It creates many operations on a fresh ledger, runs real
//! `payonce worker` and `payonce reconciler run` processes against the simulator with processor faults
//! armed, SIGKILLs them at random intervals (and arms failure points in some), sends duplicate tool
//! calls while the simulator duplicates webhooks, refunds some paid payments under the same chaos
//! (some refunds racing for more than a payment holds), waits until every operation reaches a final
//! state, and compares the processor's audit (payments and refunds) with the ledger. It runs any
//! contract the simulator has: on Stripe's wire with Stripe-signed webhooks, or (`adyen`) on Adyen's
//! with every process on `--processor adyen` and HMAC-signed notifications.
//!
//! Crate map:
//! - `fleet`: spawning, killing and respawning the `payonce` processes.
//! - `operations`: the soak's operations and the assistant's tool calls.
//! - `refunds`: refunds of paid payments during the chaos, and their tally on both sides.
//! - `tally`: reading the processor's audit and the ledger into a [`SoakReport`].
//! - `report`: the report and the table it prints.
//! - `rng`: the seeded generator behind every choice of the plan.
//! - `steady`: the steady soak (`payonce-soak`): a long day of ordinary traffic, what stays flat
//!   and what each settled payment leaves behind.

pub mod fleet;
pub mod operations;
pub mod refunds;
pub mod report;
pub mod rng;
pub mod steady;
pub mod tally;

pub use report::SoakReport;

use anyhow::Context;
use fleet::{Launch, exited, sigkill};
use payonce_core::clock::{Clock, SystemClock};
use payonce_core::failpoint::FailPoint;
use payonce_core::id::TenantId;
use payonce_core::state::Status;
use payonce_ledger::{self as ledger, Role, SharedLedger};
use payonce_simulator::Simulator;
use rng::SoakRng;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::process::Child;

/// Logs to stderr at `RUST_LOG` (default `warn`): the in-process simulator's own failures, for
/// both soaks' binaries. Colour only on a terminal.
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
}

/// The most operations one soak may create: the simulator's payment audit returns at most 10,000 rows.
pub const OPERATIONS_MAX: usize = 9_000;
/// The worker failure points a respawned worker may be armed with.
const WORKER_POINTS: [FailPoint; 3] = [
    FailPoint::AfterClaim,
    FailPoint::AfterSubmissionRecorded,
    FailPoint::AfterProcessorAccepted,
];
/// How often convergence is checked.
const POLL: Duration = Duration::from_millis(200);
/// How often a progress line is printed.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// How long the api may take to become ready.
const API_READY_DEADLINE: Duration = Duration::from_secs(30);

/// Everything a soak is run with.
#[derive(Debug, Clone)]
pub struct SoakConfig {
    /// The `payonce` binary under test.
    pub payonce_bin: PathBuf,
    /// A fresh Postgres (or SQLite file) ledger; it must hold no operations.
    pub database_url: String,
    /// Operations to create.
    pub operations: usize,
    /// One operation in this many is never approved (0: all approved).
    pub unapproved_every: usize,
    /// Worker processes running at once.
    pub workers: usize,
    /// Seed of the plan (and of the simulator's fault and webhook-duplicate rolls).
    pub seed: u64,
    /// Probability out of 1000 that a processor request gets a fault (5xx before or after commit, a
    /// dropped response, a reset, a 429; plus a few hangs).
    pub fault_per_mille: u32,
    /// Probability out of 1000 that a webhook is delivered twice, and that a tool call is sent twice.
    pub duplicate_per_mille: u32,
    /// Probability out of 1000 that a (re)spawned worker is armed with a random failure point.
    pub failpoint_per_mille: u32,
    /// Shortest and longest pause between two SIGKILLs.
    pub kill_every: (Duration, Duration),
    /// Most SIGKILLs of the reconciler (one kill in five picks it until then). Each costs up to the
    /// reconciler's sweep lease (3 s in the soak's fleet) before the next one sweeps.
    pub reconciler_kills_max: usize,
    /// Longest the chaos phase (kills, faults) lasts; it also ends when everything has converged.
    pub chaos_window: Duration,
    /// Longest the whole run may take before it is declared not converged.
    pub deadline: Duration,
    /// One approved payment in this many is refunded during the chaos (0: no refunds).
    pub refund_every: usize,
    /// Restarts the ledger's database server once, halfway through the chaos (a test's own
    /// throwaway cluster: never the shared server); `None`: no restart.
    pub database_restart: Option<DatabaseRestart>,
    /// Shortest and longest pause between two rounds that terminate every Postgres backend of the
    /// fleet (api, workers, reconciler) during the chaos, as a failover or an operator would;
    /// `None`, or a SQLite ledger: none. The soak's own connections are spared (it is the observer).
    pub terminate_backends_every: Option<(Duration, Duration)>,
    /// Where the processes' stderr goes.
    pub log: PathBuf,
    /// The processor contract the simulator runs and every process declares.
    pub contract: fleet::ContractRun,
}

impl SoakConfig {
    /// The defaults of the long soak (2,000 operations) for `payonce_bin` on `database_url`.
    pub fn new(payonce_bin: PathBuf, database_url: String, seed: u64) -> Self {
        SoakConfig {
            payonce_bin,
            database_url,
            operations: 2_000,
            unapproved_every: 50,
            workers: 3,
            seed,
            fault_per_mille: 100,
            duplicate_per_mille: 200,
            failpoint_per_mille: 250,
            kill_every: (Duration::from_millis(300), Duration::from_millis(1500)),
            reconciler_kills_max: 3,
            chaos_window: Duration::from_secs(120),
            deadline: Duration::from_secs(900),
            refund_every: refunds::REFUND_EVERY_DEFAULT,
            terminate_backends_every: Some((Duration::from_secs(2), Duration::from_secs(6))),
            database_restart: None,
            log: std::env::temp_dir().join(format!("payonce-chaos-{seed}.log")),
            contract: fleet::ContractRun::default(),
        }
    }
}

/// Restarts the ledger's database server (blocking until it accepts connections again).
#[derive(Clone)]
pub struct DatabaseRestart(pub std::sync::Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for DatabaseRestart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DatabaseRestart(..)")
    }
}

/// The processes of a running soak and what was done to them.
struct Running {
    launch: Launch,
    workers: Vec<(Child, bool)>,
    reconciler: (Child, bool),
    sigkills: usize,
    reconciler_kills: usize,
    failpoint_aborts: usize,
}

impl Running {
    /// Starts `config.workers` workers (each armed with a failure point at the plan's rate) and a
    /// reconciler.
    fn start(launch: Launch, rng: &mut SoakRng, config: &SoakConfig) -> anyhow::Result<Running> {
        let mut workers = Vec::with_capacity(config.workers);
        for _ in 0..config.workers {
            let point = Self::worker_point(rng, config.failpoint_per_mille);
            workers.push((launch.worker(point)?, point.is_some()));
        }
        let reconciler = (launch.reconciler(None)?, false);
        Ok(Running {
            launch,
            workers,
            reconciler,
            sigkills: 0,
            reconciler_kills: 0,
            failpoint_aborts: 0,
        })
    }

    fn worker_point(rng: &mut SoakRng, per_mille: u32) -> Option<FailPoint> {
        let i = usize::try_from(rng.below(WORKER_POINTS.len() as u64)).unwrap_or(0);
        rng.per_mille(per_mille).then(|| WORKER_POINTS[i])
    }

    /// Respawns every process that exited on its own (aborted at its failure point).
    fn respawn_exited(&mut self, rng: &mut SoakRng, per_mille: u32) -> anyhow::Result<()> {
        for slot in &mut self.workers {
            if exited(&mut slot.0) {
                self.failpoint_aborts += 1;
                let point = Self::worker_point(rng, per_mille);
                *slot = (self.launch.worker(point)?, point.is_some());
            }
        }
        if exited(&mut self.reconciler.0) {
            self.failpoint_aborts += 1;
            self.reconciler = (self.launch.reconciler(None)?, false);
        }
        Ok(())
    }

    /// SIGKILLs one process (a worker, or one time in five the reconciler, and the reconciler at the
    /// fifth kill at the latest: a short soak on a fast machine kills it at least once) and starts a
    /// replacement.
    async fn kill_one(
        &mut self,
        rng: &mut SoakRng,
        per_mille: u32,
        reconciler_kills_max: usize,
    ) -> anyhow::Result<()> {
        self.sigkills += 1;
        let overdue = self.reconciler_kills == 0 && self.sigkills >= 5;
        if (overdue || rng.below(5) == 0) && self.reconciler_kills < reconciler_kills_max {
            self.reconciler_kills += 1;
            sigkill(&mut self.reconciler.0).await;
            let point = rng.per_mille(per_mille).then_some(FailPoint::MidSweep);
            self.reconciler = (self.launch.reconciler(point)?, point.is_some());
        } else {
            let i = usize::try_from(rng.below(self.workers.len() as u64)).unwrap_or(0);
            sigkill(&mut self.workers[i].0).await;
            let point = Self::worker_point(rng, per_mille);
            self.workers[i] = (self.launch.worker(point)?, point.is_some());
        }
        Ok(())
    }

    /// Replaces every process armed with a failure point by a clean one, so the calm phase converges.
    async fn disarm(&mut self) -> anyhow::Result<()> {
        for slot in &mut self.workers {
            if slot.1 || exited(&mut slot.0) {
                sigkill(&mut slot.0).await;
                *slot = (self.launch.worker(None)?, false);
            }
        }
        if self.reconciler.1 || exited(&mut self.reconciler.0) {
            sigkill(&mut self.reconciler.0).await;
            self.reconciler = (self.launch.reconciler(None)?, false);
        }
        Ok(())
    }

    async fn stop(&mut self) {
        for slot in &mut self.workers {
            sigkill(&mut slot.0).await;
        }
        sigkill(&mut self.reconciler.0).await;
    }
}

/// The `application_name` of the soak's own Postgres connections, which backend terminations spare.
const OBSERVER_APPLICATION: &str = "payonce-chaos";
/// Terminates every backend on the soak's database but the observer's; how many.
const TERMINATE_FLEET_BACKENDS: &str = "SELECT count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity \
     WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name <> $1";

/// The observer's URL: the soak's ledger URL tagged with [`OBSERVER_APPLICATION`] (Postgres only).
fn observer_url(database_url: &str) -> String {
    if !database_url.starts_with("postgres") {
        return database_url.to_string();
    }
    let sep = if database_url.contains('?') { '&' } else { '?' };
    format!("{database_url}{sep}application_name={OBSERVER_APPLICATION}")
}

/// Postgres backend terminations during the chaos (a failover's dropped connections, an operator's
/// `pg_terminate_backend`).
struct BackendFaults {
    pool: sqlx::PgPool,
    every: (Duration, Duration),
    next: Instant,
    rounds: usize,
    terminated: i64,
}

impl BackendFaults {
    async fn connect(config: &SoakConfig, rng: &mut SoakRng) -> anyhow::Result<Option<Self>> {
        let Some(every) = config.terminate_backends_every else {
            return Ok(None);
        };
        if !config.database_url.starts_with("postgres") {
            return Ok(None);
        }
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .connect(&observer_url(&config.database_url))
            .await
            .context("connecting the backend terminator")?;
        Ok(Some(BackendFaults {
            pool,
            every,
            next: Instant::now() + rng.between(every.0, every.1),
            rounds: 0,
            terminated: 0,
        }))
    }

    /// Terminates the fleet's backends when the next round is due.
    async fn tick(&mut self, rng: &mut SoakRng) -> anyhow::Result<()> {
        if Instant::now() < self.next {
            return Ok(());
        }
        self.next = Instant::now() + rng.between(self.every.0, self.every.1);
        match sqlx::query_scalar::<_, i64>(TERMINATE_FLEET_BACKENDS)
            .bind(OBSERVER_APPLICATION)
            .fetch_one(&self.pool)
            .await
        {
            Ok(n) => {
                self.rounds += 1;
                self.terminated += n;
            }
            // The server is being restarted by the soak itself: this round is skipped.
            Err(e) => eprintln!("payonce-chaos: a backend termination round failed: {e}"),
        }
        Ok(())
    }
}

/// One progress line on stderr: rows per state.
async fn progress(ledger: &SharedLedger, phase: &str, started: Instant) {
    if let Ok(counts) = ledger.count_by_status().await {
        let states: Vec<String> = counts
            .iter()
            .filter(|c| c.count > 0)
            .map(|c| format!("{} {}", c.status.as_str(), c.count))
            .collect();
        eprintln!(
            "payonce-chaos: {:>6.1} s {phase}: {}",
            started.elapsed().as_secs_f64(),
            states.join(", ")
        );
    }
}

/// Operations not yet in a final state (ready, executing or unknown); while the database cannot be
/// asked (it is being restarted), as many as there could be.
async fn in_progress(ledger: &SharedLedger) -> anyhow::Result<i64> {
    let counts = match ledger.count_by_status().await {
        Ok(counts) => counts,
        Err(e) if e.is_unavailable() => return Ok(i64::MAX),
        Err(e) => return Err(e.into()),
    };
    Ok(counts
        .iter()
        .filter(|c| {
            matches!(
                c.status,
                Status::Ready | Status::Executing | Status::Unknown
            )
        })
        .map(|c| c.count)
        .sum())
}

async fn arm_faults(
    http: &reqwest::Client,
    sim: &Simulator,
    config: &SoakConfig,
) -> anyhow::Result<()> {
    if config.fault_per_mille == 0 {
        return Ok(());
    }
    let each = (config.fault_per_mille / 5).max(1);
    let hangs = u32::try_from(config.operations / 200)
        .unwrap_or(u32::MAX)
        .max(1);
    let mut rules = vec![
        serde_json::json!({"match": "*", "fault": "hang", "per_mille": (each / 2).max(1), "times": hangs}),
    ];
    for fault in [
        "error_500_before_commit",
        "error_500_after_commit",
        "drop_after_commit",
        "reset",
        "rate_limit_429",
    ] {
        rules.push(serde_json::json!({"match": "*", "fault": fault, "per_mille": each}));
    }
    let r = http
        .post(format!("{}/_sim/faults", sim.base_url()))
        .json(&rules)
        .send()
        .await?;
    anyhow::ensure!(
        r.status().is_success(),
        "arming faults: {}",
        r.text().await?
    );
    Ok(())
}

async fn clear_faults(http: &reqwest::Client, sim: &Simulator) -> anyhow::Result<()> {
    http.delete(format!("{}/_sim/faults", sim.base_url()))
        .send()
        .await?
        .error_for_status()?;
    Ok(())
}

async fn wait_ready(http: &reqwest::Client, base: &str, api: &mut Child) -> anyhow::Result<()> {
    let start = Instant::now();
    loop {
        if let Ok(r) = http.get(format!("{base}/readyz")).send().await
            && r.status().is_success()
        {
            return Ok(());
        }
        anyhow::ensure!(
            !exited(api),
            "payonce api exited during start-up (see the log)"
        );
        anyhow::ensure!(
            start.elapsed() < API_READY_DEADLINE,
            "payonce api not ready after {API_READY_DEADLINE:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Runs one soak and reports what happened; an error means the soak itself could not run.
pub async fn run(config: SoakConfig) -> anyhow::Result<SoakReport> {
    let mut soak = Soak::start(config).await?;
    let chaos_time = soak.chaos_phase().await?;
    let converged = soak.calm_phase().await?;
    soak.finish(chaos_time, converged).await
}

/// What the failure soak's phases share: the fleet and the api, the simulator, the work running
/// beside them (tool calls, refunds), and what was done to them.
struct Soak {
    config: SoakConfig,
    started: Instant,
    rng: SoakRng,
    http: reqwest::Client,
    ledger: SharedLedger,
    backend_faults: Option<BackendFaults>,
    sim: Simulator,
    api: Child,
    ops: Vec<operations::PlannedOp>,
    /// The assistant's tool calls, sent beside the fleet.
    calls: tokio::task::JoinHandle<operations::ToolCallTally>,
    /// Refunds of paid payments, made beside the fleet.
    refunder: tokio::task::JoinHandle<anyhow::Result<refunds::RefundRun>>,
    /// The refunder's rounds hold this shared; a database restart takes it exclusively, so no
    /// refund is half made when the server goes away.
    ledger_pause: std::sync::Arc<tokio::sync::RwLock<()>>,
    fleet: Running,
    database_restarts: usize,
    last_progress: Instant,
}

impl Soak {
    /// Checks the plan and the fresh ledger, starts the simulator and the api, creates the
    /// operations, starts the tool calls and the refunder, arms the processor's faults and starts
    /// the fleet.
    async fn start(config: SoakConfig) -> anyhow::Result<Soak> {
        anyhow::ensure!(
            (1..=OPERATIONS_MAX).contains(&config.operations),
            "operations must be between 1 and {OPERATIONS_MAX}"
        );
        anyhow::ensure!(config.workers >= 1, "at least one worker");
        let started = Instant::now();
        let mut rng = SoakRng::new(config.seed);
        payonce_simulator::install_crypto_provider();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(2))
            .timeout(Duration::from_secs(30))
            .build()?;
        let ledger = ledger::connect(&observer_url(&config.database_url), 8)
            .await
            .context("opening the soak ledger")?;
        let backend_faults = BackendFaults::connect(&config, &mut rng).await?;
        anyhow::ensure!(
            ledger.count_by_status().await?.iter().all(|c| c.count == 0),
            "the soak needs a fresh ledger: this one already holds operations"
        );
        let now = SystemClock.now();
        let tenant = TenantId::parse(operations::TENANT).map_err(anyhow::Error::msg)?;
        let assistant =
            payonce_api::create_api_key(ledger.as_ref(), &tenant, Role::Assistant, "chaos", now)
                .await?;
        let stage = fleet::stage(
            config.payonce_bin.clone(),
            config.database_url.clone(),
            config.log.clone(),
            config.duplicate_per_mille,
            config.seed,
            config.contract,
        )
        .await?;
        let mut api = stage.launch.api(stage.port, &stage.signing)?;
        wait_ready(&http, &stage.api_base, &mut api).await?;
        let ops =
            operations::create(&ledger, config.operations, config.unapproved_every, now).await?;
        let targets = shuffled_targets(&ops, &mut rng, config.duplicate_per_mille);
        let calls = tokio::spawn(operations::tool_calls(
            http.clone(),
            stage.api_base.clone(),
            assistant,
            targets,
        ));
        let ledger_pause = std::sync::Arc::new(tokio::sync::RwLock::new(()));
        let refunder = tokio::spawn(refunds::refund_some(
            ledger_pause.clone(),
            ledger.clone(),
            ops.clone(),
            config.refund_every,
            started + config.deadline,
        ));
        arm_faults(&http, &stage.sim, &config).await?;
        let fleet = Running::start(stage.launch, &mut rng, &config)?;
        Ok(Soak {
            config,
            started,
            rng,
            http,
            ledger,
            backend_faults,
            sim: stage.sim,
            api,
            ops,
            calls,
            refunder,
            ledger_pause,
            fleet,
            database_restarts: 0,
            last_progress: Instant::now(),
        })
    }

    /// Chaos phase: kill at random until everything converged or the window closes. Returns how
    /// long it lasted.
    async fn chaos_phase(&mut self) -> anyhow::Result<Duration> {
        let chaos_start = Instant::now();
        self.last_progress = Instant::now();
        let per_mille = self.config.failpoint_per_mille;
        while chaos_start.elapsed() < self.config.chaos_window {
            if self.last_progress.elapsed() >= PROGRESS_EVERY {
                progress(&self.ledger, "chaos", self.started).await;
                self.last_progress = Instant::now();
            }
            let (least, most) = self.config.kill_every;
            tokio::time::sleep(self.rng.between(least, most)).await;
            self.fleet.respawn_exited(&mut self.rng, per_mille)?;
            if let Some(faults) = self.backend_faults.as_mut() {
                faults.tick(&mut self.rng).await?;
            }
            // The restart comes at half the window or once half the payments are settled,
            // whichever is first: on a fast machine the work can converge before half the window,
            // and the restart must still land while operations are in flight.
            let pending = in_progress(&self.ledger).await?;
            let half_settled =
                usize::try_from(pending).is_ok_and(|p| p <= self.config.operations / 2);
            if self.config.database_restart.is_some()
                && self.database_restarts == 0
                && (chaos_start.elapsed() >= self.config.chaos_window / 2 || half_settled)
            {
                self.restart_database().await?;
                continue;
            }
            // Refunds are created as payments succeed: the chaos lasts until they are made too.
            if pending == 0 && self.refunder.is_finished() {
                break;
            }
            self.fleet
                .kill_one(&mut self.rng, per_mille, self.config.reconciler_kills_max)
                .await?;
        }
        Ok(chaos_start.elapsed())
    }

    /// Restarts the database, if the plan has a restart, while no refund is half made.
    async fn restart_database(&mut self) -> anyhow::Result<()> {
        let Some(restart) = self.config.database_restart.as_ref() else {
            return Ok(());
        };
        let _paused = self.ledger_pause.write().await;
        let restart = restart.0.clone();
        tokio::task::spawn_blocking(move || restart())
            .await
            .context("restarting the database")?;
        self.database_restarts += 1;
        Ok(())
    }

    /// Calm phase: no faults, no failure points; waits for every operation to reach a final
    /// state. Whether everything converged before the deadline.
    async fn calm_phase(&mut self) -> anyhow::Result<bool> {
        clear_faults(&self.http, &self.sim).await?;
        self.fleet.disarm().await?;
        while self.started.elapsed() < self.config.deadline {
            if in_progress(&self.ledger).await? == 0
                && self.calls.is_finished()
                && self.refunder.is_finished()
            {
                return Ok(true);
            }
            self.fleet.respawn_exited(&mut self.rng, 0)?;
            if self.last_progress.elapsed() >= PROGRESS_EVERY {
                progress(&self.ledger, "calm", self.started).await;
                self.last_progress = Instant::now();
            }
            tokio::time::sleep(POLL).await;
        }
        Ok(false)
    }

    /// Stops everything, then compares the processor's audit with the ledger.
    async fn finish(mut self, chaos_time: Duration, converged: bool) -> anyhow::Result<SoakReport> {
        let tool_calls = if self.calls.is_finished() {
            self.calls.await.unwrap_or_default()
        } else {
            self.calls.abort();
            operations::ToolCallTally::default()
        };
        let refund_run = if self.refunder.is_finished() {
            self.refunder.await.context("the refunder panicked")??
        } else {
            self.refunder.abort();
            refunds::RefundRun::default()
        };
        self.fleet.stop().await;
        sigkill(&mut self.api).await;

        let config = &self.config;
        let wire = config.contract.wire();
        let mut report = tally::tally(&self.http, &self.sim, wire, &self.ledger, &self.ops).await?;
        report.refunds =
            refunds::tally(&self.http, &self.sim, wire, &self.ledger, &refund_run).await?;
        report.refunds_created = refund_run.refunds.len();
        report.refunded_payments = refund_run.payments.len();
        report.refunds_refused_by_guard = refund_run.refused_by_guard;
        report.refund_refusals_expected = refund_run.refusals_expected;
        self.sim.shutdown().await;
        report.seed = config.seed;
        report.contract = format!(
            "{} on {} wire (key retention {} s)",
            config.contract.contract,
            match wire {
                payonce_simulator::Wire::Stripe => "Stripe's",
                payonce_simulator::Wire::Adyen => "Adyen's",
            },
            config.contract.key_retention().as_secs()
        );
        report.sigkills = self.fleet.sigkills;
        report.reconciler_sigkills = self.fleet.reconciler_kills;
        report.failpoint_aborts = self.fleet.failpoint_aborts;
        report.database_restarts = self.database_restarts;
        if let Some(faults) = &self.backend_faults {
            report.backend_terminations = faults.rounds;
            report.backends_terminated = faults.terminated;
        }
        report.tool_calls = tool_calls.sent;
        report.duplicate_tool_calls = tool_calls.duplicates;
        report.bad_tool_answers = tool_calls.bad;
        report.converged = converged;
        report.chaos_time = chaos_time;
        report.wall_time = self.started.elapsed();
        Ok(report)
    }
}

/// Each operation with whether the assistant asks about it twice (`duplicate_per_mille`),
/// shuffled so tool calls do not follow the workers' claim order.
fn shuffled_targets(
    ops: &[operations::PlannedOp],
    rng: &mut SoakRng,
    duplicate_per_mille: u32,
) -> Vec<(payonce_core::id::OperationId, bool)> {
    let mut targets: Vec<_> = ops
        .iter()
        .map(|o| (o.id.clone(), rng.per_mille(duplicate_per_mille)))
        .collect();
    for i in (1..targets.len()).rev() {
        let j = usize::try_from(rng.below(i as u64 + 1)).unwrap_or(0);
        targets.swap(i, j);
    }
    targets
}

//! What a run measures, and how big. `full` is what docs/benchmarks.md reports; `quick` is the CI
//! smoke configuration (correctness only, seconds).

use crate::drive::Fleet;
use payonce_worker::WorkerConfig;
use std::time::Duration;

/// One run's sizes and limits.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The server fresh databases are created on (its `postgres` database URL).
    pub admin_url: String,
    /// Database connections: the baseline's clients, and the worker fleet's pool.
    pub clients: u32,
    /// Worker engines and their limits for the zero-latency runs.
    pub fleet: Fleet,
    /// Operations drained per zero-latency throughput run (Postgres and SQLite).
    pub operations: u64,
    /// Repetitions of the headline pair (batched baseline, then payonce's drain; medians reported).
    pub throughput_repeats: usize,
    /// Worker engine counts the throughput section also runs, each engine with its own pool of
    /// `clients` connections (as separate worker processes on one database would have).
    pub engines: Vec<usize>,
    /// Operations created and approved in the intake section (and rows in its insert baseline).
    pub intake_operations: u64,
    /// Worker engines and their limits for the HTTP run.
    pub http_fleet: Fleet,
    /// Operations drained over HTTP.
    pub http_operations: u64,
    /// The simulator's added latency.
    pub http_latency: Duration,
    /// A second HTTP run, near zero latency with more in flight: the HTTP path's own ceiling.
    pub http_ceiling: Option<(Fleet, Duration)>,
    /// Operations offered in the latency run.
    pub latency_operations: u64,
    /// Offered rate in the latency run, per second.
    pub latency_per_second: u64,
    /// Stuck operations in the sweep runs.
    pub sweep_stuck: i64,
    /// The two table sizes the sweep is measured at.
    pub sweep_rows: (i64, i64),
    /// Sweeps per table size (the median is reported).
    pub sweep_repeats: usize,
    /// Stored webhook hints the hint section checks.
    pub hints: i64,
    /// Longest any one section's drain may take before the run fails.
    pub deadline: Duration,
    /// The `payonce` binary whose `worker` process is measured; `None`: that section is not run.
    pub payonce_bin: Option<std::path::PathBuf>,
    /// Operations the worker process drains.
    pub process_operations: u64,
    /// The worker process's in-flight limit (`PAYONCE_WORKER_CONCURRENCY`).
    pub process_concurrency: usize,
    /// The simulator's latency while the worker process drains (so its in-flight limit fills).
    pub process_latency: Duration,
    /// A second worker-process run near zero latency (in flight, latency): the processes' ceiling.
    pub process_ceiling: Option<(usize, Duration)>,
    /// Operations each rate-limit run drains.
    pub ratelimit_operations: u64,
    /// Fair claims section: tenants, ready rows spread over them, and rows drained end to end.
    pub tenants: (i64, i64, u64),
    /// Alternating pairs of the peer section (graphile-worker, then payonce, [`Settings::operations`]
    /// each); 0: not run.
    pub peer_pairs: usize,
}

/// Operations drained over HTTP at 512 (and 64) in flight: 19 whole rounds of 512, so every slot
/// has work to the end and the drain's bound is concurrency / latency itself. 10,000 left a last
/// round of 272, a bound of 20 rounds for 19.5 rounds' work (0.977× of concurrency / latency).
/// At most the simulator audit's 10,000 rows, so every payment can be counted.
pub const WHOLE_ROUNDS: u64 = 19 * 512;

fn fleet(owner: &str, workers: usize, concurrency: usize, batch: u32) -> Fleet {
    let mut config = WorkerConfig::new(owner);
    config.concurrency = concurrency;
    config.batch_size = batch;
    // Idle workers poll this often when no wake-up arrives; short, so a drained run ends promptly.
    config.poll_interval = Duration::from_millis(50);
    Fleet { workers, config }
}

impl Settings {
    /// Every in-process worker configuration the run uses (for overrides that apply to all).
    pub fn worker_configs_mut(&mut self) -> impl Iterator<Item = &mut WorkerConfig> {
        [&mut self.fleet.config, &mut self.http_fleet.config]
            .into_iter()
            .chain(
                self.http_ceiling
                    .as_mut()
                    .map(|(fleet, _)| &mut fleet.config),
            )
    }

    /// The figures docs/benchmarks.md reports.
    pub fn full(admin_url: &str) -> Self {
        Settings {
            admin_url: admin_url.to_string(),
            clients: 10,
            // 512 in flight (the figure), claimed 128 at a time: one engine claims one batch
            // at a time, so the batch bounds its claim rate (a batch per commit).
            fleet: fleet("bench-worker", 1, 512, 128),
            operations: 20_000,
            throughput_repeats: 3,
            engines: vec![1, 2, 4],
            intake_operations: 5_000,
            // Claim batches of a quarter of the in-flight limit, so claims overlap submissions.
            http_fleet: fleet("bench-http-worker", 1, 512, 128),
            http_operations: WHOLE_ROUNDS,
            http_latency: Duration::from_millis(200),
            http_ceiling: Some((
                fleet("bench-http-worker", 1, 64, 16),
                Duration::from_millis(1),
            )),
            latency_operations: 3_000,
            latency_per_second: 300,
            sweep_stuck: 10_000,
            sweep_rows: (100_000, 1_000_000),
            sweep_repeats: 3,
            hints: 50_000,
            deadline: Duration::from_secs(300),
            payonce_bin: crate::process::sibling_binary(),
            process_operations: WHOLE_ROUNDS,
            process_concurrency: 512,
            process_latency: Duration::from_millis(200),
            process_ceiling: Some((64, Duration::from_millis(1))),
            ratelimit_operations: 3_000,
            tenants: (1_000, 1_000_000, 20_000),
            peer_pairs: 5,
        }
    }

    /// Tiny sizes for the smoke test: every code path, no meaningful figure.
    pub fn quick(admin_url: &str) -> Self {
        Settings {
            admin_url: admin_url.to_string(),
            clients: 4,
            fleet: fleet("bench-worker", 2, 16, 8),
            operations: 200,
            throughput_repeats: 2,
            engines: vec![1, 2],
            intake_operations: 40,
            http_fleet: fleet("bench-http-worker", 1, 16, 8),
            http_operations: 48,
            http_latency: Duration::from_millis(5),
            http_ceiling: Some((
                fleet("bench-http-worker", 1, 8, 4),
                Duration::from_millis(1),
            )),
            latency_operations: 40,
            latency_per_second: 200,
            sweep_stuck: 20,
            sweep_rows: (200, 2_000),
            sweep_repeats: 2,
            hints: 500,
            deadline: Duration::from_secs(120),
            // Every section runs, the process ones too, when the binary is next to this one.
            payonce_bin: crate::process::sibling_binary(),
            process_operations: 100,
            process_concurrency: 16,
            process_latency: Duration::from_millis(5),
            process_ceiling: Some((8, Duration::from_millis(1))),
            ratelimit_operations: 100,
            tenants: (10, 2_000, 200),
            // Not in the quick run: it installs graphile-worker from npm.
            peer_pairs: 0,
        }
    }
}

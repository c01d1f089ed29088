//! `payonce-bench [--quick] [--database-url URL]`: runs every benchmark section and prints the
//! results as a Markdown table (progress goes to stderr).

use clap::Parser;
use payonce_bench::database::ADMIN_URL_DEFAULT;
use payonce_bench::run::Section;
use payonce_bench::{Settings, run};
use std::process::ExitCode;

/// Benchmarks measured side by side in one run.
#[derive(Debug, Parser)]
#[command(name = "payonce-bench")]
struct Args {
    /// Tiny sizes: checks every section works; the figures mean nothing.
    #[arg(long)]
    quick: bool,
    /// The Postgres server's admin database; each section creates (and drops) its own database.
    #[arg(long, env = "PAYONCE_BENCH_DATABASE_URL", default_value = ADMIN_URL_DEFAULT)]
    database_url: String,
    /// Only time the hot-path ledger calls one after another (where a batch's time goes).
    #[arg(long)]
    profile: bool,
    /// Override the zero-latency sections' worker engines.
    #[arg(long)]
    workers: Option<usize>,
    /// Override the zero-latency sections' in-flight submissions per worker.
    #[arg(long)]
    concurrency: Option<usize>,
    /// Override the zero-latency sections' claim batch.
    #[arg(long)]
    batch: Option<u32>,
    /// Override the HTTP section's simulator latency, ms.
    #[arg(long)]
    http_latency_ms: Option<u64>,
    /// Override the HTTP section's in-flight submissions per worker.
    #[arg(long)]
    http_concurrency: Option<usize>,
    /// Override the HTTP section's claim batch.
    #[arg(long)]
    http_batch: Option<u32>,
    /// Override the HTTP section's operations per drain (both its runs).
    #[arg(long)]
    http_operations: Option<u64>,
    /// Whether the HTTP section also runs its ceiling (1 ms, 64 in flight) after the 200 ms drain
    /// (default: true).
    #[arg(long, action = clap::ArgAction::Set)]
    http_ceiling: Option<bool>,
    /// Override the zero-latency sections' operations per drain (throughput, sqlite).
    #[arg(long)]
    operations: Option<u64>,
    /// Override the engine counts the throughput section also runs (comma-separated; empty: none).
    #[arg(long, value_delimiter = ',')]
    engines: Option<Vec<usize>>,
    /// Override the worker process's in-flight limit (section `process`).
    #[arg(long)]
    process_concurrency: Option<usize>,
    /// Override the simulator latency while the worker process drains, ms (section `process`).
    #[arg(long)]
    process_latency_ms: Option<u64>,
    /// Override the sweep section's stuck operations.
    #[arg(long)]
    sweep_stuck: Option<i64>,
    /// Override the rate-limit section's operations per run.
    #[arg(long)]
    ratelimit_operations: Option<u64>,
    /// Override every in-process worker's claim cooldown, ms (an internal constant of the
    /// `payonce worker` processes, which this does not reach).
    #[arg(long)]
    claim_cooldown_ms: Option<u64>,
    /// Whether an in-process worker's outcome writes also claim into the slots they free (default: true).
    #[arg(long, action = clap::ArgAction::Set)]
    claim_with_outcomes: Option<bool>,
    /// Outcome writes one in-process pipeline keeps under way at once (default: 2).
    #[arg(long)]
    record_writes: Option<usize>,
    /// Override every in-process worker's record linger, ms.
    #[arg(long)]
    record_linger_ms: Option<u64>,
    /// Override every in-process worker's pipelines (1 to 16).
    #[arg(long)]
    pipelines: Option<usize>,
    /// Run one section only.
    #[arg(long, value_enum)]
    only: Option<Section>,
    /// The `payonce` binary whose worker process is measured (default: the one beside this binary).
    #[arg(long)]
    payonce_bin: Option<std::path::PathBuf>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    init_logging();
    if args.profile {
        return profile(&args.database_url).await;
    }
    let mut settings = if args.quick {
        Settings::quick(&args.database_url)
    } else {
        Settings::full(&args.database_url)
    };
    if let Some(bin) = args.payonce_bin.clone() {
        settings.payonce_bin = Some(bin);
    }
    // `--quick` is the check that every section still runs: one it would skip is a failure.
    if args.quick && settings.payonce_bin.is_none() {
        eprintln!(
            "payonce-bench: --quick runs every section, and the worker-process and rate-limit ones need \
             the payonce binary: build it next to this one (cargo build --release -p payonce) or pass \
             --payonce-bin"
        );
        return ExitCode::from(2);
    }
    args.override_settings(&mut settings);
    match run(&settings, args.only).await {
        Ok(outcome) => {
            print!("{}", outcome.table.markdown());
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("payonce-bench: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Logs to stderr: warnings from the engines under test (lost leases, ledger errors) must be
/// visible, they would explain a bad figure. RUST_LOG overrides.
fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                // The LISTEN task of a ledger whose pool a section closed warns once; not a finding.
                .unwrap_or_else(|_| {
                    tracing_subscriber::EnvFilter::new("warn,payonce_ledger::postgres=error")
                }),
        )
        .with_writer(std::io::stderr)
        .init();
}

/// `--profile`: the worker's hot path, once.
async fn profile(database_url: &str) -> ExitCode {
    match payonce_bench::profile::hot_path(database_url, 32, 100).await {
        Ok(c) => {
            println!("{c:?}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("payonce-bench: {error:#}");
            ExitCode::FAILURE
        }
    }
}

impl Args {
    /// Applies the flags that override one figure of the chosen settings.
    fn override_settings(&self, settings: &mut Settings) {
        if let Some(n) = self.workers {
            settings.fleet.workers = n.max(1);
        }
        if let Some(n) = self.concurrency {
            settings.fleet.config.concurrency = n.max(1);
        }
        if let Some(n) = self.batch {
            settings.fleet.config.batch_size = n.max(1);
        }
        if let Some(n) = self.operations {
            settings.operations = n.max(1);
        }
        if let Some(engines) = &self.engines {
            settings.engines = engines.iter().copied().filter(|n| *n > 0).collect();
        }
        if let Some(n) = self.process_concurrency {
            settings.process_concurrency = n;
        }
        if let Some(ms) = self.process_latency_ms {
            settings.process_latency = std::time::Duration::from_millis(ms);
        }
        if let Some(n) = self.sweep_stuck {
            settings.sweep_stuck = n;
        }
        if let Some(n) = self.ratelimit_operations {
            settings.ratelimit_operations = n.max(1);
        }
        if let Some(ms) = self.http_latency_ms {
            settings.http_latency = std::time::Duration::from_millis(ms.max(1));
        }
        if let Some(n) = self.http_batch {
            settings.http_fleet.config.batch_size = n.max(1);
        }
        if let Some(n) = self.http_concurrency {
            settings.http_fleet.config.concurrency = n.max(1);
        }
        if let Some(n) = self.http_operations {
            settings.http_operations = n.max(1);
        }
        if self.http_ceiling == Some(false) {
            settings.http_ceiling = None;
        }
        for config in settings.worker_configs_mut() {
            if let Some(on) = self.claim_with_outcomes {
                config.claim_with_outcomes = on;
            }
            if let Some(n) = self.record_writes {
                config.record_writes = n;
            }
            if let Some(ms) = self.claim_cooldown_ms {
                config.claim_cooldown = std::time::Duration::from_millis(ms);
            }
            if let Some(ms) = self.record_linger_ms {
                config.record_linger = std::time::Duration::from_millis(ms);
            }
            if let Some(n) = self.pipelines {
                config.pipelines = n;
            }
        }
    }
}

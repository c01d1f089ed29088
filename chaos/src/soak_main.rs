//! `payonce-soak`: the steady soak. Operations arrive at `--rate` per second for `--minutes` against
//! real `payonce` processes on a fresh Postgres ledger; prints what stayed flat (memory, the webhook
//! hint backlog), how the database grew, and the bytes each settled payment leaves behind after
//! pruning. Exits 1 if anything was paid twice, contradicted, or not drained.

use clap::Parser;
use payonce_chaos::steady::{SteadyConfig, run};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Command-line arguments; defaults are issue 43's day: 50 operations/s for 25 minutes.
#[derive(Parser)]
#[command(
    name = "payonce-soak",
    about = "Steady soak: a long day of traffic; memory, hint backlog and storage per payment."
)]
struct Args {
    /// The `payonce` binary under test.
    #[arg(long, env = "PAYONCE_BIN", default_value = "target/release/payonce")]
    payonce_bin: PathBuf,
    /// A fresh, empty ledger database (Postgres URL).
    #[arg(long, env = "PAYONCE_DATABASE_URL")]
    database_url: String,
    /// Operations created per second.
    #[arg(long, default_value_t = 50)]
    rate: u32,
    /// Minutes operations keep arriving.
    #[arg(long, default_value_t = 25.0)]
    minutes: f64,
    /// Worker processes.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Seconds between samples.
    #[arg(long, default_value_t = 30)]
    sample_every_s: u64,
    /// Seed of the simulator's rolls.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    payonce_chaos::init_logging();
    if !(args.minutes > 0.0 && args.minutes.is_finite()) {
        eprintln!("payonce-soak: --minutes must be a positive number");
        return ExitCode::from(2);
    }
    let config = SteadyConfig {
        payonce_bin: args.payonce_bin,
        database_url: args.database_url,
        rate: args.rate,
        duration: Duration::from_secs_f64(args.minutes * 60.0),
        workers: args.workers,
        sample_every: Duration::from_secs(args.sample_every_s.max(1)),
        seed: args.seed,
        log: std::env::temp_dir().join(format!("payonce-soak-{}.log", std::process::id())),
    };
    eprintln!("payonce-soak: process logs in {}", config.log.display());
    match run(config).await {
        Ok(report) => {
            println!("{report}");
            if report.is_clean() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(error) => {
            eprintln!("payonce-soak: the soak could not run: {error:#}");
            ExitCode::from(2)
        }
    }
}

//! `payonce-chaos`: runs the failure-injection soak against a `payonce` binary and a fresh ledger,
//! prints the table, and exits 1 if anything was paid twice, lost, contradicted or left unconverged.

use clap::Parser;
use payonce_chaos::{SoakConfig, run};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Command-line arguments; defaults are the long soak's.
#[derive(Parser)]
#[command(
    name = "payonce-chaos",
    about = "Failure-injection soak: asking twice never pays twice."
)]
struct Args {
    /// The `payonce` binary under test.
    #[arg(long, env = "PAYONCE_BIN", default_value = "target/release/payonce")]
    payonce_bin: PathBuf,
    /// A fresh, empty ledger database (Postgres URL).
    #[arg(long, env = "PAYONCE_DATABASE_URL")]
    database_url: String,
    /// Operations to create.
    #[arg(long, default_value_t = 2_000)]
    operations: usize,
    /// Worker processes at once.
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// Seed of the plan; printed so a failing run can be replayed (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// Processor faults per 1000 requests.
    #[arg(long, default_value_t = 100)]
    fault_per_mille: u32,
    /// Duplicate webhooks and tool calls per 1000.
    #[arg(long, default_value_t = 200)]
    duplicate_per_mille: u32,
    /// Respawned workers armed with a failure point, per 1000.
    #[arg(long, default_value_t = 250)]
    failpoint_per_mille: u32,
    /// Shortest pause between SIGKILLs, ms.
    #[arg(long, default_value_t = 300)]
    kill_min_ms: u64,
    /// Longest pause between SIGKILLs, ms.
    #[arg(long, default_value_t = 1_500)]
    kill_max_ms: u64,
    /// Most SIGKILLs of the reconciler.
    #[arg(long, default_value_t = 3)]
    reconciler_kills_max: usize,
    /// Longest chaos phase, s.
    #[arg(long, default_value_t = 120)]
    chaos_window_s: u64,
    /// Longest whole run, s.
    #[arg(long, default_value_t = 900)]
    deadline_s: u64,
    /// One approved payment in this many is refunded during the chaos (0: no refunds).
    #[arg(long, default_value_t = payonce_chaos::refunds::REFUND_EVERY_DEFAULT)]
    refund_every: usize,
    /// The processor contract the simulator runs and every process declares
    /// (`payonce simulator --list-contracts`); `adyen` runs on Adyen's wire, every process
    /// started with `--processor adyen`.
    #[arg(long, default_value = "stripe", value_parser = payonce_simulator::Contract::parse)]
    contract: payonce_simulator::Contract,
    /// Key retention of both sides, s (default: the contract's): shorter than the chaos, some
    /// unknown outcomes outlive it and go to a human.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    key_retention_s: Option<u64>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    payonce_chaos::init_logging();
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let mut config = SoakConfig::new(args.payonce_bin, args.database_url, seed);
    config.operations = args.operations;
    config.workers = args.workers;
    config.fault_per_mille = args.fault_per_mille;
    config.duplicate_per_mille = args.duplicate_per_mille;
    config.failpoint_per_mille = args.failpoint_per_mille;
    config.kill_every = (
        Duration::from_millis(args.kill_min_ms),
        Duration::from_millis(args.kill_max_ms),
    );
    config.reconciler_kills_max = args.reconciler_kills_max;
    config.chaos_window = Duration::from_secs(args.chaos_window_s);
    config.deadline = Duration::from_secs(args.deadline_s);
    config.refund_every = args.refund_every;
    config.contract = payonce_chaos::fleet::ContractRun {
        contract: args.contract,
        key_retention: args.key_retention_s.map(Duration::from_secs),
    };
    eprintln!(
        "payonce-chaos: seed {seed}; process logs in {}",
        config.log.display()
    );
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
            eprintln!("payonce-chaos: the soak could not run: {error:#}");
            ExitCode::from(2)
        }
    }
}

//! `payonce-bench [--quick] [--database-url URL]`: runs every benchmark section and prints the
//! results as a Markdown table (progress goes to stderr).

use clap::Parser;
use payonce_bench::database::ADMIN_URL_DEFAULT;
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
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let settings = if args.quick {
        Settings::quick(&args.database_url)
    } else {
        Settings::full(&args.database_url)
    };
    match run(&settings).await {
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

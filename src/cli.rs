//! The command line: every subcommand and its flags. The settings groups live in `settings`; what each
//! command does is one function per command, which `main`'s `run` dispatches to.

use crate::settings::{ApiArgs, Common, GraceArgs, ReconcilerArgs, SubmitArgs, WorkerArgs};
use crate::{demo, keys, ops, serve};
use clap::{Parser, Subcommand, ValueEnum};

/// `payonce`: global flags and one subcommand.
#[derive(Parser)]
#[command(
    name = "payonce",
    version,
    about = "Collect a payment at most once per approved intention."
)]
pub struct Cli {
    /// Optional TOML config file; its keys are the environment variables without PAYONCE_, lowercased.
    #[arg(long, global = true, env = "PAYONCE_CONFIG", value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
    /// Log format on stderr.
    #[arg(
        long,
        global = true,
        env = "PAYONCE_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: ops::LogFormat,
    // What to run (clap takes its help from the variants).
    #[command(subcommand)]
    pub command: Command,
}

/// The command line as documented: [`Cli`] with every setting also spelled as its key
/// (`--worker-batch` for `--batch-size`). The configuration reference and `config show` read it.
pub fn definition() -> clap::Command {
    use clap::CommandFactory;
    crate::config_file::with_key_flags(Cli::command())
}

/// The command line as parsed: [`definition`] with every global setting of a command (the ledger,
/// processor and limiter settings) also accepted before the command's name
/// (`payonce --database-url X keys list`), as a hidden global copy on the root. clap gives the
/// command's own setting the copy's value when only the copy was given; [`misplaced`] refuses a
/// copy given for a command that does not take the setting.
pub fn command() -> clap::Command {
    let definition = definition();
    let mut lifted: Vec<clap::Arg> = Vec::new();
    for sub in definition.get_subcommands() {
        for arg in sub.get_arguments().filter(|a| a.is_global_set()) {
            if !lifted.iter().any(|l| l.get_id() == arg.get_id())
                && !definition
                    .get_arguments()
                    .any(|a| a.get_id() == arg.get_id())
            {
                lifted.push(arg.clone().hide(true));
            }
        }
    }
    definition.args(lifted)
}

/// The first setting given before the command's name (or after it, on a command that would take
/// it only through the root's copy) that the command run does not take, as its flag and the
/// command's path: `payonce --database-url X demo` is a usage error, not a setting silently ignored.
pub fn misplaced(matches: &clap::ArgMatches) -> Option<(String, String)> {
    use clap::parser::ValueSource;
    let definition = definition();
    // What the command run takes: the root's own arguments, then along the path to the leaf each
    // command's arguments (a global one reaches every command below it).
    let mut taken: Vec<clap::Id> = definition
        .get_arguments()
        .map(|a| a.get_id().clone())
        .collect();
    let mut path = String::from("payonce");
    let mut at = &definition;
    let mut m = matches;
    while let Some((name, sub_matches)) = m.subcommand() {
        let Some(sub) = at.find_subcommand(name) else {
            break;
        };
        taken.extend(sub.get_arguments().map(|a| a.get_id().clone()));
        path = format!("{path} {name}");
        at = sub;
        m = sub_matches;
    }
    command()
        .get_arguments()
        .filter(|a| a.is_hide_set() && a.is_global_set())
        .filter(|a| !taken.contains(a.get_id()))
        .find(|a| matches.value_source(a.get_id().as_str()) == Some(ValueSource::CommandLine))
        .map(|a| (format!("--{}", a.get_long().unwrap_or_default()), path))
}

/// Every subcommand.
#[derive(Subcommand)]
pub enum Command {
    /// Quick start: the all-in-one stack on a fresh SQLite file walks INV-2048 through a crash, a lost response and duplicate webhooks.
    Demo(demo::DemoArgs),
    /// All in one process: api, worker, reconciler and the simulator (SQLite unless database_url says postgres).
    Serve {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        api: ApiArgs,
        #[command(flatten)]
        worker: WorkerArgs,
        #[command(flatten)]
        reconciler: ReconcilerArgs,
        #[command(flatten)]
        serve: serve::ServeArgs,
    },
    /// Effective settings and the configuration reference.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Exits 0 if GET URL answers 2xx in time, else 1: the container healthcheck (the image has no curl).
    Probe {
        /// What to ask, e.g. http://127.0.0.1:8080/readyz (the image's healthcheck sets it per deployable).
        #[arg(
            env = "PAYONCE_PROBE_URL",
            default_value = "http://127.0.0.1:8080/readyz"
        )]
        url: String,
        /// Give up after this many ms.
        #[arg(long, default_value_t = 2_000)]
        timeout_ms: u64,
    },
    /// Deletes, in bounded batches, the rows past their retention (checked webhook payloads, tool-call
    /// correlation rows, expired links and console sessions; and, only for a tenant that set a period
    /// with `tenant set-retention`, its final operations past it with every row they own) and prints
    /// how many, as JSON. The reconciler daemon does the same every `prune_interval_ms`.
    Prune {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        reconciler: ReconcilerArgs,
    },
    /// Runs the ledger migrations and exits.
    Migrate {
        #[command(flatten)]
        common: Common,
    },
    /// Runs the HTTP front door (operations, confirmation pages, assistant tools, MCP, webhooks).
    Api {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Creates an API key (as `keys create`) and prints only its secret: kept for scripts.
    CreateKey {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        args: keys::CreateArgs,
    },
    /// API keys: create, list, revoke, rotate (expiry and grace periods).
    Keys {
        #[command(flatten)]
        common: Common,
        #[command(subcommand)]
        command: keys::KeysCommand,
    },
    /// Tenant settings: `payonce tenant set-verification` (customer verification on the page),
    /// `set-processor` (where the tenant's new operations are submitted), and the others.
    Tenant {
        #[command(flatten)]
        common: Common,
        #[command(subcommand)]
        command: crate::tenant::TenantCommand,
    },
    /// Runs the claim-and-submit daemon.
    Worker {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        worker: WorkerArgs,
    },
    /// The reconciler daemon and on-call commands.
    Reconciler {
        #[command(flatten)]
        common: Common,
        #[command(subcommand)]
        command: ReconcilerCommand,
    },
    /// Runs the Stripe-compatible simulator.
    Simulator(crate::simulator::SimulatorArgs),
    /// Creates (and, with an approval, enqueues) the operations of a CSV or NDJSON file through the
    /// API's batch route with a service key; run it again to resume (nothing is created twice).
    /// Exit 0: every line written; 3: some lines refused (listed by number).
    Enqueue(crate::enqueue::EnqueueArgs),
}

// Parsed once per process; boxing the settings would only make the derive harder to read.
#[allow(clippy::large_enum_variant)]
/// `payonce config …`.
#[derive(Subcommand)]
pub enum ConfigCommand {
    /// Prints every setting's effective value and its source (flag, env, file, default) as TOML.
    Show {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        api: ApiArgs,
        #[command(flatten)]
        worker: WorkerArgs,
        #[command(flatten)]
        reconciler: ReconcilerArgs,
        #[command(flatten)]
        serve: serve::ServeArgs,
    },
    /// Prints the Markdown table of every setting (docs/configuration.md holds it).
    Reference,
}

/// `payonce reconciler …`: the daemon, cron's sweep and the on-call commands.
#[derive(Subcommand)]
pub enum ReconcilerCommand {
    /// Sweeps every interval until SIGTERM.
    Run {
        #[command(flatten)]
        reconciler: ReconcilerArgs,
        #[command(flatten)]
        submit: SubmitArgs,
        #[command(flatten)]
        grace: GraceArgs,
    },
    /// One sweep for cron. Exit 0: clean; 1: errors; 3: operations need attention.
    Sweep {
        /// Run one sweep (required: the daemon is `run`).
        #[arg(long)]
        once: bool,
        /// Report what would be done; write nothing.
        #[arg(long)]
        dry_run: bool,
        /// JSON output.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        reconciler: ReconcilerArgs,
        #[command(flatten)]
        submit: SubmitArgs,
    },
    /// Lists operations by state and age (default: executing, unknown, needs_attention).
    List {
        /// States to list (repeatable).
        #[arg(long = "status")]
        statuses: Vec<String>,
        /// Only rows unchanged for at least this many seconds.
        #[arg(long, default_value_t = 0)]
        min_age_s: i64,
        /// Most rows.
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Shows one operation with its full event history and the processor's view.
    Show {
        /// Operation id.
        id: String,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Resolves an unknown or needs_attention operation by hand.
    Resolve {
        /// Operation id.
        id: String,
        /// What happened.
        #[arg(long = "as", value_enum)]
        resolution: ResolveAs,
        /// The processor reference (required with `--as succeeded`).
        #[arg(long)]
        reference: Option<String>,
        /// Why (mandatory; recorded in the audit trail).
        #[arg(long)]
        reason: String,
        /// Who is resolving (recorded as the actor).
        #[arg(long, env = "USER", default_value = "on-call")]
        actor: String,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
}

/// What on-call found out about an operation.
#[derive(Clone, Copy, ValueEnum)]
pub enum ResolveAs {
    /// The payment happened (give --reference).
    Succeeded,
    /// The payment did not happen.
    Failed,
    /// Retry with the same key.
    Retry,
}

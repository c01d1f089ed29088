//! `payonce`: every deployable in one binary.
//!
//! - `payonce demo`: the quick start — the all-in-one stack on SQLite, walking one invoice through a
//!   dropped response, a worker crash and duplicate webhooks.
//! - `payonce serve`: the all-in-one process (api, worker, reconciler, simulator) for trying payonce.
//! - `payonce api | worker | reconciler | simulator`: the separate deployables for scale;
//!   `payonce keys create | list | revoke | rotate` manages API keys (`create-key` is the older spelling).
//!   `payonce tenant set-verification` sets how customers prove who they are on the confirmation page;
//!   `payonce tenant set-processor` which processor a tenant's new operations go to.
//! - `payonce migrate`: run ledger migrations explicitly.
//! - `payonce reconciler sweep --once | list | show | resolve`: on-call and cron.
//! - `payonce config show | reference`: effective settings and the generated configuration reference.
//! - `payonce probe URL`: the container healthcheck.
//! - `payonce enqueue FILE`: a billing run's payments from a CSV or NDJSON file, through the API's
//!   batch route.
//!
//! Modules: `cli` (the subcommands), `banner` (serve's copy-paste walk-through), `settings` (the flags and environment variables), `config_file` (the optional TOML file),
//! `config_reference` (docs/configuration.md's table and `config show`), `serve` (the all-in-one
//! stack), `keys` (the API key commands), `tenant_app` (serve's stand-in tenant app, receiving codes), `tenant` (tenant settings), `daemons` (api, worker and reconciler run), `oncall` (the reconciler's sweep, list, show, resolve), `enqueue` (the file intake command), `demo` (the INV-2048 story on it), `simulator` (the simulator on its own), `progress` (the demo's step display), `suggestion` (did you mean), `ops` (logging,
//! signals, the daemons' metrics endpoint).

mod banner;
mod cli;
mod config_file;
mod config_reference;
mod daemons;
mod demo;
mod enqueue;
mod key_secret;
mod keys;
mod oncall;
mod ops;
mod progress;
mod serve;
mod settings;
mod simulator;
mod suggestion;
mod tenant;
mod tenant_app;

use anyhow::Context;
use clap::{ArgMatches, FromArgMatches};
use cli::{Cli, Command, ConfigCommand, ReconcilerCommand};
use config_file::ConfigFile;
use payonce_core::clock::SystemClock;
use payonce_ledger::{self as ledger, SharedLedger};
use settings::{Common, ReconcilerArgs};
use std::process::ExitCode;

/// Opens the ledger named by `common` as a serving process: a Postgres schema is checked, never
/// migrated (behind: refused with "run payonce migrate"; `ledger::connect_serving`), a SQLite file
/// is migrated by the process that owns it. A Postgres that is down or full is tried for up to
/// `db_connect_timeout_ms` first; nothing listens until then (docs/runbook.md).
pub async fn open(common: &Common) -> anyhow::Result<SharedLedger> {
    let connect_timeout = std::time::Duration::from_millis(common.db_connect_timeout_ms);
    ledger::connect_serving(
        &common.database_url,
        &common.database_route(),
        common.db_max_connections,
        connect_timeout,
    )
    .await
    .with_context(|| format!("opening the ledger at {}", redact(&common.database_url)))
}

/// Opens the ledger named by `common` and applies its pending migrations: `payonce migrate`, the
/// one command that changes a Postgres schema (docs/runbook.md, "Upgrading").
async fn migrate(common: &Common) -> anyhow::Result<SharedLedger> {
    let connect_timeout = std::time::Duration::from_millis(common.db_connect_timeout_ms);
    ledger::connect_routed(
        &common.database_url,
        &common.database_route(),
        common.db_max_connections,
        connect_timeout,
    )
    .await
    .with_context(|| format!("migrating the ledger at {}", redact(&common.database_url)))
}

/// Opens an existing ledger, as every command but `migrate`, `serve` and `demo` does: a SQLite path
/// that names no file is refused, naming it, instead of becoming an empty ledger with nothing to do
/// (a typo'd path would otherwise read as "all clear").
pub async fn open_existing(common: &Common) -> anyhow::Result<SharedLedger> {
    if let Some(path) = sqlite_file(&common.database_url)
        && !path.exists()
    {
        let shown = std::env::current_dir().map_or_else(|_| path.clone(), |d| d.join(&path));
        anyhow::bail!(
            "no ledger at {}: the SQLite file does not exist. Check --database-url \
             (PAYONCE_DATABASE_URL); `payonce migrate --database-url {}` creates an empty ledger",
            shown.display(),
            common.database_url
        );
    }
    open(common).await
}

/// The file a `sqlite:` URL names; none for Postgres or an in-memory database.
pub fn sqlite_file(database_url: &str) -> Option<std::path::PathBuf> {
    let rest = database_url
        .strip_prefix("sqlite://")
        .or_else(|| database_url.strip_prefix("sqlite:"))?;
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let in_memory = path.is_empty() || path == ":memory:" || query.contains("mode=memory");
    (!in_memory).then(|| std::path::PathBuf::from(path))
}

/// Hides a password in a database URL for logs.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://…@{}", &url[..s], &url[at + 1..]),
        _ => url.to_string(),
    }
}

/// The parsed command line with what produced it: `config show` reports sources.
struct Parsed {
    cli: Cli,
    matches: ArgMatches,
    file: Option<ConfigFile>,
}

/// Reads the config file (if any), makes its values the defaults, and parses the command line.
/// Exits like clap on `--help` and usage errors (status 2).
fn parse() -> Parsed {
    let exit = |message: String| -> ! {
        eprintln!("payonce: {message}");
        std::process::exit(2)
    };
    let path = config_file::locate(std::env::args_os(), std::env::var_os(config_file::ENV));
    let file = path.map(|p| ConfigFile::load(&p).unwrap_or_else(|e| exit(format!("{e:#}"))));
    let mut command = cli::command();
    if let Some(f) = &file {
        command = config_file::apply(command, f).unwrap_or_else(|e| exit(e.to_string()));
    }
    let matches = command.get_matches();
    if let Some((flag, path)) = cli::misplaced(&matches) {
        exit(format!(
            "`{path}` does not take {flag} (see `{path} --help` for what it takes)"
        ));
    }
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    Parsed { cli, matches, file }
}

/// Runs the parsed command: one function per command.
async fn run(parsed: Parsed) -> anyhow::Result<ExitCode> {
    match parsed.cli.command {
        Command::Demo(args) => demo::run(args).await,
        Command::Probe { url, timeout_ms } => Ok(ops::probe(&url, timeout_ms).await),
        Command::Serve {
            common,
            api,
            worker,
            reconciler,
            serve,
        } => serve::run(common, api, worker, reconciler, serve).await,
        Command::Config {
            command: ConfigCommand::Reference,
        } => config_reference(),
        Command::Config {
            command: ConfigCommand::Show { .. },
        } => config_show(&parsed.matches, parsed.file.as_ref()),
        Command::Simulator(args) => simulator::run(args).await,
        Command::Enqueue(args) => enqueue::run(args).await,
        Command::Prune { common, reconciler } => prune(&common, &reconciler).await,
        Command::Migrate { common } => migrate_command(&common).await,
        Command::Api { common, api } => daemons::api(common, api).await,
        Command::CreateKey { common, args } => {
            keys::create(&open_existing(&common).await?, args, true).await
        }
        Command::Keys { common, command } => {
            keys::run(&open_existing(&common).await?, command).await
        }
        Command::Tenant { common, command } => {
            tenant::run(&open_existing(&common).await?, command).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Worker { common, worker } => daemons::worker(common, worker).await,
        Command::Reconciler { common, command } => reconciler_command(common, command).await,
    }
}

/// `payonce config reference`: the Markdown table of every setting.
fn config_reference() -> anyhow::Result<ExitCode> {
    print!("{}", config_reference::markdown(&cli::definition()));
    Ok(ExitCode::SUCCESS)
}

/// `payonce config show`: every setting's effective value and its source.
fn config_show(matches: &ArgMatches, file: Option<&ConfigFile>) -> anyhow::Result<ExitCode> {
    let show = |name: &str, c: &clap::Command| c.find_subcommand(name).cloned();
    // The definition, not the file-applied copy: clap moves an argument it modified to the end.
    let root = cli::definition();
    let cmd = show("config", &root)
        .and_then(|c| show("show", &c))
        .context("the config show command")?;
    // Global flags (log_format) are defined on the root and reach every subcommand's matches.
    let args = root
        .get_arguments()
        .filter(|a| a.is_global_set())
        .chain(cmd.get_arguments());
    let matches = matches
        .subcommand_matches("config")
        .and_then(|m| m.subcommand_matches("show"))
        .context("config show matches")?;
    print!("{}", config_reference::show(args, matches, file));
    Ok(ExitCode::SUCCESS)
}

/// `payonce prune`: deletes what the retention windows let go, printing the counts as JSON.
async fn prune(common: &Common, reconciler: &ReconcilerArgs) -> anyhow::Result<ExitCode> {
    let ledger = open_existing(common).await?;
    // Retention windows on the database's clock (the process's own on SQLite).
    let now = ledger
        .now(payonce_core::clock::Clock::now(&SystemClock))
        .await?;
    let pruned = ledger.prune(&reconciler.retention(), now).await?;
    println!("{}", serde_json::to_string(&pruned)?);
    Ok(ExitCode::SUCCESS)
}

/// `payonce migrate`: applies pending migrations and records the key secret's fingerprint.
async fn migrate_command(common: &Common) -> anyhow::Result<ExitCode> {
    let ledger = migrate(common).await?;
    println!("migrations applied to {}", redact(&common.database_url));
    // The fingerprint is recorded at migration when the secret is at hand; otherwise the
    // first process that derives keys records it.
    if common.key_secret_set() {
        let secret = common.key_secret(&ledger).await?;
        println!("key secret {} is this ledger's", secret.fingerprint());
    }
    Ok(ExitCode::SUCCESS)
}

/// `payonce reconciler …`: opens the ledger, then runs the daemon or one on-call command.
async fn reconciler_command(
    common: Common,
    command: ReconcilerCommand,
) -> anyhow::Result<ExitCode> {
    let ledger = open_existing(&common).await?;
    match command {
        ReconcilerCommand::Run {
            reconciler,
            submit,
            grace,
        } => daemons::reconciler_daemon(&common, ledger, &reconciler, &submit, &grace).await,
        ReconcilerCommand::Sweep {
            once,
            dry_run,
            json,
            reconciler,
            submit,
        } => {
            let request = oncall::SweepRequest {
                once,
                dry_run,
                json,
                reconciler: &reconciler,
                submit: &submit,
            };
            oncall::sweep(&common, ledger, request).await
        }
        ReconcilerCommand::List {
            statuses,
            min_age_s,
            limit,
            json,
        } => oncall::list(ledger, &statuses, min_age_s, limit, json).await,
        ReconcilerCommand::Show { id, json } => oncall::show(&common, ledger, &id, json).await,
        ReconcilerCommand::Resolve {
            id,
            resolution,
            reference,
            reason,
            actor,
            json,
        } => {
            let request = oncall::ResolveRequest {
                id,
                resolution,
                reference,
                reason,
                actor,
                json,
            };
            oncall::resolve(ledger, request).await
        }
    }
}

fn main() -> ExitCode {
    let parsed = parse();
    let filter = match parsed.cli.command {
        Command::Demo(_) | Command::Config { .. } | Command::Probe { .. } | Command::Enqueue(_) => {
            ops::LOG_FILTER_QUIET
        }
        _ => ops::LOG_FILTER_DEFAULT,
    };
    ops::init_logging(parsed.cli.log_format, filter);
    // reqwest is built without a default TLS provider: install ring's before any client exists.
    ops::install_tls_provider();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("payonce: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let log_format = parsed.cli.log_format;
    match runtime.block_on(run(parsed)) {
        Ok(code) => code,
        // Once: a log collector reads the JSON line, a person the plain one.
        Err(error) => {
            match log_format {
                ops::LogFormat::Json => tracing::error!("{error:#}"),
                ops::LogFormat::Text => eprintln!("payonce: {error:#}"),
            }
            ExitCode::FAILURE
        }
    }
}

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
//! stack), `keys` (the API key commands), `tenant_app` (serve's stand-in tenant app, receiving codes), `tenant` (tenant settings), `enqueue` (the file intake command), `demo` (the INV-2048 story on it), `progress` (the demo's step display), `suggestion` (did you mean), `ops` (logging,
//! signals, the daemons' metrics endpoint).

mod banner;
mod cli;
mod config_file;
mod config_reference;
mod demo;
mod enqueue;
mod key_secret;
mod keys;
mod ops;
mod progress;
mod serve;
mod settings;
mod suggestion;
mod tenant;
mod tenant_app;

use anyhow::Context;
use clap::{ArgMatches, FromArgMatches};
use cli::{Cli, Command, ConfigCommand, ReconcilerCommand, ResolveAs};
use config_file::ConfigFile;
use payonce_reconciler::oncall::{self, Format};
use payonce_reconciler::{Reconciler, ReconcilerConfig};
use payonce_shared::clock::{SharedClock, SystemClock};
use payonce_shared::id::OperationId;
use payonce_shared::ledger::{self, Resolution, SharedLedger};
use payonce_shared::state::Status;
use payonce_worker::Worker;
use payonce_worker::config::owner_name;
use settings::{Common, ReconcilerArgs, SubmitArgs};
use std::process::ExitCode;
use std::sync::Arc;

fn format(json: bool) -> Format {
    if json { Format::Json } else { Format::Table }
}

fn clock() -> SharedClock {
    Arc::new(SystemClock)
}

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

async fn reconciler(
    common: &Common,
    ledger: SharedLedger,
    r: &ReconcilerArgs,
    submit: &SubmitArgs,
) -> anyhow::Result<Reconciler> {
    let owner = owner_name("reconciler");
    let mut config: ReconcilerConfig = r.config(owner, submit);
    config.retry.limiter = common.limiter()?;
    config.key_secret = key_secret_for_scan(common, &ledger).await?;
    Ok(Reconciler::with_processors(
        ledger,
        common.processors()?,
        clock(),
        config,
    ))
}

/// The key secret the processor scan recreates lost rows with, checked against the ledger (a
/// mismatch stops the reconciler); without one it only reports them.
async fn key_secret_for_scan(
    common: &Common,
    ledger: &SharedLedger,
) -> anyhow::Result<Option<payonce_shared::intention::KeySecret>> {
    if !common.key_secret_set() {
        tracing::warn!(
            "no key secret (PAYONCE_KEY_SECRET): payments the ledger lost will be reported, not recreated"
        );
        return Ok(None);
    }
    Ok(Some(common.key_secret(ledger).await?))
}

/// A process that derives no keys (the worker) still refuses a key secret that is not its
/// ledger's: it is a sign the whole deployment was given the wrong one.
async fn check_key_secret_if_set(common: &Common, ledger: &SharedLedger) -> anyhow::Result<()> {
    if common.key_secret_set() {
        common.key_secret(ledger).await?;
    }
    Ok(())
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
        } => {
            print!("{}", config_reference::markdown(&cli::definition()));
            Ok(ExitCode::SUCCESS)
        }
        Command::Config {
            command: ConfigCommand::Show { .. },
        } => {
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
            let matches = parsed
                .matches
                .subcommand_matches("config")
                .and_then(|m| m.subcommand_matches("show"))
                .context("config show matches")?;
            print!(
                "{}",
                config_reference::show(args, matches, parsed.file.as_ref())
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Simulator(args) => demo::run_simulator(args).await,
        Command::Enqueue(args) => enqueue::run(args).await,
        Command::Prune { common, reconciler } => {
            let ledger = open_existing(&common).await?;
            // Retention windows on the database's clock (the process's own on SQLite).
            let now = ledger
                .now(payonce_shared::clock::Clock::now(&SystemClock))
                .await?;
            let pruned = ledger.prune(&reconciler.retention(), now).await?;
            println!("{}", serde_json::to_string(&pruned)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Migrate { common } => {
            let ledger = migrate(&common).await?;
            println!("migrations applied to {}", redact(&common.database_url));
            // The fingerprint is recorded at migration when the secret is at hand; otherwise the
            // first process that derives keys records it.
            if common.key_secret_set() {
                let secret = common.key_secret(&ledger).await?;
                println!("key secret {} is this ledger's", secret.fingerprint());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Api { common, api } => {
            let ledger = open_existing(&common).await?;
            let mut config = api.config();
            config.key_secret = common.key_secret(&ledger).await?;
            config.adyen_merchant_account = Some(common.adyen_merchant_account.clone());
            // Only to read a payment method's card for the confirmation page and the object behind
            // a reference for the console, each from the operation's own processor (never to
            // submit): a processor that cannot be set up leaves the pages without them.
            let processors = common
                .processors()
                .inspect_err(|e| tracing::warn!(error = %format!("{e:#}"), "no processor client: the confirmation page shows no card"))
                .ok();
            // Approvals, links and sessions expire on the database's clock, as leases do.
            let clock = payonce_api::database_clock(ledger.clone(), clock()).await?;
            let served = ops::within_grace(ops::API_SHUTDOWN_GRACE, |shutdown| {
                payonce_api::serve(config, ledger, clock, processors, shutdown)
            })
            .await;
            if let Some(served) = served {
                served?;
            }
            Ok(ExitCode::SUCCESS)
        }
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
        Command::Worker { common, worker } => {
            let ledger = open_existing(&common).await?;
            check_key_secret_if_set(&common, &ledger).await?;
            let mut config = worker.config(owner_name("worker"));
            config.submit.limiter = common.limiter()?;
            let limiter = config.submit.limiter.clone();
            let w = Arc::new(
                Worker::with_processors(ledger.clone(), common.processors()?, clock(), config)
                    .map_err(anyhow::Error::msg)?,
            );
            tokio::spawn(ops::record_reachability(
                ledger.clone(),
                owner_name("worker"),
                std::future::pending(),
            ));
            ops::spawn_metrics(
                &common.metrics_listen,
                ops::MetricsState {
                    ledger,
                    worker: Some(w.metrics()),
                    reconciler: None,
                    limiter: Some(limiter),
                },
            )
            .await?;
            let grace = std::time::Duration::from_millis(worker.grace.shutdown_grace_ms);
            ops::within_grace(grace, |shutdown| w.run(shutdown)).await;
            Ok(ExitCode::SUCCESS)
        }
        Command::Reconciler { common, command } => {
            let ledger = open_existing(&common).await?;
            let now = || payonce_shared::clock::Clock::now(&SystemClock);
            match command {
                ReconcilerCommand::Run {
                    reconciler: r,
                    submit,
                    grace,
                } => {
                    let rec = Arc::new(reconciler(&common, ledger.clone(), &r, &submit).await?);
                    tokio::spawn(ops::record_reachability(
                        ledger.clone(),
                        owner_name("reconciler"),
                        std::future::pending(),
                    ));
                    ops::spawn_metrics(
                        &common.metrics_listen,
                        ops::MetricsState {
                            ledger,
                            worker: None,
                            reconciler: Some(rec.metrics()),
                            limiter: Some(rec.limiter()),
                        },
                    )
                    .await?;
                    let grace = std::time::Duration::from_millis(grace.shutdown_grace_ms);
                    ops::within_grace(grace, |shutdown| rec.run(shutdown)).await;
                    Ok(ExitCode::SUCCESS)
                }
                ReconcilerCommand::Sweep {
                    once,
                    dry_run,
                    json,
                    reconciler: r,
                    submit,
                } => {
                    anyhow::ensure!(
                        once,
                        "`sweep` runs one sweep: pass --once (the daemon is `reconciler run`)"
                    );
                    let rec = reconciler(&common, ledger.clone(), &r, &submit).await?;
                    let report = rec.sweep_once_waiting(dry_run).await?;
                    let attention = ledger
                        .count_by_status()
                        .await?
                        .iter()
                        .find(|c| c.status == Status::NeedsAttention)
                        .map_or(0, |c| c.count);
                    if json {
                        println!(
                            "{}",
                            serde_json::json!({ "report": report, "needs_attention": attention })
                        );
                    } else {
                        for action in &report.actions {
                            println!("  {action}");
                        }
                        println!("{} needs_attention={attention}", report.summary());
                    }
                    let unrecoverable = report.scan.as_ref().map_or(0, |s| s.unrecoverable);
                    Ok(if report.errors > 0 {
                        ExitCode::from(1)
                    } else if attention > 0 || unrecoverable > 0 || report.lost_rows > 0 {
                        ExitCode::from(3)
                    } else {
                        ExitCode::SUCCESS
                    })
                }
                ReconcilerCommand::List {
                    statuses,
                    min_age_s,
                    limit,
                    json,
                } => {
                    let parsed = statuses
                        .iter()
                        .map(|s| {
                            Status::parse(s).with_context(|| {
                                let known = payonce_shared::state::ALL_STATUSES.map(|s| s.as_str());
                                format!(
                                    "unknown status {s:?}{}; the states are {}",
                                    suggestion::hint(s, known),
                                    known.join(", ")
                                )
                            })
                        })
                        .collect::<anyhow::Result<Vec<_>>>()?;
                    print!(
                        "{}",
                        oncall::list(
                            ledger.as_ref(),
                            parsed,
                            min_age_s,
                            limit,
                            now(),
                            format(json)
                        )
                        .await?
                    );
                    Ok(ExitCode::SUCCESS)
                }
                ReconcilerCommand::Show { id, json } => {
                    let id = OperationId::parse(&id)?;
                    let processors = common.processors()?;
                    print!(
                        "{}",
                        oncall::show(ledger.as_ref(), Some(&processors), &id, now(), format(json))
                            .await?
                    );
                    Ok(ExitCode::SUCCESS)
                }
                ReconcilerCommand::Resolve {
                    id,
                    resolution,
                    reference,
                    reason,
                    actor,
                    json,
                } => {
                    let id = OperationId::parse(&id)?;
                    let resolution = match resolution {
                        ResolveAs::Succeeded => Resolution::Succeeded {
                            reference: reference
                                .context("--as succeeded needs --reference pi_…")?,
                        },
                        ResolveAs::Failed => Resolution::Failed,
                        ResolveAs::Retry => Resolution::RetrySameKey,
                    };
                    let actor = format!("{}:{actor}", ledger::Role::OnCall.as_str());
                    print!(
                        "{}",
                        oncall::resolve(
                            ledger.as_ref(),
                            &id,
                            resolution,
                            &actor,
                            &reason,
                            now(),
                            format(json)
                        )
                        .await?
                    );
                    Ok(ExitCode::SUCCESS)
                }
            }
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

//! The separate deployables' long-running commands: `payonce api`, `payonce worker` and `payonce
//! reconciler run`, each serving until SIGTERM or Ctrl-C and then stopping within its grace.

use crate::ops;
use crate::settings::{ApiArgs, Common, GraceArgs, ReconcilerArgs, SubmitArgs, WorkerArgs};
use payonce_core::clock::{SharedClock, SystemClock};
use payonce_ledger::SharedLedger;
use payonce_reconciler::{Reconciler, ReconcilerConfig};
use payonce_worker::Worker;
use payonce_worker::config::owner_name;
use std::process::ExitCode;
use std::sync::Arc;

fn clock() -> SharedClock {
    Arc::new(SystemClock)
}

/// `payonce api`: serves the api on the ledger named by `common`.
pub async fn api(common: Common, api: ApiArgs) -> anyhow::Result<ExitCode> {
    let ledger = crate::open_existing(&common).await?;
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

/// `payonce worker`: claims and submits operations, with its metrics endpoint.
pub async fn worker(common: Common, worker: WorkerArgs) -> anyhow::Result<ExitCode> {
    let ledger = crate::open_existing(&common).await?;
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

/// `payonce reconciler run`: sweeps every interval on `ledger`, with its metrics endpoint.
pub async fn reconciler_daemon(
    common: &Common,
    ledger: SharedLedger,
    r: &ReconcilerArgs,
    submit: &SubmitArgs,
    grace: &GraceArgs,
) -> anyhow::Result<ExitCode> {
    let rec = Arc::new(reconciler(common, ledger.clone(), r, submit).await?);
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

/// The reconciler the daemon and cron's sweep run: `common`'s processors and limiter, and the key
/// secret its processor scan recreates lost rows with.
pub async fn reconciler(
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
) -> anyhow::Result<Option<payonce_core::intention::KeySecret>> {
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

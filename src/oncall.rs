//! The reconciler's on-call and cron commands: `payonce reconciler sweep --once | list | show |
//! resolve`, each one pass over the ledger, printed as a table or JSON.

use crate::cli::ResolveAs;
use crate::settings::{Common, ReconcilerArgs, SubmitArgs};
use anyhow::Context;
use payonce_core::clock::{Clock, SystemClock, Timestamp};
use payonce_core::id::OperationId;
use payonce_core::state::Status;
use payonce_ledger::{self as ledger, Resolution, SharedLedger};
use payonce_reconciler::oncall::{self, Format};
use std::process::ExitCode;

fn format(json: bool) -> Format {
    if json { Format::Json } else { Format::Table }
}

fn now() -> Timestamp {
    SystemClock.now()
}

/// What `reconciler sweep` was asked for: one pass, whether to write, how to print.
pub struct SweepRequest<'a> {
    /// `--once` (required: the daemon is `reconciler run`).
    pub once: bool,
    /// Report what would be done; write nothing.
    pub dry_run: bool,
    /// JSON output.
    pub json: bool,
    /// The reconciler's settings.
    pub reconciler: &'a ReconcilerArgs,
    /// The submission settings its retries use.
    pub submit: &'a SubmitArgs,
}

/// `reconciler sweep --once`: one sweep for cron. Exit 0: clean; 1: errors; 3: attention needed.
pub async fn sweep(
    common: &Common,
    ledger: SharedLedger,
    request: SweepRequest<'_>,
) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        request.once,
        "`sweep` runs one sweep: pass --once (the daemon is `reconciler run`)"
    );
    let rec =
        crate::daemons::reconciler(common, ledger.clone(), request.reconciler, request.submit)
            .await?;
    let report = rec.sweep_once_waiting(request.dry_run).await?;
    let attention = ledger
        .count_by_status()
        .await?
        .iter()
        .find(|c| c.status == Status::NeedsAttention)
        .map_or(0, |c| c.count);
    if request.json {
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

/// `reconciler list`: operations by state and age.
pub async fn list(
    ledger: SharedLedger,
    statuses: &[String],
    min_age_s: i64,
    limit: u32,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let parsed = statuses
        .iter()
        .map(|s| {
            Status::parse(s).with_context(|| {
                let known = payonce_core::state::ALL_STATUSES.map(|s| s.as_str());
                format!(
                    "unknown status {s:?}{}; the states are {}",
                    crate::suggestion::hint(s, known),
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

/// `reconciler show`: one operation with its history and the processor's view.
pub async fn show(
    common: &Common,
    ledger: SharedLedger,
    id: &str,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let id = OperationId::parse(id)?;
    let processors = common.processors()?;
    print!(
        "{}",
        oncall::show(ledger.as_ref(), Some(&processors), &id, now(), format(json)).await?
    );
    Ok(ExitCode::SUCCESS)
}

/// What `reconciler resolve` was told about an operation, and by whom.
pub struct ResolveRequest {
    /// Operation id.
    pub id: String,
    /// What happened.
    pub resolution: ResolveAs,
    /// The processor reference (required with `--as succeeded`).
    pub reference: Option<String>,
    /// Why (recorded in the audit trail).
    pub reason: String,
    /// Who is resolving.
    pub actor: String,
    /// JSON output.
    pub json: bool,
}

/// `reconciler resolve`: settles an unknown or needs_attention operation by hand.
pub async fn resolve(ledger: SharedLedger, request: ResolveRequest) -> anyhow::Result<ExitCode> {
    let id = OperationId::parse(&request.id)?;
    let resolution = match request.resolution {
        ResolveAs::Succeeded => Resolution::Succeeded {
            reference: request
                .reference
                .context("--as succeeded needs --reference pi_…")?,
        },
        ResolveAs::Failed => Resolution::Failed,
        ResolveAs::Retry => Resolution::RetrySameKey,
    };
    let actor = format!("{}:{}", ledger::Role::OnCall.as_str(), request.actor);
    print!(
        "{}",
        oncall::resolve(
            ledger.as_ref(),
            &id,
            resolution,
            &actor,
            &request.reason,
            now(),
            format(request.json)
        )
        .await?
    );
    Ok(ExitCode::SUCCESS)
}

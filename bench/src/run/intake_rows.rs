//! The intake section's rows: creating and approving by every way in, against plain single-row
//! inserts and `COPY` of as many rows, with what each wrote.

use super::{Outcome, TARGET_INTAKE_BATCH, TARGET_INTAKE_ONE, progress};
use crate::intake;
use crate::report::{Target, per_second, thousands};
use crate::settings::Settings;

/// The least batch-route / `COPY` ratio (issue 52).
const TARGET_INTAKE_VS_COPY: f64 = 0.25;

pub(super) async fn intake_rows(s: &Settings, out: &mut Outcome) -> anyhow::Result<()> {
    progress("creating and approving at full speed (insert baseline first)");
    let i = intake::measure(
        &s.admin_url,
        s.clients,
        s.intake_operations,
        s.payonce_bin.as_deref(),
    )
    .await?;
    let scaled = s.intake_operations * intake::BATCH_ROWS_SCALE;
    let size = intake::batch_size(s.clients, scaled);
    let mut ways = vec![
        (
            format!(
                "operations created and approved through the ledger calls ({} ops, {} concurrent callers)",
                thousands(s.intake_operations),
                s.clients
            ),
            &i.payonce,
            None,
        ),
        (
            format!(
                "same, through the HTTP API with a service key (create, then approve) ({} ops, {} concurrent callers)",
                thousands(s.intake_operations),
                s.clients
            ),
            &i.http,
            None,
        ),
        (
            format!(
                "same, one request per operation (`POST /v1/operations` with its approval) ({} ops, {} concurrent callers, {:.1} per ledger write)",
                thousands(s.intake_operations),
                s.clients,
                i.http_one_per_group
            ),
            &i.http_one,
            Some(Target::AtLeast(TARGET_INTAKE_ONE)),
        ),
        (
            format!(
                "same, `POST /v1/operations/batch` of {size} ({} ops, {} concurrent callers)",
                thousands(scaled),
                s.clients
            ),
            &i.http_batch,
            Some(Target::AtLeast(TARGET_INTAKE_BATCH)),
        ),
    ];
    if let Some(enqueue) = &i.enqueue {
        ways.push((
            format!(
                "same, `payonce enqueue` on a CSV file (one process, batches of 1,000 one after another) ({} ops)",
                thousands(scaled)
            ),
            enqueue,
            None,
        ));
    } else {
        progress("payonce enqueue: skipped (no payonce binary next to payonce-bench)");
    }
    for (what, rate, target) in ways {
        out.table.compare(
            what,
            (rate.per_second(), &per_second(rate)),
            (
                i.baseline.per_second(),
                &format!("{} plain single-row inserts", per_second(&i.baseline)),
            ),
            target,
        );
    }
    out.table.compare(
        format!(
            "the batch route against `COPY` of as many plain rows ({} rows, one client)",
            thousands(scaled)
        ),
        (i.http_batch.per_second(), &per_second(&i.http_batch)),
        (
            i.copy.per_second(),
            &format!("{} `COPY`", per_second(&i.copy)),
        ),
        Some(Target::AtLeast(TARGET_INTAKE_VS_COPY)),
    );
    let w = &i.wal;
    out.table.fact(
        "intake: Postgres written per operation created and approved (WAL)",
        format!(
            "one request each: {}; the batch route: {}; against a plain single-row insert: {}; a `COPY`ed row: {}",
            w.http_one.per(i.http_one.count),
            w.http_batch.per(i.http_batch.count),
            w.baseline.per(i.baseline.count),
            w.copy.per(i.copy.count),
        ),
    );
    out.intake = Some(i);
    Ok(())
}

//! End-to-end approved operations per second on Postgres (claim, submission record, fenced outcome,
//! audit event by trigger) with the in-process processor, next to the plain job lifecycle measured
//! on the same server in the same run, each on a fresh database.

use crate::baseline;
use crate::database::ScratchDatabase;
use crate::drive::{self, Fleet};
use crate::inprocess::InProcessProcessor;
use crate::load::{self, Kind};
use crate::memory;
use crate::report::Rate;
use payonce_shared::ledger::SharedLedger;
use std::sync::Arc;
use std::time::Duration;

/// The payonce figure and its baselines.
#[derive(Debug, Clone)]
pub struct Throughput {
    /// payonce, end to end.
    pub payonce: Rate,
    /// Plain lifecycle, one job per statement.
    pub baseline_single: Rate,
    /// Plain lifecycle, the worker's claim batch per statement.
    pub baseline_batched: Rate,
    /// Peak resident memory of this process while the workers ran, KiB.
    pub peak_kib: Option<u64>,
    /// Whether the peak was reset before the workers started (else it covers the run so far).
    pub peak_reset: bool,
}

/// Measures the baselines (with `clients` connections) and then payonce (a pool of `clients`
/// connections shared by the fleet) over `operations` pre-approved operations.
pub async fn postgres(
    admin_url: &str,
    clients: u32,
    fleet: &Fleet,
    operations: u64,
    deadline: Duration,
) -> anyhow::Result<Throughput> {
    let batch = fleet.config.batch_size;
    let rounds = |batch: u32| {
        u32::try_from(operations / u64::from(clients * batch))
            .unwrap_or(u32::MAX)
            .max(1)
    };
    let db = ScratchDatabase::create(admin_url).await?;
    let baseline_single = baseline::job_lifecycle(&db.url, clients, 1, rounds(1)).await?;
    db.drop_now().await?;
    let db = ScratchDatabase::create(admin_url).await?;
    let baseline_batched = baseline::job_lifecycle(&db.url, clients, batch, rounds(batch)).await?;
    db.drop_now().await?;

    let db = ScratchDatabase::create(admin_url).await?;
    let ledger = db.ledger(clients).await?;
    load::postgres(
        &db.url,
        Kind::Ready,
        1,
        i64::try_from(operations)?,
        crate::now_ms(),
    )
    .await?;
    let shared: SharedLedger = Arc::new(ledger.clone());
    let processor = Arc::new(InProcessProcessor::default());
    let peak_reset = memory::reset_peak();
    let payonce =
        drive::until_recorded(&shared, processor.clone(), fleet, operations, deadline).await?;
    let peak_kib = memory::peak_kib();
    drive::check_all_succeeded(&shared, operations).await?;
    crate::check_paid_once(&processor, operations)?;
    ledger.pool().close().await;
    db.drop_now().await?;
    Ok(Throughput {
        payonce,
        baseline_single,
        baseline_batched,
        peak_kib,
        peak_reset,
    })
}

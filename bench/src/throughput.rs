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
use payonce_ledger::SharedLedger;
use std::sync::Arc;
use std::time::Duration;

/// Jobs per statement in the batched plain lifecycle: the 32 issue 16's target is stated against,
/// whatever claim batch the worker uses.
pub const BASELINE_BATCH: u32 = 32;

/// The payonce figure and its baselines.
#[derive(Debug, Clone)]
pub struct Throughput {
    /// payonce, end to end: the median of [`Throughput::payonce_samples`].
    pub payonce: Rate,
    /// Each repetition's payonce drain, in the order run.
    pub payonce_samples: Vec<Rate>,
    /// Plain lifecycle, one job per statement (measured once: it is the slow baseline).
    pub baseline_single: Rate,
    /// Plain lifecycle, [`BASELINE_BATCH`] jobs per statement: the median of its samples.
    pub baseline_batched: Rate,
    /// Each repetition's batched baseline, in the order run.
    pub batched_samples: Vec<Rate>,
    /// Peak resident memory of this process while the workers ran, KiB.
    pub peak_kib: Option<u64>,
    /// Whether the peak was reset before the workers started (else it covers the run so far).
    pub peak_reset: bool,
}

/// Measures the single-statement baseline once, then `repeats` times the batched baseline and
/// payonce's drain alternately (with `clients` connections each; the fleet shares one pool of
/// `clients`) over `operations` pre-approved operations. One drain of about a second moved by ±10 %
/// with what ran just before it; alternating repetitions expose both to the same drift, and the
/// medians are reported with every sample.
pub async fn postgres(
    admin_url: &str,
    clients: u32,
    fleet: &Fleet,
    operations: u64,
    repeats: usize,
    deadline: Duration,
) -> anyhow::Result<Throughput> {
    let batch = BASELINE_BATCH;
    let rounds = |batch: u32| {
        u32::try_from(operations / u64::from(clients * batch))
            .unwrap_or(u32::MAX)
            .max(1)
    };
    let db = ScratchDatabase::create(admin_url).await?;
    let baseline_single = baseline::job_lifecycle(&db.url, clients, 1, rounds(1)).await?;
    db.drop_now().await?;

    let peak_reset = memory::reset_peak();
    let mut batched_samples = Vec::with_capacity(repeats);
    let mut payonce_samples = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let db = ScratchDatabase::create(admin_url).await?;
        batched_samples
            .push(baseline::job_lifecycle(&db.url, clients, batch, rounds(batch)).await?);
        db.drop_now().await?;
        payonce_samples.push(drain(admin_url, 1, clients, fleet, operations, deadline).await?);
    }
    let peak_kib = memory::peak_kib();
    let (Some(payonce), Some(baseline_batched)) =
        (median(&payonce_samples), median(&batched_samples))
    else {
        anyhow::bail!("at least one repetition");
    };
    Ok(Throughput {
        payonce,
        payonce_samples,
        baseline_single,
        baseline_batched,
        batched_samples,
        peak_kib,
        peak_reset,
    })
}

/// The sample with the middle rate (the upper middle of an even count); `None` for no samples.
fn median(samples: &[Rate]) -> Option<Rate> {
    let mut sorted = samples.to_vec();
    sorted.sort_by(|a, b| a.per_second().total_cmp(&b.per_second()));
    sorted.get(sorted.len() / 2).copied()
}

/// Drains `operations` bulk-loaded ready operations on a fresh database with `fleet.workers`
/// engines spread over `pools` ledgers of `connections` each (one pool per engine: as that many
/// worker processes would), then checks every operation succeeded and was paid exactly once.
pub async fn drain(
    admin_url: &str,
    pools: usize,
    connections: u32,
    fleet: &Fleet,
    operations: u64,
    deadline: Duration,
) -> anyhow::Result<Rate> {
    let db = ScratchDatabase::create(admin_url).await?;
    let mut ledgers = Vec::with_capacity(pools);
    for _ in 0..pools.max(1) {
        ledgers.push(db.ledger(connections).await?);
    }
    load::postgres(
        &db.url,
        Kind::Ready,
        1,
        i64::try_from(operations)?,
        crate::now_ms(),
    )
    .await?;
    let shared: Vec<SharedLedger> = ledgers
        .iter()
        .map(|l| Arc::new(l.clone()) as SharedLedger)
        .collect();
    let processor = Arc::new(InProcessProcessor::default());
    let rate =
        drive::until_recorded_on(&shared, processor.clone(), fleet, operations, deadline).await?;
    drive::check_all_succeeded(&shared[0], operations).await?;
    crate::check_paid_once(&processor, operations)?;
    for ledger in ledgers {
        ledger.pool().close().await;
    }
    db.drop_now().await?;
    Ok(rate)
}

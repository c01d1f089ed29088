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
use crate::wal::{Cost, Mark};
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
    /// What each of those drains wrote, ready → succeeded, in the same order.
    pub payonce_wal: Vec<Cost>,
    /// Plain lifecycle, one job per statement (measured once: it is the slow baseline).
    pub baseline_single: Rate,
    /// Plain lifecycle, [`BASELINE_BATCH`] jobs per statement: the median of its samples.
    pub baseline_batched: Rate,
    /// Each repetition's batched baseline, in the order run.
    pub batched_samples: Vec<Rate>,
    /// What each batched baseline wrote (insert, claim, done), in the same order.
    pub batched_wal: Vec<Cost>,
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
    let (mut payonce_wal, mut batched_wal) = (Vec::new(), Vec::new());
    for _ in 0..repeats {
        let db = ScratchDatabase::create(admin_url).await?;
        let mark = Mark::take(&db.url).await?;
        batched_samples
            .push(baseline::job_lifecycle(&db.url, clients, batch, rounds(batch)).await?);
        batched_wal.push(mark.cost().await?);
        db.drop_now().await?;
        let drained = drain(admin_url, 1, clients, fleet, operations, deadline).await?;
        payonce_samples.push(drained.rate);
        payonce_wal.push(drained.wal);
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
        payonce_wal,
        baseline_single,
        baseline_batched,
        batched_samples,
        batched_wal,
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

/// One drain: its rate and what it wrote.
#[derive(Debug, Clone, Copy)]
pub struct Drain {
    /// Operations recorded per second.
    pub rate: Rate,
    /// WAL, commits and statements from the first claim to the last outcome.
    pub wal: Cost,
    /// CPU time of every `postgres` process over the drain (the machine's: other work counts).
    pub postgres_cpu: Duration,
}

/// The cost with the median WAL bytes among `costs`, if any.
pub fn median_cost(costs: &[Cost]) -> Option<Cost> {
    let mut sorted = costs.to_vec();
    sorted.sort_by_key(|c| c.bytes);
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
) -> anyhow::Result<Drain> {
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
    let mark = Mark::take(&db.url).await?;
    let cpu = crate::process::postgres_cpu();
    let rate =
        drive::until_recorded_on(&shared, processor.clone(), fleet, operations, deadline).await?;
    let postgres_cpu = crate::process::postgres_cpu().saturating_sub(cpu);
    let wal = mark.cost().await?;
    drive::check_all_succeeded(&shared[0], operations).await?;
    crate::check_paid_once(&processor, operations)?;
    for ledger in ledgers {
        ledger.pool().close().await;
    }
    db.drop_now().await?;
    Ok(Drain {
        rate,
        wal,
        postgres_cpu,
    })
}

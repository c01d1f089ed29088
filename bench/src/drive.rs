//! Runs real worker engines (`payonce_worker::Worker::run`, the daemon's loop) over a ledger until a
//! given number of operations are recorded, and checks every one was paid exactly once.

use crate::report::Rate;
use anyhow::Context;
use payonce_core::clock::SystemClock;
use payonce_core::state::Status;
use payonce_ledger::SharedLedger;
use payonce_processor::Processor;
use payonce_worker::{Worker, WorkerConfig};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the driver looks at the workers' counters (in memory: no load on the database).
pub const PROGRESS_POLL: Duration = Duration::from_millis(2);

/// What the workers are given.
#[derive(Debug, Clone)]
pub struct Fleet {
    /// Worker engines sharing the ledger (as processes would share the database).
    pub workers: usize,
    /// Each engine's limits.
    pub config: WorkerConfig,
}

/// Starts the fleet, waits until `expected` outcomes are recorded (failing after `deadline`), stops
/// it gracefully, and returns the recording rate from start to the last outcome.
pub async fn until_recorded(
    ledger: &SharedLedger,
    processor: Arc<dyn Processor>,
    fleet: &Fleet,
    expected: u64,
    deadline: Duration,
) -> anyhow::Result<Rate> {
    until_recorded_on(
        std::slice::from_ref(ledger),
        processor,
        fleet,
        expected,
        deadline,
    )
    .await
}

/// [`until_recorded`] with engine `n` on `ledgers[n % len]`: one pool per engine, as separate
/// worker processes on one database would have.
pub async fn until_recorded_on(
    ledgers: &[SharedLedger],
    processor: Arc<dyn Processor>,
    fleet: &Fleet,
    expected: u64,
    deadline: Duration,
) -> anyhow::Result<Rate> {
    anyhow::ensure!(!ledgers.is_empty(), "no ledger to drain");
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut metrics = Vec::new();
    let mut runs = Vec::new();
    let started = Instant::now();
    for n in 0..fleet.workers {
        let mut config = fleet.config.clone();
        config.owner = format!("{}-{n}", config.owner);
        let worker = Arc::new(
            Worker::new(
                ledgers[n % ledgers.len()].clone(),
                processor.clone(),
                Arc::new(SystemClock),
                config,
            )
            .map_err(|e| anyhow::anyhow!("worker config: {e}"))?,
        );
        metrics.push(worker.metrics());
        let mut stop = stop_rx.clone();
        runs.push(tokio::spawn(worker.run(async move {
            let _ = stop.wait_for(|s| *s).await;
        })));
    }
    let recorded = || -> u64 {
        metrics
            .iter()
            .map(|m| {
                m.execution.succeeded.get()
                    + m.execution.failed.get()
                    + m.execution.unknown.get()
                    + m.execution.rejected.get()
                    + m.execution.needs_attention.get()
            })
            .sum()
    };
    while recorded() < expected {
        if started.elapsed() > deadline {
            let _ = stop_tx.send(true);
            anyhow::bail!(
                "only {} of {expected} operations recorded within {deadline:?}",
                recorded()
            );
        }
        tokio::time::sleep(PROGRESS_POLL).await;
    }
    let elapsed = started.elapsed();
    if std::env::var_os("PAYONCE_BENCH_DEBUG").is_some() {
        for m in &metrics {
            eprintln!(
                "claims {} with outcomes {} claimed {} lane reads {} record writes {}",
                m.claims.get(),
                m.claims_with_outcomes.get(),
                m.claimed.get(),
                m.lane_reads.get(),
                m.record_writes.get()
            );
        }
    }
    let _ = stop_tx.send(true);
    for run in runs {
        run.await.context("a worker engine panicked")?;
    }
    Ok(Rate::new(recorded(), elapsed))
}

/// Checks the ledger holds exactly `expected` succeeded operations and nothing else in flight.
pub async fn check_all_succeeded(ledger: &SharedLedger, expected: u64) -> anyhow::Result<()> {
    let mut succeeded = 0_u64;
    for c in ledger.count_by_status().await? {
        match c.status {
            Status::Succeeded => succeeded = c.count as u64,
            other => anyhow::bail!("{} operations left {}", c.count, other.as_str()),
        }
    }
    anyhow::ensure!(
        succeeded == expected,
        "{succeeded} operations succeeded, expected {expected}"
    );
    Ok(())
}

/// When a drain worked, from the ledger's own timestamps (ms since the epoch, the worker's clock):
/// its first claim (the first move out of `ready`) and its last outcome (the last move into
/// `succeeded`). Unlike a poll, neither is late by the poll's interval.
#[derive(Debug, Clone, Copy)]
pub struct WorkWindow {
    /// The first claim, ms.
    pub first_claim_ms: i64,
    /// The last outcome, ms.
    pub last_outcome_ms: i64,
}

impl WorkWindow {
    /// Reads the window of the drain on `pool`'s database.
    pub async fn read(pool: &sqlx::PgPool) -> anyhow::Result<Self> {
        let (first, last): (Option<i64>, Option<i64>) = sqlx::query_as(
            "SELECT (SELECT MIN(at) FROM operation_events WHERE from_status = 'ready' \
               AND to_status = 'executing'), \
             (SELECT MAX(at) FROM operation_events WHERE to_status = 'succeeded' \
               AND from_status = 'executing')",
        )
        .fetch_one(pool)
        .await
        .context("read the drain's first claim and last outcome")?;
        match (first, last) {
            (Some(first_claim_ms), Some(last_outcome_ms)) => Ok(WorkWindow {
                first_claim_ms,
                last_outcome_ms,
            }),
            _ => anyhow::bail!("the ledger logged no claim or no outcome"),
        }
    }

    /// `count` operations over the window (at least 1 ms).
    pub fn rate(&self, count: u64) -> Rate {
        let ms = (self.last_outcome_ms - self.first_claim_ms).max(1);
        Rate::new(count, Duration::from_millis(ms.unsigned_abs()))
    }
}

//! Reconciler sweep cost: 1,000 stuck operations (a crashed worker's expired leases, submissions
//! recorded, payments made) among 100,000 and among 1,000,000 rows, swept by the real
//! `Reconciler::sweep_once`. If the cost follows stuck work, not table size, the ratio is near 1.

use crate::database::ScratchDatabase;
use crate::inprocess::InProcessProcessor;
use crate::load::{self, Kind};
use payonce_core::clock::SystemClock;
use payonce_ledger::SharedLedger;
use payonce_reconciler::{Reconciler, ReconcilerConfig};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Connections the sweeping reconciler's ledger may use: `payonce reconciler`'s default pool.
const SWEEP_CONNECTIONS: u32 = 16;

/// One table size's measurement.
#[derive(Debug, Clone)]
pub struct SweepCost {
    /// Rows in the table.
    pub rows: i64,
    /// Stuck rows among them.
    pub stuck: i64,
    /// Median time of one sweep that resolves all stuck rows.
    pub median: Duration,
    /// Every sweep's time, in order.
    pub samples: Vec<Duration>,
}

/// Loads `rows` rows of which the last `stuck` are stuck, then sweeps `repeats` times (putting the
/// stuck rows back in between) and checks each sweep resolved all of them by lookup, paying nothing.
pub async fn measure(
    admin_url: &str,
    rows: i64,
    stuck: i64,
    repeats: usize,
) -> anyhow::Result<SweepCost> {
    anyhow::ensure!(stuck > 0 && stuck <= rows, "stuck must be 1..=rows");
    let db = ScratchDatabase::create(admin_url).await?;
    let ledger: SharedLedger = Arc::new(db.ledger(SWEEP_CONNECTIONS).await?);
    let now = crate::now_ms();
    let first_stuck = rows - stuck + 1;
    if first_stuck > 1 {
        load::postgres(&db.url, Kind::Succeeded, 1, first_stuck - 1, now).await?;
    }
    load::postgres(&db.url, Kind::Stuck, first_stuck, rows, now).await?;
    // The crashed worker's requests did reach the processor: a lookup finds each payment.
    let processor = Arc::new(InProcessProcessor::default());
    for i in first_stuck..=rows {
        let id = load::operation_id(i);
        processor.preload_payment(&id, &format!("payonce-{id}"));
    }
    let mut config = ReconcilerConfig::new("bench-reconciler");
    config.batch_size = u32::try_from(stuck)?;
    let reconciler = Reconciler::new(
        ledger.clone(),
        processor.clone(),
        Arc::new(SystemClock),
        config,
    );
    let mut samples = Vec::with_capacity(repeats);
    for repeat in 0..repeats {
        if repeat > 0 {
            load::restick(&db.url, first_stuck, rows, crate::now_ms()).await?;
        }
        let started = Instant::now();
        let report = reconciler.sweep_once(false).await?;
        samples.push(started.elapsed());
        let stuck32 = u32::try_from(stuck)?;
        anyhow::ensure!(
            report.marked_unknown == stuck32
                && report.resolved_succeeded == stuck32
                && report.errors == 0,
            "sweep {repeat} over {rows} rows did not resolve all {stuck}: {}",
            report.summary()
        );
    }
    anyhow::ensure!(
        processor.requests() == 0,
        "the sweep submitted {} payments; it must resolve by lookup",
        processor.requests()
    );
    drop(reconciler);
    drop(ledger);
    db.drop_now().await?;
    let mut sorted = samples.clone();
    sorted.sort();
    Ok(SweepCost {
        rows,
        stuck,
        median: sorted[sorted.len() / 2],
        samples,
    })
}

//! Claim-to-submit latency at moderate load: operations are created and approved through the real
//! ledger calls at a fixed rate while a worker runs (woken by LISTEN/NOTIFY), and the latencies are
//! read back from the audit trail the trigger wrote.

use crate::database::ScratchDatabase;
use crate::drive::{self, Fleet};
use crate::inprocess::InProcessProcessor;
use crate::intake;
use payonce_ledger::SharedLedger;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Tasks creating and approving operations (each paced on its own share of the schedule).
const FEEDERS: u64 = 4;

/// Percentiles from the audit trail, in ms (the trail's resolution). A claim is its `claim` event, or
/// the one `submission_started` a claim that recorded its submission logs (from `ready`): that claim
/// and its submission record are one event, 0 ms apart.
const PERCENTILES: &str = "WITH a AS (SELECT operation_id, at FROM operation_events WHERE event = 'approve'), \
       c AS (SELECT operation_id, attempt, at FROM operation_events \
             WHERE event = 'claim' OR (event = 'submission_started' AND from_status = 'ready')), \
       s AS (SELECT operation_id, attempt, at FROM operation_events WHERE event = 'submission_started') \
     SELECT COUNT(*) AS n, \
       percentile_disc(0.5) WITHIN GROUP (ORDER BY s.at - c.at) AS submit_p50, \
       percentile_disc(0.99) WITHIN GROUP (ORDER BY s.at - c.at) AS submit_p99, \
       percentile_disc(0.5) WITHIN GROUP (ORDER BY c.at - a.at) AS wait_p50, \
       percentile_disc(0.99) WITHIN GROUP (ORDER BY c.at - a.at) AS wait_p99 \
     FROM c JOIN s USING (operation_id, attempt) JOIN a USING (operation_id)";

/// Latencies at one offered load.
#[derive(Debug, Clone)]
pub struct Latencies {
    /// Operations measured.
    pub operations: u64,
    /// Offered rate, operations per second.
    pub offered_per_second: u64,
    /// Claim to submission record, p50 and p99, ms.
    pub claim_to_submit_ms: (i64, i64),
    /// Approval committed to claim, p50 and p99, ms.
    pub approve_to_claim_ms: (i64, i64),
}

/// Offers `operations` at `per_second` to a running fleet and reads the latencies back.
pub async fn moderate_load(
    admin_url: &str,
    clients: u32,
    fleet: &Fleet,
    operations: u64,
    per_second: u64,
    deadline: Duration,
) -> anyhow::Result<Latencies> {
    anyhow::ensure!(per_second > 0, "the offered rate must be positive");
    let db = ScratchDatabase::create(admin_url).await?;
    let ledger = db.ledger(clients).await?;
    let shared: SharedLedger = Arc::new(ledger.clone());
    let processor = Arc::new(InProcessProcessor::default());
    let drained = {
        let shared = shared.clone();
        let processor = processor.clone();
        let fleet = fleet.clone();
        tokio::spawn(async move {
            drive::until_recorded(&shared, processor, &fleet, operations, deadline).await
        })
    };
    let start = Instant::now();
    let mut feeders = tokio::task::JoinSet::new();
    for feeder in 0..FEEDERS {
        let shared = shared.clone();
        feeders.spawn(async move {
            let mut i = feeder;
            while i < operations {
                let due = start + Duration::from_micros(i * 1_000_000 / per_second);
                tokio::time::sleep_until(due.into()).await;
                intake::create_and_approve(&shared, &format!("bench:latency:{i}")).await?;
                i += FEEDERS;
            }
            Ok::<(), anyhow::Error>(())
        });
    }
    while let Some(fed) = feeders.join_next().await {
        fed??;
    }
    drained.await??;
    drive::check_all_succeeded(&shared, operations).await?;
    crate::check_paid_once(&processor, operations)?;
    let row = sqlx::query(PERCENTILES).fetch_one(ledger.pool()).await?;
    use sqlx::Row;
    let n: i64 = row.try_get("n")?;
    anyhow::ensure!(
        u64::try_from(n).ok() == Some(operations),
        "the audit trail has {n} claim-to-submit pairs for {operations} operations"
    );
    let latencies = Latencies {
        operations,
        offered_per_second: per_second,
        claim_to_submit_ms: (row.try_get("submit_p50")?, row.try_get("submit_p99")?),
        approve_to_claim_ms: (row.try_get("wait_p50")?, row.try_get("wait_p99")?),
    };
    ledger.pool().close().await;
    db.drop_now().await?;
    Ok(latencies)
}

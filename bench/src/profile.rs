//! Where one batch's time goes: the worker's hot-path ledger calls (the claim that records the
//! submission start, then the outcome record) timed one after another, with nothing else running.

use crate::database::ScratchDatabase;
use crate::load::{self, Kind};
use payonce_ledger::{Fence, LeaseHolder, Paid, Queue, Recorded};
use std::time::{Duration, Instant};

/// Mean time per call of each hot-path step.
#[derive(Debug, Clone, Default)]
pub struct StepCosts {
    /// Batches timed.
    pub batches: u32,
    /// Operations per batch.
    pub batch: u32,
    /// `claim_to_submit` (the claim and the batch's submission starts, one statement).
    pub claim: Duration,
    /// `record_batch` (succeeded outcomes).
    pub record: Duration,
}

/// Times `batches` rounds of claim (with submission starts) → record of `batch` operations each.
pub async fn hot_path(admin_url: &str, batch: u32, batches: u32) -> anyhow::Result<StepCosts> {
    let db = ScratchDatabase::create(admin_url).await?;
    let ledger = db.ledger(2).await?;
    let n = i64::from(batch) * i64::from(batches);
    load::postgres(&db.url, Kind::Ready, 1, n, crate::now_ms()).await?;
    let mut costs = StepCosts {
        batches,
        batch,
        ..StepCosts::default()
    };
    for _ in 0..batches {
        let t = Instant::now();
        let claimed = ledger
            .claim_to_submit(
                &LeaseHolder {
                    owner: "profile",
                    lease_ttl: Duration::from_secs(30),
                },
                batch,
                crate::now(),
            )
            .await?;
        costs.claim += t.elapsed();
        anyhow::ensure!(
            claimed
                .iter()
                .all(|o| o.first_submitted_attempt == Some(o.attempt)),
            "a claim to submit did not record its submission start"
        );
        let items: Vec<_> = claimed
            .iter()
            .map(|o| {
                (
                    Fence::of(o),
                    Recorded::Succeeded(Paid {
                        reference: format!("pi_{}", o.id.as_str()),
                        result: serde_json::json!({ "status": "succeeded" }),
                    }),
                )
            })
            .collect();
        let t = Instant::now();
        let recorded = ledger.record_batch(&items, "profile", crate::now()).await?;
        costs.record += t.elapsed();
        anyhow::ensure!(recorded.iter().all(|r| *r), "a fresh claim lost its fence");
    }
    costs.claim /= batches;
    costs.record /= batches;
    ledger.pool().close().await;
    db.drop_now().await?;
    Ok(costs)
}

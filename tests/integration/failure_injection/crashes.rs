//! Scenario 2 (a worker SIGKILLed right after the processor accepted the payment) and scenario 9 (the
//! reconciler SIGKILLed mid-sweep, then a fresh one converges): the failure point pauses the process
//! and the test delivers a real SIGKILL from outside.

use super::fleet::{self, DEADLINE, assert_paid_once, settled, successful_payments};
use crate::support::now;
use crate::support::processes::{self, simulator};
use crate::support::rows;
use crate::support::{postgres_ledger, ready_operation, recording, tenant};
use payonce_core::state::Status;
use payonce_ledger::Fence;
use payonce_simulator::SimulatorConfig;
use std::time::Duration;

#[tokio::test]
async fn scenario_2_a_worker_sigkilled_after_processor_acceptance_pays_once() {
    let (ledger, url) = postgres_ledger().await;
    let sim = simulator(SimulatorConfig::default()).await;
    let op = ready_operation(&ledger, "INV-FI2", "pm_card_visa", now()).await;
    let mut doomed = fleet::worker(
        &url,
        &sim,
        &[("PAYONCE_FAILPOINTS", "after_processor_accepted=pause")],
    );
    doomed.wait_paused("after_processor_accepted").await;
    // At the failure point: the processor holds the payment, the ledger does not know yet.
    assert_eq!(successful_payments(&sim, &op.id).await.len(), 1);
    let row = ledger.get(&tenant(), &op.id).await.unwrap();
    assert_eq!(row.status, Status::Executing);
    assert!(row.first_submitted_at.is_some());
    doomed.sigkill().await;

    // A fresh worker and the reconciler take over: the lease lapses, the outcome is unknown, a
    // lookup finds the payment. Nothing is submitted under a new key.
    let _fleet = fleet::worker_and_reconciler(&url, &sim);
    assert_eq!(settled(&ledger, &op.id, DEADLINE).await, Status::Succeeded);
    let events = assert_paid_once(&ledger, &sim, &op.id).await;
    let names: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert!(
        names.contains(&"lease_expired_submitted"),
        "the history shows the crash: {names:?}"
    );
    let final_move = events.last().unwrap();
    assert_eq!(
        final_move.from_status.as_deref(),
        Some("unknown"),
        "resolved by lookup: {names:?}"
    );
    let payments = successful_payments(&sim, &op.id).await;
    assert_eq!(
        payments[0]["idempotency_key"],
        op.idempotency_key.as_str(),
        "the stored key was used"
    );
}

/// Unknown rows as a crashed worker leaves them: every third one reached the processor.
async fn unknown_rows(
    ledger: &payonce_ledger::SharedLedger,
    sim: &payonce_simulator::Simulator,
    n: usize,
) -> Vec<payonce_ledger::Operation> {
    let mut ops = Vec::new();
    for i in 0..n {
        let op = ready_operation(ledger, &format!("INV-FI9-{i}"), "pm_card_visa", now()).await;
        let c = rows::executing(
            ledger,
            &op.id,
            &rows::holder("crashed-worker", Duration::from_secs(60)),
            now(),
        )
        .await;
        if i % 3 == 0 {
            let _ = payonce_execution::submit::submit(
                processes::stripe(sim, None).as_ref(),
                &c,
                Duration::from_secs(5),
            )
            .await;
        }
        let unknown = rows::unknown_outcome("crash", None, now());
        ledger
            .record(
                &recording(&Fence::of(&c), &unknown, "crashed-worker"),
                now(),
            )
            .await
            .unwrap();
        ops.push(op);
    }
    ops
}

#[tokio::test]
async fn scenario_9_a_reconciler_sigkilled_mid_sweep_is_finished_by_a_fresh_one() {
    let (ledger, url) = postgres_ledger().await;
    let sim = simulator(SimulatorConfig::default()).await;
    let ops = unknown_rows(&ledger, &sim, 6).await;
    // The dead reconciler's sweep lease holds off the next one this long.
    let lease = [("PAYONCE_SWEEP_LEASE_TTL_MS", "3000")];
    let mut doomed = fleet::reconciler(
        &url,
        &sim,
        &[lease[0], ("PAYONCE_FAILPOINTS", "mid_sweep=pause")],
    );
    doomed.wait_paused("mid_sweep").await;
    doomed.sigkill().await;
    let mut still_unknown = 0;
    for op in &ops {
        let row = ledger.get(&tenant(), &op.id).await.unwrap();
        still_unknown += usize::from(row.status == Status::Unknown);
    }
    assert!(
        still_unknown >= 4,
        "killed mid-sweep: most rows untouched ({still_unknown} unknown)"
    );

    // The fresh reconciler must first wait out the dead one's sweep lease, then resolve every row:
    // by lookup where the payment landed, by a same-key retry where it did not.
    let _fresh = fleet::reconciler(&url, &sim, &lease);
    for op in &ops {
        assert_eq!(
            settled(&ledger, &op.id, Duration::from_secs(60)).await,
            Status::Succeeded
        );
        let events = assert_paid_once(&ledger, &sim, &op.id).await;
        assert!(
            events.iter().any(|e| e.event == "outcome_unknown"),
            "{:?}",
            events
        );
        let payments = successful_payments(&sim, &op.id).await;
        assert_eq!(
            payments[0]["idempotency_key"],
            op.idempotency_key.as_str(),
            "never a new key"
        );
    }
}

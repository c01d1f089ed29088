//! Scenario 8: Postgres restarted in the middle of a run (a throwaway cluster of the test's own,
//! never the shared server), and processor 5xx storms, 429s and hangs against the worker's timeouts.

use super::fleet::{self, assert_paid_once, successful_payments};
use crate::support::cluster::Cluster;
use crate::support::now;
use crate::support::processes::{arm_faults, simulator};
use crate::support::{postgres_ledger, ready_operation, tenant, wait_for};
use payonce_core::state::Status;
use payonce_ledger::{self as ledger, Operation, SharedLedger};
use payonce_simulator::SimulatorConfig;
use serde_json::json;
use std::time::Duration;

/// How long a run under outages may take to settle.
const SETTLE_DEADLINE: Duration = Duration::from_secs(120);

async fn in_progress(ledger: &SharedLedger) -> Option<i64> {
    let counts = ledger.count_by_status().await.ok()?;
    Some(
        counts
            .iter()
            .filter(|c| {
                matches!(
                    c.status,
                    Status::Ready | Status::Executing | Status::Unknown
                )
            })
            .map(|c| c.count)
            .sum(),
    )
}

async fn all_settled(ledger: &SharedLedger) {
    wait_for("every operation settles", SETTLE_DEADLINE, || async {
        (in_progress(ledger).await? == 0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn scenario_8_postgres_crash_restarted_mid_run_pays_each_operation_once() {
    let cluster = Cluster::start();
    cluster.create_database("payonce").await;
    let url = cluster.url("payonce");
    let ledger = ledger::connect(&url, 8).await.unwrap();
    let sim = simulator(SimulatorConfig {
        processing_settle: Duration::from_millis(1500),
        ..Default::default()
    })
    .await;
    let mut ops: Vec<Operation> = Vec::new();
    for i in 0..80 {
        // Half stay `processing` at the processor for a while: unknown rows the reconciler polls.
        let method = if i % 2 == 0 {
            "pm_card_processing"
        } else {
            "pm_card_visa"
        };
        ops.push(ready_operation(&ledger, &format!("INV-FI8-{i}"), method, now()).await);
    }
    let slow = [
        ("PAYONCE_WORKER_BATCH", "4"),
        ("PAYONCE_WORKER_CONCURRENCY", "4"),
    ];
    let mut workers = [
        fleet::worker(&url, &sim, &slow),
        fleet::worker(&url, &sim, &slow),
    ];
    let mut rec = fleet::reconciler(&url, &sim, &[]);
    wait_for("payments are flowing", SETTLE_DEADLINE, || async {
        (!crate::support::processes::audit(&sim).await.is_empty()).then_some(())
    })
    .await;
    let before = in_progress(&ledger).await.unwrap();
    assert!(before > 0, "the restart happens mid-run");
    // pg_ctl blocks; run it off the async threads. The cluster is stopped on drop at the end.
    let cluster = tokio::task::spawn_blocking(move || {
        cluster.crash_restart();
        cluster
    })
    .await
    .unwrap();
    all_settled(&ledger).await;
    for op in &ops {
        assert_paid_once(&ledger, &sim, &op.id).await;
    }
    for w in &mut workers {
        assert!(w.alive(), "a worker survives a database restart");
    }
    assert!(rec.alive(), "the reconciler survives a database restart");
    eprintln!(
        "restarted with {before} of {} operations in progress; all settled, each paid once",
        ops.len()
    );
    drop(cluster);
}

#[tokio::test]
async fn scenario_8_processor_5xx_storms_429s_and_hangs_end_in_the_truth() {
    let (ledger, url) = postgres_ledger().await;
    let sim = simulator(SimulatorConfig::default()).await;
    let mut ops = Vec::new();
    for i in 0..30 {
        ops.push(ready_operation(&ledger, &format!("INV-FI8F-{i}"), "pm_card_visa", now()).await);
    }
    // A storm of 500s first, then 429s, 500s after commit and dropped answers at random, and two
    // requests that hang until the worker's processor timeout (2 s) gives up on them.
    arm_faults(
        &sim,
        json!([
            {"match": "*", "fault": "hang", "times": 2},
            {"match": "*", "fault": "error_500_before_commit", "times": 20},
            {"match": "*", "fault": "rate_limit_429", "per_mille": 300},
            {"match": "*", "fault": "error_500_after_commit", "per_mille": 150},
            {"match": "*", "fault": "drop_after_commit", "per_mille": 100}
        ]),
    )
    .await;
    let _fleet = fleet::worker_and_reconciler(&url, &sim);
    all_settled(&ledger).await;

    let rules: serde_json::Value = reqwest::get(format!("{}/_sim/faults", sim.base_url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let spent = |fault: &str| {
        rules["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["fault"] == fault && r["times"] == 0)
    };
    assert!(
        spent("hang") && spent("error_500_before_commit"),
        "the storm and the hangs were served: {rules}"
    );
    let (mut succeeded, mut attention, mut went_unknown) = (0, 0, 0);
    for op in &ops {
        let row = ledger.get(&tenant(), &op.id).await.unwrap();
        let events = ledger.events_unscoped(&op.id).await.unwrap();
        went_unknown += usize::from(events.iter().any(|e| e.event == "outcome_unknown"));
        match row.status {
            Status::Succeeded => {
                assert_paid_once(&ledger, &sim, &op.id).await;
                succeeded += 1;
            }
            Status::NeedsAttention => {
                assert!(
                    row.failure_message.is_some(),
                    "{}: needs_attention says why",
                    op.id
                );
                assert!(successful_payments(&sim, &op.id).await.len() <= 1);
                attention += 1;
            }
            other => panic!("{}: ended {other:?}; history {events:?}", op.id),
        }
    }
    eprintln!(
        "faults: {succeeded} succeeded, {attention} needs_attention, {went_unknown} went through unknown"
    );
    assert!(
        went_unknown > 0,
        "some answers were lost and resolved by the reconciler"
    );
    assert!(succeeded > 0);
}

//! Scenario 4: duplicate webhooks, one of which arrives before the worker records the outcome. The
//! simulator delivers every event twice to a real `payonce api`; the worker sleeps at the failure
//! point after the processor accepted, so the webhook (checked by the reconciler's retrieve) settles
//! the row first and the worker's late record must lose to the stored truth without a conflict.

use super::fleet::{self, DEADLINE, assert_paid_once, settled};
use crate::support::processes::simulator;
use crate::support::{postgres_ledger, ready_operation, tenant};
use payonce_core::clock::{Clock, SystemClock};
use payonce_core::state::Status;
use payonce_simulator::SimulatorConfig;

#[tokio::test]
async fn scenario_4_a_duplicated_webhook_before_the_worker_records_settles_once() {
    let (ledger, url) = postgres_ledger().await;
    let (api, base) = fleet::api(&url).await;
    let sim = simulator(SimulatorConfig {
        webhook_url: Some(format!("{base}/v1/webhooks/stripe")),
        webhook_secret: fleet::WEBHOOK_SECRET.to_string(),
        webhook_duplicates_per_mille: 1000,
        ..Default::default()
    })
    .await;
    // The api stores the webhook as a hint; a reconciler sweeping every 100 ms retrieves the
    // object it names and applies it (issue 13: a webhook is a hint).
    let _rec = fleet::reconciler(&url, &sim, &[("PAYONCE_SWEEP_INTERVAL_MS", "100")]);
    let op = ready_operation(&ledger, "INV-FI4", "pm_card_visa", SystemClock.now()).await;
    // 8 s: ample for the simulator's immediate delivery to land first, even on a loaded CI machine.
    let worker = fleet::worker(
        &url,
        &sim,
        &[("PAYONCE_FAILPOINTS", "after_processor_accepted=sleep:8000")],
    );
    worker
        .wait_said("failure point after_processor_accepted sleeping")
        .await;

    // The webhook, once checked, settles the row while the worker still sleeps on the processor's answer.
    assert_eq!(settled(&ledger, &op.id, DEADLINE).await, Status::Succeeded);
    let events = ledger.events_unscoped(&op.id).await.unwrap();
    let into_succeeded = events.iter().find(|e| e.to_status == "succeeded").unwrap();
    assert!(
        into_succeeded.actor.contains("webhook")
            || into_succeeded
                .detail
                .as_deref()
                .unwrap_or("")
                .contains("webhook"),
        "the webhook got there first: {into_succeeded:?}"
    );
    assert_eq!(
        into_succeeded.from_status.as_deref(),
        Some("executing"),
        "before the worker recorded"
    );
    // The duplicate delivery is recognised, and the worker's late record loses quietly.
    api.wait_said("duplicate=true").await;
    worker
        .wait_said("outcome already recorded by another path")
        .await;

    let row = ledger.get(&tenant(), &op.id).await.unwrap();
    assert_eq!(
        row.status,
        Status::Succeeded,
        "no conflict, no needs_attention"
    );
    let events = assert_paid_once(&ledger, &sim, &op.id).await;
    let names: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert!(!names.contains(&"conflicting_report"), "{names:?}");
}

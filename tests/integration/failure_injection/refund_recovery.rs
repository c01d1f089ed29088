//! Refund scenarios past the happy path (issue 19): duplicated webhooks, one arriving before the worker
//! records; a refund Stripe reports `succeeded` and fails later (`pm_card_refundFail`); the key's
//! retention window closed on a refund that landed and on one that never did; an amount change under
//! an existing refund; and a zombie worker whose lease was taken over. Both sides every time.

use super::fleet::{self, DEADLINE, settled};
use super::refund_fixtures::{
    approved_refund, assert_refunded_once, assert_totals_agree, paid_payment,
    refunded_at_processor, refunds_for,
};
use crate::support::now;
use crate::support::processes::{self, advance_clock, simulator};
use crate::support::reconciler;
use crate::support::refunds::create_refund;
use crate::support::rows;
use crate::support::{
    postgres_ledger, postgres_ledger_on_callers_clock, recording, tenant, wait_for,
};
use payonce_core::clock::ManualClock;
use payonce_core::state::Status;
use payonce_ledger::Fence;
use payonce_ledger::{Declined, LedgerError, Operation, Recorded, SharedLedger};
use payonce_processor::SubmitOutcome;
use payonce_simulator::SimulatorConfig;
use std::time::Duration;

fn webhook_sim_config(base: &str) -> SimulatorConfig {
    SimulatorConfig {
        webhook_url: Some(format!("{base}/v1/webhooks/stripe")),
        webhook_secret: fleet::WEBHOOK_SECRET.to_string(),
        webhook_duplicates_per_mille: 1000,
        refund_settle: Duration::from_millis(1500),
        ..Default::default()
    }
}

#[tokio::test]
async fn refund_a_duplicated_webhook_before_the_worker_records_settles_once() {
    let (ledger, url) = postgres_ledger().await;
    let (api, base) = fleet::api(&url).await;
    let sim = simulator(webhook_sim_config(&base)).await;
    let _rec = fleet::reconciler(&url, &sim, &[("PAYONCE_SWEEP_INTERVAL_MS", "100")]);
    let payment = paid_payment(&ledger, &sim, "INV-RW1", "pm_card_visa").await;
    let refund = approved_refund(&ledger, &payment, "refund:INV-RW1:1", 700).await;
    let worker = fleet::worker(
        &url,
        &sim,
        &[("PAYONCE_FAILPOINTS", "after_processor_accepted=sleep:8000")],
    );
    worker
        .wait_said("failure point after_processor_accepted sleeping")
        .await;
    // refund.created, delivered twice and checked by retrieving the Refund, settles the row first.
    assert_eq!(
        settled(&ledger, &refund.id, DEADLINE).await,
        Status::Succeeded
    );
    let events = ledger.events_unscoped(&refund.id).await.unwrap();
    let into_succeeded = events.iter().find(|e| e.to_status == "succeeded").unwrap();
    assert!(
        into_succeeded
            .detail
            .as_deref()
            .unwrap_or("")
            .contains("webhook"),
        "the webhook got there first: {into_succeeded:?}"
    );
    assert_eq!(into_succeeded.from_status.as_deref(), Some("executing"));
    api.wait_said("duplicate=true").await;
    worker
        .wait_said("outcome already recorded by another path")
        .await;
    let events = assert_refunded_once(&ledger, &sim, &refund.id).await;
    let names: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert!(!names.contains(&"conflicting_report"), "{names:?}");
    assert_totals_agree(&ledger, &sim, &payment).await;
}

#[tokio::test]
async fn refund_reported_succeeded_then_failed_goes_to_a_human_with_both_facts() {
    let (ledger, url) = postgres_ledger().await;
    let (_api, base) = fleet::api(&url).await;
    let sim = simulator(webhook_sim_config(&base)).await;
    let _rec = fleet::reconciler(&url, &sim, &[("PAYONCE_SWEEP_INTERVAL_MS", "100")]);
    // Stripe's pm_card_refundFail: the refund answers succeeded, then fails asynchronously.
    let payment = paid_payment(&ledger, &sim, "INV-RW2", "pm_card_refundFail").await;
    let refund = approved_refund(&ledger, &payment, "refund:INV-RW2:1", 2048).await;
    let _worker = fleet::worker(&url, &sim, &[]);
    let row = wait_for("the refund to need attention", DEADLINE, || async {
        let row = ledger.get(&tenant(), &refund.id).await.ok()?;
        (row.status == Status::NeedsAttention).then_some(row)
    })
    .await;
    let re = row.external_ref.clone().unwrap();
    let events = ledger.events_unscoped(&refund.id).await.unwrap();
    let names: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    // First the success the processor answered, then its contradiction: both kept.
    let succeeded_at = events
        .iter()
        .position(|e| e.to_status == "succeeded")
        .unwrap();
    let conflict = events
        .iter()
        .position(|e| e.event == "conflicting_report")
        .unwrap_or_else(|| panic!("{names:?}"));
    assert!(succeeded_at < conflict, "{names:?}");
    let detail = events[conflict].detail.clone().unwrap_or_default();
    assert!(
        detail.contains("expired_or_canceled_card") && detail.contains(&re),
        "{detail}"
    );
    // The processor gave the money back to the payment; the ledger holds it until a human decides.
    assert!(refunds_for(&sim, &refund.id).await.is_empty());
    assert_eq!(
        refunded_at_processor(&sim, payment.external_ref.as_deref().unwrap()).await,
        0
    );
    let totals = ledger.refund_totals(&tenant(), &payment.id).await.unwrap();
    assert_eq!((totals.refunded_minor, totals.in_flight_minor), (0, 2048));
}

/// Claims the oldest ready row as a worker that then vanishes: with `submit` the refund reaches the
/// processor; either way the outcome is recorded as unknown.
async fn crashed_refunding(
    ledger: &SharedLedger,
    sim: &payonce_simulator::Simulator,
    refund: &Operation,
    submit: bool,
) {
    let c = rows::executing(
        ledger,
        &refund.id,
        &rows::holder("crashed", Duration::from_millis(60_000)),
        now(),
    )
    .await;
    if submit {
        let outcome = payonce_execution::submit::submit(
            processes::stripe(sim, None).as_ref(),
            &c,
            Duration::from_secs(5),
        )
        .await;
        assert!(
            matches!(outcome, SubmitOutcome::Succeeded { .. }),
            "{outcome:?}"
        );
    }
    let unknown = rows::unknown_outcome("crash", None, now());
    rows::record(ledger, &c, &unknown, "crashed", now()).await;
}

#[tokio::test]
async fn refund_past_the_key_window_is_found_if_it_landed_and_never_made_with_a_new_key() {
    // The reconciler's manual clock is the ledger's: the window closes when the test says so.
    let (ledger, _db) = postgres_ledger_on_callers_clock().await;
    let retention = Duration::from_secs(60);
    let sim = simulator(SimulatorConfig {
        key_retention: retention,
        ..Default::default()
    })
    .await;
    let payment = paid_payment(&ledger, &sim, "INV-RW3", "pm_card_visa").await;
    let landed = approved_refund(&ledger, &payment, "refund:INV-RW3:landed", 500).await;
    crashed_refunding(&ledger, &sim, &landed, true).await;
    let never = approved_refund(&ledger, &payment, "refund:INV-RW3:never", 500).await;
    crashed_refunding(&ledger, &sim, &never, false).await;
    // Past the window on both sides: the simulator forgot the keys, the reconciler knows it.
    let past = retention + Duration::from_secs(1);
    let clock = ManualClock::new(now());
    clock.advance(past);
    advance_clock(&sim, past).await;
    let rec = reconciler::build_on(
        &ledger,
        processes::stripe(&sim, Some(retention)),
        clock.clone(),
        "rec",
        |c| {
            reconciler::quick_rechecks(c);
            c.retention_margin = Duration::from_millis(200);
        },
    );
    for op in [&landed, &never] {
        wait_for("reconciled", DEADLINE, || async {
            rec.sweep_once(false).await.unwrap();
            clock.advance(std::time::Duration::from_millis(1_000));
            let row = ledger.get(&tenant(), &op.id).await.unwrap();
            (row.status.is_terminal() || row.status == Status::NeedsAttention).then_some(())
        })
        .await;
    }
    assert_refunded_once(&ledger, &sim, &landed.id).await;
    let never = ledger.get(&tenant(), &never.id).await.unwrap();
    assert_eq!(
        never.status,
        Status::NeedsAttention,
        "a new key could refund twice"
    );
    assert!(never.failure_message.unwrap().contains("retention window"));
    assert!(refunds_for(&sim, &never.id).await.is_empty());
    let pi = payment.external_ref.as_deref().unwrap();
    assert_eq!(refunded_at_processor(&sim, pi).await, 500);
    let totals = ledger.refund_totals(&tenant(), &payment.id).await.unwrap();
    assert_eq!(
        (totals.refunded_minor, totals.in_flight_minor),
        (500, 500),
        "the one a human must decide still holds its money"
    );
}

#[tokio::test]
async fn refund_an_amount_change_under_an_existing_refund_is_refused_and_the_approved_amount_is_refunded()
 {
    let (ledger, url) = postgres_ledger().await;
    let sim = simulator(SimulatorConfig::default()).await;
    let payment = paid_payment(&ledger, &sim, "INV-RW4", "pm_card_visa").await;
    let refund = approved_refund(&ledger, &payment, "refund:INV-RW4:1", 500).await;
    match create_refund(&ledger, &payment, "refund:INV-RW4:1", 600, now()).await {
        Err(LedgerError::Conflict { existing }) => assert_eq!(existing, refund.id),
        other => panic!("{other:?}"),
    }
    let row = ledger.get(&tenant(), &refund.id).await.unwrap();
    assert_eq!(row.details.money().amount_minor(), 500);
    assert_eq!(row.approved_hash.as_ref(), Some(&row.details_hash));
    assert_eq!(row.status, Status::Ready);
    let _worker = fleet::worker(&url, &sim, &[]);
    assert_eq!(
        settled(&ledger, &refund.id, DEADLINE).await,
        Status::Succeeded
    );
    assert_refunded_once(&ledger, &sim, &refund.id).await;
    assert_eq!(
        refunded_at_processor(&sim, payment.external_ref.as_deref().unwrap()).await,
        500
    );
    assert_totals_agree(&ledger, &sim, &payment).await;
}

#[tokio::test]
async fn refund_a_zombie_worker_whose_lease_was_taken_over_cannot_record() {
    let (ledger, url) = postgres_ledger().await;
    let sim = simulator(SimulatorConfig::default()).await;
    let payment = paid_payment(&ledger, &sim, "INV-RW5", "pm_card_visa").await;
    let refund = approved_refund(&ledger, &payment, "refund:INV-RW5:1", 900).await;
    // The zombie claims with a short lease, reaches the processor, then stalls.
    let holder = rows::holder("zombie", Duration::from_millis(300));
    let zombie = rows::executing(&ledger, &refund.id, &holder, now()).await;
    let outcome = payonce_execution::submit::submit(
        processes::stripe(&sim, None).as_ref(),
        &zombie,
        Duration::from_secs(5),
    )
    .await;
    assert!(
        matches!(outcome, SubmitOutcome::Succeeded { .. }),
        "{outcome:?}"
    );
    let _rec = fleet::reconciler(&url, &sim, &[]);
    let _worker = fleet::worker(&url, &sim, &[]);
    assert_eq!(
        settled(&ledger, &refund.id, DEADLINE).await,
        Status::Succeeded
    );
    // The zombie wakes with its stale attempt: fenced, whatever it claims.
    let late = Recorded::Failed(Declined {
        code: "zombie".into(),
        message: "late".into(),
        reference: None,
    });
    assert!(matches!(
        ledger
            .record(&recording(&Fence::of(&zombie), &late, "zombie"), now())
            .await,
        Err(LedgerError::Fenced { .. })
    ));
    assert_refunded_once(&ledger, &sim, &refund.id).await;
    assert_totals_agree(&ledger, &sim, &payment).await;
}

/// A refund left `unknown` whose stored reference names a Refund the processor holds for another
/// operation: the lookup retrieves it and, by the same rule as a webhook naming it, the refund goes to
/// a human with both facts (it still holds its money until one decides), instead of being deferred
/// forever while holding the payment's refundable amount.
#[tokio::test]
async fn refund_whose_reference_is_another_operations_refund_goes_to_a_human_with_both_facts() {
    let (ledger, _db) = postgres_ledger().await;
    let sim = simulator(SimulatorConfig::default()).await;
    let payment = paid_payment(&ledger, &sim, "INV-RW9", "pm_card_visa").await;
    let pi = payment.external_ref.clone().unwrap();
    // Someone else's refund of the same payment, carrying another operation's id.
    let other = payonce_core::id::OperationId::generate();
    let theirs: serde_json::Value = reqwest::Client::new()
        .post(format!("{}/v1/refunds", sim.base_url()))
        .bearer_auth("sk_test_payonce")
        .form(&[
            ("payment_intent", pi.as_str()),
            ("amount", "500"),
            ("metadata[payonce_operation_id]", other.as_str()),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let re = theirs["id"].as_str().unwrap().to_string();
    assert!(re.starts_with("re_"), "{theirs}");

    let refund = approved_refund(&ledger, &payment, "refund:INV-RW9:1", 700).await;
    let holder = rows::holder("w", Duration::from_millis(60_000));
    let claimed = rows::claimed(&ledger, &refund.id, &holder, now()).await;
    rows::start_submission(&ledger, &claimed, now()).await;
    let unknown = rows::unknown_outcome("timeout", Some(&re), now());
    rows::record(&ledger, &claimed, &unknown, "w", now()).await;

    let rec = reconciler::build(
        &ledger,
        processes::stripe(&sim, None),
        "rec-refund-reference",
        |_| {},
    );
    let sweep = rec.sweep_once(false).await.unwrap();
    assert_eq!((sweep.escalated, sweep.deferred), (1, 0), "{sweep:?}");
    let row = ledger.get(&tenant(), &refund.id).await.unwrap();
    assert_eq!(row.status, Status::NeedsAttention);
    let why = row.failure_message.unwrap();
    for fact in [
        format!(
            "operation id Some({:?}) at the processor, {} approved",
            other.as_str(),
            refund.id
        ),
        "amount Some(500) at the processor, 700 approved".to_string(),
        format!("row says unknown (reference {re})"),
    ] {
        assert!(why.contains(&fact), "{fact}: {why}");
    }
    let totals = ledger.refund_totals(&tenant(), &payment.id).await.unwrap();
    assert_eq!(totals.in_flight_minor, 700, "held until a human decides");
}

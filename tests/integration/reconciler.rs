//! The reconciler against real Postgres and the simulator: every sweep path, webhooks in any order,
//! a retention window that closes, and two reconcilers racing.

use crate::support::now;
use crate::support::postgres::TestDatabase;
use crate::support::processes::{self, payments_for};
use crate::support::reconciler;
use crate::support::rows;
use crate::support::{self, ready_operation, recording, tenant, wait_for};
use payonce_core::clock::{ManualClock, Timestamp};
use payonce_core::state::Status;
use payonce_ledger::{DeferCheck, ExpireLease, Fence, LeaseHolder, Paid};
use payonce_ledger::{Operation, SharedLedger};
use payonce_processor::Processor;
use payonce_processor::ingest as webhooks;
use payonce_processor::stripe::webhook::WebhookError;
use payonce_reconciler::{Reconciler, ReconcilerConfig};
use payonce_simulator::{Simulator, SimulatorConfig};
use payonce_worker::WorkerConfig;
use std::sync::Arc;
use std::time::Duration;

/// Test limits: quick re-checks, the given retention margin.
fn limits(config: &mut ReconcilerConfig, margin: Duration) {
    reconciler::quick_rechecks(config);
    config.retention_margin = margin;
}

/// A reconciler on the wall clock with [`limits`].
fn with_margin(
    ledger: &SharedLedger,
    processor: Arc<dyn Processor>,
    name: &str,
    margin: Duration,
) -> Reconciler {
    reconciler::build(ledger, processor, name, |c| limits(c, margin))
}

/// The wall clock moved `ahead` into the future: a reconciler on it, over a ledger on its callers'
/// clocks (`support::postgres_ledger_on_callers_clock`), sees a crashed worker's short lease as
/// lapsed at once, with time still running (processing payments settle, backoffs pass).
#[derive(Debug)]
struct AheadClock {
    ahead: Duration,
}

impl payonce_core::clock::Clock for AheadClock {
    fn now(&self) -> Timestamp {
        now() + self.ahead
    }
}

/// Lease of the crashed workers in these tests.
const CRASHED_LEASE: Duration = Duration::from_millis(300);

/// Claims with a short lease and records a submission start, then leaves the row as a crashed
/// worker would; with `submit` the request reaches the processor and its response is dropped.
async fn crashed_mid_flight(
    ledger: &SharedLedger,
    sim: &Simulator,
    invoice: &str,
    submit: bool,
) -> Operation {
    crashed_paying_with(ledger, sim, invoice, "pm_card_visa", submit).await
}

/// [`crashed_mid_flight`] with a given test payment method.
async fn crashed_paying_with(
    ledger: &SharedLedger,
    sim: &Simulator,
    invoice: &str,
    payment_method: &str,
    submit: bool,
) -> Operation {
    let op = ready_operation(ledger, invoice, payment_method, now()).await;
    // Claimed and marked at one instant: a slow machine cannot lapse the lease in between.
    let claimed_at = now();
    let claimed = rows::executing(
        ledger,
        &op.id,
        &rows::holder("crashed-worker", CRASHED_LEASE),
        claimed_at,
    )
    .await;
    if submit {
        processes::arm_faults(sim, serde_json::json!([{"match": op.idempotency_key.as_str(), "fault": "drop_after_commit", "times": 1}])).await;
        let outcome = payonce_execution::submit::submit(
            processes::stripe(sim, None).as_ref(),
            &claimed,
            Duration::from_secs(5),
        )
        .await;
        assert!(
            matches!(outcome, payonce_processor::SubmitOutcome::Unknown { .. }),
            "{outcome:?}"
        );
        assert_eq!(payments_for(sim, op.id.as_str()).await, 1);
    }
    ledger.get(&tenant(), &op.id).await.unwrap()
}

async fn converge(ledger: &SharedLedger, rec: &Reconciler, op: &Operation) -> Operation {
    wait_for("reconciled", Duration::from_secs(20), || async {
        rec.sweep_once(false).await.unwrap();
        let row = ledger.get(&tenant(), &op.id).await.unwrap();
        (row.status.is_terminal() || row.status == Status::NeedsAttention).then_some(row)
    })
    .await
}

/// [`converge`] for a reconciler on a manual clock, moved a second per sweep so re-checks fall due.
async fn converge_on(
    ledger: &SharedLedger,
    rec: &Reconciler,
    clock: &ManualClock,
    op: &Operation,
) -> Operation {
    wait_for("reconciled", Duration::from_secs(20), || async {
        rec.sweep_once(false).await.unwrap();
        clock.advance(std::time::Duration::from_millis(1_000));
        let row = ledger.get(&tenant(), &op.id).await.unwrap();
        (row.status.is_terminal() || row.status == Status::NeedsAttention).then_some(row)
    })
    .await
}

#[tokio::test]
async fn lookups_resolve_unknown_outcomes_and_not_found_retries_with_the_same_key() {
    let (ledger, _db) = support::postgres_ledger().await;
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let rec = with_margin(
        &ledger,
        processes::stripe(&sim, None),
        "rec",
        Duration::from_secs(60),
    );
    // Paid but the response was lost: found by lookup.
    let paid = ready_operation(&ledger, "INV-R1", "pm_card_visa", now()).await;
    let c = rows::executing(
        &ledger,
        &paid.id,
        &rows::holder("w", Duration::from_millis(60_000)),
        now(),
    )
    .await;
    processes::arm_faults(
        &sim,
        serde_json::json!([{"match": paid.idempotency_key.as_str(), "fault": "drop_after_commit", "times": 1}]),
    )
    .await;
    let outcome = payonce_execution::submit::submit(
        processes::stripe(&sim, None).as_ref(),
        &c,
        Duration::from_secs(5),
    )
    .await;
    let recorded = WorkerConfig::new("w").submit.to_recorded(
        outcome,
        c.attempt,
        now().saturating_sub_span(Duration::from_secs(10)),
    );
    rows::record(&ledger, &c, &recorded, "w", now()).await;
    assert_eq!(
        ledger.get(&tenant(), &paid.id).await.unwrap().status,
        Status::Unknown
    );
    // Never submitted although recorded as started: not found, window open, same-key retry.
    let lost = ready_operation(&ledger, "INV-R2", "pm_card_visa", now()).await;
    rows::unknown(
        &ledger,
        &lost.id,
        &rows::holder("w", Duration::from_millis(60_000)),
        now(),
        now(),
    )
    .await;

    let dry = rec.sweep_once(true).await.unwrap();
    assert!(dry.dry_run && dry.actions.len() >= 2, "{dry:?}");
    assert_eq!(
        ledger.get(&tenant(), &paid.id).await.unwrap().status,
        Status::Unknown,
        "a dry run writes nothing"
    );

    let report = rec.sweep_once(false).await.unwrap();
    assert_eq!(
        (report.resolved_succeeded, report.retried_same_key),
        (1, 1),
        "{report:?}"
    );
    for op in [&paid, &lost] {
        assert_eq!(
            ledger.get(&tenant(), &op.id).await.unwrap().status,
            Status::Succeeded
        );
        assert_eq!(payments_for(&sim, op.id.as_str()).await, 1, "{}", op.id);
    }
    let retried = ledger.get(&tenant(), &lost.id).await.unwrap();
    assert_eq!(
        retried.idempotency_key, lost.idempotency_key,
        "never a new key"
    );
    let audit = processes::audit(&sim).await;
    let row = audit
        .iter()
        .find(|p| p["metadata"]["payonce_operation_id"] == lost.id.as_str())
        .unwrap();
    assert_eq!(row["idempotency_key"], lost.idempotency_key.as_str());
}

#[tokio::test]
async fn expired_leases_split_on_submission_and_processing_payments_are_polled() {
    let (ledger, _db) = support::postgres_ledger_on_callers_clock().await;
    let sim = processes::simulator(SimulatorConfig {
        processing_settle: Duration::from_millis(600),
        ..Default::default()
    })
    .await;
    // The reconciler's clock runs past the 100 ms lease: no waiting for it to lapse.
    let rec = reconciler::build_on(
        &ledger,
        processes::stripe(&sim, None),
        Arc::new(AheadClock {
            ahead: Duration::from_secs(1),
        }),
        "rec",
        |c| limits(c, Duration::from_secs(60)),
    );
    let a = ready_operation(&ledger, "INV-L1", "pm_card_visa", now()).await;
    let b = ready_operation(
        &ledger,
        "INV-L2",
        "pm_card_processing",
        now() + Duration::from_millis(1),
    )
    .await;
    let claimed_at = now() + Duration::from_millis(2);
    let claimed = ledger
        .claim(
            &LeaseHolder {
                owner: "w",
                lease_ttl: Duration::from_millis(100),
            },
            2,
            claimed_at,
        )
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2);
    // b was submitted and left processing at the processor; a never got further than the claim.
    let cb = claimed.iter().find(|c| c.id == b.id).unwrap();
    assert_eq!(
        ledger
            .mark_submitting(&[Fence::of(cb)], claimed_at)
            .await
            .unwrap(),
        [true]
    );
    let outcome = payonce_execution::submit::submit(
        processes::stripe(&sim, None).as_ref(),
        cb,
        Duration::from_secs(5),
    )
    .await;
    assert!(
        matches!(
            outcome,
            payonce_processor::SubmitOutcome::Unknown {
                reference: Some(_),
                ..
            }
        ),
        "{outcome:?}"
    );
    let report = rec.sweep_once(false).await.unwrap();
    assert_eq!(
        (report.requeued, report.marked_unknown),
        (1, 1),
        "{report:?}"
    );
    assert_eq!(
        ledger.get(&tenant(), &a.id).await.unwrap().status,
        Status::Ready
    );
    let done = converge(&ledger, &rec, &b).await;
    assert_eq!(done.status, Status::Succeeded);
    assert!(done.check_count >= 1, "polled while processing");
    assert_eq!(payments_for(&sim, b.id.as_str()).await, 1);
}

/// Two crashed operations whose key retention (2 s) closes before the reconciler looks: one paid
/// with its response dropped, one that never reached the processor. Returns both once converged.
struct PastTheWindow {
    ledger: SharedLedger,
    sim: Simulator,
    rec: Reconciler,
    paid: Operation,
    never: Operation,
    /// The database under `ledger`, dropped with it: bind it for as long as the test runs.
    database: TestDatabase,
}

async fn past_the_window(resubmit_after_window: bool) -> PastTheWindow {
    let (ledger, database) = support::postgres_ledger_on_callers_clock().await;
    // A minute's retention on both sides (Stripe's 24 h would outlive the approval, which then
    // stops any resubmission on its own); both clocks are moved past it, nobody waits for it.
    let retention = Duration::from_secs(60);
    let sim = processes::simulator(SimulatorConfig {
        key_retention: retention,
        ..Default::default()
    })
    .await;
    let processor = processes::stripe(&sim, Some(retention));
    assert_eq!(
        processor.contract().lookups.finding(false),
        Some(payonce_processor::contract::Consistency::ReadAfterWrite),
        "the policy only acts on a read-after-write consistent lookup"
    );
    let paid = crashed_mid_flight(&ledger, &sim, "INV-W1", true).await;
    let never = crashed_mid_flight(&ledger, &sim, "INV-W2", false).await;
    // Past the window for both sides: the simulator has forgotten the keys, the reconciler knows it.
    let past = retention + Duration::from_secs(1);
    let clock = ManualClock::new(now());
    clock.advance(past);
    processes::advance_clock(&sim, past).await;
    let rec = reconciler::build_on(&ledger, processor, clock.clone(), "rec", |c| {
        limits(c, Duration::from_millis(200));
        c.resubmit_after_window = resubmit_after_window;
    });
    let paid = converge_on(&ledger, &rec, &clock, &paid).await;
    let never = converge_on(&ledger, &rec, &clock, &never).await;
    PastTheWindow {
        ledger,
        sim,
        rec,
        paid,
        never,
        database,
    }
}

#[tokio::test]
async fn a_closed_retention_window_goes_to_a_human_never_to_a_second_payment() {
    let PastTheWindow {
        sim,
        paid,
        never,
        database: _db,
        ..
    } = past_the_window(false).await;
    // The paid one is still found by lookup after the window.
    assert_eq!(paid.status, Status::Succeeded);
    assert_eq!(
        never.status,
        Status::NeedsAttention,
        "a new submission after the window could pay twice"
    );
    assert!(never.failure_message.unwrap().contains("retention window"));
    assert_eq!(payments_for(&sim, paid.id.as_str()).await, 1);
    assert_eq!(payments_for(&sim, never.id.as_str()).await, 0);
}

#[tokio::test]
async fn after_the_window_the_resubmit_policy_pays_once_and_only_what_never_landed() {
    let PastTheWindow {
        ledger,
        sim,
        rec,
        paid,
        never,
        database: _db,
    } = past_the_window(true).await;
    // The paid one must be found by lookup (a resubmit would pay twice); the other may be submitted once.
    assert_eq!(paid.status, Status::Succeeded);
    assert_eq!(
        never.status,
        Status::Succeeded,
        "{:?}",
        never.failure_message
    );
    assert_eq!(payments_for(&sim, paid.id.as_str()).await, 1);
    assert_eq!(payments_for(&sim, never.id.as_str()).await, 1);
    assert_eq!(
        rec.metrics().resubmitted.get(),
        1,
        "only the one that never landed"
    );
    // Another sweep finds nothing left to do and pays nothing more.
    rec.sweep_once(false).await.unwrap();
    assert_eq!(payments_for(&sim, never.id.as_str()).await, 1);
    let history = ledger.events_unscoped(&never.id).await.unwrap();
    assert!(
        history.iter().any(|e| e.event == "claim"
            && e.detail
                .as_deref()
                .unwrap_or("")
                .contains("resubmit after the key's retention window")),
        "the history explains why it was submitted again: {history:?}"
    );
}

#[tokio::test]
async fn two_reconcilers_racing_pay_each_operation_once() {
    let (ledger, _db) = support::postgres_ledger().await;
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let mut ops = Vec::new();
    for i in 0..40 {
        let op = ready_operation(&ledger, &format!("INV-RR{i}"), "pm_card_visa", now()).await;
        let c = rows::executing(
            &ledger,
            &op.id,
            &rows::holder("w", Duration::from_millis(60_000)),
            now(),
        )
        .await;
        if i % 2 == 0 {
            // Half reached the processor before the worker vanished.
            let _ = payonce_execution::submit::submit(
                processes::stripe(&sim, None).as_ref(),
                &c,
                Duration::from_secs(5),
            )
            .await;
        }
        let unknown = rows::unknown_outcome("crash", None, now());
        rows::record(&ledger, &c, &unknown, "w", now()).await;
        ops.push(op);
    }
    let r1 = with_margin(
        &ledger,
        processes::stripe(&sim, None),
        "rec-shared",
        Duration::from_secs(60),
    );
    let r2 = with_margin(
        &ledger,
        processes::stripe(&sim, None),
        "rec-shared",
        Duration::from_secs(60),
    );
    let (a, b) = tokio::join!(r1.sweep_once(false), r2.sweep_once(false));
    let (a, b) = (a.unwrap(), b.unwrap());
    // One owner name for both: the sweep lease admits both, so only per-row fencing keeps them apart.
    assert!(a.swept && b.swept, "both reconcilers swept at once");
    eprintln!("{}\n{}", a.summary(), b.summary());
    for _ in 0..5 {
        let (x, y) = tokio::join!(r1.sweep_once(false), r2.sweep_once(false));
        x.unwrap();
        y.unwrap();
    }
    for op in &ops {
        assert_eq!(
            ledger.get(&tenant(), &op.id).await.unwrap().status,
            Status::Succeeded,
            "{}",
            op.id
        );
        assert_eq!(payments_for(&sim, op.id.as_str()).await, 1, "{}", op.id);
    }
}

fn signed(secret: &str, body: &str) -> String {
    payonce_simulator::signature_header(secret, now().as_millis() / 1000, body.as_bytes())
}

#[tokio::test]
async fn webhooks_apply_in_any_order_once_and_forged_ones_are_refused() {
    let (ledger, _db) = support::postgres_ledger().await;
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let rec = with_margin(
        &ledger,
        processes::stripe(&sim, None),
        "rec",
        Duration::from_secs(60),
    );
    let secrets = vec!["whsec_test".to_string()];
    // Paid at the processor; the worker's response was lost and it has not recorded anything.
    let op = crashed_mid_flight(&ledger, &sim, "INV-WH", true).await;
    let pi = processes::audit(&sim)
        .await
        .into_iter()
        .find(|p| p["metadata"]["payonce_operation_id"] == op.id.as_str())
        .unwrap();
    let reference = pi["id"].as_str().unwrap().to_string();
    let event = |id: &str, kind: &str| {
        serde_json::json!({
            "id": id, "object": "event", "type": kind, "created": now().as_millis() / 1000,
            "data": {"object": {"id": reference, "object": "payment_intent", "status": "succeeded",
                "metadata": {"payonce_operation_id": op.id.as_str()}}},
            "request": {"id": "req_1", "idempotency_key": op.idempotency_key.as_str()}
        })
        .to_string()
    };
    // Out of order: succeeded arrives before created, and before the worker records anything.
    let succeeded = event("evt_2", "payment_intent.succeeded");
    let created = event("evt_1", "payment_intent.created");
    let r = webhooks::ingest(
        ledger.as_ref(),
        &secrets,
        Some(&signed("whsec_test", &succeeded)),
        succeeded.as_bytes(),
        now(),
    )
    .await
    .unwrap();
    assert!(r.pending_check, "stored as a hint");
    let dup = webhooks::ingest(
        ledger.as_ref(),
        &secrets,
        Some(&signed("whsec_test", &succeeded)),
        succeeded.as_bytes(),
        now(),
    )
    .await
    .unwrap();
    assert!(dup.duplicate);
    let r = webhooks::ingest(
        ledger.as_ref(),
        &secrets,
        Some(&signed("whsec_test", &created)),
        created.as_bytes(),
        now(),
    )
    .await
    .unwrap();
    assert!(!r.pending_check, "created carries no outcome");
    // One check of the stored hint, by retrieving the object: applied once.
    let pass = rec.check_hints_once().await.unwrap();
    assert_eq!((pass.applied, pass.closed), (1, 0), "{pass:?}");
    assert_eq!(rec.check_hints_once().await.unwrap().applied, 0);
    // The worker's late record loses to the stored truth.
    let late = payonce_ledger::Recorded::Succeeded(Paid {
        reference: reference.clone(),
        result: serde_json::json!({}),
    });
    assert!(
        ledger
            .record(&recording(&Fence::of(&op), &late, "w"), now())
            .await
            .is_err()
    );
    // Forged, stale and unsigned deliveries change nothing.
    let failed = event("evt_3", "payment_intent.payment_failed");
    let forged = webhooks::ingest(
        ledger.as_ref(),
        &secrets,
        Some(&signed("whsec_wrong", &failed)),
        failed.as_bytes(),
        now(),
    )
    .await;
    assert!(matches!(forged, Err(WebhookError::BadSignature)));
    let stale = payonce_simulator::signature_header(
        "whsec_test",
        now().as_millis() / 1000 - 301,
        failed.as_bytes(),
    );
    assert!(matches!(
        webhooks::ingest(
            ledger.as_ref(),
            &secrets,
            Some(&stale),
            failed.as_bytes(),
            now()
        )
        .await,
        Err(WebhookError::StaleTimestamp)
    ));
    assert!(matches!(
        webhooks::ingest(ledger.as_ref(), &secrets, None, failed.as_bytes(), now()).await,
        Err(WebhookError::MissingSignature)
    ));
    // A signed "failed" about a payment the processor holds as succeeded: checked, nothing moves.
    webhooks::ingest(
        ledger.as_ref(),
        &secrets,
        Some(&signed("whsec_test", &failed)),
        failed.as_bytes(),
        now(),
    )
    .await
    .unwrap();
    rec.check_hints_once().await.unwrap();
    let row = ledger.get(&tenant(), &op.id).await.unwrap();
    assert_eq!(
        (row.status, row.external_ref.as_deref()),
        (Status::Succeeded, Some(reference.as_str()))
    );
    assert_eq!(payments_for(&sim, op.id.as_str()).await, 1);
}

#[tokio::test]
async fn the_oldest_unknown_is_aged_from_its_first_submission_not_its_last_check() {
    let (ledger, _db) = support::postgres_ledger().await;
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let rec = with_margin(
        &ledger,
        processes::stripe(&sim, None),
        "rec",
        Duration::from_secs(60),
    );
    let t0 = now();
    let op = ready_operation(&ledger, "INV-AGE", "pm_card_visa", t0).await;
    let claimed = rows::executing(
        &ledger,
        &op.id,
        &rows::holder("w", Duration::from_millis(100)),
        t0,
    )
    .await;
    let lease = ledger
        .expired_leases(t0 + Duration::from_millis(1_000), 10)
        .await
        .unwrap()
        .remove(0);
    let status = ledger
        .expire_lease(
            &ExpireLease {
                lease: &lease,
                actor: "rec",
                next_check_at: t0 + Duration::from_millis(1_000),
            },
            t0 + Duration::from_millis(1_000),
        )
        .await
        .unwrap();
    assert_eq!(status, Status::Unknown);
    // A check 100 s later moves updated_at; the doubt is still as old as the submission.
    ledger
        .defer_check(
            &DeferCheck {
                fence: &Fence {
                    id: op.id.clone(),
                    attempt: claimed.attempt,
                },
                next_check_at: t0 + Duration::from_millis(200_000),
                detail: "lookup unavailable",
                actor: "rec",
            },
            t0 + Duration::from_millis(100_000),
        )
        .await
        .unwrap();
    let mut exposition = payonce_core::metrics::Exposition::default();
    rec.metrics()
        .render(
            ledger.as_ref(),
            t0 + Duration::from_millis(120_000),
            &mut exposition,
        )
        .await
        .unwrap();
    let text = exposition.finish();
    assert!(
        text.contains("payonce_oldest_unknown_age_seconds 120\n"),
        "{text}"
    );
    assert!(
        text.contains("payonce_operations{status=\"unknown\"} 1\n"),
        "{text}"
    );
}

#[tokio::test]
async fn an_unavailable_lookup_backs_off_and_a_found_decline_is_recorded_as_failed() {
    let (ledger, _db) = support::postgres_ledger_on_callers_clock().await;
    let sim = processes::simulator(SimulatorConfig::default()).await;
    // The reconciler's clock runs past the crashed worker's lease: no waiting for it to lapse.
    let rec = reconciler::build_on(
        &ledger,
        processes::stripe(&sim, None),
        Arc::new(AheadClock {
            ahead: CRASHED_LEASE + Duration::from_millis(100),
        }),
        "rec",
        |c| {
            limits(c, Duration::from_secs(60));
            c.check_backoff_base = Duration::from_secs(2);
        },
    );
    // Declined at the processor, the response lost, the worker gone.
    let declined =
        crashed_paying_with(&ledger, &sim, "INV-D1", "pm_card_chargeDeclined", true).await;
    // The next processor request is rate limited: the lookup is unavailable.
    processes::arm_faults(
        &sim,
        serde_json::json!([{"match": "*", "fault": "rate_limit_429", "times": 1}]),
    )
    .await;
    let before = now();
    let first = rec.sweep_once(false).await.unwrap();
    assert_eq!((first.marked_unknown, first.deferred), (1, 1), "{first:?}");
    let deferred = ledger.get(&tenant(), &declined.id).await.unwrap();
    assert_eq!(deferred.status, Status::Unknown);
    assert!(deferred.check_count >= 1);
    assert!(
        deferred.next_check_at.unwrap() >= before + Duration::from_millis(2_000),
        "the next check waits for the backoff base"
    );
    // Not due yet: a sweep right away does not look again.
    let early = rec.sweep_once(false).await.unwrap();
    assert_eq!(early.deferred + early.resolved_failed, 0, "{early:?}");
    // Once due, the lookup answers: the decline is found and recorded, never paid.
    let done = converge(&ledger, &rec, &declined).await;
    assert_eq!(done.status, Status::Failed, "{:?}", done.failure_message);
    assert_eq!(done.failure_code.as_deref(), Some("card_declined"));
    assert!(
        done.external_ref.is_some(),
        "the declined attempt's reference is kept"
    );
    assert_eq!(rec.metrics().resolved_failed.get(), 1);
    assert!(rec.metrics().deferred.get() >= 1);
    let audit = processes::audit(&sim).await;
    let row = audit
        .iter()
        .find(|p| p["metadata"]["payonce_operation_id"] == declined.id.as_str())
        .unwrap();
    assert_ne!(row["status"], "succeeded");
}

/// A processor whose lookups wait at a gate (if it has one), so a sweep can be held mid-way while
/// it owns the sweep lease; every lookup is counted, and each finds the payment declined.
struct GatedLookups {
    contract: payonce_processor::Contract,
    entered: tokio::sync::mpsc::UnboundedSender<()>,
    gate: Option<Arc<tokio::sync::Notify>>,
    lookups: std::sync::atomic::AtomicUsize,
}

impl GatedLookups {
    fn new(
        entered: tokio::sync::mpsc::UnboundedSender<()>,
        gate: Option<Arc<tokio::sync::Notify>>,
    ) -> Self {
        GatedLookups {
            contract: payonce_processor::Contract {
                name: "gated",
                ..payonce_processor::contract::STRIPE
            },
            entered,
            gate,
            lookups: std::sync::atomic::AtomicUsize::new(0),
        }
    }
}

#[async_trait::async_trait]
impl Processor for GatedLookups {
    fn contract(&self) -> &payonce_processor::Contract {
        &self.contract
    }
    async fn submit(
        &self,
        _request: &payonce_processor::SubmitRequest<'_>,
    ) -> payonce_processor::SubmitOutcome {
        panic!("the sweep-lease test never submits")
    }
    async fn submit_refund(
        &self,
        _request: &payonce_processor::RefundRequest<'_>,
    ) -> payonce_processor::SubmitOutcome {
        panic!("the sweep-lease test never refunds")
    }
    async fn lookup_refund(
        &self,
        _query: &payonce_processor::RefundLookupQuery<'_>,
    ) -> payonce_processor::LookupOutcome {
        panic!("the sweep-lease test sweeps no refund")
    }
    async fn lookup(
        &self,
        query: &payonce_processor::LookupQuery<'_>,
    ) -> payonce_processor::LookupOutcome {
        self.lookups
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let _ = self.entered.send(());
        if let Some(gate) = &self.gate {
            gate.notified().await;
        }
        payonce_processor::LookupOutcome::Found {
            reference: format!("pi_{}", query.operation_id),
            status: payonce_processor::FoundStatus::Failed {
                code: "card_declined".into(),
                message: "declined".into(),
            },
        }
    }
}

/// Two reconcilers (distinct owners) sweep one Postgres ledger at once: the one holding the sweep
/// lease does the work; the other stands down without a lookup or a write, and may sweep once the
/// lease is dropped.
#[tokio::test]
async fn the_sweep_lease_admits_one_reconciler_at_a_time() {
    let (ledger, _db) = support::postgres_ledger().await;
    let op = ready_operation(&ledger, "INV-LEASE", "pm_card_visa", now()).await;
    let c = rows::executing(
        &ledger,
        &op.id,
        &rows::holder("w", Duration::from_millis(60_000)),
        now(),
    )
    .await;
    let unknown = rows::unknown_outcome("crash", None, now());
    rows::record(&ledger, &c, &unknown, "w", now()).await;

    let (entered_tx, mut entered) = tokio::sync::mpsc::unbounded_channel();
    let gate = Arc::new(tokio::sync::Notify::new());
    let p1 = Arc::new(GatedLookups::new(entered_tx.clone(), Some(gate.clone())));
    // No gate for the second: if it swept without the lease it would look up and write at once.
    let p2 = Arc::new(GatedLookups::new(entered_tx, None));
    let r1 = with_margin(&ledger, p1.clone(), "rec-one", Duration::from_secs(60));
    let r2 = with_margin(&ledger, p2.clone(), "rec-two", Duration::from_secs(60));

    let holder = tokio::spawn(async move { r1.sweep_once(false).await });
    // rec-one holds the sweep lease and is mid-sweep, waiting on its lookup.
    entered.recv().await.unwrap();
    let stood_down = r2.sweep_once(false).await.unwrap();
    assert_eq!(
        stood_down,
        payonce_reconciler::SweepReport {
            actions: vec!["another reconciler holds the sweep lease; standing down".to_string()],
            ..Default::default()
        },
        "the reconciler without the lease did nothing"
    );
    assert_eq!(p2.lookups.load(std::sync::atomic::Ordering::SeqCst), 0);
    assert_eq!(
        ledger.get(&tenant(), &op.id).await.unwrap().status,
        Status::Unknown
    );

    gate.notify_one();
    let done = holder.await.unwrap().unwrap();
    assert!(done.swept);
    assert_eq!(done.resolved_failed, 1, "{done:?}");
    assert_eq!(p1.lookups.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(
        ledger.get(&tenant(), &op.id).await.unwrap().status,
        Status::Failed
    );
    // The holder dropped the lease at the end of its sweep: the other may sweep now.
    let after = r2.sweep_once(false).await.unwrap();
    assert!(after.swept, "{after:?}");
}

//! The worker against real Postgres and the simulator over HTTP, with real processes.

use crate::support::now;
use crate::support::postgres::TestDatabase;
use crate::support::processes::{self, payments_for};
use crate::support::reconciler;
use crate::support::rows;
use crate::support::{self, ready_operation, recording, tenant, wait_for};
use payonce_core::clock::{ManualClock, SharedClock, SystemClock, Timestamp};
use payonce_core::state::Status;
use payonce_ledger::Fence;
use payonce_ledger::{
    ApplyReport, Declined, LeaseHolder, LedgerError, Paid, Recorded, SharedLedger,
};
use payonce_reconciler::Reconciler;
use payonce_simulator::SimulatorConfig;
use payonce_worker::{Worker, WorkerConfig};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::time::Duration;

async fn statuses(ledger: &SharedLedger) -> HashMap<Status, usize> {
    let mut m = HashMap::new();
    for c in ledger.count_by_status().await.unwrap() {
        m.insert(c.status, c.count as usize);
    }
    m
}

#[tokio::test]
async fn two_worker_processes_pay_each_of_500_operations_exactly_once() {
    let (ledger, url) = support::postgres_ledger().await;
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let t0 = now();
    let mut ids = Vec::new();
    for i in 0..500 {
        ids.push(
            ready_operation(&ledger, &format!("INV-P{i}"), "pm_card_visa", t0)
                .await
                .id,
        );
    }
    let env = [
        ("PAYONCE_WORKER_CONCURRENCY", "16"),
        ("PAYONCE_WORKER_BATCH", "8"),
    ];
    let mut a = processes::worker_process(&url, &sim, &env);
    let mut b = processes::worker_process(&url, &sim, &env);
    wait_for("all 500 succeeded", Duration::from_secs(120), || {
        let ledger = ledger.clone();
        async move { (statuses(&ledger).await.get(&Status::Succeeded) == Some(&500)).then_some(()) }
    })
    .await;
    // Graceful shutdown: SIGTERM, exit 0 within the grace period.
    assert!(processes::terminate(&mut a).await.success());
    assert!(processes::terminate(&mut b).await.success());
    let audit = processes::audit(&sim).await;
    assert_eq!(audit.len(), 500, "exactly 500 payments at the processor");
    let per_op = processes::payments_per_operation(&audit);
    for id in &ids {
        assert_eq!(per_op.get(id.as_str()), Some(&1), "{id} paid once");
    }
    // Both processes did work: the claims are shared, not one-worker-takes-all.
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&url)
        .await
        .unwrap();
    let claimers: i64 = sqlx::query_scalar(
        "SELECT COUNT(DISTINCT actor) FROM operation_events WHERE event = 'claim' \
         OR (event = 'submission_started' AND from_status = 'ready')",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(claimers, 2);
}

fn reconciler(ledger: &SharedLedger, sim: &payonce_simulator::Simulator) -> Reconciler {
    reconciler_on(ledger, sim, Arc::new(SystemClock))
}

/// [`reconciler`] on a given clock.
fn reconciler_on(
    ledger: &SharedLedger,
    sim: &payonce_simulator::Simulator,
    clock: SharedClock,
) -> Reconciler {
    reconciler::build_on(
        ledger,
        processes::stripe(sim, None),
        clock,
        "reconciler-test",
        reconciler::quick_rechecks,
    )
}

/// A worker killed at each failure point leaves a row the reconciler (and a fresh worker) finishes
/// with exactly one payment.
#[tokio::test]
async fn a_worker_killed_at_each_failure_point_is_finished_without_a_second_payment() {
    let (ledger, url) = support::postgres_ledger().await;
    let sim = processes::simulator(SimulatorConfig::default()).await;
    for point in [
        "after_claim",
        "after_submission_recorded",
        "after_processor_accepted",
    ] {
        let op = ready_operation(&ledger, &format!("INV-K-{point}"), "pm_card_visa", now()).await;
        let mut child = processes::worker_process(
            &url,
            &sim,
            &[
                ("PAYONCE_FAILPOINTS", point),
                ("PAYONCE_LEASE_TTL_MS", "800"),
                ("PAYONCE_LEASE_RENEW_MS", "200"),
            ],
        );
        let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
            .await
            .unwrap()
            .unwrap();
        assert!(
            !status.success(),
            "{point}: the worker died at the failure point ({status})"
        );
        let crashed = ledger.get(&tenant(), &op.id).await.unwrap();
        assert_eq!(
            crashed.status,
            Status::Executing,
            "{point}: left mid-flight"
        );
        // The worker's claim records the submission start in its own commit (`claim_to_submit`),
        // so even a worker killed right after its claim left a recorded submission.
        assert!(crashed.first_submitted_at.is_some(), "{point}");
        let expected_payments_now = usize::from(point == "after_processor_accepted");
        assert_eq!(
            payments_for(&sim, op.id.as_str()).await,
            expected_payments_now,
            "{point}"
        );

        let rec = reconciler(&ledger, &sim);
        let fresh = Worker::new(
            ledger.clone(),
            processes::stripe(&sim, None),
            Arc::new(SystemClock),
            WorkerConfig::new("fresh"),
        )
        .unwrap();
        let done = wait_for(
            &format!("{point}: converged"),
            Duration::from_secs(30),
            || {
                let (ledger, rec, fresh, id) = (ledger.clone(), &rec, &fresh, op.id.clone());
                async move {
                    rec.sweep_once(false).await.unwrap();
                    fresh.run_once().await.unwrap();
                    let row = ledger.get(&tenant(), &id).await.unwrap();
                    row.status.is_terminal().then_some(row)
                }
            },
        )
        .await;
        assert_eq!(done.status, Status::Succeeded, "{point}");
        assert_eq!(
            payments_for(&sim, op.id.as_str()).await,
            1,
            "{point}: exactly one payment"
        );
        let trail = ledger.events_unscoped(&op.id).await.unwrap();
        let events: Vec<String> = trail.iter().map(|e| e.event.to_string()).collect();
        eprintln!("{point}: {events:?}");
        // Exactly one lapse, to unknown: at every failure point a submission was recorded (by the
        // claim itself at `after_claim`), so the reconciler looked it up instead of re-queueing it.
        let lapses: Vec<&str> = events
            .iter()
            .map(String::as_str)
            .filter(|e| e.starts_with("lease_expired"))
            .collect();
        assert_eq!(
            lapses,
            vec!["lease_expired_submitted"],
            "{point}: the history explains the crash"
        );
        assert_eq!(
            &events[..3],
            ["create", "approve", "submission_started"].map(String::from),
            "{point}"
        );
        assert!(
            trail[2].is_claim() && trail[2].from_status.as_deref() == Some("ready"),
            "{point}: the claim is logged as its submission start: {:?}",
            trail[2]
        );
    }
}

#[tokio::test]
async fn a_zombie_worker_whose_lease_was_reclaimed_cannot_record() {
    let (ledger, _db) = support::postgres_ledger_on_callers_clock().await;
    let sim = processes::simulator(SimulatorConfig::default()).await;
    // Time moves only when the test says so: the lease lapses because the clock is moved past it.
    let manual = ManualClock::new(now());
    let clock: SharedClock = manual.clone();
    let op = ready_operation(&ledger, "INV-ZOMBIE", "pm_card_visa", clock.now()).await;
    let claimed_at = clock.now();
    let lease = Duration::from_millis(300);
    let zombie = rows::executing(&ledger, &op.id, &rows::holder("zombie", lease), claimed_at).await;
    // The zombie stalls past its lease; the reconciler takes over and finishes with the same key.
    manual.advance(lease + Duration::from_millis(1));
    let rec = reconciler_on(&ledger, &sim, clock.clone());
    wait_for("reconciler finishes", Duration::from_secs(20), || {
        let (ledger, rec, id, manual) = (ledger.clone(), &rec, op.id.clone(), manual.clone());
        async move {
            rec.sweep_once(false).await.unwrap();
            // Re-checks fall due as the clock moves, a tenth of a second per sweep.
            manual.advance(Duration::from_millis(100));
            let row = ledger.get(&tenant(), &id).await.unwrap();
            (row.status == Status::Succeeded).then_some(())
        }
    })
    .await;
    // The zombie wakes, submits with the same key (replayed, not a new charge) and tries to record.
    let processor = processes::stripe(&sim, None);
    let outcome =
        payonce_execution::submit::submit(processor.as_ref(), &zombie, Duration::from_secs(5))
            .await;
    let recorded =
        WorkerConfig::new("zombie")
            .submit
            .to_recorded(outcome, zombie.attempt, clock.now());
    let write = ledger
        .record(
            &recording(&Fence::of(&zombie), &recorded, "zombie"),
            clock.now(),
        )
        .await;
    assert!(
        matches!(write, Err(LedgerError::Fenced { .. })),
        "{write:?}"
    );
    let failed = Recorded::Failed(Declined {
        code: "zombie".into(),
        message: "stale".into(),
        reference: None,
    });
    assert!(matches!(
        ledger
            .record(
                &recording(&Fence::of(&zombie), &failed, "zombie"),
                clock.now()
            )
            .await,
        Err(LedgerError::Fenced { .. })
    ));
    assert_eq!(payments_for(&sim, op.id.as_str()).await, 1);
    assert_eq!(
        ledger.get(&tenant(), &op.id).await.unwrap().status,
        Status::Succeeded
    );
}

/// A processor whose success is recorded by a webhook before the submitter's own write: the
/// submitter's fenced write loses, as it must.
struct WebhookFirst {
    ledger: SharedLedger,
}

#[async_trait::async_trait]
impl processes::SubmitHook for WebhookFirst {
    async fn after(
        &self,
        request: &payonce_processor::SubmitRequest<'_>,
        outcome: &payonce_processor::SubmitOutcome,
    ) {
        if let payonce_processor::SubmitOutcome::Succeeded {
            reference, result, ..
        } = outcome
        {
            let report = payonce_ledger::Report::Succeeded(Paid {
                reference: reference.clone(),
                result: result.clone(),
            });
            self.ledger
                .apply_report(
                    &ApplyReport {
                        id: request.operation_id,
                        report: &report,
                        source: "webhook",
                    },
                    now(),
                )
                .await
                .unwrap();
        }
    }
}

/// The inline recorder (the reconciler's same-key retry) and the daemon's grouped one settle an
/// outcome the same way: a write that lost to a webhook is counted as already recorded,
/// never as a success of this worker.
#[tokio::test]
async fn both_execution_paths_count_a_write_lost_to_a_webhook_the_same_way() {
    let (ledger, _db) = support::postgres_ledger().await;
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let processor: Arc<dyn payonce_processor::Processor> = Arc::new(processes::Hooked {
        inner: processes::stripe(&sim, None),
        hook: WebhookFirst {
            ledger: ledger.clone(),
        },
    });
    let clock: SharedClock = Arc::new(SystemClock);

    let single = ready_operation(&ledger, "INV-ONE-PATH-1", "pm_card_visa", now()).await;
    let claimed = ledger
        .claim(
            &LeaseHolder {
                owner: "single",
                lease_ttl: Duration::from_millis(60_000),
            },
            1,
            now(),
        )
        .await
        .unwrap()
        .remove(0);
    let metrics = payonce_execution::ExecutionMetrics::default();
    let config = WorkerConfig::new("single");
    let processors = payonce_processor::Processors::single(processor.clone());
    let ex = payonce_execution::Execution {
        processors: &processors,
        clock: &clock,
        policy: &config.submit,
        metrics: &metrics,
        wait_max: config.submit.rate_limit_wait_max,
        stop: None,
        lost_rows: None,
        prepaid: false,
    };
    let inline = payonce_execution::Inline {
        ledger: ledger.as_ref(),
        clock: &clock,
        actor: "single",
        metrics: &metrics,
    };
    let status = payonce_execution::execute(&ex, claimed, inline)
        .await
        .unwrap();
    assert_eq!(status, Status::Succeeded);
    assert_eq!(
        (metrics.succeeded.get(), metrics.already_recorded.get()),
        (0, 1),
        "inline recorder"
    );

    let batched = ready_operation(&ledger, "INV-ONE-PATH-2", "pm_card_visa", now()).await;
    let worker = Worker::new(
        ledger.clone(),
        processor.clone(),
        clock.clone(),
        WorkerConfig::new("daemon"),
    )
    .unwrap();
    assert_eq!(worker.run_once().await.unwrap(), 1);
    let metrics = worker.metrics();
    assert_eq!(
        (
            metrics.execution.succeeded.get(),
            metrics.execution.already_recorded.get()
        ),
        (0, 1),
        "daemon batch"
    );
    for op in [&single, &batched] {
        assert_eq!(
            ledger.get(&tenant(), &op.id).await.unwrap().status,
            Status::Succeeded
        );
        assert_eq!(payments_for(&sim, op.id.as_str()).await, 1);
    }
}

/// Counts the submissions started and, at each, how many operations the ledger holds claimed and
/// unrecorded (`executing`), read in one snapshot. (Comparing a count of recorded outcomes read
/// before the submission with a count of starts taken after it overstated the gap whenever a
/// write recorded outcomes and started their refills in between.)
struct AheadOfTheLedger {
    ledger: SharedLedger,
    started: std::sync::atomic::AtomicUsize,
    most_executing: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl processes::SubmitHook for AheadOfTheLedger {
    async fn before(&self, _request: &payonce_processor::SubmitRequest<'_>) {
        use std::sync::atomic::Ordering::SeqCst;
        let executing = statuses(&self.ledger)
            .await
            .get(&Status::Executing)
            .copied()
            .unwrap_or(0);
        self.started.fetch_add(1, SeqCst);
        self.most_executing.fetch_max(executing, SeqCst);
    }
}

/// A submission keeps its in-flight slot until its outcome is written: however fast the processor
/// answers, the worker never has more than `concurrency` operations submitted and unrecorded, so
/// answered work cannot pile up in memory (nor, after a crash, in the reconciler's lookups).
#[tokio::test]
async fn answered_submissions_hold_their_slot_until_the_outcome_is_recorded() {
    const CONCURRENCY: usize = 4;
    const OPERATIONS: usize = 40;
    let (ledger, _url) = support::postgres_ledger().await;
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let t0 = now();
    for i in 0..OPERATIONS {
        ready_operation(&ledger, &format!("INV-SLOT{i}"), "pm_card_visa", t0).await;
    }
    let processor = Arc::new(processes::Hooked {
        inner: processes::stripe(&sim, None),
        hook: AheadOfTheLedger {
            ledger: ledger.clone(),
            started: std::sync::atomic::AtomicUsize::new(0),
            most_executing: std::sync::atomic::AtomicUsize::new(0),
        },
    });
    let mut config = WorkerConfig::new("worker-slots");
    config.concurrency = CONCURRENCY;
    config.batch_size = 2;
    // The bound holds for the worker as a whole, over its pipelines' shares of the slots.
    config.pipelines = 2;
    let running = processes::run_worker(ledger.clone(), processor.clone(), config);
    wait_for("every operation succeeded", Duration::from_secs(60), || {
        let ledger = ledger.clone();
        async move {
            (statuses(&ledger).await.get(&Status::Succeeded) == Some(&OPERATIONS)).then_some(())
        }
    })
    .await;
    running.stop().await.unwrap();
    use std::sync::atomic::Ordering::SeqCst;
    assert_eq!(processor.hook.started.load(SeqCst), OPERATIONS);
    // Reached (the worker fills its slots) and never passed.
    assert_eq!(processor.hook.most_executing.load(SeqCst), CONCURRENCY);
    assert_eq!(processes::audit(&sim).await.len(), OPERATIONS);
    sim.shutdown().await;
}

/// Holds every submission at the door until the test lets one through; counts the answers.
struct Gate {
    door: tokio::sync::Semaphore,
    started: std::sync::atomic::AtomicUsize,
    answered: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl processes::SubmitHook for Gate {
    async fn before(&self, _request: &payonce_processor::SubmitRequest<'_>) {
        self.started
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.door
            .acquire()
            .await
            .expect("the gate stays open")
            .forget();
    }
    async fn after(
        &self,
        _request: &payonce_processor::SubmitRequest<'_>,
        _outcome: &payonce_processor::SubmitOutcome,
    ) {
        self.answered
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// `n` ready operations on a fresh Postgres ledger (invoices `{prefix}0`, ...) and the Stripe
/// adapter to a fresh simulator behind a closed [`Gate`]; the database goes with its handle.
async fn behind_a_gate(
    prefix: &str,
    n: usize,
) -> (
    SharedLedger,
    TestDatabase,
    payonce_simulator::Simulator,
    Arc<processes::Hooked<Gate>>,
) {
    let (ledger, database) = support::postgres_ledger().await;
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let t0 = now();
    for i in 0..n {
        ready_operation(&ledger, &format!("{prefix}{i}"), "pm_card_visa", t0).await;
    }
    let processor = Arc::new(processes::Hooked {
        inner: processes::stripe(&sim, None),
        hook: Gate {
            door: tokio::sync::Semaphore::new(0),
            started: Default::default(),
            answered: Default::default(),
        },
    });
    (ledger, database, sim, processor)
}

/// Waits until `n` operations of `ledger` succeeded.
async fn all_succeeded(ledger: &SharedLedger, n: usize) {
    wait_for("every operation succeeded", Duration::from_secs(30), || {
        let ledger = ledger.clone();
        async move { (statuses(&ledger).await.get(&Status::Succeeded) == Some(&n)).then_some(()) }
    })
    .await;
}

/// A busy worker claims and records in groups: answers that come back one at a time are written
/// `record_batch_max` per commit (they wait up to `record_linger` for each other), and slots that
/// free up one write at a time are claimed together once a full claim's worth is free (the next
/// claim waits up to `claim_cooldown`). Without the linger every answer is its own write; without
/// the cooldown the first freed slots are claimed at once, two by two. Here outcome writes do not
/// claim (`claim_with_outcomes` off); the next test has them refill.
#[tokio::test]
async fn a_busy_worker_claims_and_records_in_groups() {
    let (metrics, payments) = claims_and_records_in_groups("INV-GROUP", false).await;
    // 8 claimed in 2 claims of at most 4 (`batch_size`), none by a write: two claims of 4. 8 outcomes
    // in 4 writes of at most 2 (`record_batch_max`): four writes of 2. The counters are the ones
    // on-call sees.
    assert_eq!(group_counts(&metrics, payments), (8, 2, 0, 8, 4, 8));
    assert_eq!(
        metrics.known_to_recorded.count(),
        8,
        "one answer-to-recorded observation per outcome written"
    );
}

/// With `claim_with_outcomes` (the default), a write refills the slots its outcomes held in its
/// own commit: the first claim takes 4, the writes of answers 1–2 and 3–4 each claim 2 more into
/// the 2 slots they free (nothing else claims: no slot is ever free), the last two writes find
/// nothing ready and give their slots back. Never more than 4 in flight.
#[tokio::test]
async fn outcome_writes_refill_the_slots_they_free() {
    let (metrics, payments) = claims_and_records_in_groups("INV-REFILL", true).await;
    assert_eq!(group_counts(&metrics, payments), (8, 3, 2, 8, 4, 8));
}

/// Operations claimed, claims, claims made by outcome writes, outcomes recorded as succeeded,
/// outcome writes, and payments at the simulator (one per operation).
fn group_counts(
    metrics: &payonce_worker::metrics::WorkerMetrics,
    payments: usize,
) -> (u64, u64, u64, u64, u64, usize) {
    (
        metrics.claimed.get(),
        metrics.claims.get(),
        metrics.claims_with_outcomes.get(),
        metrics.execution.succeeded.get(),
        metrics.record_writes.get(),
        payments,
    )
}

/// 8 operations through a worker of 4 slots, one pipeline, claims of up to 4 and writes of up to
/// 2, the cooldown and linger at their longest; the answers let through one at a time, each after
/// the one before came back. The worker's counters and the simulator's payments.
async fn claims_and_records_in_groups(
    prefix: &str,
    claim_with_outcomes: bool,
) -> (Arc<payonce_worker::metrics::WorkerMetrics>, usize) {
    use std::sync::atomic::Ordering::SeqCst;
    let (ledger, _db, sim, processor) = behind_a_gate(prefix, 8).await;
    let mut config = WorkerConfig::new(format!("worker-{prefix}"));
    config.concurrency = 4;
    config.batch_size = 4;
    // One claim loop: with two, each claims into its own two slots (the next test).
    config.pipelines = 1;
    config.record_batch_max = 2;
    config.claim_with_outcomes = claim_with_outcomes;
    // The longest both may be: every step below happens well inside them.
    config.claim_cooldown = payonce_worker::config::BATCH_WAIT_MAX;
    config.record_linger = payonce_worker::config::BATCH_WAIT_MAX;
    let running = processes::run_worker(ledger.clone(), processor.clone(), config);
    let gate = &processor.hook;
    for wave in 1..=2 {
        wait_for(
            "a full claim is submitting",
            Duration::from_secs(30),
            || async { (gate.started.load(SeqCst) >= 4 * wave).then_some(()) },
        )
        .await;
        // Let the answers through one at a time, each only after the one before has come back.
        for answered in 4 * (wave - 1) + 1..=4 * wave {
            gate.door.add_permits(1);
            wait_for(
                "the processor answered",
                Duration::from_secs(30),
                || async { (gate.answered.load(SeqCst) == answered).then_some(()) },
            )
            .await;
            assert!(
                gate.started.load(SeqCst) - gate.answered.load(SeqCst) <= 4,
                "never more submissions unanswered than slots"
            );
        }
    }
    all_succeeded(&ledger, 8).await;
    let metrics = running.metrics.clone();
    running.stop().await.unwrap();
    assert_eq!(gate.started.load(SeqCst), 8);
    let payments = processes::audit(&sim).await.len();
    sim.shutdown().await;
    (metrics, payments)
}

/// A worker's in-flight slots are split over its pipelines, each claiming into its own share: with
/// 4 slots over 2 pipelines an idle worker makes two claims of 2 (one pipeline would make one claim
/// of 4), never has more than 4 submissions started before one is answered, and pays each once.
#[tokio::test]
async fn pipelines_claim_into_their_own_share_of_the_slots() {
    use std::sync::atomic::Ordering::SeqCst;
    let (ledger, _db, sim, processor) = behind_a_gate("INV-PIPE", 8).await;
    let mut config = WorkerConfig::new("worker-pipelines");
    config.concurrency = 4;
    config.batch_size = 4;
    config.pipelines = 2;
    assert_eq!(config.pipeline_slots(), vec![2, 2]);
    let running = processes::run_worker(ledger.clone(), processor.clone(), config);
    let gate = &processor.hook;
    wait_for(
        "every slot is submitting",
        Duration::from_secs(30),
        || async { (gate.started.load(SeqCst) == 4).then_some(()) },
    )
    .await;
    // Every slot is taken and nothing has answered: no third claim can have happened.
    assert_eq!(
        (running.metrics.claimed.get(), running.metrics.claims.get()),
        (4, 2)
    );
    assert_eq!(statuses(&ledger).await.get(&Status::Executing), Some(&4));
    gate.door.add_permits(8);
    all_succeeded(&ledger, 8).await;
    let metrics = running.metrics.clone();
    running.stop().await.unwrap();
    assert_eq!(metrics.claimed.get(), 8);
    assert_eq!(gate.started.load(SeqCst), 8);
    assert_eq!(
        processes::audit(&sim).await.len(),
        8,
        "one payment per operation"
    );
    sim.shutdown().await;
}

/// The ledger's queue with test hooks: the first claim panics (`first_claim_panics`: a bug in one
/// pipeline); an outcome write that would also claim waits until the worker has renewed its leases
/// twice, its start and then its shutdown (`hold_refills`: a refill under way when shutdown
/// begins); every outcome write waits for a permit of `writes_open` (`hold_writes`), counting how
/// many are under way at once.
struct Hooked {
    inner: SharedLedger,
    first_claim_panics: AtomicBool,
    hold_refills: bool,
    refill_waiting: AtomicBool,
    renewals: AtomicUsize,
    renewed: tokio::sync::Notify,
    hold_writes: bool,
    writes_open: tokio::sync::Semaphore,
    writing: AtomicUsize,
    most_writing: AtomicUsize,
}

impl Hooked {
    fn new(inner: SharedLedger) -> Self {
        Hooked {
            inner,
            first_claim_panics: AtomicBool::new(false),
            hold_refills: false,
            refill_waiting: AtomicBool::new(false),
            renewals: AtomicUsize::new(0),
            renewed: tokio::sync::Notify::new(),
            hold_writes: false,
            writes_open: tokio::sync::Semaphore::new(0),
            writing: AtomicUsize::new(0),
            most_writing: AtomicUsize::new(0),
        }
    }
}

#[async_trait::async_trait]
impl payonce_ledger::LedgerTime for Hooked {
    async fn now(&self, local: Timestamp) -> Result<Timestamp, LedgerError> {
        self.inner.now(local).await
    }
}

#[async_trait::async_trait]
impl payonce_ledger::Queue for Hooked {
    async fn claim(
        &self,
        holder: &LeaseHolder<'_>,
        batch: u32,
        now: Timestamp,
    ) -> Result<Vec<payonce_ledger::Claimed>, LedgerError> {
        self.inner.claim(holder, batch, now).await
    }
    async fn claim_to_submit(
        &self,
        holder: &LeaseHolder<'_>,
        batch: u32,
        now: Timestamp,
    ) -> Result<Vec<payonce_ledger::Claimed>, LedgerError> {
        if self.first_claim_panics.swap(false, SeqCst) {
            panic!("a bug in one pipeline's claim");
        }
        self.inner.claim_to_submit(holder, batch, now).await
    }
    async fn claim_lanes(
        &self,
        holder: &LeaseHolder<'_>,
        takes: &[payonce_ledger::lanes::Take],
        now: Timestamp,
    ) -> Result<Vec<payonce_ledger::Claimed>, LedgerError> {
        if self.first_claim_panics.swap(false, SeqCst) {
            panic!("a bug in one pipeline's claim");
        }
        self.inner.claim_lanes(holder, takes, now).await
    }
    async fn ready_lanes(
        &self,
        limit: u32,
    ) -> Result<Vec<payonce_ledger::lanes::ReadyLane>, LedgerError> {
        self.inner.ready_lanes(limit).await
    }
    async fn renew(
        &self,
        holder: &LeaseHolder<'_>,
        held: &[payonce_core::id::OperationId],
        now: Timestamp,
    ) -> Result<Vec<(payonce_core::id::OperationId, i64)>, LedgerError> {
        let renewed = self.inner.renew(holder, held, now).await;
        self.renewals.fetch_add(1, SeqCst);
        self.renewed.notify_waiters();
        renewed
    }
    async fn mark_submitting(
        &self,
        fences: &[Fence],
        now: Timestamp,
    ) -> Result<Vec<bool>, LedgerError> {
        self.inner.mark_submitting(fences, now).await
    }
    async fn release(&self, fence: &Fence, actor: &str, now: Timestamp) -> Result<(), LedgerError> {
        self.inner.release(fence, actor, now).await
    }
    async fn record(
        &self,
        request: &payonce_ledger::RecordOutcome<'_>,
        now: Timestamp,
    ) -> Result<payonce_ledger::Operation, LedgerError> {
        self.inner.record(request, now).await
    }
    async fn record_batch(
        &self,
        items: &[(Fence, Recorded)],
        actor: &str,
        now: Timestamp,
    ) -> Result<Vec<bool>, LedgerError> {
        self.inner.record_batch(items, actor, now).await
    }
    async fn record_and_claim(
        &self,
        items: &[(Fence, Recorded)],
        holder: &LeaseHolder<'_>,
        pick: payonce_ledger::lanes::Pick<'_>,
        now: Timestamp,
    ) -> Result<(Vec<bool>, Vec<payonce_ledger::Claimed>), LedgerError> {
        if self.hold_refills && !pick.is_empty() {
            self.refill_waiting.store(true, SeqCst);
            loop {
                let renewed = self.renewed.notified();
                if self.renewals.load(SeqCst) >= 2 {
                    break;
                }
                renewed.await;
            }
        }
        if self.hold_writes {
            let under_way = self.writing.fetch_add(1, SeqCst) + 1;
            self.most_writing.fetch_max(under_way, SeqCst);
            self.writes_open
                .acquire()
                .await
                .expect("the test never closes the gate")
                .forget();
            self.writing.fetch_sub(1, SeqCst);
        }
        self.inner.record_and_claim(items, holder, pick, now).await
    }
    async fn record_lost_row(
        &self,
        id: &payonce_core::id::OperationId,
        reference: &str,
        found_by: &str,
        now: Timestamp,
    ) -> Result<(), LedgerError> {
        self.inner
            .record_lost_row(id, reference, found_by, now)
            .await
    }
    async fn current(&self, fence: &Fence) -> Result<payonce_ledger::Operation, LedgerError> {
        self.inner.current(fence).await
    }
    async fn wait_for_ready(&self, max_wait: Duration) {
        self.inner.wait_for_ready(max_wait).await
    }
}

/// A pipeline that panics stops the whole worker, as the single loop's panic did: the other
/// pipeline stops claiming and finishes what it holds, then the panic reaches the caller (the
/// process exits non-zero) with nothing left executing under a lease the worker would renew, and
/// every payment made recorded.
#[tokio::test]
async fn a_panicking_pipeline_stops_the_worker_and_leaves_nothing_executing() {
    let (ledger, _url) = support::postgres_ledger().await;
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let t0 = now();
    for i in 0..6 {
        ready_operation(&ledger, &format!("INV-PANIC{i}"), "pm_card_visa", t0).await;
    }
    let queue = Arc::new(Hooked::new(ledger.clone()));
    queue.first_claim_panics.store(true, SeqCst);
    let mut config = WorkerConfig::new("worker-panics");
    config.concurrency = 4;
    config.batch_size = 2;
    config.pipelines = 2;
    let worker = Arc::new(
        Worker::new(
            queue,
            processes::stripe(&sim, None),
            Arc::new(SystemClock),
            config,
        )
        .unwrap(),
    );
    // Never asked to stop: it must stop by itself.
    let run = tokio::spawn(worker.run(std::future::pending()));
    let ended = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the worker stopped by itself");
    let panic = ended.expect_err("the pipeline's panic reached the caller");
    assert!(panic.is_panic());
    let by_status = statuses(&ledger).await;
    assert_eq!(by_status.get(&Status::Executing), None, "{by_status:?}");
    let succeeded = by_status.get(&Status::Succeeded).copied().unwrap_or(0);
    let ready = by_status.get(&Status::Ready).copied().unwrap_or(0);
    assert_eq!(succeeded + ready, 6, "{by_status:?}");
    assert_eq!(processes::audit(&sim).await.len(), succeeded);
    sim.shutdown().await;
}

/// An outcome write that claims while shutdown begins: the claim commits with the outcomes, and the
/// operations it took go back to `ready` (released, this attempt's submission record withdrawn),
/// never submitted. The write is held until the worker's renewer has seen the shutdown, so the
/// window is hit every run: 2 paid and recorded, 2 claimed by the write and released, 2 payments.
#[tokio::test]
async fn a_refill_claimed_as_shutdown_begins_is_given_back_unsent() {
    let (ledger, _url) = support::postgres_ledger().await;
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let t0 = now();
    let mut ops = Vec::new();
    for i in 0..4 {
        ops.push(ready_operation(&ledger, &format!("INV-STOPREFILL{i}"), "pm_card_visa", t0).await);
    }
    let mut hooked = Hooked::new(ledger.clone());
    hooked.hold_refills = true;
    let queue = Arc::new(hooked);
    let mut config = WorkerConfig::new("worker-stop-refill");
    config.concurrency = 2;
    config.batch_size = 2;
    config.pipelines = 1;
    config.record_batch_max = 2;
    config.record_linger = payonce_worker::config::BATCH_WAIT_MAX;
    // The renewer runs at its start and then only at shutdown, within the test.
    config.lease_ttl = Duration::from_secs(60);
    config.renew_interval = Duration::from_secs(50);
    let running = Running::start(queue.clone(), &sim, config);
    let metrics = running.metrics.clone();
    wait_for(
        "a write that claims is held",
        Duration::from_secs(30),
        || async { queue.refill_waiting.load(SeqCst).then_some(()) },
    )
    .await;
    let summary = running.stop().await;
    assert_eq!((summary.claimed, summary.released), (4, 2));
    assert_eq!(metrics.claims_with_outcomes.get(), 1);
    let by_status = statuses(&ledger).await;
    assert_eq!(
        (
            by_status.get(&Status::Succeeded),
            by_status.get(&Status::Ready)
        ),
        (Some(&2), Some(&2)),
        "{by_status:?}"
    );
    for op in &ops[2..] {
        let now = ledger.get(&tenant(), &op.id).await.unwrap();
        assert_eq!(
            (
                now.status,
                now.attempt,
                now.first_submitted_at,
                now.lease_owner
            ),
            (Status::Ready, 1, None, None),
            "claimed by the write, given back unsent"
        );
    }
    assert_eq!(
        processes::audit(&sim).await.len(),
        2,
        "only the first two were paid"
    );
    sim.shutdown().await;
}

/// A worker on a hooked queue, paying through `sim`, that runs until [`Running::stop`].
struct Running {
    metrics: Arc<payonce_worker::WorkerMetrics>,
    stop: tokio::sync::oneshot::Sender<()>,
    run: tokio::task::JoinHandle<payonce_worker::RunSummary>,
}

impl Running {
    fn start(
        queue: Arc<Hooked>,
        sim: &payonce_simulator::Simulator,
        config: WorkerConfig,
    ) -> Running {
        let worker = Arc::new(
            Worker::new(
                queue,
                processes::stripe(sim, None),
                Arc::new(SystemClock),
                config,
            )
            .unwrap(),
        );
        let metrics = worker.metrics();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let run = tokio::spawn(worker.run(async move {
            let _ = stopped.await;
        }));
        Running { metrics, stop, run }
    }

    /// Asks the worker to stop and waits (a minute at most) for its summary.
    async fn stop(self) -> payonce_worker::RunSummary {
        self.stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(60), self.run)
            .await
            .expect("the worker stopped")
            .unwrap()
    }
}

/// A pipeline keeps `record_writes` outcome writes under way at once, no more: with every write
/// held at the ledger, six answers written one per write (`record_batch_max` 1, no linger) start
/// exactly `record_writes` writes; the rest wait for them. Each operation is paid and recorded once.
#[tokio::test]
async fn a_pipeline_keeps_record_writes_writes_under_way() {
    for record_writes in [1, 2] {
        let (ledger, _url) = support::postgres_ledger().await;
        let sim = processes::simulator(SimulatorConfig::default()).await;
        let t0 = now();
        for i in 0..6 {
            ready_operation(
                &ledger,
                &format!("INV-WRITES{record_writes}-{i}"),
                "pm_card_visa",
                t0,
            )
            .await;
        }
        let mut hooked = Hooked::new(ledger.clone());
        hooked.hold_writes = true;
        let queue = Arc::new(hooked);
        let mut config = WorkerConfig::new(format!("worker-writes-{record_writes}"));
        config.concurrency = 6;
        config.batch_size = 6;
        config.pipelines = 1;
        config.record_batch_max = 1;
        config.record_linger = Duration::ZERO;
        config.claim_with_outcomes = false;
        config.record_writes = record_writes;
        let running = Running::start(queue.clone(), &sim, config);
        let metrics = running.metrics.clone();
        wait_for(
            "every answer is in and the writes are held",
            Duration::from_secs(30),
            || async {
                (metrics.execution.submit_latency.count() == 6
                    && queue.writing.load(SeqCst) == record_writes)
                    .then_some(())
            },
        )
        .await;
        queue.writes_open.add_permits(6);
        all_succeeded(&ledger, 6).await;
        running.stop().await;
        assert_eq!(
            (
                queue.most_writing.load(SeqCst),
                metrics.record_writes.get(),
                processes::audit(&sim).await.len()
            ),
            (record_writes, 6, 6),
            "writes under way at most, writes, payments"
        );
        sim.shutdown().await;
    }
}

//! A sweep works on many stuck operations at once (`ReconcilerConfig::concurrency`, issue 16):
//! every one is still resolved exactly once, with one fenced write per step and one payment each,
//! and a concurrency of zero is taken as one rather than sweeping nothing.

use crate::support::now;
use crate::support::processes::{self, payments_for};
use crate::support::reconciler;
use crate::support::{self, ready_operation, tenant};
use payonce_core::clock::{Clock, Timestamp};
use payonce_core::state::Status;
use payonce_ledger::{Fence, LeaseHolder};
use payonce_processor::SubmitOutcome;
use payonce_reconciler::Reconciler;
use payonce_simulator::SimulatorConfig;
use std::sync::Arc;
use std::time::Duration;

/// The reconciler's clock, this far ahead of the wall clock: the crashed leases have lapsed for it
/// (its ledgers are on their callers' clocks: `support::postgres_ledger_on_callers_clock`).
#[derive(Debug)]
struct Ahead(Duration);

impl Clock for Ahead {
    fn now(&self) -> Timestamp {
        now() + self.0
    }
}

/// Lease of the crashed worker below.
const LEASE: Duration = Duration::from_millis(100);
/// Stuck operations in the concurrent sweep; half paid with the response lost, half never sent.
const STUCK: usize = 10;

/// A sweep's (marked unknown, resolved succeeded, retried with the same key, fenced, errors).
fn counts(report: &payonce_reconciler::SweepReport) -> (u32, u32, u32, u32, u32) {
    (
        report.marked_unknown,
        report.resolved_succeeded,
        report.retried_same_key,
        report.fenced,
        report.errors,
    )
}

fn reconciler(
    ledger: &payonce_ledger::SharedLedger,
    sim: &payonce_simulator::Simulator,
    concurrency: usize,
) -> Reconciler {
    reconciler::build_on(
        ledger,
        processes::stripe(sim, None),
        Arc::new(Ahead(Duration::from_secs(1))),
        "rec",
        |c| c.concurrency = concurrency,
    )
}

/// `n` ready operations that one crashed worker claimed, all with a submission recorded; the
/// operations (in creation order) and the claimed rows.
async fn crashed_after_marking(
    ledger: &payonce_ledger::SharedLedger,
    prefix: &str,
    n: usize,
) -> (
    Vec<payonce_ledger::Operation>,
    Vec<payonce_ledger::Operation>,
) {
    let mut ops = Vec::new();
    for i in 0..n {
        let at = now() + Duration::from_millis(i as u64);
        ops.push(ready_operation(ledger, &format!("{prefix}{i}"), "pm_card_visa", at).await);
    }
    let claimed_at = now() + Duration::from_millis(n as u64);
    let claimed = ledger
        .claim(
            &LeaseHolder {
                owner: "crashed",
                lease_ttl: LEASE,
            },
            n as u32,
            claimed_at,
        )
        .await
        .unwrap();
    assert_eq!(claimed.len(), n);
    let fences: Vec<Fence> = claimed.iter().map(Fence::of).collect();
    let marked = ledger.mark_submitting(&fences, claimed_at).await.unwrap();
    assert!(marked.iter().all(|m| *m), "{marked:?}");
    (ops, claimed)
}

#[tokio::test]
async fn a_concurrent_sweep_resolves_every_stuck_operation_once() {
    let (ledger, _db) = support::postgres_ledger_on_callers_clock().await;
    let sim = processes::simulator(SimulatorConfig::default()).await;
    // One crashed worker held them all with a submission recorded; the even ones reached the
    // processor (response dropped), the odd ones never left.
    let (ops, claimed) = crashed_after_marking(&ledger, "INV-C", STUCK).await;
    let paid: Vec<_> = ops.iter().step_by(2).map(|o| o.id.clone()).collect();
    for c in claimed.iter().filter(|c| paid.contains(&c.id)) {
        processes::arm_faults(
            &sim,
            serde_json::json!([{"match": c.idempotency_key.as_str(), "fault": "drop_after_commit", "times": 1}]),
        )
        .await;
        let outcome = payonce_execution::submit::submit(
            processes::stripe(&sim, None).as_ref(),
            c,
            Duration::from_secs(5),
        )
        .await;
        assert!(
            matches!(outcome, SubmitOutcome::Unknown { .. }),
            "{outcome:?}"
        );
    }

    let report = reconciler(&ledger, &sim, 4)
        .sweep_once(false)
        .await
        .unwrap();
    assert_eq!(
        counts(&report),
        (STUCK as u32, (STUCK / 2) as u32, (STUCK / 2) as u32, 0, 0),
        "{report:?}"
    );
    for op in &ops {
        let row = ledger.get(&tenant(), &op.id).await.unwrap();
        assert_eq!(row.status, Status::Succeeded, "{}", op.id);
        assert_eq!(row.idempotency_key, op.idempotency_key, "never a new key");
        assert_eq!(payments_for(&sim, op.id.as_str()).await, 1, "{}", op.id);
        let expired: Vec<_> = ledger
            .events(&tenant(), &op.id)
            .await
            .unwrap()
            .into_iter()
            .filter(|e| e.event == "lease_expired_submitted")
            .collect();
        assert_eq!(expired.len(), 1, "one expiry per operation: {expired:?}");
        assert_eq!(expired[0].attempt, 1);
    }
    // The lease lines come first, one per operation, in the order the rows were read.
    let lines: Vec<_> = report.actions[..STUCK]
        .iter()
        .map(|a| a.split(':').next().unwrap().to_string())
        .collect();
    let mut expected: Vec<_> = ops.iter().map(|o| o.id.as_str().to_string()).collect();
    let mut sorted = lines.clone();
    sorted.sort();
    expected.sort();
    assert_eq!(sorted, expected);
    assert!(
        report.actions[..STUCK]
            .iter()
            .all(|a| a.ends_with("lease of crashed expired -> unknown"))
    );
}

#[tokio::test]
async fn a_sweep_concurrency_of_zero_still_sweeps_one_at_a_time() {
    let (ledger, _db) = support::postgres_ledger_on_callers_clock().await;
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let op = ready_operation(&ledger, "INV-Z1", "pm_card_visa", now()).await;
    let claimed = ledger
        .claim(
            &LeaseHolder {
                owner: "crashed",
                lease_ttl: LEASE,
            },
            1,
            now(),
        )
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    let rec = reconciler(&ledger, &sim, 0);
    let report = tokio::time::timeout(Duration::from_secs(30), rec.sweep_once(false))
        .await
        .expect("a zero concurrency must not stall the sweep")
        .unwrap();
    assert_eq!(
        (report.requeued, report.marked_unknown),
        (1, 0),
        "{report:?}"
    );
    assert_eq!(
        ledger.get(&tenant(), &op.id).await.unwrap().status,
        Status::Ready
    );
    assert_eq!(payments_for(&sim, op.id.as_str()).await, 0);
}

/// More stuck operations than one sweep write takes (`ReconcilerConfig::write_batch`, here 2 of
/// 10): the expiries and the found payments go in five groups each, written concurrently (up to
/// the sweep's concurrency), and every operation is still moved and resolved once, on both stores.
#[tokio::test]
async fn a_sweep_writes_more_rows_than_one_group_holds() {
    let (postgres, _db) = support::postgres_ledger_on_callers_clock().await;
    let stores = [postgres, support::sqlite_ledger().await];
    for ledger in stores {
        sweep_in_groups(&ledger, 10).await;
    }
}

async fn sweep_in_groups(ledger: &payonce_ledger::SharedLedger, stuck: usize) {
    let sim = processes::simulator(SimulatorConfig::default()).await;
    // A crashed worker recorded every submission and every payment reached the processor; no
    // outcome reached the ledger.
    let (ops, claimed) = crashed_after_marking(ledger, "INV-G", stuck).await;
    let stripe = processes::stripe(&sim, None);
    for c in &claimed {
        let outcome =
            payonce_execution::submit::submit(stripe.as_ref(), c, Duration::from_secs(5)).await;
        assert!(
            matches!(outcome, SubmitOutcome::Succeeded { .. }),
            "{outcome:?}"
        );
    }

    let report = reconciler::build_on(
        ledger,
        processes::stripe(&sim, None),
        Arc::new(Ahead(Duration::from_secs(1))),
        "rec",
        |c| c.write_batch = 2,
    )
    .sweep_once(false)
    .await
    .unwrap();
    let n = stuck as u32;
    assert_eq!(
        counts(&report),
        (n, n, 0, 0, 0),
        "{:?}",
        (
            report.marked_unknown,
            report.resolved_succeeded,
            report.fenced,
            report.errors
        )
    );
    for op in &ops {
        let row = ledger.get(&tenant(), &op.id).await.unwrap();
        assert_eq!(row.status, Status::Succeeded, "{}", op.id);
        let moves: Vec<String> = ledger
            .events(&tenant(), &op.id)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.event.to_string())
            .skip(4)
            .collect();
        assert_eq!(
            moves,
            ["lease_expired_submitted", "processor_succeeded"],
            "{}",
            op.id
        );
    }
    // One payment per operation at the processor: the sweep looked, it never paid.
    let paid = processes::audit(&sim).await;
    assert_eq!(paid.len(), stuck, "the sweep paid nothing more");
    let mut named: Vec<String> = paid
        .iter()
        .map(|p| {
            p["metadata"]["payonce_operation_id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    named.sort();
    named.dedup();
    assert_eq!(named.len(), stuck, "one payment per operation");
}

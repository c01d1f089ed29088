//! Property tests (proptest): the state machine under any sequence of events, and any interleaving of
//! duplicate or reordered webhook reports, lookups and worker records against a real ledger (SQLite
//! in memory, for speed) converging to one final state with one success.

use crate::support::rows;
use crate::support::{ready_operation, recording, sqlite_ledger, tenant};
use payonce_core::clock::Timestamp;
use payonce_core::state::{ALL_EVENTS, ALL_STATUSES, Event, Status, transition};
use payonce_ledger::Fence;
use payonce_ledger::{ApplyReport, Paid, Recorded, Report, SharedLedger};
use proptest::prelude::*;
use std::time::Duration;

/// Cases per ledger property: each builds a fresh in-memory ledger, so they are kept few.
const LEDGER_CASES: u32 = 48;

fn any_status() -> impl Strategy<Value = Status> {
    proptest::sample::select(ALL_STATUSES.to_vec())
}

fn any_event() -> impl Strategy<Value = Event> {
    proptest::sample::select(ALL_EVENTS.to_vec())
}

proptest! {
    /// From any state, under any sequence of events (illegal ones refused): a terminal state is left
    /// only by a conflicting report, only to needs_attention; succeeded is entered only on the
    /// processor's or on-call's word; executing is entered only by a claim.
    #[test]
    fn terminal_states_are_left_only_through_the_conflict_path(
        start in any_status(),
        events in proptest::collection::vec(any_event(), 0..40),
    ) {
        let mut state = start;
        for event in events {
            let Ok(next) = transition(state, event) else { continue };
            if state.is_terminal() {
                prop_assert_eq!(event, Event::ConflictingReport, "{:?} left by {:?}", state, event);
                prop_assert_eq!(next, Status::NeedsAttention);
            }
            if next == Status::Succeeded && state != Status::Succeeded {
                prop_assert!(matches!(event, Event::ProcessorSucceeded | Event::ResolveSucceeded), "{:?}", event);
            }
            if next == Status::Executing {
                prop_assert_eq!(event, Event::Claim);
            }
            if next == Status::Ready {
                prop_assert!(state != Status::Unknown || event == Event::ResolveRetry,
                    "an unknown outcome is re-run only by an on-call retry (same key)");
            }
            state = next;
        }
    }
}

/// One thing that can happen to an operation whose payment truly succeeded as `pi_truth`.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// `payment_intent.succeeded` webhook (possibly a duplicate delivery).
    WebhookSucceeded,
    /// The reconciler's lookup found the payment.
    LookupSucceeded,
    /// The worker records the processor's answer (fenced by its attempt).
    WorkerRecordsSucceeded,
    /// The worker lost the answer and records unknown.
    WorkerRecordsUnknown,
}

fn any_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        Just(Step::WebhookSucceeded),
        Just(Step::LookupSucceeded),
        Just(Step::WorkerRecordsSucceeded),
        Just(Step::WorkerRecordsUnknown),
    ]
}

fn succeeded_report() -> Report {
    Report::Succeeded(Paid {
        reference: "pi_truth".into(),
        result: serde_json::json!({"id": "pi_truth", "status": "succeeded"}),
    })
}

async fn apply(
    ledger: &SharedLedger,
    id: &payonce_core::id::OperationId,
    attempt: i64,
    step: Step,
    at: Timestamp,
) {
    let fence = Fence {
        id: id.clone(),
        attempt,
    };
    // Errors are the point: a fenced or stale write must simply lose.
    let _ = match step {
        Step::WebhookSucceeded => ledger
            .apply_report(
                &ApplyReport {
                    id,
                    report: &succeeded_report(),
                    source: "webhook evt_prop",
                },
                at,
            )
            .await
            .map(drop),
        Step::LookupSucceeded => ledger
            .apply_report(
                &ApplyReport {
                    id,
                    report: &succeeded_report(),
                    source: "lookup by prop",
                },
                at,
            )
            .await
            .map(drop),
        Step::WorkerRecordsSucceeded => {
            let r = Recorded::Succeeded(Paid {
                reference: "pi_truth".into(),
                result: serde_json::json!({"id": "pi_truth"}),
            });
            ledger
                .record(&recording(&fence, &r, "worker-prop"), at)
                .await
                .map(drop)
        }
        Step::WorkerRecordsUnknown => {
            let r = rows::unknown_outcome("answer lost", None, at);
            ledger
                .record(&recording(&fence, &r, "worker-prop"), at)
                .await
                .map(drop)
        }
    };
}

/// Runs `steps` against a fresh ledger, then the reconciler's eventual lookup; returns the status
/// before that lookup, and after it (status, reference, moves into succeeded).
fn run_interleaving(steps: &[Step]) -> (Status, (Status, Option<String>, usize)) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let ledger = sqlite_ledger().await;
        let t0 = Timestamp::from_millis(1_800_000_000_000);
        let op = ready_operation(&ledger, "INV-PROP", "pm_card_visa", t0).await;
        let claimed = rows::executing(
            &ledger,
            &op.id,
            &rows::holder("worker-prop", Duration::from_secs(60)),
            t0,
        )
        .await;
        for (i, step) in steps.iter().enumerate() {
            apply(
                &ledger,
                &op.id,
                claimed.attempt,
                *step,
                t0 + Duration::from_millis(1 + i as u64),
            )
            .await;
        }
        let before = ledger.get(&tenant(), &op.id).await.unwrap().status;
        apply(
            &ledger,
            &op.id,
            claimed.attempt,
            Step::LookupSucceeded,
            t0 + Duration::from_millis(100),
        )
        .await;
        let row = ledger.get(&tenant(), &op.id).await.unwrap();
        let into_succeeded = ledger
            .events_unscoped(&op.id)
            .await
            .unwrap()
            .iter()
            .filter(|e| e.to_status == "succeeded" && e.from_status.as_deref() != Some("succeeded"))
            .count();
        (before, (row.status, row.external_ref, into_succeeded))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(LEDGER_CASES))]

    /// Any interleaving of duplicate and reordered webhooks, lookups and worker records of one true
    /// success never reaches needs_attention or a second success; once the reconciler's lookup has
    /// run it ends succeeded with the one reference, entered once, whatever the order. (A worker's
    /// record after its own `unknown` is fenced: only a lookup or a webhook settles that row.)
    #[test]
    fn reports_and_lookups_in_any_order_converge_to_one_success(
        steps in proptest::collection::vec(any_step(), 1..12),
        rotate in 0usize..12,
    ) {
        let (before, after) = run_interleaving(&steps);
        prop_assert!(matches!(before, Status::Executing | Status::Unknown | Status::Succeeded), "{:?}: {:?}", steps, before);
        prop_assert_eq!(after.0, Status::Succeeded, "{:?}", steps);
        prop_assert_eq!(after.1.as_deref(), Some("pi_truth"));
        prop_assert_eq!(after.2, 1, "one move into succeeded: {:?}", steps);
        let mut other = steps.clone();
        let n = other.len();
        other.rotate_left(rotate % n);
        let (_, after2) = run_interleaving(&other);
        prop_assert_eq!(after, after2, "order changed the outcome: {:?}", other);
    }
}

//! One conformance suite, run against every store (Postgres and SQLite), plus the Postgres
//! concurrency tests the design depends on.

use crate::support::rows;
use crate::support::{self, details, every_store, ready_operation, recording, tenant};
use payonce_core::clock::Timestamp;
use payonce_core::id::{BusinessKey, OperationId, TenantId};
use payonce_core::state::{Status, legal_log_entry};
use payonce_ledger::lanes::Pick;
use payonce_ledger::{
    Applied, ApplyReport, Cancel, ClaimUnknown, Declined, DeferCheck, Escalate, ExpireLease, Fence,
    LeaseHolder, LedgerError, LimitError, ListFilter, NewApproval, NewOperation, NewProcessorEvent,
    NewToolCall, PAGE_MAX, Paid, ProcessorEventKey, RecordOutcome, Recorded, Report, Resolution,
    Resolve, SharedLedger, ToolAnswer,
};
use std::collections::HashSet;
use std::time::Duration;

mod cancelled_begin;
mod hints;
mod intake;
mod lanes;
mod outage;
mod queue_depth;
mod refunds;
mod retention;
mod sweep_batches;
mod tool_calls;

const T0: i64 = 1_800_000_000_000;
const LEASE_MS: i64 = 30_000;
const LEASE: Duration = Duration::from_millis(30_000);

fn at(ms: i64) -> Timestamp {
    Timestamp::from_millis(ms)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A lease holder of the suite: `owner` with the suite's [`LEASE`].
fn holder(owner: &str) -> LeaseHolder<'_> {
    LeaseHolder {
        owner,
        lease_ttl: LEASE,
    }
}

fn fence(id: &OperationId, attempt: i64) -> Fence {
    Fence {
        id: id.clone(),
        attempt,
    }
}

fn new_op(invoice: &str, amount: i64) -> NewOperation {
    NewOperation::keyed(
        &crate::support::key_secret(),
        tenant(),
        BusinessKey::parse(&format!("invoice:{invoice}:pay")).unwrap(),
        details(invoice, amount, "pm_card_visa"),
        "service:test".into(),
    )
}

/// The customer's approval of `op` as it was created (its own details hash), valid for a minute from `T0`.
fn approval_of(op: &payonce_ledger::Operation) -> NewApproval {
    NewApproval {
        operation: op.id.clone(),
        details_hash: op.details_hash.clone(),
        approved_by: "customer:cus_test".into(),
        method: "confirmation_page".into(),
        expires_at: at(T0 + 60_000),
        priority: None,
    }
}

async fn for_each_store<F, Fut>(test: F)
where
    F: Fn(SharedLedger) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for ledger in every_store().await {
        eprintln!("store: {}", ledger.store());
        test(ledger.clone()).await;
        assert_every_logged_move_is_legal(&ledger).await;
    }
}

/// Every event-log row the test left behind is a legal transition of the state machine (or the
/// creation, or a note that leaves the state as it was): the statements take their moves from the
/// table, and the trigger logs what they wrote.
async fn assert_every_logged_move_is_legal(ledger: &SharedLedger) {
    let all = ledger
        .list(&ListFilter {
            limit: PAGE_MAX,
            ..ListFilter::default()
        })
        .await
        .unwrap();
    assert!(
        all.len() < PAGE_MAX as usize,
        "the check must see every row"
    );
    for op in all {
        for e in ledger.events_unscoped(&op.id).await.unwrap() {
            assert!(
                legal_log_entry(e.from_status.as_deref(), &e.to_status, e.event.as_str()),
                "{} on {}: {:?} -> {} by {:?} is not a legal move",
                ledger.store(),
                op.id,
                e.from_status,
                e.to_status,
                e.event
            );
        }
    }
}

#[test]
fn the_log_check_refuses_a_move_the_table_does_not_allow() {
    // What the check catches: a statement writing `release` into `unknown`, or a note that moves.
    assert!(!legal_log_entry(Some("executing"), "unknown", "release"));
    assert!(!legal_log_entry(Some("unknown"), "ready", "check_deferred"));
    assert!(legal_log_entry(
        Some("executing"),
        "unknown",
        "outcome_unknown"
    ));
}

/// The ledger's time (`Queue::now`, issue 43): Postgres answers its server's clock whatever the
/// caller's says, SQLite (in the caller's process) and a Postgres store on its callers' clocks
/// answer the caller's.
#[tokio::test]
async fn the_ledgers_time_is_the_servers_on_postgres_and_the_callers_on_sqlite() {
    use payonce_core::clock::{Clock, SystemClock};
    let (postgres, _db) = support::postgres_ledger().await;
    let off = at(T0);
    let before = SystemClock.now();
    let server = postgres.now(off).await.unwrap();
    let after = SystemClock.now();
    // The test database runs on this machine: its clock is this one's, whatever `off` says.
    let slack = Duration::from_secs(1);
    assert!(
        server >= before.saturating_sub_span(slack) && server <= after + slack,
        "{server} not within [{before}, {after}] (± {slack:?})"
    );
    assert_eq!(support::sqlite_ledger().await.now(off).await.unwrap(), off);
    let (by_hand, _by_hand_db) = support::postgres_ledger_on_callers_clock().await;
    assert_eq!(by_hand.now(off).await.unwrap(), off);
}

#[tokio::test]
async fn create_or_get_returns_the_same_operation_and_refuses_changed_details() {
    for_each_store(|ledger| async move {
        let first = ledger
            .create_or_get(new_op("INV-1", 2048), at(T0))
            .await
            .unwrap();
        assert!(first.inserted);
        assert_eq!(first.operation.status, Status::AwaitingApproval);
        assert_eq!(first.operation.attempt, 0);
        let again = ledger
            .create_or_get(new_op("INV-1", 2048), at(T0 + 1))
            .await
            .unwrap();
        assert!(!again.inserted);
        assert_eq!(
            again.operation.id, first.operation.id,
            "same business key and details: same operation"
        );
        assert_eq!(
            again.operation.idempotency_key,
            first.operation.idempotency_key
        );
        let changed = ledger
            .create_or_get(new_op("INV-1", 9999), at(T0 + 2))
            .await;
        match changed {
            Err(LedgerError::Conflict { existing }) => assert_eq!(existing, first.operation.id),
            other => panic!("expected a conflict, got {other:?}"),
        }
        let stored = ledger.get(&tenant(), &first.operation.id).await.unwrap();
        assert_eq!(
            stored.details.money().amount_minor(),
            2048,
            "a conflict never updates"
        );
        let other_tenant = payonce_core::id::TenantId::parse("globex").unwrap();
        assert!(matches!(
            ledger.get(&other_tenant, &first.operation.id).await,
            Err(LedgerError::NotFound)
        ));
        let events = ledger.events_unscoped(&first.operation.id).await.unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].event, "create");
        assert_eq!(events[0].to_status, "awaiting_approval");
    })
    .await;
}

#[tokio::test]
async fn approval_binds_to_the_details_hash() {
    for_each_store(|ledger| async move {
        let op = ledger
            .create_or_get(new_op("INV-2", 2048), at(T0))
            .await
            .unwrap()
            .operation;
        let wrong = details("INV-2", 2049, "pm_card_visa").hash();
        let approval = |hash| NewApproval {
            operation: op.id.clone(),
            details_hash: hash,
            approved_by: "customer:cus_test".into(),
            method: "confirmation_page".into(),
            expires_at: at(T0 + 60_000),
            priority: None,
        };
        let refused = ledger.approve(&tenant(), approval(wrong), at(T0)).await;
        assert!(
            matches!(refused, Err(LedgerError::ApprovalMismatch)),
            "{refused:?}"
        );
        assert_eq!(
            ledger.get(&tenant(), &op.id).await.unwrap().status,
            Status::AwaitingApproval
        );
        let approved = ledger
            .approve(&tenant(), approval(op.details_hash.clone()), at(T0))
            .await
            .unwrap();
        assert_eq!(approved.status, Status::Ready);
        assert!(approved.approval_valid_at(at(T0 + 1)));
        assert!(
            !approved.approval_valid_at(at(T0 + 60_000)),
            "expired at its expiry"
        );
        let twice = ledger
            .approve(&tenant(), approval(op.details_hash.clone()), at(T0 + 5))
            .await
            .unwrap();
        assert_eq!(
            twice.status,
            Status::Ready,
            "approving twice is the same approval"
        );
        let stored = ledger
            .latest_approval(&tenant(), &op.id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(stored.details_hash, op.details_hash.as_str());
        assert_eq!(stored.method, "confirmation_page");
    })
    .await;
}

#[tokio::test]
async fn claim_submit_record_is_fenced_by_the_attempt() {
    for_each_store(|ledger| async move {
        let op = ready_operation(&ledger, "INV-3", "pm_card_visa", at(T0)).await;
        let claimed = ledger.claim(&holder("worker-a"), 10, at(T0)).await.unwrap();
        assert_eq!(claimed.len(), 1);
        let c = &claimed[0];
        assert_eq!(
            (c.id.clone(), c.status, c.attempt),
            (op.id.clone(), Status::Executing, 1)
        );
        assert_eq!(c.lease_owner.as_deref(), Some("worker-a"));
        assert!(
            ledger
                .claim(&holder("worker-b"), 10, at(T0))
                .await
                .unwrap()
                .is_empty(),
            "claimed once"
        );

        assert_eq!(
            ledger
                .mark_submitting(&[fence(&op.id, 1)], at(T0 + 1))
                .await
                .unwrap(),
            [true]
        );
        // A stale attempt can neither mark nor record.
        assert!(matches!(
            ledger
                .mark_submitting(&[fence(&op.id, 0)], at(T0 + 1))
                .await
                .unwrap()[..],
            [false]
        ));
        let ok = Recorded::Succeeded(Paid {
            reference: "pi_1".into(),
            result: serde_json::json!({"id": "pi_1"}),
        });
        assert!(matches!(
            ledger
                .record(&recording(&fence(&op.id, 2), &ok, "worker-a"), at(T0 + 2))
                .await,
            Err(LedgerError::Fenced { .. })
        ));
        let done = ledger
            .record(&recording(&fence(&op.id, 1), &ok, "worker-a"), at(T0 + 2))
            .await
            .unwrap();
        assert_eq!(done.status, Status::Succeeded);
        assert_eq!(done.external_ref.as_deref(), Some("pi_1"));
        assert_eq!(done.first_submitted_at, Some(at(T0 + 1)));
        assert_eq!(done.lease_owner, None);
        // Terminal: a second record loses.
        let declined = Recorded::Failed(Declined {
            code: "card_declined".into(),
            message: "no".into(),
            reference: None,
        });
        assert!(matches!(
            ledger
                .record(&recording(&fence(&op.id, 1), &declined, "w"), at(T0 + 3))
                .await,
            Err(LedgerError::Fenced { .. })
        ));
        let events: Vec<String> = ledger
            .events_unscoped(&op.id)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.event.to_string())
            .collect();
        assert_eq!(
            events,
            [
                "create",
                "approve",
                "claim",
                "submission_started",
                "processor_succeeded"
            ]
        );
    })
    .await;
}

#[tokio::test]
async fn not_submitted_goes_back_to_ready_and_expired_leases_split_on_submission() {
    for_each_store(|ledger| async move {
        let a = ready_operation(&ledger, "INV-4a", "pm_card_visa", at(T0)).await;
        let b = ready_operation(&ledger, "INV-4b", "pm_card_visa", at(T0 + 1)).await;
        let claimed = ledger.claim(&holder("w"), 10, at(T0 + 2)).await.unwrap();
        assert_eq!(claimed.len(), 2);
        // a: submission recorded then the worker vanished; b: vanished before submitting.
        assert_eq!(
            ledger
                .mark_submitting(&[fence(&a.id, 1)], at(T0 + 3))
                .await
                .unwrap(),
            [true]
        );
        assert!(
            ledger
                .expired_leases(at(T0 + 10), 100)
                .await
                .unwrap()
                .is_empty(),
            "not expired yet"
        );
        let both = [a.id.clone(), b.id.clone()];
        let renewed = ledger
            .renew(&holder("w"), &both, at(T0 + 10))
            .await
            .unwrap();
        assert_eq!(renewed.len(), 2);
        assert!(
            ledger
                .renew(&holder("w"), &[], at(T0 + 10))
                .await
                .unwrap()
                .is_empty(),
            "nothing held, nothing renewed"
        );
        // The owner gave up on b (say, its outcome could not be recorded): only a is renewed, and
        // b's lease lapses to the reconciler on time.
        let renewed = ledger
            .renew(&holder("w"), &both[..1], at(T0 + 20))
            .await
            .unwrap();
        assert_eq!(renewed, vec![(a.id.clone(), 1)]);
        let lapsed = ledger
            .expired_leases(at(T0 + 10 + LEASE_MS), 100)
            .await
            .unwrap();
        assert_eq!(
            lapsed.iter().map(|l| l.id.clone()).collect::<Vec<_>>(),
            vec![b.id.clone()],
            "only the lease left off the list lapsed"
        );
        let later = at(T0 + 20 + LEASE_MS);
        let expired = ledger.expired_leases(later, 100).await.unwrap();
        assert_eq!(expired.len(), 2);
        assert!(
            matches!(
                ledger
                    .mark_submitting(&[fence(&b.id, 1)], later)
                    .await
                    .unwrap()[..],
                [false]
            ),
            "an expired lease may not start a submission"
        );
        for lease in &expired {
            let to = ledger
                .expire_lease(
                    &ExpireLease {
                        lease,
                        actor: "reconciler",
                        next_check_at: later + ms(1_000),
                    },
                    later,
                )
                .await
                .unwrap();
            let expected = if lease.id == a.id {
                Status::Unknown
            } else {
                Status::Ready
            };
            assert_eq!(to, expected);
        }
        assert_eq!(
            ledger.get(&tenant(), &a.id).await.unwrap().status,
            Status::Unknown
        );
        let due = ledger.due_for_check(later + ms(1_000), 10).await.unwrap();
        assert_eq!(
            due.iter().map(|o| o.id.clone()).collect::<Vec<_>>(),
            vec![a.id.clone()]
        );
        // b runs again at attempt 2, nothing reaches the processor: back to ready with a delay.
        let again = ledger
            .claim(&holder("w2"), 10, later + ms(1))
            .await
            .unwrap();
        assert_eq!((again.len(), again[0].attempt), (1, 2));
        assert_eq!(
            ledger
                .mark_submitting(&[fence(&b.id, 2)], later + ms(2))
                .await
                .unwrap(),
            [true]
        );
        let retry = Recorded::RetryLater {
            reason: "connection refused".into(),
            available_at: later + ms(5_000),
            counted: true,
        };
        let op = ledger
            .record(&recording(&fence(&b.id, 2), &retry, "w2"), later + ms(3))
            .await
            .unwrap();
        assert_eq!(op.status, Status::Ready);
        assert_eq!(op.first_submitted_at, None, "nothing ever left");
        assert_eq!(
            op.not_sent_attempts, 1,
            "a counted attempt spends attempt_max"
        );
        assert!(
            ledger
                .claim(&holder("w3"), 10, later + ms(4_999))
                .await
                .unwrap()
                .is_empty(),
            "backoff respected"
        );
        assert_eq!(
            ledger
                .claim(&holder("w3"), 10, later + ms(5_000))
                .await
                .unwrap()
                .len(),
            1
        );
    })
    .await;
}

/// The worker's claim records the submission start in its own commit (`claim_to_submit`): the row
/// reads as a claim with a submission record and the audit trail logs one `submission_started`
/// with the claim's move (ready to executing), a lapsed lease is then
/// unknown, and a holder that sent nothing (released, rejected, retried later) withdraws its own
/// attempt's record, never an earlier attempt's.
#[tokio::test]
async fn a_claim_to_submit_records_the_start_and_only_its_own_attempt_withdraws_it() {
    for_each_store(|ledger| async move {
        let mut ops = Vec::new();
        for (i, invoice) in ["INV-CS-a", "INV-CS-b", "INV-CS-c", "INV-CS-d"]
            .iter()
            .enumerate()
        {
            ops.push(ready_operation(&ledger, invoice, "pm_card_visa", at(T0 + i as i64)).await);
        }
        let [a, b, c, d] = [0, 1, 2, 3].map(|i| ops[i].id.clone());
        let claimed = ledger
            .claim_to_submit(&holder("w"), 10, at(T0 + 5))
            .await
            .unwrap();
        assert_eq!(claimed.len(), 4);
        for op in &claimed {
            assert_eq!(
                (
                    op.status,
                    op.attempt,
                    op.first_submitted_at,
                    op.first_submitted_attempt,
                    op.last_submitted_at,
                    op.submit_count
                ),
                (
                    Status::Executing,
                    1,
                    Some(at(T0 + 5)),
                    Some(1),
                    Some(at(T0 + 5)),
                    1
                ),
                "{}",
                op.id
            );
        }
        let trail: Vec<_> = ledger
            .events_unscoped(&a)
            .await
            .unwrap()
            .into_iter()
            .map(|e| {
                (
                    e.event.to_string(),
                    e.from_status,
                    e.to_status,
                    e.actor,
                    e.attempt,
                    e.at,
                )
            })
            .collect();
        let step = |event: &str, from: &str| {
            let owner = "w".to_string();
            (
                event.to_string(),
                Some(from.to_string()),
                "executing".to_string(),
                owner,
                1,
                at(T0 + 5),
            )
        };
        assert_eq!(
            trail[..2].iter().map(|e| e.0.as_str()).collect::<Vec<_>>(),
            ["create", "approve"]
        );
        assert_eq!(
            trail[2..],
            [step("submission_started", "ready")],
            "one event: the submission start, with the claim's move"
        );

        // Recorded as a claim then a submission record would be: a success keeps the start.
        let ok = Recorded::Succeeded(Paid {
            reference: "pi_cs".into(),
            result: serde_json::json!({"id": "pi_cs"}),
        });
        let done = ledger
            .record(&recording(&fence(&a, 1), &ok, "w"), at(T0 + 6))
            .await
            .unwrap();
        assert_eq!(
            (done.status, done.first_submitted_at),
            (Status::Succeeded, Some(at(T0 + 5)))
        );

        // Given back before sending: ready, the record withdrawn.
        ledger
            .release(&fence(&b, 1), "w", at(T0 + 6))
            .await
            .unwrap();
        let released = ledger.get_unscoped(&b).await.unwrap();
        assert_eq!(
            (
                released.status,
                released.first_submitted_at,
                released.first_submitted_attempt
            ),
            (Status::Ready, None, None)
        );
        // Rejected before sending: rejected, not needs_attention, the record withdrawn.
        let rejected = Recorded::Rejected {
            code: "approval_expired".into(),
            message: "expired".into(),
        };
        let c_row = ledger
            .record(&recording(&fence(&c, 1), &rejected, "w"), at(T0 + 6))
            .await
            .unwrap();
        assert_eq!(
            (
                c_row.status,
                c_row.first_submitted_at,
                c_row.first_submitted_attempt
            ),
            (Status::Rejected, None, None)
        );

        // d's holder vanished: its lease lapses as submitted, to unknown.
        let lapse = at(T0 + 5 + LEASE_MS);
        let expired = ledger.expired_leases(lapse, 10).await.unwrap();
        assert_eq!(
            expired
                .iter()
                .map(|l| (l.id.clone(), l.submitted))
                .collect::<Vec<_>>(),
            [(d.clone(), true)]
        );
        let to = ledger
            .expire_lease(
                &ExpireLease {
                    lease: &expired[0],
                    actor: "reconciler",
                    next_check_at: lapse,
                },
                lapse,
            )
            .await
            .unwrap();
        assert_eq!(to, Status::Unknown);

        // b again, attempt 2, refused by a limit before sending: back to ready, withdrawn again.
        let again = ledger
            .claim_to_submit(&holder("w2"), 10, lapse)
            .await
            .unwrap();
        assert_eq!(
            again
                .iter()
                .map(|o| (o.id.clone(), o.attempt, o.first_submitted_attempt))
                .collect::<Vec<_>>(),
            [(b.clone(), 2, Some(2))]
        );
        let later = Recorded::RetryLater {
            reason: "rate limited".into(),
            available_at: lapse + ms(1_000),
            counted: false,
        };
        let b_row = ledger
            .record(&recording(&fence(&b, 2), &later, "w2"), lapse + ms(1))
            .await
            .unwrap();
        assert_eq!(
            (
                b_row.status,
                b_row.first_submitted_at,
                b_row.not_sent_attempts
            ),
            (Status::Ready, None, 0),
            "a rate limit waits and spends none of attempt_max"
        );

        // An earlier attempt's record is never withdrawn: the reconciler's attempt on d is rejected
        // after attempt 1 submitted, which a human must look at.
        let retry = ledger
            .claim_unknown(
                &ClaimUnknown {
                    fence: &fence(&d, 1),
                    holder: holder("reconciler"),
                    why: "retry with the same key",
                },
                lapse + ms(2),
            )
            .await
            .unwrap();
        let d_row = ledger
            .record(
                &recording(&fence(&d, retry.attempt), &rejected, "reconciler"),
                lapse + ms(3),
            )
            .await
            .unwrap();
        assert_eq!(
            (
                d_row.status,
                d_row.first_submitted_attempt,
                d_row.first_submitted_at
            ),
            (Status::NeedsAttention, Some(1), Some(at(T0 + 5)))
        );
    })
    .await;
}

/// A row an on-call person sent back to ready (`resolve retry`) after a submission keeps that
/// record: the next `claim_to_submit` counts its own submission but leaves attempt 1 as the first,
/// logs it as one `submission_started`, and its retry-later cannot withdraw attempt 1's
/// record (unknown, not ready). A plain claim of such a row logs no submission start.
#[tokio::test]
async fn a_claim_after_resolve_retry_keeps_the_earlier_submission_on_record() {
    for_each_store(|ledger| async move {
        let op = ready_operation(&ledger, "INV-RR", "pm_card_visa", at(T0)).await;
        ledger
            .claim_to_submit(&holder("w"), 1, at(T0))
            .await
            .unwrap();
        let unknown = rows::unknown_outcome("timeout", None, at(T0 + 100));
        ledger
            .record(&recording(&fence(&op.id, 1), &unknown, "w"), at(T0 + 1))
            .await
            .unwrap();
        let retry = || Resolve {
            id: &op.id,
            resolution: &Resolution::RetrySameKey,
            actor: "oncall:ann",
            reason: "processor says it has nothing; retry",
        };
        let ready = ledger.resolve(&retry(), at(T0 + 2)).await.unwrap();
        assert_eq!(
            (ready.status, ready.first_submitted_attempt),
            (Status::Ready, Some(1))
        );
        let claimed = ledger
            .claim_to_submit(&holder("w2"), 1, at(T0 + 3))
            .await
            .unwrap();
        assert_eq!(
            claimed
                .iter()
                .map(|o| (
                    o.attempt,
                    o.first_submitted_attempt,
                    o.first_submitted_at,
                    o.last_submitted_at,
                    o.submit_count
                ))
                .collect::<Vec<_>>(),
            [(2, Some(1), Some(at(T0)), Some(at(T0 + 3)), 2)]
        );
        let tail = |events: Vec<payonce_ledger::OperationEvent>, n: usize| {
            let k = events.len() - n;
            events[k..]
                .iter()
                .map(|e| (e.event.to_string(), e.attempt))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            tail(ledger.events_unscoped(&op.id).await.unwrap(), 2),
            [
                ("resolve_retry".to_string(), 1),
                ("submission_started".to_string(), 2)
            ],
            "the claim is logged as its submission start"
        );
        let later = Recorded::RetryLater {
            reason: "rate limited".into(),
            available_at: at(T0 + 1_000),
            counted: true,
        };
        let row = ledger
            .record(&recording(&fence(&op.id, 2), &later, "w2"), at(T0 + 4))
            .await
            .unwrap();
        assert_eq!(
            (row.status, row.first_submitted_attempt),
            (Status::Unknown, Some(1)),
            "attempt 1 may have reached the processor"
        );
        // Back to ready once more, then a plain claim: it records no submission and logs none.
        ledger.resolve(&retry(), at(T0 + 5)).await.unwrap();
        let plain = ledger.claim(&holder("w3"), 1, at(T0 + 6)).await.unwrap();
        assert_eq!(
            plain
                .iter()
                .map(|o| (o.attempt, o.submit_count))
                .collect::<Vec<_>>(),
            [(3, 2)]
        );
        let events = ledger.events_unscoped(&op.id).await.unwrap();
        assert_eq!(
            tail(events, 1),
            [("claim".to_string(), 3)],
            "a plain claim logs only its claim"
        );
    })
    .await;
}

#[tokio::test]
async fn retry_after_an_earlier_submission_is_unknown_not_ready() {
    for_each_store(|ledger| async move {
        let op = ready_operation(&ledger, "INV-5", "pm_card_visa", at(T0)).await;
        let executing = rows::claimed(&ledger, &op.id, &holder("w"), at(T0)).await;
        assert_eq!(executing.attempt, 1);
        rows::start_submission(&ledger, &executing, at(T0 + 1)).await;
        let unknown = rows::unknown_outcome("timeout", None, at(T0 + 100));
        rows::record(&ledger, &executing, &unknown, "w", at(T0 + 2)).await;
        // The reconciler retries with the same key under its own lease; that request is refused.
        let c = ledger
            .claim_unknown(
                &ClaimUnknown {
                    fence: &Fence {
                        id: op.id.clone(),
                        attempt: 1,
                    },
                    holder: holder("reconciler"),
                    why: "retry with the same key",
                },
                at(T0 + 200),
            )
            .await
            .unwrap();
        assert_eq!(c.attempt, 2);
        assert!(matches!(
            ledger
                .claim_unknown(
                    &ClaimUnknown {
                        fence: &Fence {
                            id: op.id.clone(),
                            attempt: 1
                        },
                        holder: holder("r2"),
                        why: "retry with the same key"
                    },
                    at(T0 + 200)
                )
                .await,
            Err(LedgerError::Fenced { .. })
        ));
        assert_eq!(
            ledger
                .mark_submitting(&[fence(&op.id, 2)], at(T0 + 201))
                .await
                .unwrap(),
            [true]
        );
        let retry = Recorded::RetryLater {
            reason: "connection refused".into(),
            available_at: at(T0 + 300),
            counted: true,
        };
        let after = ledger
            .record(
                &recording(&fence(&op.id, 2), &retry, "reconciler"),
                at(T0 + 202),
            )
            .await
            .unwrap();
        assert_eq!(
            after.status,
            Status::Unknown,
            "attempt 1 may have reached the processor"
        );
        assert_eq!(after.submit_count, 2);
        // Rejected would hide the earlier submission: it becomes needs_attention instead.
        let c = ledger
            .claim_unknown(
                &ClaimUnknown {
                    fence: &Fence {
                        id: op.id.clone(),
                        attempt: 2,
                    },
                    holder: holder("reconciler"),
                    why: "retry with the same key",
                },
                at(T0 + 400),
            )
            .await
            .unwrap();
        let rejected = Recorded::Rejected {
            code: "approval_expired".into(),
            message: "expired".into(),
        };
        let after = ledger
            .record(
                &recording(&fence(&op.id, c.attempt), &rejected, "reconciler"),
                at(T0 + 401),
            )
            .await
            .unwrap();
        assert_eq!(after.status, Status::NeedsAttention);
    })
    .await;
}

#[tokio::test]
async fn reports_apply_in_any_order_and_contradictions_keep_both_facts() {
    for_each_store(|ledger| async move {
        let op = ready_operation(&ledger, "INV-6", "pm_card_visa", at(T0)).await;
        let executing = rows::claimed(&ledger, &op.id, &holder("w"), at(T0)).await;
        assert_eq!(executing.attempt, 1);
        rows::start_submission(&ledger, &executing, at(T0 + 1)).await;
        // The webhook beats the worker.
        let ok = Report::Succeeded(Paid {
            reference: "pi_9".into(),
            result: serde_json::json!({"id": "pi_9"}),
        });
        assert_eq!(
            ledger
                .apply_report(
                    &ApplyReport {
                        id: &op.id,
                        report: &ok,
                        source: "webhook"
                    },
                    at(T0 + 2)
                )
                .await
                .unwrap(),
            Applied::Moved(Status::Succeeded)
        );
        assert_eq!(
            ledger
                .apply_report(
                    &ApplyReport {
                        id: &op.id,
                        report: &ok,
                        source: "webhook"
                    },
                    at(T0 + 3)
                )
                .await
                .unwrap(),
            Applied::AlreadyKnown
        );
        let late = Recorded::Succeeded(Paid {
            reference: "pi_9".into(),
            result: serde_json::json!({}),
        });
        assert!(matches!(
            ledger
                .record(&recording(&fence(&op.id, 1), &late, "w"), at(T0 + 4))
                .await,
            Err(LedgerError::Fenced { .. })
        ));
        let failed = Report::Failed(Declined {
            code: "card_declined".into(),
            message: "declined".into(),
            reference: Some("pi_9".into()),
        });
        assert_eq!(
            ledger
                .apply_report(
                    &ApplyReport {
                        id: &op.id,
                        report: &failed,
                        source: "webhook"
                    },
                    at(T0 + 5)
                )
                .await
                .unwrap(),
            Applied::Conflict
        );
        let row = ledger.get(&tenant(), &op.id).await.unwrap();
        assert_eq!(row.status, Status::NeedsAttention);
        assert_eq!(
            row.external_ref.as_deref(),
            Some("pi_9"),
            "the stored result is kept"
        );
        assert!(
            row.failure_message.unwrap().contains("failure"),
            "the contradicting report is kept"
        );
        // On-call resolves with a reason.
        assert!(matches!(
            ledger
                .resolve(
                    &Resolve {
                        id: &op.id,
                        resolution: &Resolution::Failed,
                        actor: "oncall:ann",
                        reason: "  "
                    },
                    at(T0 + 6)
                )
                .await,
            Err(LedgerError::Limit(LimitError::ResolutionReason))
        ));
        let fixed = ledger
            .resolve(
                &Resolve {
                    id: &op.id,
                    resolution: &Resolution::Succeeded {
                        reference: "pi_9".into(),
                    },
                    actor: "oncall:ann",
                    reason: "checked dashboard",
                },
                at(T0 + 7),
            )
            .await
            .unwrap();
        assert_eq!(fixed.status, Status::Succeeded);
        let last = ledger.events_unscoped(&op.id).await.unwrap().pop().unwrap();
        assert_eq!(
            (last.event.as_str(), last.actor.as_str()),
            ("resolve_succeeded", "oncall:ann")
        );
        assert_eq!(last.detail.as_deref(), Some("checked dashboard"));
    })
    .await;
}

#[tokio::test]
async fn cancel_listing_links_events_keys_and_limits() {
    for_each_store(|ledger| async move {
        let op = ledger
            .create_or_get(new_op("INV-7", 100), at(T0))
            .await
            .unwrap()
            .operation;
        let cancelled = ledger
            .cancel(
                &tenant(),
                &Cancel {
                    id: &op.id,
                    actor: "service:test",
                },
                at(T0 + 1),
            )
            .await
            .unwrap();
        assert_eq!(cancelled.status, Status::Cancelled);
        let running = ready_operation(&ledger, "INV-7b", "pm_card_visa", at(T0)).await;
        ledger.claim(&holder("w"), 1, at(T0)).await.unwrap();
        assert!(matches!(
            ledger
                .cancel(
                    &tenant(),
                    &Cancel {
                        id: &running.id,
                        actor: "service:test"
                    },
                    at(T0 + 1)
                )
                .await,
            Err(LedgerError::WrongState {
                status: Status::Executing,
                ..
            })
        ));
        let listed = ledger
            .list(&ListFilter {
                statuses: vec![Status::Cancelled],
                limit: 10,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(listed.len(), 1);
        let counts = ledger.count_by_status().await.unwrap();
        assert!(
            counts
                .iter()
                .any(|c| c.status == Status::Executing && c.count == 1)
        );
        assert!(matches!(
            ledger.claim(&holder("w"), 0, at(T0)).await,
            Err(LedgerError::Limit(LimitError::ClaimBatch))
        ));
        assert!(matches!(
            ledger.claim(&holder("w"), 1_001, at(T0)).await,
            Err(LedgerError::Limit(LimitError::ClaimBatch))
        ));
        // A lease is stored in whole milliseconds: shorter than one is no lease.
        for ttl in [Duration::ZERO, Duration::from_micros(999)] {
            assert!(matches!(
                ledger
                    .claim(
                        &LeaseHolder {
                            owner: "w",
                            lease_ttl: ttl
                        },
                        1,
                        at(T0)
                    )
                    .await,
                Err(LedgerError::Limit(LimitError::LeaseTtl))
            ));
        }
        assert!(matches!(
            ledger
                .list(&ListFilter {
                    limit: 0,
                    ..Default::default()
                })
                .await,
            Err(LedgerError::Limit(LimitError::PageSize))
        ));

        assert!(
            ledger
                .insert_processor_event(
                    &NewProcessorEvent {
                        key: ProcessorEventKey {
                            processor: "stripe",
                            event_id: "evt_1"
                        },
                        event_type: "payment_intent.succeeded",
                        operation: Some(&op.id),
                        payload: "{}"
                    },
                    at(T0)
                )
                .await
                .unwrap()
        );
        assert!(
            !ledger
                .insert_processor_event(
                    &NewProcessorEvent {
                        key: ProcessorEventKey {
                            processor: "stripe",
                            event_id: "evt_1"
                        },
                        event_type: "payment_intent.succeeded",
                        operation: Some(&op.id),
                        payload: "{}"
                    },
                    at(T0)
                )
                .await
                .unwrap()
        );
        ledger
            .record_tool_call(
                &tenant(),
                &NewToolCall {
                    operation: Some(&op.id),
                    provider: "openai",
                    provider_call_id: Some("call_1"),
                    tool: "pay_invoice",
                },
                at(T0),
            )
            .await
            .unwrap();
        assert_eq!(
            ledger.tool_calls(&tenant(), &op.id).await.unwrap()[0]
                .1
                .as_deref(),
            Some("call_1")
        );

        let link = payonce_ledger::ApprovalLink {
            token_hash: "h1".into(),
            operation_id: op.id.clone(),
            details_hash: op.details_hash.as_str().into(),
            created_at: at(T0),
            expires_at: at(T0 + 1_000),
            used_at: None,
        };
        assert!(ledger.create_approval_link(&link, 2).await.unwrap());
        let second = payonce_ledger::ApprovalLink {
            token_hash: "h2".into(),
            ..link.clone()
        };
        let third = payonce_ledger::ApprovalLink {
            token_hash: "h3".into(),
            ..link.clone()
        };
        assert!(ledger.create_approval_link(&second, 2).await.unwrap());
        assert!(
            !ledger.create_approval_link(&third, 2).await.unwrap(),
            "two links are open: the third is refused"
        );
        assert!(ledger.approval_link("h3").await.unwrap().is_none());
        // Once the open ones have expired, a new one may be issued.
        let later = payonce_ledger::ApprovalLink {
            created_at: at(T0 + 1_000),
            expires_at: at(T0 + 2_000),
            ..third.clone()
        };
        assert!(ledger.create_approval_link(&later, 2).await.unwrap());
        assert!(
            !ledger
                .use_approval_link("h1", at(T0 + 1_000))
                .await
                .unwrap(),
            "expired"
        );
        assert!(ledger.use_approval_link("h1", at(T0 + 10)).await.unwrap());
        assert!(
            !ledger.use_approval_link("h1", at(T0 + 11)).await.unwrap(),
            "single use"
        );
    })
    .await;
}

#[tokio::test]
async fn postgres_sixteen_claimers_never_claim_a_row_twice() {
    let (ledger, _db) = support::postgres_ledger().await;
    for i in 0..1_000 {
        ready_operation(&ledger, &format!("INV-C{i}"), "pm_card_visa", at(T0)).await;
    }
    let mut tasks = Vec::new();
    for w in 0..16 {
        let ledger = ledger.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let batch = ledger
                    .claim(&holder(&format!("w{w}")), 7, at(T0 + 1))
                    .await
                    .unwrap();
                if batch.is_empty() {
                    return mine;
                }
                mine.extend(batch.into_iter().map(|c| c.id));
            }
        }));
    }
    let mut seen = HashSet::new();
    let mut total = 0;
    for t in tasks {
        for id in t.await.unwrap() {
            total += 1;
            assert!(seen.insert(id.clone()), "{id} claimed twice");
        }
    }
    assert_eq!((total, seen.len()), (1_000, 1_000));
}

#[tokio::test]
async fn postgres_fifty_concurrent_create_or_get_make_one_row() {
    let (ledger, _db) = support::postgres_ledger().await;
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let ledger = ledger.clone();
        tasks.push(tokio::spawn(async move {
            ledger
                .create_or_get(new_op("INV-RACE", 2048), at(T0))
                .await
                .unwrap()
        }));
    }
    let mut ids = HashSet::new();
    let mut inserted = 0;
    for t in tasks {
        let c = t.await.unwrap();
        inserted += usize::from(c.inserted);
        ids.insert(c.operation.id);
    }
    assert_eq!((ids.len(), inserted), (1, 1));
    let listed = ledger
        .list(&ListFilter {
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
}

/// Creates `n` operations through `ledger` (autocommit writes) and reads each back on a connection
/// of its own straight to `url`: none may sit uncommitted on a pooled connection.
async fn autocommit_writes_are_committed(ledger: &SharedLedger, url: &str, prefix: &str, n: usize) {
    let mut written = Vec::new();
    for i in 0..n {
        written.push(
            ledger
                .create_or_get(new_op(&format!("{prefix}{i}"), 100), at(T0))
                .await
                .unwrap()
                .operation
                .id,
        );
    }
    let reader = payonce_ledger::connect(url, 1).await.unwrap();
    for id in &written {
        reader
            .get(&tenant(), id)
            .await
            .unwrap_or_else(|e| panic!("write of {id} lost: {e}"));
    }
}

#[tokio::test]
async fn postgres_a_stale_attempt_cannot_overwrite_a_newer_one() {
    let (ledger, _db) = support::postgres_ledger().await;
    let op = ready_operation(&ledger, "INV-Z", "pm_card_visa", at(T0)).await;
    ledger.claim(&holder("zombie"), 1, at(T0)).await.unwrap();
    let expired = ledger.expired_leases(at(T0 + LEASE_MS), 10).await.unwrap();
    ledger
        .expire_lease(
            &ExpireLease {
                lease: &expired[0],
                actor: "reconciler",
                next_check_at: at(T0 + LEASE_MS),
            },
            at(T0 + LEASE_MS),
        )
        .await
        .unwrap();
    let fresh = ledger
        .claim(&holder("fresh"), 1, at(T0 + LEASE_MS + 1))
        .await
        .unwrap();
    assert_eq!(fresh[0].attempt, 2);
    // The zombie wakes up and races the fresh worker: every zombie write loses.
    let zombie = Recorded::Failed(Declined {
        code: "x".into(),
        message: "stale".into(),
        reference: None,
    });
    let fresh_ok = Recorded::Succeeded(Paid {
        reference: "pi_f".into(),
        result: serde_json::json!({}),
    });
    let (zombie_fence, fresh_fence) = (fence(&op.id, 1), fence(&op.id, 2));
    let zombie = RecordOutcome {
        fence: &zombie_fence,
        outcome: &zombie,
        actor: "zombie",
    };
    let fresh = RecordOutcome {
        fence: &fresh_fence,
        outcome: &fresh_ok,
        actor: "fresh",
    };
    let (z, f) = tokio::join!(
        ledger.record(&zombie, at(T0 + LEASE_MS + 2)),
        ledger.record(&fresh, at(T0 + LEASE_MS + 2))
    );
    assert!(matches!(z, Err(LedgerError::Fenced { attempt: 1, .. })));
    assert_eq!(f.unwrap().status, Status::Succeeded);
    assert!(matches!(
        ledger
            .mark_submitting(&[fence(&op.id, 1)], at(T0 + LEASE_MS + 3))
            .await
            .unwrap()[..],
        [false]
    ));
}

/// sqlx 0.9 can return a connection to the pool inside an open transaction when a `begin()` future
/// is cancelled; the release guard must close such connections so no later write is lost.
#[tokio::test]
async fn postgres_cancelled_begins_lose_no_writes() {
    let (ledger, url) = support::postgres_ledger().await;
    // Cancel many approvals (each a transaction) at random points, then create rows in autocommit.
    let mut cancelled = 0;
    let t = tenant();
    for i in 0..120 {
        let op = ledger
            .create_or_get(new_op(&format!("INV-X{i}"), 100), at(T0))
            .await
            .unwrap()
            .operation;
        let approve = ledger.approve(&t, approval_of(&op), at(T0));
        let budget = std::time::Duration::from_micros(50 + (i % 7) * 40);
        if tokio::time::timeout(budget, approve).await.is_err() {
            cancelled += 1;
        }
    }
    autocommit_writes_are_committed(&ledger, &url, "INV-W", 200).await;
    eprintln!("cancelled approvals: {cancelled}");
    assert!(
        cancelled > 0,
        "the test must actually cancel transactions mid-flight"
    );
}

#[tokio::test]
async fn batched_submission_starts_and_outcomes_are_fenced_one_by_one() {
    for_each_store(|ledger| async move {
        let a = ready_operation(&ledger, "INV-B1", "pm_card_visa", at(T0)).await;
        let b = ready_operation(&ledger, "INV-B2", "pm_card_visa", at(T0 + 1)).await;
        let c = ready_operation(&ledger, "INV-B3", "pm_card_visa", at(T0 + 2)).await;
        let claimed = ledger.claim(&holder("w"), 10, at(T0 + 3)).await.unwrap();
        assert_eq!(claimed.len(), 3);
        // b's item carries a stale attempt: only b loses.
        let marked = ledger
            .mark_submitting(
                &[fence(&a.id, 1), fence(&b.id, 0), fence(&c.id, 1)],
                at(T0 + 4),
            )
            .await
            .unwrap();
        assert_eq!(marked, vec![true, false, true]);
        let paid = |reference: &str| {
            Recorded::Succeeded(Paid {
                reference: reference.into(),
                result: serde_json::json!({ "id": reference }),
            })
        };
        let recorded = ledger
            .record_batch(
                &[
                    (fence(&a.id, 1), paid("pi_a")),
                    (
                        fence(&c.id, 1),
                        Recorded::Failed(Declined {
                            code: "card_declined".into(),
                            message: "declined".into(),
                            reference: Some("pi_c".into()),
                        }),
                    ),
                    (fence(&b.id, 0), paid("pi_stale")),
                    (fence(&a.id, 1), paid("pi_a_again")),
                    (fence(&b.id, 1), paid("pi_b")),
                ],
                "w",
                at(T0 + 5),
            )
            .await
            .unwrap();
        assert_eq!(
            recorded,
            vec![true, true, false, false, true],
            "a stale attempt and a repeat of a recorded outcome lose their fence"
        );
        let a_now = ledger.get(&tenant(), &a.id).await.unwrap();
        assert_eq!(
            (a_now.status, a_now.external_ref.as_deref()),
            (Status::Succeeded, Some("pi_a"))
        );
        assert_eq!(a_now.first_submitted_at, Some(at(T0 + 4)));
        assert_eq!(a_now.result, Some(serde_json::json!({ "id": "pi_a" })));
        let b_now = ledger.get(&tenant(), &b.id).await.unwrap();
        assert_eq!(
            (b_now.status, b_now.first_submitted_at),
            (Status::Succeeded, None),
            "b's submission start was refused, its outcome was not"
        );
        assert_eq!(
            ledger.get(&tenant(), &c.id).await.unwrap().status,
            Status::Failed
        );
        let events: Vec<String> = ledger
            .events_unscoped(&a.id)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.event.to_string())
            .collect();
        assert_eq!(
            events,
            vec![
                "create",
                "approve",
                "claim",
                "submission_started",
                "processor_succeeded"
            ],
            "the trigger logs batched writes like single ones"
        );
    })
    .await;
}

/// `record_and_claim` writes a group's outcomes and claims into the slots they free in one commit:
/// each outcome fenced on its own (mixed outcomes take the locked path), each claim exactly what
/// `claim_to_submit` makes (attempt, lease, submission start, one `submission_started` out of
/// `ready`); a claim of 0 only records; a claim over the limit is refused with nothing written.
#[tokio::test]
async fn an_outcome_write_claims_in_the_same_commit() {
    for_each_store(|ledger| async move {
        let ops = [
            ready_operation(&ledger, "INV-RC1", "pm_card_visa", at(T0)).await,
            ready_operation(&ledger, "INV-RC2", "pm_card_visa", at(T0 + 1)).await,
            ready_operation(&ledger, "INV-RC3", "pm_card_visa", at(T0 + 2)).await,
            ready_operation(&ledger, "INV-RC4", "pm_card_visa", at(T0 + 3)).await,
        ];
        let [a, b, c, d] = &ops;
        let first = ledger
            .claim_to_submit(&holder("w"), 2, at(T0 + 10))
            .await
            .unwrap();
        let ids = |claimed: &[payonce_ledger::Claimed]| -> Vec<OperationId> {
            claimed.iter().map(|op| op.id.clone()).collect()
        };
        assert_eq!(ids(&first), vec![a.id.clone(), b.id.clone()]);
        let paid = |reference: &str| {
            Recorded::Succeeded(Paid {
                reference: reference.into(),
                result: serde_json::json!({ "id": reference }),
            })
        };
        // Over the claim limit: refused, and the outcome is not written either.
        assert!(matches!(
            ledger
                .record_and_claim(
                    &[(fence(&a.id, 1), paid("pi_a"))],
                    &holder("w"),
                    Pick::Oldest(1_001),
                    at(T0 + 20)
                )
                .await,
            Err(LedgerError::Limit(LimitError::ClaimBatch))
        ));
        assert_eq!(
            ledger.get(&tenant(), &a.id).await.unwrap().status,
            Status::Executing
        );
        // a succeeds, b's stale fence loses, and the freed slots take c and d.
        let (recorded, claimed) = ledger
            .record_and_claim(
                &[
                    (fence(&a.id, 1), paid("pi_a")),
                    (fence(&b.id, 0), paid("pi_stale")),
                ],
                &holder("w"),
                Pick::Oldest(2),
                at(T0 + 30),
            )
            .await
            .unwrap();
        assert_eq!(recorded, vec![true, false]);
        assert_eq!(ids(&claimed), vec![c.id.clone(), d.id.clone()]);
        for op in [c, d] {
            let now = ledger.get(&tenant(), &op.id).await.unwrap();
            assert_eq!(
                (
                    now.status,
                    now.attempt,
                    now.lease_owner.as_deref(),
                    now.lease_expires_at,
                    now.first_submitted_at
                ),
                (
                    Status::Executing,
                    1,
                    Some("w"),
                    Some(at(T0 + 30 + LEASE_MS)),
                    Some(at(T0 + 30))
                ),
                "claimed as claim_to_submit claims"
            );
            let events: Vec<(Option<String>, String)> = ledger
                .events_unscoped(&op.id)
                .await
                .unwrap()
                .into_iter()
                .map(|e| (e.from_status, e.event.to_string()))
                .collect();
            assert_eq!(
                events.last(),
                Some(&(Some("ready".to_string()), "submission_started".to_string()))
            );
        }
        let a_now = ledger.get(&tenant(), &a.id).await.unwrap();
        assert_eq!(
            (
                a_now.status,
                a_now.external_ref.as_deref(),
                a_now.lease_owner
            ),
            (Status::Succeeded, Some("pi_a"), None)
        );
        // Mixed outcomes (a decline beside a success) and nothing left to claim.
        let (recorded, claimed) = ledger
            .record_and_claim(
                &[
                    (fence(&b.id, 1), paid("pi_b")),
                    (
                        fence(&c.id, 1),
                        Recorded::Failed(Declined {
                            code: "card_declined".into(),
                            message: "declined".into(),
                            reference: Some("pi_c".into()),
                        }),
                    ),
                ],
                &holder("w"),
                Pick::Oldest(2),
                at(T0 + 40),
            )
            .await
            .unwrap();
        assert_eq!((recorded, claimed.len()), (vec![true, true], 0));
        // A claim of 0 records only.
        let (recorded, claimed) = ledger
            .record_and_claim(
                &[(fence(&d.id, 1), paid("pi_d"))],
                &holder("w"),
                Pick::Oldest(0),
                at(T0 + 50),
            )
            .await
            .unwrap();
        assert_eq!((recorded, claimed.len()), (vec![true], 0));
        // A row the write names but whose fence fails because it is ready again (its lease given
        // back) is not written by the record, and the claim may take it: one write, no conflict.
        let e = ready_operation(&ledger, "INV-RC5", "pm_card_visa", at(T0 + 60)).await;
        let taken = ledger
            .claim_to_submit(&holder("w"), 1, at(T0 + 61))
            .await
            .unwrap();
        assert_eq!(ids(&taken), vec![e.id.clone()]);
        ledger
            .release(&fence(&e.id, 1), "w", at(T0 + 62))
            .await
            .unwrap();
        let (recorded, claimed) = ledger
            .record_and_claim(
                &[(fence(&e.id, 1), paid("pi_e_stale"))],
                &holder("w"),
                Pick::Oldest(5),
                at(T0 + 70),
            )
            .await
            .unwrap();
        assert_eq!((recorded, ids(&claimed)), (vec![false], vec![e.id.clone()]));
        assert_eq!(claimed[0].attempt, 2);
        // Recorded, and nothing left to claim.
        let (recorded, claimed) = ledger
            .record_and_claim(
                &[(fence(&e.id, 2), paid("pi_e"))],
                &holder("w"),
                Pick::Oldest(5),
                at(T0 + 80),
            )
            .await
            .unwrap();
        assert_eq!((recorded, claimed.len()), (vec![true], 0));
        let e_now = ledger.get(&tenant(), &e.id).await.unwrap();
        assert_eq!(
            (e_now.status, e_now.attempt, e_now.external_ref.as_deref()),
            (Status::Succeeded, 2, Some("pi_e"))
        );
        let statuses: Vec<Status> = {
            let mut v = Vec::new();
            for op in &ops {
                v.push(ledger.get(&tenant(), &op.id).await.unwrap().status);
            }
            v
        };
        assert_eq!(
            statuses,
            vec![
                Status::Succeeded,
                Status::Succeeded,
                Status::Failed,
                Status::Succeeded
            ]
        );
    })
    .await;
}

#[tokio::test]
async fn postgres_renewal_racing_batched_writes_never_deadlocks() {
    // Renewal locks every row its owner holds; batches lock theirs. Before both locked in id order
    // they deadlocked: Postgres killed one after deadlock_timeout and the renewal failed.
    let (ledger, _db) = support::postgres_ledger().await;
    let mut ops = Vec::new();
    for i in 0..200 {
        ops.push(ready_operation(&ledger, &format!("INV-R{i}"), "pm_card_visa", at(T0)).await);
    }
    let claimed = ledger.claim(&holder("w"), 200, at(T0 + 1)).await.unwrap();
    assert_eq!(claimed.len(), 200);
    let held: Vec<_> = claimed.iter().map(|o| o.id.clone()).collect();
    let renewer = {
        let ledger = ledger.clone();
        tokio::spawn(async move {
            for round in 0..40 {
                ledger
                    .renew(&holder("w"), &held, at(T0 + 2) + ms(round))
                    .await
                    .expect("renewal never fails");
            }
        })
    };
    // Batches in descending id order: the order most likely to cross the renewal's.
    let mut keys: Vec<_> = claimed.iter().map(Fence::of).collect();
    keys.sort_by(|x, y| y.id.as_str().cmp(x.id.as_str()));
    for chunk in keys.chunks(20) {
        let marked = ledger
            .mark_submitting(chunk, at(T0 + 2))
            .await
            .expect("marking never fails");
        assert!(marked.iter().all(|m| *m));
        let items: Vec<_> = chunk
            .iter()
            .map(|f| {
                (
                    f.clone(),
                    Recorded::Succeeded(Paid {
                        reference: format!("pi_{}", f.id.as_str()),
                        result: serde_json::json!({}),
                    }),
                )
            })
            .collect();
        let recorded = ledger
            .record_batch(&items, "w", at(T0 + 3))
            .await
            .expect("recording never fails");
        assert!(recorded.iter().all(|r| *r));
    }
    renewer.await.unwrap();
}

fn code_for(
    op: &OperationId,
    link_hash: &str,
    delivery: &str,
    expires_at: Timestamp,
    attempt_max: i64,
) -> payonce_ledger::verification::ApprovalCode {
    payonce_ledger::verification::ApprovalCode {
        delivery_id: delivery.into(),
        operation_id: op.clone(),
        link_hash: link_hash.into(),
        code_hash: format!("hash-of-{delivery}"),
        created_at: at(T0),
        expires_at,
        attempts: 0,
        attempt_max,
        used_at: None,
    }
}

fn link_for(op: &payonce_ledger::Operation, token_hash: &str) -> payonce_ledger::ApprovalLink {
    payonce_ledger::ApprovalLink {
        token_hash: token_hash.into(),
        operation_id: op.id.clone(),
        details_hash: op.details_hash.as_str().into(),
        created_at: at(T0),
        expires_at: at(T0 + 10_000),
        used_at: None,
    }
}

#[tokio::test]
async fn customer_verification_is_stored_single_use_and_bounded() {
    use payonce_ledger::verification::{
        CodeAttempt, LinkOrigin, NewLink, NoticeLimit, TenantVerification, UsedNonce,
        VerificationMethod,
    };
    for_each_store(|ledger| async move {
        let store = ledger.verification();
        assert!(store.tenant_verification(&tenant()).await.unwrap().is_none());
        let mut config = TenantVerification {
            tenant: tenant(),
            method: VerificationMethod::SignedAssertion,
            assertion_key_id: Some("k1".into()),
            assertion_key: Some("key".into()),
            notify_url: None,
            notify_secret: None,
            updated_at: at(T0),
        };
        store.set_tenant_verification(&config).await.unwrap();
        assert_eq!(store.tenant_verification(&tenant()).await.unwrap(), Some(config.clone()));
        config.method = VerificationMethod::OneTimeCode;
        config.notify_url = Some("http://127.0.0.1:9/n".into());
        config.notify_secret = Some("nsec".into());
        store.set_tenant_verification(&config).await.unwrap();
        assert_eq!(store.tenant_verification(&tenant()).await.unwrap(), Some(config.clone()));
        // The CHECK constraints refuse a code method with nowhere to send codes.
        let nowhere = TenantVerification { notify_url: None, notify_secret: None, ..config.clone() };
        assert!(store.set_tenant_verification(&nowhere).await.is_err());

        let op = ledger.create_or_get(new_op("INV-V1", 2048), at(T0)).await.unwrap().operation;
        let t = tenant();
        let used = UsedNonce { tenant: &t, nonce: "nonce-1", operation: &op.id, expires_at: at(T0 + 1) };
        assert!(store.use_assertion_nonce(&used, at(T0)).await.unwrap());
        assert!(!store.use_assertion_nonce(&used, at(T0)).await.unwrap(), "replay");

        // Budgets per origin: the assistant's links never use up the service's.
        let code = code_for(&op.id, "a1", "dlv_a1", at(T0 + 5_000), 2);
        assert!(store.create_link(&NewLink { link: &link_for(&op, "a1"), origin: LinkOrigin::Assistant, open_max: 1, code: Some(&code) }).await.unwrap());
        assert!(!store.create_link(&NewLink { link: &link_for(&op, "a2"), origin: LinkOrigin::Assistant, open_max: 1, code: None }).await.unwrap());
        assert!(store.create_link(&NewLink { link: &link_for(&op, "s1"), origin: LinkOrigin::Service, open_max: 1, code: None }).await.unwrap());
        assert!(!ledger.create_approval_link(&link_for(&op, "s2"), 1).await.unwrap());

        // Attempts are counted before comparing; the limit holds; a used or expired code is dead.
        match store.count_code_attempt("a1", at(T0)).await.unwrap() {
            CodeAttempt::Counted(c) => assert_eq!((c.attempts, c.delivery_id.as_str()), (1, "dlv_a1")),
            other => panic!("{other:?}"),
        }
        assert!(matches!(store.count_code_attempt("a1", at(T0)).await.unwrap(), CodeAttempt::Counted(c) if c.attempts == 2));
        assert_eq!(store.count_code_attempt("a1", at(T0)).await.unwrap(), CodeAttempt::Exhausted);
        assert_eq!(store.count_code_attempt("s1", at(T0)).await.unwrap(), CodeAttempt::Missing);
        let op2 = ledger.create_or_get(new_op("INV-V2", 2048), at(T0)).await.unwrap().operation;
        let code2 = code_for(&op2.id, "b1", "dlv_b1", at(T0 + 5_000), 5);
        assert!(store.create_link(&NewLink { link: &link_for(&op2, "b1"), origin: LinkOrigin::Service, open_max: 5, code: Some(&code2) }).await.unwrap());
        assert!(!store.use_code("dlv_b1", at(T0 + 5_000)).await.unwrap(), "expired");
        assert_eq!(store.count_code_attempt("b1", at(T0 + 5_000)).await.unwrap(), CodeAttempt::Expired);
        assert!(store.use_code("dlv_b1", at(T0)).await.unwrap());
        assert!(!store.use_code("dlv_b1", at(T0)).await.unwrap(), "single use");
        assert_eq!(store.count_code_attempt("b1", at(T0)).await.unwrap(), CodeAttempt::Used);

        // Customer requests: one per interval, a maximum per operation.
        assert!(store.record_approval_notice(&op.id, NoticeLimit { max: 2, interval: Duration::from_millis(100) }, at(T0)).await.unwrap());
        assert!(!store.record_approval_notice(&op.id, NoticeLimit { max: 2, interval: Duration::from_millis(100) }, at(T0 + 99)).await.unwrap());
        assert!(store.record_approval_notice(&op.id, NoticeLimit { max: 2, interval: Duration::from_millis(100) }, at(T0 + 100)).await.unwrap());
        assert!(!store.record_approval_notice(&op.id, NoticeLimit { max: 2, interval: Duration::from_millis(100) }, at(T0 + 1_000)).await.unwrap(), "max");
        assert!(store.record_approval_notice(&op2.id, NoticeLimit { max: 2, interval: Duration::from_millis(100) }, at(T0)).await.unwrap(), "per operation");
    })
    .await;
}

#[tokio::test]
async fn postgres_racing_proofs_and_requests_each_win_once() {
    use payonce_ledger::verification::{CodeAttempt, LinkOrigin, NewLink, NoticeLimit, UsedNonce};
    let (ledger, _db) = support::postgres_ledger().await;
    let op = ledger
        .create_or_get(new_op("INV-V3", 2048), at(T0))
        .await
        .unwrap()
        .operation;
    let code = code_for(&op.id, "r1", "dlv_r1", at(T0 + 5_000), 5);
    assert!(
        ledger
            .verification()
            .create_link(&NewLink {
                link: &link_for(&op, "r1"),
                origin: LinkOrigin::Service,
                open_max: 5,
                code: Some(&code)
            })
            .await
            .unwrap()
    );
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..16 {
        let (ledger, id) = (ledger.clone(), op.id.clone());
        tasks.spawn(async move {
            let store = ledger.verification();
            let t = tenant();
            let used = UsedNonce {
                tenant: &t,
                nonce: "racy",
                operation: &id,
                expires_at: at(T0 + 1),
            };
            let nonce = store.use_assertion_nonce(&used, at(T0)).await.unwrap();
            let notice = store
                .record_approval_notice(
                    &id,
                    NoticeLimit {
                        max: 3,
                        interval: ms(1_000),
                    },
                    at(T0 + i),
                )
                .await
                .unwrap();
            let counted = matches!(
                store.count_code_attempt("r1", at(T0)).await.unwrap(),
                CodeAttempt::Counted(_)
            );
            (nonce, notice, counted)
        });
    }
    let results = tasks.join_all().await;
    assert_eq!(results.iter().filter(|r| r.0).count(), 1, "one nonce use");
    assert_eq!(
        results.iter().filter(|r| r.1).count(),
        1,
        "one request per interval"
    );
    assert_eq!(
        results.iter().filter(|r| r.2).count(),
        5,
        "exactly the allowed attempts"
    );
}

#[tokio::test]
async fn a_tool_call_key_keeps_its_first_answer_per_tenant() {
    for_each_store(|ledger| async move {
        let other = TenantId::parse("globex").unwrap();
        assert_eq!(ledger.tool_answer(&tenant(), "k1").await.unwrap(), None);
        let kept = ledger
            .keep_tool_answer(
                &tenant(),
                &ToolAnswer {
                    key: "k1",
                    fingerprint: "fp-a",
                    answer: "{\"first\":1}",
                },
                at(T0),
            )
            .await
            .unwrap();
        assert_eq!(kept, ("fp-a".to_string(), "{\"first\":1}".to_string()));
        // A second answer for the same key changes nothing: the first one is returned.
        let again = ledger
            .keep_tool_answer(
                &tenant(),
                &ToolAnswer {
                    key: "k1",
                    fingerprint: "fp-b",
                    answer: "{\"second\":2}",
                },
                at(T0 + 1),
            )
            .await
            .unwrap();
        assert_eq!(again, kept);
        assert_eq!(
            ledger.tool_answer(&tenant(), "k1").await.unwrap(),
            Some(kept)
        );
        // Keys are per tenant: the same key in another tenant is its own.
        assert_eq!(ledger.tool_answer(&other, "k1").await.unwrap(), None);
        let theirs = ledger
            .keep_tool_answer(
                &other,
                &ToolAnswer {
                    key: "k1",
                    fingerprint: "fp-c",
                    answer: "{}",
                },
                at(T0),
            )
            .await
            .unwrap();
        assert_eq!(theirs.0, "fp-c");
    })
    .await;
}

#[tokio::test]
async fn a_released_lease_goes_back_to_ready_or_to_unknown_by_the_tables_moves() {
    for_each_store(|ledger| async move {
        // Nothing was ever submitted: `release`, back to ready.
        let op = ready_operation(&ledger, "INV-REL-1", "pm_card_visa", at(T0)).await;
        ledger.claim(&holder("w"), 1, at(T0)).await.unwrap();
        ledger
            .release(&fence(&op.id, 1), "w", at(T0 + 1))
            .await
            .unwrap();
        let after = ledger.get_unscoped(&op.id).await.unwrap();
        assert_eq!((after.status, after.lease_owner), (Status::Ready, None));
        let last = ledger.events_unscoped(&op.id).await.unwrap().pop().unwrap();
        assert_eq!(
            (
                last.from_status.as_deref(),
                last.to_status.as_str(),
                last.event.as_str()
            ),
            (Some("executing"), "ready", "release")
        );
        // A stale attempt cannot give the lease back.
        assert!(matches!(
            ledger.release(&fence(&op.id, 1), "w", at(T0 + 2)).await,
            Err(LedgerError::Fenced { .. })
        ));

        // An earlier attempt submitted: giving the lease back leaves the outcome unknown, due for a
        // check at once.
        let executing = rows::claimed(&ledger, &op.id, &holder("w"), at(T0 + 3)).await;
        assert_eq!(executing.attempt, 2);
        rows::start_submission(&ledger, &executing, at(T0 + 4)).await;
        let unknown = rows::unknown_outcome("timeout", None, at(T0 + 100));
        rows::record(&ledger, &executing, &unknown, "w", at(T0 + 5)).await;
        let c = ledger
            .claim_unknown(
                &ClaimUnknown {
                    fence: &Fence {
                        id: op.id.clone(),
                        attempt: 2,
                    },
                    holder: holder("reconciler"),
                    why: "same key",
                },
                at(T0 + 6),
            )
            .await
            .unwrap();
        ledger
            .release(&fence(&op.id, c.attempt), "reconciler", at(T0 + 7))
            .await
            .unwrap();
        let after = ledger.get_unscoped(&op.id).await.unwrap();
        assert_eq!(after.status, Status::Unknown);
        assert_eq!(after.next_check_at, Some(at(T0 + 7)));
        let last = ledger.events_unscoped(&op.id).await.unwrap().pop().unwrap();
        assert_eq!(
            (
                last.from_status.as_deref(),
                last.to_status.as_str(),
                last.event.as_str()
            ),
            (Some("executing"), "unknown", "outcome_unknown")
        );
    })
    .await;
}

/// SQLite's operation-id CHECK is Postgres's `^op_[0-9a-f]{32}$` (migration 0006): before, its
/// `GLOB 'op_[0-9a-f]*'` let anything follow the first hex digit.
#[tokio::test]
async fn sqlite_refuses_the_operation_ids_postgres_refuses() {
    let ledger = payonce_ledger::sqlite::SqliteLedger::connect("sqlite::memory:")
        .await
        .unwrap();
    let shared: SharedLedger = std::sync::Arc::new(ledger.clone());
    let op = ready_operation(&shared, "INV-ID-1", "pm_card_visa", at(T0)).await;
    // A copy of a valid row under another id, key and business key: only the id's shape differs.
    let copy = |id: &str| {
        format!(
            "CREATE TEMP TABLE IF NOT EXISTS c AS SELECT * FROM operations WHERE 0; DELETE FROM c; \
             INSERT INTO c SELECT * FROM operations WHERE id = '{}'; \
             UPDATE c SET id = '{id}', idempotency_key = '{id}', business_key = '{id}'; \
             INSERT INTO operations SELECT * FROM c;",
            op.id.as_str()
        )
    };
    let good = format!("op_{}", "0123456789abcdef".repeat(2));
    sqlx::raw_sql(sqlx::AssertSqlSafe(copy(&good)))
        .execute(ledger.pool())
        .await
        .expect("a well-formed id is accepted");
    for bad in [
        format!("op_a{}", "Z".repeat(31)),
        format!("op_{}", "0123456789ABCDEF".repeat(2)),
        format!("op_{}-", "0123456789abcdef".repeat(2)).replacen('0', "", 1),
    ] {
        assert_eq!(bad.len(), 35);
        let refused = sqlx::raw_sql(sqlx::AssertSqlSafe(copy(&bad)))
            .execute(ledger.pool())
            .await;
        assert!(refused.is_err(), "{bad} must be refused");
    }
}

#[tokio::test]
async fn an_unknown_outcome_is_deferred_then_escalated_and_logged_as_legal_moves() {
    for_each_store(|ledger| async move {
        let op = ready_operation(&ledger, "INV-DEF-1", "pm_card_visa", at(T0)).await;
        let executing = rows::claimed(&ledger, &op.id, &holder("w"), at(T0)).await;
        assert_eq!(executing.attempt, 1);
        rows::start_submission(&ledger, &executing, at(T0 + 1)).await;
        let unknown = rows::unknown_outcome("timeout", None, at(T0 + 100));
        rows::record(&ledger, &executing, &unknown, "w", at(T0 + 2)).await;
        let due = ledger.due_for_check(at(T0 + 100), 10).await.unwrap();
        assert_eq!(due.iter().map(|o| &o.id).collect::<Vec<_>>(), vec![&op.id]);
        ledger
            .defer_check(
                &DeferCheck {
                    fence: &Fence {
                        id: op.id.clone(),
                        attempt: 1,
                    },
                    next_check_at: at(T0 + 500),
                    detail: "processor unreachable",
                    actor: "reconciler",
                },
                at(T0 + 100),
            )
            .await
            .unwrap();
        assert!(
            ledger
                .due_for_check(at(T0 + 499), 10)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(matches!(
            ledger
                .defer_check(
                    &DeferCheck {
                        fence: &Fence {
                            id: op.id.clone(),
                            attempt: 2
                        },
                        next_check_at: at(T0 + 900),
                        detail: "stale",
                        actor: "reconciler"
                    },
                    at(T0 + 101)
                )
                .await,
            Err(LedgerError::Fenced { .. })
        ));
        ledger
            .escalate(
                &Escalate {
                    fence: &Fence {
                        id: op.id.clone(),
                        attempt: 1,
                    },
                    reason: "retention closed",
                    actor: "reconciler",
                },
                at(T0 + 500),
            )
            .await
            .unwrap();
        let after = ledger.get_unscoped(&op.id).await.unwrap();
        assert_eq!(
            (after.status, after.check_count),
            (Status::NeedsAttention, 1)
        );
        let events: Vec<String> = ledger
            .events_unscoped(&op.id)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.event.to_string())
            .collect();
        assert!(events.ends_with(&["check_deferred".to_string(), "escalate".to_string()]));
    })
    .await;
}

/// Postgres's id and currency CHECKs (written without regular expressions since migration 12, to
/// cost less per row version) accept and refuse exactly what `^op_[0-9a-f]{32}$` and `^[a-z]{3}$`
/// do, and the idempotency key must be the id's (migration 14): a copy of a valid row that differs
/// only in that column goes in or is refused.
#[tokio::test]
async fn postgres_checks_accept_exactly_the_ids_and_currencies_of_their_patterns() {
    let (shared, url) = support::postgres_ledger().await;
    let op = ready_operation(&shared, "INV-CHECK-1", "pm_card_visa", at(T0)).await;
    let db = sqlx::PgPool::connect(&url).await.unwrap();
    let hex = "0123456789abcdef".repeat(2);
    // A copy of the row under a fresh id, key and business key, then `column` set to `value`.
    let copy = |n: u32, column: &str, value: &str| {
        let fresh = format!("op_{n:032x}");
        // The key follows the id (its own CHECK), unless the key is what is under test.
        let key = if column == "idempotency_key" {
            ""
        } else {
            "UPDATE c SET idempotency_key = 'payonce-' || id;"
        };
        format!(
            "CREATE TEMP TABLE IF NOT EXISTS c AS SELECT * FROM operations WHERE false; DELETE FROM c; \
             INSERT INTO c SELECT * FROM operations WHERE id = '{}'; \
             UPDATE c SET id = '{fresh}', idempotency_key = 'payonce-{fresh}', business_key = '{fresh}'; \
             UPDATE c SET {column} = {value}; {key} \
             INSERT INTO operations SELECT * FROM c;",
            op.id.as_str()
        )
    };
    let mut n = 0;
    let mut outcome = |column: &str, value: String| {
        n += 1;
        let sql = copy(n, column, &value);
        let db = db.clone();
        async move {
            let mut conn = db.acquire().await.unwrap();
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                .execute(&mut *conn)
                .await
                .map(|_| ())
        }
    };
    for good in [format!("'op_{hex}'"), format!("'op_{}'", "f".repeat(32))] {
        outcome("id", good.clone())
            .await
            .unwrap_or_else(|e| panic!("{good} refused: {e}"));
    }
    for bad in [
        format!("'op_{}'", "0123456789ABCDEF".repeat(2)),
        format!("'op_a{}'", "z".repeat(31)),
        format!("'op_{}'", "é".repeat(32)),
        format!("'op_{}'", &hex[..31]),
        format!("'op_{hex}0'"),
        format!("'op_{}' || chr(10)", &hex[..31]),
        format!("'xx_{hex}'"),
        format!("'op-{hex}'"),
    ] {
        let refused = outcome("id", bad.clone()).await;
        let e = refused.expect_err(&format!("id {bad} must be refused"));
        assert!(e.to_string().contains("operations_id_check"), "{bad}: {e}");
    }
    // The key is the id's first form or an intention key (migrations 14 and 18); any other key,
    // even a well-formed one, is refused.
    for bad in [
        format!("'payonce-op_{hex}'"),
        "'payonce-' || id || 'x'".to_string(),
        "'key-1'".to_string(),
        format!("'po1_{hex}'"),
        format!("'po1_{hex}ABCDEFGH'"),
    ] {
        let e = outcome("idempotency_key", bad.clone())
            .await
            .expect_err(&format!("key {bad} must be refused"));
        assert!(
            e.to_string().contains("operations_idempotency_key_shape"),
            "{bad}: {e}"
        );
    }
    outcome("idempotency_key", format!("'po1_{hex}01234567'"))
        .await
        .unwrap();
    outcome("idempotency_key", "'payonce-' || id".into())
        .await
        .unwrap();
    outcome("currency", "'eur'".into()).await.unwrap();
    for bad in ["'USD'", "'us'", "'usdd'", "'u1d'", "'üsd'", "''", "'us '"] {
        let e = outcome("currency", bad.into())
            .await
            .expect_err(&format!("currency {bad} must be refused"));
        assert!(
            e.to_string().contains("operations_currency_check"),
            "{bad}: {e}"
        );
    }
}

/// The console's search directory (`operation_search`, migration `search_directory`) copies
/// columns that never change; on both stores an update that would change one is refused and leaves
/// the row as it was, while one that names a column without changing it passes.
#[tokio::test]
async fn both_stores_refuse_to_change_what_the_search_directory_copies() {
    let (pg, url) = support::postgres_ledger().await;
    let pg_db = sqlx::PgPool::connect(&url).await.unwrap();
    let lite = payonce_ledger::sqlite::SqliteLedger::connect("sqlite::memory:")
        .await
        .unwrap();
    let lite_shared: SharedLedger = std::sync::Arc::new(lite.clone());
    let pg_op = ready_operation(&pg, "INV-FIXED-1", "pm_card_visa", at(T0)).await;
    let lite_op = ready_operation(&lite_shared, "INV-FIXED-1", "pm_card_visa", at(T0)).await;
    for (column, value) in [
        ("invoice", "'INV-OTHER'"),
        ("customer", "'cus_other'"),
        ("tenant_id", "'other'"),
        ("created_at", "created_at + 1"),
        ("business_key", "'other-key'"),
    ] {
        let change =
            |id: &str| format!("UPDATE operations SET {column} = {value} WHERE id = '{id}'");
        let e = sqlx::raw_sql(sqlx::AssertSqlSafe(change(pg_op.id.as_str())))
            .execute(&pg_db)
            .await
            .expect_err(&format!("postgres lets {column} change"));
        assert!(e.to_string().contains("never change"), "{e}");
        let e = sqlx::raw_sql(sqlx::AssertSqlSafe(change(lite_op.id.as_str())))
            .execute(lite.pool())
            .await
            .expect_err(&format!("sqlite lets {column} change"));
        assert!(e.to_string().contains("never change"), "{e}");
        let same =
            |id: &str| format!("UPDATE operations SET {column} = {column} WHERE id = '{id}'");
        sqlx::raw_sql(sqlx::AssertSqlSafe(same(pg_op.id.as_str())))
            .execute(&pg_db)
            .await
            .unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(same(lite_op.id.as_str())))
            .execute(lite.pool())
            .await
            .unwrap();
    }
    for (ledger, op) in [(&pg, &pg_op), (&lite_shared, &lite_op)] {
        let now = ledger.get_unscoped(&op.id).await.unwrap();
        assert_eq!(now.details, op.details);
        assert_eq!((&now.tenant, now.created_at), (&op.tenant, op.created_at));
    }
}

/// A Postgres ledger as migrations 1–12 left it, with an operation in it, migrated by `connect`:
/// migrations 13–15 fill the search directory from the existing rows (tenant, time, invoice,
/// customer, business key), so the console finds the old operation by every search, and creating
/// it again by its business key answers with it (the key's uniqueness now lives in the directory).
#[tokio::test]
async fn postgres_migrations_13_to_15_fill_the_directory_from_existing_rows() {
    use sqlx::Connection;
    let url = support::postgres::fresh_database().await;
    let existing = new_op("INV-MIG", 2048);
    {
        let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
        for sql in [
            include_str!("../../migrations/postgres/0001_ledger.sql"),
            include_str!("../../migrations/postgres/0002_customer_verification.sql"),
            include_str!("../../migrations/postgres/0003_evidence.sql"),
            include_str!("../../migrations/postgres/0004_api_key_lifecycle.sql"),
            include_str!("../../migrations/postgres/0005_tool_call_keys.sql"),
            include_str!("../../migrations/postgres/0007_console.sql"),
            include_str!("../../migrations/postgres/0008_refunds.sql"),
            include_str!("../../migrations/postgres/0009_hot_path.sql"),
            include_str!("../../migrations/postgres/0010_statement_audit.sql"),
            include_str!("../../migrations/postgres/0011_claim_records_submission.sql"),
            include_str!("../../migrations/postgres/0012_lean_indexes.sql"),
        ] {
            sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
        }
        sqlx::raw_sql(
            "CREATE TABLE payonce_migrations (version BIGINT PRIMARY KEY, name TEXT NOT NULL, \
             applied_at BIGINT NOT NULL); INSERT INTO payonce_migrations (version, name, applied_at) \
             SELECT v, 'before 13', 0 FROM unnest(ARRAY[1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12]) AS v",
        )
        .execute(&mut conn)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO operations (id, tenant_id, business_key, kind, amount_minor, currency, customer, \
             payment_method, invoice, description, details_hash, status, attempt, idempotency_key, \
             available_at, last_event, last_actor, created_at, updated_at) \
             VALUES ($1, $2, $3, 'payment', 2048, 'usd', 'cus_test', 'pm_card_visa', 'INV-MIG', \
             'Invoice INV-MIG', $4, 'awaiting_approval', 0, $5, 1, 'create', 'service:test', 1, 1)",
        )
        .bind(existing.id.as_str())
        .bind(existing.tenant.as_str())
        .bind(existing.business_key.as_str())
        .bind(existing.details.hash().as_str())
        .bind(format!("payonce-{}", existing.id.as_str()))
        .execute(&mut conn)
        .await
        .unwrap();
        conn.close().await.unwrap();
    }
    let ledger = payonce_ledger::connect(&url, 2).await.unwrap();
    let search = |text: Option<&str>| payonce_ledger::console::OperationQuery {
        search: text.map(str::to_string),
        limit: 10,
        ..Default::default()
    };
    for text in [
        None,
        Some("INV-MIG"),
        Some("cus_test"),
        Some("invoice:INV-MIG:pay"),
    ] {
        let page = ledger
            .console()
            .page(&existing.tenant, &search(text))
            .await
            .unwrap();
        assert_eq!(
            page.iter().map(|o| &o.id).collect::<Vec<_>>(),
            [&existing.id],
            "search {text:?}"
        );
    }
    let again = NewOperation {
        id: OperationId::generate(),
        ..new_op("INV-MIG", 2048)
    };
    let created = ledger.create_or_get(again, at(T0)).await.unwrap();
    assert_eq!(
        (created.inserted, created.operation.id),
        (false, existing.id.clone())
    );
    let conflict = ledger.create_or_get(new_op("INV-MIG", 4096), at(T0)).await;
    assert!(
        matches!(conflict, Err(LedgerError::Conflict { existing: ref id }) if *id == existing.id),
        "{conflict:?}"
    );
}

/// Retention on both stores: checked webhook payloads and tool-call rows past their period go,
/// pending hints, recent rows, operations and their events stay.
#[tokio::test]
async fn prune_deletes_only_what_retention_lets_go() {
    use payonce_ledger::retention::{Pruned, Retention};
    use payonce_ledger::{NewProcessorEvent, NewToolCall, ProcessorEventKey};
    const DAY: i64 = 24 * 60 * 60 * 1000;
    for ledger in every_store().await {
        let op = ready_operation(&ledger, "INV-PRUNE", "pm_card_visa", at(T0)).await;
        let event = |id: &'static str| NewProcessorEvent {
            key: ProcessorEventKey {
                processor: "stripe",
                event_id: id,
            },
            event_type: "payment_intent.succeeded",
            operation: Some(&op.id),
            payload: "{}",
        };
        for id in ["evt_old_checked", "evt_new_checked", "evt_old_pending"] {
            assert!(
                ledger
                    .insert_processor_event(&event(id), at(T0))
                    .await
                    .unwrap()
            );
        }
        let key = |id: &'static str| ProcessorEventKey {
            processor: "stripe",
            event_id: id,
        };
        ledger
            .mark_processor_event(&key("evt_old_checked"), "checked", at(T0 + DAY))
            .await
            .unwrap();
        ledger
            .mark_processor_event(&key("evt_new_checked"), "checked", at(T0 + 15 * DAY))
            .await
            .unwrap();
        let call = NewToolCall {
            operation: Some(&op.id),
            provider: "anthropic",
            provider_call_id: Some("toolu_1"),
            tool: "pay_invoice",
        };
        ledger
            .record_tool_call(&tenant(), &call, at(T0))
            .await
            .unwrap();
        let recent = NewToolCall {
            provider_call_id: Some("toolu_2"),
            ..call
        };
        ledger
            .record_tool_call(&tenant(), &recent, at(T0 + 19 * DAY))
            .await
            .unwrap();
        // Kept tool answers: one past the period, one inside it.
        for (key, at_ms) in [("k-old", T0), ("k-new", T0 + 19 * DAY)] {
            let answer = ToolAnswer {
                key,
                fingerprint: "fp",
                answer: "{}",
            };
            ledger
                .keep_tool_answer(&tenant(), &answer, at(at_ms))
                .await
                .unwrap();
        }
        let before = ledger.events_unscoped(&op.id).await.unwrap().len();

        let retention = Retention {
            webhooks: Duration::from_millis(7 * DAY as u64),
            tool_calls: Duration::from_millis(10 * DAY as u64),
            expired_tokens: Duration::from_millis(7 * DAY as u64),
            batch: 1,
        };
        let pruned = ledger.prune(&retention, at(T0 + 20 * DAY)).await.unwrap();
        assert_eq!(
            pruned,
            Pruned {
                webhooks: 1,
                tool_calls: 1,
                tool_answers: 1,
                links: 0,
                sessions: 0,
                operations: 0,
                operation_tenants_failed: 0,
            },
            "{}",
            ledger.store()
        );
        // The pending hint is still due, however old.
        let pending = ledger
            .pending_processor_events(at(T0 + 20 * DAY), 10)
            .await
            .unwrap();
        assert_eq!(
            pending
                .iter()
                .map(|e| e.event_id.as_str())
                .collect::<Vec<_>>(),
            ["evt_old_pending"]
        );
        let calls = ledger.tool_calls(&tenant(), &op.id).await.unwrap();
        assert_eq!(calls.len(), 1, "{calls:?}");
        assert_eq!(calls[0].1.as_deref(), Some("toolu_2"));
        assert_eq!(ledger.tool_answer(&tenant(), "k-old").await.unwrap(), None);
        assert!(
            ledger
                .tool_answer(&tenant(), "k-new")
                .await
                .unwrap()
                .is_some()
        );
        assert_eq!(ledger.events_unscoped(&op.id).await.unwrap().len(), before);
        assert_eq!(
            ledger.get(&tenant(), &op.id).await.unwrap().status,
            Status::Ready
        );
        // Nothing left to prune: a second run deletes nothing.
        assert_eq!(
            ledger.prune(&retention, at(T0 + 20 * DAY)).await.unwrap(),
            Pruned::default()
        );
    }
}

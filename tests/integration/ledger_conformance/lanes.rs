//! Lanes (issue 51): the ready work of each tenant at each priority is found, and claimed by a
//! plan of so many rows per lane, oldest first, never before `not_before`; the unplanned claim
//! takes interactive work before older bulk work; a tenant's share is kept. Both stores.

use super::{T0, at, for_each_store, holder};
use crate::support::details;
use payonce_core::id::{BusinessKey, TenantId};
use payonce_core::priority::{CAP_PER_SECOND_MAX, Priority, SHARE_DEFAULT};
use payonce_core::state::Status;
use payonce_ledger::lanes::{Lane, ReadyLane, Take};
use payonce_ledger::{
    CLAIM_BATCH_MAX, LedgerError, LimitError, NewApproval, NewOperation, Operation, SharedLedger,
};

fn lane(priority: Priority, tenant: &str) -> Lane {
    Lane {
        priority,
        tenant: TenantId::parse(tenant).unwrap(),
    }
}

/// A payment of `tenant` for `invoice`, created with `priority` and `not_before` and approved
/// (for a day) at `now` with `approval_priority`.
async fn approved(
    ledger: &SharedLedger,
    tenant: &str,
    invoice: &str,
    priority: Priority,
    not_before: Option<i64>,
    now: i64,
) -> Operation {
    let tenant = TenantId::parse(tenant).unwrap();
    let mut new = NewOperation::keyed(
        &crate::support::key_secret(),
        tenant.clone(),
        BusinessKey::parse(&format!("invoice:{invoice}:pay")).unwrap(),
        details(invoice, 500, "pm_card_visa"),
        "service:test".into(),
    );
    new.priority = priority;
    new.not_before = not_before.map(at);
    let row = ledger.create_or_get(new, at(now)).await.unwrap().operation;
    assert_eq!(
        (row.priority, row.not_before),
        (priority, not_before.map(at))
    );
    approve(ledger, &row, None, now).await
}

async fn approve(
    ledger: &SharedLedger,
    row: &Operation,
    priority: Option<Priority>,
    now: i64,
) -> Operation {
    let approval = NewApproval {
        operation: row.id.clone(),
        details_hash: row.details_hash.clone(),
        approved_by: "customer:cus_test".into(),
        method: "test".into(),
        expires_at: at(now + 86_400_000),
        priority,
    };
    ledger
        .approve(&row.tenant, approval, at(now))
        .await
        .unwrap()
}

fn invoices(claimed: &[Operation]) -> Vec<&str> {
    let mut v: Vec<&str> = claimed.iter().map(|o| o.details.invoice()).collect();
    v.sort_unstable();
    v
}

#[tokio::test]
async fn lanes_are_found_and_a_plan_claims_each_lanes_oldest_due_rows() {
    for_each_store(|ledger| async move {
        let a1 = approved(&ledger, "a", "A1", Priority::Bulk, None, T0).await;
        approved(&ledger, "a", "A2", Priority::Bulk, None, T0 + 1).await;
        approved(&ledger, "a", "A3", Priority::Bulk, None, T0 + 2).await;
        approved(&ledger, "b", "B1", Priority::Interactive, None, T0 + 3).await;
        approved(&ledger, "b", "B2", Priority::Interactive, None, T0 + 4).await;
        // Scheduled: approved now, due only at T0 + 10 s.
        let c1 = approved(&ledger, "c", "C1", Priority::Bulk, Some(T0 + 10_000), T0).await;
        assert_eq!(c1.available_at, at(T0 + 10_000));
        assert_eq!(a1.available_at, at(T0));
        ledger
            .profiles()
            .set_share(
                &TenantId::parse("a").unwrap(),
                Some(300),
                "oncall:test",
                at(T0),
            )
            .await
            .unwrap();
        let lanes = ledger.ready_lanes(100).await.unwrap();
        let ready = |priority, tenant: &str, oldest, share| ReadyLane {
            lane: lane(priority, tenant),
            oldest: at(oldest),
            share,
            cap_per_second: None,
        };
        assert_eq!(
            lanes,
            vec![
                ready(Priority::Interactive, "b", T0 + 3, SHARE_DEFAULT),
                ready(Priority::Bulk, "a", T0, 300),
                ready(Priority::Bulk, "c", T0 + 10_000, SHARE_DEFAULT),
            ]
        );
        assert_eq!(ledger.ready_lanes(1).await.unwrap().len(), 1);
        let plan = vec![
            Take {
                lane: lane(Priority::Bulk, "a"),
                n: 2,
            },
            Take {
                lane: lane(Priority::Interactive, "b"),
                n: 5,
            },
            Take {
                lane: lane(Priority::Bulk, "c"),
                n: 1,
            },
        ];
        let claimed = ledger
            .claim_lanes(&holder("w"), &plan, at(T0 + 1_000))
            .await
            .unwrap();
        assert_eq!(
            invoices(&claimed),
            ["A1", "A2", "B1", "B2"],
            "c is not due yet"
        );
        for op in &claimed {
            assert_eq!((op.status, op.attempt), (Status::Executing, 1));
            assert_eq!(
                op.first_submitted_at,
                Some(at(T0 + 1_000)),
                "its submission start recorded"
            );
            assert_eq!(op.lease_owner.as_deref(), Some("w"));
        }
        let c = [Take {
            lane: lane(Priority::Bulk, "c"),
            n: 1,
        }];
        assert!(
            ledger
                .claim_lanes(&holder("w"), &c, at(T0 + 9_999))
                .await
                .unwrap()
                .is_empty()
        );
        let late = ledger
            .claim_lanes(&holder("w"), &c, at(T0 + 10_000))
            .await
            .unwrap();
        assert_eq!(invoices(&late), ["C1"]);
        let lanes = ledger.ready_lanes(100).await.unwrap();
        assert_eq!(lanes, vec![ready(Priority::Bulk, "a", T0 + 2, 300)]);
    })
    .await;
}

#[tokio::test]
async fn the_unplanned_claim_takes_interactive_work_before_older_bulk_work() {
    for_each_store(|ledger| async move {
        approved(&ledger, "a", "OLD-BULK", Priority::Bulk, None, T0).await;
        approved(
            &ledger,
            "b",
            "NEW-INTERACTIVE",
            Priority::Interactive,
            None,
            T0 + 5,
        )
        .await;
        let first = ledger
            .claim_to_submit(&holder("w"), 1, at(T0 + 10))
            .await
            .unwrap();
        assert_eq!(invoices(&first), ["NEW-INTERACTIVE"]);
        let next = ledger
            .claim_to_submit(&holder("w"), 1, at(T0 + 10))
            .await
            .unwrap();
        assert_eq!(invoices(&next), ["OLD-BULK"]);
    })
    .await;
}

#[tokio::test]
async fn a_customers_approval_makes_a_bulk_payment_interactive_and_keeps_its_schedule() {
    for_each_store(|ledger| async move {
        let tenant = TenantId::parse("a").unwrap();
        let mut new = NewOperation::keyed(
            &crate::support::key_secret(),
            tenant,
            BusinessKey::parse("invoice:P1:pay").unwrap(),
            details("P1", 500, "pm_card_visa"),
            "service:test".into(),
        );
        new.priority = Priority::Bulk;
        new.not_before = Some(at(T0 + 60_000));
        let row = ledger.create_or_get(new, at(T0)).await.unwrap().operation;
        let row = approve(&ledger, &row, Some(Priority::Interactive), T0 + 1_000).await;
        assert_eq!(row.priority, Priority::Interactive);
        assert_eq!(
            row.available_at,
            at(T0 + 60_000),
            "approved before its date: waits"
        );
        // Approved after its date: available at once.
        let mut later = NewOperation::keyed(
            &crate::support::key_secret(),
            TenantId::parse("a").unwrap(),
            BusinessKey::parse("invoice:P2:pay").unwrap(),
            details("P2", 500, "pm_card_visa"),
            "service:test".into(),
        );
        later.not_before = Some(at(T0 + 60_000));
        let later = ledger.create_or_get(later, at(T0)).await.unwrap().operation;
        let later = approve(&ledger, &later, None, T0 + 90_000).await;
        assert_eq!(
            (later.priority, later.available_at),
            (Priority::Interactive, at(T0 + 90_000))
        );
    })
    .await;
}

#[tokio::test]
async fn a_plan_outside_the_claim_limits_and_a_share_outside_its_range_are_refused() {
    for_each_store(|ledger| async move {
        approved(&ledger, "a", "X1", Priority::Bulk, None, T0).await;
        let a = |n| Take {
            lane: lane(Priority::Bulk, "a"),
            n,
        };
        for plan in [vec![], vec![a(0)], vec![a(CLAIM_BATCH_MAX), a(1)]] {
            assert!(matches!(
                ledger.claim_lanes(&holder("w"), &plan, at(T0 + 1)).await,
                Err(LedgerError::Limit(LimitError::ClaimBatch))
            ));
        }
        assert_eq!(
            ledger.ready_lanes(10).await.unwrap().len(),
            1,
            "nothing was claimed"
        );
        let tenant = TenantId::parse("a").unwrap();
        for share in [0, 1_001] {
            assert!(matches!(
                ledger
                    .profiles()
                    .set_share(&tenant, Some(share), "oncall:test", at(T0))
                    .await,
                Err(LedgerError::Limit(LimitError::Share(_)))
            ));
        }
        assert!(
            ledger.profiles().shares().await.unwrap().is_empty(),
            "nothing was written"
        );
        ledger
            .profiles()
            .set_share(&tenant, Some(1_000), "oncall:test", at(T0))
            .await
            .unwrap();
        assert_eq!(
            ledger.profiles().shares().await.unwrap(),
            vec![(tenant.clone(), 1_000)]
        );
        ledger
            .profiles()
            .set_share(&tenant, None, "oncall:test", at(T0))
            .await
            .unwrap();
        assert!(ledger.profiles().shares().await.unwrap().is_empty());
        // A tenant's cap: 1..=CAP_PER_SECOND_MAX, shown with its lanes.
        for cap in [0, CAP_PER_SECOND_MAX + 1] {
            assert!(matches!(
                ledger
                    .profiles()
                    .set_cap(&tenant, Some(cap), "oncall:test", at(T0))
                    .await,
                Err(LedgerError::Limit(LimitError::Share(_)))
            ));
        }
        assert!(
            ledger.profiles().caps().await.unwrap().is_empty(),
            "nothing was written"
        );
        ledger
            .profiles()
            .set_cap(&tenant, Some(7), "oncall:test", at(T0))
            .await
            .unwrap();
        assert_eq!(
            ledger.profiles().caps().await.unwrap(),
            vec![(tenant.clone(), 7)]
        );
        assert_eq!(
            ledger.ready_lanes(10).await.unwrap()[0].cap_per_second,
            Some(7)
        );
        ledger
            .profiles()
            .set_cap(&tenant, None, "oncall:test", at(T0))
            .await
            .unwrap();
        assert_eq!(
            ledger.ready_lanes(10).await.unwrap()[0].cap_per_second,
            None
        );
    })
    .await;
}

//! The sweep's batched writes (`Recovery::expire_leases`, `Recovery::record_lookups`) fence each
//! row on its own, exactly as the one-row calls do, on both stores.

use super::{LEASE_MS, T0, at, fence, for_each_store, holder, ms};
use crate::support::{ready_operation, tenant};
use payonce_core::state::Status;
use payonce_ledger::{ExpireLeases, LookupFound, RecordLookups};

#[tokio::test]
async fn batched_lease_expiries_and_found_lookups_are_fenced_one_by_one() {
    for_each_store(|ledger| async move {
        let a = ready_operation(&ledger, "INV-S1", "pm_card_visa", at(T0)).await;
        let b = ready_operation(&ledger, "INV-S2", "pm_card_visa", at(T0 + 1)).await;
        let c = ready_operation(&ledger, "INV-S3", "pm_card_visa", at(T0 + 2)).await;
        let d = ready_operation(&ledger, "INV-S4", "pm_card_visa", at(T0 + 3)).await;
        let e = ready_operation(&ledger, "INV-S5", "pm_card_visa", at(T0 + 4)).await;
        let claimed = ledger
            .claim(&holder("crashed"), 10, at(T0 + 5))
            .await
            .unwrap();
        assert_eq!(claimed.len(), 5);
        // a, b and e reached the processor (as far as the ledger knows); c and d never left.
        let marked = ledger
            .mark_submitting(
                &[fence(&a.id, 1), fence(&b.id, 1), fence(&e.id, 1)],
                at(T0 + 6),
            )
            .await
            .unwrap();
        assert_eq!(marked, vec![true, true, true]);
        let later = at(T0 + 5 + LEASE_MS);
        let seen = ledger.expired_leases(later, 100).await.unwrap();
        assert_eq!(seen.len(), 5);
        let lease = |id| seen.iter().find(|l| &l.id == id).unwrap().clone();
        // b: the sweep saw an older attempt; d: the sweep thinks it was submitted, it was not; e:
        // its lease is renewed (so no longer expired) by the time the write runs; a twice.
        let mut stale_b = lease(&b.id);
        stale_b.attempt = 0;
        let mut wrong_d = lease(&d.id);
        wrong_d.submitted = true;
        let renewed = ledger
            .renew(
                &holder("crashed"),
                std::slice::from_ref(&e.id),
                at(T0 + 4 + LEASE_MS),
            )
            .await
            .unwrap();
        assert_eq!(renewed, vec![(e.id.clone(), 1)]);
        let leases = vec![
            lease(&a.id),
            stale_b,
            lease(&c.id),
            wrong_d,
            lease(&e.id),
            lease(&a.id),
        ];
        let check_at = later + ms(1_000);
        let moved = ledger
            .expire_leases(
                &ExpireLeases {
                    leases: &leases,
                    actor: "reconciler",
                    next_check_at: check_at,
                },
                later,
            )
            .await
            .unwrap();
        assert_eq!(
            moved,
            vec![
                Some(Status::Unknown),
                None,
                Some(Status::Ready),
                None,
                None,
                None
            ],
            "a stale attempt, a wrong submission flag, a live lease and a repeat lose their fence"
        );
        let a_now = ledger.get(&tenant(), &a.id).await.unwrap();
        assert_eq!(
            (
                a_now.status,
                a_now.next_check_at,
                a_now.lease_owner.as_deref()
            ),
            (Status::Unknown, Some(check_at), None)
        );
        let c_now = ledger.get(&tenant(), &c.id).await.unwrap();
        assert_eq!(
            (
                c_now.status,
                c_now.available_at,
                c_now.lease_owner.as_deref()
            ),
            (Status::Ready, later, None)
        );
        for id in [&b.id, &d.id, &e.id] {
            assert_eq!(
                ledger.get(&tenant(), id).await.unwrap().status,
                Status::Executing,
                "{id} untouched"
            );
        }
        let last = ledger.events_unscoped(&a.id).await.unwrap().pop().unwrap();
        assert_eq!(
            (
                last.event.as_str(),
                last.actor.as_str(),
                last.detail.as_deref()
            ),
            (
                "lease_expired_submitted",
                "reconciler",
                Some(
                    format!(
                        "lease of crashed expired at {}",
                        lease(&a.id).lease_expires_at.rfc3339()
                    )
                    .as_str()
                )
            )
        );

        // Lookups: a (unknown at attempt 1) is recorded; b is still executing and e's entry names
        // a stale attempt: both lose, as does a repeat of a.
        let found = |id: &payonce_core::id::OperationId, attempt, reference: &str| LookupFound {
            fence: fence(id, attempt),
            reference: reference.into(),
            result: serde_json::json!({ "id": reference, "status": "succeeded" }),
        };
        let items = vec![
            found(&a.id, 1, "pi_a"),
            found(&b.id, 1, "pi_b"),
            found(&e.id, 0, "pi_e"),
            found(&a.id, 1, "pi_a_again"),
        ];
        let recorded = ledger
            .record_lookups(
                &RecordLookups {
                    found: &items,
                    source: "lookup by rec",
                },
                check_at,
            )
            .await
            .unwrap();
        assert_eq!(recorded, vec![true, false, false, false]);
        let a_now = ledger.get(&tenant(), &a.id).await.unwrap();
        assert_eq!(
            (
                a_now.status,
                a_now.external_ref.as_deref(),
                a_now.next_check_at
            ),
            (Status::Succeeded, Some("pi_a"), None)
        );
        assert_eq!(
            a_now.result,
            Some(serde_json::json!({ "id": "pi_a", "status": "succeeded" }))
        );
        let last = ledger.events_unscoped(&a.id).await.unwrap().pop().unwrap();
        assert_eq!(
            (
                last.event.as_str(),
                last.actor.as_str(),
                last.detail.as_deref(),
                last.from_status.as_deref()
            ),
            (
                "processor_succeeded",
                "lookup by rec",
                Some("lookup by rec: succeeded as pi_a"),
                Some("unknown")
            )
        );
        assert_eq!(
            ledger.get(&tenant(), &b.id).await.unwrap().status,
            Status::Executing
        );
        // Empty batches write nothing and succeed.
        let none = ledger
            .expire_leases(
                &ExpireLeases {
                    leases: &[],
                    actor: "reconciler",
                    next_check_at: check_at,
                },
                later,
            )
            .await
            .unwrap();
        assert!(none.is_empty());
    })
    .await;
}

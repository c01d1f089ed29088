//! A tenant's retention period for its operations, on both stores: what a prune past the period
//! deletes (settled operations with every row of theirs, a payment only after its refunds) and what
//! it never deletes (work still open, recent operations, another tenant's without a period).

use super::{T0, at, for_each_store};
use crate::support::refunds::{create_refund, settle_refund, succeeded_payment};
use crate::support::{self, details, ready_operation, tenant};
use payonce_core::id::{BusinessKey, TenantId};
use payonce_core::state::Status;
use payonce_ledger::retention::{OPERATION_RETENTION_DAYS_MIN, Pruned, Retention};
use payonce_ledger::{LedgerError, LimitError, NewOperation, Paid, Recorded};

const DAY: i64 = 24 * 60 * 60 * 1000;

#[tokio::test]
async fn a_tenants_period_prunes_settled_operations_refunds_first_and_nothing_open() {
    for_each_store(|ledger| async move {
        let other = TenantId::parse("other").unwrap();
        // Out of range: refused, nothing set.
        for days in [0, OPERATION_RETENTION_DAYS_MIN - 1, 36_501] {
            let refused = ledger
                .set_operation_retention(&tenant(), Some(days), at(T0))
                .await;
            assert!(
                matches!(refused, Err(LedgerError::Limit(LimitError::OperationRetention(d))) if d == days),
                "{refused:?}"
            );
        }
        assert_eq!(ledger.operation_retention(&tenant()).await.unwrap(), None);

        // Old: a refunded payment and its refund, a plain payment, one never approved, one ready.
        let refunded = succeeded_payment(&ledger, "INV-RET1", 1_000, at(T0)).await;
        let refund = create_refund(&ledger, &refunded, "refund:ret1", 1_000, at(T0 + 1))
            .await
            .unwrap()
            .operation;
        let refund = settle_refund(
            &ledger,
            &refund,
            Recorded::Succeeded(Paid {
                reference: "re_ret1".into(),
                result: serde_json::json!({"id": "re_ret1", "status": "succeeded"}),
            }),
        )
        .await;
        let paid = succeeded_payment(&ledger, "INV-RET2", 2_000, at(T0 + 2)).await;
        let unapproved = ledger
            .create_or_get(
                NewOperation::keyed(
                    &support::key_secret(),
                    tenant(),
                    BusinessKey::parse("invoice:INV-RET3:pay").unwrap(),
                    details("INV-RET3", 3_000, "pm_card_visa"),
                    "service:test".into(),
                ),
                at(T0 + 3),
            )
            .await
            .unwrap()
            .operation;
        // Recent: inside the period at the prune.
        let prune_at = T0 + 600 * DAY;
        let recent = succeeded_payment(&ledger, "INV-RET5", 5_000, at(prune_at - DAY)).await;
        // Old but still to run (made last: the payment fixture claims whatever is ready).
        let ready = ready_operation(&ledger, "INV-RET4", "pm_card_visa", at(T0 + 4)).await;
        // Another tenant's, as old, without a period of its own.
        let theirs = ledger
            .create_or_get(
                NewOperation::keyed(
                    &support::key_secret(),
                    other.clone(),
                    BusinessKey::parse("invoice:INV-RET6:pay").unwrap(),
                    details("INV-RET6", 6_000, "pm_card_visa"),
                    "service:test".into(),
                ),
                at(T0),
            )
            .await
            .unwrap()
            .operation;

        let retention = Retention {
            batch: 1,
            ..Retention::default()
        };
        // No period: nothing goes, however old.
        assert_eq!(
            ledger.prune(&retention, at(prune_at)).await.unwrap().operations,
            0
        );
        ledger
            .set_operation_retention(&tenant(), Some(OPERATION_RETENTION_DAYS_MIN), at(T0))
            .await
            .unwrap();
        assert_eq!(
            ledger.operation_retention(&tenant()).await.unwrap(),
            Some(OPERATION_RETENTION_DAYS_MIN)
        );
        // One by one (batch 1): the refund, then the payment it no longer holds back, the plain
        // payment and the unapproved proposal.
        let pruned = ledger.prune(&retention, at(prune_at)).await.unwrap();
        assert_eq!(
            pruned,
            Pruned {
                operations: 4,
                ..Pruned::default()
            },
            "{}",
            ledger.store()
        );
        for gone in [&refunded, &refund, &paid, &unapproved] {
            assert!(
                matches!(ledger.get(&tenant(), &gone.id).await, Err(LedgerError::NotFound)),
                "{} still there on {}",
                gone.id,
                ledger.store()
            );
            assert!(ledger.events_unscoped(&gone.id).await.unwrap().is_empty());
        }
        assert_eq!(
            ledger.get(&tenant(), &ready.id).await.unwrap().status,
            Status::Ready
        );
        assert_eq!(
            ledger.get(&tenant(), &recent.id).await.unwrap().status,
            Status::Succeeded
        );
        assert_eq!(
            ledger.get(&other, &theirs.id).await.unwrap().status,
            Status::AwaitingApproval
        );
        assert!(!ledger.events_unscoped(&recent.id).await.unwrap().is_empty());
        // Nothing more to prune; the period can be cleared (kept for ever again).
        assert_eq!(
            ledger.prune(&retention, at(prune_at)).await.unwrap(),
            Pruned::default()
        );
        ledger
            .set_operation_retention(&tenant(), None, at(T0))
            .await
            .unwrap();
        assert_eq!(ledger.operation_retention(&tenant()).await.unwrap(), None);
    })
    .await;
}

/// `payonce tenant set-retention`: sets a period, refuses one shorter than a dispute can come
/// (non-zero exit, nothing set), and clears it with `--forever`.
#[test]
fn the_cli_sets_refuses_and_clears_a_period() {
    let file = support::SqliteFile::new("retention-cli");
    let url = file.url.clone();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(support::payonce_bin())
            .args(["migrate", "--database-url", &url])
            .env("PAYONCE_KEY_SECRET", support::KEY_SECRET)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::process::Command::new(support::payonce_bin())
            .args([
                "tenant",
                "--database-url",
                &url,
                "set-retention",
                "--tenant",
                "demo",
            ])
            .args(args)
            .env("PAYONCE_KEY_SECRET", support::KEY_SECRET)
            .output()
            .unwrap()
    };
    let set = run(&["--operation-days", "730"]);
    assert!(
        set.status.success(),
        "{}",
        String::from_utf8_lossy(&set.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&set.stdout),
        "tenant demo: settled operations are pruned 730 days after they were created and last changed\n"
    );
    let short = run(&["--operation-days", "30"]);
    assert!(!short.status.success());
    assert!(
        String::from_utf8_lossy(&short.stderr).contains("540..=36500 days"),
        "{}",
        String::from_utf8_lossy(&short.stderr)
    );
    let cleared = run(&["--forever"]);
    assert!(
        cleared.status.success(),
        "{}",
        String::from_utf8_lossy(&cleared.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&cleared.stdout),
        "tenant demo: operations are kept for ever\n"
    );
    let neither = run(&[]);
    assert_eq!(neither.status.code(), Some(2), "a usage error");
    // The file and its companions go with `file`; the secret kept beside it is this test's.
    let _ = std::fs::remove_file(format!("{}.key-secret", file.path.display()));
}

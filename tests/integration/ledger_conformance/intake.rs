//! Batch intake (`Operations::create_batch`) on every store: each item answered as create-or-get
//! then approve would answer it alone, a refused item changing nothing, a retried batch writing
//! nothing twice, racing batches with overlapping business keys creating each operation once.

use super::{T0, at};
use crate::support::{details, every_store, key_secret, tenant};
use payonce_core::details::Details;
use payonce_core::id::BusinessKey;
use payonce_core::state::Status;
use payonce_ledger::intake::{BATCH_ITEMS_MAX, Batch, BatchApproval, BatchItem};
use payonce_ledger::{LedgerError, LimitError, NewApproval, NewOperation, SharedLedger};
use std::collections::HashMap;
use std::time::Duration;

const DAY: Duration = Duration::from_secs(86_400);

fn new_op(invoice: &str, d: Details) -> NewOperation {
    NewOperation::keyed(
        &key_secret(),
        tenant(),
        BusinessKey::parse(&format!("invoice:{invoice}:pay")).unwrap(),
        d,
        "service:billing".into(),
    )
}

/// An item for `invoice` (2048 usd), approved for its own details when `approved`.
fn item(invoice: &str, approved: bool) -> BatchItem {
    let d = details(invoice, 2048, "pm_card_visa");
    let approval = approved.then(|| BatchApproval {
        details_hash: d.hash(),
        approved_by: format!("mandate:{invoice}"),
    });
    BatchItem {
        new: new_op(invoice, d),
        approval,
    }
}

fn batch(items: Vec<BatchItem>) -> Batch {
    Batch {
        tenant: tenant(),
        items,
        actor: "service:billing".into(),
        method: "service".into(),
        approval_expires_at: at(T0) + DAY,
    }
}

/// The audit trail's events of an operation, by name.
async fn events(ledger: &SharedLedger, id: &payonce_core::id::OperationId) -> Vec<String> {
    ledger
        .events(&tenant(), id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.event.to_string())
        .collect()
}

/// Every operation of the tenant with its events and approvals, for "nothing changed" checks.
async fn snapshot(ledger: &SharedLedger) -> Vec<(String, String, usize, bool)> {
    let mut all = Vec::new();
    for status in payonce_core::state::ALL_STATUSES {
        let listed = ledger
            .list(&payonce_ledger::ListFilter {
                statuses: vec![status],
                updated_before: None,
                tenant: Some(tenant()),
                limit: 10_000,
            })
            .await
            .unwrap();
        for op in listed {
            let n = events(ledger, &op.id).await.len();
            let approved = ledger
                .latest_approval(&tenant(), &op.id)
                .await
                .unwrap()
                .is_some();
            all.push((
                op.id.as_str().to_string(),
                op.status.as_str().to_string(),
                n,
                approved,
            ));
        }
    }
    all.sort();
    all
}

#[tokio::test]
async fn a_mixed_batch_answers_each_item_as_one_by_one_and_refused_items_change_nothing() {
    for ledger in every_store().await {
        let store = ledger.store();
        // Awaiting approval, already approved, and one whose key names other details.
        let awaiting = ledger
            .create_or_get(new_op("A", details("A", 2048, "pm_card_visa")), at(T0))
            .await
            .unwrap()
            .operation;
        let approved = ledger
            .create_or_get(new_op("B", details("B", 2048, "pm_card_visa")), at(T0))
            .await
            .unwrap()
            .operation;
        ledger
            .approve(
                &tenant(),
                NewApproval {
                    operation: approved.id.clone(),
                    details_hash: approved.details_hash.clone(),
                    approved_by: "customer:B".into(),
                    method: "service".into(),
                    expires_at: at(T0) + DAY,
                    priority: None,
                },
                at(T0),
            )
            .await
            .unwrap();
        let other = ledger
            .create_or_get(new_op("C", details("C", 1000, "pm_card_visa")), at(T0))
            .await
            .unwrap()
            .operation;
        let before = snapshot(&ledger).await;
        let mut mismatched = item("M", false);
        mismatched.approval = Some(BatchApproval {
            details_hash: details("M", 9999, "pm_card_visa").hash(),
            approved_by: "mandate:M".into(),
        });
        let mut wrong_state = item("B", true);
        wrong_state.approval = Some(BatchApproval {
            details_hash: approved.details_hash.clone(),
            approved_by: "mandate:B".into(),
        });
        let results = ledger
            .create_batch(
                &batch(vec![
                    item("N1", true),  // 0: new, enqueued
                    item("N2", false), // 1: new, awaiting approval
                    item("A", true),   // 2: existing, approved now
                    wrong_state,       // 3: existing, already approved for these details
                    item("C", false),  // 4: the key names other details
                    mismatched,        // 5: an approval of other details
                    item("N1", false), // 6: a repeat of item 0's key
                ]),
                at(T0 + 1_000),
            )
            .await
            .unwrap();
        assert_eq!(results.len(), 7, "{store}");
        let ok = |i: usize| {
            results[i]
                .as_ref()
                .unwrap_or_else(|e| panic!("{store} item {i}: {e}"))
        };
        assert!(
            ok(0).inserted && ok(0).operation.status == Status::Ready,
            "{store}"
        );
        assert!(
            ok(1).inserted && ok(1).operation.status == Status::AwaitingApproval,
            "{store}"
        );
        assert!(
            !ok(2).inserted && ok(2).operation.status == Status::Ready,
            "{store}"
        );
        assert_eq!(ok(2).operation.id, awaiting.id, "{store}");
        assert!(
            !ok(3).inserted && ok(3).operation.status == Status::Ready,
            "{store}"
        );
        assert!(
            matches!(&results[4], Err(LedgerError::Conflict { existing }) if *existing == other.id),
            "{store}: {:?}",
            results[4]
        );
        assert!(
            matches!(results[5], Err(LedgerError::ApprovalMismatch)),
            "{store}"
        );
        assert!(
            matches!(
                results[6],
                Err(LedgerError::Limit(LimitError::BatchRepeat(0)))
            ),
            "{store}: {:?}",
            results[6]
        );
        // The audit trail of each, as one by one.
        assert_eq!(
            events(&ledger, &ok(0).operation.id).await,
            ["create", "approve"]
        );
        assert_eq!(events(&ledger, &ok(1).operation.id).await, ["create"]);
        assert_eq!(events(&ledger, &awaiting.id).await, ["create", "approve"]);
        assert_eq!(events(&ledger, &approved.id).await, ["create", "approve"]);
        let approval = ledger
            .latest_approval(&tenant(), &ok(0).operation.id)
            .await
            .unwrap()
            .expect("the enqueued item's approval is recorded");
        assert_eq!(approval.approved_by, "mandate:N1");
        assert_eq!(approval.method, "service");
        // The refused items changed nothing: the mismatched one was not created, C is as it was.
        let m = new_op("M", details("M", 2048, "pm_card_visa"));
        assert!(matches!(
            ledger.get(&tenant(), &m.id).await,
            Err(LedgerError::NotFound)
        ));
        let after = snapshot(&ledger).await;
        let changed: Vec<_> = after.iter().filter(|row| !before.contains(row)).collect();
        let expected: Vec<String> = [&ok(0).operation.id, &ok(1).operation.id, &awaiting.id]
            .iter()
            .map(|id| id.as_str().to_string())
            .collect();
        let mut changed_ids: Vec<String> = changed.iter().map(|r| r.0.clone()).collect();
        changed_ids.sort();
        let mut expected_sorted = expected.clone();
        expected_sorted.sort();
        assert_eq!(
            changed_ids, expected_sorted,
            "{store}: only the written items changed"
        );
    }
}

#[tokio::test]
async fn a_retried_batch_writes_nothing_twice() {
    for ledger in every_store().await {
        let store = ledger.store();
        let items: Vec<BatchItem> = (0..50)
            .map(|i| item(&format!("R{i}"), i % 2 == 0))
            .collect();
        let first = ledger
            .create_batch(&batch(items.clone()), at(T0))
            .await
            .unwrap();
        assert!(
            first.iter().all(|r| r.as_ref().is_ok_and(|c| c.inserted)),
            "{store}"
        );
        let before = snapshot(&ledger).await;
        // The response was lost; the caller sends the same batch again, later.
        let again = ledger
            .create_batch(&batch(items), at(T0 + 60_000))
            .await
            .unwrap();
        for (i, (a, b)) in first.iter().zip(&again).enumerate() {
            let (a, b) = (a.as_ref().unwrap(), b.as_ref().unwrap());
            assert!(!b.inserted, "{store} item {i}");
            assert_eq!(a.operation.id, b.operation.id, "{store} item {i}");
            assert_eq!(a.operation.status, b.operation.status, "{store} item {i}");
        }
        assert_eq!(
            snapshot(&ledger).await,
            before,
            "{store}: the retry wrote nothing"
        );
    }
}

#[tokio::test]
async fn a_batch_outside_its_limits_is_refused_whole() {
    for ledger in every_store().await {
        let store = ledger.store();
        assert!(
            matches!(
                ledger.create_batch(&batch(vec![]), at(T0)).await,
                Err(LedgerError::Limit(LimitError::BatchSize))
            ),
            "{store}"
        );
        let too_many: Vec<BatchItem> = (0..=BATCH_ITEMS_MAX)
            .map(|i| item(&format!("L{i}"), false))
            .collect();
        assert!(
            matches!(
                ledger.create_batch(&batch(too_many), at(T0)).await,
                Err(LedgerError::Limit(LimitError::BatchSize))
            ),
            "{store}"
        );
        let exactly: Vec<BatchItem> = (0..BATCH_ITEMS_MAX)
            .map(|i| item(&format!("L{i}"), true))
            .collect();
        let results = ledger.create_batch(&batch(exactly), at(T0)).await.unwrap();
        assert!(
            results.iter().all(|r| r
                .as_ref()
                .is_ok_and(|c| c.inserted && c.operation.status == Status::Ready)),
            "{store}"
        );
        let counts = ledger.count_by_status().await.unwrap();
        assert_eq!(
            counts.iter().map(|c| c.count).sum::<i64>(),
            i64::try_from(BATCH_ITEMS_MAX).unwrap(),
            "{store}: only the batch at the limit wrote"
        );
    }
}

#[tokio::test]
async fn racing_batches_with_overlapping_keys_create_and_enqueue_each_operation_once() {
    for ledger in every_store().await {
        let store = ledger.store();
        const CLIENTS: usize = 4;
        const KEYS: usize = 200;
        let mut racers = tokio::task::JoinSet::new();
        for client in 0..CLIENTS {
            let ledger = ledger.clone();
            // Every client sends every key, each in its own order, all approved.
            let mut order: Vec<usize> = (0..KEYS).collect();
            order.rotate_left(client * KEYS / CLIENTS);
            if client % 2 == 1 {
                order.reverse();
            }
            racers.spawn(async move {
                let items = order.iter().map(|i| item(&format!("K{i}"), true)).collect();
                ledger.create_batch(&batch(items), at(T0)).await
            });
        }
        let mut inserted: HashMap<String, usize> = HashMap::new();
        while let Some(joined) = racers.join_next().await {
            for result in joined.unwrap().unwrap() {
                let created = result.unwrap_or_else(|e| panic!("{store}: {e}"));
                assert_eq!(created.operation.status, Status::Ready, "{store}");
                *inserted
                    .entry(created.operation.id.as_str().to_string())
                    .or_default() += usize::from(created.inserted);
            }
        }
        assert_eq!(inserted.len(), KEYS, "{store}");
        assert!(
            inserted.values().all(|n| *n == 1),
            "{store}: each created by one batch"
        );
        for id in inserted.keys() {
            let id = payonce_core::id::OperationId::parse(id).unwrap();
            assert_eq!(events(&ledger, &id).await, ["create", "approve"], "{store}");
        }
        let counts = ledger.count_by_status().await.unwrap();
        assert_eq!(counts.len(), 1, "{store}: {counts:?}");
        assert_eq!(counts[0].count, i64::try_from(KEYS).unwrap(), "{store}");
    }
}

#[tokio::test]
async fn a_batch_that_enqueues_wakes_the_workers_of_other_processes() {
    let (ledger, url) = crate::support::postgres_ledger().await;
    let mut listener = sqlx::postgres::PgListener::connect(&url).await.unwrap();
    listener
        .listen(payonce_ledger::postgres::READY_CHANNEL)
        .await
        .unwrap();
    let items: Vec<BatchItem> = (0..20).map(|i| item(&format!("W{i}"), true)).collect();
    ledger.create_batch(&batch(items), at(T0)).await.unwrap();
    let woken = tokio::time::timeout(Duration::from_secs(10), listener.recv())
        .await
        .expect("a wake-up within 10 s")
        .unwrap();
    assert_eq!(woken.channel(), payonce_ledger::postgres::READY_CHANNEL);
}

/// Whether a new row's business key is free is one probe of the directory's unique index per row,
/// whatever the tenant's size: the plan of the batch insert (alone and in its transaction's form)
/// reads the directory only through a per-row subplan, never an anti-join over the tenant's rows
/// (which `NOT EXISTS` let the planner choose, and which made each insert read every directory
/// row of a tenant).
#[tokio::test]
async fn a_batch_insert_probes_the_directory_per_row_whatever_the_tenants_size() {
    use payonce_ledger::Dialect;
    let (ledger, url) = crate::support::postgres_ledger().await;
    for round in 0..2 {
        let items: Vec<BatchItem> = (0..BATCH_ITEMS_MAX)
            .map(|i| item(&format!("P{round}-{i}"), i % 2 == 0))
            .collect();
        ledger.create_batch(&batch(items), at(T0)).await.unwrap();
    }
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    sqlx::query("ANALYZE operation_search")
        .execute(&pool)
        .await
        .unwrap();
    let sql = <sqlx::Postgres as Dialect>::intake();
    let rows = format!(
        r#"[{{"id":"op_{}","business_key":"invoice:P0-1:pay","amount_minor":2048,"currency":"usd","customer":"cus_1","payment_method":"pm_card_visa","invoice":"P0-1","details_hash":"{}","idempotency_key":"po1_{}","approved_by":"mandate","approval_id":"apv_1"}}]"#,
        "0".repeat(32),
        "a".repeat(64),
        "0".repeat(40)
    );
    let statements = [
        sql.insert.clone(),
        sql.insert_recorded
            .clone()
            .expect("Postgres records in the insert"),
    ];
    for statement in statements {
        let plan: Vec<String> =
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("EXPLAIN {statement}")))
                .bind(tenant().as_str())
                .bind(T0)
                .bind("service:billing")
                .bind(&rows)
                .bind(T0 + 86_400_000)
                .bind("service")
                .fetch_all(&pool)
                .await
                .unwrap();
        let plan = plan.join("\n");
        assert!(!plan.contains("Anti Join"), "{plan}");
        assert!(plan.contains("SubPlan"), "{plan}");
        for line in plan.lines().filter(|l| l.contains("on operation_search")) {
            assert!(
                line.contains("Index Only Scan using operation_search_business_key")
                    || line.contains("Index Scan using operation_search_business_key"),
                "the directory is read other than by its unique index: {line}\n{plan}"
            );
        }
    }
}

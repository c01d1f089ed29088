//! The ready queue's depth on both stores (`Operations::queue_depth`, the console's overview): per
//! class the ready rows, the due ones and the oldest due; per tenant the most loaded ones and the rest
//! summed; what is not ready, or not yet due, counted as such.

use super::{T0, at, for_each_store};
use crate::support::{rows, tenant};
use payonce_core::id::TenantId;
use payonce_core::priority::Priority::{Bulk, Interactive};
use payonce_core::queue_depth::{ClassDepth, QUEUE_TENANTS_SHOWN, TenantDepth};
use payonce_ledger::console::Chart;
use std::time::Duration;

/// The tenants with one bulk row each, past acme and globex: more than the depth names.
const SMALL_TENANTS: u32 = QUEUE_TENANTS_SHOWN;

fn class(
    priority: payonce_core::priority::Priority,
    ready: i64,
    due: i64,
    oldest_due: Option<i64>,
) -> ClassDepth {
    ClassDepth {
        priority,
        ready,
        due,
        oldest_due: oldest_due.map(at),
    }
}

fn of(
    tenant: Option<&str>,
    priority: payonce_core::priority::Priority,
    n: (i64, i64),
) -> TenantDepth {
    TenantDepth {
        tenant: tenant.map(|t| TenantId::parse(t).unwrap()),
        priority,
        ready: n.0,
        due: n.1,
    }
}

#[tokio::test]
async fn the_queue_depth_counts_ready_and_due_rows_by_class_and_folds_the_smaller_tenants() {
    for_each_store(|ledger| async move {
        let empty = ledger.queue_depth(at(T0)).await.unwrap();
        assert_eq!(
            empty.classes,
            vec![class(Interactive, 0, 0, None), class(Bulk, 0, 0, None)]
        );
        assert_eq!(empty.tenants, vec![]);

        let acme = tenant();
        let globex = TenantId::parse("globex").unwrap();
        rows::ready_in_class(&ledger, &acme, "QD-A1", (Interactive, None), at(T0)).await;
        rows::ready_in_class(&ledger, &acme, "QD-A2", (Interactive, None), at(T0 + 1_000)).await;
        rows::ready_in_class(&ledger, &acme, "QD-A3", (Bulk, None), at(T0 + 2_000)).await;
        // Scheduled for later: ready, not due.
        let later = Some(at(T0 + 60_000));
        rows::ready_in_class(&ledger, &acme, "QD-A4", (Bulk, later), at(T0)).await;
        for n in 0..3 {
            let invoice = format!("QD-G{n}");
            rows::ready_in_class(&ledger, &globex, &invoice, (Bulk, None), at(T0 + 3_000)).await;
        }
        for n in 0..SMALL_TENANTS {
            let small = TenantId::parse(&format!("t{n:02}")).unwrap();
            let invoice = format!("QD-T{n}");
            rows::ready_in_class(&ledger, &small, &invoice, (Bulk, None), at(T0 + 4_000)).await;
        }
        // Not ready: claimed, and withdrawn.
        let claimed = rows::ready(&ledger, "QD-X1", "pm_card_visa", at(T0 - 9_000)).await;
        rows::claimed(
            &ledger,
            &claimed.id,
            &rows::holder("w", Duration::from_secs(600)),
            at(T0),
        )
        .await;
        let withdrawn =
            rows::ready_in_class(&ledger, &globex, "QD-X2", (Bulk, None), at(T0 - 9_000)).await;
        let cancel = payonce_ledger::Cancel {
            id: &withdrawn.id,
            actor: "service:test",
        };
        ledger
            .cancel(&globex, &cancel, at(T0 + 4_500))
            .await
            .unwrap();

        let now = at(T0 + 5_000);
        let depth = ledger.queue_depth(now).await.unwrap();
        assert_eq!(
            depth.classes,
            vec![
                class(Interactive, 2, 2, Some(T0)),
                class(
                    Bulk,
                    2 + 3 + i64::from(SMALL_TENANTS),
                    1 + 3 + i64::from(SMALL_TENANTS),
                    Some(T0 + 2_000)
                ),
            ]
        );
        // acme (4 ready), globex (3), then the ones with 1 by name until ten are named.
        let mut expected = vec![
            of(Some("acme"), Interactive, (2, 2)),
            of(Some("acme"), Bulk, (2, 1)),
            of(Some("globex"), Bulk, (3, 3)),
        ];
        let named = QUEUE_TENANTS_SHOWN - 2;
        for n in 0..named {
            expected.push(of(Some(&format!("t{n:02}")), Bulk, (1, 1)));
        }
        let rest = i64::from(SMALL_TENANTS - named);
        expected.push(of(None, Bulk, (rest, rest)));
        assert_eq!(depth.tenants, expected);

        // The console's overview: the tenant's own queue, every class listed.
        let chart = Chart {
            bucket: Duration::from_secs(300),
            buckets: 1,
        };
        let overview = ledger.console().overview(&acme, chart, now).await.unwrap();
        assert_eq!(
            overview.queue,
            vec![
                class(Interactive, 2, 2, Some(T0)),
                class(Bulk, 2, 1, Some(T0 + 2_000))
            ]
        );
        let quiet = TenantId::parse("quiet").unwrap();
        let overview = ledger.console().overview(&quiet, chart, now).await.unwrap();
        assert_eq!(
            overview.queue,
            vec![class(Interactive, 0, 0, None), class(Bulk, 0, 0, None)]
        );
    })
    .await;
}

/// The queue depth at scale on Postgres: on a table of settled rows and ready ones of two classes
/// and many tenants, with fresh statistics, both statements find the ready rows through a partial
/// index of them (`operations_lanes_idx`, index-only once the table is vacuumed and no older
/// transaction holds the pages back; else as a bitmap), never by
/// reading the whole table. Without the partial indexes this fails.
#[tokio::test]
async fn the_queue_depth_reads_the_ready_rows_through_their_index_on_a_large_table() {
    let (_ledger, url) = crate::support::postgres_ledger().await;
    let db = sqlx::PgPool::connect(&url).await.unwrap();
    // 200,000 operations: nineteen in twenty succeeded (a ledger's history outweighs its queue; with
    // a quarter ready, a table whose visibility map a concurrent transaction holds back is cheaper
    // to scan whole, and the planner rightly does), the rest ready over 500 tenants, one in five
    // interactive, one in two scheduled for later (the audit trigger off for the bulk load).
    sqlx::raw_sql(
        "ALTER TABLE operations DISABLE TRIGGER operations_audit_insert;
         INSERT INTO operations (id, tenant_id, business_key, kind, amount_minor, currency, customer,
             payment_method, invoice, details_hash, status, idempotency_key, available_at, external_ref,
             created_at, updated_at, approved_hash, priority)
         SELECT 'op_' || lpad(to_hex(g), 32, '0'), 'tenant' || (g % 500), 'invoice:INV-' || g || ':pay',
             'payment', 100 + g % 1000, 'usd', 'cus_' || (g % 5000), 'pm_card_visa', 'INV-' || g,
             repeat('a', 64), CASE WHEN g % 20 = 0 THEN 'ready' ELSE 'succeeded' END,
             'payonce-op_' || lpad(to_hex(g), 32, '0'),
             CASE WHEN g % 40 = 0 THEN 1900000000000 ELSE 1800000000000 + g END,
             CASE WHEN g % 20 <> 0 THEN 'pi_' || g END, 1800000000000 + g, 1800000000000 + g,
             repeat('a', 64), CASE WHEN g % 100 = 0 THEN 0 ELSE 1 END
         FROM generate_series(1, 200000) g;
         ALTER TABLE operations ENABLE TRIGGER operations_audit_insert;",
    )
    .execute(&db)
    .await
    .unwrap();
    sqlx::raw_sql("VACUUM ANALYZE operations")
        .execute(&db)
        .await
        .unwrap();
    let [across, one] = payonce_ledger::lanes::queue_depth_statements();
    let now = "1800100000000";
    for sql in [
        across.replace("$1", now).replace("$2", "10"),
        one.replace("$1", "'tenant7'").replace("$2", now),
    ] {
        let plan: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("EXPLAIN {sql}")))
            .fetch_all(&db)
            .await
            .unwrap();
        let plan = plan.join("\n");
        assert!(
            plan.contains("operations_lanes_idx") && !plan.contains("Seq Scan on operations"),
            "{sql}\n{plan}"
        );
    }
}

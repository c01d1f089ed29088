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

//! The over-refund guard on both stores: exact sums, released states, refusals that change nothing,
//! and concurrent callers racing for the last money (Postgres pool; SQLite file shared by several
//! connections, as several processes would share it).

use super::{T0, at, for_each_store};
use crate::support::refunds::{create_refund, refund_details, settle_refund, succeeded_payment};
use crate::support::{self, tenant};
use payonce_core::details::{OperationKind, RefundReason};
use payonce_core::id::{BusinessKey, OperationId, TenantId};
use payonce_core::state::Status;
use payonce_ledger::refunds::{
    PROPOSAL_KEY_PREFIX, PROPOSAL_TTL, PROPOSALS_OPEN_MAX, RefundTotals,
};
use payonce_ledger::{
    Cancel, Declined, LedgerError, LimitError, NewOperation, Operation, Paid, Recorded,
    SharedLedger,
};

fn totals(payment_minor: i64, refunded: i64, in_flight: i64, count: i64) -> RefundTotals {
    RefundTotals {
        payment_minor,
        refunded_minor: refunded,
        in_flight_minor: in_flight,
        refund_count: count,
    }
}

async fn rows(ledger: &SharedLedger, payment: &Operation) -> Vec<Operation> {
    ledger
        .refunds_of(&tenant(), &payment.id, 100)
        .await
        .unwrap()
}

#[tokio::test]
async fn refunds_never_sum_past_the_payment_and_released_ones_free_their_money() {
    for_each_store(|ledger| async move {
        let payment = succeeded_payment(&ledger, "INV-R1", 1_000, at(T0)).await;
        let a = create_refund(&ledger, &payment, "refund:a", 600, at(T0)).await.unwrap();
        assert!(a.inserted);
        let a = a.operation;
        assert_eq!((a.status, a.details.kind()), (Status::AwaitingApproval, OperationKind::Refund));
        let of = a.details.refund_of().unwrap();
        assert_eq!(of.payment_operation(), &payment.id);
        assert_eq!(of.payment_reference(), "pi_INV-R1");
        assert_eq!(of.reason(), RefundReason::RequestedByCustomer);
        assert_eq!(a.details, refund_details(&payment, 600, RefundReason::RequestedByCustomer));
        assert_eq!(a.details_hash, a.details.hash());
        let events = ledger.events_unscoped(&a.id).await.unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!((events[0].event.as_str(), events[0].to_status.as_str()), ("create", "awaiting_approval"));

        // The same business key and details: the same refund, however often asked.
        let again = create_refund(&ledger, &payment, "refund:a", 600, at(T0 + 1)).await.unwrap();
        assert_eq!((again.inserted, &again.operation.id), (false, &a.id));
        let changed = create_refund(&ledger, &payment, "refund:a", 601, at(T0)).await;
        assert!(matches!(&changed, Err(LedgerError::Conflict { existing }) if existing == &a.id), "{changed:?}");

        // 600 held: 401 does not fit, 400 does, then nothing does.
        let over = create_refund(&ledger, &payment, "refund:b", 401, at(T0)).await;
        assert!(
            matches!(&over, Err(LedgerError::OverRefund { payment: p, requested_minor: 401, refundable_minor: 400 }) if p == &payment.id),
            "{over:?}"
        );
        let b = create_refund(&ledger, &payment, "refund:b", 400, at(T0 + 1)).await.unwrap().operation;
        let one = create_refund(&ledger, &payment, "refund:c", 1, at(T0)).await;
        assert!(matches!(one, Err(LedgerError::OverRefund { refundable_minor: 0, .. })), "{one:?}");
        assert_eq!(ledger.refund_totals(&tenant(), &payment.id).await.unwrap(), totals(1_000, 0, 1_000, 2));

        // A cancelled refund frees its money; a succeeded one keeps it; a failed one frees it.
        let cancelled = ledger.cancel(&tenant(), &Cancel { id: &a.id, actor: "on_call:test" }, at(T0)).await.unwrap();
        assert_eq!(cancelled.status, Status::Cancelled);
        assert_eq!(ledger.refund_totals(&tenant(), &payment.id).await.unwrap(), totals(1_000, 0, 400, 2));
        let done = settle_refund(&ledger, &b, Recorded::Succeeded(Paid {
            reference: "re_b".into(),
            result: serde_json::json!({"id": "re_b", "status": "succeeded"}),
        })).await;
        assert_eq!(done.status, Status::Succeeded);
        let c = create_refund(&ledger, &payment, "refund:c", 600, at(T0 + 2)).await.unwrap().operation;
        assert_eq!(ledger.refund_totals(&tenant(), &payment.id).await.unwrap(), totals(1_000, 400, 600, 3));
        let failed = settle_refund(&ledger, &c, Recorded::Failed(Declined {
            code: "insufficient_funds".into(),
            message: "the connected account cannot cover it".into(),
            reference: Some("re_c".into()),
        })).await;
        assert_eq!(failed.status, Status::Failed);
        let t = ledger.refund_totals(&tenant(), &payment.id).await.unwrap();
        assert_eq!((t, t.refundable_minor()), (totals(1_000, 400, 0, 3), 600));

        let listed: Vec<(OperationId, Status, i64)> = rows(&ledger, &payment).await.into_iter()
            .map(|r| (r.id, r.status, r.details.money().amount_minor())).collect();
        assert_eq!(listed, [
            (a.id.clone(), Status::Cancelled, 600),
            (b.id.clone(), Status::Succeeded, 400),
            (c.id.clone(), Status::Failed, 600),
        ]);
        assert!(matches!(
            ledger.refunds_of(&tenant(), &payment.id, 0).await,
            Err(LedgerError::Limit(LimitError::PageSize))
        ));
    })
    .await;
}

#[tokio::test]
async fn only_a_succeeded_payment_of_the_tenant_matching_its_record_is_refunded() {
    for_each_store(|ledger| async move {
        let payment = succeeded_payment(&ledger, "INV-R2", 1_000, at(T0)).await;
        let refund = create_refund(&ledger, &payment, "refund:r2", 100, at(T0))
            .await
            .unwrap()
            .operation;
        let new = |tenant: TenantId, key: &str, details| {
            NewOperation::keyed(
                &crate::support::key_secret(),
                tenant,
                BusinessKey::parse(key).unwrap(),
                details,
                "service:test".into(),
            )
        };
        let refused = |r: Result<_, LedgerError>| match r {
            Err(LedgerError::NotRefundable { why, .. }) => why,
            other => panic!("expected NotRefundable, got {other:?}"),
        };

        // A refund of a refund.
        let d = payonce_core::details::Details::refund(
            &payment.details,
            &refund.id,
            "pi_INV-R2",
            10,
            RefundReason::Duplicate,
        )
        .unwrap();
        let r = ledger
            .create_or_get(new(tenant(), "refund:of-refund", d), at(T0))
            .await;
        assert_eq!(refused(r), "only a payment can be refunded");

        // A payment that has not succeeded.
        let pending = support::ready_operation(&ledger, "INV-R2b", "pm_card_visa", at(T0)).await;
        let d = payonce_core::details::Details::refund(
            &pending.details,
            &pending.id,
            "pi_INV-R2b",
            10,
            RefundReason::Duplicate,
        )
        .unwrap();
        let r = ledger
            .create_or_get(new(tenant(), "refund:pending", d), at(T0))
            .await;
        assert_eq!(refused(r), "only a succeeded payment can be refunded");

        // A processor reference that is not the payment's.
        let d = payonce_core::details::Details::refund(
            &payment.details,
            &payment.id,
            "pi_forged",
            10,
            RefundReason::Duplicate,
        )
        .unwrap();
        let r = ledger
            .create_or_get(new(tenant(), "refund:forged", d), at(T0))
            .await;
        assert_eq!(
            refused(r),
            "the refund's details are not the payment's record"
        );

        // Another tenant's payment is not found, and its reads show nothing.
        let globex = TenantId::parse("globex").unwrap();
        let d = refund_details(&payment, 10, RefundReason::Duplicate);
        let r = ledger
            .create_or_get(new(globex.clone(), "refund:globex", d), at(T0))
            .await;
        assert!(matches!(r, Err(LedgerError::NotFound)), "{r:?}");
        assert!(matches!(
            ledger.refund_totals(&globex, &payment.id).await,
            Err(LedgerError::NotFound)
        ));
        assert_eq!(
            ledger
                .refunds_of(&globex, &payment.id, 10)
                .await
                .unwrap()
                .len(),
            0
        );

        // Refused callers changed nothing.
        assert_eq!(rows(&ledger, &payment).await.len(), 1);
        assert_eq!(
            ledger.refund_totals(&tenant(), &payment.id).await.unwrap(),
            totals(1_000, 0, 100, 1)
        );
        assert_eq!(
            ledger
                .refunds_of(&tenant(), &pending.id, 10)
                .await
                .unwrap()
                .len(),
            0
        );
    })
    .await;
}

/// `n` callers, spread over `ledgers`, each ask for `amount` of `payment` under its own key.
/// Returns how many were created; every other one must be refused as an over-refund.
async fn race(ledgers: &[SharedLedger], payment: &Operation, amount: i64, n: usize) -> usize {
    let mut tasks = Vec::new();
    for i in 0..n {
        let ledger = ledgers[i % ledgers.len()].clone();
        let payment = payment.clone();
        tasks.push(tokio::spawn(async move {
            create_refund(
                &ledger,
                &payment,
                &format!("refund:race:{amount}:{i}"),
                amount,
                at(T0),
            )
            .await
        }));
    }
    let mut created = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(c) => {
                assert!(c.inserted);
                created += 1;
            }
            Err(LedgerError::OverRefund {
                requested_minor, ..
            }) => assert_eq!(requested_minor, amount),
            Err(other) => panic!("a racing refund got {other:?}"),
        }
    }
    created
}

async fn assert_races(ledgers: &[SharedLedger]) {
    let ledger = &ledgers[0];
    // 8 callers for 300 of 1000: exactly three fit.
    let payment = succeeded_payment(ledger, "INV-RACE1", 1_000, at(T0)).await;
    assert_eq!(race(ledgers, &payment, 300, 8).await, 3);
    let refunds = rows(ledger, &payment).await;
    assert_eq!(refunds.len(), 3);
    assert_eq!(
        refunds
            .iter()
            .map(|r| r.details.money().amount_minor())
            .sum::<i64>(),
        900
    );
    // 8 callers for the whole of another payment: exactly one.
    let payment = succeeded_payment(ledger, "INV-RACE2", 1_000, at(T0)).await;
    assert_eq!(race(ledgers, &payment, 1_000, 8).await, 1);
    assert_eq!(
        ledger.refund_totals(&tenant(), &payment.id).await.unwrap(),
        totals(1_000, 0, 1_000, 1)
    );
}

/// An assistant's proposals (business key [`PROPOSAL_KEY_PREFIX`]) on both stores: at most
/// [`PROPOSALS_OPEN_MAX`] await approval per payment (asking again for an open one answers it; a
/// service refund is not counted), and once left unapproved for [`PROPOSAL_TTL`] the next refund
/// created for the payment cancels them first, in the audit trail: they hold nothing.
#[tokio::test]
async fn proposals_are_bounded_per_payment_and_expire_on_both_stores() {
    for_each_store(|ledger| async move {
        let payment = succeeded_payment(&ledger, "INV-RP1", 1_000, at(T0)).await;
        let key = |amount: i64| format!("{PROPOSAL_KEY_PREFIX}{}:{amount}", payment.id);
        let open_max = i64::from(PROPOSALS_OPEN_MAX);
        for amount in 1..=open_max {
            let made = create_refund(&ledger, &payment, &key(amount), amount, at(T0)).await;
            assert!(made.unwrap().inserted, "proposal {amount}");
        }
        let over = create_refund(&ledger, &payment, &key(open_max + 1), 1, at(T0)).await;
        assert!(
            matches!(over, Err(LedgerError::Limit(LimitError::RefundProposals))),
            "{over:?}"
        );
        let again = create_refund(&ledger, &payment, &key(1), 1, at(T0 + 1)).await.unwrap();
        assert!(!again.inserted, "an open proposal answers again");
        let held: i64 = (1..=open_max).sum();
        let service = create_refund(&ledger, &payment, "refund:svc1", 500, at(T0)).await;
        assert!(service.unwrap().inserted, "a service refund is not a proposal");

        // One millisecond short of the period the proposals still hold their money.
        let ttl_ms = i64::try_from(PROPOSAL_TTL.as_millis()).unwrap();
        let short = create_refund(&ledger, &payment, "refund:svc2", 500, at(T0 + ttl_ms - 1)).await;
        assert!(
            matches!(short, Err(LedgerError::OverRefund { refundable_minor, .. }) if refundable_minor == 500 - held),
            "{short:?}"
        );
        // At the period they are cancelled before the guard sums: the rest of the payment fits.
        let rest = create_refund(&ledger, &payment, "refund:svc2", 500, at(T0 + ttl_ms)).await;
        assert!(rest.unwrap().inserted);
        assert_eq!(
            ledger.refund_totals(&tenant(), &payment.id).await.unwrap(),
            totals(1_000, 0, 1_000, open_max + 2)
        );
        for proposal in rows(&ledger, &payment)
            .await
            .iter()
            .filter(|r| r.business_key.as_str().starts_with(PROPOSAL_KEY_PREFIX))
        {
            assert_eq!(proposal.status, Status::Cancelled, "{}", proposal.id);
            let last = ledger.events_unscoped(&proposal.id).await.unwrap().pop().unwrap();
            assert_eq!(last.event, "cancel");
            assert!(last.actor.contains("proposal_expiry"), "{last:?}");
        }
    })
    .await;
}

#[tokio::test]
async fn postgres_eight_callers_racing_for_the_last_money_create_exactly_what_fits() {
    let (ledger, _db) = support::postgres_ledger().await;
    assert_races(&[ledger]).await;
}

#[tokio::test]
async fn sqlite_eight_callers_on_three_connections_create_exactly_what_fits() {
    let file = support::SqliteFile::new("refund-race");
    let url = file.url.clone();
    let mut ledgers = Vec::new();
    for _ in 0..3 {
        ledgers.push(payonce_ledger::connect(&url, 1).await.unwrap());
    }
    assert_races(&ledgers).await;
    drop(ledgers);
    // Migration 0008 rebuilt `operations`: every index and trigger 0001-0007 made is back (less the
    // three console indexes migration 0010 moved to `operation_search`, plus its two triggers, plus
    // the insert trigger of a row created approved, 0025; the claim's index by lane, 0027, in place
    // of the ready index).
    use sqlx::Connection;
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let mut names: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE tbl_name = 'operations' AND type IN ('index', 'trigger') \
         AND name NOT LIKE 'sqlite_autoindex%' ORDER BY name",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    names.sort();
    assert_eq!(
        names,
        [
            "operations_attention_idx",
            "operations_audit_insert",
            "operations_audit_insert_approved",
            "operations_audit_update",
            "operations_console_reference_idx",
            "operations_console_status_idx",
            "operations_due_idx",
            "operations_lanes_idx",
            "operations_lease_idx",
            "operations_refund_of_idx",
            "operations_search_columns_fixed",
            "operations_search_insert",
        ]
    );
    conn.close().await.unwrap();
}

/// A raw refund row with `kind`, `refund_of`, reference and reason as given: what the CHECKs see
/// (its idempotency key derived from its id, as every row's is).
const RAW_INSERT: &str = "INSERT INTO operations (id, tenant_id, business_key, kind, amount_minor, currency, \
     customer, payment_method, invoice, details_hash, status, attempt, idempotency_key, available_at, \
     created_at, updated_at, refund_of, refund_payment_reference, refund_reason) \
     VALUES ($1, 'acme', $2, $3, 1, 'usd', 'cus_test', 'pm_card_visa', 'INV-RAW', $4, 'awaiting_approval', 0, \
     'payonce-' || $1, 1, 1, 1, $5, $6, $7)";

/// A raw row's `kind`, `refund_of`, `refund_payment_reference`, `refund_reason`.
type Shape = (
    &'static str,
    Option<String>,
    Option<&'static str>,
    Option<&'static str>,
);

/// What the stores' CHECKs refuse, whatever code writes the row.
fn shapes(payment: &str) -> Vec<Shape> {
    let p = Some(payment.to_string());
    vec![
        ("refund", None, Some("pi_1"), Some("duplicate")),
        ("refund", p.clone(), None, Some("duplicate")),
        ("refund", p.clone(), Some("pi_1"), None),
        (
            "refund",
            p.clone(),
            Some("pi_1"),
            Some("expired_uncaptured_charge"),
        ),
        ("refund", p.clone(), Some(""), Some("duplicate")),
        ("payment", p.clone(), Some("pi_1"), Some("duplicate")),
        ("payment", None, None, Some("duplicate")),
        ("transfer", None, None, None),
    ]
}

#[tokio::test]
async fn both_stores_check_the_refund_shape_whatever_writes_the_row() {
    use sqlx::Connection;
    let (ledger, url) = support::postgres_ledger().await;
    let payment = succeeded_payment(&ledger, "INV-SHAPE", 1_000, at(T0)).await;
    let file = support::SqliteFile::new("refund-shape");
    let sqlite_url = file.url.clone();
    let sqlite = payonce_ledger::connect(&sqlite_url, 1).await.unwrap();
    let sqlite_payment = succeeded_payment(&sqlite, "INV-SHAPE", 1_000, at(T0)).await;
    drop(sqlite);
    let mut pg = sqlx::PgConnection::connect(&url).await.unwrap();
    let mut lite = sqlx::SqliteConnection::connect(&format!("{sqlite_url}?mode=rw"))
        .await
        .unwrap();
    sqlx::query("PRAGMA foreign_keys = ON")
        .execute(&mut lite)
        .await
        .unwrap();
    let hash = "a".repeat(64);
    for (i, (kind, of, reference, reason)) in shapes(payment.id.as_str()).into_iter().enumerate() {
        let id = OperationId::generate();
        let r = sqlx::query(RAW_INSERT)
            .bind(id.as_str())
            .bind(format!("raw:{i}"))
            .bind(kind)
            .bind(&hash)
            .bind(of)
            .bind(reference)
            .bind(reason)
            .execute(&mut pg)
            .await;
        assert!(r.is_err(), "postgres took shape {i}");
    }
    for (i, (kind, of, reference, reason)) in
        shapes(sqlite_payment.id.as_str()).into_iter().enumerate()
    {
        let id = OperationId::generate();
        let r = sqlx::query(RAW_INSERT)
            .bind(id.as_str())
            .bind(format!("raw:{i}"))
            .bind(kind)
            .bind(&hash)
            .bind(of)
            .bind(reference)
            .bind(reason)
            .execute(&mut lite)
            .await;
        assert!(r.is_err(), "sqlite took shape {i}");
    }
    // A refund of an operation that does not exist: the foreign key refuses it on both.
    let ghost = Some(OperationId::generate().as_str().to_string());
    let r = sqlx::query(RAW_INSERT)
        .bind(OperationId::generate().as_str())
        .bind("raw:ghost")
        .bind("refund")
        .bind(&hash)
        .bind(ghost.clone())
        .bind("pi_1")
        .bind("duplicate")
        .execute(&mut pg)
        .await;
    assert!(r.is_err(), "postgres took a refund of nothing");
    let r = sqlx::query(RAW_INSERT)
        .bind(OperationId::generate().as_str())
        .bind("raw:ghost")
        .bind("refund")
        .bind(&hash)
        .bind(ghost)
        .bind("pi_1")
        .bind("duplicate")
        .execute(&mut lite)
        .await;
    assert!(r.is_err(), "sqlite took a refund of nothing");
    // The well-formed shape is taken by both (the CHECKs are not refusing everything).
    sqlx::query(RAW_INSERT)
        .bind(OperationId::generate().as_str())
        .bind("raw:ok")
        .bind("refund")
        .bind(&hash)
        .bind(Some(payment.id.as_str()))
        .bind("pi_1")
        .bind("duplicate")
        .execute(&mut pg)
        .await
        .unwrap();
    sqlx::query(RAW_INSERT)
        .bind(OperationId::generate().as_str())
        .bind("raw:ok")
        .bind("refund")
        .bind(&hash)
        .bind(Some(sqlite_payment.id.as_str()))
        .bind("pi_1")
        .bind("duplicate")
        .execute(&mut lite)
        .await
        .unwrap();
    pg.close().await.unwrap();
    lite.close().await.unwrap();
}

#[tokio::test]
async fn sqlite_migration_0008_keeps_the_rows_hashes_and_trail_of_an_existing_ledger() {
    use sqlx::Connection;
    use std::str::FromStr;
    let file = support::SqliteFile::new("0008");
    let url = file.url.clone();
    let id = OperationId::generate();
    let details = support::details("INV-M8", 2048, "pm_card_visa");
    let hash = details.hash();
    {
        let options = sqlx::sqlite::SqliteConnectOptions::from_str(&url)
            .unwrap()
            .create_if_missing(true);
        let mut conn = sqlx::SqliteConnection::connect_with(&options)
            .await
            .unwrap();
        // A ledger as 0001-0007 left it (foreign keys off while rebuilding, as the migrator runs them).
        for sql in [
            include_str!("../../../migrations/sqlite/0001_ledger.sql"),
            include_str!("../../../migrations/sqlite/0002_customer_verification.sql"),
            include_str!("../../../migrations/sqlite/0003_evidence.sql"),
            include_str!("../../../migrations/sqlite/0004_api_key_lifecycle.sql"),
            include_str!("../../../migrations/sqlite/0005_tool_call_keys.sql"),
            include_str!("../../../migrations/sqlite/0006_operation_id_check.sql"),
            include_str!("../../../migrations/sqlite/0007_console.sql"),
        ] {
            sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
        }
        sqlx::raw_sql(
            "CREATE TABLE payonce_migrations (version BIGINT PRIMARY KEY, name TEXT NOT NULL, \
             applied_at BIGINT NOT NULL); INSERT INTO payonce_migrations VALUES (1, 'ledger', 0), \
             (2, 'customer_verification', 0), (3, 'evidence', 0), (4, 'api_key_lifecycle', 0), \
             (5, 'tool_call_keys', 0), (6, 'operation_id_check', 0), (7, 'console', 0)",
        )
        .execute(&mut conn)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO operations (id, tenant_id, business_key, kind, amount_minor, currency, customer, \
             payment_method, invoice, description, details_hash, status, attempt, idempotency_key, external_ref, \
             available_at, approved_hash, approved_by, approval_expires_at, last_event, last_actor, created_at, \
             updated_at) VALUES ($1, 'acme', 'invoice:INV-M8:pay', 'payment', 2048, 'usd', 'cus_test', \
             'pm_card_visa', 'INV-M8', 'Invoice INV-M8', $2, 'succeeded', 1, $3, 'pi_m8', 1, $2, \
             'customer:cus_test', 2, 'create', 'service:test', 1, 1)",
        )
        .bind(id.as_str())
        .bind(hash.as_str())
        .bind(format!("payonce-{}", id.as_str()))
        .execute(&mut conn)
        .await
        .unwrap();
        conn.close().await.unwrap();
    }
    let ledger = payonce_ledger::connect(&url, 1).await.unwrap();
    let payment = ledger.get_unscoped(&id).await.unwrap();
    assert_eq!(
        payment.details, details,
        "the row decodes as the payment it was"
    );
    assert_eq!(
        payment.details_hash,
        payment.details.hash(),
        "its stored hash still holds"
    );
    assert_eq!(
        ledger.events_unscoped(&id).await.unwrap().len(),
        1,
        "the audit trail survives"
    );
    // The guard works on the migrated table, and the recreated trigger logs the refund's creation.
    let refund = create_refund(&ledger, &payment, "refund:m8", 2048, at(T0))
        .await
        .unwrap();
    assert!(refund.inserted);
    assert_eq!(
        ledger
            .events_unscoped(&refund.operation.id)
            .await
            .unwrap()
            .len(),
        1
    );
    // The search directory (migration `search_directory`) was filled from the rows already there,
    // and its trigger adds new ones: the console's page finds the old payment and the new refund.
    let page = ledger
        .console()
        .page(
            &TenantId::parse("acme").unwrap(),
            &payonce_ledger::console::OperationQuery {
                limit: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let mut ids: Vec<&str> = page.iter().map(|o| o.id.as_str()).collect();
    ids.sort_unstable();
    let mut expected = vec![id.as_str(), refund.operation.id.as_str()];
    expected.sort_unstable();
    assert_eq!(ids, expected);
    let by_invoice = ledger
        .console()
        .page(
            &TenantId::parse("acme").unwrap(),
            &payonce_ledger::console::OperationQuery {
                search: Some("INV-M8".into()),
                limit: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        by_invoice.len(),
        2,
        "the payment and its refund name INV-M8"
    );
    // And the business key the directory took from the old row (migration 0011).
    let by_key = ledger
        .console()
        .page(
            &TenantId::parse("acme").unwrap(),
            &payonce_ledger::console::OperationQuery {
                search: Some("invoice:INV-M8:pay".into()),
                limit: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(by_key.iter().map(|o| &o.id).collect::<Vec<_>>(), [&id]);
    let over = create_refund(&ledger, &payment, "refund:m8:b", 1, at(T0)).await;
    assert!(
        matches!(
            over,
            Err(LedgerError::OverRefund {
                refundable_minor: 0,
                ..
            })
        ),
        "{over:?}"
    );
    drop(ledger);
}

//! A tenant's retention period for its operations, on both stores: what a prune past the period
//! deletes (settled operations with every row of theirs, a payment only after its refunds) and what
//! it never deletes (work still open, recent operations, another tenant's without a period).

use super::{T0, at, for_each_store};
use crate::support::refunds::{create_refund, settle_refund, succeeded_payment};
use crate::support::{self, details, ready_operation, rows, tenant};
use payonce_core::id::{BusinessKey, TenantId};
use payonce_core::state::Status;
use payonce_ledger::profiles::OperationCard;
use payonce_ledger::retention::{OPERATION_RETENTION_DAYS_MIN, Pruned, Retention};
use payonce_ledger::{
    LedgerError, LimitError, NewOperation, Operation, Paid, Recorded, SharedLedger,
};

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

/// Issue 53, item 9: `payonce prune --help` says what a prune deletes, operations included (for a
/// tenant that set a period), not "never an operation".
#[test]
fn prune_help_says_a_tenants_period_prunes_its_operations() {
    let out = std::process::Command::new(support::payonce_bin())
        .args(["prune", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(!help.contains("never an operation"), "{help}");
    assert!(
        help.contains("tenant set-retention") && help.contains("operations past it"),
        "{help}"
    );
}

/// A store of the suite with a raw connection beside it, for the rows and tables no ledger method
/// writes: a table a later migration might add, a row that refuses to go.
enum Raw {
    Postgres(sqlx::PgPool),
    Sqlite(sqlx::SqlitePool),
}

impl Raw {
    async fn run(&self, postgres: &'static str, sqlite: &'static str) {
        match self {
            Raw::Postgres(pool) => sqlx::raw_sql(postgres).execute(pool).await.map(drop),
            Raw::Sqlite(pool) => sqlx::raw_sql(sqlite).execute(pool).await.map(drop),
        }
        .unwrap();
    }

    /// Runs one statement, the same on both stores, with `$1` bound to `value`.
    async fn run_with(&self, sql: &'static str, value: &str) {
        match self {
            Raw::Postgres(pool) => sqlx::query(sql).bind(value).execute(pool).await.map(drop),
            Raw::Sqlite(pool) => sqlx::query(sql).bind(value).execute(pool).await.map(drop),
        }
        .unwrap();
    }

    async fn count(&self, table: &'static str) -> i64 {
        let sql = match table {
            "extra_claims" => "SELECT count(*) FROM extra_claims",
            "extra_marks" => "SELECT count(*) FROM extra_marks",
            "extra_notes" => "SELECT count(*) FROM extra_notes",
            "held_rows" => "SELECT count(*) FROM held_rows",
            other => panic!("no count for {other}"),
        };
        match self {
            Raw::Postgres(pool) => sqlx::query_scalar(sql).fetch_one(pool).await.unwrap(),
            Raw::Sqlite(pool) => sqlx::query_scalar(sql).fetch_one(pool).await.unwrap(),
        }
    }
}

/// Both stores (a Postgres database and a SQLite file of the test's own), each with a raw
/// connection to the same database; the database and the file go when the test ends.
async fn stores_with_raw(
    what: &str,
) -> (
    Vec<(SharedLedger, Raw)>,
    support::postgres::TestDatabase,
    support::SqliteFile,
) {
    let (postgres, database) = support::postgres_ledger().await;
    let pg = sqlx::PgPool::connect(database.url()).await.unwrap();
    let file = support::SqliteFile::new(what);
    let sqlite = payonce_ledger::connect(&file.url, 1).await.unwrap();
    let lite = sqlx::SqlitePool::connect(&file.url).await.unwrap();
    (
        vec![(postgres, Raw::Postgres(pg)), (sqlite, Raw::Sqlite(lite))],
        database,
        file,
    )
}

/// An operation of `tenant` created (and never approved) at `now`: prunable once old.
async fn proposal(ledger: &SharedLedger, tenant: &TenantId, invoice: &str, now: i64) -> Operation {
    rows::created(
        ledger,
        tenant,
        invoice,
        details(invoice, 1_000, "pm_card_visa"),
        at(now),
    )
    .await
    .operation
}

async fn set_periods(ledger: &SharedLedger, tenants: &[&TenantId]) {
    for t in tenants {
        ledger
            .set_operation_retention(t, Some(OPERATION_RETENTION_DAYS_MIN), at(T0))
            .await
            .unwrap();
    }
}

/// Sets the shortest period for `tenants` and prunes 600 days on: every settled row is past it.
async fn prune_past_periods(ledger: &SharedLedger, tenants: &[&TenantId]) -> Pruned {
    set_periods(ledger, tenants).await;
    ledger
        .prune(&Retention::default(), at(T0 + 600 * DAY))
        .await
        .unwrap_or_else(|e| panic!("prune on {}: {e}", ledger.store()))
}

/// Issue 53, item 4: a payment whose confirmation page showed a card (`operation_cards` refers to
/// it) is pruned with its card, and the next tenant's operations go in the same prune.
#[tokio::test]
async fn a_payment_whose_page_showed_a_card_is_pruned_with_it_and_so_is_the_next_tenant() {
    for_each_store(|ledger| async move {
        let zeta = TenantId::parse("zeta").unwrap();
        let paid = succeeded_payment(&ledger, "INV-CARD1", 1_000, at(T0)).await;
        ledger
            .profiles()
            .keep_card(&OperationCard {
                operation: paid.id.clone(),
                payment_method: "pm_card_visa".into(),
                brand: "visa".into(),
                last4: "4242".into(),
                fetched_at: at(T0),
            })
            .await
            .unwrap();
        let theirs = proposal(&ledger, &zeta, "INV-CARD2", T0).await;
        let pruned = prune_past_periods(&ledger, &[&tenant(), &zeta]).await;
        assert_eq!(
            pruned,
            Pruned {
                operations: 2,
                ..Pruned::default()
            },
            "{}",
            ledger.store()
        );
        assert!(ledger.profiles().card(&paid.id).await.unwrap().is_none());
        assert!(matches!(
            ledger.get(&tenant(), &paid.id).await,
            Err(LedgerError::NotFound)
        ));
        assert!(matches!(
            ledger.get(&zeta, &theirs.id).await,
            Err(LedgerError::NotFound)
        ));
    })
    .await;
}

/// Issue 53, item 4: the rows of a table that refers to operations, directly or through another
/// table, or names one in an `operation_id` column without a key, go with the operation though no
/// code names the table (the prune reads the catalog); a tenant whose rows refuse to go is
/// counted, and the next tenant is pruned.
#[tokio::test]
async fn a_table_the_prune_was_never_told_of_is_pruned_and_a_stuck_tenant_holds_no_other_back() {
    let (stores, _database, _file) = stores_with_raw("retention-owned").await;
    for (ledger, raw) in stores {
        let zeta = TenantId::parse("zeta").unwrap();
        raw.run(
            "CREATE TABLE extra_claims (id TEXT PRIMARY KEY, \
                 operation_id TEXT NOT NULL REFERENCES operations (id)); \
             CREATE TABLE extra_marks (claim_id TEXT NOT NULL REFERENCES extra_claims (id)); \
             CREATE TABLE extra_notes (operation_id TEXT NOT NULL, note TEXT); \
             CREATE TABLE held_rows (operation_id TEXT NOT NULL REFERENCES operations (id)); \
             CREATE FUNCTION refuse_delete() RETURNS trigger LANGUAGE plpgsql AS \
                 $$ BEGIN RAISE EXCEPTION 'held by the test'; END $$; \
             CREATE TRIGGER held_rows_refuse BEFORE DELETE ON held_rows FOR EACH ROW \
                 EXECUTE FUNCTION refuse_delete();",
            "CREATE TABLE extra_claims (id TEXT PRIMARY KEY, \
                 operation_id TEXT NOT NULL REFERENCES operations (id)); \
             CREATE TABLE extra_marks (claim_id TEXT NOT NULL REFERENCES extra_claims (id)); \
             CREATE TABLE extra_notes (operation_id TEXT NOT NULL, note TEXT); \
             CREATE TABLE held_rows (operation_id TEXT NOT NULL REFERENCES operations (id)); \
             CREATE TRIGGER held_rows_refuse BEFORE DELETE ON held_rows \
                 BEGIN SELECT RAISE(ABORT, 'held by the test'); END;",
        )
        .await;
        // `acme` (pruned first) has a row that refuses to go; `zeta` a claim and a mark on it.
        let stuck = proposal(&ledger, &tenant(), "INV-OWN1", T0).await;
        let theirs = proposal(&ledger, &zeta, "INV-OWN2", T0).await;
        for (sql, id) in owned_rows_sql() {
            let id = if id { &theirs.id } else { &stuck.id };
            raw.run_with(sql, id.as_str()).await;
        }
        let pruned = prune_past_periods(&ledger, &[&tenant(), &zeta]).await;
        assert_eq!(
            pruned,
            Pruned {
                operations: 1,
                operation_tenants_failed: 1,
                ..Pruned::default()
            },
            "{}",
            ledger.store()
        );
        assert!(matches!(
            ledger.get(&zeta, &theirs.id).await,
            Err(LedgerError::NotFound)
        ));
        assert_eq!(raw.count("extra_claims").await, 0, "{}", ledger.store());
        assert_eq!(raw.count("extra_marks").await, 0, "{}", ledger.store());
        assert_eq!(raw.count("extra_notes").await, 0, "{}", ledger.store());
        // The stuck tenant's operation is whole, its held row with it.
        assert_eq!(
            ledger.get(&tenant(), &stuck.id).await.unwrap().status,
            Status::AwaitingApproval
        );
        assert_eq!(raw.count("held_rows").await, 1);
    }
}

/// The raw rows of [`a_table_the_prune_was_never_told_of_is_pruned_and_a_stuck_tenant_holds_no_other_back`]:
/// each statement binds `zeta`'s operation (`true`) or the stuck one.
fn owned_rows_sql() -> [(&'static str, bool); 4] {
    [
        (
            "INSERT INTO extra_claims (id, operation_id) VALUES ('claim-1', $1)",
            true,
        ),
        (
            "INSERT INTO extra_marks (claim_id) SELECT id FROM extra_claims WHERE operation_id = $1",
            true,
        ),
        (
            "INSERT INTO extra_notes (operation_id, note) VALUES ($1, 'no key')",
            true,
        ),
        ("INSERT INTO held_rows (operation_id) VALUES ($1)", false),
    ]
}

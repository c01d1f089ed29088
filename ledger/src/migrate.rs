//! A small, explicit migrator: numbered SQL files per store, embedded at build time, applied in
//! order, each in its own transaction, recorded in `payonce_migrations`. (sqlx's `migrate!` would pull
//! in the macro crates; this is all we need.)

use super::LedgerError;
use payonce_core::clock::Timestamp;
use sqlx::{
    ColumnIndex, Connection, Database, Decode, Encode, Executor, IntoArguments, Postgres, Row,
    Sqlite, Type,
};

/// One migration: version, name, SQL.
pub(crate) type Migration = (i64, &'static str, &'static str);

/// Postgres migrations, in order.
pub(crate) const POSTGRES: &[Migration] = &[
    (
        1,
        "ledger",
        include_str!("../../migrations/postgres/0001_ledger.sql"),
    ),
    (
        2,
        "customer_verification",
        include_str!("../../migrations/postgres/0002_customer_verification.sql"),
    ),
    (
        3,
        "evidence",
        include_str!("../../migrations/postgres/0003_evidence.sql"),
    ),
    (
        4,
        "api_key_lifecycle",
        include_str!("../../migrations/postgres/0004_api_key_lifecycle.sql"),
    ),
    (
        5,
        "tool_call_keys",
        include_str!("../../migrations/postgres/0005_tool_call_keys.sql"),
    ),
    (
        7,
        "console",
        include_str!("../../migrations/postgres/0007_console.sql"),
    ),
    (
        8,
        "refunds",
        include_str!("../../migrations/postgres/0008_refunds.sql"),
    ),
    // Postgres only: the audit trail's foreign key, a lock per event on the hot path (issue 16).
    (
        9,
        "hot_path",
        include_str!("../../migrations/postgres/0009_hot_path.sql"),
    ),
    // Postgres only: one audit INSERT per statement, and no index on `updated_at` (issue 16).
    (
        10,
        "statement_audit",
        include_str!("../../migrations/postgres/0010_statement_audit.sql"),
    ),
    // The audit trail of a claim that also records the submission start (issue 16).
    (
        11,
        "claim_records_submission",
        include_str!("../../migrations/postgres/0011_claim_records_submission.sql"),
    ),
    // Fewer index entries per status change (issue 16).
    (
        12,
        "lean_indexes",
        include_str!("../../migrations/postgres/0012_lean_indexes.sql"),
    ),
    // The console's write-once search directory (issue 16).
    (
        13,
        "search_directory",
        include_str!("../../migrations/postgres/0013_search_directory.sql"),
    ),
    // Keys that repeated another: the derived idempotency key, the events' id (issue 16).
    (
        14,
        "derived_keys",
        include_str!("../../migrations/postgres/0014_derived_keys.sql"),
    ),
    // The business key's uniqueness moves to the search directory (issue 16).
    (
        15,
        "business_key_in_directory",
        include_str!("../../migrations/postgres/0015_business_key_in_directory.sql"),
    ),
    // The console's state index leaves out the worker's two states (issue 16).
    (
        16,
        "console_state_index",
        include_str!("../../migrations/postgres/0016_console_state_index.sql"),
    ),
    // A claim that records its submission logs one event (issue 16).
    (
        17,
        "one_event_per_claim",
        include_str!("../../migrations/postgres/0017_one_event_per_claim.sql"),
    ),
    // The processor key comes from the intention, not the row (issue 37).
    (
        18,
        "intention_keys",
        include_str!("../../migrations/postgres/0018_intention_keys.sql"),
    ),
    // The scan for money the ledger does not know about (issue 37).
    (
        19,
        "processor_scans",
        include_str!("../../migrations/postgres/0019_processor_scans.sql"),
    ),
    // The readiness probe's one row (issue 43).
    (
        20,
        "write_probe",
        include_str!("../../migrations/postgres/0020_write_probe.sql"),
    ),
    // Retention: checked webhooks are pruned by when they were checked (issue 43).
    (
        21,
        "retention",
        include_str!("../../migrations/postgres/0021_retention.sql"),
    ),
    // A repeated tool call id is one row (issue 43).
    (
        22,
        "tool_call_dedupe",
        include_str!("../../migrations/postgres/0022_tool_call_dedupe.sql"),
    ),
    // The merchant's public profile and the card, for the customer's pages (issue 38).
    (
        23,
        "customer_pages",
        include_str!("../../migrations/postgres/0023_customer_pages.sql"),
    ),
    // A tenant's retention period for its settled operations (issue 43).
    (
        25,
        "operation_retention",
        include_str!("../../migrations/postgres/0025_operation_retention.sql"),
    ),
    // The processor's reachability as the submitting processes found it, for every api's console.
    (
        26,
        "processor_reachability",
        include_str!("../../migrations/postgres/0026_processor_reachability.sql"),
    ),
    // A tenant's processor, and the processor each operation is bound to at creation.
    (
        28,
        "tenant_processor",
        include_str!("../../migrations/postgres/0028_tenant_processor.sql"),
    ),
    // Kept tool answers are pruned with the tool-call period; the index finds the oldest.
    (
        30,
        "tool_answer_retention",
        include_str!("../../migrations/postgres/0030_tool_answer_retention.sql"),
    ),
    // An operation created with its approval is inserted `ready`; its insert logs both events.
    (
        31,
        "created_approved",
        include_str!("../../migrations/postgres/0031_created_approved.sql"),
    ),
    // The key secret's fingerprint: a ledger is used with one secret for its life (issue 49).
    (
        32,
        "key_secret_fingerprint",
        include_str!("../../migrations/postgres/0032_key_secret_fingerprint.sql"),
    ),
    // Readiness's probe of a write that needs a new page (issue 50).
    (
        33,
        "write_probe_page",
        include_str!("../../migrations/postgres/0033_write_probe_page.sql"),
    ),
    // Priority classes, scheduled payments and tenant shares: fair claims (issue 51).
    (
        34,
        "fair_claims",
        include_str!("../../migrations/postgres/0034_fair_claims.sql"),
    ),
    // The attempts that count toward `attempt_max`: not an outage's claims (issue 53).
    (
        35,
        "not_sent_attempts",
        include_str!("../../migrations/postgres/0035_not_sent_attempts.sql"),
    ),
    (
        36,
        "room_for_updates",
        include_str!("../../migrations/postgres/0036_room_for_updates.sql"),
    ),
];
/// SQLite migrations, in order.
pub(crate) const SQLITE: &[Migration] = &[
    (
        1,
        "ledger",
        include_str!("../../migrations/sqlite/0001_ledger.sql"),
    ),
    (
        2,
        "customer_verification",
        include_str!("../../migrations/sqlite/0002_customer_verification.sql"),
    ),
    (
        3,
        "evidence",
        include_str!("../../migrations/sqlite/0003_evidence.sql"),
    ),
    (
        4,
        "api_key_lifecycle",
        include_str!("../../migrations/sqlite/0004_api_key_lifecycle.sql"),
    ),
    (
        5,
        "tool_call_keys",
        include_str!("../../migrations/sqlite/0005_tool_call_keys.sql"),
    ),
    // SQLite only: its operation-id CHECK matched to Postgres's (Postgres has nothing to change).
    (
        6,
        "operation_id_check",
        include_str!("../../migrations/sqlite/0006_operation_id_check.sql"),
    ),
    (
        7,
        "console",
        include_str!("../../migrations/sqlite/0007_console.sql"),
    ),
    (
        8,
        "refunds",
        include_str!("../../migrations/sqlite/0008_refunds.sql"),
    ),
    // The audit trail of a claim that also records the submission start (issue 16).
    (
        9,
        "claim_records_submission",
        include_str!("../../migrations/sqlite/0009_claim_records_submission.sql"),
    ),
    // The console's write-once search directory (issue 16).
    (
        10,
        "search_directory",
        include_str!("../../migrations/sqlite/0010_search_directory.sql"),
    ),
    // The business key joins the search directory (issue 16).
    (
        11,
        "business_key_in_directory",
        include_str!("../../migrations/sqlite/0011_business_key_in_directory.sql"),
    ),
    // A claim that records its submission logs one event (issue 16).
    (
        12,
        "one_event_per_claim",
        include_str!("../../migrations/sqlite/0012_one_event_per_claim.sql"),
    ),
    // The scan for money the ledger does not know about (issue 37).
    (
        13,
        "processor_scans",
        include_str!("../../migrations/sqlite/0013_processor_scans.sql"),
    ),
    // The readiness probe's one row (issue 43).
    (
        14,
        "write_probe",
        include_str!("../../migrations/sqlite/0014_write_probe.sql"),
    ),
    // Retention: checked webhooks are pruned by when they were checked (issue 43).
    (
        15,
        "retention",
        include_str!("../../migrations/sqlite/0015_retention.sql"),
    ),
    // A repeated tool call id is one row (issue 43).
    (
        16,
        "tool_call_dedupe",
        include_str!("../../migrations/sqlite/0016_tool_call_dedupe.sql"),
    ),
    // The merchant's public profile and the card, for the customer's pages (issue 38).
    (
        17,
        "customer_pages",
        include_str!("../../migrations/sqlite/0017_customer_pages.sql"),
    ),
    // A tenant's retention period for its settled operations (issue 43).
    (
        19,
        "operation_retention",
        include_str!("../../migrations/sqlite/0019_operation_retention.sql"),
    ),
    // The processor's reachability as the submitting processes found it, for every api's console.
    (
        20,
        "processor_reachability",
        include_str!("../../migrations/sqlite/0020_processor_reachability.sql"),
    ),
    // A tenant's processor, and the processor each operation is bound to at creation.
    (
        22,
        "tenant_processor",
        include_str!("../../migrations/sqlite/0022_tenant_processor.sql"),
    ),
    // Kept tool answers are pruned with the tool-call period; the index finds the oldest.
    (
        24,
        "tool_answer_retention",
        include_str!("../../migrations/sqlite/0024_tool_answer_retention.sql"),
    ),
    // An operation created with its approval is inserted `ready`; its insert logs both events.
    (
        25,
        "created_approved",
        include_str!("../../migrations/sqlite/0025_created_approved.sql"),
    ),
    (
        26,
        "key_secret_fingerprint",
        include_str!("../../migrations/sqlite/0026_key_secret_fingerprint.sql"),
    ),
    (
        27,
        "fair_claims",
        include_str!("../../migrations/sqlite/0027_fair_claims.sql"),
    ),
    (
        28,
        "not_sent_attempts",
        include_str!("../../migrations/sqlite/0028_not_sent_attempts.sql"),
    ),
];

const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS payonce_migrations (version BIGINT PRIMARY KEY, \
     name TEXT NOT NULL, applied_at BIGINT NOT NULL)";
const APPLIED: &str = "SELECT version FROM payonce_migrations ORDER BY version";
const RECORD: &str =
    "INSERT INTO payonce_migrations (version, name, applied_at) VALUES ($1, $2, $3)";
/// Postgres records each migration's step too (`schema::needs_of`): a binary older than a contract
/// step reads there that it may not run beside it. Added, not created with the table, because
/// ledgers migrated before steps were recorded already have the table.
const ADD_NEEDS: &str =
    "ALTER TABLE payonce_migrations ADD COLUMN IF NOT EXISTS needs_version BIGINT";
const RECORD_NEEDS: &str = "UPDATE payonce_migrations SET needs_version = $2 WHERE version = $1";

/// Applies the migrations in `migrations` that `payonce_migrations` does not list, each in its own
/// transaction, and returns how many ran.
async fn migrate_on<DB>(
    conn: &mut DB::Connection,
    migrations: &[Migration],
    now: Timestamp,
    record_needs: bool,
) -> Result<u32, LedgerError>
where
    DB: Database + sqlx::database::HasStatementCache,
    DB::Arguments: IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    &'static str: ColumnIndex<DB::Row>,
    for<'t> i64: Encode<'t, DB> + Decode<'t, DB> + Type<DB>,
    for<'t> &'t str: Encode<'t, DB> + Type<DB>,
{
    sqlx::raw_sql(CREATE_TABLE).execute(&mut *conn).await?;
    if record_needs {
        sqlx::raw_sql(ADD_NEEDS).execute(&mut *conn).await?;
    }
    let applied: Vec<i64> = sqlx::query(APPLIED)
        .persistent(super::statement::named_statements())
        .fetch_all(&mut *conn)
        .await?
        .iter()
        .map(|r| r.try_get::<i64, _>("version"))
        .collect::<Result<_, _>>()?;
    let mut ran = 0_u32;
    for (version, name, body) in migrations {
        if applied.contains(version) {
            continue;
        }
        let mut tx = conn.begin().await?;
        sqlx::raw_sql(*body).execute(&mut *tx).await?;
        sqlx::query(RECORD)
            .persistent(super::statement::named_statements())
            .bind(*version)
            .bind(*name)
            .bind(now.as_millis())
            .execute(&mut *tx)
            .await?;
        if record_needs && let Some(needs) = super::schema::needs_of(body) {
            sqlx::query(RECORD_NEEDS)
                .bind(*version)
                .bind(needs)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        ran += 1;
    }
    Ok(ran)
}

/// Applies pending Postgres migrations under an advisory lock, so concurrent starters agree.
pub(crate) async fn postgres(
    conn: &mut sqlx::PgConnection,
    now: Timestamp,
) -> Result<u32, LedgerError> {
    if super::statement::behind_transaction_pooler() {
        return postgres_in_one_transaction(conn, now).await;
    }
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(LOCK_KEY)
        .execute(&mut *conn)
        .await?;
    let result = migrate_on::<Postgres>(&mut *conn, POSTGRES, now, true).await;
    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(LOCK_KEY)
        .execute(&mut *conn)
        .await?;
    result
}

/// An arbitrary constant naming payonce's migration lock.
const LOCK_KEY: i64 = 0x7061_796f_6e63;

/// [`postgres`] behind a transaction pooler, without a direct connection: a session's advisory
/// lock would stay with whichever server connection took it, so the lock is the transaction's
/// (`pg_advisory_xact_lock`) and every migration runs inside that one transaction (each in a
/// savepoint), all applied or none.
async fn postgres_in_one_transaction(
    conn: &mut sqlx::PgConnection,
    now: Timestamp,
) -> Result<u32, LedgerError> {
    let mut tx = conn.begin_with(super::statement::POOLED_BEGIN).await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .persistent(false)
        .bind(LOCK_KEY)
        .execute(&mut *tx)
        .await?;
    let ran = migrate_on::<Postgres>(&mut *tx, POSTGRES, now, true).await?;
    tx.commit().await?;
    Ok(ran)
}

/// Applies pending SQLite migrations (one writer at a time by SQLite's own locking). Foreign keys
/// are off while they run: SQLite changes a constraint only by rebuilding the table, and dropping a
/// parent table with foreign keys on deletes (or orphans) its children's references
/// (sqlite.org/lang_altertable.html). The references are checked before anything is used.
pub(crate) async fn sqlite(
    conn: &mut sqlx::SqliteConnection,
    now: Timestamp,
) -> Result<u32, LedgerError> {
    sqlx::query("PRAGMA foreign_keys = OFF")
        .execute(&mut *conn)
        .await?;
    let ran = migrate_on::<Sqlite>(&mut *conn, SQLITE, now, false).await;
    let dangling = sqlx::query("PRAGMA foreign_key_check")
        .fetch_all(&mut *conn)
        .await;
    sqlx::query("PRAGMA foreign_keys = ON")
        .execute(&mut *conn)
        .await?;
    if !dangling?.is_empty() {
        return Err(LedgerError::Corrupt(
            "a migration left rows referencing missing operations".into(),
        ));
    }
    ran
}

//! Bulk loads through the real schema: one `INSERT … SELECT` over a generated series per chunk, so
//! the CHECK constraints, indexes and the audit trigger all run, at a fraction of the cost of
//! creating and approving rows one by one.
//!
//! Every loaded operation has the same details (one hash computed by the real code, so the
//! worker's server-side check passes) and its own id, business key and idempotency key.

use anyhow::Context;
use payonce_core::details::{Details, RawDetails};
use sqlx::{Connection, PgConnection, SqlitePool};

/// Rows per statement: bounds one transaction's size during the 1M-row loads.
pub const LOAD_CHUNK_ROWS: i64 = 100_000;

/// The columns every load sets, then the status-specific ones.
macro_rules! columns {
    () => {
        "INSERT INTO operations (id, tenant_id, business_key, kind, amount_minor, currency, customer, \
         payment_method, invoice, details_hash, approved_hash, approved_by, approval_expires_at, \
         idempotency_key, available_at, last_event, last_actor, created_at, updated_at, \
         status, attempt, lease_owner, lease_expires_at, first_submitted_at, first_submitted_attempt, \
         submit_count, external_ref, result) "
    };
}

/// The values every load shares, given the expression for series value `i` as 32 hex digits.
/// Approvals are valid for a day; stuck leases expired a minute ago (a crashed worker's).
macro_rules! common_values {
    ($hex:literal) => {
        common_values!($hex, "'bench'")
    };
    ($hex:literal, $tenant:literal) => {
        concat!(
            "'op_' || ",
            $hex,
            ", ",
            $tenant,
            ", 'bench:' || i, 'payment', 2048, 'usd', 'cus_bench', 'pm_card_visa', 'INV-BENCH', \
             $3, $3, 'bench', $4 + 86400000, 'payonce-op_' || ",
            $hex,
            ", $4, 'approve', 'bench', $4, $4, "
        )
    };
}

/// Approved, enqueued operations: what the worker claims.
const PG_READY: &str = concat!(
    columns!(),
    "SELECT ",
    common_values!("lpad(to_hex(i), 32, '0')"),
    "'ready', 0, NULL, NULL, NULL, NULL, 0, NULL, NULL FROM generate_series($1::bigint, $2::bigint) AS i"
);
/// Approved, enqueued bulk operations spread over `$5` tenants (`bench-0000`, `bench-0001`, …),
/// tenant by tenant in turn: the fair claims section's load.
const PG_READY_TENANTS: &str = concat!(
    columns!(),
    "SELECT ",
    common_values!(
        "lpad(to_hex(i), 32, '0')",
        "'bench-' || lpad((i % $5)::text, 4, '0')"
    ),
    "'ready', 0, NULL, NULL, NULL, NULL, 0, NULL, NULL FROM generate_series($1::bigint, $2::bigint) AS i"
);
/// Paid operations: the history a sweep must not pay for.
const PG_SUCCEEDED: &str = concat!(
    columns!(),
    "SELECT ",
    common_values!("lpad(to_hex(i), 32, '0')"),
    "'succeeded', 1, NULL, NULL, $4, 1, 1, 'pi_hist_' || i, '{\"status\":\"succeeded\"}' \
     FROM generate_series($1::bigint, $2::bigint) AS i"
);
/// Leases of a crashed worker that had recorded its submission: the stuck work a sweep resolves.
const PG_STUCK: &str = concat!(
    columns!(),
    "SELECT ",
    common_values!("lpad(to_hex(i), 32, '0')"),
    "'executing', 1, 'bench-crashed-worker', $4 - 60000, $4 - 90000, 1, 1, NULL, NULL \
     FROM generate_series($1::bigint, $2::bigint) AS i"
);
/// Puts resolved stuck rows back as they were, for another measured sweep. Not logged.
const PG_RESTUCK: &str = "UPDATE operations SET status = 'executing', lease_owner = 'bench-crashed-worker', \
     lease_expires_at = $2 - 60000, next_check_at = NULL, external_ref = NULL, result = NULL, \
     failure_code = NULL, failure_message = NULL, check_count = 0, last_event = NULL \
     WHERE id = ANY($1)";
/// The same ready load for SQLite (no generate_series; printf instead of to_hex).
const SQLITE_READY: &str = concat!(
    "WITH RECURSIVE s(i) AS (SELECT $1 UNION ALL SELECT i + 1 FROM s WHERE i < $2) ",
    columns!(),
    "SELECT ",
    common_values!("printf('%032x', i)"),
    "'ready', 0, NULL, NULL, NULL, NULL, 0, NULL, NULL FROM s"
);

/// What a loaded row is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Approved and enqueued.
    Ready,
    /// Paid long ago.
    Succeeded,
    /// Executing under an expired lease, with a submission recorded.
    Stuck,
    /// Approved and enqueued, spread over this many tenants.
    ReadyTenants(i64),
}

/// The details every loaded row carries (matching the statements' literals).
pub fn bench_details() -> Details {
    let raw = RawDetails {
        kind: "payment".into(),
        amount: 2048,
        currency: "usd".into(),
        customer: "cus_bench".into(),
        payment_method: "pm_card_visa".into(),
        invoice: "INV-BENCH".into(),
        destination: None,
        description: None,
        refund_of: None,
    };
    Details::parse(&raw).unwrap_or_else(|e| unreachable!("the bench details are valid: {e}"))
}

/// The id of series value `i` (as the statements build it).
pub fn operation_id(i: i64) -> String {
    format!("op_{i:032x}")
}

/// Loads series values `first..=last` as `kind` rows on Postgres, in chunks. Uses its own
/// connection: the ledger's connections carry a statement timeout meant for the hot path.
pub async fn postgres(
    url: &str,
    kind: Kind,
    first: i64,
    last: i64,
    now_ms: i64,
) -> anyhow::Result<()> {
    let statement = match kind {
        Kind::Ready => PG_READY,
        Kind::Succeeded => PG_SUCCEEDED,
        Kind::Stuck => PG_STUCK,
        Kind::ReadyTenants(_) => PG_READY_TENANTS,
    };
    let hash = bench_details().hash();
    let mut conn = PgConnection::connect(url).await?;
    let mut from = first;
    while from <= last {
        let to = (from + LOAD_CHUNK_ROWS - 1).min(last);
        let mut query = sqlx::query(statement)
            .bind(from)
            .bind(to)
            .bind(hash.as_str())
            .bind(now_ms);
        if let Kind::ReadyTenants(tenants) = kind {
            query = query.bind(tenants);
        }
        query
            .execute(&mut conn)
            .await
            .with_context(|| format!("load {kind:?} rows {from}..={to}"))?;
        from = to + 1;
    }
    // Fresh statistics, as a production table would have: the planner must see the partial indexes.
    sqlx::raw_sql("VACUUM ANALYZE operations")
        .execute(&mut conn)
        .await?;
    conn.close().await.ok();
    Ok(())
}

/// Puts the stuck rows `first..=last` back under an expired lease (between measured sweeps).
pub async fn restick(url: &str, first: i64, last: i64, now_ms: i64) -> anyhow::Result<()> {
    let ids: Vec<String> = (first..=last).map(operation_id).collect();
    let mut conn = PgConnection::connect(url).await?;
    sqlx::query(PG_RESTUCK)
        .bind(&ids)
        .bind(now_ms)
        .execute(&mut conn)
        .await?;
    conn.close().await.ok();
    Ok(())
}

/// Loads series values `first..=last` as ready rows into a SQLite ledger.
pub async fn sqlite(pool: &SqlitePool, first: i64, last: i64, now_ms: i64) -> anyhow::Result<()> {
    let hash = bench_details().hash();
    sqlx::query(SQLITE_READY)
        .bind(first)
        .bind(last)
        .bind(hash.as_str())
        .bind(now_ms)
        .execute(pool)
        .await
        .context("load ready rows into SQLite")?;
    Ok(())
}

//! Tool-call correlation records (issue 43): a repeated provider call id is one row, on both stores,
//! and the migration that made it so folds the repeats a ledger already holds.

use super::{T0, at, for_each_store};
use crate::support::{self, ready_operation, tenant};
use payonce_core::id::{OperationId, TenantId};
use payonce_ledger::{NewToolCall, SharedLedger};

/// Records `call_id` (of `provider`) for `operation` as tenant `tenant`.
async fn record(
    ledger: &SharedLedger,
    tenant: &TenantId,
    operation: Option<&OperationId>,
    provider: &str,
    call_id: Option<&str>,
) {
    let call = NewToolCall {
        operation,
        provider,
        provider_call_id: call_id,
        tool: "pay_invoice",
    };
    ledger
        .record_tool_call(tenant, &call, at(T0))
        .await
        .unwrap();
}

/// The call ids recorded for `id`, in order.
async fn call_ids(ledger: &SharedLedger, tenant: &TenantId, id: &OperationId) -> Vec<String> {
    let calls = ledger.tool_calls(tenant, id).await.unwrap();
    calls
        .into_iter()
        .map(|(provider, call, _)| format!("{provider}/{}", call.unwrap_or_default()))
        .collect()
}

#[tokio::test]
async fn a_repeated_call_id_is_one_row_and_different_ids_are_separate_rows() {
    for_each_store(|ledger| async move {
        let op = ready_operation(&ledger, "INV-TC1", "pm_card_visa", at(T0)).await;
        let other = ready_operation(&ledger, "INV-TC2", "pm_card_visa", at(T0)).await;
        let acme = tenant();
        let globex = TenantId::parse("globex").unwrap();
        // A retried call (the api's own retry after `unavailable`, or the assistant's) sends its id again.
        for _ in 0..3 {
            record(&ledger, &acme, Some(&op.id), "openai", Some("call_1")).await;
        }
        record(&ledger, &acme, Some(&op.id), "openai", Some("call_2")).await;
        // Another provider's id space, and another tenant's.
        record(&ledger, &acme, Some(&op.id), "anthropic", Some("call_1")).await;
        record(&ledger, &globex, Some(&op.id), "openai", Some("call_1")).await;
        assert_eq!(
            call_ids(&ledger, &acme, &op.id).await,
            ["openai/call_1", "openai/call_2", "anthropic/call_1"]
        );
        assert_eq!(call_ids(&ledger, &globex, &op.id).await, ["openai/call_1"]);
        // A client that reuses an id for another operation does not hide that call.
        record(&ledger, &acme, Some(&other.id), "openai", Some("call_1")).await;
        assert_eq!(call_ids(&ledger, &acme, &other.id).await, ["openai/call_1"]);
        // An MCP call id is the JSON-RPC request id, which every session (and every stateless
        // request) numbers anew: equal ids are different calls, each kept.
        record(&ledger, &acme, Some(&op.id), "mcp", Some("1")).await;
        record(&ledger, &acme, Some(&op.id), "mcp", Some("1")).await;
        assert_eq!(
            call_ids(&ledger, &acme, &op.id).await,
            [
                "openai/call_1",
                "openai/call_2",
                "anthropic/call_1",
                "mcp/1",
                "mcp/1"
            ]
        );
        // Calls without an id cannot be told apart from new ones: each is kept.
        record(&ledger, &acme, Some(&other.id), "anthropic", None).await;
        record(&ledger, &acme, Some(&other.id), "anthropic", None).await;
        assert_eq!(
            call_ids(&ledger, &acme, &other.id).await,
            ["openai/call_1", "anthropic/", "anthropic/"]
        );
    })
    .await;
}

/// Rows a ledger recorded before the call id was unique: three copies of one call, one other call,
/// two MCP calls under one JSON-RPC id.
const DUPLICATES: &str = "INSERT INTO tool_calls (tenant_id, operation_id, provider, provider_call_id, tool, at) \
     VALUES ('acme', NULL, 'openai', 'call_dup', 'pay_invoice', 1), \
            ('acme', NULL, 'openai', 'call_dup', 'pay_invoice', 2), \
            ('acme', NULL, 'openai', 'call_dup', 'pay_invoice', 3), \
            ('acme', NULL, 'openai', 'call_other', 'pay_invoice', 4), \
            ('acme', NULL, 'mcp', '7', 'pay_invoice', 5), \
            ('acme', NULL, 'mcp', '7', 'pay_invoice', 6)";
/// What the migration leaves of them: (call id, `at`).
const LEFT: &str = "SELECT provider_call_id, at FROM tool_calls ORDER BY id";
/// Undoes the migration, so the ledger is as an older release left it.
const UNDO: [&str; 2] = [
    "DROP INDEX IF EXISTS tool_calls_call_idx",
    "DELETE FROM payonce_migrations WHERE name = 'tool_call_dedupe'",
];

#[tokio::test]
async fn the_migration_keeps_the_first_of_each_repeated_call_on_both_stores() {
    use sqlx::Connection;
    let expected: Vec<(String, i64)> = [("call_dup", 1), ("call_other", 4), ("7", 5), ("7", 6)]
        .map(|(call, at)| (call.to_string(), at))
        .to_vec();

    let (ledger, url) = support::postgres_ledger().await;
    drop(ledger);
    let mut pg = sqlx::PgConnection::connect(&url).await.unwrap();
    for sql in UNDO.into_iter().chain([DUPLICATES]) {
        sqlx::raw_sql(sql).execute(&mut pg).await.unwrap();
    }
    let ledger = payonce_ledger::connect(&url, 1).await.unwrap();
    let left: Vec<(String, i64)> = sqlx::query_as(LEFT).fetch_all(&mut pg).await.unwrap();
    assert_eq!(left, expected, "postgres");
    record(&ledger, &tenant(), None, "openai", Some("call_dup")).await;
    let left: Vec<(String, i64)> = sqlx::query_as(LEFT).fetch_all(&mut pg).await.unwrap();
    assert_eq!(
        left, expected,
        "postgres: the repeat is refused from now on"
    );
    pg.close().await.unwrap();

    let file = support::SqliteFile::new("tool-calls");
    let url = file.url.clone();
    drop(payonce_ledger::connect(&url, 1).await.unwrap());
    let mut lite = sqlx::SqliteConnection::connect(&format!("{url}?mode=rw"))
        .await
        .unwrap();
    for sql in UNDO.into_iter().chain([DUPLICATES]) {
        sqlx::raw_sql(sql).execute(&mut lite).await.unwrap();
    }
    lite.close().await.unwrap();
    let ledger = payonce_ledger::connect(&url, 1).await.unwrap();
    record(&ledger, &tenant(), None, "openai", Some("call_dup")).await;
    drop(ledger);
    let mut lite = sqlx::SqliteConnection::connect(&format!("{url}?mode=rw"))
        .await
        .unwrap();
    let left: Vec<(String, i64)> = sqlx::query_as(LEFT).fetch_all(&mut lite).await.unwrap();
    assert_eq!(left, expected, "sqlite");
    lite.close().await.unwrap();
}

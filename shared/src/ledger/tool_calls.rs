//! Assistant tool calls: the provider's call ids kept for correlation (never identity), and the
//! one answer kept per tool-call idempotency key so a retry gets the first call's answer.

use super::dialect::Dialect;
use super::store::Store;
use super::{LedgerError, bounded};
use crate::id::{OperationId, TenantId};
use sqlx::{ColumnIndex, Decode, Encode, Executor, Row, Type};

const INSERT_TOOL_CALL: &str = "INSERT INTO tool_calls (tenant_id, operation_id, provider, provider_call_id, \
     tool, at) VALUES ($1, $2, $3, $4, $5, $6)";
const SELECT_TOOL_CALLS: &str =
    "SELECT provider, provider_call_id, tool FROM tool_calls WHERE operation_id = $1 ORDER BY id";
const KEEP_TOOL_ANSWER: &str = "INSERT INTO tool_call_keys (tenant_id, idempotency_key, fingerprint, answer, \
     created_at) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant_id, idempotency_key) DO NOTHING";
const SELECT_TOOL_ANSWER: &str =
    "SELECT fingerprint, answer FROM tool_call_keys WHERE tenant_id = $1 AND idempotency_key = $2";

/// The tool-call records of one store.
pub(crate) struct ToolCalls<'a, DB: Dialect>(pub(crate) &'a Store<DB>);

impl<DB> ToolCalls<'_, DB>
where
    // LEDGER BOUNDS (see `dialect.rs`)
    DB: Dialect,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    &'static str: ColumnIndex<DB::Row>,
    for<'t> i64: Encode<'t, DB> + Decode<'t, DB> + Type<DB>,
    for<'t> String: Encode<'t, DB> + Decode<'t, DB> + Type<DB>,
    for<'t> &'t str: Encode<'t, DB> + Type<DB>,
    for<'t> Option<i64>: Encode<'t, DB>,
    for<'t> Option<String>: Encode<'t, DB>,
    for<'t> Option<&'t str>: Encode<'t, DB>,
{
    /// See [`Ledger::record_tool_call`](super::Ledger::record_tool_call).
    pub(crate) async fn record(
        &self,
        tenant: &TenantId,
        operation: Option<&OperationId>,
        provider: &str,
        provider_call_id: Option<&str>,
        tool: &str,
        now_ms: i64,
    ) -> Result<(), LedgerError> {
        sqlx::query(INSERT_TOOL_CALL)
            .bind(tenant.as_str())
            .bind(operation.map(|o| o.as_str().to_string()))
            .bind(bounded(provider))
            .bind(provider_call_id.map(bounded))
            .bind(bounded(tool))
            .bind(now_ms)
            .execute(&self.0.pool)
            .await?;
        Ok(())
    }

    /// See [`Ledger::tool_calls`](super::Ledger::tool_calls).
    pub(crate) async fn of_operation(
        &self,
        id: &OperationId,
    ) -> Result<Vec<(String, Option<String>, String)>, LedgerError> {
        let rows = sqlx::query(SELECT_TOOL_CALLS)
            .bind(id.as_str())
            .fetch_all(&self.0.pool)
            .await?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get("provider")?,
                    r.try_get("provider_call_id")?,
                    r.try_get("tool")?,
                ))
            })
            .collect()
    }

    /// See [`Ledger::keep_tool_answer`](super::Ledger::keep_tool_answer).
    pub(crate) async fn keep_answer(
        &self,
        tenant: &TenantId,
        key: &str,
        fingerprint: &str,
        answer: &str,
        now_ms: i64,
    ) -> Result<(String, String), LedgerError> {
        sqlx::query(KEEP_TOOL_ANSWER)
            .bind(tenant.as_str())
            .bind(key)
            .bind(fingerprint)
            .bind(answer)
            .bind(now_ms)
            .execute(&self.0.pool)
            .await?;
        self.answer(tenant, key)
            .await?
            .ok_or_else(|| LedgerError::Corrupt("a kept tool answer is missing".into()))
    }

    /// See [`Ledger::tool_answer`](super::Ledger::tool_answer).
    pub(crate) async fn answer(
        &self,
        tenant: &TenantId,
        key: &str,
    ) -> Result<Option<(String, String)>, LedgerError> {
        let row = sqlx::query(SELECT_TOOL_ANSWER)
            .bind(tenant.as_str())
            .bind(key)
            .fetch_optional(&self.0.pool)
            .await?;
        row.map(|r| Ok((r.try_get("fingerprint")?, r.try_get("answer")?)))
            .transpose()
    }
}

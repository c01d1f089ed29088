//! Assistant tool calls: the provider's call ids kept for correlation (never identity), and the
//! one answer kept per tool-call idempotency key so a retry gets the first call's answer.

use super::dialect::Dialect;
use super::store::Store;
use super::{LedgerError, NewToolCall, ToolAnswer, ToolCalls, bounded};
use crate::clock::Timestamp;
use crate::id::{OperationId, TenantId};
use async_trait::async_trait;
use sqlx::{ColumnIndex, Decode, Encode, Executor, Row, Type};

const INSERT_TOOL_CALL: &str = "INSERT INTO tool_calls (tenant_id, operation_id, provider, provider_call_id, \
     tool, at) VALUES ($1, $2, $3, $4, $5, $6)";
const SELECT_TOOL_CALLS: &str = "SELECT provider, provider_call_id, tool FROM tool_calls \
     WHERE operation_id = $1 AND tenant_id = $2 ORDER BY id";
const KEEP_TOOL_ANSWER: &str = "INSERT INTO tool_call_keys (tenant_id, idempotency_key, fingerprint, answer, \
     created_at) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant_id, idempotency_key) DO NOTHING";
const SELECT_TOOL_ANSWER: &str =
    "SELECT fingerprint, answer FROM tool_call_keys WHERE tenant_id = $1 AND idempotency_key = $2";

#[async_trait]
impl<DB> ToolCalls for Store<DB>
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
    async fn record_tool_call(
        &self,
        tenant: &TenantId,
        call: &NewToolCall<'_>,
        now: Timestamp,
    ) -> Result<(), LedgerError> {
        sqlx::query(INSERT_TOOL_CALL)
            .bind(tenant.as_str())
            .bind(call.operation.map(|o| o.as_str().to_string()))
            .bind(bounded(call.provider))
            .bind(call.provider_call_id.map(bounded))
            .bind(bounded(call.tool))
            .bind(now)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn tool_calls(
        &self,
        tenant: &TenantId,
        id: &OperationId,
    ) -> Result<Vec<(String, Option<String>, String)>, LedgerError> {
        let rows = sqlx::query(SELECT_TOOL_CALLS)
            .bind(id.as_str())
            .bind(tenant.as_str())
            .fetch_all(&self.pool)
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

    async fn keep_tool_answer(
        &self,
        tenant: &TenantId,
        answer: &ToolAnswer<'_>,
        now: Timestamp,
    ) -> Result<(String, String), LedgerError> {
        sqlx::query(KEEP_TOOL_ANSWER)
            .bind(tenant.as_str())
            .bind(answer.key)
            .bind(answer.fingerprint)
            .bind(answer.answer)
            .bind(now)
            .execute(&self.pool)
            .await?;
        self.tool_answer(tenant, answer.key)
            .await?
            .ok_or_else(|| LedgerError::Corrupt("a kept tool answer is missing".into()))
    }

    async fn tool_answer(
        &self,
        tenant: &TenantId,
        key: &str,
    ) -> Result<Option<(String, String)>, LedgerError> {
        let row = sqlx::query(SELECT_TOOL_ANSWER)
            .bind(tenant.as_str())
            .bind(key)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| Ok((r.try_get("fingerprint")?, r.try_get("answer")?)))
            .transpose()
    }
}

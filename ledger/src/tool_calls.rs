//! Assistant tool calls: the provider's call ids kept for correlation (never identity; a model
//! provider's call id is one row per tenant and operation), and the one answer kept per tool-call
//! idempotency key so a retry gets the first call's answer.

use super::dialect::Dialect;
use super::row::LedgerRow;
use super::statement::Stmt;
use super::store::Store;
use super::{LedgerError, NewToolCall, ToolAnswer, ToolCalls, bounded};
use async_trait::async_trait;
use payonce_core::clock::Timestamp;
use payonce_core::id::{OperationId, TenantId};

/// A model provider's call id already recorded for the tenant and operation is the same call sent
/// again (`tool_calls_call_idx`, which leaves out MCP's JSON-RPC ids): its first row stands.
const INSERT_TOOL_CALL: &str = "INSERT INTO tool_calls (tenant_id, operation_id, provider, provider_call_id, \
     tool, at) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING";
const SELECT_TOOL_CALLS: &str = "SELECT provider, provider_call_id, tool FROM tool_calls \
     WHERE operation_id = $1 AND tenant_id = $2 ORDER BY id";
const KEEP_TOOL_ANSWER: &str = "INSERT INTO tool_call_keys (tenant_id, idempotency_key, fingerprint, answer, \
     created_at) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant_id, idempotency_key) DO NOTHING";
const SELECT_TOOL_ANSWER: &str =
    "SELECT fingerprint, answer FROM tool_call_keys WHERE tenant_id = $1 AND idempotency_key = $2";

#[async_trait]
impl<DB: Dialect> ToolCalls for Store<DB> {
    async fn record_tool_call(
        &self,
        tenant: &TenantId,
        call: &NewToolCall<'_>,
        now: Timestamp,
    ) -> Result<(), LedgerError> {
        let stmt = Stmt::new(INSERT_TOOL_CALL).bind(tenant);
        let stmt = stmt.bind(call.operation.map(OperationId::as_str));
        let stmt = stmt
            .bind(bounded(call.provider))
            .bind(call.provider_call_id.map(bounded));
        self.execute(stmt.bind(bounded(call.tool)).bind(now))
            .await?;
        Ok(())
    }

    async fn tool_calls(
        &self,
        tenant: &TenantId,
        id: &OperationId,
    ) -> Result<Vec<(String, Option<String>, String)>, LedgerError> {
        let stmt = Stmt::new(SELECT_TOOL_CALLS).bind(id).bind(tenant);
        self.all(stmt, |r| {
            let call_id = r.get("provider_call_id")?;
            Ok((r.get("provider")?, call_id, r.get("tool")?))
        })
        .await
    }

    async fn keep_tool_answer(
        &self,
        tenant: &TenantId,
        answer: &ToolAnswer<'_>,
        now: Timestamp,
    ) -> Result<(String, String), LedgerError> {
        let stmt = Stmt::new(KEEP_TOOL_ANSWER).bind(tenant).bind(answer.key);
        let stmt = stmt.bind(answer.fingerprint).bind(answer.answer);
        self.execute(stmt.bind(now)).await?;
        self.tool_answer(tenant, answer.key)
            .await?
            .ok_or_else(|| LedgerError::Corrupt("a kept tool answer is missing".into()))
    }

    async fn tool_answer(
        &self,
        tenant: &TenantId,
        key: &str,
    ) -> Result<Option<(String, String)>, LedgerError> {
        let stmt = Stmt::new(SELECT_TOOL_ANSWER).bind(tenant).bind(key);
        self.first(stmt, |r| Ok((r.get("fingerprint")?, r.get("answer")?)))
            .await
    }
}

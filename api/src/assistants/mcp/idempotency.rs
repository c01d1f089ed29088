//! `tools/call` idempotency keys, as proposed for MCP in SEP-3182 and offered here as the
//! experimental capability [`CAPABILITY`]: the first complete answer to a key is kept in the ledger
//! (per tenant) with a fingerprint of the call; the same key with the same tool and arguments
//! replays that answer without running the tool, the same key with anything else is a JSON-RPC
//! invalid-params error. The key is correlation only: the operation's identity stays its business
//! key, so a call without a key is just as safe.

use super::transport::ReplayKey;
use crate::auth::Caller;
use crate::errors::cause_chain;
use crate::state::AppState;
use payonce_ledger::ToolAnswer;
use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ExperimentalCapabilities, JsonObject};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The experimental capability's name in `capabilities.experimental`.
pub const CAPABILITY: &str = "io.payonce/idempotency";

/// The capability: which method takes a key, and the key's length limit.
pub fn capability() -> ExperimentalCapabilities {
    let mut settings = JsonObject::new();
    settings.insert("methods".into(), json!(["tools/call"]));
    settings.insert("param".into(), json!("idempotencyKey"));
    settings.insert(
        "keyLengthMax".into(),
        json!(super::transport::IDEMPOTENCY_KEY_LEN_MAX),
    );
    ExperimentalCapabilities::from([(CAPABILITY.to_string(), settings)])
}

/// Sorts object keys at every level, so two equal argument objects fingerprint alike whatever
/// order the client wrote them in.
fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let mut out = serde_json::Map::new();
            for k in keys {
                out.insert(k.clone(), canonical(&map[k]));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// SHA-256 of the tool name and canonical arguments.
pub fn fingerprint(tool: &str, arguments: &Value) -> String {
    let canonical = json!([tool, canonical(arguments)]).to_string();
    hex::encode(Sha256::digest(canonical.as_bytes()))
}

fn unavailable(e: &payonce_ledger::LedgerError) -> ErrorData {
    tracing::error!(cause = %cause_chain(e), "idempotency key store failed");
    ErrorData::internal_error(
        "the idempotency key could not be checked; nothing was run, retry shortly",
        None,
    )
}

fn conflict(key: &ReplayKey) -> ErrorData {
    ErrorData::invalid_params(
        "this idempotencyKey was already used with a different tool or arguments; nothing was run",
        Some(json!({"idempotencyKey": key.0, "reason": "idempotency_key_reused"})),
    )
}

fn decode(answer: &str) -> Result<CallToolResult, ErrorData> {
    serde_json::from_str(answer).map_err(|e| {
        ErrorData::internal_error(format!("a kept tool answer does not decode: {e}"), None)
    })
}

/// The kept answer for `key` when the call matches it; an error when it does not.
pub async fn replay(
    state: &AppState,
    caller: &Caller,
    key: &ReplayKey,
    fingerprint: &str,
) -> Result<Option<CallToolResult>, ErrorData> {
    match state.ledger().tool_answer(&caller.tenant, &key.0).await {
        Ok(None) => Ok(None),
        Ok(Some((kept, _))) if kept != fingerprint => Err(conflict(key)),
        Ok(Some((_, answer))) => decode(&answer).map(Some),
        Err(e) => Err(unavailable(&e)),
    }
}

/// Keeps `result` as the key's answer; a concurrent first call may have kept its own, which is then
/// the one returned, so every caller of one key sees one answer.
pub async fn keep(
    state: &AppState,
    caller: &Caller,
    key: &ReplayKey,
    fingerprint: &str,
    result: CallToolResult,
) -> Result<CallToolResult, ErrorData> {
    let answer = serde_json::to_string(&result).map_err(|e| {
        ErrorData::internal_error(format!("tool result does not encode: {e}"), None)
    })?;
    let (kept_fingerprint, kept) = state
        .ledger()
        .keep_tool_answer(
            &caller.tenant,
            &ToolAnswer {
                key: &key.0,
                fingerprint,
                answer: &answer,
            },
            state.now(),
        )
        .await
        .map_err(|e| unavailable(&e))?;
    if kept_fingerprint != fingerprint {
        return Err(conflict(key));
    }
    decode(&kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_ignore_key_order_and_see_every_value() {
        let a = fingerprint(
            "pay_invoice",
            &json!({"operation_id": "op_1", "x": {"b": 1, "a": 2}}),
        );
        let b = fingerprint(
            "pay_invoice",
            &json!({"x": {"a": 2, "b": 1}, "operation_id": "op_1"}),
        );
        assert_eq!(a, b);
        assert_ne!(
            a,
            fingerprint("pay_invoice", &json!({"operation_id": "op_2"}))
        );
        assert_ne!(
            fingerprint("pay_invoice", &json!({"operation_id": "op_1"})),
            fingerprint("get_payment_status", &json!({"operation_id": "op_1"}))
        );
    }
}

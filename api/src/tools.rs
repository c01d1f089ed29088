//! The assistant's two tools, deliberately narrow: `pay_invoice {operation_id}` and
//! `get_payment_status {operation_id}`. A model can name an operation the trusted workflow created;
//! it cannot create one, change its details or pick its tenant. Neither tool writes to an operation:
//! an approved operation is already enqueued, so "pay" answers with the stored truth.

use crate::answer;
use crate::app::AppState;
use crate::auth::Caller;
use crate::errors::cause_chain;
use payonce_shared::id::OperationId;
use payonce_shared::ledger::{LedgerError, Role};
use serde_json::{Value, json};

/// Asks for the payment of an invoice the customer's workflow already set up.
pub const PAY_INVOICE: &str = "pay_invoice";
/// Reads where a payment stands.
pub const GET_PAYMENT_STATUS: &str = "get_payment_status";
/// The one argument either tool takes.
pub const OPERATION_ID_ARG: &str = "operation_id";
/// Longest JSON-string `arguments` parsed (an operation id needs about 60 bytes).
pub const ARGUMENTS_LEN_MAX: usize = 4 * 1024;
/// Longest tool name considered (OpenAI's and Anthropic's limit).
pub const TOOL_NAME_LEN_MAX: usize = 64;

/// A tool's name, title and description, shared by every provider format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolDef {
    /// Name the model calls.
    pub name: &'static str,
    /// Human title.
    pub title: &'static str,
    /// What the model reads to decide when to call it.
    pub description: &'static str,
    /// Whether it only reads (MCP annotation).
    pub read_only: bool,
}

/// Both tools.
pub const TOOLS: [ToolDef; 2] = [
    ToolDef {
        name: PAY_INVOICE,
        title: "Pay invoice",
        description: "Ask for the payment of an invoice that the billing system already set up, by its operation id. \
                      Amount, currency, customer and invoice come from the billing record and cannot be changed here. \
                      Calling it again is safe: it never creates a second payment and always returns the payment's \
                      real state (succeeded, being processed, needs the customer's approval (payonce asks the customer itself), being \
                      checked, failed, ...). Relay the returned `message` to the user.",
        read_only: false,
    },
    ToolDef {
        name: GET_PAYMENT_STATUS,
        title: "Get payment status",
        description: "Read where the payment of an operation stands, by its operation id. Returns the stored state \
                      and a `message` to relay to the user; never starts a payment.",
        read_only: true,
    },
];

/// The input schema both tools share: exactly one field, nothing else allowed.
pub fn input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            OPERATION_ID_ARG: {
                "type": "string",
                "description": "The operation id the billing system gave for this payment: op_ followed by 32 lowercase hex digits."
            }
        },
        "required": [OPERATION_ID_ARG],
        "additionalProperties": false
    })
}

/// A tool's answer: the structured fields, and whether it is a tool error (bad arguments, unknown
/// operation), as opposed to a payment that failed.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolReply {
    /// Structured fields; always holds `message`.
    pub structured: Value,
    /// True for tool errors.
    pub is_error: bool,
}

impl ToolReply {
    fn error(code: &str, message: &str) -> Self {
        ToolReply {
            structured: json!({"error": {"code": code, "message": message}, "message": message,
                               "new_payment_submitted": false}),
            is_error: true,
        }
    }

    /// The text form every provider carries: the structured fields as JSON.
    pub fn text(&self) -> String {
        self.structured.to_string()
    }

    /// The sentence to relay.
    pub fn message(&self) -> &str {
        self.structured
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("")
    }
}

/// One call as a provider delivered it, after its envelope was read.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The provider's call id (correlation only, never identity).
    pub call_id: Option<String>,
    /// The tool named.
    pub name: String,
    /// The arguments object, or why it could not be read.
    pub arguments: Result<Value, String>,
}

/// Parses a JSON-string `arguments` (OpenAI), bounded.
pub fn parse_arguments_text(raw: &str) -> Result<Value, String> {
    if raw.len() > ARGUMENTS_LEN_MAX {
        return Err(format!(
            "arguments are longer than {ARGUMENTS_LEN_MAX} bytes"
        ));
    }
    if raw.trim().is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_str(raw).map_err(|e| format!("arguments are not valid JSON: {e}"))
}

const ONLY_OPERATION_ID: &str = "This tool takes only operation_id. The amount, currency, customer and invoice come \
                                 from the billing record and cannot be set or changed by a tool call.";

fn operation_id_of(arguments: &Value) -> Result<OperationId, ToolReply> {
    let Some(object) = arguments.as_object() else {
        return Err(ToolReply::error(
            "invalid_arguments",
            "arguments must be a JSON object with operation_id",
        ));
    };
    if object.keys().any(|k| k != OPERATION_ID_ARG) {
        return Err(ToolReply::error("invalid_arguments", ONLY_OPERATION_ID));
    }
    let Some(raw) = object.get(OPERATION_ID_ARG).and_then(Value::as_str) else {
        return Err(ToolReply::error(
            "invalid_arguments",
            "operation_id is required and must be a string",
        ));
    };
    OperationId::parse(raw).map_err(|_| {
        ToolReply::error(
            "invalid_arguments",
            "operation_id must be op_ followed by 32 lowercase hex digits",
        )
    })
}

fn internal(e: &LedgerError) -> ToolReply {
    tracing::error!(cause = %cause_chain(e), "tool call failed");
    ToolReply::error(
        "unavailable",
        "The payment status could not be read right now. This call did not submit any payment; ask again shortly.",
    )
}

/// Runs one tool call for `caller` and records it (provider + call id) for correlation.
pub async fn call(state: &AppState, caller: &Caller, provider: &str, call: &ToolCall) -> ToolReply {
    let ledger = state.ledger();
    let now = state.now_ms();
    let known = TOOLS.iter().any(|t| t.name == call.name);
    let bounded_name: String = call.name.chars().take(TOOL_NAME_LEN_MAX).collect();
    let tool_name = bounded_name.as_str();
    let record = |op: Option<OperationId>| async move {
        ledger
            .record_tool_call(
                &caller.tenant,
                op.as_ref(),
                provider,
                call.call_id.as_deref(),
                tool_name,
                now,
            )
            .await
    };
    let parsed = if !matches!(caller.role, Role::Assistant | Role::Service) {
        Err(ToolReply::error(
            "forbidden",
            "this key's role may not call the assistant's tools",
        ))
    } else if !known {
        Err(ToolReply::error(
            "unknown_tool",
            "unknown tool; the tools are pay_invoice and get_payment_status",
        ))
    } else {
        match &call.arguments {
            Ok(arguments) => operation_id_of(arguments),
            Err(why) => Err(ToolReply::error("invalid_arguments", why)),
        }
    };
    let id = match parsed {
        Ok(id) => id,
        Err(reply) => {
            return match record(None).await {
                Ok(()) => reply,
                Err(e) => internal(&e),
            };
        }
    };
    let op = match ledger.get(&caller.tenant, &id).await {
        Ok(op) => op,
        Err(LedgerError::NotFound) => {
            return match record(None).await {
                Ok(()) => ToolReply::error(
                    "operation_not_found",
                    "No payment with that operation id exists.",
                ),
                Err(e) => internal(&e),
            };
        }
        Err(e) => return internal(&e),
    };
    if let Err(e) = record(Some(op.id.clone())).await {
        return internal(&e);
    }
    // Only a request to pay asks the customer; a status read writes nothing.
    let answered = if call.name == GET_PAYMENT_STATUS {
        answer::status_of(state, &op).await
    } else {
        answer::of_operation(state, &op).await
    };
    match answered {
        Ok(answer) => match serde_json::to_value(&answer) {
            Ok(structured) => ToolReply {
                structured,
                is_error: false,
            },
            Err(e) => internal(&LedgerError::Corrupt(e.to_string())),
        },
        Err(e) => internal(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_operation_id_is_accepted() {
        let id = OperationId::generate();
        assert_eq!(
            operation_id_of(&json!({"operation_id": id.as_str()})).unwrap(),
            id
        );
        let extra =
            operation_id_of(&json!({"operation_id": id.as_str(), "amount": 1})).unwrap_err();
        assert!(extra.is_error && extra.message().contains("only operation_id"));
        assert!(operation_id_of(&json!({})).is_err());
        assert!(operation_id_of(&json!({"operation_id": 5})).is_err());
        assert!(operation_id_of(&json!("op_x")).is_err());
        assert!(operation_id_of(&json!({"operation_id": "op_123"})).is_err());
    }

    #[test]
    fn arguments_text_is_bounded_and_parsed() {
        assert_eq!(parse_arguments_text("").unwrap(), json!({}));
        assert!(parse_arguments_text("{not json").is_err());
        assert!(parse_arguments_text(&" ".repeat(ARGUMENTS_LEN_MAX + 1)).is_err());
    }
}

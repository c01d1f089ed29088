//! The providers' shapes (shared/reference/toolcall_formats.md): tool definitions for
//! `GET /v1/tools?format=…`, and for `POST /v1/tool-calls` the provider's call object in, the matching
//! tool-result object out. A call whose arguments cannot be read gets a tool error result, not a 4xx:
//! the model made the mistake and must see it. A malformed envelope is the caller's bug: 400.

use crate::assistants::tools::{self, TOOLS, ToolCall, ToolReply};
use crate::auth::Caller;
use crate::body::ApiJson;
use crate::errors::{ErrorCode, HttpError};
use crate::state::AppState;
use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use payonce_ledger::Role;
use serde::Deserialize;
use serde_json::{Value, json};

/// Longest provider call id accepted (real ones are 20 to 40 characters).
pub const CALL_ID_LEN_MAX: usize = 256;

/// A provider's wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// OpenAI Chat Completions: `tool_calls[]` items, JSON-string arguments.
    OpenaiChat,
    /// OpenAI Responses: `function_call` items with `call_id`.
    OpenaiResponses,
    /// Anthropic Messages: `tool_use` blocks with an object `input`.
    Anthropic,
    /// MCP: `tools/call` params `{name, arguments}`.
    Mcp,
}

/// Every format.
pub const ALL_FORMATS: [Format; 4] = [
    Format::OpenaiChat,
    Format::OpenaiResponses,
    Format::Anthropic,
    Format::Mcp,
];

impl Format {
    /// The query/body name, also recorded as the tool call's provider.
    pub fn as_str(&self) -> &'static str {
        match self {
            Format::OpenaiChat => "openai_chat",
            Format::OpenaiResponses => "openai_responses",
            Format::Anthropic => "anthropic",
            Format::Mcp => "mcp",
        }
    }

    /// Parses a format name.
    pub fn parse(raw: &str) -> Result<Format, HttpError> {
        ALL_FORMATS
            .into_iter()
            .find(|f| f.as_str() == raw)
            .ok_or_else(|| {
                HttpError::new(
                    ErrorCode::UnsupportedFormat,
                    "format must be one of openai_chat, openai_responses, anthropic, mcp",
                )
            })
    }
}

/// The tool definitions in `format`'s shape.
pub fn definitions(format: Format) -> Vec<Value> {
    TOOLS
        .iter()
        .map(|t| match format {
            Format::OpenaiChat => json!({"type": "function", "function": {
                "name": t.name, "description": t.description, "parameters": tools::input_schema_of(t, true), "strict": true}}),
            Format::OpenaiResponses => json!({"type": "function", "name": t.name, "description": t.description,
                "parameters": tools::input_schema_of(t, true), "strict": true}),
            Format::Anthropic => json!({"name": t.name, "description": t.description,
                "input_schema": tools::input_schema_of(t, false)}),
            Format::Mcp => json!({"name": t.name, "title": t.title, "description": t.description,
                "inputSchema": tools::input_schema_of(t, false), "outputSchema": tools::output_schema(),
                "annotations": {"title": t.title, "readOnlyHint": t.read_only, "destructiveHint": t.destructive,
                                "idempotentHint": t.idempotent, "openWorldHint": t.open_world}}),
        })
        .collect()
}

fn bad_call(why: &str) -> HttpError {
    HttpError::new(ErrorCode::InvalidToolCall, why)
}

fn string_field<'a>(v: &'a Value, field: &str, what: &str) -> Result<&'a str, HttpError> {
    v.get(field)
        .and_then(Value::as_str)
        .ok_or_else(|| bad_call(&format!("{what}: `{field}` must be a string")))
}

fn call_id(v: &Value, field: &str, what: &str) -> Result<String, HttpError> {
    let id = string_field(v, field, what)?;
    if id.is_empty() || id.len() > CALL_ID_LEN_MAX {
        return Err(bad_call(&format!(
            "{what}: `{field}` must be 1 to {CALL_ID_LEN_MAX} characters"
        )));
    }
    Ok(id.to_string())
}

fn expect_type(v: &Value, expected: &str, what: &str) -> Result<(), HttpError> {
    match v.get("type").and_then(Value::as_str) {
        Some(t) if t == expected => Ok(()),
        _ => Err(bad_call(&format!("{what}: `type` must be {expected:?}"))),
    }
}

fn object_arguments(v: Option<&Value>) -> Result<Value, String> {
    match v {
        None => Ok(json!({})),
        Some(a) if a.is_object() => Ok(a.clone()),
        Some(_) => Err("arguments must be a JSON object".to_string()),
    }
}

/// Reads a provider's call object.
pub fn parse_call(format: Format, call: &Value) -> Result<ToolCall, HttpError> {
    match format {
        Format::OpenaiChat => {
            let what = "an OpenAI Chat tool call";
            expect_type(call, "function", what)?;
            let function = call
                .get("function")
                .ok_or_else(|| bad_call("an OpenAI Chat tool call needs `function`"))?;
            Ok(ToolCall {
                call_id: Some(call_id(call, "id", what)?),
                name: string_field(function, "name", what)?.to_string(),
                arguments: tools::parse_arguments_text(string_field(function, "arguments", what)?),
            })
        }
        Format::OpenaiResponses => {
            let what = "an OpenAI Responses function_call";
            expect_type(call, "function_call", what)?;
            Ok(ToolCall {
                call_id: Some(call_id(call, "call_id", what)?),
                name: string_field(call, "name", what)?.to_string(),
                arguments: tools::parse_arguments_text(string_field(call, "arguments", what)?),
            })
        }
        Format::Anthropic => {
            let what = "an Anthropic tool_use block";
            expect_type(call, "tool_use", what)?;
            Ok(ToolCall {
                call_id: Some(call_id(call, "id", what)?),
                name: string_field(call, "name", what)?.to_string(),
                arguments: object_arguments(call.get("input")),
            })
        }
        Format::Mcp => {
            let what = "MCP tools/call params";
            let id = match call.get("id") {
                None | Some(Value::Null) => None,
                Some(Value::Number(n)) => Some(n.to_string()),
                Some(_) => Some(call_id(call, "id", what)?),
            };
            Ok(ToolCall {
                call_id: id,
                name: string_field(call, "name", what)?.to_string(),
                arguments: object_arguments(call.get("arguments")),
            })
        }
    }
}

/// The tool-result object that answers a call in `format`.
pub fn render_result(format: Format, call_id: Option<&str>, reply: &ToolReply) -> Value {
    let text = reply.text();
    match format {
        Format::OpenaiChat => json!({"role": "tool", "tool_call_id": call_id, "content": text}),
        Format::OpenaiResponses => {
            json!({"type": "function_call_output", "call_id": call_id, "output": text})
        }
        Format::Anthropic => {
            json!({"type": "tool_result", "tool_use_id": call_id, "content": text, "is_error": reply.is_error()})
        }
        Format::Mcp => {
            json!({"content": [{"type": "text", "text": text}], "structuredContent": reply.structured,
                              "isError": reply.is_error()})
        }
    }
}

/// `GET /v1/tools` query.
#[derive(Debug, Deserialize)]
pub struct FormatQuery {
    /// One of [`ALL_FORMATS`].
    pub format: Option<String>,
}

/// `GET /v1/tools?format=…` (assistant, service): `{format, tools: [...]}`.
pub async fn list(
    caller: Caller,
    query: Result<Query<FormatQuery>, QueryRejection>,
) -> Result<Json<Value>, HttpError> {
    caller.require(
        &[Role::Assistant, Role::Service],
        "list the assistant's tools",
    )?;
    let requested = query.ok().and_then(|Query(q)| q.format).unwrap_or_default();
    let format = Format::parse(&requested)?;
    Ok(Json(
        json!({"format": format.as_str(), "tools": definitions(format)}),
    ))
}

/// `POST /v1/tool-calls` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallRequest {
    /// One of [`ALL_FORMATS`].
    pub format: String,
    /// The provider's call object, as the model produced it.
    pub call: Value,
}

/// `POST /v1/tool-calls` (assistant, service): runs the call, answers with the provider's result shape.
pub async fn call(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<CallRequest>,
) -> Result<Json<Value>, HttpError> {
    caller.require(
        &[Role::Assistant, Role::Service],
        "call the assistant's tools",
    )?;
    let format = Format::parse(&body.format)?;
    let parsed = parse_call(format, &body.call)?;
    let reply = tools::call(&state, &caller, format.as_str(), &parsed).await;
    Ok(Json(render_result(
        format,
        parsed.call_id.as_deref(),
        &reply,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_parse_in_each_providers_shape() {
        let chat = json!({"id": "call_1", "type": "function",
                          "function": {"name": "pay_invoice", "arguments": "{\"operation_id\":\"op_x\"}"}});
        let c = parse_call(Format::OpenaiChat, &chat).unwrap();
        assert_eq!(c.call_id.as_deref(), Some("call_1"));
        assert_eq!(c.arguments.unwrap(), json!({"operation_id": "op_x"}));
        let responses = json!({"type": "function_call", "id": "fc_1", "call_id": "call_2", "name": "pay_invoice",
                               "arguments": "{oops", "status": "completed"});
        let c = parse_call(Format::OpenaiResponses, &responses).unwrap();
        assert_eq!(c.call_id.as_deref(), Some("call_2"));
        assert!(
            c.arguments.is_err(),
            "invalid JSON arguments become a tool error, not a 4xx"
        );
        let anthropic = json!({"type": "tool_use", "id": "toolu_1", "name": "get_payment_status",
                               "input": {"operation_id": "op_x"}});
        assert_eq!(
            parse_call(Format::Anthropic, &anthropic)
                .unwrap()
                .call_id
                .as_deref(),
            Some("toolu_1")
        );
        assert!(parse_call(Format::Anthropic, &json!({"type": "text", "text": "hi"})).is_err());
        let long_id = json!({"type": "tool_use", "id": "t".repeat(CALL_ID_LEN_MAX + 1),
                             "name": "pay_invoice", "input": {}});
        assert!(
            parse_call(Format::Anthropic, &long_id).is_err(),
            "call ids are bounded"
        );
        assert!(
            parse_call(
                Format::OpenaiChat,
                &json!({"type": "function", "function": {"name": "x"}})
            )
            .is_err()
        );
    }

    #[test]
    fn results_use_each_providers_id_field() {
        let reply = ToolReply {
            structured: json!({"message": "ok"}),
            error: None,
        };
        assert_eq!(
            render_result(Format::OpenaiChat, Some("c"), &reply)["tool_call_id"],
            "c"
        );
        assert_eq!(
            render_result(Format::OpenaiResponses, Some("c"), &reply)["call_id"],
            "c"
        );
        assert_eq!(
            render_result(Format::Anthropic, Some("c"), &reply)["tool_use_id"],
            "c"
        );
        assert_eq!(
            render_result(Format::Mcp, None, &reply)["structuredContent"]["message"],
            "ok"
        );
    }

    #[test]
    fn every_format_carries_the_same_structured_outcome() {
        let reply = ToolReply {
            structured: json!({"outcome": "being_checked", "operation_id": "op_1", "message": "m",
                               "retry_advice": "wait", "new_payment_submitted": false}),
            error: None,
        };
        let text_of = |f: Format| -> Value {
            let r = render_result(f, Some("c"), &reply);
            let text = match f {
                Format::OpenaiChat | Format::Anthropic => {
                    r["content"].as_str().unwrap().to_string()
                }
                Format::OpenaiResponses => r["output"].as_str().unwrap().to_string(),
                Format::Mcp => r["content"][0]["text"].as_str().unwrap().to_string(),
            };
            serde_json::from_str(&text).unwrap()
        };
        for f in ALL_FORMATS {
            assert_eq!(text_of(f), reply.structured, "{f:?}");
        }
        let mcp = render_result(Format::Mcp, None, &reply);
        assert_eq!(mcp["structuredContent"]["outcome"], "being_checked");
    }

    #[test]
    fn mcp_definitions_declare_output_schema_and_true_hints() {
        let defs = definitions(Format::Mcp);
        for (d, t) in defs.iter().zip(TOOLS) {
            assert_eq!(d["outputSchema"], tools::output_schema());
            assert_eq!(d["annotations"]["readOnlyHint"], t.read_only);
            assert_eq!(d["annotations"]["destructiveHint"], false);
            assert_eq!(d["annotations"]["idempotentHint"], true);
        }
        assert_eq!(
            defs[0]["annotations"]["openWorldHint"], true,
            "pay_invoice ends at the processor"
        );
        assert_eq!(defs[1]["annotations"]["readOnlyHint"], true);
    }

    #[test]
    fn definitions_use_each_providers_schema_key() {
        assert!(definitions(Format::OpenaiChat)[0]["function"]["parameters"].is_object());
        assert!(definitions(Format::OpenaiResponses)[0]["parameters"].is_object());
        assert!(definitions(Format::Anthropic)[0]["input_schema"].is_object());
        assert!(definitions(Format::Mcp)[0]["inputSchema"].is_object());
        for f in ALL_FORMATS {
            assert_eq!(definitions(f).len(), TOOLS.len());
        }
    }
}

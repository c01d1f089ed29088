//! What `/mcp` checks before rmcp sees a request: the browser `Origin` (DNS-rebinding and
//! cross-site protection, 403), and a body that is one well-formed JSON-RPC message within the
//! named limits. A malformed message gets HTTP 400 with a JSON-RPC error carrying the right code
//! (-32700 parse, -32600 invalid request, -32602 invalid params) instead of a plain-text answer.

use crate::state::AppState;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// JSON-RPC: the body is not JSON (or not UTF-8, or nested too deep to parse safely).
pub const PARSE_ERROR: i32 = -32700;
/// JSON-RPC: the JSON is not a request object.
pub const INVALID_REQUEST: i32 = -32600;
/// JSON-RPC: the method exists but its params are wrong.
pub const INVALID_PARAMS: i32 = -32602;
/// Deepest nesting of arrays and objects accepted in a message. A real MCP message is under 10
/// levels deep (tool arguments here are flat); the bound keeps a hostile body from making the
/// parser recurse.
pub const JSON_DEPTH_MAX: usize = 32;
/// Longest `idempotencyKey` accepted on `tools/call` (a UUID is 36 characters).
pub const IDEMPOTENCY_KEY_LEN_MAX: usize = 255;

/// The `idempotencyKey` of a `tools/call`: the key its first complete answer is kept and replayed
/// under (not the processor's `shared::id::IdempotencyKey`). Checked here and handed to the handler
/// through the request's extensions (rmcp's typed params have no field for it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayKey(pub String);

/// A JSON-RPC error answer with an HTTP status. `id` is `null` when the request's id could not be
/// read (JSON-RPC 2.0, section 5: "If there was an error in detecting the id … it MUST be Null").
pub fn rpc_error(status: StatusCode, id: Value, code: i32, message: &str) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    let mut response = (status, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// Rejects a browser request from an origin not allowed by the settings (403). Requests without
/// `Origin` (every non-browser client) pass: the bearer key is their protection.
pub async fn check_origin(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if let Some(origin) = request.headers().get(header::ORIGIN) {
        let allowed = origin
            .to_str()
            .is_ok_and(|o| state.config().mcp_origin_allowed(o));
        if !allowed {
            tracing::warn!(origin = ?origin, "refused an MCP request from a disallowed origin");
            return rpc_error(
                StatusCode::FORBIDDEN,
                Value::Null,
                INVALID_REQUEST,
                "this Origin may not call /mcp; see mcp_allowed_origins",
            );
        }
    }
    next.run(request).await
}

/// How deep `raw` nests arrays and objects, counted outside strings; stops counting past `max`.
fn nesting_exceeds(raw: &[u8], max: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0_usize, false, false);
    for &b in raw {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

fn valid_id(id: &Value) -> bool {
    matches!(id, Value::String(_) | Value::Number(_))
}

/// Why a parsed message is not an acceptable JSON-RPC request, as (code, message).
fn check_message(message: &Value) -> Result<Option<ReplayKey>, (i32, &'static str)> {
    let Some(object) = message.as_object() else {
        return Err((
            INVALID_REQUEST,
            "the body must be one JSON-RPC message object (batches are not supported)",
        ));
    };
    if object.get("jsonrpc") != Some(&json!("2.0")) {
        return Err((INVALID_REQUEST, "`jsonrpc` must be \"2.0\""));
    }
    if object.get("id").is_some_and(|id| !valid_id(id)) {
        return Err((INVALID_REQUEST, "`id` must be a string or a number"));
    }
    let Some(method) = object.get("method") else {
        // A response or error from the client (to a server request): rmcp decides what to do with it.
        if object.contains_key("result") || object.contains_key("error") {
            return Ok(None);
        }
        return Err((
            INVALID_REQUEST,
            "a request needs `method` (a string); a response needs `result` or `error`",
        ));
    };
    let Some(method) = method.as_str() else {
        return Err((INVALID_REQUEST, "`method` must be a string"));
    };
    if object.get("params").is_some_and(|p| !p.is_object()) {
        return Err((INVALID_PARAMS, "`params` must be an object"));
    }
    if method != "tools/call" {
        return Ok(None);
    }
    let Some(params) = object.get("params").and_then(Value::as_object) else {
        return Err((INVALID_PARAMS, "tools/call needs a `params` object"));
    };
    if !params.get("name").is_some_and(Value::is_string) {
        return Err((
            INVALID_PARAMS,
            "tools/call needs `params.name`, the tool's name",
        ));
    }
    if params.get("arguments").is_some_and(|a| !a.is_object()) {
        return Err((INVALID_PARAMS, "`params.arguments` must be an object"));
    }
    match params.get("idempotencyKey") {
        None => Ok(None),
        Some(Value::String(k))
            if !k.is_empty()
                && k.chars().count() <= IDEMPOTENCY_KEY_LEN_MAX
                && !k.chars().any(char::is_control) =>
        {
            Ok(Some(ReplayKey(k.clone())))
        }
        Some(_) => Err((
            INVALID_PARAMS,
            "`params.idempotencyKey` must be a string of 1 to 255 printable characters",
        )),
    }
}

/// Reads a POST body once, within the configured limit, and answers a malformed message itself.
pub async fn check_message_body(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let is_json = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case("application/json")
        });
    if !is_json {
        // rmcp answers 415 for a body that is not declared JSON, as the HTTP spec says.
        return next.run(request).await;
    }
    let limit = state.config().body_limit_bytes;
    let (mut parts, body) = request.into_parts();
    let bytes: Bytes = match axum::body::to_bytes(body, limit).await {
        Ok(b) => b,
        Err(_) => {
            return rpc_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                Value::Null,
                INVALID_REQUEST,
                &format!("the request body is larger than {limit} bytes"),
            );
        }
    };
    let bad =
        |code: i32, message: &str, id: Value| rpc_error(StatusCode::BAD_REQUEST, id, code, message);
    let Ok(text) = std::str::from_utf8(&bytes) else {
        return bad(PARSE_ERROR, "the body is not valid UTF-8", Value::Null);
    };
    if nesting_exceeds(text.as_bytes(), JSON_DEPTH_MAX) {
        return bad(
            PARSE_ERROR,
            &format!("the body nests deeper than {JSON_DEPTH_MAX} levels"),
            Value::Null,
        );
    }
    let message: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(_) => return bad(PARSE_ERROR, "the body is not valid JSON", Value::Null),
    };
    match check_message(&message) {
        Ok(Some(key)) => {
            parts.extensions.insert(key);
        }
        Ok(None) => {}
        Err((code, why)) => {
            let id = message
                .get("id")
                .filter(|id| valid_id(id))
                .cloned()
                .unwrap_or(Value::Null);
            return bad(code, why, id);
        }
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_is_counted_outside_strings() {
        let deep = format!(
            "{}{}",
            "[".repeat(JSON_DEPTH_MAX + 1),
            "]".repeat(JSON_DEPTH_MAX + 1)
        );
        assert!(nesting_exceeds(deep.as_bytes(), JSON_DEPTH_MAX));
        let fine = format!(
            "{}{}",
            "[".repeat(JSON_DEPTH_MAX),
            "]".repeat(JSON_DEPTH_MAX)
        );
        assert!(!nesting_exceeds(fine.as_bytes(), JSON_DEPTH_MAX));
        let quoted = format!("{{\"a\":\"{}\\\"{}\"}}", "[".repeat(100), "{".repeat(100));
        assert!(!nesting_exceeds(quoted.as_bytes(), JSON_DEPTH_MAX));
    }

    #[test]
    fn messages_get_the_json_rpc_code_for_what_is_wrong() {
        let code = |v: Value| check_message(&v).err().map(|(c, _)| c);
        assert_eq!(code(json!([1])), Some(INVALID_REQUEST));
        assert_eq!(
            code(json!({"id": 1, "method": "ping"})),
            Some(INVALID_REQUEST)
        );
        assert_eq!(
            code(json!({"jsonrpc": "2.0", "id": {}, "method": "ping"})),
            Some(INVALID_REQUEST)
        );
        assert_eq!(
            code(json!({"jsonrpc": "2.0", "id": 1, "method": 5})),
            Some(INVALID_REQUEST)
        );
        assert_eq!(
            code(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {}})),
            Some(INVALID_PARAMS)
        );
        assert_eq!(
            code(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                               "params": {"name": "x", "idempotencyKey": "k".repeat(IDEMPOTENCY_KEY_LEN_MAX + 1)}})),
            Some(INVALID_PARAMS)
        );
        assert_eq!(
            code(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                               "params": {"name": "x", "idempotencyKey": "a\nb"}})),
            Some(INVALID_PARAMS)
        );
        let ok = check_message(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                       "params": {"name": "x", "idempotencyKey": "k".repeat(IDEMPOTENCY_KEY_LEN_MAX)}}));
        assert_eq!(ok.unwrap().unwrap().0.len(), IDEMPOTENCY_KEY_LEN_MAX);
        assert_eq!(
            check_message(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})),
            Ok(None)
        );
        assert_eq!(
            code(json!({"jsonrpc": "2.0", "id": 1})),
            Some(INVALID_REQUEST)
        );
        assert_eq!(
            code(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": [1]})),
            Some(INVALID_PARAMS)
        );
        assert_eq!(
            code(json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": "x"})),
            Some(INVALID_PARAMS)
        );
        assert_eq!(
            check_message(&json!({"jsonrpc": "2.0", "id": 1, "result": {}})),
            Ok(None),
            "a client's response to a server request is rmcp's"
        );
    }
}

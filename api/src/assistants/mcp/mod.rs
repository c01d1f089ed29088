//! The MCP server at `/mcp`, over streamable HTTP, built on the official Rust SDK (`rmcp`). Stateless
//! JSON responses: every POST carries its own bearer key, so no session state is needed and any API
//! process can answer any request. Every version a current client may negotiate is served:
//! 2026-07-28 (stateless, per-request `_meta`), 2025-11-25, 2025-06-18 and 2025-03-26 (initialize
//! handshake). The key's tenant and role reach the handler through the HTTP request parts rmcp hands
//! over; the tools are the same two as everywhere else.
//!
//! Beyond plain tool calls: a `pay_invoice` awaiting the customer's approval asks the *client* to
//! show the customer the confirmation page (URL-mode elicitation, [`confirmation`]) so the URL
//! never enters the model's context; and a `tools/call` may carry an `idempotencyKey`
//! ([`idempotency`]).

mod confirmation;
mod idempotency;
pub mod transport;

use crate::assistants::formats::{self, Format};
use crate::assistants::tools::{self, ToolCall};
use crate::auth::{Caller, require_tool_caller};
use crate::state::AppState;
use axum::Router;
use axum::middleware;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, ListToolsResult,
    PaginatedRequestParams, ResultType, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;
use std::sync::Arc;
pub use transport::{IDEMPOTENCY_KEY_LEN_MAX, JSON_DEPTH_MAX};

/// The route.
pub const PATH: &str = "/mcp";
/// Hosts always accepted in the `Host` header (DNS-rebinding protection); the public base URL's
/// host is added to them.
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// One MCP handler per request, carrying the API state.
#[derive(Debug, Clone)]
pub struct PayonceMcp {
    state: AppState,
}

fn mcp_tools() -> Vec<Tool> {
    formats::definitions(Format::Mcp)
        .into_iter()
        .filter_map(|d| match serde_json::from_value::<Tool>(d) {
            Ok(tool) => Some(tool),
            Err(e) => {
                tracing::error!(error = %e, "an MCP tool definition does not decode; this is a bug");
                None
            }
        })
        .collect()
}

fn parts_of(context: &RequestContext<RoleServer>) -> Option<&axum::http::request::Parts> {
    context.extensions.get::<axum::http::request::Parts>()
}

fn caller_of(context: &RequestContext<RoleServer>) -> Option<Caller> {
    parts_of(context)?.extensions.get::<Caller>().cloned()
}

/// A tool reply as an MCP `CallToolResult`. `resultType: "complete"` is set here: the 2026-07-28
/// schema requires it, and rmcp drops it for peers that negotiated an older version.
fn call_tool_result(reply: &tools::ToolReply) -> Result<CallToolResult, ErrorData> {
    let rendered = formats::render_result(Format::Mcp, None, reply);
    let mut result: CallToolResult = serde_json::from_value(rendered).map_err(|e| {
        ErrorData::internal_error(format!("tool result does not encode: {e}"), None)
    })?;
    result.result_type = Some(ResultType::COMPLETE);
    Ok(result)
}

impl ServerHandler for PayonceMcp {
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_experimental_with(idempotency::capability())
            .build();
        capabilities.tools.get_or_insert_default();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("payonce", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "payonce answers with the real state of a payment the billing system set up. Call pay_invoice or \
                 get_payment_status with the operation id you were given, branch on the returned `outcome`, follow \
                 `retry_advice` and relay `message`. Calling again never creates a second payment. To give money \
                 back, call request_refund with the payment's operation id and a reason: it only proposes a refund, \
                 which a person at the merchant approves, and asking again returns the same proposal.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(mcp_tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // The auth middleware put the caller there; without it the request never reached rmcp.
        let Some(caller) = caller_of(&context) else {
            return Err(ErrorData::internal_error(
                "no authenticated caller on the request",
                None,
            ));
        };
        let arguments = Value::Object(request.arguments.clone().unwrap_or_default());
        let key = parts_of(&context)
            .and_then(|p| p.extensions.get::<transport::ReplayKey>())
            .cloned();
        // A multi round-trip continuation (it carries the person's responses) is its own request:
        // it neither replays nor keeps a keyed answer, as SEP-3182's discussion scopes it.
        let continuation = request.input_responses.is_some() || request.request_state.is_some();
        let keyed = key
            .as_ref()
            .filter(|_| !continuation)
            .map(|k| (k, idempotency::fingerprint(&request.name, &arguments)));
        if let Some((key, fingerprint)) = &keyed
            && let Some(stored) =
                idempotency::replay(&self.state, &caller, key, fingerprint).await?
        {
            return Ok(CallToolResponse::Complete(stored));
        }

        let call = ToolCall {
            call_id: Some(context.id.to_string()),
            name: request.name.to_string(),
            arguments: Ok(arguments),
        };
        let reply = tools::call(&self.state, &caller, Format::Mcp.as_str(), &call).await;
        if reply.error == Some(tools::ToolError::UnknownTool) {
            // The spec makes an unknown tool a protocol error (-32602), not a tool result; the call
            // was still recorded for correlation.
            let shown: String = request
                .name
                .chars()
                .take(tools::TOOL_NAME_LEN_MAX)
                .collect();
            return Err(ErrorData::invalid_params(
                format!("Unknown tool: {shown}"),
                None,
            ));
        }
        let reply =
            match confirmation::step(&self.state, &caller, &request, &context, reply).await? {
                confirmation::Step::AskTheUser(input_required) => {
                    // Not kept under the key: it is a question, not an answer.
                    return Ok(CallToolResponse::InputRequired(input_required));
                }
                confirmation::Step::Answer(reply) => reply,
            };
        let result = call_tool_result(&reply)?;
        match &keyed {
            Some((key, fingerprint)) => Ok(CallToolResponse::Complete(
                idempotency::keep(&self.state, &caller, key, fingerprint, result).await?,
            )),
            None => Ok(CallToolResponse::Complete(result)),
        }
    }
}

/// The `/mcp` route: Origin check, bearer auth (assistant or service keys), then the message check,
/// then rmcp.
pub fn routes(state: &AppState) -> Router<AppState> {
    let mut hosts: Vec<String> = LOOPBACK_HOSTS.iter().map(|h| (*h).to_string()).collect();
    if let Some(public) = state.config().public_host() {
        hosts.push(public.to_string());
    }
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_allowed_hosts(hosts)
        .with_max_request_body_bytes(state.config().body_limit_bytes)
        .with_cancellation_token(state.shutdown_token().child_token());
    let handler_state = state.clone();
    let service = StreamableHttpService::new(
        move || {
            Ok(PayonceMcp {
                state: handler_state.clone(),
            })
        },
        Arc::new(NeverSessionManager::default()),
        config,
    );
    Router::new()
        .route_service(PATH, service)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            transport::check_message_body,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            require_tool_caller,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            transport::check_origin,
        ))
}

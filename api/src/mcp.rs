//! The MCP server at `/mcp`, over streamable HTTP, built on the official Rust SDK (`rmcp`). Stateless
//! JSON responses: every POST carries its own bearer key, so no session state is needed and any API
//! process can answer any request. The key's tenant and role reach the handler through the HTTP
//! request parts rmcp hands over; the tools are the same two as everywhere else.

use crate::app::AppState;
use crate::auth::{Caller, require_tool_caller};
use crate::formats::{self, Format};
use crate::tools::{self, ToolCall};
use axum::Router;
use axum::middleware;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;
use std::sync::Arc;

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

fn caller_of(context: &RequestContext<RoleServer>) -> Option<Caller> {
    let parts = context.extensions.get::<axum::http::request::Parts>()?;
    parts.extensions.get::<Caller>().cloned()
}

impl ServerHandler for PayonceMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("payonce", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "payonce answers with the real state of a payment the billing system set up. Call pay_invoice or \
                 get_payment_status with the operation id you were given, and relay the returned message. Calling \
                 again never creates a second payment.",
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
        let call = ToolCall {
            call_id: Some(context.id.to_string()),
            name: request.name.to_string(),
            arguments: Ok(request
                .arguments
                .map(Value::Object)
                .unwrap_or_else(|| Value::Object(Default::default()))),
        };
        let reply = tools::call(&self.state, &caller, Format::Mcp.as_str(), &call).await;
        let rendered = formats::render_result(Format::Mcp, None, &reply);
        let result: CallToolResult = serde_json::from_value(rendered).map_err(|e| {
            ErrorData::internal_error(format!("tool result does not encode: {e}"), None)
        })?;
        Ok(CallToolResponse::Complete(result))
    }
}

/// The `/mcp` route, behind bearer auth (assistant or service keys).
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
            require_tool_caller,
        ))
}

//! payonce's HTTP front door: upstream services create and approve operations, customers confirm them
//! on a trusted page, assistants ask about them through narrow tools, Stripe reports on them.
//!
//! - [`config`]: the API's settings and their named defaults.
//! - [`app`]: the shared state handlers read, the router, and the server with graceful shutdown.
//! - [`auth`]: bearer API keys, looked up by digest, mapped to a tenant and a role.
//! - [`shared_reads`]: reads shared by the requests that arrive together, each from a read taken after it arrived (API keys).
//! - [`keys`]: the API key lifecycle: issue with an expiry, rotate with a grace period, revoke.
//! - [`errors`]: the stable table of error codes and the JSON error body.
//! - [`body`]: the JSON body extractor whose rejections speak the error table.
//! - [`operations`]: the operations API for upstream services (create, approval links, approve, cancel, read).
//! - [`intake`]: the batch create route: a billing run's payments created and enqueued, many per request.
//! - [`group_commit`]: concurrent single creates with their approval written together, one ledger batch per group.
//! - [`answer`]: what a repeated request or a tool call returns: the operation's stored truth, as fields and a sentence.
//! - [`console`]: the on-call console: sessions, overview, lists, one operation's evidence chain, resolve.
//! - [`confirm`]: the confirmation page: a single-use link plus the customer's own proof.
//! - [`verify`]: customer verification per tenant: links with their codes, requests on an assistant's behalf.
//! - [`assertion`]: the signed customer assertion a tenant's app hands the page.
//! - [`notify`]: signed, retried deliveries to a tenant's notification endpoint.
//! - [`page`]: HTML escaping and the layout the confirmation pages share.
//! - [`tools`]: the assistant's two tools, their schema, and the provider-neutral call.
//! - [`formats`]: tool definitions and tool-call/tool-result shapes of OpenAI Chat, OpenAI Responses, Anthropic, MCP.
//! - [`mcp`]: the MCP server over streamable HTTP (the official `rmcp` SDK).
//! - [`webhooks`]: the Stripe webhook route, handing raw bytes to the reconciler.
//! - [`health`]: liveness and readiness.
//! - [`listener`]: the accept loop with its header-read timeout and connection limit.
//! - [`metrics`]: the Prometheus `/metrics` endpoint and the response counters behind it.
//! - [`openapi`]: the checked-in OpenAPI 3.1 document and the route table it must cover.

pub mod answer;
pub mod app;
pub mod assertion;
pub mod auth;
pub mod body;
pub mod config;
pub mod confirm;
pub mod console;
pub mod errors;
pub mod formats;
pub mod group_commit;
pub mod health;
pub mod intake;
pub mod keys;
pub mod ledger_time;
pub mod listener;
pub mod mcp;
pub mod metrics;
pub mod notify;
pub mod openapi;
pub mod operations;
pub mod page;
pub mod profile;
pub mod refunds;
pub mod shared_reads;
pub mod tools;
pub mod verify;
pub mod webhooks;

pub use app::{ApiError, AppState, router, serve, serve_listener};
pub use auth::create_api_key;
pub use config::ApiConfig;
pub use ledger_time::database_clock;

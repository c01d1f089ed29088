//! payonce's HTTP front door: upstream services create and approve operations, customers confirm them
//! on a trusted page, assistants ask about them through narrow tools, processors report on them, and
//! on-call reads and resolves them in a console.
//!
//! The modules form layers; each imports only from the layers above it in this list, never from its
//! own layer's neighbours in a circle, never from a layer below (no module imports the router).
//!
//! **Foundations** (no handler state):
//! - [`config`]: the API's settings and their named defaults.
//! - [`errors`]: the stable table of error codes and the JSON error body.
//! - [`body`]: the JSON body extractor whose rejections speak the error table.
//! - [`page`]: HTML escaping, the layout the confirmation pages share, the HTML pages' security headers.
//! - [`ledger_time`]: the database's clock, checked against this process's.
//! - [`assertion`]: the signed customer assertion a tenant's app hands the page.
//! - [`notify`]: signed, retried deliveries to a tenant's notification endpoint.
//! - [`shared_reads`]: reads shared by the requests that arrive together, each from a read taken after it arrived (API keys).
//! - [`counters`]: the API's own counters (responses, latency, webhook deliveries).
//! - [`group_commit`]: concurrent single creates with their approval written together, one ledger batch per group.
//! - [`listener`]: the accept loop with its header-read timeout and connection limit.
//!
//! **State**:
//! - [`state`]: [`AppState`], what every handler shares: ledger, clock, settings and the parts above.
//!
//! **Callers and what they may do** (read the state):
//! - [`auth`]: bearer API keys at request time, looked up by digest, mapped to a tenant and a role.
//! - [`keys`]: the API key lifecycle: issue with an expiry, rotate with a grace period, revoke.
//! - [`verify`]: customer verification per tenant: links with their codes, requests on an assistant's behalf.
//! - [`answer`]: what a repeated request or a tool call returns: the operation's stored truth, as fields and a sentence.
//!
//! **Routes, by audience** (each module's `routes()`):
//! - [`operations`]: callers and services: operations, their batch create ([`intake`]), refunds, the tenant's profile.
//! - [`assistants`]: the assistant's tools ([`tools`]), their provider formats ([`formats`]), the MCP server ([`mcp`]).
//! - [`confirm`]: customers: the confirmation page, a single-use link plus the customer's own proof.
//! - [`console`]: on-call: sessions, overview, lists, one operation's evidence chain, resolve.
//! - [`webhooks`]: processors: the Stripe and Adyen webhook routes, handing raw bytes to the reconciler.
//! - [`health`], [`metrics`], [`openapi`]: the platform: liveness and readiness, the Prometheus
//!   `/metrics` endpoint and the middleware that counts responses, the OpenAPI document and its route table.
//!
//! **Server**:
//! - [`server`]: the router that merges every audience's routes, and the server with graceful shutdown.
//!
//! [`intake`], [`profile`], [`refunds`], [`formats`], [`mcp`] and [`tools`] are also re-exported here, so
//! `payonce_api::intake::…` and the like keep naming them.

pub mod answer;
pub mod assertion;
pub mod assistants;
pub mod auth;
pub mod body;
pub mod config;
pub mod confirm;
pub mod console;
pub mod counters;
pub mod errors;
pub mod group_commit;
pub mod health;
pub mod keys;
pub mod ledger_time;
pub mod listener;
pub mod metrics;
pub mod notify;
pub mod openapi;
pub mod operations;
pub mod page;
pub mod server;
pub mod shared_reads;
pub mod state;
pub mod verify;
pub mod webhooks;

pub use assistants::{formats, mcp, tools};
pub use config::ApiConfig;
pub use keys::create_api_key;
pub use ledger_time::database_clock;
pub use operations::{intake, profile, refunds};
pub use server::{ApiError, router, serve, serve_listener};
pub use state::AppState;

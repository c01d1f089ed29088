//! What assistants call: the three narrow tools ([`tools`]), their definitions and calls in each
//! provider's wire format over plain HTTP ([`formats`]: `GET /v1/tools`, `POST /v1/tool-calls`), and
//! the MCP server ([`mcp`]). A model reaches operations only through these tools, with an assistant
//! or service key; [`routes`] lists them.

pub mod formats;
pub mod mcp;
pub mod tools;

use crate::state::AppState;
use axum::Router;
use axum::routing::{get, post};

/// The tool routes over plain HTTP and the MCP endpoint (which needs the state for its
/// authentication layer).
pub fn routes(state: &AppState) -> Router<AppState> {
    Router::new()
        .route("/v1/tools", get(formats::list))
        .route("/v1/tool-calls", post(formats::call))
        .merge(mcp::routes(state))
}

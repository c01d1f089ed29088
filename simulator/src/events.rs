//! Events: `GET /v1/events`, newest first, paginated with `starting_after`.

use crate::connection::ConnHandle;
use crate::error::ApiError;
use crate::form;
use crate::lookup::{self, detached};
use crate::payment_intents::settle_due;
use crate::routes::Shared;
use axum::extract::{ConnectInfo, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::Response;

const PATH: &str = "/v1/events";

/// `GET /v1/events?limit=&starting_after=&type=`.
pub(crate) async fn list(
    State(app): State<Shared>,
    ConnectInfo(conn): ConnectInfo<ConnHandle>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    let pairs = lookup::query_pairs(raw.as_deref());
    let ctx = match lookup::begin(&app, conn, &headers, PATH, pairs.as_ref().ok()).await {
        Ok(ctx) => ctx,
        Err(response) => return response,
    };
    let pairs = match pairs {
        Ok(p) => p,
        Err(e) => return ctx.error(&e),
    };
    let mut limit = None;
    let mut starting_after = None;
    let mut kind = None;
    for (k, v) in &pairs {
        match k.as_str() {
            "limit" => limit = Some(v.as_str()),
            "starting_after" => starting_after = Some(v.clone()),
            "type" => kind = Some(v.clone()),
            other => return ctx.error(&form::unknown(other)),
        }
    }
    let limit = match form::limit(limit) {
        Ok(l) => l,
        Err(e) => return ctx.error(&e),
    };
    let worker = app.clone();
    let page = detached(async move {
        settle_due(&worker).await?;
        let before = match &starting_after {
            None => Some(i64::MAX),
            Some(id) => worker.store.event_seq(id).await?,
        };
        let Some(mut before) = before else {
            return Ok(None);
        };
        // A `type` filter is applied here, page by page, so pagination stays in one place.
        let mut out = Vec::new();
        let mut has_more = false;
        loop {
            let rows = worker.store.events(before, limit + 1).await?;
            let exhausted = rows.len() as i64 <= limit;
            for (seq, body) in rows {
                before = seq;
                let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body) else {
                    continue;
                };
                if kind
                    .as_deref()
                    .is_some_and(|t| v.get("type").and_then(|x| x.as_str()) != Some(t))
                {
                    continue;
                }
                if out.len() as i64 == limit {
                    has_more = true;
                    break;
                }
                out.push(v);
            }
            if has_more || exhausted {
                break;
            }
        }
        Ok(Some((out, has_more)))
    })
    .await;
    match page {
        Ok(Some((data, has_more))) => lookup::page(&ctx, PATH, data, has_more),
        Ok(None) => ctx.error(&ApiError::invalid_param(
            "resource_missing",
            "starting_after",
            "No such event given as starting_after",
        )),
        Err(e) => ctx.internal("event list", &e),
    }
}

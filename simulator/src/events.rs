//! Events: `GET /v1/events`, newest first, paginated with `starting_after`.

use crate::app::Shared;
use crate::connection::ConnHandle;
use crate::error::ApiError;
use crate::form::ListShape;
use crate::lookup;
use crate::settlement::settle_due;
use crate::store::detached;
use axum::extract::{ConnectInfo, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::Response;

const PATH: &str = "/v1/events";
/// What `GET /v1/events` takes besides `limit` and `starting_after`.
const LIST_SHAPE: ListShape = ListShape {
    filters: &["type"],
    created: false,
    ending_before: false,
};

/// `GET /v1/events?limit=&starting_after=&type=`.
pub(crate) async fn list(
    State(app): State<Shared>,
    ConnectInfo(conn): ConnectInfo<ConnHandle>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    let (ctx, query) =
        match lookup::begin_list(&app, conn, &headers, PATH, raw.as_deref(), LIST_SHAPE).await {
            Ok(begun) => begun,
            Err(response) => return response,
        };
    let limit = query.limit;
    let kind = query.filter("type").map(str::to_string);
    let starting_after = query.starting_after;
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

//! Reading refunds: `GET /v1/refunds/{id}` and `GET /v1/refunds` (newest first; filtered by
//! `payment_intent` or `charge` and `created`; paginated with `starting_after` or `ending_before`),
//! both read-after-write consistent, as Stripe's are.

use crate::app::Shared;
use crate::connection::ConnHandle;
use crate::error::ApiError;
use crate::form::{ListQuery, ListShape};
use crate::lookup::{self, Retrieve};
use crate::objects;
use crate::refunds::PATH;
use crate::settlement::settle_due;
use crate::store::detached;
use crate::store::{RefundPage, RefundRow};
use axum::extract::{ConnectInfo, Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::Value;

fn object(row: &RefundRow) -> Value {
    serde_json::from_slice(&row.body).unwrap_or(Value::Null)
}

/// `GET /v1/refunds/{id}[?expand[]=payment_intent&expand[]=charge]`.
pub(crate) async fn retrieve(
    State(app): State<Shared>,
    ConnectInfo(conn): ConnectInfo<ConnHandle>,
    headers: HeaderMap,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Response {
    let path = format!("{PATH}/{id}");
    let (expand, query_error) = crate::expand::requested(raw.as_deref(), crate::expand::REFUND);
    let found = Retrieve {
        path: &path,
        param: "id",
        kind: "refund",
        what: "refund retrieve",
        query_error,
    };
    found
        .run(app, conn, &headers, id, |app, id| async move {
            let Some(row) = app.store.refund(&id).await? else {
                return Ok(None);
            };
            let mut refund = object(&row);
            if !expand.is_empty()
                && let Some(pi_id) = refund["payment_intent"].as_str().map(String::from)
                && let Some(pi) = app.store.payment(&pi_id).await?
            {
                if expand.iter().any(|f| f == "payment_intent") {
                    refund["payment_intent"] = objects::payment_intent(&pi);
                }
                if expand.iter().any(|f| f == "charge") && pi.latest_charge.is_some() {
                    refund["charge"] = objects::charge(&pi, pi.amount_refunded);
                }
            }
            Ok(Some(refund))
        })
        .await
}

/// What `GET /v1/refunds` takes besides `limit` and `starting_after`.
const LIST_SHAPE: ListShape = ListShape {
    filters: &["payment_intent", "charge"],
    created: true,
    ending_before: true,
};

/// What a list read found: the page, or the cursor parameter naming no refund.
enum Listed {
    Page(Vec<RefundRow>, bool),
    NoSuchCursor(&'static str, String),
}

async fn read_page(app: Shared, f: ListQuery) -> Result<Listed, sqlx::Error> {
    settle_due(&app).await?;
    let cursor = match (&f.starting_after, &f.ending_before) {
        (Some(id), _) => match app.store.refund(id).await? {
            Some(row) => Ok(row.seq),
            None => return Ok(Listed::NoSuchCursor("starting_after", id.clone())),
        },
        (None, Some(id)) => match app.store.refund(id).await? {
            Some(row) => Err(row.seq),
            None => return Ok(Listed::NoSuchCursor("ending_before", id.clone())),
        },
        (None, None) => Ok(i64::MAX),
    };
    let page = RefundPage {
        payment_intent: f.filter("payment_intent"),
        charge: f.filter("charge"),
        created_gte: f.created.gte,
        created_lte: f.created.lte,
        cursor,
        limit: f.limit + 1,
    };
    let mut rows = app.store.list_refunds(&page).await?;
    let has_more = rows.len() as i64 > f.limit;
    rows.truncate(f.limit as usize);
    if cursor.is_err() {
        // Read oldest first from the cursor; a page is always shown newest first.
        rows.reverse();
    }
    Ok(Listed::Page(rows, has_more))
}

/// `GET /v1/refunds?payment_intent=&charge=&created[gte]=&limit=&starting_after=&ending_before=`.
pub(crate) async fn list(
    State(app): State<Shared>,
    ConnectInfo(conn): ConnectInfo<ConnHandle>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    let (ctx, filter) =
        match lookup::begin_list(&app, conn, &headers, PATH, raw.as_deref(), LIST_SHAPE).await {
            Ok(begun) => begun,
            Err(response) => return response,
        };
    match detached(read_page(app.clone(), filter)).await {
        Ok(Listed::Page(rows, has_more)) => {
            lookup::page(&ctx, PATH, rows.iter().map(object).collect(), has_more)
        }
        Ok(Listed::NoSuchCursor(param, id)) => ctx.error(&ApiError::invalid_param(
            "resource_missing",
            param,
            format!("No such refund: '{id}'"),
        )),
        Err(e) => ctx.internal("refund list", &e),
    }
}

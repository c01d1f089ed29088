//! Reading refunds: `GET /v1/refunds/{id}` and `GET /v1/refunds` (newest first; filtered by
//! `payment_intent` or `charge` and `created`; paginated with `starting_after` or `ending_before`),
//! both read-after-write consistent, as Stripe's are.

use crate::connection::ConnHandle;
use crate::error::ApiError;
use crate::form::{self, Pairs};
use crate::lookup::{self, Retrieve, detached};
use crate::objects;
use crate::payment_intents::settle_due;
use crate::refunds::PATH;
use crate::routes::Shared;
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
    let (expand, query_error) = match crate::expand::parse(raw.as_deref(), crate::expand::REFUND) {
        Ok(fields) => (fields, None),
        Err(e) => (Vec::new(), Some(e)),
    };
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

struct ListFilter {
    payment_intent: Option<String>,
    charge: Option<String>,
    created: form::CreatedRange,
    limit: i64,
    starting_after: Option<String>,
    ending_before: Option<String>,
}

fn list_filter(pairs: &Pairs) -> Result<ListFilter, ApiError> {
    let mut f = ListFilter {
        payment_intent: None,
        charge: None,
        created: form::CreatedRange::default(),
        limit: 0,
        starting_after: None,
        ending_before: None,
    };
    let mut limit = None;
    for (k, v) in pairs {
        if f.created.narrow(k, v)? {
            continue;
        }
        match k.as_str() {
            "payment_intent" => f.payment_intent = Some(v.clone()),
            "charge" => f.charge = Some(v.clone()),
            "limit" => limit = Some(v.as_str()),
            "starting_after" => f.starting_after = Some(v.clone()),
            "ending_before" => f.ending_before = Some(v.clone()),
            other => return Err(form::unknown(other)),
        }
    }
    if f.starting_after.is_some() && f.ending_before.is_some() {
        return Err(ApiError::invalid_request(
            "parameters_exclusive",
            "You may only specify one of these parameters: ending_before, starting_after.",
        ));
    }
    f.limit = form::limit(limit)?;
    Ok(f)
}

/// What a list read found: the page, or the cursor parameter naming no refund.
enum Listed {
    Page(Vec<RefundRow>, bool),
    NoSuchCursor(&'static str, String),
}

async fn read_page(app: Shared, f: ListFilter) -> Result<Listed, sqlx::Error> {
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
        payment_intent: f.payment_intent.as_deref(),
        charge: f.charge.as_deref(),
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
    let pairs = lookup::query_pairs(raw.as_deref());
    let ctx = match lookup::begin(&app, conn, &headers, PATH, pairs.as_ref().ok()).await {
        Ok(ctx) => ctx,
        Err(response) => return response,
    };
    let filter = match pairs.and_then(|p| list_filter(&p)) {
        Ok(f) => f,
        Err(e) => return ctx.error(&e),
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

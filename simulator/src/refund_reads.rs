//! Reading refunds: `GET /v1/refunds/{id}` and `GET /v1/refunds` (newest first; filtered by
//! `payment_intent` or `charge` and `created`; paginated with `starting_after` or `ending_before`),
//! both read-after-write consistent, as Stripe's are.

use crate::connection::ConnHandle;
use crate::error::ApiError;
use crate::form::{self, Pairs};
use crate::objects;
use crate::payment_intents::{Retrieve, detached, read_faults, settle_due};
use crate::refunds::PATH;
use crate::routes::{Ctx, Shared};
use crate::store::{RefundPage, RefundRow};
use axum::extract::{ConnectInfo, Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::Value;

fn object(row: &RefundRow) -> Value {
    serde_json::from_slice(&row.body).unwrap_or(Value::Null)
}

fn body(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
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
    gte: i64,
    lte: i64,
    limit: i64,
    starting_after: Option<String>,
    ending_before: Option<String>,
}

fn list_filter(pairs: &Pairs) -> Result<ListFilter, ApiError> {
    let mut f = ListFilter {
        payment_intent: None,
        charge: None,
        gte: i64::MIN,
        lte: i64::MAX,
        limit: 0,
        starting_after: None,
        ending_before: None,
    };
    let mut limit = None;
    for (k, v) in pairs {
        match k.as_str() {
            "payment_intent" => f.payment_intent = Some(v.clone()),
            "charge" => f.charge = Some(v.clone()),
            "created" => {
                let t = form::timestamp(k, v)?;
                f.gte = f.gte.max(t);
                f.lte = f.lte.min(t);
            }
            "created[gte]" => f.gte = f.gte.max(form::timestamp(k, v)?),
            "created[gt]" => f.gte = f.gte.max(form::timestamp(k, v)?.saturating_add(1)),
            "created[lte]" => f.lte = f.lte.min(form::timestamp(k, v)?),
            "created[lt]" => f.lte = f.lte.min(form::timestamp(k, v)?.saturating_sub(1)),
            "limit" => limit = Some(v.as_str()),
            "starting_after" => f.starting_after = Some(v.clone()),
            "ending_before" => f.ending_before = Some(v.clone()),
            other => {
                return Err(ApiError::invalid_param(
                    "parameter_unknown",
                    other,
                    format!("Received unknown parameter: {other}"),
                ));
            }
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
        created_gte: f.gte,
        created_lte: f.lte,
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
    let pairs = form::parse_pairs(raw.unwrap_or_default().as_bytes());
    let ctx = match Ctx::begin(&app, conn, &headers, "GET", PATH, pairs.as_ref().ok()) {
        Ok(ctx) => ctx,
        Err(response) => return response,
    };
    if let Some(r) = read_faults(&app, &ctx).await {
        return r;
    }
    let filter = match pairs.and_then(|p| list_filter(&p)) {
        Ok(f) => f,
        Err(e) => return ctx.error(&e),
    };
    match detached(read_page(app.clone(), filter)).await {
        Ok(Listed::Page(rows, has_more)) => {
            let data = rows.iter().map(object).collect();
            ctx.finish(ctx.respond(
                StatusCode::OK,
                body(&objects::list(PATH, data, has_more)),
                false,
            ))
        }
        Ok(Listed::NoSuchCursor(param, id)) => ctx.error(&ApiError::invalid_param(
            "resource_missing",
            param,
            format!("No such refund: '{id}'"),
        )),
        Err(e) => ctx.internal("refund list", &e),
    }
}

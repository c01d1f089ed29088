//! PaymentIntents: create (with confirm), retrieve, list and search (`processing` ones settle in
//! `settlement`).

use crate::app::Shared;
use crate::cards::{self, CardOutcome};
use crate::connection::ConnHandle;
use crate::context::Ctx;
use crate::creation::Creation;
use crate::error::ApiError;
use crate::expand;
use crate::form::{self, ListShape, Pairs};
use crate::limits::{AUDIT_PAYMENTS_MAX, SEARCH_QUERY_LEN_MAX};
use crate::lookup::{self, Retrieve};
use crate::objects::{self, EventCause};
use crate::search::Query;
use crate::settlement::settle_due;
use crate::store::detached;
use crate::store::{NewEvent, PaymentCommit, PaymentRow};
use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::json;

const PATH: &str = "/v1/payment_intents";
/// What `GET /v1/payment_intents` takes besides `limit` and `starting_after`.
const LIST_SHAPE: ListShape = ListShape {
    filters: &["customer"],
    created: true,
    ending_before: false,
};

/// What executing a create produces, before it is committed.
struct Execution {
    row: PaymentRow,
    events: Vec<NewEvent>,
    status: StatusCode,
    body: Vec<u8>,
}

fn new_event(
    app: &Shared,
    ctx: &Ctx,
    created: i64,
    kind: &'static str,
    object_json: &[u8],
) -> NewEvent {
    let id = app.ids.id("evt");
    let cause = EventCause {
        request_id: Some(&ctx.request_id),
        idempotency_key: ctx.key.as_deref(),
        api_version: ctx.api_version(),
    };
    let body = objects::event_json(&id, created, kind, object_json, cause);
    NewEvent {
        id,
        created,
        kind,
        body,
    }
}

fn execute(app: &Shared, ctx: &Ctx, p: form::PaymentIntentParams) -> Execution {
    let id = app.ids.id("pi");
    let created = ctx.now_ms / 1000;
    let secret = app.ids.id("secret");
    let mut row = PaymentRow {
        seq: 0,
        client_secret: format!("{id}_{secret}"),
        id,
        created,
        created_ms: ctx.now_ms,
        amount: p.amount,
        currency: p.currency,
        customer: p.customer,
        description: p.description,
        payment_method: p.payment_method.clone(),
        status: String::new(),
        metadata: serde_json::to_string(&p.metadata).unwrap_or_else(|_| "{}".into()),
        transfer_destination: p.transfer_destination,
        latest_charge: None,
        last_payment_error: None,
        next_action: None,
        amount_received: 0,
        amount_refunded: 0,
        idempotency_key: ctx.key.clone(),
        request_id: ctx.request_id.clone(),
        settle_at_ms: None,
    };
    let mut kinds: Vec<&'static str> = vec!["payment_intent.created"];
    let mut decline = None;
    match (&p.payment_method, p.confirm) {
        (None, _) => row.status = "requires_payment_method".into(),
        (Some(_), false) => row.status = "requires_confirmation".into(),
        (Some(pm), true) => match cards::confirm(pm, p.off_session) {
            CardOutcome::Succeeded => {
                row.status = "succeeded".into();
                row.latest_charge = Some(app.ids.id("ch"));
                row.amount_received = row.amount;
                kinds.push("payment_intent.succeeded");
            }
            CardOutcome::Processing => {
                row.status = "processing".into();
                row.settle_at_ms =
                    Some(ctx.now_ms + app.config.processing_settle.as_millis() as i64);
                kinds.push("payment_intent.processing");
            }
            CardOutcome::RequiresAction(next_action) => {
                row.status = "requires_action".into();
                row.next_action = Some(next_action.to_string());
                kinds.push("payment_intent.requires_action");
            }
            CardOutcome::Declined(mut e) => {
                let charge = app.ids.id("ch");
                row.status = "requires_payment_method".into();
                row.latest_charge = Some(charge.clone());
                e.charge = Some(charge);
                let mut lpe = e.object();
                if let Some(obj) = lpe.as_object_mut() {
                    obj.insert(
                        "payment_method".into(),
                        json!({ "id": pm, "object": "payment_method" }),
                    );
                }
                row.last_payment_error = Some(lpe.to_string());
                kinds.push("payment_intent.payment_failed");
                decline = Some(e);
            }
        },
    }
    // Rendered once: each event carries these bytes, and a success answers them.
    let object_json = objects::payment_intent_json(&row);
    let events = kinds
        .into_iter()
        .map(|k| new_event(app, ctx, created, k, &object_json))
        .collect();
    let (status, body) = match decline {
        Some(mut e) => {
            e.payment_intent = Some(objects::payment_intent(&row));
            (e.status, e.body())
        }
        None => (StatusCode::OK, object_json),
    };
    Execution {
        row,
        events,
        status,
        body,
    }
}

/// `POST /v1/payment_intents`: the shared create path ([`Creation`]) around [`execute`].
pub(crate) async fn create(
    State(app): State<Shared>,
    ConnectInfo(conn): ConnectInfo<ConnHandle>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (mut creation, params) =
        match Creation::begin(&app, conn, &headers, PATH, &body, validate).await {
            Ok(begun) => begun,
            Err(response) => return response,
        };
    let exec = execute(&app, &creation.ctx, params);
    let (status, body) = creation.answer((exec.status, exec.body));
    let commit = PaymentCommit {
        row: exec.row,
        events: exec.events,
        key: creation.key_record(&app, status, &body),
        webhooks_due_ms: app.webhooks_due_ms(creation.ctx.now_ms),
    };
    // The claim is held until the commit has finished, even if the client hangs up first.
    if let Err(e) = app.store.commit_payment(commit, creation.held.take()).await {
        return creation.ctx.internal("payment commit", &e);
    }
    creation.committed(&app, status, body)
}

fn validate(pairs: &Pairs) -> Result<form::PaymentIntentParams, ApiError> {
    let p = form::payment_intent_params(pairs)?;
    if let Some(pm) = &p.payment_method
        && !cards::is_known(pm)
    {
        return Err(ApiError::invalid_param(
            "resource_missing",
            "payment_method",
            format!("No such PaymentMethod: '{pm}'"),
        ));
    }
    Ok(p)
}

/// `GET /v1/payment_intents/{id}[?expand[]=latest_charge]`.
pub(crate) async fn retrieve(
    State(app): State<Shared>,
    ConnectInfo(conn): ConnectInfo<ConnHandle>,
    headers: HeaderMap,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Response {
    let path = format!("{PATH}/{id}");
    let (expand, query_error) = expand::requested(raw.as_deref(), expand::PAYMENT_INTENT);
    let found = Retrieve {
        path: &path,
        param: "intent",
        kind: "payment_intent",
        what: "payment retrieve",
        query_error,
    };
    found
        .run(app, conn, &headers, id, |app, id| async move {
            let row = app.store.payment(&id).await?;
            Ok(row.map(|row| {
                let mut pi = objects::payment_intent(&row);
                if expand.iter().any(|f| f == "latest_charge") && row.latest_charge.is_some() {
                    pi["latest_charge"] = objects::charge(&row, row.amount_refunded);
                }
                pi
            }))
        })
        .await
}

/// `GET /v1/payment_intents?customer=&created[gte]=&created[lte]=&limit=&starting_after=`.
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
    let worker = app.clone();
    let page = detached(async move {
        settle_due(&worker).await?;
        let before_seq = match &filter.starting_after {
            None => Some(i64::MAX),
            Some(id) => worker.store.payment(id).await?.map(|r| r.seq),
        };
        let Some(before_seq) = before_seq else {
            return Ok(None);
        };
        let rows = worker
            .store
            .list_payments(
                filter.filter("customer"),
                filter.created.gte,
                filter.created.lte,
                before_seq,
                filter.limit + 1,
            )
            .await?;
        Ok(Some((rows, filter.limit)))
    })
    .await;
    match page {
        Ok(Some((mut rows, limit))) => {
            let has_more = rows.len() as i64 > limit;
            rows.truncate(limit as usize);
            let data = rows.iter().map(objects::payment_intent).collect();
            lookup::page(&ctx, PATH, data, has_more)
        }
        Ok(None) => ctx.error(&ApiError::invalid_param(
            "resource_missing",
            "starting_after",
            "No such payment_intent given as starting_after",
        )),
        Err(e) => ctx.internal("payment list", &e),
    }
}

/// `GET /v1/payment_intents/search?query=metadata['k']:'v'`: sees a payment only `search_lag` after creation.
pub(crate) async fn search(
    State(app): State<Shared>,
    ConnectInfo(conn): ConnectInfo<ConnHandle>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    let path = format!("{PATH}/search");
    let raw = raw.as_deref();
    let (ctx, (query, limit, page)) =
        match lookup::begin_query(&app, conn, &headers, &path, raw, search_params).await {
            Ok(begun) => begun,
            Err(response) => return response,
        };
    let visible_ms = ctx.now_ms - app.config.search_lag.as_millis() as i64;
    let worker = app.clone();
    let rows = detached(async move {
        settle_due(&worker).await?;
        worker
            .store
            .payments_visible(visible_ms, AUDIT_PAYMENTS_MAX)
            .await
    })
    .await;
    match rows {
        Ok(rows) => {
            let matching: Vec<&PaymentRow> = rows
                .iter()
                .filter(|r| r.seq < page && query.matches(r))
                .collect();
            let has_more = matching.len() > limit;
            let taken = &matching[..matching.len().min(limit)];
            let next_page = if has_more {
                taken.last().map(|r| r.seq.to_string())
            } else {
                None
            };
            let data: Vec<serde_json::Value> =
                taken.iter().map(|r| objects::payment_intent(r)).collect();
            let v = json!({
                "object": "search_result",
                "data": data,
                "has_more": has_more,
                "next_page": next_page,
                "url": path,
            });
            lookup::found(&ctx, &v)
        }
        Err(e) => ctx.internal("payment search", &e),
    }
}

fn search_params(pairs: &Pairs) -> Result<(Query, usize, i64), ApiError> {
    let mut query = None;
    let mut limit = None;
    let mut page = i64::MAX;
    for (k, v) in pairs {
        match k.as_str() {
            "query" => {
                if v.chars().count() > SEARCH_QUERY_LEN_MAX {
                    return Err(ApiError::invalid_param(
                        "parameter_invalid_string",
                        k,
                        "Search query is too long",
                    ));
                }
                query =
                    Some(Query::parse(v).map_err(|why| {
                        ApiError::invalid_param("parameter_invalid_string", k, why)
                    })?);
            }
            "limit" => limit = Some(v.as_str()),
            "page" => {
                page = v.parse().map_err(|_| {
                    ApiError::invalid_param("parameter_invalid_string", k, "Invalid page")
                })?
            }
            other => return Err(form::unknown(other)),
        }
    }
    let query = query.ok_or_else(|| {
        ApiError::invalid_param(
            "parameter_missing",
            "query",
            "Missing required param: query.",
        )
    })?;
    Ok((query, form::limit(limit)? as usize, page))
}

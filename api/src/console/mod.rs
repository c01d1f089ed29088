//! The on-call console at `/console`: sign in with an on-call key, see the tenant's operations by state
//! with the last hour's chart, filter and search them with keyset pages, open one as its evidence
//! chain, resolve a `needs_attention` one with a reason (the CLI's rules: the ledger's `resolve`), export
//! the chain as JSON. Server-rendered HTML that works without scripts; the overview and lists update
//! themselves through one same-origin script (`live`); every query is scoped to the session's
//! tenant (another tenant's operation is "not found"); the processor object is shown only through its
//! redacted summary.

pub mod advice;
pub mod bulk;
pub mod evidence;
pub mod live;
pub mod outage;
pub mod refunds;
pub mod session;
pub mod views;

use crate::errors::{ErrorCode, HttpError};
use crate::page::{ERROR_CODE_HEADER, security_headers};
use crate::state::AppState;
use axum::extract::Request;
use axum::extract::rejection::FormRejection;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use evidence::{chain, redacted, timeline, webhook_summary};
use payonce_core::clock::Timestamp;
use payonce_core::id::OperationId;
use payonce_core::state::Status;
use payonce_core::summary::summary;
use payonce_ledger::console::{CONSOLE_PAGE_MAX, Chart, OperationQuery};
use payonce_ledger::{DETAIL_LEN_MAX, Operation, OperationEvent, Resolution, Resolve};
use payonce_processor::Retrieved;
use serde_json::{Value, json};
use session::{OnCall, SESSION_COOKIE, SESSION_TTL, SIGN_IN_COOKIE, SIGN_IN_FORM_TTL};
use std::collections::HashMap;
use std::time::Duration;

/// Operations per list page unless `limit` says otherwise (at most [`CONSOLE_PAGE_MAX`]).
pub const PAGE_SIZE_DEFAULT: u32 = 50;
/// The overview chart: this many buckets of [`CHART_BUCKET`] (the last hour).
pub const CHART_BUCKETS: u32 = 12;
/// One chart bucket.
pub const CHART_BUCKET: Duration = Duration::from_secs(5 * 60);
/// Longest search text looked up.
pub const SEARCH_LEN_MAX: usize = 255;
pub use live::REFRESH;

/// The console's Content-Security-Policy: the confirmation page's, plus scripts and fetches from the
/// console's own origin (the live refresh); inline script stays forbidden.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; img-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The confirmation page's security headers with the console's CSP.
async fn console_headers(request: Request, next: Next) -> Response {
    let mut r = security_headers(request, next).await;
    r.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    r
}

/// The console's routes, behind the page security headers the confirmation page sends (with the
/// console's CSP); its static script is outside them, cacheable.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/console", get(overview))
        .route("/console/sign-in", get(sign_in_form))
        .route("/console/sign-in", post(sign_in))
        .route("/console/sign-out", post(sign_out))
        .route("/console/operations", get(list))
        .route("/console/operations/{id}", get(operation))
        .route("/console/operations/{id}/export", get(export))
        .route("/console/operations/{id}/resolve", post(resolve))
        .route("/console/resolve-many", get(bulk::show).post(bulk::resolve))
        .route(
            "/console/operations/{id}/approve-refund",
            post(refunds::approve),
        )
        .route(
            "/console/operations/{id}/decline-refund",
            post(refunds::decline),
        )
        .route("/static/console.css", get(stylesheet))
        .layer(middleware::from_fn(console_headers))
        .route("/console/assets/{file}", get(live::asset))
}

fn html(status: StatusCode, markup: maud::Markup) -> Response {
    (status, Html(markup.into_string())).into_response()
}

/// A refusal as a page with the stable code in its header (and the sign-in form for `unauthorized`).
fn refuse(state: &AppState, csrf: Option<&str>, e: HttpError) -> Response {
    let code = e.code();
    if code == ErrorCode::Internal {
        // HttpError logs its cause when answered as JSON; a page answers instead, so log here.
        tracing::error!(message = e.message(), "console request failed");
    }
    let mut response = if code == ErrorCode::Unauthorized {
        let token = session::new_token();
        let mut r = html(code.status(), views::sign_in(&token, Some(e.message())));
        set_cookie(
            &mut r,
            &session::set_cookie(state, SIGN_IN_COOKIE, &token, SIGN_IN_FORM_TTL),
        );
        r
    } else {
        html(
            code.status(),
            views::refusal(csrf, code.code(), e.message()),
        )
    };
    response
        .headers_mut()
        .insert(ERROR_CODE_HEADER, HeaderValue::from_static(code.code()));
    response
}

fn set_cookie(r: &mut Response, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
}

/// The signed-in caller, or the refusal page. Signed in, the outage banner's view of the ledger is
/// brought up to date (at most one read per `outage::LEDGER_READ_TTL`).
async fn caller(state: &AppState, headers: &HeaderMap) -> Result<OnCall, Response> {
    let who = session::current(state, headers)
        .await
        .map_err(|e| refuse(state, None, e))?;
    outage::refresh(state.ledger().outage()).await;
    Ok(who)
}

/// `GET /static/console.css`.
async fn stylesheet() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        views::STYLESHEET,
    )
        .into_response()
}

/// `GET /console/sign-in`.
async fn sign_in_form(State(state): State<AppState>) -> Response {
    let token = session::new_token();
    let mut r = html(StatusCode::OK, views::sign_in(&token, None));
    // A sign-in form token in an HttpOnly cookie and the form (double submit): another site cannot
    // sign a browser in to the attacker's tenant.
    let cookie = session::set_cookie(&state, SIGN_IN_COOKIE, &token, SIGN_IN_FORM_TTL);
    set_cookie(&mut r, &cookie);
    r
}

/// `POST /console/sign-in` (form: `key`, `csrf`).
async fn sign_in(
    State(state): State<AppState>,
    headers: HeaderMap,
    form: Result<Form<HashMap<String, String>>, FormRejection>,
) -> Response {
    let form = form.map(|Form(f)| f).unwrap_or_default();
    let expected = session::cookie(&headers, SIGN_IN_COOKIE).unwrap_or_default();
    if !session::tokens_equal(form.get("csrf").map(String::as_str), &expected) {
        return refuse(&state, None, session::csrf_refused());
    }
    let key = form.get("key").map(String::as_str).unwrap_or_default();
    match session::sign_in(&state, key).await {
        Ok(id) => {
            let mut r = Redirect::to("/console").into_response();
            set_cookie(
                &mut r,
                &session::set_cookie(&state, SESSION_COOKIE, &id, SESSION_TTL),
            );
            set_cookie(
                &mut r,
                &session::set_cookie(&state, SIGN_IN_COOKIE, "", Duration::ZERO),
            );
            r
        }
        Err(session::SignInError::Unknown) => refuse(
            &state,
            None,
            HttpError::new(
                ErrorCode::Unauthorized,
                "unknown, revoked or expired API key",
            ),
        ),
        Err(session::SignInError::NotOnCall) => refuse(
            &state,
            None,
            HttpError::forbidden("sign in to the console (only on-call keys may)"),
        ),
        Err(session::SignInError::Ledger(e)) => refuse(&state, None, e),
    }
}

/// `POST /console/sign-out` (form: `csrf`).
async fn sign_out(
    State(state): State<AppState>,
    headers: HeaderMap,
    form: Result<Form<HashMap<String, String>>, FormRejection>,
) -> Response {
    let who = match caller(&state, &headers).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let form = form.map(|Form(f)| f).unwrap_or_default();
    if let Err(e) = who.check_csrf(form.get("csrf").map(String::as_str)) {
        return refuse(&state, Some(&who.csrf), e);
    }
    if let Err(e) = state
        .ledger()
        .console()
        .end_session(&who.session_hash, state.now())
        .await
    {
        return refuse(&state, Some(&who.csrf), e.into());
    }
    tracing::info!(tenant = %who.tenant, actor = %who.actor(), "console sign-out");
    let mut r = Redirect::to("/console/sign-in").into_response();
    set_cookie(
        &mut r,
        &session::set_cookie(&state, SESSION_COOKIE, "", Duration::ZERO),
    );
    r
}

/// `GET /console`.
async fn overview(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let who = match caller(&state, &headers).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let now = state.now();
    match state
        .ledger()
        .console()
        .overview(
            &who.tenant,
            Chart {
                bucket: CHART_BUCKET,
                buckets: CHART_BUCKETS,
            },
            now,
        )
        .await
    {
        Ok(o) => html(
            StatusCode::OK,
            views::overview(
                &who.csrf,
                &o,
                now.as_millis(),
                state.metrics().webhooks_refused(),
            ),
        ),
        Err(e) => refuse(&state, Some(&who.csrf), e.into()),
    }
}

fn invalid(why: impl Into<String>) -> HttpError {
    HttpError::new(ErrorCode::InvalidRequest, why)
}

/// Parses the list's query string into filters and the ledger query.
fn parse_list(
    raw: &HashMap<String, String>,
    now_ms: i64,
) -> Result<(views::Filters, OperationQuery), HttpError> {
    let get = |k: &str| raw.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
    let status = get("status")
        .map(|s| Status::parse(s).ok_or_else(|| invalid(format!("{s:?} is not a state"))))
        .transpose()?;
    let since = get("since")
        .map(|s| crate::keys::parse_lifetime(s, false).map_err(|e| invalid(e.to_string())))
        .transpose()?;
    let q = get("q").map(str::to_string);
    if q.as_ref().is_some_and(|q| q.len() > SEARCH_LEN_MAX) {
        return Err(invalid(format!(
            "the search text is longer than {SEARCH_LEN_MAX} bytes"
        )));
    }
    let limit = get("limit")
        .map(|l| {
            l.parse::<u32>()
                .ok()
                .filter(|l| (1..=CONSOLE_PAGE_MAX).contains(l))
                .ok_or_else(|| invalid(format!("limit must be 1 to {CONSOLE_PAGE_MAX}")))
        })
        .transpose()?
        .unwrap_or(PAGE_SIZE_DEFAULT);
    let after = get("after")
        .map(|a| {
            a.split_once('.')
                .and_then(|(at, id)| {
                    let at = Timestamp::from_millis(at.parse::<i64>().ok()?);
                    Some((at, OperationId::parse(id).ok()?))
                })
                .ok_or_else(|| invalid("after must be a cursor from a previous page"))
        })
        .transpose()?;
    let filters = views::Filters {
        status: status.map(|s| s.as_str().to_string()).unwrap_or_default(),
        since: get("since").unwrap_or_default().to_string(),
        q: q.clone().unwrap_or_default(),
        limit,
        after: after
            .as_ref()
            .map(|(at, id)| format!("{}.{id}", at.as_millis()))
            .unwrap_or_default(),
    };
    let query = OperationQuery {
        status,
        created_from: since.map(|d| Timestamp::from_millis(now_ms).saturating_sub_span(d)),
        created_before: None,
        search: q,
        after,
        limit,
    };
    Ok((filters, query))
}

/// `GET /console/operations?status=&since=&q=&after=&limit=`.
async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(raw): Query<HashMap<String, String>>,
) -> Response {
    let who = match caller(&state, &headers).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let now = state.now_ms();
    let (filters, mut query) = match parse_list(&raw, now) {
        Ok(p) => p,
        Err(e) => return refuse(&state, Some(&who.csrf), e),
    };
    // One row more than the page tells whether an older page exists.
    let page = query.limit;
    query.limit = page + 1;
    let mut ops = match state.ledger().console().page(&who.tenant, &query).await {
        Ok(ops) => ops,
        Err(e) => return refuse(&state, Some(&who.csrf), e.into()),
    };
    let next = (ops.len() > page as usize).then(|| {
        ops.truncate(page as usize);
        ops.last()
            .map(|o| format!("{}.{}", o.created_at, o.id))
            .unwrap_or_default()
    });
    html(
        StatusCode::OK,
        views::list(&who.csrf, &filters, &ops, next, now),
    )
}

/// `GET /console/operations/{id}`.
async fn operation(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let who = match caller(&state, &headers).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    operation_page(&state, &who, &id, views::ResolveForm::default()).await
}

/// The operation's page, its resolve form as given (empty, or refused with the typed values).
async fn operation_page(
    state: &AppState,
    who: &OnCall,
    id: &str,
    form: views::ResolveForm,
) -> Response {
    let found = match chain(state, who, id).await {
        Ok((op, events, related)) => refunds::beside(state, who, &op)
            .await
            .map(|beside| (op, events, related, beside)),
        Err(e) => Err(e),
    };
    match found {
        Ok((op, events, related, beside)) => {
            let processor = op.result.as_ref().map(summary);
            let now = state.now_ms();
            let status = if form.error.is_some() {
                StatusCode::BAD_REQUEST
            } else {
                StatusCode::OK
            };
            let extras = views::Extras {
                read_only: who.read_only,
                attention: attention(state, &op, &events).await,
                submissions_seen: advice::submissions_seen(op.submit_count, &events),
                resolve: form,
            };
            let mut r = html(
                status,
                views::operation(
                    &who.csrf,
                    &op,
                    processor.as_ref(),
                    refunds::section(&who.csrf, &op, beside.as_ref(), now, who.read_only),
                    &timeline(&events, &related),
                    &extras,
                    now,
                ),
            );
            if let Some((code, _)) = &extras.resolve.error
                && let Ok(v) = HeaderValue::from_str(code)
            {
                r.headers_mut().insert(ERROR_CODE_HEADER, v);
            }
            r
        }
        Err(e) => refuse(state, Some(&who.csrf), e),
    }
}

/// What on-call decides with, for an operation in `needs_attention` or `unknown`: the reason and
/// the runbook's advice (needs_attention only), the ledger's and the processor's facts side by side
/// (the processor's read now when it can be, else as the ledger recorded them) and the raw error.
async fn attention(
    state: &AppState,
    op: &Operation,
    events: &[OperationEvent],
) -> Option<views::Attention> {
    if !matches!(op.status, Status::NeedsAttention | Status::Unknown) {
        return None;
    }
    let reason = (op.status == Status::NeedsAttention).then(|| advice::Reason::of(events));
    let (source, object) = match (&op.external_ref, state.processor_for(op)) {
        (Some(reference), Some(processor)) => match processor.retrieve(reference).await {
            Retrieved::Found(found) => (
                format!("read from the processor at {}", views::utc(state.now_ms())),
                Some(found.object),
            ),
            Retrieved::NotFound => (format!("the processor has no object {reference}"), None),
            Retrieved::Unavailable { reason } => (
                format!("the processor could not be asked ({reason}); as the ledger recorded it"),
                op.result.clone(),
            ),
        },
        (Some(_), None) => ("as the ledger recorded it".to_string(), op.result.clone()),
        (None, _) => (
            "no processor reference: look the operation id up in the processor's dashboard"
                .to_string(),
            None,
        ),
    };
    let raw_error = events
        .iter()
        .rev()
        .find_map(|e| e.detail.clone())
        .into_iter()
        .chain(op.failure_message.clone())
        .collect::<Vec<_>>();
    Some(views::Attention {
        reason,
        processor: views::ProcessorFacts::of(source, object.as_ref()),
        raw_error,
    })
}

/// `GET /console/operations/{id}/export`: the evidence chain as one JSON document.
async fn export(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let who = match caller(&state, &headers).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    match chain(&state, &who, &id).await {
        Ok((op, events, related)) => {
            let webhooks: Vec<Value> = related
                .webhooks
                .iter()
                .map(|w| {
                    json!({"processor": w.processor, "event_id": w.event_id, "event_type": w.event_type,
                           "received_at_ms": w.received_at, "applied_at_ms": w.applied_at,
                           "outcome": w.outcome, "object": webhook_summary(&w.payload)})
                })
                .collect();
            let body = json!({
                "exported_at_ms": state.now_ms(),
                "exported_by": who.actor(),
                "operation": redacted(&op),
                "events": events,
                "approvals": related.approvals,
                "links": related.links,
                "webhooks": webhooks,
                "tool_calls": related.tool_calls,
                "timeline": timeline(&events, &related),
            });
            let mut r = Json(body).into_response();
            if let Ok(v) =
                HeaderValue::from_str(&format!("attachment; filename=\"{}-evidence.json\"", op.id))
            {
                r.headers_mut().insert(header::CONTENT_DISPOSITION, v);
            }
            r
        }
        Err(e) => refuse(&state, Some(&who.csrf), e),
    }
}

/// `POST /console/operations/{id}/resolve` (form: `csrf`, `as`, `reason`, `reference`). A refused
/// resolution (no reason, no reference for succeeded) keeps on-call on the operation's page with the
/// error beside the form and what they typed still in it.
async fn resolve(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    form: Result<Form<HashMap<String, String>>, FormRejection>,
) -> Response {
    let who = match caller(&state, &headers).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let form = form.map(|Form(f)| f).unwrap_or_default();
    if let Err(e) = who.check_csrf(form.get("csrf").map(String::as_str)) {
        return refuse(&state, Some(&who.csrf), e);
    }
    if let Err(e) = who.require_writer("resolve operations") {
        return refuse(&state, Some(&who.csrf), e);
    }
    match resolve_checked(&state, &who, &id, &form).await {
        Ok(id) => Redirect::to(&format!("/console/operations/{id}")).into_response(),
        Err(e) if e.code() == ErrorCode::InvalidRequest => {
            let typed = |k: &str| form.get(k).cloned().unwrap_or_default();
            let kept = views::ResolveForm {
                error: Some((e.code().code().to_string(), e.message().to_string())),
                outcome: typed("as"),
                reference: typed("reference"),
                reason: typed("reason"),
            };
            operation_page(&state, &who, &id, kept).await
        }
        Err(e) => refuse(&state, Some(&who.csrf), e),
    }
}

/// A form that changes one operation: the signed-in on-call person, the CSRF token, then `act`;
/// success goes back to the operation's page, a refusal is shown on the console's error page.
pub(crate) async fn operation_form(
    state: &AppState,
    headers: &HeaderMap,
    form: Result<Form<HashMap<String, String>>, FormRejection>,
    act: impl AsyncFnOnce(&session::OnCall, &HashMap<String, String>) -> Result<OperationId, HttpError>,
) -> Response {
    let who = match caller(state, headers).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let form = form.map(|Form(f)| f).unwrap_or_default();
    if let Err(e) = who.check_csrf(form.get("csrf").map(String::as_str)) {
        return refuse(state, Some(&who.csrf), e);
    }
    if let Err(e) = who.require_writer("change operations") {
        return refuse(state, Some(&who.csrf), e);
    }
    match act(&who, &form).await {
        Ok(id) => Redirect::to(&format!("/console/operations/{id}")).into_response(),
        Err(e) => refuse(state, Some(&who.csrf), e),
    }
}

async fn resolve_checked(
    state: &AppState,
    who: &OnCall,
    raw_id: &str,
    form: &HashMap<String, String>,
) -> Result<OperationId, HttpError> {
    let id = OperationId::parse(raw_id).map_err(|_| HttpError::not_found())?;
    // Tenant scope first: another tenant's operation is not found, whatever the form says.
    state.ledger().get(&who.tenant, &id).await?;
    let field = |k: &str| form.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
    let reason = field("reason").ok_or_else(|| {
        invalid("a reason is required: say what you checked (nothing was changed)")
    })?;
    if reason.chars().count() > DETAIL_LEN_MAX {
        return Err(invalid(format!(
            "the reason is longer than {DETAIL_LEN_MAX} characters"
        )));
    }
    let resolution = match field("as") {
        Some("succeeded") => Resolution::Succeeded {
            reference: field("reference")
                .ok_or_else(|| invalid("succeeded needs the processor reference"))?
                .to_string(),
        },
        Some("failed") => Resolution::Failed,
        Some("retry") => Resolution::RetrySameKey,
        _ => return Err(invalid("as must be succeeded, failed or retry")),
    };
    // The CLI's resolve (`oncall::resolve` is this call plus its printing): the same rules and the
    // same audit event, with the console's actor.
    let actor = who.actor();
    let request = Resolve {
        id: &id,
        resolution: &resolution,
        actor: &actor,
        reason,
    };
    state
        .ledger()
        .resolve_in_tenant(&who.tenant, &request, state.now())
        .await?;
    Ok(id)
}

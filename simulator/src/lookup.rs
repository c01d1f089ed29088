//! What every lookup (`GET` of payments, refunds, events, and the admin audits' reads) shares: the
//! read faults, the query parsed, the one-object `GET` ([`Retrieve`]) and a list's page.
//!
//! Every lookup settles what is due first ([`settle_due`]), so what it returns never lags behind the
//! configured delays. Failure: a store error is logged once and answered with an opaque 500.

use crate::app::Shared;
use crate::connection::ConnHandle;
use crate::context::Ctx;
use crate::error::ApiError;
use crate::faults::FaultKind;
use crate::form::{self, ListQuery, ListShape, Pairs};
use crate::settlement::settle_due;
use crate::store::detached;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

/// One `GET` of a stored object (a payment intent, a refund): the read faults, then what is due
/// settled, then the object; Stripe's missing-resource error naming `param` and `kind` when there is
/// none.
pub(crate) struct Retrieve<'a> {
    /// The request path.
    pub path: &'a str,
    /// The parameter Stripe's 404 names.
    pub param: &'a str,
    /// The object kind Stripe's 404 names.
    pub kind: &'a str,
    /// What failed, for an internal error.
    pub what: &'a str,
    /// Why the query was refused (an unknown parameter, a field that cannot be expanded), if it was.
    pub query_error: Option<ApiError>,
}

impl Retrieve<'_> {
    /// Answers the `GET`: `fetch` (in its own task, after settling) finds the object `id` names.
    pub(crate) async fn run<F, Fut>(
        &self,
        app: Shared,
        conn: ConnHandle,
        headers: &HeaderMap,
        id: String,
        fetch: F,
    ) -> Response
    where
        F: FnOnce(Shared, String) -> Fut + Send + 'static,
        Fut: Future<Output = Result<Option<serde_json::Value>, sqlx::Error>> + Send + 'static,
    {
        let ctx = match begin(&app, conn, headers, self.path, None).await {
            Ok(ctx) => ctx,
            Err(response) => return response,
        };
        if let Some(e) = &self.query_error {
            return ctx.error(e);
        }
        let worker = app.clone();
        let missing = ApiError::missing(self.param, self.kind, &id);
        let fetched = detached(async move {
            settle_due(&worker).await?;
            fetch(worker, id).await
        })
        .await;
        match fetched {
            Ok(Some(object)) => found(&ctx, &object),
            Ok(None) => ctx.error(&missing),
            Err(e) => ctx.internal(self.what, &e),
        }
    }
}

/// A lookup's start: its context ([`Ctx::begin`], with the query's `pairs` for the audit), then the
/// read faults. `Err` is the response to send.
async fn begin(
    app: &Shared,
    conn: ConnHandle,
    headers: &HeaderMap,
    path: &str,
    pairs: Option<&Pairs>,
) -> Result<Ctx, Response> {
    let ctx = Ctx::begin(app, conn, headers, "GET", path, pairs)?;
    match read_faults(app, &ctx).await {
        Some(refused) => Err(refused),
        None => Ok(ctx),
    }
}

/// A lookup with a query string: [`begin`], then the query parsed by `parse`. `Err` is the
/// response to send.
pub(crate) async fn begin_query<P>(
    app: &Shared,
    conn: ConnHandle,
    headers: &HeaderMap,
    path: &str,
    raw: Option<&str>,
    parse: impl FnOnce(&Pairs) -> Result<P, ApiError>,
) -> Result<(Ctx, P), Response> {
    let pairs = form::parse_pairs(raw.unwrap_or("").as_bytes());
    let ctx = begin(app, conn, headers, path, pairs.as_ref().ok()).await?;
    match pairs.and_then(|p| parse(&p)) {
        Ok(parsed) => Ok((ctx, parsed)),
        Err(e) => Err(ctx.error(&e)),
    }
}

/// A list lookup: [`begin_query`] with the list parameters `shape` takes ([`ListQuery::parse`]).
pub(crate) async fn begin_list(
    app: &Shared,
    conn: ConnHandle,
    headers: &HeaderMap,
    path: &str,
    raw: Option<&str>,
    shape: ListShape,
) -> Result<(Ctx, ListQuery), Response> {
    let parse = |pairs: &Pairs| ListQuery::parse(pairs, shape);
    begin_query(app, conn, headers, path, raw, parse).await
}

/// A found object, answered 200.
pub(crate) fn found(ctx: &Ctx, object: &serde_json::Value) -> Response {
    ctx.finish(ctx.respond(
        StatusCode::OK,
        serde_json::to_vec(object).unwrap_or_default(),
        false,
    ))
}

/// A page of a list at `path`, answered 200.
pub(crate) fn page(
    ctx: &Ctx,
    path: &str,
    data: Vec<serde_json::Value>,
    has_more: bool,
) -> Response {
    found(ctx, &crate::objects::list(path, data, has_more))
}

/// Faults on read endpoints: `hang` and `error_500_*` apply before reading (`reset` and 429 already did).
async fn read_faults(app: &Shared, ctx: &Ctx) -> Option<Response> {
    match ctx.fault {
        Some(FaultKind::Hang) => Some(ctx.hang(app).await),
        Some(FaultKind::Error500BeforeCommit | FaultKind::Error500AfterCommit) => {
            Some(ctx.error(&ApiError::internal("An unknown error occurred.")))
        }
        _ => None,
    }
}

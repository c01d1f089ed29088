//! One Adyen request from arrival to the start of execution: the request audited, `reset` and
//! `rate_limit_429` applied, the `X-API-Key` checked, the limiter asked, the `Idempotency-Key` (at most
//! [`ADYEN_KEY_LEN_MAX`] characters) read, the JSON body parsed against the fields the endpoint knows,
//! the key claimed (or its saved result replayed, or the request refused with `704`), and the faults
//! that strike before execution. Failure: every refusal is an Adyen `ServiceError` answered at once.

use super::{ADYEN_KEY_LEN_MAX, IN_PROGRESS, ServiceError};
use crate::app::{App, Shared};
use crate::connection::ConnHandle;
use crate::faults::FaultKind;
use crate::idempotency::{self, Held, KeyState};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};

/// One Adyen request's context.
pub(super) struct Ctx {
    pub(super) key: Option<String>,
    pub(super) fault: Option<FaultKind>,
    pub(super) now_ms: i64,
    pub(super) request_id: String,
    conn: ConnHandle,
}

impl Ctx {
    /// A JSON response, echoing the key.
    pub(super) fn respond(&self, status: StatusCode, body: Vec<u8>) -> Response {
        let mut response = (status, body).into_response();
        let h = response.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        // Adyen echoes the key: "check the Idempotency-Key HTTP header returned in the response".
        if let Some(key) = &self.key
            && let Ok(v) = HeaderValue::from_str(key)
        {
            h.insert("idempotency-key", v);
        }
        response
    }

    /// An error response, marked `Transient-Error: true` when a retry may succeed.
    pub(super) fn error(&self, e: &ServiceError) -> Response {
        let mut response = self.respond(e.status, e.body());
        if e.transient {
            response
                .headers_mut()
                .insert("transient-error", HeaderValue::from_static("true"));
        }
        response
    }

    /// A storage failure: logged once here, opaque to the client.
    pub(super) fn internal(&self, what: &str, e: &dyn std::fmt::Display) -> Response {
        tracing::error!(request_id = %self.request_id, error = %e, "simulator adyen {what} failed");
        self.error(&ServiceError::internal())
    }

    /// Sends a response after commit, or aborts the connection for `drop_after_commit`.
    pub(super) fn finish(&self, response: Response) -> Response {
        if self.fault == Some(FaultKind::DropAfterCommit) {
            self.conn.kill();
        }
        response
    }

    async fn hang(&self, app: &Shared) -> Response {
        let mut shutdown = app.shutdown.clone();
        let _ = shutdown.wait_for(|stop| *stop).await;
        self.conn.kill();
        StatusCode::SERVICE_UNAVAILABLE.into_response()
    }
}

/// JSON paths of every leaf (`amount.value`), for the request audit.
fn leaf_paths(prefix: &str, v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                leaf_paths(&path, child, out);
            }
        }
        _ => out.push(prefix.to_string()),
    }
}

/// The body with every object's keys sorted: the same JSON however its fields were ordered.
fn canonical(v: &Value) -> String {
    fn sort(v: &Value) -> Value {
        match v {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                let mut out = Map::new();
                for k in keys {
                    out.insert(k.clone(), sort(&map[k]));
                }
                Value::Object(out)
            }
            Value::Array(items) => Value::Array(items.iter().map(sort).collect()),
            other => other.clone(),
        }
    }
    sort(v).to_string()
}

/// Authenticates, applies `reset` and `rate_limit_429`, reads the key and the JSON body, and claims the
/// key. `Err` is the response to send at once.
pub(super) async fn begin(
    app: &Shared,
    conn: ConnHandle,
    headers: &HeaderMap,
    path: &str,
    body: &[u8],
    fields: &[&str],
) -> Result<(Ctx, Value, Option<Held>), Response> {
    let parsed: Result<Value, _> = serde_json::from_slice(body);
    let mut ctx = arrive(app, conn, headers, path, parsed.as_ref().ok())?;
    admit(app, &mut ctx, headers, path)?;
    let body = known_fields(&ctx, parsed, fields)?;
    let held = claim(app, &ctx, path, &body).await?;
    match ctx.fault {
        Some(FaultKind::Hang) => return Err(ctx.hang(app).await),
        Some(FaultKind::Error500BeforeCommit) => {
            // Nothing reached an issuer: Adyen marks it transient, and the key runs afresh.
            let mut e = ServiceError::internal();
            e.transient = true;
            return Err(ctx.error(&e));
        }
        _ => {}
    }
    Ok((ctx, body, held))
}

/// Audits the request and decides its fault; `reset` and `rate_limit_429` answer here.
fn arrive(
    app: &App,
    conn: ConnHandle,
    headers: &HeaderMap,
    path: &str,
    parsed: Option<&Value>,
) -> Result<Ctx, Response> {
    let request_id = app.ids.id("req");
    let now = app.now_ms();
    let raw_key = headers_key(headers).map(str::to_string);
    let mut params = Vec::new();
    if let Some(v) = parsed {
        leaf_paths("", v, &mut params);
    }
    app.audit.record(crate::audit::AuditedRequest {
        request_id: request_id.clone(),
        method: "POST".into(),
        path: path.to_string(),
        idempotency_key: raw_key.clone(),
        stripe_version: None,
        param_keys: params,
        at_ms: now,
    });
    // The key is echoed only once it has been checked ([`admit`]).
    let ctx = Ctx {
        key: None,
        fault: app.faults.decide(raw_key.as_deref()),
        now_ms: now,
        request_id,
        conn,
    };
    match ctx.fault {
        Some(FaultKind::Reset) => {
            ctx.conn.kill();
            Err(StatusCode::INTERNAL_SERVER_ERROR.into_response())
        }
        Some(FaultKind::RateLimit429) => Err(ctx.error(&rate_limited())),
        _ => Ok(ctx),
    }
}

/// The `Idempotency-Key` header as sent, unchecked.
fn headers_key(headers: &HeaderMap) -> Option<&str> {
    headers.get("idempotency-key").and_then(|v| v.to_str().ok())
}

/// Checks the API key, asks the limiter, and reads the `Idempotency-Key` into the context.
fn admit(app: &App, ctx: &mut Ctx, headers: &HeaderMap, path: &str) -> Result<(), Response> {
    let authorized = headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|k| k == app.config.adyen.api_key);
    if !authorized {
        return Err(ctx.error(&ServiceError::new(
            StatusCode::UNAUTHORIZED,
            "000",
            "security",
            "HTTP Status Response - Unauthorized",
        )));
    }
    if !app.limiter.admit("POST", path, ctx.now_ms) {
        return Err(ctx.error(&rate_limited()));
    }
    if let Some(key) = headers_key(headers) {
        if key.is_empty() || key.chars().count() > ADYEN_KEY_LEN_MAX {
            return Err(ctx.error(&ServiceError::validation(
                "000",
                format!("Idempotency-Key must be 1 to {ADYEN_KEY_LEN_MAX} characters"),
            )));
        }
        ctx.key = Some(key.to_string());
    }
    Ok(())
}

/// The body, if it is a JSON object with only the endpoint's `fields` (Adyen's 702 otherwise).
fn known_fields(
    ctx: &Ctx,
    parsed: Result<Value, serde_json::Error>,
    fields: &[&str],
) -> Result<Value, Response> {
    let body = match parsed {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            return Err(ctx.error(&ServiceError::new(
                StatusCode::BAD_REQUEST,
                "702",
                "validation",
                "Unable to parse the JSON request",
            )));
        }
    };
    if let Some(unknown) = body
        .as_object()
        .and_then(|m| m.keys().find(|k| !fields.contains(&k.as_str())))
    {
        return Err(ctx.error(&ServiceError::new(
            StatusCode::BAD_REQUEST,
            "702",
            "validation",
            format!("Structure of the request contains the following unknown fields: {unknown}"),
        )));
    }
    Ok(body)
}

/// Claims the key for this body (its canonical JSON is the fingerprint): a saved result is replayed,
/// another body under the key is 422 `704`, the key in use is a transient 409 `704`.
async fn claim(app: &App, ctx: &Ctx, path: &str, body: &Value) -> Result<Option<Held>, Response> {
    let Some(key) = &ctx.key else {
        return Ok(None);
    };
    let pairs: crate::form::Pairs = vec![("json".into(), canonical(body))];
    let fp = idempotency::fingerprint("POST", path, &pairs);
    match app.key_state(key, &fp, ctx.now_ms).await {
        Ok(KeyState::Fresh(claim)) => Ok(Some(Held::new(claim, fp))),
        Ok(KeyState::Replay(saved)) => {
            let status =
                StatusCode::from_u16(saved.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            Err(ctx.finish(ctx.respond(status, saved.body)))
        }
        Ok(KeyState::Mismatch) => Err(ctx.error(&ServiceError::validation(
            IN_PROGRESS,
            "request already processed or in progress: the idempotency key was used \
             with another request body",
        ))),
        Ok(KeyState::InUse) => {
            let mut e = ServiceError::new(
                StatusCode::CONFLICT,
                IN_PROGRESS,
                "validation",
                "request already processed or in progress",
            );
            e.transient = true;
            Err(ctx.error(&e))
        }
        Err(e) => Err(ctx.internal("idempotency lookup", &e)),
    }
}

fn rate_limited() -> ServiceError {
    ServiceError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "000",
        "internal",
        "Too many requests",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_json_ignores_field_order() {
        let a: Value = serde_json::from_str(r#"{"b":1,"a":{"y":2,"x":3}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":{"x":3,"y":2},"b":1}"#).unwrap();
        assert_eq!(canonical(&a), canonical(&b));
    }
}

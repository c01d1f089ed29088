//! One `/v1` request's context ([`Ctx`]): the request audited, `reset` and `rate_limit_429` applied,
//! the API key authenticated (`Bearer` or HTTP Basic), the limiter asked, the `Idempotency-Key` and
//! `Stripe-Version` read; and the response shape every `/v1` handler shares (Stripe's headers, errors,
//! replays, `drop_after_commit`, `hang`). Failure: a refused request is answered at once with
//! Stripe's error.

use crate::app::App;
use crate::audit::AuditedRequest;
use crate::connection::ConnHandle;
use crate::error::ApiError;
use crate::faults::FaultKind;
use crate::form::{self, Pairs};
use crate::limits::IDEMPOTENCY_KEY_LEN_MAX;
use crate::objects::API_VERSION;
use crate::store::SavedResponse;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, ApiError> {
    headers
        .get(name)
        .map(|v| {
            v.to_str().map_err(|_| {
                ApiError::invalid_request("header_invalid", format!("Invalid {name} header"))
            })
        })
        .transpose()
}

/// One `/v1` request's context.
#[derive(Debug)]
pub(crate) struct Ctx {
    pub(crate) request_id: String,
    pub(crate) key: Option<String>,
    pub(crate) stripe_version: Option<String>,
    pub(crate) fault: Option<FaultKind>,
    pub(crate) now_ms: i64,
    conn: ConnHandle,
}

impl Ctx {
    /// Audits the request, applies `reset` and `rate_limit_429`, authenticates and reads the headers.
    /// `Err` is the response to send at once.
    pub(crate) fn begin(
        app: &App,
        conn: ConnHandle,
        headers: &HeaderMap,
        method: &str,
        path: &str,
        pairs: Option<&Pairs>,
    ) -> Result<Ctx, Response> {
        let request_id = app.ids.id("req");
        let now = app.now_ms();
        let raw_key = headers
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let raw_version = headers
            .get("stripe-version")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        app.audit.record(AuditedRequest {
            request_id: request_id.clone(),
            method: method.to_string(),
            path: path.to_string(),
            idempotency_key: raw_key.clone(),
            stripe_version: raw_version.clone(),
            param_keys: pairs.map(form::keys).unwrap_or_default(),
            at_ms: now,
        });
        let mut ctx = Ctx {
            request_id,
            key: None,
            stripe_version: raw_version,
            fault: None,
            now_ms: now,
            conn,
        };
        ctx.fault = app.faults.decide(raw_key.as_deref());
        match ctx.fault {
            Some(FaultKind::Reset) => {
                ctx.conn.kill();
                return Err(StatusCode::INTERNAL_SERVER_ERROR.into_response());
            }
            Some(FaultKind::RateLimit429) => return Err(ctx.error(&ApiError::rate_limited())),
            _ => {}
        }
        let authorized = header_str(headers, "authorization")
            .ok()
            .flatten()
            .is_some_and(|v| key_in_authorization(v, &app.config.api_key));
        if !authorized {
            return Err(ctx.error(&ApiError::unauthorized()));
        }
        // Stripe's limiters run before the idempotency layer: a refusal is never stored under the key.
        if !app.limiter.admit(method, path, now) {
            return Err(ctx.error(&ApiError::rate_limited()));
        }
        let key = header_str(headers, "idempotency-key").map_err(|e| ctx.error(&e))?;
        if let Some(key) = key {
            if key.is_empty() || key.chars().count() > IDEMPOTENCY_KEY_LEN_MAX {
                return Err(ctx.error(&ApiError::invalid_request(
                    "idempotency_key_invalid",
                    format!(
                        "Idempotency keys must be 1 to {IDEMPOTENCY_KEY_LEN_MAX} characters long."
                    ),
                )));
            }
            ctx.key = Some(key.to_string());
        }
        Ok(ctx)
    }

    /// The API version events caused by this request are stamped with.
    pub(crate) fn api_version(&self) -> &str {
        self.stripe_version.as_deref().unwrap_or(API_VERSION)
    }

    /// A JSON response with Stripe's headers.
    pub(crate) fn respond(&self, status: StatusCode, body: Vec<u8>, replayed: bool) -> Response {
        let mut response = (status, body).into_response();
        let h = response.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Ok(v) = HeaderValue::from_str(&self.request_id) {
            h.insert("request-id", v);
        }
        if let Ok(v) = HeaderValue::from_str(self.api_version()) {
            h.insert("stripe-version", v);
        }
        if let Some(key) = &self.key
            && let Ok(v) = HeaderValue::from_str(key)
        {
            h.insert("idempotency-key", v);
        }
        if replayed {
            h.insert("idempotent-replayed", HeaderValue::from_static("true"));
        }
        response
    }

    /// An error response.
    pub(crate) fn error(&self, e: &ApiError) -> Response {
        let mut response = self.respond(e.status, e.body(), false);
        if let Some(retry) = e.should_retry {
            response.headers_mut().insert(
                "stripe-should-retry",
                HeaderValue::from_static(if retry { "true" } else { "false" }),
            );
        }
        response
    }

    /// A storage failure: logged once here, opaque to the client.
    pub(crate) fn internal(&self, what: &str, e: &dyn std::fmt::Display) -> Response {
        tracing::error!(request_id = %self.request_id, error = %e, "simulator {what} failed");
        self.error(&ApiError::internal("An unknown error occurred."))
    }

    /// Replays a remembered response.
    pub(crate) fn replay(&self, saved: SavedResponse) -> Response {
        let status =
            StatusCode::from_u16(saved.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        self.respond(status, saved.body, true)
    }

    /// Sends a response after commit, or aborts the connection for `drop_after_commit`.
    pub(crate) fn finish(&self, response: Response) -> Response {
        if self.fault == Some(FaultKind::DropAfterCommit) {
            self.conn.kill();
        }
        response
    }

    /// Never answers: waits for shutdown (or for the client to hang up, which drops this future), then aborts.
    pub(crate) async fn hang(&self, app: &App) -> Response {
        let mut shutdown = app.shutdown.clone();
        let _ = shutdown.wait_for(|stop| *stop).await;
        self.conn.kill();
        StatusCode::SERVICE_UNAVAILABLE.into_response()
    }
}

/// Whether an `Authorization` value carries `key` as Stripe accepts it: `Bearer KEY`, or HTTP Basic
/// with the key as the user name and an empty password (`curl -u KEY:`, Stripe's own examples).
fn key_in_authorization(value: &str, key: &str) -> bool {
    if let Some(token) = value.strip_prefix("Bearer ") {
        return token == key;
    }
    value.strip_prefix("Basic ").is_some_and(|encoded| {
        let encoded = encoded.trim();
        encoded == base64(&format!("{key}:")) || encoded == base64(key)
    })
}

/// Standard base64 with padding (RFC 4648, section 4), for the few bytes of a Basic credential.
fn base64(text: &str) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod basic_auth_tests {
    use super::*;

    #[test]
    fn bearer_and_basic_carry_the_key_and_nothing_else_does() {
        assert_eq!(base64("sk_test_payonce:"), "c2tfdGVzdF9wYXlvbmNlOg==");
        assert_eq!(base64("ab"), "YWI=");
        assert_eq!(base64("abc"), "YWJj");
        assert!(key_in_authorization(
            "Bearer sk_test_payonce",
            "sk_test_payonce"
        ));
        assert!(key_in_authorization(
            "Basic c2tfdGVzdF9wYXlvbmNlOg==",
            "sk_test_payonce"
        ));
        assert!(!key_in_authorization(
            "Basic c2tfdGVzdF93cm9uZzo=",
            "sk_test_payonce"
        ));
        assert!(!key_in_authorization("sk_test_payonce", "sk_test_payonce"));
    }
}

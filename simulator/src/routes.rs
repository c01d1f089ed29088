//! The HTTP surface: Stripe's API under `/v1`, the admin API under `/_sim`, and the per-request context
//! (authentication, faults, idempotency headers, response shape) every `/v1` handler shares.

use crate::audit::{AuditedRequest, RequestAudit};
use crate::config::SimulatorConfig;
use crate::connection::ConnHandle;
use crate::error::ApiError;
use crate::faults::{FaultKind, Faults};
use crate::form::{self, Pairs};
use crate::idempotency::{self, InFlight, KeyState};
use crate::limits::{BODY_BYTES_MAX, IDEMPOTENCY_KEY_LEN_MAX};
use crate::objects::API_VERSION;
use crate::rng::{IdGen, now_ms};
use crate::store::{SavedResponse, Store};
use crate::{admin, adyen, cards, events, payment_intents, refund_reads, refunds};
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use std::sync::Arc;
use tokio::sync::{Notify, watch};

/// Everything a handler can reach.
pub(crate) struct App {
    pub(crate) config: SimulatorConfig,
    pub(crate) store: Store,
    pub(crate) faults: Faults,
    pub(crate) in_flight: InFlight,
    pub(crate) ids: IdGen,
    pub(crate) audit: RequestAudit,
    pub(crate) shutdown: watch::Receiver<bool>,
    pub(crate) webhook_wake: Notify,
    pub(crate) limiter: crate::rate_limits::Limiter,
    /// How far `POST /_sim/clock` moved the simulator's clock ahead of the wall clock, ms.
    pub(crate) clock_offset_ms: std::sync::atomic::AtomicI64,
    /// TCP connections accepted since start.
    pub(crate) accepted: Arc<std::sync::atomic::AtomicU64>,
}

/// Shared application state.
pub(crate) type Shared = Arc<App>;

impl App {
    /// The simulator's "now", ms since the epoch: the wall clock plus what `POST /_sim/clock` added.
    /// Everything time-dependent reads it (key retention, settling, webhook schedules, `created`),
    /// except the webhook signature's timestamp, which the receiver checks against its own clock.
    pub(crate) fn now_ms(&self) -> i64 {
        now_ms()
            + self
                .clock_offset_ms
                .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// When webhooks for an event created now are first due, if webhooks are configured.
    pub(crate) fn webhooks_due_ms(&self, now_ms: i64) -> Option<i64> {
        self.config
            .webhook_url
            .as_ref()
            .map(|_| now_ms + self.config.webhook_delay.as_millis() as i64)
    }

    /// The oldest save time a remembered key may have and still count.
    pub(crate) fn key_not_before_ms(&self, now_ms: i64) -> i64 {
        now_ms - self.config.key_retention.as_millis() as i64
    }

    /// What `key` says a request with `fingerprint` arriving at `now_ms` should do (claiming it when
    /// fresh), under the running contract and key retention.
    pub(crate) async fn key_state(
        &self,
        key: &str,
        fingerprint: &str,
        now_ms: i64,
    ) -> Result<KeyState, sqlx::Error> {
        idempotency::begin(
            &self.in_flight,
            &self.store,
            self.config.contract,
            key,
            fingerprint,
            self.key_not_before_ms(now_ms),
        )
        .await
    }
}

/// The router. The configured latency applies to the Stripe API only, never to the admin API.
pub(crate) fn router(app: Shared) -> Router {
    let api = match app.config.wire {
        crate::config::Wire::Stripe => stripe_api().route_layer(
            axum::middleware::from_fn_with_state(app.clone(), refuse_lookups),
        ),
        crate::config::Wire::Adyen => Router::new()
            .route("/v71/payments", post(adyen::payments))
            .route(
                "/v71/payments/{payment_psp_reference}/refunds",
                post(adyen::refunds),
            ),
    }
    .route_layer(axum::middleware::from_fn_with_state(app.clone(), delay));
    Router::new()
        .merge(api)
        .route(
            "/_sim/faults",
            post(admin::arm_faults)
                .delete(admin::clear_faults)
                .get(admin::list_faults),
        )
        .route("/_sim/audit/payments", get(admin::audit_payments))
        .route("/_sim/audit/refunds", get(admin::audit_refunds))
        .route("/_sim/audit/requests", get(admin::audit_requests))
        .route("/_sim/audit/rate_limits", get(admin::audit_rate_limits))
        .route("/_sim/audit/connections", get(admin::audit_connections))
        .route(
            "/_sim/rate_limits",
            get(admin::rate_limits).put(admin::set_rate_limits),
        )
        .route("/_sim/clock", post(admin::advance_clock))
        .route("/_sim/health", get(admin::health))
        // The probe paths every payonce deployable answers (the store is open once serving).
        .route("/healthz", get(admin::health))
        .route("/readyz", get(admin::health))
        .fallback(unrecognized)
        // Stripe has no 405: a known path with a method it does not serve is an unrecognized URL.
        .method_not_allowed_fallback(unrecognized)
        .layer(DefaultBodyLimit::max(BODY_BYTES_MAX))
        .with_state(app)
}

/// Stripe's API under `/v1`.
fn stripe_api() -> Router<Shared> {
    Router::new()
        .route(
            "/v1/payment_intents",
            post(payment_intents::create).get(payment_intents::list),
        )
        .route("/v1/payment_intents/search", get(payment_intents::search))
        .route("/v1/payment_intents/{id}", get(payment_intents::retrieve))
        .route("/v1/payment_methods/{id}", get(cards::retrieve))
        .route("/v1/refunds", post(refunds::create).get(refund_reads::list))
        .route("/v1/refunds/{id}", get(refund_reads::retrieve))
        .route("/v1/events", get(events::list))
}

/// Answers each Stripe API request the configured latency after it arrived: the request is handled
/// on arrival (as a processor commits before its answer travels back) and its answer held for what
/// is left. Holding first and handling after added the handling, and its wait for the store's one
/// connection, to every request: at 200 ms a worker saw 208–210 ms. Now the client sees the
/// configured latency whenever handling fits inside it (and the handling time when it does not).
/// Shutdown releases every held answer at once.
async fn delay(
    axum::extract::State(app): axum::extract::State<Shared>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let latency = app.config.latency;
    if latency.is_zero() {
        return next.run(request).await;
    }
    let answer_at = tokio::time::Instant::now() + latency;
    let response = next.run(request).await;
    // A held answer must not keep a shutting-down simulator alive for the rest of the latency.
    let mut shutdown = app.shutdown.clone();
    tokio::select! {
        () = tokio::time::sleep_until(answer_at) => {}
        _ = shutdown.wait_for(|stop| *stop) => {}
    }
    response
}

/// Under a contract without lookups (`no-lookup`), every read of payments, refunds and events is
/// answered as a processor without such an endpoint answers (404, unrecognized URL): never a
/// "no such object", which a careless client could take for "never created". Payment methods
/// (the confirmation page's card) are still served.
async fn refuse_lookups(
    axum::extract::State(app): axum::extract::State<Shared>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let path = request.uri().path();
    let lookup = *request.method() == axum::http::Method::GET
        && ["/v1/payment_intents", "/v1/refunds", "/v1/events"]
            .iter()
            .any(|p| path.starts_with(p));
    if lookup && !app.config.contract.offers_lookups() {
        let method = request.method().clone();
        let uri = request.uri().clone();
        let mut refused = unrecognized(method, uri).await;
        refused.headers_mut().insert(
            "payonce-simulator-contract",
            HeaderValue::from_static("no-lookup"),
        );
        return refused;
    }
    next.run(request).await
}

async fn unrecognized(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    let e = ApiError::unrecognized(method.as_str(), uri.path());
    (
        e.status,
        [(header::CONTENT_TYPE, "application/json")],
        e.body(),
    )
        .into_response()
}

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

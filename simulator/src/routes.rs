//! The HTTP surface: Stripe's API under `/v1` (or Adyen's under `/v71`), the admin API under
//! `/_sim`, the configured latency, and the refusals of the `no-lookup` contract and of unknown URLs.

use crate::app::Shared;
use crate::error::ApiError;
use crate::limits::BODY_BYTES_MAX;
use crate::{admin, adyen, events, payment_intents, payment_methods, refund_reads, refunds};
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

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
        .route("/v1/payment_methods/{id}", get(payment_methods::retrieve))
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

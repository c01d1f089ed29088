//! `GET /metrics`: what the front door counts (the counters of [`crate::counters`], the group
//! commit's), the processor's reachability, the ledger's storage failures, rows per state and the
//! ready queue by class, in the Prometheus text format; and the middleware that counts every response. Scraped from inside the
//! cluster; it names no tenant.

use crate::group_commit::GroupCommit;
use crate::state::AppState;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::get;
use payonce_core::metrics::Exposition;
use std::time::Instant;

/// The webhook routes, whose deliveries are counted apart: a rise in refusals means a wrong secret.
const WEBHOOK_PATHS: [&str; 2] = ["/v1/webhooks/stripe", "/v1/webhooks/adyen"];

/// `/metrics`.
pub fn routes() -> Router<AppState> {
    Router::new().route("/metrics", get(render))
}

/// Middleware: counts every response and its latency.
pub async fn count(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let webhook = WEBHOOK_PATHS.contains(&request.uri().path());
    let response = next.run(request).await;
    let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    state.metrics().record(response.status(), elapsed_ms);
    if webhook {
        state.metrics().record_webhook(response.status());
    }
    response
}

/// `GET /metrics`: the counters, then rows per state and the ready queue by class (503 with an empty body when the ledger is down,
/// so a scrape failure is visible rather than a page of zeros).
pub async fn render(State(state): State<AppState>) -> (StatusCode, String) {
    let mut e = Exposition::default();
    state.metrics().render(&mut e);
    render_groups(&mut e, state.group_commit());
    // The processor's reachability as the submitting processes recorded it in the ledger.
    crate::console::outage::refresh(state.ledger().outage()).await;
    crate::console::outage::render(&mut e);
    let now = state.now();
    let counted = async {
        let counts = state.ledger().count_by_status().await?;
        Ok::<_, payonce_ledger::LedgerError>((counts, state.ledger().queue_depth(now).await?))
    };
    match counted.await {
        Ok((counts, queue)) => {
            // By class only: this endpoint names no tenant (the reconciler's adds the tenants).
            e.operations_per_state(&counts)
                .ready_by_class(&queue.classes, now);
            (StatusCode::OK, e.finish())
        }
        Err(error) => {
            tracing::warn!(%error, "metrics: ledger unavailable");
            (StatusCode::SERVICE_UNAVAILABLE, String::new())
        }
    }
}

/// Appends the group commit's counters.
fn render_groups(e: &mut Exposition, group: &GroupCommit) {
    e.counter(
        "payonce_api_intake_groups_total",
        "Ledger writes of single creates with their approval, each a group of the requests \
             that arrived together.",
        &[],
        group.groups(),
    )
    .counter(
        "payonce_api_intake_grouped_total",
        "Single creates with their approval written through a group.",
        &[],
        group.items(),
    )
    .gauge(
        "payonce_api_intake_waiting",
        "Single creates with their approval queued for the next group, not yet being written.",
        &[],
        i64::try_from(group.waiting()).unwrap_or(i64::MAX),
    );
}

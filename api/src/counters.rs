//! The API's own counters, kept in the state and rendered by `/metrics`: responses by status
//! class, time to the response head, webhook deliveries by result and signature refusals by
//! reason. Fixed in size: one counter per class and reason, none per tenant or route.

use axum::http::StatusCode;
use payonce_core::metrics::{Counter, Exposition, Histogram};
use payonce_processor::stripe::webhook::WebhookError;

/// Status classes counted, in label order: 1xx..5xx.
const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// The API's counters.
#[derive(Debug, Default)]
pub struct ApiMetrics {
    /// Responses by status class (index 0 = 1xx).
    responses: [Counter; CLASSES.len()],
    /// Time to the response head.
    latency: Histogram,
    /// Webhook deliveries answered 2xx (stored, or recognised as a duplicate).
    webhooks_accepted: Counter,
    /// Webhook deliveries refused (signature, payload, size, or the ledger unavailable).
    webhooks_refused: Counter,
    /// Webhooks refused for their signature, by reason ([`WebhookError::SIGNATURE_CODES`] order).
    webhook_verify_failures: [Counter; WebhookError::SIGNATURE_CODES.len()],
}

impl ApiMetrics {
    /// Counts one response.
    pub fn record(&self, status: StatusCode, elapsed_ms: u64) {
        let class = usize::from(status.as_u16() / 100).clamp(1, CLASSES.len()) - 1;
        self.responses[class].inc();
        self.latency.observe_ms(elapsed_ms);
    }

    /// Counts one webhook delivery.
    pub fn record_webhook(&self, status: StatusCode) {
        if status.is_success() {
            self.webhooks_accepted.inc();
        } else {
            self.webhooks_refused.inc();
        }
    }

    /// Counts a webhook refused for its signature; other refusals are not verify failures.
    pub fn record_verify_failure(&self, error: &WebhookError) {
        if let Some(i) = WebhookError::SIGNATURE_CODES
            .iter()
            .position(|c| *c == error.code())
        {
            self.webhook_verify_failures[i].inc();
        }
    }

    /// Webhook deliveries refused so far (the console's overview shows it).
    pub fn webhooks_refused(&self) -> u64 {
        self.webhooks_refused.get()
    }

    /// Webhook deliveries accepted so far.
    pub fn webhooks_accepted(&self) -> u64 {
        self.webhooks_accepted.get()
    }

    /// Appends the counters.
    pub fn render(&self, e: &mut Exposition) {
        let help = "Webhook deliveries by result.";
        e.counter(
            "payonce_api_webhook_deliveries_total",
            help,
            &[("result", "accepted")],
            &self.webhooks_accepted,
        )
        .counter(
            "payonce_api_webhook_deliveries_total",
            help,
            &[("result", "refused")],
            &self.webhooks_refused,
        );
        for (reason, counter) in WebhookError::SIGNATURE_CODES
            .iter()
            .zip(&self.webhook_verify_failures)
        {
            e.counter(
                "payonce_webhook_verify_failures_total",
                "Webhooks refused for their signature, by reason.",
                &[("reason", reason)],
                counter,
            );
        }
        for (class, counter) in CLASSES.iter().zip(&self.responses) {
            e.counter(
                "payonce_api_responses_total",
                "HTTP responses by status class.",
                &[("class", class)],
                counter,
            );
        }
        e.histogram(
            "payonce_api_response_seconds",
            "Time to the response head.",
            &self.latency,
        );
        e.counter(
            "payonce_ledger_storage_failures_total",
            "Ledger statements and commits the store refused for lack of space or an I/O error; \
             none of their writes was stored or acknowledged.",
            &[],
            payonce_ledger::storage_failures_counter(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_are_counted_by_class() {
        let m = ApiMetrics::default();
        m.record(StatusCode::OK, 3);
        m.record(StatusCode::CREATED, 3);
        m.record(StatusCode::SERVICE_UNAVAILABLE, 40);
        m.record_webhook(StatusCode::OK);
        m.record_webhook(StatusCode::BAD_REQUEST);
        let mut e = Exposition::default();
        m.render(&mut e);
        let text = e.finish();
        assert!(text.contains("payonce_api_responses_total{class=\"2xx\"} 2\n"));
        assert!(text.contains("payonce_api_responses_total{class=\"5xx\"} 1\n"));
        assert!(text.contains("payonce_api_response_seconds_count 3\n"));
        assert!(text.contains("payonce_api_webhook_deliveries_total{result=\"accepted\"} 1\n"));
        assert!(text.contains("payonce_api_webhook_deliveries_total{result=\"refused\"} 1\n"));
        assert!(text.contains("# TYPE payonce_ledger_storage_failures_total counter\n"));
    }
}

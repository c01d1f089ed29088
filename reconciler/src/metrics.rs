//! What the reconciler counts, rendered for `/metrics`.

use payonce_core::clock::Timestamp;
use payonce_core::metrics::{Counter, Exposition, Gauge};
use payonce_core::state::Status;
use payonce_ledger::time::Drift;
use payonce_ledger::{LedgerError, Operations};
use std::sync::Arc;

/// Resolutions and failures by path.
#[derive(Debug, Default)]
pub struct ReconcilerMetrics {
    /// Expired leases sent back to ready.
    pub requeued: Counter,
    /// Expired leases with a submission, now unknown.
    pub marked_unknown: Counter,
    /// Unknowns resolved by a lookup that found the payment succeeded.
    pub resolved_succeeded: Counter,
    /// Unknowns resolved by a lookup that found a definitive failure.
    pub resolved_failed: Counter,
    /// Same-key retries.
    pub retried_same_key: Counter,
    /// Resubmissions after the window on a consistent "not found".
    pub resubmitted: Counter,
    /// Sent to a human.
    pub escalated: Counter,
    /// Checks put off (lookup unavailable or payment still processing).
    pub deferred: Counter,
    /// Writes that lost to a racing writer.
    pub fenced: Counter,
    /// Webhook hints whose retrieved object matched and was applied.
    pub hints_applied: Counter,
    /// Webhook hints kept pending because the processor could not be asked.
    pub hints_deferred: Counter,
    /// Alert: a webhook named an object the processor does not have, or one that does not match
    /// the operation's approved details.
    pub webhook_mismatches: Counter,
    /// Alert: the processor holds a payment for an operation nobody approved.
    pub payments_without_approval: Counter,
    /// Webhook hints closed without a processor read: the row already said the same.
    pub hints_known: Counter,
    /// Stored webhooks not yet checked (set at each pass).
    pub hint_backlog: Gauge,
    /// Age of the oldest stored webhook not yet checked, seconds (0: none).
    pub hint_backlog_oldest_age_s: Gauge,
    /// Alert: payments at the processor the ledger did not record (lost rows, rows that say otherwise).
    pub unknown_payments: Counter,
    /// Lookups the processor refused with 429 (the check is deferred).
    pub lookups_rate_limited: Counter,
    /// The database's clock minus the reconciler's, measured at each read of the database's time.
    pub clock_drift: Arc<Drift>,
}

impl ReconcilerMetrics {
    /// Appends resolution counters, then rows per state, the ready queue by class and by tenant (the
    /// most loaded, the rest summed) and the oldest unknown's age from the ledger.
    pub async fn render(
        &self,
        ledger: &dyn Operations,
        now: Timestamp,
        e: &mut Exposition,
    ) -> Result<(), LedgerError> {
        let help = "Reconciler actions by path.";
        for (path, c) in [
            ("requeued", &self.requeued),
            ("marked_unknown", &self.marked_unknown),
            ("lookup_succeeded", &self.resolved_succeeded),
            ("lookup_failed", &self.resolved_failed),
            ("retry_same_key", &self.retried_same_key),
            ("resubmitted", &self.resubmitted),
            ("escalated", &self.escalated),
            ("deferred", &self.deferred),
            ("fenced", &self.fenced),
        ] {
            e.counter(
                "payonce_reconciler_actions_total",
                help,
                &[("path", path)],
                c,
            );
        }
        for (result, c) in [
            ("applied", &self.hints_applied),
            ("deferred", &self.hints_deferred),
            ("known", &self.hints_known),
        ] {
            e.counter(
                "payonce_webhook_hints_total",
                "Stored webhooks checked against the processor, by result.",
                &[("result", result)],
                c,
            );
        }
        e.gauge(
            "payonce_webhook_hint_backlog",
            "Stored webhooks not yet checked against the processor.",
            &[],
            self.hint_backlog.get(),
        );
        e.gauge(
            "payonce_webhook_hint_backlog_oldest_age_seconds",
            "Age of the oldest stored webhook not yet checked (0: none).",
            &[],
            self.hint_backlog_oldest_age_s.get(),
        );
        e.counter(
            "payonce_webhook_evidence_mismatch_total",
            "Alert: a signed webhook named a processor object that is missing or does not match the operation.",
            &[],
            &self.webhook_mismatches,
        );
        e.counter(
            "payonce_payment_without_approval_total",
            "Alert: the processor holds a payment for an operation nobody approved.",
            &[],
            &self.payments_without_approval,
        );
        e.counter(
            "payonce_unknown_payments_total",
            "Alert: paid payments at the processor the ledger did not record (a restore or failover lost their rows, or the row says otherwise).",
            &[],
            &self.unknown_payments,
        );
        e.counter(
            "payonce_processor_rate_limited_total",
            "Requests the processor refused with 429, by kind.",
            &[("kind", "lookup")],
            &self.lookups_rate_limited,
        );
        self.clock_drift.render(e, "reconciler");
        let counts = ledger.count_by_status().await?;
        e.operations_per_state(&counts);
        let queue = ledger.queue_depth(now).await?;
        e.ready_by_class(&queue.classes, now)
            .ready_by_tenant(&queue.tenants);
        let oldest = counts
            .iter()
            .find(|c| c.status == Status::Unknown)
            .and_then(|c| c.oldest_submitted_at.or(c.oldest_updated_at))
            .map_or(0, |t| {
                i64::try_from(now.saturating_sub(t).as_secs()).unwrap_or(i64::MAX)
            });
        e.gauge(
            "payonce_oldest_unknown_age_seconds",
            "Time since the first submission of the oldest unknown outcome.",
            &[],
            oldest,
        );
        Ok(())
    }
}

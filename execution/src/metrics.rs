//! What one execution counts, whoever runs it (the worker renders these under its names).

use payonce_core::metrics::{Counter, Histogram};
use payonce_ledger::Recorded;

/// Counters of the execution path.
#[derive(Debug, Default)]
pub struct ExecutionMetrics {
    /// Outcomes recorded as succeeded.
    pub succeeded: Counter,
    /// Outcomes recorded as failed.
    pub failed: Counter,
    /// Not-submitted outcomes sent back to ready.
    pub retried: Counter,
    /// Outcomes recorded as unknown.
    pub unknown: Counter,
    /// Operations rejected before submission.
    pub rejected: Counter,
    /// Operations sent to a human.
    pub needs_attention: Counter,
    /// Fenced writes that lost (lease expired and moved on).
    pub lost_leases: Counter,
    /// Outcomes already recorded by someone else (a webhook beat the worker).
    pub already_recorded: Counter,
    /// Alert: first submissions the processor answered with a stored response (a row with this
    /// intention paid before and the ledger lost it).
    pub replayed_first_submissions: Counter,
    /// Submissions the processor answered 429 (each retried with the same key, never a failed attempt).
    pub rate_limited: Counter,
    /// Submissions that went back to `ready` after waiting `rate_limit_wait_max` for permits or past 429s.
    pub rate_limited_requeued: Counter,
    /// Alert: operations not submitted because they name a processor this process has no
    /// configuration for (each sent to a human with that reason).
    pub unconfigured_processor: Counter,
    /// Submission latency: the processor call, plus any wait for a limiter permit and in-place 429 retries.
    pub submit_latency: Histogram,
}

impl ExecutionMetrics {
    /// Counts an outcome whose fenced write won.
    pub fn count(&self, recorded: &Recorded) {
        let counter = match recorded {
            Recorded::Succeeded(_) => &self.succeeded,
            Recorded::Failed(_) => &self.failed,
            Recorded::RetryLater { .. } => &self.retried,
            Recorded::Unknown { .. } => &self.unknown,
            Recorded::Rejected { .. } => &self.rejected,
            Recorded::Exhausted { .. } | Recorded::NeedsAttention { .. } => &self.needs_attention,
        };
        counter.inc();
    }
}

//! What the worker counts, rendered for `/metrics`.

use payonce_core::metrics::{Counter, Exposition, Histogram};
use payonce_core::priority::{ALL_PRIORITIES, Priority};
use payonce_execution::ExecutionMetrics;
use payonce_ledger::time::Drift;
use std::sync::Arc;

/// Worker counters.
#[derive(Debug, Default)]
pub struct WorkerMetrics {
    /// Operations claimed.
    pub claimed: Counter,
    /// Claim statements that returned operations (`claimed / claims` is the mean claim size).
    pub claims: Counter,
    /// Of those, claims an outcome write made in its own commit (`claim_with_outcomes`).
    pub claims_with_outcomes: Counter,
    /// Operations claimed, by priority: interactive, bulk.
    pub claimed_by_priority: [Counter; 2],
    /// Reads of the lanes with due work (`fair`).
    pub lane_reads: Counter,
    /// Group writes of outcomes (`outcomes / record_writes` is the mean group size).
    pub record_writes: Counter,
    /// What the execution path counts: outcomes, lost writes, 429s, submission latency.
    pub execution: ExecutionMetrics,
    /// Leases given back at shutdown.
    pub released: Counter,
    /// Claim-to-submit latency.
    pub claim_to_submit: Histogram,
    /// From an outcome being known (the processor's answer, a precheck's refusal) to its group write
    /// committed: the record linger, the wait behind an earlier write, the write. The submission's
    /// slot is held all that time.
    pub known_to_recorded: Histogram,
    /// One group write of outcomes (with the claim it makes), from sending it to its commit: the
    /// part of `known_to_recorded` the database takes.
    pub record_write: Histogram,
    /// The database's clock minus the worker's, measured at each read of the database's time.
    pub clock_drift: Arc<Drift>,
}

impl WorkerMetrics {
    /// The fair claims' counters: claims by priority, lane reads.
    fn render_fair(&self, e: &mut Exposition) {
        for (priority, counter) in ALL_PRIORITIES.iter().zip(&self.claimed_by_priority) {
            e.counter(
                "payonce_worker_claimed_by_priority_total",
                "Operations claimed, by priority (interactive: a customer or an assistant waits).",
                &[("priority", priority.as_str())],
                counter,
            );
        }
        e.counter(
            "payonce_worker_lane_reads_total",
            "Reads of the lanes (tenant and priority) holding due work, by the fair scheduler.",
            &[],
            &self.lane_reads,
        );
    }

    /// Counts claimed operations, in all and by priority.
    pub fn count_claimed(&self, claimed: &[payonce_ledger::Operation]) {
        self.claimed.inc_by(claimed.len() as u64);
        for op in claimed {
            let i = usize::from(op.priority == Priority::Bulk);
            self.claimed_by_priority[i].inc();
        }
    }

    /// Appends the worker's metrics.
    pub fn render(&self, e: &mut Exposition) {
        e.counter(
            "payonce_worker_claimed_total",
            "Operations claimed.",
            &[],
            &self.claimed,
        );
        e.counter(
            "payonce_worker_claims_total",
            "Claim statements that returned operations (claimed_total / claims_total: the mean claim size).",
            &[],
            &self.claims,
        );
        e.counter(
            "payonce_worker_claims_with_outcomes_total",
            "Of those, claims an outcome write made in its own commit (refilling the slots it freed).",
            &[],
            &self.claims_with_outcomes,
        );
        self.render_fair(e);
        e.counter(
            "payonce_worker_record_writes_total",
            "Group writes of outcomes (outcomes_total / record_writes_total: the mean group size).",
            &[],
            &self.record_writes,
        );
        self.render_outcomes(e);
        e.counter(
            "payonce_worker_lost_leases_total",
            "Fenced writes that lost.",
            &[],
            &self.execution.lost_leases,
        );
        e.counter(
            "payonce_worker_already_recorded_total",
            "Outcomes someone else recorded first.",
            &[],
            &self.execution.already_recorded,
        );
        e.counter(
            "payonce_worker_replayed_first_submissions_total",
            "Alert: first submissions the processor answered from its key store: the ledger had lost the row that paid them.",
            &[],
            &self.execution.replayed_first_submissions,
        );
        e.counter(
            "payonce_worker_unconfigured_processor_total",
            "Alert: operations not submitted because they name a processor this worker has no configuration for (each sent to needs_attention).",
            &[],
            &self.execution.unconfigured_processor,
        );
        e.counter(
            "payonce_worker_released_total",
            "Leases given back at shutdown.",
            &[],
            &self.released,
        );
        e.counter(
            "payonce_processor_rate_limited_total",
            "Requests the processor refused with 429, by kind.",
            &[("kind", "submission")],
            &self.execution.rate_limited,
        );
        e.counter(
            "payonce_worker_rate_limited_requeued_total",
            "Submissions sent back to ready after waiting out the rate-limit bound (not a failed attempt).",
            &[],
            &self.execution.rate_limited_requeued,
        );
        e.histogram(
            "payonce_worker_submit_seconds",
            "Submission latency, including limiter waits and in-place 429 retries.",
            &self.execution.submit_latency,
        );
        e.histogram(
            "payonce_worker_claim_to_submit_seconds",
            "Claim to submission latency.",
            &self.claim_to_submit,
        );
        e.histogram(
            "payonce_worker_outcome_to_recorded_seconds",
            "From an outcome being known (answer or precheck refusal) to its write committed; its slot is held meanwhile.",
            &self.known_to_recorded,
        );
        e.histogram(
            "payonce_worker_record_write_seconds",
            "One group write of outcomes (with the claim it makes), from sending it to its commit.",
            &self.record_write,
        );
        self.clock_drift.render(e, "worker");
    }

    /// `payonce_worker_outcomes_total`, one series per outcome.
    fn render_outcomes(&self, e: &mut Exposition) {
        let outcomes = "Outcomes recorded by the worker.";
        e.counter(
            "payonce_worker_outcomes_total",
            outcomes,
            &[("outcome", "succeeded")],
            &self.execution.succeeded,
        )
        .counter(
            "payonce_worker_outcomes_total",
            outcomes,
            &[("outcome", "failed")],
            &self.execution.failed,
        )
        .counter(
            "payonce_worker_outcomes_total",
            outcomes,
            &[("outcome", "retry")],
            &self.execution.retried,
        )
        .counter(
            "payonce_worker_outcomes_total",
            outcomes,
            &[("outcome", "unknown")],
            &self.execution.unknown,
        )
        .counter(
            "payonce_worker_outcomes_total",
            outcomes,
            &[("outcome", "rejected")],
            &self.execution.rejected,
        )
        .counter(
            "payonce_worker_outcomes_total",
            outcomes,
            &[("outcome", "needs_attention")],
            &self.execution.needs_attention,
        );
    }
}

//! The reconciler's settings: sweep sizes and intervals, check back-off, and how long each kind of
//! prunable row is kept.

use super::SubmitArgs;
use clap::Args;
use payonce_reconciler::ReconcilerConfig;
use std::time::Duration;

/// Reconciler limits and policy.
#[derive(Debug, Clone, Args)]
pub struct ReconcilerArgs {
    /// Rows per sweep step.
    #[arg(long, env = "PAYONCE_SWEEP_BATCH", default_value_t = 200)]
    pub sweep_batch: u32,
    /// Stuck operations one sweep step works on at once (0 is taken as 1).
    #[arg(long, env = "PAYONCE_SWEEP_CONCURRENCY", default_value_t = payonce_reconciler::config::SWEEP_CONCURRENCY_DEFAULT)]
    pub sweep_concurrency: usize,
    /// Most rows one sweep write moves: expired leases per statement, found payments per commit
    /// (0 is taken as 1).
    #[arg(long, env = "PAYONCE_SWEEP_WRITE_BATCH", default_value_t = payonce_reconciler::config::SWEEP_WRITE_BATCH_DEFAULT)]
    pub sweep_write_batch: usize,
    /// Daemon sweep interval, ms.
    #[arg(long, env = "PAYONCE_SWEEP_INTERVAL_MS", default_value_t = 5_000)]
    pub sweep_interval_ms: u64,
    /// First back-off between checks, ms (doubles).
    #[arg(long, env = "PAYONCE_CHECK_BACKOFF_MS", default_value_t = 2_000)]
    pub check_backoff_ms: u64,
    /// Longest back-off between checks of one operation, ms: how late a recovered processor is noticed.
    #[arg(long, env = "PAYONCE_CHECK_BACKOFF_MAX_MS", default_value_t = 300_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub check_backoff_max_ms: u64,
    /// How long one reconciler's sweep lease lasts, ms: a killed reconciler holds off the others
    /// this long (two sweeping at once is still safe, every write is fenced; it is only wasteful).
    #[arg(long, env = "PAYONCE_SWEEP_LEASE_TTL_MS", default_value_t = 60_000,
          value_parser = clap::value_parser!(u64).range(1_000..))]
    pub sweep_lease_ttl_ms: u64,
    /// Same-key retries must land this long before the key's retention closes, ms.
    #[arg(long, env = "PAYONCE_RETENTION_MARGIN_MS", default_value_t = 300_000)]
    pub retention_margin_ms: u64,
    /// Days a checked webhook's payload is kept after it was checked (pending ones are never pruned).
    #[arg(long, env = "PAYONCE_WEBHOOK_RETENTION_DAYS", default_value_t = 7,
          value_parser = clap::value_parser!(u64).range(1..=3_650))]
    pub webhook_retention_days: u64,
    /// Days a tool call's correlation row, and the answer kept for its idempotency key, are kept.
    #[arg(long, env = "PAYONCE_TOOL_CALL_RETENTION_DAYS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=3_650))]
    pub tool_call_retention_days: u64,
    /// Days an expired confirmation link or console session is kept.
    #[arg(long, env = "PAYONCE_EXPIRED_TOKEN_RETENTION_DAYS", default_value_t = 7,
          value_parser = clap::value_parser!(u64).range(1..=3_650))]
    pub expired_token_retention_days: u64,
    /// Time between prunes in the reconciler daemon, ms (`payonce prune` runs one now).
    #[arg(long, env = "PAYONCE_PRUNE_INTERVAL_MS", default_value_t = 3_600_000,
          value_parser = clap::value_parser!(u64).range(1_000..))]
    pub prune_interval_ms: u64,
    /// Longest a lookup waits for a read permit from the fleet limiter before the check is deferred, ms.
    #[arg(long, env = "PAYONCE_LOOKUP_PERMIT_WAIT_MS", default_value_t = 2_000,
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub lookup_permit_wait_ms: u64,
    /// Allow resubmission after the window on a consistent "not found".
    #[arg(long, env = "PAYONCE_RESUBMIT_AFTER_WINDOW", default_value_t = false)]
    pub resubmit_after_window: bool,
}

impl ReconcilerArgs {
    /// The reconciler configuration for `owner`, with same-key retries bounded by `submit`.
    pub fn config(&self, owner: String, submit: &SubmitArgs) -> ReconcilerConfig {
        let mut c = ReconcilerConfig::new(owner);
        c.batch_size = self.sweep_batch;
        c.concurrency = self.sweep_concurrency;
        c.write_batch = self.sweep_write_batch;
        c.interval = Duration::from_millis(self.sweep_interval_ms);
        c.check_backoff_base = Duration::from_millis(self.check_backoff_ms);
        c.check_backoff_max = Duration::from_millis(self.check_backoff_max_ms);
        c.sweep_lease_ttl = Duration::from_millis(self.sweep_lease_ttl_ms);
        c.retention_margin = Duration::from_millis(self.retention_margin_ms);
        c.retention = self.retention();
        c.prune_interval = Duration::from_millis(self.prune_interval_ms);
        c.resubmit_after_window = self.resubmit_after_window;
        c.lookup_permit_wait_max = Duration::from_millis(self.lookup_permit_wait_ms);
        c.retry_lease_ttl = submit.lease_ttl();
        c.retry = submit.policy();
        c
    }
}

impl ReconcilerArgs {
    /// How long each kind of prunable row is kept.
    pub fn retention(&self) -> payonce_ledger::retention::Retention {
        const DAY: Duration = Duration::from_secs(24 * 60 * 60);
        let days = |n: u64| DAY.saturating_mul(u32::try_from(n).unwrap_or(u32::MAX));
        payonce_ledger::retention::Retention {
            webhooks: days(self.webhook_retention_days),
            tool_calls: days(self.tool_call_retention_days),
            expired_tokens: days(self.expired_token_retention_days),
            ..Default::default()
        }
    }
}

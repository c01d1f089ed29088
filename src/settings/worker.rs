//! The worker's settings and what one submission may do (shared with the reconciler's same-key
//! retries), with the shutdown grace of both daemons.

use clap::Args;
use payonce_execution::SubmitPolicy;
use payonce_worker::WorkerConfig;
use std::time::Duration;

/// Worker limits.
#[derive(Debug, Clone, Args)]
pub struct WorkerArgs {
    /// Most operations in flight: submitted or about to be, and not yet recorded.
    #[arg(long, env = "PAYONCE_WORKER_CONCURRENCY", default_value_t = 64)]
    pub concurrency: usize,
    /// Most operations per claim.
    #[arg(long, env = "PAYONCE_WORKER_BATCH", default_value_t = 32)]
    pub batch_size: u32,
    /// Before a payment's first submission, ask the processor whether it already holds one for the
    /// business key (one search per payment): for ledgers that may lose rows older than the
    /// processor's key retention (late restores, asynchronous replicas).
    #[arg(long, env = "PAYONCE_WORKER_CHECK_BEFORE_SUBMIT", default_value_t = false, action = clap::ArgAction::Set)]
    pub check_before_submit: bool,
    /// Lease renewal interval, ms.
    #[arg(long, env = "PAYONCE_LEASE_RENEW_MS", default_value_t = 10_000)]
    pub renew_ms: u64,
    /// Idle poll interval, ms (wake-ups usually come sooner).
    #[arg(long, env = "PAYONCE_POLL_MS", default_value_t = 500)]
    pub poll_ms: u64,
    /// How long shutdown waits for work in flight.
    #[command(flatten)]
    pub grace: GraceArgs,
    /// What a submission may do (shared with the reconciler's same-key retries).
    #[command(flatten)]
    pub submit: SubmitArgs,
}

/// How long a daemon's shutdown waits for work in flight (the worker and `reconciler run`).
#[derive(Debug, Clone, Args)]
pub struct GraceArgs {
    /// Shutdown grace, ms.
    #[arg(long, env = "PAYONCE_SHUTDOWN_GRACE_MS", default_value_t = 25_000)]
    pub shutdown_grace_ms: u64,
}

impl WorkerArgs {
    /// The worker configuration for `owner`.
    pub fn config(&self, owner: String) -> WorkerConfig {
        let mut c = WorkerConfig::new(owner);
        c.concurrency = self.concurrency;
        c.batch_size = self.batch_size;
        c.lease_ttl = self.submit.lease_ttl();
        c.renew_interval = Duration::from_millis(self.renew_ms);
        c.poll_interval = Duration::from_millis(self.poll_ms);
        c.shutdown_grace = Duration::from_millis(self.grace.shutdown_grace_ms);
        c.submit = self.submit.policy();
        c.submit.check_before_submit = self.check_before_submit;
        c
    }
}

/// What one submission may do: the worker's, and the reconciler's same-key retries'.
#[derive(Debug, Clone, Args)]
pub struct SubmitArgs {
    /// Lease TTL, ms.
    #[arg(long, env = "PAYONCE_LEASE_TTL_MS", default_value_t = 30_000)]
    pub lease_ttl_ms: u64,
    /// Submission timeout, ms.
    #[arg(long, env = "PAYONCE_SUBMIT_TIMEOUT_MS", default_value_t = 20_000)]
    pub submit_timeout_ms: u64,
    /// Attempts that executed nothing (refused connections and rate limits not counted) before an
    /// operation goes to a human.
    #[arg(long, env = "PAYONCE_ATTEMPT_MAX", default_value_t = 5)]
    pub attempt_max: i64,
    /// First check of an unknown outcome, ms after it was recorded.
    #[arg(long, env = "PAYONCE_FIRST_CHECK_MS", default_value_t = 2_000)]
    pub first_check_ms: u64,
    /// First pause after a processor 429 without `Retry-After`, ms (doubles, with jitter).
    #[arg(long, env = "PAYONCE_RATE_LIMIT_BACKOFF_MS", default_value_t = 250,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub rate_limit_backoff_ms: u64,
    /// Longest pause after a processor 429, ms.
    #[arg(long, env = "PAYONCE_RATE_LIMIT_BACKOFF_MAX_MS", default_value_t = 5_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub rate_limit_backoff_max_ms: u64,
    /// Longest a claimed submission waits for permits and retries 429s in place before going back to
    /// ready (never counted as a failed attempt), ms.
    #[arg(long, env = "PAYONCE_RATE_LIMIT_WAIT_MAX_MS", default_value_t = 120_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub rate_limit_wait_max_ms: u64,
}

impl SubmitArgs {
    /// The submission policy (the fleet limiter is the process's, set by the caller).
    pub fn policy(&self) -> SubmitPolicy {
        SubmitPolicy {
            submit_timeout: Duration::from_millis(self.submit_timeout_ms),
            attempt_max: self.attempt_max,
            first_check_delay: Duration::from_millis(self.first_check_ms),
            rate_limit_backoff_base: Duration::from_millis(self.rate_limit_backoff_ms),
            rate_limit_backoff_max: Duration::from_millis(self.rate_limit_backoff_max_ms),
            rate_limit_wait_max: Duration::from_millis(self.rate_limit_wait_max_ms),
            ..SubmitPolicy::default()
        }
    }

    /// How long a lease lasts without renewal.
    pub fn lease_ttl(&self) -> Duration {
        Duration::from_millis(self.lease_ttl_ms)
    }
}

//! Worker limits. Every one is named, has a default, and is set explicitly by the binary.

use payonce_shared::limiter::{SharedLimiter, Unlimited};
use std::sync::Arc;
use std::time::Duration;

/// What a worker may do and how long it may take.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// This process's lease owner name (unique per process).
    pub owner: String,
    /// Most submissions in flight at once.
    pub concurrency: usize,
    /// Most operations claimed per statement.
    pub batch_size: u32,
    /// How long a lease lasts without renewal.
    pub lease_ttl: Duration,
    /// How often held leases are renewed (well under `lease_ttl`).
    pub renew_interval: Duration,
    /// Longest a single processor submission may take before its outcome is unknown.
    pub submit_timeout: Duration,
    /// Claims after which an operation that never reached the processor goes to a human.
    pub attempt_max: i64,
    /// First retry delay after a not-submitted outcome (doubles per attempt, with jitter).
    pub retry_base: Duration,
    /// Longest retry delay.
    pub retry_max: Duration,
    /// When the reconciler should first look at an unknown outcome.
    pub first_check_delay: Duration,
    /// Longest idle wait between polls when no wake-up arrives.
    pub poll_interval: Duration,
    /// Most outcomes written in one transaction.
    pub record_batch_max: usize,
    /// How long shutdown waits for in-flight submissions.
    pub shutdown_grace: Duration,
    /// The fleet's request budget at the processor: one write permit per submission.
    pub limiter: SharedLimiter,
    /// First pause after a 429 when the processor gives no advice (doubles, with jitter).
    pub rate_limit_backoff_base: Duration,
    /// Longest pause after a 429.
    pub rate_limit_backoff_max: Duration,
    /// Longest a submission keeps its claim waiting for permits and retrying 429s in place (the
    /// daemon renews the lease meanwhile); past it, the operation goes back to `ready` without counting
    /// as a failed attempt.
    pub rate_limit_wait_max: Duration,
}

impl WorkerConfig {
    /// Defaults for `owner`; every other field documented here.
    pub fn new(owner: impl Into<String>) -> Self {
        WorkerConfig {
            owner: owner.into(),
            concurrency: 64,
            batch_size: 32,
            lease_ttl: Duration::from_secs(30),
            renew_interval: Duration::from_secs(10),
            submit_timeout: Duration::from_secs(20),
            attempt_max: 5,
            retry_base: Duration::from_millis(500),
            retry_max: Duration::from_secs(60),
            first_check_delay: Duration::from_secs(2),
            poll_interval: Duration::from_millis(500),
            record_batch_max: 128,
            shutdown_grace: Duration::from_secs(25),
            limiter: Arc::new(Unlimited::default()),
            rate_limit_backoff_base: Duration::from_millis(250),
            rate_limit_backoff_max: Duration::from_secs(5),
            rate_limit_wait_max: Duration::from_secs(120),
        }
    }

    /// Refuses settings that would break the lease discipline.
    pub fn validate(&self) -> Result<(), String> {
        if self.concurrency == 0 || self.batch_size == 0 || self.record_batch_max == 0 {
            return Err("concurrency, batch size and record batch must be positive".into());
        }
        if self.renew_interval >= self.lease_ttl {
            return Err("the renewal interval must be shorter than the lease TTL".into());
        }
        if self.submit_timeout >= self.shutdown_grace + self.lease_ttl {
            return Err(
                "the submit timeout must end before a lease could lapse during shutdown".into(),
            );
        }
        if self.rate_limit_backoff_base.is_zero()
            || self.rate_limit_backoff_max < self.rate_limit_backoff_base
            || self.rate_limit_wait_max.is_zero()
        {
            return Err("rate-limit backoff and wait bounds must be positive and ordered".into());
        }
        if self.attempt_max < 1 {
            return Err("attempt_max must be at least 1".into());
        }
        Ok(())
    }
}

/// A lease owner name unique to this process: host, pid and randomness.
pub fn owner_name(role: &str) -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .unwrap_or_else(|| "host".into());
    format!(
        "{role}-{host}-{}-{}",
        std::process::id(),
        payonce_shared::id::random_hex(3)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_bad_settings_are_refused() {
        let ok = WorkerConfig::new("w");
        assert!(ok.validate().is_ok());
        let mut bad = ok.clone();
        bad.renew_interval = bad.lease_ttl;
        assert!(bad.validate().is_err());
        let mut bad = ok.clone();
        bad.concurrency = 0;
        assert!(bad.validate().is_err());
        let mut bad = ok.clone();
        bad.rate_limit_backoff_max = Duration::from_millis(1);
        assert!(bad.validate().is_err());
        let mut bad = ok;
        bad.attempt_max = 0;
        assert!(bad.validate().is_err());
        assert_ne!(owner_name("worker"), owner_name("worker"));
    }
}

//! Worker limits. Every one is named, has a default, and is set explicitly by the binary.

use payonce_execution::SubmitPolicy;
use payonce_ledger::LeaseHolder;
use std::time::Duration;

/// What a worker may do and how long it may take. The daemon's grouping and pipelining are not
/// here: they are internal ([`crate::daemon::Tuning`]).
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// This process's lease owner name (unique per process).
    pub owner: String,
    /// Most operations in flight at once: claimed for submission and not yet recorded (a
    /// submission keeps its slot until its outcome is written).
    pub concurrency: usize,
    /// Most operations claimed per statement.
    pub batch_size: u32,
    /// How long a lease lasts without renewal.
    pub lease_ttl: Duration,
    /// How often held leases are renewed (well under `lease_ttl`).
    pub renew_interval: Duration,
    /// The submission's limits and how its outcome is scheduled (shared with the reconciler's
    /// same-key retry).
    pub submit: SubmitPolicy,
    /// Longest idle wait between polls when no wake-up arrives.
    pub poll_interval: Duration,
    /// Most outcomes written in one transaction.
    pub record_batch_max: usize,
    /// How long shutdown waits for in-flight submissions.
    pub shutdown_grace: Duration,
}

impl WorkerConfig {
    /// This worker as the holder of the leases it claims and renews.
    pub fn lease_holder(&self) -> LeaseHolder<'_> {
        LeaseHolder {
            owner: &self.owner,
            lease_ttl: self.lease_ttl,
        }
    }

    /// Defaults for `owner`; every other field documented here.
    pub fn new(owner: impl Into<String>) -> Self {
        WorkerConfig {
            owner: owner.into(),
            concurrency: 64,
            batch_size: 32,
            lease_ttl: Duration::from_secs(30),
            renew_interval: Duration::from_secs(10),
            submit: SubmitPolicy::default(),
            poll_interval: Duration::from_millis(500),
            record_batch_max: 128,
            shutdown_grace: Duration::from_secs(25),
        }
    }

    /// Refuses settings that would break the lease discipline.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.concurrency == 0 || self.batch_size == 0 || self.record_batch_max == 0 {
            return Err(ConfigError::ZeroCapacity);
        }
        if self.renew_interval >= self.lease_ttl {
            return Err(ConfigError::RenewalNotInsideLease);
        }
        let submit = &self.submit;
        if submit.submit_timeout >= self.shutdown_grace + self.lease_ttl {
            return Err(ConfigError::SubmitOutlivesShutdown);
        }
        if submit.rate_limit_backoff_base.is_zero()
            || submit.rate_limit_backoff_max < submit.rate_limit_backoff_base
            || submit.rate_limit_wait_max.is_zero()
        {
            return Err(ConfigError::RateLimitBounds);
        }
        if submit.attempt_max < 1 {
            return Err(ConfigError::NoAttempts);
        }
        Ok(())
    }
}

/// Worker settings [`WorkerConfig::validate`] refuses, one variant per rule so callers and tests
/// can tell them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A zero concurrency, batch size or record batch would never make progress.
    #[error("concurrency, batch size and record batch must be positive")]
    ZeroCapacity,
    /// Renewal at or after the TTL lets every lease lapse while held.
    #[error("the renewal interval must be shorter than the lease TTL")]
    RenewalNotInsideLease,
    /// A submission could still be in flight when its lease lapses during shutdown.
    #[error("the submit timeout must end before a lease could lapse during shutdown")]
    SubmitOutlivesShutdown,
    /// Rate-limit backoff and wait bounds are zero or out of order.
    #[error("rate-limit backoff and wait bounds must be positive and ordered")]
    RateLimitBounds,
    /// `attempt_max` below 1 would exhaust operations before their first submission.
    #[error("attempt_max must be at least 1")]
    NoAttempts,
    /// `check_before_submit` asks the processor's search, and the declared contract has none:
    /// every payment would wait for a check that can never be made.
    #[error("check_before_submit needs a search, and the processor's contract offers none")]
    CheckWithoutSearch,
}

impl WorkerConfig {
    /// Refuses settings the processor's declared contract cannot serve (beside [`Self::validate`]).
    pub fn validate_for(&self, contract: &payonce_processor::Contract) -> Result<(), ConfigError> {
        if self.submit.check_before_submit && contract.lookups.search.is_none() {
            return Err(ConfigError::CheckWithoutSearch);
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
        payonce_core::id::random_hex(3)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_check_before_submission_needs_a_contract_with_a_search() {
        use payonce_processor::contract;
        let mut c = WorkerConfig::new("w");
        assert!(
            c.validate_for(&contract::NO_LOOKUP).is_ok(),
            "off: no search needed"
        );
        c.submit.check_before_submit = true;
        assert!(c.validate_for(&contract::STRIPE).is_ok());
        assert_eq!(
            c.validate_for(&contract::NO_LOOKUP),
            Err(ConfigError::CheckWithoutSearch)
        );
    }

    #[test]
    fn defaults_validate_and_bad_settings_are_refused() {
        let ok = WorkerConfig::new("w");
        assert!(ok.validate().is_ok());
        let refused = |change: fn(&mut WorkerConfig)| {
            let mut bad = ok.clone();
            change(&mut bad);
            bad.validate().unwrap_err()
        };
        assert_eq!(
            refused(|c| c.renew_interval = c.lease_ttl),
            ConfigError::RenewalNotInsideLease
        );
        assert_eq!(refused(|c| c.concurrency = 0), ConfigError::ZeroCapacity);
        assert_eq!(
            refused(|c| c.record_batch_max = 0),
            ConfigError::ZeroCapacity
        );
        assert_eq!(
            refused(|c| c.submit.submit_timeout = c.shutdown_grace + c.lease_ttl),
            ConfigError::SubmitOutlivesShutdown
        );
        assert_eq!(
            refused(|c| c.submit.rate_limit_backoff_max = Duration::from_millis(1)),
            ConfigError::RateLimitBounds
        );
        assert_eq!(
            refused(|c| c.submit.rate_limit_wait_max = Duration::ZERO),
            ConfigError::RateLimitBounds
        );
        assert_eq!(
            refused(|c| c.submit.attempt_max = 0),
            ConfigError::NoAttempts
        );
        assert_ne!(owner_name("worker"), owner_name("worker"));
    }
}

//! Worker limits. Every one is named, has a default, and is set explicitly by the binary.

use payonce_execution::SubmitPolicy;
use payonce_ledger::LeaseHolder;
use std::time::Duration;

/// Default [`WorkerConfig::claim_cooldown`]: internal, not a setting; chosen by measurement
/// (docs/decisions.md, "The worker's tuning is internal").
pub const CLAIM_COOLDOWN_DEFAULT: Duration = Duration::from_millis(5);
/// Default [`WorkerConfig::record_linger`]: internal, not a setting; chosen by measurement
/// (docs/decisions.md, "The worker's tuning is internal").
pub const RECORD_LINGER_DEFAULT: Duration = Duration::from_millis(2);
/// Default [`WorkerConfig::pipelines`]: internal, not a setting; chosen by measurement
/// (docs/decisions.md, "The worker's tuning is internal").
pub const PIPELINES_DEFAULT: usize = 2;
/// Most [`WorkerConfig::pipelines`]: each keeps a claim and an outcome write of its own running,
/// so more than a few per worker only adds statements competing for the same database.
pub const PIPELINES_MAX: usize = 16;
/// Default [`WorkerConfig::record_writes`]: internal, not a setting; chosen by measurement
/// (docs/decisions.md, "The worker's tuning is internal").
pub const RECORD_WRITES_DEFAULT: usize = 2;
/// Most [`WorkerConfig::record_writes`]: each holds a database connection for its transaction, and
/// a worker's pool is shared by its pipelines, claims, renewals and writes.
pub const RECORD_WRITES_MAX: usize = 8;
/// Longest [`WorkerConfig::claim_cooldown`] and [`WorkerConfig::record_linger`]: each delays work
/// that is ready, so neither may approach a processor's own latency.
pub const BATCH_WAIT_MAX: Duration = Duration::from_millis(1_000);

/// What a worker may do and how long it may take. Of the grouping and pipelining fields
/// (`pipelines`, `claim_cooldown`, `claim_with_outcomes`, `record_linger`, `record_writes`) none is
/// an operator's setting: the binary keeps their defaults; tests and the bench vary them.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// This process's lease owner name (unique per process).
    pub owner: String,
    /// Most operations in flight at once: claimed for submission and not yet recorded (a
    /// submission keeps its slot until its outcome is written).
    pub concurrency: usize,
    /// Most operations claimed per statement.
    pub batch_size: u32,
    /// Independent claim → submit → record loops the in-flight slots are split over (at most one
    /// per slot): each claims into its own share of `concurrency` and writes its own outcomes, so
    /// one worker keeps a claim and an outcome write of each running at once. The total in flight
    /// is still `concurrency`.
    pub pipelines: usize,
    /// With fewer than a full claim's worth of free slots, how long after the previous claim
    /// started the next one waits for more slots to free up. Zero claims at every free slot.
    pub claim_cooldown: Duration,
    /// An outcome write also claims ready work into the slots it frees, in the same commit
    /// (`Queue::record_and_claim`): a busy worker refills its slots with one commit per group
    /// instead of a write and a claim. Off: only the claim loop claims.
    pub claim_with_outcomes: bool,
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
    /// How long an outcome waits for others to join its write (the write starts sooner when
    /// `record_batch_max` are queued). Zero writes what is queued at once.
    pub record_linger: Duration,
    /// Outcome writes one pipeline keeps under way at once (1 to [`RECORD_WRITES_MAX`]): outcomes
    /// that arrive during a write form the next group and start it, instead of waiting for that
    /// write's commit.
    pub record_writes: usize,
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
            pipelines: PIPELINES_DEFAULT,
            claim_cooldown: CLAIM_COOLDOWN_DEFAULT,
            claim_with_outcomes: true,
            lease_ttl: Duration::from_secs(30),
            renew_interval: Duration::from_secs(10),
            submit: SubmitPolicy::default(),
            poll_interval: Duration::from_millis(500),
            record_batch_max: 128,
            record_linger: RECORD_LINGER_DEFAULT,
            record_writes: RECORD_WRITES_DEFAULT,
            shutdown_grace: Duration::from_secs(25),
        }
    }

    /// Each pipeline's share of the in-flight slots: `pipelines` shares (fewer when there are fewer
    /// slots: a pipeline needs one), as even as they divide, together exactly `concurrency`.
    pub fn pipeline_slots(&self) -> Vec<usize> {
        let n = self.pipelines.clamp(1, self.concurrency.max(1));
        (0..n)
            .map(|i| self.concurrency / n + usize::from(i < self.concurrency % n))
            .collect()
    }

    /// Refuses settings that would break the lease discipline.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.concurrency == 0 || self.batch_size == 0 || self.record_batch_max == 0 {
            return Err(ConfigError::ZeroCapacity);
        }
        if self.pipelines == 0 || self.pipelines > PIPELINES_MAX {
            return Err(ConfigError::Pipelines);
        }
        if self.record_writes == 0 || self.record_writes > RECORD_WRITES_MAX {
            return Err(ConfigError::RecordWrites);
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
        if self.claim_cooldown > BATCH_WAIT_MAX || self.record_linger > BATCH_WAIT_MAX {
            return Err(ConfigError::BatchWaitTooLong);
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
    /// Zero pipelines would never claim; more than [`PIPELINES_MAX`] only add competing statements.
    #[error("pipelines must be between 1 and {max}", max = PIPELINES_MAX)]
    Pipelines,
    /// No outcome write at a time would never record; more than [`RECORD_WRITES_MAX`] would take
    /// the pool's connections from claims and renewals.
    #[error("record writes must be between 1 and {max}", max = RECORD_WRITES_MAX)]
    RecordWrites,
    /// A claim cooldown or record linger over [`BATCH_WAIT_MAX`] would hold ready work back.
    #[error("claim cooldown and record linger must be at most 1000 ms")]
    BatchWaitTooLong,
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
        assert_eq!(
            refused(|c| c.claim_cooldown = BATCH_WAIT_MAX + Duration::from_millis(1)),
            ConfigError::BatchWaitTooLong
        );
        assert_eq!(
            refused(|c| c.record_linger = BATCH_WAIT_MAX + Duration::from_millis(1)),
            ConfigError::BatchWaitTooLong
        );
        assert_eq!(refused(|c| c.pipelines = 0), ConfigError::Pipelines);
        assert_eq!(
            ConfigError::Pipelines.to_string(),
            format!("pipelines must be between 1 and {PIPELINES_MAX}")
        );
        assert_eq!(
            refused(|c| c.pipelines = PIPELINES_MAX + 1),
            ConfigError::Pipelines
        );
        assert_eq!(refused(|c| c.record_writes = 0), ConfigError::RecordWrites);
        assert_eq!(
            ConfigError::RecordWrites.to_string(),
            format!("record writes must be between 1 and {RECORD_WRITES_MAX}")
        );
        assert_eq!(
            refused(|c| c.record_writes = RECORD_WRITES_MAX + 1),
            ConfigError::RecordWrites
        );
        let mut at_the_limit = ok.clone();
        at_the_limit.record_writes = RECORD_WRITES_MAX;
        at_the_limit.claim_cooldown = BATCH_WAIT_MAX;
        at_the_limit.record_linger = BATCH_WAIT_MAX;
        at_the_limit.pipelines = PIPELINES_MAX;
        assert!(at_the_limit.validate().is_ok());
        assert_ne!(owner_name("worker"), owner_name("worker"));
    }

    #[test]
    fn the_slots_are_split_evenly_over_the_pipelines_one_slot_at_least_each() {
        let split = |concurrency: usize, pipelines: usize| {
            let mut c = WorkerConfig::new("w");
            c.concurrency = concurrency;
            c.pipelines = pipelines;
            c.pipeline_slots()
        };
        assert_eq!(split(512, 2), vec![256, 256]);
        assert_eq!(split(64, 1), vec![64]);
        assert_eq!(split(7, 3), vec![3, 2, 2]);
        // Fewer slots than pipelines: one pipeline per slot.
        assert_eq!(split(1, PIPELINES_DEFAULT), vec![1]);
        assert_eq!(split(3, 16), vec![1, 1, 1]);
        for (concurrency, pipelines) in [(512, 2), (7, 3), (3, 16), (100, 16)] {
            assert_eq!(
                split(concurrency, pipelines).iter().sum::<usize>(),
                concurrency
            );
        }
    }
}

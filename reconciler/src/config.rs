//! Reconciler limits and policy, every one named.

use payonce_execution::SubmitPolicy;
use std::time::Duration;

/// Stuck operations one sweep step works on at once (lease expiries; lookups and their writes).
/// Each write is still one fenced statement; concurrency only overlaps their round trips and lets
/// Postgres group their commits (docs/decisions.md, "Sweeps overlap their per-operation steps"). Zero is treated as one.
pub const SWEEP_CONCURRENCY_DEFAULT: usize = 16;

/// Most rows one sweep write moves: expired leases per statement, and found lookups recorded
/// together. One commit per group instead of one per row is what lets a sweep resolve thousands
/// of stuck operations a second (docs/decisions.md, "Sweep writes in groups"); each row in a group is still fenced on its own. Zero
/// is treated as one.
pub const SWEEP_WRITE_BATCH_DEFAULT: usize = 500;

/// How the reconciler sweeps and what it may do.
#[derive(Debug, Clone)]
pub struct ReconcilerConfig {
    /// This process's name in leases and the audit trail.
    pub owner: String,
    /// Most rows handled per sweep step (expired leases; due checks).
    pub batch_size: u32,
    /// Stuck operations worked on at once within a sweep step ([`SWEEP_CONCURRENCY_DEFAULT`]).
    pub concurrency: usize,
    /// Most rows one sweep write moves ([`SWEEP_WRITE_BATCH_DEFAULT`]).
    pub write_batch: usize,
    /// Time between sweeps in daemon mode.
    pub interval: Duration,
    /// How long the sweep lease lasts (one reconciler sweeps at a time).
    pub sweep_lease_ttl: Duration,
    /// First delay before re-checking an operation whose lookup was unavailable or pending; doubles.
    pub check_backoff_base: Duration,
    /// Longest delay between checks.
    pub check_backoff_max: Duration,
    /// A same-key retry is attempted only if it can reach the processor this long before the key's
    /// retention window closes.
    pub retention_margin: Duration,
    /// Allow a resubmission after the retention window when the lookup is read-after-write
    /// consistent and found nothing. Off: such operations go to a human.
    pub resubmit_after_window: bool,
    /// How far before the first submission a list lookup starts (clock skew between us and the processor).
    pub lookup_skew: Duration,
    /// Longest a lookup waits for a read permit from the fleet limiter (`retry.limiter`, the process's
    /// limiter) before the check is deferred instead.
    pub lookup_permit_wait_max: Duration,
    /// Derives the key of a row the processor scan recreates (`payonce_core::intention`); `None`:
    /// lost rows are reported, not recreated.
    pub key_secret: Option<payonce_core::intention::KeySecret>,
    /// Time between scans of the processor's recent payments (every `sweep --once` scans).
    pub scan_interval: Duration,
    /// How far back a ledger's first scan looks ([`crate::scan::SCAN_LOOKBACK_DEFAULT`]).
    pub scan_lookback: Duration,
    /// How long prunable rows are kept (`payonce_ledger::retention`).
    pub retention: payonce_ledger::retention::Retention,
    /// Time between prunes in daemon mode (under the sweep lease).
    pub prune_interval: Duration,
    /// Limits for same-key retries (submit timeout, rate-limit waits) and the process's fleet
    /// limiter, which lookups draw from too.
    pub retry: SubmitPolicy,
    /// How long a same-key retry's lease lasts. Nothing renews it: the retry's waits for permits
    /// and past 429s stay within half of it.
    pub retry_lease_ttl: Duration,
}

impl ReconcilerConfig {
    /// Defaults for `owner`.
    pub fn new(owner: impl Into<String>) -> Self {
        let owner = owner.into();
        ReconcilerConfig {
            retry: SubmitPolicy::default(),
            retry_lease_ttl: Duration::from_secs(30),
            owner,
            batch_size: 200,
            concurrency: SWEEP_CONCURRENCY_DEFAULT,
            write_batch: SWEEP_WRITE_BATCH_DEFAULT,
            interval: Duration::from_secs(5),
            sweep_lease_ttl: Duration::from_secs(60),
            check_backoff_base: Duration::from_secs(2),
            check_backoff_max: Duration::from_secs(300),
            retention_margin: Duration::from_secs(300),
            resubmit_after_window: false,
            lookup_skew: Duration::from_secs(300),
            lookup_permit_wait_max: Duration::from_secs(2),
            key_secret: None,
            scan_interval: Duration::from_secs(60),
            scan_lookback: crate::scan::SCAN_LOOKBACK_DEFAULT,
            retention: payonce_ledger::retention::Retention::default(),
            prune_interval: Duration::from_secs(60 * 60),
        }
    }
}

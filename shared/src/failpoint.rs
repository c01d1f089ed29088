//! Named failure points for deterministic crash tests. A point is armed by the environment variable
//! `PAYONCE_FAILPOINTS` (comma-separated names, read once at start) or in-process by [`arm`]; an armed
//! point aborts the process on the spot (`std::process::abort`, as abrupt as SIGKILL: no destructors,
//! no flushing, no lease release).

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

/// The environment variable that arms failure points.
pub const ENV: &str = "PAYONCE_FAILPOINTS";

/// A place where a test may crash the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailPoint {
    /// The worker has claimed a batch; nothing recorded about submission yet.
    AfterClaim,
    /// `first_submitted_at` is committed; the request has not left.
    AfterSubmissionRecorded,
    /// The processor accepted the payment; the outcome is not recorded yet.
    AfterProcessorAccepted,
    /// The reconciler is in the middle of a sweep batch.
    MidSweep,
}

impl FailPoint {
    /// Stable name used in `PAYONCE_FAILPOINTS`.
    pub fn name(&self) -> &'static str {
        match self {
            FailPoint::AfterClaim => "after_claim",
            FailPoint::AfterSubmissionRecorded => "after_submission_recorded",
            FailPoint::AfterProcessorAccepted => "after_processor_accepted",
            FailPoint::MidSweep => "mid_sweep",
        }
    }
}

fn armed() -> &'static Mutex<HashSet<String>> {
    static ARMED: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    ARMED.get_or_init(|| {
        let from_env = std::env::var(ENV).unwrap_or_default();
        Mutex::new(
            from_env
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect(),
        )
    })
}

/// Arms a point in this process.
pub fn arm(point: FailPoint) {
    if let Ok(mut set) = armed().lock() {
        set.insert(point.name().to_string());
    }
}

/// Aborts the process if `point` is armed.
pub fn hit(point: FailPoint) {
    let is_armed = armed()
        .lock()
        .map(|set| set.contains(point.name()))
        .unwrap_or(false);
    if is_armed {
        eprintln!("payonce: failure point {} hit; aborting", point.name());
        std::process::abort();
    }
}

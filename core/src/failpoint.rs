//! Named failure points for deterministic crash tests. A point is armed by the environment variable
//! `PAYONCE_FAILPOINTS` (comma-separated entries, read once at start) or in-process by [`arm`].
//!
//! An entry is `name` or `name=mode`:
//! - `abort` (the default): abort the process on the spot (`std::process::abort`, as abrupt as
//!   SIGKILL: no destructors, no flushing, no lease release);
//! - `pause`: print [`PAUSED_MARKER`] and the point's name to stderr and block the calling thread for
//!   good, so a test can deliver a real external SIGKILL at exactly this point;
//! - `sleep:MS`: block the calling thread for MS milliseconds, then go on (a slow process that
//!   resumes, e.g. a worker that records after a webhook already did).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// The environment variable that arms failure points.
pub const ENV: &str = "PAYONCE_FAILPOINTS";

/// What a paused process prints to stderr (followed by the point's name) before it blocks.
pub const PAUSED_MARKER: &str = "payonce: failure point paused:";

/// The longest `sleep:MS` accepted: a limit so a typo cannot stall a process for hours.
pub const SLEEP_MAX: Duration = Duration::from_secs(600);

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

/// Every failure point (for tests and the chaos soak, which picks among them).
pub const ALL_FAILPOINTS: [FailPoint; 4] = [
    FailPoint::AfterClaim,
    FailPoint::AfterSubmissionRecorded,
    FailPoint::AfterProcessorAccepted,
    FailPoint::MidSweep,
];

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

/// What an armed point does when it is hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Abort the process.
    Abort,
    /// Announce on stderr and block the thread until the process is killed.
    Pause,
    /// Block the thread for a while, then continue.
    Sleep(Duration),
}

impl Mode {
    /// Parses `abort`, `pause` or `sleep:MS`; `None` for anything else.
    pub fn parse(raw: &str) -> Option<Mode> {
        match raw {
            "abort" => Some(Mode::Abort),
            "pause" => Some(Mode::Pause),
            _ => {
                let ms: u64 = raw.strip_prefix("sleep:")?.parse().ok()?;
                let d = Duration::from_millis(ms);
                (d <= SLEEP_MAX).then_some(Mode::Sleep(d))
            }
        }
    }
}

/// Parses a `PAYONCE_FAILPOINTS` value into point names and modes. An entry with an unknown mode is
/// armed as `abort`: a misspelt mode must still fail loudly rather than silently not fire.
pub fn parse_spec(spec: &str) -> HashMap<String, Mode> {
    spec.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|entry| match entry.split_once('=') {
            Some((name, mode)) => (
                name.trim().to_string(),
                Mode::parse(mode.trim()).unwrap_or(Mode::Abort),
            ),
            None => (entry.to_string(), Mode::Abort),
        })
        .collect()
}

fn armed() -> &'static Mutex<HashMap<String, Mode>> {
    static ARMED: OnceLock<Mutex<HashMap<String, Mode>>> = OnceLock::new();
    ARMED.get_or_init(|| Mutex::new(parse_spec(&std::env::var(ENV).unwrap_or_default())))
}

/// Arms a point in this process (mode `abort`).
pub fn arm(point: FailPoint) {
    if let Ok(mut map) = armed().lock() {
        map.insert(point.name().to_string(), Mode::Abort);
    }
}

/// Acts on `point` if it is armed: aborts, pauses for good, or sleeps and returns.
pub fn hit(point: FailPoint) {
    let mode = armed()
        .lock()
        .ok()
        .and_then(|map| map.get(point.name()).copied());
    match mode {
        None => {}
        Some(Mode::Abort) => {
            eprintln!("payonce: failure point {} hit; aborting", point.name());
            std::process::abort();
        }
        Some(Mode::Pause) => {
            eprintln!("{PAUSED_MARKER} {}", point.name());
            // Blocks this thread only: the rest of the process (lease renewal) keeps running, as a
            // process stuck in one request would, until the test kills it.
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
        Some(Mode::Sleep(d)) => {
            eprintln!("payonce: failure point {} sleeping {d:?}", point.name());
            std::thread::sleep(d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_names_and_modes() {
        let m =
            parse_spec(" after_claim , mid_sweep=pause,after_processor_accepted=sleep:250,x=bogus");
        assert_eq!(m.get("after_claim"), Some(&Mode::Abort));
        assert_eq!(m.get("mid_sweep"), Some(&Mode::Pause));
        assert_eq!(
            m.get("after_processor_accepted"),
            Some(&Mode::Sleep(Duration::from_millis(250)))
        );
        assert_eq!(m.get("x"), Some(&Mode::Abort), "unknown modes still fire");
        assert_eq!(m.len(), 4);
        assert!(parse_spec("").is_empty());
        assert_eq!(Mode::parse("sleep:600001"), None, "over SLEEP_MAX");
    }
}

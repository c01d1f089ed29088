//! Time: [`Timestamp`] for instants, [`std::time::Duration`] for spans, and the injected
//! [`Clock`] (production reads the system clock, tests move a manual one).
//!
//! An instant is stored as milliseconds since the Unix epoch (`BIGINT`/`INTEGER` columns); the
//! conversion to and from that integer happens at the SQL and wire boundaries only
//! ([`Timestamp::from_millis`], [`Timestamp::as_millis`]), so an instant cannot be passed where a
//! span or a count is meant.

use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// An instant: milliseconds since the Unix epoch. Serialized as that integer.
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Timestamp(i64);

impl Timestamp {
    /// The Unix epoch.
    pub const EPOCH: Timestamp = Timestamp(0);

    /// The instant a stored or wire integer of milliseconds since the epoch names.
    pub const fn from_millis(ms: i64) -> Timestamp {
        Timestamp(ms)
    }

    /// Milliseconds since the epoch, for a column or a wire field.
    pub const fn as_millis(self) -> i64 {
        self.0
    }

    /// The span from `earlier` to this instant; zero if `earlier` is not earlier.
    pub fn saturating_sub(self, earlier: Timestamp) -> Duration {
        let ms = self.0.saturating_sub(earlier.0).max(0);
        Duration::from_millis(u64::try_from(ms).unwrap_or_default())
    }

    /// This instant moved back by `span`, saturating at the smallest instant.
    pub fn saturating_sub_span(self, span: Duration) -> Timestamp {
        Timestamp(self.0.saturating_sub(span_ms(span)))
    }

    /// This instant in UTC as RFC 3339 with milliseconds (`2026-12-08T00:52:15.043Z`), for a person
    /// reading a message or an event's detail; the stored form stays the integer.
    pub fn rfc3339(self) -> String {
        let secs = self.0.div_euclid(1000);
        let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
        // Howard Hinnant's days-to-civil.
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let d = doy - (153 * mp + 2) / 5 + 1;
        let m = if mp < 10 { mp + 3 } else { mp - 9 };
        let y = yoe + era * 400 + i64::from(m <= 2);
        format!(
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
            rem / 3600,
            rem % 3600 / 60,
            rem % 60,
            self.0.rem_euclid(1000)
        )
    }
}

/// A span in whole milliseconds, saturating at `i64::MAX`.
fn span_ms(span: Duration) -> i64 {
    i64::try_from(span.as_millis()).unwrap_or(i64::MAX)
}

impl std::ops::Add<Duration> for Timestamp {
    type Output = Timestamp;
    /// Later by `span`, in whole milliseconds, saturating at the largest instant.
    fn add(self, span: Duration) -> Timestamp {
        Timestamp(self.0.saturating_add(span_ms(span)))
    }
}

impl std::ops::AddAssign<Duration> for Timestamp {
    fn add_assign(&mut self, span: Duration) {
        *self = *self + span;
    }
}

impl std::fmt::Display for Timestamp {
    /// The stored form (milliseconds since the epoch), as the event log has always shown it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// A source of "now".
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current instant.
    fn now(&self) -> Timestamp;
}

/// Shared handle to a clock.
pub type SharedClock = Arc<dyn Clock>;

/// The operating system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Timestamp(span_ms(since))
    }
}

/// A clock that moves only when told to; for tests.
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ms: AtomicI64,
}

impl ManualClock {
    /// Starts at `now`.
    pub fn new(now: Timestamp) -> Arc<Self> {
        Arc::new(ManualClock {
            now_ms: AtomicI64::new(now.as_millis()),
        })
    }
    /// Moves time forward by `span`.
    pub fn advance(&self, span: Duration) {
        self.now_ms.fetch_add(span_ms(span), Ordering::SeqCst);
    }
    /// Moves time to `now`, backwards too (a test that hands work to a process on the wall clock).
    pub fn set(&self, now: Timestamp) {
        self.now_ms.store(now.as_millis(), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.now_ms.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_move_instants_and_saturate() {
        let t = Timestamp::from_millis(1_000);
        assert_eq!((t + Duration::from_millis(250)).as_millis(), 1_250);
        assert_eq!(
            t.saturating_sub_span(Duration::from_secs(2)).as_millis(),
            -1_000
        );
        assert_eq!(
            Timestamp::from_millis(1_250).saturating_sub(t),
            Duration::from_millis(250)
        );
        assert_eq!(
            t.saturating_sub(Timestamp::from_millis(1_250)),
            Duration::ZERO
        );
        assert_eq!(
            Timestamp::from_millis(i64::MAX) + Duration::from_millis(1),
            Timestamp::from_millis(i64::MAX)
        );
        assert_eq!(t.to_string(), "1000");
    }

    #[test]
    fn rfc3339_is_utc_with_milliseconds() {
        assert_eq!(Timestamp::EPOCH.rfc3339(), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            Timestamp::from_millis(1_764_765_296_007).rfc3339(),
            "2025-12-03T12:34:56.007Z"
        );
        assert_eq!(
            Timestamp::from_millis(1_796_650_938_087).rfc3339(),
            "2026-12-07T13:42:18.087Z"
        );
    }

    #[test]
    fn a_manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(Timestamp::from_millis(5));
        assert_eq!(clock.now().as_millis(), 5);
        clock.advance(Duration::from_millis(10));
        assert_eq!(clock.now().as_millis(), 15);
        clock.set(Timestamp::from_millis(3));
        assert_eq!(clock.now().as_millis(), 3);
    }
}

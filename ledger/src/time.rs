//! The ledger's clock as a worker or a reconciler reads it (issue 43). Leases, expiries and the
//! key's retention window are decided on the database's time, read once per batch or sweep step
//! ([`LedgerClock::read`]), never on the process's own clock; each read also measures how far the
//! process's clock is off ([`Drift`]), for `/metrics` and a warning.

use crate::{LedgerError, LedgerTime};
use payonce_core::clock::{Clock, SharedClock, Timestamp};
use payonce_core::metrics::Exposition;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

/// Drift past which a process warns. Leases no longer depend on it, but a synced host is within
/// milliseconds of the database: a second off means its time keeping is broken, and what still runs
/// on a process's own clock on that host (the api's approval and link times, log lines) is off by
/// as much.
pub const CLOCK_DRIFT_WARN: Duration = Duration::from_secs(1);

/// Longest round trip to the database a drift sample is taken from. The database read its clock
/// somewhere within the round trip; measured against its midpoint (as NTP does), the error is at
/// most half the round trip, here a quarter of [`CLOCK_DRIFT_WARN`]. A longer round trip (a slow
/// link, a saturated server: issue 50 saw 700 ms per packet reported as 2.1–3.5 s of drift) says
/// nothing reliable about the clocks, so the sample is dropped and the last measure kept.
pub const DRIFT_ROUND_TRIP_MAX: Duration = Duration::from_millis(500);

/// The process's time to compare with the database's answer to a request sent at `sent` and
/// answered at `received` (both on the process's clock): the round trip's midpoint, or `None`
/// when the round trip is longer than [`DRIFT_ROUND_TRIP_MAX`].
pub fn round_trip_midpoint(sent: Timestamp, received: Timestamp) -> Option<Timestamp> {
    let round_trip_ms = received.as_millis().saturating_sub(sent.as_millis()).max(0);
    let round_trip_ms = u64::try_from(round_trip_ms).unwrap_or(0);
    if round_trip_ms > DRIFT_ROUND_TRIP_MAX.as_millis() as u64 {
        return None;
    }
    Some(sent + Duration::from_millis(round_trip_ms / 2))
}

/// How far a process's clock is from the database's, as last measured: the
/// `payonce_clock_drift_seconds` gauge, and a warning once each time it crosses
/// [`CLOCK_DRIFT_WARN`] (not at every read).
#[derive(Debug, Default)]
pub struct Drift {
    /// The database's time minus the process's at the last read, in milliseconds.
    ms: AtomicI64,
    /// Whether the last measure was past [`CLOCK_DRIFT_WARN`].
    beyond: AtomicBool,
    /// Whether the last read's round trip was past [`DRIFT_ROUND_TRIP_MAX`].
    slow: AtomicBool,
}

/// A measure of [`Drift`] that crossed [`CLOCK_DRIFT_WARN`], either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Crossing {
    /// Now past the limit (warned).
    Beyond,
    /// Back within it.
    Within,
}

impl Drift {
    /// Records one measure, `database - local`; logs and answers a crossing of [`CLOCK_DRIFT_WARN`].
    pub fn observe(
        &self,
        database: Timestamp,
        local: Timestamp,
        process: &str,
    ) -> Option<Crossing> {
        let ms = database.as_millis().saturating_sub(local.as_millis());
        self.ms.store(ms, Ordering::Relaxed);
        let beyond = ms.unsigned_abs() > CLOCK_DRIFT_WARN.as_millis() as u64;
        if self.beyond.swap(beyond, Ordering::Relaxed) == beyond {
            return None;
        }
        let drift_s = ms as f64 / 1_000.0;
        if beyond {
            tracing::warn!(
                process,
                drift_s,
                limit_s = CLOCK_DRIFT_WARN.as_secs_f64(),
                "this process's clock is off the database's (database minus process); leases follow the database's, fix the host's time sync"
            );
            Some(Crossing::Beyond)
        } else {
            tracing::info!(
                process,
                drift_s,
                "this process's clock is back within the drift limit of the database's"
            );
            Some(Crossing::Within)
        }
    }

    /// Records one read of the database's clock, `database`, by a request sent at `sent` and
    /// answered at `received` on the process's clock: measured against the round trip's midpoint
    /// ([`Drift::observe`]), or dropped when the round trip is too long to tell clock from latency
    /// (logged once each time the round trip crosses [`DRIFT_ROUND_TRIP_MAX`], naming latency).
    pub fn observe_round_trip(
        &self,
        database: Timestamp,
        sent: Timestamp,
        received: Timestamp,
        process: &str,
    ) -> Option<Crossing> {
        let midpoint = round_trip_midpoint(sent, received);
        let slow = midpoint.is_none();
        if self.slow.swap(slow, Ordering::Relaxed) != slow {
            let round_trip_ms = received.as_millis().saturating_sub(sent.as_millis());
            if slow {
                tracing::warn!(
                    process,
                    round_trip_ms,
                    limit_ms = DRIFT_ROUND_TRIP_MAX.as_millis() as u64,
                    "the database's answers are slow; clock drift is not measured until they are fast again (latency, not the host's clock)"
                );
            } else {
                tracing::info!(
                    process,
                    round_trip_ms,
                    "the database answers fast again; clock drift is measured again"
                );
            }
        }
        self.observe(database, midpoint?, process)
    }

    /// The last measure, in milliseconds (0 before the first).
    pub fn millis(&self) -> i64 {
        self.ms.load(Ordering::Relaxed)
    }

    /// Appends `payonce_clock_drift_seconds{process="…"}`.
    pub fn render(&self, e: &mut Exposition, process: &'static str) {
        e.gauge_seconds(
            "payonce_clock_drift_seconds",
            "The database's clock minus this process's, at the last read of the database's time.",
            &[("process", process)],
            self.millis(),
        );
    }
}

/// The database's clock for one process: [`LedgerClock::read`] before each batch of statements
/// that decide a lease, an expiry or a retention window; [`Clock::now`] for times that only
/// schedule (a retry's or a check's due time, computed between reads).
pub struct LedgerClock {
    ledger: Arc<dyn LedgerTime>,
    local: SharedClock,
    drift: Arc<Drift>,
    /// `worker` or `reconciler`, for the log.
    process: &'static str,
}

impl std::fmt::Debug for LedgerClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LedgerClock")
            .field("local", &self.local)
            .field("drift", &self.drift)
            .field("process", &self.process)
            .finish_non_exhaustive()
    }
}

impl LedgerClock {
    /// The ledger's clock as `process`, whose own clock is `local`, reads it; measures into `drift`.
    pub fn new(
        ledger: Arc<dyn LedgerTime>,
        local: SharedClock,
        drift: Arc<Drift>,
        process: &'static str,
    ) -> Self {
        LedgerClock {
            ledger,
            local,
            drift,
            process,
        }
    }

    /// The database's time now (one round trip on Postgres; the process's own clock on SQLite,
    /// which runs inside it), and the drift it shows.
    pub async fn read(&self) -> Result<Timestamp, LedgerError> {
        let sent = self.local.now();
        let now = self.ledger.now(sent).await?;
        let received = self.local.now();
        self.drift
            .observe_round_trip(now, sent, received, self.process);
        Ok(now)
    }
}

impl Clock for LedgerClock {
    /// Between reads: the process's clock moved by the drift last read, so it runs on the
    /// database's time without a round trip. Nothing that decides a lease uses it.
    fn now(&self) -> Timestamp {
        let local = self.local.now().as_millis();
        Timestamp::from_millis(local.saturating_add(self.drift.millis()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_is_measured_at_every_read_and_warned_once_per_crossing() {
        let drift = Drift::default();
        let local = Timestamp::from_millis(1_000_000);
        let limit = CLOCK_DRIFT_WARN;
        let at = |ahead: Duration| local + ahead;
        assert_eq!(
            drift.observe(at(limit), local, "test"),
            None,
            "at the limit"
        );
        assert_eq!(drift.millis(), 1_000);
        let past = limit + Duration::from_millis(1);
        assert_eq!(
            drift.observe(at(past), local, "test"),
            Some(Crossing::Beyond)
        );
        // Further reads past the limit, either way, measure without warning again.
        assert_eq!(
            drift.observe(at(Duration::from_secs(600)), local, "test"),
            None
        );
        assert_eq!(drift.millis(), 600_000);
        let behind = local.saturating_sub_span(Duration::from_secs(600));
        assert_eq!(drift.observe(behind, local, "test"), None);
        assert_eq!(drift.millis(), -600_000);
        assert_eq!(drift.observe(local, local, "test"), Some(Crossing::Within));
        assert_eq!(drift.observe(at(limit), local, "test"), None);
        assert_eq!(
            drift.observe(local.saturating_sub_span(past), local, "test"),
            Some(Crossing::Beyond),
            "behind crosses too"
        );
    }

    /// Issue 50: 700 ms each way to a database whose clock agrees with the process's. Against the
    /// time the request left, that read as 700 ms or more of drift; against the round trip's
    /// midpoint a fast link reads none, and a round trip this long is not a sample at all.
    #[test]
    fn drift_is_measured_against_the_round_trip_midpoint_and_slow_round_trips_are_dropped() {
        let drift = Drift::default();
        let sent = Timestamp::from_millis(1_000_000);
        let half = DRIFT_ROUND_TRIP_MAX / 2;
        // The database read its clock halfway through a round trip at the limit: no drift.
        let received = sent + DRIFT_ROUND_TRIP_MAX;
        assert_eq!(
            drift.observe_round_trip(sent + half, sent, received, "test"),
            None
        );
        assert_eq!(drift.millis(), 0, "the midpoint, not the send time");
        // A clock 2 s ahead on a fast link is still measured, and warned.
        let ahead = sent + Duration::from_secs(2) + Duration::from_millis(5);
        assert_eq!(
            drift.observe_round_trip(ahead, sent, sent + Duration::from_millis(10), "test"),
            Some(Crossing::Beyond)
        );
        assert_eq!(drift.millis(), 2_000);
        // 700 ms each way: dropped, the last measure kept, no crossing either way.
        let slow = sent + Duration::from_millis(1_400);
        assert_eq!(round_trip_midpoint(sent, slow), None);
        assert_eq!(
            drift.observe_round_trip(sent + Duration::from_millis(700), sent, slow, "test"),
            None
        );
        assert_eq!(drift.millis(), 2_000);
        // Just past the limit is dropped too; a clock that went backwards is a zero round trip.
        let past = sent + DRIFT_ROUND_TRIP_MAX + Duration::from_millis(1);
        assert_eq!(round_trip_midpoint(sent, past), None);
        assert_eq!(
            round_trip_midpoint(sent, sent.saturating_sub_span(Duration::from_millis(3))),
            Some(sent)
        );
    }

    #[test]
    fn the_gauge_is_in_seconds_per_process() {
        let drift = Drift::default();
        let local = Timestamp::from_millis(5_000_000);
        drift.observe(
            local.saturating_sub_span(Duration::from_millis(600_250)),
            local,
            "worker",
        );
        let mut e = Exposition::default();
        drift.render(&mut e, "worker");
        let text = e.finish();
        assert!(
            text.contains("payonce_clock_drift_seconds{process=\"worker\"} -600.25\n"),
            "{text}"
        );
        assert!(text.contains("# TYPE payonce_clock_drift_seconds gauge"));
    }
}

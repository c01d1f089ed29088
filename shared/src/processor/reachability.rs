//! A processor outage, as this process's submissions find it: whether the processor is reachable
//! (one warning when it stops answering, one when it answers again, and a gauge), and what becomes
//! of a payment that could not reach it (it waits, with backoff, while its approval holds).

use crate::clock::Timestamp;
use crate::ledger::Recorded;
use crate::metrics::Exposition;
use crate::processor::SubmitOutcome;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// Marks "reachable" in [`Reachability`]'s `down_since_ms` (no real outage starts at the epoch).
const REACHABLE: i64 = 0;

/// Whether the processor answered this process's last submission. Process-wide (see [`process`]):
/// every worker pipeline, the reconciler's retries and the console of one process share it.
#[derive(Debug, Default)]
pub struct Reachability {
    /// When the current outage began (ms since the epoch), or [`REACHABLE`].
    down_since_ms: AtomicI64,
}

/// What one observation changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The processor stopped answering at this time.
    WentDown(Timestamp),
    /// It answered again after being unreachable since this time.
    CameBack(Timestamp),
}

static PROCESS: Reachability = Reachability::new();

/// This process's view of the processor.
pub fn process() -> &'static Reachability {
    &PROCESS
}

impl Reachability {
    /// Reachable until a submission finds otherwise.
    pub const fn new() -> Reachability {
        Reachability {
            down_since_ms: AtomicI64::new(REACHABLE),
        }
    }

    /// Records what a submission found and logs a change once: a warning when the processor
    /// becomes unreachable, another when it answers again. Any HTTP answer (a success, a decline, a
    /// 429, a refusal) means it is reachable; an unknown outcome says nothing either way.
    pub fn observe(&self, outcome: &SubmitOutcome, now: Timestamp) -> Option<Change> {
        match outcome {
            SubmitOutcome::Unreachable { reason } => {
                let at = now.as_millis().max(REACHABLE + 1);
                self.down_since_ms
                    .compare_exchange(REACHABLE, at, Ordering::AcqRel, Ordering::Acquire)
                    .ok()
                    .map(|_| {
                        tracing::warn!(%reason,
                            "the processor is unreachable: payments wait in ready and retry with backoff \
                             while their approval holds (nothing was sent)");
                        Change::WentDown(now)
                    })
            }
            SubmitOutcome::Succeeded { .. }
            | SubmitOutcome::Declined { .. }
            | SubmitOutcome::NotSubmitted { .. }
            | SubmitOutcome::RateLimited { .. } => {
                let since = self.down_since_ms.swap(REACHABLE, Ordering::AcqRel);
                (since != REACHABLE).then(|| {
                    let since = Timestamp::from_millis(since);
                    tracing::warn!(
                        down_since_ms = since.as_millis(),
                        down_for_s = now.as_millis().saturating_sub(since.as_millis()) / 1_000,
                        "the processor is reachable again"
                    );
                    Change::CameBack(since)
                })
            }
            SubmitOutcome::Unknown { .. } => None,
        }
    }

    /// Since when the processor has been unreachable, if it is now.
    pub fn down_since(&self) -> Option<Timestamp> {
        let since = self.down_since_ms.load(Ordering::Acquire);
        (since != REACHABLE).then(|| Timestamp::from_millis(since))
    }

    /// `payonce_processor_reachable`: 1, or 0 while submissions cannot reach the processor.
    pub fn render(&self, e: &mut Exposition) {
        e.gauge(
            "payonce_processor_reachable",
            "1 when this process's last submission reached the processor, 0 while none can",
            &[],
            i64::from(self.down_since().is_none()),
        );
    }
}

/// What becomes of a payment whose submission could not reach the processor (nothing was sent, so
/// it is no failed attempt): back to `ready` after `delay` while its approval still holds then, else
/// to a human, saying why. Waiting past the approval would only end in `approval_expired`; a human
/// can ask the customer again.
pub fn while_unreachable(
    reason: String,
    approval_expires_at: Option<Timestamp>,
    now: Timestamp,
    delay: Duration,
) -> Recorded {
    let retry_at = now + delay;
    match approval_expires_at {
        Some(expiry) if retry_at < expiry => Recorded::RetryLater {
            reason,
            available_at: retry_at,
        },
        _ => Recorded::Exhausted {
            reason: format!(
                "the processor stayed unreachable until the approval's validity ran out \
                 (approval expires at {} ms); nothing was sent: {reason}",
                approval_expires_at.map_or(0, |t| t.as_millis())
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    #[test]
    fn one_change_per_outage_and_per_recovery() {
        let r = Reachability::new();
        let down = SubmitOutcome::Unreachable {
            reason: "refused".into(),
        };
        let up = SubmitOutcome::Declined {
            code: "card_declined".into(),
            message: "m".into(),
            reference: None,
        };
        let unknown = SubmitOutcome::Unknown {
            reason: "timeout".into(),
            reference: None,
        };
        assert_eq!(r.observe(&up, at(1)), None, "already reachable");
        assert_eq!(r.observe(&down, at(10)), Some(Change::WentDown(at(10))));
        assert_eq!(r.observe(&down, at(11)), None, "one warning per outage");
        assert_eq!(r.observe(&unknown, at(12)), None, "an unknown says nothing");
        assert_eq!(r.down_since(), Some(at(10)));
        let mut e = Exposition::default();
        r.render(&mut e);
        assert!(e.finish().contains("payonce_processor_reachable 0\n"));
        assert_eq!(r.observe(&up, at(20)), Some(Change::CameBack(at(10))));
        assert_eq!(r.observe(&up, at(21)), None);
        assert_eq!(r.down_since(), None);
        let mut e = Exposition::default();
        r.render(&mut e);
        assert!(e.finish().contains("payonce_processor_reachable 1\n"));
    }

    #[test]
    fn an_unreachable_payment_waits_while_its_approval_holds_then_goes_to_a_human() {
        let delay = Duration::from_secs(60);
        match while_unreachable("refused".into(), Some(at(200_000)), at(100_000), delay) {
            Recorded::RetryLater {
                reason,
                available_at: available_at_ms,
            } => {
                assert_eq!(reason, "refused");
                assert_eq!(available_at_ms, at(160_000));
            }
            other => panic!("{other:?}"),
        }
        // The next try would come after the approval expired: a human now, with that reason.
        match while_unreachable("refused".into(), Some(at(150_000)), at(100_000), delay) {
            Recorded::Exhausted { reason } => {
                assert!(
                    reason.starts_with(
                        "the processor stayed unreachable until the approval's validity ran out"
                    ),
                    "{reason}"
                );
                assert!(reason.ends_with("nothing was sent: refused"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            while_unreachable("refused".into(), None, at(0), delay),
            Recorded::Exhausted { .. }
        ));
    }
}

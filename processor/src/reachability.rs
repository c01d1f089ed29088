//! A processor outage, as this process's submissions find it: whether the processor is reachable
//! (one warning when it stops answering, one when it answers again, and a gauge), what becomes
//! of a payment that could not reach it (it waits, with backoff, while its approval holds), and the
//! recorder that writes each change into the ledger, where every api reads it
//! (`ledger::outage`).

use crate::SubmitOutcome;
use payonce_core::clock::{Clock, Timestamp};
use payonce_core::metrics::Exposition;
use payonce_ledger::Recorded;
use payonce_ledger::outage::OutageLedger;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;
use tokio::sync::Notify;

/// Marks "reachable" in [`Reachability`]'s `down_since_ms` (no real outage starts at the epoch).
const REACHABLE: i64 = 0;
/// Marks "no answer seen yet": a fresh process's first answer is recorded too, so a ledger row a
/// process left "unreachable" when it stopped mid-outage does not outlive the outage.
const UNOBSERVED: i64 = -1;
/// Pause before the recorder tries again to write a change the ledger refused (the daemons' `retry`
/// for [`Reachability::record_into`]).
pub const RECORD_RETRY: Duration = Duration::from_secs(5);

/// Whether the processor answered this process's last submission. Process-wide (see [`process`]):
/// every worker pipeline, the reconciler's retries and the console of one process share it.
#[derive(Debug, Default)]
pub struct Reachability {
    /// When the current outage began (ms since the epoch), [`REACHABLE`] or [`UNOBSERVED`].
    down_since_ms: AtomicI64,
    /// Wakes the recorder on every change.
    changed: Notify,
}

/// What one observation changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The processor stopped answering at this time.
    WentDown(Timestamp),
    /// It answered again after being unreachable since this time.
    CameBack(Timestamp),
    /// The process's first answer: reachable (nothing is logged; the ledger is told).
    FirstAnswer,
}

static PROCESS: Reachability = Reachability::new();

/// This process's view of the processor.
pub fn process() -> &'static Reachability {
    &PROCESS
}

impl Reachability {
    /// Reachable (as far as anyone can tell) until a submission finds otherwise.
    pub const fn new() -> Reachability {
        Reachability {
            down_since_ms: AtomicI64::new(UNOBSERVED),
            changed: Notify::const_new(),
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
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |since| {
                        (since <= REACHABLE).then_some(at)
                    })
                    .ok()
                    .map(|_| {
                        tracing::warn!(%reason,
                            "the processor is unreachable: payments wait in ready and retry with backoff \
                             while their approval holds (nothing was sent)");
                        self.changed.notify_waiters();
                        Change::WentDown(now)
                    })
            }
            SubmitOutcome::Succeeded { .. }
            | SubmitOutcome::Declined { .. }
            | SubmitOutcome::NotSubmitted { .. }
            | SubmitOutcome::RateLimited { .. }
            | SubmitOutcome::KeyReused { .. }
            | SubmitOutcome::Misconfigured { .. } => {
                match self.down_since_ms.swap(REACHABLE, Ordering::AcqRel) {
                    REACHABLE => None,
                    UNOBSERVED => {
                        self.changed.notify_waiters();
                        Some(Change::FirstAnswer)
                    }
                    since => {
                        let since = Timestamp::from_millis(since);
                        tracing::warn!(
                            down_since_ms = since.as_millis(),
                            down_for_s = now.as_millis().saturating_sub(since.as_millis()) / 1_000,
                            "the processor is reachable again"
                        );
                        self.changed.notify_waiters();
                        Some(Change::CameBack(since))
                    }
                }
            }
            SubmitOutcome::Unknown { .. } => None,
        }
    }

    /// Since when the processor has been unreachable, if it is now.
    pub fn down_since(&self) -> Option<Timestamp> {
        let since = self.down_since_ms.load(Ordering::Acquire);
        (since > REACHABLE).then(|| Timestamp::from_millis(since))
    }

    /// What the ledger should say: `Some(true)` unreachable, `Some(false)` reachable, `None`
    /// before the first answer.
    fn to_record(&self) -> Option<bool> {
        match self.down_since_ms.load(Ordering::Acquire) {
            UNOBSERVED => None,
            since => Some(since > REACHABLE),
        }
    }

    /// Writes each change of this process's view into the ledger (`by`: the process's name), at
    /// the ledger's time, until dropped: the processes that submit payments run it, every api reads
    /// the row. A write the ledger refuses is tried again after `retry` ([`RECORD_RETRY`]) or at
    /// the next change, whichever comes first; only the latest state is written, so a flapping
    /// processor costs one write per change seen, never a backlog.
    pub async fn record_into(
        &self,
        ledger: &dyn OutageLedger,
        by: &str,
        clock: &dyn Clock,
        retry: Duration,
    ) {
        let mut recorded: Option<bool> = None;
        loop {
            // Registered before the state is read: a change after the read still wakes the loop.
            let changed = self.changed.notified();
            let wanted = self.to_record();
            if let Some(down) = wanted.filter(|w| recorded != Some(*w)) {
                match ledger.record_reachability(down, by, clock.now()).await {
                    Ok(_) => recorded = Some(down),
                    Err(error) => {
                        tracing::warn!(%error, down,
                            "could not record the processor's reachability in the ledger; trying again");
                        tokio::select! {
                            () = changed => {}
                            () = tokio::time::sleep(retry) => {}
                        }
                        continue;
                    }
                }
            }
            changed.await;
        }
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
            // Waiting out an outage spends none of `attempt_max`.
            counted: false,
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
        assert_eq!(r.down_since(), None);
        assert_eq!(
            r.to_record(),
            None,
            "nothing to record before the first answer"
        );
        assert_eq!(r.observe(&up, at(1)), Some(Change::FirstAnswer));
        assert_eq!(r.to_record(), Some(false));
        assert_eq!(r.observe(&up, at(2)), None, "already reachable");
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
                counted,
            } => {
                assert!(!counted, "an outage spends none of attempt_max");
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

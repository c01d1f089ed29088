//! What a submission may do and how its outcome is scheduled: the limits every caller of
//! [`super::execute`] shares (the worker's daemon and the reconciler's same-key retry).

use backon::{BackoffBuilder, ExponentialBuilder};
use payonce_core::clock::Timestamp;
use payonce_ledger::{Declined, Paid, Recorded};
use payonce_processor::SubmitOutcome;
use payonce_processor::limiter::{SharedLimiter, Unlimited};
use std::sync::Arc;
use std::time::Duration;

pub use payonce_core::operation::KEY_REUSED_HEAD;

/// Limits of one submission and the schedule of what follows it.
#[derive(Debug, Clone)]
pub struct SubmitPolicy {
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
    /// The fleet's request budget at the processor: one write permit per submission.
    pub limiter: SharedLimiter,
    /// First pause after a 429 when the processor gives no advice (doubles, with jitter).
    pub rate_limit_backoff_base: Duration,
    /// Longest pause after a 429.
    pub rate_limit_backoff_max: Duration,
    /// Longest a submission keeps its claim waiting for permits and retrying 429s in place (the
    /// daemon renews the lease meanwhile); past it, the operation goes back to `ready` without
    /// counting as a failed attempt.
    pub rate_limit_wait_max: Duration,
    /// Before the first submission of a payment, ask the processor whether it already holds a
    /// payment for the operation's business key (Stripe: search by metadata). For ledgers that may
    /// lose rows older than the processor's key retention (backups restored days later,
    /// asynchronous replicas): within the retention the same key replays the first payment anyway.
    /// Costs one read per payment.
    pub check_before_submit: bool,
}

impl Default for SubmitPolicy {
    fn default() -> Self {
        SubmitPolicy {
            submit_timeout: Duration::from_secs(20),
            attempt_max: 5,
            retry_base: Duration::from_millis(500),
            retry_max: Duration::from_secs(60),
            first_check_delay: Duration::from_secs(2),
            limiter: Arc::new(Unlimited::default()),
            rate_limit_backoff_base: Duration::from_millis(250),
            rate_limit_backoff_max: Duration::from_secs(5),
            rate_limit_wait_max: Duration::from_secs(120),
            check_before_submit: false,
        }
    }
}

impl SubmitPolicy {
    /// The retry delay after `attempt` not-submitted outcomes: exponential from `retry_base`,
    /// capped at `retry_max`, with jitter (backon).
    pub fn retry_delay(&self, attempt: i64) -> Duration {
        jittered(self.retry_base, self.retry_max, attempt.max(1))
    }

    /// The pause after the `n`th 429 in a row when the processor gave no advice: exponential from
    /// `rate_limit_backoff_base`, capped at `rate_limit_backoff_max`, with jitter (backon) so a
    /// fleet refused together does not come back together.
    pub fn rate_limit_delay(&self, n: u32) -> Duration {
        jittered(
            self.rate_limit_backoff_base,
            self.rate_limit_backoff_max,
            i64::from(n.max(1)),
        )
    }

    /// Maps a submission outcome to the fenced write that records it; `attempt` is this attempt's
    /// number among those that count toward `attempt_max` (the row's `not_sent_attempts` + 1: a
    /// refused connection or a rate limit never counts, so an outage never spends the cap).
    pub fn to_recorded(&self, outcome: SubmitOutcome, attempt: i64, now: Timestamp) -> Recorded {
        match outcome {
            SubmitOutcome::Succeeded {
                reference, result, ..
            } => Recorded::Succeeded(Paid { reference, result }),
            SubmitOutcome::Declined {
                code,
                message,
                reference,
            } => Recorded::Failed(Declined {
                code,
                message,
                reference,
            }),
            // Without the operation's approval at hand (see `submit_claimed`), like any attempt
            // that sent nothing.
            // The cap is reached, never passed: a count above it (a lowered `attempt_max`) is
            // reported at it.
            SubmitOutcome::NotSubmitted { reason } | SubmitOutcome::Unreachable { reason }
                if attempt >= self.attempt_max =>
            {
                Recorded::Exhausted {
                    reason: format!(
                        "{reason} (attempt {} of {} that executed nothing)",
                        attempt.min(self.attempt_max),
                        self.attempt_max
                    ),
                }
            }
            SubmitOutcome::NotSubmitted { reason } | SubmitOutcome::Unreachable { reason } => {
                Recorded::RetryLater {
                    reason,
                    available_at: now + self.retry_delay(attempt),
                    counted: true,
                }
            }
            // Only reached after `rate_limit_wait_max` of pacing and in-place retries (or at
            // shutdown): back to ready, never exhausted, because a refusal before execution is not
            // a failed attempt.
            SubmitOutcome::RateLimited {
                reason,
                retry_after_ms,
            } => Recorded::RetryLater {
                reason,
                available_at: now
                    + retry_after_ms
                        .map_or_else(|| self.rate_limit_delay(1), Duration::from_millis),
                counted: false,
            },
            SubmitOutcome::Unknown { reason, reference } => Recorded::Unknown {
                reason,
                reference,
                next_check_at: now + self.first_check_delay,
            },
            // The submission step words it with the payment the processor holds
            // (`submit::key_reused`); here, for a caller without the processor at hand.
            SubmitOutcome::KeyReused { reason } => Recorded::NeedsAttention {
                reason: format!("{KEY_REUSED_HEAD}: {reason}"),
            },
            // The processor answered: never retried automatically (it would refuse every attempt
            // the same way), never exhausted as if nothing had been sent.
            SubmitOutcome::Misconfigured { reason } => Recorded::NeedsAttention { reason },
        }
    }
}

/// The `steps`th delay of an exponential backoff from `base` capped at `max`, with jitter.
fn jittered(base: Duration, max: Duration, steps: i64) -> Duration {
    let steps = usize::try_from(steps).unwrap_or(usize::MAX);
    ExponentialBuilder::default()
        .with_min_delay(base)
        .with_max_delay(max)
        .with_jitter()
        .with_max_times(steps)
        .build()
        .nth(steps - 1)
        .unwrap_or(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_submitted_retries_with_growing_bounded_delay_then_exhausts() {
        let policy = SubmitPolicy::default();
        let now = Timestamp::from_millis(1_000_000);
        let delay = |attempt| match policy.to_recorded(
            SubmitOutcome::NotSubmitted {
                reason: "refused".into(),
            },
            attempt,
            now,
        ) {
            Recorded::RetryLater {
                available_at: available_at_ms,
                ..
            } => available_at_ms.saturating_sub(now).as_millis(),
            other => panic!("expected a retry, got {other:?}"),
        };
        let first = delay(1);
        assert!((500..=1_000).contains(&first), "first delay {first} ms");
        assert!(delay(4) >= 4_000, "delays grow");
        let last = policy.to_recorded(
            SubmitOutcome::NotSubmitted {
                reason: "refused".into(),
            },
            policy.attempt_max,
            now,
        );
        assert!(matches!(last, Recorded::Exhausted { .. }));
    }

    #[test]
    fn rate_limited_goes_back_to_ready_and_never_exhausts() {
        let policy = SubmitPolicy::default();
        let now = Timestamp::from_millis(1_000);
        for attempt in [1, policy.attempt_max, policy.attempt_max + 3] {
            let r = policy.to_recorded(
                SubmitOutcome::RateLimited {
                    reason: "429".into(),
                    retry_after_ms: None,
                },
                attempt,
                now,
            );
            match r {
                Recorded::RetryLater {
                    available_at: available_at_ms,
                    ..
                } => assert!(
                    available_at_ms > now && available_at_ms <= now + Duration::from_secs(5)
                ),
                other => panic!("attempt {attempt}: {other:?}"),
            }
        }
        let advised = policy.to_recorded(
            SubmitOutcome::RateLimited {
                reason: "429".into(),
                retry_after_ms: Some(7_000),
            },
            1,
            now,
        );
        assert!(matches!(
            advised,
            Recorded::RetryLater {
                available_at: available_at_ms,
                ..
            } if available_at_ms == Timestamp::from_millis(8_000)
        ));
        let first = policy.rate_limit_delay(1);
        assert!(
            first >= policy.rate_limit_backoff_base && first <= policy.rate_limit_backoff_base * 2
        );
        assert!(policy.rate_limit_delay(30) <= policy.rate_limit_backoff_max * 2);
    }

    #[test]
    fn unknown_is_scheduled_for_a_check_and_declines_fail() {
        let policy = SubmitPolicy::default();
        let unknown = policy.to_recorded(
            SubmitOutcome::Unknown {
                reason: "timeout".into(),
                reference: None,
            },
            1,
            Timestamp::from_millis(10),
        );
        assert!(matches!(
            unknown,
            Recorded::Unknown {
                next_check_at: next_check_at_ms,
                ..
            } if next_check_at_ms == Timestamp::from_millis(2_010)
        ));
        let declined = SubmitOutcome::Declined {
            code: "card_declined".into(),
            message: "no".into(),
            reference: None,
        };
        assert!(matches!(
            policy.to_recorded(declined, 1, Timestamp::from_millis(10)),
            Recorded::Failed(_)
        ));
    }
}

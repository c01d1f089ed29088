//! One operation's path through the worker: server-side checks, the committed submission record,
//! the submission with its stored key, and the outcome mapped onto a fenced ledger write.

use crate::config::WorkerConfig;
use crate::metrics::WorkerMetrics;
use backon::{BackoffBuilder, ExponentialBuilder};
use payonce_shared::clock::{SharedClock, Timestamp};
use payonce_shared::details::OperationKind;
use payonce_shared::failpoint::{self, FailPoint};
use payonce_shared::ledger::{
    Declined, Fence, LedgerError, Operation, Paid, Queue, RecordOutcome, Recorded,
};
use payonce_shared::limiter::{Budget, acquire};
use payonce_shared::processor::{
    FoundStatus, PriorPayment, Processor, SubmitOutcome, operation, reachability,
};
use payonce_shared::state::Status;
use std::time::Duration;

/// Re-checks, server-side, everything a submission depends on. `Some` is the rejection to record;
/// nothing external has happened.
pub fn precheck(op: &Operation, now: Timestamp) -> Option<Recorded> {
    let reject = |code: &str, message: &str| {
        Some(Recorded::Rejected {
            code: code.into(),
            message: message.into(),
        })
    };
    if op.details.hash() != op.details_hash {
        return reject(
            "details_changed",
            "the stored details no longer match their hash",
        );
    }
    match op.details.kind() {
        OperationKind::Payment => {}
        // Details' constructors make a refund always name its payment; asserted here, before any call.
        OperationKind::Refund if op.details.refund_of().is_none() => {
            return reject(
                "refund_without_payment",
                "the refund's details name no payment",
            );
        }
        OperationKind::Refund => {}
    }
    let Some(approved) = &op.approved_hash else {
        return reject(
            "approval_missing",
            "no approval is recorded for this operation",
        );
    };
    if *approved != op.details_hash {
        return reject("approval_mismatch", "the approval is for different details");
    }
    match op.approval_expires_at_ms {
        Some(expiry) if expiry > now => None,
        _ => reject(
            "approval_expired",
            "the approval expired before the payment was submitted",
        ),
    }
}

/// The retry delay after `attempt` not-submitted outcomes: exponential from `retry_base`, capped at
/// `retry_max`, with jitter (backon).
pub fn retry_delay(config: &WorkerConfig, attempt: i64) -> Duration {
    let steps = usize::try_from(attempt.max(1)).unwrap_or(usize::MAX);
    ExponentialBuilder::default()
        .with_min_delay(config.retry_base)
        .with_max_delay(config.retry_max)
        .with_jitter()
        .with_max_times(steps)
        .build()
        .nth(steps - 1)
        .unwrap_or(config.retry_max)
}

/// The pause after the `n`th 429 in a row when the processor gave no advice: exponential from
/// `rate_limit_backoff_base`, capped at `rate_limit_backoff_max`, with jitter (backon) so a fleet
/// refused together does not come back together.
pub fn rate_limit_delay(config: &WorkerConfig, n: u32) -> Duration {
    let steps = usize::try_from(n.max(1)).unwrap_or(usize::MAX);
    ExponentialBuilder::default()
        .with_min_delay(config.rate_limit_backoff_base)
        .with_max_delay(config.rate_limit_backoff_max)
        .with_jitter()
        .with_max_times(steps)
        .build()
        .nth(steps - 1)
        .unwrap_or(config.rate_limit_backoff_max)
}

/// Maps a submission outcome to the fenced write that records it.
pub fn to_recorded(
    outcome: SubmitOutcome,
    attempt: i64,
    config: &WorkerConfig,
    now: Timestamp,
) -> Recorded {
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
        // Without the operation's approval at hand (see `submit_claimed`), like any attempt that
        // sent nothing.
        SubmitOutcome::NotSubmitted { reason } | SubmitOutcome::Unreachable { reason }
            if attempt >= config.attempt_max =>
        {
            Recorded::Exhausted {
                reason: format!("{reason} (attempt {attempt} of {})", config.attempt_max),
            }
        }
        SubmitOutcome::NotSubmitted { reason } | SubmitOutcome::Unreachable { reason } => {
            Recorded::RetryLater {
                reason,
                available_at_ms: now + retry_delay(config, attempt),
            }
        }
        // Only reached after `rate_limit_wait_max` of pacing and in-place retries (or at shutdown):
        // back to ready, never exhausted, because a refusal before execution is not a failed attempt.
        SubmitOutcome::RateLimited {
            reason,
            retry_after_ms,
        } => Recorded::RetryLater {
            reason,
            available_at_ms: now
                + retry_after_ms.map_or_else(|| rate_limit_delay(config, 1), Duration::from_millis),
        },
        SubmitOutcome::Unknown { reason, reference } => Recorded::Unknown {
            reason,
            reference,
            next_check_at_ms: now + config.first_check_delay,
        },
    }
}

/// Submits like [`submit`], paced by the fleet limiter: waits for a write permit before each request
/// (waiting sends nothing), and answers a 429 by sending the same request with the same key again after
/// the processor's advice or a jittered backoff, without recording anything in between: the claim and
/// its attempt stay as they are. Returns `RateLimited` only once `wait_max` has passed or `stop` is set;
/// every other outcome as the processor gave it.
pub async fn submit_paced(
    processor: &dyn Processor,
    op: &Operation,
    config: &WorkerConfig,
    metrics: &WorkerMetrics,
    wait_max: Duration,
    stop: Option<&tokio::sync::watch::Receiver<bool>>,
) -> SubmitOutcome {
    let give_up_at = tokio::time::Instant::now() + wait_max;
    let stopped = || stop.is_some_and(|s| *s.borrow());
    let mut refusals: u32 = 0;
    loop {
        let left = give_up_at.saturating_duration_since(tokio::time::Instant::now());
        let permit = acquire(config.limiter.as_ref(), Budget::Write, left);
        // Shutdown does not wait for a permit: nothing was sent, so the row goes back to ready.
        let permit = match stop {
            Some(stop) => {
                let mut stop = stop.clone();
                tokio::select! {
                    p = permit => p.map_err(|denied| format!("fleet limiter: {denied}")),
                    _ = stop.wait_for(|s| *s) => Err("shutdown while waiting for a permit".to_string()),
                }
            }
            None => permit
                .await
                .map_err(|denied| format!("fleet limiter: {denied}")),
        };
        if let Err(reason) = permit {
            metrics.rate_limited_requeued.inc();
            return SubmitOutcome::RateLimited {
                reason,
                retry_after_ms: None,
            };
        }
        let outcome = submit(processor, op, config.submit_timeout).await;
        let SubmitOutcome::RateLimited { retry_after_ms, .. } = &outcome else {
            return outcome;
        };
        metrics.rate_limited.inc();
        refusals = refusals.saturating_add(1);
        let pause = retry_after_ms
            .map(Duration::from_millis)
            .unwrap_or_else(|| rate_limit_delay(config, refusals));
        tracing::info!(operation = %op.id, attempt = op.attempt, refusals, ?pause,
            "processor rate-limited the submission; sending it again with the same key");
        if stopped() || tokio::time::Instant::now() + pause >= give_up_at {
            metrics.rate_limited_requeued.inc();
            return outcome;
        }
        match stop {
            Some(stop) => {
                let mut stop = stop.clone();
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    _ = stop.wait_for(|s| *s) => {
                        metrics.rate_limited_requeued.inc();
                        return outcome;
                    }
                }
            }
            None => tokio::time::sleep(pause).await,
        }
    }
}

/// Submits with the operation's stored key and the recorded details (a payment or a refund, as its
/// kind says), bounded by `timeout`. A timeout is an unknown outcome: the request may have arrived.
pub async fn submit(processor: &dyn Processor, op: &Operation, timeout: Duration) -> SubmitOutcome {
    match tokio::time::timeout(timeout, operation::submit(processor, op)).await {
        Ok(outcome) => outcome,
        Err(_) => SubmitOutcome::Unknown {
            reason: format!("no answer within {timeout:?}"),
            reference: None,
        },
    }
}

/// Counts a recorded outcome.
pub fn count(metrics: &WorkerMetrics, recorded: &Recorded) {
    match recorded {
        Recorded::Succeeded(_) => metrics.succeeded.inc(),
        Recorded::Failed(_) => metrics.failed.inc(),
        Recorded::RetryLater { .. } => metrics.retried.inc(),
        Recorded::Unknown { .. } => metrics.unknown.inc(),
        Recorded::Rejected { .. } => metrics.rejected.inc(),
        Recorded::Exhausted { .. } | Recorded::NeedsAttention { .. } => {
            metrics.needs_attention.inc()
        }
    }
}

/// After a fenced write lost: was it someone else recording the truth first (a webhook), or did our
/// lease lapse? Counts and logs either way; never overwrites.
pub async fn explain_fenced(ledger: &dyn Queue, metrics: &WorkerMetrics, op: &Operation) {
    match ledger.current(&Fence::of(op)).await {
        Ok(now) if now.status.is_terminal() || now.status == Status::NeedsAttention => {
            metrics.already_recorded.inc();
            tracing::info!(operation = %op.id, attempt = op.attempt, status = now.status.as_str(),
                "outcome already recorded by another path");
        }
        Ok(now) => {
            metrics.lost_leases.inc();
            tracing::warn!(operation = %op.id, attempt = op.attempt, current_attempt = now.attempt,
                status = now.status.as_str(), "lease lost; the outcome was not recorded by this worker");
        }
        Err(error) => {
            tracing::warn!(operation = %op.id, %error, "could not read the row after a fenced write")
        }
    }
}

/// The one submission step for a claimed operation whose start is already committed
/// (`mark_submitting`): the paced submission with its stored key and details, timed, classified
/// into the fenced write that records it. Both the daemon's batches and [`execute_one`] go through
/// here, so not-submitted backoff, rate-limit handling and unknown outcomes are decided once.
pub async fn submit_claimed(
    processor: &dyn Processor,
    clock: &SharedClock,
    config: &WorkerConfig,
    metrics: &WorkerMetrics,
    op: &Operation,
    wait_max: Duration,
    stop: Option<&tokio::sync::watch::Receiver<bool>>,
) -> Recorded {
    if let Some(recorded) = check_before_submit(processor, clock, config, op).await {
        return recorded;
    }
    let started = std::time::Instant::now();
    let outcome = submit_paced(processor, op, config, metrics, wait_max, stop).await;
    metrics.submit_latency.observe(started.elapsed());
    if let SubmitOutcome::Succeeded {
        reference,
        replayed,
        ..
    } = &outcome
    {
        failpoint::hit(FailPoint::AfterProcessorAccepted);
        // This attempt made the row's first submission record before sending, so no earlier request
        // of this row can exist: a replay means another row with this intention sent it, one the
        // ledger no longer has (a restore, an asynchronous failover). The replay is the first
        // payment, so recording it is right; the loss is what on-call must hear about.
        if *replayed && op.first_submitted_attempt == Some(op.attempt) {
            metrics.replayed_first_submissions.inc();
            tracing::error!(operation = %op.id, %reference,
                "ALERT: the processor replayed this operation's first submission: the ledger had \
                 lost the row that paid it (restore or failover?); recorded as that payment");
        }
    }
    tracing::debug!(operation = %op.id, ?outcome, "processor answered");
    let now = clock.now();
    reachability::process().observe(&outcome, now);
    if let SubmitOutcome::Unreachable { reason } = outcome {
        let delay = retry_delay(config, op.attempt);
        return reachability::while_unreachable(reason, op.approval_expires_at_ms, now, delay);
    }
    to_recorded(outcome, op.attempt, config, now)
}

/// Before the first submission of a payment, with `check_before_submit` on: what the processor
/// already holds for its business key decides instead of a new request (`None`: submit).
/// - the same intention (tenant, business key, details) paid: recorded as succeeded with it, as a
///   lookup would (a ledger that lost the row past the key's retention, re-driven by upstream);
///   in progress: unknown, for the reconciler's lookups;
/// - other details paid or in progress under the business key: `needs_attention`, never a second
///   payment for the business action;
/// - the processor cannot be asked: nothing is sent, back to `ready` later (exhausted after
///   `attempt_max`, like any attempt that sent nothing).
async fn check_before_submit(
    processor: &dyn Processor,
    clock: &SharedClock,
    config: &WorkerConfig,
    op: &Operation,
) -> Option<Recorded> {
    let first = op.first_submitted_attempt == Some(op.attempt);
    if !config.check_before_submit || op.details.kind() != OperationKind::Payment || !first {
        return None;
    }
    let asked = match acquire(config.limiter.as_ref(), Budget::Read, config.submit_timeout).await {
        Ok(_) => tokio::time::timeout(
            config.submit_timeout,
            processor.prior_payment(&op.tenant, &op.business_key),
        )
        .await
        .unwrap_or_else(|_| PriorPayment::Unavailable {
            reason: format!("no answer within {:?}", config.submit_timeout),
        }),
        Err(denied) => PriorPayment::Unavailable {
            reason: format!("fleet limiter: {denied}"),
        },
    };
    let now = clock.now();
    let object = match asked {
        PriorPayment::None => return None,
        PriorPayment::Found(object) => object,
        PriorPayment::Unavailable { reason } => {
            let reason =
                format!("the check before submission could not ask the processor: {reason}");
            return Some(to_recorded(
                SubmitOutcome::NotSubmitted { reason },
                op.attempt,
                config,
                now,
            ));
        }
    };
    // The intention, not the operation id (derived from the tenant and business key only), says
    // whether it is this payment; an object from before intention metadata never is.
    let same = object.intention.as_ref().is_some_and(|i| i.is_of(op));
    let reference = object.reference.clone();
    match (same, object.status) {
        // An earlier attempt that failed for good: this one may pay.
        (_, FoundStatus::Failed { .. }) => None,
        (true, FoundStatus::Succeeded { result }) => {
            tracing::warn!(operation = %op.id, %reference,
                "the processor already holds this intention's payment; recorded, not submitted again");
            Some(Recorded::Succeeded(Paid { reference, result }))
        }
        (true, FoundStatus::Pending { processor_status }) => Some(Recorded::Unknown {
            reason: format!(
                "the processor already holds {reference} ({processor_status}) for this intention"
            ),
            reference: Some(reference),
            next_check_at_ms: now + config.first_check_delay,
        }),
        (false, FoundStatus::Succeeded { .. } | FoundStatus::Pending { .. }) => {
            Some(Recorded::NeedsAttention {
                reason: format!(
                    "the processor already holds {reference} for business key {} with other details \
                     (operation {:?}); nothing was submitted",
                    op.business_key, object.operation_id
                ),
            })
        }
    }
}

/// After the fenced write of `recorded` for `op`: counted only if it won (`won`); a lost write is
/// explained instead, so a webhook that recorded first is never counted twice.
pub async fn settle(
    ledger: &dyn Queue,
    metrics: &WorkerMetrics,
    op: &Operation,
    recorded: &Recorded,
    won: bool,
) {
    if won {
        count(metrics, recorded);
    } else {
        explain_fenced(ledger, metrics, op).await;
    }
}

/// Runs one claimed operation end to end, sequentially (used by the reconciler's same-key retry and
/// by tests; the daemon batches the ledger writes of the same steps). Returns the state it left
/// the row in. Its two writes are on the ledger's time (`Queue::now`), read before each: the
/// submission record is refused once the lease has expired by the database's clock, not the
/// caller's.
pub async fn execute_one(
    ledger: &dyn Queue,
    processor: &dyn Processor,
    clock: &SharedClock,
    config: &WorkerConfig,
    metrics: &WorkerMetrics,
    op: &Operation,
) -> Result<Status, LedgerError> {
    let fence = Fence::of(op);
    let recorded = match precheck(op, clock.now()) {
        Some(rejection) => rejection,
        None => {
            let now = ledger.now(clock.now()).await?;
            let marked = ledger
                .mark_submitting(std::slice::from_ref(&fence), now)
                .await?;
            if marked != [true] {
                return Err(LedgerError::Fenced {
                    id: fence.id,
                    attempt: fence.attempt,
                });
            }
            failpoint::hit(FailPoint::AfterSubmissionRecorded);
            // No renewal here (the reconciler's same-key retry): stay well inside the lease.
            let wait_max = config.rate_limit_wait_max.min(config.lease_ttl / 2);
            submit_claimed(processor, clock, config, metrics, op, wait_max, None).await
        }
    };
    let now = ledger.now(clock.now()).await?;
    let written = ledger
        .record(
            &RecordOutcome {
                fence: &fence,
                outcome: &recorded,
                actor: config.owner.as_str(),
            },
            now,
        )
        .await;
    match written {
        Ok(row) => {
            settle(ledger, metrics, op, &recorded, true).await;
            Ok(row.status)
        }
        Err(LedgerError::Fenced { .. }) => {
            settle(ledger, metrics, op, &recorded, false).await;
            Ok(ledger.current(&fence).await?.status)
        }
        Err(other) => Err(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_submitted_retries_with_growing_bounded_delay_then_exhausts() {
        let config = WorkerConfig::new("w");
        let now = Timestamp::from_millis(1_000_000);
        let delay = |attempt| match to_recorded(
            SubmitOutcome::NotSubmitted {
                reason: "refused".into(),
            },
            attempt,
            &config,
            now,
        ) {
            Recorded::RetryLater {
                available_at_ms, ..
            } => available_at_ms.saturating_sub(now).as_millis(),
            other => panic!("expected a retry, got {other:?}"),
        };
        let first = delay(1);
        assert!((500..=1_000).contains(&first), "first delay {first} ms");
        assert!(delay(4) >= 4_000, "delays grow");
        let last = to_recorded(
            SubmitOutcome::NotSubmitted {
                reason: "refused".into(),
            },
            config.attempt_max,
            &config,
            now,
        );
        assert!(matches!(last, Recorded::Exhausted { .. }));
    }

    #[test]
    fn rate_limited_goes_back_to_ready_and_never_exhausts() {
        let config = WorkerConfig::new("w");
        let now = Timestamp::from_millis(1_000);
        for attempt in [1, config.attempt_max, config.attempt_max + 3] {
            let r = to_recorded(
                SubmitOutcome::RateLimited {
                    reason: "429".into(),
                    retry_after_ms: None,
                },
                attempt,
                &config,
                now,
            );
            match r {
                Recorded::RetryLater {
                    available_at_ms, ..
                } => assert!(
                    available_at_ms > now && available_at_ms <= now + Duration::from_secs(5)
                ),
                other => panic!("attempt {attempt}: {other:?}"),
            }
        }
        let advised = to_recorded(
            SubmitOutcome::RateLimited {
                reason: "429".into(),
                retry_after_ms: Some(7_000),
            },
            1,
            &config,
            now,
        );
        assert!(matches!(
            advised,
            Recorded::RetryLater {
                available_at_ms,
                ..
            } if available_at_ms == Timestamp::from_millis(8_000)
        ));
        let first = rate_limit_delay(&config, 1);
        assert!(
            first >= config.rate_limit_backoff_base && first <= config.rate_limit_backoff_base * 2
        );
        assert!(rate_limit_delay(&config, 30) <= config.rate_limit_backoff_max * 2);
    }

    #[test]
    fn unknown_is_scheduled_for_a_check_and_declines_fail() {
        let config = WorkerConfig::new("w");
        let unknown = to_recorded(
            SubmitOutcome::Unknown {
                reason: "timeout".into(),
                reference: None,
            },
            1,
            &config,
            Timestamp::from_millis(10),
        );
        assert!(matches!(
            unknown,
            Recorded::Unknown {
                next_check_at_ms,
                ..
            } if next_check_at_ms == Timestamp::from_millis(2_010)
        ));
        let declined = SubmitOutcome::Declined {
            code: "card_declined".into(),
            message: "no".into(),
            reference: None,
        };
        assert!(matches!(
            to_recorded(declined, 1, &config, Timestamp::from_millis(10)),
            Recorded::Failed(_)
        ));
    }
}

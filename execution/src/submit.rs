//! The submission step: the check before a first payment, the paced request with the stored key,
//! and its answer classified into the fenced write that records it.

use super::Execution;
use payonce_core::details::OperationKind;
use payonce_core::failpoint::{self, FailPoint};
use payonce_ledger::{Operation, Paid, Recorded};
use payonce_processor::limiter::{Budget, acquire};
use payonce_processor::{
    FoundStatus, PriorPayment, Processor, SubmitOutcome, operation, reachability,
};
use std::time::Duration;

/// Submits with the operation's stored key and the recorded details (a payment or a refund, as
/// its kind says), bounded by `timeout`. A timeout is an unknown outcome: the request may have
/// arrived.
pub async fn submit(processor: &dyn Processor, op: &Operation, timeout: Duration) -> SubmitOutcome {
    match tokio::time::timeout(timeout, operation::submit(processor, op)).await {
        Ok(outcome) => outcome,
        Err(_) => SubmitOutcome::Unknown {
            reason: format!("no answer within {timeout:?}"),
            reference: None,
        },
    }
}

/// The one submission step for a claimed operation whose start is already committed: the check
/// before a first payment, the paced submission, timed, classified into the fenced write that
/// records it. Not-submitted backoff, rate-limit handling and unknown outcomes are decided here
/// for every caller.
pub(super) async fn submit_claimed(
    ex: &Execution<'_>,
    processor: &dyn Processor,
    op: &Operation,
) -> Recorded {
    if let Some(recorded) = check_before_submit(ex, processor, op).await {
        return recorded;
    }
    let started = std::time::Instant::now();
    let outcome = submit_paced(ex, processor, op).await;
    ex.metrics.submit_latency.observe(started.elapsed());
    if let SubmitOutcome::Succeeded {
        reference,
        replayed,
        ..
    } = &outcome
    {
        failpoint::hit(FailPoint::AfterProcessorAccepted);
        // This attempt made the row's first submission record before sending, so no earlier
        // request of this row can exist: a replay means another row with this intention sent it,
        // one the ledger no longer has (a restore, an asynchronous failover). The replay is the
        // first payment, so recording it is right; the loss is what on-call must hear about.
        if *replayed && op.first_submitted_attempt == Some(op.attempt) {
            ex.metrics.replayed_first_submissions.inc();
            tracing::error!(operation = %op.id, %reference,
                "ALERT: the processor replayed this operation's first submission: the ledger had \
                 lost the row that paid it (restore or failover?); recorded as that payment");
            // The rows will agree with the processor, so no scan would ever call it lost: the
            // reconciler raises the lost-money alert from this record.
            if let Some(lost_rows) = ex.lost_rows
                && let Err(error) = lost_rows
                    .record_lost_row(&op.id, reference, "worker", ex.clock.now())
                    .await
            {
                tracing::error!(operation = %op.id, %error,
                    "could not record the lost row; only this log line and the worker's metric say so");
            }
        }
    }
    tracing::debug!(operation = %op.id, ?outcome, "processor answered");
    let now = ex.clock.now();
    if let Some(reason) = contradicts_approval(processor, op, &outcome) {
        tracing::error!(operation = %op.id, alert = "answer_contradicts_approval", %reason,
            "the processor answered with a payment that is not the approved one; it needs attention");
        return Recorded::NeedsAttention { reason };
    }
    reachability::process().observe(&outcome, now);
    if let SubmitOutcome::KeyReused { reason } = outcome {
        return key_reused(ex, processor, op, &reason).await;
    }
    // Nothing reached the processor: the payment waits with backoff while its approval holds,
    // then goes to a human with that reason (never counted as a failed attempt meanwhile).
    if let SubmitOutcome::Unreachable { reason } = outcome {
        let delay = ex.policy.retry_delay(op.attempt);
        return reachability::while_unreachable(reason, op.approval_expires_at, now, delay);
    }
    ex.policy
        .to_recorded(outcome, op.not_sent_attempts + 1, now)
}

/// Why a success answer is not the approved payment or refund, if it is not: its amount, its
/// currency, or whose it is (the intention in its metadata, else the operation id) differ.
/// payonce's key changes with the details, so only a processor that answers a key with its first
/// outcome whatever the payload (Worldline, Qonto, PayPal: `OtherPayload::ReplaysFirst`) meeting a
/// key collision, or a bug, could bring one; no contract is trusted to refuse it, so every success
/// answer is checked, and a contradiction goes to a human with both facts instead of being
/// recorded as paid.
fn contradicts_approval(
    processor: &dyn Processor,
    op: &Operation,
    outcome: &SubmitOutcome,
) -> Option<String> {
    let SubmitOutcome::Succeeded {
        reference, result, ..
    } = outcome
    else {
        return None;
    };
    let object = processor.answer_facts(reference, result)?;
    let money = op.details.money();
    let mut diffs = Vec::new();
    if object.amount_minor != Some(money.amount_minor()) {
        diffs.push(format!(
            "amount {:?} answered, {} approved",
            object.amount_minor,
            money.amount_minor()
        ));
    }
    if object.currency.as_deref() != Some(money.currency().code()) {
        diffs.push(format!(
            "currency {:?} answered, {} approved",
            object.currency,
            money.currency().code()
        ));
    }
    let owner_differs = match &object.intention {
        Some(intention) => !intention.is_of(op),
        None => object.operation_id.as_deref() != Some(op.id.as_str()),
    };
    if owner_differs {
        diffs.push(format!(
            "it belongs to operation {:?} (business key {:?})",
            object.operation_id,
            object.intention.as_ref().map(|i| i.business_key.as_str())
        ));
    }
    if diffs.is_empty() {
        return None;
    }
    let contract = processor.contract();
    let replays = contract.other_payload == payonce_processor::contract::OtherPayload::ReplaysFirst;
    Some(format!(
        "the processor answered {reference} that is not this operation's: {} (the {} contract{}); \
         nothing is recorded as paid",
        diffs.join("; "),
        contract.name,
        if replays {
            " answers a key with its first outcome whatever the payload"
        } else {
            ""
        },
    ))
}

/// Submits like [`submit`], paced by the fleet limiter: waits for a write permit before each
/// request (waiting sends nothing), and answers a 429 by sending the same request with the same
/// key again after the processor's advice or a jittered backoff, without recording anything in
/// between: the claim and its attempt stay as they are. Returns `RateLimited` only once
/// `ex.wait_max` has passed or `ex.stop` is set; every other outcome as the processor gave it.
async fn submit_paced(
    ex: &Execution<'_>,
    processor: &dyn Processor,
    op: &Operation,
) -> SubmitOutcome {
    let policy = ex.policy;
    let give_up_at = tokio::time::Instant::now() + ex.wait_max;
    let stopped = || ex.stop.is_some_and(|s| *s.borrow());
    let mut refusals: u32 = 0;
    let mut prepaid = ex.prepaid;
    loop {
        let left = give_up_at.saturating_duration_since(tokio::time::Instant::now());
        let permit = if std::mem::take(&mut prepaid) {
            Ok(Duration::ZERO)
        } else {
            permit_within(ex, left).await
        };
        if let Err(reason) = permit {
            ex.metrics.rate_limited_requeued.inc();
            return SubmitOutcome::RateLimited {
                reason,
                retry_after_ms: None,
            };
        }
        let outcome = submit(processor, op, policy.submit_timeout).await;
        let SubmitOutcome::RateLimited { retry_after_ms, .. } = &outcome else {
            return outcome;
        };
        ex.metrics.rate_limited.inc();
        refusals = refusals.saturating_add(1);
        let pause = retry_after_ms
            .map(Duration::from_millis)
            .unwrap_or_else(|| policy.rate_limit_delay(refusals));
        tracing::info!(operation = %op.id, attempt = op.attempt, refusals, ?pause,
            "processor rate-limited the submission; sending it again with the same key");
        if stopped() || tokio::time::Instant::now() + pause >= give_up_at {
            ex.metrics.rate_limited_requeued.inc();
            return outcome;
        }
        match ex.stop {
            Some(stop) => {
                let mut stop = stop.clone();
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    _ = stop.wait_for(|s| *s) => {
                        ex.metrics.rate_limited_requeued.inc();
                        return outcome;
                    }
                }
            }
            None => tokio::time::sleep(pause).await,
        }
    }
}

/// One write permit within `left`, or why not (denied in time, or shutdown while waiting: nothing
/// was sent either way).
async fn permit_within(ex: &Execution<'_>, left: Duration) -> Result<Duration, String> {
    let permit = acquire(ex.policy.limiter.as_ref(), Budget::Write, left);
    // Shutdown does not wait for a permit: nothing was sent, so the row goes back to ready.
    match ex.stop {
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
    }
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
    ex: &Execution<'_>,
    processor: &dyn Processor,
    op: &Operation,
) -> Option<Recorded> {
    let policy = ex.policy;
    let first = op.first_submitted_attempt == Some(op.attempt);
    if !policy.check_before_submit || op.details.kind() != OperationKind::Payment || !first {
        return None;
    }
    let asked = prior_payment(ex, processor, op).await;
    let now = ex.clock.now();
    let object = match asked {
        PriorPayment::None => return None,
        PriorPayment::Found(object) => object,
        PriorPayment::Unavailable { reason } => {
            let reason =
                format!("the check before submission could not ask the processor: {reason}");
            return Some(policy.to_recorded(
                SubmitOutcome::NotSubmitted { reason },
                op.not_sent_attempts + 1,
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
            next_check_at: now + policy.first_check_delay,
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

/// What the processor holds for `op`'s business key (one read permit, bounded by the submission
/// timeout).
async fn prior_payment(
    ex: &Execution<'_>,
    processor: &dyn Processor,
    op: &Operation,
) -> PriorPayment {
    let timeout = ex.policy.submit_timeout;
    match acquire(ex.policy.limiter.as_ref(), Budget::Read, timeout).await {
        Ok(_) => tokio::time::timeout(
            timeout,
            processor.prior_payment(&op.tenant, &op.business_key),
        )
        .await
        .unwrap_or_else(|_| PriorPayment::Unavailable {
            reason: format!("no answer within {timeout:?}"),
        }),
        Err(denied) => PriorPayment::Unavailable {
            reason: format!("fleet limiter: {denied}"),
        },
    }
}

/// The processor refused `op`'s key: an earlier request under it (the key names the business
/// action) carried other details. Nothing ran for this one; the earlier one may have paid. A human
/// sees both, with the earlier payment's reference when the processor can be asked for it (a
/// payment; a refund names its payment's row instead). Never retried: the same key is refused
/// again, and another key could pay twice.
async fn key_reused(
    ex: &Execution<'_>,
    processor: &dyn Processor,
    op: &Operation,
    answered: &str,
) -> Recorded {
    let first = match op.details.kind() {
        OperationKind::Payment => match prior_payment(ex, processor, op).await {
            PriorPayment::Found(object) => {
                let money = object
                    .amount_minor
                    .zip(object.currency.as_deref())
                    .map_or_else(String::new, |(amount, currency)| {
                        format!(", {amount} {currency}")
                    });
                let status = match &object.status {
                    FoundStatus::Succeeded { .. } => "paid",
                    FoundStatus::Pending { .. } => "in progress",
                    FoundStatus::Failed { .. } => "failed",
                };
                format!(
                    "the first payment is {} ({status}{money})",
                    object.reference
                )
            }
            PriorPayment::None => "the processor's search does not show it yet".to_string(),
            PriorPayment::Unavailable { reason } => {
                format!("its reference could not be looked up: {reason}")
            }
        },
        OperationKind::Refund => "a refund under this business key carried other details".into(),
    };
    let approved = op.details.money();
    let reason = format!(
        "{}: {first}; this request ({} {}) was refused under the business action's key ({answered}) \
         and nothing was paid for it. Was the amount recomputed after a restore? Decide which \
         payment is right (`reconciler show {}`)",
        super::policy::KEY_REUSED_HEAD,
        approved.amount_minor(),
        approved.currency().code(),
        op.id
    );
    tracing::error!(operation = %op.id, alert = "key_reused", %reason,
        "the processor refused the business action's key for other details; it needs attention");
    Recorded::NeedsAttention { reason }
}

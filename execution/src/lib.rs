//! One operation's execution, the only one there is: server-side checks, the committed start of
//! the submission, the submission with its stored key, and the outcome handed to a [`Recorder`].
//! The worker's daemon records through a grouping recorder (many outcomes per commit); the
//! reconciler's same-key retry through [`Inline`], one fenced write per fact, as River's completer
//! has both a batching and an inline mode.
//!
//! - [`policy`]: the submission's limits and how each outcome is scheduled.
//! - [`submit`]: the check before a first payment, the paced request, its classification.
//! - [`inline`]: the recorder that writes each fact at once, and how a lost write is settled.
//! - [`metrics`]: what an execution counts.

pub mod inline;
pub mod metrics;
pub mod policy;
pub mod submit;

pub use inline::{Inline, settle};
pub use metrics::ExecutionMetrics;
pub use policy::{KEY_REUSED_HEAD, SubmitPolicy};

use payonce_core::clock::{SharedClock, Timestamp};
use payonce_core::details::OperationKind;
use payonce_core::failpoint::{self, FailPoint};
use payonce_ledger::{LedgerError, Operation, Recorded};
use payonce_processor::Processors;
use std::time::Duration;
use tokio::sync::watch;

/// Where [`execute`] writes what it learns about one claimed operation.
pub trait Recorder: Send {
    /// What recording the outcome answers.
    type Output;
    /// Records, committed, that `op`'s request is about to leave (from then on a lapsed lease is
    /// `unknown`). A recorder whose claim already recorded it only notes the moment.
    fn started(&mut self, op: &Operation) -> impl Future<Output = Result<(), LedgerError>> + Send;
    /// Records `op`'s outcome, fenced by its attempt.
    fn record(
        self,
        op: Operation,
        outcome: Recorded,
    ) -> impl Future<Output = Result<Self::Output, LedgerError>> + Send;
}

/// What one execution runs with.
pub struct Execution<'a> {
    /// The processors this process is configured for: the request goes to the one the
    /// operation's row names (else the default), never to another.
    pub processors: &'a Processors,
    /// The caller's clock: the ledger's time as last read, where the caller reads it.
    pub clock: &'a SharedClock,
    /// The submission's limits.
    pub policy: &'a SubmitPolicy,
    /// Where the submission is counted.
    pub metrics: &'a ExecutionMetrics,
    /// Longest the submission waits for permits and retries 429s in place: the policy's
    /// `rate_limit_wait_max` where a renewer keeps the lease, shorter where none does.
    pub wait_max: Duration,
    /// Shutdown: a submission waiting for a permit or past a 429 gives up (nothing was sent).
    pub stop: Option<&'a watch::Receiver<bool>>,
    /// Where a first submission answered as a replay is recorded (`ledger::lost_rows`): the
    /// ledger had lost the row that made it.
    pub lost_rows: Option<&'a dyn payonce_ledger::Queue>,
    /// The caller took this submission's first write permit before claiming it (the worker's claim
    /// is paced by the limiter: `limiter::acquire_up_to`): the first request does not ask again.
    pub prepaid: bool,
}

/// Runs one claimed operation: refused by [`precheck`] (nothing external happens), sent to a
/// human when its processor is not one this process is configured for (nothing external happens:
/// no other processor is guessed), or its start recorded, submitted to its own processor, and its
/// outcome recorded, each through `recorder`.
pub async fn execute<R: Recorder>(
    ex: &Execution<'_>,
    op: Operation,
    mut recorder: R,
) -> Result<R::Output, LedgerError> {
    let recorded = match (precheck(&op, ex.clock.now()), ex.processors.route(&op)) {
        (Some(rejection), _) => {
            tracing::info!(operation = %op.id, tenant = %op.tenant,
                "rejected before submission: {rejection:?}");
            rejection
        }
        (None, Err(unconfigured)) => {
            ex.metrics.unconfigured_processor.inc();
            tracing::error!(operation = %op.id, tenant = %op.tenant, processor = %unconfigured.named,
                alert = "processor_not_configured", "{unconfigured}; it needs attention");
            Recorded::NeedsAttention {
                reason: unconfigured.to_string(),
            }
        }
        (None, Ok(processor)) => {
            match payonce_processor::carry::uncarried(ex.processors.kind_of(&op), &op.details) {
                // Created before its tenant's processor could not carry it (a switch raced the
                // create, or a row naming no processor served by a process configured for
                // another): refused before anything is sent, never sent without the detail.
                Some(uncarried) => {
                    tracing::error!(operation = %op.id, tenant = %op.tenant,
                        "rejected before submission: {uncarried}");
                    Recorded::Rejected {
                        code: uncarried.code(),
                        message: format!("{uncarried}; nothing was sent"),
                    }
                }
                None => {
                    recorder.started(&op).await?;
                    failpoint::hit(FailPoint::AfterSubmissionRecorded);
                    submit::submit_claimed(ex, processor.as_ref(), &op).await
                }
            }
        }
    };
    recorder.record(op, recorded).await
}

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
    match op.approval_expires_at {
        Some(expiry) if expiry > now => None,
        _ => reject(
            "approval_expired",
            "the approval expired before the payment was submitted",
        ),
    }
}

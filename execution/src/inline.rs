//! The inline recorder: each fact written by its own fenced statement as soon as it is known (the
//! reconciler's same-key retry, one operation at a time). The worker's daemon groups the same
//! writes instead; both settle a write the same way ([`settle`]).

use super::{ExecutionMetrics, Recorder};
use payonce_core::clock::SharedClock;
use payonce_core::state::Status;
use payonce_ledger::{Fence, LedgerError, Operation, Queue, RecordOutcome, Recorded};

/// Writes one operation's submission start and outcome as they come, on the ledger's time.
pub struct Inline<'a> {
    /// The queue the operation was claimed from.
    pub ledger: &'a dyn Queue,
    /// The caller's clock (the ledger's is read before each write).
    pub clock: &'a SharedClock,
    /// The audit trail's actor: the lease holder.
    pub actor: &'a str,
    /// Where outcomes are counted.
    pub metrics: &'a ExecutionMetrics,
}

impl Recorder for Inline<'_> {
    /// The state the write left the row in.
    type Output = Status;

    /// Commits `first_submitted_at` before the request leaves; refused once the lease has
    /// expired by the database's clock, not the caller's.
    async fn started(&mut self, op: &Operation) -> Result<(), LedgerError> {
        let fence = Fence::of(op);
        let now = self.ledger.now(self.clock.now()).await?;
        let marked = self
            .ledger
            .mark_submitting(std::slice::from_ref(&fence), now)
            .await?;
        if marked != [true] {
            return Err(LedgerError::Fenced {
                id: fence.id,
                attempt: fence.attempt,
            });
        }
        Ok(())
    }

    async fn record(self, op: Operation, recorded: Recorded) -> Result<Status, LedgerError> {
        let fence = Fence::of(&op);
        let now = self.ledger.now(self.clock.now()).await?;
        let written = self
            .ledger
            .record(
                &RecordOutcome {
                    fence: &fence,
                    outcome: &recorded,
                    actor: self.actor,
                },
                now,
            )
            .await;
        match written {
            Ok(row) => {
                settle(self.ledger, self.metrics, &op, &recorded, true).await;
                Ok(row.status)
            }
            Err(LedgerError::Fenced { .. }) => {
                settle(self.ledger, self.metrics, &op, &recorded, false).await;
                Ok(self.ledger.current(&fence).await?.status)
            }
            Err(other) => Err(other),
        }
    }
}

/// After the fenced write of `recorded` for `op`: counted only if it won (`won`); a lost write is
/// explained instead, so a webhook that recorded first is never counted twice.
pub async fn settle(
    ledger: &dyn Queue,
    metrics: &ExecutionMetrics,
    op: &Operation,
    recorded: &Recorded,
    won: bool,
) {
    if won {
        metrics.count(recorded);
    } else {
        explain_fenced(ledger, metrics, op).await;
    }
}

/// After a fenced write lost: was it someone else recording the truth first (a webhook), or did
/// our lease lapse? Counts and logs either way; never overwrites.
async fn explain_fenced(ledger: &dyn Queue, metrics: &ExecutionMetrics, op: &Operation) {
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

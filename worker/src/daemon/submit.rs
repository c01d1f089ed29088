//! Submit: each claimed operation of a batch runs through the one execution path
//! ([`execute`]) at once; its outcome goes, with its in-flight slot, to the pipeline's writer.

use super::{Pending, Worker};
use crate::metrics::WorkerMetrics;
use payonce_core::clock::SharedClock;
use payonce_core::failpoint::{self, FailPoint};
use payonce_execution::{Execution, Recorder, execute};
use payonce_ledger::{LedgerError, Operation, Recorded};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{OwnedSemaphorePermit, mpsc, watch};
use tokio::task::JoinSet;
use tracing::Instrument;

/// The daemon's recorder for one operation: the claim already recorded the submission start, so
/// `started` only times it; the outcome goes, with the operation's in-flight slot, to the
/// pipeline's group-committing writer ([`Worker::recorder`]).
struct Grouped {
    tx: mpsc::Sender<Pending>,
    slot: Option<OwnedSemaphorePermit>,
    claimed_at: Instant,
    metrics: Arc<WorkerMetrics>,
}

impl Recorder for Grouped {
    type Output = ();

    async fn started(&mut self, _op: &Operation) -> Result<(), LedgerError> {
        self.metrics
            .claim_to_submit
            .observe(self.claimed_at.elapsed());
        Ok(())
    }

    async fn record(self, op: Operation, recorded: Recorded) -> Result<(), LedgerError> {
        // A closed channel means the pipeline gave up on its writes: the lease lapses to the
        // reconciler.
        let _ = self
            .tx
            .send(Pending {
                op,
                recorded,
                known_at: Instant::now(),
                slot: self.slot,
            })
            .await;
        Ok(())
    }
}

impl Worker {
    /// One claimed batch (its claim also recorded every submission start): each operation runs
    /// through [`execute`] at once, its outcome handed to the recorder ([`Grouped`]). `prepaid`:
    /// the claim took one write permit per operation already.
    /// `slots` holds one in-flight slot per claimed operation (the daemon's; none for `run_once`):
    /// each execution hands its own to the recorder with its outcome, which gives it back once
    /// that outcome is written, so one slow answer does not hold the batch's other slots and
    /// answered work never piles up unrecorded beyond `concurrency`.
    pub(super) async fn batch(
        &self,
        claimed: Vec<Operation>,
        tx: mpsc::Sender<Pending>,
        stop: watch::Receiver<bool>,
        mut slots: Option<OwnedSemaphorePermit>,
        prepaid: bool,
    ) {
        let claimed_at = Instant::now();
        failpoint::hit(FailPoint::AfterClaim);
        if *stop.borrow() {
            self.release_all(&claimed).await;
            return;
        }
        let mut executions = JoinSet::new();
        for op in claimed {
            let processors = self.processors.clone();
            let clock: SharedClock = self.clock.clone();
            let config = self.config.clone();
            let metrics = self.metrics.clone();
            let recorder = Grouped {
                tx: tx.clone(),
                slot: slots.as_mut().and_then(|s| s.split(1)),
                claimed_at,
                metrics: self.metrics.clone(),
            };
            let stop = stop.clone();
            let ledger = self.ledger.clone();
            let span = tracing::info_span!("submit", operation = %op.id, tenant = %op.tenant, attempt = op.attempt,
                key = %op.idempotency_key);
            executions.spawn(
                async move {
                    // The renewer keeps the lease while the submission is paced or retried after 429s.
                    let ex = Execution {
                        processors: processors.as_ref(),
                        clock: &clock,
                        policy: &config.submit,
                        metrics: &metrics.execution,
                        wait_max: config.submit.rate_limit_wait_max,
                        stop: Some(&stop),
                        lost_rows: Some(ledger.as_ref()),
                        prepaid,
                    };
                    // The grouped recorder cannot fail: its writes happen in the recorder task.
                    let _ = execute(&ex, op, recorder).await;
                }
                .instrument(span),
            );
        }
        while executions.join_next().await.is_some() {}
    }
}

//! Record: outcomes are written in group commits, each group fenced row by row; a written group
//! gives its in-flight slots back, which wakes the pipeline's claim loop. A write records outcomes
//! only: it never claims. A group the ledger refuses for as long as its leases could be ours is
//! left to the reconciler.

use super::{LEDGER_ERROR_PAUSE, Pending, Worker};
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use payonce_execution::settle;
use payonce_ledger::{Fence, LedgerError, Operation, Recorded};
use std::time::Instant;
use tokio::sync::{OwnedSemaphorePermit, mpsc};

impl Worker {
    /// Writes outcomes in group commits: what is queued when a write starts goes in it, and what
    /// arrives within `record_linger` of the first outcome joins it (up to `record_batch_max`), so
    /// answers that come back spread out are still written a group per commit.
    ///
    /// Up to `record_writes` groups are written at once, so outcomes that arrive while a write is
    /// under way form the next group and start it instead of waiting for that write's commit.
    pub(super) async fn recorder(&self, mut rx: mpsc::Receiver<Pending>) {
        let max = self.config.record_batch_max;
        let mut writes = FuturesUnordered::new();
        let mut open = true;
        while open || !writes.is_empty() {
            if !open || writes.len() >= self.tuning.record_writes {
                writes.next().await;
                continue;
            }
            // Wait for an outcome while the writes under way finish.
            let first = tokio::select! {
                Some(()) = writes.next() => continue,
                first = rx.recv() => match first {
                    Some(p) => p,
                    None => {
                        open = false;
                        continue;
                    }
                },
            };
            let until = tokio::time::Instant::now() + self.tuning.record_linger;
            let mut batch = vec![first];
            while batch.len() < max {
                match rx.try_recv() {
                    Ok(p) => batch.push(p),
                    Err(mpsc::error::TryRecvError::Disconnected) => break,
                    Err(mpsc::error::TryRecvError::Empty) => {
                        let more = tokio::select! {
                            Some(()) = writes.next() => continue,
                            more = tokio::time::timeout_at(until, rx.recv()) => more,
                        };
                        match more {
                            Ok(Some(p)) => batch.push(p),
                            Ok(None) | Err(_) => break,
                        }
                    }
                }
            }
            writes.push(self.record(batch));
        }
    }

    /// Writes one group of outcomes, then gives the group's slots back (waking the claim loop) and
    /// settles each outcome.
    async fn record(&self, batch: Vec<Pending>) {
        // The outcomes move into the write (no copy of the processor's objects); the group's slots,
        // one permit, are held until the write is done (or given up on).
        let mut ops = Vec::with_capacity(batch.len());
        let mut items = Vec::with_capacity(batch.len());
        let mut freed: Option<OwnedSemaphorePermit> = None;
        for p in batch {
            if let Some(slot) = p.slot {
                match freed.as_mut() {
                    Some(all) => all.merge(slot),
                    None => freed = Some(slot),
                }
            }
            items.push((Fence::of(&p.op), p.recorded));
            ops.push((p.op, p.known_at));
        }
        let written = self.write_group(&items, &ops).await;
        self.let_go(ops.iter().map(|(op, _)| op));
        drop(freed);
        let Some(results) = written else {
            return;
        };
        for (((op, _), (_, recorded)), ok) in ops.iter().zip(&items).zip(results) {
            if ok {
                tracing::info!(operation = %op.id, attempt = op.attempt, "recorded {}", outcome_name(recorded));
            }
            settle(
                self.ledger.as_ref(),
                &self.metrics.execution,
                op,
                recorded,
                ok,
            )
            .await;
        }
    }

    /// The group's write: per item whether it was recorded. `None`: the ledger refused for as
    /// long as the leases could still be ours; the reconciler resolves the rows.
    async fn write_group(
        &self,
        items: &[(Fence, Recorded)],
        ops: &[(Operation, Instant)],
    ) -> Option<Vec<bool>> {
        // The outcome is the one fact we must not drop: retry through ledger outages for as long as
        // the lease could still be ours; after that the reconciler owns the row.
        let deadline = Instant::now() + self.config.lease_ttl;
        loop {
            let write = async {
                let now = self.clock.read().await?;
                let started = Instant::now();
                let written = self
                    .ledger
                    .record_batch(items, &self.config.owner, now)
                    .await?;
                Ok::<_, LedgerError>((written, started.elapsed()))
            };
            match write.await {
                Ok((written, took)) => {
                    self.metrics.record_writes.inc_by(1);
                    self.metrics.record_write.observe(took);
                    for (_, known_at) in ops {
                        self.metrics.known_to_recorded.observe(known_at.elapsed());
                    }
                    return Some(written);
                }
                Err(error) if Instant::now() < deadline => {
                    tracing::warn!(%error, n = items.len(), "recording outcomes failed; retrying");
                    tokio::time::sleep(LEDGER_ERROR_PAUSE).await;
                }
                Err(error) => {
                    tracing::error!(%error, n = items.len(), "could not record outcomes; the reconciler will resolve them");
                    return None;
                }
            }
        }
    }
}

fn outcome_name(r: &Recorded) -> &'static str {
    match r {
        Recorded::Succeeded(_) => "succeeded",
        Recorded::Failed(_) => "failed",
        Recorded::RetryLater { .. } => "retry_later",
        Recorded::Exhausted { .. } => "exhausted",
        Recorded::Unknown { .. } => "unknown",
        Recorded::Rejected { .. } => "rejected",
        Recorded::NeedsAttention { .. } => "needs_attention",
    }
}

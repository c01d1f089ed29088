//! Claim: each pipeline's loop waits for free in-flight slots, claims that many ready operations
//! (their submission starts recorded in the same commit) and starts them as a batch; it also
//! starts what its writer's outcome writes claimed. At shutdown it drains within the grace.

use super::{Claimed, LEDGER_ERROR_PAUSE, Pending, RECORD_QUEUE_LEN, Refill, Worker};
use payonce_ledger::{LedgerError, Operation};
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

/// One claim → submit → record loop over its own share of the in-flight slots.
struct Pipeline {
    worker: Arc<Worker>,
    /// This pipeline's in-flight slots: one per claimed and unrecorded operation.
    slots: Arc<Semaphore>,
    /// Batches under way.
    batches: JoinSet<()>,
    /// To the writer.
    record_tx: mpsc::Sender<Pending>,
    /// What the writer's outcome writes claimed, with their slots.
    refilled: mpsc::UnboundedReceiver<Claimed>,
    stop: watch::Receiver<bool>,
    /// Operations claimed, by either path.
    claimed_total: u64,
    /// When the last claim started (`None`: none yet).
    last_claim: Option<Instant>,
    /// Write permits taken for a claim and not used by it (a lane came back short): the next
    /// claim, at once, uses them first.
    prepaid: u32,
}

/// What woke the claim loop.
enum Wake {
    Stop,
    Refilled(Claimed),
    Slots(OwnedSemaphorePermit),
}

impl Worker {
    /// One claim → submit → record loop over `concurrency` slots of its own, until `stop` turns
    /// true; then it waits for its batches (within `shutdown_grace`) and flushes its outcomes.
    /// Returns how many operations it claimed.
    pub(super) async fn pipeline(
        self: Arc<Self>,
        concurrency: usize,
        stop: watch::Receiver<bool>,
    ) -> u64 {
        let (record_tx, record_rx) = mpsc::channel(RECORD_QUEUE_LEN);
        let (refill_tx, refilled) = mpsc::unbounded_channel();
        let refill = self.config.claim_with_outcomes.then(|| Refill {
            stop: stop.clone(),
            claimed: refill_tx,
        });
        let writer = {
            let this = self.clone();
            tokio::spawn(async move { this.recorder(record_rx, refill).await })
        };
        let mut pipeline = Pipeline {
            worker: self,
            slots: Arc::new(Semaphore::new(concurrency)),
            batches: JoinSet::new(),
            record_tx,
            refilled,
            stop,
            claimed_total: 0,
            last_claim: None,
            prepaid: 0,
        };
        let full_claim = pipeline
            .worker
            .config
            .batch_size
            .min(u32::try_from(concurrency).unwrap_or(u32::MAX)) as usize;
        while let Some(free) = pipeline.free_slots(full_claim).await {
            if !pipeline.claim_into(free).await {
                break;
            }
        }
        pipeline.drain(writer).await
    }
}

impl Pipeline {
    /// At least one free slot, and more up to `full_claim` while the cooldown lasts: short of a
    /// full claim's worth, the next claim waits until `claim_cooldown` after the last one started,
    /// so a busy worker claims (and records its submission starts) in larger groups instead of one
    /// slot at a time. An idle worker's first claim is not delayed: its last claim is long past.
    /// What a write claimed meanwhile starts at once. `None`: shutdown.
    async fn free_slots(&mut self, full_claim: usize) -> Option<OwnedSemaphorePermit> {
        let mut free = loop {
            let mut stop = self.stop.clone();
            let wake = tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => Wake::Stop,
                Some(c) = self.refilled.recv() => Wake::Refilled(c),
                permit = self.slots.clone().acquire_owned() => match permit {
                    Ok(p) => Wake::Slots(p),
                    Err(_) => Wake::Stop,
                },
            };
            match wake {
                Wake::Stop => return None,
                Wake::Refilled(c) => self.start_refill(c),
                Wake::Slots(p) => break p,
            }
        };
        let Some(last) = self.last_claim else {
            return Some(free);
        };
        let until = last + self.worker.config.claim_cooldown;
        while free.num_permits() + self.slots.available_permits() < full_claim {
            let mut stop = self.stop.clone();
            let wake = tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => Wake::Stop,
                () = tokio::time::sleep_until(until) => break,
                Some(c) = self.refilled.recv() => Wake::Refilled(c),
                more = self.slots.clone().acquire_owned() => match more {
                    Ok(p) => Wake::Slots(p),
                    Err(_) => break,
                },
            };
            match wake {
                Wake::Stop => return None,
                Wake::Refilled(c) => self.start_refill(c),
                Wake::Slots(p) => free.merge(p),
            }
        }
        Some(free)
    }

    /// Claims into `free` (and the slots free besides) and starts what it claimed; an error or
    /// no due work pauses instead. The claim holds one write permit per row it asks for, taken
    /// once the lanes say work is due: work waits for the budget in the ledger, in the fair
    /// scheduler's order, not in this worker's line. False: shutdown began during the pause.
    async fn claim_into(&mut self, free: OwnedSemaphorePermit) -> bool {
        let config = &self.worker.config;
        let want = u32::try_from(free.num_permits() + self.slots.available_permits())
            .unwrap_or(u32::MAX)
            .min(config.batch_size);
        match self.worker.lanes_known().await {
            Ok(true) => {}
            outcome => {
                drop(free);
                return self.pause(outcome.map(|_| ())).await;
            }
        }
        if self.prepaid == 0 {
            let mut stop = self.stop.clone();
            let permits = tokio::select! {
                _ = stop.wait_for(|s| *s) => return false,
                permits = self.worker.permits(want) => permits,
            };
            match permits {
                Some(n) => self.prepaid = n,
                // None within the wait bound: ask again (the lanes may have changed meanwhile).
                None => return true,
            }
        }
        self.last_claim = Some(Instant::now());
        let claimed = match self.worker.claim_fair(want.min(self.prepaid)).await {
            Ok(claimed) if !claimed.is_empty() => claimed,
            outcome => {
                // The known lanes were dry (drained, or held by other workers) or the ledger
                // failed: read them again after the pause; the permits lapse.
                drop(free);
                self.prepaid = 0;
                self.worker.forget_lanes().await;
                return self.pause(outcome.map(|_| ())).await;
            }
        };
        self.prepaid -= u32::try_from(claimed.len()).unwrap_or(self.prepaid);
        self.claimed_total += claimed.len() as u64;
        self.worker.metrics.count_claimed(&claimed);
        self.worker.metrics.claims.inc_by(1);
        self.worker.hold(&claimed);
        // One slot per claimed operation: give back what the claim did not fill, take the rest
        // (free when the claim was asked for; only this loop takes this pipeline's slots).
        let mut held = free;
        if claimed.len() < held.num_permits() {
            drop(held.split(held.num_permits() - claimed.len()));
        } else {
            let extra = u32::try_from(claimed.len() - held.num_permits()).unwrap_or(0);
            if extra > 0
                && let Ok(more) = self.slots.clone().acquire_many_owned(extra).await
            {
                held.merge(more);
            }
        }
        self.start(claimed, held);
        true
    }

    /// After a failed claim (`Err`) or one that found nothing due: waits `LEDGER_ERROR_PAUSE`, or
    /// for new work (an approval's wake-up, at most `poll_interval`). False: shutdown began.
    async fn pause(&mut self, outcome: Result<(), LedgerError>) -> bool {
        let poll = self.worker.config.poll_interval;
        let pause = async {
            match outcome {
                Err(error) => {
                    tracing::warn!(%error, "claim failed; pausing");
                    tokio::time::sleep(LEDGER_ERROR_PAUSE).await;
                }
                Ok(()) => self.worker.ledger.wait_for_ready(poll).await,
            }
        };
        let mut stop = self.stop.clone();
        tokio::select! {
            _ = stop.wait_for(|s| *s) => false,
            () = pause => true,
        }
    }

    /// Starts a claimed batch on its slots (after shutdown began, the batch gives its leases back).
    fn start(&mut self, claimed: Vec<Operation>, slots: OwnedSemaphorePermit) {
        let worker = self.worker.clone();
        let tx = self.record_tx.clone();
        let stop = self.stop.clone();
        self.batches.spawn(async move {
            worker.batch(claimed, tx, stop, Some(slots), true).await;
        });
        while self.batches.try_join_next().is_some() {}
    }

    /// Starts what an outcome write claimed.
    fn start_refill(&mut self, refill: Claimed) {
        self.claimed_total += refill.ops.len() as u64;
        self.start(refill.ops, refill.slots);
    }

    /// After shutdown: waits for the batches within the grace (what a write claimed meanwhile is
    /// started too: a stopped batch gives its leases back at once), flushes the writer, and gives
    /// back what its last write claimed. Returns how many operations this pipeline claimed.
    async fn drain(mut self, writer: JoinHandle<()>) -> u64 {
        // One deadline for the batches and the writer together: outcomes the ledger cannot take (a
        // full disk) must not add a second grace to the first (issue 53).
        let deadline = tokio::time::Instant::now() + self.worker.config.shutdown_grace;
        let drained = tokio::time::timeout_at(deadline, async {
            loop {
                tokio::select! {
                    done = self.batches.join_next() => if done.is_none() { break },
                    Some(c) = self.refilled.recv() => self.start_refill(c),
                }
            }
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                "shutdown grace elapsed with submissions in flight; their leases will lapse to the reconciler"
            );
            self.batches.abort_all();
        }
        drop(self.record_tx);
        if tokio::time::timeout_at(deadline, writer).await.is_err() {
            tracing::warn!(
                "shutdown grace elapsed with outcomes not yet written; their leases will lapse to the reconciler"
            );
        }
        // The writer is done (or given up on): what its last write claimed goes back.
        self.refilled.close();
        while let Ok(c) = self.refilled.try_recv() {
            self.claimed_total += c.ops.len() as u64;
            self.worker.release_all(&c.ops).await;
        }
        self.claimed_total
    }
}

//! Record: outcomes are written in group commits, each group fenced row by row; a write may also
//! claim ready work into the slots its group frees (`claim_with_outcomes`), in the same commit.

use super::{Claimed, LEDGER_ERROR_PAUSE, Pending, Refill, Worker};
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use payonce_execution::settle;
use payonce_ledger::lanes::{Pick, Take};
use payonce_ledger::{Fence, LedgerError, Operation, Recorded};
use std::time::Instant;
use tokio::sync::{OwnedSemaphorePermit, mpsc};

impl Worker {
    /// Writes outcomes in group commits: what is queued when a write starts goes in it, and what
    /// arrives within `record_linger` of the first outcome joins it (up to `record_batch_max`), so
    /// answers that come back spread out are still written a group per commit. With `refill`, each
    /// write also claims ready work into the slots it frees (`claim_with_outcomes`).
    ///
    /// Up to `record_writes` groups are written at once, so outcomes that arrive while a write is
    /// under way form the next group and start it instead of waiting for that write's commit.
    pub(super) async fn recorder(&self, mut rx: mpsc::Receiver<Pending>, refill: Option<Refill>) {
        let max = self.config.record_batch_max;
        let mut writes = FuturesUnordered::new();
        let mut open = true;
        while open || !writes.is_empty() {
            if !open || writes.len() >= self.config.record_writes {
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
            let until = tokio::time::Instant::now() + self.config.record_linger;
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
            writes.push(self.record(batch, refill.as_ref()));
        }
    }

    /// Writes one group of outcomes. With `refill` (and shutdown not begun) the write also claims
    /// into the slots the group held, in the same commit, and sends what it claimed to the
    /// pipeline on those slots; the slots it could not fill go back.
    async fn record(&self, batch: Vec<Pending>, refill: Option<&Refill>) {
        // The outcomes move into the write (no copy of the processor's objects); the group's slots,
        // one permit, are held until the write is done, or handed on to what it claims.
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
        let refill = refill.filter(|r| !*r.stop.borrow());
        let want = match (refill, freed.as_ref()) {
            (Some(_), Some(f)) => u32::try_from(f.num_permits())
                .unwrap_or(u32::MAX)
                .min(self.config.batch_size),
            _ => 0,
        };
        // The refill holds a write permit per row, as the claim loop's claims do, and takes them
        // only if granted at once and lanes are known: an outcome write never waits for either.
        let takes = match want {
            0 => Vec::new(),
            _ => match self.lanes_known().await {
                Ok(true) => self.plan(self.permits_ready(want).await).await,
                _ => Vec::new(),
            },
        };
        let written = self.write_group(&items, &ops, &takes).await;
        self.let_go(ops.iter().map(|(op, _)| op));
        let Some((results, claimed)) = written else {
            self.settle(&takes, &[]).await;
            return;
        };
        self.settle(&takes, &claimed).await;
        if let (Some(refill), Some(slots)) = (refill, freed.take()) {
            self.hand_on(claimed, refill, slots).await;
        }
        drop(freed);
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

    /// The group's write (claiming the plan `takes` in the same commit): per item whether it was
    /// recorded, and what it claimed. `None`: the ledger refused for as long as the leases could
    /// still be ours; the reconciler resolves the rows.
    async fn write_group(
        &self,
        items: &[(Fence, Recorded)],
        ops: &[(Operation, Instant)],
        takes: &[Take],
    ) -> Option<(Vec<bool>, Vec<Operation>)> {
        let mut pick = Pick::Lanes(takes);
        // The outcome is the one fact we must not drop: retry through ledger outages for as long as
        // the lease could still be ours; after that the reconciler owns the row. A retry claims
        // nothing: the write alone matters then.
        let deadline = Instant::now() + self.config.lease_ttl;
        loop {
            let write = async {
                let now = self.clock.read().await?;
                let started = Instant::now();
                let written = self
                    .ledger
                    .record_and_claim(items, &self.config.lease_holder(), pick, now)
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
                    pick = Pick::Lanes(&[]);
                    tokio::time::sleep(LEDGER_ERROR_PAUSE).await;
                }
                Err(error) => {
                    tracing::error!(%error, n = items.len(), "could not record outcomes; the reconciler will resolve them");
                    return None;
                }
            }
        }
    }

    /// Sends what a write claimed to its pipeline on the slots the write freed (the ones it could
    /// not fill go back); a pipeline that is gone gets nothing, and the leases are given back.
    async fn hand_on(
        &self,
        claimed: Vec<Operation>,
        refill: &Refill,
        mut slots: OwnedSemaphorePermit,
    ) {
        if claimed.is_empty() {
            return;
        }
        self.hold(&claimed);
        self.metrics.count_claimed(&claimed);
        self.metrics.claims.inc_by(1);
        self.metrics.claims_with_outcomes.inc_by(1);
        if slots.num_permits() > claimed.len() {
            drop(slots.split(slots.num_permits() - claimed.len()));
        }
        if let Err(unsent) = refill.claimed.send(Claimed {
            ops: claimed,
            slots,
        }) {
            // The pipeline is gone (it stopped): give the leases back.
            self.release_all(&unsent.0.ops).await;
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

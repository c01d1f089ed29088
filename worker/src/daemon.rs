//! The worker daemon: claim batches with a lease, record submission starts in one commit per batch,
//! submit concurrently (bounded), record outcomes through a group-committing recorder whose writes
//! also claim into the slots they free, renew leases in the background, and stop only at safe
//! points.

use crate::config::{ConfigError, WorkerConfig};
use crate::execution::{precheck, settle, submit_claimed};
use crate::metrics::WorkerMetrics;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use payonce_shared::clock::{Clock, SharedClock};
use payonce_shared::failpoint::{self, FailPoint};
use payonce_shared::id::OperationId;
use payonce_shared::ledger::{Fence, LedgerError, Operation, Queue, Recorded};
use payonce_shared::ledger_clock::LedgerClock;
use payonce_shared::processor::Processor;
use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::task::JoinSet;
use tracing::Instrument;

/// Pause after a ledger error before the loop tries again (Postgres restarting, network blip).
pub const LEDGER_ERROR_PAUSE: Duration = Duration::from_millis(250);
/// Outcomes queued for the recorder before submitters wait.
pub const RECORD_QUEUE_LEN: usize = 4_096;

/// A worker process's engine.
pub struct Worker {
    ledger: Arc<dyn Queue>,
    processor: Arc<dyn Processor>,
    /// The database's time (issue 43): read before each claim, outcome write, renewal and
    /// release; the process's own clock only measures the drift.
    clock: Arc<LedgerClock>,
    config: WorkerConfig,
    metrics: Arc<WorkerMetrics>,
    /// Operations claimed and not yet finished (recorded, fenced, released or given up): the only
    /// leases renewal extends. A lease the worker gave up on must lapse to the reconciler.
    held: Mutex<HashSet<OperationId>>,
}

/// What a run did, for the exit log line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunSummary {
    /// Operations claimed.
    pub claimed: u64,
    /// Leases given back at shutdown.
    pub released: u64,
}

struct Pending {
    op: Operation,
    recorded: Recorded,
    /// When the outcome was known (the processor answered, or the precheck refused).
    known_at: Instant,
    /// The submission's in-flight slot, given back once the outcome is written (or given up on):
    /// `concurrency` bounds claimed-and-unrecorded work, and with it the worker's memory and what a
    /// crash leaves to the reconciler's lookups. A write that refills (`claim_with_outcomes`)
    /// hands it on to the operation it claims.
    slot: Option<OwnedSemaphorePermit>,
}

/// What a pipeline's recorder needs to refill the slots its writes free (`claim_with_outcomes`).
struct Refill {
    stop: watch::Receiver<bool>,
    /// To the pipeline's claim loop, which starts each claimed batch as it starts its own.
    claimed: mpsc::UnboundedSender<Claimed>,
}

/// Operations an outcome write claimed, with one in-flight slot each.
struct Claimed {
    ops: Vec<Operation>,
    slots: OwnedSemaphorePermit,
}

impl Worker {
    /// Builds a worker on `clock`, the process's clock (the ledger's on SQLite; on Postgres only
    /// its drift from the server's is measured); refuses an invalid configuration.
    pub fn new(
        ledger: Arc<dyn Queue>,
        processor: Arc<dyn Processor>,
        clock: SharedClock,
        config: WorkerConfig,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let metrics = Arc::new(WorkerMetrics::default());
        let clock = LedgerClock::new(ledger.clone(), clock, metrics.clock_drift.clone(), "worker");
        Ok(Worker {
            ledger,
            processor,
            clock: Arc::new(clock),
            config,
            metrics,
            held: Mutex::new(HashSet::new()),
        })
    }

    /// The worker's counters.
    pub fn metrics(&self) -> Arc<WorkerMetrics> {
        self.metrics.clone()
    }

    /// Claims one batch and drives every operation in it to a recorded outcome. Returns how many
    /// were claimed. For tests and `--once` runs; the daemon overlaps batches instead.
    pub async fn run_once(&self) -> Result<usize, LedgerError> {
        let now = self.clock.read().await?;
        let claimed = self
            .ledger
            .claim_to_submit(&self.config.lease_holder(), self.config.batch_size, now)
            .await?;
        let n = claimed.len();
        self.metrics.claimed.add(n as u64);
        if n > 0 {
            self.metrics.claims.add(1);
        }
        self.hold(&claimed);
        let (tx, rx) = mpsc::channel(RECORD_QUEUE_LEN);
        let (_stop_tx, stop_rx) = watch::channel(false);
        let batch = self.batch(claimed, tx, stop_rx, None);
        let recorder = self.recorder(rx, None);
        let ((), ()) = tokio::join!(batch, recorder);
        Ok(n)
    }

    /// Runs until `shutdown` resolves: then stops claiming, gives back leases of work not started,
    /// lets in-flight submissions finish within `shutdown_grace`, flushes outcomes, and returns.
    /// The in-flight slots are split over `pipelines` loops that claim and record on their own
    /// (`WorkerConfig::pipeline_slots`); leases are renewed for all of them by one task.
    pub async fn run(self: Arc<Self>, shutdown: impl Future<Output = ()> + Send) -> RunSummary {
        let (stop_tx, stop_rx) = watch::channel(false);
        let renewer = {
            let this = self.clone();
            let stop = stop_rx.clone();
            tokio::spawn(async move { this.renew_loop(stop).await })
        };
        let shares = self.config.pipeline_slots();
        tracing::info!(owner = %self.config.owner, concurrency = self.config.concurrency,
            pipelines = shares.len(), "worker started");
        let mut pipelines = JoinSet::new();
        for slots in shares {
            let this = self.clone();
            let stop = stop_rx.clone();
            pipelines.spawn(async move { this.pipeline(slots, stop).await });
        }
        let mut summary = RunSummary::default();
        let mut panicked = None;
        let mut ended =
            |done: Result<u64, tokio::task::JoinError>, summary: &mut RunSummary| match done {
                Ok(claimed) => summary.claimed += claimed,
                Err(error) => {
                    tracing::error!(%error, "a worker pipeline ended abnormally");
                    if error.is_panic() && panicked.is_none() {
                        panicked = Some(error.into_panic());
                    }
                }
            };
        tokio::pin!(shutdown);
        // A pipeline ends only at shutdown. One that panics stops the whole worker, as a panic of
        // a single loop would: the others stop claiming and finish what they hold, and then the
        // panic goes on to the caller (the process exits non-zero; the dead pipeline's leases
        // lapse to the reconciler instead of being renewed by a worker that no longer drives them).
        tokio::select! {
            () = &mut shutdown => {}
            Some(done) = pipelines.join_next() => {
                ended(done, &mut summary);
                tracing::error!(owner = %self.config.owner, "a pipeline stopped early; stopping the worker");
            }
        }
        tracing::info!(owner = %self.config.owner, "shutdown: no new claims; finishing in-flight work");
        let _ = stop_tx.send(true);
        while let Some(done) = pipelines.join_next().await {
            ended(done, &mut summary);
        }
        renewer.abort();
        if let Some(panic) = panicked {
            std::panic::resume_unwind(panic);
        }
        summary.released = self.metrics.released.get();
        tracing::info!(
            claimed = summary.claimed,
            released = summary.released,
            "worker stopped"
        );
        summary
    }

    /// One claim → submit → record loop over `concurrency` slots of its own, until `stop` turns
    /// true; then it waits for its batches (within `shutdown_grace`) and flushes its outcomes.
    /// Returns how many operations it claimed.
    async fn pipeline(self: Arc<Self>, concurrency: usize, stop: watch::Receiver<bool>) -> u64 {
        let (record_tx, record_rx) = mpsc::channel(RECORD_QUEUE_LEN);
        let (refill_tx, mut refilled) = mpsc::unbounded_channel();
        let refill = self.config.claim_with_outcomes.then(|| Refill {
            stop: stop.clone(),
            claimed: refill_tx,
        });
        let recorder = {
            let this = self.clone();
            tokio::spawn(async move { this.recorder(record_rx, refill).await })
        };
        let slots = Arc::new(Semaphore::new(concurrency));
        let mut batches = JoinSet::new();
        let mut claimed_total = 0u64;
        let stopped = {
            let mut stop = stop.clone();
            async move {
                let _ = stop.wait_for(|s| *s).await;
            }
        };
        tokio::pin!(stopped);
        let full_claim = self
            .config
            .batch_size
            .min(u32::try_from(concurrency).unwrap_or(u32::MAX));
        let mut last_claim: Option<tokio::time::Instant> = None;
        // Starts a claimed batch on its slots (after shutdown began, the batch gives its leases back).
        let start = |batches: &mut JoinSet<()>, claimed: Vec<Operation>, slots| {
            let this = self.clone();
            let tx = record_tx.clone();
            let stop = stop.clone();
            batches.spawn(async move {
                this.batch(claimed, tx, stop, Some(slots)).await;
            });
            while batches.try_join_next().is_some() {}
        };
        'claims: loop {
            // Wait for at least one free slot, or shutdown; start what outcome writes claimed.
            let mut first = tokio::select! {
                biased;
                () = &mut stopped => break,
                Some(c) = refilled.recv() => {
                    claimed_total += c.ops.len() as u64;
                    start(&mut batches, c.ops, c.slots);
                    continue;
                }
                permit = slots.clone().acquire_owned() => match permit { Ok(p) => p, Err(_) => break },
            };
            // Claim cooldown: short of a full claim's worth of free slots, wait for more to free
            // up until `claim_cooldown` has passed since the last claim started, so a busy worker
            // claims (and records its submission starts) in larger groups instead of one slot at a
            // time. An idle worker's first claim is not delayed: its last claim is long past.
            if let Some(last) = last_claim {
                let until = last + self.config.claim_cooldown;
                while (first.num_permits() + slots.available_permits()) < full_claim as usize {
                    tokio::select! {
                        biased;
                        () = &mut stopped => break 'claims,
                        () = tokio::time::sleep_until(until) => break,
                        Some(c) = refilled.recv() => {
                            claimed_total += c.ops.len() as u64;
                            start(&mut batches, c.ops, c.slots);
                        }
                        more = slots.clone().acquire_owned() => match more {
                            Ok(p) => first.merge(p),
                            Err(_) => break,
                        },
                    }
                }
            }
            let free = first.num_permits() + slots.available_permits();
            let want = u32::try_from(free)
                .unwrap_or(u32::MAX)
                .min(self.config.batch_size);
            last_claim = Some(tokio::time::Instant::now());
            let claimed = match self.claim(want).await {
                Ok(c) => c,
                Err(error) => {
                    tracing::warn!(%error, "claim failed; pausing");
                    drop(first);
                    tokio::select! { () = &mut stopped => break, () = tokio::time::sleep(LEDGER_ERROR_PAUSE) => {} }
                    continue;
                }
            };
            if claimed.is_empty() {
                drop(first);
                tokio::select! {
                    () = &mut stopped => break,
                    () = self.ledger.wait_for_ready(self.config.poll_interval) => {}
                }
                continue;
            }
            claimed_total += claimed.len() as u64;
            self.metrics.claimed.add(claimed.len() as u64);
            self.metrics.claims.add(1);
            self.hold(&claimed);
            // One slot per claimed operation: give back what the claim did not fill, take the
            // rest (free when the claim was asked for; only this loop takes this pipeline's slots).
            let mut slots_held = first;
            if claimed.len() < slots_held.num_permits() {
                drop(slots_held.split(slots_held.num_permits() - claimed.len()));
            } else {
                let extra = u32::try_from(claimed.len() - slots_held.num_permits()).unwrap_or(0);
                if extra > 0
                    && let Ok(more) = slots.clone().acquire_many_owned(extra).await
                {
                    slots_held.merge(more);
                }
            }
            start(&mut batches, claimed, slots_held);
        }
        // What an outcome write claimed while shutdown began is started too: a stopped batch gives
        // its leases back at once.
        let drained = tokio::time::timeout(self.config.shutdown_grace, async {
            loop {
                tokio::select! {
                    done = batches.join_next() => if done.is_none() { break },
                    Some(c) = refilled.recv() => {
                        claimed_total += c.ops.len() as u64;
                        start(&mut batches, c.ops, c.slots);
                    }
                }
            }
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                "shutdown grace elapsed with submissions in flight; their leases will lapse to the reconciler"
            );
            batches.abort_all();
        }
        drop(record_tx);
        let _ = tokio::time::timeout(self.config.shutdown_grace, recorder).await;
        // The recorder is done (or given up on): what its last write claimed goes back.
        refilled.close();
        while let Ok(c) = refilled.try_recv() {
            claimed_total += c.ops.len() as u64;
            self.release_all(&c.ops).await;
        }
        claimed_total
    }

    fn held(&self) -> MutexGuard<'_, HashSet<OperationId>> {
        // The set stays consistent even if a holder panicked: inserts and removes are single steps.
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn hold(&self, claimed: &[Operation]) {
        self.held().extend(claimed.iter().map(|op| op.id.clone()));
    }

    /// This worker is done with `op`'s lease: recorded, fenced, released, or given up.
    fn let_go<'a>(&self, ops: impl IntoIterator<Item = &'a Operation>) {
        let mut held = self.held();
        for op in ops {
            held.remove(&op.id);
        }
    }

    /// One claimed batch (its claim also recorded every submission start): checks, then concurrent
    /// submissions whose outcomes go to the recorder; a rejection withdraws its submission record.
    /// `slots` holds one in-flight slot per claimed operation (the daemon's; none for `run_once`):
    /// each submission hands its own to the recorder with its outcome, which gives it back once
    /// that outcome is written, so one slow answer does not hold the batch's other slots and
    /// answered work never piles up unrecorded beyond `concurrency`; the rest (rejected) go back
    /// when the batch ends.
    async fn batch(
        &self,
        claimed: Vec<Operation>,
        tx: mpsc::Sender<Pending>,
        stop: watch::Receiver<bool>,
        mut slots: Option<OwnedSemaphorePermit>,
    ) {
        let claimed_at = Instant::now();
        failpoint::hit(FailPoint::AfterClaim);
        if *stop.borrow() {
            self.release_all(&claimed).await;
            return;
        }
        // The approval's expiry, on the database's time as of the claim just read (it only refuses).
        let now = self.clock.now();
        let mut to_submit = Vec::with_capacity(claimed.len());
        for op in claimed {
            match precheck(&op, now) {
                Some(rejection) => {
                    tracing::info!(operation = %op.id, tenant = %op.tenant, "rejected before submission: {rejection:?}");
                    let _ = tx
                        .send(Pending {
                            op,
                            recorded: rejection,
                            known_at: Instant::now(),
                            slot: None,
                        })
                        .await;
                }
                None => to_submit.push(op),
            }
        }
        if to_submit.is_empty() {
            return;
        }
        // The claim recorded every submission start in its own commit (`claim_to_submit`).
        failpoint::hit(FailPoint::AfterSubmissionRecorded);
        let mut submissions = JoinSet::new();
        for op in to_submit {
            self.metrics.claim_to_submit.observe(claimed_at.elapsed());
            let processor = self.processor.clone();
            let clock: SharedClock = self.clock.clone();
            let config = self.config.clone();
            let metrics = self.metrics.clone();
            let tx = tx.clone();
            let stop = stop.clone();
            let slot = slots.as_mut().and_then(|s| s.split(1));
            let span = tracing::info_span!("submit", operation = %op.id, tenant = %op.tenant, attempt = op.attempt,
                key = %op.idempotency_key);
            submissions.spawn(
                async move {
                    // The renewer keeps the lease while the submission is paced or retried after 429s.
                    let recorded = submit_claimed(
                        processor.as_ref(),
                        &clock,
                        &config,
                        &metrics,
                        &op,
                        config.rate_limit_wait_max,
                        Some(&stop),
                    )
                    .await;
                    let _ = tx
                        .send(Pending {
                            op,
                            recorded,
                            known_at: Instant::now(),
                            slot,
                        })
                        .await;
                }
                .instrument(span),
            );
        }
        while submissions.join_next().await.is_some() {}
    }

    /// Claims up to `want` ready operations, on the database's time.
    async fn claim(&self, want: u32) -> Result<Vec<Operation>, LedgerError> {
        let now = self.clock.read().await?;
        self.ledger
            .claim_to_submit(&self.config.lease_holder(), want, now)
            .await
    }

    async fn release_all(&self, claimed: &[Operation]) {
        self.let_go(claimed);
        if claimed.is_empty() {
            return;
        }
        let now = match self.clock.read().await {
            Ok(now) => now,
            Err(error) => {
                tracing::warn!(%error, n = claimed.len(), "could not release; the leases will lapse");
                return;
            }
        };
        for op in claimed {
            match self
                .ledger
                .release(&Fence::of(op), &self.config.owner, now)
                .await
            {
                Ok(()) => self.metrics.released.inc(),
                Err(error) => {
                    tracing::warn!(operation = %op.id, %error, "could not release; the lease will lapse")
                }
            }
        }
    }

    /// Writes outcomes in group commits: what is queued when a write starts goes in it, and what
    /// arrives within `record_linger` of the first outcome joins it (up to `record_batch_max`), so
    /// answers that come back spread out are still written a group per commit. With `refill`, each
    /// write also claims ready work into the slots it frees (`claim_with_outcomes`).
    ///
    /// Up to `record_writes` groups are written at once, so outcomes that arrive while a write is
    /// under way form the next group and start it instead of waiting for that write's commit.
    async fn recorder(&self, mut rx: mpsc::Receiver<Pending>, refill: Option<Refill>) {
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
        let mut want = match (refill, freed.as_ref()) {
            (Some(_), Some(f)) => u32::try_from(f.num_permits())
                .unwrap_or(u32::MAX)
                .min(self.config.batch_size),
            _ => 0,
        };
        // The outcome is the one fact we must not drop: retry through ledger outages for as long as
        // the lease could still be ours; after that the reconciler owns the row. A retry claims
        // nothing: the write alone matters then.
        let deadline = Instant::now() + self.config.lease_ttl;
        let (results, claimed) = loop {
            let write = async {
                let now = self.clock.read().await?;
                let started = Instant::now();
                let written = self
                    .ledger
                    .record_and_claim(&items, &self.config.lease_holder(), want, now)
                    .await?;
                Ok::<_, LedgerError>((written, started.elapsed()))
            };
            match write.await {
                Ok(((r, claimed), took)) => {
                    self.metrics.record_writes.add(1);
                    self.metrics.record_write.observe(took);
                    for (_, known_at) in &ops {
                        self.metrics.known_to_recorded.observe(known_at.elapsed());
                    }
                    break (r, claimed);
                }
                Err(error) if Instant::now() < deadline => {
                    tracing::warn!(%error, n = items.len(), "recording outcomes failed; retrying");
                    want = 0;
                    tokio::time::sleep(LEDGER_ERROR_PAUSE).await;
                }
                Err(error) => {
                    tracing::error!(%error, n = items.len(), "could not record outcomes; the reconciler will resolve them");
                    self.let_go(ops.iter().map(|(op, _)| op));
                    return;
                }
            }
        };
        self.let_go(ops.iter().map(|(op, _)| op));
        if !claimed.is_empty()
            && let (Some(refill), Some(mut slots)) = (refill, freed.take())
        {
            self.hold(&claimed);
            self.metrics.claimed.add(claimed.len() as u64);
            self.metrics.claims.add(1);
            self.metrics.claims_with_outcomes.add(1);
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
        drop(freed);
        for (((op, _), (_, recorded)), ok) in ops.iter().zip(&items).zip(results) {
            if ok {
                tracing::info!(operation = %op.id, attempt = op.attempt, "recorded {}", outcome_name(recorded));
            }
            settle(self.ledger.as_ref(), &self.metrics, op, recorded, ok).await;
        }
    }

    async fn renew_loop(&self, mut stop: watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(self.config.renew_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.changed() => {}
            }
            // Renewal continues through shutdown so in-flight submissions keep their leases.
            let held: Vec<OperationId> = self.held().iter().cloned().collect();
            let renewed = async {
                let now = self.clock.read().await?;
                self.ledger
                    .renew(&self.config.lease_holder(), &held, now)
                    .await
            };
            if let Err(error) = renewed.await {
                tracing::warn!(%error, "lease renewal failed");
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

//! The worker daemon, by role: [`claim`] batches with a lease (their submission starts recorded
//! in the same commit), [`submit`] each operation through the one execution path, [`record`]
//! outcomes in group commits whose writes also claim into the slots they free, [`renew`] the held
//! leases; stop only at safe points. The in-flight slots are split over pipelines, each a claim
//! loop with its own writer; one renewer serves them all.

mod claim;
mod lanes;
mod record;
mod renew;
mod submit;

use crate::config::{ConfigError, WorkerConfig};
use crate::metrics::WorkerMetrics;
use payonce_core::clock::SharedClock;
use payonce_core::id::OperationId;
use payonce_ledger::time::LedgerClock;
use payonce_ledger::{LedgerError, Operation, Queue, Recorded};
use payonce_processor::{Processor, Processors};
use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, mpsc, watch};
use tokio::task::JoinSet;

/// Pause after a ledger error before the loop tries again (Postgres restarting, network blip).
pub const LEDGER_ERROR_PAUSE: Duration = Duration::from_millis(250);
/// Outcomes queued for the recorder before submitters wait.
pub const RECORD_QUEUE_LEN: usize = 4_096;

/// A worker process's engine.
pub struct Worker {
    ledger: Arc<dyn Queue>,
    /// One adapter per processor this process is configured for; each operation goes to its own.
    processors: Arc<Processors>,
    /// The database's time: read before each claim, outcome write, renewal and
    /// release; the process's own clock only measures the drift.
    clock: Arc<LedgerClock>,
    config: WorkerConfig,
    metrics: Arc<WorkerMetrics>,
    /// Operations claimed and not yet finished (recorded, fenced, released or given up): the only
    /// leases renewal extends. A lease the worker gave up on must lapse to the reconciler.
    held: Mutex<HashSet<OperationId>>,
    /// Which lanes hold due work and whose turn it is, shared by the pipelines.
    fair: lanes::SharedFair,
    /// Held while this process reads the lanes (one read at a time).
    lane_read: tokio::sync::Mutex<()>,
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

/// Operations an outcome write claimed, with one in-flight slot and one write permit each.
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
        Self::with_processors(ledger, Processors::single(processor), clock, config)
    }

    /// Builds a worker like [`Worker::new`] serving every processor in `processors`: each
    /// operation is submitted to the one its row names (else the default); one naming a processor
    /// not among them is sent to a human, never submitted elsewhere. Refuses settings any of their
    /// contracts cannot serve.
    pub fn with_processors(
        ledger: Arc<dyn Queue>,
        processors: Processors,
        clock: SharedClock,
        config: WorkerConfig,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        for (_, adapter) in processors.all() {
            config.validate_for(adapter.contract())?;
        }
        let metrics = Arc::new(WorkerMetrics::default());
        let clock = LedgerClock::new(ledger.clone(), clock, metrics.clock_drift.clone(), "worker");
        Ok(Worker {
            ledger,
            processors: Arc::new(processors),
            clock: Arc::new(clock),
            config,
            metrics,
            held: Mutex::new(HashSet::new()),
            fair: lanes::SharedFair::default(),
            lane_read: tokio::sync::Mutex::new(()),
        })
    }

    /// The worker's counters.
    pub fn metrics(&self) -> Arc<WorkerMetrics> {
        self.metrics.clone()
    }

    /// Claims one batch (by the fair plan, as the daemon does) and drives every operation in it to
    /// a recorded outcome. Returns how many were claimed. For tests and `--once` runs; the daemon overlaps batches instead.
    pub async fn run_once(&self) -> Result<usize, LedgerError> {
        self.forget_lanes().await;
        let claimed = match self.lanes_known().await? {
            true => self.claim_fair(self.config.batch_size).await?,
            false => Vec::new(),
        };
        let n = claimed.len();
        self.metrics.count_claimed(&claimed);
        if n > 0 {
            self.metrics.claims.inc_by(1);
        }
        self.hold(&claimed);
        let (tx, rx) = mpsc::channel(RECORD_QUEUE_LEN);
        let (_stop_tx, stop_rx) = watch::channel(false);
        let batch = self.batch(claimed, tx, stop_rx, None, false);
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
}

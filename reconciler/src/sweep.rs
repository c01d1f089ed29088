//! Sweeps, in bounded batches served by partial indexes, each step a plan then one write per row:
//! 1. expired leases ([`leases`]): nothing submitted → `ready`; a submission recorded → `unknown`;
//! 2. webhook hints ([`crate::evidence`]): retrieve the object each stored webhook names (an Adyen
//!    notification: check it alone, [`crate::evidence::notification`]), check it against the operation, apply
//!    only what the processor holds;
//! 3. unknown outcomes ([`unknown`]): look up → a pure decision ([`decide`]) → one fenced write;
//!
//! Hints come before unknown outcomes: an operation a webhook or notification settles is not looked
//! up, retried or sent to a human in the same sweep, and one a notification made due (to confirm
//! its reference with the same key) is retried in it.
//!
//! then the scan for payments the ledger lost and the prune, when due. Every step counts what it
//! did once ([`Tally`]), in the report and the metrics together. Every write is fenced, so two
//! reconcilers at once stay correct; a sweep lease keeps it to one.

mod leases;
mod unknown;

pub use unknown::{Case, Decision, can_look_up, decide};

use crate::config::ReconcilerConfig;
use crate::evidence::{HintLimits, HintReport, check_hints};
use crate::metrics::ReconcilerMetrics;
use crate::scan::{ScanLimits, ScanReport};
use payonce_core::clock::{SharedClock, Timestamp};
use payonce_execution::ExecutionMetrics;
use payonce_ledger::time::LedgerClock;
use payonce_ledger::{Ledger, LedgerError, MaintenanceLease, Queue, Recovery};
use payonce_processor::{Processor, Processors};
use serde::Serialize;
use std::sync::Arc;

/// The maintenance lease name sweeps take.
pub const SWEEP_LEASE: &str = "sweep";
/// How often [`Reconciler::sweep_once_waiting`] asks again for a sweep lease another holds.
pub const LEASE_POLL: std::time::Duration = std::time::Duration::from_millis(500);
/// How long past one lease length [`Reconciler::sweep_once_waiting`] keeps asking (the holder's
/// clock against the database's, and one poll).
pub const LEASE_WAIT_MARGIN: std::time::Duration = std::time::Duration::from_secs(2);
/// The action line (and error) of a sweep whose processor scan did not read every page.
pub const SCAN_INCOMPLETE: &str = "NOT CLEAR: the processor scan did not complete (the processor \
     could not be reached, refused, or there were more pages than one scan reads): payments the \
     ledger lost may be unaccounted for; the next sweep reads the same period again";

/// What one sweep did (or, in a dry run, would do).
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct SweepReport {
    /// True if nothing was written.
    pub dry_run: bool,
    /// False if another reconciler held the sweep lease and this one stood down.
    pub swept: bool,
    /// Expired leases sent back to ready.
    pub requeued: u32,
    /// Expired leases with a submission, now unknown.
    pub marked_unknown: u32,
    /// Unknowns found succeeded.
    pub resolved_succeeded: u32,
    /// Unknowns found failed.
    pub resolved_failed: u32,
    /// Same-key retries made.
    pub retried_same_key: u32,
    /// Resubmissions after the window (policy on, consistent lookup).
    pub resubmitted: u32,
    /// Sent to a human.
    pub escalated: u32,
    /// Put off for a later check.
    pub deferred: u32,
    /// Writes lost to a racing writer (harmless).
    pub fenced: u32,
    /// Errors (ledger or processor) that stopped an item.
    pub errors: u32,
    /// Webhook hints checked against the processor (what each did).
    pub hints: HintReport,
    /// The scan for payments the ledger does not know about, when one ran.
    pub scan: Option<ScanReport>,
    /// Rows the ledger had lost that workers learned of (a first submission answered as a replay:
    /// `ledger::lost_rows`), alerted in this sweep.
    pub lost_rows: u32,
    /// What a prune deleted, when one ran.
    pub pruned: Option<payonce_ledger::retention::Pruned>,
    /// One line per action, for dry runs and logs.
    pub actions: Vec<String>,
}

/// What one step of a sweep did to one row: counted in the report and the metrics together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tally {
    /// An expired lease with nothing submitted went back to `ready`.
    Requeued,
    /// An expired lease with a submission recorded became `unknown`.
    MarkedUnknown,
    /// A lookup found the payment succeeded.
    ResolvedSucceeded,
    /// A lookup found it failed.
    ResolvedFailed,
    /// A lookup found a payment that is not the approved one: a human sees both facts.
    Mismatch,
    /// Looked up again later.
    Deferred,
    /// Sent to a human.
    Escalated,
    /// Retried with the same key.
    RetriedSameKey,
    /// Submitted again after the key's window, by policy.
    Resubmitted,
    /// The write lost to a racing writer (harmless).
    Fenced,
}

impl SweepReport {
    /// Counts `tally` here and in `metrics`.
    pub(crate) fn tally(&mut self, tally: Tally, metrics: &ReconcilerMetrics) {
        let (field, counter) = match tally {
            Tally::Requeued => (&mut self.requeued, &metrics.requeued),
            Tally::MarkedUnknown => (&mut self.marked_unknown, &metrics.marked_unknown),
            Tally::ResolvedSucceeded => (&mut self.resolved_succeeded, &metrics.resolved_succeeded),
            Tally::ResolvedFailed => (&mut self.resolved_failed, &metrics.resolved_failed),
            Tally::Mismatch => (&mut self.escalated, &metrics.webhook_mismatches),
            Tally::Deferred => (&mut self.deferred, &metrics.deferred),
            Tally::Escalated => (&mut self.escalated, &metrics.escalated),
            Tally::RetriedSameKey => (&mut self.retried_same_key, &metrics.retried_same_key),
            Tally::Resubmitted => (&mut self.resubmitted, &metrics.resubmitted),
            Tally::Fenced => (&mut self.fenced, &metrics.fenced),
        };
        *field += 1;
        counter.inc();
    }
    /// Adds what one operation's step did (`other`, counters and actions only) to this report.
    fn absorb(&mut self, other: SweepReport) {
        self.requeued += other.requeued;
        self.marked_unknown += other.marked_unknown;
        self.resolved_succeeded += other.resolved_succeeded;
        self.resolved_failed += other.resolved_failed;
        self.retried_same_key += other.retried_same_key;
        self.resubmitted += other.resubmitted;
        self.escalated += other.escalated;
        self.deferred += other.deferred;
        self.fenced += other.fenced;
        self.errors += other.errors;
        self.actions.extend(other.actions);
    }

    /// Whether the sweep did and found nothing: no action, error, hint or scan finding.
    pub fn is_idle(&self) -> bool {
        self.actions.is_empty()
            && self.errors == 0
            && self.hints.applied
                + self.hints.deferred
                + self.hints.mismatched
                + self.hints.unproven
                == 0
            && self.hints.without_approval == 0
            && self.scan.as_ref().map_or(0, ScanReport::findings) == 0
            && self.lost_rows == 0
    }

    /// Payments the ledger did not know about (the scan's findings and the lost rows workers
    /// learned of): each is a lost-money alert.
    pub fn unknown_payments(&self) -> u32 {
        self.scan.as_ref().map_or(0, ScanReport::findings) + self.lost_rows
    }

    /// The one-line summary cron and on-call read.
    pub fn summary(&self) -> String {
        format!(
            "sweep{}: requeued={} unknown={} succeeded={} failed={} retried_same_key={} resubmitted={} \
             escalated={} deferred={} fenced={} errors={} hints_applied={} hints_deferred={} \
             hint_mismatches={} payments_without_approval={} unknown_payments={}",
            if self.dry_run { " (dry run)" } else { "" },
            self.requeued,
            self.marked_unknown,
            self.resolved_succeeded,
            self.resolved_failed,
            self.retried_same_key,
            self.resubmitted,
            self.escalated,
            self.deferred,
            self.fenced,
            self.errors,
            self.hints.applied,
            self.hints.deferred,
            self.hints.mismatched + self.hints.unproven,
            self.hints.without_approval,
            self.unknown_payments()
        )
    }
}

/// The reconciler engine.
pub struct Reconciler {
    ledger: Arc<dyn Recovery>,
    /// Where a same-key retry records its start and outcome, as a worker does.
    queue: Arc<dyn Queue>,
    /// One adapter per processor this process is configured for; each operation is looked up,
    /// retried and decided on its own processor's, and each webhook checked on its sender's.
    processors: Processors,
    /// The database's time: read at each sweep step, so a reconciler whose own clock is
    /// off neither expires live leases nor closes a key's retention window early (or late).
    clock: Arc<LedgerClock>,
    config: ReconcilerConfig,
    metrics: Arc<ReconcilerMetrics>,
    /// What same-key retries' executions count.
    retry_metrics: ExecutionMetrics,
    /// When this process last scanned the processor's payments (`None`: not yet).
    last_scan: std::sync::Mutex<Option<Timestamp>>,
    /// When this process last pruned (`None`: not yet).
    last_prune: std::sync::Mutex<Option<Timestamp>>,
}

impl Reconciler {
    /// Builds a reconciler on `clock`, the process's clock (the ledger's on SQLite; on Postgres
    /// only its drift from the server's is measured). The sweeps use the ledger's [`Recovery`]; a
    /// same-key retry records through its [`Queue`], as a worker does.
    pub fn new(
        ledger: Arc<dyn Ledger>,
        processor: Arc<dyn Processor>,
        clock: SharedClock,
        config: ReconcilerConfig,
    ) -> Self {
        Self::with_processors(ledger, Processors::single(processor), clock, config)
    }

    /// Builds a reconciler like [`Reconciler::new`] serving every processor in `processors`: an
    /// operation naming one not among them is sent to a human, never looked up or retried on
    /// another.
    pub fn with_processors(
        ledger: Arc<dyn Ledger>,
        processors: Processors,
        clock: SharedClock,
        config: ReconcilerConfig,
    ) -> Self {
        let metrics = Arc::new(ReconcilerMetrics::default());
        let clock = LedgerClock::new(
            ledger.clone(),
            clock,
            metrics.clock_drift.clone(),
            "reconciler",
        );
        Reconciler {
            ledger: ledger.clone(),
            queue: ledger,
            processors,
            clock: Arc::new(clock),
            config,
            metrics,
            retry_metrics: ExecutionMetrics::default(),
            last_scan: std::sync::Mutex::new(None),
            last_prune: std::sync::Mutex::new(None),
        }
    }

    /// The reconciler's counters.
    pub fn metrics(&self) -> Arc<ReconcilerMetrics> {
        self.metrics.clone()
    }

    /// The fleet limiter its lookups and same-key retries draw from.
    pub fn limiter(&self) -> payonce_processor::limiter::SharedLimiter {
        self.config.retry.limiter.clone()
    }

    /// One sweep. In a dry run nothing is written and lookups are still made (they are reads).
    pub async fn sweep_once(&self, dry_run: bool) -> Result<SweepReport, LedgerError> {
        let mut report = SweepReport {
            dry_run,
            ..Default::default()
        };
        let lease = MaintenanceLease {
            name: SWEEP_LEASE,
            owner: &self.config.owner,
        };
        if !dry_run
            && !self
                .ledger
                .try_maintenance_lease(
                    &lease,
                    self.config.sweep_lease_ttl,
                    self.clock.read().await?,
                )
                .await?
        {
            report
                .actions
                .push("another reconciler holds the sweep lease; standing down".into());
            return Ok(report);
        }
        report.swept = true;
        let swept = self.sweep_steps(dry_run, &mut report).await;
        if !dry_run {
            if let Err(failed) = swept {
                // A failed step frees the lease at once: a holder whose statements keep failing
                // (a schema it cannot serve, a broken connection) would otherwise keep every
                // healthy reconciler standing down until the lease's TTL, sweep after sweep
                // (issue 56). A drop that fails too leaves the TTL to free it.
                if let Err(error) = self.ledger.drop_maintenance_lease(&lease).await {
                    tracing::warn!(%error, "the failed sweep could not give its lease back; it expires with its TTL");
                }
                return Err(failed);
            }
            self.ledger.drop_maintenance_lease(&lease).await?;
        }
        swept?;
        if report.is_idle() {
            // Every few seconds on a quiet stack: at info it would bury what matters.
            tracing::debug!(summary = %report.summary(), "sweep done");
        } else {
            tracing::info!(summary = %report.summary(), "sweep done");
        }
        Ok(report)
    }

    /// One sweep, as `reconciler sweep --once` runs it: while another reconciler holds the sweep
    /// lease, waits for it (polling every [`LEASE_POLL`]) for up to one lease length plus
    /// [`LEASE_WAIT_MARGIN`]: a lease whose holder died (a failover, a kill) expires within that
    /// on the database's clock. A sweep that still could not take it is reported as an error, never
    /// as an idle sweep.
    pub async fn sweep_once_waiting(&self, dry_run: bool) -> Result<SweepReport, LedgerError> {
        let give_up_at =
            tokio::time::Instant::now() + self.config.sweep_lease_ttl + LEASE_WAIT_MARGIN;
        let started = tokio::time::Instant::now();
        loop {
            let mut report = self.sweep_once(dry_run).await?;
            if report.swept || dry_run {
                if started.elapsed() >= LEASE_POLL {
                    report.actions.insert(
                        0,
                        format!(
                            "waited {:.1} s for the sweep lease another reconciler held",
                            started.elapsed().as_secs_f64()
                        ),
                    );
                }
                return Ok(report);
            }
            if tokio::time::Instant::now() + LEASE_POLL > give_up_at {
                report.errors += 1;
                report.actions.push(format!(
                    "STOOD DOWN: another reconciler held the sweep lease for longer than its length \
                     ({} ms) and nothing was swept; `reconciler run` is probably sweeping (or \
                     --sweep-lease-ttl-ms differs between reconcilers)",
                    self.config.sweep_lease_ttl.as_millis()
                ));
                return Ok(report);
            }
            tokio::time::sleep(LEASE_POLL).await;
        }
    }

    /// Raises the lost-money alert once for each row workers found lost ([`SweepReport::lost_rows`]):
    /// the metric the scan's findings count in, a log line, the sweep's report, and a note on the
    /// operation's audit trail.
    async fn alert_lost_rows(&self, report: &mut SweepReport) -> Result<(), LedgerError> {
        let now = self.clock.read().await?;
        for lost in self
            .ledger
            .unreported_lost_rows(self.config.batch_size)
            .await?
        {
            if !self
                .ledger
                .report_lost_row(&lost, &self.config.owner, now)
                .await?
            {
                continue;
            }
            self.metrics.unknown_payments.inc();
            report.lost_rows += 1;
            tracing::error!(operation_id = %lost.operation, reference = %lost.reference,
                "ALERT: the processor replayed this operation's first submission: a row the \
                 ledger had lost (restored or failed over?) had paid it");
            report.actions.push(format!(
                "{}: paid for {} by a request of a row the ledger had lost (the processor \
                 replayed it to {}); recorded as that payment",
                lost.reference, lost.operation, lost.found_by
            ));
        }
        Ok(())
    }

    /// The steps of one sweep, under its lease (a dry run holds none).
    async fn sweep_steps(
        &self,
        dry_run: bool,
        report: &mut SweepReport,
    ) -> Result<(), LedgerError> {
        self.sweep_leases(report).await?;
        if !dry_run {
            report.hints = self.check_hints_once().await?;
        }
        self.sweep_unknown(report).await?;
        if !dry_run {
            report.scan = self.scan_if_due().await?;
            if let Some(scan) = &report.scan {
                report.actions.extend(scan.found.iter().cloned());
                if !scan.complete {
                    // Money the ledger lost may be in what was not read: never "all clear".
                    report.errors += 1;
                    report.actions.push(SCAN_INCOMPLETE.into());
                }
            }
            self.alert_lost_rows(report).await?;
            report.pruned = self.prune_if_due().await?;
        }
        Ok(())
    }

    /// Stuck operations worked on at once (at least one).
    fn concurrency(&self) -> usize {
        self.config.concurrency.max(1)
    }

    /// Rows one sweep write moves (at least one).
    fn write_batch(&self) -> usize {
        self.config.write_batch.max(1)
    }

    /// Checks the pending webhook hints once (a step of every sweep; callable alone, e.g. by tests).
    pub async fn check_hints_once(&self) -> Result<HintReport, LedgerError> {
        let limits = HintLimits {
            batch_size: self.config.batch_size,
            backoff_base: self.config.check_backoff_base,
            backoff_max: self.config.check_backoff_max,
            limiter: self.config.retry.limiter.clone(),
            permit_wait_max: self.config.lookup_permit_wait_max,
            concurrency: self.config.concurrency,
            pass_budget: self.config.interval,
        };
        check_hints(
            self.ledger.as_ref(),
            &self.processors,
            &self.metrics,
            &limits,
            self.clock.read().await?,
        )
        .await
    }

    /// Prunes ([`payonce_ledger::retention`]) when this process has not in the last
    /// `prune_interval`.
    async fn prune_if_due(&self) -> Result<Option<payonce_ledger::retention::Pruned>, LedgerError> {
        // Retention windows on the database's clock, like leases.
        let now = self.clock.read().await?;
        {
            let last = self.last_prune.lock().unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|t| now < t + self.config.prune_interval) {
                return Ok(None);
            }
        }
        let pruned = self.ledger.prune(&self.config.retention, now).await?;
        *self.last_prune.lock().unwrap_or_else(|p| p.into_inner()) = Some(now);
        if pruned != Default::default() {
            tracing::info!(?pruned, "pruned rows past their retention");
        }
        Ok(Some(pruned))
    }

    /// Scans each configured processor's recent payments ([`crate::scan`]) when the process has
    /// not in the last `scan_interval` (every `sweep --once` is a new process, so it always scans).
    async fn scan_if_due(&self) -> Result<Option<ScanReport>, LedgerError> {
        // A contract without a list has nothing to scan: money a ledger lost there is found only
        // by the processor's own reports, and asking would warn on every sweep.
        let listed: Vec<&Arc<dyn Processor>> = self
            .processors
            .all()
            .map(|(_, adapter)| adapter)
            .filter(|adapter| adapter.contract().lookups.list.is_some())
            .collect();
        if listed.is_empty() {
            return Ok(None);
        }
        let now = self.clock.read().await?;
        {
            let last = self.last_scan.lock().unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|t| now < t + self.config.scan_interval) {
                return Ok(None);
            }
        }
        let limits = ScanLimits {
            key_secret: self.config.key_secret.clone(),
            overlap: self.config.lookup_skew,
            lookback: self.config.scan_lookback,
            limiter: self.config.retry.limiter.clone(),
            permit_wait_max: self.config.lookup_permit_wait_max,
            default_processor: self.processors.default_kind(),
        };
        let mut report: Option<ScanReport> = None;
        // Each processor keeps its own watermarks (named by its wire).
        for adapter in listed {
            let one = crate::scan::scan(
                self.ledger.as_ref(),
                adapter.as_ref(),
                &self.metrics,
                &limits,
                now,
            )
            .await?;
            match &mut report {
                Some(all) => all.absorb(one),
                None => report = Some(one),
            }
        }
        *self.last_scan.lock().unwrap_or_else(|p| p.into_inner()) = Some(now);
        Ok(report)
    }

    /// Sweeps every `interval` until `shutdown` resolves; a sweep in progress finishes first.
    pub async fn run(self: Arc<Self>, shutdown: impl Future<Output = ()> + Send) {
        tokio::pin!(shutdown);
        let mut tick = tokio::time::interval(self.config.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                () = &mut shutdown => break,
                _ = tick.tick() => {}
            }
            if let Err(error) = self.sweep_once(false).await {
                tracing::warn!(%error, "sweep failed; next sweep at the next interval");
            }
        }
        tracing::info!("reconciler stopped");
    }
}

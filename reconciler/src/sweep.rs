//! Sweeps, in bounded batches served by partial indexes:
//! 1. expired leases: nothing submitted → `ready`; a submission recorded → `unknown`;
//! 2. unknown outcomes: look up; found → record it; pending → poll later; not found while the key's
//!    retention window is open → retry with the SAME key; not found after it → resubmit only on a
//!    consistent lookup and an explicit policy, else `needs_attention`; lookup unavailable → back off;
//!    the stored reference names an object without the operation's id → checked as a webhook's object
//!    is ([`crate::evidence::report_of`]): a contradiction is `needs_attention` with both facts.
//!
//! 3. webhook hints: retrieve the object each stored webhook names, check it against the operation,
//!    apply only what the processor holds ([`crate::evidence`]).
//!
//! Every write is fenced, so two reconcilers at once stay correct; a sweep lease keeps it to one.

use crate::config::ReconcilerConfig;
use crate::evidence::{HintLimits, HintReport, check_hints};
use crate::metrics::ReconcilerMetrics;
use crate::scan::{ScanLimits, ScanReport};
use futures_util::stream::{self, FuturesUnordered, StreamExt};
use payonce_shared::clock::{SharedClock, Timestamp};
use payonce_shared::failpoint::{self, FailPoint};
use payonce_shared::ledger::{
    ApplyReport, ClaimUnknown, Declined, DeferCheck, Escalate, ExpireLeases, ExpiredLease, Fence,
    LeaseHolder, LedgerError, LookupFound, MaintenanceLease, Operation, Paid, RecordLookups,
    Recovery, Report,
};
use payonce_shared::ledger_clock::LedgerClock;
use payonce_shared::limiter::{Budget, acquire};
use payonce_shared::processor::{FoundStatus, LookupOutcome, LookupSupport, Processor, operation};
use payonce_shared::state::Status;
use payonce_worker::{WorkerMetrics, execute_one};
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;

/// The maintenance lease name sweeps take.
pub const SWEEP_LEASE: &str = "sweep";

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
    /// What a prune deleted, when one ran.
    pub pruned: Option<payonce_shared::ledger::retention::Pruned>,
    /// One line per action, for dry runs and logs.
    pub actions: Vec<String>,
}

impl SweepReport {
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
            self.scan.as_ref().map_or(0, ScanReport::findings)
        )
    }
}

/// What to do with one unknown operation, decided from the lookup and the adapter's contract.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Record the processor's answer.
    Record(Report),
    /// The processor is still working on it: look again later.
    Poll(String),
    /// Retry with the same key (the processor still remembers it).
    RetrySameKey,
    /// Submit again: consistent lookup found nothing, the window closed, policy allows.
    Resubmit,
    /// A human decides.
    Escalate(String),
    /// The lookup failed: back off.
    Defer(String),
}

impl Decision {
    /// One line for dry runs, logs and `sweep --json`: a found object appears as its summary only
    /// (a PaymentIntent's client secret must not reach on-call output).
    pub fn describe(&self) -> String {
        match self {
            Decision::Record(Report::Succeeded(Paid { reference, result })) => format!(
                "Record(Succeeded {{ reference: {reference:?}, result: {} }})",
                payonce_shared::processor::summary::summary(result)
            ),
            other => format!("{other:?}"),
        }
    }
}

/// The reconciler engine.
pub struct Reconciler {
    ledger: Arc<dyn Recovery>,
    processor: Arc<dyn Processor>,
    /// The database's time (issue 43): read at each sweep step, so a reconciler whose own clock is
    /// off neither expires live leases nor closes a key's retention window early (or late).
    clock: Arc<LedgerClock>,
    config: ReconcilerConfig,
    metrics: Arc<ReconcilerMetrics>,
    retry_metrics: WorkerMetrics,
    /// When this process last scanned the processor's payments (`None`: not yet).
    last_scan: std::sync::Mutex<Option<Timestamp>>,
    /// When this process last pruned (`None`: not yet).
    last_prune: std::sync::Mutex<Option<Timestamp>>,
}

impl Reconciler {
    /// Builds a reconciler on `clock`, the process's clock (the ledger's on SQLite; on Postgres
    /// only its drift from the server's is measured).
    pub fn new(
        ledger: Arc<dyn Recovery>,
        processor: Arc<dyn Processor>,
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
            ledger,
            processor,
            clock: Arc::new(clock),
            config,
            metrics,
            retry_metrics: WorkerMetrics::default(),
            last_scan: std::sync::Mutex::new(None),
            last_prune: std::sync::Mutex::new(None),
        }
    }

    /// The reconciler's counters.
    pub fn metrics(&self) -> Arc<ReconcilerMetrics> {
        self.metrics.clone()
    }

    /// The fleet limiter its lookups and same-key retries draw from.
    pub fn limiter(&self) -> payonce_shared::limiter::SharedLimiter {
        self.config.retry.limiter.clone()
    }

    /// Decides what to do with an unknown operation given a lookup result; `now` is the database's
    /// time, as `first_submitted_at` is (the key's retention window is measured on one clock).
    pub fn decide(&self, op: &Operation, lookup: LookupOutcome, now: Timestamp) -> Decision {
        let contract = self.processor.contract();
        let window_open = contract.honours_idempotency_keys
            && match (contract.key_retention, op.first_submitted_at_ms) {
                (None, _) => true,
                (Some(retention), Some(first)) => {
                    now + self.config.retention_margin < first + retention
                }
                // No submission time recorded: nothing can have used the key yet.
                (Some(_), None) => true,
            };
        match lookup {
            LookupOutcome::Found {
                reference,
                status: FoundStatus::Succeeded { result },
            } => Decision::Record(Report::Succeeded(Paid { reference, result })),
            LookupOutcome::Found {
                reference,
                status: FoundStatus::Failed { code, message },
            } => Decision::Record(Report::Failed(Declined {
                code,
                message,
                reference: Some(reference),
            })),
            LookupOutcome::Found {
                reference,
                status: FoundStatus::Pending { processor_status },
            } => Decision::Poll(format!(
                "{reference} is {processor_status} at the processor"
            )),
            LookupOutcome::NotFound { .. } if window_open => Decision::RetrySameKey,
            LookupOutcome::NotFound { consistent: true } if self.config.resubmit_after_window => {
                Decision::Resubmit
            }
            LookupOutcome::NotFound { consistent } => Decision::Escalate(format!(
                "not found at the processor ({} lookup) and the key's retention window has closed; \
                 a new submission could pay twice",
                if consistent {
                    "consistent"
                } else {
                    "eventually consistent"
                }
            )),
            LookupOutcome::RateLimited { reason } => {
                Decision::Defer(format!("lookup rate limited: {reason}"))
            }
            LookupOutcome::Unavailable { reason } => {
                Decision::Defer(format!("lookup unavailable: {reason}"))
            }
            // The object the stored reference names is not plainly this operation's: the rule a
            // webhook's object goes through decides, so a contradiction reaches a human with both
            // facts instead of being looked up again forever.
            LookupOutcome::Unmatched { object } => match crate::evidence::report_of(op, &object) {
                Some(report) => Decision::Record(report),
                None => Decision::Poll(format!(
                    "{} is still in progress at the processor",
                    object.reference
                )),
            },
        }
    }

    fn backoff(&self, op: &Operation) -> Duration {
        let exp = u32::try_from(op.check_count.clamp(0, 20)).unwrap_or(20);
        self.config
            .check_backoff_base
            .saturating_mul(1_u32 << exp)
            .min(self.config.check_backoff_max)
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
        self.sweep_leases(&mut report).await?;
        self.sweep_unknown(&mut report).await?;
        if !dry_run {
            report.hints = self.check_hints_once().await?;
            report.scan = self.scan_if_due().await?;
            if let Some(scan) = &report.scan {
                report.actions.extend(scan.found.iter().cloned());
            }
            report.pruned = self.prune_if_due().await?;
        }
        if !dry_run {
            self.ledger.drop_maintenance_lease(&lease).await?;
        }
        if report.is_idle() {
            // Every few seconds on a quiet stack: at info it would bury what matters.
            tracing::debug!(summary = %report.summary(), "sweep done");
        } else {
            tracing::info!(summary = %report.summary(), "sweep done");
        }
        Ok(report)
    }

    /// Stuck operations worked on at once (at least one).
    fn concurrency(&self) -> usize {
        self.config.concurrency.max(1)
    }

    /// Rows one sweep write moves (at least one).
    fn write_batch(&self) -> usize {
        self.config.write_batch.max(1)
    }

    async fn sweep_leases(&self, report: &mut SweepReport) -> Result<(), LedgerError> {
        // One read for the page and its writes: a lease expired at `now` stays expired.
        let now = self.clock.read().await?;
        let leases = self
            .ledger
            .expired_leases(now, self.config.batch_size)
            .await?;
        for lease in &leases {
            let target = if lease.submitted { "unknown" } else { "ready" };
            report.actions.push(format!(
                "{}: lease of {} expired -> {target}",
                lease.id, lease.lease_owner
            ));
        }
        if report.dry_run {
            return Ok(());
        }
        // Each group is one fenced statement; `buffered` overlaps the groups and keeps their order.
        // Owned items and `move` blocks: a stream over borrowed items would make the sweep's
        // future not provably `Send` (rustc's higher-ranked lifetime limitation).
        let groups: Vec<Vec<ExpiredLease>> = leases
            .chunks(self.write_batch())
            .map(<[ExpiredLease]>::to_vec)
            .collect();
        let mut writes = stream::iter(groups)
            .map(move |group| async move {
                let moved = self
                    .ledger
                    .expire_leases(
                        &ExpireLeases {
                            leases: &group,
                            actor: &self.config.owner,
                            next_check_at: now,
                        },
                        now,
                    )
                    .await;
                (group.len(), moved)
            })
            .buffered(self.concurrency());
        while let Some((n, moved)) = writes.next().await {
            let moved = match moved {
                Ok(moved) => moved,
                Err(error) => {
                    // Nothing of the group was written; the next sweep finds the same leases.
                    report.errors += u32::try_from(n).unwrap_or(u32::MAX);
                    tracing::warn!(%error, leases = n, "could not expire a group of leases");
                    continue;
                }
            };
            for to in moved {
                match to {
                    Some(Status::Unknown) => {
                        report.marked_unknown += 1;
                        self.metrics.marked_unknown.inc();
                    }
                    Some(_) => {
                        report.requeued += 1;
                        self.metrics.requeued.inc();
                    }
                    None => {
                        report.fenced += 1;
                        self.metrics.fenced.inc();
                    }
                }
            }
        }
        Ok(())
    }

    async fn sweep_unknown(&self, report: &mut SweepReport) -> Result<(), LedgerError> {
        let now = self.clock.read().await?;
        let due = self
            .ledger
            .due_for_check(now, self.config.batch_size)
            .await?;
        let dry_run = report.dry_run;
        // Lookups and their fenced writes overlap, up to `concurrency` at once; each operation's
        // step gets its own report, merged in the order the rows came.
        let mut steps = stream::iter(due.into_iter().enumerate())
            .map(move |(i, op)| async move {
                if i == 1 {
                    failpoint::hit(FailPoint::MidSweep);
                }
                let mut own = SweepReport {
                    dry_run,
                    ..SweepReport::default()
                };
                let found = match self.resolve_unknown(&op, &mut own).await {
                    Ok(found) => found,
                    Err(error) => {
                        own.errors += 1;
                        tracing::warn!(operation = %op.id, %error, "could not resolve unknown operation");
                        None
                    }
                };
                (own, found)
            })
            .buffered(self.concurrency());
        // Found payments are recorded in groups of `write_batch`, one commit each. Up to
        // `concurrency` group writes run at once, beside the lookups: the groups hold disjoint rows,
        // each statement locks its rows in id order, and every row is fenced, so they cannot
        // deadlock or overwrite each other, and Postgres works on several groups at a time.
        let mut found = Vec::new();
        let mut writes = FuturesUnordered::new();
        let mut looked_up_all = false;
        while !looked_up_all {
            tokio::select! {
                Some(written) = writes.next(), if !writes.is_empty() => report.absorb(written),
                step = steps.next() => match step {
                    Some((own, one)) => {
                        report.absorb(own);
                        found.extend(one);
                        if found.len() >= self.write_batch() {
                            if writes.len() >= self.concurrency()
                                && let Some(written) = writes.next().await
                            {
                                report.absorb(written);
                            }
                            writes.push(self.record_found(std::mem::take(&mut found)));
                        }
                    }
                    None => looked_up_all = true,
                },
            }
        }
        writes.push(self.record_found(found));
        while let Some(written) = writes.next().await {
            report.absorb(written);
        }
        Ok(())
    }

    /// Records lookups that found the approved object, in one write; a row that moved since its
    /// lookup (its fence lost) gets the finding as a report instead, planned from its new state.
    async fn record_found(&self, found: Vec<LookupFound>) -> SweepReport {
        let mut report = SweepReport::default();
        if found.is_empty() {
            return report;
        }
        let source = format!("lookup by {}", self.config.owner);
        let write = async {
            let now = self.clock.read().await?;
            let request = RecordLookups {
                found: &found,
                source: &source,
            };
            Ok::<_, LedgerError>((self.ledger.record_lookups(&request, now).await?, now))
        };
        let (written, now) = match write.await {
            Ok(written) => written,
            Err(error) => {
                // Nothing of the group was written; the rows stay unknown for the next sweep.
                report.errors += u32::try_from(found.len()).unwrap_or(u32::MAX);
                tracing::warn!(%error, n = found.len(), "could not record found payments");
                return report;
            }
        };
        for (item, ok) in found.into_iter().zip(written) {
            if !ok {
                let id = item.fence.id.clone();
                let finding = Report::Succeeded(Paid {
                    reference: item.reference,
                    result: item.result,
                });
                if let Err(error) = self
                    .ledger
                    .apply_report(
                        &ApplyReport {
                            id: &id,
                            report: &finding,
                            source: &source,
                        },
                        now,
                    )
                    .await
                {
                    report.errors += 1;
                    tracing::warn!(operation = %id, %error, "could not record a found payment");
                    continue;
                }
            }
            report.resolved_succeeded += 1;
            self.metrics.resolved_succeeded.inc();
        }
        report
    }

    /// Looks one unknown operation up and writes what that decides, except a found payment of a
    /// row still `unknown`: that is returned, for [`Self::record_found`] to record with others.
    async fn resolve_unknown(
        &self,
        op: &Operation,
        report: &mut SweepReport,
    ) -> Result<Option<LookupFound>, LedgerError> {
        let contract = self.processor.contract();
        let lookup = if contract.lookup == LookupSupport::None {
            LookupOutcome::NotFound { consistent: false }
        } else {
            let created_after = op
                .first_submitted_at_ms
                .unwrap_or(op.created_at_ms)
                .saturating_sub_span(self.config.lookup_skew);
            // Lookups draw from the read budget, apart from submissions; no permit in time defers the check.
            let limiter = self.config.retry.limiter.as_ref();
            match acquire(limiter, Budget::Read, self.config.lookup_permit_wait_max).await {
                Ok(_) => {
                    // A payment or a refund, as its kind says.
                    let found = operation::lookup(self.processor.as_ref(), op, created_after).await;
                    if matches!(found, LookupOutcome::RateLimited { .. }) {
                        self.metrics.lookups_rate_limited.inc();
                    }
                    found
                }
                Err(denied) => LookupOutcome::RateLimited {
                    reason: format!("fleet limiter: {denied}"),
                },
            }
        };
        // Read after the lookup, which may have taken a while: the retention window, a retry's
        // lease and the next check are decided on the database's time at the decision.
        let now = self.clock.read().await?;
        let mut decision = self.decide(op, lookup, now);
        // Evidence before trust, for lookups too: a found payment or refund is applied only if it is the
        // approved one (see `evidence::differences`); otherwise a human sees both facts.
        if let Decision::Record(Report::Succeeded(Paid { reference, result })) = &decision
            && let Some(object) = self.processor.facts(reference, result)
            && let Some(checked @ Report::Mismatch { .. }) = crate::evidence::report_of(op, &object)
        {
            decision = Decision::Record(checked);
        }
        report
            .actions
            .push(format!("{}: {}", op.id, decision.describe()));
        if report.dry_run {
            return Ok(None);
        }
        let owner = self.config.owner.as_str();
        let fence = Fence::of(op);
        if op.status == Status::Unknown
            && let Decision::Record(Report::Succeeded(Paid { reference, result })) = decision
        {
            return Ok(Some(LookupFound {
                fence,
                reference,
                result,
            }));
        }
        let fenced = |report: &mut SweepReport, m: &ReconcilerMetrics| {
            report.fenced += 1;
            m.fenced.inc();
        };
        match decision {
            Decision::Record(r) => {
                let succeeded = matches!(r, Report::Succeeded(_));
                let applied = self
                    .ledger
                    .apply_report(
                        &ApplyReport {
                            id: &op.id,
                            report: &r,
                            source: &format!("lookup by {owner}"),
                        },
                        now,
                    )
                    .await?;
                if let Report::Mismatch {
                    reference, detail, ..
                } = &r
                {
                    report.escalated += 1;
                    self.metrics.webhook_mismatches.inc();
                    tracing::error!(alert = "webhook_lookup_mismatch", operation = %op.id, %reference, %detail,
                        ?applied, "the payment found by lookup does not match the approved details; it needs attention");
                } else if succeeded {
                    report.resolved_succeeded += 1;
                    self.metrics.resolved_succeeded.inc();
                } else {
                    report.resolved_failed += 1;
                    self.metrics.resolved_failed.inc();
                }
            }
            Decision::Poll(why) | Decision::Defer(why) => {
                match self
                    .ledger
                    .defer_check(
                        &DeferCheck {
                            fence: &fence,
                            next_check_at: now + self.backoff(op),
                            detail: &why,
                            actor: owner,
                        },
                        now,
                    )
                    .await
                {
                    Ok(()) => {
                        report.deferred += 1;
                        self.metrics.deferred.inc();
                    }
                    Err(LedgerError::Fenced { .. }) => fenced(report, &self.metrics),
                    Err(e) => return Err(e),
                }
            }
            Decision::Escalate(why) => match self
                .ledger
                .escalate(
                    &Escalate {
                        fence: &fence,
                        reason: &why,
                        actor: owner,
                    },
                    now,
                )
                .await
            {
                Ok(()) => {
                    report.escalated += 1;
                    self.metrics.escalated.inc();
                }
                Err(LedgerError::Fenced { .. }) => fenced(report, &self.metrics),
                Err(e) => return Err(e),
            },
            Decision::RetrySameKey | Decision::Resubmit => {
                let resubmit = decision == Decision::Resubmit;
                let why = if resubmit {
                    "resubmit after the key's retention window: a consistent lookup found no payment \
                     and policy allows it"
                } else {
                    "not found at the processor while it still remembers the key: retry with the same key"
                };
                let claimed = match self
                    .ledger
                    .claim_unknown(
                        &ClaimUnknown {
                            fence: &fence,
                            holder: LeaseHolder {
                                owner,
                                lease_ttl: self.config.retry.lease_ttl,
                            },
                            why,
                        },
                        now,
                    )
                    .await
                {
                    Ok(c) => c,
                    Err(LedgerError::Fenced { .. }) => {
                        fenced(report, &self.metrics);
                        return Ok(None);
                    }
                    Err(e) => return Err(e),
                };
                let clock: SharedClock = self.clock.clone();
                let status = execute_one(
                    self.ledger.as_ref(),
                    self.processor.as_ref(),
                    &clock,
                    &self.config.retry,
                    &self.retry_metrics,
                    &claimed,
                )
                .await?;
                tracing::info!(operation = %op.id, attempt = claimed.attempt, status = status.as_str(),
                    resubmit, "retried with the same key");
                if resubmit {
                    report.resubmitted += 1;
                    self.metrics.resubmitted.inc();
                } else {
                    report.retried_same_key += 1;
                    self.metrics.retried_same_key.inc();
                }
            }
        }
        Ok(None)
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
            self.processor.as_ref(),
            &self.metrics,
            &limits,
            self.clock.read().await?,
        )
        .await
    }

    /// Prunes ([`payonce_shared::ledger::retention`]) when this process has not in the last
    /// `prune_interval`.
    async fn prune_if_due(
        &self,
    ) -> Result<Option<payonce_shared::ledger::retention::Pruned>, LedgerError> {
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

    /// Scans the processor's recent payments ([`crate::scan`]) when the process has not in the last
    /// `scan_interval` (every `sweep --once` is a new process, so it always scans).
    async fn scan_if_due(&self) -> Result<Option<ScanReport>, LedgerError> {
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
        };
        let report = crate::scan::scan(
            self.ledger.as_ref(),
            self.processor.as_ref(),
            &self.metrics,
            &limits,
            now,
        )
        .await?;
        *self.last_scan.lock().unwrap_or_else(|p| p.into_inner()) = Some(now);
        Ok(Some(report))
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

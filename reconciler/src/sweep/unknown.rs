//! Unknown outcomes: look up → decide (pure, [`decision`]: from the lookup, the processor's
//! contract and the operation's age) → apply one fenced write → tally. A page of due operations
//! is looked up and written up to `concurrency` at once; a lookup that fails or is refused by the
//! fleet's read budget defers the check on the operation's backoff.

mod decision;

pub use decision::{Case, Decision, can_look_up, decide};

use super::{Reconciler, SweepReport, Tally};
use futures_util::stream::{self, FuturesUnordered, StreamExt};
use payonce_core::clock::{SharedClock, Timestamp};
use payonce_core::failpoint::{self, FailPoint};
use payonce_core::state::Status;
use payonce_execution::{Execution, Inline, execute};
use payonce_ledger::{
    ApplyReport, ClaimUnknown, DeferCheck, Escalate, Fence, LeaseHolder, LedgerError, LookupFound,
    Operation, Paid, RecordLookups, Report,
};
use payonce_processor::limiter::{Budget, acquire};
use payonce_processor::{LookupOutcome, ProcessorKind, operation};
use std::time::Duration;

impl Reconciler {
    /// Unknown outcomes whose check is due, one page: looked up and written, up to `concurrency`
    /// at once; found payments recorded in groups.
    pub(crate) async fn sweep_unknown(&self, report: &mut SweepReport) -> Result<(), LedgerError> {
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
            report.tally(Tally::ResolvedSucceeded, &self.metrics);
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
        let lookup = self.look_up(op).await;
        // Read after the lookup, which may have taken a while: the retention window, a retry's
        // lease and the next check are decided on the database's time at the decision.
        let now = self.clock.read().await?;
        let decision = self.plan(op, lookup, now);
        report
            .actions
            .push(format!("{}: {}", op.id, decision.describe()));
        if report.dry_run {
            return Ok(None);
        }
        if op.status == Status::Unknown
            && let Decision::Record(Report::Succeeded(Paid { reference, result })) = decision
        {
            return Ok(Some(LookupFound {
                fence: Fence::of(op),
                reference,
                result,
            }));
        }
        let tally = self.apply(op, decision, now).await?;
        report.tally(tally, &self.metrics);
        Ok(None)
    }

    /// Asks the processor about `op` (a payment or a refund, as its kind says), drawing from the
    /// fleet's read budget apart from submissions: no permit in time defers the check. `None`: not
    /// asked: the contract of the operation's processor has no lookup that can find it, or this
    /// process is not configured for that processor.
    async fn look_up(&self, op: &Operation) -> Option<LookupOutcome> {
        // Not configured for its processor: nothing is asked ([`Self::decide`] escalates it).
        let processor = self.processors.route(op).ok()?;
        if !can_look_up(op, processor.contract()) {
            return None;
        }
        let created_after = op
            .first_submitted_at
            .unwrap_or(op.created_at)
            .saturating_sub_span(self.config.lookup_skew);
        let limiter = self.config.retry.limiter.as_ref();
        Some(
            match acquire(limiter, Budget::Read, self.config.lookup_permit_wait_max).await {
                Ok(_) => {
                    let found = operation::lookup(processor.as_ref(), op, created_after).await;
                    if matches!(found, LookupOutcome::RateLimited { .. }) {
                        self.metrics.lookups_rate_limited.inc();
                    }
                    found
                }
                Err(denied) => LookupOutcome::RateLimited {
                    reason: format!("fleet limiter: {denied}"),
                },
            },
        )
    }

    /// The decision ([`decide`]), with evidence before trust for lookups too: a found payment or
    /// refund is applied only if it is the approved one (see `evidence::differences`); otherwise a
    /// human sees both facts.
    fn plan(&self, op: &Operation, lookup: Option<LookupOutcome>, now: Timestamp) -> Decision {
        self.decide(op, lookup, now)
    }

    /// Writes one decision, fenced; what it did, for the tally.
    async fn apply(
        &self,
        op: &Operation,
        decision: Decision,
        now: Timestamp,
    ) -> Result<Tally, LedgerError> {
        let owner = self.config.owner.as_str();
        let fence = Fence::of(op);
        let fenced = |written: Result<(), LedgerError>, done: Tally| match written {
            Ok(()) => Ok(done),
            Err(LedgerError::Fenced { .. }) => Ok(Tally::Fenced),
            Err(e) => Err(e),
        };
        match decision {
            Decision::Record(report) => self.apply_report(op, &report, now).await,
            Decision::Poll(why) | Decision::Defer(why) => {
                let defer = DeferCheck {
                    fence: &fence,
                    next_check_at: now + self.backoff(op),
                    detail: &why,
                    actor: owner,
                };
                fenced(self.ledger.defer_check(&defer, now).await, Tally::Deferred)
            }
            Decision::Escalate(why) => {
                let why = self.with_notifications(op, why).await?;
                let escalate = Escalate {
                    fence: &fence,
                    reason: &why,
                    actor: owner,
                };
                fenced(self.ledger.escalate(&escalate, now).await, Tally::Escalated)
            }
            Decision::RetrySameKey => self.retry_same_key(op, false, now).await,
            Decision::Resubmit => self.retry_same_key(op, true, now).await,
        }
    }

    /// An escalation's reason, with what the operation's signed notifications report beside it
    /// when its processor is one only notifications settle (Adyen: a saved 500 replayed to every
    /// same-key retry, contradicted by an AUTHORISATION naming the payment).
    async fn with_notifications(&self, op: &Operation, why: String) -> Result<String, LedgerError> {
        if self.processors.kind_of(op) != ProcessorKind::Adyen {
            return Ok(why);
        }
        Ok(
            match crate::evidence::notification::reported_payments(self.ledger.as_ref(), op).await?
            {
                Some(reported) => format!("{why}; {reported}"),
                None => why,
            },
        )
    }

    /// Applies what a lookup found as a processor report, per the state machine.
    async fn apply_report(
        &self,
        op: &Operation,
        report: &Report,
        now: Timestamp,
    ) -> Result<Tally, LedgerError> {
        let source = format!("lookup by {}", self.config.owner);
        let request = ApplyReport {
            id: &op.id,
            report,
            source: &source,
        };
        let applied = self.ledger.apply_report(&request, now).await?;
        Ok(match report {
            Report::Mismatch {
                reference, detail, ..
            } => {
                tracing::error!(alert = "webhook_lookup_mismatch", operation = %op.id, %reference, %detail,
                    ?applied, "the payment found by lookup does not match the approved details; it needs attention");
                Tally::Mismatch
            }
            Report::Succeeded(_) => Tally::ResolvedSucceeded,
            _ => Tally::ResolvedFailed,
        })
    }

    /// Takes a lease over the unknown operation and runs it through the one execution path, with
    /// its SAME key, recording inline (`resubmit`: after the key's retention window, by policy).
    async fn retry_same_key(
        &self,
        op: &Operation,
        resubmit: bool,
        now: Timestamp,
    ) -> Result<Tally, LedgerError> {
        let owner = self.config.owner.as_str();
        let why = if resubmit {
            "resubmit after the key's retention window: a consistent lookup found no payment \
             and policy allows it"
        } else if self
            .processors
            .route(op)
            .is_ok_and(|p| !can_look_up(op, p.contract()))
        {
            "no lookup can find it and the processor still remembers the key: retry with the same \
             key (the processor answers what the first request did)"
        } else {
            "not found at the processor while it still remembers the key: retry with the same key"
        };
        let claim = ClaimUnknown {
            fence: &Fence::of(op),
            holder: LeaseHolder {
                owner,
                lease_ttl: self.config.retry_lease_ttl,
            },
            why,
        };
        let claimed = match self.ledger.claim_unknown(&claim, now).await {
            Ok(c) => c,
            Err(LedgerError::Fenced { .. }) => return Ok(Tally::Fenced),
            Err(e) => return Err(e),
        };
        let clock: SharedClock = self.clock.clone();
        let attempt = claimed.attempt;
        let ex = Execution {
            processors: &self.processors,
            clock: &clock,
            policy: &self.config.retry,
            metrics: &self.retry_metrics,
            // No renewal here: stay well inside the lease.
            wait_max: self
                .config
                .retry
                .rate_limit_wait_max
                .min(self.config.retry_lease_ttl / 2),
            stop: None,
            lost_rows: Some(self.queue.as_ref()),
            prepaid: false,
        };
        let inline = Inline {
            ledger: self.queue.as_ref(),
            clock: &clock,
            actor: owner,
            metrics: &self.retry_metrics,
        };
        let status = execute(&ex, claimed, inline).await?;
        tracing::info!(operation = %op.id, attempt, status = status.as_str(), resubmit,
            "retried with the same key");
        Ok(if resubmit {
            Tally::Resubmitted
        } else {
            Tally::RetriedSameKey
        })
    }

    /// The delay before the next check of `op`: doubling per check, capped.
    fn backoff(&self, op: &Operation) -> Duration {
        let exp = u32::try_from(op.check_count.clamp(0, 20)).unwrap_or(20);
        self.config
            .check_backoff_base
            .saturating_mul(1_u32 << exp)
            .min(self.config.check_backoff_max)
    }
}

//! Unknown outcomes: look up → decide (pure, [`decide`]) → apply one write → tally. Found: record
//! it; pending: poll later; not found while the key's retention window is open: retry with the
//! SAME key through the one execution path; not found after it: resubmit only on a consistent
//! lookup and an explicit policy, else `needs_attention`; lookup unavailable: back off; the stored
//! reference names an object without the operation's id: checked as a webhook's object is
//! ([`crate::evidence::report_of`]), a contradiction is `needs_attention` with both facts.

use super::{Reconciler, SweepReport, Tally};
use crate::config::ReconcilerConfig;
use futures_util::stream::{self, FuturesUnordered, StreamExt};
use payonce_shared::clock::{SharedClock, Timestamp};
use payonce_shared::execution::{Execution, Inline, execute};
use payonce_shared::failpoint::{self, FailPoint};
use payonce_shared::ledger::{
    ApplyReport, ClaimUnknown, Declined, DeferCheck, Escalate, Fence, LeaseHolder, LedgerError,
    LookupFound, Operation, Paid, RecordLookups, Report,
};
use payonce_shared::limiter::{Budget, acquire};
use payonce_shared::processor::{Contract, FoundStatus, LookupOutcome, LookupSupport, operation};
use payonce_shared::state::Status;
use std::time::Duration;

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

/// Decides what to do with an unknown operation given a lookup result, the processor's contract
/// and the reconciler's policy; `now` is the database's time, as `first_submitted_at` is (the key's
/// retention window is measured on one clock). Pure: nothing is read or written.
pub fn decide(
    op: &Operation,
    lookup: LookupOutcome,
    now: Timestamp,
    contract: &Contract,
    config: &ReconcilerConfig,
) -> Decision {
    let window_open = contract.honours_idempotency_keys
        && match (contract.key_retention, op.first_submitted_at) {
            (None, _) => true,
            (Some(retention), Some(first)) => now + config.retention_margin < first + retention,
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
        LookupOutcome::NotFound { consistent: true } if config.resubmit_after_window => {
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

impl Reconciler {
    /// [`decide`] under this reconciler's processor contract and policy.
    pub fn decide(&self, op: &Operation, lookup: LookupOutcome, now: Timestamp) -> Decision {
        decide(op, lookup, now, self.processor.contract(), &self.config)
    }

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
    /// fleet's read budget apart from submissions: no permit in time defers the check.
    async fn look_up(&self, op: &Operation) -> LookupOutcome {
        if self.processor.contract().lookup == LookupSupport::None {
            return LookupOutcome::NotFound { consistent: false };
        }
        let created_after = op
            .first_submitted_at
            .unwrap_or(op.created_at)
            .saturating_sub_span(self.config.lookup_skew);
        let limiter = self.config.retry.limiter.as_ref();
        match acquire(limiter, Budget::Read, self.config.lookup_permit_wait_max).await {
            Ok(_) => {
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
    }

    /// The decision ([`decide`]), with evidence before trust for lookups too: a found payment or
    /// refund is applied only if it is the approved one (see `evidence::differences`); otherwise a
    /// human sees both facts.
    fn plan(&self, op: &Operation, lookup: LookupOutcome, now: Timestamp) -> Decision {
        let decision = self.decide(op, lookup, now);
        if let Decision::Record(Report::Succeeded(Paid { reference, result })) = &decision
            && let Some(object) = self.processor.facts(reference, result)
            && let Some(checked @ Report::Mismatch { .. }) = crate::evidence::report_of(op, &object)
        {
            return Decision::Record(checked);
        }
        decision
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
            processor: self.processor.as_ref(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use payonce_shared::details::{Details, RawDetails};
    use payonce_shared::id::{BusinessKey, IdempotencyKey, OperationId, TenantId};

    const HOUR: Duration = Duration::from_secs(3_600);

    fn unknown_since(first_submitted_ms: i64) -> Operation {
        let details = Details::parse(&RawDetails {
            kind: "payment".into(),
            amount: 2048,
            currency: "usd".into(),
            customer: "cus_123".into(),
            payment_method: "pm_card_visa".into(),
            invoice: "INV-2048".into(),
            destination: None,
            description: None,
            refund_of: None,
        })
        .expect("valid details");
        let at = Timestamp::from_millis(first_submitted_ms);
        Operation {
            id: OperationId::parse("op_0123456789abcdef0123456789abcdef").expect("id"),
            tenant: TenantId::parse("acme").expect("tenant"),
            business_key: BusinessKey::parse("invoice:INV-2048").expect("business key"),
            details_hash: details.hash(),
            approved_hash: Some(details.hash()),
            details,
            status: Status::Unknown,
            attempt: 1,
            lease_owner: None,
            lease_expires_at: None,
            idempotency_key: IdempotencyKey::parse("po1_0123456789abcdef0123").expect("key"),
            first_submitted_at: Some(at),
            first_submitted_attempt: Some(1),
            last_submitted_at: Some(at),
            submit_count: 1,
            external_ref: None,
            result: None,
            failure_code: None,
            failure_message: None,
            available_at: at,
            next_check_at: Some(at),
            check_count: 0,
            approved_by: Some("customer".into()),
            approval_expires_at: Some(at + HOUR),
            created_at: at,
            updated_at: at,
        }
    }

    fn contract(retention: Option<Duration>, lookup: LookupSupport) -> Contract {
        Contract {
            name: "test",
            honours_idempotency_keys: true,
            key_retention: retention,
            lookup,
        }
    }

    /// One row of the decision table: name, lookup, time of the decision, contract, policy, and
    /// the kind of decision expected.
    type Row = (
        &'static str,
        LookupOutcome,
        Timestamp,
        Contract,
        ReconcilerConfig,
        &'static str,
    );

    /// The kind of a decision, for the table.
    fn kind(d: &Decision) -> &'static str {
        match d {
            Decision::Record(Report::Succeeded(_)) => "record succeeded",
            Decision::Record(Report::Failed(_)) => "record failed",
            Decision::Record(_) => "record other",
            Decision::Poll(_) => "poll",
            Decision::RetrySameKey => "retry same key",
            Decision::Resubmit => "resubmit",
            Decision::Escalate(_) => "escalate",
            Decision::Defer(_) => "defer",
        }
    }

    /// What each lookup decides, inside and past the key's 24 h window (with the default 5 min
    /// margin), with and without the resubmission policy.
    fn table() -> Vec<Row> {
        let inside = Timestamp::from_millis(0) + HOUR;
        let past = Timestamp::from_millis(0) + 24 * HOUR;
        let stripe = contract(Some(24 * HOUR), LookupSupport::Consistent);
        let not_found = |consistent| LookupOutcome::NotFound { consistent };
        let mut allowed = ReconcilerConfig::new("rec");
        allowed.resubmit_after_window = true;
        let refused = ReconcilerConfig::new("rec");
        let found = |status| LookupOutcome::Found {
            reference: "pi_1".into(),
            status,
        };
        let paid = FoundStatus::Succeeded {
            result: serde_json::json!({"id": "pi_1"}),
        };
        let declined = FoundStatus::Failed {
            code: "card_declined".into(),
            message: "no".into(),
        };
        let pending = FoundStatus::Pending {
            processor_status: "processing".into(),
        };
        let limited = LookupOutcome::RateLimited {
            reason: "429".into(),
        };
        let down = LookupOutcome::Unavailable {
            reason: "timeout".into(),
        };
        let row = |name, lookup, now, config: &ReconcilerConfig, expected| -> Row {
            (name, lookup, now, stripe.clone(), config.clone(), expected)
        };
        vec![
            row(
                "found succeeded",
                found(paid),
                inside,
                &refused,
                "record succeeded",
            ),
            row(
                "found failed",
                found(declined),
                inside,
                &refused,
                "record failed",
            ),
            row("found pending", found(pending), inside, &refused, "poll"),
            row(
                "not found, window open",
                not_found(true),
                inside,
                &refused,
                "retry same key",
            ),
            row(
                "not found, closed, policy on",
                not_found(true),
                past,
                &allowed,
                "resubmit",
            ),
            row(
                "not found, closed, policy off",
                not_found(true),
                past,
                &refused,
                "escalate",
            ),
            row(
                "not found, closed, lagging lookup",
                not_found(false),
                past,
                &allowed,
                "escalate",
            ),
            row("rate limited", limited, inside, &refused, "defer"),
            row("unavailable", down, inside, &refused, "defer"),
        ]
    }

    #[test]
    fn every_lookup_outcome_decides_as_the_table_says() {
        let op = unknown_since(0);
        for (name, lookup, now, contract, config, expected) in table() {
            let decision = decide(&op, lookup, now, &contract, &config);
            assert_eq!(kind(&decision), expected, "{name}: {decision:?}");
        }
        let refused = ReconcilerConfig::new("rec");
        let stripe = contract(Some(24 * HOUR), LookupSupport::Consistent);
        let not_found = LookupOutcome::NotFound { consistent: true };
        // Within the margin of the window's end, a retry could land after the processor forgot
        // the key: closed.
        let near_end = Timestamp::from_millis(0) + (24 * HOUR - Duration::from_secs(60));
        assert_eq!(
            decide(&op, not_found.clone(), near_end, &stripe, &refused),
            Decision::Escalate(
                "not found at the processor (consistent lookup) and the key's retention window has \
                 closed; a new submission could pay twice"
                    .into()
            )
        );
        // A processor that remembers keys forever keeps the window open.
        let forever = contract(None, LookupSupport::Consistent);
        let past = Timestamp::from_millis(0) + 24 * HOUR;
        assert_eq!(
            decide(&op, not_found, past, &forever, &refused),
            Decision::RetrySameKey
        );
    }
}

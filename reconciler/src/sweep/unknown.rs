//! Unknown outcomes: look up → decide (pure, [`decide`], from the lookup, the processor's
//! [`Contract`] and the operation's age) → apply one write → tally.
//!
//! | what is known | decision |
//! | --- | --- |
//! | found paid / failed | recorded (a paid object whose amount or currency differ: `needs_attention`) |
//! | found in progress | poll later |
//! | lookup rate limited or unavailable | back off |
//! | not found, or no lookup can find it, while the key's window is open and a retry replays (the contract saves every answer) | retry with the SAME key |
//! | not found by a read-after-write lookup, window open, contract saves only 2xx | retry with the same key: nothing executed, so the retry is the first execution |
//! | not found by a read-after-write lookup, window closed | resubmit if the policy allows, else a human |
//! | no lookup can find it and it was sent [`SUBMISSIONS_WITHOUT_LOOKUP_MAX`] times (a saved ambiguous answer replays) | a human |
//! | it holds the reference the processor answered with, which only a notification settles ([`Contract::notification_settles_reference`]: Adyen's `Received`) | wait for the notification, re-checked on the backoff; a human past [`NOTIFICATION_WAIT_MAX`] |
//! | anything else (a lagging or no lookup with the window closed, or a contract that re-executes) | a human |
//!
//! The window is closed past the key's retention minus the margin, without idempotent submission,
//! and without a documented retention. The stored reference naming an object without the
//! operation's id is checked as a webhook's object is ([`crate::evidence::report_of`]).

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
use payonce_shared::processor::contract::Consistency;
use payonce_shared::processor::{Contract, FoundStatus, LookupOutcome, ProcessorObject, operation};
use payonce_shared::state::Status;
use std::time::Duration;

/// What to do with one unknown operation, decided from the lookup and the adapter's contract.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Record the processor's answer.
    Record(Report),
    /// The processor is still working on it: look again later.
    Poll(String),
    /// Retry with the same key (the processor still remembers it, or nothing executed).
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

/// Most requests (all with its key) an operation no lookup can find may have sent before a human
/// decides: a processor that saved an ambiguous answer under the key (a 500, a payment still
/// `processing`) replays it to every same-key retry, so retrying further cannot resolve it. Counts
/// every request that may have left, the first one included.
pub const SUBMISSIONS_WITHOUT_LOOKUP_MAX: i64 = 4;

/// Longest an operation holding a reference that only a notification settles (Adyen's `Received`
/// payment, every received refund) waits for it after its last submission before a human decides.
/// Adyen documents its delivery (docs.adyen.com, "Troubleshoot webhooks", retry queue): a webhook
/// not accepted is retried three times at once, then from a queue after 2, 5, 10, 15 and 30
/// minutes, 1, 2, 4 and 8 hours (about 16 hours in all), then every 8 hours for up to 30 days. A
/// day outlasts the whole escalating schedule; a notification still missing after it means the
/// endpoint has been failing for hours (Adyen flags it in its Customer Area), which is a human's to
/// mend. A same-key retry meanwhile could only replay the saved `Received`.
pub const NOTIFICATION_WAIT_MAX: Duration = Duration::from_secs(24 * 60 * 60);

/// What the reconciler knows about one unknown operation when it decides.
#[derive(Debug, Clone)]
pub struct Case<'a> {
    /// The operation, in `unknown`.
    pub op: &'a Operation,
    /// What the lookup said; `None`: not asked, because the contract offers no lookup that can
    /// find this operation ([`can_look_up`]).
    pub lookup: Option<LookupOutcome>,
    /// The facts of the object a lookup found paid, when the adapter can read them: checked
    /// against the approval before it is believed.
    pub found: Option<ProcessorObject>,
    /// The database's time, as `first_submitted_at` is (the key's retention window is measured on
    /// one clock).
    pub now: Timestamp,
}

/// Whether the contract offers a lookup that can find `op` (by its reference, or a list).
pub fn can_look_up(op: &Operation, contract: &Contract) -> bool {
    contract
        .lookups
        .finding(op.external_ref.is_some())
        .is_some()
}

/// Decides what to do with an unknown operation from what is known about it ([`Case`]), the
/// processor's contract and the reconciler's policy. Pure: nothing is read or written. The table
/// in this module's documentation is what it does; the tests hold it for every contract.
pub fn decide(case: Case<'_>, contract: &Contract, config: &ReconcilerConfig) -> Decision {
    let Case {
        op,
        lookup,
        found,
        now,
    } = case;
    let window_open = contract.window_open(op.first_submitted_at, now, config.retention_margin);
    let Some(lookup) = lookup else {
        return without_lookup(op, contract, now, window_open);
    };
    match lookup {
        LookupOutcome::Found {
            reference,
            status: FoundStatus::Succeeded { result },
        } => match found
            .as_ref()
            .and_then(|o| crate::evidence::report_of(op, o))
        {
            // Evidence before trust: an object that is not the approved payment (another amount,
            // say, replayed under the key by a contract that replays any payload) is for a human.
            Some(mismatch @ Report::Mismatch { .. }) => Decision::Record(mismatch),
            _ => Decision::Record(Report::Succeeded(Paid { reference, result })),
        },
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
        LookupOutcome::NotFound { consistent } => {
            not_found(op, contract, config, consistent, window_open)
        }
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

/// [`decide`] for an operation no lookup can find under `contract`: it waits for its
/// notification, is retried with its key while the processor replays what it saved, or goes to a
/// human.
fn without_lookup(
    op: &Operation,
    contract: &Contract,
    now: Timestamp,
    window_open: bool,
) -> Decision {
    if let Some(reference) = &op.external_ref
        && contract.notification_settles_reference()
    {
        return await_notification(op, reference, contract, now);
    }
    if window_open && contract.retry_replays() && op.submit_count >= SUBMISSIONS_WITHOUT_LOOKUP_MAX
    {
        Decision::Escalate(format!(
            "the {} contract offers no lookup that can find this operation, and {} requests \
             with its key left it ambiguous (the processor replays what it saved under the \
             key); a human decides",
            contract.name, op.submit_count
        ))
    } else if window_open && contract.retry_replays() {
        Decision::RetrySameKey
    } else {
        Decision::Escalate(format!(
            "the {} contract offers no lookup that can find this operation and {}; a new \
             submission could pay twice",
            contract.name,
            why_no_retry(contract, window_open)
        ))
    }
}

/// [`decide`] for a lookup that did not find the operation: only a consistent lookup's answer
/// proves it was never paid.
fn not_found(
    op: &Operation,
    contract: &Contract,
    config: &ReconcilerConfig,
    consistent: bool,
    window_open: bool,
) -> Decision {
    // A lagging lookup's "not found" proves nothing, whatever one answer says.
    let proof = consistent
        && contract.lookups.finding(op.external_ref.is_some()) == Some(Consistency::ReadAfterWrite);
    if window_open && (contract.retry_replays() || proof) {
        Decision::RetrySameKey
    } else if !window_open && proof && config.resubmit_after_window {
        Decision::Resubmit
    } else {
        Decision::Escalate(format!(
            "not found at the processor ({} lookup) and {}; a new submission could pay \
             twice",
            if proof {
                "consistent"
            } else {
                "eventually consistent"
            },
            why_no_retry(contract, window_open)
        ))
    }
}

/// An operation holding `reference`, which only its notification settles: polled (the
/// notification, read each pass, records it) until [`NOTIFICATION_WAIT_MAX`] after its last
/// submission, then a human. No request is sent: the processor would replay the answer that gave
/// the reference.
fn await_notification(
    op: &Operation,
    reference: &str,
    contract: &Contract,
    now: Timestamp,
) -> Decision {
    let answered = op
        .last_submitted_at
        .or(op.first_submitted_at)
        .unwrap_or(op.created_at);
    let hours = NOTIFICATION_WAIT_MAX.as_secs() / 3_600;
    if now < answered + NOTIFICATION_WAIT_MAX {
        Decision::Poll(format!(
            "{reference} awaits its notification from {}: a same-key retry would only replay the \
             saved answer",
            contract.processor
        ))
    } else {
        Decision::Escalate(format!(
            "{} answered with {reference}, which only its notification settles, and none came \
             within {hours} h; a human decides",
            contract.processor
        ))
    }
}

/// Why a retry with the key is not safe under `contract` (for an escalation's reason).
fn why_no_retry(contract: &Contract, window_open: bool) -> String {
    if !contract.idempotent() {
        format!("{} has no idempotent submission", contract.processor)
    } else if contract.key_retention.is_none() {
        format!(
            "{} documents no single key retention to count on",
            contract.processor
        )
    } else if !window_open {
        "the key's retention window has closed".to_string()
    } else {
        format!(
            "{} saves only 2xx answers under the key: a retry of a request that executed would \
             execute again",
            contract.processor
        )
    }
}

impl Reconciler {
    /// [`decide`] under the contract of the operation's own processor and this reconciler's
    /// policy, with the facts of a found payment read by that processor's adapter. An operation
    /// naming a processor this process has no configuration for goes to a human: no other
    /// processor's contract may decide it.
    pub fn decide(
        &self,
        op: &Operation,
        lookup: Option<LookupOutcome>,
        now: Timestamp,
    ) -> Decision {
        let processor = match self.processors.route(op) {
            Ok(processor) => processor,
            Err(unconfigured) => {
                tracing::error!(operation = %op.id, processor = %unconfigured.named,
                    alert = "processor_not_configured", "{unconfigured}; it needs attention");
                return Decision::Escalate(unconfigured.to_string());
            }
        };
        let found = match &lookup {
            Some(LookupOutcome::Found {
                reference,
                status: FoundStatus::Succeeded { result },
            }) => processor.facts(reference, result),
            _ => None,
        };
        let case = Case {
            op,
            lookup,
            found,
            now,
        };
        decide(case, processor.contract(), &self.config)
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
    use crate::fixtures::unknown_since;
    use payonce_shared::processor::contract;

    const HOUR: Duration = Duration::from_secs(3_600);

    /// The facts of a paid object for `op`, with `amount` as the processor holds it.
    fn paid_object(op: &Operation, amount: i64) -> ProcessorObject {
        ProcessorObject {
            reference: "pi_1".into(),
            amount_minor: Some(amount),
            currency: Some("usd".into()),
            customer: Some("cus_123".into()),
            operation_id: Some(op.id.as_str().to_string()),
            intention: None,
            payment_reference: None,
            status: FoundStatus::Succeeded {
                result: serde_json::json!({"id": "pi_1"}),
            },
            object: serde_json::json!({"id": "pi_1"}),
        }
    }

    /// The lookup outcomes of the table's columns, in order: found paid, found paid with another
    /// amount, found failed, found in progress, not found (read-after-write), not found (lagging),
    /// rate limited, unavailable. With the facts of the found object.
    fn lookups(op: &Operation) -> Vec<(LookupOutcome, Option<ProcessorObject>)> {
        let found = |status| LookupOutcome::Found {
            reference: "pi_1".into(),
            status,
        };
        let paid = FoundStatus::Succeeded {
            result: serde_json::json!({"id": "pi_1"}),
        };
        vec![
            (found(paid.clone()), Some(paid_object(op, 2048))),
            (found(paid), Some(paid_object(op, 3000))),
            (
                found(FoundStatus::Failed {
                    code: "card_declined".into(),
                    message: "no".into(),
                }),
                None,
            ),
            (
                found(FoundStatus::Pending {
                    processor_status: "processing".into(),
                }),
                None,
            ),
            (LookupOutcome::NotFound { consistent: true }, None),
            (LookupOutcome::NotFound { consistent: false }, None),
            (
                LookupOutcome::RateLimited {
                    reason: "429".into(),
                },
                None,
            ),
            (
                LookupOutcome::Unavailable {
                    reason: "timeout".into(),
                },
                None,
            ),
        ]
    }

    /// One letter per decision: S(ucceeded), L(ost row recreated), M(ismatch), F(ailed), P(oll),
    /// r(etry same key), R(esubmit), E(scalate), D(efer).
    fn letter(d: &Decision) -> char {
        match d {
            Decision::Record(Report::Succeeded(_)) => 'S',
            Decision::Record(Report::Recreated(_)) => 'L',
            Decision::Record(Report::Mismatch { .. }) => 'M',
            Decision::Record(Report::Failed(_)) => 'F',
            Decision::Poll(_) => 'P',
            Decision::RetrySameKey => 'r',
            Decision::Resubmit => 'R',
            Decision::Escalate(_) => 'E',
            Decision::Defer(_) => 'D',
        }
    }

    /// A processor with neither idempotent submission nor a lookup.
    const UNKEYED: Contract = Contract {
        name: "unkeyed",
        processor: "a processor without keys or lookups",
        key: None,
        lookups: payonce_shared::processor::contract::Lookups::NONE,
        ..contract::STRIPE
    };

    /// The three ages of the table, from the first submission: young (a minute), near the edge of
    /// the retention (inside the margin), past it (a minute after). Without a documented retention,
    /// measured against a day.
    fn ages(c: &Contract, margin: Duration) -> [Duration; 3] {
        let retention = c.key_retention.unwrap_or(contract::DAY);
        [
            Duration::from_secs(60),
            retention - margin / 2,
            retention + Duration::from_secs(60),
        ]
    }

    /// The decisions of one row: per lookup column, its three ages.
    fn row(c: &Contract, with_reference: bool, config: &ReconcilerConfig) -> String {
        let mut op = unknown_since(0);
        if with_reference {
            op.external_ref = Some("pi_1".into());
        }
        let asked = can_look_up(&op, c);
        let mut groups = Vec::new();
        for (lookup, found) in lookups(&op) {
            let mut group = String::new();
            for age in ages(c, config.retention_margin) {
                let case = Case {
                    op: &op,
                    lookup: asked.then(|| lookup.clone()),
                    found: found.clone(),
                    now: Timestamp::from_millis(0) + age,
                };
                group.push(letter(&decide(case, c, config)));
            }
            groups.push(group);
        }
        groups.join(" ")
    }

    /// Every contract, with and without a stored reference, under the default policy (no
    /// resubmission after the window): columns as [`lookups`], letters as [`letter`], three ages
    /// each as [`ages`].
    #[test]
    fn every_contract_decides_as_the_table_says() {
        let stripe_like = "SSS MMM FFF PPP rEE rEE DDD DDD";
        let not_asked_replays = "rEE rEE rEE rEE rEE rEE rEE rEE";
        let not_asked_human = "EEE EEE EEE EEE EEE EEE EEE EEE";
        let not_asked_waits = "PEE PEE PEE PEE PEE PEE PEE PEE";
        let table: [(&Contract, bool, &str); 22] = [
            (&contract::STRIPE, false, stripe_like),
            (&contract::STRIPE, true, stripe_like),
            // No lookup: without a reference (the answer was lost), a retry while Adyen remembers
            // the key replays its result, then a human. With the reference Adyen answered with
            // (`Received`), its notification settles it: wait, no request; a human once the wait
            // (a day) is over, which both older ages are.
            (&contract::ADYEN_CHECKOUT, false, not_asked_replays),
            (&contract::ADYEN_CHECKOUT, true, not_asked_waits),
            // Only 2xx saved and no reference to retrieve: a retry could execute twice.
            (&contract::CHECKOUT_COM, false, not_asked_human),
            (
                &contract::CHECKOUT_COM,
                true,
                "SSS MMM FFF PPP rEE EEE DDD DDD",
            ),
            (&contract::WORLDLINE_DIRECT, false, not_asked_replays),
            (&contract::WORLDLINE_DIRECT, true, stripe_like),
            // No retention to count on: never retried with the key.
            (&contract::PAYPAL_REST, false, not_asked_human),
            (
                &contract::PAYPAL_REST,
                true,
                "SSS MMM FFF PPP EEE EEE DDD DDD",
            ),
            // A lagging list and only successes saved: "not found" proves nothing, a retry could
            // execute twice.
            (&contract::QONTO, false, "SSS MMM FFF PPP EEE EEE DDD DDD"),
            (&contract::QONTO, true, "SSS MMM FFF PPP EEE EEE DDD DDD"),
            (&contract::SHORT_RETENTION, false, stripe_like),
            (&contract::SHORT_RETENTION, true, stripe_like),
            (&contract::REPLAY_ANY_PAYLOAD, false, stripe_like),
            (&contract::REPLAY_ANY_PAYLOAD, true, stripe_like),
            (
                &contract::ONLY_2XX_SAVED,
                false,
                "SSS MMM FFF PPP rEE EEE DDD DDD",
            ),
            (
                &contract::ONLY_2XX_SAVED,
                true,
                "SSS MMM FFF PPP rEE EEE DDD DDD",
            ),
            (&contract::NO_LOOKUP, false, not_asked_replays),
            (&contract::NO_LOOKUP, true, not_asked_replays),
            (&UNKEYED, false, not_asked_human),
            (&UNKEYED, true, not_asked_human),
        ];
        let config = ReconcilerConfig::new("rec");
        let covered: std::collections::HashSet<&str> = table.iter().map(|r| r.0.name).collect();
        for c in contract::DOCUMENTED.iter().chain(contract::REGISTRY.iter()) {
            assert!(covered.contains(c.name), "{} is not in the table", c.name);
        }
        for (c, with_reference, expected) in table {
            assert_eq!(
                row(c, with_reference, &config),
                expected,
                "{} (reference: {with_reference})",
                c.name
            );
        }
    }

    /// With resubmission after the window allowed, only a read-after-write "not found" changes:
    /// the two not-found columns per contract.
    #[test]
    fn the_resubmit_policy_acts_only_on_proof_of_absence_past_the_window() {
        let mut config = ReconcilerConfig::new("rec");
        config.resubmit_after_window = true;
        let table: [(&Contract, bool, &str); 9] = [
            (&contract::STRIPE, false, "rRR rEE"),
            (&contract::ADYEN_CHECKOUT, false, "rEE rEE"),
            (&contract::CHECKOUT_COM, true, "rRR EEE"),
            (&contract::WORLDLINE_DIRECT, true, "rRR rEE"),
            (&contract::PAYPAL_REST, true, "RRR EEE"),
            (&contract::QONTO, false, "EEE EEE"),
            (&contract::ONLY_2XX_SAVED, false, "rRR EEE"),
            (&contract::NO_LOOKUP, false, "rEE rEE"),
            (&UNKEYED, false, "EEE EEE"),
        ];
        for (c, with_reference, expected) in table {
            let all = row(c, with_reference, &config);
            let not_found: Vec<&str> = all.split(' ').skip(4).take(2).collect();
            assert_eq!(not_found.join(" "), expected, "{}", c.name);
        }
    }

    #[test]
    fn escalations_say_why_a_retry_is_not_safe() {
        let config = ReconcilerConfig::new("rec");
        let op = unknown_since(0);
        let reason = |c: &Contract, lookup: Option<LookupOutcome>, age: Duration| {
            let case = Case {
                op: &op,
                lookup,
                found: None,
                now: Timestamp::from_millis(0) + age,
            };
            match decide(case, c, &config) {
                Decision::Escalate(why) => why,
                other => panic!("{}: {other:?}", c.name),
            }
        };
        let minute = Duration::from_secs(60);
        let lagging = Some(LookupOutcome::NotFound { consistent: false });
        assert!(
            reason(&contract::ONLY_2XX_SAVED, lagging.clone(), minute)
                .contains("saves only 2xx answers")
        );
        assert!(
            reason(&contract::STRIPE, lagging, contract::DAY)
                .contains("retention window has closed")
        );
        assert!(reason(&contract::PAYPAL_REST, None, minute).contains("no single key retention"));
        assert!(reason(&UNKEYED, None, minute).contains("no idempotent submission"));
        assert!(reason(&contract::NO_LOOKUP, None, contract::DAY).contains("offers no lookup"));
    }

    #[test]
    fn without_a_lookup_same_key_retries_stop_at_the_limit() {
        let config = ReconcilerConfig::new("rec");
        let mut op = unknown_since(0);
        let decide_at = |op: &Operation| {
            let case = Case {
                op,
                lookup: None,
                found: None,
                now: Timestamp::from_millis(60_000),
            };
            decide(case, &contract::NO_LOOKUP, &config)
        };
        op.submit_count = SUBMISSIONS_WITHOUT_LOOKUP_MAX - 1;
        assert_eq!(decide_at(&op), Decision::RetrySameKey);
        op.submit_count = SUBMISSIONS_WITHOUT_LOOKUP_MAX;
        match decide_at(&op) {
            Decision::Escalate(why) => assert!(why.contains("replays what it saved"), "{why}"),
            other => panic!("{other:?}"),
        }
        // With a lookup, the lookup decides however often the key was sent.
        op.submit_count = SUBMISSIONS_WITHOUT_LOOKUP_MAX * 10;
        let case = Case {
            op: &op,
            lookup: Some(LookupOutcome::NotFound { consistent: true }),
            found: None,
            now: Timestamp::from_millis(60_000),
        };
        assert_eq!(
            decide(case, &contract::STRIPE, &config),
            Decision::RetrySameKey
        );
    }

    #[test]
    fn a_reference_only_a_notification_settles_waits_for_it_up_to_the_limit() {
        let config = ReconcilerConfig::new("rec");
        let mut op = unknown_since(0);
        op.external_ref = Some("PSPRECEIVED00001".into());
        let at = |op: &Operation, now: Duration, c: &Contract| {
            let case = Case {
                op,
                lookup: None,
                found: None,
                now: Timestamp::from_millis(0) + now,
            };
            decide(case, c, &config)
        };
        let before = NOTIFICATION_WAIT_MAX - Duration::from_secs(1);
        // However often the key was sent: another request would replay the saved `Received`.
        for sent in [
            1,
            SUBMISSIONS_WITHOUT_LOOKUP_MAX,
            SUBMISSIONS_WITHOUT_LOOKUP_MAX * 10,
        ] {
            op.submit_count = sent;
            let waits = at(&op, before, &contract::ADYEN_CHECKOUT);
            assert!(
                matches!(&waits, Decision::Poll(why) if why.contains("awaits its notification")),
                "{sent}: {waits:?}"
            );
        }
        match at(&op, NOTIFICATION_WAIT_MAX, &contract::ADYEN_CHECKOUT) {
            Decision::Escalate(why) => assert!(why.contains("none came within 24 h"), "{why}"),
            other => panic!("{other:?}"),
        }
        // The wait runs from the last submission, the one whose answer gave the reference.
        op.last_submitted_at = Some(Timestamp::from_millis(0) + contract::DAY);
        assert!(matches!(
            at(&op, NOTIFICATION_WAIT_MAX + HOUR, &contract::ADYEN_CHECKOUT),
            Decision::Poll(_)
        ));
        // Without a reference (the answer was lost): same-key retries up to the limit, as before.
        op.external_ref = None;
        op.submit_count = 1;
        let minute = Duration::from_secs(60);
        assert_eq!(
            at(&op, minute, &contract::ADYEN_CHECKOUT),
            Decision::RetrySameKey
        );
        op.submit_count = SUBMISSIONS_WITHOUT_LOOKUP_MAX;
        assert!(matches!(
            at(&op, minute, &contract::ADYEN_CHECKOUT),
            Decision::Escalate(_)
        ));
        // `no-lookup` on Stripe's wire: a held reference changes nothing (a Stripe event is applied
        // only through a retrieve), so the request limit still sends it to a human.
        op.external_ref = Some("pi_1".into());
        assert!(matches!(
            at(&op, minute, &contract::NO_LOOKUP),
            Decision::Escalate(_)
        ));
    }

    #[test]
    fn a_short_retention_closes_the_window_on_its_own_clock() {
        // `short-retention` shortened to 2 s for a test, margin 200 ms: a retry at 1 s, a human
        // at 1.9 s.
        let mut config = ReconcilerConfig::new("rec");
        config.retention_margin = Duration::from_millis(200);
        let short = contract::SHORT_RETENTION.with_key_retention(Duration::from_secs(2));
        let op = unknown_since(0);
        let at = |ms| Case {
            op: &op,
            lookup: Some(LookupOutcome::NotFound { consistent: false }),
            found: None,
            now: Timestamp::from_millis(ms),
        };
        assert_eq!(decide(at(1_000), &short, &config), Decision::RetrySameKey);
        assert!(matches!(
            decide(at(1_900), &short, &config),
            Decision::Escalate(_)
        ));
    }
}

//! The decision for one unknown operation, pure: from the lookup, the processor's [`Contract`]
//! and the operation's age ([`decide`]); [`Reconciler::decide`] picks the contract of the
//! operation's own processor. Nothing here reads or writes the ledger or the processor.
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

use crate::config::ReconcilerConfig;
use crate::sweep::Reconciler;
use payonce_core::clock::Timestamp;
use payonce_ledger::{Declined, Operation, Paid, Report};
use payonce_processor::contract::Consistency;
use payonce_processor::{Contract, FoundStatus, LookupOutcome, ProcessorObject};
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
                payonce_core::summary::summary(result)
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
}

#[cfg(test)]
mod tests;

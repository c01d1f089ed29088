//! Planning a processor report (webhook, lookup) or an on-call resolution against the row as read:
//! which move the state machine allows, and what to keep. The store writes the plan fenced by the
//! status and attempt it was planned from.

use super::{Applied, LedgerError, LimitError, Operation, Report, Resolution};
use crate::{Declined, Paid};
use payonce_core::state::{Event, Status, transition};

/// How many times a report is re-planned when a racing writer moved the row first.
pub const REPORT_RETRIES_MAX: usize = 5;

/// One fenced write (or none).
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Nothing to write.
    Nothing(Applied),
    /// Log an event without changing state.
    Note {
        /// Event name.
        event: &'static str,
        /// Detail.
        detail: String,
        /// What to report back.
        applied: Applied,
    },
    /// Move to `succeeded`.
    Succeed {
        /// The state machine's event (`processor_succeeded` or `resolve_succeeded`).
        event: Event,
        /// Processor reference.
        reference: String,
        /// Processor object, if any.
        result: Option<serde_json::Value>,
        /// Detail.
        detail: String,
        /// What to report back.
        applied: Applied,
    },
    /// Move to `failed`.
    Fail {
        /// The state machine's event (`processor_failed` or `resolve_failed`).
        event: Event,
        /// Processor reference.
        reference: Option<String>,
        /// Code.
        code: String,
        /// Message.
        message: String,
        /// Detail.
        detail: String,
        /// What to report back.
        applied: Applied,
    },
    /// Move to `needs_attention`, keeping the stored result.
    Conflict {
        /// Both facts.
        detail: String,
        /// What to report back ([`Applied::Conflict`], [`Applied::PaymentWithoutApproval`] or
        /// [`Applied::LostRowRecreated`]).
        applied: Applied,
        /// A recreated row's payment and code ([`Report::Recreated`]), kept on the row; `None`
        /// keeps what the row holds.
        recreated: Option<Paid>,
    },
    /// Back to `ready` for a retry with the same key.
    Retry {
        /// The reason.
        detail: String,
    },
}

/// Decides what a processor report does to the row as read.
pub fn plan_report(
    current: &Operation,
    report: &Report,
    source: &str,
) -> Result<Plan, LedgerError> {
    let row = RowAsRead::new(current, source);
    match report {
        // Only a row the scan has just made (awaiting approval, nothing submitted): any other is
        // an existing row, for which the payment is an ordinary report.
        Report::Recreated(paid)
            if row.status == Status::AwaitingApproval && current.first_submitted_at.is_none() =>
        {
            transition(row.status, Event::ConflictingReport)?;
            Ok(Plan::Conflict {
                detail: recreated_detail(&current.id, &paid.reference),
                applied: Applied::LostRowRecreated,
                recreated: Some(paid.clone()),
            })
        }
        Report::Recreated(paid) => plan_report(current, &Report::Succeeded(paid.clone()), source),
        Report::Succeeded(paid) => row.succeeded(paid),
        Report::Failed(declined) => row.failed(declined),
        Report::Mismatch {
            reference,
            paid,
            detail,
        } => row.mismatch(reference, *paid, detail),
    }
}

/// The event of a report kept on a row it does not move.
const IGNORED: &str = "report_ignored";
/// The event of a contradicting report kept on a row already in `needs_attention`.
const CONFLICTING: &str = Event::ConflictingReport.as_str();

/// The row a report is applied to, with what every plan's detail says of it.
struct RowAsRead<'a> {
    current: &'a Operation,
    status: Status,
    /// Where the report came from (a webhook, a lookup), first in every detail.
    source: &'a str,
    /// "row says … (reference …)", last in every detail.
    stored: String,
    /// Money that moved for an operation nobody approved (or whose approval was withdrawn by a
    /// cancel) is the loudest alert payonce raises; the row says so in its detail.
    unapproved: bool,
}

impl<'a> RowAsRead<'a> {
    fn new(current: &'a Operation, source: &'a str) -> Self {
        let status = current.status;
        RowAsRead {
            current,
            status,
            source,
            stored: format!(
                "row says {} (reference {})",
                status.as_str(),
                current.external_ref.as_deref().unwrap_or("none")
            ),
            unapproved: current.approved_hash.is_none()
                || matches!(status, Status::AwaitingApproval | Status::Cancelled),
        }
    }

    /// The report is kept on the row as an `event`; nothing moves (`report_ignored`, or a
    /// `conflicting_report` on a row already in `needs_attention`).
    fn note(&self, event: &'static str, what: &str) -> Plan {
        Plan::Note {
            event,
            detail: format!("{}: {what}; {}", self.source, self.stored),
            applied: Applied::Ignored(self.status),
        }
    }

    /// The report contradicts the row: `needs_attention`, loudest when money moved unapproved.
    fn conflict(&self, what: &str, paid: bool) -> Result<Plan, LedgerError> {
        transition(self.status, Event::ConflictingReport)?;
        let (applied, alert) = if paid && self.unapproved {
            (
                Applied::PaymentWithoutApproval,
                "PAYMENT WITHOUT APPROVAL: ",
            )
        } else {
            (Applied::Conflict, "")
        };
        Ok(Plan::Conflict {
            detail: format!("{alert}{} reports {what}; {}", self.source, self.stored),
            applied,
            recreated: None,
        })
    }

    fn succeeded(&self, Paid { reference, result }: &Paid) -> Result<Plan, LedgerError> {
        use Status as S;
        match self.status {
            S::Executing | S::Unknown => {
                let to = transition(self.status, Event::ProcessorSucceeded)?;
                Ok(Plan::Succeed {
                    event: Event::ProcessorSucceeded,
                    reference: reference.clone(),
                    result: Some(result.clone()),
                    detail: super::recovery::found_detail(self.source, reference),
                    applied: Applied::Moved(to),
                })
            }
            S::Succeeded if self.current.external_ref.as_deref() == Some(reference.as_str()) => {
                Ok(Plan::Nothing(Applied::AlreadyKnown))
            }
            S::Succeeded | S::Failed | S::Rejected | S::Cancelled | S::AwaitingApproval => {
                self.conflict(&format!("a successful payment {reference}"), true)
            }
            S::NeedsAttention => Ok(self.note(CONFLICTING, &format!("succeeded as {reference}"))),
            // Approved and not yet claimed: an earlier attempt's payment (before an on-call retry);
            // the same-key claim finds it, so the fact is kept and nothing moves.
            S::Ready => Ok(self.note(IGNORED, &format!("succeeded as {reference}"))),
        }
    }

    fn failed(
        &self,
        Declined {
            code,
            message,
            reference,
        }: &Declined,
    ) -> Result<Plan, LedgerError> {
        use Status as S;
        match self.status {
            S::Executing | S::Unknown => {
                let to = transition(self.status, Event::ProcessorFailed)?;
                Ok(Plan::Fail {
                    event: Event::ProcessorFailed,
                    reference: reference.clone(),
                    code: code.clone(),
                    message: message.clone(),
                    detail: format!("{}: failed with {code}", self.source),
                    applied: Applied::Moved(to),
                })
            }
            S::Failed => Ok(Plan::Nothing(Applied::AlreadyKnown)),
            S::Succeeded => self.conflict(&format!("a failure ({code})"), false),
            // No money moved on a failure: keep the fact, change nothing.
            S::Rejected | S::Cancelled | S::NeedsAttention | S::AwaitingApproval | S::Ready => {
                Ok(self.note(IGNORED, &format!("failed with {code}")))
            }
        }
    }

    fn mismatch(&self, reference: &str, paid: bool, detail: &str) -> Result<Plan, LedgerError> {
        use Status as S;
        let what = format!(
            "{} {reference} that does not match the approved details ({detail})",
            if paid {
                "a successful payment"
            } else {
                "a processor object"
            }
        );
        match self.status {
            S::NeedsAttention => Ok(self.note(CONFLICTING, &what)),
            S::AwaitingApproval
            | S::Ready
            | S::Executing
            | S::Unknown
            | S::Succeeded
            | S::Failed
            | S::Rejected
            | S::Cancelled => self.conflict(&what, paid),
        }
    }
}

/// The failure code of an operation a person resolved as failed (`reconciler resolve --as failed`,
/// the console): its message is their note, for the ledger and on-call only.
pub const RESOLVED_FAILED_BY_HAND: &str = "resolved_failed_by_hand";

/// How the detail of a row the scan made again begins: the console, `reconciler list` and the
/// runbook name it by these words.
pub const RECREATED_HEAD: &str = "LOST ROW RECREATED";

/// The one instruction a recreated row carries: it was paid for its intention before the ledger
/// lost it, so it was approved then; it is settled, never refunded.
fn recreated_detail(id: &payonce_core::id::OperationId, reference: &str) -> String {
    format!(
        "{RECREATED_HEAD}: the processor holds {reference}, paid for this operation's intention \
         (tenant, business key and details in its metadata) before the ledger lost the row (a \
         restore or a failover). It was approved then: do not refund it. Upstream sending the \
         same intention again with its approval settles it as succeeded by itself; otherwise, \
         once upstream confirms the invoice, `payonce reconciler resolve {id} --as succeeded \
         --reference {reference}`"
    )
}

/// Decides what an on-call resolution does; the reason is mandatory.
pub fn plan_resolution(
    current: &Operation,
    resolution: &Resolution,
    reason: &str,
) -> Result<Plan, LedgerError> {
    let reason = reason.trim();
    if reason.is_empty() {
        return Err(LimitError::ResolutionReason.into());
    }
    if !matches!(current.status, Status::Unknown | Status::NeedsAttention) {
        return Err(LedgerError::WrongState {
            id: current.id.clone(),
            status: current.status,
            why: "only unknown or needs_attention operations are resolved by hand",
        });
    }
    match resolution {
        Resolution::Succeeded { reference } => {
            if reference.trim().is_empty() {
                return Err(LimitError::ResolutionReference.into());
            }
            let to = transition(current.status, Event::ResolveSucceeded)?;
            Ok(Plan::Succeed {
                event: Event::ResolveSucceeded,
                reference: reference.clone(),
                result: None,
                detail: reason.to_string(),
                applied: Applied::Moved(to),
            })
        }
        Resolution::Failed => {
            let to = transition(current.status, Event::ResolveFailed)?;
            Ok(Plan::Fail {
                event: Event::ResolveFailed,
                reference: None,
                code: RESOLVED_FAILED_BY_HAND.into(),
                message: reason.to_string(),
                detail: reason.to_string(),
                applied: Applied::Moved(to),
            })
        }
        Resolution::RetrySameKey => {
            // A retry runs the payment: never for an operation nobody approved (a payment the
            // processor holds for it is refunded there, then resolved by hand).
            if current.approved_hash.is_none() {
                return Err(LedgerError::WrongState {
                    id: current.id.clone(),
                    status: current.status,
                    why: "never approved: it cannot be retried, only resolved as succeeded or failed",
                });
            }
            transition(current.status, Event::ResolveRetry)?;
            Ok(Plan::Retry {
                detail: reason.to_string(),
            })
        }
    }
}

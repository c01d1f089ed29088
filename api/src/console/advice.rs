//! Why an operation needs attention, in one sentence, and what the runbook says to do about it.
//! The advice is docs/runbook.md's own text ("## needs_attention", its numbered reasons), compiled
//! in and read here, so the console and the runbook cannot say different things.

use payonce_core::state::{Event, EventName};
use payonce_ledger::OperationEvent;

/// The runbook, as built.
const RUNBOOK: &str = include_str!("../../../docs/runbook.md");
/// The section the reasons are numbered in.
const SECTION: &str = "## needs_attention";
/// Where the numbered reasons end.
const REASONS_END: &str = "**Never**";

/// Why automatic progress stopped, as the runbook numbers the reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Not found at the processor after the key's retention window closed (runbook 1).
    RetentionClosed,
    /// Every attempt failed before a request left (runbook 2).
    AttemptsExhausted,
    /// A rejection after an earlier attempt was sent (runbook 3).
    RejectedAfterSubmission,
    /// A processor report that contradicts the row (runbook 4).
    ConflictingReport,
    /// A payment the processor holds that was never approved (runbook 5).
    PaymentWithoutApproval,
    /// A processor object that differs from the approved details (runbook 6).
    DetailsMismatch,
    /// A row the processor scan made again from its payment after the ledger lost it (runbook 7).
    LostRowRecreated,
    /// The processor refused the key: it holds other details for the business key (runbook 8).
    KeyReused,
    /// None of the above: the last event's detail says why.
    Other,
}

impl Reason {
    /// The reason the event that moved the row into `needs_attention` gives (the newest such event).
    pub fn of(events: &[OperationEvent]) -> Reason {
        let Some(entered) = events
            .iter()
            .rev()
            .find(|e| e.to_status == "needs_attention")
        else {
            return Reason::Other;
        };
        let detail = entered.detail.as_deref().unwrap_or("");
        if entered.event == EventName::Event(Event::NotSubmittedExhausted) {
            Reason::AttemptsExhausted
        } else if detail.starts_with("PAYMENT WITHOUT APPROVAL") {
            Reason::PaymentWithoutApproval
        } else if detail.starts_with(payonce_ledger::report::RECREATED_HEAD) {
            Reason::LostRowRecreated
        } else if detail.starts_with(payonce_core::operation::KEY_REUSED_HEAD) {
            Reason::KeyReused
        } else if detail.contains("does not match the approved details") {
            Reason::DetailsMismatch
        } else if detail.contains("retention window has closed") {
            Reason::RetentionClosed
        } else if entered.event == EventName::Event(Event::ConflictingReport) {
            Reason::ConflictingReport
        } else if entered.from_status.as_deref() == Some("executing") && detail.contains("reject") {
            Reason::RejectedAfterSubmission
        } else {
            Reason::Other
        }
    }

    /// The reason in one sentence, for the top of the page.
    pub fn sentence(self) -> &'static str {
        match self {
            Reason::RetentionClosed => {
                "The processor has no record of this payment and no longer remembers its idempotency key, so a new submission could charge twice."
            }
            Reason::AttemptsExhausted => {
                "Every attempt failed before a request reached the processor, so nothing was sent."
            }
            Reason::RejectedAfterSubmission => {
                "The processor rejected a later attempt after an earlier one had been sent, so the earlier one may have been paid."
            }
            Reason::ConflictingReport => {
                "The processor reported an outcome that contradicts the one the ledger recorded."
            }
            Reason::PaymentWithoutApproval => {
                "The processor holds a payment for this operation that was never approved or was cancelled."
            }
            Reason::DetailsMismatch => {
                "The processor holds an object for this operation that does not match the approved details."
            }
            Reason::LostRowRecreated => {
                "The ledger lost this row after the processor was paid; it was made again from the payment, which was approved before the loss."
            }
            Reason::KeyReused => {
                "The processor already holds a different payment for this business key, so it refused this one: nothing was paid for it."
            }
            Reason::Other => {
                "Automatic progress stopped without one of the runbook's known reasons; the last event's detail says why."
            }
        }
    }

    /// The runbook's number for the reason, if it has one.
    fn number(self) -> Option<u32> {
        match self {
            Reason::RetentionClosed => Some(1),
            Reason::AttemptsExhausted => Some(2),
            Reason::RejectedAfterSubmission => Some(3),
            Reason::ConflictingReport => Some(4),
            Reason::PaymentWithoutApproval => Some(5),
            Reason::DetailsMismatch => Some(6),
            Reason::LostRowRecreated => Some(7),
            Reason::KeyReused => Some(8),
            Reason::Other => None,
        }
    }

    /// The runbook's advice for the reason: its numbered item, as plain text lines (a line starting
    /// with `- ` is a step of a list). For [`Reason::Other`], the section's opening line.
    pub fn advice(self) -> Vec<String> {
        let section = section();
        let raw: Vec<&str> = match self.number() {
            None => section
                .lines()
                .skip_while(|l| l.trim().is_empty())
                .take_while(|l| !l.trim().is_empty())
                .collect(),
            Some(n) => {
                let start = format!("{n}. ");
                section
                    .lines()
                    .skip_while(|l| !l.starts_with(&start))
                    .enumerate()
                    .take_while(|(i, l)| *i == 0 || l.starts_with("   ") || l.trim().is_empty())
                    .map(|(_, l)| l)
                    .collect()
            }
        };
        let mut out: Vec<String> = Vec::new();
        for line in raw {
            let text = plain(line.trim());
            if text.is_empty() {
                continue;
            }
            let number_stripped = self
                .number()
                .and_then(|n| text.strip_prefix(&format!("{n}. ")).map(str::to_string));
            match (number_stripped, text.starts_with("- "), out.last_mut()) {
                (Some(first), _, _) => out.push(first),
                (None, true, _) => out.push(text),
                (None, false, Some(last)) => {
                    last.push(' ');
                    last.push_str(&text);
                }
                (None, false, None) => out.push(text),
            }
        }
        out
    }
}

/// The runbook's `needs_attention` section, up to its "Never" list.
fn section() -> &'static str {
    let start = RUNBOOK
        .find(SECTION)
        .map_or(RUNBOOK.len(), |i| i + SECTION.len());
    let rest = &RUNBOOK[start..];
    &rest[..rest.find(REASONS_END).unwrap_or(rest.len())]
}

/// Markdown emphasis and code marks removed.
fn plain(line: &str) -> String {
    line.replace("**", "").replace('`', "")
}

/// What the processor saw of the operation's attempts: the attempts that recorded a submission
/// start, less those that the ledger knows sent nothing (a refused connection, a rejection decided
/// before sending).
pub fn submissions_seen(submit_count: i64, events: &[OperationEvent]) -> i64 {
    let not_sent = events
        .iter()
        .filter(|e| {
            matches!(
                e.event,
                EventName::Event(
                    Event::NotSubmittedRetry
                        | Event::NotSubmittedExhausted
                        | Event::RejectBeforeSubmit
                )
            )
        })
        .count();
    (submit_count - i64::try_from(not_sent).unwrap_or(i64::MAX)).max(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use payonce_core::clock::Timestamp;

    fn entered(event: &str, from: &str, detail: &str) -> OperationEvent {
        OperationEvent {
            at: Timestamp::from_millis(1),
            event: EventName::parse(event).expect("a known event name"),
            actor: "reconciler".into(),
            from_status: Some(from.into()),
            to_status: "needs_attention".into(),
            attempt: 1,
            detail: Some(detail.into()),
        }
    }

    #[test]
    fn every_reason_has_the_runbooks_advice() {
        for reason in [
            Reason::RetentionClosed,
            Reason::AttemptsExhausted,
            Reason::RejectedAfterSubmission,
            Reason::ConflictingReport,
            Reason::PaymentWithoutApproval,
            Reason::DetailsMismatch,
            Reason::LostRowRecreated,
            Reason::KeyReused,
            Reason::Other,
        ] {
            let advice = reason.advice();
            assert!(!advice.is_empty(), "{reason:?}");
            // Each line is the runbook's own words (markup aside).
            let flat = plain(RUNBOOK)
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            for line in &advice {
                let words = line.trim_start_matches("- ");
                assert!(flat.contains(words), "{reason:?}: {words}");
            }
        }
        let exhausted = Reason::AttemptsExhausted.advice();
        assert!(
            exhausted[0].starts_with("Attempts exhausted (not_submitted_exhausted"),
            "{exhausted:?}"
        );
        let retention = Reason::RetentionClosed.advice();
        assert!(
            retention
                .iter()
                .any(|l| l.starts_with("- Found and succeeded")),
            "{retention:?}"
        );
    }

    #[test]
    fn the_entering_event_names_the_reason() {
        let at = |e| Reason::of(&[e]);
        assert_eq!(
            at(entered(
                "not_submitted_exhausted",
                "executing",
                "connection refused"
            )),
            Reason::AttemptsExhausted
        );
        assert_eq!(
            at(entered(
                "escalate",
                "unknown",
                "not found at the processor (consistent lookup) and the key's retention window has closed; a new submission could pay twice"
            )),
            Reason::RetentionClosed
        );
        assert_eq!(
            at(entered(
                "conflicting_report",
                "succeeded",
                "webhook says failed"
            )),
            Reason::ConflictingReport
        );
        assert_eq!(
            at(entered(
                "conflicting_report",
                "cancelled",
                "PAYMENT WITHOUT APPROVAL: pi_1"
            )),
            Reason::PaymentWithoutApproval
        );
        assert_eq!(
            at(entered(
                "conflicting_report",
                "awaiting_approval",
                "LOST ROW RECREATED: the processor holds pi_1"
            )),
            Reason::LostRowRecreated
        );
        assert_eq!(
            at(entered(
                "escalate",
                "executing",
                &format!(
                    "{}: the first payment is pi_1",
                    payonce_core::operation::KEY_REUSED_HEAD
                )
            )),
            Reason::KeyReused
        );
        assert!(Reason::LostRowRecreated.advice()[0].contains("do not refund it"));
        assert!(
            Reason::KeyReused.advice()[0].contains("Never --as retry"),
            "{:?}",
            Reason::KeyReused.advice()
        );
        assert_eq!(
            at(entered(
                "escalate",
                "unknown",
                "pi_1 that does not match the approved details (amount)"
            )),
            Reason::DetailsMismatch
        );
        assert_eq!(at(entered("escalate", "unknown", "timeout")), Reason::Other);
        assert_eq!(Reason::of(&[]), Reason::Other);
    }

    #[test]
    fn a_refused_connection_is_not_a_submission() {
        let mut refused = entered("not_submitted_retry", "executing", "connection refused");
        refused.to_status = "ready".into();
        assert_eq!(submissions_seen(1, &[refused.clone()]), 0);
        assert_eq!(submissions_seen(3, &[refused]), 2);
        assert_eq!(submissions_seen(0, &[]), 0);
    }
}

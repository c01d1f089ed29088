//! What a soak found: the processor's audit against the ledger, per operation, and the table printed
//! at the end.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// How an operation reached its final state, read from its event history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Path {
    /// The worker recorded the processor's answer.
    Worker,
    /// The reconciler found the outcome by lookup (from `unknown`).
    ReconcilerLookup,
    /// The reconciler retried with the same key under its own lease.
    ReconcilerRetry,
    /// A processor webhook (Stripe's) or notification (Adyen's) carried the outcome.
    Webhook,
}

impl Path {
    /// Row label in the table.
    pub fn label(&self) -> &'static str {
        match self {
            Path::Worker => "resolved by worker",
            Path::ReconcilerLookup => "resolved by reconciler lookup",
            Path::ReconcilerRetry => "resolved by reconciler same-key retry",
            Path::Webhook => "resolved by webhook or notification",
        }
    }

    /// Classifies the event that moved a row into its final state.
    pub fn of(from_status: Option<&str>, actor: &str, detail: Option<&str>) -> Path {
        if from_hint(actor, detail) {
            Path::Webhook
        } else if from_status == Some("unknown") {
            Path::ReconcilerLookup
        } else if actor.starts_with("reconciler") {
            Path::ReconcilerRetry
        } else {
            Path::Worker
        }
    }
}

/// Whether an event was written on a processor's webhook (Stripe's: "webhook evt_…", in its actor
/// or detail) or notification (Adyen's: actor "adyen notification AUTHORISATION:…" or "reconciler:
/// adyen notification"). A worker's detail that only names the notification to come ("the
/// AUTHORISATION notification settles it") does not count.
pub fn from_hint(actor: &str, detail: Option<&str>) -> bool {
    let webhook =
        |s: &str| s.starts_with("webhook") || s.contains(" webhook") || s.contains("evt_");
    webhook(actor) || detail.is_some_and(webhook) || actor.contains("adyen notification")
}

/// The soak's result. `duplicates`, `lost`, `mismatched` and `unexplained` must all be zero.
#[derive(Debug, Clone, Default)]
pub struct SoakReport {
    /// The seed the plan was drawn from.
    pub seed: u64,
    /// The processor contract the simulator ran and the fleet declared, with its key retention.
    pub contract: String,
    /// Approved operations in `needs_attention` at the end: ambiguity the contract cannot resolve
    /// without risking a second payment, sent to a human (neither paid twice nor lost).
    pub sent_to_human: usize,
    /// Of those, how many the processor holds a payment for (the human finds it paid).
    pub sent_to_human_paid: usize,
    /// Of those, how many hold the reference the processor answered with: on Adyen's wire a
    /// `Received` payment, which its notification settles (a human was asked because the
    /// notification was read after the same-key requests ran out).
    pub sent_to_human_with_reference: usize,
    /// Payment operations a verified webhook or notification reached (its history shows an event
    /// written on one): on Adyen's wire, proof the api verified the simulator's HMAC signatures.
    pub notified: usize,
    /// Approved operations created.
    pub approved: usize,
    /// Operations created and never approved (must never be paid).
    pub unapproved: usize,
    /// Successful payments the processor holds for this run's operations.
    pub payments: usize,
    /// Successful payments beyond the first per operation, plus any for an unapproved operation.
    pub duplicates: usize,
    /// Approved operations with no payment that are not failed, rejected or needs_attention
    /// (including a row that says succeeded with no payment behind it).
    pub lost: usize,
    /// Rows whose state contradicts the processor without saying so (paid but failed or rejected).
    pub mismatched: usize,
    /// Rows whose last event does not lead to the row's state (the history does not explain it).
    pub unexplained: usize,
    /// Final states by how they were reached.
    pub paths: BTreeMap<Path, usize>,
    /// Rows in each final state.
    pub statuses: BTreeMap<String, usize>,
    /// Operations whose history shows an expired lease (a crash or kill hit them).
    pub recovered_after_crash: usize,
    /// Processes SIGKILLed by the soak.
    pub sigkills: usize,
    /// Of those, reconciler processes.
    pub reconciler_sigkills: usize,
    /// Processes that aborted at an armed failure point.
    pub failpoint_aborts: usize,
    /// Times every Postgres backend of the fleet was terminated at once (a failover's dropped
    /// connections), and how many backends that ended in all.
    pub backend_terminations: usize,
    /// Postgres backends of the fleet terminated.
    pub backends_terminated: i64,
    /// Restarts of the ledger's database server during the chaos.
    pub database_restarts: usize,
    /// Tool calls sent (duplicates included) and how many of them were duplicates.
    pub tool_calls: usize,
    /// Tool calls sent a second time, concurrently with the first.
    pub duplicate_tool_calls: usize,
    /// Tool-call answers that claimed a new payment was submitted, or were not 200.
    pub bad_tool_answers: usize,
    /// Payments the soak refunded.
    pub refunded_payments: usize,
    /// Refund operations created and approved.
    pub refunds_created: usize,
    /// Refund creations the ledger's over-refund guard refused.
    pub refunds_refused_by_guard: usize,
    /// Refusals the refund plans call for (one per pair racing for more than a payment holds).
    pub refund_refusals_expected: usize,
    /// The refunds on both sides.
    pub refunds: RefundTally,
    /// Whether every operation reached a final state before the deadline.
    pub converged: bool,
    /// How long the chaos phase (kills, faults) lasted.
    pub chaos_time: Duration,
    /// Start to finish.
    pub wall_time: Duration,
}

impl SoakReport {
    /// Whether the run proved what it must: converged, nothing paid twice, nothing lost or unexplained.
    pub fn is_clean(&self) -> bool {
        self.converged
            && self.duplicates == 0
            && self.lost == 0
            && self.mismatched == 0
            && self.unexplained == 0
            && self.bad_tool_answers == 0
            && self.refunds.duplicated == 0
            && self.refunds.over_refunded == 0
            && self.refunds.lost == 0
            && self.refunds.mismatched == 0
            && self.refunds.disagreements == 0
            && self.refunds_refused_by_guard == self.refund_refusals_expected
    }

    /// Rows in `status` at the end.
    pub fn status_count(&self, status: &str) -> usize {
        self.statuses.get(status).copied().unwrap_or(0)
    }
}

impl fmt::Display for SoakReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rows = self.payment_rows();
        rows.extend(self.refund_rows());
        rows.extend(self.fault_rows());
        let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        writeln!(f, "payonce chaos soak (seed {})", self.seed)?;
        for (k, v) in rows {
            writeln!(f, "  {k:<width$}  {v:>12}")?;
        }
        write!(
            f,
            "  verdict: {}",
            if self.is_clean() { "CLEAN" } else { "FAILED" }
        )
    }
}

impl SoakReport {
    /// The table's rows about payments: counts, paths and final states.
    fn payment_rows(&self) -> Vec<(String, String)> {
        let mut rows: Vec<(String, String)> = vec![
            ("processor contract".into(), self.contract.clone()),
            (
                "operations (approved + unapproved)".into(),
                format!(
                    "{} ({} + {})",
                    self.approved + self.unapproved,
                    self.approved,
                    self.unapproved
                ),
            ),
            (
                "payments at the processor".into(),
                self.payments.to_string(),
            ),
            ("duplicates".into(), self.duplicates.to_string()),
            ("lost".into(), self.lost.to_string()),
            (
                "ledger/processor mismatches".into(),
                self.mismatched.to_string(),
            ),
            (
                "histories that do not explain the state".into(),
                self.unexplained.to_string(),
            ),
            (
                "sent to a human (paid at the processor; holding its reference)".into(),
                format!(
                    "{} ({}; {})",
                    self.sent_to_human, self.sent_to_human_paid, self.sent_to_human_with_reference
                ),
            ),
        ];
        rows.push((
            "reached by a webhook or notification (refunds)".into(),
            format!("{} ({})", self.notified, self.refunds.notified),
        ));
        for (path, n) in &self.paths {
            rows.push((path.label().into(), n.to_string()));
        }
        for status in [
            "succeeded",
            "failed",
            "rejected",
            "needs_attention",
            "awaiting_approval",
        ] {
            rows.push((
                format!("final state {status}"),
                self.status_count(status).to_string(),
            ));
        }
        rows
    }

    /// The table's rows about refunds, on both sides.
    fn refund_rows(&self) -> Vec<(String, String)> {
        let refund_states: usize = self.refunds.statuses.values().sum();
        vec![
            (
                "refunded payments (refund operations)".into(),
                format!("{} ({})", self.refunded_payments, self.refunds_created),
            ),
            (
                "refunds refused by the guard (expected)".into(),
                format!(
                    "{} ({})",
                    self.refunds_refused_by_guard, self.refund_refusals_expected
                ),
            ),
            (
                "refunds at the processor".into(),
                self.refunds.at_processor.to_string(),
            ),
            (
                "duplicated refunds".into(),
                self.refunds.duplicated.to_string(),
            ),
            (
                "over-refunded payments".into(),
                self.refunds.over_refunded.to_string(),
            ),
            ("lost refunds".into(), self.refunds.lost.to_string()),
            (
                "refunds sent to a human (holding its reference)".into(),
                format!(
                    "{} ({})",
                    self.refunds
                        .statuses
                        .get("needs_attention")
                        .copied()
                        .unwrap_or(0),
                    self.refunds.sent_to_human_with_reference
                ),
            ),
            (
                "refund ledger/processor mismatches".into(),
                (self.refunds.mismatched + self.refunds.disagreements).to_string(),
            ),
            (
                "refunds succeeded (of all refund rows)".into(),
                format!(
                    "{} ({refund_states})",
                    self.refunds.statuses.get("succeeded").copied().unwrap_or(0)
                ),
            ),
        ]
    }

    /// The table's rows about the faults injected, the tool calls and the run's times.
    fn fault_rows(&self) -> Vec<(String, String)> {
        vec![
            (
                "operations recovered after a crash".into(),
                self.recovered_after_crash.to_string(),
            ),
            (
                "processes SIGKILLed (of which reconcilers)".into(),
                format!("{} ({})", self.sigkills, self.reconciler_sigkills),
            ),
            (
                "processes aborted at a failure point".into(),
                self.failpoint_aborts.to_string(),
            ),
            (
                "database server restarts".into(),
                self.database_restarts.to_string(),
            ),
            (
                "Postgres backends terminated (in rounds)".into(),
                format!(
                    "{} ({})",
                    self.backends_terminated, self.backend_terminations
                ),
            ),
            (
                "tool calls (of which concurrent duplicates)".into(),
                format!("{} ({})", self.tool_calls, self.duplicate_tool_calls),
            ),
            ("bad tool answers".into(), self.bad_tool_answers.to_string()),
            ("converged".into(), self.converged.to_string()),
            (
                "chaos phase".into(),
                format!("{:.1} s", self.chaos_time.as_secs_f64()),
            ),
            (
                "wall time".into(),
                format!("{:.1} s", self.wall_time.as_secs_f64()),
            ),
        ]
    }
}

/// What the soak's refunds came to, on both sides.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RefundTally {
    /// Refunds the processor made (not failed or canceled) for the soak's refund operations.
    pub at_processor: usize,
    /// Refunds beyond the first per refund operation.
    pub duplicated: usize,
    /// Payments refunded beyond their amount, at the processor or in the ledger (succeeded plus in flight).
    pub over_refunded: usize,
    /// Refund operations the ledger calls succeeded with no refund behind them, or approved ones
    /// left with no refund and no honest final state.
    pub lost: usize,
    /// Refunds the processor made whose row says failed, rejected or cancelled.
    pub mismatched: usize,
    /// Payments whose ledger total of succeeded refunds is not what the processor gave back.
    pub disagreements: usize,
    /// Refund rows per final state.
    pub statuses: std::collections::HashMap<String, usize>,
    /// Refund operations sent to a human that hold the reference the processor answered with: on
    /// Adyen's wire a `received` refund, which its REFUND notification settles.
    pub sent_to_human_with_reference: usize,
    /// Refund operations a verified webhook or notification reached (on Adyen's wire, a refund
    /// answered `received` succeeds only by its REFUND notification).
    pub notified: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_read_from_the_final_event() {
        assert_eq!(
            Path::of(Some("executing"), "worker-h-1", None),
            Path::Worker
        );
        assert_eq!(
            Path::of(Some("unknown"), "reconciler-h-2", None),
            Path::ReconcilerLookup
        );
        assert_eq!(
            Path::of(Some("executing"), "reconciler-h-2", None),
            Path::ReconcilerRetry
        );
        assert_eq!(
            Path::of(Some("executing"), "webhook evt_1", None),
            Path::Webhook
        );
        assert_eq!(
            Path::of(Some("unknown"), "api", Some("webhook evt_9")),
            Path::Webhook
        );
        let adyen = "adyen notification AUTHORISATION:PSP1:true checked against the operation";
        assert_eq!(Path::of(Some("unknown"), adyen, Some(adyen)), Path::Webhook);
        assert_eq!(
            Path::of(Some("executing"), adyen, Some(adyen)),
            Path::Webhook
        );
        let nudge = "reconciler: adyen notification";
        assert!(from_hint(
            nudge,
            Some("adyen notification REFUND:P:true names P")
        ));
        let worker = "payment is Received: the AUTHORISATION notification settles it";
        assert!(!from_hint("worker-h-1", Some(worker)));
        assert_eq!(
            Path::of(Some("executing"), "worker-h-1", Some(worker)),
            Path::Worker
        );
    }

    #[test]
    fn any_duplicate_or_loss_makes_the_report_fail() {
        let clean = SoakReport {
            converged: true,
            ..Default::default()
        };
        assert!(clean.is_clean());
        assert!(
            !SoakReport {
                duplicates: 1,
                ..clean.clone()
            }
            .is_clean()
        );
        assert!(
            !SoakReport {
                lost: 1,
                ..clean.clone()
            }
            .is_clean()
        );
        assert!(
            !SoakReport {
                converged: false,
                ..clean.clone()
            }
            .is_clean()
        );
        for refunds in [
            RefundTally {
                duplicated: 1,
                ..Default::default()
            },
            RefundTally {
                over_refunded: 1,
                ..Default::default()
            },
            RefundTally {
                lost: 1,
                ..Default::default()
            },
            RefundTally {
                disagreements: 1,
                ..Default::default()
            },
        ] {
            assert!(
                !SoakReport {
                    refunds,
                    ..clean.clone()
                }
                .is_clean()
            );
        }
        assert!(
            !SoakReport {
                refund_refusals_expected: 1,
                ..clean.clone()
            }
            .is_clean(),
            "a racing pair the guard let through"
        );
        assert!(clean.to_string().contains("CLEAN"));
    }
}

//! Adyen notifications checked before trust. Adyen has no lookup of a payment by id, so a stored
//! notification (verified by its HMAC signature and merchant account at the api) cannot be confirmed
//! by retrieving its object. It is checked against what can be checked instead, and never applied
//! alone:
//!
//! - its amount and currency must be the operation's, its kind the operation's (AUTHORISATION for a
//!   payment, REFUND for a refund, whose `originalReference` must be the refunded payment's);
//! - it is applied only when it names the `pspReference` Adyen itself answered this operation with
//!   (recorded from a `Received`/`Pending` payment or a received refund): a fact payonce already
//!   holds from the processor, and an unknown operation holding it waits for this notification
//!   instead of being retried (`sweep::unknown::decision::NOTIFICATION_WAIT_MAX`);
//! - an unknown operation without that reference is made due at once, so the sweep resubmits it
//!   with the SAME key (Adyen replays the saved result, which records the reference) and the
//!   notification waits, pending, for the next pass;
//! - anything that contradicts the row (another amount, a second successful payment under the same
//!   operation, money for a failed operation) goes to `needs_attention` with both facts, through the
//!   same fenced report path as every lookup;
//! - a notification about an operation payonce never sent a request for (awaiting approval,
//!   cancelled or rejected before any submission) cannot be verified at all: Adyen cannot be asked
//!   whether its `pspReference` exists, and payonce holds nothing to compare it with. It is closed
//!   as unproven with an alert, and the operation is left as it is: a made-up reference must not send
//!   a human to refund a payment "without approval".
//!
//! An unknown operation whose same-key retries only replay a saved error (a 500 Adyen stored under
//! the key) goes to a human; the escalation names the references its signed notifications report
//! ([`reported_payments`]), so the human confirms that payment instead of searching for it.

use super::{HintReport, apply_to_row};
use crate::metrics::ReconcilerMetrics;
use payonce_core::clock::Timestamp;
use payonce_core::details::OperationKind;
use payonce_core::state::Status;
use payonce_ledger::{
    Applied, Declined, DeferCheck, Fence, LedgerError, Operation, Paid, ProcessorEventKey,
    Recovery, Report, StoredProcessorEvent,
};
use payonce_processor::adyen::webhook::{NotificationItem, item_of};
use std::time::Duration;

/// How long a notification first waits for its operation's same-key resubmission (or its worker's
/// answer) before it is read again; doubles per read.
pub const NOTIFICATION_RECHECK: Duration = Duration::from_secs(2);
/// Longest wait between two reads of a waiting notification (its operation goes to a human when the
/// key's retention closes or its same-key requests run out, and the notification is read against
/// that state).
pub const NOTIFICATION_RECHECK_MAX: Duration = Duration::from_secs(60 * 60);

/// When a notification read `checks` times is read again.
pub fn recheck_after(checks: i64) -> Duration {
    let exp = u32::try_from(checks.clamp(0, 20)).unwrap_or(20);
    NOTIFICATION_RECHECK
        .saturating_mul(1_u32 << exp)
        .min(NOTIFICATION_RECHECK_MAX)
}
/// The actor the audit trail names for a nudge.
const ACTOR: &str = "reconciler: adyen notification";

/// Why `item` is not about `op` as approved; empty when it is.
pub fn differences(op: &Operation, item: &NotificationItem) -> Vec<String> {
    let money = op.details.money();
    let mut diffs = Vec::new();
    if item.amount.value != money.amount_minor() {
        diffs.push(format!(
            "amount {} in the notification, {} approved",
            item.amount.value,
            money.amount_minor()
        ));
    }
    if !item
        .amount
        .currency
        .eq_ignore_ascii_case(money.currency().code())
    {
        diffs.push(format!(
            "currency {} in the notification, {} approved",
            item.amount.currency,
            money.currency().code()
        ));
    }
    match (op.details.kind(), item.event_code.as_str()) {
        (OperationKind::Payment, "AUTHORISATION") => {}
        (OperationKind::Refund, "REFUND") => {
            let approved = op.details.refund_of().map(|of| of.payment_reference());
            if item.original_reference.as_deref() != approved {
                diffs.push(format!(
                    "refund of {:?} in the notification, of {approved:?} approved",
                    item.original_reference
                ));
            }
        }
        (kind, code) => diffs.push(format!(
            "a {code} notification for a {} operation",
            kind.as_str()
        )),
    }
    diffs
}

/// What the notification supports for `op`, if it names the reference Adyen answered it with.
fn report_of(item: &NotificationItem) -> Report {
    if item.succeeded() {
        Report::Succeeded(Paid {
            reference: item.psp_reference.clone(),
            result: serde_json::to_value(item).unwrap_or_default(),
        })
    } else {
        Report::Failed(Declined {
            code: format!("adyen_{}", item.event_code.to_ascii_lowercase()),
            message: item
                .reason
                .clone()
                .filter(|r| !r.is_empty())
                .unwrap_or_else(|| format!("{} not successful", item.event_code)),
            reference: Some(item.psp_reference.clone()),
        })
    }
}

/// An unknown operation a matching notification names by a reference the row does not hold yet:
/// made due now, so the sweep resubmits it with the same key (Adyen replays the saved result); the
/// notification is read again after.
async fn nudge(
    ledger: &dyn Recovery,
    hint: &StoredProcessorEvent,
    op: &Operation,
    psp: &str,
    now: Timestamp,
    report: &mut HintReport,
) -> Result<(), LedgerError> {
    let detail = format!(
        "adyen notification {} names {psp}: same-key resubmission now to confirm it",
        hint.event_id
    );
    let defer = ledger
        .defer_check(
            &DeferCheck {
                fence: &Fence::of(op),
                next_check_at: now,
                detail: &detail,
                actor: ACTOR,
            },
            now,
        )
        .await;
    match defer {
        // Fenced: the row moved meanwhile; the next read of the notification sees where to.
        Ok(()) | Err(LedgerError::Fenced { .. }) => {}
        Err(e) => return Err(e),
    }
    report.deferred += 1;
    let key = ProcessorEventKey {
        processor: &hint.processor,
        event_id: &hint.event_id,
    };
    ledger
        .defer_processor_event(
            &key,
            now + recheck_after(hint.checks),
            &format!(
                "pending: waiting for {} to be resubmitted with its key",
                op.id
            ),
        )
        .await
}

/// What checking a notification against its operation decided, before anything is written.
enum Verdict {
    /// Weigh this report against the row, as a lookup's would be (`apply_to_row`).
    Apply(Report),
    /// An unknown operation the notification names by another reference: nudged to retry.
    Nudge,
    /// In flight: read again later, for this reason.
    Defer(String),
    /// Nothing to apply: closed with this outcome.
    Close(String),
    /// About an operation payonce never submitted: nothing can verify it; closed with this outcome
    /// and an alert.
    Unproven(String),
}

/// The notification `item` (event `event_id`) weighed against `op` (see the module's rules).
/// Pure: nothing is read or written.
fn verdict(op: &Operation, item: &NotificationItem, event_id: &str) -> Verdict {
    let psp = item.psp_reference.as_str();
    let named = op.external_ref.as_deref() == Some(psp);
    // No request of payonce's ever left for it (in flight ones excepted: their answer comes first),
    // and Adyen has no lookup: the notification alone is no evidence of anything.
    let in_flight = matches!(op.status, Status::Ready | Status::Executing);
    if op.first_submitted_at.is_none() && !named && !in_flight {
        return Verdict::Unproven(format!(
            "unproven: {} reports {psp} ({}) for {}, which payonce never submitted (status {}); \
             Adyen cannot be asked whether {psp} exists; nothing applied",
            item.event_code,
            if item.succeeded() {
                "successful"
            } else {
                "unsuccessful"
            },
            op.id,
            op.status.as_str()
        ));
    }
    let diffs = differences(op, item);
    // A second successful payment or refund under one operation is a contradiction even when it
    // matches: one of the two references is money paid twice.
    let other_reference = op
        .external_ref
        .as_deref()
        .is_some_and(|r| r != psp && op.status == Status::Succeeded);
    if !diffs.is_empty() || (other_reference && item.succeeded()) {
        let mut detail = diffs;
        if other_reference {
            detail.push(format!(
                "{} already recorded, the notification reports {psp}",
                op.external_ref.as_deref().unwrap_or("")
            ));
        }
        Verdict::Apply(Report::Mismatch {
            reference: psp.to_string(),
            paid: item.succeeded(),
            detail: format!("adyen notification {event_id}: {}", detail.join("; ")),
        })
    } else if named {
        // Named by Adyen's own answer to this operation: the notification says how it settled.
        Verdict::Apply(report_of(item))
    } else {
        match op.status {
            Status::Unknown => Verdict::Nudge,
            // In flight: the worker's own answer records the reference first; read it again after.
            Status::Ready | Status::Executing if item.succeeded() => {
                Verdict::Defer(format!("pending: {} is {}", op.id, op.status.as_str()))
            }
            // Money for a row that is not paid: the state machine weighs it (a conflict, or a
            // payment nobody approved), never silently dropped.
            Status::Failed
            | Status::Rejected
            | Status::Cancelled
            | Status::AwaitingApproval
            | Status::NeedsAttention
                if item.succeeded() =>
            {
                Verdict::Apply(report_of(item))
            }
            Status::Ready
            | Status::Executing
            | Status::Succeeded
            | Status::Failed
            | Status::Rejected
            | Status::Cancelled
            | Status::AwaitingApproval
            | Status::NeedsAttention => Verdict::Close(format!(
                "checked: an unsuccessful {} for {psp}, not {}'s recorded reference; nothing applied",
                item.event_code, op.id
            )),
        }
    }
}

/// Counts what applying a checked notification did, in the pass's report and the metrics, and
/// raises the alerts it calls for.
fn tally(
    report: &mut HintReport,
    metrics: &ReconcilerMetrics,
    applied: &Applied,
    checked: &Report,
    op: &Operation,
    psp: &str,
    event_id: &str,
) {
    match (applied, checked) {
        (Applied::PaymentWithoutApproval, _) => {
            report.without_approval += 1;
            metrics.payments_without_approval.inc();
            tracing::error!(alert = "payment_without_approval", operation = %op.id, reference = psp,
                event_id = %event_id, "Adyen reports a payment for an operation nobody approved");
        }
        (Applied::Conflict, _) | (_, Report::Mismatch { .. }) => {
            report.mismatched += 1;
            metrics.webhook_mismatches.inc();
            tracing::error!(alert = "webhook_lookup_mismatch", operation = %op.id, reference = psp,
                event_id = %event_id, "an Adyen notification contradicts the operation; it needs attention");
        }
        (Applied::AlreadyKnown, _) => {
            report.known += 1;
            metrics.hints_known.inc();
        }
        _ => {
            report.applied += 1;
            metrics.hints_applied.inc();
        }
    }
}

/// Checks one stored Adyen notification against its operation (see the module's rules).
pub(crate) async fn check(
    ledger: &dyn Recovery,
    processors: &payonce_processor::Processors,
    metrics: &ReconcilerMetrics,
    hint: &StoredProcessorEvent,
    now: Timestamp,
    report: &mut HintReport,
) -> Result<(), LedgerError> {
    let key = ProcessorEventKey {
        processor: &hint.processor,
        event_id: &hint.event_id,
    };
    let close =
        |outcome: String| async move { ledger.mark_processor_event(&key, &outcome, now).await };
    let (Some(id), Some(item)) = (&hint.operation, item_of(&hint.payload)) else {
        report.closed += 1;
        return close("closed: names no operation or is unreadable".into()).await;
    };
    let Some(op) =
        super::hint_operation(ledger, processors, metrics, hint, id, now, report).await?
    else {
        return Ok(());
    };
    let psp = item.psp_reference.as_str();
    let checked = match verdict(&op, &item, &hint.event_id) {
        Verdict::Apply(checked) => checked,
        Verdict::Nudge => return nudge(ledger, hint, &op, psp, now, report).await,
        Verdict::Defer(why) => {
            report.deferred += 1;
            let next = now + recheck_after(hint.checks);
            return ledger.defer_processor_event(&key, next, &why).await;
        }
        Verdict::Close(outcome) => {
            report.closed += 1;
            return close(outcome).await;
        }
        Verdict::Unproven(outcome) => {
            report.unproven += 1;
            metrics.webhook_mismatches.inc();
            tracing::error!(alert = "webhook_lookup_mismatch", event_id = %hint.event_id,
                operation = %op.id, reference = psp, status = op.status.as_str(),
                "a signed Adyen notification names an operation payonce never submitted; nothing applied");
            return close(outcome).await;
        }
    };
    let source = format!(
        "adyen notification {} checked against the operation",
        hint.event_id
    );
    let Some(applied) = apply_to_row(ledger, &op, &checked, &source, now).await? else {
        report.closed += 1;
        return close("closed: not an operation of this ledger".into()).await;
    };
    tally(
        report,
        metrics,
        &applied,
        &checked,
        &op,
        psp,
        &hint.event_id,
    );
    close(format!("checked: {applied:?} on {}", op.id)).await
}

/// Most stored notifications read for one escalation.
const NOTIFICATIONS_READ_MAX: u32 = 20;

/// What `op`'s stored Adyen notifications report that its row does not hold: each successful
/// notification of its kind, for its approved amount and currency, naming another reference than the
/// row's, as one sentence for an escalation (`None`: none). The api stored each only after verifying
/// its HMAC signature and merchant account.
pub(crate) async fn reported_payments(
    ledger: &dyn Recovery,
    op: &Operation,
) -> Result<Option<String>, LedgerError> {
    let stored = ledger
        .processor_events_of(&op.id, NOTIFICATIONS_READ_MAX)
        .await?;
    let reported: Vec<(String, &str)> = stored
        .iter()
        .filter(|hint| hint.processor == payonce_processor::adyen::webhook::PROCESSOR)
        .filter_map(|hint| Some((item_of(&hint.payload)?, hint.event_id.as_str())))
        .filter(|(item, _)| {
            item.succeeded()
                && differences(op, item).is_empty()
                && op.external_ref.as_deref() != Some(item.psp_reference.as_str())
        })
        .map(|(item, event_id)| (item.psp_reference, event_id))
        .collect();
    let Some((first, _)) = reported.first() else {
        return Ok(None);
    };
    let named: Vec<String> = reported
        .iter()
        .map(|(psp, event_id)| format!("{psp} (notification {event_id})"))
        .collect();
    Ok(Some(format!(
        "signed Adyen notifications report what the saved answer does not: {} succeeded for the \
         approved amount. Confirm it in Adyen's Customer Area, then `payonce reconciler resolve {} \
         --as succeeded --reference {first}`",
        named.join(", "),
        op.id,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::unknown_since;

    /// An AUTHORISATION for `psp` of `value` USD minor units, successful or not.
    fn authorisation(psp: &str, value: i64, success: bool) -> NotificationItem {
        serde_json::from_value(serde_json::json!({
            "amount": {"currency": "USD", "value": value},
            "eventCode": "AUTHORISATION",
            "merchantAccountCode": "PayonceTest",
            "pspReference": psp,
            "success": if success { "true" } else { "false" },
        }))
        .unwrap_or_else(|e| unreachable!("a valid notification item: {e}"))
    }

    /// What `verdict` decided, as a word and the report it would apply.
    fn decided(status: Status, external_ref: Option<&str>, item: &NotificationItem) -> String {
        let mut op = unknown_since(1_000);
        op.status = status;
        op.external_ref = external_ref.map(str::to_string);
        match verdict(&op, item, "evt_1") {
            Verdict::Apply(Report::Succeeded(paid)) => {
                format!("apply succeeded {}", paid.reference)
            }
            Verdict::Apply(Report::Failed(_)) => "apply failed".into(),
            Verdict::Apply(Report::Mismatch { paid, .. }) => format!("apply mismatch paid={paid}"),
            Verdict::Apply(Report::Recreated(paid)) => {
                format!("apply recreated {}", paid.reference)
            }
            Verdict::Nudge => "nudge".into(),
            Verdict::Defer(_) => "defer".into(),
            Verdict::Close(_) => "close".into(),
            Verdict::Unproven(_) => "unproven".into(),
        }
    }

    #[test]
    fn a_notification_is_weighed_against_its_operation_as_the_module_says() {
        let paid = authorisation("PSP1", 2048, true);
        let refused = authorisation("PSP1", 2048, false);
        let other_amount = authorisation("PSP1", 999, true);
        let table = [
            // Named by the operation's own reference: the notification settles it.
            (Status::Unknown, Some("PSP1"), &paid, "apply succeeded PSP1"),
            (Status::Unknown, Some("PSP1"), &refused, "apply failed"),
            // Not named: an unknown operation is nudged, an in-flight one read again later.
            (Status::Unknown, None, &paid, "nudge"),
            (Status::Executing, None, &paid, "defer"),
            (Status::Ready, None, &paid, "defer"),
            // Money for a row that is not paid is weighed, never dropped.
            (Status::Failed, None, &paid, "apply succeeded PSP1"),
            (Status::Cancelled, None, &paid, "apply succeeded PSP1"),
            // An unsuccessful one not naming the row changes nothing.
            (Status::Failed, None, &refused, "close"),
            (Status::Executing, None, &refused, "close"),
            // Another amount, or a second paid reference on a succeeded row: a contradiction.
            (
                Status::Unknown,
                Some("PSP1"),
                &other_amount,
                "apply mismatch paid=true",
            ),
            (
                Status::Succeeded,
                Some("PSP0"),
                &paid,
                "apply mismatch paid=true",
            ),
            (Status::Succeeded, Some("PSP0"), &refused, "close"),
        ];
        for (status, reference, item, expected) in table {
            assert_eq!(
                decided(status, reference, item),
                expected,
                "{status:?} holding {reference:?}, notification success={}",
                item.success
            );
        }
    }

    #[test]
    fn a_notification_for_an_operation_never_submitted_is_unproven_whatever_it_says() {
        for status in [
            Status::AwaitingApproval,
            Status::Cancelled,
            Status::Rejected,
        ] {
            for item in [
                authorisation("PSPMADEUP0000001", 2048, true),
                authorisation("PSPMADEUP0000001", 999, true),
                authorisation("PSPMADEUP0000001", 2048, false),
            ] {
                let mut op = unknown_since(1_000);
                op.status = status;
                op.external_ref = None;
                op.first_submitted_at = None;
                let Verdict::Unproven(why) = verdict(&op, &item, "evt_1") else {
                    panic!("{status:?}: not unproven")
                };
                assert!(why.contains("never submitted"), "{why}");
            }
        }
    }

    #[test]
    fn rechecks_back_off_to_their_limit() {
        assert_eq!(recheck_after(0), NOTIFICATION_RECHECK);
        assert_eq!(recheck_after(1), NOTIFICATION_RECHECK * 2);
        assert_eq!(recheck_after(1_000), NOTIFICATION_RECHECK_MAX);
    }
}

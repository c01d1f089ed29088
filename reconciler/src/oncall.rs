//! On-call commands: list operations by state and age, show one with its full history and the
//! processor's view (a payment with its refunds beside it, a refund with its payment), resolve one
//! by hand with a mandatory reason. Tables by default, JSON on request.

use payonce_core::clock::Timestamp;
use payonce_core::details::OperationKind;
use payonce_core::id::OperationId;
use payonce_core::state::Status;
use payonce_ledger::refunds::RefundTotals;
use payonce_ledger::{
    Inspection, Ledger, LedgerError, ListFilter, Operation, Recovery, Refunds, Resolution, Resolve,
};
use payonce_processor::{FoundStatus, LookupOutcome, Processors, operation};
use serde_json::json;

/// Most refunds `show` lists beside a payment (oldest first); the totals count them all.
pub const REFUNDS_SHOWN_MAX: u32 = 100;
/// Most lost rows `list` shows (the newest).
pub const LOST_ROWS_SHOWN_MAX: u32 = 20;
/// How long after a worker learned of a lost row `list` shows it.
pub const LOST_ROWS_SHOWN_FOR: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3_600);
/// How far before an operation's creation `show`'s lookup starts (clock skew between us and the
/// processor; the sweep's is `ReconcilerConfig::lookup_skew`, the same by default).
pub const SHOW_LOOKUP_SKEW: std::time::Duration = std::time::Duration::from_secs(300);

/// How output is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Aligned columns for a terminal.
    Table,
    /// One JSON document.
    Json,
}

fn age(now: Timestamp, then: Timestamp) -> String {
    let s = now.saturating_sub(then).as_secs();
    match s {
        0..=119 => format!("{s}s"),
        120..=7_199 => format!("{}m", s / 60),
        7_200..=172_799 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// Renders rows as aligned columns.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect::<Vec<_>>()
            .join("  ")
    };
    let mut out = line(headers.to_vec()).trim_end().to_string();
    out.push('\n');
    for row in rows {
        out.push_str(line(row.iter().map(String::as_str).collect()).trim_end());
        out.push('\n');
    }
    out
}

/// Lists operations in `statuses` (default: the ones that may need a look) older than `min_age_s`.
pub async fn list(
    ledger: &dyn Inspection,
    statuses: Vec<Status>,
    min_age_s: i64,
    limit: u32,
    now: Timestamp,
    format: Format,
) -> Result<String, LedgerError> {
    let statuses = if statuses.is_empty() {
        vec![Status::Executing, Status::Unknown, Status::NeedsAttention]
    } else {
        statuses
    };
    let filter = ListFilter {
        statuses,
        // `min_age_s` may be negative (a cut-off in the future: everything up to now, inclusive).
        updated_before: Some(Timestamp::from_millis(
            now.as_millis()
                .saturating_sub(min_age_s.saturating_mul(1000)),
        )),
        tenant: None,
        limit,
    };
    let ops = ledger.list(&filter).await?;
    let lost: Vec<_> = ledger
        .recent_lost_rows(LOST_ROWS_SHOWN_MAX)
        .await?
        .into_iter()
        .filter(|l| l.found_at + LOST_ROWS_SHOWN_FOR > now)
        .collect();
    Ok(match format {
        Format::Json => json!({ "operations": ops, "lost_rows": lost }).to_string(),
        Format::Table if !lost.is_empty() => {
            let rows: Vec<Vec<String>> = lost
                .iter()
                .map(|l| {
                    vec![
                        l.operation.to_string(),
                        l.reference.clone(),
                        age(now, l.found_at),
                        l.found_by.clone(),
                    ]
                })
                .collect();
            format!(
                "{}\nPaid by a row the ledger had lost (the processor replayed the first \
                 submission; money right, the loss to investigate: runbook \"Lost rows\"):\n{}",
                list_table(&ops, now),
                table(&["ID", "REFERENCE", "AGE", "FOUND BY"], &rows)
            )
        }
        Format::Table => list_table(&ops, now),
    })
}

/// The operations of [`list`] as a table.
fn list_table(ops: &[payonce_ledger::Operation], now: Timestamp) -> String {
    let rows: Vec<Vec<String>> = ops
        .iter()
        .map(|o| {
            vec![
                o.id.to_string(),
                o.tenant.to_string(),
                o.details.kind().as_str().to_string(),
                o.status.as_str().to_string(),
                age(now, o.updated_at),
                o.attempt.to_string(),
                o.details.money().display(),
                o.details.invoice().to_string(),
                o.external_ref.clone().unwrap_or_default(),
                o.failure_message.clone().unwrap_or_default(),
            ]
        })
        .collect();
    table(
        &[
            "ID",
            "TENANT",
            "KIND",
            "STATUS",
            "AGE",
            "ATTEMPT",
            "AMOUNT",
            "INVOICE",
            "REFERENCE",
            "REASON",
        ],
        &rows,
    )
}

/// Shows one operation: the row, every event, and what its own processor says now (asked only
/// through that processor's adapter: with `processors` not configured for it, nothing is asked).
pub async fn show(
    ledger: &dyn Ledger,
    processors: Option<&Processors>,
    id: &OperationId,
    now: Timestamp,
    format: Format,
) -> Result<String, LedgerError> {
    let op = ledger.get_unscoped(id).await?;
    let events = ledger.events_unscoped(id).await?;
    let processor = processors
        .and_then(|p| p.route(&op).ok())
        .map(|a| a.as_ref());
    let processor_view = match processor {
        // A payment or a refund, as its kind says.
        Some(p) => {
            let created_after = op.created_at.saturating_sub_span(SHOW_LOOKUP_SKEW);
            Some(operation::lookup(p, &op, created_after).await)
        }
        None => None,
    };
    let refunds = refunds_of(ledger, &op).await?;
    Ok(match format {
        Format::Json => json!({
            "operation": op,
            "events": events,
            "processor": processor_view,
            "refunds": refunds.as_ref().map(|(totals, list)| json!({
                "totals": totals,
                "refundable_minor": totals.refundable_minor(),
                "refunds": list,
            })),
        })
        .to_string(),
        Format::Table => {
            let mut out = describe(&op, now);
            if let Some((totals, list)) = &refunds {
                out.push_str(&refunds_table(&op, totals, list, now));
            }
            out.push_str("\nEvents:\n");
            let rows: Vec<Vec<String>> = events
                .iter()
                .map(|e| {
                    vec![
                        age(now, e.at),
                        e.event.to_string(),
                        e.actor.clone(),
                        format!(
                            "{} -> {}",
                            e.from_status.as_deref().unwrap_or("-"),
                            e.to_status
                        ),
                        e.attempt.to_string(),
                        e.detail.clone().unwrap_or_default(),
                    ]
                })
                .collect();
            out.push_str(&table(
                &["AGO", "EVENT", "ACTOR", "TRANSITION", "ATTEMPT", "DETAIL"],
                &rows,
            ));
            if let Some(view) = &processor_view {
                out.push_str(&format!("\nProcessor says: {}\n", summarize(view)));
            }
            out
        }
    })
}

/// A payment's refund totals and its first [`REFUNDS_SHOWN_MAX`] refunds; `None` for a refund.
async fn refunds_of(
    ledger: &dyn Refunds,
    op: &Operation,
) -> Result<Option<(RefundTotals, Vec<Operation>)>, LedgerError> {
    match op.details.kind() {
        OperationKind::Refund => Ok(None),
        OperationKind::Payment => {
            let totals = ledger.refund_totals(&op.tenant, &op.id).await?;
            let list = ledger
                .refunds_of(&op.tenant, &op.id, REFUNDS_SHOWN_MAX)
                .await?;
            Ok(Some((totals, list)))
        }
    }
}

/// A total in the payment's currency, as people read it.
fn money_of(payment: &Operation, amount_minor: i64) -> String {
    payment
        .details
        .money()
        .currency()
        .display_total(amount_minor)
}

/// The refunds beside their payment: totals, then one row each.
fn refunds_table(
    payment: &Operation,
    totals: &RefundTotals,
    list: &[Operation],
    now: Timestamp,
) -> String {
    let mut out = format!(
        "  refunds {n}: refunded {refunded}, in flight {in_flight}, refundable {left}\n",
        n = totals.refund_count,
        refunded = money_of(payment, totals.refunded_minor),
        in_flight = money_of(payment, totals.in_flight_minor),
        left = money_of(payment, totals.refundable_minor()),
    );
    if list.is_empty() {
        return out;
    }
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|r| {
            vec![
                r.id.to_string(),
                r.status.as_str().to_string(),
                r.details.money().display(),
                r.details
                    .refund_of()
                    .map(|of| of.reason().as_str().to_string())
                    .unwrap_or_default(),
                r.external_ref.clone().unwrap_or_default(),
                age(now, r.updated_at),
            ]
        })
        .collect();
    out.push_str("\nRefunds:\n");
    out.push_str(&table(
        &[
            "REFUND",
            "STATUS",
            "AMOUNT",
            "REASON",
            "REFERENCE",
            "UPDATED",
        ],
        &rows,
    ));
    out
}

/// One line on-call can act on; the whole processor object is in `--json`.
fn summarize(lookup: &LookupOutcome) -> String {
    match lookup {
        LookupOutcome::Found { reference, status } => match status {
            FoundStatus::Succeeded { result } => format!(
                "{reference} succeeded ({} {})",
                result["amount"],
                result["currency"].as_str().unwrap_or("?")
            ),
            FoundStatus::Failed { code, message } => {
                format!("{reference} failed: {code}: {message}")
            }
            FoundStatus::Pending { processor_status } => {
                format!("{reference} is still {processor_status}; it will be polled")
            }
        },
        LookupOutcome::NotFound { consistent: true } => {
            "no payment found (consistent lookup: it was never created)".to_string()
        }
        LookupOutcome::NotFound { consistent: false } => {
            "no payment found yet (the lookup may lag; this proves nothing)".to_string()
        }
        LookupOutcome::RateLimited { reason } => {
            format!("lookup rate limited by the processor; try again shortly: {reason}")
        }
        LookupOutcome::Unavailable { reason } => format!("lookup unavailable: {reason}"),
        LookupOutcome::Unmatched { object } => format!(
            "{} carries operation id {:?}, not this one's; the reconciler checks it against this operation",
            object.reference, object.operation_id
        ),
    }
}

fn describe(op: &Operation, now: Timestamp) -> String {
    let d = &op.details;
    let what = match d.refund_of() {
        None => "payment".to_string(),
        Some(of) => format!(
            "refund of payment {} ({}), reason {}",
            of.payment_operation(),
            of.payment_reference(),
            of.reason().as_str()
        ),
    };
    format!(
        "Operation {id}  ({status}, attempt {attempt}, updated {age} ago)\n  {what}\n  tenant {tenant}, business key {bk}\n  \
         {amount} from {customer} for invoice {invoice} via {pm}\n  processor {processor}, idempotency key {key}, submitted {n} time(s)\n  \
         reference {reference}, reason {reason}\n",
        id = op.id,
        status = op.status.as_str(),
        attempt = op.attempt,
        age = age(now, op.updated_at),
        tenant = op.tenant,
        bk = op.business_key,
        amount = d.money().display(),
        customer = d.customer(),
        invoice = d.invoice(),
        pm = d.payment_method(),
        // NULL: the row predates tenants' choices, or its tenant never chose.
        processor = op.processor.map_or("(the configured one)", |p| p.as_str()),
        key = op.idempotency_key,
        n = op.submit_count,
        reference = op.external_ref.as_deref().unwrap_or("none"),
        reason = op.failure_message.as_deref().unwrap_or("none"),
    )
}

/// Resolves an `unknown` or `needs_attention` operation by hand; the reason is mandatory and is
/// recorded as the actor's event.
pub async fn resolve(
    ledger: &dyn Recovery,
    id: &OperationId,
    resolution: Resolution,
    actor: &str,
    reason: &str,
    now: Timestamp,
    format: Format,
) -> Result<String, LedgerError> {
    let request = Resolve {
        id,
        resolution: &resolution,
        actor,
        reason,
    };
    let op = ledger.resolve(&request, now).await?;
    Ok(match format {
        Format::Json => json!({ "operation": op }).to_string(),
        Format::Table => format!(
            "{} is now {} (resolved by {actor}: {reason})\n",
            op.id,
            op.status.as_str()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_and_ages_read_naturally() {
        let t = table(
            &["A", "LONGER"],
            &[vec!["xxxx".into(), "y".into()], vec!["z".into(), "".into()]],
        );
        assert_eq!(t, "A     LONGER\nxxxx  y\nz\n");
        let at = Timestamp::from_millis;
        assert_eq!(age(at(10_000), at(5_000)), "5s");
        assert_eq!(age(at(600_000), at(0)), "10m");
        assert_eq!(age(at(10_800_000), at(0)), "3h");
        assert_eq!(age(at(0), at(10)), "0s");
    }

    #[test]
    fn the_processor_view_is_one_line_that_says_what_it_proves() {
        let paid = LookupOutcome::Found {
            reference: "pi_1".into(),
            status: FoundStatus::Succeeded {
                result: json!({"amount": 2048, "currency": "usd", "client_secret": "secret"}),
            },
        };
        assert_eq!(summarize(&paid), "pi_1 succeeded (2048 usd)");
        assert!(
            summarize(&LookupOutcome::NotFound { consistent: false }).contains("proves nothing")
        );
        assert!(summarize(&LookupOutcome::NotFound { consistent: true }).contains("never created"));
    }
}

//! Reads the processor's audit and the ledger after a soak and counts what matters: payments per
//! operation, duplicates, losses, contradictions, and how each operation reached its final state.

use crate::operations::{PlannedOp, TENANT};
use crate::report::{Path, SoakReport};
use anyhow::Context;
use payonce_core::id::TenantId;
use payonce_core::state::{Event, EventName, Status};
use payonce_ledger::SharedLedger;
use payonce_simulator::{Simulator, Wire, payment_audit};
use serde_json::Value;
use std::collections::HashMap;

/// The operation a row of the simulator's payment or refund audit was made for, as the processor
/// records it: on Stripe's wire the `payonce_operation_id` metadata, on Adyen's the `reference`
/// Adyen keeps for every payment and refund (its refund request carries no metadata). Empty when the
/// row names none.
pub fn operation_of(row: &Value, wire: Wire) -> &str {
    match wire {
        Wire::Stripe => row["metadata"]["payonce_operation_id"].as_str(),
        Wire::Adyen => row["reference"].as_str(),
    }
    .unwrap_or("")
}

/// Successful payments per operation id, from every page of `GET /_sim/audit/payments` (an Adyen
/// payment is `succeeded` there once authorised).
pub async fn successful_payments(
    http: &reqwest::Client,
    sim: &Simulator,
    wire: Wire,
) -> anyhow::Result<HashMap<String, usize>> {
    let rows = payment_audit::read_all(http, &sim.base_url(), payment_audit::PAGE_SIZE_MAX)
        .await
        .context("reading the simulator's payment audit")?;
    let mut paid: HashMap<String, usize> = HashMap::new();
    for p in rows.iter().filter(|p| p["status"] == "succeeded") {
        *paid.entry(operation_of(p, wire).to_string()).or_default() += 1;
    }
    Ok(paid)
}

/// Compares every planned operation's row and history with the processor's payments on `wire`.
pub async fn tally(
    http: &reqwest::Client,
    sim: &Simulator,
    wire: Wire,
    ledger: &SharedLedger,
    ops: &[PlannedOp],
) -> anyhow::Result<SoakReport> {
    let paid = successful_payments(http, sim, wire).await?;
    let tenant = TenantId::parse(TENANT).map_err(anyhow::Error::msg)?;
    let mut report = SoakReport::default();
    for op in ops {
        let row = ledger.get(&tenant, &op.id).await?;
        let events = ledger.events(&tenant, &op.id).await?;
        let payments = paid.get(op.id.as_str()).copied().unwrap_or(0);
        report.payments += payments;
        *report
            .statuses
            .entry(row.status.as_str().to_string())
            .or_default() += 1;
        if op.approved {
            report.approved += 1;
            report.duplicates += payments.saturating_sub(1);
        } else {
            report.unapproved += 1;
            report.duplicates += payments;
        }
        let honest_without_payment = matches!(
            row.status,
            Status::Failed
                | Status::Rejected
                | Status::NeedsAttention
                | Status::AwaitingApproval
                | Status::Cancelled
        );
        // Ambiguity the contract cannot resolve: a human decides, it is neither paid twice nor lost.
        if op.approved && row.status == Status::NeedsAttention {
            report.sent_to_human += 1;
            if payments > 0 {
                report.sent_to_human_paid += 1;
            }
            if row.external_ref.is_some() {
                report.sent_to_human_with_reference += 1;
            }
        }
        if op.approved && payments == 0 && !honest_without_payment {
            report.lost += 1;
        }
        if payments > 0 && !matches!(row.status, Status::Succeeded | Status::NeedsAttention) {
            report.mismatched += 1;
        }
        let last_to = events.last().map(|e| e.to_status.as_str());
        if last_to != Some(row.status.as_str()) {
            report.unexplained += 1;
        }
        if events
            .iter()
            .any(|e| crate::report::from_hint(&e.actor, e.detail.as_deref()))
        {
            report.notified += 1;
        }
        if events.iter().any(|e| {
            matches!(
                e.event,
                EventName::Event(Event::LeaseExpiredSubmitted | Event::LeaseExpiredUnsubmitted)
            )
        }) {
            report.recovered_after_crash += 1;
        }
        if row.status.is_terminal() && row.status != Status::AwaitingApproval {
            let into_final = events.iter().rev().find(|e| {
                e.to_status == row.status.as_str()
                    && e.from_status.as_deref() != Some(row.status.as_str())
            });
            if let Some(e) = into_final {
                let path = Path::of(e.from_status.as_deref(), &e.actor, e.detail.as_deref());
                *report.paths.entry(path).or_default() += 1;
            }
        }
    }
    Ok(report)
}

//! Refunds in the soak. While the chaos runs, one paid payment in `refund_every` gets refund
//! operations created and approved straight in the ledger (as the api does once a person of the
//! merchant approved them), by one of three plans: the whole payment; two refunds of 60 % created at
//! once (the ledger's guard must refuse exactly one); 30 % then the rest. The same workers execute
//! them under the same kills and faults. At the end the simulator's refunds are compared with the
//! ledger: none made twice, no payment over-refunded on either side, none lost or contradicted.

use crate::operations::{AMOUNT_MINOR, PlannedOp, TENANT};
pub use crate::report::RefundTally;
use anyhow::Context;
use payonce_core::clock::{Clock, SystemClock};
use payonce_core::details::{Details, RefundReason};
use payonce_core::id::{BusinessKey, OperationId, TenantId};
use payonce_core::state::Status;
use payonce_ledger::{LedgerError, NewApproval, NewOperation, Operation, SharedLedger};
use payonce_simulator::{Simulator, Wire};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// One approved payment in this many gets refunds, by default.
pub const REFUND_EVERY_DEFAULT: usize = 4;
/// How often payments waiting to be refunded are read again.
const POLL: Duration = Duration::from_millis(200);
/// The two racing refunds of the second plan: each 60 % of the payment, so only one fits.
const RACING_MINOR: i64 = AMOUNT_MINOR * 6 / 10;
/// The first refund of the third plan (30 %); the second takes the rest.
const PART_MINOR: i64 = AMOUNT_MINOR * 3 / 10;

/// What the refunder did.
#[derive(Debug, Clone, Default)]
pub struct RefundRun {
    /// Payments that were refunded (their operation ids).
    pub payments: Vec<OperationId>,
    /// Refund operations created (and approved).
    pub refunds: Vec<OperationId>,
    /// Refund creations the ledger's over-refund guard refused.
    pub refused_by_guard: usize,
    /// Refusals the plans call for (one per racing pair).
    pub refusals_expected: usize,
}

async fn create(
    ledger: &SharedLedger,
    tenant: &TenantId,
    payment: &Operation,
    key: String,
    amount: i64,
) -> anyhow::Result<Option<OperationId>> {
    let reference = payment
        .external_ref
        .as_deref()
        .context("a succeeded payment has a reference")?;
    let details = Details::refund(
        &payment.details,
        &payment.id,
        reference,
        amount,
        RefundReason::RequestedByCustomer,
    )
    .map_err(|e| anyhow::anyhow!("refund details: {e}"))?;
    let hash = details.hash();
    let now = SystemClock.now();
    let created = ledger
        .create_or_get(
            NewOperation::keyed(
                &payonce_core::intention::KeySecret::parse(crate::fleet::CHAOS_KEY_SECRET)?,
                tenant.clone(),
                BusinessKey::parse(&key).map_err(|e| anyhow::anyhow!("{e:?}"))?,
                details,
                "service:chaos".into(),
            ),
            now,
        )
        .await;
    let created = match created {
        Ok(c) => c,
        Err(LedgerError::OverRefund { .. }) => return Ok(None),
        Err(e) => return Err(e).context("creating a soak refund"),
    };
    ledger
        .approve(
            tenant,
            NewApproval {
                operation: created.operation.id.clone(),
                details_hash: hash,
                approved_by: "oncall:chaos".into(),
                method: "chaos".into(),
                expires_at: now + std::time::Duration::from_secs(86_400),
                priority: None,
            },
            now,
        )
        .await
        .context("approving a soak refund")?;
    Ok(Some(created.operation.id))
}

/// Refunds `payment` by plan `plan` (0, 1 or 2).
async fn refund(
    ledger: &SharedLedger,
    tenant: &TenantId,
    payment: &Operation,
    plan: usize,
    run: &mut RefundRun,
) -> anyhow::Result<()> {
    let key = |part: &str| format!("refund:{}:{part}", payment.id);
    let outcomes = match plan {
        0 => vec![create(ledger, tenant, payment, key("full"), AMOUNT_MINOR).await?],
        1 => {
            run.refusals_expected += 1;
            let (a, b) = tokio::join!(
                create(ledger, tenant, payment, key("a"), RACING_MINOR),
                create(ledger, tenant, payment, key("b"), RACING_MINOR)
            );
            vec![a?, b?]
        }
        _ => vec![
            create(ledger, tenant, payment, key("part"), PART_MINOR).await?,
            create(
                ledger,
                tenant,
                payment,
                key("rest"),
                AMOUNT_MINOR - PART_MINOR,
            )
            .await?,
        ],
    };
    for outcome in outcomes {
        match outcome {
            Some(id) => run.refunds.push(id),
            None => run.refused_by_guard += 1,
        }
    }
    run.payments.push(payment.id.clone());
    Ok(())
}

/// Waits for every chosen payment to settle and refunds the paid ones; gives up on the rest at
/// `deadline`. Runs beside the chaos, so refunds meet the same kills and faults as payments.
/// `refund_every == 0` refunds nothing.
pub async fn refund_some(
    pause: std::sync::Arc<tokio::sync::RwLock<()>>,
    ledger: SharedLedger,
    ops: Vec<PlannedOp>,
    refund_every: usize,
    deadline: Instant,
) -> anyhow::Result<RefundRun> {
    if refund_every == 0 {
        return Ok(RefundRun::default());
    }
    let tenant = TenantId::parse(TENANT).map_err(anyhow::Error::msg)?;
    let mut waiting: Vec<(usize, OperationId)> = ops
        .iter()
        .filter(|o| o.approved)
        .enumerate()
        .filter(|(i, _)| i % refund_every == refund_every - 1)
        .map(|(i, o)| ((i / refund_every) % 3, o.id.clone()))
        .collect();
    let mut run = RefundRun::default();
    while !waiting.is_empty() && Instant::now() < deadline {
        // Held for the round: a database restart waits for it and holds the next one off.
        let round = pause.read().await;
        let mut still = Vec::new();
        for (plan, id) in waiting {
            let payment = ledger.get(&tenant, &id).await?;
            match payment.status {
                Status::Succeeded => refund(&ledger, &tenant, &payment, plan, &mut run).await?,
                // Not paid (declined, or a human's case): nothing to refund.
                s if s.is_terminal() || s == Status::NeedsAttention => {}
                _ => still.push((plan, id)),
            }
        }
        waiting = still;
        drop(round);
        if !waiting.is_empty() {
            tokio::time::sleep(POLL).await;
        }
    }
    Ok(run)
}

/// Compares the refunder's operations with the simulator's refund audit on `wire`.
pub async fn tally(
    http: &reqwest::Client,
    sim: &Simulator,
    wire: Wire,
    ledger: &SharedLedger,
    run: &RefundRun,
) -> anyhow::Result<RefundTally> {
    let audit: serde_json::Value = http
        .get(format!("{}/_sim/audit/refunds", sim.base_url()))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let rows = audit["data"]
        .as_array()
        .context("refund audit has no data")?;
    let mut made: HashMap<&str, usize> = HashMap::new();
    for r in rows
        .iter()
        .filter(|r| r["status"] != "failed" && r["status"] != "canceled")
    {
        *made.entry(crate::tally::operation_of(r, wire)).or_default() += 1;
    }
    let tenant = TenantId::parse(TENANT).map_err(anyhow::Error::msg)?;
    let mut t = RefundTally::default();
    for id in &run.refunds {
        let row = ledger.get(&tenant, id).await?;
        if ledger
            .events(&tenant, id)
            .await?
            .iter()
            .any(|e| crate::report::from_hint(&e.actor, e.detail.as_deref()))
        {
            t.notified += 1;
        }
        if row.status == Status::NeedsAttention && row.external_ref.is_some() {
            t.sent_to_human_with_reference += 1;
        }
        let n = made.get(id.as_str()).copied().unwrap_or(0);
        t.at_processor += n;
        t.duplicated += n.saturating_sub(1);
        *t.statuses
            .entry(row.status.as_str().to_string())
            .or_default() += 1;
        let honest_without_refund = matches!(
            row.status,
            Status::Failed | Status::Rejected | Status::Cancelled | Status::NeedsAttention
        );
        if n == 0 && !honest_without_refund {
            t.lost += 1;
        }
        if n > 0 && !matches!(row.status, Status::Succeeded | Status::NeedsAttention) {
            t.mismatched += 1;
        }
    }
    for payment in &run.payments {
        let row = ledger.get(&tenant, payment).await?;
        let pi = row.external_ref.as_deref().unwrap_or("");
        let at_processor = audit["amount_by_payment_intent"][pi].as_i64().unwrap_or(0);
        let totals = ledger.refund_totals(&tenant, payment).await?;
        if at_processor > totals.payment_minor
            || totals.refunded_minor + totals.in_flight_minor > totals.payment_minor
        {
            t.over_refunded += 1;
        }
        if totals.refunded_minor != at_processor && totals.in_flight_minor == 0 {
            t.disagreements += 1;
        }
    }
    Ok(t)
}

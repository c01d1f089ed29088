//! Money the ledger does not know about. A ledger restored from an older backup, or an asynchronous
//! replica promoted without the primary's last commits, has forgotten operations the processor
//! already paid. Lookups start from a row, so nothing else would ever find them.
//!
//! The scan walks the processor's payments, then its refunds, created since watermarks kept in the
//! ledger (so a restored ledger comes back with older ones and the scan walks the lost period
//! again), and for each one that moved money and that payonce created (its metadata names an
//! operation):
//! - the row names it as paid, or holds it in flight (`executing`, `unknown`) or before a human
//!   (`needs_attention`): nothing to do;
//! - the row exists and says anything else: the fact is applied as a report (the state machine sends
//!   a contradiction to `needs_attention`, a payment nobody approved with the loudest alert);
//! - no row: the row is created again under the id the processor holds, from the details the
//!   payment carries (a refund: from its payment's row and the refund's amount and reason), and the
//!   payment kept on it ([`Report::Recreated`]), so it waits in `needs_attention` with one alert
//!   (this one) and one instruction: it was paid for its intention before the loss, so it is
//!   settled, never refunded. Upstream sending the same intention again with its approval settles
//!   it as succeeded by itself; other details under its business key are a conflict (or, if the
//!   business key is already back under another id, that row gets the fact);
//! - no row and not enough on the payment to make one (created before payonce sent the invoice and
//!   intention in metadata, or no key secret configured): counted and logged as an error.
//!
//! Every finding counts in `payonce_unknown_payments_total` and makes `sweep --once` exit 3.

use crate::evidence::report_of;
use crate::metrics::ReconcilerMetrics;
use payonce_core::clock::Timestamp;
use payonce_core::intention::{Intention, KeySecret};
use payonce_core::state::Status;
use payonce_ledger::{
    Applied, ApplyReport, LedgerError, NewOperation, Operation, Recovery, Report,
};
use payonce_processor::{
    FoundStatus, Processor, ProcessorKind, RecentPage, RecentQuery, ScannedPayment,
};
use serde::Serialize;
use std::time::Duration;

/// Most list pages one scan reads (100 payments each); a scan that needs more leaves the watermark
/// where it was, so the next one covers the same period again.
pub const SCAN_PAGES_MAX: usize = 1_000;
/// How far back the very first scan of a ledger looks (no watermark yet): Stripe's key retention.
pub const SCAN_LOOKBACK_DEFAULT: Duration = Duration::from_secs(24 * 60 * 60);
/// The actor of everything the scan writes.
pub const SCAN_ACTOR: &str = "reconciler: processor scan";

/// Limits of one scan.
#[derive(Debug, Clone)]
pub struct ScanLimits {
    /// Derives a recreated row's processor key; `None`: lost rows are reported, not recreated.
    pub key_secret: Option<KeySecret>,
    /// How far before the watermark a scan starts again: the processor's clock against ours.
    pub overlap: Duration,
    /// How far back a ledger's first scan looks.
    pub lookback: Duration,
    /// The fleet limiter: each page is a read.
    pub limiter: payonce_processor::limiter::SharedLimiter,
    /// Longest wait for a read permit; none in time ends the scan early.
    pub permit_wait_max: Duration,
    /// The processor of rows that name none (the process's configured one): a payment found at
    /// another processor than its row's is a contradiction, never applied as the row's payment.
    pub default_processor: ProcessorKind,
}

/// What one scan found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ScanReport {
    /// Paid payments read.
    pub scanned: u32,
    /// Payments whose row the ledger had lost, now back in `needs_attention`.
    pub recreated: u32,
    /// Payments whose row does not say so, now applied to it (`needs_attention` when it contradicts).
    pub unrecorded: u32,
    /// Payments for operations the ledger lacks and cannot recreate: only logged and counted.
    pub unrecoverable: u32,
    /// True if every page since the watermark was read and the watermark moved.
    pub complete: bool,
    /// Ledger errors that stopped a payment's check.
    pub errors: u32,
    /// One line per finding, naming the payment and the operation.
    pub found: Vec<String>,
}

impl ScanReport {
    /// Payments the ledger did not know about: each is an alert.
    pub fn findings(&self) -> u32 {
        self.recreated + self.unrecorded + self.unrecoverable
    }

    /// Adds the scan of another processor: complete only if both were.
    pub fn absorb(&mut self, other: ScanReport) {
        self.scanned += other.scanned;
        self.recreated += other.recreated;
        self.unrecorded += other.unrecorded;
        self.unrecoverable += other.unrecoverable;
        self.complete = self.complete && other.complete;
        self.errors += other.errors;
        self.found.extend(other.found);
    }
}

/// What a scan walks: the account's payments, then its refunds (each with its own watermark).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Listing {
    Payments,
    Refunds,
}

impl Listing {
    /// The watermark's name in `processor_scans`.
    fn watermark(self, processor: &str) -> String {
        match self {
            Listing::Payments => processor.to_string(),
            Listing::Refunds => format!("{processor}:refunds"),
        }
    }
}

/// One scan of the processor's payments and refunds since the ledger's watermarks.
pub async fn scan(
    ledger: &dyn Recovery,
    processor: &dyn Processor,
    metrics: &ReconcilerMetrics,
    limits: &ScanLimits,
    now: Timestamp,
) -> Result<ScanReport, LedgerError> {
    let mut report = ScanReport::default();
    // Payments first: a lost refund is made again from its payment's row.
    let payments = walk(
        ledger,
        processor,
        metrics,
        limits,
        now,
        Listing::Payments,
        &mut report,
    )
    .await?;
    let refunds = walk(
        ledger,
        processor,
        metrics,
        limits,
        now,
        Listing::Refunds,
        &mut report,
    )
    .await?;
    report.complete = payments && refunds;
    Ok(report)
}

/// Walks one listing from its watermark; true if it read every page and moved the watermark.
async fn walk(
    ledger: &dyn Recovery,
    processor: &dyn Processor,
    metrics: &ReconcilerMetrics,
    limits: &ScanLimits,
    now: Timestamp,
    listing: Listing,
    report: &mut ScanReport,
) -> Result<bool, LedgerError> {
    let name = listing.watermark(processor.contract().wire);
    let watermark = ledger
        .scan_watermark(&name)
        .await?
        .unwrap_or_else(|| now.saturating_sub_span(limits.lookback));
    let from = watermark.saturating_sub_span(limits.overlap);
    let created_gte_s = from.as_millis().div_euclid(1000);
    let errors_before = report.errors;
    let mut cursor: Option<String> = None;
    for _ in 0..SCAN_PAGES_MAX {
        if let Err(denied) = payonce_processor::limiter::acquire(
            limits.limiter.as_ref(),
            payonce_processor::limiter::Budget::Read,
            limits.permit_wait_max,
        )
        .await
        {
            tracing::warn!(%denied, ?listing, "processor scan stopped early: no read permit");
            return Ok(false);
        }
        let query = RecentQuery {
            created_gte_s,
            starting_after: cursor.as_deref(),
        };
        let page = match listing {
            Listing::Payments => processor.recent_payments(&query).await,
            Listing::Refunds => processor.recent_refunds(&query).await,
        };
        let (objects, next) = match page {
            RecentPage::Page { payments, next } => (payments, next),
            RecentPage::RateLimited { reason } | RecentPage::Unavailable { reason } => {
                tracing::warn!(%reason, ?listing, "processor scan stopped early; the watermark stays");
                return Ok(false);
            }
        };
        for object in objects {
            let found_at = ProcessorKind::parse(processor.contract().wire);
            if let Err(error) = check(ledger, metrics, limits, &object, found_at, now, report).await
            {
                report.errors += 1;
                tracing::warn!(reference = %object.object.reference, %error,
                    "processor scan could not check an object");
            }
        }
        match next {
            Some(next) => cursor = Some(next),
            None => {
                if report.errors > errors_before {
                    return Ok(false);
                }
                ledger.set_scan_watermark(&name, now, now).await?;
                return Ok(true);
            }
        }
    }
    tracing::warn!(
        ?listing,
        "processor scan read {SCAN_PAGES_MAX} pages without reaching the watermark; it stays"
    );
    Ok(false)
}

async fn check(
    ledger: &dyn Recovery,
    metrics: &ReconcilerMetrics,
    limits: &ScanLimits,
    payment: &ScannedPayment,
    found_at: Option<ProcessorKind>,
    now: Timestamp,
    report: &mut ScanReport,
) -> Result<(), LedgerError> {
    let object = &payment.object;
    // Only money that moved matters: anything else cannot be a second charge.
    if !matches!(object.status, FoundStatus::Succeeded { .. }) {
        return Ok(());
    }
    // Not created by payonce (or not an id payonce issues): not this ledger's to judge.
    let Some(id) = object
        .operation_id
        .as_deref()
        .and_then(|raw| payonce_core::id::OperationId::parse(raw).ok())
    else {
        return Ok(());
    };
    report.scanned += 1;
    let (op, recreated) = match ledger.get_unscoped(&id).await {
        Ok(op) => (op, false),
        Err(LedgerError::NotFound) => {
            match recreate(ledger, limits, payment, &id, found_at, now).await? {
                Some(found) => found,
                None => {
                    report.unrecoverable += 1;
                    metrics.unknown_payments.inc();
                    report.found.push(format!(
                    "{}: paid for {id}, which the ledger does not have; not recreated (no intention \
                     metadata or no key secret): resolve by hand",
                    object.reference
                ));
                    tracing::error!(operation_id = %id, reference = %object.reference,
                    "ALERT: the processor holds a payment for an operation the ledger does not have, \
                     and its row cannot be recreated (no intention metadata or no key secret)");
                    return Ok(());
                }
            }
        }
        Err(e) => return Err(e),
    };
    let bound = op.processor.unwrap_or(limits.default_processor);
    let applied = match found_at {
        Some(at) if at != bound && op.status != Status::NeedsAttention => {
            // Money for this operation at a processor it was never bound to: a human sees both
            // facts (its refunds would otherwise go to the processor the row names).
            let mismatch = Report::Mismatch {
                reference: object.reference.clone(),
                paid: true,
                detail: format!(
                    "{} paid at {at} for an operation bound to {bound}",
                    object.reference
                ),
            };
            let request = ApplyReport {
                id: &op.id,
                report: &mismatch,
                source: SCAN_ACTOR,
            };
            Some(ledger.apply_report(&request, now).await?)
        }
        _ => apply(ledger, &op, payment, recreated, now).await?,
    };
    if matches!(applied, Some(Applied::PaymentWithoutApproval)) {
        metrics.payments_without_approval.inc();
    }
    let line = if recreated {
        report.recreated += 1;
        tracing::error!(operation_id = %id, reference = %object.reference,
            "ALERT: the processor holds a payment for an operation the ledger had lost \
             (restored or failed over?); its row is back in needs_attention");
        format!(
            "{}: paid for {id}, which the ledger had lost; recreated in {}",
            object.reference,
            status_after(ledger, &op).await
        )
    } else if let Some(
        applied @ (Applied::PaymentWithoutApproval | Applied::Conflict | Applied::Moved(_)),
    ) = applied
    {
        report.unrecorded += 1;
        tracing::error!(operation_id = %op.id, reference = %object.reference, ?applied,
            "ALERT: the processor holds a payment its ledger row did not record");
        format!(
            "{}: paid, but {} said {}: {applied:?}",
            object.reference,
            op.id,
            op.status.as_str()
        )
    } else {
        return Ok(());
    };
    metrics.unknown_payments.inc();
    report.found.push(line);
    Ok(())
}

/// The row's state now (for the report line), or why it could not be read.
async fn status_after(ledger: &dyn Recovery, op: &Operation) -> &'static str {
    match ledger.get_unscoped(&op.id).await {
        Ok(now) => now.status.as_str(),
        Err(_) => "an unreadable state",
    }
}

/// Applies a paid object to the row it belongs to, unless the row already says it or someone is on
/// it (`None`: nothing applied).
async fn apply(
    ledger: &dyn Recovery,
    op: &Operation,
    payment: &ScannedPayment,
    recreated: bool,
    now: Timestamp,
) -> Result<Option<Applied>, LedgerError> {
    let object = &payment.object;
    match op.status {
        // In flight: the worker or the reconciler's lookups record it; a human already has it.
        Status::Executing | Status::Unknown | Status::NeedsAttention => return Ok(None),
        Status::Succeeded if op.external_ref.as_deref() == Some(object.reference.as_str()) => {
            return Ok(None);
        }
        Status::AwaitingApproval
        | Status::Ready
        | Status::Succeeded
        | Status::Failed
        | Status::Rejected
        | Status::Cancelled => {}
    }
    let found = match report_of(op, object) {
        None => return Ok(None),
        // The row was made from this very payment: one alert, one instruction (settle it).
        Some(Report::Succeeded(paid)) if recreated => Report::Recreated(paid),
        Some(found) => found,
    };
    let request = ApplyReport {
        id: &op.id,
        report: &found,
        source: SCAN_ACTOR,
    };
    Ok(Some(ledger.apply_report(&request, now).await?))
}

/// The lost row made again from what the payment carries, bound to the processor it was `found_at`
/// (a refund: to its payment's): `Some((row, inserted))`, where the row is the one holding the
/// business key now; `None` when the payment does not carry enough.
async fn recreate(
    ledger: &dyn Recovery,
    limits: &ScanLimits,
    payment: &ScannedPayment,
    id: &payonce_core::id::OperationId,
    found_at: Option<ProcessorKind>,
    now: Timestamp,
) -> Result<Option<(Operation, bool)>, LedgerError> {
    let (Some(secret), Some(intention)) = (
        limits.key_secret.as_ref(),
        payment.object.intention.as_ref(),
    ) else {
        return Ok(None);
    };
    let (Ok(tenant), Ok(business_key)) = (
        payonce_core::id::TenantId::parse(&intention.tenant),
        payonce_core::id::BusinessKey::parse(&intention.business_key),
    ) else {
        return Ok(None);
    };
    let details = match (&payment.details, &payment.payment_operation) {
        (Some(details), _) => details.clone(),
        (None, Some(paid)) => match refund_details(ledger, payment, paid).await? {
            Some(details) => details,
            None => return Ok(None),
        },
        (None, None) => return Ok(None),
    };
    let details_hash = details.hash();
    if details_hash.as_str() != intention.details_hash {
        // The object's fields do not give back the approved details: a row made from them would
        // derive another key. Reported instead.
        return Ok(None);
    }
    let idempotency_key = secret.key_for(&Intention {
        tenant: &tenant,
        business_key: &business_key,
        generation: 0,
    });
    let new = NewOperation {
        id: id.clone(),
        tenant,
        business_key,
        details,
        actor: SCAN_ACTOR.into(),
        idempotency_key,
        processor: found_at,
        // Recreated already paid (or refunded): no worker claims it.
        priority: payonce_core::priority::Priority::Bulk,
        not_before: None,
    };
    match ledger.recreate(new, now).await {
        Ok(created) => Ok(Some((created.operation, created.inserted))),
        // The business key is back under other details: that row gets the (contradicting) fact.
        Err(LedgerError::Conflict { existing }) => {
            Ok(Some((ledger.get_unscoped(&existing).await?, false)))
        }
        // The refund guard refuses it (the payment's other refunds already hold its money): a
        // human must see both.
        Err(LedgerError::OverRefund { .. } | LedgerError::NotRefundable { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A lost refund's details, made from its payment's row as the api made them; `None` when the
/// payment's row is gone too or the Refund does not carry what they need.
async fn refund_details(
    ledger: &dyn Recovery,
    refund: &ScannedPayment,
    payment_operation: &payonce_core::id::OperationId,
) -> Result<Option<payonce_core::details::Details>, LedgerError> {
    let payment = match ledger.get_unscoped(payment_operation).await {
        Ok(payment) => payment,
        Err(LedgerError::NotFound) => return Ok(None),
        Err(e) => return Err(e),
    };
    let object = &refund.object;
    let reason = object
        .object
        .get("reason")
        .and_then(serde_json::Value::as_str)
        .and_then(|raw| payonce_core::details::RefundReason::parse(raw).ok());
    let (Some(reason), Some(amount), Some(reference)) = (
        reason,
        object.amount_minor,
        object.payment_reference.as_deref(),
    ) else {
        return Ok(None);
    };
    Ok(payonce_core::details::Details::refund(
        &payment.details,
        &payment.id,
        reference,
        amount,
        reason,
    )
    .ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_finding_is_an_alert() {
        let report = ScanReport {
            recreated: 1,
            unrecorded: 2,
            unrecoverable: 3,
            ..ScanReport::default()
        };
        assert_eq!(report.findings(), 6);
        assert_eq!(ScanReport::default().findings(), 0);
    }
}

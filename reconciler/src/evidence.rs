//! Evidence before trust: a stored webhook is a hint that the processor has news about an
//! operation. Before anything changes, the object the hint names is retrieved from the processor
//! and its amount, currency, operation id and customer (for a refund: the refunded payment) are checked
//! against the operation; only the
//! retrieved object's facts are applied, through the same fenced report path as every lookup. A
//! lookup by reference that retrieves an object not carrying its operation's id goes through the same
//! check ([`report_of`], from the sweep).
//!
//! - matches: its status is applied (succeeded, failed; still processing: nothing);
//! - differs, or money moved for an operation nobody approved: `needs_attention` with both facts
//!   and an alert distinct from ordinary escalations;
//! - carries another operation's id than the hint named: checked against, and applied to, that
//!   operation; the named one is left untouched and the hint closed saying so, with an alert;
//! - no such object: nothing is applied (a hint is not evidence), the hint is closed with an alert;
//! - the processor cannot be asked: the hint stays pending and is retried with backoff.
//!
//! The reconciler runs this every sweep, so a webhook takes effect within one sweep interval.
//! Adyen's notifications, which cannot be retrieved by id, are checked against the operation
//! instead ([`notification`]).

pub mod notification;

use crate::metrics::ReconcilerMetrics;
use futures_util::stream::{self, StreamExt};
use payonce_core::clock::Timestamp;
use payonce_core::details::OperationKind;
use payonce_core::id::OperationId;
use payonce_core::state::Status;
use payonce_ledger::{
    Applied, ApplyReport, Declined, LedgerError, Operation, Paid, ProcessorEventKey, Recovery,
    Report, StoredProcessorEvent,
};
use payonce_processor::stripe::webhook::{object_status_of, reference_of};
use payonce_processor::{FoundStatus, ProcessorKind, ProcessorObject, Processors, Retrieved};
use std::time::Duration;

/// Limits of one pass over pending hints.
#[derive(Debug, Clone)]
pub struct HintLimits {
    /// Most hints checked per pass.
    pub batch_size: u32,
    /// First delay before retrying a hint whose retrieval failed; doubles per try.
    pub backoff_base: Duration,
    /// Longest delay between tries.
    pub backoff_max: Duration,
    /// The fleet limiter: a retrieval is a read, drawn from the same budget as lookups.
    pub limiter: payonce_processor::limiter::SharedLimiter,
    /// Longest wait for a read permit; none in time keeps the hint for a later pass.
    pub permit_wait_max: Duration,
    /// Hints checked at once (each retrieval still takes a read permit from the fleet limiter);
    /// zero is taken as one.
    pub concurrency: usize,
    /// How long one call keeps taking further full batches (the sweep's interval: a backlog is
    /// worked down within the sweep instead of one batch per interval).
    pub pass_budget: Duration,
}

/// Most hints one bulk statement closes as known
/// ([`HintChecks::close_known_hints`](payonce_ledger::HintChecks::close_known_hints)).
pub const KNOWN_HINTS_PER_STATEMENT: u32 = 1_000;

/// Hints checked at once by default: one at a time fell behind for good at 50 payments/s (a
/// retrieval each, about 25 ms), so the pass overlaps their round trips like the sweep does.
pub const HINT_CONCURRENCY_DEFAULT: usize = 16;

/// What one pass over pending hints did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct HintReport {
    /// Hints whose retrieved object matched and was applied (or already known).
    pub applied: u32,
    /// Hints left pending: the processor could not be asked.
    pub deferred: u32,
    /// Hints closed without a change (no outcome yet, not ours, unreadable).
    pub closed: u32,
    /// Retrieved objects that contradict the operation: now `needs_attention`.
    pub mismatched: u32,
    /// Payments for operations nobody approved: now `needs_attention`, the loudest alert.
    pub without_approval: u32,
    /// Hints naming an object the processor does not have: nothing applied.
    pub unproven: u32,
    /// Hints naming another operation than the one the object carries: checked against and applied to
    /// the object's operation (counted above too), the named one left untouched.
    pub misnamed: u32,
    /// Hints that agree with what the row already says (succeeded with the same reference): closed
    /// without a processor read.
    pub known: u32,
    /// Ledger errors that left a hint pending.
    pub errors: u32,
}

impl HintReport {
    /// Adds one hint's report to this pass's.
    fn absorb(&mut self, one: HintReport) {
        self.applied += one.applied;
        self.deferred += one.deferred;
        self.closed += one.closed;
        self.mismatched += one.mismatched;
        self.without_approval += one.without_approval;
        self.unproven += one.unproven;
        self.misnamed += one.misnamed;
        self.known += one.known;
        self.errors += one.errors;
    }
}

/// Why a retrieved object is not this operation's approved payment or refund; empty when it is.
/// Both: operation id in metadata, amount, currency. A payment: its customer, and not a refund. A
/// refund: the refunded payment's reference (a Refund names no customer, so none is compared).
pub fn differences(op: &Operation, object: &ProcessorObject) -> Vec<String> {
    let money = op.details.money();
    let mut diffs = Vec::new();
    // An object with intention metadata is this operation's when it carries its intention (tenant,
    // business key, details): the operation id is derived from the tenant and business key, so a
    // ledger that lost a row and got the business key back with other details shares it. One from
    // before intention metadata is this operation's when it names it.
    match &object.intention {
        Some(i) if !i.is_of(op) => diffs.push(format!(
            "intention (tenant {}, business key {}, details {}) at the processor, (tenant {}, \
             business key {}, details {}) approved",
            i.tenant,
            i.business_key,
            i.details_hash,
            op.tenant,
            op.business_key,
            op.details_hash.as_str()
        )),
        Some(_) => {}
        None if object.operation_id.as_deref() != Some(op.id.as_str()) => diffs.push(format!(
            "operation id {:?} at the processor, {} approved",
            object.operation_id, op.id
        )),
        None => {}
    }
    if object.amount_minor != Some(money.amount_minor()) {
        diffs.push(format!(
            "amount {:?} at the processor, {} approved",
            object.amount_minor,
            money.amount_minor()
        ));
    }
    if object.currency.as_deref() != Some(money.currency().code()) {
        diffs.push(format!(
            "currency {:?} at the processor, {} approved",
            object.currency,
            money.currency().code()
        ));
    }
    match op.details.kind() {
        OperationKind::Payment => {
            if object.customer.as_deref() != Some(op.details.customer()) {
                diffs.push(format!(
                    "customer {:?} at the processor, {} approved",
                    object.customer,
                    op.details.customer()
                ));
            }
            if let Some(payment) = &object.payment_reference {
                diffs.push(format!(
                    "a refund of {payment} at the processor, a payment approved"
                ));
            }
        }
        OperationKind::Refund => {
            let approved = op.details.refund_of().map(|of| of.payment_reference());
            if object.payment_reference.as_deref() != approved {
                diffs.push(format!(
                    "refund of {:?} at the processor, of {approved:?} approved",
                    object.payment_reference
                ));
            }
        }
    }
    diffs
}

/// The report the retrieved object supports, if any (`None`: still processing, nothing to apply).
pub fn report_of(op: &Operation, object: &ProcessorObject) -> Option<Report> {
    let diffs = differences(op, object);
    if !diffs.is_empty() {
        return Some(Report::Mismatch {
            reference: object.reference.clone(),
            paid: matches!(object.status, FoundStatus::Succeeded { .. }),
            detail: diffs.join("; "),
        });
    }
    match &object.status {
        FoundStatus::Succeeded { .. } => Some(Report::Succeeded(Paid {
            reference: object.reference.clone(),
            result: object.object.clone(),
        })),
        FoundStatus::Failed { code, message } => Some(Report::Failed(Declined {
            code: code.clone(),
            message: message.clone(),
            reference: Some(object.reference.clone()),
        })),
        FoundStatus::Pending { .. } => None,
    }
}

fn backoff(limits: &HintLimits, checks: i64) -> Duration {
    let exp = u32::try_from(checks.clamp(0, 20)).unwrap_or(20);
    limits
        .backoff_base
        .saturating_mul(1_u32 << exp)
        .min(limits.backoff_max)
}

/// Checks every due pending hint once: retrieve, compare, apply what the processor says.
pub async fn check_hints(
    ledger: &dyn Recovery,
    processors: &Processors,
    metrics: &ReconcilerMetrics,
    limits: &HintLimits,
    now: Timestamp,
) -> Result<HintReport, LedgerError> {
    let mut report = HintReport::default();
    let started = std::time::Instant::now();
    // The steady day's common case first, in bulk: a hint that says what its row already says
    // (the worker recorded the payment before the webhook arrived) is closed by one statement per
    // KNOWN_HINTS_PER_STATEMENT oldest due hints, with no read; one check per hint capped a
    // reconciler near 3,100/s.
    while started.elapsed() < limits.pass_budget {
        match ledger
            .close_known_hints(now, KNOWN_HINTS_PER_STATEMENT)
            .await
        {
            Ok(n) => {
                report.known = report
                    .known
                    .saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
                metrics.hints_known.inc_by(n);
                // None of the oldest agree: those are for the checks one by one below.
                if n == 0 {
                    break;
                }
            }
            Err(error) => {
                // Each hint is still checked on its own below.
                tracing::warn!(%error, "known webhook hints could not be closed in bulk");
                break;
            }
        }
    }
    // One batch a sweep capped the checks at batch / interval (200 per 5 s: 40/s, behind for good
    // at 50 payments/s): full batches are taken one after another within the pass budget. A pass
    // with an error stops it (that hint is still due and would come back at once).
    loop {
        let hints = ledger
            .pending_processor_events(now, limits.batch_size)
            .await?;
        let full = hints.len() >= usize::try_from(limits.batch_size).unwrap_or(usize::MAX);
        let pass = check_batch(ledger, processors, metrics, limits, hints, now).await;
        let errors = pass.errors;
        report.absorb(pass);
        if !full || errors > 0 || started.elapsed() >= limits.pass_budget {
            break;
        }
    }
    let (backlog, oldest) = ledger.processor_event_backlog().await?;
    metrics.hint_backlog.set(backlog);
    metrics.hint_backlog_oldest_age_s.set(oldest.map_or(0, |t| {
        i64::try_from(now.saturating_sub(t).as_secs()).unwrap_or(i64::MAX)
    }));
    Ok(report)
}

/// Checks one batch of due hints, `limits.concurrency` at a time.
async fn check_batch(
    ledger: &dyn Recovery,
    processors: &Processors,
    metrics: &ReconcilerMetrics,
    limits: &HintLimits,
    hints: Vec<StoredProcessorEvent>,
    now: Timestamp,
) -> HintReport {
    let mut report = HintReport::default();
    // Owned hints and `move` blocks, as in the sweep: a stream over borrowed items would make the
    // pass's future not provably `Send`.
    let mut checks = stream::iter(hints)
        .map(move |hint| async move {
            let mut one = HintReport::default();
            if let Err(error) =
                check_one(ledger, processors, metrics, limits, &hint, now, &mut one).await
            {
                // Left pending: the next pass tries again.
                one.errors += 1;
                tracing::warn!(event_id = %hint.event_id, %error, "webhook hint could not be checked");
            }
            one
        })
        .buffer_unordered(limits.concurrency.max(1));
    while let Some(one) = checks.next().await {
        report.absorb(one);
    }
    report
}

/// Closes `hint`, applying nothing, when it comes from another processor than the one `op` is
/// bound to: a Stripe webhook never applies to an Adyen operation, nor an Adyen notification to a
/// Stripe one. True if it was closed so. (A signed hint from the other processor naming the
/// operation means that processor holds something for it: the alert says so.)
pub(crate) async fn closed_as_other_processor(
    ledger: &dyn Recovery,
    processors: &Processors,
    metrics: &ReconcilerMetrics,
    hint: &StoredProcessorEvent,
    op: &Operation,
    now: Timestamp,
    report: &mut HintReport,
) -> Result<bool, LedgerError> {
    let bound = processors.kind_of(op);
    if ProcessorKind::parse(&hint.processor) == Some(bound) {
        return Ok(false);
    }
    report.closed += 1;
    metrics.webhook_mismatches.inc();
    tracing::error!(alert = "webhook_processor_mismatch", event_id = %hint.event_id,
        sender = %hint.processor, operation = %op.id, processor = %bound,
        "a signed webhook names an operation bound to another processor; nothing applied");
    let key = ProcessorEventKey {
        processor: &hint.processor,
        event_id: &hint.event_id,
    };
    ledger
        .mark_processor_event(
            &key,
            &format!(
                "closed: a {} webhook names {}, an operation on {bound}; nothing applied (status \
                 stays {})",
                hint.processor,
                op.id,
                op.status.as_str()
            ),
            now,
        )
        .await?;
    Ok(true)
}

/// The operation `id` a stored hint names, if it is one of this ledger's and belongs to the
/// processor that sent the hint; otherwise the hint is closed (as another deployment's, or as
/// another processor's) and `None` is answered.
pub(crate) async fn hint_operation(
    ledger: &dyn Recovery,
    processors: &Processors,
    metrics: &ReconcilerMetrics,
    hint: &StoredProcessorEvent,
    id: &OperationId,
    now: Timestamp,
    report: &mut HintReport,
) -> Result<Option<Operation>, LedgerError> {
    let op = match ledger.get_unscoped(id).await {
        Ok(op) => op,
        // Another deployment's operation id: stored, nothing to check.
        Err(LedgerError::NotFound) => {
            report.closed += 1;
            let key = ProcessorEventKey {
                processor: &hint.processor,
                event_id: &hint.event_id,
            };
            let outcome = "closed: not an operation of this ledger";
            ledger.mark_processor_event(&key, outcome, now).await?;
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    if closed_as_other_processor(ledger, processors, metrics, hint, &op, now, report).await? {
        return Ok(None);
    }
    Ok(Some(op))
}

async fn check_one(
    ledger: &dyn Recovery,
    processors: &Processors,
    metrics: &ReconcilerMetrics,
    limits: &HintLimits,
    hint: &StoredProcessorEvent,
    now: Timestamp,
    report: &mut HintReport,
) -> Result<(), LedgerError> {
    let key = ProcessorEventKey {
        processor: &hint.processor,
        event_id: &hint.event_id,
    };
    // Adyen cannot be asked for a payment by id: its notifications are checked against the
    // operation instead (`notification`).
    if hint.processor == payonce_processor::adyen::webhook::PROCESSOR {
        return notification::check(ledger, processors, metrics, hint, now, report).await;
    }
    let close =
        |outcome: String| async move { ledger.mark_processor_event(&key, &outcome, now).await };
    let (Some(id), Some(reference)) = (&hint.operation, reference_of(&hint.payload)) else {
        report.closed += 1;
        return close("closed: names no operation or object".into()).await;
    };
    let Some(op) = hint_operation(ledger, processors, metrics, hint, id, now, report).await? else {
        return Ok(());
    };
    // A Stripe hint is checked by Stripe's adapter; a process without one keeps it for one that
    // has (the backlog metric shows it waiting).
    let Some(processor) = processors.get(ProcessorKind::Stripe) else {
        report.deferred += 1;
        metrics.hints_deferred.inc();
        tracing::warn!(event_id = %hint.event_id, operation = %op.id,
            "a stripe webhook is kept: this process has no stripe configuration to check it with");
        let next = now + backoff(limits, hint.checks);
        let why = "pending: this reconciler has no stripe configuration";
        return ledger.defer_processor_event(&key, next, why).await;
    };
    // The row already says what the signed hint says (the same object, succeeded): nothing to apply,
    // so no processor read is spent on it. A hint that says anything else is checked as below.
    if op.status == Status::Succeeded
        && op.external_ref.as_deref() == Some(reference.as_str())
        && object_status_of(&hint.payload).as_deref() == Some("succeeded")
    {
        report.known += 1;
        metrics.hints_known.inc();
        return close(format!(
            "known: {} already says succeeded with {reference}; no processor read",
            op.id
        ))
        .await;
    }
    let object = match retrieve_within_budget(processor.as_ref(), limits, &reference).await {
        Retrieved::Found(object) => object,
        Retrieved::NotFound => {
            report.unproven += 1;
            metrics.webhook_mismatches.inc();
            tracing::error!(alert = "webhook_lookup_mismatch", event_id = %hint.event_id, event_type = %hint.event_type,
                operation = %op.id, %reference,
                "a signed webhook names a payment the processor does not have; nothing applied");
            return close(format!(
                "unproven: the processor has no {reference}; nothing applied (status stays {})",
                op.status.as_str()
            ))
            .await;
        }
        Retrieved::Unavailable { reason } => {
            report.deferred += 1;
            metrics.hints_deferred.inc();
            let next = now + backoff(limits, hint.checks);
            tracing::info!(event_id = %hint.event_id, %reason, "webhook hint kept: the processor could not be asked");
            return ledger
                .defer_processor_event(&key, next, &format!("pending: retrieve failed ({reason})"))
                .await;
        }
    };
    apply_checked(
        ledger, processors, metrics, hint, op, &reference, &object, now, report,
    )
    .await
}

/// The processor's object behind `reference`, read within the fleet's read budget (a read the
/// limiter refuses is answered as unavailable: the hint is kept and checked again).
async fn retrieve_within_budget(
    processor: &dyn payonce_processor::Processor,
    limits: &HintLimits,
    reference: &str,
) -> Retrieved {
    match payonce_processor::limiter::acquire(
        limits.limiter.as_ref(),
        payonce_processor::limiter::Budget::Read,
        limits.permit_wait_max,
    )
    .await
    {
        Ok(_) => processor.retrieve(reference).await,
        Err(denied) => Retrieved::Unavailable {
            reason: format!("fleet limiter: {denied}"),
        },
    }
}

/// The second half of [`check_one`]: the retrieved `object` checked against the operation it
/// belongs to, and applied only if it is what the processor holds.
#[allow(clippy::too_many_arguments)]
async fn apply_checked(
    ledger: &dyn Recovery,
    processors: &Processors,
    metrics: &ReconcilerMetrics,
    hint: &StoredProcessorEvent,
    op: Operation,
    reference: &str,
    object: &ProcessorObject,
    now: Timestamp,
    report: &mut HintReport,
) -> Result<(), LedgerError> {
    let key = ProcessorEventKey {
        processor: &hint.processor,
        event_id: &hint.event_id,
    };
    let close =
        |outcome: String| async move { ledger.mark_processor_event(&key, &outcome, now).await };
    // The processor's object says whose it is: a hint naming another operation is checked against,
    // and applied to, the one the object carries; the named one is left alone (someone else's real
    // payment must never make it "a payment without approval", which the runbook refunds).
    let named = op.id.clone();
    let Some(op) = owner_of(ledger, op, object).await? else {
        report.closed += 1;
        report.misnamed += 1;
        metrics.webhook_mismatches.inc();
        tracing::error!(alert = "webhook_lookup_mismatch", event_id = %hint.event_id, operation = %named,
            %reference, carried = ?object.operation_id,
            "a signed webhook names an operation its object does not belong to; nothing applied");
        return close(format!(
            "closed: {reference} carries operation id {:?}, not an operation of this ledger; the hint \
             named {named}, left untouched",
            object.operation_id
        ))
        .await;
    };
    // The object's own operation must be one of this processor's too (an object carrying an
    // Adyen operation's id at Stripe is never applied to it).
    if op.id != named
        && closed_as_other_processor(ledger, processors, metrics, hint, &op, now, report).await?
    {
        return Ok(());
    }
    let misnamed = if op.id == named {
        String::new()
    } else {
        report.misnamed += 1;
        metrics.webhook_mismatches.inc();
        tracing::error!(alert = "webhook_lookup_mismatch", event_id = %hint.event_id, named = %named,
            operation = %op.id, %reference,
            "a signed webhook names another operation than the one its object belongs to; checked against that one");
        format!("; the hint named {named}, left untouched")
    };
    let Some(checked) = report_of(&op, object) else {
        report.closed += 1;
        return close(format!(
            "checked: {reference} of {} is still in progress at the processor; nothing applied{misnamed}",
            op.id
        ))
        .await;
    };
    let source = format!(
        "webhook {} checked by retrieving {reference}{misnamed}",
        hint.event_id
    );
    let Some(applied) = apply_to_row(ledger, &op, &checked, &source, now).await? else {
        report.closed += 1;
        return close("closed: not an operation of this ledger".into()).await;
    };
    match (&applied, &checked) {
        (Applied::PaymentWithoutApproval, _) => {
            report.without_approval += 1;
            metrics.payments_without_approval.inc();
            tracing::error!(alert = "payment_without_approval", operation = %op.id, %reference,
                event_id = %hint.event_id, was = op.status.as_str(),
                "the processor holds a payment for an operation nobody approved; it needs attention now");
        }
        (Applied::Conflict, Report::Mismatch { detail, .. }) => {
            report.mismatched += 1;
            metrics.webhook_mismatches.inc();
            tracing::error!(alert = "webhook_lookup_mismatch", operation = %op.id, %reference,
                event_id = %hint.event_id, %detail,
                "the processor's object does not match the approved details; it needs attention");
        }
        _ => {
            report.applied += 1;
            metrics.hints_applied.inc();
        }
    }
    close(format!("checked: {applied:?} on {}{misnamed}", op.id)).await
}

/// Applies a hint's checked report to `op` through the state machine; `None` when the operation is
/// not this ledger's (the hint is closed, nothing applied). Shared by Stripe webhooks and Adyen
/// notifications.
pub(crate) async fn apply_to_row(
    ledger: &dyn Recovery,
    op: &Operation,
    checked: &Report,
    source: &str,
    now: Timestamp,
) -> Result<Option<Applied>, LedgerError> {
    let request = ApplyReport {
        id: &op.id,
        report: checked,
        source,
    };
    match ledger.apply_report(&request, now).await {
        Ok(applied) => Ok(Some(applied)),
        Err(LedgerError::NotFound) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The operation `object` belongs to when a hint named `named`: `named` itself, unless the object is
/// not its ([`differences`]) and carries another operation's id; `None` when that id is not an
/// operation of this ledger.
async fn owner_of(
    ledger: &dyn Recovery,
    named: Operation,
    object: &ProcessorObject,
) -> Result<Option<Operation>, LedgerError> {
    let carried = object
        .operation_id
        .as_deref()
        .and_then(|id| OperationId::parse(id).ok());
    match carried {
        Some(id) if id != named.id && !differences(&named, object).is_empty() => {
            match ledger.get_unscoped(&id).await {
                Ok(owner) => Ok(Some(owner)),
                Err(LedgerError::NotFound) => Ok(None),
                Err(e) => Err(e),
            }
        }
        _ => Ok(Some(named)),
    }
}

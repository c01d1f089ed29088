//! Stripe webhooks and Adyen notifications stored as hints: [`ingest`] verifies a delivery with
//! [`crate::stripe::webhook`] and stores the event once, matched to its operation. A
//! webhook is a hint, never evidence (docs/decisions.md): an event that may carry an outcome stays
//! pending until the reconciler has retrieved the object it names from the processor and checked it
//! against the operation; nothing here changes an operation. The api calls this without the
//! reconciler.

use crate::adyen::webhook::{self as adyen, AdyenWebhookError};
use crate::stripe::webhook::{PROCESSOR, WebhookError, verify_event};
use payonce_core::clock::Timestamp;
use payonce_core::id::OperationId;
use payonce_ledger::{NewProcessorEvent, ProcessorEventKey, Webhooks};

/// What ingesting one webhook did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestOutcome {
    /// The event id.
    pub event_id: String,
    /// Whether this delivery was a redelivery of a stored event.
    pub duplicate: bool,
    /// The operation it matched, if any.
    pub operation: Option<OperationId>,
    /// Whether it waits for a check against the processor (it may carry an outcome and names an
    /// operation); false for events that change nothing (no outcome, no operation).
    pub pending_check: bool,
}

/// Verifies and stores one webhook delivery once. An event that may carry an outcome for one of
/// our operations is left pending for the reconciler's `evidence::check_hints`; any other is marked done at
/// once. A redelivery of a stored event changes nothing.
pub async fn ingest(
    ledger: &dyn Webhooks,
    secrets: &[String],
    signature_header: Option<&str>,
    body: &[u8],
    now: Timestamp,
) -> Result<IngestOutcome, WebhookError> {
    let event = verify_event(secrets, signature_header, body, now)?;
    let operation = event.operation();
    let payload = String::from_utf8_lossy(body);
    let key = ProcessorEventKey {
        processor: PROCESSOR,
        event_id: &event.id,
    };
    let new = NewProcessorEvent {
        key,
        event_type: &event.event_type,
        operation: operation.as_ref(),
        payload: &payload,
    };
    let stored = ledger.insert_processor_event(&new, now).await?;
    let pending_check = operation.is_some() && event.claims_outcome();
    let outcome = if pending_check {
        "pending: to be checked against the processor"
    } else if operation.is_none() {
        "unmatched"
    } else {
        "no outcome in event"
    };
    // A redelivery leaves the stored event as it is (pending, or already checked).
    if stored && !pending_check {
        ledger.mark_processor_event(&key, outcome, now).await?;
    }
    tracing::info!(event_id = %event.id, event_type = %event.event_type, operation = ?operation, %outcome, duplicate = !stored, "webhook ingested");
    Ok(IngestOutcome {
        event_id: event.id,
        duplicate: !stored,
        operation,
        pending_check,
    })
}

/// What ingesting one Adyen notification request did, item by item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdyenIngestOutcome {
    /// One entry per item, in order.
    pub items: Vec<IngestOutcome>,
}

/// Verifies an Adyen notification request (every item's HMAC signature and merchant account; any
/// refusal stores nothing) and stores each item once as a hint, its event id made of event code,
/// `pspReference` and `success`. An item that may carry an outcome for one of our operations stays
/// pending for the reconciler, which checks it against the operation before anything changes
/// (a notification is never trusted alone); any other is marked done at once.
pub async fn ingest_adyen(
    ledger: &dyn Webhooks,
    hmac_key_hex: Option<&str>,
    merchant_account: Option<&str>,
    body: &[u8],
    now: Timestamp,
) -> Result<AdyenIngestOutcome, AdyenWebhookError> {
    let items = adyen::verify_notification(hmac_key_hex, merchant_account, body)?;
    let mut outcomes = Vec::with_capacity(items.len());
    for item in items {
        let event_id = item.event_id();
        let operation = item.operation();
        let payload = serde_json::to_string(&item)
            .map_err(|e| AdyenWebhookError::MalformedPayload(e.to_string()))?;
        let key = ProcessorEventKey {
            processor: adyen::PROCESSOR,
            event_id: &event_id,
        };
        let new = NewProcessorEvent {
            key,
            event_type: &item.event_code,
            operation: operation.as_ref(),
            payload: &payload,
        };
        let stored = ledger.insert_processor_event(&new, now).await?;
        let pending_check = operation.is_some() && item.claims_outcome();
        let outcome = if pending_check {
            "pending: to be checked against the operation"
        } else if operation.is_none() {
            "unmatched"
        } else {
            "no outcome in notification"
        };
        if stored && !pending_check {
            ledger.mark_processor_event(&key, outcome, now).await?;
        }
        tracing::info!(%event_id, operation = ?operation, %outcome, duplicate = !stored, "adyen notification ingested");
        outcomes.push(IngestOutcome {
            event_id,
            duplicate: !stored,
            operation,
            pending_check,
        });
    }
    Ok(AdyenIngestOutcome { items: outcomes })
}

//! One operation's evidence chain: its row, audit trail and related rows (approvals, links,
//! webhooks, tool calls) read from the ledger for the caller's tenant, laid out as one timeline,
//! oldest first, and the row redacted for export. The processor object is shown only through its
//! summary (`processor::summary`), never raw.

use super::session::OnCall;
use super::views::utc;
use crate::errors::HttpError;
use crate::state::AppState;
use payonce_core::id::OperationId;
use payonce_core::state::{Event, EventName};
use payonce_core::summary::summary;
use payonce_ledger::console::{ApprovalRow, LinkRow, Related, ToolCallRow, WebhookRow};
use payonce_ledger::{Operation, OperationEvent};
use serde_json::Value;

/// One line of an operation's evidence chain.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TimelineEntry {
    /// When, ms.
    pub at_ms: i64,
    /// `event`, `approval`, `link`, `webhook`, `tool_call`.
    pub kind: &'static str,
    /// What happened.
    pub what: String,
    /// Who did it.
    pub actor: String,
    /// More.
    pub detail: String,
}

/// Reads an operation of the caller's tenant with its trail and related rows.
pub(super) async fn chain(
    state: &AppState,
    who: &OnCall,
    raw_id: &str,
) -> Result<(Operation, Vec<OperationEvent>, Related), HttpError> {
    let id = OperationId::parse(raw_id).map_err(|_| HttpError::not_found())?;
    let op = state.ledger().get(&who.tenant, &id).await?;
    let events = state.ledger().events(&who.tenant, &id).await?;
    let related = state.ledger().console().related(&who.tenant, &id).await?;
    Ok((op, events, related))
}

/// The summary of a stored webhook's object (never the raw payload).
pub(super) fn webhook_summary(payload: &str) -> Value {
    serde_json::from_str::<Value>(payload)
        .map(|v| summary(&v["data"]["object"]))
        .unwrap_or(Value::Null)
}

/// The operation as exported: its row with the processor object replaced by its summary.
pub(super) fn redacted(op: &Operation) -> Value {
    let mut v = serde_json::to_value(op).unwrap_or(Value::Null);
    if let Some(o) = v.as_object_mut() {
        o.insert(
            "result".into(),
            op.result.as_ref().map(summary).unwrap_or(Value::Null),
        );
    }
    v
}

/// The evidence chain, oldest first. Same-millisecond rows: an approval right after its `approve`
/// event, everything else after the audit trail's own rows of that millisecond.
pub(super) fn timeline(events: &[OperationEvent], related: &Related) -> Vec<TimelineEntry> {
    // Ranks order rows of the same millisecond: event `i` is `2 * i`, the approval it recorded
    // `2 * i + 1`, every other row after all events.
    let after_events = 2 * events.len() + 1;
    let approve_at = |at_ms: i64| {
        events
            .iter()
            .position(|e| e.event == EventName::Event(Event::Approve) && e.at.as_millis() == at_ms)
            .map_or(after_events, |i| 2 * i + 1)
    };
    let mut out: Vec<(usize, TimelineEntry)> = events
        .iter()
        .enumerate()
        .map(|(i, e)| (2 * i, of_event(e)))
        .collect();
    out.extend(related.approvals.iter().map(|a| {
        let entry = of_approval(a);
        (approve_at(entry.at_ms), entry)
    }));
    out.extend(related.links.iter().map(|l| (after_events, of_link(l))));
    out.extend(
        related
            .webhooks
            .iter()
            .map(|w| (after_events, of_webhook(w))),
    );
    out.extend(
        related
            .tool_calls
            .iter()
            .map(|t| (after_events, of_tool_call(t))),
    );
    // Stable: entries at the same millisecond and rank keep their order.
    out.sort_by_key(|(rank, e)| (e.at_ms, *rank));
    out.into_iter().map(|(_, e)| e).collect()
}

/// A transition of the audit trail.
fn of_event(e: &OperationEvent) -> TimelineEntry {
    TimelineEntry {
        at_ms: e.at.as_millis(),
        kind: "event",
        what: format!(
            "{} ({} → {}, attempt {})",
            e.event,
            e.from_status.as_deref().unwrap_or("-"),
            e.to_status,
            e.attempt
        ),
        actor: e.actor.clone(),
        detail: e.detail.clone().unwrap_or_default(),
    }
}

/// An approval of the operation's details.
fn of_approval(a: &ApprovalRow) -> TimelineEntry {
    TimelineEntry {
        at_ms: a.approved_at.as_millis(),
        kind: "approval",
        what: format!("approved details {}", a.details_hash),
        actor: a.approved_by.clone(),
        detail: format!(
            "method {}; valid until {}{}",
            a.method,
            utc(a.expires_at.as_millis()),
            a.revoked_at
                .map(|r| format!("; revoked {}", utc(r.as_millis())))
                .unwrap_or_default()
        ),
    }
}

/// A confirmation link issued for the operation.
fn of_link(l: &LinkRow) -> TimelineEntry {
    TimelineEntry {
        at_ms: l.created_at.as_millis(),
        kind: "link",
        what: format!("confirmation link issued ({})", l.origin),
        actor: l.origin.clone(),
        detail: match l.used_at {
            Some(u) => format!("used {}", utc(u.as_millis())),
            None => format!("unused; expires {}", utc(l.expires_at.as_millis())),
        },
    }
}

/// A processor's webhook about the operation, through its object's summary.
fn of_webhook(w: &WebhookRow) -> TimelineEntry {
    TimelineEntry {
        at_ms: w.received_at.as_millis(),
        kind: "webhook",
        what: format!("webhook {} {}", w.event_type, w.event_id),
        actor: w.processor.clone(),
        detail: format!(
            "{}; {}",
            w.outcome.as_deref().unwrap_or("not applied yet"),
            webhook_summary(&w.payload)
        ),
    }
}

/// An assistant's tool call naming the operation.
fn of_tool_call(t: &ToolCallRow) -> TimelineEntry {
    TimelineEntry {
        at_ms: t.at.as_millis(),
        kind: "tool_call",
        what: format!("tool call {}", t.tool),
        actor: format!("assistant ({})", t.provider),
        detail: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use payonce_core::clock::Timestamp;

    fn event(at_ms: i64, name: &str) -> OperationEvent {
        OperationEvent {
            at: Timestamp::from_millis(at_ms),
            event: EventName::parse(name).expect("a known event name"),
            actor: "a".into(),
            from_status: None,
            to_status: "ready".into(),
            attempt: 0,
            detail: None,
        }
    }

    #[test]
    fn an_approval_follows_its_approve_event_in_the_same_millisecond() {
        let events = [event(1, "create"), event(1, "approve"), event(1, "claim")];
        let related = Related {
            approvals: vec![ApprovalRow {
                id: "apr_1".into(),
                details_hash: "h".into(),
                approved_by: "customer:c".into(),
                method: "signed_assertion:n".into(),
                approved_at: Timestamp::from_millis(1),
                expires_at: Timestamp::from_millis(2),
                revoked_at: None,
            }],
            ..Related::default()
        };
        let kinds: Vec<&str> = timeline(&events, &related).iter().map(|e| e.kind).collect();
        assert_eq!(kinds, ["event", "event", "approval", "event"]);
        let later = timeline(&[event(0, "create"), event(5, "claim")], &related);
        assert_eq!(later.iter().map(|e| e.at_ms).collect::<Vec<_>>(), [0, 1, 5]);
    }

    #[test]
    fn webhook_payloads_show_only_the_objects_summary() {
        let payload = r#"{"data":{"object":{"id":"pi_1","status":"succeeded","client_secret":"pi_1_secret_x"}}}"#;
        let shown = webhook_summary(payload).to_string();
        assert!(shown.contains("pi_1") && !shown.contains("secret"));
        assert_eq!(webhook_summary("not json"), Value::Null);
    }
}

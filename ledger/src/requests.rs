//! Requests for the ledger calls that would otherwise take four arguments or more besides `self`, or
//! two of one type that could be swapped unnoticed: each field is named at the call site. The instant
//! of the call (`now`) stays a separate argument of every method. In the order of the interfaces
//! (`interface.rs`) that take them.

use super::{ApiKeyRecord, ExpiredLease, Operation, Recorded, Report, Resolution};
use payonce_core::clock::Timestamp;
use payonce_core::id::OperationId;
use std::time::Duration;

/// Withdraws an operation within its tenant ([`Operations::cancel`](super::Operations::cancel)).
#[derive(Debug, Clone, Copy)]
pub struct Cancel<'a> {
    /// The operation.
    pub id: &'a OperationId,
    /// Who withdraws it (the audit trail's actor).
    pub actor: &'a str,
}

/// A customer's decline on the confirmation page ([`Approvals::decline`](super::Approvals::decline)).
#[derive(Debug, Clone, Copy)]
pub struct CustomerDecline<'a> {
    /// The operation.
    pub id: &'a OperationId,
    /// The details the customer was shown (the link's hash).
    pub details_hash: &'a payonce_core::details::DetailsHash,
    /// `customer:<id>`, the audit trail's actor.
    pub actor: &'a str,
    /// The proof's method and evidence id, like an approval's (`signed_assertion:<nonce>`).
    pub evidence: &'a str,
}

/// The fencing token of a write by a lease holder: the operation and the attempt it holds. A
/// write whose attempt is no longer the row's loses with [`LedgerError::Fenced`](super::LedgerError::Fenced).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fence {
    /// The operation.
    pub id: OperationId,
    /// The attempt the writer holds.
    pub attempt: i64,
}

impl Fence {
    /// The fence of the attempt a row is at (a claimed row: the worker's own).
    pub fn of(op: &Operation) -> Fence {
        Fence {
            id: op.id.clone(),
            attempt: op.attempt,
        }
    }
}

/// Who takes or renews leases, and for how long ([`Queue::claim`](super::Queue::claim),
/// [`Queue::renew`](super::Queue::renew)): a worker's one identity for all its calls.
#[derive(Debug, Clone, Copy)]
pub struct LeaseHolder<'a> {
    /// The lease owner (the worker's name).
    pub owner: &'a str,
    /// How long each lease lasts from the call's `now`.
    pub lease_ttl: Duration,
}

/// An outcome a lease holder records ([`Queue::record`](super::Queue::record)).
#[derive(Debug, Clone, Copy)]
pub struct RecordOutcome<'a> {
    /// The operation and the attempt the writer holds.
    pub fence: &'a Fence,
    /// What happened.
    pub outcome: &'a Recorded,
    /// Who records it (the audit trail's actor).
    pub actor: &'a str,
}

/// Moves an expired lease on ([`Recovery::expire_lease`](super::Recovery::expire_lease)).
#[derive(Debug, Clone, Copy)]
pub struct ExpireLease<'a> {
    /// The lease as the sweep found it (its attempt is the fence).
    pub lease: &'a ExpiredLease,
    /// Who expires it (the audit trail's actor).
    pub actor: &'a str,
    /// When the reconciler should look, if a submission was recorded.
    pub next_check_at: Timestamp,
}

/// Moves many expired leases on in one write
/// ([`Recovery::expire_leases`](super::Recovery::expire_leases)), each as
/// [`ExpireLease`] would.
#[derive(Debug, Clone, Copy)]
pub struct ExpireLeases<'a> {
    /// The leases as the sweep found them (each one's attempt is its fence).
    pub leases: &'a [ExpiredLease],
    /// Who expires them (the audit trail's actor).
    pub actor: &'a str,
    /// When the reconciler should look at those with a recorded submission.
    pub next_check_at: Timestamp,
}

/// A payment or refund a lookup found for an `unknown` operation, its evidence already checked
/// ([`Recovery::record_lookups`](super::Recovery::record_lookups)).
#[derive(Debug, Clone, PartialEq)]
pub struct LookupFound {
    /// The operation and the attempt the reconciler saw it at.
    pub fence: Fence,
    /// The processor's object id.
    pub reference: String,
    /// The processor's object, stored as the operation's result.
    pub result: serde_json::Value,
}

/// Records many lookups that found the approved payment, in one write
/// ([`Recovery::record_lookups`](super::Recovery::record_lookups)).
#[derive(Debug, Clone, Copy)]
pub struct RecordLookups<'a> {
    /// What each lookup found.
    pub found: &'a [LookupFound],
    /// Who looked (the audit trail's actor, as [`Recovery::apply_report`](super::Recovery::apply_report)'s source).
    pub source: &'a str,
}

/// Schedules the next check of an unknown operation
/// ([`Recovery::defer_check`](super::Recovery::defer_check)).
#[derive(Debug, Clone, Copy)]
pub struct DeferCheck<'a> {
    /// The row's attempt as the reconciler saw it.
    pub fence: &'a Fence,
    /// When to look again.
    pub next_check_at: Timestamp,
    /// Why (the audit trail's detail).
    pub detail: &'a str,
    /// Who.
    pub actor: &'a str,
}

/// Takes a lease over an unknown operation for a same-key retry
/// ([`Recovery::claim_unknown`](super::Recovery::claim_unknown)).
#[derive(Debug, Clone, Copy)]
pub struct ClaimUnknown<'a> {
    /// The row's attempt as the reconciler saw it.
    pub fence: &'a Fence,
    /// The new lease's holder, and how long the lease lasts.
    pub holder: LeaseHolder<'a>,
    /// Why (same-key retry inside the window, or resubmission after it).
    pub why: &'a str,
}

/// Sends an unknown operation to a human ([`Recovery::escalate`](super::Recovery::escalate)).
#[derive(Debug, Clone, Copy)]
pub struct Escalate<'a> {
    /// The row's attempt as the reconciler saw it.
    pub fence: &'a Fence,
    /// Why automatic progress stops.
    pub reason: &'a str,
    /// Who.
    pub actor: &'a str,
}

/// A processor's report to apply ([`Recovery::apply_report`](super::Recovery::apply_report)).
#[derive(Debug, Clone, Copy)]
pub struct ApplyReport<'a> {
    /// The operation the report is about.
    pub id: &'a OperationId,
    /// What the processor says.
    pub report: &'a Report,
    /// Where it came from (`webhook evt_…`, `lookup by …`): the audit trail's actor.
    pub source: &'a str,
}

/// An on-call resolution ([`Recovery::resolve`](super::Recovery::resolve)).
#[derive(Debug, Clone, Copy)]
pub struct Resolve<'a> {
    /// The operation.
    pub id: &'a OperationId,
    /// What on-call decided.
    pub resolution: &'a Resolution,
    /// Who decided.
    pub actor: &'a str,
    /// Why (always recorded).
    pub reason: &'a str,
}

/// A named maintenance lease and its would-be holder
/// ([`Recovery::try_maintenance_lease`](super::Recovery::try_maintenance_lease)).
#[derive(Debug, Clone, Copy)]
pub struct MaintenanceLease<'a> {
    /// The lease (`sweep`).
    pub name: &'a str,
    /// Its holder.
    pub owner: &'a str,
}

/// A verified webhook to store ([`Webhooks::insert_processor_event`](super::Webhooks::insert_processor_event)).
#[derive(Debug, Clone, Copy)]
pub struct NewProcessorEvent<'a> {
    /// The processor and its event id: what names the stored webhook from then on.
    pub key: ProcessorEventKey<'a>,
    /// The event type (`payment_intent.succeeded`).
    pub event_type: &'a str,
    /// The operation the event names, if it names one of ours.
    pub operation: Option<&'a OperationId>,
    /// The signed body as received.
    pub payload: &'a str,
}

/// Names a stored webhook.
#[derive(Debug, Clone, Copy)]
pub struct ProcessorEventKey<'a> {
    /// Processor name (`stripe`).
    pub processor: &'a str,
    /// The processor's event id.
    pub event_id: &'a str,
}

/// A provider tool call to record ([`ToolCalls::record_tool_call`](super::ToolCalls::record_tool_call)).
#[derive(Debug, Clone, Copy)]
pub struct NewToolCall<'a> {
    /// The operation it concerns, if any.
    pub operation: Option<&'a OperationId>,
    /// The provider (`openai`, `anthropic`, `mcp`).
    pub provider: &'a str,
    /// The provider's call id, if it sent one.
    pub provider_call_id: Option<&'a str>,
    /// The tool called.
    pub tool: &'a str,
}

/// The answer to keep for a tool-call key ([`ToolCalls::keep_tool_answer`](super::ToolCalls::keep_tool_answer)).
#[derive(Debug, Clone, Copy)]
pub struct ToolAnswer<'a> {
    /// The caller's idempotency key for the call.
    pub key: &'a str,
    /// The call's arguments, fingerprinted.
    pub fingerprint: &'a str,
    /// The answer.
    pub answer: &'a str,
}

/// Revokes an API key ([`Keys::revoke_api_key`](super::Keys::revoke_api_key)).
#[derive(Debug, Clone, Copy)]
pub struct RevokeKey<'a> {
    /// The key's public id.
    pub key_id: &'a str,
    /// Who revokes it.
    pub revoked_by: &'a str,
    /// Why.
    pub reason: &'a str,
}

/// Rotates an API key ([`Keys::rotate_api_key`](super::Keys::rotate_api_key)).
#[derive(Debug, Clone, Copy)]
pub struct RotateKey<'a> {
    /// The active key being replaced.
    pub old_id: &'a str,
    /// Its replacement.
    pub new: &'a ApiKeyRecord,
    /// When the old key stops being accepted (an earlier expiry is kept).
    pub old_until: Timestamp,
}

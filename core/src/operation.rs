//! The operation row and its outcomes: what every layer speaks about one intended action (the
//! ledger stores it, the adapters submit and look it up, execution decides on it), and the processor
//! kinds a row can be bound to. Pure data: no storage, no I/O.

use crate::clock::Timestamp;
use crate::details::{Details, DetailsHash};
use crate::id::{BusinessKey, IdempotencyKey, OperationId, TenantId};
use crate::priority::Priority;
use crate::state::Status;
use serde::Serialize;

/// One intended action, as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Operation {
    /// App-issued id.
    pub id: OperationId,
    /// Scope.
    pub tenant: TenantId,
    /// The trusted workflow's key.
    pub business_key: BusinessKey,
    /// The authoritative details.
    #[serde(serialize_with = "serialize_details")]
    pub details: Details,
    /// Hash of the consequential details.
    pub details_hash: DetailsHash,
    /// Current state.
    pub status: Status,
    /// Fencing token: bumped by every claim.
    pub attempt: i64,
    /// Lease holder while executing.
    pub lease_owner: Option<String>,
    /// Lease expiry while executing, ms.
    #[serde(rename = "lease_expires_at_ms")]
    pub lease_expires_at: Option<Timestamp>,
    /// The key forwarded to the processor, derived once.
    pub idempotency_key: IdempotencyKey,
    /// First time a request may have left for the processor, ms.
    #[serde(rename = "first_submitted_at_ms")]
    pub first_submitted_at: Option<Timestamp>,
    /// The attempt that first submitted.
    pub first_submitted_attempt: Option<i64>,
    /// Latest submission, ms.
    #[serde(rename = "last_submitted_at_ms")]
    pub last_submitted_at: Option<Timestamp>,
    /// How many requests may have left (all with the same key).
    pub submit_count: i64,
    /// The attempts since the last human decision that ended with nothing executed and count toward
    /// `attempt_max` (a refused connection or a rate limit never counts).
    pub not_sent_attempts: i64,
    /// Processor reference.
    pub external_ref: Option<String>,
    /// Stored processor result (kept whole as evidence; serialized as its summary only).
    #[serde(serialize_with = "crate::summary::serialize_summary")]
    pub result: Option<serde_json::Value>,
    /// Failure or rejection code.
    pub failure_code: Option<String>,
    /// Failure message or the latest reason.
    pub failure_message: Option<String>,
    /// When a ready row may be claimed, ms.
    #[serde(rename = "available_at_ms")]
    pub available_at: Timestamp,
    /// When the reconciler should next look at an unknown row, ms.
    #[serde(rename = "next_check_at_ms")]
    pub next_check_at: Option<Timestamp>,
    /// Lookups made so far.
    pub check_count: i64,
    /// Details hash the current approval binds to.
    pub approved_hash: Option<DetailsHash>,
    /// Who approved.
    pub approved_by: Option<String>,
    /// When the current approval expires, ms.
    #[serde(rename = "approval_expires_at_ms")]
    pub approval_expires_at: Option<Timestamp>,
    /// Created, ms.
    #[serde(rename = "created_at_ms")]
    pub created_at: Timestamp,
    /// Last changed, ms.
    #[serde(rename = "updated_at_ms")]
    pub updated_at: Timestamp,
    /// The processor bound at creation (its tenant's choice then; a refund its payment's); `None`:
    /// the configured processor of whichever process serves it (rows from before tenants chose,
    /// and tenants that never chose).
    pub processor: Option<ProcessorKind>,
    /// Who waits for it: the order workers claim it in ([`crate::priority`]).
    pub priority: Priority,
    /// Not claimed before this, ms: a scheduled payment; `None`: as soon as it is approved.
    #[serde(rename = "not_before_ms")]
    pub not_before: Option<Timestamp>,
}

fn serialize_details<S: serde::Serializer>(d: &Details, s: S) -> Result<S::Ok, S::Error> {
    d.to_raw().serialize(s)
}

impl Operation {
    /// Whether the current approval binds to the current details and is unexpired at `now`.
    pub fn approval_valid_at(&self, now: Timestamp) -> bool {
        let hash_matches = self.approved_hash.as_ref() == Some(&self.details.hash())
            && self.details_hash == self.details.hash();
        hash_matches && self.approval_expires_at.is_some_and(|t| t > now)
    }
}

/// A claimed operation: the row after the claim, with the attempt the worker must fence with.
pub type Claimed = Operation;

/// A processor an operation can be bound to, by the wire its adapter speaks (the names stored in
/// `operations.processor` and `tenant_processors.processor`, and the `processor` of a stored
/// webhook).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessorKind {
    /// Stripe's API (and every contract the simulator runs on Stripe's wire).
    Stripe,
    /// Adyen Checkout v71.
    Adyen,
}

/// Every processor kind, in the order the CLI lists them.
pub const ALL_KINDS: [ProcessorKind; 2] = [ProcessorKind::Stripe, ProcessorKind::Adyen];

impl ProcessorKind {
    /// The stored name (`stripe`, `adyen`): an adapter contract's `wire`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProcessorKind::Stripe => "stripe",
            ProcessorKind::Adyen => "adyen",
        }
    }

    /// The kind a stored or typed name names; `None` for any other string.
    pub fn parse(name: &str) -> Option<ProcessorKind> {
        ALL_KINDS.into_iter().find(|k| k.as_str() == name)
    }
}

impl std::fmt::Display for ProcessorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the reason of an operation whose key the processor refused (the adapter's `KeyReused`)
/// begins: on-call, the console and the runbook find it by these words.
pub const KEY_REUSED_HEAD: &str =
    "the processor already holds a different payment for this business key";

/// Rows per state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatusCount {
    /// The state.
    pub status: Status,
    /// How many rows.
    pub count: i64,
    /// Oldest `updated_at` among them, ms.
    #[serde(rename = "oldest_updated_at_ms")]
    pub oldest_updated_at: Option<Timestamp>,
    /// Earliest first submission among them, ms: how long the oldest outcome has been in doubt
    /// (`updated_at` moves with every re-check, so it cannot say that).
    #[serde(rename = "oldest_submitted_at_ms")]
    pub oldest_submitted_at: Option<Timestamp>,
}

/// What the processor holds for a request it accepted: the outcome both a worker records
/// ([`Recorded::Succeeded`]) and a report brings ([`Report::Succeeded`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Paid {
    /// Processor reference.
    pub reference: String,
    /// The processor's object (response or retrieved), kept as evidence.
    pub result: serde_json::Value,
}

/// A request the processor definitively declined ([`Recorded::Failed`], [`Report::Failed`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Declined {
    /// Decline code.
    pub code: String,
    /// Message.
    pub message: String,
    /// Processor reference, if one was created.
    pub reference: Option<String>,
}

/// The outcome a worker (or the reconciler under its own lease) records, fenced by the attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum Recorded {
    /// Paid.
    Succeeded(Paid),
    /// Definitively declined.
    Failed(Declined),
    /// Nothing was sent; back to `ready` at `available_at_ms`.
    RetryLater {
        /// Why.
        reason: String,
        /// When it may be claimed again.
        available_at: Timestamp,
        /// Whether this attempt counts toward `attempt_max` (`not_sent_attempts`): false for a
        /// refused connection or a rate limit, which only wait.
        counted: bool,
    },
    /// Nothing was sent and the attempt limit is spent.
    Exhausted {
        /// Why.
        reason: String,
    },
    /// May have reached the processor; check at `next_check_at_ms`.
    Unknown {
        /// Why.
        reason: String,
        /// Processor reference, if known.
        reference: Option<String>,
        /// When the reconciler should look.
        next_check_at: Timestamp,
    },
    /// Server-side checks failed before any request.
    Rejected {
        /// Stable code.
        code: String,
        /// Human message.
        message: String,
    },
    /// Automatic progress would risk a duplicate.
    NeedsAttention {
        /// Why.
        reason: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_round_trips_through_its_stored_name_and_nothing_else_parses() {
        for kind in ALL_KINDS {
            assert_eq!(ProcessorKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(ProcessorKind::parse("Stripe"), None);
        assert_eq!(ProcessorKind::parse("checkout-com"), None);
        assert_eq!(ProcessorKind::parse(""), None);
    }
}

//! What callers hand the ledger (new operations, approvals, outcomes, reports, resolutions, filters)
//! and what it answers besides stored rows.

use super::Operation;
use payonce_core::clock::Timestamp;
use payonce_core::details::{Details, DetailsHash};
use payonce_core::id::{BusinessKey, IdempotencyKey, OperationId, TenantId};
use payonce_core::intention::{Intention, KeySecret};
use payonce_core::operation::{Declined, Paid};
use payonce_core::priority::Priority;
use payonce_core::state::Status;

/// The `failure_code` of a row the processor scan made again from its payment
/// ([`Report::Recreated`]): the api settles it when the same intention comes back with its approval.
pub const LOST_ROW_RECREATED: &str = "lost_row_recreated";

/// A new operation from a trusted upstream service.
#[derive(Debug, Clone)]
pub struct NewOperation {
    /// Derived by [`NewOperation::keyed`] from the tenant and business key; used only when the
    /// business key is new.
    pub id: OperationId,
    /// The tenant from the authenticated key.
    pub tenant: TenantId,
    /// The trusted workflow's key.
    pub business_key: BusinessKey,
    /// The authoritative details.
    pub details: Details,
    /// Who created it (for the audit trail).
    pub actor: String,
    /// The processor key of the intention ([`payonce_core::intention`]): stored with the row when the
    /// business key is new, never regenerated.
    pub idempotency_key: IdempotencyKey,
    /// The processor to bind it to; `None` (every create from upstream): its tenant's choice at
    /// the insert. A payment the processor scan recreates names the processor it was found at.
    pub processor: Option<payonce_core::operation::ProcessorKind>,
    /// Who waits for it ([`payonce_core::priority`]): stored when the business key is new.
    pub priority: Priority,
    /// Not claimed before this, ms (checked by the caller: `priority::check_not_before`).
    pub not_before: Option<Timestamp>,
}

impl NewOperation {
    /// A new operation whose id and processor key are derived from its intention with `secret`.
    pub fn keyed(
        secret: &KeySecret,
        tenant: TenantId,
        business_key: BusinessKey,
        details: Details,
        actor: String,
    ) -> Self {
        let idempotency_key = secret.key_for(&Intention {
            tenant: &tenant,
            business_key: &business_key,
            generation: 0,
        });
        NewOperation {
            id: secret.operation_id_for(&tenant, &business_key),
            tenant,
            business_key,
            details,
            actor,
            idempotency_key,
            processor: None,
            priority: Priority::Interactive,
            not_before: None,
        }
    }
}

/// Whether create-or-get made a row.
#[derive(Debug, Clone)]
pub struct Created {
    /// The operation (new or existing with the same details).
    pub operation: Operation,
    /// True if this call inserted it.
    pub inserted: bool,
}

/// An approval to record.
#[derive(Debug, Clone)]
pub struct NewApproval {
    /// The operation approved.
    pub operation: OperationId,
    /// The hash of the details that were shown and approved.
    pub details_hash: DetailsHash,
    /// Who approved (customer id, on-call user, service).
    pub approved_by: String,
    /// How (`confirmation_page`, `service`, ...).
    pub method: String,
    /// When it stops being valid, ms.
    pub expires_at: Timestamp,
    /// The priority the approval gives the operation (`interactive` when the customer approves it
    /// on the confirmation page); `None` keeps the one it was created with.
    pub priority: Option<Priority>,
}

/// A processor's report about an operation (webhook or lookup), applied in any arrival order.
#[derive(Debug, Clone, PartialEq)]
pub enum Report {
    /// The processor says it is paid.
    Succeeded(Paid),
    /// The processor says it definitively failed.
    Failed(Declined),
    /// The processor scan made this row again from a payment that carries its intention (the
    /// ledger had lost the row: a restore, a failover): paid before the loss, so approved then.
    /// Lands in `needs_attention` with the payment kept on the row and one instruction
    /// ([`LOST_ROW_RECREATED`]); the same intention sent again with its approval settles it.
    Recreated(Paid),
    /// A retrieved processor object names this operation but does not match its approved details
    /// (amount, currency, customer or operation id): never applied as an outcome, always sent to a
    /// human with both facts.
    Mismatch {
        /// Processor reference.
        reference: String,
        /// Whether the object says money moved (a succeeded payment).
        paid: bool,
        /// What differs: the processor's facts next to the approved ones.
        detail: String,
    },
}

/// A stored webhook: a hint that the processor has news about an operation, to be checked by
/// retrieving the object it names before anything is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredProcessorEvent {
    /// Processor name (`stripe`).
    pub processor: String,
    /// The processor's event id.
    pub event_id: String,
    /// The event type (`payment_intent.succeeded`).
    pub event_type: String,
    /// The operation the event named, if it named one of ours.
    pub operation: Option<OperationId>,
    /// The signed body as received.
    pub payload: String,
    /// Checks tried so far (the processor could not be asked).
    pub checks: i64,
}

/// What applying a report did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The row moved to a new state.
    Moved(Status),
    /// The row already said the same thing.
    AlreadyKnown,
    /// The report contradicts the row; it is in `needs_attention` with both facts.
    Conflict,
    /// The processor holds a payment for an operation that was never approved or was cancelled:
    /// the row is in `needs_attention` with both facts, and callers raise the loudest alert.
    PaymentWithoutApproval,
    /// A row the scan made again from its payment waits in `needs_attention` ([`Report::Recreated`]).
    LostRowRecreated,
    /// The state does not take reports (e.g. not yet submitted); kept as an event only.
    Ignored(Status),
}

/// An on-call resolution, always with a reason.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolution {
    /// The payment happened; here is the processor reference.
    Succeeded {
        /// Processor reference.
        reference: String,
    },
    /// The payment did not happen.
    Failed,
    /// Retry with the SAME key (only safe while the processor remembers it).
    RetrySameKey,
}

/// A filter for on-call listings.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Only these states (empty: all).
    pub statuses: Vec<Status>,
    /// Only rows last updated before this time, ms.
    pub updated_before: Option<Timestamp>,
    /// Only this tenant.
    pub tenant: Option<TenantId>,
    /// Page size, at most [`PAGE_MAX`](super::PAGE_MAX).
    pub limit: u32,
}

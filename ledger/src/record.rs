//! Rows as the ledger returns them, decoded from either store.

use super::LedgerError;
use super::row::{LedgerRow, corrupt};
use payonce_core::clock::Timestamp;
use payonce_core::details::{Details, DetailsHash, RawDetails, RawRefundOf};
use payonce_core::id::{BusinessKey, IdempotencyKey, OperationId, TenantId};
use payonce_core::operation::Operation;
use payonce_core::priority::Priority;
use payonce_core::state::EventName;
use serde::Serialize;

/// A lease found expired by a sweep.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExpiredLease {
    /// The operation.
    pub id: OperationId,
    /// The attempt whose lease expired.
    pub attempt: i64,
    /// The lease holder.
    pub lease_owner: String,
    /// When it expired, ms.
    #[serde(rename = "lease_expires_at_ms")]
    pub lease_expires_at: Timestamp,
    /// Whether a submission was recorded (then the outcome is unknown).
    pub submitted: bool,
}

/// One audit-trail entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OperationEvent {
    /// When, ms.
    #[serde(rename = "at_ms")]
    pub at: Timestamp,
    /// What happened: an event of the state machine, or a note (`create`, `submission_started`, ...).
    pub event: EventName,
    /// Who.
    pub actor: String,
    /// State before (none for `create`).
    pub from_status: Option<String>,
    /// State after.
    pub to_status: String,
    /// Attempt at the time.
    pub attempt: i64,
    /// Free-text detail.
    pub detail: Option<String>,
}

impl OperationEvent {
    /// Whether this entry is a claim: `claim`, or the one `submission_started` a claim out of
    /// `ready` that also recorded its submission logs with the claim's move
    /// (`state::SUBMITTING_CLAIM`).
    pub fn is_claim(&self) -> bool {
        payonce_core::state::is_claim_entry(
            self.from_status.as_deref(),
            &self.to_status,
            self.event.as_str(),
        )
    }
}

/// A recorded approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Approval {
    /// Approval id.
    pub id: String,
    /// The operation.
    pub operation_id: OperationId,
    /// The hash of the details shown.
    pub details_hash: String,
    /// Who approved.
    pub approved_by: String,
    /// How.
    pub method: String,
    /// When, ms.
    #[serde(rename = "approved_at_ms")]
    pub approved_at: Timestamp,
    /// Valid until, ms.
    #[serde(rename = "expires_at_ms")]
    pub expires_at: Timestamp,
}

/// A single-use confirmation link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApprovalLink {
    /// SHA-256 of the token in the link.
    pub token_hash: String,
    /// The operation.
    pub operation_id: OperationId,
    /// The details hash the page will show.
    pub details_hash: String,
    /// Created, ms.
    #[serde(rename = "created_at_ms")]
    pub created_at: Timestamp,
    /// Expires, ms.
    #[serde(rename = "expires_at_ms")]
    pub expires_at: Timestamp,
    /// Used, ms.
    #[serde(rename = "used_at_ms")]
    pub used_at: Option<Timestamp>,
}

/// What a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Upstream services: create, approve on behalf of a customer flow, cancel, execute, read.
    Service,
    /// Assistants: read and request execution of the tenant's operations, nothing else.
    Assistant,
    /// On-call: list, inspect, resolve.
    OnCall,
}

impl Role {
    /// Stored form.
    pub fn as_str(&self) -> &'static str {
        match self {
            Role::Service => "service",
            Role::Assistant => "assistant",
            Role::OnCall => "on_call",
        }
    }
    /// Parses the stored form.
    pub fn parse(raw: &str) -> Option<Role> {
        match raw {
            "service" => Some(Role::Service),
            "assistant" => Some(Role::Assistant),
            "on_call" => Some(Role::OnCall),
            _ => None,
        }
    }
}

/// An API key as stored (hash only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyRecord {
    /// Public id (`key_…`): names the key in listings, revocation and rotation without its secret.
    pub key_id: String,
    /// SHA-256 hex of the secret.
    pub key_hash: String,
    /// Tenant it acts for.
    pub tenant: TenantId,
    /// Role.
    pub role: Role,
    /// Human label.
    pub label: String,
    /// Created, ms.
    pub created_at: Timestamp,
    /// Refused from this instant on, ms; `None`: never expires.
    pub expires_at: Option<Timestamp>,
    /// Revoked at, ms.
    pub revoked_at: Option<Timestamp>,
    /// Who revoked it.
    pub revoked_by: Option<String>,
    /// Why it was revoked.
    pub revoked_reason: Option<String>,
    /// The key a rotation issued in its place.
    pub replaced_by: Option<String>,
    /// Last accepted, ms, to within the api's last-used resolution.
    pub last_used_at: Option<Timestamp>,
    /// An on-call key that reads everything and changes nothing (migration `customer_pages`).
    pub read_only: bool,
}

impl ApiKeyRecord {
    /// Whether the key is accepted at `now`: not revoked and not expired.
    pub fn is_active(&self, now: Timestamp) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|at| at > now)
    }
}

/// The columns [`decode_operation`] reads, each named (`$p` prefixes each, e.g. `"o."`). Every
/// statement that returns operation rows lists exactly these instead of `*`: a prepared `*` changes
/// its result type when a migration adds a column, and Postgres then refuses the running
/// process's cached plan ("cached plan must not change result type", issue 56).
macro_rules! operation_columns {
    ($p:literal) => {
        concat!(
            $p,
            "id, ",
            $p,
            "tenant_id, ",
            $p,
            "business_key, ",
            $p,
            "kind, ",
            $p,
            "amount_minor, ",
            $p,
            "currency, ",
            $p,
            "customer, ",
            $p,
            "payment_method, ",
            $p,
            "invoice, ",
            $p,
            "destination, ",
            $p,
            "description, ",
            $p,
            "refund_of, ",
            $p,
            "refund_payment_reference, ",
            $p,
            "refund_reason, ",
            $p,
            "details_hash, ",
            $p,
            "status, ",
            $p,
            "attempt, ",
            $p,
            "lease_owner, ",
            $p,
            "lease_expires_at, ",
            $p,
            "idempotency_key, ",
            $p,
            "first_submitted_at, ",
            $p,
            "first_submitted_attempt, ",
            $p,
            "last_submitted_at, ",
            $p,
            "submit_count, ",
            $p,
            "not_sent_attempts, ",
            $p,
            "external_ref, ",
            $p,
            "result, ",
            $p,
            "failure_code, ",
            $p,
            "failure_message, ",
            $p,
            "available_at, ",
            $p,
            "next_check_at, ",
            $p,
            "check_count, ",
            $p,
            "approved_hash, ",
            $p,
            "approved_by, ",
            $p,
            "approval_expires_at, ",
            $p,
            "created_at, ",
            $p,
            "updated_at, ",
            $p,
            "processor, ",
            $p,
            "priority, ",
            $p,
            "not_before"
        )
    };
    () => {
        operation_columns!("")
    };
}
pub(crate) use operation_columns;

/// The columns [`decode_event`] reads (see [`operation_columns`] for why never `*`).
macro_rules! event_columns {
    () => {
        "at, event, actor, from_status, to_status, attempt, detail"
    };
}
pub(crate) use event_columns;

/// The columns [`decode_api_key`] reads (see [`operation_columns`] for why never `*`).
macro_rules! api_key_columns {
    () => {
        "key_id, key_hash, tenant_id, role, label, created_at, expires_at, revoked_at, revoked_by, \
         revoked_reason, replaced_by, last_used_at, read_only"
    };
}
pub(crate) use api_key_columns;

/// Decodes an `api_keys` row from either store.
pub(crate) fn decode_api_key(row: &impl LedgerRow) -> Result<ApiKeyRecord, LedgerError> {
    let role: String = row.get("role")?;
    Ok(ApiKeyRecord {
        key_id: row.get("key_id")?,
        key_hash: row.get("key_hash")?,
        tenant: row.get("tenant_id")?,
        role: Role::parse(&role).ok_or_else(|| corrupt(format!("role {role}")))?,
        label: row.get("label")?,
        created_at: row.get("created_at")?,
        expires_at: row.get("expires_at")?,
        revoked_at: row.get("revoked_at")?,
        revoked_by: row.get("revoked_by")?,
        revoked_reason: row.get("revoked_reason")?,
        replaced_by: row.get("replaced_by")?,
        last_used_at: row.get("last_used_at")?,
        read_only: row.get::<i64>("read_only")? != 0,
    })
}

/// Decodes an `operations` row from either store.
pub(crate) fn decode_operation(row: &impl LedgerRow) -> Result<Operation, LedgerError> {
    let text = |c: &'static str| row.get::<Option<String>>(c);
    let raw = RawDetails {
        kind: row.get("kind")?,
        amount: row.get("amount_minor")?,
        currency: row.get("currency")?,
        customer: row.get("customer")?,
        payment_method: row.get("payment_method")?,
        invoice: row.get("invoice")?,
        destination: text("destination")?,
        description: text("description")?,
        refund_of: match text("refund_of")? {
            None => None,
            Some(payment_operation) => Some(RawRefundOf {
                payment_operation,
                payment_reference: text("refund_payment_reference")?.unwrap_or_default(),
                reason: text("refund_reason")?.unwrap_or_default(),
            }),
        },
    };
    Ok(Operation {
        id: row.get("id")?,
        tenant: row.get("tenant_id")?,
        business_key: row.parse("business_key", BusinessKey::parse)?,
        details: Details::parse(&raw).map_err(corrupt)?,
        details_hash: row.parse("details_hash", DetailsHash::parse)?,
        status: row.get("status")?,
        attempt: row.get("attempt")?,
        lease_owner: row.get("lease_owner")?,
        lease_expires_at: row.get("lease_expires_at")?,
        idempotency_key: row.parse("idempotency_key", IdempotencyKey::parse)?,
        first_submitted_at: row.get("first_submitted_at")?,
        first_submitted_attempt: row.get("first_submitted_attempt")?,
        last_submitted_at: row.get("last_submitted_at")?,
        submit_count: row.get("submit_count")?,
        not_sent_attempts: row.get("not_sent_attempts")?,
        external_ref: row.get("external_ref")?,
        result: row.get("result")?,
        failure_code: row.get("failure_code")?,
        failure_message: row.get("failure_message")?,
        available_at: row.get("available_at")?,
        next_check_at: row.get("next_check_at")?,
        check_count: row.get("check_count")?,
        approved_hash: row.get("approved_hash")?,
        approved_by: row.get("approved_by")?,
        approval_expires_at: row.get("approval_expires_at")?,
        created_at: row.get("created_at")?,
        updated_at: row.get("updated_at")?,
        processor: match text("processor")? {
            None => None,
            Some(name) => Some(
                payonce_core::operation::ProcessorKind::parse(&name).ok_or_else(|| {
                    LedgerError::Corrupt(format!("operation names an unknown processor {name:?}"))
                })?,
            ),
        },
        priority: {
            let stored: i64 = row.get("priority")?;
            Priority::from_stored(stored)
                .ok_or_else(|| corrupt(format!("operation has an unknown priority {stored}")))?
        },
        not_before: row.get("not_before")?,
    })
}

/// Decodes an `operation_events` row.
pub(crate) fn decode_event(row: &impl LedgerRow) -> Result<OperationEvent, LedgerError> {
    Ok(OperationEvent {
        at: row.get("at")?,
        event: {
            let raw: String = row.get("event")?;
            EventName::parse(&raw).ok_or_else(|| corrupt(format!("event log name {raw}")))?
        },
        actor: row.get("actor")?,
        from_status: row.get("from_status")?,
        to_status: row.get("to_status")?,
        attempt: row.get("attempt")?,
        detail: row.get("detail")?,
    })
}

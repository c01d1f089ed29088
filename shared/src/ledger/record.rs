//! Rows as the ledger returns them, decoded from either store.

use super::LedgerError;
use crate::clock::Timestamp;
use crate::details::{Details, DetailsHash, RawDetails, RawRefundOf};
use crate::id::{BusinessKey, IdempotencyKey, OperationId, TenantId};
use crate::state::Status;
use serde::Serialize;
use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::{ColumnIndex, Database, Decode, Encode, Row, Type};

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
    pub lease_expires_at_ms: Option<Timestamp>,
    /// The key forwarded to the processor, derived once.
    pub idempotency_key: IdempotencyKey,
    /// First time a request may have left for the processor, ms.
    pub first_submitted_at_ms: Option<Timestamp>,
    /// The attempt that first submitted.
    pub first_submitted_attempt: Option<i64>,
    /// Latest submission, ms.
    pub last_submitted_at_ms: Option<Timestamp>,
    /// How many requests may have left (all with the same key).
    pub submit_count: i64,
    /// Processor reference.
    pub external_ref: Option<String>,
    /// Stored processor result (kept whole as evidence; serialized as its summary only).
    #[serde(serialize_with = "crate::processor::summary::serialize_summary")]
    pub result: Option<serde_json::Value>,
    /// Failure or rejection code.
    pub failure_code: Option<String>,
    /// Failure message or the latest reason.
    pub failure_message: Option<String>,
    /// When a ready row may be claimed, ms.
    pub available_at_ms: Timestamp,
    /// When the reconciler should next look at an unknown row, ms.
    pub next_check_at_ms: Option<Timestamp>,
    /// Lookups made so far.
    pub check_count: i64,
    /// Details hash the current approval binds to.
    pub approved_hash: Option<DetailsHash>,
    /// Who approved.
    pub approved_by: Option<String>,
    /// When the current approval expires, ms.
    pub approval_expires_at_ms: Option<Timestamp>,
    /// Created, ms.
    pub created_at_ms: Timestamp,
    /// Last changed, ms.
    pub updated_at_ms: Timestamp,
}

fn serialize_details<S: serde::Serializer>(d: &Details, s: S) -> Result<S::Ok, S::Error> {
    d.to_raw().serialize(s)
}

impl Operation {
    /// Whether the current approval binds to the current details and is unexpired at `now`.
    pub fn approval_valid_at(&self, now: Timestamp) -> bool {
        let hash_matches = self.approved_hash.as_ref() == Some(&self.details.hash())
            && self.details_hash == self.details.hash();
        hash_matches && self.approval_expires_at_ms.is_some_and(|t| t > now)
    }
}

/// A claimed operation: the row after the claim, with the attempt the worker must fence with.
pub type Claimed = Operation;

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
    pub lease_expires_at_ms: Timestamp,
    /// Whether a submission was recorded (then the outcome is unknown).
    pub submitted: bool,
}

/// One audit-trail entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OperationEvent {
    /// When, ms.
    pub at_ms: Timestamp,
    /// What happened (an event name of the state machine, or `create`, `submission_started`, ...).
    pub event: String,
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
    pub approved_at_ms: Timestamp,
    /// Valid until, ms.
    pub expires_at_ms: Timestamp,
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
    pub created_at_ms: Timestamp,
    /// Expires, ms.
    pub expires_at_ms: Timestamp,
    /// Used, ms.
    pub used_at_ms: Option<Timestamp>,
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
    pub created_at_ms: Timestamp,
    /// Refused from this instant on, ms; `None`: never expires.
    pub expires_at_ms: Option<Timestamp>,
    /// Revoked at, ms.
    pub revoked_at_ms: Option<Timestamp>,
    /// Who revoked it.
    pub revoked_by: Option<String>,
    /// Why it was revoked.
    pub revoked_reason: Option<String>,
    /// The key a rotation issued in its place.
    pub replaced_by: Option<String>,
    /// Last accepted, ms, to within the api's last-used resolution.
    pub last_used_at_ms: Option<Timestamp>,
}

impl ApiKeyRecord {
    /// Whether the key is accepted at `now`: not revoked and not expired.
    pub fn is_active(&self, now: Timestamp) -> bool {
        self.revoked_at_ms.is_none() && self.expires_at_ms.is_none_or(|at| at > now)
    }
}

/// Decodes an `api_keys` row from either store.
pub(crate) fn decode_api_key<'r, R>(row: &'r R) -> Result<ApiKeyRecord, LedgerError>
where
    R: Row,
    &'static str: ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
{
    let s = |c: &'static str| row.try_get::<String, _>(c);
    let os = |c: &'static str| row.try_get::<Option<String>, _>(c);
    let ot = |c: &'static str| row.try_get::<Option<Timestamp>, _>(c);
    let tenant = s("tenant_id")?;
    let role = s("role")?;
    Ok(ApiKeyRecord {
        key_id: s("key_id")?,
        key_hash: s("key_hash")?,
        tenant: TenantId::parse(&tenant).map_err(corrupt)?,
        role: Role::parse(&role).ok_or_else(|| corrupt(format!("role {role}")))?,
        label: s("label")?,
        created_at_ms: row.try_get("created_at")?,
        expires_at_ms: ot("expires_at")?,
        revoked_at_ms: ot("revoked_at")?,
        revoked_by: os("revoked_by")?,
        revoked_reason: os("revoked_reason")?,
        replaced_by: os("replaced_by")?,
        last_used_at_ms: ot("last_used_at")?,
    })
}

/// Rows per state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatusCount {
    /// The state.
    pub status: Status,
    /// How many rows.
    pub count: i64,
    /// Oldest `updated_at` among them, ms.
    pub oldest_updated_at_ms: Option<Timestamp>,
    /// Earliest first submission among them, ms: how long the oldest outcome has been in doubt
    /// (`updated_at` moves with every re-check, so it cannot say that).
    pub oldest_submitted_at_ms: Option<Timestamp>,
}

// An instant is stored as the `BIGINT` (`INTEGER` in SQLite) of its milliseconds since the epoch:
// these three impls are the one place it crosses into and out of SQL.
impl<DB: Database> Type<DB> for Timestamp
where
    i64: Type<DB>,
{
    fn type_info() -> DB::TypeInfo {
        <i64 as Type<DB>>::type_info()
    }
    fn compatible(ty: &DB::TypeInfo) -> bool {
        <i64 as Type<DB>>::compatible(ty)
    }
}

impl<'q, DB: Database> Encode<'q, DB> for Timestamp
where
    i64: Encode<'q, DB>,
{
    fn encode_by_ref(
        &self,
        buf: &mut <DB as Database>::ArgumentBuffer,
    ) -> Result<IsNull, BoxDynError> {
        self.as_millis().encode_by_ref(buf)
    }
}

impl<'r, DB: Database> Decode<'r, DB> for Timestamp
where
    i64: Decode<'r, DB>,
{
    fn decode(value: <DB as Database>::ValueRef<'r>) -> Result<Self, BoxDynError> {
        Ok(Timestamp::from_millis(i64::decode(value)?))
    }
}

fn corrupt(e: impl std::fmt::Display) -> LedgerError {
    LedgerError::Corrupt(e.to_string())
}

/// Decodes an `operations` row from either store.
pub(crate) fn decode_operation<'r, R>(row: &'r R) -> Result<Operation, LedgerError>
where
    R: Row,
    &'static str: ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
{
    let s = |c: &'static str| row.try_get::<String, _>(c);
    let os = |c: &'static str| row.try_get::<Option<String>, _>(c);
    let i = |c: &'static str| row.try_get::<i64, _>(c);
    let oi = |c: &'static str| row.try_get::<Option<i64>, _>(c);
    let t = |c: &'static str| row.try_get::<Timestamp, _>(c);
    let ot = |c: &'static str| row.try_get::<Option<Timestamp>, _>(c);
    let raw = RawDetails {
        kind: s("kind")?,
        amount: i("amount_minor")?,
        currency: s("currency")?,
        customer: s("customer")?,
        payment_method: s("payment_method")?,
        invoice: s("invoice")?,
        destination: os("destination")?,
        description: os("description")?,
        refund_of: match os("refund_of")? {
            None => None,
            Some(payment_operation) => Some(RawRefundOf {
                payment_operation,
                payment_reference: os("refund_payment_reference")?.unwrap_or_default(),
                reason: os("refund_reason")?.unwrap_or_default(),
            }),
        },
    };
    let status_raw = s("status")?;
    Ok(Operation {
        id: OperationId::parse(&s("id")?).map_err(corrupt)?,
        tenant: TenantId::parse(&s("tenant_id")?).map_err(corrupt)?,
        business_key: BusinessKey::parse(&s("business_key")?).map_err(corrupt)?,
        details: Details::parse(&raw).map_err(corrupt)?,
        details_hash: DetailsHash::parse(&s("details_hash")?).map_err(corrupt)?,
        status: Status::parse(&status_raw)
            .ok_or_else(|| corrupt(format!("unknown status {status_raw}")))?,
        attempt: i("attempt")?,
        lease_owner: os("lease_owner")?,
        lease_expires_at_ms: ot("lease_expires_at")?,
        idempotency_key: IdempotencyKey::parse(&s("idempotency_key")?).map_err(corrupt)?,
        first_submitted_at_ms: ot("first_submitted_at")?,
        first_submitted_attempt: oi("first_submitted_attempt")?,
        last_submitted_at_ms: ot("last_submitted_at")?,
        submit_count: i("submit_count")?,
        external_ref: os("external_ref")?,
        result: os("result")?
            .map(|r| serde_json::from_str(&r))
            .transpose()
            .map_err(corrupt)?,
        failure_code: os("failure_code")?,
        failure_message: os("failure_message")?,
        available_at_ms: t("available_at")?,
        next_check_at_ms: ot("next_check_at")?,
        check_count: i("check_count")?,
        approved_hash: os("approved_hash")?
            .map(|h| DetailsHash::parse(&h))
            .transpose()
            .map_err(corrupt)?,
        approved_by: os("approved_by")?,
        approval_expires_at_ms: ot("approval_expires_at")?,
        created_at_ms: t("created_at")?,
        updated_at_ms: t("updated_at")?,
    })
}

/// Decodes an `operation_events` row.
pub(crate) fn decode_event<'r, R>(row: &'r R) -> Result<OperationEvent, LedgerError>
where
    R: Row,
    &'static str: ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
{
    Ok(OperationEvent {
        at_ms: row.try_get("at")?,
        event: row.try_get("event")?,
        actor: row.try_get("actor")?,
        from_status: row.try_get("from_status")?,
        to_status: row.try_get("to_status")?,
        attempt: row.try_get("attempt")?,
        detail: row.try_get("detail")?,
    })
}

//! The REST API for callers and services: operations (create-or-get by business key, confirmation
//! links, service approvals, cancel, request execution, read with history, here), their batch create
//! ([`intake`]), refunds ([`refunds`]) and the tenant's profile ([`profile`]); [`routes`] lists them.
//! Every query is scoped by the tenant of the caller's key; an id of another tenant is answered
//! exactly like an unknown one.

pub mod intake;
pub mod profile;
pub mod refunds;

use crate::answer::{self, Answer};
use crate::auth::Caller;
use crate::body::ApiJson;
use crate::errors::{ErrorCode, HttpError};
use crate::schedule::{Schedule, ScheduleFields, parse_schedule};
use crate::state::AppState;
use crate::verify::{self, Issue, IssuedLink, OPEN_LINKS_MAX};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use payonce_core::clock::Timestamp;
use payonce_core::details::{Details, DetailsHash, OperationKind, RawDetails};
use payonce_core::id::{BusinessKey, OperationId, TenantId};
use payonce_core::priority::{Priority, approval_expires_at};
use payonce_core::state::Status;
use payonce_core::summary::summary;
use payonce_ledger::intake::{BatchApproval, BatchItem};
use payonce_ledger::verification::LinkOrigin;
use payonce_ledger::{Cancel, NewApproval, NewOperation, Operation, OperationEvent, Role};
use payonce_processor::{ProcessorKind, carry};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::group_commit::SERVICE_APPROVAL;

/// Longest `approved_by` accepted.
pub const APPROVED_BY_LEN_MAX: usize = 128;

/// `POST /v1/operations` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateRequest {
    /// The trusted workflow's key.
    pub business_key: String,
    /// The authoritative details.
    pub details: RawDetails,
    /// The service's approval of these details (a mandate it holds): create and enqueue at once.
    #[serde(default)]
    pub approval: Option<ApproveRequest>,
    /// `"interactive"` (the default here) or `"bulk"` (`schedule`).
    #[serde(default)]
    pub priority: Option<Value>,
    /// Not run before this RFC 3339 time (`schedule`).
    #[serde(default)]
    pub not_before: Option<Value>,
    /// Not run before this, ms since the epoch (at most one of `not_before` and this).
    #[serde(default)]
    pub not_before_ms: Option<Value>,
}

impl CreateRequest {
    /// The schedule fields, unread.
    pub fn schedule_fields(&self) -> ScheduleFields {
        ScheduleFields {
            priority: self.priority.clone(),
            not_before: self.not_before.clone(),
            not_before_ms: self.not_before_ms.clone(),
        }
    }
}

/// `POST /v1/operations/{id}/approve` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApproveRequest {
    /// The hash of the details the approver saw.
    pub details_hash: String,
    /// Who approved (e.g. `customer:cus_123` for an approval taken in the service's own checkout).
    pub approved_by: String,
}

/// An operation as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct OperationView {
    /// Id.
    pub id: String,
    /// The trusted workflow's key.
    pub business_key: String,
    /// State.
    pub status: Status,
    /// The authoritative details.
    pub details: RawDetails,
    /// Their hash (what approvals bind to).
    pub details_hash: String,
    /// Attempts so far.
    pub attempt: i64,
    /// Whether a request may have left for the processor.
    pub submitted: bool,
    /// Processor reference.
    pub external_ref: Option<String>,
    /// Summary of the stored processor object (`processor::summary`: never the client secret).
    pub result: Option<Value>,
    /// Failure or rejection code.
    pub failure_code: Option<String>,
    /// Failure message or latest reason.
    pub failure_message: Option<String>,
    /// Who approved.
    pub approved_by: Option<String>,
    /// When the approval expires, ms: `approval_ttl` after the later of the approval and
    /// `not_before_ms`.
    #[serde(rename = "approval_expires_at_ms")]
    pub approval_expires_at: Option<Timestamp>,
    /// Who waits for it: `interactive` or `bulk`.
    pub priority: Priority,
    /// Not run before this, ms; `null` when it may run as soon as it is approved.
    #[serde(rename = "not_before_ms")]
    pub not_before: Option<Timestamp>,
    /// Created, ms.
    #[serde(rename = "created_at_ms")]
    pub created_at: Timestamp,
    /// Updated, ms.
    #[serde(rename = "updated_at_ms")]
    pub updated_at: Timestamp,
}

impl From<&Operation> for OperationView {
    fn from(op: &Operation) -> Self {
        OperationView {
            id: op.id.as_str().to_string(),
            business_key: op.business_key.as_str().to_string(),
            status: op.status,
            details: op.details.to_raw(),
            details_hash: op.details_hash.as_str().to_string(),
            attempt: op.attempt,
            submitted: op.first_submitted_at.is_some(),
            external_ref: op.external_ref.clone(),
            result: op.result.as_ref().map(summary),
            failure_code: op.failure_code.clone(),
            failure_message: op.failure_message.clone(),
            approved_by: op.approved_by.clone(),
            approval_expires_at: op.approval_expires_at,
            priority: op.priority,
            not_before: op.not_before,
            created_at: op.created_at,
            updated_at: op.updated_at,
        }
    }
}

/// `GET /v1/operations/{id}` answer: the operation and its audit trail.
#[derive(Debug, Clone, Serialize)]
pub struct OperationWithEvents {
    /// The operation.
    #[serde(flatten)]
    pub operation: OperationView,
    /// Every transition, oldest first; absent for assistant keys (actors, key labels and on-call
    /// reasons are internal).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<OperationEvent>>,
}

/// The REST routes of operations, refunds and the tenant's profile.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/operations", post(create))
        .route(
            "/v1/operations/batch",
            post(intake::create_batch).layer(DefaultBodyLimit::max(intake::BATCH_BODY_LIMIT_BYTES)),
        )
        .route("/v1/operations/{id}", get(read))
        .route(
            "/v1/operations/{id}/approval-requests",
            post(request_approval),
        )
        .route("/v1/operations/{id}/approve", post(approve))
        .route("/v1/operations/{id}/cancel", post(cancel))
        .route("/v1/operations/{id}/execute", post(execute))
        .route("/v1/operations/{id}/refunds", get(refunds::of_payment))
        .route("/v1/refunds", post(refunds::create))
        .route("/v1/refunds/{id}/approve", post(refunds::approve))
        .route("/v1/tenant/profile", get(profile::get).put(profile::put))
}

/// Parses a path id; a malformed one is answered like an unknown one.
pub fn parse_id(raw: &str) -> Result<OperationId, HttpError> {
    OperationId::parse(raw).map_err(|_| HttpError::not_found())
}

/// Reads an operation in the caller's tenant.
pub async fn load(state: &AppState, caller: &Caller, raw_id: &str) -> Result<Operation, HttpError> {
    let id = parse_id(raw_id)?;
    Ok(state.ledger().get(&caller.tenant, &id).await?)
}

/// A refund is approved by a person of the merchant (`POST /v1/refunds/{id}/approve`), never by a
/// service key or a customer's confirmation link.
fn refuse_refund(op: &Operation) -> Result<(), HttpError> {
    match op.details.kind() {
        OperationKind::Payment => Ok(()),
        OperationKind::Refund => Err(HttpError::new(
            ErrorCode::ApproverNotAllowed,
            "a refund is approved by a person of the merchant with an on-call key \
             (POST /v1/refunds/{id}/approve), never by a service key or a customer link; nothing was approved",
        )),
    }
}

/// A 400 `invalid_request` carrying why (the api's JSON routes share it).
pub(crate) fn invalid(e: impl std::fmt::Display) -> HttpError {
    HttpError::new(ErrorCode::InvalidRequest, e.to_string())
}

/// `POST /v1/operations` (service): 201 new, 200 existing with the same details, 409
/// `business_key_conflict` when the key names different details. With `approval`, the operation is
/// also approved and enqueued in the same transaction (the batch route's code path, written with
/// the concurrent requests beside it: `group_commit`), answered as `approve` would: 409
/// `approval_mismatch` (nothing created) or `wrong_state`.
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<CreateRequest>,
) -> Result<(StatusCode, Json<OperationView>), HttpError> {
    caller.require(&[Role::Service], "create operations")?;
    let schedule = parse_schedule(
        &body.schedule_fields(),
        Priority::Interactive,
        state.now(),
        "",
    )
    .map_err(invalid)?;
    let new = new_operation(&state, &caller, &body.business_key, &body.details, schedule)?;
    if carry::may_be_uncarried(&new.details) {
        let processor = tenant_processor(&state, &caller.tenant).await?;
        refuse_uncarried(processor, &new.details)?;
    }
    let created = match body.approval {
        Some(approval) => {
            let approval = parse_approval(&approval)?;
            let item = BatchItem {
                new,
                approval: Some(approval),
            };
            state
                .group_commit()
                .create_approved(caller.tenant.clone(), caller.actor(), item)
                .await?
        }
        None => state.ledger().create_or_get(new, state.now()).await?,
    };
    let status = if created.inserted {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(OperationView::from(&created.operation))))
}

/// A new payment of the caller's tenant from a request's business key, details and checked
/// schedule, checked as every create route checks them (`POST /v1/operations` and each item of its
/// batch).
pub fn new_operation(
    state: &AppState,
    caller: &Caller,
    business_key: &str,
    details: &RawDetails,
    schedule: Schedule,
) -> Result<NewOperation, HttpError> {
    let business_key = BusinessKey::parse(business_key).map_err(invalid)?;
    let details = Details::parse(details).map_err(invalid)?;
    // A refund's payment reference and parties come from the ledger's record of the payment, never
    // from a request body: refunds are created by `POST /v1/refunds`.
    match details.kind() {
        OperationKind::Payment => {}
        OperationKind::Refund => {
            return Err(invalid(
                "details.kind: refunds are created with POST /v1/refunds, which reads the payment from the ledger",
            ));
        }
    }
    let mut new = NewOperation::keyed(
        &state.config().key_secret,
        caller.tenant.clone(),
        business_key,
        details,
        caller.actor(),
    );
    new.priority = schedule.priority;
    new.not_before = schedule.not_before;
    Ok(new)
}

/// The processor `tenant`'s new operations are bound to: its own choice, else this api's
/// configured one (`None`: neither is known here; the submission step refuses what it cannot carry).
pub(crate) async fn tenant_processor(
    state: &AppState,
    tenant: &TenantId,
) -> Result<Option<ProcessorKind>, HttpError> {
    let chosen = state.ledger().profiles().processor(tenant).await?;
    Ok(chosen.or_else(|| state.default_processor()))
}

/// A 400 naming the detail `processor` cannot carry, if any (issue 53: a `destination` on Adyen):
/// what executes must be what was approved, so nothing is created that would be sent without it.
pub(crate) fn refuse_uncarried(
    processor: Option<ProcessorKind>,
    details: &Details,
) -> Result<(), HttpError> {
    match processor.and_then(|kind| carry::uncarried(kind, details)) {
        Some(uncarried) => Err(invalid(format!(
            "{uncarried}; create it without one, or for a tenant on a processor that carries it; \
             nothing was created"
        ))),
        None => Ok(()),
    }
}

/// An approval's details hash and approver, checked as `POST /v1/operations/{id}/approve` checks
/// them.
pub fn parse_approval(body: &ApproveRequest) -> Result<BatchApproval, HttpError> {
    let details_hash = DetailsHash::parse(&body.details_hash).map_err(invalid)?;
    let approved_by = body.approved_by.trim();
    if approved_by.is_empty()
        || approved_by.chars().count() > APPROVED_BY_LEN_MAX
        || approved_by.chars().any(char::is_control)
    {
        return Err(invalid(format!(
            "approved_by must be 1 to {APPROVED_BY_LEN_MAX} printable characters"
        )));
    }
    Ok(BatchApproval {
        details_hash,
        approved_by: approved_by.to_string(),
    })
}

/// `GET /v1/operations/{id}` (any role): state, the processor object's summary, and (service and
/// on-call) the event history.
pub async fn read(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<OperationWithEvents>, HttpError> {
    let op = load(&state, &caller, &id).await?;
    let events = match caller.role {
        Role::Service | Role::OnCall => Some(state.ledger().events(&caller.tenant, &op.id).await?),
        Role::Assistant => None,
    };
    Ok(Json(OperationWithEvents {
        operation: OperationView::from(&op),
        events,
    }))
}

/// `POST /v1/operations/{id}/approval-requests` (service): a fresh single-use confirmation link for
/// the tenant's app to send; the page still needs the customer's own proof (`confirm`).
pub async fn request_approval(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<IssuedLink>), HttpError> {
    caller.require(&[Role::Service], "request approvals")?;
    let op = load(&state, &caller, &id).await?;
    refuse_refund(&op)?;
    let link = match verify::issue_link(&state, &op, LinkOrigin::Service).await? {
        Issue::Issued(link) => link,
        Issue::TooManyOpen => {
            return Err(HttpError::new(
                ErrorCode::TooManyOpenLinks,
                format!(
                    "this operation already has {OPEN_LINKS_MAX} unused, unexpired confirmation links; \
                     use one of them or wait until they expire"
                ),
            ));
        }
        Issue::NotConfigured => {
            return Err(HttpError::new(
                ErrorCode::VerificationNotConfigured,
                "this tenant has no customer verification method, so a link could approve nothing; \
                 an operator sets one with `payonce tenant set-verification`",
            ));
        }
    };
    Ok((StatusCode::CREATED, Json(link)))
}

/// `POST /v1/operations/{id}/approve` (service): records an approval of `details_hash` and enqueues.
pub async fn approve(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<ApproveRequest>,
) -> Result<Json<OperationView>, HttpError> {
    caller.require(&[Role::Service], "approve operations")?;
    let BatchApproval {
        details_hash,
        approved_by,
    } = parse_approval(&body)?;
    let op = load(&state, &caller, &id).await?;
    refuse_refund(&op)?;
    let id = op.id;
    let now = state.now();
    let approval = NewApproval {
        operation: id.clone(),
        details_hash,
        approved_by,
        method: SERVICE_APPROVAL.to_string(),
        // Never before the payment may run (a scheduled one waits for its `not_before`).
        expires_at: approval_expires_at(now, op.not_before, state.config().approval_ttl),
        priority: None,
    };
    let op = state
        .ledger()
        .approve(&caller.tenant, approval, now)
        .await?;
    Ok(Json(OperationView::from(&op)))
}

/// `POST /v1/operations/{id}/cancel` (service): withdraws an operation that has not started.
pub async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<OperationView>, HttpError> {
    caller.require(&[Role::Service], "cancel operations")?;
    let id = parse_id(&id)?;
    let op = state
        .ledger()
        .cancel(
            &caller.tenant,
            &Cancel {
                id: &id,
                actor: &caller.actor(),
            },
            state.now(),
        )
        .await?;
    Ok(Json(OperationView::from(&op)))
}

/// `POST /v1/operations/{id}/execute` (service, assistant): requests execution and returns the stored
/// truth. An approved operation is already enqueued (the ledger is the queue), so this never writes
/// to the operation; when approval is missing it asks the customer (never returning a link).
pub async fn execute(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Answer>, HttpError> {
    caller.require(&[Role::Service, Role::Assistant], "request execution")?;
    let op = load(&state, &caller, &id).await?;
    Ok(Json(answer::of_operation(&state, &op).await?))
}

//! Refunds over HTTP. A service key creates a refund of a succeeded payment the ledger holds: the
//! payment's processor reference, customer, currency and invoice come from the ledger, never from the
//! body. A person of the merchant approves it with an on-call key; nobody else can (not the service
//! key that created it, not an assistant, not a customer link). The assistant's `request_refund`
//! tool only proposes, through [`propose`]. The over-refund guard is the ledger's (`refunds.rs`).

use crate::auth::Caller;
use crate::body::ApiJson;
use crate::errors::{ErrorCode, HttpError};
use crate::operations::{OperationView, invalid, load, parse_id};
use crate::state::AppState;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use payonce_core::details::{Details, DetailsHash, OperationKind, RefundReason};
use payonce_core::id::{BusinessKey, OperationId, TenantId};
use payonce_core::state::Status;
use payonce_ledger::refunds::{PROPOSAL_KEY_PREFIX, RefundTotals};
use payonce_ledger::{LedgerError, NewApproval, NewOperation, Operation, Role};
use serde::{Deserialize, Serialize};

/// Most refunds `GET /v1/operations/{id}/refunds` lists (oldest first); the totals count them all.
pub const REFUNDS_LISTED_MAX: u32 = 100;
/// The approval method recorded for a refund approved with an on-call key.
pub const ON_CALL_APPROVAL: &str = "on_call_key";

/// `POST /v1/refunds` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateRefundRequest {
    /// The trusted workflow's key (one refund per key).
    pub business_key: String,
    /// The succeeded payment operation to give money back from.
    pub payment_operation_id: String,
    /// Minor units, in the payment's currency; omitted: the payment's whole amount.
    #[serde(default)]
    pub amount: Option<i64>,
    /// `duplicate`, `fraudulent` or `requested_by_customer`.
    pub reason: String,
}

/// `POST /v1/refunds/{id}/approve` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApproveRefundRequest {
    /// The hash of the refund details the approver saw.
    pub details_hash: String,
}

/// `GET /v1/operations/{id}/refunds` answer: a payment's refunds beside it.
#[derive(Debug, Clone, Serialize)]
pub struct PaymentRefunds {
    /// The payment.
    pub payment_operation_id: String,
    /// What its refunds gave back or hold.
    pub totals: RefundTotals,
    /// What a new refund may still ask for.
    pub refundable_minor: i64,
    /// Its refunds, oldest first (at most [`REFUNDS_LISTED_MAX`]).
    pub refunds: Vec<OperationView>,
}

/// Why a refund could not be proposed or created.
#[derive(Debug, thiserror::Error)]
pub enum RefundError {
    /// An argument is malformed or out of its limits.
    #[error("{0}")]
    Invalid(String),
    /// No such payment in the tenant.
    #[error("no payment with that operation id exists")]
    NotFound,
    /// The ledger refused or failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

impl From<RefundError> for HttpError {
    fn from(e: RefundError) -> Self {
        match e {
            RefundError::Invalid(why) => HttpError::new(ErrorCode::InvalidRequest, why),
            RefundError::NotFound => HttpError::not_found(),
            RefundError::Ledger(e) => e.into(),
        }
    }
}

/// The refund of `amount` (or the whole payment) from the payment `payment` of `tenant`, built from
/// the ledger's record of the payment.
async fn details_of(
    state: &AppState,
    tenant: &TenantId,
    payment: &OperationId,
    amount: Option<i64>,
    reason: RefundReason,
) -> Result<Details, RefundError> {
    let paid = match state.ledger().get(tenant, payment).await {
        Ok(op) => op,
        Err(LedgerError::NotFound) => return Err(RefundError::NotFound),
        Err(e) => return Err(e.into()),
    };
    let not_refundable = |why| {
        RefundError::Ledger(LedgerError::NotRefundable {
            payment: payment.clone(),
            why,
        })
    };
    match paid.details.kind() {
        OperationKind::Payment => {}
        OperationKind::Refund => return Err(not_refundable("only a payment can be refunded")),
    }
    let reference = match (&paid.status, &paid.external_ref) {
        (Status::Succeeded, Some(reference)) => reference,
        _ => return Err(not_refundable("only a succeeded payment can be refunded")),
    };
    let amount = amount.unwrap_or(paid.details.money().amount_minor());
    // More than the whole payment is more than its refunds can ever leave: the documented
    // `over_refund` (REST and the tool alike), not a malformed request (issue 53).
    if amount > paid.details.money().amount_minor() {
        let totals = state.ledger().refund_totals(tenant, payment).await?;
        return Err(RefundError::Ledger(LedgerError::OverRefund {
            payment: payment.clone(),
            requested_minor: amount,
            refundable_minor: totals.refundable_minor(),
        }));
    }
    Details::refund(&paid.details, &paid.id, reference, amount, reason)
        .map_err(|e| RefundError::Invalid(e.to_string()))
}

/// Creates (or gets, for the same business key and details) a refund awaiting approval.
pub async fn create_refund(
    state: &AppState,
    caller: &Caller,
    business_key: BusinessKey,
    payment: &OperationId,
    amount: Option<i64>,
    reason: RefundReason,
) -> Result<(Operation, bool), RefundError> {
    let details = details_of(state, &caller.tenant, payment, amount, reason).await?;
    let new = NewOperation::keyed(
        &state.config().key_secret,
        caller.tenant.clone(),
        business_key,
        details,
        caller.actor(),
    );
    let created = state.ledger().create_or_get(new, state.now()).await?;
    Ok((created.operation, created.inserted))
}

/// The assistant's proposal: the existing refund for the same payment and amount (whatever its
/// state or reason), or a new one awaiting approval. Its business key is the payment and amount, so
/// asking again never proposes a second refund of the same money; the ledger bounds and expires
/// proposals by that key's prefix (`ledger::refunds::PROPOSALS_OPEN_MAX`, `PROPOSAL_TTL`).
pub async fn propose(
    state: &AppState,
    caller: &Caller,
    payment: &OperationId,
    amount: Option<i64>,
    reason: RefundReason,
) -> Result<Operation, RefundError> {
    let details = details_of(state, &caller.tenant, payment, amount, reason).await?;
    let key = format!(
        "{PROPOSAL_KEY_PREFIX}{}:{}",
        payment.as_str(),
        details.money().amount_minor()
    );
    let business_key = BusinessKey::parse(&key).map_err(|e| RefundError::Invalid(e.to_string()))?;
    let amount = Some(details.money().amount_minor());
    match create_refund(state, caller, business_key, payment, amount, reason).await {
        Ok((op, _)) => Ok(op),
        // The same payment and amount proposed with another reason: that proposal is the truth.
        Err(RefundError::Ledger(LedgerError::Conflict { existing })) => {
            Ok(state.ledger().get(&caller.tenant, &existing).await?)
        }
        Err(e) => Err(e),
    }
}

/// `POST /v1/refunds` (service): 201 new, 200 existing with the same details; 409 `over_refund`,
/// `not_refundable`, `business_key_conflict`; 404 when the payment is not the tenant's.
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<CreateRefundRequest>,
) -> Result<(StatusCode, Json<OperationView>), HttpError> {
    caller.require(&[Role::Service], "create refunds")?;
    let business_key = BusinessKey::parse(&body.business_key).map_err(invalid)?;
    // The prefix marks an assistant's proposal, which the ledger bounds and lets expire.
    if business_key.as_str().starts_with(PROPOSAL_KEY_PREFIX) {
        return Err(invalid(format!(
            "business_key: keys starting with {PROPOSAL_KEY_PREFIX} are reserved for assistants' proposals"
        )));
    }
    let payment = OperationId::parse(&body.payment_operation_id)
        .map_err(|e| invalid(format!("payment_operation_id: {e}")))?;
    let reason = RefundReason::parse(&body.reason).map_err(invalid)?;
    let (op, inserted) =
        create_refund(&state, &caller, business_key, &payment, body.amount, reason).await?;
    let status = if inserted {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(OperationView::from(&op))))
}

/// `POST /v1/refunds/{id}/approve` (on-call: a person of the merchant): approves exactly the refund
/// details of `details_hash` and enqueues the refund. A payment's id here is not found.
pub async fn approve(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<ApproveRefundRequest>,
) -> Result<Json<OperationView>, HttpError> {
    caller.require(
        &[Role::OnCall],
        "approve refunds (a person of the merchant approves them with an on-call key)",
    )?;
    caller.require_writer("approve refunds")?;
    let details_hash = DetailsHash::parse(&body.details_hash).map_err(invalid)?;
    let op = load(&state, &caller, &id).await?;
    match op.details.kind() {
        OperationKind::Refund => {}
        OperationKind::Payment => return Err(HttpError::not_found()),
    }
    let now = state.now();
    let approval = NewApproval {
        operation: op.id.clone(),
        details_hash,
        approved_by: caller.actor(),
        method: ON_CALL_APPROVAL.to_string(),
        expires_at: now + state.config().approval_ttl,
        priority: None,
    };
    let approved = state
        .ledger()
        .approve(&caller.tenant, approval, now)
        .await?;
    Ok(Json(OperationView::from(&approved)))
}

/// `GET /v1/operations/{id}/refunds` (service, on-call): a payment's refunds and their totals.
pub async fn of_payment(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<PaymentRefunds>, HttpError> {
    caller.require(&[Role::Service, Role::OnCall], "read refunds")?;
    let id = parse_id(&id)?;
    let ledger = state.ledger();
    let totals = ledger.refund_totals(&caller.tenant, &id).await?;
    let refunds = ledger
        .refunds_of(&caller.tenant, &id, REFUNDS_LISTED_MAX)
        .await?;
    Ok(Json(PaymentRefunds {
        payment_operation_id: id.as_str().to_string(),
        totals,
        refundable_minor: totals.refundable_minor(),
        refunds: refunds.iter().map(OperationView::from).collect(),
    }))
}

//! `POST /v1/operations/batch` (service): a billing run's payments created, and those carrying the
//! service's approval enqueued, up to [`BATCH_ITEMS_MAX`] per request in one ledger transaction
//! (`payonce_ledger::intake`). Each item is checked as `POST /v1/operations` checks its body
//! (and its approval as `POST /v1/operations/{id}/approve` does) and answered, in request order,
//! with the status and body that route would give it alone; a refused item changes nothing. A
//! retried batch is answered from the rows the first one wrote (idempotent per business key).
//! One difference: an item's `priority` defaults to `bulk` (a billing run), where the single
//! route's defaults to `interactive`.

use crate::auth::Caller;
use crate::body::ApiJson;
use crate::errors::{ErrorCode, HttpError};
use crate::operations::{
    ApproveRequest, OperationView, SERVICE_APPROVAL, invalid, new_operation, parse_approval,
    refuse_uncarried, tenant_processor,
};
use crate::schedule::{ScheduleFields, parse_schedule};
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use payonce_core::clock::Timestamp;
use payonce_core::details::RawDetails;
use payonce_core::priority::Priority;
use payonce_ledger::intake::{BATCH_ITEMS_MAX, Batch, BatchApproval, BatchItem};
use payonce_ledger::{Created, LimitError, NewOperation, Role};
use payonce_processor::carry;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashMap;

/// Largest batch body accepted: [`BATCH_ITEMS_MAX`] items of up to about 4 KiB each (every field
/// at its longest, in multi-byte characters). Past it: `413 body_too_large`, nothing written.
pub const BATCH_BODY_LIMIT_BYTES: usize = 4 * 1024 * 1024;

/// `POST /v1/operations/batch` body. Items are read one by one, so a malformed item is answered on
/// its own instead of failing the batch.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    /// The operations, each a `POST /v1/operations` body (`business_key`, `details`, and
    /// optionally `approval`, `priority` (default `bulk`), `not_before` or `not_before_ms`).
    pub operations: Vec<Value>,
}

/// One item of a batch: the single create route's body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ItemRequest {
    business_key: String,
    details: RawDetails,
    #[serde(default)]
    approval: Option<ApproveRequest>,
    #[serde(default)]
    priority: Option<Value>,
    #[serde(default)]
    not_before: Option<Value>,
    #[serde(default)]
    not_before_ms: Option<Value>,
}

/// An item's error, as the error body of the single route.
#[derive(Debug, Clone, Serialize)]
pub struct ItemError {
    /// The stable error code (docs/api.md).
    pub code: &'static str,
    /// Why.
    pub message: String,
}

/// One item's answer.
#[derive(Debug, Clone, Serialize)]
pub struct ItemAnswer {
    /// The item's position in the request, from 0.
    pub index: usize,
    /// The status the single route would have answered: 201, 200, 409, 400, 403.
    pub status: u16,
    /// The operation (201, 200).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation: Option<OperationView>,
    /// Why it was refused (4xx); nothing was written for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ItemError>,
}

/// How many items got each kind of answer.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct BatchSummary {
    /// 201: created by this request.
    pub created: usize,
    /// 200: the business key already named these details.
    pub existing: usize,
    /// 409: a different operation under the business key, an approval of other details, or an
    /// operation no longer awaiting approval.
    pub conflicts: usize,
    /// 400 (malformed or outside a limit) and 403 (not approvable by a service key).
    pub invalid: usize,
}

/// `POST /v1/operations/batch` answer (always `200` once the batch was read: each item carries its
/// own status).
#[derive(Debug, Clone, Serialize)]
pub struct BatchAnswer {
    /// Per item, in request order.
    pub results: Vec<ItemAnswer>,
    /// The counts.
    pub summary: BatchSummary,
}

impl ItemAnswer {
    fn refused(index: usize, e: &HttpError) -> Self {
        ItemAnswer {
            index,
            status: e.code().status().as_u16(),
            operation: None,
            error: Some(ItemError {
                code: e.code().code(),
                message: e.message().to_string(),
            }),
        }
    }

    fn written(index: usize, created: &Created) -> Self {
        ItemAnswer {
            index,
            status: if created.inserted { 201 } else { 200 },
            operation: Some(OperationView::from(&created.operation)),
            error: None,
        }
    }
}

impl BatchSummary {
    /// The counts of `results`.
    pub fn of(results: &[ItemAnswer]) -> Self {
        let mut summary = BatchSummary::default();
        for r in results {
            match r.status {
                201 => summary.created += 1,
                200 => summary.existing += 1,
                409 => summary.conflicts += 1,
                _ => summary.invalid += 1,
            }
        }
        summary
    }
}

/// Reads the item at `index` as the single create route reads its body, its schedule checked
/// against `now`, except that its priority defaults to bulk (a billing run); a schedule field's
/// error names the item and the field (`operations[3].not_before: ...`).
fn parse_item(
    state: &AppState,
    caller: &Caller,
    index: usize,
    raw: Value,
    now: Timestamp,
) -> Result<(NewOperation, Option<BatchApproval>), HttpError> {
    let item: ItemRequest = serde_path_to_error::deserialize(raw).map_err(|e| {
        HttpError::new(
            ErrorCode::InvalidJson,
            // The path as the single route's `invalid_json` gives it (none at the item's root).
            match e.path().to_string().as_str() {
                "." => format!("operations[{index}]: {}", e.inner()),
                path => format!("operations[{index}].{path}: {}", e.inner()),
            },
        )
    })?;
    let fields = ScheduleFields {
        priority: item.priority,
        not_before: item.not_before,
        not_before_ms: item.not_before_ms,
    };
    let prefix = format!("operations[{index}].");
    let schedule = parse_schedule(&fields, Priority::Bulk, now, &prefix).map_err(invalid)?;
    let new = new_operation(state, caller, &item.business_key, &item.details, schedule)?;
    let approval = item.approval.as_ref().map(parse_approval).transpose()?;
    Ok((new, approval))
}

/// `POST /v1/operations/batch` (service, not read-only).
pub async fn create_batch(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<BatchRequest>,
) -> Result<Json<BatchAnswer>, HttpError> {
    caller.require(&[Role::Service], "create operations")?;
    caller.require_writer("create operations")?;
    if body.operations.is_empty() || body.operations.len() > BATCH_ITEMS_MAX {
        return Err(invalid(format!(
            "{} (this one has {}); nothing was written",
            LimitError::BatchSize,
            body.operations.len()
        )));
    }
    let count = body.operations.len();
    // One now for the whole batch: every item's schedule is checked, and written, at it.
    let now = state.now();
    let mut answers: Vec<Option<ItemAnswer>> = vec![None; count];
    let mut items = Vec::new();
    let mut positions = Vec::new();
    let mut first: HashMap<String, usize> = HashMap::new();
    // Read once, and only for a batch with an item whose details a processor may refuse.
    let mut processor = None;
    for (index, raw) in body.operations.into_iter().enumerate() {
        let parsed = match parse_item(&state, &caller, index, raw, now) {
            Ok((new, approval)) if carry::may_be_uncarried(&new.details) => {
                if processor.is_none() {
                    processor = Some(tenant_processor(&state, &caller.tenant).await?);
                }
                refuse_uncarried(processor.flatten(), &new.details).map(|()| (new, approval))
            }
            other => other,
        };
        match parsed {
            Ok((new, approval)) => {
                let key = new.business_key.as_str().to_string();
                if let Some(at) = first.get(&key) {
                    let e = HttpError::from(payonce_ledger::LedgerError::from(
                        LimitError::BatchRepeat(*at),
                    ));
                    answers[index] = Some(ItemAnswer::refused(index, &e));
                    continue;
                }
                first.insert(key, index);
                positions.push(index);
                items.push(BatchItem { new, approval });
            }
            Err(e) => answers[index] = Some(ItemAnswer::refused(index, &e)),
        }
    }
    if !items.is_empty() {
        let batch = Batch {
            tenant: caller.tenant.clone(),
            items,
            actor: caller.actor(),
            method: SERVICE_APPROVAL.to_string(),
            // An item scheduled later keeps its approval as long after its `not_before`
            // (`Batch::approval_expires_at`).
            approval_expires_at: now + state.config().approval_ttl,
        };
        let results = state.ledger().create_batch(&batch, now).await?;
        for (index, result) in positions.into_iter().zip(results) {
            answers[index] = Some(match result {
                Ok(created) => ItemAnswer::written(index, &created),
                Err(e) => {
                    let e = HttpError::from(e);
                    if e.code().status().is_server_error() {
                        return Err(e);
                    }
                    ItemAnswer::refused(index, &e)
                }
            });
        }
    }
    let results: Vec<ItemAnswer> = answers.into_iter().flatten().collect();
    if results.len() != count {
        return Err(HttpError::internal(std::io::Error::other(
            "the ledger answered fewer batch items than it was given",
        )));
    }
    let summary = BatchSummary::of(&results);
    Ok(Json(BatchAnswer { results, summary }))
}

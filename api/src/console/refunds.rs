//! Refunds in the console: a payment's page shows its refunds beside it (refunded so far, in flight,
//! still refundable, one row per refund); a refund's page names its payment and, while it awaits
//! approval, offers the decision a person of the merchant makes (the signed-in on-call person):
//! approve (the same approval as `POST /v1/refunds/{id}/approve`) or decline (the ledger's cancel,
//! which frees the money the proposal held).

use super::session::OnCall;
use super::views::age;
use super::{invalid, operation_form};
use crate::errors::HttpError;
use crate::operations::refunds::REFUNDS_LISTED_MAX;
use crate::state::AppState;
use axum::extract::rejection::FormRejection;
use axum::extract::{Form, Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use maud::{Markup, html};
use payonce_core::details::{DetailsHash, OperationKind};
use payonce_core::id::OperationId;
use payonce_core::state::Status;
use payonce_ledger::refunds::RefundTotals;
use payonce_ledger::{Cancel, NewApproval, Operation};
use std::collections::HashMap;

/// The approval method recorded for a refund approved in the console.
pub const CONSOLE_APPROVAL: &str = "console";

/// A payment's refunds, for its page.
pub struct Beside {
    /// What they gave back or hold.
    pub totals: RefundTotals,
    /// The first [`REFUNDS_LISTED_MAX`], oldest first.
    pub refunds: Vec<Operation>,
}

/// The refunds beside `op` when it is a payment; `None` for a refund.
pub async fn beside(
    state: &AppState,
    who: &OnCall,
    op: &Operation,
) -> Result<Option<Beside>, HttpError> {
    match op.details.kind() {
        OperationKind::Refund => Ok(None),
        // Refund figures mean something only for money that was taken.
        OperationKind::Payment if op.status != payonce_core::state::Status::Succeeded => Ok(None),
        OperationKind::Payment => {
            let ledger = state.ledger();
            Ok(Some(Beside {
                totals: ledger.refund_totals(&who.tenant, &op.id).await?,
                refunds: ledger
                    .refunds_of(&who.tenant, &op.id, REFUNDS_LISTED_MAX)
                    .await?,
            }))
        }
    }
}

/// The page section: a payment's refunds, or a refund's payment and its approval form (none for a
/// read-only key, which the routes refuse anyway).
pub fn section(
    csrf: &str,
    op: &Operation,
    beside: Option<&Beside>,
    now_ms: i64,
    read_only: bool,
) -> Markup {
    let currency = op.details.money().currency();
    html! {
        @if let Some(b) = beside {
            section id="refunds" {
                h2 { "Refunds" }
                p id="refund-totals" {
                    (b.totals.refund_count) " refund(s): refunded " (currency.display_total(b.totals.refunded_minor))
                    ", in flight " (currency.display_total(b.totals.in_flight_minor))
                    ", refundable " (currency.display_total(b.totals.refundable_minor()))
                }
                @if !b.refunds.is_empty() {
                    table id="refund-rows" {
                        thead { tr { th { "Refund" } th { "State" } th { "Amount" } th { "Reason" } th { "Reference" } th { "Updated" } } }
                        tbody {
                            @for r in &b.refunds {
                                tr {
                                    td { a href=(format!("/console/operations/{}", r.id.as_str())) { code { (r.id.as_str()) } } }
                                    td { (r.status.as_str()) }
                                    td { (r.details.money().display()) }
                                    td { (r.details.refund_of().map(|of| of.reason().as_str()).unwrap_or("")) }
                                    td.mono { (r.external_ref.as_deref().unwrap_or("")) }
                                    td { (age(now_ms - r.updated_at.as_millis())) " ago" }
                                }
                            }
                        }
                    }
                }
            }
        }
        @if let Some(of) = op.details.refund_of() {
            section id="refund-of" {
                h2 { "Refund" }
                p {
                    "Gives money back from payment "
                    a id="refund-payment" href=(format!("/console/operations/{}", of.payment_operation().as_str())) {
                        code { (of.payment_operation().as_str()) }
                    }
                    " (" code { (of.payment_reference()) } "), reason " (of.reason().as_str()) "."
                }
                @if op.status == Status::AwaitingApproval && read_only {
                    p id="refund-read-only" { "It waits for a person of the merchant. This key is read-only: it cannot approve or decline it." }
                }
                @if op.status == Status::AwaitingApproval && !read_only {
                    p { "It waits for a person of the merchant. Approving records your name and enqueues exactly these details." }
                    form method="post" action=(format!("/console/operations/{}/approve-refund", op.id.as_str())) id="approve-refund" {
                        input type="hidden" name="csrf" value=(csrf);
                        input type="hidden" name="details_hash" value=(op.details_hash.as_str());
                        p { button type="submit" id="approve-refund-submit" { "Approve this refund of " (op.details.money().display()) } }
                    }
                    form method="post" action=(format!("/console/operations/{}/decline-refund", op.id.as_str())) id="decline-refund" {
                        input type="hidden" name="csrf" value=(csrf);
                        p { button type="submit" id="decline-refund-submit" { "Decline it (nothing is refunded)" } }
                    }
                }
            }
        }
    }
}

/// `POST /console/operations/{id}/approve-refund` (form: `csrf`, `details_hash`).
pub async fn approve(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    form: Result<Form<HashMap<String, String>>, FormRejection>,
) -> Response {
    operation_form(&state, &headers, form, async |who, form| {
        approve_checked(&state, who, &id, form).await
    })
    .await
}

async fn approve_checked(
    state: &AppState,
    who: &OnCall,
    raw_id: &str,
    form: &HashMap<String, String>,
) -> Result<OperationId, HttpError> {
    let id = OperationId::parse(raw_id).map_err(|_| HttpError::not_found())?;
    // Tenant scope first: another tenant's operation is not found, whatever the form says.
    let op = state.ledger().get(&who.tenant, &id).await?;
    match op.details.kind() {
        OperationKind::Refund => {}
        OperationKind::Payment => return Err(HttpError::not_found()),
    }
    let shown = form
        .get("details_hash")
        .ok_or_else(|| invalid("the form names no details hash (nothing was approved)"))
        .and_then(|h| DetailsHash::parse(h).map_err(|e| invalid(e.to_string())))?;
    let now = state.now();
    let approval = NewApproval {
        operation: id.clone(),
        details_hash: shown,
        approved_by: who.actor(),
        method: CONSOLE_APPROVAL.to_string(),
        expires_at: now + state.config().approval_ttl,
        priority: None,
    };
    state.ledger().approve(&who.tenant, approval, now).await?;
    Ok(id)
}

/// `POST /console/operations/{id}/decline-refund` (form: `csrf`): withdraws a refund that has not
/// started executing; its money is free for another refund.
pub async fn decline(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    form: Result<Form<HashMap<String, String>>, FormRejection>,
) -> Response {
    operation_form(&state, &headers, form, async |who, _form| {
        decline_checked(&state, who, &id).await
    })
    .await
}

async fn decline_checked(
    state: &AppState,
    who: &OnCall,
    raw_id: &str,
) -> Result<OperationId, HttpError> {
    let id = OperationId::parse(raw_id).map_err(|_| HttpError::not_found())?;
    let op = state.ledger().get(&who.tenant, &id).await?;
    match op.details.kind() {
        OperationKind::Refund => {}
        OperationKind::Payment => return Err(HttpError::not_found()),
    }
    state
        .ledger()
        .cancel(
            &who.tenant,
            &Cancel {
                id: &id,
                actor: &who.actor(),
            },
            state.now(),
        )
        .await?;
    Ok(id)
}

//! What a repeated request returns (docs/architecture.md): the operation's stored truth, never a new
//! action.
//! The same answer serves `POST /v1/operations/{id}/execute` and both assistant tools, as structured
//! fields plus one sentence an assistant can relay word for word. An answer never carries a
//! capability: when the customer must approve, payonce asks them itself (through the tenant's
//! endpoint, `verify::ask_customer`) and the answer says so, with no link or token in it.

use crate::state::AppState;
use crate::verify::{self, Asked};
use payonce_core::details::OperationKind;
use payonce_core::state::Status;
use payonce_core::summary::summary;
use payonce_ledger::report::RESOLVED_FAILED_BY_HAND;
use payonce_ledger::verification::VerificationMethod;
use payonce_ledger::{LedgerError, Operation, approvals};
use serde::Serialize;
use serde_json::Value;

/// The sentence for an outcome that is still being checked; fixed, because an assistant must not
/// improvise a promise here.
pub const UNKNOWN_SENTENCE: &str = "The payment status is still being checked. I won't submit a separate payment while that check is in progress.";

/// The same promise for a refund whose outcome is being checked.
pub const REFUND_UNKNOWN_SENTENCE: &str = "The refund status is still being checked. I won't submit a separate refund while that check is in progress.";

/// What the caller should make of the operation's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Paid; the reference and result are the stored ones.
    Succeeded,
    /// Approved and queued or executing: the same operation is in progress.
    Pending,
    /// The processor may have it; the reconciler is finding out.
    Checking,
    /// A person is reviewing it.
    UnderReview,
    /// It must be approved first: a payment by its customer (payonce asked them, see
    /// `approval_request`), a refund by a person of the merchant.
    ApprovalRequired,
    /// The processor definitively declined it.
    Failed,
    /// Refused before anything was sent.
    Rejected,
    /// Withdrawn before execution.
    Cancelled,
}

/// The stored truth about one operation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Answer {
    /// The operation.
    pub operation_id: String,
    /// Its state, as stored.
    pub status: Status,
    /// What that means for the caller.
    pub outcome: Outcome,
    /// The sentence to relay.
    pub message: String,
    /// Amount and currency, from the operation record: `20.48 USD`.
    pub amount: String,
    /// Invoice, from the operation record.
    pub invoice: String,
    /// Processor reference, once there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// The stored processor result (a safe subset of its fields).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Failure or rejection code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_code: Option<String>,
    /// When approval is required: how the customer was asked (never a link or token).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_request: Option<ApprovalRequest>,
    /// Always false: answering never creates or submits a payment.
    pub new_payment_submitted: bool,
}

/// How the customer was asked to approve, as an assistant may see it: no capability, only facts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApprovalRequest {
    /// What payonce did just now.
    pub status: Asked,
    /// How the customer proves who they are (`signed_assertion`, `one_time_code`), if known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<VerificationMethod>,
}

fn how(method: Option<VerificationMethod>) -> &'static str {
    match method {
        Some(VerificationMethod::OneTimeCode) => {
            "they receive a confirmation link and a one-time code from the merchant"
        }
        Some(VerificationMethod::SignedAssertion) => {
            "they confirm it after signing in to the merchant's app"
        }
        None => "through the billing system",
    }
}

/// A stored result as any caller sees it: the one shared summary (no client secret, payment
/// method or metadata).
fn shown_result(result: Option<&Value>) -> Option<Value> {
    result.map(summary)
}

/// Builds the answer to a request to pay `op` (`execute`, `pay_invoice`); when it awaits approval,
/// asks the customer (within the per-operation limits of `verify`), the only thing ever written.
pub async fn of_operation(state: &AppState, op: &Operation) -> Result<Answer, LedgerError> {
    build(state, op, true).await
}

/// Builds the answer to a status read (`get_payment_status`): never asks the customer, writes nothing.
pub async fn status_of(state: &AppState, op: &Operation) -> Result<Answer, LedgerError> {
    build(state, op, false).await
}

async fn build(state: &AppState, op: &Operation, ask: bool) -> Result<Answer, LedgerError> {
    // Only a payment awaiting its customer is asked for (a refund is approved by a person of the
    // merchant), and only when the request is one to pay.
    let asked = if ask
        && op.status == Status::AwaitingApproval
        && op.details.kind() == OperationKind::Payment
    {
        Some(verify::ask_customer(state, op).await?)
    } else {
        None
    };
    let (outcome, message) = outcome_of(op, asked);
    Ok(Answer {
        operation_id: op.id.as_str().to_string(),
        status: op.status,
        outcome,
        message,
        amount: op.details.money().display(),
        invoice: op.details.invoice().to_string(),
        reference: op.external_ref.clone(),
        result: shown_result(op.result.as_ref()),
        failure_code: op.failure_code.clone(),
        approval_request: asked.map(|(status, method)| ApprovalRequest { status, method }),
        new_payment_submitted: false,
    })
}

/// What the caller should make of `op`'s state, and the sentence to relay; `asked`: how the
/// customer was just asked to approve, when they were.
fn outcome_of(
    op: &Operation,
    asked: Option<(Asked, Option<VerificationMethod>)>,
) -> (Outcome, String) {
    let amount = op.details.money().display();
    let invoice = op.details.invoice();
    let (noun, unknown) = match op.details.kind() {
        OperationKind::Payment => ("payment", UNKNOWN_SENTENCE),
        OperationKind::Refund => ("refund", REFUND_UNKNOWN_SENTENCE),
    };
    let what = &format!("The {noun} of {amount} for invoice {invoice}");
    match op.status {
        Status::Succeeded => (
            Outcome::Succeeded,
            match &op.external_ref {
                Some(r) => format!("{what} succeeded (reference {r})."),
                None => format!("{what} succeeded."),
            },
        ),
        Status::Ready | Status::Executing => (
            Outcome::Pending,
            format!(
                "The {noun} is being processed: {} for invoice {invoice}. This is the same {noun}, not a new \
                 one; ask again later for its result.",
                amount
            ),
        ),
        Status::Unknown => (Outcome::Checking, unknown.to_string()),
        Status::NeedsAttention => (
            Outcome::UnderReview,
            format!(
                "The {noun} is being reviewed by a person. No new {noun} will be submitted while that review is open."
            ),
        ),
        // Nobody asks a customer to approve giving money back: a person of the merchant does.
        Status::AwaitingApproval if op.details.kind() == OperationKind::Refund => (
            Outcome::ApprovalRequired,
            format!(
                "{what} needs approval by a person at the merchant before it can be made. Nothing will be \
                 refunded until they approve it."
            ),
        ),
        Status::AwaitingApproval => (
            Outcome::ApprovalRequired,
            match asked {
                Some((asked, method)) => asked_sentence(what, asked, method),
                None => format!(
                    "{what} needs the customer's approval before it can be made. Nothing will be paid until they \
                     confirm it."
                ),
            },
        ),
        // A person's resolution: their note is for on-call, never relayed to the customer.
        Status::Failed if op.failure_code.as_deref() == Some(RESOLVED_FAILED_BY_HAND) => (
            Outcome::Failed,
            format!("{what} was resolved by the merchant: it was not made and will not be."),
        ),
        Status::Failed => (
            Outcome::Failed,
            format!(
                "{what} failed: {}.",
                op.failure_message
                    .as_deref()
                    .unwrap_or("the processor declined it")
            ),
        ),
        Status::Rejected => (
            Outcome::Rejected,
            format!(
                "{what} was rejected before anything was sent to the processor: {}.",
                op.failure_message
                    .as_deref()
                    .unwrap_or("it did not pass the server's checks")
            ),
        ),
        Status::Cancelled
            if op.failure_code.as_deref() == Some(approvals::DECLINED_BY_CUSTOMER) =>
        {
            (
                Outcome::Cancelled,
                format!(
                    "The customer declined {} on the confirmation page, so nothing was paid and nothing will be.",
                    lower_first(what)
                ),
            )
        }
        Status::Cancelled => (
            Outcome::Cancelled,
            format!("{what} was cancelled before it was made."),
        ),
    }
}

/// The sentence for a payment whose customer was just asked to approve it (`asked`: what payonce
/// did, `method`: how the customer proves who they are).
fn asked_sentence(what: &str, asked: Asked, method: Option<VerificationMethod>) -> String {
    match asked {
        Asked::Sent => format!(
            "{what} needs the customer's approval before it can be made. The customer has been asked to \
             confirm it ({}). Nothing will be paid until they do.",
            how(method)
        ),
        Asked::AlreadyAsked => format!(
            "{what} needs the customer's approval before it can be made. The customer was already asked to \
             confirm it ({}), so no new request was sent. Nothing will be paid until they do.",
            how(method)
        ),
        Asked::Unavailable => format!(
            "{what} needs the customer's approval before it can be made. The customer must confirm it \
             through the billing system; nothing will be paid until they do."
        ),
    }
}

/// `The payment` → `the payment`, for a subject that moves into the middle of a sentence.
fn lower_first(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_in_a_stored_result_are_not_shown() {
        let stored = serde_json::json!({"id": "pi_1", "status": "succeeded", "client_secret": "pi_1_secret_x",
                                        "payment_method": "pm_1", "amount": 2048});
        let shown = shown_result(Some(&stored)).unwrap();
        assert_eq!(
            shown,
            serde_json::json!({"id": "pi_1", "status": "succeeded", "amount": 2048})
        );
        assert!(!shown.to_string().contains("secret"));
    }
}

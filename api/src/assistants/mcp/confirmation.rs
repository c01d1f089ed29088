//! Confirmation through the client, not the model. When a `pay_invoice` finds its operation
//! awaiting the customer's approval and the client declared URL-mode elicitation, the answer is a
//! question for the client (2026-07-28 multi round-trip: an `InputRequiredResult` holding one
//! `elicitation/create` with `mode: "url"`): the client shows the person the confirmation page and
//! retries the call with their response. The URL goes to the person only; no tool answer, content
//! or structured field ever carries it. On the retry the operation is read again: approved means the
//! payment proceeds (`pending`), otherwise the plain `approval_required` answer.
//!
//! Older versions have no way for a stateless server to ask: the capabilities a 2025-era client
//! declared at `initialize` are not known to the process answering its `tools/call`, and the spec
//! forbids elicitation modes the client did not declare, so those clients get `approval_required`
//! without a URL.

use crate::assistants::tools::{PAY_INVOICE, ToolReply};
use crate::auth::Caller;
use crate::errors::cause_chain;
use crate::state::AppState;
use crate::verify::elicitation_link;
use payonce_core::id::OperationId;
use payonce_ledger::{LedgerError, Operation};
use rmcp::model::{CallToolRequestParams, InputRequiredResult, ProtocolVersion};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::{Value, json};

/// The key of payonce's one input request, echoed back in `inputResponses`.
pub const INPUT_KEY: &str = "payonce_confirmation";

/// What a `tools/call` answers after this step.
#[derive(Debug)]
pub enum Step {
    /// Ask the client to show the person the confirmation page, then retry.
    AskTheUser(InputRequiredResult),
    /// The tool's answer.
    Answer(ToolReply),
}

/// The confirmation page's URL for `op`, or `None` when no new link may be issued now: the one
/// place the elicitation URL comes from (`verify::elicitation_link`, which bounds and explains it).
pub async fn confirmation_url(
    state: &AppState,
    op: &Operation,
) -> Result<Option<String>, LedgerError> {
    elicitation_link(state, op).await
}

/// Whether this request's client takes URL-mode elicitation through multi round-trip requests:
/// protocol 2026-07-28 or later, and `url` under the `elicitation` capability in its `_meta`.
fn client_takes_url_elicitation(context: &RequestContext<RoleServer>) -> bool {
    let modern = context
        .meta
        .protocol_version()
        .is_some_and(|v| v == ProtocolVersion::V_2026_07_28);
    modern
        && context
            .meta
            .client_capabilities()
            .and_then(|c| c.elicitation)
            .is_some_and(|e| e.url.is_some())
}

fn internal(e: &LedgerError) -> ErrorData {
    tracing::error!(cause = %cause_chain(e), "confirmation elicitation failed");
    ErrorData::internal_error(
        "the confirmation could not be prepared; retry shortly",
        None,
    )
}

/// The answer once the person has responded to the question: the state as it is now, said plainly.
fn after_question(mut reply: ToolReply, action: &str) -> ToolReply {
    let sentence = match action {
        "accept" => {
            "The customer was shown the confirmation page but has not approved the payment yet. Nothing has \
             been charged; call pay_invoice again once they have approved it."
        }
        _ => {
            "The customer did not open the confirmation page. Nothing has been charged; the payment needs \
             their approval before it can be made."
        }
    };
    if let Some(fields) = reply.structured.as_object_mut() {
        fields.insert("message".into(), json!(sentence));
    }
    reply
}

/// The question for the person, with the amount as the page they are sent to writes it (`¥1,299`).
fn question(url: String, op: &Operation) -> Result<InputRequiredResult, ErrorData> {
    let amount = op.details.money().for_people();
    let invoice = op.details.invoice();
    let message = format!(
        "Approve the payment of {amount} for invoice {invoice} on payonce's confirmation page. Nothing is \
         charged until you approve it there."
    );
    // The spec requires a URL-mode elicitation to carry a unique `elicitationId` (the client
    // correlates its completion notice with it); one of its own, unrelated to the link's token.
    let elicitation_id = format!("elicit_{}", payonce_core::id::random_hex(16));
    serde_json::from_value(json!({
        "resultType": "input_required",
        "inputRequests": {INPUT_KEY: {"method": "elicitation/create",
                                      "params": {"mode": "url", "message": message, "url": url,
                                                 "elicitationId": elicitation_id}}},
    }))
    .map_err(|e| ErrorData::internal_error(format!("input request does not encode: {e}"), None))
}

/// Turns an `approval_required` answer to `pay_invoice` into a question for the client when it can
/// take one; passes every other answer through.
pub async fn step(
    state: &AppState,
    caller: &Caller,
    request: &CallToolRequestParams,
    context: &RequestContext<RoleServer>,
    reply: ToolReply,
) -> Result<Step, ErrorData> {
    if request.name != PAY_INVOICE || reply.outcome() != Some("approval_required") {
        return Ok(Step::Answer(reply));
    }
    if let Some(response) = request
        .input_responses
        .as_ref()
        .and_then(|r| r.get(INPUT_KEY))
    {
        let action = response
            .get("action")
            .and_then(Value::as_str)
            .unwrap_or("cancel");
        return Ok(Step::Answer(after_question(reply, action)));
    }
    if !client_takes_url_elicitation(context) {
        return Ok(Step::Answer(reply));
    }
    let Some(id) = reply.structured["operation_id"]
        .as_str()
        .and_then(|id| OperationId::parse(id).ok())
    else {
        return Ok(Step::Answer(reply));
    };
    let op = state
        .ledger()
        .get(&caller.tenant, &id)
        .await
        .map_err(|e| internal(&e))?;
    match confirmation_url(state, &op).await {
        Ok(Some(url)) => Ok(Step::AskTheUser(question(url, &op)?)),
        // Every allowed link is open: the customer has one already; say so without a new one.
        Ok(None) => Ok(Step::Answer(reply)),
        // The state moved on between the read and the link (approved meanwhile): answer as is.
        Err(LedgerError::WrongState { .. }) => Ok(Step::Answer(reply)),
        Err(e) => Err(internal(&e)),
    }
}

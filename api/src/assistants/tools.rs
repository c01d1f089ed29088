//! The assistant's three tools, deliberately narrow: `pay_invoice {operation_id}`,
//! `get_payment_status {operation_id}` and `request_refund {payment_operation_id, amount?, reason}`.
//! A model can name an operation the trusted workflow created; it cannot create a payment, change
//! an operation's details or pick its tenant. The first two never write to an operation: an
//! approved operation is already enqueued, so "pay" answers with the stored truth. The third only
//! proposes (`request_refund.rs`): a refund awaiting a person of the merchant's approval.

mod request_refund;

use crate::answer;
use crate::auth::Caller;
use crate::errors::cause_chain;
use crate::state::AppState;
use payonce_core::details::OperationKind;
use payonce_core::id::OperationId;
use payonce_core::state::Status;
use payonce_ledger::report::RESOLVED_FAILED_BY_HAND;
use payonce_ledger::{LedgerError, NewToolCall, Operation, Role};
use serde::Serialize;
use serde_json::{Value, json};

/// Asks for the payment of an invoice the customer's workflow already set up.
pub const PAY_INVOICE: &str = "pay_invoice";
/// Reads where a payment stands.
pub const GET_PAYMENT_STATUS: &str = "get_payment_status";
/// Proposes a refund of a succeeded payment, for a person of the merchant to approve.
pub const REQUEST_REFUND: &str = "request_refund";
/// The one argument `pay_invoice` and `get_payment_status` take.
pub const OPERATION_ID_ARG: &str = "operation_id";
/// Longest JSON-string `arguments` parsed (an operation id needs about 60 bytes).
pub const ARGUMENTS_LEN_MAX: usize = 4 * 1024;
/// Longest tool name considered (OpenAI's and Anthropic's limit).
pub const TOOL_NAME_LEN_MAX: usize = 64;

/// A tool's name, title, description and behaviour hints, shared by every provider format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolDef {
    /// Name the model calls.
    pub name: &'static str,
    /// Human title.
    pub title: &'static str,
    /// What the model reads to decide when to call it.
    pub description: &'static str,
    /// MCP `readOnlyHint`: the tool changes nothing a caller can observe (only the correlation record).
    pub read_only: bool,
    /// MCP `destructiveHint`: the tool may undo or overwrite something. Never, for either tool: the
    /// only argument is an operation id, so a call cannot change amount, payee or state backwards.
    pub destructive: bool,
    /// MCP `idempotentHint`: calling again with the same arguments has no further effect (the ledger's
    /// one operation per business key enforces it).
    pub idempotent: bool,
    /// MCP `openWorldHint`: the tool's effect reaches outside payonce (the payment processor).
    pub open_world: bool,
    /// What it takes.
    pub arguments: Arguments,
}

/// The argument shapes of the tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arguments {
    /// `{operation_id}`.
    OperationId,
    /// `{payment_operation_id, amount?, reason}`.
    RefundRequest,
}

/// Every tool.
pub const TOOLS: [ToolDef; 3] = [
    ToolDef {
        name: PAY_INVOICE,
        title: "Pay invoice",
        description: "Ask for the payment of an invoice that the billing system already set up, by its operation id. \
                      Amount, currency, customer and invoice come from the billing record and cannot be changed here. \
                      Calling it again is safe: it never creates a second payment and always returns the payment's \
                      real state in `outcome` (succeeded, pending, being_checked, approval_required: payonce asks \
                      the customer itself, ...) with `retry_advice`. Relay the returned `message` to the user.",
        read_only: false,
        destructive: false,
        idempotent: true,
        open_world: true,
        arguments: Arguments::OperationId,
    },
    ToolDef {
        name: GET_PAYMENT_STATUS,
        title: "Get payment status",
        description: "Read where the payment of an operation stands, by its operation id. Returns the stored state \
                      in `outcome` and a `message` to relay to the user; never starts a payment.",
        read_only: true,
        destructive: false,
        idempotent: true,
        open_world: false,
        arguments: Arguments::OperationId,
    },
    ToolDef {
        name: REQUEST_REFUND,
        title: "Request refund",
        description: "Propose giving money back from a payment that succeeded, by the payment's operation id, with \
                      a reason (duplicate, fraudulent, requested_by_customer) and optionally an amount in minor \
                      units (omitted: the whole payment). It never refunds by itself: a person at the merchant must \
                      approve the proposal first. Calling it again for the same payment and amount returns the same \
                      proposal and its real state in `outcome`; it never proposes the same money twice. Relay the \
                      returned `message` to the user.",
        read_only: false,
        destructive: false,
        idempotent: true,
        open_world: true,
        arguments: Arguments::RefundRequest,
    },
];

/// What a tool answer means for the assistant: one field a model can branch on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolOutcome {
    /// Paid; the reference is the processor's.
    Succeeded,
    /// The processor definitively declined it (e.g. the card was declined).
    Declined,
    /// It will not be made (refused by the server's checks), or the call itself failed (`error`).
    Failed,
    /// Approved and queued or executing: the same payment is in progress.
    Pending,
    /// The processor may have it; payonce is finding out.
    BeingChecked,
    /// A person is reviewing it.
    NeedsAttention,
    /// The customer must approve it first.
    ApprovalRequired,
    /// The operation's state rules the request out (it was cancelled).
    Conflict,
    /// No such operation for this key.
    NotFound,
}

/// Every outcome, in the order the output schema lists them.
pub const ALL_OUTCOMES: [ToolOutcome; 9] = [
    ToolOutcome::Succeeded,
    ToolOutcome::Declined,
    ToolOutcome::Failed,
    ToolOutcome::Pending,
    ToolOutcome::BeingChecked,
    ToolOutcome::NeedsAttention,
    ToolOutcome::ApprovalRequired,
    ToolOutcome::Conflict,
    ToolOutcome::NotFound,
];

impl ToolOutcome {
    /// The wire name.
    pub fn as_str(&self) -> &'static str {
        match self {
            ToolOutcome::Succeeded => "succeeded",
            ToolOutcome::Declined => "declined",
            ToolOutcome::Failed => "failed",
            ToolOutcome::Pending => "pending",
            ToolOutcome::BeingChecked => "being_checked",
            ToolOutcome::NeedsAttention => "needs_attention",
            ToolOutcome::ApprovalRequired => "approval_required",
            ToolOutcome::Conflict => "conflict",
            ToolOutcome::NotFound => "not_found",
        }
    }

    /// The outcome of `op`: a failure a person of the merchant resolved is not the processor's
    /// decline (the assistant hears that the merchant resolved it, and nothing of their note).
    pub fn of_operation(op: &Operation) -> Self {
        if op.failure_code.as_deref() == Some(RESOLVED_FAILED_BY_HAND) {
            return ToolOutcome::Failed;
        }
        Self::of_status(op.status)
    }

    /// The outcome of an operation in `status`.
    pub fn of_status(status: Status) -> Self {
        match status {
            Status::Succeeded => ToolOutcome::Succeeded,
            Status::Failed => ToolOutcome::Declined,
            Status::Rejected => ToolOutcome::Failed,
            Status::Ready | Status::Executing => ToolOutcome::Pending,
            Status::Unknown => ToolOutcome::BeingChecked,
            Status::NeedsAttention => ToolOutcome::NeedsAttention,
            Status::AwaitingApproval => ToolOutcome::ApprovalRequired,
            Status::Cancelled => ToolOutcome::Conflict,
        }
    }

    /// What a model should do next about an operation of `kind`; fixed sentences, so a model never
    /// improvises a retry policy.
    pub fn advice(&self, kind: OperationKind) -> &'static str {
        match kind {
            OperationKind::Payment => self.retry_advice(),
            OperationKind::Refund => request_refund::advice(*self),
        }
    }

    /// What a model should do next about a payment; fixed sentences, so a model never improvises a
    /// retry policy.
    pub fn retry_advice(&self) -> &'static str {
        match self {
            ToolOutcome::Succeeded => {
                "The payment is complete. Do not propose paying this invoice again."
            }
            ToolOutcome::Pending | ToolOutcome::BeingChecked | ToolOutcome::NeedsAttention => {
                "Do not propose or start a new payment while this one is pending or being checked: it may \
                 still succeed. Call get_payment_status later with the same operation id for its result."
            }
            ToolOutcome::ApprovalRequired => {
                "Nothing has been charged. The customer must approve this payment first; call pay_invoice \
                 again with the same operation id after they have. Do not propose another payment."
            }
            ToolOutcome::Declined => {
                "The processor declined this payment and it will not be retried. Do not call again to retry; \
                 a new attempt needs a new payment set up by the billing system."
            }
            ToolOutcome::Failed => {
                "This payment was not made. Calling again with the same arguments gives the same answer; \
                 do not propose a new payment yourself."
            }
            ToolOutcome::Conflict => {
                "This payment was cancelled and will not be made. Do not call again to retry."
            }
            ToolOutcome::NotFound => {
                "No payment has this operation id; nothing was charged. Check the id you were given."
            }
        }
    }
}

/// The output schema both tools share (MCP `outputSchema`): every field a tool answer can carry.
pub fn output_schema() -> Value {
    let outcomes: Vec<&str> = ALL_OUTCOMES.iter().map(ToolOutcome::as_str).collect();
    json!({
        "type": "object",
        "properties": {
            "outcome": {"type": "string", "enum": outcomes,
                        "description": "What the answer means; branch on this field."},
            "operation_id": {"type": "string"},
            "status": {"type": "string", "description": "The operation's stored state."},
            "amount": {"type": "string", "description": "Amount and currency as approved, e.g. 20.48 USD."},
            "amount_minor": {"type": "integer", "description": "The amount in the currency's minor unit."},
            "currency": {"type": "string", "description": "ISO 4217 code, lowercase as the processor writes it."},
            "invoice": {"type": "string"},
            "reference": {"type": "string", "description": "The processor's reference, once there is one."},
            "result": {"type": "object", "description": "The processor's stored result (safe fields only)."},
            "failure_code": {"type": "string"},
            "approval_request": {"type": "object", "description": "When approval is required: whether payonce just asked the customer (sent, already_asked, unavailable) and how they prove who they are. Never a link.",
                                 "properties": {"status": {"type": "string", "enum": ["sent", "already_asked", "unavailable"]},
                                                "method": {"type": "string", "enum": ["signed_assertion", "one_time_code"]}},
                                 "required": ["status"], "additionalProperties": false},
            "payment_operation_id": {"type": "string", "description": "For a refund: the payment it gives money back from."},
            "message": {"type": "string", "description": "One sentence to relay to the user."},
            "retry_advice": {"type": "string", "description": "What to do next; never start a new payment while pending or being checked."},
            "error": {"type": "object", "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
                      "required": ["code", "message"]},
            "new_payment_submitted": {"type": "boolean", "const": false}
        },
        "required": ["outcome", "message", "retry_advice", "new_payment_submitted"],
        "additionalProperties": false
    })
}

/// The input schema of `tool`. `strict`: OpenAI's strict mode, where every property is required
/// (an optional one is nullable instead).
pub fn input_schema_of(tool: &ToolDef, strict: bool) -> Value {
    match tool.arguments {
        Arguments::OperationId => input_schema(),
        Arguments::RefundRequest => request_refund::input_schema(strict),
    }
}

/// The input schema of `pay_invoice` and `get_payment_status`: exactly one field, nothing else
/// allowed.
pub fn input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            OPERATION_ID_ARG: {
                "type": "string",
                "description": "The operation id the billing system gave for this payment: op_ followed by 32 lowercase hex digits."
            }
        },
        "required": [OPERATION_ID_ARG],
        "additionalProperties": false
    })
}

/// Why a tool call is a tool error; `code` is the stable `error.code` of the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolError {
    /// The key's role may not call the tools.
    Forbidden,
    /// No tool has that name (MCP answers it as a protocol error instead).
    UnknownTool,
    /// The arguments are not what the tool takes.
    InvalidArguments,
    /// No operation of the caller's tenant has that id.
    OperationNotFound,
    /// The ledger could not be read.
    Unavailable,
    /// A refund would exceed what is left of the payment.
    OverRefund,
    /// The payment already has as many open refund proposals as allowed.
    TooManyProposals,
    /// The payment cannot be refunded (not succeeded, or not a payment).
    NotRefundable,
}

impl ToolError {
    /// The stable `error.code`.
    pub fn code(self) -> &'static str {
        match self {
            ToolError::Forbidden => "forbidden",
            ToolError::UnknownTool => "unknown_tool",
            ToolError::InvalidArguments => "invalid_arguments",
            ToolError::OperationNotFound => "operation_not_found",
            ToolError::Unavailable => "unavailable",
            ToolError::OverRefund => "over_refund",
            ToolError::TooManyProposals => "too_many_proposals",
            ToolError::NotRefundable => "not_refundable",
        }
    }
}

/// A tool's answer: the structured fields, and whether it is a tool error (bad arguments, unknown
/// operation), as opposed to a payment that failed.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolReply {
    /// Structured fields; always holds `message`.
    pub structured: Value,
    /// The tool error this answer is, if it is one (its code is also `structured.error.code`).
    pub error: Option<ToolError>,
}

impl ToolReply {
    pub(crate) fn error(error: ToolError, message: &str) -> Self {
        let outcome = match error {
            ToolError::OperationNotFound => ToolOutcome::NotFound,
            ToolError::OverRefund | ToolError::TooManyProposals | ToolError::NotRefundable => {
                ToolOutcome::Conflict
            }
            ToolError::Forbidden
            | ToolError::UnknownTool
            | ToolError::InvalidArguments
            | ToolError::Unavailable => ToolOutcome::Failed,
        };
        let advice = match error {
            ToolError::Unavailable => {
                "The state could not be read; this call did not submit any payment. Do not propose a new \
                 payment: call again shortly with the same operation id."
            }
            ToolError::OperationNotFound => outcome.retry_advice(),
            ToolError::OverRefund | ToolError::TooManyProposals | ToolError::NotRefundable => {
                request_refund::advice(outcome)
            }
            ToolError::Forbidden | ToolError::UnknownTool | ToolError::InvalidArguments => {
                "Fix the call as the error says; nothing was charged."
            }
        };
        ToolReply {
            structured: json!({"outcome": outcome, "error": {"code": error.code(), "message": message},
                               "message": message, "retry_advice": advice, "new_payment_submitted": false}),
            error: Some(error),
        }
    }

    /// Whether this is a tool error.
    pub fn is_error(&self) -> bool {
        self.error.is_some()
    }

    /// The outcome field.
    pub fn outcome(&self) -> Option<&str> {
        self.structured.get("outcome").and_then(Value::as_str)
    }

    /// The text form every provider carries: the structured fields as JSON.
    pub fn text(&self) -> String {
        self.structured.to_string()
    }

    /// The sentence to relay.
    pub fn message(&self) -> &str {
        self.structured
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("")
    }
}

/// One call as a provider delivered it, after its envelope was read.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The provider's call id (correlation only, never identity).
    pub call_id: Option<String>,
    /// The tool named.
    pub name: String,
    /// The arguments object, or why it could not be read.
    pub arguments: Result<Value, String>,
}

/// Parses a JSON-string `arguments` (OpenAI), bounded.
pub fn parse_arguments_text(raw: &str) -> Result<Value, String> {
    if raw.len() > ARGUMENTS_LEN_MAX {
        return Err(format!(
            "arguments are longer than {ARGUMENTS_LEN_MAX} bytes"
        ));
    }
    if raw.trim().is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_str(raw).map_err(|e| format!("arguments are not valid JSON: {e}"))
}

const ONLY_OPERATION_ID: &str = "This tool takes only operation_id. The amount, currency, customer and invoice come \
                                 from the billing record and cannot be set or changed by a tool call.";

fn operation_id_of(arguments: &Value) -> Result<OperationId, ToolReply> {
    let Some(object) = arguments.as_object() else {
        return Err(ToolReply::error(
            ToolError::InvalidArguments,
            "arguments must be a JSON object with operation_id",
        ));
    };
    if object.keys().any(|k| k != OPERATION_ID_ARG) {
        return Err(ToolReply::error(
            ToolError::InvalidArguments,
            ONLY_OPERATION_ID,
        ));
    }
    let Some(raw) = object.get(OPERATION_ID_ARG).and_then(Value::as_str) else {
        return Err(ToolReply::error(
            ToolError::InvalidArguments,
            "operation_id is required and must be a string",
        ));
    };
    OperationId::parse(raw).map_err(|_| {
        ToolReply::error(
            ToolError::InvalidArguments,
            "operation_id must be op_ followed by 32 lowercase hex digits",
        )
    })
}

pub(crate) fn internal(e: &LedgerError) -> ToolReply {
    tracing::error!(cause = %cause_chain(e), "tool call failed");
    ToolReply::error(
        ToolError::Unavailable,
        "The payment status could not be read right now. This call did not submit any payment; ask again shortly.",
    )
}

/// Runs one tool call for `caller` and records it (provider + call id) for correlation. A call the
/// ledger could not answer (a dropped connection: a failover, a terminated backend) is run once
/// more on a fresh connection before the caller hears "unavailable": a tool call is safe to repeat
/// by design, it answers the stored truth and never submits twice.
pub async fn call(state: &AppState, caller: &Caller, provider: &str, call: &ToolCall) -> ToolReply {
    let reply = call_once(state, caller, provider, call).await;
    if reply.error != Some(ToolError::Unavailable) {
        return reply;
    }
    call_once(state, caller, provider, call).await
}

async fn call_once(
    state: &AppState,
    caller: &Caller,
    provider: &str,
    call: &ToolCall,
) -> ToolReply {
    let ledger = state.ledger();
    let now = state.now();
    let known = TOOLS.iter().any(|t| t.name == call.name);
    let bounded_name: String = call.name.chars().take(TOOL_NAME_LEN_MAX).collect();
    let tool_name = bounded_name.as_str();
    let record = |op: Option<OperationId>| async move {
        ledger
            .record_tool_call(
                &caller.tenant,
                &NewToolCall {
                    operation: op.as_ref(),
                    provider,
                    provider_call_id: call.call_id.as_deref(),
                    tool: tool_name,
                },
                now,
            )
            .await
    };
    let parsed = if !matches!(caller.role, Role::Assistant | Role::Service) {
        Err(ToolReply::error(
            ToolError::Forbidden,
            "this key's role may not call the assistant's tools",
        ))
    } else if !known {
        Err(ToolReply::error(
            ToolError::UnknownTool,
            "unknown tool; the tools are pay_invoice, get_payment_status and request_refund",
        ))
    } else if call.name == REQUEST_REFUND {
        let (refund, reply) = match &call.arguments {
            Ok(arguments) => request_refund::run(state, caller, arguments).await,
            Err(why) => (None, ToolReply::error(ToolError::InvalidArguments, why)),
        };
        return match record(refund).await {
            Ok(()) => reply,
            Err(e) => internal(&e),
        };
    } else {
        match &call.arguments {
            Ok(arguments) => operation_id_of(arguments),
            Err(why) => Err(ToolReply::error(ToolError::InvalidArguments, why)),
        }
    };
    let id = match parsed {
        Ok(id) => id,
        Err(reply) => {
            return match record(None).await {
                Ok(()) => reply,
                Err(e) => internal(&e),
            };
        }
    };
    let op = match ledger.get(&caller.tenant, &id).await {
        Ok(op) => op,
        Err(LedgerError::NotFound) => {
            return match record(None).await {
                Ok(()) => ToolReply::error(
                    ToolError::OperationNotFound,
                    "No payment with that operation id exists.",
                ),
                Err(e) => internal(&e),
            };
        }
        Err(e) => return internal(&e),
    };
    if let Err(e) = record(Some(op.id.clone())).await {
        return internal(&e);
    }
    // Only a request to pay asks the customer; a status read writes nothing.
    match reply_of(state, &op, call.name != GET_PAYMENT_STATUS).await {
        Ok(reply) => reply,
        Err(e) => internal(&e),
    }
}

/// The structured answer for `op`: the stored truth, with no capability (link, token, code) in it.
/// `ask`: a request to pay, which asks the customer when the operation awaits approval.
pub(crate) async fn reply_of(
    state: &AppState,
    op: &Operation,
    ask: bool,
) -> Result<ToolReply, LedgerError> {
    let money = op.details.money();
    let amount = money.display();
    let invoice = op.details.invoice().to_string();
    let outcome = ToolOutcome::of_operation(op);
    let answer = if ask {
        answer::of_operation(state, op).await?
    } else {
        answer::status_of(state, op).await?
    };
    let (message, result) = (answer.message, answer.result);
    let mut structured = json!({
        "outcome": outcome,
        "operation_id": op.id.as_str(),
        "status": op.status,
        "amount": amount,
        "amount_minor": money.amount_minor(),
        "currency": money.currency().code(),
        "invoice": invoice,
        "message": message,
        "retry_advice": outcome.advice(op.details.kind()),
        "new_payment_submitted": false,
    });
    if let Some(fields) = structured.as_object_mut() {
        if let Some(r) = &op.external_ref {
            fields.insert("reference".into(), json!(r));
        }
        if let Some(r) = result {
            fields.insert("result".into(), r);
        }
        if let Some(c) = &op.failure_code {
            fields.insert("failure_code".into(), json!(c));
        }
        if let Some(of) = op.details.refund_of() {
            fields.insert(
                "payment_operation_id".into(),
                json!(of.payment_operation().as_str()),
            );
        }
        if let Some(asked) = &answer.approval_request {
            fields.insert("approval_request".into(), json!(asked));
        }
    }
    Ok(ToolReply {
        structured,
        error: None,
    })
}

#[cfg(test)]
mod tests;

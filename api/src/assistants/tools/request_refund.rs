//! `request_refund {payment_operation_id, amount?, reason}`: the assistant proposes, a person of the
//! merchant approves. The answer is the stored truth of the proposal for that payment and amount
//! (`refunds::propose`), never a refund made by the call itself.

use super::{ToolError, ToolOutcome, ToolReply, internal, reply_of};
use crate::auth::Caller;
use crate::operations::refunds::{self, RefundError};
use crate::state::AppState;
use payonce_core::details::RefundReason;
use payonce_core::id::OperationId;
use payonce_core::money::AMOUNT_MINOR_MAX;
use payonce_ledger::refunds::{PROPOSAL_TTL, PROPOSALS_OPEN_MAX};
use payonce_ledger::{LedgerError, LimitError};
use serde_json::{Value, json};

/// The payment argument.
pub const PAYMENT_ARG: &str = "payment_operation_id";
/// The optional amount argument, minor units.
pub const AMOUNT_ARG: &str = "amount";
/// The reason argument.
pub const REASON_ARG: &str = "reason";
const REASONS: [&str; 3] = ["duplicate", "fraudulent", "requested_by_customer"];

/// The input schema. `strict` (OpenAI): every property required; elsewhere `amount` is optional.
/// `amount` is nullable in every schema, as the server accepts `null` from every shape.
pub fn input_schema(strict: bool) -> Value {
    let amount_type = json!(["integer", "null"]);
    let required = if strict {
        json!([PAYMENT_ARG, AMOUNT_ARG, REASON_ARG])
    } else {
        json!([PAYMENT_ARG, REASON_ARG])
    };
    json!({
        "type": "object",
        "properties": {
            PAYMENT_ARG: {"type": "string",
                          "description": "The operation id of the payment to refund: op_ followed by 32 lowercase hex digits."},
            AMOUNT_ARG: {"type": amount_type, "minimum": 1, "maximum": AMOUNT_MINOR_MAX,
                         "description": "How much to give back, in the payment currency's minor unit (cents); null or omitted: the whole payment."},
            REASON_ARG: {"type": "string", "enum": REASONS,
                         "description": "Why: duplicate, fraudulent or requested_by_customer."}
        },
        "required": required,
        "additionalProperties": false
    })
}

/// What a model should do next about a refund.
pub fn advice(outcome: ToolOutcome) -> &'static str {
    match outcome {
        ToolOutcome::Succeeded => {
            "The refund is complete. Do not propose refunding the same money again."
        }
        ToolOutcome::Pending | ToolOutcome::BeingChecked | ToolOutcome::NeedsAttention => {
            "Do not propose another refund while this one is pending or being checked: it may still \
             succeed. Call get_payment_status later with this refund's operation id for its result."
        }
        ToolOutcome::ApprovalRequired => {
            "Nothing has been refunded yet. A person at the merchant must approve this refund; calling \
             request_refund again with the same payment and amount returns this same proposal. Do not \
             propose another refund of the same money."
        }
        ToolOutcome::Declined => {
            "The processor refused this refund and it will not be retried. Do not call again to retry."
        }
        ToolOutcome::Failed => {
            "This refund was not made. Calling again with the same arguments gives the same answer; do \
             not propose a different refund yourself."
        }
        ToolOutcome::Conflict => {
            "This refund cannot be made as asked (cancelled, or more than the payment has left). Do not \
             call again to retry; tell the user what the message says."
        }
        ToolOutcome::NotFound => {
            "No payment has this operation id; nothing was refunded. Check the id you were given."
        }
    }
}

fn invalid(message: &str) -> ToolReply {
    ToolReply::error(ToolError::InvalidArguments, message)
}

fn refused(error: ToolError, message: String) -> ToolReply {
    ToolReply::error(error, &message)
}

/// Reads `{payment_operation_id, amount?, reason}`, nothing else.
fn arguments_of(arguments: &Value) -> Result<(OperationId, Option<i64>, RefundReason), ToolReply> {
    let Some(object) = arguments.as_object() else {
        return Err(invalid(
            "arguments must be a JSON object with payment_operation_id and reason",
        ));
    };
    if object
        .keys()
        .any(|k| ![PAYMENT_ARG, AMOUNT_ARG, REASON_ARG].contains(&k.as_str()))
    {
        return Err(invalid(
            "This tool takes only payment_operation_id, amount and reason. The currency, customer and \
             payment come from the payment's record and cannot be set by a tool call.",
        ));
    }
    let payment = object
        .get(PAYMENT_ARG)
        .and_then(Value::as_str)
        .and_then(|raw| OperationId::parse(raw).ok())
        .ok_or_else(|| {
            invalid("payment_operation_id must be op_ followed by 32 lowercase hex digits")
        })?;
    let amount = match object.get(AMOUNT_ARG) {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_i64()
                .filter(|a| (1..=AMOUNT_MINOR_MAX).contains(a))
                .ok_or_else(|| {
                    invalid(&format!(
                        "amount must be a whole number of minor units from 1 to {AMOUNT_MINOR_MAX}"
                    ))
                })?,
        ),
    };
    let reason = object
        .get(REASON_ARG)
        .and_then(Value::as_str)
        .and_then(|raw| RefundReason::parse(raw).ok())
        .ok_or_else(|| invalid("reason must be duplicate, fraudulent or requested_by_customer"))?;
    Ok((payment, amount, reason))
}

/// Runs the call: the proposal's stored truth, or why there is none. Returns the operation to record
/// the call against (the refund, or the payment when the refusal names one).
pub async fn run(
    state: &AppState,
    caller: &Caller,
    arguments: &Value,
) -> (Option<OperationId>, ToolReply) {
    let (payment, amount, reason) = match arguments_of(arguments) {
        Ok(parsed) => parsed,
        Err(reply) => return (None, reply),
    };
    let refund = match refunds::propose(state, caller, &payment, amount, reason).await {
        Ok(refund) => refund,
        Err(RefundError::Invalid(why)) => return (None, invalid(&why)),
        Err(RefundError::NotFound) => {
            return (
                None,
                ToolReply::error(
                    ToolError::OperationNotFound,
                    "No payment with that operation id exists.",
                ),
            );
        }
        Err(RefundError::Ledger(LedgerError::OverRefund {
            refundable_minor, ..
        })) => {
            let message = format!(
                "That is more than the payment has left to refund ({refundable_minor} in minor units, counting \
                 refunds that succeeded or are still in progress). Nothing was proposed."
            );
            return (Some(payment), refused(ToolError::OverRefund, message));
        }
        Err(RefundError::Ledger(LedgerError::Limit(LimitError::RefundProposals))) => {
            let message = format!(
                "This payment already has {PROPOSALS_OPEN_MAX} refund proposals awaiting approval by a person at \
                 the merchant. Nothing was proposed. Wait until one is approved or declined; a proposal nobody \
                 approves lapses after {} hours.",
                PROPOSAL_TTL.as_secs() / 3600
            );
            return (Some(payment), refused(ToolError::TooManyProposals, message));
        }
        Err(RefundError::Ledger(LedgerError::NotRefundable { why, .. })) => {
            return (
                Some(payment),
                refused(
                    ToolError::NotRefundable,
                    format!("{why}. Nothing was proposed."),
                ),
            );
        }
        Err(RefundError::Ledger(e)) => return (None, internal(&e)),
    };
    match reply_of(state, &refund, false).await {
        Ok(reply) => (Some(refund.id), reply),
        Err(e) => (Some(refund.id), internal(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_three_arguments_are_read_and_each_is_bounded() {
        let id = OperationId::generate();
        let ok = arguments_of(&json!({PAYMENT_ARG: id.as_str(), REASON_ARG: "duplicate"})).unwrap();
        assert_eq!(ok, (id.clone(), None, RefundReason::Duplicate));
        let null = arguments_of(
            &json!({PAYMENT_ARG: id.as_str(), AMOUNT_ARG: null, REASON_ARG: "fraudulent"}),
        )
        .unwrap();
        assert_eq!(null, (id.clone(), None, RefundReason::Fraudulent));
        let some = arguments_of(
            &json!({PAYMENT_ARG: id.as_str(), AMOUNT_ARG: 500, REASON_ARG: "requested_by_customer"}),
        )
        .unwrap();
        assert_eq!(some.1, Some(500));
        for bad in [
            json!({PAYMENT_ARG: id.as_str(), REASON_ARG: "duplicate", "currency": "eur"}),
            json!({PAYMENT_ARG: id.as_str(), REASON_ARG: "expired_uncaptured_charge"}),
            json!({PAYMENT_ARG: id.as_str()}),
            json!({PAYMENT_ARG: "op_1", REASON_ARG: "duplicate"}),
            json!({PAYMENT_ARG: id.as_str(), AMOUNT_ARG: 0, REASON_ARG: "duplicate"}),
            json!({PAYMENT_ARG: id.as_str(), AMOUNT_ARG: AMOUNT_MINOR_MAX + 1, REASON_ARG: "duplicate"}),
            json!({PAYMENT_ARG: id.as_str(), AMOUNT_ARG: 1.5, REASON_ARG: "duplicate"}),
            json!([id.as_str()]),
        ] {
            let reply = arguments_of(&bad).unwrap_err();
            assert!(reply.is_error(), "{bad}");
            assert_eq!(
                reply.structured["error"]["code"], "invalid_arguments",
                "{bad}"
            );
        }
    }

    #[test]
    fn the_strict_schema_requires_every_property_and_the_plain_one_only_two() {
        let strict = input_schema(true);
        assert_eq!(
            strict["required"],
            json!([PAYMENT_ARG, AMOUNT_ARG, REASON_ARG])
        );
        assert_eq!(
            strict["properties"][AMOUNT_ARG]["type"],
            json!(["integer", "null"])
        );
        let plain = input_schema(false);
        assert_eq!(plain["required"], json!([PAYMENT_ARG, REASON_ARG]));
        assert_eq!(plain["additionalProperties"], json!(false));
        assert_eq!(plain["properties"][REASON_ARG]["enum"], json!(REASONS));
    }

    #[test]
    fn refusals_fit_the_output_schema() {
        let schema = super::super::output_schema();
        let allowed: Vec<&String> = schema["properties"].as_object().unwrap().keys().collect();
        let reply = refused(ToolError::OverRefund, "too much".into());
        for key in reply.structured.as_object().unwrap().keys() {
            assert!(allowed.contains(&key), "{key}");
        }
        assert_eq!(reply.outcome(), Some("conflict"));
    }
}

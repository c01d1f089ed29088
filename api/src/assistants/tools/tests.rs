//! The tools' arguments, outcomes and replies against their schema.

use super::*;

#[test]
fn only_operation_id_is_accepted() {
    let id = OperationId::generate();
    assert_eq!(
        operation_id_of(&json!({"operation_id": id.as_str()})).unwrap(),
        id
    );
    let extra = operation_id_of(&json!({"operation_id": id.as_str(), "amount": 1})).unwrap_err();
    assert!(extra.is_error() && extra.message().contains("only operation_id"));
    assert!(operation_id_of(&json!({})).is_err());
    assert!(operation_id_of(&json!({"operation_id": 5})).is_err());
    assert!(operation_id_of(&json!("op_x")).is_err());
    assert!(operation_id_of(&json!({"operation_id": "op_123"})).is_err());
}

#[test]
fn every_status_maps_to_an_outcome_the_schema_lists() {
    let schema = output_schema();
    let listed = schema["properties"]["outcome"]["enum"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(listed.len(), 9);
    for status in payonce_core::state::ALL_STATUSES {
        let o = ToolOutcome::of_status(status);
        assert!(listed.contains(&json!(o.as_str())), "{status:?}");
        assert_eq!(serde_json::to_value(o).unwrap(), json!(o.as_str()));
    }
    assert_eq!(
        ToolOutcome::of_status(Status::Unknown),
        ToolOutcome::BeingChecked
    );
    assert_eq!(
        ToolOutcome::of_status(Status::Failed),
        ToolOutcome::Declined
    );
    for pending in [ToolOutcome::Pending, ToolOutcome::BeingChecked] {
        assert!(
            pending
                .retry_advice()
                .contains("Do not propose or start a new payment")
        );
    }
}

#[test]
fn error_replies_fit_the_output_schema_and_carry_no_url() {
    let schema = output_schema();
    let allowed: Vec<&String> = schema["properties"].as_object().unwrap().keys().collect();
    for reply in [
        ToolReply::error(ToolError::OperationNotFound, "no"),
        ToolReply::error(ToolError::InvalidArguments, "bad"),
        ToolReply::error(ToolError::Unavailable, "later"),
    ] {
        for key in reply.structured.as_object().unwrap().keys() {
            assert!(allowed.contains(&key), "{key} is not in the output schema");
        }
        for required in schema["required"].as_array().unwrap() {
            assert!(reply.structured.get(required.as_str().unwrap()).is_some());
        }
    }
    assert_eq!(
        ToolReply::error(ToolError::OperationNotFound, "no").outcome(),
        Some("not_found")
    );
}

#[test]
fn a_tool_error_is_typed_and_carries_its_stable_code() {
    let all = [
        ToolError::Forbidden,
        ToolError::UnknownTool,
        ToolError::InvalidArguments,
        ToolError::OperationNotFound,
        ToolError::Unavailable,
        ToolError::OverRefund,
        ToolError::TooManyProposals,
        ToolError::NotRefundable,
    ];
    let mut codes = std::collections::HashSet::new();
    for error in all {
        let reply = ToolReply::error(error, "m");
        assert_eq!(reply.error, Some(error));
        assert!(reply.is_error());
        assert_eq!(reply.structured["error"]["code"], error.code());
        assert!(codes.insert(error.code()), "{error:?}");
    }
    assert_eq!(ToolError::UnknownTool.code(), "unknown_tool");
    assert_eq!(
        ToolReply::error(ToolError::OverRefund, "m").outcome(),
        Some("conflict")
    );
}

#[test]
fn arguments_text_is_bounded_and_parsed() {
    assert_eq!(parse_arguments_text("").unwrap(), json!({}));
    assert!(parse_arguments_text("{not json").is_err());
    assert!(parse_arguments_text(&" ".repeat(ARGUMENTS_LEN_MAX + 1)).is_err());
}

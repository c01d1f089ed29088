//! The assistant's `request_refund` tool in every provider format: it proposes once per payment and
//! amount, returns the stored truth, never asks a customer, and refuses over-refunds and refunds of
//! what is not a succeeded payment with tool errors that change nothing.

use super::tenant;
use super::tools::call_tool;
use super::{T0, TestApi, spawn, spawn_on_postgres};
use crate::support::refunds::succeeded_payment;
use crate::support::sqlite_ledger;
use payonce_ledger::refunds::{PROPOSAL_KEY_PREFIX, PROPOSAL_TTL, PROPOSALS_OPEN_MAX};
use serde_json::{Value, json};

const FORMATS: [&str; 4] = ["openai_chat", "openai_responses", "anthropic", "mcp"];

async fn paid(api: &TestApi, invoice: &str, amount: i64) -> String {
    succeeded_payment(&api.ledger, invoice, amount, T0)
        .await
        .id
        .as_str()
        .to_string()
}

#[tokio::test]
async fn request_refund_proposes_once_in_every_format_and_never_asks_a_customer() {
    let api = spawn(sqlite_ledger().await).await;
    let payment = paid(&api, "INV-RF2", 2048).await;
    let args = |amount: Value, reason: &str| json!({"payment_operation_id": payment, "amount": amount, "reason": reason});
    let mut ids = Vec::new();
    for (i, format) in FORMATS.iter().enumerate() {
        // The same payment and amount, whatever the reason: the same proposal.
        let reason = [
            "requested_by_customer",
            "duplicate",
            "fraudulent",
            "duplicate",
        ][i];
        let (a, is_error) = call_tool(
            &api,
            &api.assistant,
            format,
            &format!("call_r{i}"),
            "request_refund",
            args(json!(500), reason),
        )
        .await;
        assert!(!is_error, "{format}: {a}");
        assert_eq!(
            (
                a["outcome"].as_str(),
                a["status"].as_str(),
                a["amount"].as_str()
            ),
            (
                Some("approval_required"),
                Some("awaiting_approval"),
                Some("5.00 USD")
            ),
            "{format}: {a}"
        );
        assert_eq!(a["payment_operation_id"], payment.as_str());
        assert_eq!(a["new_payment_submitted"], false);
        assert!(
            a.get("approval_request").is_none(),
            "no customer is asked: {a}"
        );
        assert!(
            a["message"]
                .as_str()
                .unwrap()
                .contains("approval by a person at the merchant"),
            "{a}"
        );
        assert!(
            a["retry_advice"]
                .as_str()
                .unwrap()
                .contains("returns this same proposal"),
            "{a}"
        );
        assert!(!a.to_string().contains("http"), "{a}");
        ids.push(a["operation_id"].as_str().unwrap().to_string());
    }
    assert!(ids.iter().all(|id| id == &ids[0]), "{ids:?}");
    let refund = &ids[0];
    let stored = api
        .get(&format!("/v1/operations/{refund}"), &api.service)
        .await
        .json();
    assert_eq!(
        stored["details"]["refund_of"]["reason"], "requested_by_customer",
        "the first proposal's"
    );
    assert_eq!(
        stored["business_key"],
        format!("refund-proposal:{payment}:500")
    );
    let created_by = stored["events"][0]["actor"].as_str().unwrap().to_string();
    assert!(created_by.starts_with("assistant:"), "{created_by}");
    assert_eq!(api.operation_count().await, 2);
    let calls = api
        .ledger
        .tool_calls(
            &tenant(),
            &payonce_core::id::OperationId::parse(refund).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(calls.len(), 4);
    assert!(calls.iter().all(|(_, _, tool)| tool == "request_refund"));

    // The whole payment (omitted or null amount) no longer fits: a tool error, nothing proposed.
    for amount in [Value::Null, json!(1549)] {
        let (a, is_error) = call_tool(
            &api,
            &api.assistant,
            "anthropic",
            "call_over",
            "request_refund",
            args(amount, "duplicate"),
        )
        .await;
        assert!(is_error, "{a}");
        assert_eq!(
            (a["outcome"].as_str(), a["error"]["code"].as_str()),
            (Some("conflict"), Some("over_refund"))
        );
    }
    let (a, is_error) = call_tool(
        &api,
        &api.assistant,
        "openai_chat",
        "call_x",
        "request_refund",
        json!({"payment_operation_id": payment, "reason": "duplicate", "currency": "eur"}),
    )
    .await;
    assert!(is_error);
    assert_eq!(a["error"]["code"], "invalid_arguments");
    let (a, _) = call_tool(
        &api,
        &api.other_assistant,
        "openai_chat",
        "call_y",
        "request_refund",
        args(json!(1), "duplicate"),
    )
    .await;
    assert_eq!(
        a["error"]["code"], "operation_not_found",
        "another tenant's payment"
    );
    let (a, _) = call_tool(
        &api,
        &api.assistant,
        "openai_chat",
        "call_z",
        "request_refund",
        json!({"payment_operation_id": refund, "reason": "duplicate"}),
    )
    .await;
    assert_eq!(a["error"]["code"], "not_refundable", "a refund of a refund");
    assert_eq!(api.operation_count().await, 2, "refusals proposed nothing");

    // pay_invoice on the proposal asks no customer either; once a person approves, the truth moves.
    let (a, _) = call_tool(
        &api,
        &api.assistant,
        "mcp",
        "",
        "pay_invoice",
        json!({"operation_id": refund}),
    )
    .await;
    assert_eq!(a["outcome"], "approval_required");
    assert!(a.get("approval_request").is_none(), "{a}");
    let hash = stored["details_hash"].clone();
    let ok = api
        .post(
            &format!("/v1/refunds/{refund}/approve"),
            &api.on_call,
            json!({"details_hash": hash}),
        )
        .await;
    assert_eq!(ok.status, 200, "{}", ok.text);
    let (a, _) = call_tool(
        &api,
        &api.assistant,
        "openai_responses",
        "call_p",
        "request_refund",
        args(json!(500), "duplicate"),
    )
    .await;
    assert_eq!(
        (a["outcome"].as_str(), a["operation_id"].as_str()),
        (Some("pending"), Some(refund.as_str()))
    );
    assert!(
        a["retry_advice"]
            .as_str()
            .unwrap()
            .contains("Do not propose another refund"),
        "{a}"
    );
    api.stop().await;
}

/// Issue 53, item 9: a refund of more than the whole payment is the documented `over_refund`, through
/// the tool (a tool error, not `invalid_arguments`) and through `POST /v1/refunds` alike.
#[tokio::test]
async fn a_refund_above_the_whole_payment_is_an_over_refund_through_the_tool_and_the_route() {
    let api = spawn(sqlite_ledger().await).await;
    let payment = paid(&api, "INV-RF9", 2048).await;
    for format in FORMATS {
        let (a, is_error) = call_tool(
            &api,
            &api.assistant,
            format,
            "call_above",
            "request_refund",
            json!({"payment_operation_id": payment, "amount": 2049, "reason": "duplicate"}),
        )
        .await;
        assert!(is_error, "{format}: {a}");
        assert_eq!(
            (a["outcome"].as_str(), a["error"]["code"].as_str()),
            (Some("conflict"), Some("over_refund")),
            "{format}: {a}"
        );
        assert!(
            a["error"]["message"].as_str().unwrap().contains("2048"),
            "{format}: what is left is named: {a}"
        );
    }
    let r = api
        .post(
            "/v1/refunds",
            &api.service,
            json!({"business_key": "refund:RF9", "payment_operation_id": payment, "amount": 2049, "reason": "duplicate"}),
        )
        .await;
    assert_eq!(r.status, 409, "{}", r.text);
    assert_eq!(r.code(), "over_refund");
    assert_eq!(api.operation_count().await, 1, "nothing was proposed");
}

#[tokio::test]
async fn request_refund_is_defined_in_every_providers_shape() {
    let api = spawn(sqlite_ledger().await).await;
    let defs = |f: &'static str| {
        let api = &api;
        async move {
            api.get(&format!("/v1/tools?format={f}"), &api.assistant)
                .await
                .json()
        }
    };
    let chat = defs("openai_chat").await;
    let t = &chat["tools"][2]["function"];
    assert_eq!(
        (
            t["name"].as_str(),
            chat["tools"][2]["function"]["strict"].as_bool()
        ),
        (Some("request_refund"), Some(true))
    );
    assert_eq!(
        t["parameters"]["required"],
        json!(["payment_operation_id", "amount", "reason"])
    );
    assert_eq!(
        t["parameters"]["properties"]["amount"]["type"],
        json!(["integer", "null"])
    );
    let responses = defs("openai_responses").await;
    assert_eq!(responses["tools"][2]["name"], "request_refund");
    assert_eq!(
        responses["tools"][2]["parameters"]["additionalProperties"],
        false
    );
    let anthropic = defs("anthropic").await;
    assert_eq!(
        anthropic["tools"][2]["input_schema"]["required"],
        json!(["payment_operation_id", "reason"])
    );
    assert_eq!(
        anthropic["tools"][2]["input_schema"]["properties"]["reason"]["enum"],
        json!(["duplicate", "fraudulent", "requested_by_customer"])
    );
    let mcp = defs("mcp").await;
    let m = &mcp["tools"][2];
    assert_eq!(m["title"], "Request refund");
    assert_eq!(
        m["annotations"],
        json!({"title": "Request refund", "readOnlyHint": false,
        "destructiveHint": false, "idempotentHint": true, "openWorldHint": true})
    );
    assert!(m["outputSchema"]["properties"]["payment_operation_id"].is_object());
    // The server takes `"amount": null` from every shape, so every schema says so.
    for (shape, schema) in [
        ("openai_chat", &chat["tools"][2]["function"]["parameters"]),
        ("openai_responses", &responses["tools"][2]["parameters"]),
        ("anthropic", &anthropic["tools"][2]["input_schema"]),
        ("mcp", &m["inputSchema"]),
    ] {
        assert_eq!(
            schema["properties"]["amount"]["type"],
            json!(["integer", "null"]),
            "{shape}"
        );
    }
    api.stop().await;
}

/// An assistant in a loop proposing refund after refund: its proposals awaiting approval are bounded
/// per payment, so the service's own refund still fits; one past the bound is a clear tool error that
/// proposes nothing (asking again for an open one still answers it); and a proposal left unapproved
/// past its period holds nothing.
#[tokio::test]
async fn an_assistants_proposals_are_bounded_and_expire_so_the_service_can_still_refund() {
    const CALLS: i64 = 40;
    const OPEN_MAX: usize = PROPOSALS_OPEN_MAX as usize;
    let api = spawn_on_postgres().await;
    let payment = paid(&api, "INV-RF9", 2048).await;
    let propose = |call: String, i: i64| {
        let (api, payment) = (&api, &payment);
        async move {
            call_tool(
                api,
                &api.assistant,
                "anthropic",
                &call,
                "request_refund",
                json!({"payment_operation_id": payment, "amount": 50 + i,
                       "reason": "requested_by_customer"}),
            )
            .await
        }
    };
    let mut answers = Vec::new();
    for i in 0..CALLS {
        answers.push(propose(format!("call_loop_{i}"), i).await);
    }
    let service_refund = |key: &str, amount: i64| {
        api.post(
            "/v1/refunds",
            &api.service,
            json!({"business_key": key, "payment_operation_id": payment, "amount": amount,
                   "reason": "duplicate"}),
        )
    };
    let own = service_refund("refund:RF9:a", 1000).await;
    assert_eq!(own.status, 201, "the service's refund: {}", own.text);

    let (proposed, refused): (Vec<_>, Vec<_>) = answers.iter().partition(|(_, is_error)| !is_error);
    assert_eq!(proposed.len(), OPEN_MAX, "{proposed:?}");
    assert!(
        proposed
            .iter()
            .all(|(a, _)| a["outcome"] == "approval_required"),
        "{proposed:?}"
    );
    for (a, _) in &refused {
        assert_eq!(
            (a["outcome"].as_str(), a["error"]["code"].as_str()),
            (Some("conflict"), Some("too_many_proposals")),
            "{a}"
        );
        let message = a["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&OPEN_MAX.to_string()) && message.contains("Nothing was proposed"),
            "{message}"
        );
    }
    let (again, is_error) = propose("call_loop_again".into(), 0).await;
    assert!(
        !is_error,
        "an open proposal is still its own answer: {again}"
    );
    assert_eq!(again["operation_id"], proposed[0].0["operation_id"]);

    // Past the period nobody approved them: they hold nothing, and the service refunds the rest.
    api.clock.advance(PROPOSAL_TTL);
    let rest = service_refund("refund:RF9:b", 1048).await;
    assert_eq!(rest.status, 201, "{}", rest.text);
    let of_payment = api
        .get(&format!("/v1/operations/{payment}/refunds"), &api.service)
        .await
        .json();
    assert_eq!(
        (
            of_payment["totals"]["in_flight_minor"].as_i64(),
            of_payment["refundable_minor"].as_i64()
        ),
        (Some(2048), Some(0)),
        "{of_payment}"
    );
    let statuses: Vec<&str> = of_payment["refunds"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            r["business_key"]
                .as_str()
                .unwrap()
                .starts_with(PROPOSAL_KEY_PREFIX)
        })
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["cancelled"; OPEN_MAX], "{of_payment}");
    // The prefix is the assistant's: a service cannot make a refund the proposals' limits would touch.
    let reserved = service_refund(&format!("{PROPOSAL_KEY_PREFIX}{payment}:1"), 1).await;
    assert_eq!(
        (reserved.status, reserved.code().as_str()),
        (400, "invalid_request")
    );
    api.stop().await;
}

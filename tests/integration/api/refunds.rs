//! Refunds over HTTP: created by a service key from the ledger's payment, approved only by a person
//! of the merchant (on-call key), read beside their payment, and proposed by the assistant's
//! `request_refund` tool in every provider format. Exact states, codes and row counts.

use super::tools::call_tool;
use super::{T0_MS, TestApi, spawn};
use crate::support::refunds::succeeded_payment;
use crate::support::{postgres_ledger, sqlite_ledger};
use serde_json::{Value, json};

const FORMATS: [&str; 4] = ["openai_chat", "openai_responses", "anthropic", "mcp"];

async fn paid(api: &TestApi, invoice: &str, amount: i64) -> String {
    succeeded_payment(&api.ledger, invoice, amount, T0_MS)
        .await
        .id
        .as_str()
        .to_string()
}

fn refund_body(key: &str, payment: &str, amount: Option<i64>, reason: &str) -> Value {
    let mut body = json!({"business_key": key, "payment_operation_id": payment, "reason": reason});
    if let Some(a) = amount {
        body["amount"] = json!(a);
    }
    body
}

#[tokio::test]
async fn a_service_creates_refunds_from_the_payment_and_only_an_on_call_person_approves() {
    let api = spawn(postgres_ledger().await.0).await;
    let payment = paid(&api, "INV-RF1", 2048).await;
    let create = |key: &str, amount: Option<i64>| {
        api.post(
            "/v1/refunds",
            &api.service,
            refund_body(key, &payment, amount, "duplicate"),
        )
    };
    let first = create("refund:RF1:a", Some(1000)).await;
    assert_eq!(first.status, 201, "{}", first.text);
    let refund = first.json();
    assert_eq!(refund["status"], "awaiting_approval");
    let d = &refund["details"];
    assert_eq!(
        (
            d["kind"].as_str(),
            d["amount"].as_i64(),
            d["currency"].as_str()
        ),
        (Some("refund"), Some(1000), Some("usd"))
    );
    assert_eq!(
        (d["customer"].as_str(), d["invoice"].as_str()),
        (Some("cus_test"), Some("INV-RF1"))
    );
    assert_eq!(
        d["refund_of"],
        json!({"payment_operation": payment, "payment_reference": "pi_INV-RF1", "reason": "duplicate"})
    );
    let id = refund["id"].as_str().unwrap().to_string();
    let again = create("refund:RF1:a", Some(1000)).await;
    assert_eq!(
        (again.status, again.json()["id"].as_str()),
        (200, Some(id.as_str()))
    );
    let changed = create("refund:RF1:a", Some(999)).await;
    assert_eq!(
        (changed.status, changed.code().as_str()),
        (409, "business_key_conflict")
    );

    // The whole payment no longer fits: 1048 is left.
    let whole = create("refund:RF1:b", None).await;
    assert_eq!((whole.status, whole.code().as_str()), (409, "over_refund"));
    assert!(
        whole.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("1048"),
        "{}",
        whole.text
    );
    let unknown = api
        .post(
            "/v1/refunds",
            &api.service,
            refund_body(
                "refund:RF1:c",
                &format!("op_{}", "0".repeat(32)),
                Some(1),
                "duplicate",
            ),
        )
        .await;
    assert_eq!(
        (unknown.status, unknown.code().as_str()),
        (404, "operation_not_found")
    );
    for bad in [
        refund_body("refund:RF1:d", "op_nope", Some(1), "duplicate"),
        refund_body(
            "refund:RF1:d",
            &payment,
            Some(1),
            "expired_uncaptured_charge",
        ),
        refund_body("refund:RF1:d", &payment, Some(0), "duplicate"),
        refund_body("refund:RF1:d", &payment, Some(2049), "duplicate"),
    ] {
        let r = api.post("/v1/refunds", &api.service, bad.clone()).await;
        assert_eq!(
            (r.status, r.code().as_str()),
            (400, "invalid_request"),
            "{bad}: {}",
            r.text
        );
    }
    let of_refund = api
        .post(
            "/v1/refunds",
            &api.service,
            refund_body("refund:RF1:e", &id, Some(1), "duplicate"),
        )
        .await;
    assert_eq!(
        (of_refund.status, of_refund.code().as_str()),
        (409, "not_refundable")
    );
    let unpaid = api.create("INV-RF1b", 2048).await;
    let not_yet = api
        .post(
            "/v1/refunds",
            &api.service,
            refund_body(
                "refund:RF1:f",
                unpaid["id"].as_str().unwrap(),
                Some(1),
                "duplicate",
            ),
        )
        .await;
    assert_eq!(
        (not_yet.status, not_yet.code().as_str()),
        (409, "not_refundable")
    );
    assert_eq!(api.operation_count().await, 3, "refusals created nothing");

    // Nobody but a person of the merchant approves it.
    let hash = json!({"details_hash": refund["details_hash"], "approved_by": "service:billing"});
    let by_service = api
        .post(&format!("/v1/operations/{id}/approve"), &api.service, hash)
        .await;
    assert_eq!(
        (by_service.status, by_service.code().as_str()),
        (403, "approver_not_allowed")
    );
    let link = api
        .post(
            &format!("/v1/operations/{id}/approval-requests"),
            &api.service,
            json!({}),
        )
        .await;
    assert_eq!(
        (link.status, link.code().as_str()),
        (403, "approver_not_allowed")
    );
    let approve = |key: String, hash: Value, target: String| {
        let api = &api;
        async move {
            api.post(
                &format!("/v1/refunds/{target}/approve"),
                &key,
                json!({"details_hash": hash}),
            )
            .await
        }
    };
    for key in [api.service.clone(), api.assistant.clone()] {
        let r = approve(key, refund["details_hash"].clone(), id.clone()).await;
        assert_eq!((r.status, r.code().as_str()), (403, "forbidden"));
    }
    let wrong = approve(api.on_call.clone(), json!("0".repeat(64)), id.clone()).await;
    assert_eq!(
        (wrong.status, wrong.code().as_str()),
        (409, "approval_mismatch")
    );
    let a_payment = approve(api.on_call.clone(), json!("0".repeat(64)), payment.clone()).await;
    assert_eq!(
        (a_payment.status, a_payment.code().as_str()),
        (404, "operation_not_found")
    );
    let read = api
        .get(&format!("/v1/operations/{id}"), &api.service)
        .await
        .json();
    assert_eq!(
        read["status"], "awaiting_approval",
        "refusals approved nothing"
    );

    let approved = approve(
        api.on_call.clone(),
        refund["details_hash"].clone(),
        id.clone(),
    )
    .await;
    assert_eq!(approved.status, 200, "{}", approved.text);
    let approved = approved.json();
    assert_eq!(
        (
            approved["status"].as_str(),
            approved["approved_by"].as_str()
        ),
        (Some("ready"), Some("on_call:alice"))
    );
    let twice = approve(
        api.on_call.clone(),
        refund["details_hash"].clone(),
        id.clone(),
    )
    .await;
    assert_eq!(
        (twice.status, twice.json()["status"].as_str()),
        (200, Some("ready"))
    );
    let events: Vec<(String, String)> = api
        .get(&format!("/v1/operations/{id}"), &api.service)
        .await
        .json()["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["event"].as_str().unwrap().to_string(),
                e["actor"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        events,
        [
            ("create".to_string(), "service:billing".to_string()),
            ("approve".to_string(), "on_call:alice".to_string()),
        ]
    );
    let stored = api
        .ledger
        .latest_approval(&payonce_shared::id::OperationId::parse(&id).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (stored.method.as_str(), stored.approved_by.as_str()),
        ("on_call_key", "on_call:alice")
    );

    // Beside the payment: totals and the refund.
    for key in [&api.service, &api.on_call] {
        let listed = api
            .get(&format!("/v1/operations/{payment}/refunds"), key)
            .await;
        assert_eq!(listed.status, 200, "{}", listed.text);
        let listed = listed.json();
        assert_eq!(
            listed["totals"],
            json!({"payment_minor": 2048, "refunded_minor": 0,
                                            "in_flight_minor": 1000, "refund_count": 1})
        );
        assert_eq!(listed["refundable_minor"], 1048);
        assert_eq!(listed["refunds"].as_array().unwrap().len(), 1);
        assert_eq!(listed["refunds"][0]["id"], id.as_str());
    }
    let hidden = api
        .get(
            &format!("/v1/operations/{payment}/refunds"),
            &api.other_service,
        )
        .await;
    assert_eq!(
        (hidden.status, hidden.code().as_str()),
        (404, "operation_not_found")
    );
    api.stop().await;
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
        .tool_calls(&payonce_shared::id::OperationId::parse(refund).unwrap())
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
    api.stop().await;
}

//! Refunds over HTTP: created by a service key from the ledger's payment, approved only by a person
//! of the merchant (on-call key), read beside their payment. Exact states, codes and row counts.
//! (The assistant's `request_refund` tool: `refund_tool.rs`.)

use super::{T0, TestApi, spawn_on_postgres, tenant};
use crate::support::refunds::succeeded_payment;
use serde_json::{Value, json};

async fn paid(api: &TestApi, invoice: &str, amount: i64) -> String {
    succeeded_payment(&api.ledger, invoice, amount, T0)
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
    let api = spawn_on_postgres().await;
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
    ] {
        let r = api.post("/v1/refunds", &api.service, bad.clone()).await;
        assert_eq!(
            (r.status, r.code().as_str()),
            (400, "invalid_request"),
            "{bad}: {}",
            r.text
        );
    }
    // More than the whole payment is an over-refund, as the tool answers it (issue 53).
    let above = refund_body("refund:RF1:d", &payment, Some(2049), "duplicate");
    let r = api.post("/v1/refunds", &api.service, above).await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (409, "over_refund"),
        "{}",
        r.text
    );
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
        .latest_approval(
            &tenant(),
            &payonce_core::id::OperationId::parse(&id).unwrap(),
        )
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

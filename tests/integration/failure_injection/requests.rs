//! Scenario 1 (many tool calls, execute requests and worker processes at once on one operation),
//! scenario 3 (a tool result lost after the payment committed; the assistant asks again) and
//! scenario 6 (an amount change attempted under an existing operation), through a real `payonce api`
//! process, real worker processes and the simulator.

use super::fleet::{self, DEADLINE, assert_paid_once, settled, successful_payments};
use crate::support::now;
use crate::support::processes::{arm_faults, simulator};
use crate::support::{postgres_ledger, ready_operation, tenant, wait_for};
use payonce_core::id::OperationId;
use payonce_core::state::Status;
use payonce_ledger::Role;
use payonce_simulator::SimulatorConfig;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

/// Tool calls and execute requests fired at once in scenario 1.
const CONCURRENT_REQUESTS: usize = 40;
/// Worker processes racing in scenario 1.
const WORKERS: usize = 3;

async fn keys(ledger: &payonce_ledger::SharedLedger) -> (String, String) {
    let service = crate::support::api_key(ledger, Role::Service, "billing").await;
    let assistant = crate::support::api_key(ledger, Role::Assistant, "bot").await;
    (service, assistant)
}

async fn post(base: &str, path: &str, key: &str, body: Value) -> (u16, Value) {
    let http = crate::api::http_client();
    crate::api::post_json(&http, format!("{base}{path}"), key, body).await
}

fn tool_call_body(call_id: &str, input: Value) -> Value {
    json!({"format": "anthropic", "call": {"type": "tool_use", "id": call_id, "name": "pay_invoice", "input": input}})
}

/// An Anthropic `pay_invoice` call; returns the structured answer and whether it is a tool error.
async fn pay_invoice(base: &str, key: &str, call_id: &str, input: Value) -> (Value, bool) {
    let (status, result) = post(base, "/v1/tool-calls", key, tool_call_body(call_id, input)).await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["tool_use_id"], call_id);
    let answer = serde_json::from_str(result["content"].as_str().unwrap()).unwrap();
    (answer, result["is_error"].as_bool().unwrap_or(false))
}

async fn create_and_approve(base: &str, service: &str, invoice: &str, amount: i64) -> OperationId {
    let body = json!({"business_key": format!("invoice:{invoice}:pay"), "details": crate::api::raw_details(invoice, amount)});
    let (status, created) = post(base, "/v1/operations", service, body).await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_string();
    let approval =
        json!({"details_hash": created["details_hash"], "approved_by": "customer:cus_test"});
    let (status, approved) = post(
        base,
        &format!("/v1/operations/{id}/approve"),
        service,
        approval,
    )
    .await;
    assert_eq!(status, 200, "{approved}");
    OperationId::parse(&id).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_1_tool_calls_execute_requests_and_workers_at_once_pay_once() {
    let (ledger, url) = postgres_ledger().await;
    let sim = simulator(SimulatorConfig::default()).await;
    let (service, assistant) = keys(&ledger).await;
    let (_api, base) = fleet::api(&url).await;
    let id = create_and_approve(&base, &service, "INV-FI1", 2048).await;

    // Workers start while every request is in flight. The subject is concurrency, not a slow
    // processor: a generous timeout keeps a loaded machine from turning the one submission into an
    // unknown outcome (which this fleet, having no reconciler, would rightly leave unresolved).
    let patient = [
        ("PAYONCE_PROCESSOR_TIMEOUT_MS", "10000"),
        ("PAYONCE_SUBMIT_TIMEOUT_MS", "10500"),
        ("PAYONCE_SHUTDOWN_GRACE_MS", "11000"),
    ];
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| fleet::worker(&url, &sim, &patient))
        .collect();
    let mut requests = tokio::task::JoinSet::new();
    for i in 0..CONCURRENT_REQUESTS {
        let (base, key, id) = (base.clone(), assistant.clone(), id.clone());
        requests.spawn(async move {
            if i % 4 == 0 {
                let (status, answer) = post(
                    &base,
                    &format!("/v1/operations/{id}/execute"),
                    &key,
                    json!({}),
                )
                .await;
                assert_eq!(status, 200, "{answer}");
                answer
            } else {
                let (answer, is_error) = pay_invoice(
                    &base,
                    &key,
                    &format!("toolu_{i}"),
                    json!({"operation_id": id.as_str()}),
                )
                .await;
                assert!(!is_error, "{answer}");
                answer
            }
        });
    }
    for answer in requests.join_all().await {
        assert_eq!(answer["operation_id"], id.as_str());
        assert!(
            matches!(answer["outcome"].as_str(), Some("pending" | "succeeded")),
            "{answer}"
        );
        assert_eq!(answer["new_payment_submitted"], false);
    }
    assert_eq!(settled(&ledger, &id, DEADLINE).await, Status::Succeeded);
    let events = assert_paid_once(&ledger, &sim, &id).await;
    let claims = events.iter().filter(|e| e.is_claim()).count();
    assert_eq!(claims, 1, "one worker of {WORKERS} claimed it: {events:?}");
    let calls = ledger.tool_calls(&tenant(), &id).await.unwrap();
    assert_eq!(
        calls.len(),
        CONCURRENT_REQUESTS - CONCURRENT_REQUESTS / 4,
        "every tool call recorded"
    );
    drop(workers);
}

#[tokio::test]
async fn scenario_3_a_lost_tool_result_and_a_lost_processor_answer_never_pay_twice() {
    let (ledger, url) = postgres_ledger().await;
    let sim = simulator(SimulatorConfig::default()).await;
    let (_, assistant) = keys(&ledger).await;
    let (_api, base) = fleet::api(&url).await;
    let op = ready_operation(&ledger, "INV-FI3", "pm_card_visa", now()).await;
    // The processor commits the payment and its answer to the worker is dropped, too.
    arm_faults(
        &sim,
        json!([{"match": op.idempotency_key.as_str(), "fault": "drop_after_commit", "times": 1}]),
    )
    .await;

    // The assistant's first call is sent on a raw connection that goes away without reading the
    // result: the api records and answers it; the assistant never sees the answer.
    let body = tool_call_body("toolu_lost", json!({"operation_id": op.id.as_str()})).to_string();
    let mut conn = tokio::net::TcpStream::connect(base.trim_start_matches("http://"))
        .await
        .unwrap();
    let request = format!(
        "POST /v1/tool-calls HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {assistant}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(request.as_bytes()).await.unwrap();
    wait_for("the lost call is recorded", DEADLINE, || async {
        (ledger.tool_calls(&tenant(), &op.id).await.unwrap().len() == 1).then_some(())
    })
    .await;
    drop(conn);

    let _fleet = fleet::worker_and_reconciler(&url, &sim);
    // The assistant asks again, with fresh call ids, until it hears the outcome.
    let mut asked = 0usize;
    let answer = wait_for("the assistant hears the outcome", DEADLINE, || {
        asked += 1;
        let (base, key, id, n) = (base.clone(), assistant.clone(), op.id.clone(), asked);
        async move {
            let (answer, is_error) = pay_invoice(
                &base,
                &key,
                &format!("toolu_again_{n}"),
                json!({"operation_id": id.as_str()}),
            )
            .await;
            assert!(!is_error, "{answer}");
            assert_eq!(answer["new_payment_submitted"], false);
            (answer["outcome"] == "succeeded").then_some(answer)
        }
    })
    .await;
    let events = assert_paid_once(&ledger, &sim, &op.id).await;
    let payments = successful_payments(&sim, &op.id).await;
    assert_eq!(
        answer["reference"], payments[0]["id"],
        "the assistant is told the one payment"
    );
    let names: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert!(
        names.contains(&"outcome_unknown"),
        "the dropped answer made it unknown: {names:?}"
    );
    assert_eq!(
        events.last().unwrap().from_status.as_deref(),
        Some("unknown"),
        "resolved by lookup: {names:?}"
    );
    assert_eq!(
        ledger.tool_calls(&tenant(), &op.id).await.unwrap().len(),
        1 + asked,
        "every call recorded"
    );
}

#[tokio::test]
async fn scenario_6_an_amount_change_under_an_existing_operation_is_refused() {
    let (ledger, url) = postgres_ledger().await;
    let sim = simulator(SimulatorConfig::default()).await;
    let (service, assistant) = keys(&ledger).await;
    let (_api, base) = fleet::api(&url).await;
    let id = create_and_approve(&base, &service, "INV-FI6", 2048).await;
    let changed = json!({"business_key": "invoice:INV-FI6:pay", "details": crate::api::raw_details("INV-FI6", 9999)});

    // Before execution: upstream and the assistant both try a different amount.
    let (status, refused) = post(&base, "/v1/operations", &service, changed.clone()).await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (409, Some("business_key_conflict")),
        "{refused}"
    );
    let (answer, is_error) = pay_invoice(
        &base,
        &assistant,
        "toolu_amount",
        json!({"operation_id": id.as_str(), "amount": 1}),
    )
    .await;
    assert!(is_error, "a tool call cannot carry an amount: {answer}");
    let bogus = json!({"details_hash": "0".repeat(64), "approved_by": "customer:cus_test"});
    let (status, _) = post(
        &base,
        &format!("/v1/operations/{id}/approve"),
        &service,
        bogus,
    )
    .await;
    assert_ne!(status, 200, "an approval of other details is refused");

    let _worker = fleet::worker(&url, &sim, &[]);
    assert_eq!(settled(&ledger, &id, DEADLINE).await, Status::Succeeded);
    assert_paid_once(&ledger, &sim, &id).await;
    // After execution: the same attempt changes nothing and is still refused.
    let (status, _) = post(&base, "/v1/operations", &service, changed).await;
    assert_eq!(status, 409);
    let payments = successful_payments(&sim, &id).await;
    assert_eq!(payments.len(), 1);
    assert_eq!(
        payments[0]["amount"], 2048,
        "the approved amount, never the changed one"
    );
    let names: Vec<String> = ledger
        .events_unscoped(&id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.event.to_string())
        .collect();
    assert_eq!(
        names.iter().filter(|e| *e == "approve").count(),
        1,
        "{names:?}"
    );
}

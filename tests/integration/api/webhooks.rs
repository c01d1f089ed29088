//! `POST /v1/webhooks/stripe`: the raw body and signature reach `payonce_processor::ingest::ingest`
//! (the api does not depend on the reconciler crate); signed events are stored once as hints (applied
//! only after the reconciler retrieved the object: evidence.rs); bad signatures are 400; the
//! simulator's published secret is refused.

use super::tools::call_tool;
use super::{T0_MS, WEBHOOK_SECRET, spawn};
use crate::support::sqlite_ledger;
use payonce_core::clock::Timestamp;
use payonce_core::state::Status;
use payonce_processor::stripe::webhook::sign;
use serde_json::{Value, json};

/// A Stripe `payment_intent.succeeded` event `event` about PaymentIntent `pi` of `amount` cents USD,
/// naming `operation` in its metadata.
fn succeeded_event(event: &str, pi: &str, amount: i64, operation: &str) -> Value {
    json!({"id": event, "object": "event", "type": "payment_intent.succeeded",
        "data": {"object": {"id": pi, "object": "payment_intent", "status": "succeeded", "amount": amount,
                            "currency": "usd", "metadata": {"payonce_operation_id": operation}}}})
}

#[tokio::test]
async fn signed_events_are_stored_once_as_hints_and_bad_signatures_refused() {
    let api = spawn(sqlite_ledger().await).await;
    let (id, _) = api.create_executing("INV-80").await;

    let event = succeeded_event("evt_80", "pi_80", 2048, id.as_str());
    let body = event.to_string();
    let t = T0_MS / 1000;
    let header = format!("t={t},v1={}", sign(WEBHOOK_SECRET, t, body.as_bytes()));
    let url = format!("{}/v1/webhooks/stripe", api.base);
    let post = |header: String, body: String| {
        let http = api.http.clone();
        let url = url.clone();
        async move {
            let r = http
                .post(url)
                .header("stripe-signature", header)
                .body(body)
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap())
        }
    };
    let (status, first) = post(header.clone(), body.clone()).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["duplicate"], false);
    assert_eq!(first["operation_id"], id.as_str());
    assert_eq!(first["pending_check"], true);
    let (status, again) = post(header.clone(), body.clone()).await;
    assert_eq!((status, again["duplicate"].as_bool()), (200, Some(true)));

    let (answer, _) = call_tool(
        &api,
        &api.assistant,
        "mcp",
        "1",
        "get_payment_status",
        json!({"operation_id": id.as_str()}),
    )
    .await;
    assert_eq!(
        answer["outcome"], "pending",
        "a webhook is a hint: nothing changes before the processor is asked"
    );
    let pending = api
        .ledger
        .pending_processor_events(Timestamp::from_millis(i64::MAX), 10)
        .await
        .unwrap();
    assert_eq!(pending.len(), 1, "stored once, waiting for its check");
    assert_eq!(pending[0].operation.as_ref(), Some(&id));

    let forged = format!("t={t},v1={}", sign("whsec_attacker", t, body.as_bytes()));
    let (status, bad) = post(forged, body.clone()).await;
    assert_eq!(
        (status, bad["error"]["code"].as_str()),
        (400, Some("webhook_signature_invalid"))
    );
    let r = api.http.post(&url).body(body.clone()).send().await.unwrap();
    assert_eq!(r.status(), 400, "no signature header");
    let not_event = "{\"hello\": 1}".to_string();
    let signed = format!("t={t},v1={}", sign(WEBHOOK_SECRET, t, not_event.as_bytes()));
    let (status, bad) = post(signed, not_event).await;
    assert_eq!(
        (status, bad["error"]["code"].as_str()),
        (400, Some("webhook_payload_invalid"))
    );
    let huge = "x".repeat(payonce_processor::stripe::webhook::PAYLOAD_LEN_MAX + 1);
    let (status, bad) = post(header, huge).await;
    assert_eq!(
        (status, bad["error"]["code"].as_str()),
        (413, Some("body_too_large"))
    );
    // One forged and one unsigned delivery are verify failures; the bad payload and size are not.
    let metrics = api
        .http
        .get(format!("{}/metrics", api.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "payonce_webhook_verify_failures_total{reason=\"signature_mismatch\"} 1\n",
        "payonce_webhook_verify_failures_total{reason=\"signature_missing\"} 1\n",
        "payonce_webhook_verify_failures_total{reason=\"signature_stale\"} 0\n",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
    api.stop().await;
}

/// Signs `event` with the test api's secret and posts it; returns the status and body.
async fn post_signed(api: &super::TestApi, event: &Value) -> (u16, Value) {
    let body = event.to_string();
    let t = T0_MS / 1000;
    let header = format!("t={t},v1={}", sign(WEBHOOK_SECRET, t, body.as_bytes()));
    let r = api
        .http
        .post(format!("{}/v1/webhooks/stripe", api.base))
        .header("stripe-signature", header)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json::<Value>().await.unwrap())
}

#[tokio::test]
async fn a_signed_forged_success_does_not_mark_an_executing_operation_paid() {
    let api = spawn(sqlite_ledger().await).await;
    let (id, _) = api.create_executing("INV-81").await;
    // Whoever holds the signing secret says amount 1 succeeded; no payment exists anywhere.
    let forged = succeeded_event("evt_81", "pi_forged", 1, id.as_str());
    let (status, body) = post_signed(&api, &forged).await;
    assert_eq!(status, 200, "stored and acknowledged: {body}");
    let row = api.ledger.get_unscoped(&id).await.unwrap();
    assert_eq!(
        (row.status, row.external_ref),
        (Status::Executing, None),
        "a signature alone is not evidence of a payment"
    );
    api.stop().await;
}

#[tokio::test]
async fn a_signed_success_for_an_operation_cancelled_before_approval_is_acknowledged() {
    let api = spawn(sqlite_ledger().await).await;
    let op = api.create("INV-82", 2048).await;
    let raw = op["id"].as_str().unwrap();
    let r = api
        .post(
            &format!("/v1/operations/{raw}/cancel"),
            &api.service,
            json!({}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let event = succeeded_event("evt_82", "pi_82", 2048, raw);
    // Before issue 13 this was 503 on every delivery, forever (a CHECK refused the move).
    for _ in 0..2 {
        let (status, body) = post_signed(&api, &event).await;
        assert_eq!(status, 200, "{body}");
    }
    let pending = api
        .ledger
        .pending_processor_events(Timestamp::from_millis(i64::MAX), 10)
        .await
        .unwrap();
    assert_eq!(pending.len(), 1, "stored once for the reconciler's check");
    api.stop().await;
}

#[tokio::test]
async fn the_simulators_published_secret_is_refused_outside_its_dev_mode() {
    assert_eq!(
        payonce_api::config::SIMULATOR_WEBHOOK_SECRET,
        payonce_simulator::config::WEBHOOK_SECRET_DEFAULT
    );
    let start = |dev_mode: bool| async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let config = payonce_api::ApiConfig {
            webhook_secrets: vec![payonce_simulator::config::WEBHOOK_SECRET_DEFAULT.to_string()],
            simulator_dev_mode: dev_mode,
            ..payonce_api::ApiConfig::default()
        };
        let clock = payonce_core::clock::ManualClock::new(Timestamp::from_millis(T0_MS));
        let state = payonce_api::AppState::new(sqlite_ledger().await, clock, config);
        // A dev-mode server starts and stops at once (the shutdown future is ready).
        payonce_api::serve_listener(listener, state, async {}).await
    };
    let refused = start(false).await;
    assert!(
        matches!(refused, Err(payonce_api::ApiError::Config(_))),
        "{refused:?}"
    );
    assert!(start(true).await.is_ok());
}

#[test]
fn the_api_parses_webhooks_without_the_reconciler_crate() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest: toml::Table =
        toml::from_str(&std::fs::read_to_string(root.join("api/Cargo.toml")).unwrap()).unwrap();
    for section in ["dependencies", "dev-dependencies", "build-dependencies"] {
        if let Some(deps) = manifest.get(section).and_then(|d| d.as_table()) {
            assert!(
                !deps.contains_key("payonce-reconciler"),
                "api/Cargo.toml [{section}] names payonce-reconciler: Stripe webhook parsing is in \
                 payonce-processor (stripe::webhook, ingest)"
            );
        }
    }
}

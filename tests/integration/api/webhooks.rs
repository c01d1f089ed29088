//! `POST /v1/webhooks/stripe`: the raw body and signature reach the reconciler; signed events are
//! stored once and applied; bad signatures are 400.

use super::tools::call_tool;
use super::{T0_MS, WEBHOOK_SECRET, spawn};
use crate::support::sqlite_ledger;
use payonce_reconciler::webhooks::sign;
use payonce_shared::clock::Clock;
use payonce_shared::id::OperationId;
use serde_json::{Value, json};

#[tokio::test]
async fn signed_events_are_stored_once_and_applied_and_bad_signatures_refused() {
    let api = spawn(sqlite_ledger().await).await;
    let op = api.create_ready("INV-80").await;
    let id = OperationId::parse(op["id"].as_str().unwrap()).unwrap();
    let claimed = api
        .ledger
        .claim("w", 1, 30_000, api.clock.now_ms())
        .await
        .unwrap();
    api.ledger
        .mark_submitting(&id, claimed[0].attempt, api.clock.now_ms())
        .await
        .unwrap();

    let event = json!({"id": "evt_80", "object": "event", "type": "payment_intent.succeeded",
        "data": {"object": {"id": "pi_80", "object": "payment_intent", "status": "succeeded", "amount": 2048,
                            "currency": "usd", "metadata": {"payonce_operation_id": id.as_str()}}}});
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
    assert_eq!(answer["outcome"], "succeeded");
    assert_eq!(answer["reference"], "pi_80");

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
    let huge = "x".repeat(payonce_reconciler::webhooks::PAYLOAD_LEN_MAX + 1);
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

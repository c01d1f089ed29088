//! The simulator's refunds at Stripe fidelity: the official stripe-python library creating, listing
//! (both cursors) and retrieving refunds and getting Stripe's own error on a wrong method; asynchronous
//! refunds (`pm_card_pendingRefund`, `pm_card_refundFail`, `pm_card_pendingRefundFail`) with their
//! exact events; and the refund audit tests count duplicates with.

// Test harness: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use crate::api::repo_root;
use crate::simulator::{
    API_KEY, DEADLINE, Sim, create_form, start_default, start_settling_refunds,
};
use crate::support::{pinned_python, wait_for};
use serde_json::{Value, json};
use std::process::Stdio;
use std::time::Duration;

/// How long the stripe-python run may take (interpreter start-up included).
const PYTHON_DEADLINE: Duration = Duration::from_secs(60);

fn ensure_stripe_python() -> std::path::PathBuf {
    pinned_python("stripe", |_| true)
}

async fn paid(s: &Sim, amount: i64, payment_method: &str) -> String {
    let pi = s
        .post(
            "/v1/payment_intents",
            None,
            &create_form(amount, payment_method, "op_paid"),
        )
        .await
        .json();
    assert_eq!(pi["status"], "succeeded", "{pi}");
    pi["id"].as_str().unwrap().to_string()
}

/// The types of the events about refund `re`, oldest first.
async fn refund_event_types(s: &Sim, re: &str) -> Vec<String> {
    let mut types: Vec<String> = s.get("/v1/events?limit=100").await.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["data"]["object"]["id"] == re)
        .map(|e| e["type"].as_str().unwrap().to_string())
        .collect();
    types.reverse();
    types
}

fn unrecognized(method: &str, path: &str) -> String {
    format!(
        "Unrecognized request URL ({method}: {path}). Please see https://stripe.com/docs or we can help at \
         https://support.stripe.com/."
    )
}

#[tokio::test]
async fn stripe_python_lists_refunds_by_both_cursors_and_gets_stripes_error_on_a_wrong_method() {
    let python = ensure_stripe_python();
    let s = start_default().await;
    let child = tokio::process::Command::new(&python)
        .arg(repo_root().join("tests/stripe/refunds.py"))
        .env("SIM_BASE", &s.base)
        .env("SIM_KEY", API_KEY)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run refunds.py");
    let output = tokio::time::timeout(PYTHON_DEADLINE, child.wait_with_output())
        .await
        .expect("refunds.py finishes in time")
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "refunds.py failed:\n{stderr}");
    let out: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("refunds.py printed no JSON ({e}):\n{stderr}"));
    let created: Vec<String> = serde_json::from_value(out["created"].clone()).unwrap();
    let (r0, r1, r2) = (&created[0], &created[1], &created[2]);
    assert_eq!(out["replayed_id"], json!(r0), "the same key replays");
    assert_eq!(
        out["first_page"],
        json!({"ids": [r2, r1], "has_more": true})
    );
    assert_eq!(out["second_page"], json!({"ids": [r0], "has_more": false}));
    assert_eq!(
        out["before_page"],
        json!({"ids": [r2, r1], "has_more": false})
    );
    assert_eq!(out["auto_paging"], json!([r2, r1, r0]));
    assert_eq!(
        out["retrieved"],
        json!({"id": r1, "amount": 700, "status": "succeeded", "payment_intent": out["payment_intent"],
            "metadata": {"payonce_operation_id": "op_part1"}})
    );
    assert_eq!(out["too_large"]["class"], "InvalidRequestError");
    assert_eq!(out["too_large"]["http_status"], 400);
    assert_eq!(out["too_large"]["code"], "amount_too_large");
    assert_eq!(out["too_large"]["param"], "amount");
    assert_eq!(out["missing"]["class"], "InvalidRequestError");
    assert_eq!(out["missing"]["http_status"], 404);
    assert_eq!(out["missing"]["code"], "resource_missing");
    let pi = out["payment_intent"].as_str().unwrap();
    for (field, method, path) in [
        ("delete_list", "DELETE", "/v1/refunds".to_string()),
        (
            "delete_payment",
            "DELETE",
            format!("/v1/payment_intents/{pi}"),
        ),
        ("delete_one", "DELETE", format!("/v1/refunds/{r0}")),
    ] {
        assert_eq!(
            out[field],
            json!({"class": "InvalidRequestError", "http_status": 404, "code": null,
                "type": "invalid_request_error", "param": null, "message": unrecognized(method, &path)}),
            "{field}"
        );
    }
    assert_eq!(out["rest"], json!({"amount": 900, "status": "succeeded"}));
    assert_eq!(out["already_refunded"]["code"], "charge_already_refunded");
    // The processor's side: four refunds, one per key, the payment exactly refunded.
    let a = s.refunds_audit().await;
    assert_eq!(a["count_by_payment_intent"], json!({ pi: 4 }));
    // stripe-python sends a key of its own with a POST that has none (the remainder refund).
    let keys = a["count_by_idempotency_key"].as_object().unwrap();
    assert_eq!(keys.len(), 4, "{keys:?}");
    assert!(keys.values().all(|n| n == 1), "{keys:?}");
    for key in ["py-refund-0", "py-refund-1", "py-refund-2"] {
        assert_eq!(keys[key], 1, "{key}");
    }
    assert_eq!(a["amount_by_payment_intent"], json!({ pi: 3000 }));
    s.sim.shutdown().await;
}

#[tokio::test]
async fn a_wrong_method_is_stripes_unrecognized_url_never_an_empty_405() {
    let s = start_default().await;
    for (method, path) in [
        (reqwest::Method::DELETE, "/v1/refunds"),
        (reqwest::Method::PATCH, "/v1/payment_intents"),
        (reqwest::Method::DELETE, "/v1/events"),
        (reqwest::Method::GET, "/v1/nothing_here"),
    ] {
        let r = s
            .http
            .request(method.clone(), format!("{}{path}", s.base))
            .bearer_auth(API_KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{method} {path}");
        assert_eq!(
            r.headers()["content-type"],
            "application/json",
            "{method} {path}"
        );
        let body: Value = r.json().await.unwrap();
        assert_eq!(
            body,
            json!({"error": {"type": "invalid_request_error", "message": unrecognized(method.as_str(), path)}}),
            "{method} {path}"
        );
    }
    s.sim.shutdown().await;
}

#[tokio::test]
async fn refund_lists_refuse_unknown_cursors_both_cursors_and_unknown_parameters() {
    let s = start_default().await;
    let pi = paid(&s, 1000, "pm_card_visa").await;
    let re = s
        .post(
            "/v1/refunds",
            None,
            &format!("payment_intent={pi}&amount=100"),
        )
        .await
        .json();
    let re = re["id"].as_str().unwrap();
    let other = paid(&s, 1000, "pm_card_visa").await;
    let listed = s.get(&format!("/v1/refunds?payment_intent={other}")).await;
    assert_eq!(listed.status, 200);
    assert_eq!(
        listed.json(),
        json!({"object": "list", "data": [], "has_more": false, "url": "/v1/refunds"}),
        "another payment's refunds are not listed"
    );
    for (query, code, param) in [
        (
            "starting_after=re_missing",
            "resource_missing",
            Some("starting_after"),
        ),
        (
            "ending_before=re_missing",
            "resource_missing",
            Some("ending_before"),
        ),
        (
            &format!("starting_after={re}&ending_before={re}") as &str,
            "parameters_exclusive",
            None,
        ),
        ("customer=cus_1", "parameter_unknown", Some("customer")),
        ("limit=101", "parameter_invalid_integer", Some("limit")),
    ] {
        let r = s.get(&format!("/v1/refunds?{query}")).await;
        assert_eq!(r.status, 400, "{query}");
        assert_eq!(r.json()["error"]["code"], code, "{query}");
        assert_eq!(r.json()["error"]["param"], json!(param), "{query}");
    }
    let one = s.get(&format!("/v1/refunds/{re}")).await;
    assert_eq!(one.status, 200);
    assert_eq!(one.json()["status"], "succeeded");
    assert_eq!(one.json()["payment_intent"], json!(pi));
    s.sim.shutdown().await;
}

async fn settled(s: &Sim, re: &str, status: &str) -> Value {
    wait_for(&format!("{re} {status}"), DEADLINE, || async move {
        let r = s.get(&format!("/v1/refunds/{re}")).await.json();
        (r["status"] == status).then_some(r)
    })
    .await
}

#[tokio::test]
async fn asynchronous_refunds_settle_after_the_delay_with_stripes_events() {
    let s = start_settling_refunds().await;
    // pm_card_pendingRefund: pending, then succeeded.
    let pi = paid(&s, 1000, "pm_card_pendingRefund").await;
    let r = s
        .post(
            "/v1/refunds",
            Some("k-pending"),
            &format!("payment_intent={pi}&amount=400"),
        )
        .await
        .json();
    assert_eq!(r["status"], "pending");
    assert_eq!(r["pending_reason"], "processing");
    let re = r["id"].as_str().unwrap();
    let done = settled(&s, re, "succeeded").await;
    assert_eq!(done["pending_reason"], Value::Null);
    assert_eq!(
        refund_event_types(&s, re).await,
        ["refund.created", "refund.updated", "charge.refund.updated"]
    );
    // A pending refund counts against what is left; this one left 600.
    let over = s
        .post(
            "/v1/refunds",
            None,
            &format!("payment_intent={pi}&amount=601"),
        )
        .await;
    assert_eq!(over.json()["error"]["code"], "amount_too_large");

    // pm_card_refundFail: succeeded, then failed; the amount is refundable again.
    let pi = paid(&s, 1000, "pm_card_refundFail").await;
    let r = s
        .post(
            "/v1/refunds",
            Some("k-fail"),
            &format!("payment_intent={pi}"),
        )
        .await
        .json();
    assert_eq!(r["status"], "succeeded");
    assert_eq!(r["amount"], 1000);
    let re = r["id"].as_str().unwrap();
    let failed = settled(&s, re, "failed").await;
    assert_eq!(failed["failure_reason"], "expired_or_canceled_card");
    assert_eq!(
        refund_event_types(&s, re).await,
        [
            "refund.created",
            "refund.failed",
            "refund.updated",
            "charge.refund.updated"
        ]
    );
    let events = s.get("/v1/events?type=charge.refund.updated").await.json();
    let update = &events["data"][0]["data"];
    assert_eq!(update["object"]["id"], json!(re));
    assert_eq!(
        update["previous_attributes"],
        json!({"status": "succeeded"})
    );
    assert_eq!(
        events["data"][0]["request"],
        json!({"id": null, "idempotency_key": null})
    );
    let again = s
        .post("/v1/refunds", None, &format!("payment_intent={pi}"))
        .await
        .json();
    assert_eq!(
        again["amount"], 1000,
        "a failed refund gives its amount back"
    );

    // pm_card_pendingRefundFail (simulator's own): pending, then failed.
    let pi = paid(&s, 500, "pm_card_pendingRefundFail").await;
    let r = s
        .post("/v1/refunds", None, &format!("payment_intent={pi}"))
        .await
        .json();
    assert_eq!(r["status"], "pending");
    let re = r["id"].as_str().unwrap();
    settled(&s, re, "failed").await;
    assert_eq!(
        refund_event_types(&s, re).await,
        [
            "refund.created",
            "refund.failed",
            "refund.updated",
            "charge.refund.updated"
        ]
    );
    let a = s.refunds_audit().await;
    assert_eq!(
        a["count_by_idempotency_key"],
        json!({"k-fail": 1, "k-pending": 1})
    );
    assert_eq!(
        a["amount_by_payment_intent"][pi.as_str()],
        Value::Null,
        "only a failed refund"
    );
    s.sim.shutdown().await;
}

//! The simulator over real HTTP: Stripe's idempotency semantics, test cards, lists and search, refunds,
//! events, signed webhooks, and every fault the admin API can arm.

// Test harness: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use crate::support::wait_for;
use payonce_simulator::{RateLimits, Simulator, SimulatorConfig, payment_audit, sign_payload};
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The secret key every test simulator accepts.
pub const API_KEY: &str = "sk_test_payonce";
/// Deadline for conditions the simulator reaches on its own (settling, webhooks, retention).
pub const DEADLINE: Duration = Duration::from_secs(15);

/// A running simulator with a client for its API and admin endpoints.
pub struct Sim {
    pub sim: Simulator,
    pub http: reqwest::Client,
    pub base: String,
}

/// One HTTP answer, fully read.
pub struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }
    pub fn replayed(&self) -> bool {
        self.headers
            .get("idempotent-replayed")
            .and_then(|v| v.to_str().ok())
            == Some("true")
    }
}

/// Starts a simulator on 127.0.0.1:0 with `config` (listen and api_key are forced).
pub async fn start(mut config: SimulatorConfig) -> Sim {
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.api_key = API_KEY.into();
    let sim = Simulator::start(config).await.expect("simulator starts");
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let base = sim.base_url();
    Sim { sim, http, base }
}

/// A default simulator.
pub async fn start_default() -> Sim {
    start(SimulatorConfig::default()).await
}

/// A short asynchronous-refund delay, so settling tests wait on a condition for little time.
pub const REFUND_SETTLE: Duration = Duration::from_millis(300);

/// A default simulator whose asynchronous refunds settle after [`REFUND_SETTLE`].
pub async fn start_settling_refunds() -> Sim {
    start(SimulatorConfig {
        refund_settle: REFUND_SETTLE,
        ..SimulatorConfig::default()
    })
    .await
}

impl Sim {
    /// Moves the simulator's clock forward (`POST /_sim/clock`); answers its new now, ms.
    pub async fn advance_clock(&self, by: Duration) -> i64 {
        let r = self
            .http
            .post(format!("{}/_sim/clock", self.base))
            .json(&json!({ "advance_ms": by.as_millis() as i64 }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        r.json::<Value>().await.unwrap()["now_ms"].as_i64().unwrap()
    }

    /// POSTs a form to `path` with the API key and an optional Idempotency-Key.
    pub async fn try_post(
        &self,
        path: &str,
        key: Option<&str>,
        form: &str,
    ) -> reqwest::Result<Answer> {
        let mut req = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(API_KEY)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form.to_string());
        if let Some(key) = key {
            req = req.header("Idempotency-Key", key);
        }
        let r = req.send().await?;
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        let body = r.bytes().await?.to_vec();
        Ok(Answer {
            status,
            headers,
            body,
        })
    }

    pub async fn post(&self, path: &str, key: Option<&str>, form: &str) -> Answer {
        self.try_post(path, key, form)
            .await
            .expect("simulator answers")
    }

    pub async fn get(&self, path_and_query: &str) -> Answer {
        let r = self
            .http
            .get(format!("{}{path_and_query}", self.base))
            .bearer_auth(API_KEY)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        Answer {
            status,
            headers,
            body: r.bytes().await.unwrap().to_vec(),
        }
    }

    pub async fn arm(&self, rules: Value) {
        let r = self
            .http
            .post(format!("{}/_sim/faults", self.base))
            .json(&rules)
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.status(),
            200,
            "arming {rules}: {}",
            r.text().await.unwrap_or_default()
        );
    }

    pub async fn clear_faults(&self) {
        let r = self
            .http
            .delete(format!("{}/_sim/faults", self.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }

    /// The JSON of an admin endpoint (`/_sim/…`).
    pub async fn admin(&self, path: &str) -> Value {
        crate::support::processes::admin_json(&self.http, &self.base, path).await
    }

    /// The simulator's audit of refunds (`GET /_sim/audit/refunds`).
    pub async fn refunds_audit(&self) -> Value {
        self.admin("/_sim/audit/refunds").await
    }

    /// Every PaymentIntent, oldest first (every page of the audit).
    pub async fn payments(&self) -> Vec<Value> {
        payment_audit::read_all(&self.http, &self.base, payment_audit::PAGE_SIZE_MAX)
            .await
            .unwrap()
    }

    /// Payments created under `key`.
    pub async fn payments_with_key(&self, key: &str) -> Vec<Value> {
        self.payments()
            .await
            .into_iter()
            .filter(|p| p["idempotency_key"] == key)
            .collect()
    }

    /// The audited API requests, oldest first.
    pub async fn requests(&self) -> Vec<Value> {
        self.admin("/_sim/audit/requests").await["data"]
            .as_array()
            .unwrap()
            .clone()
    }

    /// Keys whose first request is executing.
    pub async fn in_flight(&self) -> u64 {
        self.admin("/_sim/health").await["in_flight"]
            .as_u64()
            .unwrap()
    }
}

/// A confirmed off-session create form.
pub fn create_form(amount: i64, payment_method: &str, operation: &str) -> String {
    format!(
        "amount={amount}&currency=usd&customer=cus_sim&payment_method={payment_method}&confirm=true&off_session=true\
         &metadata[payonce_operation_id]={operation}"
    )
}

#[tokio::test]
async fn same_key_same_parameters_replays_the_first_response_byte_for_byte() {
    let s = start_default().await;
    let form = create_form(2048, "pm_card_visa", "op_replay");
    let first = s
        .post("/v1/payment_intents", Some("key-replay"), &form)
        .await;
    assert_eq!(first.status, 200);
    assert!(!first.replayed());
    let pi = first.json();
    assert_eq!(pi["status"], "succeeded");
    assert!(pi["latest_charge"].as_str().unwrap().starts_with("ch_"));
    assert_eq!(pi["metadata"]["payonce_operation_id"], "op_replay");
    // Same parameters in a different order are the same request.
    let reordered = format!(
        "metadata[payonce_operation_id]=op_replay&{}",
        form.split("&metadata").next().unwrap()
    );
    for body in [&form, &reordered] {
        let again = s
            .post("/v1/payment_intents", Some("key-replay"), body)
            .await;
        assert_eq!(again.status, 200);
        assert!(again.replayed(), "Idempotent-Replayed: true");
        assert_eq!(again.body, first.body, "byte for byte");
    }
    assert_eq!(s.payments_with_key("key-replay").await.len(), 1);
    // Without a key every request is a new payment.
    s.post("/v1/payment_intents", None, &form).await;
    s.post("/v1/payment_intents", None, &form).await;
    assert_eq!(s.payments().await.len(), 3);
    s.sim.shutdown().await;
}

#[tokio::test]
async fn same_key_different_parameters_is_an_idempotency_error() {
    let s = start_default().await;
    let ok = s
        .post(
            "/v1/payment_intents",
            Some("key-mismatch"),
            &create_form(2048, "pm_card_visa", "op_m"),
        )
        .await;
    assert_eq!(ok.status, 200);
    let other = s
        .post(
            "/v1/payment_intents",
            Some("key-mismatch"),
            &create_form(2049, "pm_card_visa", "op_m"),
        )
        .await;
    assert_eq!(other.status, 400);
    assert_eq!(other.json()["error"]["type"], "idempotency_error");
    assert_eq!(
        s.payments().await.len(),
        1,
        "nothing created by the mismatch"
    );
    s.sim.shutdown().await;
}

#[tokio::test]
async fn a_request_while_the_keys_first_is_in_flight_gets_409_and_a_hung_request_commits_nothing() {
    let s = start_default().await;
    s.arm(json!([{ "match": "key-busy", "fault": "hang", "times": 1 }]))
        .await;
    let form = create_form(2048, "pm_card_visa", "op_busy");
    let (http, base, f) = (s.http.clone(), s.base.clone(), form.clone());
    let hung = tokio::spawn(async move {
        http.post(format!("{base}/v1/payment_intents"))
            .bearer_auth(API_KEY)
            .header("Idempotency-Key", "key-busy")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(f)
            .send()
            .await
    });
    wait_for("the hung request to hold its key", DEADLINE, || async {
        (s.in_flight().await == 1).then_some(())
    })
    .await;
    let busy = s.post("/v1/payment_intents", Some("key-busy"), &form).await;
    assert_eq!(busy.status, 409);
    assert_eq!(busy.json()["error"]["code"], "idempotency_key_in_use");
    assert_eq!(
        busy.headers
            .get("stripe-should-retry")
            .and_then(|v| v.to_str().ok()),
        Some("true"),
        "a conflict on an in-flight key is retryable, and Stripe says so"
    );
    // The client gives up: the claim goes with its connection, and nothing was committed.
    hung.abort();
    wait_for("the claim to be released", DEADLINE, || async {
        (s.in_flight().await == 0).then_some(())
    })
    .await;
    assert!(s.payments().await.is_empty());
    let retry = s.post("/v1/payment_intents", Some("key-busy"), &form).await;
    assert_eq!(retry.status, 200);
    assert!(!retry.replayed());
    assert_eq!(s.payments_with_key("key-busy").await.len(), 1);
    s.sim.shutdown().await;
}

#[tokio::test]
async fn hang_never_answers_and_the_client_times_out() {
    let s = start_default().await;
    s.arm(json!([{ "match": "*", "fault": "hang", "times": 1 }]))
        .await;
    let impatient = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let err = impatient
        .post(format!("{}/v1/payment_intents", s.base))
        .bearer_auth(API_KEY)
        .header("Idempotency-Key", "key-hang")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(create_form(100, "pm_card_visa", "op_hang"))
        .send()
        .await
        .expect_err("a hung request never answers");
    assert!(err.is_timeout() && !err.is_connect(), "{err:?}");
    s.sim.shutdown().await;
}

#[tokio::test]
async fn keys_are_forgotten_after_retention_and_the_same_key_then_creates_a_new_payment() {
    // Stripe's own 24 h retention, passed by moving the simulator's clock, not by waiting.
    let s = start_default().await;
    let retention = SimulatorConfig::default().key_retention;
    assert_eq!(retention, Duration::from_secs(24 * 60 * 60));
    let form = create_form(500, "pm_card_visa", "op_retention");
    let post = || s.post("/v1/payment_intents", Some("key-retention"), &form);
    let first = post().await;
    let first_id = first.json()["id"].as_str().unwrap().to_string();
    // Five seconds short of the retention (wall time passes between the calls too) it still replays.
    s.advance_clock(retention - Duration::from_secs(5)).await;
    let within = post().await;
    assert!(within.replayed(), "still remembered inside the window");
    assert_eq!(within.json()["id"], first_id.as_str());
    s.advance_clock(Duration::from_secs(5)).await;
    let after = post().await;
    assert!(!after.replayed(), "a fresh execution, not a replay");
    assert_ne!(after.json()["id"], first_id.as_str());
    let under_key = s.payments_with_key("key-retention").await;
    assert_eq!(
        under_key.len(),
        2,
        "exactly one new payment once the key was forgotten"
    );
    s.sim.shutdown().await;
}

#[tokio::test]
async fn the_clock_moves_forward_only_and_bad_advances_are_refused() {
    let s = start_default().await;
    let url = format!("{}/_sim/clock", s.base);
    for (body, why) in [
        (json!({"advance_ms": -1}), "backwards"),
        (
            json!({"advance_ms": 366_i64 * 24 * 3_600_000 + 1}),
            "over the limit",
        ),
        (json!({"advance": 5}), "unknown field"),
        (json!({"advance_ms": "1"}), "not a number"),
    ] {
        let r = s.http.post(&url).json(&body).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 400, "{why}");
        let e: Value = r.json().await.unwrap();
        assert_eq!(e["error"]["type"], "invalid_request_error", "{why}: {e}");
    }
    let before = s.advance_clock(Duration::ZERO).await;
    let after = s.advance_clock(Duration::from_secs(3_600)).await;
    let moved = after - before;
    assert!(
        (3_600_000..3_600_000 + 10_000).contains(&moved),
        "moved by the hour asked (plus the wall clock between the calls): {moved}"
    );
    // Objects created afterwards carry the simulator's time.
    let created = s
        .post(
            "/v1/payment_intents",
            Some("key-clock"),
            &create_form(500, "pm_card_visa", "op_clock"),
        )
        .await
        .json()["created"]
        .as_i64()
        .unwrap();
    assert!(
        created * 1000 >= after - 1000,
        "created {created}, now {after}"
    );
    s.sim.shutdown().await;
}

#[tokio::test]
async fn declines_create_a_payment_intent_and_replay_the_402() {
    let s = start_default().await;
    let d = s
        .post(
            "/v1/payment_intents",
            Some("key-decline"),
            &create_form(700, "pm_card_chargeDeclined", "op_d"),
        )
        .await;
    assert_eq!(d.status, 402);
    let e = &d.json()["error"];
    assert_eq!(e["type"], "card_error");
    assert_eq!(e["code"], "card_declined");
    assert_eq!(e["decline_code"], "generic_decline");
    assert_eq!(e["payment_intent"]["status"], "requires_payment_method");
    assert_eq!(
        e["payment_intent"]["last_payment_error"]["code"],
        "card_declined"
    );
    let pi_id = e["payment_intent"]["id"].as_str().unwrap().to_string();
    let again = s
        .post(
            "/v1/payment_intents",
            Some("key-decline"),
            &create_form(700, "pm_card_chargeDeclined", "op_d"),
        )
        .await;
    assert_eq!((again.status, again.replayed()), (402, true));
    assert_eq!(again.body, d.body);
    let fetched = s.get(&format!("/v1/payment_intents/{pi_id}")).await;
    assert_eq!(fetched.json()["status"], "requires_payment_method");
    // Off-session authentication cannot happen: authentication_required.
    let a = s
        .post(
            "/v1/payment_intents",
            None,
            &create_form(700, "pm_card_authenticationRequired", "op_a"),
        )
        .await;
    assert_eq!(a.status, 402);
    assert_eq!(a.json()["error"]["code"], "authentication_required");
    // On-session it stops at requires_action.
    let on = "amount=700&currency=usd&payment_method=pm_card_authenticationRequired&confirm=true";
    let r = s.post("/v1/payment_intents", None, on).await;
    assert_eq!(r.json()["status"], "requires_action");
    assert_eq!(s.payments().await.len(), 3);
    s.sim.shutdown().await;
}

#[tokio::test]
async fn processing_settles_to_succeeded_and_emits_the_event() {
    let s = start(SimulatorConfig {
        processing_settle: Duration::from_millis(300),
        ..SimulatorConfig::default()
    })
    .await;
    let p = s
        .post(
            "/v1/payment_intents",
            Some("key-proc"),
            &create_form(900, "pm_card_processing", "op_p"),
        )
        .await;
    let pi = p.json();
    assert_eq!(pi["status"], "processing");
    let id = pi["id"].as_str().unwrap().to_string();
    wait_for("processing to settle", DEADLINE, || async {
        (s.get(&format!("/v1/payment_intents/{id}")).await.json()["status"] == "succeeded")
            .then_some(())
    })
    .await;
    let events = s.get("/v1/events?limit=100").await.json();
    let kinds: Vec<&str> = events["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "payment_intent.succeeded",
            "payment_intent.processing",
            "payment_intent.created"
        ],
        "newest first"
    );
    let settled = &events["data"][0];
    assert_eq!(settled["data"]["object"]["id"], id.as_str());
    assert_eq!(settled["request"]["idempotency_key"], "key-proc");
    assert!(
        settled["request"]["id"]
            .as_str()
            .unwrap()
            .starts_with("req_")
    );
    s.sim.shutdown().await;
}

#[tokio::test]
async fn invalid_requests_name_the_param_create_nothing_and_are_not_remembered() {
    let s = start_default().await;
    let cases = [
        ("currency=usd", "amount"),
        ("amount=12&currency=usd&bogus=1", "bogus"),
        ("amount=-3&currency=usd", "amount"),
        (
            "amount=12&currency=usd&confirm=true&payment_method=pm_card_unknown",
            "payment_method",
        ),
        ("amount=12&currency=usd&off_session=true", "off_session"),
    ];
    for (form, param) in cases {
        let a = s
            .post("/v1/payment_intents", Some("key-invalid"), form)
            .await;
        assert_eq!(a.status, 400, "{form}");
        assert_eq!(a.json()["error"]["type"], "invalid_request_error");
        assert_eq!(a.json()["error"]["param"], param, "{form}");
    }
    let long_key = "k".repeat(256);
    let a = s
        .post(
            "/v1/payment_intents",
            Some(&long_key),
            &create_form(1, "pm_card_visa", "op"),
        )
        .await;
    assert_eq!(a.status, 400);
    let unauth = s
        .http
        .post(format!("{}/v1/payment_intents", s.base))
        .bearer_auth("sk_test_wrong")
        .body(create_form(1, "pm_card_visa", "op"))
        .send()
        .await
        .unwrap();
    assert_eq!(unauth.status(), 401);
    let body: Value = unauth.json().await.unwrap();
    assert!(body["error"]["type"].is_string() && body["error"]["message"].is_string());
    assert!(s.payments().await.is_empty());
    // A refused request was never remembered: the key still works, with corrected parameters.
    let ok = s
        .post(
            "/v1/payment_intents",
            Some("key-invalid"),
            &create_form(12, "pm_card_visa", "op"),
        )
        .await;
    assert_eq!(ok.status, 200);
    assert_eq!(s.get("/v1/payment_intents/pi_missing").await.status, 404);
    assert_eq!(
        s.get("/v1/payment_intents/pi_missing").await.json()["error"]["code"],
        "resource_missing"
    );
    s.sim.shutdown().await;
}

#[tokio::test]
async fn drop_after_commit_leaves_exactly_one_payment_and_the_retry_replays_it() {
    let s = start_default().await;
    s.arm(json!([{ "match": "op_drop", "fault": "drop_after_commit", "times": 1 }]))
        .await;
    let form = create_form(2048, "pm_card_visa", "op_drop");
    let err = s
        .try_post("/v1/payment_intents", Some("payonce-op_drop"), &form)
        .await
        .err()
        .expect("connection dropped");
    assert!(!err.is_connect(), "the request was sent: {err:?}");
    let committed = s.payments_with_key("payonce-op_drop").await;
    assert_eq!(committed.len(), 1);
    assert_eq!(committed[0]["status"], "succeeded");
    let retry = s
        .post("/v1/payment_intents", Some("payonce-op_drop"), &form)
        .await;
    assert_eq!((retry.status, retry.replayed()), (200, true));
    assert_eq!(retry.json()["id"], committed[0]["id"]);
    assert_eq!(
        s.payments_with_key("payonce-op_drop").await.len(),
        1,
        "still exactly one payment"
    );
    s.sim.shutdown().await;
}

#[tokio::test]
async fn reset_and_rate_limit_happen_before_any_work() {
    let s = start_default().await;
    s.arm(json!([
        { "match": "key-reset", "fault": "reset", "times": 1 },
        { "match": "key-429", "fault": "rate_limit_429", "times": 1 }
    ]))
    .await;
    let form = create_form(100, "pm_card_visa", "op_r");
    let err = s
        .try_post("/v1/payment_intents", Some("key-reset"), &form)
        .await
        .err()
        .expect("connection reset");
    assert!(!err.is_connect(), "{err:?}");
    let limited = s.post("/v1/payment_intents", Some("key-429"), &form).await;
    assert_eq!(limited.status, 429);
    assert_eq!(limited.json()["error"]["code"], "rate_limit");
    assert!(s.payments().await.is_empty(), "neither did any work");
    s.arm(json!([{ "match": "*", "fault": "reset" }])).await;
    s.clear_faults().await;
    // And neither was remembered: the same keys now execute.
    assert!(
        !s.post("/v1/payment_intents", Some("key-reset"), &form)
            .await
            .replayed()
    );
    assert!(
        !s.post("/v1/payment_intents", Some("key-429"), &form)
            .await
            .replayed()
    );
    assert_eq!(s.payments().await.len(), 2);
    s.sim.shutdown().await;
}

#[tokio::test]
async fn error_500_before_commit_is_forgotten_and_after_commit_is_remembered() {
    let s = start_default().await;
    s.arm(json!([
        { "match": "key-500-before", "fault": "error_500_before_commit", "times": 1 },
        { "match": "key-500-after", "fault": "error_500_after_commit", "times": 1 }
    ]))
    .await;
    let form = create_form(100, "pm_card_visa", "op_5");
    let before = s
        .post("/v1/payment_intents", Some("key-500-before"), &form)
        .await;
    assert_eq!(before.status, 500);
    assert!(s.payments().await.is_empty());
    assert_eq!(
        s.post("/v1/payment_intents", Some("key-500-before"), &form)
            .await
            .status,
        200
    );
    let after = s
        .post("/v1/payment_intents", Some("key-500-after"), &form)
        .await;
    assert_eq!(after.status, 500);
    assert_eq!(after.json()["error"]["type"], "api_error");
    assert_eq!(
        s.payments_with_key("key-500-after").await.len(),
        1,
        "committed before the 500"
    );
    let replay = s
        .post("/v1/payment_intents", Some("key-500-after"), &form)
        .await;
    assert_eq!(
        (replay.status, replay.replayed()),
        (500, true),
        "Stripe replays a 500 from a request that ran"
    );
    s.sim.shutdown().await;
}

#[tokio::test]
async fn per_mille_faults_are_deterministic_for_a_seed() {
    async fn pattern(seed: u64) -> Vec<u16> {
        let s = start(SimulatorConfig {
            seed,
            ..SimulatorConfig::default()
        })
        .await;
        s.arm(json!([{ "match": "*", "fault": "rate_limit_429", "per_mille": 500 }]))
            .await;
        let mut out = Vec::new();
        for i in 0..24 {
            out.push(
                s.post(
                    "/v1/payment_intents",
                    Some(&format!("k{i}")),
                    &create_form(1, "pm_card_visa", "op"),
                )
                .await
                .status,
            );
        }
        s.sim.shutdown().await;
        out
    }
    let a = pattern(7).await;
    assert_eq!(a, pattern(7).await);
    assert!(a.contains(&429) && a.contains(&200), "{a:?}");
}

#[tokio::test]
async fn list_is_consistent_newest_first_and_paginated_while_search_lags() {
    let s = start(SimulatorConfig {
        search_lag: Duration::from_millis(800),
        ..SimulatorConfig::default()
    })
    .await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let pi = s
            .post(
                "/v1/payment_intents",
                None,
                &create_form(100 + i, "pm_card_visa", &format!("op_l{i}")),
            )
            .await
            .json();
        ids.push(pi["id"].as_str().unwrap().to_string());
    }
    s.post(
        "/v1/payment_intents",
        None,
        "amount=5&currency=usd&customer=cus_other",
    )
    .await;
    let page1 = s
        .get("/v1/payment_intents?customer=cus_sim&limit=3")
        .await
        .json();
    let got: Vec<&str> = page1["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert_eq!(got, [ids[4].as_str(), ids[3].as_str(), ids[2].as_str()]);
    assert_eq!(page1["has_more"], true);
    let page2 = s
        .get(&format!(
            "/v1/payment_intents?customer=cus_sim&limit=3&starting_after={}",
            ids[2]
        ))
        .await
        .json();
    let got: Vec<&str> = page2["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert_eq!(got, [ids[1].as_str(), ids[0].as_str()]);
    assert_eq!(page2["has_more"], false);
    let future = s
        .get("/v1/payment_intents?customer=cus_sim&created[gte]=99999999999")
        .await
        .json();
    assert!(future["data"].as_array().unwrap().is_empty());
    assert_eq!(s.get("/v1/payment_intents?limit=101").await.status, 400);
    // Search does not see what was just created; it does after the lag.
    let q =
        "/v1/payment_intents/search?query=metadata%5B%27payonce_operation_id%27%5D%3A%27op_l3%27";
    assert!(
        s.get(q).await.json()["data"].as_array().unwrap().is_empty(),
        "search lags"
    );
    let found = wait_for("search to catch up", DEADLINE, || async {
        let d = s.get(q).await.json()["data"].as_array().unwrap().clone();
        (!d.is_empty()).then_some(d)
    })
    .await;
    assert_eq!(found.len(), 1);
    assert_eq!(found[0]["id"], ids[3].as_str());
    s.sim.shutdown().await;
}

#[tokio::test]
async fn refunds_are_bounded_by_what_was_received() {
    let s = start_default().await;
    let pi = s
        .post(
            "/v1/payment_intents",
            None,
            &create_form(1000, "pm_card_visa", "op_ref"),
        )
        .await
        .json();
    let id = pi["id"].as_str().unwrap();
    let part = s
        .post(
            "/v1/refunds",
            Some("key-refund-1"),
            &format!("payment_intent={id}&amount=400"),
        )
        .await;
    assert_eq!(part.status, 200);
    assert_eq!(part.json()["amount"], 400);
    assert_eq!(part.json()["status"], "succeeded");
    let replay = s
        .post(
            "/v1/refunds",
            Some("key-refund-1"),
            &format!("payment_intent={id}&amount=400"),
        )
        .await;
    assert!(replay.replayed() && replay.body == part.body);
    let over = s
        .post(
            "/v1/refunds",
            None,
            &format!("payment_intent={id}&amount=601"),
        )
        .await;
    assert_eq!(over.status, 400);
    assert_eq!(over.json()["error"]["param"], "amount");
    let rest = s
        .post("/v1/refunds", None, &format!("payment_intent={id}"))
        .await;
    assert_eq!(rest.json()["amount"], 600);
    assert_eq!(
        s.post("/v1/refunds", None, &format!("payment_intent={id}"))
            .await
            .status,
        400,
        "nothing left"
    );
    let declined = s
        .post(
            "/v1/payment_intents",
            None,
            &create_form(1000, "pm_card_chargeDeclined", "op_x"),
        )
        .await
        .json();
    let did = declined["error"]["payment_intent"]["id"].as_str().unwrap();
    assert_eq!(
        s.post("/v1/refunds", None, &format!("payment_intent={did}"))
            .await
            .status,
        400
    );
    let kinds: Vec<String> = s.get("/v1/events?type=charge.refunded").await.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["data"]["object"]["amount_refunded"].to_string())
        .collect();
    assert_eq!(kinds, ["1000", "400"]);
    s.sim.shutdown().await;
}

#[tokio::test]
async fn events_list_newest_first_with_the_causing_request() {
    let s = start_default().await;
    s.post(
        "/v1/payment_intents",
        Some("key-ev-1"),
        &create_form(1, "pm_card_visa", "op_e1"),
    )
    .await;
    s.post(
        "/v1/payment_intents",
        Some("key-ev-2"),
        &create_form(1, "pm_card_chargeDeclined", "op_e2"),
    )
    .await;
    let all = s.get("/v1/events").await.json();
    let data = all["data"].as_array().unwrap();
    let kinds: Vec<&str> = data.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "payment_intent.payment_failed",
            "payment_intent.created",
            "payment_intent.succeeded",
            "payment_intent.created"
        ]
    );
    assert_eq!(data[0]["request"]["idempotency_key"], "key-ev-2");
    assert_eq!(data[3]["request"]["idempotency_key"], "key-ev-1");
    assert_eq!(data[0]["object"], "event");
    let page = s
        .get(&format!(
            "/v1/events?limit=1&starting_after={}",
            data[1]["id"].as_str().unwrap()
        ))
        .await
        .json();
    assert_eq!(page["data"][0]["id"], data[2]["id"]);
    assert_eq!(page["has_more"], true);
    s.sim.shutdown().await;
}

/// One webhook delivery as received.
#[derive(Debug, Clone)]
struct Delivery {
    signature: String,
    body: Vec<u8>,
}

/// A minimal HTTP receiver on loopback: answers 500 to the first `fail_first` requests, then 200.
async fn webhook_receiver(
    fail_first: usize,
) -> (String, tokio::sync::mpsc::UnboundedReceiver<Delivery>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hooks", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut seen = 0_usize;
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let mut buf = Vec::new();
            let mut chunk = [0_u8; 4096];
            let (head_end, length) = loop {
                let Ok(n) = stream.read(&mut chunk).await else {
                    break (0, 0);
                };
                if n == 0 {
                    break (0, 0);
                }
                buf.extend_from_slice(&chunk[..n]);
                if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&buf[..pos]).to_ascii_lowercase();
                    let len = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    break (pos + 4, len);
                }
            };
            if head_end == 0 {
                continue;
            }
            while buf.len() < head_end + length {
                let Ok(n) = stream.read(&mut chunk).await else {
                    break;
                };
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
            let signature = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .starts_with("stripe-signature:")
                        .then(|| l[17..].trim().to_string())
                })
                .unwrap_or_default();
            let body = buf[head_end..head_end + length.min(buf.len() - head_end)].to_vec();
            seen += 1;
            let status = if seen <= fail_first {
                "500 Internal Server Error"
            } else {
                "200 OK"
            };
            let _ = stream
                .write_all(
                    format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                        .as_bytes(),
                )
                .await;
            let _ = tx.send(Delivery { signature, body });
        }
    });
    (url, rx)
}

/// Verifies a `Stripe-Signature` header the way Stripe's libraries do (any exact `v1` matches).
fn verify(secret: &str, header: &str, body: &[u8]) -> bool {
    let mut t = None;
    let mut v1 = Vec::new();
    for part in header.split(',') {
        match part.split_once('=') {
            Some(("t", v)) => t = v.parse::<i64>().ok(),
            Some(("v1", v)) => v1.push(v.to_string()),
            _ => {}
        }
    }
    let Some(t) = t else { return false };
    let expected = sign_payload(secret, t, body);
    v1.contains(&expected)
}

#[tokio::test]
async fn the_signer_reproduces_stripes_own_vectors() {
    let vectors: Vec<Value> =
        serde_json::from_str(include_str!("../fixtures/stripe/webhook_vectors.json")).unwrap();
    for v in &vectors {
        let header = v["header"].as_str().unwrap();
        let payload = v["payload"].as_str().unwrap().as_bytes();
        assert!(
            verify(v["secret"].as_str().unwrap(), header, payload),
            "{}",
            v["name"]
        );
        assert!(!verify("whsec_wrong", header, payload));
    }
}

#[tokio::test]
async fn webhooks_are_signed_retried_on_failure_and_duplicated_on_request() {
    let secret = "whsec_test_integration";
    let (url, mut rx) = webhook_receiver(1).await;
    let s = start(SimulatorConfig {
        webhook_url: Some(url),
        webhook_secret: secret.into(),
        webhook_duplicates_per_mille: 1000,
        ..SimulatorConfig::default()
    })
    .await;
    s.post(
        "/v1/payment_intents",
        Some("key-hook"),
        &create_form(1, "pm_card_visa", "op_hook"),
    )
    .await;
    let mut deliveries: Vec<Delivery> = Vec::new();
    // created + succeeded; the first attempt fails and is retried; every success is sent twice.
    while deliveries.len() < 5 {
        let d = tokio::time::timeout(DEADLINE, rx.recv())
            .await
            .expect("webhook in time")
            .expect("receiver alive");
        deliveries.push(d);
    }
    for d in &deliveries {
        assert!(
            verify(secret, &d.signature, &d.body),
            "signature verifies: {}",
            d.signature
        );
        assert!(!verify("whsec_other", &d.signature, &d.body));
        let event: Value = serde_json::from_slice(&d.body).unwrap();
        assert_eq!(event["object"], "event");
        assert_eq!(event["request"]["idempotency_key"], "key-hook");
    }
    // Two events; the first attempt of one failed and was retried (same event id), and every successful
    // delivery was sent twice: one event arrives 3 times, the other twice. Order is not promised (nor by Stripe).
    let mut per_event: std::collections::BTreeMap<String, (String, usize)> = Default::default();
    for d in &deliveries {
        let event: Value = serde_json::from_slice(&d.body).unwrap();
        let entry = per_event
            .entry(event["id"].as_str().unwrap().to_string())
            .or_default();
        entry.0 = event["type"].as_str().unwrap().to_string();
        entry.1 += 1;
    }
    let mut counts: Vec<usize> = per_event.values().map(|(_, n)| *n).collect();
    counts.sort();
    assert_eq!(counts, [2, 3], "{per_event:?}");
    let mut kinds: Vec<&str> = per_event.values().map(|(k, _)| k.as_str()).collect();
    kinds.sort();
    assert_eq!(
        kinds,
        ["payment_intent.created", "payment_intent.succeeded"]
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(300), rx.recv())
            .await
            .is_err(),
        "nothing beyond the retry and the duplicates"
    );
    s.sim.shutdown().await;
}

#[tokio::test]
async fn reordered_webhooks_arrive_newest_first() {
    let (url, mut rx) = webhook_receiver(0).await;
    let s = start(SimulatorConfig {
        webhook_url: Some(url),
        webhook_reorder: true,
        ..SimulatorConfig::default()
    })
    .await;
    s.post(
        "/v1/payment_intents",
        None,
        &create_form(1, "pm_card_visa", "op_order"),
    )
    .await;
    let mut kinds = Vec::new();
    while kinds.len() < 2 {
        let d = tokio::time::timeout(DEADLINE, rx.recv())
            .await
            .unwrap()
            .unwrap();
        kinds.push(
            serde_json::from_slice::<Value>(&d.body).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    assert_eq!(
        kinds,
        ["payment_intent.succeeded", "payment_intent.created"]
    );
    s.sim.shutdown().await;
}

#[tokio::test]
async fn state_survives_a_restart_on_a_file_database() {
    let dir = std::env::temp_dir().join(format!("payonce-sim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("restart.sqlite");
    let _ = std::fs::remove_file(&path);
    let config = SimulatorConfig {
        database: path.to_string_lossy().into_owned(),
        ..SimulatorConfig::default()
    };
    let form = create_form(300, "pm_card_visa", "op_file");
    let s = start(config.clone()).await;
    let first = s.post("/v1/payment_intents", Some("key-file"), &form).await;
    s.sim.shutdown().await;
    let s = start(config).await;
    let again = s.post("/v1/payment_intents", Some("key-file"), &form).await;
    assert!(again.replayed(), "the key outlives the process");
    assert_eq!(again.body, first.body);
    assert_eq!(s.payments().await.len(), 1);
    s.sim.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn binary_mode_serves_until_shutdown() {
    let port = crate::serve::free_port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let config = SimulatorConfig {
        listen: format!("127.0.0.1:{port}").parse().unwrap(),
        ..SimulatorConfig::default()
    };
    payonce_simulator::install_crypto_provider();
    let running = tokio::spawn(payonce_simulator::run(config, async move {
        let _ = stopped.await;
    }));
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}/_sim/health");
    wait_for("the simulator to serve", DEADLINE, || async {
        http.get(&url)
            .send()
            .await
            .ok()
            .filter(|r| r.status() == 200)
            .map(|_| ())
    })
    .await;
    stop.send(()).unwrap();
    tokio::time::timeout(DEADLINE, running)
        .await
        .expect("run returns after shutdown")
        .unwrap()
        .unwrap();
    assert!(
        http.get(&url).send().await.is_err(),
        "nothing listens any more"
    );
}

/// The configured latency is the time from a request's arrival to its answer: the request is
/// handled on arrival (its payment exists at once) and its answer held; the admin API is never
/// held, and shutdown releases a held answer instead of waiting it out.
#[tokio::test]
async fn configured_latency_holds_the_answer_not_the_handling_nor_the_admin_api() {
    // An hour of latency: the answer cannot arrive during the checks below whatever the machine's
    // load, so they carry no timing assumption that could flake.
    let s = start(SimulatorConfig {
        latency: Duration::from_secs(3_600),
        ..SimulatorConfig::default()
    })
    .await;
    let held = {
        let request = s
            .http
            .post(format!("{}/v1/payment_intents", s.base))
            .bearer_auth(API_KEY)
            .header("Idempotency-Key", "key-latency")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(create_form(300, "pm_card_visa", "op_latency"));
        tokio::spawn(async move { request.send().await.map(|r| r.status().as_u16()) })
    };
    let paid = wait_for(
        "the held request to be handled on arrival",
        DEADLINE,
        || async {
            let payments = s.payments().await;
            (!payments.is_empty()).then_some(payments)
        },
    )
    .await;
    assert_eq!(paid.len(), 1);
    assert_eq!(paid[0]["idempotency_key"], "key-latency");
    assert!(!held.is_finished(), "its answer waits for the latency");
    let health = s
        .http
        .get(format!("{}/_sim/health", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200, "the admin API is not delayed");
    assert!(!held.is_finished(), "its answer still waits");
    tokio::time::timeout(DEADLINE, s.sim.shutdown())
        .await
        .expect("shutdown does not wait out the latency");
    let answered = tokio::time::timeout(DEADLINE, held)
        .await
        .expect("shutdown releases the held answer")
        .unwrap();
    assert_eq!(
        answered.unwrap(),
        200,
        "the held answer is the request's own"
    );
}

/// Most requests a rate-limit test sends before the limiter must have refused one.
const FLOOD_MAX: usize = 200;

impl Sim {
    /// Replaces the simulator's rate limits; panics unless accepted.
    pub async fn set_rate_limits(&self, limits: &Value) -> reqwest::StatusCode {
        self.http
            .put(format!("{}/_sim/rate_limits", self.base))
            .json(limits)
            .send()
            .await
            .unwrap()
            .status()
    }

    /// `GET /_sim/audit/rate_limits`.
    pub async fn refused_429(&self) -> Value {
        self.admin("/_sim/audit/rate_limits").await
    }
}

#[tokio::test]
async fn a_rate_limited_post_gets_stripes_429_and_nothing_is_stored_under_its_key() {
    let s = start(SimulatorConfig {
        rate_limits: RateLimits {
            write_per_second: Some(1),
            ..RateLimits::default()
        },
        ..SimulatorConfig::default()
    })
    .await;
    // Send distinct keys until the limiter refuses one: that key is K.
    let mut refused = None;
    for i in 0..FLOOD_MAX {
        let key = format!("key-rl-{i}");
        let a = s
            .post(
                "/v1/payment_intents",
                Some(&key),
                &create_form(100, "pm_card_visa", &format!("op_rl{i}")),
            )
            .await;
        if a.status == 429 {
            refused = Some((key, i, a));
            break;
        }
        assert_eq!(a.status, 200);
    }
    let (key, i, limited) = refused.expect("a 1/s write limit refuses a burst");
    let body = limited.json();
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(body["error"]["code"], "rate_limit");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Too many requests")
    );
    assert!(!limited.replayed());
    assert!(
        limited.headers.get("stripe-should-retry").is_none(),
        "Stripe's libraries do not retry rate limits; the simulator sends no advice either"
    );
    assert!(
        s.payments_with_key(&key).await.is_empty(),
        "the 429 did nothing"
    );
    // After the window the same POST with K executes once (not a replay of the 429) ...
    let form = create_form(100, "pm_card_visa", &format!("op_rl{i}"));
    let limited_again = std::sync::atomic::AtomicU64::new(0);
    let first = wait_for("the write window to refill", DEADLINE, || async {
        let a = s.post("/v1/payment_intents", Some(&key), &form).await;
        if a.status == 429 {
            limited_again.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return None;
        }
        Some(a)
    })
    .await;
    let limited_again = limited_again.into_inner();
    assert_eq!(first.status, 200);
    assert!(!first.replayed(), "a 429 is never stored under the key");
    assert_eq!(first.json()["status"], "succeeded");
    // ... and K now replays that payment: it exists once.
    let again = wait_for("the next token", DEADLINE, || async {
        let a = s.post("/v1/payment_intents", Some(&key), &form).await;
        (a.status != 429).then_some(a)
    })
    .await;
    assert!(again.replayed());
    assert_eq!(s.payments_with_key(&key).await.len(), 1);
    // The audit counts the refusals per endpoint.
    let audit = s.refused_429().await;
    let counted = audit["refused_429"]["POST /v1/payment_intents"]
        .as_u64()
        .unwrap();
    assert!(counted > limited_again, "{audit}");
    assert_eq!(audit["total_429"].as_u64().unwrap(), counted);
    let requests = audit["requests"]["POST /v1/payment_intents"]
        .as_u64()
        .unwrap();
    assert!(requests > counted, "{audit}");
    assert_eq!(audit["requests_total"].as_u64().unwrap(), requests);
    s.sim.shutdown().await;
}

#[tokio::test]
async fn search_endpoint_and_global_limits_apply_separately_and_are_set_at_run_time() {
    let s = start_default().await;
    // Bad limits are refused and change nothing.
    assert_eq!(
        s.set_rate_limits(&json!({ "search_per_second": 0 })).await,
        400
    );
    assert_eq!(s.set_rate_limits(&json!({ "nonsense": 1 })).await, 400);
    assert_eq!(
        s.admin("/_sim/rate_limits").await["rate_limits"]["search_per_second"],
        Value::Null
    );
    assert_eq!(
        s.set_rate_limits(&json!({ "search_per_second": 1, "endpoints": { "GET /v1/events": 1 } }))
            .await,
        200
    );
    let created = s
        .post(
            "/v1/payment_intents",
            Some("key-s"),
            &create_form(100, "pm_card_visa", "op_s"),
        )
        .await;
    let id = created.json()["id"].as_str().unwrap().to_string();
    let search =
        "/v1/payment_intents/search?query=metadata%5B%27payonce_operation_id%27%5D%3A%27op_s%27";
    // Search is limited on its own: a burst of searches is refused while retrieves of any id pass.
    let mut search_refused = false;
    for _ in 0..FLOOD_MAX {
        if s.get(search).await.status == 429 {
            search_refused = true;
            break;
        }
    }
    assert!(search_refused);
    for _ in 0..5 {
        assert_eq!(
            s.get(&format!("/v1/payment_intents/{id}")).await.status,
            200
        );
    }
    // An endpoint override.
    let mut events_refused = false;
    for _ in 0..FLOOD_MAX {
        if s.get("/v1/events").await.status == 429 {
            events_refused = true;
            break;
        }
    }
    assert!(events_refused);
    // The account's global limit covers every endpoint: retrieves are refused once it is spent.
    assert_eq!(
        s.set_rate_limits(&json!({ "global_per_second": 2 })).await,
        200
    );
    let mut retrieve_refused = false;
    for _ in 0..FLOOD_MAX {
        if s.get(&format!("/v1/payment_intents/{id}")).await.status == 429 {
            retrieve_refused = true;
            break;
        }
    }
    assert!(retrieve_refused);
    let audit = s.refused_429().await;
    for endpoint in [
        "GET /v1/payment_intents/search",
        "GET /v1/events",
        "GET /v1/payment_intents/:id",
    ] {
        assert!(
            audit["refused_429"][endpoint].as_u64().unwrap() >= 1,
            "{endpoint}: {audit}"
        );
    }
    assert!(
        audit["refused_429"]
            .get("POST /v1/payment_intents")
            .is_none()
    );
    s.sim.shutdown().await;
}

/// The simulator serves cleartext HTTP/2 beside HTTP/1.1 on the same port and lets one connection
/// carry `HTTP2_MAX_STREAMS` requests at once (hyper's own default is 200, below a worker's 512 in
/// flight): read from the `SETTINGS` it sends, after one request over a raw HTTP/2 connection.
#[tokio::test]
async fn http2_connections_may_carry_the_named_number_of_streams() {
    let s = start_default().await;
    let tcp = tokio::net::TcpStream::connect(s.sim.local_addr())
        .await
        .unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    let driver = tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    let request = http::Request::get(format!("{}/_sim/health", s.base))
        .body(())
        .unwrap();
    let (response, _) = client.send_request(request, true).unwrap();
    let response = response.await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        client.current_max_send_streams(),
        payonce_simulator::HTTP2_MAX_STREAMS as usize
    );
    drop(client);
    driver.abort();
    s.sim.shutdown().await;
}

/// The payment audit is paged like a Stripe list (`limit`, `starting_after`, `has_more`), oldest
/// first, so it never stops silently at a page's worth of payments; a small `limit` stands in for
/// 10,000 real payments.
#[tokio::test]
async fn the_payment_audit_is_paged_and_every_page_is_read() {
    const PAYMENTS: usize = 5;
    let s = start_default().await;
    let mut made = Vec::new();
    for i in 0..PAYMENTS {
        let answer = s
            .post(
                "/v1/payment_intents",
                None,
                &create_form(2048, "pm_card_visa", &format!("op_audit{i}")),
            )
            .await;
        made.push(answer.json()["id"].as_str().unwrap().to_string());
    }
    let mut pages = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let query = match &after {
            None => "limit=2".to_string(),
            Some(id) => format!("limit=2&starting_after={id}"),
        };
        let page = s.admin(&format!("/_sim/audit/payments?{query}")).await;
        let ids: Vec<String> = page["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["id"].as_str().unwrap().to_string())
            .collect();
        assert!(ids.len() <= 2, "{page}");
        let has_more = page["has_more"].as_bool().unwrap();
        after = ids.last().cloned();
        pages.push(ids);
        if !has_more {
            break;
        }
    }
    assert_eq!(pages.len(), 3, "{pages:?}");
    assert_eq!(pages.concat(), made, "every payment once, oldest first");
    // The reader every caller uses follows the pages the same way.
    let read = payment_audit::read_all(&s.http, &s.base, 2).await.unwrap();
    let read: Vec<&str> = read.iter().map(|p| p["id"].as_str().unwrap()).collect();
    assert_eq!(read, made);
    assert_eq!(s.payments().await.len(), PAYMENTS, "one default page");
    for bad in [
        "limit=0",
        "limit=10001",
        "starting_after=pi_unknown",
        "page=2",
    ] {
        let answer = s.get(&format!("/_sim/audit/payments?{bad}")).await;
        assert_eq!(answer.status, 400, "{bad}");
    }
    s.sim.shutdown().await;
}

/// The simulator's contracts on the wire: each differs from Stripe's in its one behaviour, and the
/// fault injection works the same under each.
mod contracts {
    use super::*;
    use payonce_simulator::Contract;

    #[tokio::test]
    async fn only_2xx_saved_executes_a_retried_500_or_402_again_and_replays_a_200() {
        let s = start(SimulatorConfig::for_contract(Contract::Only2xxSaved)).await;
        s.arm(json!([{ "match": "k-500", "fault": "error_500_after_commit", "times": 1 }]))
            .await;
        let form = create_form(2048, "pm_card_visa", "op_500");
        assert_eq!(
            s.post("/v1/payment_intents", Some("k-500"), &form)
                .await
                .status,
            500
        );
        let retry = s.post("/v1/payment_intents", Some("k-500"), &form).await;
        assert_eq!((retry.status, retry.replayed()), (200, false));
        assert_eq!(
            s.payments_with_key("k-500").await.len(),
            2,
            "executed again"
        );
        let again = s.post("/v1/payment_intents", Some("k-500"), &form).await;
        assert_eq!(
            (again.status, again.replayed()),
            (200, true),
            "a 200 is saved"
        );
        let declined = create_form(2048, "pm_card_chargeDeclined", "op_402");
        for _ in 0..2 {
            let d = s
                .post("/v1/payment_intents", Some("k-402"), &declined)
                .await;
            assert_eq!((d.status, d.replayed()), (402, false));
        }
        assert_eq!(s.payments_with_key("k-402").await.len(), 2);
        s.sim.shutdown().await;
    }

    #[tokio::test]
    async fn replay_any_payload_answers_another_amount_with_the_first_payment() {
        let s = start(SimulatorConfig::for_contract(Contract::ReplayAnyPayload)).await;
        let first = s
            .post(
                "/v1/payment_intents",
                Some("k-w"),
                &create_form(2048, "pm_card_visa", "op_w"),
            )
            .await;
        assert_eq!(first.status, 200);
        let other = s
            .post(
                "/v1/payment_intents",
                Some("k-w"),
                &create_form(3000, "pm_card_visa", "op_w"),
            )
            .await;
        assert_eq!((other.status, other.replayed()), (200, true));
        assert_eq!(other.body, first.body, "the first payment, byte for byte");
        assert_eq!(other.json()["amount"], 2048);
        assert_eq!(s.payments_with_key("k-w").await.len(), 1);
        s.sim.shutdown().await;
    }

    #[tokio::test]
    async fn no_lookup_refuses_every_read_of_payments_refunds_and_events_but_not_cards() {
        let s = start(SimulatorConfig::for_contract(Contract::NoLookup)).await;
        let paid = s
            .post(
                "/v1/payment_intents",
                Some("k-n"),
                &create_form(2048, "pm_card_visa", "op_n"),
            )
            .await;
        assert_eq!(paid.status, 200);
        let id = paid.json()["id"].as_str().unwrap().to_string();
        for path in [
            format!("/v1/payment_intents/{id}"),
            "/v1/payment_intents?customer=cus_sim".to_string(),
            "/v1/payment_intents/search?query=metadata['payonce_operation_id']:'op_n'".to_string(),
            format!("/v1/refunds?payment_intent={id}"),
            "/v1/refunds/re_1".to_string(),
            "/v1/events".to_string(),
        ] {
            let r = s.get(&path).await;
            assert_eq!(r.status, 404, "{path}");
            let error = &r.json()["error"];
            assert_eq!(error["type"], "invalid_request_error", "{path}");
            assert!(
                error.get("code").is_none(),
                "never resource_missing: {path}"
            );
            assert_eq!(r.headers["payonce-simulator-contract"], "no-lookup");
        }
        assert_eq!(s.get("/v1/payment_methods/pm_card_visa").await.status, 200);
        // Writes, replays and faults are Stripe's.
        let replay = s
            .post(
                "/v1/payment_intents",
                Some("k-n"),
                &create_form(2048, "pm_card_visa", "op_n"),
            )
            .await;
        assert!(replay.replayed());
        s.arm(json!([{ "match": "k-429", "fault": "rate_limit_429", "times": 1 }]))
            .await;
        let limited = s
            .post(
                "/v1/payment_intents",
                Some("k-429"),
                &create_form(10, "pm_card_visa", "op_l"),
            )
            .await;
        assert_eq!(limited.status, 429);
        assert_eq!(s.admin("/_sim/health").await["contract"], "no-lookup");
        s.sim.shutdown().await;
    }

    #[tokio::test]
    async fn short_retention_keeps_keys_thirty_minutes_and_refuses_to_keep_them_longer() {
        let config = SimulatorConfig::for_contract(Contract::ShortRetention);
        assert_eq!(config.key_retention, Duration::from_secs(30 * 60));
        let s = start(config).await;
        let form = create_form(2048, "pm_card_visa", "op_q");
        assert_eq!(
            s.post("/v1/payment_intents", Some("k-q"), &form)
                .await
                .status,
            200
        );
        s.advance_clock(Duration::from_secs(29 * 60)).await;
        assert!(
            s.post("/v1/payment_intents", Some("k-q"), &form)
                .await
                .replayed()
        );
        s.advance_clock(Duration::from_secs(2 * 60)).await;
        let after = s.post("/v1/payment_intents", Some("k-q"), &form).await;
        assert_eq!((after.status, after.replayed()), (200, false));
        assert_eq!(s.payments_with_key("k-q").await.len(), 2);
        s.sim.shutdown().await;
        let longer = SimulatorConfig {
            key_retention: Duration::from_secs(31 * 60),
            ..SimulatorConfig::for_contract(Contract::ShortRetention)
        };
        let refused = Simulator::start(longer).await.unwrap_err();
        assert!(refused.to_string().contains("short-retention"), "{refused}");
    }
}

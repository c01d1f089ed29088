//! Customer verification (issue 13): an assistant holding an API key cannot approve its own payment
//! with anything it can obtain; a real customer approves with a signed assertion or a one-time code;
//! every bad proof is a clear 4xx with a stable code that changes nothing; payonce's notifications are
//! signed and retried; an assistant cannot starve the service's link budget.

use super::confirm::{hidden_hash, page, status_of, submit};
use super::tools::call_tool;
use super::{TestApi, spawn, spawn_on_postgres, tenant};
use crate::support::processes::{self, payments_for};
use crate::support::{postgres_ledger, sqlite_ledger};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use payonce_api::assertion::ASSERTION_LIFETIME_MAX_MS;
use payonce_api::verify::{
    ASSISTANT_REQUEST_INTERVAL, ASSISTANT_REQUESTS_MAX, CODE_ATTEMPTS_MAX, CODE_TTL,
    OPEN_LINKS_MAX, VerificationRequest, set_tenant_verification,
};
use payonce_core::clock::Clock;
use payonce_core::id::{OperationId, TenantId};
use payonce_core::signing::{SIGNATURE_HEADER, TIMESTAMP_TOLERANCE_S};
use payonce_ledger::ApprovalLink;
use payonce_ledger::verification::{UsedNonce, VerificationMethod};
use payonce_simulator::SimulatorConfig;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Longest a test waits for a background notification to arrive (retries with backoff included).
const DELIVERY_DEADLINE: Duration = Duration::from_secs(20);

/// One POST the tenant's endpoint received.
#[derive(Debug, Clone)]
pub(super) struct Received {
    pub(super) signature: String,
    pub(super) delivery_id: String,
    pub(super) body: Vec<u8>,
}

impl Received {
    pub(super) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

#[derive(Clone, Default)]
struct InboxState {
    received: Arc<Mutex<Vec<Received>>>,
    arrived: Arc<tokio::sync::Notify>,
    fail_first: Arc<AtomicUsize>,
}

/// A tenant's notification endpoint, played by the test: records every POST; the first
/// `fail_first` get a 500.
pub(super) struct Inbox {
    pub(super) url: String,
    state: InboxState,
}

async fn receive(State(state): State<InboxState>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    state.received.lock().unwrap().push(Received {
        signature: header(SIGNATURE_HEADER),
        delivery_id: header(payonce_api::notify::DELIVERY_HEADER),
        body: body.to_vec(),
    });
    state.arrived.notify_waiters();
    let failing = state
        .fail_first
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    if failing {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::NO_CONTENT
    }
}

impl Inbox {
    pub(super) async fn start(fail_first: usize) -> Inbox {
        let state = InboxState::default();
        state.fail_first.store(fail_first, Ordering::SeqCst);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new()
            .route("/notify", axum::routing::post(receive))
            .with_state(state.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Inbox {
            url: format!("http://{addr}/notify"),
            state,
        }
    }

    fn received(&self) -> Vec<Received> {
        self.state.received.lock().unwrap().clone()
    }

    /// Waits until at least `n` POSTs arrived.
    pub(super) async fn wait_for(&self, n: usize) -> Vec<Received> {
        tokio::time::timeout(DELIVERY_DEADLINE, async {
            loop {
                let arrived = self.state.arrived.notified();
                let got = self.received();
                if got.len() >= n {
                    return got;
                }
                arrived.await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{n} notification(s) within {DELIVERY_DEADLINE:?}"))
    }
}

/// Switches the test tenant to one-time codes sent to `inbox`; returns the signing secret.
async fn use_codes(api: &TestApi, inbox: &Inbox) -> String {
    use_codes_for(api, &tenant(), inbox).await
}

/// Switches `tenant` to one-time codes sent to `inbox`; returns the signing secret.
pub(super) async fn use_codes_for(api: &TestApi, tenant: &TenantId, inbox: &Inbox) -> String {
    set_tenant_verification(
        &api.ledger,
        tenant,
        &VerificationRequest {
            method: VerificationMethod::OneTimeCode,
            assertion_key_id: None,
            notify_url: Some(inbox.url.clone()),
        },
        api.clock.now(),
    )
    .await
    .unwrap()
    .notify_secret
    .unwrap()
}

fn id_of(op: &Value) -> String {
    op["id"].as_str().unwrap().to_string()
}

fn assert_refused(r: &super::Reply, status: u16, code: &str) {
    assert_eq!(r.status, status, "{code}: {}", r.text);
    assert_eq!(r.header("payonce-error-code"), code, "{}", r.text);
    assert!(
        r.text
            .contains(&format!("<code id=\"error-code\">{code}</code>")),
        "{}",
        r.text
    );
    assert!(
        !r.text.contains("<form"),
        "a refusal offers no approval form"
    );
}

/// A wrong or missing code keeps the customer on the form: the error (its code and text) above
/// the same form, its code field marked invalid, and the page's status the refusal's.
fn assert_kept_on_form(r: &super::Reply, status: u16, code: &str) {
    assert_eq!(r.status, status, "{code}: {}", r.text);
    assert_eq!(r.header("payonce-error-code"), code, "{}", r.text);
    assert!(
        r.text
            .contains(&format!("<code id=\"error-code\">{code}</code>")),
        "{}",
        r.text
    );
    assert!(r.text.contains("id=\"error\" role=\"alert\""), "{}", r.text);
    assert!(r.text.contains("<form method=\"post\">"), "the form stays");
    assert!(r.text.contains("aria-invalid=\"true\""), "{}", r.text);
    assert!(r.text.contains("id=\"decline\""), "{}", r.text);
}

/// Nothing was approved: still awaiting approval, no approval row, no approve event.
async fn assert_unapproved(api: &TestApi, op: &Value) {
    assert_eq!(status_of(api, op).await, "awaiting_approval");
    let id = OperationId::parse(&id_of(op)).unwrap();
    assert!(
        api.ledger
            .latest_approval(&tenant(), &id)
            .await
            .unwrap()
            .is_none()
    );
    let events = api.ledger.events_unscoped(&id).await.unwrap();
    assert!(events.iter().all(|e| e.event != "approve"), "{events:?}");
}

/// Everything an assistant key can get about `op`: execute and pay_invoice in every format.
async fn everything_an_assistant_sees(api: &TestApi, op: &Value) -> Vec<String> {
    let mut seen = Vec::new();
    let r = api
        .post(
            &format!("/v1/operations/{}/execute", id_of(op)),
            &api.assistant,
            json!({}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    seen.push(r.text.clone());
    for format in ["openai_chat", "openai_responses", "anthropic", "mcp"] {
        let (answer, is_error) = call_tool(
            api,
            &api.assistant,
            format,
            "call_self_approve",
            "pay_invoice",
            json!({"operation_id": id_of(op)}),
        )
        .await;
        assert!(!is_error, "{answer}");
        assert_eq!(answer["outcome"], "approval_required");
        seen.push(answer.to_string());
    }
    let read = api
        .get(&format!("/v1/operations/{}", id_of(op)), &api.assistant)
        .await;
    seen.push(read.text);
    seen
}

/// No capability in what an assistant saw: no confirmation path, no 64-hex token (other than the
/// public details hash), no code.
fn assert_no_capability(seen: &[String], details_hash: &str, code: Option<&str>) {
    for text in seen {
        assert!(!text.contains("/confirm/"), "a link leaked: {text}");
        let hex_run = text
            .split(|c: char| !c.is_ascii_hexdigit())
            .any(|w| w.len() >= 64 && w != details_hash);
        assert!(!hex_run, "a token-like value leaked: {text}");
        if let Some(code) = code {
            let leaked = text.split(|c: char| !c.is_ascii_digit()).any(|w| w == code);
            assert!(!leaked, "the code leaked: {text}");
        }
    }
}

#[tokio::test]
async fn an_assistant_cannot_approve_its_own_payment() {
    let api = spawn(sqlite_ledger().await).await;
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let worker = api.worker(&sim, "self-approval-worker");
    let op = api.create("INV-130", 2048).await;

    // 1. Assertion tenant (the default): the assistant's answers say the customer must confirm and
    // carry nothing that approves.
    let seen = everything_an_assistant_sees(&api, &op).await;
    assert_no_capability(&seen, op["details_hash"].as_str().unwrap(), None);
    assert!(
        seen[0].contains("needs the customer's approval"),
        "{}",
        seen[0]
    );

    // Even a link the assistant got hold of (leaked from the tenant's email, say) approves nothing:
    // the old two-request attack (GET the page, POST its hash back) is refused.
    let leaked = api.link(&id_of(&op)).await;
    let shown = page(&api, &leaked).await;
    assert_refused(&shown, 401, "assertion_required");
    let hash = op["details_hash"].as_str().unwrap();
    let posted = submit(&api, &leaked, &[("details_hash", hash)]).await;
    assert_refused(&posted, 401, "assertion_required");
    // Nor does an assertion the assistant signs itself (it has no tenant key).
    let forged = payonce_api::assertion::sign(
        "a key the assistant guessed",
        &payonce_api::assertion::Claims {
            kid: super::ASSERTION_KEY_ID.into(),
            sub: "cus_test".into(),
            op: id_of(&op),
            exp: api.clock.now().as_millis() + 60_000,
            nonce: "n".repeat(32),
        },
    );
    let posted = submit(
        &api,
        &leaked,
        &[("details_hash", hash), ("assertion", &forged)],
    )
    .await;
    assert_refused(&posted, 401, "assertion_bad_signature");
    assert_unapproved(&api, &op).await;

    // 2. Code tenant: the assistant's ask sends the code to the tenant's endpoint, never to it.
    let inbox = Inbox::start(0).await;
    use_codes(&api, &inbox).await;
    let seen = everything_an_assistant_sees(&api, &op).await;
    let delivered = inbox.wait_for(1).await;
    let code = delivered[0].json()["code"].as_str().unwrap().to_string();
    assert_no_capability(&seen, op["details_hash"].as_str().unwrap(), Some(&code));
    assert!(seen[0].contains("one-time code"), "{}", seen[0]);
    // With the delivered link but without the code: refused, and guessing is bounded.
    let link = delivered[0].json()["confirmation_url"]
        .as_str()
        .unwrap()
        .to_string();
    let posted = submit(&api, &link, &[("details_hash", hash)]).await;
    assert_kept_on_form(&posted, 400, "code_required");
    let wrong = if code == "000000" { "000001" } else { "000000" };
    for _ in 0..CODE_ATTEMPTS_MAX {
        let r = submit(&api, &link, &[("details_hash", hash), ("code", wrong)]).await;
        assert!(r.status == 401 || r.status == 403, "{}", r.text);
    }
    let exhausted = submit(&api, &link, &[("details_hash", hash), ("code", &code)]).await;
    assert_refused(&exhausted, 403, "code_exhausted");
    assert_unapproved(&api, &op).await;

    // The processor got nothing: a worker finds nothing to pay.
    assert_eq!(worker.run_once().await.unwrap(), 0);
    assert_eq!(payments_for(&sim, &id_of(&op)).await, 0);

    // Control: the real customer (who receives the code) approves, and then the worker pays once,
    // so the checks above could see a payment had there been one.
    let real = api.link(&id_of(&op)).await;
    let delivered = inbox.wait_for(2).await;
    let sent = delivered
        .iter()
        .map(Received::json)
        .find(|b| b["confirmation_url"] == real.as_str())
        .expect("the service's link came with its code");
    let approved = submit(
        &api,
        &real,
        &[
            ("details_hash", hash),
            ("code", sent["code"].as_str().unwrap()),
        ],
    )
    .await;
    assert_eq!(approved.status, 200, "{}", approved.text);
    assert_eq!(worker.run_once().await.unwrap(), 1);
    assert_eq!(payments_for(&sim, &id_of(&op)).await, 1);
    sim.shutdown().await;
    api.stop().await;
}

#[tokio::test]
async fn bad_assertions_are_refused_with_stable_codes_and_change_nothing() {
    let api = spawn_on_postgres().await;
    let op = api.create("INV-131", 2048).await;
    let other = api.create("INV-132", 2048).await;
    let url = api.link(&id_of(&op)).await;
    let hash = op["details_hash"].as_str().unwrap();
    let claims = |sub: &str, op: &str, ttl: i64, nonce: &str| payonce_api::assertion::Claims {
        kid: super::ASSERTION_KEY_ID.into(),
        sub: sub.into(),
        op: op.into(),
        exp: api.clock.now().as_millis() + ttl,
        nonce: nonce.into(),
    };
    let signed = |c| payonce_api::assertion::sign(&api.assertion_key, &c);
    let cases = [
        (
            signed(claims("cus_test", &id_of(&op), -1, &"a".repeat(32))),
            401,
            "assertion_expired",
        ),
        (
            signed(claims(
                "cus_test",
                &id_of(&op),
                ASSERTION_LIFETIME_MAX_MS + 1_000,
                &"b".repeat(32),
            )),
            400,
            "assertion_lifetime_too_long",
        ),
        (
            signed(claims(
                "cus_someone_else",
                &id_of(&op),
                60_000,
                &"c".repeat(32),
            )),
            403,
            "assertion_wrong_customer",
        ),
        (
            signed(claims("cus_test", &id_of(&other), 60_000, &"d".repeat(32))),
            403,
            "assertion_wrong_operation",
        ),
        (
            payonce_api::assertion::sign(
                "not the tenant's key",
                &claims("cus_test", &id_of(&op), 60_000, &"e".repeat(32)),
            ),
            401,
            "assertion_bad_signature",
        ),
        ("v1.garbage.x".to_string(), 400, "assertion_malformed"),
    ];
    for (assertion, status, code) in &cases {
        let shown = page(&api, &format!("{url}?assertion={assertion}")).await;
        assert_refused(&shown, *status, code);
        let posted = submit(
            &api,
            &url,
            &[("details_hash", hash), ("assertion", assertion)],
        )
        .await;
        assert_refused(&posted, *status, code);
    }
    assert_unapproved(&api, &op).await;
    assert_unapproved(&api, &other).await;

    // Replayed: a nonce the tenant's app already used is refused, and nothing is spent by it.
    let nonce = "f".repeat(32);
    let replay = signed(claims("cus_test", &id_of(&op), 60_000, &nonce));
    let first_use = api
        .ledger
        .verification()
        .use_assertion_nonce(
            &UsedNonce {
                tenant: &tenant(),
                nonce: &nonce,
                operation: &OperationId::parse(&id_of(&other)).unwrap(),
                expires_at: api.clock.now() + std::time::Duration::from_millis(60_000),
            },
            api.clock.now(),
        )
        .await
        .unwrap();
    assert!(first_use);
    let posted = submit(
        &api,
        &url,
        &[("details_hash", hash), ("assertion", &replay)],
    )
    .await;
    assert_refused(&posted, 409, "assertion_replayed");
    assert_unapproved(&api, &op).await;

    // After all that, the link and the customer are intact: a real assertion approves.
    let real = api.assertion(&id_of(&op), "cus_test", 60_000);
    let approved = submit(&api, &url, &[("details_hash", hash), ("assertion", &real)]).await;
    assert_eq!(approved.status, 200, "{}", approved.text);
    assert_eq!(status_of(&api, &op).await, "ready");
    api.stop().await;
}

#[tokio::test]
async fn one_time_codes_are_signed_counted_expire_and_work_once() {
    let api = spawn(sqlite_ledger().await).await;
    let inbox = Inbox::start(0).await;
    let secret = use_codes(&api, &inbox).await;
    let op = api.create("INV-133", 2048).await;
    let hash = op["details_hash"].as_str().unwrap();

    // The service's link: payonce sends the code to the tenant's endpoint, signed.
    let url = api.link(&id_of(&op)).await;
    let got = inbox.wait_for(1).await;
    let delivery = &got[0];
    payonce_core::signing::verify(
        &secret,
        &delivery.signature,
        &delivery.body,
        api.clock.now().as_millis() / 1000,
        TIMESTAMP_TOLERANCE_S,
    )
    .expect("the notification is signed with the tenant's secret");
    let body = delivery.json();
    assert_eq!(body["operation_id"], id_of(&op).as_str());
    assert_eq!(body["customer"], "cus_test");
    assert_eq!(body["verification"], "one_time_code");
    assert_eq!(body["requested_by"], "service");
    assert_eq!(body["delivery_id"], delivery.delivery_id.as_str());
    let code = body["code"].as_str().unwrap().to_string();
    assert_eq!(code.len(), 6);

    // The page asks for the code.
    let shown = page(&api, &url).await;
    assert_eq!(shown.status, 200);
    assert!(shown.text.contains("name=\"code\""));
    assert_eq!(hidden_hash(&shown.text), hash);

    // Wrong: counted, says how many remain, approves nothing.
    let wrong = if code == "123456" { "654321" } else { "123456" };
    let r = submit(&api, &url, &[("details_hash", hash), ("code", wrong)]).await;
    assert_kept_on_form(&r, 401, "code_wrong");
    assert!(
        r.text
            .contains(&format!("{} attempts left", CODE_ATTEMPTS_MAX - 1))
    );
    let r = submit(&api, &url, &[("details_hash", hash), ("code", "12ab")]).await;
    assert_kept_on_form(&r, 400, "code_required");
    assert_unapproved(&api, &op).await;

    // Right: approves once, the audit names the delivery, never the code.
    let r = submit(&api, &url, &[("details_hash", hash), ("code", &code)]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let id = OperationId::parse(&id_of(&op)).unwrap();
    let events = api.ledger.events_unscoped(&id).await.unwrap();
    let approve = events.iter().find(|e| e.event == "approve").unwrap();
    assert_eq!(
        approve.detail.as_deref(),
        Some(format!("one_time_code:{}", delivery.delivery_id).as_str())
    );
    assert!(!approve.detail.as_deref().unwrap().contains(&code));
    // Replayed: the code (and its link) are spent.
    let r = submit(&api, &url, &[("details_hash", hash), ("code", &code)]).await;
    assert_refused(&r, 409, "link_used");

    // Expired: a code lives CODE_TTL, less than its link.
    let late = api.create("INV-134", 2048).await;
    let late_url = api.link(&id_of(&late)).await;
    let got = inbox.wait_for(2).await;
    let late_code = got[1].json()["code"].as_str().unwrap().to_string();
    api.clock.advance(CODE_TTL);
    let r = submit(
        &api,
        &late_url,
        &[
            ("details_hash", late["details_hash"].as_str().unwrap()),
            ("code", &late_code),
        ],
    )
    .await;
    assert_refused(&r, 410, "code_expired");
    assert_unapproved(&api, &late).await;

    // Exhausted: after CODE_ATTEMPTS_MAX wrong guesses even the right code is dead.
    let guessed = api.create("INV-135", 2048).await;
    let guessed_url = api.link(&id_of(&guessed)).await;
    let got = inbox.wait_for(3).await;
    let right = got[2].json()["code"].as_str().unwrap().to_string();
    let wrong = if right == "000000" {
        "000001"
    } else {
        "000000"
    };
    let ghash = guessed["details_hash"].as_str().unwrap();
    for _ in 0..CODE_ATTEMPTS_MAX - 1 {
        let r = submit(
            &api,
            &guessed_url,
            &[("details_hash", ghash), ("code", wrong)],
        )
        .await;
        assert_kept_on_form(&r, 401, "code_wrong");
    }
    let r = submit(
        &api,
        &guessed_url,
        &[("details_hash", ghash), ("code", wrong)],
    )
    .await;
    assert_refused(&r, 403, "code_exhausted");
    let r = submit(
        &api,
        &guessed_url,
        &[("details_hash", ghash), ("code", &right)],
    )
    .await;
    assert_refused(&r, 403, "code_exhausted");
    assert_unapproved(&api, &guessed).await;
    api.stop().await;
}

#[tokio::test]
async fn a_notification_is_signed_and_retried_until_accepted() {
    let api = spawn(sqlite_ledger().await).await;
    let inbox = Inbox::start(2).await;
    let secret = use_codes(&api, &inbox).await;
    let op = api.create("INV-136", 2048).await;
    api.link(&id_of(&op)).await;
    let got = inbox.wait_for(3).await;
    assert_eq!(got.len(), 3, "two failures, then accepted; no more");
    for r in &got {
        assert_eq!(r.delivery_id, got[0].delivery_id, "one delivery, retried");
        assert_eq!(r.body, got[0].body);
        payonce_core::signing::verify(
            &secret,
            &r.signature,
            &r.body,
            api.clock.now().as_millis() / 1000,
            TIMESTAMP_TOLERANCE_S,
        )
        .unwrap();
    }
    // A receiver with another secret, or a changed body, refuses it.
    assert!(
        payonce_core::signing::verify(
            "nsec_other",
            &got[0].signature,
            &got[0].body,
            api.clock.now().as_millis() / 1000,
            TIMESTAMP_TOLERANCE_S
        )
        .is_err()
    );
    api.stop().await;
}

#[tokio::test]
async fn an_assistant_cannot_starve_the_services_links_and_asks_the_customer_within_limits() {
    let api = spawn_on_postgres().await;
    let inbox = Inbox::start(0).await;
    use_codes(&api, &inbox).await;
    let op = api.create("INV-137", 2048).await;
    let pay = || {
        let api = &api;
        let id = id_of(&op);
        async move {
            call_tool(
                api,
                &api.assistant,
                "anthropic",
                "toolu_loop",
                "pay_invoice",
                json!({"operation_id": id}),
            )
            .await
            .0
        }
    };
    // Status reads ask nobody.
    for _ in 0..3 {
        let (status, _) = call_tool(
            &api,
            &api.assistant,
            "anthropic",
            "toolu_status",
            "get_payment_status",
            json!({"operation_id": id_of(&op)}),
        )
        .await;
        assert_eq!(status["outcome"], "approval_required");
        assert!(status.get("approval_request").is_none(), "{status}");
    }
    // An assistant in a loop: one request to the customer, then "already asked".
    let mut sent = 0;
    let first = pay().await;
    assert_eq!(first["approval_request"]["status"], "sent", "{first}");
    sent += 1;
    for _ in 0..OPEN_LINKS_MAX * 2 {
        let again = pay().await;
        assert_eq!(
            again["approval_request"]["status"], "already_asked",
            "{again}"
        );
    }
    // Across the interval, at most ASSISTANT_REQUESTS_MAX requests ever.
    for _ in 0..ASSISTANT_REQUESTS_MAX + 2 {
        api.clock.advance(ASSISTANT_REQUEST_INTERVAL);
        if pay().await["approval_request"]["status"] == "sent" {
            sent += 1;
        }
    }
    assert_eq!(sent, ASSISTANT_REQUESTS_MAX);
    let received = inbox.wait_for(ASSISTANT_REQUESTS_MAX as usize).await;
    assert_eq!(received.len(), ASSISTANT_REQUESTS_MAX as usize);
    assert!(
        received
            .iter()
            .all(|r| r.json()["requested_by"] == "assistant")
    );

    // Defect 4: the service's own requests still get their full budget.
    for _ in 0..OPEN_LINKS_MAX {
        let r = api
            .post(
                &format!("/v1/operations/{}/approval-requests", id_of(&op)),
                &api.service,
                json!({}),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
    }
    let over = api
        .post(
            &format!("/v1/operations/{}/approval-requests", id_of(&op)),
            &api.service,
            json!({}),
        )
        .await;
    assert_eq!(over.status, 409);
    assert_eq!(over.code(), "too_many_open_links");
    api.stop().await;
}

#[tokio::test]
async fn a_tenant_without_verification_approves_nothing_on_the_page() {
    let api = spawn(sqlite_ledger().await).await;
    let globex = TenantId::parse(super::OTHER_TENANT).unwrap();
    let created = api
        .post(
            "/v1/operations",
            &api.other_service,
            json!({"business_key": "invoice:G-1:pay", "details": super::raw_details("G-1", 2048)}),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let op = created.json();
    let r = api
        .post(
            &format!("/v1/operations/{}/approval-requests", id_of(&op)),
            &api.other_service,
            json!({}),
        )
        .await;
    assert_eq!(r.status, 409);
    assert_eq!(r.code(), "verification_not_configured");
    // A link that exists anyway (issued before, say) shows the error page and approves nothing.
    let token = "ab".repeat(32);
    let id = OperationId::parse(&id_of(&op)).unwrap();
    let link = ApprovalLink {
        token_hash: payonce_api::auth::sha256_hex(&token),
        operation_id: id.clone(),
        details_hash: op["details_hash"].as_str().unwrap().to_string(),
        created_at: api.clock.now(),
        expires_at: api.clock.now() + std::time::Duration::from_secs(60),
        used_at: None,
    };
    assert!(api.ledger.create_approval_link(&link, 5).await.unwrap());
    let url = format!("{}/confirm/{token}", api.base);
    assert_refused(&page(&api, &url).await, 403, "verification_not_configured");
    let posted = submit(
        &api,
        &url,
        &[("details_hash", op["details_hash"].as_str().unwrap())],
    )
    .await;
    assert_refused(&posted, 403, "verification_not_configured");
    let stored = api.ledger.get(&globex, &id).await.unwrap();
    assert_eq!(stored.status.as_str(), "awaiting_approval");
    assert!(
        api.ledger
            .latest_approval(&tenant(), &id)
            .await
            .unwrap()
            .is_none()
    );
    api.stop().await;
}

/// The reproduction over plain HTTP, written so it also compiles against the old code (where
/// it fails: the execute answer held a link, and GET + POST of its hash approved).
#[tokio::test]
async fn repro_assistant_self_approval() {
    let api = spawn(sqlite_ledger().await).await;
    let op = api.create("INV-R1", 2048).await;
    let id = op["id"].as_str().unwrap();
    let answer = api
        .post(
            &format!("/v1/operations/{id}/execute"),
            &api.assistant,
            json!({}),
        )
        .await
        .json();
    if let Some(url) = answer["confirmation_url"].as_str() {
        let page = api
            .http
            .get(url)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let marker = "name=\"details_hash\" value=\"";
        if let Some(at) = page.find(marker) {
            let hash = &page[at + marker.len()..at + marker.len() + 64];
            api.http
                .post(url)
                .form(&[("details_hash", hash)])
                .send()
                .await
                .unwrap();
        }
    }
    assert_eq!(
        status_of(&api, &op).await,
        "awaiting_approval",
        "the assistant approved its own payment"
    );
}

/// Defect 4's reproduction, also old-code compatible (there the service got `409
/// too_many_open_links` after an assistant's calls).
#[tokio::test]
async fn repro_assistant_starves_service_links() {
    let api = spawn(sqlite_ledger().await).await;
    let op = api.create("INV-R2", 2048).await;
    let id = op["id"].as_str().unwrap();
    for _ in 0..OPEN_LINKS_MAX + 2 {
        api.post(
            &format!("/v1/operations/{id}/execute"),
            &api.assistant,
            json!({}),
        )
        .await;
    }
    let r = api
        .post(
            &format!("/v1/operations/{id}/approval-requests"),
            &api.service,
            json!({}),
        )
        .await;
    assert_eq!(r.status, 201, "the service was starved: {}", r.text);
}

/// `payonce serve` plays its tenant's app: an assistant's pay_invoice makes payonce send the link
/// and a code to the in-process tenant app, which prints them (its "SMS"); typing that code on the
/// page approves, and the stack pays once.
#[tokio::test]
async fn serve_plays_the_tenant_app_and_a_customer_approves_with_the_printed_code() {
    use crate::serve::{
        banner_api, banner_word, read_banner, scratch, serve_command, sigterm_and_wait,
        stdout_lines, succeeded_over_http, tenant_app_line,
    };
    use std::process::Stdio;
    const SERVE_DEADLINE: Duration = Duration::from_secs(60);
    let dir = scratch("serve-tenant-app");
    let mut child = serve_command(&dir, &[], "sqlite:serve.db", &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = stdout_lines(&mut child);
    let banner = read_banner(&mut stdout, SERVE_DEADLINE).await;
    let api = banner_api(&banner);
    let service = banner_word(&banner, "service key");
    let assistant = banner_word(&banner, "assistant key");
    assert!(
        banner.iter().any(|l| l.contains("one-time code")),
        "{banner:#?}"
    );
    let http = super::http_client();
    let created: Value = http
        .post(format!("{api}/v1/operations"))
        .bearer_auth(&service)
        .json(&json!({"business_key": "invoice:INV-9:pay",
            "details": {"amount": 900, "currency": "usd", "customer": "cus_9", "payment_method": "pm_card_visa", "invoice": "INV-9"}}))
        .send().await.unwrap().error_for_status().unwrap().json().await.unwrap();
    let id = created["id"].as_str().unwrap().to_string();
    let answer: Value = http
        .post(format!("{api}/v1/operations/{id}/execute"))
        .bearer_auth(&assistant)
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["approval_request"]["status"], "sent", "{answer}");
    assert!(!answer.to_string().contains("/confirm/"), "{answer}");

    // The tenant app's "SMS": ">>> [tenant app] to customer cus_9: please confirm … at URL with code N".
    let line = tenant_app_line(&mut stdout, SERVE_DEADLINE).await;
    let words: Vec<&str> = line.split_whitespace().collect();
    let url = words.iter().find(|w| w.contains("/confirm/")).unwrap();
    let code = words.last().unwrap();
    assert!(
        line.contains("cus_9") && line.contains("9.00 USD"),
        "{line}"
    );
    let approved = http
        .post(*url)
        .form(&[
            ("details_hash", created["details_hash"].as_str().unwrap()),
            ("code", code),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(approved.status(), 200);
    let paid = succeeded_over_http(&http, &api, &service, &id, SERVE_DEADLINE).await;
    assert!(paid["approved_by"] == "customer:cus_9", "{paid}");
    let exit = sigterm_and_wait(&mut child).await;
    assert!(exit.success(), "{exit}");
}

/// `payonce tenant set-verification`: generated secrets printed once, stored; bad settings refused
/// with nothing stored.
#[tokio::test]
async fn the_operator_command_sets_a_tenants_verification() {
    use crate::serve::{payonce, scratch};
    let dir = scratch("tenant-set-verification");
    let db = format!("sqlite:{}", dir.join("tenant.db").display());
    let run = |args: Vec<&str>| {
        let mut all = vec!["tenant", "--database-url", db.as_str()];
        all.extend(args);
        let mut command = payonce(&dir, &all);
        async move { command.output().await.unwrap() }
    };
    crate::serve::migrate(&dir, &db, &[]).await;
    let refused = run(vec![
        "set-verification",
        "--tenant",
        "acme",
        "--method",
        "one-time-code",
    ])
    .await;
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("needs a notify URL"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let set = run(vec![
        "set-verification",
        "--tenant",
        "acme",
        "--method",
        "signed-assertion",
        "--key-id",
        "acme-2027",
    ])
    .await;
    assert!(set.status.success(), "{set:?}");
    let out = String::from_utf8_lossy(&set.stdout).to_string();
    let key = out
        .lines()
        .find_map(|l| l.strip_prefix("assertion key (for the tenant's app; shown once): "))
        .unwrap_or_else(|| panic!("{out}"))
        .to_string();
    assert_eq!(key.len(), 64, "256 bits, hex");
    let ledger = payonce_ledger::connect(&db, 1).await.unwrap();
    let stored = ledger
        .verification()
        .tenant_verification(&TenantId::parse("acme").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.method, VerificationMethod::SignedAssertion);
    assert_eq!(stored.assertion_key_id.as_deref(), Some("acme-2027"));
    assert_eq!(stored.assertion_key.as_deref(), Some(key.as_str()));
    assert!(stored.notify_url.is_none());
    // A bad key id is refused and the stored setting is unchanged.
    let bad = run(vec![
        "set-verification",
        "--tenant",
        "acme",
        "--method",
        "signed-assertion",
        "--key-id",
        "no spaces allowed",
    ])
    .await;
    assert!(!bad.status.success());
    let after = ledger
        .verification()
        .tenant_verification(&TenantId::parse("acme").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after, stored);
}

/// The open-link cap holds under concurrency on Postgres: racing requests for one operation leave
/// exactly [`OPEN_LINKS_MAX`] open links (each request counted the open links in its own snapshot, so
/// 30 at once used to leave 8 or 9).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_link_requests_leave_exactly_the_open_link_cap_on_postgres() {
    const RACERS: usize = 30;
    // A race is not lost every time: a few operations make a cap that does not hold show.
    const ROUNDS: usize = 3;
    let (ledger, url) = postgres_ledger().await;
    let api = spawn(ledger).await;
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    for round in 0..ROUNDS {
        let op = api.create(&format!("INV-139-{round}"), 2048).await;
        let id = id_of(&op);
        let mut racers = tokio::task::JoinSet::new();
        for _ in 0..RACERS {
            let request = api
                .http
                .post(format!("{}/v1/operations/{id}/approval-requests", api.base))
                .bearer_auth(&api.service)
                .json(&json!({}));
            racers.spawn(async move { request.send().await.unwrap().status().as_u16() });
        }
        let statuses = racers.join_all().await;
        let issued = statuses.iter().filter(|s| **s == 201).count();
        let refused = statuses.iter().filter(|s| **s == 409).count();
        assert_eq!(
            (issued, refused),
            (OPEN_LINKS_MAX as usize, RACERS - OPEN_LINKS_MAX as usize),
            "{statuses:?}"
        );
        let open: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM approval_links WHERE operation_id = $1 AND used_at IS NULL",
        )
        .bind(&id)
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(open, i64::from(OPEN_LINKS_MAX));
    }
    api.stop().await;
}

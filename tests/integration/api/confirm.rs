//! The confirmation page over plain HTTP, for a tenant whose app signs customer assertions: single
//! use, expiry, tampering, racing submits, escaping and security headers. (The browser test drives
//! the same page in Chromium; `verification.rs` covers the proofs themselves.)

use super::tenant;
use super::{Reply, TestApi, spawn, spawn_on_postgres, token_of};
use crate::support::sqlite_ledger;
use payonce_core::id::OperationId;
use serde_json::Value;

pub async fn page(api: &TestApi, url: &str) -> Reply {
    let resp = api.http.get(url).send().await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    Reply {
        status,
        headers,
        text: resp.text().await.unwrap(),
    }
}

pub async fn submit(api: &TestApi, url: &str, fields: &[(&str, &str)]) -> Reply {
    let resp = api.http.post(url).form(fields).send().await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    Reply {
        status,
        headers,
        text: resp.text().await.unwrap(),
    }
}

/// The hidden field's value on a rendered page.
pub fn hidden_hash(html: &str) -> String {
    let marker = "name=\"details_hash\" value=\"";
    let start = html.find(marker).unwrap() + marker.len();
    html[start..start + 64].to_string()
}

pub async fn status_of(api: &TestApi, op: &Value) -> String {
    let r = api
        .get(
            &format!("/v1/operations/{}", op["id"].as_str().unwrap()),
            &api.service,
        )
        .await;
    r.json()["status"].as_str().unwrap().to_string()
}

pub fn assert_secure(r: &Reply) {
    assert_eq!(r.header("cache-control"), "no-store");
    assert_eq!(r.header("x-frame-options"), "DENY");
    assert_eq!(r.header("referrer-policy"), "no-referrer");
    let csp = r.header("content-security-policy");
    assert!(
        csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert!(!csp.contains("unsafe-inline"));
}

#[tokio::test]
async fn a_link_shows_the_exact_details_and_approves_once() {
    let api = spawn_on_postgres().await;
    let op = api.create("INV-70", 2048).await;
    let url = api.link(op["id"].as_str().unwrap()).await;
    assert_eq!(token_of(&url).len(), 64, "256-bit token");
    let assertion = api.assertion(op["id"].as_str().unwrap(), "cus_test", 60_000);
    let shown = page(&api, &format!("{url}?assertion={assertion}")).await;
    assert_eq!(shown.status, 200);
    assert_secure(&shown);
    assert!(shown.text.contains("$20.48"), "{}", shown.text);
    assert!(shown.text.contains("INV-70"));
    // Customer and processor ids never reach the page.
    assert!(!shown.text.contains("cus_test") && !shown.text.contains("pm_card"));
    assert!(
        shown
            .text
            .contains("Hosting &lt;b&gt;&quot;INV-70&quot;&lt;/b&gt; &amp; support"),
        "the description is escaped"
    );
    assert!(!shown.text.contains("<b>"));
    assert!(!shown.text.contains("<script"), "no JavaScript");
    let hash = hidden_hash(&shown.text);
    assert_eq!(hash, op["details_hash"].as_str().unwrap());
    // The token is stored only as its hash.
    let stored = api.ledger.approval_link(token_of(&url)).await.unwrap();
    assert!(stored.is_none(), "the raw token is not a key in the ledger");
    let by_hash = api
        .ledger
        .approval_link(&payonce_api::auth::sha256_hex(token_of(&url)))
        .await
        .unwrap();
    assert!(by_hash.is_some());

    let form = [
        ("details_hash", hash.as_str()),
        ("assertion", assertion.as_str()),
    ];
    let approved = submit(&api, &url, &form).await;
    assert_eq!(approved.status, 200, "{}", approved.text);
    assert_secure(&approved);
    assert!(approved.text.contains("Payment approved"));
    assert_eq!(status_of(&api, &op).await, "ready");
    let id = OperationId::parse(op["id"].as_str().unwrap()).unwrap();
    let approval = api
        .ledger
        .latest_approval(&tenant(), &id)
        .await
        .unwrap()
        .unwrap();
    // The audit trail names the method and its evidence (the assertion's nonce), never a secret.
    let nonce = approval.method.strip_prefix("signed_assertion:").unwrap();
    assert_eq!(nonce.len(), 32, "{}", approval.method);
    assert!(!approval.method.contains(&api.assertion_key));
    assert_eq!(approval.approved_by, "customer:cus_test");
    assert_eq!(approval.details_hash, hash);

    let again = submit(&api, &url, &form).await;
    assert_eq!(again.status, 409);
    assert!(again.text.contains("already used"));
    assert_eq!(again.header("payonce-error-code"), "link_used");
    let reopened = page(&api, &url).await;
    assert_eq!(reopened.status, 409);
    let events = api.ledger.events_unscoped(&id).await.unwrap();
    let approvals: Vec<_> = events.iter().filter(|e| e.event == "approve").collect();
    assert_eq!(approvals.len(), 1);
    assert_eq!(approvals[0].actor, "customer:cus_test");
    assert_eq!(
        approvals[0].detail.as_deref(),
        Some(format!("signed_assertion:{nonce}").as_str())
    );
    api.stop().await;
}

#[tokio::test]
async fn an_expired_link_approves_nothing() {
    let api = spawn(sqlite_ledger().await).await;
    let op = api.create("INV-71", 2048).await;
    let url = api.link(op["id"].as_str().unwrap()).await;
    let hash = hidden_hash(
        &page(&api, &api.signed_in(&url, op["id"].as_str().unwrap()))
            .await
            .text,
    );
    api.clock
        .advance(std::time::Duration::from_millis(15 * 60 * 1000));
    let assertion = api.assertion(op["id"].as_str().unwrap(), "cus_test", 60_000);
    let shown = page(&api, &format!("{url}?assertion={assertion}")).await;
    assert_eq!(shown.status, 410);
    assert!(shown.text.contains("expired"));
    assert_eq!(shown.header("payonce-error-code"), "link_expired");
    let posted = submit(
        &api,
        &url,
        &[("details_hash", &hash), ("assertion", &assertion)],
    )
    .await;
    assert_eq!(posted.status, 410);
    assert_eq!(status_of(&api, &op).await, "awaiting_approval");
    api.stop().await;
}

#[tokio::test]
async fn tampered_details_approve_nothing() {
    let api = spawn(sqlite_ledger().await).await;
    let op = api.create("INV-72", 2048).await;
    let other = api.create("INV-73", 999_999).await;
    let url = api.link(op["id"].as_str().unwrap()).await;
    let assertion = api.assertion(op["id"].as_str().unwrap(), "cus_test", 60_000);
    // The hash of another operation's (bigger) details, and garbage.
    let tampered = submit(
        &api,
        &url,
        &[
            ("details_hash", other["details_hash"].as_str().unwrap()),
            ("assertion", &assertion),
        ],
    )
    .await;
    assert_eq!(tampered.status, 409);
    assert!(tampered.text.contains("did not match"));
    assert_eq!(tampered.header("payonce-error-code"), "details_mismatch");
    assert_eq!(status_of(&api, &op).await, "awaiting_approval");
    assert_eq!(status_of(&api, &other).await, "awaiting_approval");
    let garbage = submit(
        &api,
        &url,
        &[
            ("details_hash", "<script>alert(1)</script>"),
            ("assertion", &assertion),
        ],
    )
    .await;
    assert_eq!(garbage.status, 409);
    assert!(!garbage.text.contains("<script>"));
    // A refusal changed nothing: neither the link nor the assertion was spent, so the customer's
    // real approval still goes through.
    let real = submit(
        &api,
        &url,
        &[
            ("details_hash", op["details_hash"].as_str().unwrap()),
            ("assertion", &assertion),
        ],
    )
    .await;
    assert_eq!(real.status, 200, "{}", real.text);
    assert_eq!(status_of(&api, &other).await, "awaiting_approval");
    let invalid = page(&api, &format!("{}/confirm/{}", api.base, "f".repeat(64))).await;
    assert_eq!(invalid.status, 404);
    let short = page(&api, &format!("{}/confirm/abc", api.base)).await;
    assert_eq!(short.status, 404);
    api.stop().await;
}

#[tokio::test]
async fn racing_submits_of_one_link_approve_exactly_once() {
    let api = std::sync::Arc::new(spawn_on_postgres().await);
    let op = api.create("INV-74", 2048).await;
    // Two links and one assertion, raced: the nonce and each link are single-use.
    let urls = [
        api.link(op["id"].as_str().unwrap()).await,
        api.link(op["id"].as_str().unwrap()).await,
    ];
    let assertion = api.assertion(op["id"].as_str().unwrap(), "cus_test", 60_000);
    let hash = op["details_hash"].as_str().unwrap().to_string();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..20 {
        let (api, url, hash, assertion) = (
            api.clone(),
            urls[i % 2].clone(),
            hash.clone(),
            assertion.clone(),
        );
        tasks.spawn(async move {
            submit(
                &api,
                &url,
                &[("details_hash", &hash), ("assertion", &assertion)],
            )
            .await
            .status
        });
    }
    let statuses = tasks.join_all().await;
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        1,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 409).count(),
        19,
        "{statuses:?}"
    );
    let id = OperationId::parse(op["id"].as_str().unwrap()).unwrap();
    let events = api.ledger.events_unscoped(&id).await.unwrap();
    assert_eq!(events.iter().filter(|e| e.event == "approve").count(), 1);
}

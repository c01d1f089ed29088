//! The on-call console over real HTTP: sign in with an on-call key (other roles and unknown keys
//! refused), the session cookie's attributes, sign-out, expiry on the controlled clock, a revoked or
//! expired key ending its session, CSRF on every form (refused with nothing changed), tenant scope
//! (another tenant's operation is not found), search and keyset pagination, resolve with and without
//! a reason, the JSON export without `client_secret`, and the list queries' plans on a large table.

use super::{OTHER_TENANT, T0, T0_MS, TestApi, raw_details, spawn, spawn_on_postgres, tenant};
use crate::support::rows;
use crate::support::{postgres_ledger, sqlite_ledger};
use payonce_api::keys;
use payonce_core::clock::Timestamp;
use payonce_core::id::{OperationId, TenantId};
use payonce_core::state::Status;
use payonce_ledger::console::{Chart, OperationQuery, counts_statement, page_statement};
use payonce_ledger::{Fence, LeaseHolder, Paid};
use payonce_ledger::{Recorded, Role};
use serde_json::{Value, json};
use std::time::Duration;

/// One console answer.
pub(super) struct Page {
    pub(super) status: u16,
    pub(super) headers: reqwest::header::HeaderMap,
    pub(super) text: String,
}

impl Page {
    pub(super) fn code(&self) -> &str {
        self.headers
            .get("payonce-error-code")
            .map_or("", |v| v.to_str().unwrap())
    }
    fn set_cookies(&self) -> Vec<String> {
        self.headers
            .get_all("set-cookie")
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect()
    }
    pub(super) fn location(&self) -> &str {
        self.headers
            .get("location")
            .map_or("", |v| v.to_str().unwrap())
    }
}

/// The value of `name="csrf" value="…"` in a page.
fn csrf_in(html: &str) -> String {
    let at = html
        .find("name=\"csrf\" value=\"")
        .unwrap_or_else(|| panic!("no csrf field: {html}"));
    html[at + 19..at + 19 + 64].to_string()
}

/// The value of cookie `name` among `Set-Cookie` headers.
fn cookie_value(page: &Page, name: &str) -> Option<String> {
    page.set_cookies().iter().find_map(|c| {
        c.strip_prefix(&format!("{name}="))
            .map(|rest| rest.split(';').next().unwrap().to_string())
    })
}

pub(super) async fn get(api: &TestApi, path: &str, session: Option<&str>) -> Page {
    let mut req = api.http.get(format!("{}{path}", api.base));
    if let Some(s) = session {
        req = req.header("cookie", format!("payonce_console={s}"));
    }
    page(req).await
}

async fn post_form(
    api: &TestApi,
    path: &str,
    cookie: Option<String>,
    form: &[(&str, &str)],
) -> Page {
    let mut req = api.http.post(format!("{}{path}", api.base)).form(form);
    if let Some(c) = cookie {
        req = req.header("cookie", c);
    }
    page(req).await
}

async fn page(req: reqwest::RequestBuilder) -> Page {
    let resp = req.send().await.unwrap();
    Page {
        status: resp.status().as_u16(),
        headers: resp.headers().clone(),
        text: resp.text().await.unwrap(),
    }
}

/// Signs in with `key` as a browser does (form, then POST with the form's token); the answer.
async fn try_sign_in(api: &TestApi, key: &str) -> Page {
    let form = get(api, "/console/sign-in", None).await;
    assert_eq!(form.status, 200);
    let token = cookie_value(&form, "payonce_console_sign_in").unwrap();
    assert_eq!(csrf_in(&form.text), token);
    post_form(
        api,
        "/console/sign-in",
        Some(format!("payonce_console_sign_in={token}")),
        &[("key", key), ("csrf", &token)],
    )
    .await
}

/// Signs in; returns the session id.
pub(super) async fn sign_in(api: &TestApi, key: &str) -> String {
    let r = try_sign_in(api, key).await;
    assert_eq!(r.status, 303, "{}", r.text);
    assert_eq!(r.location(), "/console");
    cookie_value(&r, "payonce_console").unwrap()
}

/// The session's CSRF token (from any page's sign-out form).
pub(super) async fn csrf_of(api: &TestApi, session: &str) -> String {
    let r = get(api, "/console", Some(session)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    csrf_in(&r.text)
}

pub(super) async fn post(api: &TestApi, path: &str, session: &str, form: &[(&str, &str)]) -> Page {
    post_form(api, path, Some(format!("payonce_console={session}")), form).await
}

async fn issue(api: &TestApi, tenant: &str, role: Role, ttl: Option<Duration>) -> keys::IssuedKey {
    keys::issue(
        api.ledger.as_ref(),
        &TenantId::parse(tenant).unwrap(),
        role,
        "console-test",
        ttl,
        api.clock_now(),
    )
    .await
    .unwrap()
}

trait Now {
    fn clock_now(&self) -> Timestamp;
}
impl Now for TestApi {
    fn clock_now(&self) -> Timestamp {
        use payonce_core::clock::Clock;
        self.clock.now()
    }
}

/// An operation of the test tenant escalated to `needs_attention` after a submission.
/// The reconciler's detail when a lookup finds nothing after the key's retention window closed.
pub(super) const RETENTION_CLOSED: &str = "not found at the processor (consistent lookup) and the key's retention window has closed; a new submission could pay twice";

pub(super) async fn needs_attention(api: &TestApi, invoice: &str) -> OperationId {
    needs_attention_because(api, invoice, RETENTION_CLOSED).await
}

/// An operation escalated to needs_attention by the reconciler with `reason`.
pub(super) async fn needs_attention_because(
    api: &TestApi,
    invoice: &str,
    reason: &str,
) -> OperationId {
    let op = api.create_ready(invoice).await;
    let id = OperationId::parse(op["id"].as_str().unwrap()).unwrap();
    let now = api.clock_now();
    let worker = rows::holder("test-worker", Duration::from_secs(30));
    let unknown = rows::unknown(
        &api.ledger,
        &id,
        &worker,
        now + Duration::from_secs(60),
        now,
    )
    .await;
    rows::needs_attention(&api.ledger, &unknown, reason, "reconciler", now).await;
    id
}

#[tokio::test]
async fn an_on_call_key_signs_in_and_out_and_other_keys_cannot() {
    let api = spawn(sqlite_ledger().await).await;
    // Signed out: the sign-in form, 401.
    let r = get(&api, "/console", None).await;
    assert_eq!((r.status, r.code()), (401, "unauthorized"));
    assert!(r.text.contains("action=\"/console/sign-in\""));
    // A bearer key is not a session.
    let r = page(
        api.http
            .get(format!("{}/console", api.base))
            .bearer_auth(&api.on_call),
    )
    .await;
    assert_eq!(r.status, 401);

    // Other roles, unknown keys and a missing or wrong form token are refused.
    for key in [&api.service, &api.assistant] {
        let r = try_sign_in(&api, key).await;
        assert_eq!((r.status, r.code()), (403, "forbidden"), "{}", r.text);
        assert!(cookie_value(&r, "payonce_console").is_none());
    }
    let r = try_sign_in(&api, "po_on_call_0000").await;
    assert_eq!((r.status, r.code()), (401, "unauthorized"));
    let r = post_form(
        &api,
        "/console/sign-in",
        None,
        &[("key", api.on_call.as_str())],
    )
    .await;
    assert_eq!((r.status, r.code()), (403, "forbidden"));
    let form = get(&api, "/console/sign-in", None).await;
    let token = cookie_value(&form, "payonce_console_sign_in").unwrap();
    let r = post_form(
        &api,
        "/console/sign-in",
        Some(format!("payonce_console_sign_in={token}")),
        &[("key", api.on_call.as_str()), ("csrf", &"0".repeat(64))],
    )
    .await;
    assert_eq!((r.status, r.code()), (403, "forbidden"));
    assert!(cookie_value(&r, "payonce_console").is_none());

    // The on-call key: a session cookie with the named lifetime and attributes.
    let r = try_sign_in(&api, &api.on_call).await;
    assert_eq!(r.status, 303, "{}", r.text);
    let set = r
        .set_cookies()
        .into_iter()
        .find(|c| c.starts_with("payonce_console="))
        .unwrap();
    for attribute in [
        "HttpOnly",
        "SameSite=Strict",
        "Path=/console",
        "Max-Age=28800",
    ] {
        assert!(set.contains(attribute), "{set}");
    }
    // The base URL is http: no Secure attribute (a browser would drop the cookie).
    assert!(!set.contains("Secure"), "{set}");
    let session = cookie_value(&r, "payonce_console").unwrap();
    let overview = get(&api, "/console", Some(&session)).await;
    assert_eq!(overview.status, 200);
    assert!(overview.text.contains("Operations by state"));
    // The confirmation page's security headers.
    let csp = overview.headers["content-security-policy"]
        .to_str()
        .unwrap();
    assert!(csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"));
    // Script only from the console's own origin (the live refresh): never inline.
    assert!(csp.contains("script-src 'self';"), "{csp}");
    for loosened in ["unsafe-inline", "unsafe-eval", "nonce-", "sha256-", "*"] {
        assert!(!csp.contains(loosened), "{csp}");
    }
    assert!(
        overview.headers.get("refresh").is_none(),
        "no full-page reload"
    );
    assert_eq!(overview.headers["x-frame-options"], "DENY");
    assert_eq!(overview.headers["cache-control"], "no-store");
    // The session id is stored only as its hash.
    let stored = api
        .ledger
        .console()
        .session(&payonce_api::auth::sha256_hex(&session), api.clock_now())
        .await
        .unwrap()
        .unwrap();
    assert_ne!(stored.session_hash, session);

    // Sign-out without the CSRF token is refused and the session lives on.
    let r = post(&api, "/console/sign-out", &session, &[]).await;
    assert_eq!((r.status, r.code()), (403, "forbidden"));
    assert_eq!(get(&api, "/console", Some(&session)).await.status, 200);
    let csrf = csrf_of(&api, &session).await;
    let r = post(&api, "/console/sign-out", &session, &[("csrf", &csrf)]).await;
    assert_eq!(r.status, 303);
    assert_eq!(r.location(), "/console/sign-in");
    assert!(
        r.set_cookies()
            .iter()
            .any(|c| c.starts_with("payonce_console=;") && c.contains("Max-Age=0"))
    );
    let r = get(&api, "/console", Some(&session)).await;
    assert_eq!((r.status, r.code()), (401, "unauthorized"));
    api.stop().await;
}

#[tokio::test]
async fn sessions_end_at_their_expiry_and_when_the_key_is_revoked_or_expires() {
    let api = spawn(sqlite_ledger().await).await;
    // Expiry on the controlled clock.
    let session = sign_in(&api, &api.on_call).await;
    api.clock
        .advance(payonce_api::console::session::SESSION_TTL - Duration::from_millis(1));
    assert_eq!(get(&api, "/console", Some(&session)).await.status, 200);
    api.clock.advance(std::time::Duration::from_millis(1));
    assert_eq!(get(&api, "/console", Some(&session)).await.status, 401);

    // Revoking the key ends its session from the next request.
    let key = issue(&api, "acme", Role::OnCall, None).await;
    let session = sign_in(&api, &key.secret).await;
    assert_eq!(get(&api, "/console", Some(&session)).await.status, 200);
    keys::revoke(
        api.ledger.as_ref(),
        &key.key_id,
        "on_call:test",
        "left the team",
        api.clock_now(),
    )
    .await
    .unwrap();
    let r = get(&api, "/console", Some(&session)).await;
    assert_eq!((r.status, r.code()), (401, "unauthorized"));
    // And a revoked key cannot sign in again.
    assert_eq!(try_sign_in(&api, &key.secret).await.status, 401);

    // A key that expires ends its session at the key's expiry.
    let key = issue(&api, "acme", Role::OnCall, Some(Duration::from_secs(60))).await;
    let session = sign_in(&api, &key.secret).await;
    api.clock.advance(std::time::Duration::from_millis(59_999));
    assert_eq!(get(&api, "/console", Some(&session)).await.status, 200);
    api.clock.advance(std::time::Duration::from_millis(1));
    assert_eq!(get(&api, "/console", Some(&session)).await.status, 401);
    api.stop().await;
}

async fn create_in(api: &TestApi, key: &str, invoice: &str) -> Value {
    let r = api
        .post(
            "/v1/operations",
            key,
            json!({"business_key": format!("invoice:{invoice}:pay"), "details": raw_details(invoice, 2048)}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.json()
}

/// The operation ids in a list page, in order.
fn ids_in(html: &str) -> Vec<String> {
    html.match_indices("href=\"/console/operations/op_")
        .map(|(at, _)| html[at + 26..at + 26 + 35].to_string())
        .collect()
}

fn next_in(html: &str) -> Option<String> {
    let at = html.find("id=\"next\" href=\"")?;
    let rest = &html[at + 16..];
    Some(rest[..rest.find('"').unwrap()].replace("&amp;", "&"))
}

#[tokio::test]
async fn lists_filter_search_and_page_within_the_tenant() {
    let api = spawn(sqlite_ledger().await).await;
    let session = sign_in(&api, &api.on_call).await;
    // Seven operations; two share a creation time (the keyset breaks the tie by id).
    let mut created = Vec::new();
    for i in 0..7 {
        if i != 4 {
            api.clock.advance(std::time::Duration::from_millis(1_000));
        }
        created.push(
            api.create(&format!("INV-L{i}"), 2048).await["id"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    let other = create_in(&api, &api.other_service, "INV-OTHER").await;
    let attention = needs_attention(&api, "INV-ATTN").await;

    // Newest first, in pages of 3, every operation exactly once, the other tenant's never.
    let mut seen = Vec::new();
    let mut path = Some("/console/operations?limit=3".to_string());
    let mut pages = 0;
    while let Some(p) = path {
        let r = get(&api, &p, Some(&session)).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let ids = ids_in(&r.text);
        assert!(ids.len() <= 3);
        seen.extend(ids);
        path = next_in(&r.text);
        pages += 1;
        assert!(pages < 10, "pagination does not end");
    }
    let mut expected = created.clone();
    expected.push(attention.to_string());
    let mut by_created: Vec<(i64, String)> = Vec::new();
    for id in &expected {
        let op = api
            .ledger
            .get(&tenant(), &OperationId::parse(id).unwrap())
            .await
            .unwrap();
        by_created.push((op.created_at.as_millis(), id.clone()));
    }
    by_created.sort();
    by_created.reverse();
    let expected: Vec<String> = by_created.into_iter().map(|(_, id)| id).collect();
    assert_eq!(seen, expected);
    assert!(!seen.contains(&other["id"].as_str().unwrap().to_string()));

    // State filter.
    let r = get(
        &api,
        "/console/operations?status=needs_attention",
        Some(&session),
    )
    .await;
    assert_eq!(ids_in(&r.text), vec![attention.to_string()]);
    // Search by invoice, business key, operation id, customer; another tenant's invoice finds nothing.
    for q in ["INV-L3", "invoice:INV-L3:pay", created[3].as_str()] {
        let r = get(&api, &format!("/console/operations?q={q}"), Some(&session)).await;
        assert_eq!(ids_in(&r.text), vec![created[3].clone()], "search {q}");
    }
    let r = get(&api, "/console/operations?q=cus_test", Some(&session)).await;
    assert_eq!(ids_in(&r.text).len(), 8);
    let r = get(&api, "/console/operations?q=INV-OTHER", Some(&session)).await;
    assert!(ids_in(&r.text).is_empty() && r.text.contains("No operations match"));
    let r = get(
        &api,
        &format!("/console/operations?q={}", other["id"].as_str().unwrap()),
        Some(&session),
    )
    .await;
    assert!(ids_in(&r.text).is_empty());
    // Time window: only what was created within the last 2.5 s.
    api.clock.advance(std::time::Duration::from_millis(500));
    let r = get(&api, "/console/operations?since=3s", Some(&session)).await;
    let recent = ids_in(&r.text);
    assert!(
        recent.contains(&attention.to_string()) && !recent.contains(&created[0]),
        "{recent:?}"
    );
    // Malformed filters are refused.
    for bad in [
        "status=paid",
        "since=forever",
        "limit=0",
        "limit=201",
        "after=x",
    ] {
        let r = get(&api, &format!("/console/operations?{bad}"), Some(&session)).await;
        assert_eq!((r.status, r.code()), (400, "invalid_request"), "{bad}");
    }
    api.stop().await;
}

#[tokio::test]
async fn resolving_needs_a_session_token_and_a_reason_and_writes_the_clis_event() {
    let api = spawn(sqlite_ledger().await).await;
    let session = sign_in(&api, &api.on_call).await;
    let csrf = csrf_of(&api, &session).await;
    let id = needs_attention(&api, "INV-R1").await;
    let path = format!("/console/operations/{id}/resolve");
    let events_before = api.ledger.events_unscoped(&id).await.unwrap().len();
    let unchanged = |api: &TestApi| {
        let ledger = api.ledger.clone();
        let id = id.clone();
        async move {
            let op = ledger.get(&tenant(), &id).await.unwrap();
            assert_eq!(op.status, Status::NeedsAttention);
            assert_eq!(
                ledger.events_unscoped(&id).await.unwrap().len(),
                events_before
            );
        }
    };
    // No CSRF token, a wrong one, another session's: 403, nothing changed.
    let other_session = sign_in(&api, &api.on_call).await;
    let other_csrf = csrf_of(&api, &other_session).await;
    for token in [None, Some("0".repeat(64)), Some(other_csrf)] {
        let mut form = vec![("as", "failed"), ("reason", "checked the dashboard")];
        if let Some(t) = &token {
            form.push(("csrf", t.as_str()));
        }
        let r = post(&api, &path, &session, &form).await;
        assert_eq!((r.status, r.code()), (403, "forbidden"), "{token:?}");
        unchanged(&api).await;
    }
    // No session at all.
    let r = post_form(
        &api,
        &path,
        None,
        &[("as", "failed"), ("reason", "x"), ("csrf", &csrf)],
    )
    .await;
    assert_eq!(r.status, 401);
    unchanged(&api).await;
    // Without a reason: 400, nothing changed.
    for reason in ["", "   "] {
        let r = post(
            &api,
            &path,
            &session,
            &[("csrf", &csrf), ("as", "failed"), ("reason", reason)],
        )
        .await;
        assert_eq!((r.status, r.code()), (400, "invalid_request"));
        unchanged(&api).await;
    }
    // Succeeded without a reference: 400.
    let r = post(
        &api,
        &path,
        &session,
        &[("csrf", &csrf), ("as", "succeeded"), ("reason", "seen")],
    )
    .await;
    assert_eq!(r.status, 400);
    unchanged(&api).await;

    // With a reason: resolved, the CLI's event with the console's actor.
    let r = post(
        &api,
        &path,
        &session,
        &[
            ("csrf", &csrf),
            ("as", "failed"),
            ("reason", "no payment in the processor dashboard"),
        ],
    )
    .await;
    assert_eq!(r.status, 303, "{}", r.text);
    assert_eq!(r.location(), format!("/console/operations/{id}"));
    let op = api.ledger.get(&tenant(), &id).await.unwrap();
    assert_eq!(op.status, Status::Failed);
    let last = api
        .ledger
        .events_unscoped(&id)
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert_eq!(last.actor, "on_call:alice");
    assert_eq!(
        last.detail.as_deref(),
        Some("no payment in the processor dashboard")
    );
    assert_eq!(last.event, "resolve_failed");
    // The timeline shows it; resolving again is refused by the same rules as the CLI.
    let page = get(&api, &format!("/console/operations/{id}"), Some(&session)).await;
    assert!(
        page.text.contains("no payment in the processor dashboard")
            && page.text.contains("on_call:alice")
    );
    let r = post(
        &api,
        &path,
        &session,
        &[("csrf", &csrf), ("as", "failed"), ("reason", "again")],
    )
    .await;
    assert_eq!((r.status, r.code()), (409, "wrong_state"));
    api.stop().await;
}

#[tokio::test]
async fn another_tenants_operation_is_not_found_and_the_chain_never_shows_a_secret() {
    let api = spawn(sqlite_ledger().await).await;
    let session = sign_in(&api, &api.on_call).await;
    let csrf = csrf_of(&api, &session).await;
    let other = create_in(&api, &api.other_service, "INV-G1").await;
    let other_id = other["id"].as_str().unwrap();
    for path in [
        format!("/console/operations/{other_id}"),
        format!("/console/operations/{other_id}/export"),
        "/console/operations/op_nonsense".to_string(),
    ] {
        let r = get(&api, &path, Some(&session)).await;
        assert_eq!((r.status, r.code()), (404, "operation_not_found"), "{path}");
    }
    let r = post(
        &api,
        &format!("/console/operations/{other_id}/resolve"),
        &session,
        &[("csrf", &csrf), ("as", "failed"), ("reason", "x")],
    )
    .await;
    assert_eq!((r.status, r.code()), (404, "operation_not_found"));
    // Another tenant's on-call key sees its own operation, not ours.
    let globex = issue(&api, OTHER_TENANT, Role::OnCall, None).await;
    let globex_session = sign_in(&api, &globex.secret).await;
    assert_eq!(
        get(
            &api,
            &format!("/console/operations/{other_id}"),
            Some(&globex_session)
        )
        .await
        .status,
        200
    );

    // A succeeded operation whose processor object carries a client_secret.
    let (id, executing) = api.create_executing("INV-S1").await;
    let now = api.clock_now();
    let secret = "pi_s1_secret_DO_NOT_SHOW";
    let paid = Recorded::Succeeded(Paid {
        reference: "pi_s1".into(),
        result: json!({"id": "pi_s1", "object": "payment_intent", "amount": 2048, "currency": "usd",
                       "status": "succeeded", "client_secret": secret}),
    });
    rows::record(&api.ledger, &executing, &paid, "w", now).await;
    let page = get(&api, &format!("/console/operations/{id}"), Some(&session)).await;
    assert_eq!(page.status, 200);
    assert!(page.text.contains("pi_s1") && page.text.contains("approve"));
    assert!(!page.text.contains(secret) && !page.text.contains("client_secret"));
    let export = get(
        &api,
        &format!("/console/operations/{id}/export"),
        Some(&session),
    )
    .await;
    assert_eq!(export.status, 200);
    assert!(!export.text.contains(secret) && !export.text.contains("client_secret"));
    let chain: Value = serde_json::from_str(&export.text).unwrap();
    assert_eq!(chain["operation"]["id"], id.as_str());
    assert_eq!(chain["operation"]["result"]["status"], "succeeded");
    assert_eq!(chain["approvals"][0]["approved_by"], "customer:cus_test");
    assert!(
        chain["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["event"] == "submission_started")
    );
    assert_eq!(chain["exported_by"], "on_call:alice");
    api.stop().await;
}

#[tokio::test]
async fn the_overview_counts_states_and_charts_the_last_hour() {
    let api = spawn(sqlite_ledger().await).await;
    let session = sign_in(&api, &api.on_call).await;
    needs_attention(&api, "INV-O1").await;
    api.create("INV-O2", 2048).await;
    create_in(&api, &api.other_service, "INV-O3").await;
    api.clock.advance(std::time::Duration::from_millis(90_000));
    let o = api
        .ledger
        .console()
        .overview(
            &tenant(),
            Chart {
                bucket: std::time::Duration::from_millis(300_000),
                buckets: 12,
            },
            api.clock_now(),
        )
        .await
        .unwrap();
    let count = |s: Status| o.by_status.iter().find(|r| r.0 == s).map_or(0, |r| r.1);
    assert_eq!(count(Status::NeedsAttention), 1);
    assert_eq!(
        count(Status::AwaitingApproval),
        1,
        "the other tenant's is not counted"
    );
    assert_eq!(o.buckets.iter().map(|b| b.submissions).sum::<i64>(), 1);
    assert_eq!(o.buckets[11].submissions, 1);
    let r = get(&api, "/console", Some(&session)).await;
    assert!(r.text.contains("<svg id=\"chart\""));
    assert!(
        r.text.contains("id=\"oldest-needs-attention\"") && r.text.contains("<b>90s</b>"),
        "{}",
        r.text
    );
    assert!(
        r.text
            .contains("href=\"/console/operations?status=needs_attention\"")
    );
    api.stop().await;
}

/// The list's statements at scale: on a Postgres table of realistic size and spread, with fresh
/// planner statistics and sequential scans allowed, no shape reads the whole operations table or
/// the search directory, each uses the index made for it (migration 0007's, or the directory's since
/// `search_directory`), and pages without a search walk the index in order (no Sort), except a page
/// of executing operations (found through the lease index since `console_state_index`: at most the
/// fleet's in-flight work, sorted). The overview's counts and chart read through indexes too.
/// Without those indexes this test fails (checked).
#[tokio::test]
async fn list_queries_use_indexes_on_a_large_table() {
    let (ledger, url) = postgres_ledger().await;
    let db = sqlx::PgPool::connect(&url).await.unwrap();
    // 200,000 operations over 50 tenants and every state the checks allow without an approval
    // (the audit trigger is off for the bulk load: the plan, not the trail, is under test).
    sqlx::raw_sql(
        "ALTER TABLE operations DISABLE TRIGGER operations_audit_insert;
         INSERT INTO operations (id, tenant_id, business_key, kind, amount_minor, currency, customer, payment_method,
             invoice, details_hash, status, idempotency_key, available_at, external_ref, created_at, updated_at,
             approved_hash)
         SELECT 'op_' || lpad(to_hex(g), 32, '0'), 'tenant' || (g % 50), 'invoice:INV-' || g || ':pay', 'payment',
             100 + g % 1000, 'usd', 'cus_' || (g % 5000), 'pm_card_visa', 'INV-' || g, repeat('a', 64),
             (ARRAY['awaiting_approval','cancelled','succeeded','failed','needs_attention'])[1 + g % 5],
             'payonce-op_' || lpad(to_hex(g), 32, '0'), 0, CASE WHEN g % 5 = 2 THEN 'pi_' || g END, 1800000000000 + g * 1000,
             1800000000000 + g * 1000, CASE WHEN g % 5 >= 2 THEN repeat('a', 64) END
         FROM generate_series(1, 200000) g;
         ALTER TABLE operations ENABLE TRIGGER operations_audit_insert;
         ANALYZE operations;
         ANALYZE operation_search;",
    )
    .execute(&db)
    .await
    .unwrap();
    let t = TenantId::parse("tenant7").unwrap();
    let after = Some((
        Timestamp::from_millis(1_800_000_000_000 + 150_007_000),
        OperationId::parse(&format!("op_{:032x}", 150_007)).unwrap(),
    ));
    // A first page (or the page after `after`) of 51, in `status` if given.
    let page_of =
        |status: Option<Status>, after: Option<(Timestamp, OperationId)>| OperationQuery {
            status,
            after,
            limit: 51,
            ..Default::default()
        };
    // Each shape and the index that must serve it (and, without a search, in order: no Sort).
    let shapes = [
        (page_of(None, None), "operation_search_tenant_idx"),
        (page_of(None, after.clone()), "operation_search_tenant_idx"),
        (
            page_of(Some(Status::NeedsAttention), None),
            "operations_console_status_idx",
        ),
        (
            page_of(Some(Status::NeedsAttention), after),
            "operations_console_status_idx",
        ),
        (
            page_of(Some(Status::Succeeded), None),
            "operation_search_tenant_idx",
        ),
        (
            page_of(Some(Status::Executing), None),
            "operations_lease_idx",
        ),
        (
            OperationQuery {
                created_from: Some(Timestamp::from_millis(1_800_000_000_000 + 190_000_000)),
                limit: 51,
                ..Default::default()
            },
            "operation_search_tenant_idx",
        ),
        (
            OperationQuery {
                search: Some("INV-107".into()),
                limit: 51,
                ..Default::default()
            },
            "operation_search_invoice_idx",
        ),
        (
            OperationQuery {
                search: Some("cus_7".into()),
                limit: 51,
                ..Default::default()
            },
            "operation_search_customer_idx",
        ),
        (
            OperationQuery {
                search: Some(format!("op_{:032x}", 107)),
                limit: 51,
                ..Default::default()
            },
            "operations_pkey",
        ),
    ];
    for (q, index) in shapes {
        let sql = page_statement(&t, &q).unwrap();
        // Inline the arguments (EXPLAIN cannot take binds here); each is this test's own value.
        let mut inlined = sql.clone();
        let mut args: Vec<String> = vec![format!("'{}'", t.as_str())];
        if let Some(f) = q.created_from {
            args.push(f.to_string());
        }
        if let Some(s) = &q.search {
            args.push(format!("'{s}'"));
        }
        if let Some((c, id)) = &q.after {
            args.push(c.to_string());
            args.push(format!("'{id}'"));
        }
        args.push(q.limit.to_string());
        for (i, a) in args.iter().enumerate().rev() {
            inlined = inlined.replace(&format!("${}", i + 1), a);
        }
        let plan: Vec<String> =
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("EXPLAIN {inlined}")))
                .fetch_all(&db)
                .await
                .unwrap();
        let plan = plan.join("\n");
        assert!(
            !plan.contains("Seq Scan on operations")
                && !plan.contains("Seq Scan on operation_search"),
            "{q:?}\n{inlined}\n{plan}"
        );
        assert!(plan.contains(index), "{q:?} does not use {index}:\n{plan}");
        if q.search.is_none() && q.status != Some(Status::Executing) {
            assert!(
                !plan.contains("Sort"),
                "{q:?} sorts instead of walking the index:\n{plan}"
            );
        }
        // And the store runs it.
        let rows = ledger.console().page(&t, &q).await.unwrap();
        assert!(rows.iter().all(|o| o.tenant == t));
    }
    // The overview's counts by state read no succeeded row: the watched states through the state
    // index, executing ones through the lease index, and the tenant's directory entries through an
    // index that leads with the tenant (the planner may take any of them).
    let plan: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "EXPLAIN {}",
        counts_statement().replace("$1", "'tenant7'")
    )))
    .fetch_all(&db)
    .await
    .unwrap();
    let plan = plan.join("\n");
    assert!(
        !plan.contains("Seq Scan")
            && plan.contains("operations_console_status_idx")
            && plan.contains("operations_lease_idx")
            && ["tenant", "customer", "invoice", "business_key"]
                .iter()
                .any(|i| plan.contains(&format!("on operation_search_{i}"))),
        "{plan}"
    );
    // The overview's chart reads the hour through its index too.
    let plan: Vec<String> = sqlx::query_scalar(
        "EXPLAIN SELECT COUNT(*) FROM operation_events e JOIN operations o ON o.id = e.operation_id \
         WHERE o.tenant_id = 'tenant7' AND e.at >= 1800000000000 AND e.at < 1800003600000",
    )
    .fetch_all(&db)
    .await
    .unwrap();
    assert!(
        !plan.join("\n").contains("Seq Scan on operations"),
        "{plan:?}"
    );
    let _ = T0_MS;
}

/// The console store on both stores: sessions live until their expiry or their end; pages walk
/// `(created_at, id)` newest first across ties exactly once; related rows are tenant-scoped.
#[tokio::test]
async fn the_console_store_behaves_the_same_on_both_stores() {
    use crate::support::{every_store, ready_operation};
    use payonce_ledger::LedgerError;
    use payonce_ledger::console::ConsoleSession;
    for ledger in every_store().await {
        let store = ledger.store();
        let c = ledger.console();
        let session = ConsoleSession {
            session_hash: "a".repeat(64),
            tenant: tenant(),
            key_id: "key_0123456789abcdef".into(),
            created_at: T0,
            expires_at: at(T0_MS + 1_000),
        };
        c.create_session(&session).await.unwrap();
        assert_eq!(
            c.session(&session.session_hash, at(T0_MS + 999))
                .await
                .unwrap(),
            Some(session.clone()),
            "{store}"
        );
        assert_eq!(
            c.session(&session.session_hash, at(T0_MS + 1_000))
                .await
                .unwrap(),
            None,
            "{store}: expired"
        );
        assert_eq!(
            c.session(&"b".repeat(64), at(T0_MS)).await.unwrap(),
            None,
            "{store}"
        );
        assert!(
            c.end_session(&session.session_hash, at(T0_MS + 1))
                .await
                .unwrap()
        );
        assert!(
            !c.end_session(&session.session_hash, at(T0_MS + 2))
                .await
                .unwrap(),
            "{store}: ended once"
        );
        assert_eq!(
            c.session(&session.session_hash, at(T0_MS + 3))
                .await
                .unwrap(),
            None,
            "{store}: ended"
        );

        // Five operations at two creation times: ties are broken by id.
        let mut ids = Vec::new();
        for i in 0..5 {
            let at = if i < 3 { T0_MS } else { T0_MS + 10 };
            ids.push(
                ready_operation(
                    &ledger,
                    &format!("INV-K{i}"),
                    "pm_card_visa",
                    Timestamp::from_millis(at),
                )
                .await
                .id,
            );
        }
        let mut expected: Vec<(Timestamp, OperationId)> = Vec::new();
        for id in &ids {
            let op = ledger.get(&tenant(), id).await.unwrap();
            expected.push((op.created_at, op.id));
        }
        expected.sort_by(|a, b| b.cmp(a));
        let mut walked = Vec::new();
        let mut after = None;
        loop {
            let page = c
                .page(
                    &tenant(),
                    &OperationQuery {
                        after: after.clone(),
                        limit: 2,
                        ..Default::default()
                    },
                )
                .await
                .unwrap();
            if page.is_empty() {
                break;
            }
            after = page.last().map(|o| (o.created_at, o.id.clone()));
            walked.extend(page.into_iter().map(|o| (o.created_at, o.id)));
        }
        assert_eq!(walked, expected, "{store}");

        // Pages in one state, the worker's two included (on Postgres they have no entry in the
        // console's state index and are found another way): claim the two oldest, record one of
        // them succeeded, and each state's page lists exactly its rows, newest first.
        let holder = LeaseHolder {
            owner: "worker-console",
            lease_ttl: Duration::from_secs(60),
        };
        let claimed = ledger
            .claim_to_submit(&holder, 2, at(T0_MS + 20))
            .await
            .unwrap();
        assert_eq!(claimed.len(), 2, "{store}");
        let paid = Recorded::Succeeded(Paid {
            reference: "pi_console_state".into(),
            result: json!({"id": "pi_console_state"}),
        });
        assert_eq!(
            ledger
                .record_batch(
                    &[(Fence::of(&claimed[0]), paid)],
                    "worker-console",
                    at(T0_MS + 21)
                )
                .await
                .unwrap(),
            [true],
            "{store}"
        );
        let in_state = |status: Status| {
            let mut rows: Vec<(Timestamp, OperationId)> = Vec::new();
            for op in &claimed {
                let s = if op.id == claimed[0].id {
                    Status::Succeeded
                } else {
                    Status::Executing
                };
                if s == status {
                    rows.push((op.created_at, op.id.clone()));
                }
            }
            for (created, id) in &expected {
                if status == Status::Ready && !claimed.iter().any(|o| &o.id == id) {
                    rows.push((*created, id.clone()));
                }
            }
            rows.sort_by(|a, b| b.cmp(a));
            rows
        };
        for status in [
            Status::Succeeded,
            Status::Executing,
            Status::Ready,
            Status::Failed,
        ] {
            let page: Vec<(Timestamp, OperationId)> = c
                .page(
                    &tenant(),
                    &OperationQuery {
                        status: Some(status),
                        limit: 10,
                        ..Default::default()
                    },
                )
                .await
                .unwrap()
                .into_iter()
                .map(|o| (o.created_at, o.id))
                .collect();
            assert_eq!(page, in_state(status), "{store}: {status:?}");
        }
        let counts: Vec<(Status, i64)> = c
            .overview(
                &tenant(),
                Chart {
                    bucket: Duration::from_secs(60),
                    buckets: 1,
                },
                at(T0_MS + 30),
            )
            .await
            .unwrap()
            .by_status
            .into_iter()
            .map(|(s, n, _)| (s, n))
            .collect();
        assert_eq!(
            counts,
            [
                (Status::Executing, 1),
                (Status::Ready, 3),
                (Status::Succeeded, 1)
            ],
            "{store}"
        );
        let found = c
            .page(
                &tenant(),
                &OperationQuery {
                    search: Some("INV-K2".into()),
                    limit: 10,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(found.len(), 1, "{store}");
        let other = TenantId::parse(OTHER_TENANT).unwrap();
        assert!(
            c.page(
                &other,
                &OperationQuery {
                    limit: 10,
                    ..Default::default()
                }
            )
            .await
            .unwrap()
            .is_empty()
        );
        let related = c.related(&tenant(), &ids[0]).await.unwrap();
        assert_eq!(related.approvals.len(), 1, "{store}");
        assert_eq!(related.approvals[0].approved_by, "customer:cus_test");
        assert!(
            matches!(c.related(&other, &ids[0]).await, Err(LedgerError::NotFound)),
            "{store}"
        );
    }
}

fn at(ms: i64) -> Timestamp {
    Timestamp::from_millis(ms)
}

#[tokio::test]
async fn a_read_only_on_call_key_sees_everything_and_resolves_nothing() {
    let api = spawn_on_postgres().await;
    let reader = keys::issue_read_only(
        api.ledger.as_ref(),
        &tenant(),
        "auditor",
        None,
        api.clock_now(),
    )
    .await
    .unwrap();
    assert!(reader.record.read_only);
    let id = needs_attention(&api, "INV-RO1").await;
    let session = sign_in(&api, &reader.secret).await;
    let csrf = csrf_of(&api, &session).await;

    // It sees every page an on-call key sees, with the same facts.
    for path in [
        "/console".to_string(),
        "/console/operations?status=needs_attention".to_string(),
        format!("/console/operations/{id}"),
        format!("/console/operations/{id}/export"),
    ] {
        let r = get(&api, &path, Some(&session)).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text);
    }
    let page = get(&api, &format!("/console/operations/{id}"), Some(&session)).await;
    assert!(
        page.text.contains("id=\"attention-reason\""),
        "{}",
        page.text
    );
    assert!(page.text.contains("id=\"read-only\""));
    assert!(!page.text.contains("id=\"resolve\""), "no resolve form");

    // It resolves nothing, whatever the form says, and nothing changes.
    let events_before = api.ledger.events_unscoped(&id).await.unwrap().len();
    let r = post(
        &api,
        &format!("/console/operations/{id}/resolve"),
        &session,
        &[
            ("csrf", &csrf),
            ("as", "failed"),
            ("reason", "checked the dashboard"),
        ],
    )
    .await;
    assert_eq!((r.status, r.code()), (403, "forbidden"), "{}", r.text);
    assert!(r.text.contains("read-only key"), "{}", r.text);
    let op = api.ledger.get(&tenant(), &id).await.unwrap();
    assert_eq!(op.status, Status::NeedsAttention);
    assert_eq!(
        api.ledger.events_unscoped(&id).await.unwrap().len(),
        events_before
    );

    // Nor a refund, in the console or with the key itself; reading through the API works.
    let paid =
        crate::support::refunds::succeeded_payment(&api.ledger, "INV-RO2", 5_000, super::T0).await;
    let refund =
        crate::support::refunds::create_refund(&api.ledger, &paid, "refund:RO2", 100, super::T0)
            .await
            .unwrap()
            .operation;
    // Its page shows no form to approve or decline the refund, and says why.
    let page = get(
        &api,
        &format!("/console/operations/{}", refund.id),
        Some(&session),
    )
    .await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(
        page.text.contains("id=\"refund-read-only\""),
        "{}",
        page.text
    );
    assert!(
        !page.text.contains("id=\"approve-refund\"")
            && !page.text.contains("id=\"decline-refund\""),
        "{}",
        page.text
    );
    for action in ["approve-refund", "decline-refund"] {
        let r = post(
            &api,
            &format!("/console/operations/{}/{action}", refund.id),
            &session,
            &[
                ("csrf", &csrf),
                ("details_hash", refund.details_hash.as_str()),
            ],
        )
        .await;
        assert_eq!(
            (r.status, r.code()),
            (403, "forbidden"),
            "{action}: {}",
            r.text
        );
    }
    let r = api
        .post(
            &format!("/v1/refunds/{}/approve", refund.id),
            &reader.secret,
            json!({"details_hash": refund.details_hash.as_str()}),
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.text);
    assert!(r.text.contains("read-only"), "{}", r.text);
    let still = api.ledger.get(&tenant(), &refund.id).await.unwrap();
    assert_eq!(still.status, Status::AwaitingApproval);
    let read = api
        .get(
            &format!("/v1/operations/{}/refunds", paid.id),
            &reader.secret,
        )
        .await;
    assert_eq!(read.status, 200, "{}", read.text);

    // A full on-call key of the same tenant still resolves it.
    let full = sign_in(&api, &api.on_call).await;
    let full_csrf = csrf_of(&api, &full).await;
    let r = post(
        &api,
        &format!("/console/operations/{id}/resolve"),
        &full,
        &[
            ("csrf", &full_csrf),
            ("as", "failed"),
            ("reason", "checked the dashboard"),
        ],
    )
    .await;
    assert_eq!(r.status, 303, "{}", r.text);
    api.stop().await;
}

#[tokio::test]
async fn keys_create_read_only_is_for_on_call_keys() {
    use crate::serve::{payonce, scratch};
    let dir = scratch("keys-read-only");
    let db = format!("sqlite:{}", dir.join("keys.db").display());
    // Every command but migrate, serve and demo refuses a ledger that does not exist yet.
    crate::serve::migrate(&dir, &db, &[]).await;
    let run = |role: &'static str| {
        let args = [
            "keys",
            "--database-url",
            db.as_str(),
            "create",
            "--tenant",
            "acme",
            "--role",
            role,
            "--label",
            "auditor",
            "--read-only",
            "--json",
        ];
        let mut command = payonce(&dir, &args);
        async move { command.output().await.unwrap() }
    };
    let made = run("on_call").await;
    assert!(made.status.success(), "{made:?}");
    let json: Value = serde_json::from_slice(&made.stdout).unwrap();
    assert_eq!(json["read_only"], true);
    assert_eq!(json["role"], "on_call");
    let refused = run("service").await;
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--read-only is for on_call keys"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let ledger = payonce_ledger::connect(&db, 1).await.unwrap();
    let listed = ledger.list_api_keys(None, 10).await.unwrap();
    assert_eq!(listed.len(), 1, "the refused key was not stored");
    assert!(listed[0].read_only);

    // A person reads it too: `keys create` and `keys list` say "read-only" of that key only.
    let text = |args: &[&str]| {
        let mut command = payonce(&dir, args);
        async move {
            let out = command.output().await.unwrap();
            assert!(out.status.success(), "{out:?}");
            String::from_utf8_lossy(&out.stdout).into_owned()
        }
    };
    let create = |role: &'static str, read_only: bool| {
        let mut args = vec![
            "keys",
            "--database-url",
            &db,
            "create",
            "--tenant",
            "acme",
            "--role",
            role,
            "--label",
            role,
        ];
        if read_only {
            args.push("--read-only");
        }
        text(&args)
    };
    let made = create("on_call", true).await;
    assert!(made.contains("role on_call (read-only)"), "{made}");
    let full = create("on_call", false).await;
    assert!(!full.contains("read-only"), "{full}");
    let list = text(&["keys", "--database-url", &db, "list"]).await;
    let rows: Vec<&str> = list.lines().filter(|l| l.contains(" acme ")).collect();
    assert_eq!(rows.len(), 3, "{list}");
    for row in rows {
        assert_eq!(
            row.contains("on_call (read-only)"),
            !row.contains(full.split_whitespace().next().unwrap()),
            "{list}"
        );
    }
}

#[tokio::test]
async fn several_operations_resolve_together_only_for_one_reason_and_each_gets_its_event() {
    let api = spawn_on_postgres().await;
    let session = sign_in(&api, &api.on_call).await;
    let csrf = csrf_of(&api, &session).await;
    let a = needs_attention(&api, "INV-B1").await;
    let b = needs_attention(&api, "INV-B2").await;
    let review_path = format!("/console/resolve-many?id={a}&id={b}");

    // The list offers the selection; the review shows each one's facts first.
    let list = get(
        &api,
        "/console/operations?status=needs_attention",
        Some(&session),
    )
    .await;
    assert!(
        list.text.contains(&format!("id=\"pick-{a}\"")),
        "{}",
        list.text
    );
    let review = get(&api, &review_path, Some(&session)).await;
    assert_eq!(review.status, 200, "{}", review.text);
    assert_eq!(review.text.matches("id=\"side-by-side\"").count(), 2);
    assert!(
        review
            .text
            .contains("no longer remembers its idempotency key")
    );

    // No reason, or succeeded (each needs its own reference): the review again, nothing changed.
    let base = [
        ("csrf", csrf.as_str()),
        ("id", a.as_str()),
        ("id", b.as_str()),
    ];
    for (outcome, reason, says) in [
        ("failed", "", "a reason is required"),
        ("succeeded", "found both", "resolve them one by one"),
    ] {
        let mut form = base.to_vec();
        form.extend([("as", outcome), ("reason", reason)]);
        let r = post(&api, "/console/resolve-many", &session, &form).await;
        assert_eq!((r.status, r.code()), (400, "invalid_request"), "{}", r.text);
        assert!(r.text.contains(says), "{}", r.text);
        assert!(r.text.contains("id=\"resolve-many\""), "the form stays");
        for id in [&a, &b] {
            let op = api.ledger.get(&tenant(), id).await.unwrap();
            assert_eq!(op.status, Status::NeedsAttention);
        }
    }

    // A different reason among them: refused, nothing changed.
    let c = needs_attention_because(&api, "INV-B3", "no lookup left").await;
    let mixed = get(&api, &format!("{review_path}&id={c}"), Some(&session)).await;
    assert_eq!(
        (mixed.status, mixed.code()),
        (400, "invalid_request"),
        "{}",
        mixed.text
    );
    assert!(mixed.text.contains("different reasons"), "{}", mixed.text);

    // More than the limit: refused.
    let many: String = (0..=payonce_api::console::bulk::BULK_RESOLVE_MAX)
        .map(|_| format!("id={}&", OperationId::generate()))
        .collect();
    let r = get(
        &api,
        &format!("/console/resolve-many?{many}"),
        Some(&session),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text);

    // One reason, one outcome: each operation resolved with its own event.
    let mut form = base.to_vec();
    form.extend([
        ("as", "failed"),
        ("reason", "checked the dashboard: neither was paid"),
    ]);
    let r = post(&api, "/console/resolve-many", &session, &form).await;
    assert_eq!(r.status, 200, "{}", r.text);
    for id in [&a, &b] {
        let op = api.ledger.get(&tenant(), id).await.unwrap();
        assert_eq!(op.status, Status::Failed);
        let events = api.ledger.events_unscoped(id).await.unwrap();
        let resolved: Vec<_> = events
            .iter()
            .filter(|e| e.event == "resolve_failed")
            .collect();
        assert_eq!(resolved.len(), 1, "one event per operation");
        assert_eq!(resolved[0].actor, "on_call:alice");
        assert_eq!(
            resolved[0].detail.as_deref(),
            Some("checked the dashboard: neither was paid")
        );
    }
    assert_eq!(
        api.ledger.get(&tenant(), &c).await.unwrap().status,
        Status::NeedsAttention
    );
    api.stop().await;
}

#[tokio::test]
async fn a_key_used_only_in_the_console_records_its_last_use_throttled() {
    let api = spawn(sqlite_ledger().await).await;
    let last_used = || async {
        api.ledger
            .list_api_keys(Some(&tenant()), 100)
            .await
            .unwrap()
            .into_iter()
            .find(|k| k.role == Role::OnCall)
            .unwrap()
            .last_used_at
    };
    assert_eq!(last_used().await, None, "never used yet");
    let session = sign_in(&api, &api.on_call).await;
    let signed_in = api.clock_now();
    assert_eq!(last_used().await, Some(signed_in));
    // The session's requests are the key's use too, recorded at most once per resolution.
    let resolution = payonce_api::auth::LAST_USED_RESOLUTION;
    api.clock.advance(resolution - Duration::from_millis(1));
    assert_eq!(get(&api, "/console", Some(&session)).await.status, 200);
    assert_eq!(
        last_used().await,
        Some(signed_in),
        "within the resolution: no write"
    );
    api.clock.advance(Duration::from_millis(1));
    assert_eq!(
        get(&api, "/console/operations", Some(&session))
            .await
            .status,
        200
    );
    let used = api.clock_now();
    assert_eq!(
        last_used().await,
        Some(used),
        "a resolution later: recorded"
    );
    api.clock.advance(resolution / 2);
    assert_eq!(get(&api, "/console", Some(&session)).await.status, 200);
    assert_eq!(last_used().await, Some(used));
    // A refused session (signed out) records nothing.
    api.clock.advance(resolution * 2);
    assert_eq!(
        get(&api, "/console", Some(&"0".repeat(64))).await.status,
        401
    );
    assert_eq!(last_used().await, Some(used));
}

#[tokio::test]
async fn the_live_refresh_script_is_static_cacheable_and_nothing_else_is_served_beside_it() {
    let api = spawn(sqlite_ledger().await).await;
    let session = sign_in(&api, &api.on_call).await;
    let overview = get(&api, "/console", Some(&session)).await;
    let path = payonce_api::console::live::script_path();
    assert!(
        overview
            .text
            .contains(&format!("<script src=\"{path}\" defer></script>")),
        "{}",
        overview.text
    );
    assert!(overview.text.contains(&format!(
        "data-refresh-ms=\"{}\"",
        payonce_api::console::REFRESH.as_millis()
    )));
    assert!(
        overview
            .text
            .contains("id=\"refresh-link\" href=\"/console\"")
    );
    // No session needed (it is the same for everyone and holds nothing of a tenant's).
    let script = get(&api, &path, None).await;
    assert_eq!(script.status, 200);
    assert_eq!(
        script.headers["content-type"],
        "text/javascript; charset=utf-8"
    );
    assert_eq!(
        script.headers["cache-control"],
        format!(
            "public, max-age={}, immutable",
            payonce_api::console::live::SCRIPT_MAX_AGE.as_secs()
        )
    );
    assert_eq!(script.headers["x-content-type-options"], "nosniff");
    assert_eq!(script.text, payonce_api::console::live::SCRIPT);
    // Any other name, an old version's or a path out of the folder, is not found.
    for other in [
        "/console/assets/refresh-0000000000000000.js",
        "/console/assets/refresh.js",
        "/console/assets/..%2F..%2Fstatic%2Fconsole.css",
        "/console/assets/",
    ] {
        assert_eq!(
            get(&api, other, Some(&session)).await.status,
            404,
            "{other}"
        );
    }
    // The operation page and the sign-in page do not load it (nothing there updates itself).
    let sign_in_page = get(&api, "/console/sign-in", None).await;
    assert!(!sign_in_page.text.contains("<script"));
    api.stop().await;
}

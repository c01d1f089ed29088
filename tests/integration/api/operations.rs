//! The operations API: create-or-get, approval binding, cancel, execute returning the stored truth,
//! roles, tenant isolation, error codes, limits, health and the OpenAPI document.

use super::tenant;
use super::{raw_details, spawn, spawn_on_postgres, spawn_with};
use crate::support::{postgres_ledger, sqlite_ledger};
use serde_json::{Value, json};

fn id(op: &Value) -> String {
    op["id"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn create_is_create_or_get_by_business_key() {
    let api = spawn_on_postgres().await;
    let body = json!({"business_key": "invoice:INV-1:pay", "details": raw_details("INV-1", 2048)});
    let first = api.post("/v1/operations", &api.service, body.clone()).await;
    assert_eq!(first.status, 201, "{}", first.text);
    let op = first.json();
    assert_eq!(op["status"], "awaiting_approval");
    assert!(op["id"].as_str().unwrap().starts_with("op_"));
    assert_eq!(op["details"]["amount"], 2048);

    let again = api.post("/v1/operations", &api.service, body).await;
    assert_eq!(again.status, 200, "same details: the existing operation");
    assert_eq!(again.json()["id"], op["id"]);

    let changed =
        json!({"business_key": "invoice:INV-1:pay", "details": raw_details("INV-1", 9999)});
    let conflict = api.post("/v1/operations", &api.service, changed).await;
    assert_eq!(conflict.status, 409);
    assert_eq!(conflict.code(), "business_key_conflict");
    let read = api
        .get(&format!("/v1/operations/{}", id(&op)), &api.service)
        .await;
    assert_eq!(
        read.json()["details"]["amount"],
        2048,
        "a conflict changes nothing"
    );
    assert_eq!(api.operation_count().await, 1);
    api.stop().await;
}

#[tokio::test]
async fn roles_are_enforced_before_anything_is_read() {
    let api = spawn(sqlite_ledger().await).await;
    let op = api.create("INV-2", 2048).await;
    let path = |s: &str| format!("/v1/operations/{}{s}", id(&op));
    let hash = json!({"details_hash": op["details_hash"], "approved_by": "assistant"});

    let none = api.send("GET", &path(""), None, None).await;
    assert_eq!((none.status, none.code().as_str()), (401, "unauthorized"));
    let bogus = api.get(&path(""), "po_service_nope").await;
    assert_eq!((bogus.status, bogus.code().as_str()), (401, "unauthorized"));
    let long = api.get(&path(""), &"k".repeat(10_000)).await;
    assert_eq!(long.status, 401);

    // An assistant key can read and request execution, nothing else.
    for (p, body) in [
        (path("/approve"), hash.clone()),
        (path("/approval-requests"), json!({})),
        (path("/cancel"), json!({})),
    ] {
        let r = api.post(&p, &api.assistant, body).await;
        assert_eq!((r.status, r.code().as_str()), (403, "forbidden"), "{p}");
    }
    let create = api
        .post(
            "/v1/operations",
            &api.assistant,
            json!({"business_key": "invoice:INV-X:pay", "details": raw_details("INV-X", 1)}),
        )
        .await;
    assert_eq!(create.status, 403);
    assert_eq!(api.get(&path(""), &api.assistant).await.status, 200);
    assert_eq!(
        api.post(&path("/execute"), &api.assistant, json!({}))
            .await
            .status,
        200
    );
    // On-call reads; it does not execute or approve.
    assert_eq!(api.get(&path(""), &api.on_call).await.status, 200);
    assert_eq!(
        api.post(&path("/execute"), &api.on_call, json!({}))
            .await
            .status,
        403
    );
    assert_eq!(
        api.post(&path("/approve"), &api.on_call, hash).await.status,
        403
    );

    let after = api.get(&path(""), &api.service).await.json();
    assert_eq!(
        after["status"], "awaiting_approval",
        "nothing the assistant did approved it"
    );
    assert_eq!(after["details"], op["details"], "nor changed its details");
    api.stop().await;
}

#[tokio::test]
async fn another_tenants_operation_is_indistinguishable_from_an_unknown_one() {
    let api = spawn(sqlite_ledger().await).await;
    let op = api.create_ready("INV-3").await;
    let unknown = payonce_core::id::OperationId::generate();
    let theirs = api
        .get(&format!("/v1/operations/{}", id(&op)), &api.other_service)
        .await;
    let nobody = api
        .get(&format!("/v1/operations/{unknown}"), &api.other_service)
        .await;
    let malformed = api.get("/v1/operations/op_nope", &api.other_service).await;
    for r in [&theirs, &nobody, &malformed] {
        assert_eq!(r.status, 404);
        assert_eq!(r.code(), "operation_not_found");
    }
    assert_eq!(
        theirs.text, nobody.text,
        "same body for other-tenant and unknown ids"
    );
    for p in ["/execute", "/cancel", "/approval-requests"] {
        let r = api
            .post(
                &format!("/v1/operations/{}{p}", id(&op)),
                &api.other_service,
                json!({}),
            )
            .await;
        assert_eq!(r.status, 404, "{p}");
    }
    let execute = api
        .post(
            &format!("/v1/operations/{}/execute", id(&op)),
            &api.other_assistant,
            json!({}),
        )
        .await;
    assert_eq!(execute.code(), "operation_not_found");
    let mine = api
        .get(&format!("/v1/operations/{}", id(&op)), &api.service)
        .await
        .json();
    assert_eq!(mine["status"], "ready", "the other tenant changed nothing");
    api.stop().await;
}

#[tokio::test]
async fn approval_binds_to_the_details_hash_and_enqueues() {
    let api = spawn(sqlite_ledger().await).await;
    let op = api.create("INV-4", 2048).await;
    let approve = format!("/v1/operations/{}/approve", id(&op));
    let wrong = api
        .post(
            &approve,
            &api.service,
            json!({"details_hash": "0".repeat(64), "approved_by": "customer:cus_test"}),
        )
        .await;
    assert_eq!(
        (wrong.status, wrong.code().as_str()),
        (409, "approval_mismatch")
    );
    let malformed = api
        .post(
            &approve,
            &api.service,
            json!({"details_hash": "xyz", "approved_by": "customer:cus_test"}),
        )
        .await;
    assert_eq!(
        (malformed.status, malformed.code().as_str()),
        (400, "invalid_request")
    );
    let too_long = api
        .post(
            &approve,
            &api.service,
            json!({"details_hash": op["details_hash"], "approved_by": "a".repeat(129)}),
        )
        .await;
    assert_eq!(too_long.code(), "invalid_request");

    let ok = api
        .post(
            &approve,
            &api.service,
            json!({"details_hash": op["details_hash"], "approved_by": "customer:cus_test"}),
        )
        .await;
    assert_eq!(ok.status, 200, "{}", ok.text);
    let ready = ok.json();
    assert_eq!(ready["status"], "ready");
    assert_eq!(ready["approved_by"], "customer:cus_test");
    assert_eq!(
        ready["approval_expires_at_ms"].as_i64().unwrap(),
        super::T0_MS + 24 * 3600 * 1000
    );
    let approval = api
        .ledger
        .latest_approval(
            &tenant(),
            &payonce_core::id::OperationId::parse(&id(&op)).unwrap(),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(approval.method, "service");

    let read = api
        .get(&format!("/v1/operations/{}", id(&op)), &api.on_call)
        .await
        .json();
    let events: Vec<&str> = read["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(events, ["create", "approve"]);

    // Approved operations get no more links.
    let link = api
        .post(
            &format!("/v1/operations/{}/approval-requests", id(&op)),
            &api.service,
            json!({}),
        )
        .await;
    assert_eq!((link.status, link.code().as_str()), (409, "wrong_state"));
    api.stop().await;
}

#[tokio::test]
async fn cancel_withdraws_and_execute_reports_without_writing() {
    let api = spawn(sqlite_ledger().await).await;
    let waiting = api.create("INV-5", 2048).await;
    let execute = api
        .post(
            &format!("/v1/operations/{}/execute", id(&waiting)),
            &api.assistant,
            json!({}),
        )
        .await
        .json();
    assert_eq!(execute["outcome"], "approval_required");
    assert!(execute.get("confirmation_url").is_none(), "{execute}");
    assert!(!execute.to_string().contains("/confirm/"), "{execute}");
    assert_eq!(execute["new_payment_submitted"], false);

    let ready = api.create_ready("INV-6").await;
    let before = api
        .get(&format!("/v1/operations/{}", id(&ready)), &api.service)
        .await
        .json();
    api.clock.advance(std::time::Duration::from_millis(5_000));
    let r = api
        .post(
            &format!("/v1/operations/{}/execute", id(&ready)),
            &api.service,
            json!({}),
        )
        .await
        .json();
    assert_eq!(r["outcome"], "pending");
    assert_eq!(r["amount"], "20.48 USD");
    let after = api
        .get(&format!("/v1/operations/{}", id(&ready)), &api.service)
        .await
        .json();
    assert_eq!(before, after, "execute wrote nothing");

    let cancelled = api
        .post(
            &format!("/v1/operations/{}/cancel", id(&ready)),
            &api.service,
            json!({}),
        )
        .await;
    assert_eq!(cancelled.json()["status"], "cancelled");
    let again = api
        .post(
            &format!("/v1/operations/{}/cancel", id(&ready)),
            &api.service,
            json!({}),
        )
        .await;
    assert_eq!(again.status, 200, "cancel is idempotent");
    let approve = api
        .post(
            &format!("/v1/operations/{}/approve", id(&ready)),
            &api.service,
            json!({"details_hash": ready["details_hash"], "approved_by": "x"}),
        )
        .await;
    // The ledger treats re-approving the same hash as a replay and reports the stored truth.
    assert_eq!(
        approve.json()["status"],
        "cancelled",
        "a cancelled operation stays cancelled"
    );
    let waiting = api.create("INV-6b", 2048).await;
    api.post(
        &format!("/v1/operations/{}/cancel", id(&waiting)),
        &api.service,
        json!({}),
    )
    .await;
    let never_approved = api
        .post(
            &format!("/v1/operations/{}/approve", id(&waiting)),
            &api.service,
            json!({"details_hash": waiting["details_hash"], "approved_by": "x"}),
        )
        .await;
    assert_eq!(
        (never_approved.status, never_approved.code().as_str()),
        (409, "wrong_state")
    );
    api.stop().await;
}

#[tokio::test]
async fn bad_bodies_get_stable_codes_and_limits_hold() {
    let api = spawn_with(sqlite_ledger().await, |c| c.body_limit_bytes = 2_048).await;
    let url = format!("{}/v1/operations", api.base);
    let raw = |body: &'static str, content_type: &'static str| {
        api.http
            .post(&url)
            .bearer_auth(&api.service)
            .header("content-type", content_type)
            .body(body)
    };
    let syntax = raw("{nope", "application/json").send().await.unwrap();
    assert_eq!(syntax.status(), 400);
    assert_eq!(
        syntax.json::<Value>().await.unwrap()["error"]["code"],
        "invalid_json"
    );
    let media = raw("{}", "text/plain").send().await.unwrap();
    assert_eq!(media.status(), 415);
    assert_eq!(
        media.json::<Value>().await.unwrap()["error"]["code"],
        "unsupported_media_type"
    );

    let unknown_field = api
        .post(
            "/v1/operations",
            &api.service,
            json!({"business_key": "k", "details": raw_details("I", 1), "tenant": "globex"}),
        )
        .await;
    assert_eq!(
        unknown_field.code(),
        "invalid_json",
        "a tenant can't be passed in"
    );
    let mut details = raw_details("INV-7", 0);
    let zero = api
        .post(
            "/v1/operations",
            &api.service,
            json!({"business_key": "k", "details": details}),
        )
        .await;
    assert_eq!(
        (zero.status, zero.code().as_str()),
        (400, "invalid_request")
    );
    details = raw_details("INV-7", 100_000_000);
    let huge = api
        .post(
            "/v1/operations",
            &api.service,
            json!({"business_key": "k", "details": details}),
        )
        .await;
    assert_eq!(huge.code(), "invalid_request");
    let key = api
        .post(
            "/v1/operations",
            &api.service,
            json!({"business_key": "k".repeat(201), "details": raw_details("INV-7", 1)}),
        )
        .await;
    assert_eq!(key.code(), "invalid_request");
    assert!(
        key.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("business key")
    );

    // A refund's payment reference comes from the ledger, never from a body: /v1/operations refuses it.
    let mut refund = raw_details("INV-7", 1);
    refund["kind"] = json!("refund");
    refund["refund_of"] = json!({
        "payment_operation": format!("op_{}", "a".repeat(32)),
        "payment_reference": "pi_forged",
        "reason": "duplicate",
    });
    let forged = api
        .post(
            "/v1/operations",
            &api.service,
            json!({"business_key": "k", "details": refund}),
        )
        .await;
    assert_eq!(
        (forged.status, forged.code().as_str()),
        (400, "invalid_request")
    );
    assert!(
        forged.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("POST /v1/refunds"),
        "{}",
        forged.text
    );

    let big =
        json!({"business_key": "k", "details": raw_details("INV-7", 1), "pad": "x".repeat(4_096)});
    let too_big = api.post("/v1/operations", &api.service, big).await;
    assert_eq!(
        (too_big.status, too_big.code().as_str()),
        (413, "body_too_large")
    );

    let nowhere = api.get("/v1/nowhere", &api.service).await;
    assert_eq!(
        (nowhere.status, nowhere.code().as_str()),
        (404, "not_found")
    );
    let method = api
        .send("DELETE", "/v1/operations", Some(&api.service), None)
        .await;
    assert_eq!(
        (method.status, method.code().as_str()),
        (405, "method_not_allowed")
    );
    assert_eq!(api.operation_count().await, 0);
    api.stop().await;
}

#[tokio::test]
async fn health_and_readiness() {
    let (ledger, url) = postgres_ledger().await;
    let api = spawn(ledger).await;
    let live = api.send("GET", "/healthz", None, None).await;
    assert_eq!(
        (live.status, live.json()["status"].as_str()),
        (200, Some("ok"))
    );
    let ready = api.send("GET", "/readyz", None, None).await;
    assert_eq!(ready.status, 200);
    assert_eq!(ready.json()["store"], "postgres");

    // The database goes away: not ready, an opaque 503, still alive.
    let (admin, name) = url.rsplit_once('/').unwrap();
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&format!("{admin}/postgres"))
        .await
        .unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE {name} WITH (FORCE)"
    )))
    .execute(&mut conn)
    .await
    .unwrap();
    let gone = api.send("GET", "/readyz", None, None).await;
    assert_eq!((gone.status, gone.code().as_str()), (503, "unavailable"));
    assert!(!gone.text.contains(name), "no internals in the body");
    let op = api
        .get(
            &format!(
                "/v1/operations/{}",
                payonce_core::id::OperationId::generate()
            ),
            &api.service,
        )
        .await;
    assert!(op.status == 500 || op.status == 503, "{}", op.text);
    assert!(
        !op.text.contains("database"),
        "5xx bodies are opaque: {}",
        op.text
    );
    assert_eq!(api.send("GET", "/healthz", None, None).await.status, 200);
    api.stop().await;
}

#[tokio::test]
async fn the_served_openapi_document_is_the_checked_in_one_and_covers_every_route() {
    let api = spawn(sqlite_ledger().await).await;
    let served = api.send("GET", "/openapi.json", None, None).await;
    assert_eq!(served.status, 200);
    assert_eq!(served.header("content-type"), "application/json");
    let file = std::fs::read_to_string(super::repo_root().join("api/openapi.json")).unwrap();
    assert_eq!(
        served.text, file,
        "GET /openapi.json serves api/openapi.json"
    );
    let doc = served.json();
    assert_eq!(doc["openapi"], "3.1.0");
    let op = api.create("INV-8", 2048).await;
    for (method, path) in payonce_api::openapi::ROUTES {
        assert!(
            doc["paths"][path][method].is_object(),
            "{method} {path} is not documented"
        );
        // The router serves it: whatever the answer, it is not "no such route".
        let concrete = path
            .replace("{id}", op["id"].as_str().unwrap())
            .replace("{token}", &"0".repeat(64));
        let r = api
            .send(
                &method.to_uppercase(),
                &format!("{concrete}?format=mcp"),
                Some(&api.service),
                None,
            )
            .await;
        let code = r
            .json_or_none()
            .and_then(|v| v["error"]["code"].as_str().map(str::to_string));
        assert!(
            r.status != 405 && code.as_deref() != Some("not_found"),
            "{method} {path} is not routed: {} {}",
            r.status,
            r.text
        );
    }
    api.stop().await;
}

impl super::Reply {
    fn json_or_none(&self) -> Option<Value> {
        serde_json::from_str(&self.text).ok()
    }
}

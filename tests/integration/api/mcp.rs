//! The MCP server at `/mcp` with the official MCP Python SDK client (tests/mcp/client.py): initialize,
//! list tools, call both tools; plus bearer auth on the raw transport.

use super::tenant;
use super::{repo_root, spawn};
use crate::support::{pinned_python, sqlite_ledger};
use payonce_core::id::OperationId;
use serde_json::{Value, json};
use std::process::Stdio;
use std::time::Duration;

/// How long the Python client may take (interpreter start-up included).
const CLIENT_DEADLINE: Duration = Duration::from_secs(90);

/// The MCP client's Python, with the MCP Inspector CLI beside it (tests/mcp/setup.sh on a fresh
/// machine).
pub fn ensure_client() -> std::path::PathBuf {
    pinned_python("mcp", |dir| {
        dir.join("node_modules/.bin/mcp-inspector").exists()
    })
}

fn structured(call: &Value) -> &Value {
    &call["structuredContent"]
}

/// Runs tests/mcp/client.py in `mode` (`default` or an explicit older version) against `api`.
async fn run_client(
    python: &std::path::Path,
    api: &super::TestApi,
    mode: &str,
    elicit: bool,
    ready: &str,
    waiting: &str,
) -> Value {
    let child = tokio::process::Command::new(python)
        .arg(repo_root().join("tests/mcp/client.py"))
        .env("PAYONCE_MCP_URL", format!("{}/mcp", api.base))
        .env("PAYONCE_MCP_KEY", &api.assistant)
        .env("PAYONCE_READY_OP", ready)
        .env("PAYONCE_WAITING_OP", waiting)
        .env("PAYONCE_MCP_MODE", mode)
        .env("PAYONCE_MCP_ELICIT", if elicit { "1" } else { "0" })
        // The person the client shows the page to is the customer, signed in to the merchant's app:
        // the page needs the tenant app's assertion besides the link (issue 13).
        .env(
            "PAYONCE_CUSTOMER_ASSERTION",
            api.assertion(waiting, "cus_test", 120_000),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run the MCP client");
    let output = tokio::time::timeout(CLIENT_DEADLINE, child.wait_with_output())
        .await
        .expect("the MCP client finishes in time")
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "client.py ({mode}) failed:\n{stderr}"
    );
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("client.py ({mode}) printed no JSON ({e}):\n{stderr}"))
}

/// The SDK's default client negotiates 2026-07-28; its session client negotiates each older version
/// explicitly. Every one lists both tools with their output schema and gets structured outcomes.
#[tokio::test]
async fn the_official_python_client_works_at_every_protocol_version() {
    let python = ensure_client();
    let api = spawn(sqlite_ledger().await).await;
    let ready = api.create_ready("INV-100").await;
    let waiting = api.create("INV-101", 5_000).await;
    let ready_id = ready["id"].as_str().unwrap();
    let waiting_id = waiting["id"].as_str().unwrap();

    for (mode, expected_version) in [
        ("default", "2026-07-28"),
        ("2025-11-25", "2025-11-25"),
        ("2025-06-18", "2025-06-18"),
        ("2025-03-26", "2025-03-26"),
    ] {
        let out = run_client(&python, &api, mode, false, ready_id, waiting_id).await;
        assert_eq!(out["protocol_version"], expected_version, "{mode}: {out}");
        let names: Vec<&str> = out["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["pay_invoice", "get_payment_status", "request_refund"],
            "{mode}"
        );
        let pay = &out["tools"][0];
        assert_eq!(pay["inputSchema"]["additionalProperties"], false);
        assert_eq!(
            pay["outputSchema"]["required"][0], "outcome",
            "{mode}: {pay}"
        );
        assert_eq!(
            (
                pay["annotations"]["destructiveHint"].as_bool(),
                pay["annotations"]["idempotentHint"].as_bool()
            ),
            (Some(false), Some(true))
        );
        assert_eq!(out["tools"][1]["annotations"]["readOnlyHint"], true);

        let calls = &out["calls"];
        for label in ["status_ready", "pay_ready", "pay_ready_again"] {
            let c = &calls[label];
            assert_eq!(c["isError"], false, "{mode} {label}: {c}");
            assert_eq!(structured(c)["operation_id"], ready_id);
            assert_eq!(structured(c)["outcome"], "pending");
            assert!(
                structured(c)["retry_advice"]
                    .as_str()
                    .unwrap()
                    .contains("Do not propose or start a new payment")
            );
            assert_eq!(structured(c)["amount_minor"], 2048);
            let text: Value =
                serde_json::from_str(c["content"][0]["text"].as_str().unwrap()).unwrap();
            assert_eq!(&text, structured(c), "the text carries the same fields");
        }
        // No elicitation declared: the plain outcome, and the URL nowhere the model could read it.
        let waiting_call = &calls["pay_waiting"];
        assert_eq!(
            structured(waiting_call)["outcome"],
            "approval_required",
            "{mode}"
        );
        assert_eq!(structured(waiting_call)["amount"], "50.00 USD");
        assert!(
            !waiting_call.to_string().contains("/confirm/"),
            "{mode}: {waiting_call}"
        );
        assert!(out["elicitations"].as_array().unwrap().is_empty());
        assert_eq!(calls["pay_with_amount"]["isError"], true);
        assert_eq!(
            structured(&calls["pay_with_amount"])["error"]["code"],
            "invalid_arguments"
        );
        assert_eq!(
            structured(&calls["status_unknown_op"])["outcome"],
            "not_found"
        );
    }

    // Every call is recorded under provider "mcp" with its JSON-RPC id; no operation was created.
    let recorded = api
        .ledger
        .tool_calls(&tenant(), &OperationId::parse(ready_id).unwrap())
        .await
        .unwrap();
    assert_eq!(recorded.len(), 4 * 3, "{recorded:?}");
    assert!(recorded.iter().all(|(p, id, _)| p == "mcp" && id.is_some()));
    assert_eq!(api.operation_count().await, 2);
    let after = api
        .get(&format!("/v1/operations/{ready_id}"), &api.service)
        .await
        .json();
    assert_eq!(after["status"], "ready");
    let still = api
        .get(&format!("/v1/operations/{waiting_id}"), &api.service)
        .await
        .json();
    assert_eq!(still["status"], "awaiting_approval");
    api.stop().await;
}

/// A client that declares URL-mode elicitation is asked to show the person the confirmation page;
/// the URL reaches the person (the callback), never a tool result; once the customer approved
/// there, the retried call proceeds.
#[tokio::test]
async fn url_elicitation_takes_the_customer_to_the_page_and_the_retry_proceeds() {
    let python = ensure_client();
    let api = spawn(sqlite_ledger().await).await;
    let ready = api.create_ready("INV-110").await;
    let waiting = api.create("INV-111", 7_500).await;
    let waiting_id = waiting["id"].as_str().unwrap();
    let out = run_client(
        &python,
        &api,
        "default",
        true,
        ready["id"].as_str().unwrap(),
        waiting_id,
    )
    .await;
    assert_eq!(out["protocol_version"], "2026-07-28");
    let asked = out["elicitations"].as_array().unwrap();
    assert_eq!(asked.len(), 1, "{out}");
    assert_eq!(asked[0]["mode"], "url");
    assert!(asked[0]["url"].as_str().unwrap().contains("/confirm/"));
    assert!(
        asked[0]["message"]
            .as_str()
            .unwrap()
            .contains("the payment of $75.00 for invoice INV-111")
    );
    let paid = &out["calls"]["pay_waiting"];
    assert_eq!(structured(paid)["outcome"], "pending", "{paid}");
    for call in out["calls"].as_object().unwrap().values() {
        assert!(!call.to_string().contains("/confirm/"), "{call}");
    }
    let after = api
        .get(&format!("/v1/operations/{waiting_id}"), &api.service)
        .await
        .json();
    assert_eq!(
        after["status"], "ready",
        "the customer's approval went through the page"
    );
    assert_eq!(api.operation_count().await, 2);

    // A 2025-era client that declared URL elicitation at initialize: a stateless server cannot know
    // that on its tools/call, so it is not asked; it gets the plain outcome, without the URL.
    let older = api.create("INV-112", 7_500).await;
    let out = run_client(
        &python,
        &api,
        "2025-11-25",
        true,
        ready["id"].as_str().unwrap(),
        older["id"].as_str().unwrap(),
    )
    .await;
    assert!(out["elicitations"].as_array().unwrap().is_empty(), "{out}");
    let waiting_call = &out["calls"]["pay_waiting"];
    assert_eq!(structured(waiting_call)["outcome"], "approval_required");
    assert!(!waiting_call.to_string().contains("/confirm/"));
    api.stop().await;
}

#[tokio::test]
async fn mcp_needs_an_assistant_or_service_key() {
    let api = spawn(sqlite_ledger().await).await;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}});
    let post = |key: Option<String>| {
        let mut req = api
            .http
            .post(format!("{}/mcp", api.base))
            .header("accept", "application/json, text/event-stream")
            .json(&init);
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        req.send()
    };
    let none = post(None).await.unwrap();
    assert_eq!(none.status(), 401);
    assert_eq!(
        none.json::<Value>().await.unwrap()["error"]["code"],
        "unauthorized"
    );
    let on_call = post(Some(api.on_call.clone())).await.unwrap();
    assert_eq!(on_call.status(), 403);
    let ok = post(Some(api.assistant.clone())).await.unwrap();
    assert_eq!(ok.status(), 200);
    let body: Value = ok.json().await.unwrap();
    assert_eq!(body["result"]["serverInfo"]["name"], "payonce");
    assert!(body["result"]["capabilities"]["tools"].is_object());
    api.stop().await;
}

/// POSTs a raw body to /mcp with the assistant key and optional extra headers.
async fn raw_post(
    api: &super::TestApi,
    body: Vec<u8>,
    headers: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut req = api
        .http
        .post(format!("{}/mcp", api.base))
        .bearer_auth(&api.assistant)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let h = r.headers().clone();
    (status, h, r.text().await.unwrap())
}

/// A 2026-07-28 `tools/call` as the spec writes it: version header and per-request `_meta`.
fn modern_call(id: u64, params: Value) -> Value {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
}

const MODERN: [(&str, &str); 1] = [("mcp-protocol-version", "2026-07-28")];
/// A 2026-07-28 `tools/call` of pay_invoice: the SEP-2243 headers the transport requires.
const MODERN_PAY: [(&str, &str); 3] = [
    ("mcp-protocol-version", "2026-07-28"),
    ("mcp-method", "tools/call"),
    ("mcp-name", "pay_invoice"),
];
const MODERN_LIST: [(&str, &str); 2] = [
    ("mcp-protocol-version", "2026-07-28"),
    ("mcp-method", "tools/list"),
];

#[tokio::test]
async fn malformed_messages_get_400_and_the_json_rpc_code() {
    let api = spawn(sqlite_ledger().await).await;
    let deep = format!(
        "{}{}",
        "[".repeat(payonce_api::mcp::JSON_DEPTH_MAX + 1),
        "]".repeat(payonce_api::mcp::JSON_DEPTH_MAX + 1)
    );
    for (what, body, code) in [
        (
            "malformed JSON",
            b"{\"jsonrpc\": \"2.0\", ".to_vec(),
            -32700,
        ),
        ("invalid UTF-8", vec![b'{', 0xff, 0xfe, b'}'], -32700),
        ("over-deep nesting", deep.into_bytes(), -32700),
        ("not an object", b"[]".to_vec(), -32600),
        (
            "no jsonrpc",
            br#"{"id": 1, "method": "tools/list"}"#.to_vec(),
            -32600,
        ),
        (
            "tools/call without a name",
            br#"{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"arguments": {}}}"#
                .to_vec(),
            -32602,
        ),
        (
            "no method, no result",
            br#"{"jsonrpc": "2.0", "id": 8}"#.to_vec(),
            -32600,
        ),
        (
            "params not an object",
            br#"{"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": [1]}"#.to_vec(),
            -32602,
        ),
    ] {
        let (status, headers, text) = raw_post(&api, body, &MODERN).await;
        assert_eq!(status, 400, "{what}: {text}");
        assert_eq!(headers["content-type"], "application/json", "{what}");
        let body: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: {e}: {text}"));
        assert_eq!(body["jsonrpc"], "2.0");
        assert_eq!(body["error"]["code"], code, "{what}: {text}");
        // The id, when it could not be read, is null, never missing (JSON-RPC 2.0, section 5).
        assert!(body.get("id").is_some(), "{what}: {text}");
        if code == -32700 || what == "not an object" {
            assert_eq!(body["id"], Value::Null, "{what}: {text}");
        }
    }
    // The id is echoed when it could be read.
    let (_, _, text) = raw_post(
        &api,
        br#"{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {}}"#.to_vec(),
        &MODERN,
    )
    .await;
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap()["id"], 7);
    assert_eq!(api.operation_count().await, 0);
    api.stop().await;
}

#[tokio::test]
async fn a_disallowed_origin_is_refused_and_allowed_ones_pass() {
    let api = super::spawn_with(sqlite_ledger().await, |c| {
        c.mcp_allowed_origins = vec!["https://inspector.example".into()];
    })
    .await;
    let list = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
        "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                             "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
                             "io.modelcontextprotocol/clientCapabilities": {}}}}))
    .unwrap();
    let (status, _, text) = raw_post(
        &api,
        list.clone(),
        &[
            MODERN_LIST[0],
            MODERN_LIST[1],
            ("origin", "https://evil.example"),
        ],
    )
    .await;
    assert_eq!(status, 403, "{text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["id"], Value::Null, "an id null, not missing: {body}");
    assert_eq!(body["error"]["code"], -32600);
    // Unauthenticated or not, a foreign page gets nothing.
    let anonymous = api
        .http
        .post(format!("{}/mcp", api.base))
        .header("origin", "http://attacker.test")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 403);
    for origin in ["https://inspector.example", api.base.as_str()] {
        let (status, _, text) = raw_post(
            &api,
            list.clone(),
            &[MODERN_LIST[0], MODERN_LIST[1], ("origin", origin)],
        )
        .await;
        assert_eq!(status, 200, "{origin}: {text}");
    }
    let (status, _, _) = raw_post(&api, list, &MODERN_LIST).await;
    assert_eq!(status, 200, "no Origin: not a browser, the key decides");
    api.stop().await;
}

#[tokio::test]
async fn every_401_names_the_bearer_scheme() {
    let api = spawn(sqlite_ledger().await).await;
    for (method, path) in [
        ("POST", "/mcp"),
        ("GET", "/v1/tools?format=mcp"),
        ("POST", "/v1/operations"),
    ] {
        let r = api.send(method, path, None, Some(json!({}))).await;
        assert_eq!(r.status, 401, "{path}");
        assert_eq!(
            r.header("www-authenticate"),
            "Bearer realm=\"payonce\"",
            "{path}"
        );
    }
    let r = api
        .send("GET", "/v1/tools?format=mcp", Some("pk_wrong"), None)
        .await;
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate"), "Bearer realm=\"payonce\"");
    api.stop().await;
}

#[tokio::test]
async fn a_2026_tool_result_says_it_is_complete_and_keys_replay_it() {
    let api = spawn(sqlite_ledger().await).await;
    let ready = api.create_ready("INV-120").await;
    let id = ready["id"].as_str().unwrap();
    let call = |rpc_id: u64, key: Option<&str>, op: &str| {
        let mut params = json!({"name": "pay_invoice", "arguments": {"operation_id": op}});
        if let Some(k) = key {
            params["idempotencyKey"] = json!(k);
        }
        serde_json::to_vec(&modern_call(rpc_id, params)).unwrap()
    };
    let (status, _, text) = raw_post(&api, call(1, None, id), &MODERN_PAY).await;
    assert_eq!(status, 200, "{text}");
    let first: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(first["result"]["resultType"], "complete", "{text}");
    assert_eq!(first["result"]["structuredContent"]["outcome"], "pending");

    // The key's first answer is kept; a retry with the same arguments gets it back without the tool
    // running (no new correlation record), even after the operation moved on.
    let (_, _, text) = raw_post(&api, call(2, Some("retry-1"), id), &MODERN_PAY).await;
    let keyed: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(keyed["result"]["structuredContent"]["outcome"], "pending");
    let op_id = OperationId::parse(id).unwrap();
    let recorded = api
        .ledger
        .tool_calls(&tenant(), &op_id)
        .await
        .unwrap()
        .len();
    api.post(
        &format!("/v1/operations/{id}/cancel"),
        &api.service,
        json!({}),
    )
    .await;
    let (_, _, text) = raw_post(&api, call(3, Some("retry-1"), id), &MODERN_PAY).await;
    let replayed: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(replayed["id"], 3);
    assert_eq!(
        replayed["result"], keyed["result"],
        "the stored answer, replayed"
    );
    assert_eq!(
        api.ledger
            .tool_calls(&tenant(), &op_id)
            .await
            .unwrap()
            .len(),
        recorded
    );
    // Without the key the truth is read again.
    let (_, _, text) = raw_post(&api, call(4, None, id), &MODERN_PAY).await;
    let fresh: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(fresh["result"]["structuredContent"]["outcome"], "conflict");

    // The same key with other arguments is an invalid-params error and runs nothing.
    let other = api.create_ready("INV-121").await;
    let (status, _, text) = raw_post(
        &api,
        call(5, Some("retry-1"), other["id"].as_str().unwrap()),
        &MODERN_PAY,
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let refused: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(refused["error"]["code"], -32602, "{text}");
    assert_eq!(refused["error"]["data"]["reason"], "idempotency_key_reused");
    let other_id = OperationId::parse(other["id"].as_str().unwrap()).unwrap();
    assert!(
        api.ledger
            .tool_calls(&tenant(), &other_id)
            .await
            .unwrap()
            .is_empty()
    );

    // Keys are bounded.
    let long = "k".repeat(payonce_api::mcp::IDEMPOTENCY_KEY_LEN_MAX + 1);
    let (status, _, text) = raw_post(&api, call(6, Some(&long), id), &MODERN_PAY).await;
    assert_eq!(status, 400, "{text}");
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["error"]["code"],
        -32602
    );

    // The capability is advertised.
    let discover = serde_json::to_vec(
        &json!({"jsonrpc": "2.0", "id": 9, "method": "server/discover",
        "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                             "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
                             "io.modelcontextprotocol/clientCapabilities": {}}}}),
    )
    .unwrap();
    let (_, _, text) = raw_post(
        &api,
        discover,
        &[MODERN[0], ("mcp-method", "server/discover")],
    )
    .await;
    assert!(text.contains("io.payonce/idempotency"), "{text}");
    api.stop().await;
}

/// Runs the MCP Inspector CLI (tests/mcp/node_modules, pinned) against `api` with the assistant key,
/// in protocol era `era` (`legacy`: the initialize handshake; `modern`: pinned 2026-07-28).
async fn inspector(api: &super::TestApi, era: &str, args: &[&str]) -> Value {
    ensure_client();
    let cli = repo_root().join("tests/mcp/node_modules/.bin/mcp-inspector");
    // One folder per server and era: tests run in parallel.
    let port = api.base.rsplit(':').next().unwrap_or("0");
    let dir = std::env::temp_dir().join(format!("payonce-inspector-{port}-{era}"));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("mcp.json");
    let servers = json!({"mcpServers": {"payonce": {
        "type": "http", "url": format!("{}/mcp", api.base), "protocolEra": era}}});
    std::fs::write(&config, servers.to_string()).unwrap();
    let auth = format!("Authorization: Bearer {}", api.assistant);
    let child = tokio::process::Command::new(cli)
        .arg("--cli")
        .arg("--config")
        .arg(&config)
        .args(["--server", "payonce", "--header", &auth])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run the MCP Inspector CLI");
    let output = tokio::time::timeout(CLIENT_DEADLINE, child.wait_with_output())
        .await
        .expect("the Inspector finishes in time")
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "inspector {era} {args:?} failed:\n{stdout}\n{stderr}"
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!("inspector {era} {args:?} printed no JSON ({e}):\n{stdout}\n{stderr}")
    })
}

/// The MCP Inspector CLI (2.12.0) lists the tools and calls them, in both protocol eras.
#[tokio::test]
async fn the_mcp_inspector_cli_lists_and_calls_the_tools() {
    let api = spawn(sqlite_ledger().await).await;
    let ready = api.create_ready("INV-130").await;
    let id = ready["id"].as_str().unwrap();
    let arg = format!("operation_id={id}");
    for era in ["legacy", "modern"] {
        let listed = inspector(&api, era, &["--method", "tools/list"]).await;
        let tools = listed["tools"].as_array().unwrap();
        assert_eq!(tools.len(), 3, "{era}: {listed}");
        assert!(tools.iter().all(|t| t["outputSchema"].is_object()));
        let paid = inspector(
            &api,
            era,
            &[
                "--method",
                "tools/call",
                "--tool-name",
                "pay_invoice",
                "--tool-arg",
                &arg,
            ],
        )
        .await;
        assert_eq!(
            paid["structuredContent"]["outcome"], "pending",
            "{era}: {paid}"
        );
        assert_eq!(paid["isError"], false);
    }
    api.stop().await;
}

/// The 2026-07-28 wire shape of the confirmation question, and of the answer after the person
/// declined: the URL is only in the input request, addressed to the client.
#[tokio::test]
async fn the_confirmation_question_and_a_declined_retry_on_the_wire() {
    let api = spawn(sqlite_ledger().await).await;
    let waiting = api.create("INV-150", 1_000).await;
    let id = waiting["id"].as_str().unwrap();
    let with_url_elicitation = |rpc_id: u64, extra: Value| {
        let mut params = json!({"name": "pay_invoice", "arguments": {"operation_id": id}});
        for (k, v) in extra.as_object().unwrap() {
            params[k] = v.clone();
        }
        let mut call = modern_call(rpc_id, params);
        call["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
            json!({"elicitation": {"url": {}}});
        serde_json::to_vec(&call).unwrap()
    };
    let (status, _, text) = raw_post(&api, with_url_elicitation(1, json!({})), &MODERN_PAY).await;
    assert_eq!(status, 200, "{text}");
    let asked: Value = serde_json::from_str(&text).unwrap();
    let result = &asked["result"];
    assert_eq!(result["resultType"], "input_required", "{text}");
    let request = &result["inputRequests"]["payonce_confirmation"];
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(request["params"]["mode"], "url");
    assert!(
        request["params"]["url"]
            .as_str()
            .unwrap()
            .contains("/confirm/")
    );
    assert!(result.get("content").is_none() && result.get("structuredContent").is_none());
    // Issue 53, item 9: the spec requires a URL-mode elicitation to carry a unique, non-empty id.
    let elicitation_id = request["params"]["elicitationId"]
        .as_str()
        .unwrap_or_default();
    assert!(!elicitation_id.is_empty(), "no elicitationId: {text}");

    let (_, _, text) = raw_post(
        &api,
        with_url_elicitation(
            2,
            json!({"inputResponses": {"payonce_confirmation": {"action": "decline"}},
                   "idempotencyKey": "k-continuation"}),
        ),
        &MODERN_PAY,
    )
    .await;
    let answered: Value = serde_json::from_str(&text).unwrap();
    let result = &answered["result"];
    assert_eq!(result["resultType"], "complete", "{text}");
    assert_eq!(result["structuredContent"]["outcome"], "approval_required");
    assert!(
        result["structuredContent"]["message"]
            .as_str()
            .unwrap()
            .contains("did not open")
    );
    assert!(!text.contains("/confirm/"), "{text}");

    // The continuation kept nothing under its key: the key's first plain call runs the tool.
    let (_, _, text) = raw_post(
        &api,
        with_url_elicitation(4, json!({"idempotencyKey": "k-continuation"})),
        &MODERN_PAY,
    )
    .await;
    let keyed: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(keyed["result"]["resultType"], "input_required", "{text}");
    let again =
        &keyed["result"]["inputRequests"]["payonce_confirmation"]["params"]["elicitationId"];
    assert!(
        again
            .as_str()
            .is_some_and(|a| !a.is_empty() && a != elicitation_id),
        "each question has an id of its own: {text}"
    );

    // Without the capability: the plain outcome, no question.
    let plain = serde_json::to_vec(&modern_call(
        3,
        json!({"name": "pay_invoice", "arguments": {"operation_id": id}}),
    ))
    .unwrap();
    let (_, _, text) = raw_post(&api, plain, &MODERN_PAY).await;
    let plain: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(plain["result"]["resultType"], "complete");
    assert_eq!(
        plain["result"]["structuredContent"]["outcome"],
        "approval_required"
    );
    assert!(!text.contains("/confirm/"), "{text}");
    api.stop().await;
}

#[tokio::test]
async fn unknown_methods_and_oversized_bodies_get_json_rpc_errors() {
    let api = spawn(sqlite_ledger().await).await;
    let unknown = serde_json::to_vec(
        &json!({"jsonrpc": "2.0", "id": 4, "method": "payments/steal",
        "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                             "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
                             "io.modelcontextprotocol/clientCapabilities": {}}}}),
    )
    .unwrap();
    let (_, _, text) = raw_post(
        &api,
        unknown,
        &[MODERN[0], ("mcp-method", "payments/steal")],
    )
    .await;
    let body: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(body["error"]["code"], -32601, "{text}");
    let unknown_tool = serde_json::to_vec(&modern_call(
        5,
        json!({"name": "refund_everything", "arguments": {}}),
    ))
    .unwrap();
    let (_, _, text) = raw_post(
        &api,
        unknown_tool,
        &[
            MODERN[0],
            ("mcp-method", "tools/call"),
            ("mcp-name", "refund_everything"),
        ],
    )
    .await;
    let body: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(body["error"]["code"], -32602, "{text}");
    assert_eq!(body["error"]["message"], "Unknown tool: refund_everything");

    let limit = payonce_api::config::BODY_LIMIT_BYTES_DEFAULT;
    let big = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"pad\":\"{}\"}}",
        "x".repeat(limit)
    );
    let (status, _, text) = raw_post(&api, big.into_bytes(), &MODERN_LIST).await;
    assert_eq!(status, 413, "{text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["error"]["code"], -32600);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&limit.to_string())
    );
    api.stop().await;
}

/// An MCP client that declares URL elicitation receives confirmation links: each approves nothing
/// alone, but each one-time-code link allows a few guesses, so however often an assistant calls and
/// however much time passes, it is shown at most `ASSISTANT_LINKS_TOTAL_MAX` links for an operation.
#[tokio::test]
async fn elicited_links_are_bounded_for_good() {
    use payonce_api::verify::{ASSISTANT_LINKS_TOTAL_MAX, ASSISTANT_OPEN_LINKS_MAX};
    let api = spawn(sqlite_ledger().await).await;
    let waiting = api.create("INV-155", 1_000).await;
    let id = waiting["id"].as_str().unwrap();
    let mut elicited_per_round = Vec::new();
    let mut rpc_id = 0_u64;
    for _round in 0..4 {
        let mut elicited = 0_u32;
        for _ in 0..ASSISTANT_OPEN_LINKS_MAX + 2 {
            rpc_id += 1;
            let mut call = modern_call(
                rpc_id,
                json!({"name": "pay_invoice", "arguments": {"operation_id": id}}),
            );
            call["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
                json!({"elicitation": {"url": {}}});
            let (status, _, text) =
                raw_post(&api, serde_json::to_vec(&call).unwrap(), &MODERN_PAY).await;
            assert_eq!(status, 200, "{text}");
            let v: Value = serde_json::from_str(&text).unwrap();
            match v["result"]["resultType"].as_str() {
                Some("input_required") => elicited += 1,
                Some("complete") => {
                    assert_eq!(
                        v["result"]["structuredContent"]["outcome"],
                        "approval_required"
                    );
                    assert!(!text.contains("/confirm/"), "{text}");
                }
                other => panic!("unexpected result type {other:?}: {text}"),
            }
        }
        assert!(elicited <= ASSISTANT_OPEN_LINKS_MAX, "round: {elicited}");
        elicited_per_round.push(elicited);
        // Every open link expires; only the total bound is left.
        api.clock
            .advance(std::time::Duration::from_millis(24 * 3600 * 1000));
    }
    let total: u32 = elicited_per_round.iter().sum();
    assert!(elicited_per_round[0] >= 1, "{elicited_per_round:?}");
    assert!(total <= ASSISTANT_LINKS_TOTAL_MAX, "{elicited_per_round:?}");
    assert_eq!(elicited_per_round[3], 0, "{elicited_per_round:?}");
    api.stop().await;
}

/// The question names the amount as the page it opens writes it (`¥1,299`, not `1299 JPY`).
#[tokio::test]
async fn the_confirmation_question_writes_the_amount_as_the_page_does() {
    let api = spawn(sqlite_ledger().await).await;
    let mut details = super::raw_details("INV-151", 1_299);
    details["currency"] = json!("jpy");
    let created = api
        .post(
            "/v1/operations",
            &api.service,
            json!({"business_key": "invoice:INV-151:pay", "details": details}),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let id = created.json()["id"].as_str().unwrap().to_string();
    let mut call = modern_call(
        1,
        json!({"name": "pay_invoice", "arguments": {"operation_id": id}}),
    );
    call["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
        json!({"elicitation": {"url": {}}});
    let (status, _, text) = raw_post(&api, serde_json::to_vec(&call).unwrap(), &MODERN_PAY).await;
    assert_eq!(status, 200, "{text}");
    let asked: Value = serde_json::from_str(&text).unwrap();
    let params = &asked["result"]["inputRequests"]["payonce_confirmation"]["params"];
    let message = params["message"].as_str().unwrap();
    assert!(
        message.contains("the payment of ¥1,299 for invoice INV-151"),
        "{message}"
    );
    // The page the customer then opens (signed in by the tenant's app) writes the same amount.
    let url = api.signed_in(params["url"].as_str().unwrap(), &id);
    let page = super::confirm::page(&api, &url).await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(page.text.contains("¥1,299"), "{}", page.text);
    api.stop().await;
}

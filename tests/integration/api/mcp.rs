//! The MCP server at `/mcp` with the official MCP Python SDK client (tests/mcp/client.py): initialize,
//! list tools, call both tools; plus bearer auth on the raw transport.

use super::{repo_root, spawn};
use crate::support::sqlite_ledger;
use payonce_shared::id::OperationId;
use serde_json::{Value, json};
use std::process::Stdio;
use std::time::Duration;

/// How long the Python client may take (interpreter start-up included).
const CLIENT_DEADLINE: Duration = Duration::from_secs(90);

/// Runs tests/mcp/setup.sh when the venv is missing: a fresh machine installs the client instead of
/// skipping the test.
pub fn ensure_client() -> std::path::PathBuf {
    let dir = repo_root().join("tests/mcp");
    let python = dir.join(".venv/bin/python");
    let installed = python.exists()
        && std::process::Command::new(&python)
            .args(["-c", "import mcp"])
            .status()
            .is_ok_and(|s| s.success());
    if !installed {
        let status = std::process::Command::new("bash")
            .arg(dir.join("setup.sh"))
            .status()
            .expect("run tests/mcp/setup.sh");
        assert!(status.success(), "tests/mcp/setup.sh failed: {status}");
    }
    python
}

fn structured(call: &Value) -> &Value {
    &call["structuredContent"]
}

#[tokio::test]
async fn the_official_python_client_lists_and_calls_both_tools() {
    let python = ensure_client();
    let api = spawn(sqlite_ledger().await).await;
    let ready = api.create_ready("INV-100").await;
    let waiting = api.create("INV-101", 5_000).await;
    let ready_id = ready["id"].as_str().unwrap();

    let child = tokio::process::Command::new(&python)
        .arg(repo_root().join("tests/mcp/client.py"))
        .env("PAYONCE_MCP_URL", format!("{}/mcp", api.base))
        .env("PAYONCE_MCP_KEY", &api.assistant)
        .env("PAYONCE_READY_OP", ready_id)
        .env("PAYONCE_WAITING_OP", waiting["id"].as_str().unwrap())
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
    assert!(output.status.success(), "client.py failed:\n{stderr}");
    let out: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("client.py printed no JSON ({e}):\n{stderr}"));
    eprintln!("{}", serde_json::to_string_pretty(&out).unwrap());

    assert_eq!(out["server"]["name"], "payonce");
    let names: Vec<&str> = out["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["pay_invoice", "get_payment_status"]);
    assert_eq!(
        out["tools"][0]["inputSchema"]["additionalProperties"],
        false
    );

    let calls = &out["calls"];
    for label in ["status_ready", "pay_ready", "pay_ready_again"] {
        let c = &calls[label];
        assert_eq!(c["isError"], false, "{label}: {c}");
        assert_eq!(structured(c)["operation_id"], ready_id);
        assert_eq!(structured(c)["outcome"], "pending");
        let text: Value = serde_json::from_str(c["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(&text, structured(c), "the text carries the same fields");
    }
    let waiting_answer = structured(&calls["pay_waiting"]);
    assert_eq!(waiting_answer["outcome"], "approval_required");
    assert!(waiting_answer.get("confirmation_url").is_none());
    assert!(!waiting_answer.to_string().contains("/confirm/"));
    assert_eq!(waiting_answer["amount"], "50.00 USD");
    assert_eq!(calls["pay_with_amount"]["isError"], true);
    assert_eq!(
        structured(&calls["pay_with_amount"])["error"]["code"],
        "invalid_arguments"
    );
    assert_eq!(
        structured(&calls["status_unknown_op"])["error"]["code"],
        "operation_not_found"
    );

    // Every call is recorded under provider "mcp" with its JSON-RPC id; no operation was created.
    let recorded = api
        .ledger
        .tool_calls(&OperationId::parse(ready_id).unwrap())
        .await
        .unwrap();
    assert_eq!(recorded.len(), 3, "{recorded:?}");
    assert!(recorded.iter().all(|(p, id, _)| p == "mcp" && id.is_some()));
    assert_eq!(api.operation_count().await, 2);
    let after = api
        .get(&format!("/v1/operations/{ready_id}"), &api.service)
        .await
        .json();
    assert_eq!(after["status"], "ready");
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

//! One real agent loop per provider, offline (tests/agents/agent.py): the official `openai` and
//! `anthropic` Python SDKs, each pointed at a scripted local model that calls `pay_invoice` and then
//! the same call again under a new call id, drive `POST /v1/tool-calls` with the SDKs' own tool-call
//! and tool-result objects while a real worker pays through the simulator. One payment at the
//! processor, one operation in the ledger, and every answer is the stored truth.

use super::tenant;
use super::{repo_root, spawn};
use crate::support::processes::{payments_for, simulator, terminate, worker_process};
use crate::support::{pinned_python, postgres_ledger, wait_for};
use payonce_core::clock::{Clock, SystemClock};
use payonce_core::id::OperationId;
use payonce_simulator::SimulatorConfig;
use serde_json::{Value, json};
use std::process::Stdio;
use std::time::Duration;

/// How long one agent run may take (interpreter start-up included).
const AGENT_DEADLINE: Duration = Duration::from_secs(90);
/// How long the worker may take to pay.
const PAID_DEADLINE: Duration = Duration::from_secs(60);

fn ensure_agents() -> std::path::PathBuf {
    pinned_python("agents", |_| true)
}

async fn run_agent(
    python: &std::path::Path,
    provider: &str,
    api: &super::TestApi,
    op: &str,
) -> Value {
    let child = tokio::process::Command::new(python)
        .arg(repo_root().join("tests/agents/agent.py"))
        .arg(provider)
        .env("PAYONCE_BASE", &api.base)
        .env("PAYONCE_KEY", &api.assistant)
        .env("PAYONCE_OP", op)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run the agent");
    let output = tokio::time::timeout(AGENT_DEADLINE, child.wait_with_output())
        .await
        .expect("the agent finishes in time")
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "agent.py {provider} failed:\n{stderr}"
    );
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("agent.py {provider} printed no JSON ({e}):\n{stderr}"))
}

#[tokio::test]
async fn openai_and_anthropic_agent_loops_pay_once_and_hear_the_stored_truth() {
    let python = ensure_agents();
    let (ledger, url) = postgres_ledger().await;
    let sim = simulator(SimulatorConfig::default()).await;
    let api = spawn(ledger).await;
    // The worker process runs on the system clock; the API's manual clock starts at T0: move it to
    // the wall clock.
    api.clock.set(SystemClock.now());
    let op = api.create_ready("INV-140").await;
    let id = op["id"].as_str().unwrap().to_string();
    let mut worker = worker_process(&url, &sim, &[]);

    for (provider, ids) in [
        ("openai", ["call_1", "call_2"]),
        ("anthropic", ["toolu_1", "toolu_2"]),
    ] {
        let out = run_agent(&python, provider, &api, &id).await;
        assert_eq!(out["call_ids"], json!(ids), "{provider}: {out}");
        let answers = out["answers"].as_array().unwrap();
        assert_eq!(answers.len(), 2, "{provider}: {out}");
        for a in answers {
            assert_eq!(a["operation_id"], id.as_str());
            assert!(
                matches!(a["outcome"].as_str(), Some("pending" | "succeeded")),
                "{a}"
            );
            assert_eq!(a["new_payment_submitted"], false);
        }
        // The model was handed each result in its provider's own shape, under the call's own id.
        let requests = out["model_requests"].as_array().unwrap();
        let last = requests.last().unwrap().to_string();
        assert!(
            last.contains(ids[0]) && last.contains(ids[1]),
            "{provider}: {last}"
        );
    }

    // Both loops asked twice; the processor was asked once.
    let paid = wait_for("the operation succeeded", PAID_DEADLINE, || {
        let (api, id) = (&api, id.clone());
        async move {
            let op = api
                .get(&format!("/v1/operations/{id}"), &api.service)
                .await
                .json();
            (op["status"] == "succeeded").then_some(op)
        }
    })
    .await;
    assert_eq!(payments_for(&sim, &id).await, 1);
    assert_eq!(api.operation_count().await, 1);
    // After success, a third run hears the stored reference twice.
    for provider in ["openai", "anthropic"] {
        let out = run_agent(&python, provider, &api, &id).await;
        for a in out["answers"].as_array().unwrap() {
            assert_eq!(a["outcome"], "succeeded", "{a}");
            assert_eq!(a["reference"], paid["external_ref"], "{a} vs {paid}");
        }
    }
    assert_eq!(payments_for(&sim, &id).await, 1);
    let recorded = api
        .ledger
        .tool_calls(&tenant(), &OperationId::parse(&id).unwrap())
        .await
        .unwrap();
    // The runs after success send the scripted model's call ids again: one row per call id.
    assert_eq!(recorded.len(), 4, "{recorded:?}");
    assert!(
        recorded
            .iter()
            .any(|(p, call, _)| p == "openai_chat" && call.as_deref() == Some("call_2"))
    );
    assert!(
        recorded
            .iter()
            .any(|(p, call, _)| p == "anthropic" && call.as_deref() == Some("toolu_2"))
    );
    terminate(&mut worker).await;
    api.stop().await;
}

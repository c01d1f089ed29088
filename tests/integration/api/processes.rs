//! Two `payonce api` processes on one Postgres database, a `payonce worker` and the simulator: upstream
//! creates the same business key through both, an assistant hammers both with tool calls and execute
//! requests while the worker pays, and the processor sees exactly one payment.

use super::http_client;
use super::tools::{answer_of, call_object};
use crate::support::processes::{payments_for, simulator, terminate, worker_process};
use crate::support::{payonce_bin, postgres_ledger, tenant, wait_for};
use payonce_shared::clock::{Clock, SystemClock};
use payonce_shared::ledger::Role;
use payonce_simulator::SimulatorConfig;
use serde_json::{Value, json};
use std::process::Stdio;
use std::time::Duration;
use tokio::process::{Child, Command};

/// How long a process may take to become ready or a payment to settle.
const DEADLINE: Duration = Duration::from_secs(60);
/// Concurrent assistant requests across the two processes.
const CALLS: usize = 50;

pub(super) use crate::serve::free_port;

pub(super) fn api_process(database_url: &str, port: u16) -> Child {
    Command::new(payonce_bin())
        .arg("api")
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .env("PAYONCE_DATABASE_URL", database_url)
        .env("PAYONCE_KEY_SECRET", crate::support::KEY_SECRET)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn payonce api")
}

async fn post(http: &reqwest::Client, url: String, key: &str, body: Value) -> (u16, Value) {
    let r = http
        .post(url)
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

#[tokio::test]
async fn two_api_processes_one_operation_one_payment() {
    let (ledger, url) = postgres_ledger().await;
    let sim = simulator(SimulatorConfig::default()).await;
    let now = SystemClock.now();
    let service =
        payonce_api::create_api_key(ledger.as_ref(), &tenant(), Role::Service, "billing", now)
            .await
            .unwrap();
    let assistant =
        payonce_api::create_api_key(ledger.as_ref(), &tenant(), Role::Assistant, "bot", now)
            .await
            .unwrap();
    let ports = [free_port(), free_port()];
    let mut apis = [api_process(&url, ports[0]), api_process(&url, ports[1])];
    let bases: Vec<String> = ports
        .iter()
        .map(|p| format!("http://127.0.0.1:{p}"))
        .collect();
    let http = http_client();
    for base in &bases {
        wait_for("payonce api is ready", DEADLINE, || {
            let (http, base) = (http.clone(), base.clone());
            async move {
                let r = http.get(format!("{base}/readyz")).send().await.ok()?;
                r.status().is_success().then_some(())
            }
        })
        .await;
    }

    // Upstream creates the same business key through both processes at once: one operation.
    let body = json!({"business_key": "invoice:INV-200:pay", "details": super::raw_details("INV-200", 2048)});
    let (a, b) = tokio::join!(
        post(
            &http,
            format!("{}/v1/operations", bases[0]),
            &service,
            body.clone()
        ),
        post(&http, format!("{}/v1/operations", bases[1]), &service, body),
    );
    let mut statuses = [a.0, b.0];
    statuses.sort();
    assert_eq!(statuses, [200, 201], "one created it, the other got it");
    assert_eq!(a.1["id"], b.1["id"]);
    let id = a.1["id"].as_str().unwrap().to_string();
    let (status, approved) = post(
        &http,
        format!("{}/v1/operations/{id}/approve", bases[1]),
        &service,
        json!({"details_hash": a.1["details_hash"], "approved_by": "customer:cus_test"}),
    )
    .await;
    assert_eq!(status, 200, "{approved}");

    // The worker pays while 50 assistant requests land on both processes.
    let mut worker = worker_process(&url, &sim, &[]);
    let formats = ["openai_chat", "openai_responses", "anthropic", "mcp"];
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..CALLS {
        let (http, base, key, id) = (
            http.clone(),
            bases[i % 2].clone(),
            assistant.clone(),
            id.clone(),
        );
        tasks.spawn(async move {
            if i % 5 == 0 {
                let (status, answer) = post(
                    &http,
                    format!("{base}/v1/operations/{id}/execute"),
                    &key,
                    json!({}),
                )
                .await;
                assert_eq!(status, 200, "{answer}");
                return answer;
            }
            let format = formats[i % formats.len()];
            let call_id = format!("call_{i}");
            let call = call_object(
                format,
                &call_id,
                "pay_invoice",
                &json!({"operation_id": id}),
            );
            let (status, result) = post(
                &http,
                format!("{base}/v1/tool-calls"),
                &key,
                json!({"format": format, "call": call}),
            )
            .await;
            assert_eq!(status, 200, "{result}");
            let (answer, is_error) = answer_of(format, &result, &call_id);
            assert!(!is_error, "{answer}");
            answer
        });
    }
    for answer in tasks.join_all().await {
        assert_eq!(answer["operation_id"], id.as_str());
        let outcome = answer["outcome"].as_str().unwrap();
        assert!(matches!(outcome, "pending" | "succeeded"), "{answer}");
        assert_eq!(answer["new_payment_submitted"], false);
    }

    let paid = wait_for("the operation succeeded", DEADLINE, || {
        let (http, base, key, id) = (
            http.clone(),
            bases[0].clone(),
            assistant.clone(),
            id.clone(),
        );
        async move {
            let (_, answer) = post(
                &http,
                format!("{base}/v1/operations/{id}/execute"),
                &key,
                json!({}),
            )
            .await;
            (answer["outcome"] == "succeeded").then_some(answer)
        }
    })
    .await;
    // After success, every process answers with the stored reference.
    for base in &bases {
        let call = call_object(
            "anthropic",
            "toolu_after",
            "pay_invoice",
            &json!({"operation_id": id}),
        );
        let (_, result) = post(
            &http,
            format!("{base}/v1/tool-calls"),
            &assistant,
            json!({"format": "anthropic", "call": call}),
        )
        .await;
        let (answer, _) = answer_of("anthropic", &result, "toolu_after");
        assert_eq!(answer["outcome"], "succeeded");
        assert_eq!(answer["reference"], paid["reference"]);
    }
    assert_eq!(
        payments_for(&sim, &id).await,
        1,
        "exactly one payment at the processor"
    );
    let all = ledger
        .list(&payonce_shared::ledger::ListFilter {
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(all.len(), 1, "one operation row");
    let calls = ledger
        .tool_calls(
            &tenant(),
            &payonce_shared::id::OperationId::parse(&id).unwrap(),
        )
        .await
        .unwrap();
    // `toolu_after`, sent to both processes, is one call (issue 43).
    assert_eq!(
        calls.len(),
        CALLS - CALLS / 5 + 1,
        "every tool call recorded once, across both processes"
    );

    assert!(terminate(&mut worker).await.success());
    for api in &mut apis {
        assert!(
            terminate(api).await.success(),
            "payonce api shuts down gracefully"
        );
    }
}

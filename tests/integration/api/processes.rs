//! Two `payonce api` processes on one Postgres database, a `payonce worker` and the simulator: upstream
//! creates the same business key through both, an assistant hammers both with tool calls and execute
//! requests while the worker pays, and the processor sees exactly one payment.

use super::tools::{answer_of, call_object};
use super::{http_client, post_json as post};
use crate::support::processes::{payments_for, simulator, terminate, wait_ready, worker_process};
use crate::support::{api_key, payonce_bin, postgres_ledger, tenant, wait_for};
use payonce_core::clock::{Clock, SystemClock};
use payonce_ledger::Role;
use payonce_simulator::SimulatorConfig;
use serde_json::json;
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

/// Two `payonce api` processes on `database_url`, each on a free port, once both are ready
/// (within `deadline`); with their base URLs.
pub(super) async fn two_api_processes(
    database_url: &str,
    http: &reqwest::Client,
    deadline: Duration,
) -> ([Child; 2], Vec<String>) {
    let ports = [free_port(), free_port()];
    let apis = [
        api_process(database_url, ports[0]),
        api_process(database_url, ports[1]),
    ];
    let bases: Vec<String> = ports
        .iter()
        .map(|p| format!("http://127.0.0.1:{p}"))
        .collect();
    for base in &bases {
        wait_ready(http, base, deadline).await;
    }
    (apis, bases)
}

#[tokio::test]
async fn two_api_processes_one_operation_one_payment() {
    let (ledger, url) = postgres_ledger().await;
    let sim = simulator(SimulatorConfig::default()).await;
    let service = api_key(&ledger, Role::Service, "billing").await;
    let assistant = api_key(&ledger, Role::Assistant, "bot").await;
    let http = http_client();
    let (mut apis, bases) = two_api_processes(&url, &http, DEADLINE).await;

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
        .list(&payonce_ledger::ListFilter {
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(all.len(), 1, "one operation row");
    let calls = ledger
        .tool_calls(
            &tenant(),
            &payonce_core::id::OperationId::parse(&id).unwrap(),
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

/// Signs in to the console of the api at `base` with `key`; returns the session cookie header.
async fn console_session(http: &reqwest::Client, base: &str, key: &str) -> String {
    let form = http
        .get(format!("{base}/console/sign-in"))
        .send()
        .await
        .unwrap();
    let token = form
        .headers()
        .get_all("set-cookie")
        .iter()
        .find_map(|c| {
            c.to_str()
                .ok()?
                .strip_prefix("payonce_console_sign_in=")
                .map(|rest| rest.split(';').next().unwrap_or_default().to_string())
        })
        .expect("a sign-in form token");
    let signed_in = http
        .post(format!("{base}/console/sign-in"))
        .header("cookie", format!("payonce_console_sign_in={token}"))
        .form(&[("key", key), ("csrf", token.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(signed_in.status().as_u16(), 303);
    let session = signed_in
        .headers()
        .get_all("set-cookie")
        .iter()
        .find_map(|c| {
            c.to_str()
                .ok()?
                .strip_prefix("payonce_console=")
                .map(|rest| rest.split(';').next().unwrap_or_default().to_string())
        })
        .expect("a session cookie");
    format!("payonce_console={session}")
}

/// The text of `GET base/path` (200 expected), with `cookie` if given.
async fn page_text(http: &reqwest::Client, base: &str, path: &str, cookie: Option<&str>) -> String {
    let mut request = http.get(format!("{base}{path}"));
    if let Some(c) = cookie {
        request = request.header("cookie", c);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200, "{path}");
    response.text().await.unwrap()
}

#[tokio::test]
async fn an_api_apart_from_its_worker_shows_the_processor_outage_the_worker_records() {
    let (ledger, url) = postgres_ledger().await;
    let now = SystemClock.now();
    let on_call = api_key(&ledger, Role::OnCall, "alice").await;
    let waiting =
        crate::support::ready_operation(&ledger, "INV-OUTAGE-1", "pm_card_visa", now).await;
    // Nothing listens on the processor's port until the simulator starts there below.
    let processor_port = free_port();
    let processor_url = format!("http://127.0.0.1:{processor_port}");
    let api_port = free_port();
    let base = format!("http://127.0.0.1:{api_port}");
    let mut api = api_process(&url, api_port);
    let http = http_client();
    wait_ready(&http, &base, DEADLINE).await;
    let cookie = console_session(&http, &base, &on_call).await;
    // Before any worker ran: no banner, the gauge says reachable.
    assert!(
        !page_text(&http, &base, "/console", Some(&cookie))
            .await
            .contains("processor-outage")
    );
    let metrics = page_text(&http, &base, "/metrics", None).await;
    assert!(
        metrics.contains("payonce_processor_reachable 1\n"),
        "{metrics}"
    );

    let mut worker = Command::new(payonce_bin())
        .arg("worker")
        .env("PAYONCE_DATABASE_URL", url.url())
        .env("PAYONCE_KEY_SECRET", crate::support::KEY_SECRET)
        .env("PAYONCE_PROCESSOR_URL", &processor_url)
        .env("PAYONCE_POLL_MS", "100")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn payonce worker");

    // The worker's submission is refused: it records the outage, and the api (another process)
    // shows it on every console page and in its /metrics.
    let banner = wait_for("the api's console shows the outage", DEADLINE, || {
        let (http, base, cookie) = (http.clone(), base.clone(), cookie.clone());
        async move {
            let text = page_text(&http, &base, "/console/operations", Some(&cookie)).await;
            text.contains("id=\"processor-outage\"").then_some(text)
        }
    })
    .await;
    assert!(
        banner.contains("The processor is unreachable</strong> (since 20"),
        "{banner}"
    );
    let recorded = ledger.outage().reachability().await.unwrap();
    assert!(recorded.down_since.is_some(), "{recorded:?}");
    assert!(recorded.changed_by.starts_with("worker"), "{recorded:?}");
    let metrics = page_text(&http, &base, "/metrics", None).await;
    assert!(
        metrics.contains("payonce_processor_reachable 0\n"),
        "{metrics}"
    );
    let op = ledger.get(&tenant(), &waiting.id).await.unwrap();
    assert_eq!(op.status.as_str(), "ready", "the payment waits: {op:?}");

    // The processor comes back on that port: the waiting payment is paid once, the worker records
    // the recovery, and the banner goes.
    let sim = simulator(SimulatorConfig {
        listen: format!("127.0.0.1:{processor_port}").parse().unwrap(),
        ..Default::default()
    })
    .await;
    wait_for("the banner goes", DEADLINE, || {
        let (http, base, cookie) = (http.clone(), base.clone(), cookie.clone());
        async move {
            let text = page_text(&http, &base, "/console", Some(&cookie)).await;
            (!text.contains("processor-outage")).then_some(())
        }
    })
    .await;
    let metrics = page_text(&http, &base, "/metrics", None).await;
    assert!(
        metrics.contains("payonce_processor_reachable 1\n"),
        "{metrics}"
    );
    assert_eq!(
        ledger.outage().reachability().await.unwrap().down_since,
        None
    );
    wait_for("the waiting payment is paid", DEADLINE, || {
        let (ledger, id) = (ledger.clone(), waiting.id.clone());
        async move {
            let op = ledger.get(&tenant(), &id).await.ok()?;
            (op.status.as_str() == "succeeded").then_some(())
        }
    })
    .await;
    assert_eq!(payments_for(&sim, waiting.id.as_str()).await, 1);
    terminate(&mut worker).await;
    terminate(&mut api).await;
}

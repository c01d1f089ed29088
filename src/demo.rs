//! The quick start. `payonce demo` runs the simulator, the ledger (SQLite), a worker that crashes
//! after the processor accepted the payment (a real child process, aborted at a failure point), and
//! the reconciler, then prints the one payment and the operation's full history.
//! `payonce simulator` runs the simulator on its own.

use anyhow::Context;
use clap::Args;
use payonce_reconciler::oncall::{self, Format};
use payonce_reconciler::{Reconciler, ReconcilerConfig};
use payonce_shared::clock::{Clock, SystemClock};
use payonce_shared::id::{OperationId, TenantId};
use payonce_shared::ledger::{self, Role};
use payonce_shared::processor::Processor;
use payonce_shared::processor::stripe::{StripeConfig, StripeProcessor};
use payonce_shared::state::Status;
use payonce_simulator::{Simulator, SimulatorConfig};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `payonce simulator` settings.
#[derive(Debug, Clone, Args)]
pub struct SimulatorArgs {
    /// Listen address.
    #[arg(
        long,
        env = "PAYONCE_SIMULATOR_LISTEN",
        default_value = "127.0.0.1:12111"
    )]
    pub listen: SocketAddr,
    /// `sqlite::memory:` or a file.
    #[arg(
        long,
        env = "PAYONCE_SIMULATOR_DATABASE",
        default_value = "sqlite::memory:"
    )]
    pub database: String,
    /// Idempotency key retention, seconds (Stripe: 86400).
    #[arg(
        long,
        env = "PAYONCE_SIMULATOR_KEY_RETENTION_S",
        default_value_t = 86_400
    )]
    pub key_retention_s: u64,
    /// Where to deliver signed webhooks.
    #[arg(long, env = "PAYONCE_SIMULATOR_WEBHOOK_URL")]
    pub webhook_url: Option<String>,
    /// Webhook signing secret.
    #[arg(
        long,
        env = "PAYONCE_SIMULATOR_WEBHOOK_SECRET",
        default_value = "whsec_payonce_simulator",
        hide_env_values = true
    )]
    pub webhook_secret: String,
    /// Per mille of webhooks delivered twice.
    #[arg(
        long,
        env = "PAYONCE_SIMULATOR_WEBHOOK_DUPLICATES",
        default_value_t = 0
    )]
    pub webhook_duplicates_per_mille: u32,
    /// Seed for every random decision.
    #[arg(long, env = "PAYONCE_SIMULATOR_SEED", default_value_t = 1)]
    pub seed: u64,
}

impl SimulatorArgs {
    fn config(&self) -> SimulatorConfig {
        SimulatorConfig {
            listen: self.listen,
            database: self.database.clone(),
            key_retention: Duration::from_secs(self.key_retention_s),
            webhook_url: self.webhook_url.clone(),
            webhook_secret: self.webhook_secret.clone(),
            webhook_duplicates_per_mille: self.webhook_duplicates_per_mille,
            seed: self.seed,
            ..SimulatorConfig::default()
        }
    }
}

/// Runs the simulator until SIGTERM or Ctrl-C.
pub async fn run_simulator(args: SimulatorArgs) -> anyhow::Result<ExitCode> {
    payonce_simulator::run(args.config(), crate::ops::shutdown_signal()).await?;
    Ok(ExitCode::SUCCESS)
}

/// `payonce demo` settings.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// The demo's ledger file (created fresh).
    #[arg(long, default_value = "payonce-demo.db")]
    pub database: String,
}

struct Progress {
    started: Instant,
    step: u32,
}

impl Progress {
    fn say(&mut self, what: &str) {
        self.step += 1;
        println!(
            "[{:>5.1}s] {}. {what}",
            self.started.elapsed().as_secs_f64(),
            self.step
        );
    }
}

/// The demo story for invoice INV-2048.
pub async fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let mut p = Progress {
        started: Instant::now(),
        step: 0,
    };
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", args.database));
    }
    let db_url = format!("sqlite:{}", args.database);
    let ledger = ledger::connect(&db_url, 1).await?;
    let clock = SystemClock;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;

    // The front door first, so the simulator can deliver webhooks to it.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let api_base = format!("http://{}", listener.local_addr()?);
    let secret = payonce_simulator::config::WEBHOOK_SECRET_DEFAULT.to_string();
    let api_config = payonce_api::ApiConfig {
        public_base_url: api_base.clone(),
        webhook_secrets: vec![secret.clone()],
        ..payonce_api::ApiConfig::default()
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let api_state = payonce_api::AppState::new(ledger.clone(), Arc::new(SystemClock), api_config);
    let api = tokio::spawn(payonce_api::serve_listener(listener, api_state, async {
        let _ = stop_rx.await;
    }));
    let sim = Simulator::start(SimulatorConfig {
        webhook_url: Some(format!("{api_base}/v1/webhooks/stripe")),
        webhook_secret: secret,
        webhook_duplicates_per_mille: 1000,
        ..SimulatorConfig::default()
    })
    .await?;
    p.say(&format!(
        "api on {api_base}; simulator (Stripe-compatible) on {}; ledger {db_url}",
        sim.base_url()
    ));

    let tenant = TenantId::parse("acme")?;
    let service =
        payonce_api::create_api_key(&ledger, &tenant, Role::Service, "billing", clock.now_ms())
            .await?;
    let assistant = payonce_api::create_api_key(
        &ledger,
        &tenant,
        Role::Assistant,
        "assistant",
        clock.now_ms(),
    )
    .await?;
    let created: serde_json::Value = http
        .post(format!("{api_base}/v1/operations"))
        .bearer_auth(&service)
        .json(&serde_json::json!({
            "business_key": "invoice:INV-2048:pay",
            "details": {"amount": 2048, "currency": "usd", "customer": "cus_demo", "payment_method": "pm_card_visa",
                        "invoice": "INV-2048", "description": "Hosting, March"}
        }))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let op_id = OperationId::parse(created["id"].as_str().context("no operation id")?)?;
    p.say(&format!(
        "billing created {op_id} for 20.48 USD, invoice INV-2048 (status {})",
        created["status"]
    ));

    let link: serde_json::Value = http
        .post(format!(
            "{api_base}/v1/operations/{op_id}/approval-requests"
        ))
        .bearer_auth(&service)
        .json(&serde_json::json!({}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let url = link["url"]
        .as_str()
        .context("no confirmation link")?
        .to_string();
    p.say(&format!("confirmation link for the customer: {url}"));
    let page = http
        .get(&url)
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?;
    let marker = "name=\"details_hash\" value=\"";
    let at = page
        .find(marker)
        .context("the confirmation page has no approval form")?
        + marker.len();
    let shown_hash = page[at..].chars().take(64).collect::<String>();
    let approved = http
        .post(&url)
        .form(&[("details_hash", shown_hash.as_str())])
        .send()
        .await?;
    anyhow::ensure!(
        approved.status().is_success(),
        "approval failed: {}",
        approved.status()
    );
    p.say("the customer saw 20.48 USD for INV-2048 and approved exactly that; the operation is enqueued");

    // A worker in its own process, armed to die right after the processor accepts the payment.
    let exe = std::env::current_exe().context("locating the payonce binary")?;
    let status = tokio::process::Command::new(exe)
        .arg("worker")
        .env("PAYONCE_DATABASE_URL", &db_url)
        .env("PAYONCE_PROCESSOR_URL", sim.base_url())
        .env("PAYONCE_LEASE_TTL_MS", "1500")
        .env("PAYONCE_LEASE_RENEW_MS", "500")
        .env("PAYONCE_SUBMIT_TIMEOUT_MS", "5000")
        .env("PAYONCE_SHUTDOWN_GRACE_MS", "5000")
        .env(payonce_shared::failpoint::ENV, "after_processor_accepted")
        .env("RUST_LOG", "error")
        .stdin(std::process::Stdio::null())
        .status()
        .await?;
    p.say(&format!(
        "a worker process submitted the payment and crashed before recording it ({status})"
    ));

    // The assistant asks to pay; the first answer is lost on the way back, so it asks again.
    let tool_call = |call_id: &'static str| {
        http.post(format!("{api_base}/v1/tool-calls")).bearer_auth(&assistant).json(&serde_json::json!({
            "format": "openai_chat",
            "call": {"id": call_id, "type": "function",
                     "function": {"name": "pay_invoice", "arguments": format!("{{\"operation_id\":\"{op_id}\"}}")}}
        }))
    };
    let lost = tokio::time::timeout(Duration::from_millis(1), tool_call("call_first").send()).await;
    p.say(&format!(
        "assistant: pay_invoice, response lost on the way back ({})",
        if lost.is_err() { "dropped" } else { "arrived" }
    ));
    let retry: serde_json::Value = tool_call("call_regenerated")
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let answer: serde_json::Value =
        serde_json::from_str(retry["content"].as_str().unwrap_or("{}"))?;
    p.say(&format!(
        "assistant retried with a new call id; payonce answered: \"{}\"",
        answer["message"].as_str().unwrap_or("?")
    ));

    let stripe: Arc<dyn Processor> = Arc::new(StripeProcessor::new(StripeConfig::new(
        sim.base_url(),
        "sk_test_payonce",
    ))?);
    let mut config = ReconcilerConfig::new("reconciler-demo");
    config.retry.owner = "reconciler-demo".into();
    let reconciler = Reconciler::new(
        ledger.clone(),
        stripe.clone(),
        Arc::new(SystemClock),
        config,
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let report = reconciler.sweep_once(false).await?;
        if report.requeued
            + report.marked_unknown
            + report.resolved_succeeded
            + report.resolved_failed
            > 0
        {
            p.say(&format!("reconciler {}", report.summary()));
        }
        let now = ledger.get(&tenant, &op_id).await?;
        if now.status.is_terminal() {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the operation did not converge: {}",
            now.status.as_str()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let done = ledger.get(&tenant, &op_id).await?;
    // Let the duplicate webhook deliveries land, then count them.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let audit: serde_json::Value =
        reqwest_get_json(&format!("{}/_sim/audit/payments", sim.base_url()))
            .await
            .context("reading the simulator audit")?;
    let payments = audit_count(&audit, op_id.as_str());
    p.say(&format!(
        "outcome: {} ({}); payments at the processor for this operation: {payments}",
        done.status.as_str(),
        done.external_ref.as_deref().unwrap_or("-")
    ));
    let status: serde_json::Value = http
        .post(format!("{api_base}/v1/tool-calls"))
        .bearer_auth(&assistant)
        .json(&serde_json::json!({"format": "anthropic", "call": {"type": "tool_use", "id": "toolu_status",
            "name": "get_payment_status", "input": {"operation_id": op_id.as_str()}}}))
        .send()
        .await?
        .json()
        .await?;
    let answer: serde_json::Value =
        serde_json::from_str(status["content"].as_str().unwrap_or("{}"))?;
    p.say(&format!(
        "assistant asks again: \"{}\"",
        answer["message"].as_str().unwrap_or("?")
    ));
    println!(
        "\n{}",
        oncall::show(&ledger, None, &op_id, clock.now_ms(), Format::Table).await?
    );
    sim.shutdown().await;
    let _ = stop_tx.send(());
    let _ = api.await;
    anyhow::ensure!(
        payments == 1 && done.status == Status::Succeeded,
        "expected exactly one successful payment"
    );
    println!(
        "One approved intention, one payment. Ledger kept in {}.",
        args.database
    );
    Ok(ExitCode::SUCCESS)
}

async fn reqwest_get_json(url: &str) -> anyhow::Result<serde_json::Value> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?;
    Ok(client
        .get(url)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?)
}

/// Counts audit entries whose metadata names the operation.
fn audit_count(audit: &serde_json::Value, operation: &str) -> usize {
    let rows = audit
        .get("data")
        .or_else(|| audit.get("payments"))
        .and_then(|d| d.as_array());
    rows.map_or(0, |rows| {
        rows.iter()
            .filter(|r| {
                r.pointer("/metadata/payonce_operation_id")
                    .and_then(|v| v.as_str())
                    == Some(operation)
            })
            .count()
    })
}

//! Real processes and the simulator for end-to-end tests.

use payonce_processor::Processor;
use payonce_processor::stripe::{StripeConfig, StripeProcessor};
use payonce_simulator::{Simulator, SimulatorConfig, payment_audit};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::process::{Child, Command};

/// Starts an in-process simulator on a free loopback port.
pub async fn simulator(config: SimulatorConfig) -> Simulator {
    Simulator::start(config).await.expect("start the simulator")
}

/// The Stripe adapter pointed at `sim`, declaring `retention` if given.
pub fn stripe(sim: &Simulator, retention: Option<Duration>) -> Arc<dyn Processor> {
    let mut p = StripeProcessor::new(StripeConfig::new(sim.base_url(), "sk_test_payonce")).unwrap();
    if let Some(r) = retention {
        p = p.with_key_retention(r);
    }
    Arc::new(p)
}

/// Every payment the simulator holds, as JSON rows (every page of its audit).
pub async fn audit(sim: &Simulator) -> Vec<serde_json::Value> {
    audit_at(&sim.base_url()).await
}

/// Every payment the simulator at `base_url` (one in another process) holds, as JSON rows.
pub async fn audit_at(base_url: &str) -> Vec<serde_json::Value> {
    payment_audit::read_all(
        &crate::api::http_client(),
        base_url,
        payment_audit::PAGE_SIZE_MAX,
    )
    .await
    .unwrap()
}

/// The JSON of the admin endpoint `path` (`/_sim/…`) of the simulator at `base_url`, read with `http`.
pub async fn admin_json(http: &reqwest::Client, base_url: &str, path: &str) -> serde_json::Value {
    http.get(format!("{base_url}{path}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The refund audit of the simulator at `base_url` (`GET /_sim/audit/refunds`).
pub async fn refunds_audit_at(base_url: &str) -> serde_json::Value {
    admin_json(&crate::api::http_client(), base_url, "/_sim/audit/refunds").await
}

/// How many payments of `audit` name each operation (by metadata).
pub fn payments_per_operation(
    audit: &[serde_json::Value],
) -> std::collections::HashMap<String, usize> {
    let mut per_op = std::collections::HashMap::new();
    for p in audit {
        let id = p["metadata"]["payonce_operation_id"].as_str().unwrap();
        *per_op.entry(id.to_string()).or_default() += 1;
    }
    per_op
}

/// Payments the simulator holds for one operation (by metadata).
pub async fn payments_for(sim: &Simulator, operation: &str) -> usize {
    payments_at(&sim.base_url(), operation).await
}

/// Payments the simulator at `base_url` (one in another process) holds for one operation.
pub async fn payments_at(base_url: &str, operation: &str) -> usize {
    audit_at(base_url)
        .await
        .iter()
        .filter(|p| p["metadata"]["payonce_operation_id"] == operation)
        .count()
}

/// The simulator's audit of its rate limits (`GET /_sim/audit/rate_limits`).
pub async fn rate_limits(sim: &Simulator) -> serde_json::Value {
    admin_json(
        &crate::api::http_client(),
        &sim.base_url(),
        "/_sim/audit/rate_limits",
    )
    .await
}

/// Requests the simulator has served (its audit of limits).
pub async fn requests_served(sim: &Simulator) -> u64 {
    rate_limits(sim).await["requests_total"].as_u64().unwrap()
}

/// Creates a PaymentIntent at the simulator directly (someone else's request, or Stripe's record of
/// ours), naming `op` in its metadata; returns the object.
pub async fn pay_directly(
    sim: &Simulator,
    op: &payonce_core::id::OperationId,
    amount: i64,
    customer: &str,
) -> serde_json::Value {
    let form = [
        ("amount", amount.to_string()),
        ("currency", "usd".to_string()),
        ("customer", customer.to_string()),
        ("payment_method", "pm_card_visa".to_string()),
        ("confirm", "true".to_string()),
        ("off_session", "true".to_string()),
        ("metadata[payonce_operation_id]", op.as_str().to_string()),
    ];
    let r = reqwest::Client::new()
        .post(format!("{}/v1/payment_intents", sim.base_url()))
        .bearer_auth("sk_test_payonce")
        .form(&form)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    r.json().await.unwrap()
}

/// Moves the simulator's clock forward by `by` (`POST /_sim/clock`); answers its new `now_ms`.
pub async fn advance_clock(sim: &Simulator, by: Duration) -> serde_json::Value {
    let r = reqwest::Client::new()
        .post(format!("{}/_sim/clock", sim.base_url()))
        .json(&serde_json::json!({ "advance_ms": by.as_millis() as i64 }))
        .send()
        .await
        .unwrap();
    let status = r.status();
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(status.is_success(), "advancing the clock failed: {body}");
    body
}

/// Arms simulator faults (a JSON array of rules).
pub async fn arm_faults(sim: &Simulator, rules: serde_json::Value) {
    let r = reqwest::Client::new()
        .post(format!("{}/_sim/faults", sim.base_url()))
        .json(&rules)
        .send()
        .await
        .unwrap();
    assert!(
        r.status().is_success(),
        "arming faults failed: {}",
        r.text().await.unwrap()
    );
}

/// Spawns `payonce worker` against `database_url` and `sim` with extra environment.
pub fn worker_process(database_url: &str, sim: &Simulator, env: &[(&str, &str)]) -> Child {
    let mut cmd = Command::new(super::payonce_bin());
    cmd.arg("worker")
        .env("PAYONCE_DATABASE_URL", database_url)
        .env("PAYONCE_KEY_SECRET", crate::support::KEY_SECRET)
        .env("PAYONCE_PROCESSOR_URL", sim.base_url())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("spawn payonce worker")
}

/// Waits, up to `deadline`, until `GET {base}/readyz` answers with a success.
pub async fn wait_ready(http: &reqwest::Client, base: &str, deadline: Duration) {
    super::wait_for("payonce api is ready", deadline, || {
        let (http, base) = (http.clone(), base.to_string());
        async move {
            let r = http.get(format!("{base}/readyz")).send().await.ok()?;
            r.status().is_success().then_some(())
        }
    })
    .await;
}

/// Sends SIGTERM and waits for the exit status.
pub async fn terminate(child: &mut Child) -> std::process::ExitStatus {
    let pid = child.id().expect("child still running");
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    tokio::time::timeout(Duration::from_secs(40), child.wait())
        .await
        .expect("worker exits within its grace")
        .unwrap()
}

/// What a test does around each payment submission of a [`Hooked`] processor.
#[async_trait::async_trait]
pub trait SubmitHook: Send + Sync {
    /// Before the request leaves.
    async fn before(&self, _request: &payonce_processor::SubmitRequest<'_>) {}
    /// After the processor answered, before the worker sees the answer.
    async fn after(
        &self,
        _request: &payonce_processor::SubmitRequest<'_>,
        _outcome: &payonce_processor::SubmitOutcome,
    ) {
    }
}

/// A real processor (`inner`) with a test's hook around each payment submission; everything else
/// passes through unchanged.
pub struct Hooked<H> {
    pub inner: Arc<dyn Processor>,
    pub hook: H,
}

#[async_trait::async_trait]
impl<H: SubmitHook> Processor for Hooked<H> {
    fn contract(&self) -> &payonce_processor::Contract {
        self.inner.contract()
    }
    async fn submit(
        &self,
        request: &payonce_processor::SubmitRequest<'_>,
    ) -> payonce_processor::SubmitOutcome {
        self.hook.before(request).await;
        let outcome = self.inner.submit(request).await;
        self.hook.after(request, &outcome).await;
        outcome
    }
    async fn lookup(
        &self,
        query: &payonce_processor::LookupQuery<'_>,
    ) -> payonce_processor::LookupOutcome {
        self.inner.lookup(query).await
    }
    async fn submit_refund(
        &self,
        request: &payonce_processor::RefundRequest<'_>,
    ) -> payonce_processor::SubmitOutcome {
        self.inner.submit_refund(request).await
    }
    async fn lookup_refund(
        &self,
        query: &payonce_processor::RefundLookupQuery<'_>,
    ) -> payonce_processor::LookupOutcome {
        self.inner.lookup_refund(query).await
    }
}

/// A worker daemon built from `config` over `ledger` and `processor` on the system clock, running in
/// this process until [`RunningWorker::stop`].
pub struct RunningWorker {
    stop: tokio::sync::watch::Sender<bool>,
    run: tokio::task::JoinHandle<payonce_worker::RunSummary>,
    /// The daemon's counters, as its `/metrics` would render them.
    pub metrics: Arc<payonce_worker::WorkerMetrics>,
}

/// Starts a worker daemon (see [`RunningWorker`]).
pub fn run_worker(
    ledger: Arc<dyn payonce_ledger::Queue>,
    processor: Arc<dyn Processor>,
    config: payonce_worker::WorkerConfig,
) -> RunningWorker {
    let worker = Arc::new(
        payonce_worker::Worker::new(
            ledger,
            processor,
            Arc::new(payonce_core::clock::SystemClock),
            config,
        )
        .expect("a valid worker configuration"),
    );
    let metrics = worker.metrics();
    let (stop, mut stopping) = tokio::sync::watch::channel(false);
    let run = tokio::spawn(worker.run(async move {
        let _ = stopping.wait_for(|s| *s).await;
    }));
    RunningWorker { stop, run, metrics }
}

impl RunningWorker {
    /// Asks for a graceful shutdown; the handle resolves when the daemon has returned.
    pub fn stop(self) -> tokio::task::JoinHandle<payonce_worker::RunSummary> {
        let _ = self.stop.send(true);
        self.run
    }
}

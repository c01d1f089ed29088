//! End to end over real HTTP: the Stripe adapter against the simulator with a fixed processor
//! latency. Throughput should then be bound by in-flight concurrency (concurrency / latency), not
//! by the database.

use crate::database::ScratchDatabase;
use crate::drive::{self, Fleet};
use crate::load::{self, Kind};
use crate::report::Rate;
use anyhow::Context;
use payonce_ledger::SharedLedger;
use payonce_processor::stripe::{StripeConfig, StripeProcessor};
use payonce_simulator::{Simulator, SimulatorConfig};
use std::sync::Arc;
use std::time::Duration;

/// Longest wait for the simulator's payment audit.
const AUDIT_TIMEOUT: Duration = Duration::from_secs(30);

/// Drains `operations` through the simulator at `latency`; checks the simulator holds exactly one
/// payment per operation. Returns the whole drain's rate (the engines' start to the last outcome
/// the bench saw) and the rate from the first claim to the last outcome as the ledger logged them.
pub async fn postgres(
    admin_url: &str,
    clients: u32,
    fleet: &Fleet,
    operations: u64,
    latency: Duration,
    deadline: Duration,
) -> anyhow::Result<(Rate, Rate)> {
    let db = ScratchDatabase::create(admin_url).await?;
    let ledger = db.ledger(clients).await?;
    load::postgres(
        &db.url,
        Kind::Ready,
        1,
        i64::try_from(operations)?,
        crate::now_ms(),
    )
    .await?;
    let sim = Simulator::start(SimulatorConfig {
        latency,
        ..SimulatorConfig::default()
    })
    .await?;
    let mut config = StripeConfig::new(sim.base_url(), payonce_simulator::config::API_KEY_DEFAULT);
    // As many keep-alive connections kept as requests in flight, as a deployment at this
    // concurrency sets `processor_idle_connections`.
    config.idle_connections = fleet.config.concurrency.max(1);
    let processor = Arc::new(StripeProcessor::new(config)?);
    let shared: SharedLedger = Arc::new(ledger.clone());
    let rate = drive::until_recorded(&shared, processor, fleet, operations, deadline).await?;
    drive::check_all_succeeded(&shared, operations).await?;
    let working = drive::WorkWindow::read(ledger.pool())
        .await?
        .rate(operations);
    let payments = simulator_payments(&sim.base_url()).await?;
    anyhow::ensure!(
        payments == operations,
        "the simulator holds {payments} payments for {operations} operations"
    );
    sim.shutdown().await;
    ledger.pool().close().await;
    db.drop_now().await?;
    Ok((rate, working))
}

/// Payments the simulator at `base` holds (its audit endpoint).
/// One of the simulator's `/_sim/audit/…` pages.
async fn audit(base: &str, page: &str) -> anyhow::Result<serde_json::Value> {
    // The simulator may run in another process: this one's client needs a TLS provider of its own.
    payonce_simulator::install_crypto_provider();
    let client = reqwest::Client::builder().timeout(AUDIT_TIMEOUT).build()?;
    Ok(client
        .get(format!("{base}/_sim/audit/{page}"))
        .send()
        .await?
        .json()
        .await?)
}

/// TCP connections the simulator at `base` accepted since it started, this read's own included.
pub async fn simulator_connections(base: &str) -> anyhow::Result<u64> {
    audit(base, "connections").await?["accepted"]
        .as_u64()
        .context("the connection audit has no count")
}

/// Payments the simulator at `base` holds.
pub async fn simulator_payments(base: &str) -> anyhow::Result<u64> {
    let body = audit(base, "payments").await?;
    let data = body["data"].as_array().context("audit has no data")?;
    Ok(data.len() as u64)
}

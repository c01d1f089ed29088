//! The running simulator: binds, opens the store, serves, and runs the background tasks (settling
//! `processing` payments, forgetting expired keys, delivering webhooks) until shutdown.

use crate::app::{App, Shared};
use crate::audit::RequestAudit;
use crate::config::SimulatorConfig;
use crate::connection::{self, KillableListener};
use crate::error::SimulatorError;
use crate::faults::Faults;
use crate::idempotency::InFlight;
use crate::rng::IdGen;
use crate::routes;
use crate::settlement::settle_due;
use crate::store::Store;
use crate::webhooks;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

/// Longest pause of the maintenance task between passes.
const MAINTENANCE_TICK_MAX: Duration = Duration::from_millis(100);
/// How long shutdown waits for open connections to finish before cutting them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// A running simulator.
#[derive(Debug)]
pub struct Simulator {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    server: JoinHandle<()>,
    tasks: Vec<JoinHandle<()>>,
    store: Store,
}

/// Installs rustls' ring provider for the process (reqwest is built without one and panics otherwise).
/// Calling it again, or after someone else installed one, is harmless.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

async fn maintenance(app: Shared) {
    let mut shutdown = app.shutdown.clone();
    let tick = app
        .config
        .processing_settle
        .min(app.config.refund_settle)
        .clamp(Duration::from_millis(10), MAINTENANCE_TICK_MAX);
    while !*shutdown.borrow() {
        if let Err(e) = settle_due(&app).await {
            tracing::error!(error = %e, "settling processing payments failed");
        }
        if let Err(e) = app
            .store
            .forget_keys_before(app.key_not_before_ms(app.now_ms()))
            .await
        {
            tracing::error!(error = %e, "forgetting expired idempotency keys failed");
        }
        tokio::select! {
            _ = tokio::time::sleep(tick) => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// Refuses a configuration the simulator cannot run faithfully: a duplicate rate over 1000 per
/// mille, a contract spoken on another wire, a short-retention contract keeping keys longer than it
/// says, an empty API key, a webhook secret without `whsec_`, missing Adyen credentials, or
/// inconsistent rate limits.
fn validate(config: &SimulatorConfig) -> Result<(), SimulatorError> {
    if config.webhook_duplicates_per_mille > 1000 {
        return Err(SimulatorError::Config(
            "webhook_duplicates_per_mille must be at most 1000".into(),
        ));
    }
    if config.contract.wire() != config.wire {
        return Err(SimulatorError::Config(format!(
            "the {} contract is not spoken on the {:?} wire",
            config.contract, config.wire
        )));
    }
    if config.contract == crate::contract::Contract::ShortRetention
        && config.key_retention > crate::contract::SHORT_RETENTION_DEFAULT
    {
        return Err(SimulatorError::Config(format!(
            "the short-retention contract keeps keys at most {:?}, not {:?}",
            crate::contract::SHORT_RETENTION_DEFAULT,
            config.key_retention
        )));
    }
    if config.api_key.is_empty() {
        return Err(SimulatorError::Config("api_key must not be empty".into()));
    }
    if config.webhook_url.is_some() && !config.webhook_secret.starts_with("whsec_") {
        return Err(SimulatorError::Config(
            "webhook_secret must start with whsec_".into(),
        ));
    }
    if config.wire == crate::config::Wire::Adyen {
        let adyen = &config.adyen;
        if adyen.api_key.is_empty() || adyen.merchant_account.is_empty() {
            return Err(SimulatorError::Config(
                "the Adyen API key and merchant account must not be empty".into(),
            ));
        }
        if adyen.hmac_key_hex.is_empty() || hex::decode(&adyen.hmac_key_hex).is_err() {
            return Err(SimulatorError::Config(
                "the Adyen HMAC key must be non-empty hex".into(),
            ));
        }
    }
    config
        .rate_limits
        .validate()
        .map_err(SimulatorError::Config)?;
    Ok(())
}

impl Simulator {
    /// Binds `config.listen`, opens `config.database` and starts serving.
    pub async fn start(config: SimulatorConfig) -> Result<Simulator, SimulatorError> {
        validate(&config)?;
        let rate_limits = config.rate_limits.clone();
        install_crypto_provider();
        let store = Store::open(&config.database).await?;
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| SimulatorError::Bind {
                    addr: config.listen,
                    source,
                })?;
        let addr = listener
            .local_addr()
            .map_err(|source| SimulatorError::Bind {
                addr: config.listen,
                source,
            })?;
        let (stop, shutdown) = watch::channel(false);
        let app: Shared = Arc::new(App {
            faults: Faults::new(config.seed),
            config,
            store: store.clone(),
            in_flight: InFlight::default(),
            ids: IdGen::from_os(),
            audit: RequestAudit::default(),
            shutdown: shutdown.clone(),
            webhook_wake: Notify::new(),
            limiter: crate::rate_limits::Limiter::new(rate_limits),
            clock_offset_ms: std::sync::atomic::AtomicI64::new(0),
            accepted: Arc::default(),
        });
        let accepted = app.accepted.clone();
        let router = routes::router(app.clone());
        let mut signal = shutdown.clone();
        let server = tokio::spawn(async move {
            connection::serve(
                KillableListener::new(listener, accepted),
                router,
                async move {
                    let _ = signal.wait_for(|stop| *stop).await;
                },
            )
            .await;
        });
        let tasks = vec![
            tokio::spawn(maintenance(app.clone())),
            tokio::spawn(webhooks::run(app)),
        ];
        tracing::info!(%addr, "simulator listening");
        Ok(Simulator {
            addr,
            stop,
            server,
            tasks,
            store,
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops serving (hung requests are aborted), stops the background tasks and closes the database.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let mut server = self.server;
        if tokio::time::timeout(SHUTDOWN_GRACE, &mut server)
            .await
            .is_err()
        {
            tracing::warn!("simulator connections still open after the grace period; cutting them");
            server.abort();
        }
        for task in self.tasks {
            let _ = task.await;
        }
        self.store.close().await;
    }
}

/// Binary mode: serves `config` until `shutdown` resolves.
pub async fn run(
    config: SimulatorConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), SimulatorError> {
    let simulator = Simulator::start(config).await?;
    shutdown.await;
    simulator.shutdown().await;
    Ok(())
}

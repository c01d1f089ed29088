//! The all-in-one process: api, worker, reconciler and (by default) the simulator around one ledger —
//! SQLite unless the database URL says Postgres. `payonce serve` runs it for a newcomer; the demo
//! runs its story on the same [`Stack`].

use crate::ops;
use crate::settings::{ApiArgs, Common, ReconcilerArgs, WorkerArgs};
use anyhow::Context;
use clap::{ArgAction, Args};
use payonce_core::clock::{Clock, SharedClock, SystemClock};
use payonce_core::id::TenantId;
use payonce_ledger::SharedLedger;
use payonce_processor::Processors;
use payonce_processor::limiter::SharedLimiter;
use payonce_reconciler::Reconciler;
use payonce_simulator::{Simulator, SimulatorConfig};
use payonce_worker::Worker;
use payonce_worker::config::owner_name;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// `payonce serve` settings beyond those every deployable shares.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Start the built-in simulator and use it as the processor (false: use processor_url).
    #[arg(long = "simulator", env = "PAYONCE_SERVE_SIMULATOR", default_value_t = true, action = ArgAction::Set)]
    pub simulator: bool,
    /// Where the built-in simulator listens.
    #[arg(
        long,
        env = "PAYONCE_SIMULATOR_LISTEN",
        default_value = "127.0.0.1:12111"
    )]
    pub simulator_listen: SocketAddr,
    /// Tenant of the quick-start API keys (service, assistant) issued at the first start and reused after; empty: none.
    #[arg(long, env = "PAYONCE_SERVE_TENANT", default_value = "demo")]
    pub tenant: String,
}

/// What an all-in-one process runs.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Ledger and processor settings.
    pub common: Common,
    /// The api.
    pub api: ApiArgs,
    /// The in-process worker.
    pub worker: WorkerArgs,
    /// The in-process reconciler.
    pub reconciler: ReconcilerArgs,
    /// The built-in simulator, if any; its webhooks are pointed at this api and signed with its secret.
    pub simulator: Option<SimulatorConfig>,
}

/// A running all-in-one process. The worker and reconciler start separately so the demo can stage its
/// crash before the in-process worker competes for the operation.
pub struct Stack {
    /// The ledger every component shares.
    pub ledger: SharedLedger,
    /// The api's base URL (what confirmation links use).
    pub api_url: String,
    /// The processor's base URL.
    pub processor_url: String,
    /// Every processor the worker and reconciler serve (the default first: the api's card reader).
    processors: Processors,
    /// The one fleet limiter of this process (in-process unless configured `redis`).
    pub limiter: SharedLimiter,
    clock: SharedClock,
    plan: Plan,
    simulator: Option<Simulator>,
    stop: watch::Sender<bool>,
    /// Resolves with the api's error if it stops on its own.
    api_failure: tokio::sync::oneshot::Receiver<anyhow::Error>,
    tasks: Vec<JoinHandle<()>>,
}

/// A future that resolves when `stop` is set.
fn stopped(stop: &watch::Sender<bool>) -> impl Future<Output = ()> + Send + 'static {
    let mut rx = stop.subscribe();
    async move {
        let _ = rx.wait_for(|s| *s).await;
    }
}

/// Points a built-in simulator at Adyen's wire: keys kept Adyen's 31 days (unless a test set its
/// own), the adapter's API key and merchant account, and an HMAC key shared with the api (a fresh
/// one per run unless one is configured: the simulator's published key would let anyone sign).
fn adyen_simulator(
    sim: &mut SimulatorConfig,
    common: &Common,
    api_config: &mut payonce_api::ApiConfig,
) {
    sim.wire = payonce_simulator::Wire::Adyen;
    if sim.key_retention == payonce_simulator::config::KEY_RETENTION_DEFAULT {
        sim.key_retention = payonce_simulator::config::ADYEN_KEY_RETENTION_DEFAULT;
    }
    sim.adyen.api_key = common.adyen_api_key.clone();
    sim.adyen.merchant_account = common.adyen_merchant_account.clone();
    let key = api_config
        .adyen_hmac_key
        .get_or_insert_with(|| payonce_core::id::random_hex(32));
    sim.adyen.hmac_key_hex = key.clone();
}

/// A loopback address for a socket bound to "any", so in-process callers can reach it.
fn reachable(addr: SocketAddr) -> SocketAddr {
    if addr.ip().is_unspecified() {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), addr.port())
    } else {
        addr
    }
}

impl Stack {
    /// Opens the ledger (running migrations), starts the simulator if planned, and serves the api.
    pub async fn start(mut plan: Plan) -> anyhow::Result<Stack> {
        // Refused settings stop everything before anything starts or prints: a banner with keys and
        // a running worker behind an api that never listened would look like a working stack.
        plan.api
            .config()
            .check()
            .context("the api cannot start with these settings")?;
        let ledger = crate::open(&plan.common).await?;
        // Resolved once, and checked against the ledger: an in-memory ledger's secret is fresh,
        // and the api and the reconciler must derive with the same one.
        plan.common.key_secret = plan.common.key_secret(&ledger).await?.expose().to_string();
        let listener = tokio::net::TcpListener::bind(plan.api.listen)
            .await
            .with_context(|| format!("cannot listen on {} (api_listen)", plan.api.listen))?;
        let bound = reachable(listener.local_addr()?);
        let mut api_config = plan.api.config();
        api_config.key_secret = payonce_core::intention::KeySecret::parse(&plan.common.key_secret)?;
        api_config.listen = bound;
        if plan.api.public_base_url.is_none() {
            api_config.public_base_url = format!("http://{bound}");
        }
        let mut common = plan.common.clone();
        api_config.adyen_merchant_account = Some(common.adyen_merchant_account.clone());
        let adyen = common.processor == "adyen";
        let simulator = match plan.simulator.clone() {
            Some(mut sim) => {
                if adyen {
                    adyen_simulator(&mut sim, &common, &mut api_config);
                    sim.webhook_url = Some(format!("http://{bound}/v1/webhooks/adyen"));
                } else if api_config.webhook_secrets.is_empty() {
                    // A fresh secret per run: the simulator's published default would let anyone
                    // who reads the docs sign webhooks for this stack.
                    let secret = format!("whsec_{}", payonce_core::id::random_hex(24));
                    api_config.webhook_secrets.push(secret.clone());
                    sim.webhook_secret = secret;
                } else {
                    sim.webhook_secret = api_config.webhook_secrets[0].clone();
                }
                if !adyen {
                    sim.webhook_url = Some(format!("http://{bound}/v1/webhooks/stripe"));
                }
                // The built-in simulator runs the contract the adapter declares, retention included.
                let declared = plan.common.contract()?;
                sim.contract = payonce_simulator::Contract::parse(declared.name)
                    .map_err(anyhow::Error::msg)
                    .context("the built-in simulator cannot run processor_contract")?;
                if let Some(retention) = declared.key_retention {
                    sim.key_retention = retention;
                }
                sim.api_key = common.processor_secret_key.clone();
                let sim = Simulator::start(sim)
                    .await
                    .context("starting the built-in simulator (simulator_listen)")?;
                common.processor_url = sim.base_url();
                Some(sim)
            }
            None => None,
        };
        let processors = common.processors()?;
        let limiter = common.limiter()?;
        let clock: SharedClock = Arc::new(SystemClock);
        let (stop, _) = watch::channel(false);
        // The api's times on the database's clock, as the worker's and the reconciler's leases.
        let api_clock = payonce_api::database_clock(ledger.clone(), clock.clone()).await?;
        let state = payonce_api::AppState::new(ledger.clone(), api_clock, api_config.clone())
            .with_processors(processors.clone());
        let api_stopped = stopped(&stop);
        let (api_failed, api_failure) = tokio::sync::oneshot::channel();
        let api = tokio::spawn(async move {
            if let Err(error) = payonce_api::serve_listener(listener, state, api_stopped).await {
                // `serve` reports it and stops every other component with it.
                let _ = api_failed.send(anyhow::Error::from(error).context("the api stopped"));
            }
        });
        Ok(Stack {
            ledger,
            api_url: api_config.base_url().to_string(),
            processor_url: common.processor_url.clone(),
            processors,
            limiter,
            clock,
            plan: Plan { common, ..plan },
            simulator,
            stop,
            api_failure,
            tasks: vec![api],
        })
    }

    /// Starts the in-process worker.
    pub fn start_worker(&mut self) -> anyhow::Result<Arc<Worker>> {
        let mut config = self.plan.worker.config(owner_name("serve-worker"));
        config.submit.limiter = self.limiter.clone();
        let worker = Arc::new(
            Worker::with_processors(
                self.ledger.clone(),
                self.processors.clone(),
                self.clock.clone(),
                config,
            )
            .map_err(anyhow::Error::msg)
            .context("worker settings")?,
        );
        let run = worker.clone().run(stopped(&self.stop));
        self.tasks.push(tokio::spawn(async move {
            run.await;
        }));
        self.tasks
            .push(tokio::spawn(crate::ops::record_reachability(
                self.ledger.clone(),
                owner_name("serve"),
                stopped(&self.stop),
            )));
        Ok(worker)
    }

    /// Starts the in-process reconciler daemon.
    pub fn start_reconciler(&mut self) -> Arc<Reconciler> {
        let owner = owner_name("serve-reconciler");
        let mut config = self.plan.reconciler.config(owner, &self.plan.worker.submit);
        config.retry.limiter = self.limiter.clone();
        config.key_secret =
            payonce_core::intention::KeySecret::parse(&self.plan.common.key_secret).ok();
        let reconciler = Arc::new(Reconciler::with_processors(
            self.ledger.clone(),
            self.processors.clone(),
            self.clock.clone(),
            config,
        ));
        let run = reconciler.clone().run(stopped(&self.stop));
        self.tasks.push(tokio::spawn(run));
        reconciler
    }

    /// Waits for `stop`, or for the api to fail (its error: the caller stops the rest with it).
    pub async fn until_stopped(&mut self, stop: impl Future<Output = ()>) -> Option<anyhow::Error> {
        tokio::select! {
            () = stop => None,
            failed = &mut self.api_failure => failed.ok(),
        }
    }

    /// Stops everything within the grace (`shutdown_grace_ms`), as the separate daemons do: the
    /// worker and reconciler reach a safe point, the api finishes in-flight requests, then the
    /// simulator stops. Past the grace (a ledger that cannot take the last outcomes, a full disk:
    /// issue 53) what is still blocked is left as a kill would leave it, with a warning.
    pub async fn shutdown(self) {
        let grace = std::time::Duration::from_millis(self.plan.worker.grace.shutdown_grace_ms);
        let deadline = tokio::time::Instant::now() + grace;
        let _ = self.stop.send(true);
        let tasks = self.tasks;
        let stopped = tokio::time::timeout_at(deadline, async move {
            for task in tasks {
                let _ = task.await;
            }
        })
        .await;
        let stopped = match (stopped, self.simulator) {
            (Ok(()), Some(sim)) => tokio::time::timeout_at(deadline, sim.shutdown())
                .await
                .is_ok(),
            (Ok(()), None) => true,
            (Err(_), _) => false,
        };
        if !stopped {
            tracing::warn!(
                grace_ms = grace.as_millis() as u64,
                "shutdown grace passed with work still blocked; stopping now (leases expire and the \
                 reconciler finishes anything in flight)"
            );
        }
    }
}

/// Plays the serve tenant's own app: registers one-time codes as its customers' verification, with
/// the in-process tenant app (`tenant_app.rs`) as the notification endpoint.
async fn start_tenant_app(stack: &mut Stack, tenant: &TenantId) -> anyhow::Result<()> {
    use payonce_api::verify::{VerificationRequest, set_tenant_verification};
    use payonce_ledger::verification::VerificationMethod;
    let (listener, notify_url) = crate::tenant_app::bind().await?;
    let request = VerificationRequest {
        method: VerificationMethod::OneTimeCode,
        assertion_key_id: None,
        notify_url: Some(notify_url),
    };
    let secrets =
        set_tenant_verification(&stack.ledger, tenant, &request, SystemClock.now()).await?;
    let secret = secrets
        .notify_secret
        .context("a one-time-code tenant has a notification secret")?;
    let app = crate::tenant_app::start(listener, secret, stack.stop.subscribe());
    stack.tasks.push(app);
    Ok(())
}

/// `payonce serve`: runs the stack until SIGTERM or Ctrl-C, after printing its URLs and its API keys
/// (issued at the first start, reused after).
pub async fn run(
    common: Common,
    api: ApiArgs,
    worker: WorkerArgs,
    reconciler: ReconcilerArgs,
    serve: ServeArgs,
) -> anyhow::Result<ExitCode> {
    let simulator = serve.simulator.then(|| SimulatorConfig {
        listen: serve.simulator_listen,
        ..SimulatorConfig::default()
    });
    let metrics_listen = common.metrics_listen.clone();
    let mut stack = Stack::start(Plan {
        common,
        api,
        worker,
        reconciler,
        simulator,
    })
    .await?;
    let w = stack.start_worker()?;
    let r = stack.start_reconciler();
    ops::spawn_metrics(
        &metrics_listen,
        ops::MetricsState {
            ledger: stack.ledger.clone(),
            worker: Some(w.metrics()),
            reconciler: Some(r.metrics()),
            limiter: Some(stack.limiter.clone()),
        },
    )
    .await?;
    print_endpoints(&stack, &metrics_listen);
    if !serve.tenant.is_empty() {
        let tenant = TenantId::parse(&serve.tenant).context("serve_tenant")?;
        welcome_tenant(&mut stack, &tenant).await?;
    }
    let stop = ops::shutdown_signal();
    println!("Stop with Ctrl-C.");
    let failure = stack.until_stopped(stop).await;
    stack.shutdown().await;
    match failure {
        Some(error) => Err(error),
        None => Ok(ExitCode::SUCCESS),
    }
}

/// Prints where the stack's parts listen: the api, the processor, the ledger and the metrics.
fn print_endpoints(stack: &Stack, metrics_listen: &str) {
    println!(
        "payonce serve: api, worker, reconciler{} in one process",
        if stack.simulator.is_some() {
            " and simulator"
        } else {
            ""
        }
    );
    println!(
        "  api        {}  (/openapi.json, /healthz, /readyz, /metrics)",
        stack.api_url
    );
    println!(
        "  processor  {}{}",
        stack.processor_url,
        if stack.simulator.is_some() {
            "  (built-in simulator)"
        } else {
            ""
        }
    );
    println!(
        "  ledger     {}",
        crate::redact(&stack.plan.common.database_url)
    );
    if !metrics_listen.is_empty() {
        println!("  metrics    http://{metrics_listen}/metrics  (worker and reconciler)");
    }
}

/// Issues (or reuses) the serve tenant's quick-start keys, starts its tenant app, and prints the
/// copy-paste walk-through.
async fn welcome_tenant(stack: &mut Stack, tenant: &TenantId) -> anyhow::Result<()> {
    let keys_file = crate::keys::serve_keys_file(&stack.plan.common.database_url);
    let keys = crate::keys::serve_keys(
        &stack.ledger,
        tenant,
        keys_file.as_deref(),
        SystemClock.now(),
    )
    .await?;
    let secrets = crate::keys::print_serve_keys(
        tenant,
        &keys,
        keys_file.as_deref(),
        &stack.plan.common.database_url,
    );
    start_tenant_app(stack, tenant).await?;
    println!(
        "  customers of {tenant} approve with a one-time code; the built-in tenant app prints each \
         link and code here (a real tenant sends them by email or SMS)"
    );
    let binary =
        std::env::current_exe().map_or_else(|_| "payonce".to_string(), |p| p.display().to_string());
    // A relative SQLite path made absolute: the commands work from any directory.
    let database_url = match crate::sqlite_file(&stack.plan.common.database_url) {
        Some(path) if path.is_relative() => std::env::current_dir().map_or_else(
            |_| stack.plan.common.database_url.clone(),
            |dir| format!("sqlite:{}", dir.join(path).display()),
        ),
        _ => crate::keys::hint_url(&stack.plan.common.database_url),
    };
    let simulator_url = stack
        .simulator
        .is_some()
        .then(|| stack.processor_url.clone());
    let walk = crate::banner::Stack {
        api_url: &stack.api_url,
        simulator_url: simulator_url.as_deref(),
        key_retention_s: stack.plan.common.key_retention_s,
        database_url: &database_url,
        binary: &binary,
    };
    for line in crate::banner::walkthrough(&walk, tenant, &secrets) {
        println!("{line}");
    }
    println!("Every route: docs/api.md; on-call: docs/runbook.md.");
    Ok(())
}

//! Process configuration from environment variables (and flags), with documented defaults. Every
//! limit the daemons take is set here explicitly; docs/configuration.md lists them.

use anyhow::Context;
use clap::{Args, Command, FromArgMatches};
use payonce_reconciler::ReconcilerConfig;
use payonce_shared::execution::SubmitPolicy;
use payonce_shared::intention::KeySecret;
use payonce_shared::ledger::postgres::{Pooler, Route};
use payonce_shared::limiter::{
    LocalLimiter, Rates, RedisLimiter, RedisLimiterConfig, SharedLimiter, Unlimited,
};
use payonce_shared::processor::adyen::{AdyenConfig, AdyenProcessor};
use payonce_shared::processor::stripe::{StripeConfig, StripeProcessor};
use payonce_shared::processor::{Processor, ProcessorKind, Processors};
use payonce_worker::WorkerConfig;
use std::sync::Arc;
use std::time::Duration;

/// The built-in defaults of a group of settings, ignoring the environment and any config file: the
/// demo runs the same way on every machine.
pub fn builtin_defaults<T: Args + FromArgMatches>() -> anyhow::Result<T> {
    let mut cmd = T::augment_args(Command::new("defaults").no_binary_name(true));
    let ids: Vec<clap::Id> = cmd.get_arguments().map(|a| a.get_id().clone()).collect();
    for id in ids {
        cmd = cmd.mut_arg(id, |a| a.env(None));
    }
    let matches = cmd.try_get_matches_from(Vec::<String>::new())?;
    Ok(T::from_arg_matches(&matches)?)
}

/// Settings shared by every daemon.
#[derive(Debug, Clone, Args)]
pub struct Common {
    /// Ledger: `postgres://…` (production) or `sqlite:FILE` / `sqlite::memory:` (single node).
    #[arg(
        long,
        global = true,
        env = "PAYONCE_DATABASE_URL",
        default_value = "sqlite:payonce.db"
    )]
    pub database_url: String,
    /// Most pooled ledger connections (Postgres). Every process's pool can grow to it at once when
    /// the database stalls: the sum over all processes must fit the server (docs/runbook.md,
    /// "Connection budget").
    #[arg(
        long,
        global = true,
        env = "PAYONCE_DB_MAX_CONNECTIONS",
        default_value_t = 16
    )]
    pub db_max_connections: u32,
    /// How long opening the ledger keeps trying a Postgres that is down, starting, out of connection
    /// slots or unreachable, ms (backoff from 0.1 s to 5 s); the process does not listen meanwhile,
    /// and past it exits naming the database's host, port and the last cause.
    #[arg(long, global = true, env = "PAYONCE_DB_CONNECT_TIMEOUT_MS", default_value_t = 60_000,
          value_parser = clap::value_parser!(u64).range(1_000..=3_600_000))]
    pub db_connect_timeout_ms: u64,
    /// What sits between the processes and Postgres: `none`, `session` (a pooler in session mode)
    /// or `transaction` (PgBouncer `pool_mode = transaction`: no named prepared statements, every
    /// statement in a transaction that sets its own statement timeout, no LISTEN unless
    /// `direct_database_url` is set) (docs/runbook.md, "Deploying on managed Postgres").
    #[arg(long, global = true, env = "PAYONCE_DB_POOLER", default_value = "none",
          value_parser = ["none", "session", "transaction"])]
    pub db_pooler: String,
    /// The same Postgres database without the pooler, for LISTEN (instant wake-ups) and migrations;
    /// empty: both go through `database_url` (behind a transaction pooler, idle workers then poll).
    #[arg(
        long,
        global = true,
        env = "PAYONCE_DIRECT_DATABASE_URL",
        default_value = ""
    )]
    pub direct_database_url: String,
    /// Which processor's wire: `stripe` (Stripe's API) or `adyen` (Adyen Checkout v71, HMAC-signed
    /// notifications; no lookup by id: unknown outcomes are resolved by the same key and by notifications).
    // Not `PAYONCE_PROCESSOR`: the serve banner exports that as the simulator's URL.
    #[arg(long, global = true, env = "PAYONCE_PROCESSOR_KIND", default_value = "stripe",
          value_parser = ["stripe", "adyen"])]
    pub processor: String,
    /// Adyen API key, sent as `X-API-Key` (`processor = adyen`).
    #[arg(
        long,
        global = true,
        env = "PAYONCE_ADYEN_API_KEY",
        default_value = "adyen_test_payonce",
        hide_env_values = true
    )]
    pub adyen_api_key: String,
    /// Adyen merchant account every request names and every notification must name (`processor = adyen`).
    #[arg(
        long,
        global = true,
        env = "PAYONCE_ADYEN_MERCHANT_ACCOUNT",
        default_value = "PayonceECOM"
    )]
    pub adyen_merchant_account: String,
    /// Processor base URL: the simulator, https://api.stripe.com, or Adyen's Checkout base (`https://checkout-test.adyen.com`).
    #[arg(
        long,
        global = true,
        env = "PAYONCE_PROCESSOR_URL",
        default_value = "http://127.0.0.1:12111"
    )]
    pub processor_url: String,
    /// Stripe's base URL beside `processor = adyen`: this process then also serves operations of
    /// tenants on Stripe (`payonce tenant set-processor`), with `processor_secret_key` and
    /// `processor_contract`. Empty: Adyen only.
    #[arg(long, global = true, env = "PAYONCE_STRIPE_URL", default_value = "")]
    pub stripe_url: String,
    /// Adyen Checkout's base URL beside `processor = stripe`: this process then also serves
    /// operations of tenants on Adyen (`payonce tenant set-processor`), with `adyen_api_key` and
    /// `adyen_merchant_account`. Empty: Stripe only.
    #[arg(long, global = true, env = "PAYONCE_ADYEN_URL", default_value = "")]
    pub adyen_url: String,
    /// Processor secret key.
    #[arg(
        long,
        global = true,
        env = "PAYONCE_PROCESSOR_SECRET_KEY",
        default_value = "sk_test_payonce",
        hide_env_values = true
    )]
    pub processor_secret_key: String,
    /// The processor's documented contract the adapter declares, which the reconciler's and the
    /// worker's rules follow: `stripe`, or the contract a simulator runs (`payonce simulator
    /// --list-contracts`); serve's built-in simulator runs the same one.
    #[arg(long, global = true, env = "PAYONCE_PROCESSOR_CONTRACT", default_value = "stripe",
          value_parser = clap::builder::PossibleValuesParser::new(payonce_shared::processor::contract::names()))]
    pub processor_contract: String,
    /// Override of the processor's key retention in seconds (only for a simulator configured shorter).
    #[arg(long, global = true, env = "PAYONCE_KEY_RETENTION_S")]
    pub key_retention_s: Option<u64>,
    /// Processor connect timeout, ms.
    #[arg(
        long,
        global = true,
        env = "PAYONCE_PROCESSOR_CONNECT_TIMEOUT_MS",
        default_value_t = 2_000
    )]
    pub processor_connect_timeout_ms: u64,
    /// Processor total request timeout, ms.
    #[arg(
        long,
        global = true,
        env = "PAYONCE_PROCESSOR_TIMEOUT_MS",
        default_value_t = 15_000
    )]
    pub processor_timeout_ms: u64,
    /// Most idle keep-alive connections kept to the processor; below the requests in flight, bursts
    /// of answers close connections the next burst must open again.
    #[arg(long, global = true, env = "PAYONCE_PROCESSOR_IDLE_CONNECTIONS", default_value_t = 64,
          value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub processor_idle_connections: u64,
    /// Speak HTTP/2 to the processor (one connection, a stream per request in flight) instead of a
    /// connection per request. Off by default: the server's stream limit then caps the requests in
    /// flight, and a lost connection loses every request on it (docs/decisions.md).
    #[arg(long, global = true, env = "PAYONCE_PROCESSOR_HTTP2", default_value_t = false, action = clap::ArgAction::Set)]
    pub processor_http2: bool,
    /// Fleet limiter: `local` (in-process; embedded mode), `redis` (shared by every process of the
    /// account through `limiter_redis_url`), or `off` (no pacing; 429s are still retried).
    #[arg(long, global = true, env = "PAYONCE_LIMITER", default_value = "local",
          value_parser = ["local", "redis", "off"])]
    pub limiter: String,
    /// Redis of the shared limiter (`limiter = redis`).
    #[arg(
        long,
        global = true,
        env = "PAYONCE_LIMITER_REDIS_URL",
        default_value = "redis://127.0.0.1:6379",
        hide_env_values = true
    )]
    pub limiter_redis_url: String,
    /// PEM file of the CA that signs the limiter's Redis certificate (`rediss://` to a server the
    /// system's trust store does not vouch for); empty: the system's trust store.
    #[arg(
        long,
        global = true,
        env = "PAYONCE_LIMITER_REDIS_CA_FILE",
        default_value = ""
    )]
    pub limiter_redis_ca_file: String,
    /// Prefix of the shared limiter's Redis keys.
    #[arg(
        long,
        global = true,
        env = "PAYONCE_LIMITER_KEY_PREFIX",
        default_value = "payonce:limiter"
    )]
    pub limiter_key_prefix: String,
    /// The processor account the budget belongs to (one budget per account).
    #[arg(
        long,
        global = true,
        env = "PAYONCE_LIMITER_ACCOUNT",
        default_value = "default"
    )]
    pub limiter_account: String,
    /// Submissions per second across the fleet.
    #[arg(long, global = true, env = "PAYONCE_LIMITER_WRITE_PER_SECOND", default_value_t = 100,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub limiter_write_per_second: u32,
    /// Lookups per second across the fleet.
    #[arg(long, global = true, env = "PAYONCE_LIMITER_READ_PER_SECOND", default_value_t = 100,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub limiter_read_per_second: u32,
    /// Reads and writes together per second across the fleet (Stripe: 100 live, 25 sandbox); 0: no
    /// account-wide cap beyond the two budgets.
    #[arg(long, global = true, env = "PAYONCE_LIMITER_GLOBAL_PER_SECOND", default_value_t = 0,
          value_parser = clap::value_parser!(u32).range(0..=100_000))]
    pub limiter_global_per_second: u32,
    /// Percent of the global rate reserved for lookups (submissions can never take it).
    #[arg(long, global = true, env = "PAYONCE_LIMITER_READ_RESERVED_PERCENT", default_value_t = 20,
          value_parser = clap::value_parser!(u32).range(0..100))]
    pub limiter_read_reserved_percent: u32,
    /// Percent of the global rate reserved for submissions (lookups can never take it).
    #[arg(long, global = true, env = "PAYONCE_LIMITER_WRITE_RESERVED_PERCENT", default_value_t = 50,
          value_parser = clap::value_parser!(u32).range(0..100))]
    pub limiter_write_reserved_percent: u32,
    /// Permits one budget may grant at once after an idle spell.
    #[arg(long, global = true, env = "PAYONCE_LIMITER_BURST", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub limiter_burst: u32,
    /// Processes sharing the budget: while Redis is unreachable each one limits itself to the budget
    /// divided by this.
    #[arg(long, global = true, env = "PAYONCE_LIMITER_EXPECTED_PROCESSES", default_value_t = 4,
          value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub limiter_expected_processes: u32,
    /// Connect and response timeout of each shared-limiter call, ms; past it the local share decides.
    #[arg(long, global = true, env = "PAYONCE_LIMITER_TIMEOUT_MS", default_value_t = 100,
          value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub limiter_timeout_ms: u64,
    /// Where worker and reconciler serve `/metrics`, `/healthz` and `/readyz` (worker, reconciler run, serve; the api serves them on its own address); empty: nowhere.
    #[arg(
        long,
        global = true,
        env = "PAYONCE_METRICS_LISTEN",
        default_value = ""
    )]
    pub metrics_listen: String,
    /// Secret of the keyed hash that derives each operation's id and processor key from its
    /// business action (tenant, business key); the same on every process of a ledger for its whole
    /// life (the ledger keeps its fingerprint and every process refuses another) and kept outside
    /// its backups. Empty: on a SQLite file, the one kept next to it (created mode 0600, never for
    /// a ledger that holds operations); elsewhere, required.
    #[arg(
        long,
        global = true,
        env = "PAYONCE_KEY_SECRET",
        default_value = "",
        hide_env_values = true
    )]
    pub key_secret: String,
}

impl Common {
    /// How the ledger's Postgres is reached: `db_pooler` and `direct_database_url`.
    pub fn database_route(&self) -> Route {
        Route {
            pooler: match self.db_pooler.as_str() {
                "session" => Pooler::Session,
                "transaction" => Pooler::Transaction,
                _ => Pooler::None,
            },
            direct_url: (!self.direct_database_url.is_empty())
                .then(|| self.direct_database_url.clone()),
        }
    }

    /// The key secret, checked against `ledger`'s fingerprint ([`crate::key_secret::checked`]):
    /// the configured one, else the file next to a SQLite ledger (created only for a ledger that
    /// holds no operation yet), else a fresh one for an in-memory ledger; a Postgres ledger
    /// requires it configured.
    pub async fn key_secret(
        &self,
        ledger: &payonce_shared::ledger::SharedLedger,
    ) -> anyhow::Result<KeySecret> {
        let now = ledger
            .now(payonce_shared::clock::Clock::now(
                &payonce_shared::clock::SystemClock,
            ))
            .await?;
        crate::key_secret::checked(&self.key_secret, &self.database_url, ledger.identity(), now)
            .await
    }

    /// Whether this process has a key secret without being told one: configured, or a SQLite
    /// ledger's (its file, or a fresh one for an in-memory ledger). A process that derives no
    /// keys (the worker) checks the secret only when it has one.
    pub fn key_secret_set(&self) -> bool {
        !self.key_secret.is_empty() || self.database_url.starts_with("sqlite:")
    }

    /// The declared processor contract, with `key_retention_s` if set: Adyen's for `processor =
    /// adyen`, else `processor_contract` (Stripe's wire). A contract on Stripe's wire named beside
    /// `processor = adyen` is refused rather than ignored.
    pub fn contract(&self) -> anyhow::Result<payonce_shared::processor::Contract> {
        let contract = if self.processor == "adyen" {
            anyhow::ensure!(
                self.processor_contract == payonce_shared::processor::contract::STRIPE.name,
                "processor_contract {:?} runs on Stripe's wire; processor adyen runs Adyen's own \
                 contract (leave processor_contract unset)",
                self.processor_contract
            );
            payonce_shared::processor::contract::ADYEN_CHECKOUT
        } else {
            payonce_shared::processor::contract::by_name(&self.processor_contract).with_context(
                || {
                    format!(
                        "processor_contract {:?} is not one of {}",
                        self.processor_contract,
                        payonce_shared::processor::contract::names().join(", ")
                    )
                },
            )?
        };
        Ok(match self.key_retention_s {
            Some(s) => contract.with_key_retention(Duration::from_secs(s)),
            None => contract,
        })
    }

    /// The configured adapter (`processor`) pointed at the configured processor, declaring
    /// [`Common::contract`].
    pub fn processor(&self) -> anyhow::Result<Arc<dyn Processor>> {
        if self.processor == "adyen" {
            return self.adyen_at(&self.processor_url);
        }
        self.stripe_at(&self.processor_url)
    }

    /// Every adapter this process is configured for: `processor` (the default, serving operations
    /// that name none) and, beside it, the other one when its URL (`stripe_url`, `adyen_url`) is
    /// set. The default's own URL setting beside it is refused rather than ignored.
    pub fn processors(&self) -> anyhow::Result<Processors> {
        let processors = Processors::single(self.processor()?);
        if self.processor == "adyen" {
            anyhow::ensure!(
                self.adyen_url.is_empty(),
                "adyen_url is for Adyen beside processor = stripe; with processor = adyen, Adyen's URL \
                 is processor_url"
            );
            if self.stripe_url.is_empty() {
                return Ok(processors);
            }
            let stripe = self.stripe_at(&self.stripe_url)?;
            return processors
                .with(ProcessorKind::Stripe, stripe)
                .map_err(anyhow::Error::msg);
        }
        anyhow::ensure!(
            self.stripe_url.is_empty(),
            "stripe_url is for Stripe beside processor = adyen; with processor = stripe, Stripe's URL \
             is processor_url"
        );
        if self.adyen_url.is_empty() {
            return Ok(processors);
        }
        let adyen = self.adyen_at(&self.adyen_url)?;
        processors
            .with(ProcessorKind::Adyen, adyen)
            .map_err(anyhow::Error::msg)
    }

    /// The Adyen adapter at `url`: its own contract (with `key_retention_s` when Adyen is the
    /// default), `adyen_api_key`, `adyen_merchant_account`.
    fn adyen_at(&self, url: &str) -> anyhow::Result<Arc<dyn Processor>> {
        let mut config = AdyenConfig::new(
            url.trim_end_matches('/'),
            self.adyen_api_key.clone(),
            self.adyen_merchant_account.clone(),
        );
        config.connect_timeout = Duration::from_millis(self.processor_connect_timeout_ms);
        config.request_timeout = Duration::from_millis(self.processor_timeout_ms);
        let mut adyen = AdyenProcessor::new(config)?;
        if self.processor == "adyen" {
            // Refuses a contract on Stripe's wire named beside it; carries key_retention_s.
            let declared = self.contract()?;
            if let Some(retention) = declared.key_retention {
                adyen = adyen.with_key_retention(retention);
            }
        }
        Ok(Arc::new(adyen))
    }

    /// The Stripe adapter at `url`: `processor_secret_key`, declaring `processor_contract` (with
    /// `key_retention_s` when Stripe is the default).
    fn stripe_at(&self, url: &str) -> anyhow::Result<Arc<dyn Processor>> {
        let mut config =
            StripeConfig::new(url.trim_end_matches('/'), self.processor_secret_key.clone());
        config.connect_timeout = Duration::from_millis(self.processor_connect_timeout_ms);
        config.request_timeout = Duration::from_millis(self.processor_timeout_ms);
        config.idle_connections = usize::try_from(self.processor_idle_connections)?;
        config.http2 = self.processor_http2;
        let contract = if self.processor == "adyen" {
            payonce_shared::processor::contract::by_name(&self.processor_contract)
                .context("processor_contract is one of the registry")?
        } else {
            self.contract()?
        };
        let stripe = StripeProcessor::new(config)?.with_contract(contract)?;
        Ok(Arc::new(stripe))
    }

    /// The account's budget.
    pub fn limiter_rates(&self) -> Rates {
        Rates {
            write_per_second: self.limiter_write_per_second,
            read_per_second: self.limiter_read_per_second,
            global_per_second: (self.limiter_global_per_second > 0)
                .then_some(self.limiter_global_per_second),
            read_reserved_percent: self.limiter_read_reserved_percent,
            write_reserved_percent: self.limiter_write_reserved_percent,
            burst: self.limiter_burst,
        }
    }

    /// This process's fleet limiter (one per process: the worker and the reconciler in it share it).
    pub fn limiter(&self) -> anyhow::Result<SharedLimiter> {
        let rates = self.limiter_rates();
        Ok(match self.limiter.as_str() {
            "off" => Arc::new(Unlimited::default()),
            "redis" => Arc::new(
                RedisLimiter::new(RedisLimiterConfig {
                    url: self.limiter_redis_url.clone(),
                    ca_file: (!self.limiter_redis_ca_file.is_empty())
                        .then(|| self.limiter_redis_ca_file.clone().into()),
                    key_prefix: self.limiter_key_prefix.clone(),
                    account: self.limiter_account.clone(),
                    rates,
                    expected_processes: self.limiter_expected_processes,
                    timeout: Duration::from_millis(self.limiter_timeout_ms),
                })
                .map_err(anyhow::Error::msg)?,
            ),
            _ => {
                rates.validate().map_err(anyhow::Error::msg)?;
                Arc::new(LocalLimiter::new(rates))
            }
        })
    }
}

/// Worker limits.
#[derive(Debug, Clone, Args)]
pub struct WorkerArgs {
    /// Most operations in flight: submitted or about to be, and not yet recorded.
    #[arg(long, env = "PAYONCE_WORKER_CONCURRENCY", default_value_t = 64)]
    pub concurrency: usize,
    /// Most operations per claim.
    #[arg(long, env = "PAYONCE_WORKER_BATCH", default_value_t = 32)]
    pub batch_size: u32,
    /// Before a payment's first submission, ask the processor whether it already holds one for the
    /// business key (one search per payment): for ledgers that may lose rows older than the
    /// processor's key retention (late restores, asynchronous replicas).
    #[arg(long, env = "PAYONCE_WORKER_CHECK_BEFORE_SUBMIT", default_value_t = false, action = clap::ArgAction::Set)]
    pub check_before_submit: bool,
    /// Lease renewal interval, ms.
    #[arg(long, env = "PAYONCE_LEASE_RENEW_MS", default_value_t = 10_000)]
    pub renew_ms: u64,
    /// Idle poll interval, ms (wake-ups usually come sooner).
    #[arg(long, env = "PAYONCE_POLL_MS", default_value_t = 500)]
    pub poll_ms: u64,
    /// How long shutdown waits for work in flight.
    #[command(flatten)]
    pub grace: GraceArgs,
    /// What a submission may do (shared with the reconciler's same-key retries).
    #[command(flatten)]
    pub submit: SubmitArgs,
}

/// How long a daemon's shutdown waits for work in flight (the worker and `reconciler run`).
#[derive(Debug, Clone, Args)]
pub struct GraceArgs {
    /// Shutdown grace, ms.
    #[arg(long, env = "PAYONCE_SHUTDOWN_GRACE_MS", default_value_t = 25_000)]
    pub shutdown_grace_ms: u64,
}

impl WorkerArgs {
    /// The worker configuration for `owner`.
    pub fn config(&self, owner: String) -> WorkerConfig {
        let mut c = WorkerConfig::new(owner);
        c.concurrency = self.concurrency;
        c.batch_size = self.batch_size;
        c.lease_ttl = self.submit.lease_ttl();
        c.renew_interval = Duration::from_millis(self.renew_ms);
        c.poll_interval = Duration::from_millis(self.poll_ms);
        c.shutdown_grace = Duration::from_millis(self.grace.shutdown_grace_ms);
        c.submit = self.submit.policy();
        c.submit.check_before_submit = self.check_before_submit;
        c
    }
}

/// What one submission may do: the worker's, and the reconciler's same-key retries'.
#[derive(Debug, Clone, Args)]
pub struct SubmitArgs {
    /// Lease TTL, ms.
    #[arg(long, env = "PAYONCE_LEASE_TTL_MS", default_value_t = 30_000)]
    pub lease_ttl_ms: u64,
    /// Submission timeout, ms.
    #[arg(long, env = "PAYONCE_SUBMIT_TIMEOUT_MS", default_value_t = 20_000)]
    pub submit_timeout_ms: u64,
    /// Claims before a never-submitted operation goes to a human.
    #[arg(long, env = "PAYONCE_ATTEMPT_MAX", default_value_t = 5)]
    pub attempt_max: i64,
    /// First check of an unknown outcome, ms after it was recorded.
    #[arg(long, env = "PAYONCE_FIRST_CHECK_MS", default_value_t = 2_000)]
    pub first_check_ms: u64,
    /// First pause after a processor 429 without `Retry-After`, ms (doubles, with jitter).
    #[arg(long, env = "PAYONCE_RATE_LIMIT_BACKOFF_MS", default_value_t = 250,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub rate_limit_backoff_ms: u64,
    /// Longest pause after a processor 429, ms.
    #[arg(long, env = "PAYONCE_RATE_LIMIT_BACKOFF_MAX_MS", default_value_t = 5_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub rate_limit_backoff_max_ms: u64,
    /// Longest a claimed submission waits for permits and retries 429s in place before going back to
    /// ready (never counted as a failed attempt), ms.
    #[arg(long, env = "PAYONCE_RATE_LIMIT_WAIT_MAX_MS", default_value_t = 120_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub rate_limit_wait_max_ms: u64,
}

impl SubmitArgs {
    /// The submission policy (the fleet limiter is the process's, set by the caller).
    pub fn policy(&self) -> SubmitPolicy {
        SubmitPolicy {
            submit_timeout: Duration::from_millis(self.submit_timeout_ms),
            attempt_max: self.attempt_max,
            first_check_delay: Duration::from_millis(self.first_check_ms),
            rate_limit_backoff_base: Duration::from_millis(self.rate_limit_backoff_ms),
            rate_limit_backoff_max: Duration::from_millis(self.rate_limit_backoff_max_ms),
            rate_limit_wait_max: Duration::from_millis(self.rate_limit_wait_max_ms),
            ..SubmitPolicy::default()
        }
    }

    /// How long a lease lasts without renewal.
    pub fn lease_ttl(&self) -> Duration {
        Duration::from_millis(self.lease_ttl_ms)
    }
}

/// Reconciler limits and policy.
#[derive(Debug, Clone, Args)]
pub struct ReconcilerArgs {
    /// Rows per sweep step.
    #[arg(long, env = "PAYONCE_SWEEP_BATCH", default_value_t = 200)]
    pub sweep_batch: u32,
    /// Stuck operations one sweep step works on at once (0 is taken as 1).
    #[arg(long, env = "PAYONCE_SWEEP_CONCURRENCY", default_value_t = payonce_reconciler::config::SWEEP_CONCURRENCY_DEFAULT)]
    pub sweep_concurrency: usize,
    /// Most rows one sweep write moves: expired leases per statement, found payments per commit
    /// (0 is taken as 1).
    #[arg(long, env = "PAYONCE_SWEEP_WRITE_BATCH", default_value_t = payonce_reconciler::config::SWEEP_WRITE_BATCH_DEFAULT)]
    pub sweep_write_batch: usize,
    /// Daemon sweep interval, ms.
    #[arg(long, env = "PAYONCE_SWEEP_INTERVAL_MS", default_value_t = 5_000)]
    pub sweep_interval_ms: u64,
    /// First back-off between checks, ms (doubles).
    #[arg(long, env = "PAYONCE_CHECK_BACKOFF_MS", default_value_t = 2_000)]
    pub check_backoff_ms: u64,
    /// Longest back-off between checks of one operation, ms: how late a recovered processor is noticed.
    #[arg(long, env = "PAYONCE_CHECK_BACKOFF_MAX_MS", default_value_t = 300_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub check_backoff_max_ms: u64,
    /// How long one reconciler's sweep lease lasts, ms: a killed reconciler holds off the others
    /// this long (two sweeping at once is still safe, every write is fenced; it is only wasteful).
    #[arg(long, env = "PAYONCE_SWEEP_LEASE_TTL_MS", default_value_t = 60_000,
          value_parser = clap::value_parser!(u64).range(1_000..))]
    pub sweep_lease_ttl_ms: u64,
    /// Same-key retries must land this long before the key's retention closes, ms.
    #[arg(long, env = "PAYONCE_RETENTION_MARGIN_MS", default_value_t = 300_000)]
    pub retention_margin_ms: u64,
    /// Days a checked webhook's payload is kept after it was checked (pending ones are never pruned).
    #[arg(long, env = "PAYONCE_WEBHOOK_RETENTION_DAYS", default_value_t = 7,
          value_parser = clap::value_parser!(u64).range(1..=3_650))]
    pub webhook_retention_days: u64,
    /// Days a tool call's correlation row, and the answer kept for its idempotency key, are kept.
    #[arg(long, env = "PAYONCE_TOOL_CALL_RETENTION_DAYS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=3_650))]
    pub tool_call_retention_days: u64,
    /// Days an expired confirmation link or console session is kept.
    #[arg(long, env = "PAYONCE_EXPIRED_TOKEN_RETENTION_DAYS", default_value_t = 7,
          value_parser = clap::value_parser!(u64).range(1..=3_650))]
    pub expired_token_retention_days: u64,
    /// Time between prunes in the reconciler daemon, ms (`payonce prune` runs one now).
    #[arg(long, env = "PAYONCE_PRUNE_INTERVAL_MS", default_value_t = 3_600_000,
          value_parser = clap::value_parser!(u64).range(1_000..))]
    pub prune_interval_ms: u64,
    /// Longest a lookup waits for a read permit from the fleet limiter before the check is deferred, ms.
    #[arg(long, env = "PAYONCE_LOOKUP_PERMIT_WAIT_MS", default_value_t = 2_000,
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub lookup_permit_wait_ms: u64,
    /// Allow resubmission after the window on a consistent "not found".
    #[arg(long, env = "PAYONCE_RESUBMIT_AFTER_WINDOW", default_value_t = false)]
    pub resubmit_after_window: bool,
}

impl ReconcilerArgs {
    /// The reconciler configuration for `owner`, with same-key retries bounded by `submit`.
    pub fn config(&self, owner: String, submit: &SubmitArgs) -> ReconcilerConfig {
        let mut c = ReconcilerConfig::new(owner);
        c.batch_size = self.sweep_batch;
        c.concurrency = self.sweep_concurrency;
        c.write_batch = self.sweep_write_batch;
        c.interval = Duration::from_millis(self.sweep_interval_ms);
        c.check_backoff_base = Duration::from_millis(self.check_backoff_ms);
        c.check_backoff_max = Duration::from_millis(self.check_backoff_max_ms);
        c.sweep_lease_ttl = Duration::from_millis(self.sweep_lease_ttl_ms);
        c.retention_margin = Duration::from_millis(self.retention_margin_ms);
        c.retention = self.retention();
        c.prune_interval = Duration::from_millis(self.prune_interval_ms);
        c.resubmit_after_window = self.resubmit_after_window;
        c.lookup_permit_wait_max = Duration::from_millis(self.lookup_permit_wait_ms);
        c.retry_lease_ttl = submit.lease_ttl();
        c.retry = submit.policy();
        c
    }
}

impl ReconcilerArgs {
    /// How long each kind of prunable row is kept.
    pub fn retention(&self) -> payonce_shared::ledger::retention::Retention {
        const DAY: Duration = Duration::from_secs(24 * 60 * 60);
        let days = |n: u64| DAY.saturating_mul(u32::try_from(n).unwrap_or(u32::MAX));
        payonce_shared::ledger::retention::Retention {
            webhooks: days(self.webhook_retention_days),
            tool_calls: days(self.tool_call_retention_days),
            expired_tokens: days(self.expired_token_retention_days),
            ..Default::default()
        }
    }
}

/// API settings.
#[derive(Debug, Clone, Args)]
pub struct ApiArgs {
    /// Listen address.
    #[arg(long, env = "PAYONCE_API_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: std::net::SocketAddr,
    /// Externally visible base URL for confirmation links (default: http://LISTEN).
    #[arg(long, env = "PAYONCE_PUBLIC_BASE_URL")]
    pub public_base_url: Option<String>,
    /// Stripe webhook secrets, comma-separated (several during rotation).
    #[arg(
        long,
        env = "PAYONCE_WEBHOOK_SECRETS",
        default_value = "",
        hide_env_values = true
    )]
    pub webhook_secrets: String,
    /// Adyen HMAC key (hex, from the Customer Area) the api verifies notifications with; empty:
    /// every Adyen notification is refused.
    #[arg(
        long,
        env = "PAYONCE_ADYEN_HMAC_KEY",
        default_value = "",
        hide_env_values = true
    )]
    pub adyen_hmac_key: String,
    /// How long an approval stays valid, seconds.
    #[arg(long, env = "PAYONCE_APPROVAL_TTL_S", default_value_t = 86_400)]
    pub approval_ttl_s: u64,
    /// How long a confirmation link stays usable, seconds.
    #[arg(long, env = "PAYONCE_LINK_TTL_S", default_value_t = 900)]
    pub link_ttl_s: u64,
    /// Accept the simulator's published webhook secret (a sandbox that only talks to the simulator).
    #[arg(long, env = "PAYONCE_SIMULATOR_DEV_MODE", default_value_t = false)]
    pub simulator_dev_mode: bool,
    /// Longest a client may take to send a request's headers before its connection is closed, ms.
    #[arg(long, env = "PAYONCE_HEADER_READ_TIMEOUT_MS", default_value_t = 10_000)]
    pub header_read_timeout_ms: u64,
    /// Most HTTP connections the api serves at once.
    #[arg(long, env = "PAYONCE_CONNECTIONS_MAX", default_value_t = 1024)]
    pub connections_max: usize,
    /// Browser origins allowed to call /mcp besides the public base URL's, comma-separated (`https://app.example.com`).
    #[arg(long, env = "PAYONCE_MCP_ALLOWED_ORIGINS", default_value = "")]
    pub mcp_allowed_origins: String,
}

impl ApiArgs {
    /// The API configuration.
    pub fn config(&self) -> payonce_api::ApiConfig {
        payonce_api::ApiConfig {
            listen: self.listen,
            public_base_url: self
                .public_base_url
                .clone()
                .unwrap_or_else(|| format!("http://{}", self.listen)),
            approval_ttl: Duration::from_secs(self.approval_ttl_s),
            link_ttl: Duration::from_secs(self.link_ttl_s),
            webhook_secrets: self
                .webhook_secrets
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect(),
            adyen_hmac_key: (!self.adyen_hmac_key.is_empty()).then(|| self.adyen_hmac_key.clone()),
            simulator_dev_mode: self.simulator_dev_mode,
            header_read_timeout: Duration::from_millis(self.header_read_timeout_ms),
            connections_max: self.connections_max,
            mcp_allowed_origins: self
                .mcp_allowed_origins
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect(),
            ..payonce_api::ApiConfig::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use payonce_shared::limiter::Budget;

    #[tokio::test]
    async fn the_limiter_settings_build_each_mode_and_refuse_bad_values() {
        let mut common: Common = builtin_defaults().unwrap();
        let rates = common.limiter_rates();
        assert_eq!(rates.global_per_second, None, "0 means no account-wide cap");
        assert_eq!(rates.class_per_second(Budget::Write), 100);
        assert!(common.limiter().is_ok(), "local by default");
        common.limiter = "off".into();
        assert!(common.limiter().is_ok());
        common.limiter = "redis".into();
        assert!(common.limiter().is_ok(), "lazy: Redis need not be up");
        common.limiter_key_prefix = "bad prefix!".into();
        assert!(common.limiter().is_err());
        common.limiter = "local".into();
        common.limiter_global_per_second = 3;
        // 20% of 3/s is less than one request per second.
        assert!(common.limiter().is_err());
        let parsed = Common::augment_args(Command::new("t").no_binary_name(true))
            .try_get_matches_from(["--limiter-write-per-second", "0"]);
        assert!(parsed.is_err(), "a zero rate is refused at the boundary");
    }

    #[test]
    fn the_processor_contract_is_one_of_the_registry_and_the_adapter_declares_it() {
        let parse = |args: &[&str]| {
            let matches = Common::augment_args(Command::new("t").no_binary_name(true))
                .try_get_matches_from(args)?;
            Common::from_arg_matches(&matches)
        };
        let defaults = parse(&[]).unwrap();
        assert_eq!(defaults.processor_contract, "stripe");
        let short = parse(&[
            "--processor-contract",
            "short-retention",
            "--key-retention-s",
            "5",
        ])
        .unwrap();
        let processor = short.processor().unwrap();
        assert_eq!(processor.contract().name, "short-retention");
        assert_eq!(
            processor.contract().key_retention,
            Some(Duration::from_secs(5))
        );
        assert!(parse(&["--processor-contract", "worldline"]).is_err());
        // Documented but not on this adapter's wire: refused too.
        assert!(parse(&["--processor-contract", "paypal-rest"]).is_err());
        let mut bypassed = defaults.clone();
        bypassed.processor_contract = "no-such".into();
        assert!(bypassed.processor().is_err(), "refused past the parser too");
    }

    #[test]
    fn a_process_serves_the_other_processor_only_when_its_url_is_set() {
        let parse = |args: &[&str]| {
            let matches = Common::augment_args(Command::new("t").no_binary_name(true))
                .try_get_matches_from(args)
                .unwrap();
            Common::from_arg_matches(&matches).unwrap()
        };
        let configured = |c: &Common| c.processors().map(|p| p.configured());
        // Every existing configuration serves one processor, its own, as before.
        assert_eq!(configured(&parse(&[])).unwrap(), "stripe");
        assert_eq!(
            configured(&parse(&["--processor", "adyen"])).unwrap(),
            "adyen"
        );
        let both = parse(&["--adyen-url", "http://127.0.0.1:2"]);
        let processors = both.processors().unwrap();
        assert_eq!(processors.configured(), "stripe, adyen");
        assert_eq!(processors.default_kind(), ProcessorKind::Stripe);
        assert_eq!(
            processors
                .get(ProcessorKind::Adyen)
                .unwrap()
                .contract()
                .name,
            "adyen"
        );
        let both = parse(&["--processor", "adyen", "--stripe-url", "http://127.0.0.1:3"]);
        let processors = both.processors().unwrap();
        assert_eq!(processors.configured(), "adyen, stripe");
        assert_eq!(
            processors
                .get(ProcessorKind::Stripe)
                .unwrap()
                .contract()
                .name,
            "stripe"
        );
        // The default's own URL setting beside it is refused, not ignored.
        assert!(
            configured(&parse(&["--stripe-url", "http://127.0.0.1:3"]))
                .unwrap_err()
                .to_string()
                .contains("stripe_url")
        );
        assert!(
            configured(&parse(&["--processor", "adyen", "--adyen-url", "http://x"]))
                .unwrap_err()
                .to_string()
                .contains("adyen_url")
        );
    }
}

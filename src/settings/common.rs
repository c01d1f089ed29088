//! The settings every deployable shares: the ledger, the processors and the fleet limiter, with the
//! adapters and limiter they build (a setting that cannot work is refused here, before anything starts).

use anyhow::Context;
use clap::Args;
use payonce_core::intention::KeySecret;
use payonce_ledger::postgres::{Pooler, Route};
use payonce_processor::adyen::{AdyenConfig, AdyenProcessor};
use payonce_processor::limiter::{
    LocalLimiter, Rates, RedisLimiter, RedisLimiterConfig, SharedLimiter, Unlimited,
};
use payonce_processor::stripe::{StripeConfig, StripeProcessor};
use payonce_processor::{Processor, ProcessorKind, Processors};
use std::sync::Arc;
use std::time::Duration;

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
    // Not `PAYONCE_PROCESSOR`: a name that reads as the processor's address.
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
          value_parser = clap::builder::PossibleValuesParser::new(payonce_processor::contract::names()))]
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
        ledger: &payonce_ledger::SharedLedger,
    ) -> anyhow::Result<KeySecret> {
        let now = ledger
            .now(payonce_core::clock::Clock::now(
                &payonce_core::clock::SystemClock,
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
    pub fn contract(&self) -> anyhow::Result<payonce_processor::Contract> {
        let contract = if self.processor == "adyen" {
            anyhow::ensure!(
                self.processor_contract == payonce_processor::contract::STRIPE.name,
                "processor_contract {:?} runs on Stripe's wire; processor adyen runs Adyen's own \
                 contract (leave processor_contract unset)",
                self.processor_contract
            );
            payonce_processor::contract::ADYEN_CHECKOUT
        } else {
            payonce_processor::contract::by_name(&self.processor_contract).with_context(|| {
                format!(
                    "processor_contract {:?} is not one of {}",
                    self.processor_contract,
                    payonce_processor::contract::names().join(", ")
                )
            })?
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
            payonce_processor::contract::by_name(&self.processor_contract)
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

//! The fleet-wide limiter: the GCRA buckets of an account live in Redis and one Lua script decides each
//! acquire atomically (Redis runs a script to completion before any other command), with Redis's own
//! clock, so every process and connection sees one budget. While Redis is unreachable each process
//! limits itself to its local share (the budget divided by the expected number of processes), logs that
//! once, shows it in `payonce_limiter_fallback`, and goes back to the shared budget when Redis answers.
//! Nothing is lost or duplicated either way: a permit only paces a request, it never decides one.

use super::local::LocalLimiter;
use super::{BucketRate, Budget, Decision, Limiter, LimiterMetrics, Rates, WaitingLines};
use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Longest accepted key prefix.
pub const KEY_PREFIX_LEN_MAX: usize = 128;
/// Longest accepted account name.
pub const ACCOUNT_LEN_MAX: usize = 64;
/// While in the fallback, how often Redis is asked again: in between, the local share decides at once
/// instead of every acquire paying a failed call.
pub const FALLBACK_PROBE_INTERVAL: Duration = Duration::from_millis(500);
/// Redis reconnection attempts per reconnect cycle of the connection manager.
const RECONNECT_RETRIES: usize = 2;
/// Longest pause between the connection manager's reconnect attempts.
const RECONNECT_DELAY_MAX: Duration = Duration::from_millis(500);

/// GCRA over the buckets in KEYS (ARGV: interval_us, burst per key), all or nothing, on Redis's clock.
/// Returns {1, 0} when granted, {0, wait_us} when not. TATs are stored as integer strings (`%.0f`:
/// Lua numbers are doubles and the default formatting would round microsecond timestamps).
const GCRA_SCRIPT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local wait = 0
local next = {}
for i = 1, #KEYS do
  local interval = tonumber(ARGV[2 * i - 1])
  local burst = tonumber(ARGV[2 * i])
  local tat = tonumber(redis.call('GET', KEYS[i]) or now)
  if tat < now then tat = now end
  local new_tat = tat + interval
  local allow_at = new_tat - burst * interval
  if allow_at - now > wait then wait = allow_at - now end
  next[i] = new_tat
end
if wait > 0 then return {0, wait} end
for i = 1, #KEYS do
  local ttl_ms = math.ceil((next[i] - now) / 1000) + 1000
  redis.call('SET', KEYS[i], string.format('%.0f', next[i]), 'PX', ttl_ms)
end
return {1, 0}
";

/// How to reach the shared budget.
#[derive(Debug, Clone)]
pub struct RedisLimiterConfig {
    /// `redis://host:port/db`, or `rediss://…` for TLS.
    pub url: String,
    /// PEM file of the CA(s) that sign the Redis server's certificate, for `rediss://` to a server
    /// whose CA the system's trust store does not hold (a managed Redis's own CA, a test's); `None`:
    /// the system's trust store.
    pub ca_file: Option<std::path::PathBuf>,
    /// Prefix of every key (one per deployment, or per test).
    pub key_prefix: String,
    /// The processor account the budget belongs to.
    pub account: String,
    /// The account's budget.
    pub rates: Rates,
    /// Processes expected to share the budget: each one's fallback share is the budget divided by it.
    pub expected_processes: u32,
    /// Connect and response timeout of every Redis call; past it, the fallback decides.
    pub timeout: Duration,
}

/// A limiter shared through Redis, with a local fallback share.
pub struct RedisLimiter {
    conn: ConnectionManager,
    script: redis::Script,
    keys: Vec<(Budget, Vec<String>, Vec<i64>)>,
    timeout: Duration,
    fallback: LocalLimiter,
    in_fallback: AtomicBool,
    /// While in the fallback: when Redis may be asked again.
    next_probe: std::sync::Mutex<Option<tokio::time::Instant>>,
    metrics: LimiterMetrics,
    lines: WaitingLines,
    account: String,
    /// The first part of every tenant cap's key (`{prefix}:{account}:cap:`).
    cap_prefix: String,
    /// The budgets' burst (a cap's is never more).
    burst: u32,
    /// Processes sharing the budget: a cap's fallback share is the cap divided by it.
    expected_processes: u32,
}

impl std::fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("account", &self.account)
            .field("keys", &self.keys)
            .field("in_fallback", &self.in_fallback.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

fn valid_name(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | ':' | '.'))
}

impl RedisLimiter {
    /// Validates the configuration and prepares a lazily connecting, self-reconnecting connection:
    /// a Redis that is down at start-up only means starting in the fallback. Call it inside a Tokio runtime.
    pub fn new(config: RedisLimiterConfig) -> Result<Self, String> {
        config.rates.validate()?;
        if !valid_name(&config.key_prefix, KEY_PREFIX_LEN_MAX) {
            return Err(format!(
                "limiter key prefix must be 1 to {KEY_PREFIX_LEN_MAX} characters of [A-Za-z0-9_:.-]"
            ));
        }
        if !valid_name(&config.account, ACCOUNT_LEN_MAX) {
            return Err(format!(
                "limiter account must be 1 to {ACCOUNT_LEN_MAX} characters of [A-Za-z0-9_:.-]"
            ));
        }
        if config.timeout.is_zero() || config.expected_processes == 0 {
            return Err("limiter timeout and expected process count must be positive".to_string());
        }
        let client = match &config.ca_file {
            None => redis::Client::open(config.url.as_str()),
            Some(path) => {
                let root_cert = std::fs::read(path)
                    .map_err(|e| format!("limiter redis CA file {}: {e}", path.display()))?;
                redis::Client::build_with_tls(
                    config.url.as_str(),
                    redis::TlsCertificates {
                        client_tls: None,
                        root_cert: Some(root_cert),
                    },
                )
            }
        }
        .map_err(|e| format!("limiter redis url: {e}"))?;
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(config.timeout))
            .set_response_timeout(Some(config.timeout))
            .set_number_of_retries(RECONNECT_RETRIES)
            .set_max_delay(RECONNECT_DELAY_MAX);
        let conn = ConnectionManager::new_lazy_with_config(client, manager_config)
            .map_err(|e| format!("limiter redis connection: {e}"))?;
        let keys = [Budget::Write, Budget::Read]
            .into_iter()
            .map(|budget| {
                let buckets = config.rates.buckets(budget);
                let names = buckets
                    .iter()
                    .map(|(name, _)| format!("{}:{}:{name}", config.key_prefix, config.account))
                    .collect();
                let args = buckets
                    .iter()
                    .flat_map(|(_, r)| [r.interval_us, r.burst])
                    .collect();
                (budget, names, args)
            })
            .collect();
        Ok(RedisLimiter {
            conn,
            script: redis::Script::new(GCRA_SCRIPT),
            keys,
            timeout: config.timeout,
            fallback: LocalLimiter::new(config.rates.share(config.expected_processes)),
            in_fallback: AtomicBool::new(false),
            next_probe: std::sync::Mutex::new(None),
            metrics: LimiterMetrics::default(),
            lines: WaitingLines::default(),
            cap_prefix: format!("{}:{}:cap:", config.key_prefix, config.account),
            burst: config.rates.burst,
            expected_processes: config.expected_processes,
            account: config.account,
        })
    }

    /// The share this process falls back to.
    pub fn fallback_rates(&self) -> Rates {
        self.fallback.rates()
    }

    async fn shared(&self, budget: Budget) -> Result<Decision, String> {
        let Some((_, keys, args)) = self.keys.iter().find(|(b, _, _)| *b == budget) else {
            return Err("no buckets for this budget".into());
        };
        self.invoke(keys, args).await
    }

    /// Runs the GCRA script over `keys` with `args`.
    async fn invoke(&self, keys: &[String], args: &[i64]) -> Result<Decision, String> {
        let mut invocation = self.script.prepare_invoke();
        for k in keys {
            invocation.key(k);
        }
        for a in args {
            invocation.arg(*a);
        }
        let mut conn = self.conn.clone();
        let answer: (i64, i64) =
            match tokio::time::timeout(self.timeout, invocation.invoke_async(&mut conn)).await {
                Ok(Ok(v)) => v,
                Ok(Err(e)) => return Err(e.to_string()),
                Err(_) => return Err(format!("no answer within {:?}", self.timeout)),
            };
        Ok(match answer {
            (1, _) => Decision::Granted,
            (_, wait_us) => {
                Decision::Retry(Duration::from_micros(u64::try_from(wait_us).unwrap_or(1)))
            }
        })
    }
}

#[async_trait]
impl Limiter for RedisLimiter {
    /// The cap's bucket in Redis; while Redis cannot answer, this process's share of the cap.
    async fn try_acquire_cap(&self, tenant: &str, per_second: u32) -> Decision {
        if !self.in_fallback.load(Ordering::Relaxed) {
            let rate = BucketRate::cap(per_second, self.burst);
            let key = format!("{}{tenant}", self.cap_prefix);
            if let Ok(decision) = self.invoke(&[key], &[rate.interval_us, rate.burst]).await {
                return decision;
            }
        }
        let share = (per_second / self.expected_processes.max(1)).max(1);
        self.fallback.decide_cap(tenant, share)
    }

    async fn try_acquire(&self, budget: Budget) -> Decision {
        let now = tokio::time::Instant::now();
        let probe_due = {
            let next = self
                .next_probe
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            next.is_none_or(|at| now >= at)
        };
        let answer = if probe_due {
            self.shared(budget).await
        } else {
            Err(String::new())
        };
        let decision = match answer {
            Ok(d) => {
                *self
                    .next_probe
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
                if self.in_fallback.swap(false, Ordering::Relaxed) {
                    self.metrics.fallback.set(0);
                    tracing::info!(account = %self.account, "fleet limiter: Redis answers again; back on the shared budget");
                }
                d
            }
            Err(error) => {
                if probe_due {
                    self.metrics.backend_errors.inc();
                    *self
                        .next_probe
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) =
                        Some(now + FALLBACK_PROBE_INTERVAL);
                }
                if !self.in_fallback.swap(true, Ordering::Relaxed) {
                    self.metrics.fallback.set(1);
                    self.metrics.fallback_entered.inc();
                    let share = self.fallback.rates();
                    tracing::warn!(account = %self.account, %error,
                        write_per_second = share.write_per_second, read_per_second = share.read_per_second,
                        "fleet limiter: Redis unreachable; limiting this process to its local share");
                }
                self.metrics.fallback_decisions.inc();
                self.fallback.decide(budget)
            }
        };
        if decision == Decision::Granted {
            self.metrics.count_grant(budget);
        }
        decision
    }
    fn metrics(&self) -> &LimiterMetrics {
        &self.metrics
    }
    fn lines(&self) -> &WaitingLines {
        &self.lines
    }
}

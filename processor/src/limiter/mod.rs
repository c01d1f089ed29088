//! The fleet's request budget at the processor: every worker and reconciler process takes a permit
//! before each request, so together they stay under the processor's rate limits instead of finding
//! them with 429s.
//!
//! - `local`: an in-process GCRA limiter (embedded mode, one process; also the Redis fallback).
//! - `redis`: the same GCRA in Redis, one Lua script per acquire, shared by every process of an
//!   account; falls back to a conservative local share while Redis is unreachable.
//!
//! Budgets: submissions are writes, lookups are reads, each with its own rate. An optional account-wide
//! (global) rate caps both together; a reserved share of it belongs to each class, so lookups can never
//! be starved by submissions nor starve them: writes may use at most `global × (100 − read_reserved)%`,
//! reads at most `global × (100 − write_reserved)%`, and both draw from the global bucket.

mod local;
mod redis;

pub use local::LocalLimiter;
pub use redis::{FALLBACK_PROBE_INTERVAL, RedisLimiter, RedisLimiterConfig};

use async_trait::async_trait;
use payonce_core::metrics::{Counter, Exposition, Gauge, Histogram};
use std::sync::Arc;
use std::time::Duration;

/// Largest configurable rate, requests per second.
pub const RATE_PER_SECOND_MAX: u32 = 100_000;
/// Largest configurable burst, permits.
pub const BURST_MAX: u32 = 10_000;
/// Longest a limiter ever asks a caller to wait before trying again: a long computed wait is re-asked,
/// so a changed budget or a recovered Redis is noticed.
pub const RETRY_HINT_MAX: Duration = Duration::from_millis(250);

/// Which budget a request draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Budget {
    /// Submissions (POST).
    Write,
    /// Lookups (GET).
    Read,
}

impl Budget {
    /// `write` or `read`.
    pub fn as_str(self) -> &'static str {
        match self {
            Budget::Write => "write",
            Budget::Read => "read",
        }
    }
}

/// The account's budget, requests per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rates {
    /// Submissions per second.
    pub write_per_second: u32,
    /// Lookups per second.
    pub read_per_second: u32,
    /// Reads and writes together per second; `None`: no account-wide cap beyond the two.
    pub global_per_second: Option<u32>,
    /// Percent of the global rate writes can never take.
    pub read_reserved_percent: u32,
    /// Percent of the global rate reads can never take.
    pub write_reserved_percent: u32,
    /// Permits one bucket may grant at once after an idle spell.
    pub burst: u32,
}

/// One GCRA bucket's parameters: one permit every `interval_us`, up to `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BucketRate {
    pub(crate) interval_us: i64,
    pub(crate) burst: i64,
}

impl BucketRate {
    fn per_second(rate: u32, burst: u32) -> BucketRate {
        BucketRate {
            interval_us: 1_000_000 / i64::from(rate.max(1)),
            burst: i64::from(burst.max(1)),
        }
    }
}

impl BucketRate {
    /// A tenant's cap: `per_second`, with the budgets' burst but never more than one second's worth.
    pub(crate) fn cap(per_second: u32, burst: u32) -> BucketRate {
        BucketRate::per_second(per_second, burst.min(per_second))
    }
}

impl Rates {
    /// Refuses zero or absurd rates and reserves that leave a class nothing.
    pub fn validate(&self) -> Result<(), String> {
        let ok = |v: u32| (1..=RATE_PER_SECOND_MAX).contains(&v);
        if !ok(self.write_per_second)
            || !ok(self.read_per_second)
            || self.global_per_second.is_some_and(|g| !ok(g))
        {
            return Err(format!(
                "limiter rates must be between 1 and {RATE_PER_SECOND_MAX} per second"
            ));
        }
        if !(1..=BURST_MAX).contains(&self.burst) {
            return Err(format!("limiter burst must be between 1 and {BURST_MAX}"));
        }
        if self.read_reserved_percent + self.write_reserved_percent >= 100 {
            return Err("reserved read and write shares must add up to less than 100%".into());
        }
        if let Some(g) = self.global_per_second {
            for (what, pct) in [
                ("read", self.read_reserved_percent),
                ("write", self.write_reserved_percent),
            ] {
                if u64::from(g) * u64::from(pct) / 100 == 0 && pct > 0 {
                    return Err(format!(
                        "the reserved {what} share of {g}/s is less than one request per second"
                    ));
                }
            }
        }
        Ok(())
    }

    /// The class's own rate: its configured rate, capped so the other class keeps its reserved share
    /// of the global rate.
    pub fn class_per_second(&self, budget: Budget) -> u32 {
        let (own, others_reserve) = match budget {
            Budget::Write => (self.write_per_second, self.read_reserved_percent),
            Budget::Read => (self.read_per_second, self.write_reserved_percent),
        };
        match self.global_per_second {
            Some(g) => {
                let cap = u64::from(g) * u64::from(100 - others_reserve.min(100)) / 100;
                own.min(u32::try_from(cap).unwrap_or(u32::MAX)).max(1)
            }
            None => own,
        }
    }

    /// The same budget divided among `processes`: each one's share while it cannot coordinate.
    pub fn share(&self, processes: u32) -> Rates {
        let n = processes.max(1);
        let part = |v: u32| (v / n).max(1);
        Rates {
            write_per_second: part(self.write_per_second),
            read_per_second: part(self.read_per_second),
            global_per_second: self.global_per_second.map(part),
            burst: part(self.burst),
            ..*self
        }
    }

    /// The buckets an acquire of `budget` must pass, by name: the class bucket, then the global one.
    pub(crate) fn buckets(&self, budget: Budget) -> Vec<(&'static str, BucketRate)> {
        let mut v = vec![(
            budget.as_str(),
            BucketRate::per_second(self.class_per_second(budget), self.burst),
        )];
        if let Some(g) = self.global_per_second {
            v.push(("global", BucketRate::per_second(g, self.burst)));
        }
        v
    }
}

/// One try at a permit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Go ahead: one request may be sent now.
    Granted,
    /// No permit now; ask again after this long.
    Retry(Duration),
}

/// What the limiters count, rendered into every daemon's `/metrics`.
#[derive(Debug, Default)]
pub struct LimiterMetrics {
    /// Write permits granted.
    pub granted_write: Counter,
    /// Read permits granted.
    pub granted_read: Counter,
    /// Acquires that had to wait at least once.
    pub waited: Counter,
    /// Time from asking to being granted.
    pub wait: Histogram,
    /// Acquires given up within their wait bound (the caller defers the work).
    pub denied: Counter,
    /// 1 while this process decides alone (Redis unreachable), else 0.
    pub fallback: Gauge,
    /// Times this process entered the fallback.
    pub fallback_entered: Counter,
    /// Permits decided by the local fallback share.
    pub fallback_decisions: Counter,
    /// Shared-limiter calls that failed or timed out.
    pub backend_errors: Counter,
}

impl LimiterMetrics {
    /// Counts one permit granted from `budget`.
    pub fn count_grant(&self, budget: Budget) {
        match budget {
            Budget::Write => self.granted_write.inc(),
            Budget::Read => self.granted_read.inc(),
        };
    }

    /// Appends the limiter's series.
    pub fn render(&self, e: &mut Exposition) {
        let help = "Permits granted by the fleet limiter, by budget.";
        e.counter(
            "payonce_limiter_granted_total",
            help,
            &[("budget", "write")],
            &self.granted_write,
        );
        e.counter(
            "payonce_limiter_granted_total",
            help,
            &[("budget", "read")],
            &self.granted_read,
        );
        e.counter(
            "payonce_limiter_waited_total",
            "Acquires that waited for a permit.",
            &[],
            &self.waited,
        );
        e.histogram(
            "payonce_limiter_wait_seconds",
            "Time from asking for a permit to getting it.",
            &self.wait,
        );
        e.counter(
            "payonce_limiter_denied_total",
            "Acquires given up within their wait bound (work deferred).",
            &[],
            &self.denied,
        );
        e.gauge(
            "payonce_limiter_fallback",
            "1 while this process limits itself to its local share (shared limiter unreachable).",
            &[],
            self.fallback.get(),
        );
        e.counter(
            "payonce_limiter_fallback_entered_total",
            "Times this process fell back to its local share.",
            &[],
            &self.fallback_entered,
        );
        e.counter(
            "payonce_limiter_fallback_decisions_total",
            "Permits decided by the local fallback share.",
            &[],
            &self.fallback_decisions,
        );
        e.counter(
            "payonce_limiter_backend_errors_total",
            "Shared limiter calls that failed or timed out.",
            &[],
            &self.backend_errors,
        );
    }
}

/// The queue a process's waiters stand in, one per budget: only the head of the line asks the limiter,
/// so a hundred waiting submissions cost one Redis call per retry, not a hundred (no thundering herd),
/// and they are served in arrival order.
#[derive(Debug, Default)]
pub struct WaitingLines {
    write: tokio::sync::Mutex<()>,
    read: tokio::sync::Mutex<()>,
}

impl WaitingLines {
    fn of(&self, budget: Budget) -> &tokio::sync::Mutex<()> {
        match budget {
            Budget::Write => &self.write,
            Budget::Read => &self.read,
        }
    }
}

/// A request budget shared by whoever holds it.
#[async_trait]
pub trait Limiter: Send + Sync + std::fmt::Debug {
    /// Takes one permit of `budget` if one is free now; never waits.
    async fn try_acquire(&self, budget: Budget) -> Decision;
    /// Decides one permit of a tenant's own cap: `per_second` submissions a second across the
    /// fleet (`payonce tenant set-cap`), apart from the budgets (the caller holds a write permit
    /// already). A limiter that paces nothing grants it.
    async fn try_acquire_cap(&self, tenant: &str, per_second: u32) -> Decision {
        let _ = (tenant, per_second);
        Decision::Granted
    }
    /// The limiter's counters.
    fn metrics(&self) -> &LimiterMetrics;
    /// This process's waiting lines.
    fn lines(&self) -> &WaitingLines;
    /// Whether it paces anything: `false` for [`Unlimited`], whose permits callers may skip asking
    /// for (a worker then claims without taking permits first).
    fn paces(&self) -> bool {
        true
    }
}

/// Shared handle to a limiter.
pub type SharedLimiter = Arc<dyn Limiter>;

/// No budget at all: every request goes (tests, and deployments that opt out).
#[derive(Debug, Default)]
pub struct Unlimited {
    metrics: LimiterMetrics,
    lines: WaitingLines,
}

#[async_trait]
impl Limiter for Unlimited {
    async fn try_acquire(&self, budget: Budget) -> Decision {
        self.metrics.count_grant(budget);
        Decision::Granted
    }
    fn paces(&self) -> bool {
        false
    }
    fn metrics(&self) -> &LimiterMetrics {
        &self.metrics
    }
    fn lines(&self) -> &WaitingLines {
        &self.lines
    }
}

/// The wait bound passed; the request must not be sent now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("no {budget:?} permit within {waited:?}")]
pub struct Denied {
    /// The budget asked for.
    pub budget: Budget,
    /// How long the caller waited.
    pub waited: Duration,
}

/// Waits for one permit of `budget`, at most `wait_max`. Granted permits are counted by the limiter;
/// waits and denials here.
pub async fn acquire(
    limiter: &dyn Limiter,
    budget: Budget,
    wait_max: Duration,
) -> Result<Duration, Denied> {
    acquire_up_to(limiter, budget, 1, wait_max)
        .await
        .map(|(_, waited)| waited)
}

/// Waits for one permit of `budget` as [`acquire`] does, then takes up to `n − 1` more while they
/// are granted without waiting, all in this process's line: the worker takes the permits for a
/// claim before it claims, so work waits for the budget in the ledger's order (interactive first,
/// tenants in turn) instead of in a line of already-claimed work. Returns how many were granted
/// (at least one) and how long the first took.
pub async fn acquire_up_to(
    limiter: &dyn Limiter,
    budget: Budget,
    n: u32,
    wait_max: Duration,
) -> Result<(u32, Duration), Denied> {
    let started = tokio::time::Instant::now();
    let deny = |waited| {
        limiter.metrics().denied.inc();
        Denied { budget, waited }
    };
    // Wait in this process's line first; only its head asks the limiter.
    let Ok(_turn) = tokio::time::timeout(wait_max, limiter.lines().of(budget).lock()).await else {
        return Err(deny(started.elapsed()));
    };
    let mut waited_once = false;
    loop {
        match limiter.try_acquire(budget).await {
            Decision::Granted => {
                let waited = started.elapsed();
                if waited_once || waited > Duration::from_millis(1) {
                    limiter.metrics().waited.inc();
                }
                limiter.metrics().wait.observe(waited);
                let mut granted = 1;
                while granted < n && limiter.try_acquire(budget).await == Decision::Granted {
                    granted += 1;
                }
                return Ok((granted, waited));
            }
            Decision::Retry(after) => {
                let waited = started.elapsed();
                if waited >= wait_max {
                    return Err(deny(waited));
                }
                waited_once = true;
                let pause = after
                    .min(RETRY_HINT_MAX)
                    .min(wait_max - waited)
                    .max(Duration::from_millis(1));
                tokio::time::sleep(pause).await;
            }
        }
    }
}

/// Takes up to `n` permits of `budget` that are granted without waiting; none while another
/// caller of this process waits in line (it is ahead). Returns how many.
pub async fn take_ready(limiter: &dyn Limiter, budget: Budget, n: u32) -> u32 {
    let Ok(_turn) = limiter.lines().of(budget).try_lock() else {
        return 0;
    };
    let mut granted = 0;
    while granted < n && limiter.try_acquire(budget).await == Decision::Granted {
        granted += 1;
    }
    granted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rates() -> Rates {
        Rates {
            write_per_second: 100,
            read_per_second: 100,
            global_per_second: Some(100),
            read_reserved_percent: 20,
            write_reserved_percent: 30,
            burst: 5,
        }
    }

    #[test]
    fn each_class_leaves_the_other_its_reserved_share() {
        let r = rates();
        assert!(r.validate().is_ok());
        assert_eq!(r.class_per_second(Budget::Write), 80);
        assert_eq!(r.class_per_second(Budget::Read), 70);
        let no_global = Rates {
            global_per_second: None,
            ..r
        };
        assert_eq!(no_global.class_per_second(Budget::Write), 100);
        assert_eq!(no_global.buckets(Budget::Read).len(), 1);
        assert_eq!(r.buckets(Budget::Read).len(), 2);
    }

    #[test]
    fn metrics_render_every_series_even_at_zero() {
        let m = LimiterMetrics::default();
        m.fallback.set(1);
        m.granted_write.inc_by(3);
        let mut e = Exposition::default();
        m.render(&mut e);
        let text = e.finish();
        for line in [
            "payonce_limiter_granted_total{budget=\"write\"} 3",
            "payonce_limiter_granted_total{budget=\"read\"} 0",
            "payonce_limiter_fallback 1",
            "payonce_limiter_fallback_entered_total 0",
            "payonce_limiter_denied_total 0",
            "payonce_limiter_wait_seconds_count 0",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }

    #[tokio::test]
    async fn acquire_waits_for_a_permit_and_gives_up_at_its_bound() {
        let l = LocalLimiter::new(Rates {
            write_per_second: 1,
            read_per_second: 1000,
            global_per_second: None,
            read_reserved_percent: 0,
            write_reserved_percent: 0,
            burst: 1,
        });
        assert!(acquire(&l, Budget::Write, Duration::ZERO).await.is_ok());
        let denied = acquire(&l, Budget::Write, Duration::from_millis(5)).await;
        assert_eq!(denied.map_err(|d| d.budget), Err(Budget::Write));
        assert_eq!(l.metrics().denied.get(), 1);
        // Reads are another line and another budget.
        assert!(
            acquire(&l, Budget::Read, Duration::from_millis(5))
                .await
                .is_ok()
        );
    }

    #[test]
    fn bad_rates_are_refused_and_shares_divide() {
        let r = rates();
        for bad in [
            Rates {
                write_per_second: 0,
                ..r
            },
            Rates { burst: 0, ..r },
            Rates {
                read_reserved_percent: 60,
                write_reserved_percent: 40,
                ..r
            },
            Rates {
                global_per_second: Some(2),
                read_reserved_percent: 10,
                ..r
            },
            Rates {
                read_per_second: RATE_PER_SECOND_MAX + 1,
                ..r
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        let quarter = r.share(4);
        assert_eq!(quarter.write_per_second, 25);
        assert_eq!(quarter.global_per_second, Some(25));
        assert_eq!(quarter.burst, 1);
        assert_eq!(r.share(1000).write_per_second, 1, "never zero");
    }
}

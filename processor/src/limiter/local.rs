//! The in-process limiter: GCRA over the same buckets as the Redis script, for one process (embedded
//! mode) and as each process's fallback share while Redis is unreachable.

use super::{BucketRate, Budget, Decision, Limiter, LimiterMetrics, Rates, WaitingLines};
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// GCRA over several buckets at once: grants only if every bucket allows, and then advances every
/// bucket's theoretical arrival time (TAT). `tats[i]` is `None` for a bucket never used. On refusal,
/// returns how long until all would allow. Times in microseconds.
pub(crate) fn gcra(
    tats: &[Option<i64>],
    rates: &[BucketRate],
    now_us: i64,
) -> Result<Vec<i64>, i64> {
    let mut wait_us = 0;
    let mut next = Vec::with_capacity(tats.len());
    for (tat, rate) in tats.iter().zip(rates) {
        let tat = tat.unwrap_or(now_us).max(now_us);
        let new_tat = tat + rate.interval_us;
        let allow_at = new_tat - rate.burst * rate.interval_us;
        wait_us = wait_us.max(allow_at - now_us);
        next.push(new_tat);
    }
    if wait_us > 0 { Err(wait_us) } else { Ok(next) }
}

/// An in-process GCRA limiter.
#[derive(Debug)]
pub struct LocalLimiter {
    rates: Rates,
    epoch: Instant,
    tats: Mutex<HashMap<&'static str, i64>>,
    /// Each capped tenant's bucket's TAT.
    caps: Mutex<HashMap<String, i64>>,
    metrics: LimiterMetrics,
    lines: WaitingLines,
}

impl LocalLimiter {
    /// A limiter granting `rates` to this process alone.
    pub fn new(rates: Rates) -> Self {
        LocalLimiter {
            rates,
            epoch: Instant::now(),
            tats: Mutex::new(HashMap::new()),
            caps: Mutex::new(HashMap::new()),
            metrics: LimiterMetrics::default(),
            lines: WaitingLines::default(),
        }
    }

    /// The rates it enforces.
    pub fn rates(&self) -> Rates {
        self.rates
    }

    /// Decides one permit without counting it (the Redis limiter's fallback counts its own).
    pub(crate) fn decide(&self, budget: Budget) -> Decision {
        let now_us = i64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(i64::MAX);
        self.decide_at(budget, now_us)
    }

    /// Decides one permit at `now_us` microseconds after this limiter's epoch (tests drive time here).
    pub(crate) fn decide_at(&self, budget: Budget, now_us: i64) -> Decision {
        let buckets = self.rates.buckets(budget);
        let mut tats = self
            .tats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let current: Vec<Option<i64>> = buckets
            .iter()
            .map(|(name, _)| tats.get(name).copied())
            .collect();
        let rates: Vec<BucketRate> = buckets.iter().map(|(_, r)| *r).collect();
        match gcra(&current, &rates, now_us) {
            Ok(next) => {
                for ((name, _), tat) in buckets.iter().zip(next) {
                    tats.insert(name, tat);
                }
                Decision::Granted
            }
            Err(wait_us) => {
                Decision::Retry(Duration::from_micros(u64::try_from(wait_us).unwrap_or(1)))
            }
        }
    }
}

impl LocalLimiter {
    /// Decides one permit of `tenant`'s cap of `per_second`.
    pub(crate) fn decide_cap(&self, tenant: &str, per_second: u32) -> Decision {
        let now_us = i64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(i64::MAX);
        self.decide_cap_at(tenant, per_second, now_us)
    }

    /// [`LocalLimiter::decide_cap`] at `now_us` after this limiter's epoch.
    pub(crate) fn decide_cap_at(&self, tenant: &str, per_second: u32, now_us: i64) -> Decision {
        let rate = BucketRate::cap(per_second, self.rates.burst);
        let mut caps = self
            .caps
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match gcra(&[caps.get(tenant).copied()], &[rate], now_us) {
            Ok(next) => {
                caps.insert(tenant.to_string(), next[0]);
                Decision::Granted
            }
            Err(wait_us) => {
                Decision::Retry(Duration::from_micros(u64::try_from(wait_us).unwrap_or(1)))
            }
        }
    }
}

#[async_trait]
impl Limiter for LocalLimiter {
    async fn try_acquire_cap(&self, tenant: &str, per_second: u32) -> Decision {
        self.decide_cap(tenant, per_second)
    }
    async fn try_acquire(&self, budget: Budget) -> Decision {
        let d = self.decide(budget);
        if d == Decision::Granted {
            self.metrics.count_grant(budget);
        }
        d
    }
    fn metrics(&self) -> &LimiterMetrics {
        &self.metrics
    }
    fn lines(&self) -> &WaitingLines {
        &self.lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gcra_grants_a_burst_then_one_per_interval() {
        let r = [BucketRate {
            interval_us: 10_000,
            burst: 3,
        }];
        let mut tat = None;
        for _ in 0..3 {
            tat = Some(gcra(&[tat], &r, 0).unwrap()[0]);
        }
        assert_eq!(gcra(&[tat], &r, 0), Err(10_000));
        assert!(gcra(&[tat], &r, 9_999).is_err());
        assert!(gcra(&[tat], &r, 10_000).is_ok());
    }

    #[test]
    fn a_refused_bucket_refuses_the_whole_acquire() {
        let r = [
            BucketRate {
                interval_us: 1_000,
                burst: 10,
            },
            BucketRate {
                interval_us: 50_000,
                burst: 1,
            },
        ];
        let first = gcra(&[None, None], &r, 0).unwrap();
        assert_eq!(gcra(&[Some(first[0]), Some(first[1])], &r, 0), Err(50_000));
    }

    #[test]
    fn a_tenants_cap_is_its_own_bucket() {
        let l = LocalLimiter::new(Rates {
            write_per_second: 1000,
            read_per_second: 1000,
            global_per_second: None,
            read_reserved_percent: 0,
            write_reserved_percent: 0,
            burst: 100,
        });
        // A cap of 5/s grants its one second's worth at once, then one per 200 ms.
        let granted = (0..10)
            .filter(|_| l.decide_cap_at("a", 5, 0) == Decision::Granted)
            .count();
        assert_eq!(granted, 5);
        assert_eq!(
            l.decide_cap_at("a", 5, 0),
            Decision::Retry(Duration::from_millis(200))
        );
        assert_eq!(l.decide_cap_at("a", 5, 200_000), Decision::Granted);
        // Another tenant's cap and the write budget are untouched.
        assert_eq!(l.decide_cap_at("b", 5, 0), Decision::Granted);
        assert_eq!(l.decide_at(Budget::Write, 0), Decision::Granted);
    }

    #[test]
    fn writes_and_reads_have_separate_budgets_and_the_global_reserve_holds() {
        let l = LocalLimiter::new(Rates {
            write_per_second: 1000,
            read_per_second: 1000,
            global_per_second: Some(10),
            read_reserved_percent: 30,
            write_reserved_percent: 20,
            burst: 10,
        });
        // Writes alone stop at their 7/s cap's burst; reads still find permits in the global bucket.
        let mut writes = 0;
        while l.decide_at(Budget::Write, 0) == Decision::Granted {
            writes += 1;
        }
        assert_eq!(writes, 10, "burst of the write bucket");
        // The global bucket is spent too: reads wait, but less than a second.
        match l.decide_at(Budget::Read, 0) {
            Decision::Retry(d) => assert!(d <= Duration::from_millis(100), "{d:?}"),
            Decision::Granted => panic!("global bucket should be spent"),
        }
        // Over ten seconds of contention, reads get at least their reserve.
        let (mut w, mut r) = (0, 0);
        for ms in 1..=10_000 {
            if l.decide_at(Budget::Write, ms * 1000) == Decision::Granted {
                w += 1;
            }
            if l.decide_at(Budget::Read, ms * 1000) == Decision::Granted {
                r += 1;
            }
        }
        assert!(
            w + r <= 100 + 10,
            "global 10/s over 10 s plus one burst: {w} + {r}"
        );
        assert!(r >= 25, "reads keep about 30% of the global rate: {r}");
        assert!(w >= 20, "writes keep 20%: {w}");
        assert!(w <= 70 + 10, "writes never exceed 70% of the global: {w}");
    }
}

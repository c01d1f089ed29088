//! Minimal Prometheus metrics: counters, gauges and a latency histogram, rendered in the text
//! exposition format. Enough for the daemons' `/metrics`, without a metrics framework.

use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// A monotonically increasing count.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// A counter at zero (usable in a `static`).
    pub const fn new() -> Self {
        Counter(AtomicU64::new(0))
    }
    /// Adds one.
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    /// Current value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A value that goes up and down.
#[derive(Debug, Default)]
pub struct Gauge(AtomicI64);

impl Gauge {
    /// Sets the value.
    pub fn set(&self, v: i64) {
        self.0.store(v, Ordering::Relaxed);
    }
    /// Current value.
    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Upper bounds of the latency buckets, in milliseconds.
pub const LATENCY_BUCKETS_MS: [u64; 12] =
    [1, 2, 5, 10, 25, 50, 100, 250, 500, 1_000, 5_000, 30_000];

/// A latency histogram with fixed millisecond buckets.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; LATENCY_BUCKETS_MS.len()],
    count: AtomicU64,
    /// Sum of the observations in microseconds: whole milliseconds would drop up to one per
    /// observation, and the means of short steps (a ledger write, 1–3 ms) with it.
    sum_us: AtomicU64,
}

impl Histogram {
    /// Records one observation of whole milliseconds.
    pub fn observe_ms(&self, ms: u64) {
        self.observe(std::time::Duration::from_millis(ms));
    }
    /// Records one observation, to the microsecond.
    pub fn observe(&self, elapsed: std::time::Duration) {
        let us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        for (i, bound) in LATENCY_BUCKETS_MS.iter().enumerate() {
            if us <= bound * 1_000 {
                self.buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }
    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

/// Builds one exposition-format document.
#[derive(Debug, Default)]
pub struct Exposition(String);

impl Exposition {
    /// A counter with optional labels (`name{k="v"}`).
    pub fn counter(&mut self, name: &str, help: &str, labels: &str, value: u64) -> &mut Self {
        self.header(name, help, "counter");
        let _ = writeln!(self.0, "{name}{} {value}", braces(labels));
        self
    }
    /// A gauge.
    pub fn gauge(&mut self, name: &str, help: &str, labels: &str, value: i64) -> &mut Self {
        self.header(name, help, "gauge");
        let _ = writeln!(self.0, "{name}{} {value}", braces(labels));
        self
    }
    /// A gauge of a signed span, given in milliseconds and rendered in seconds.
    pub fn gauge_seconds(&mut self, name: &str, help: &str, labels: &str, ms: i64) -> &mut Self {
        self.header(name, help, "gauge");
        let _ = writeln!(self.0, "{name}{} {}", braces(labels), ms as f64 / 1_000.0);
        self
    }
    /// A histogram in seconds.
    pub fn histogram(&mut self, name: &str, help: &str, h: &Histogram) -> &mut Self {
        self.header(name, help, "histogram");
        for (i, bound) in LATENCY_BUCKETS_MS.iter().enumerate() {
            let le = *bound as f64 / 1000.0;
            let _ = writeln!(
                self.0,
                "{name}_bucket{{le=\"{le}\"}} {}",
                h.buckets[i].load(Ordering::Relaxed)
            );
        }
        let count = h.count.load(Ordering::Relaxed);
        let _ = writeln!(self.0, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(
            self.0,
            "{name}_sum {}",
            h.sum_us.load(Ordering::Relaxed) as f64 / 1_000_000.0
        );
        let _ = writeln!(self.0, "{name}_count {count}");
        self
    }
    fn header(&mut self, name: &str, help: &str, kind: &str) {
        let help_line = format!("# HELP {name} ");
        if !self.0.contains(&help_line) {
            let _ = writeln!(self.0, "{help_line}{help}\n# TYPE {name} {kind}");
        }
    }
    /// `payonce_operations{status=…}` for every state, zero where `counts` has none: a state that
    /// empties must read 0, not vanish from the scrape.
    pub fn operations_per_state(&mut self, counts: &[crate::ledger::StatusCount]) -> &mut Self {
        for status in crate::state::ALL_STATUSES {
            let n = counts
                .iter()
                .find(|c| c.status == status)
                .map_or(0, |c| c.count);
            self.gauge(
                "payonce_operations",
                "Operations per state.",
                &format!("status=\"{}\"", status.as_str()),
                n,
            );
        }
        self
    }
    /// The document.
    pub fn finish(self) -> String {
        self.0
    }
}

fn braces(labels: &str) -> String {
    if labels.is_empty() {
        String::new()
    } else {
        format!("{{{labels}}}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_gauges_and_histograms() {
        let h = Histogram::default();
        h.observe_ms(3);
        h.observe(std::time::Duration::from_micros(700_250));
        let mut e = Exposition::default();
        e.counter("payonce_claims_total", "Claims.", "", 7)
            .gauge(
                "payonce_operations",
                "Rows per state.",
                "status=\"ready\"",
                2,
            )
            .gauge(
                "payonce_operations",
                "Rows per state.",
                "status=\"unknown\"",
                1,
            )
            .histogram("payonce_submit_seconds", "Submit latency.", &h);
        let text = e.finish();
        assert!(text.contains("payonce_claims_total 7\n"));
        assert!(text.contains("payonce_operations{status=\"unknown\"} 1\n"));
        assert_eq!(text.matches("# TYPE payonce_operations gauge").count(), 1);
        assert!(text.contains("payonce_submit_seconds_bucket{le=\"0.005\"} 1\n"));
        assert!(text.contains("payonce_submit_seconds_bucket{le=\"1\"} 2\n"));
        assert!(text.contains("payonce_submit_seconds_count 2\n"));
        // The sum keeps microseconds: 3 ms + 700.25 ms.
        assert!(
            text.contains("payonce_submit_seconds_sum 0.70325\n"),
            "{text}"
        );
    }
}

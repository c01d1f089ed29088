//! Prometheus metrics through `prometheus-client`: its counters, gauges and histograms, and its
//! encoder of the text exposition format (0.0.4), which names counters `…_total` in HELP, TYPE and
//! samples alike, as the hand-written exposition did. A scrape gathers each component's series into
//! an [`Exposition`], one family per name even when two components add to it (the worker and the
//! reconciler in one process both count 429s and measure their clock), and encodes it once.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub use prometheus_client::metrics::counter::Counter;
pub use prometheus_client::metrics::gauge::Gauge;

/// Upper bounds of the latency buckets, in milliseconds.
pub const LATENCY_BUCKETS_MS: [u64; 12] =
    [1, 2, 5, 10, 25, 50, 100, 250, 500, 1_000, 5_000, 30_000];

/// A latency histogram in seconds with the buckets of [`LATENCY_BUCKETS_MS`].
#[derive(Debug, Clone)]
pub struct Histogram {
    inner: prometheus_client::metrics::histogram::Histogram,
    /// Observations so far, readable outside tests (the crate's own count is test-only).
    count: std::sync::Arc<AtomicU64>,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            inner: prometheus_client::metrics::histogram::Histogram::new(
                LATENCY_BUCKETS_MS.iter().map(|ms| *ms as f64 / 1_000.0),
            ),
            count: std::sync::Arc::default(),
        }
    }
}

impl Histogram {
    /// Records one observation of whole milliseconds.
    pub fn observe_ms(&self, ms: u64) {
        self.observe(Duration::from_millis(ms));
    }
    /// Records one observation, to the nanosecond: whole milliseconds would drop up to one per
    /// observation, and the means of short steps (a ledger write, 1–3 ms) with it.
    pub fn observe(&self, elapsed: Duration) {
        self.inner.observe(elapsed.as_secs_f64());
        self.count.fetch_add(1, Ordering::Relaxed);
    }
    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

/// Label pairs of one series, in the order written.
type Labels = Vec<(&'static str, String)>;

/// The series of one family, all of one type.
#[derive(Debug)]
enum Series {
    Counters(Vec<(Labels, Counter)>),
    Gauges(Vec<(Labels, ConstGauge<i64>)>),
    SecondsGauges(Vec<(Labels, ConstGauge<f64>)>),
    Histograms(Vec<(Labels, prometheus_client::metrics::histogram::Histogram)>),
}

impl Series {
    fn metric_type(&self) -> MetricType {
        match self {
            Series::Counters(_) => MetricType::Counter,
            Series::Gauges(_) | Series::SecondsGauges(_) => MetricType::Gauge,
            Series::Histograms(_) => MetricType::Histogram,
        }
    }
}

/// One metric family: its exposed name, HELP text and series.
#[derive(Debug)]
struct Family {
    name: &'static str,
    help: &'static str,
    series: Series,
}

/// One scrape's families, in the order first added; encoded by `prometheus-client`.
#[derive(Debug, Default)]
pub struct Exposition {
    families: Vec<Family>,
}

fn labels(pairs: &[(&'static str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (*k, (*v).to_string())).collect()
}

impl Exposition {
    /// The family `name`, created with `series` if new. A name added twice keeps its first HELP
    /// and must keep its type (a mismatch is a programming error, caught by the tests).
    fn family(&mut self, name: &'static str, help: &'static str, series: Series) -> &mut Series {
        let at = match self.families.iter().position(|f| f.name == name) {
            Some(at) => at,
            None => {
                self.families.push(Family { name, help, series });
                self.families.len() - 1
            }
        };
        &mut self.families[at].series
    }

    /// A counter series (`name` ends in `_total`, as exposed).
    pub fn counter(
        &mut self,
        name: &'static str,
        help: &'static str,
        pairs: &[(&'static str, &str)],
        counter: &Counter,
    ) -> &mut Self {
        match self.family(name, help, Series::Counters(Vec::new())) {
            Series::Counters(v) => v.push((labels(pairs), counter.clone())),
            other => debug_assert!(false, "{name} is not a counter: {other:?}"),
        }
        self
    }

    /// A gauge series with the value it has now.
    pub fn gauge(
        &mut self,
        name: &'static str,
        help: &'static str,
        pairs: &[(&'static str, &str)],
        value: i64,
    ) -> &mut Self {
        match self.family(name, help, Series::Gauges(Vec::new())) {
            Series::Gauges(v) => v.push((labels(pairs), ConstGauge::new(value))),
            other => debug_assert!(false, "{name} is not an integer gauge: {other:?}"),
        }
        self
    }

    /// A gauge of a signed span, given in milliseconds and exposed in seconds.
    pub fn gauge_seconds(
        &mut self,
        name: &'static str,
        help: &'static str,
        pairs: &[(&'static str, &str)],
        ms: i64,
    ) -> &mut Self {
        let seconds = ConstGauge::new(ms as f64 / 1_000.0);
        match self.family(name, help, Series::SecondsGauges(Vec::new())) {
            Series::SecondsGauges(v) => v.push((labels(pairs), seconds)),
            other => debug_assert!(false, "{name} is not a seconds gauge: {other:?}"),
        }
        self
    }

    /// A latency histogram, in seconds.
    pub fn histogram(
        &mut self,
        name: &'static str,
        help: &'static str,
        h: &Histogram,
    ) -> &mut Self {
        match self.family(name, help, Series::Histograms(Vec::new())) {
            Series::Histograms(v) => v.push((Labels::new(), h.inner.clone())),
            other => debug_assert!(false, "{name} is not a histogram: {other:?}"),
        }
        self
    }

    /// `payonce_operations{status=…}` for every state, zero where `counts` has none: a state that
    /// empties must read 0, not vanish from the scrape.
    pub fn operations_per_state(&mut self, counts: &[crate::operation::StatusCount]) -> &mut Self {
        for status in crate::state::ALL_STATUSES {
            let n = counts
                .iter()
                .find(|c| c.status == status)
                .map_or(0, |c| c.count);
            self.gauge(
                "payonce_operations",
                "Operations per state.",
                &[("status", status.as_str())],
                n,
            );
        }
        self
    }

    /// The ready queue by class (`payonce_ready_operations`, `payonce_ready_due_operations`,
    /// `payonce_ready_oldest_age_seconds`), every class even when empty: a class that empties must
    /// read 0, not vanish. The age is that of the oldest due row at `now` (0: none due).
    pub fn ready_by_class(
        &mut self,
        classes: &[crate::queue_depth::ClassDepth],
        now: crate::clock::Timestamp,
    ) -> &mut Self {
        for class in crate::queue_depth::every_class(classes) {
            let priority = [("priority", class.priority.as_str())];
            let wait_ms = i64::try_from(class.oldest_wait(now).as_millis()).unwrap_or(i64::MAX);
            self.gauge(
                "payonce_ready_operations",
                "Ready operations per class, due or scheduled for later.",
                &priority,
                class.ready,
            )
            .gauge(
                "payonce_ready_due_operations",
                "Ready operations per class that are due now (claimable).",
                &priority,
                class.due,
            )
            .gauge_seconds(
                "payonce_ready_oldest_age_seconds",
                "How long the oldest due ready operation of the class has waited (0: none due).",
                &priority,
                wait_ms,
            );
        }
        self
    }

    /// The ready queue by tenant and class (`payonce_ready_tenant_operations`,
    /// `payonce_ready_tenant_due_operations`): the tenants with the most ready rows, the rest under
    /// `tenant="(other)"`, so at most `QUEUE_TENANTS_SHOWN + 1` tenants per class. `(other)` is
    /// there for every class, 0 when no tenant is folded, so the families never vanish.
    pub fn ready_by_tenant(&mut self, tenants: &[crate::queue_depth::TenantDepth]) -> &mut Self {
        let none_folded = crate::priority::ALL_PRIORITIES
            .into_iter()
            .filter(|p| {
                !tenants
                    .iter()
                    .any(|t| t.tenant.is_none() && t.priority == *p)
            })
            .map(|priority| crate::queue_depth::TenantDepth {
                tenant: None,
                priority,
                ready: 0,
                due: 0,
            })
            .collect::<Vec<_>>();
        for t in tenants.iter().chain(&none_folded) {
            let pairs = [("tenant", t.label()), ("priority", t.priority.as_str())];
            self.gauge(
                "payonce_ready_tenant_operations",
                "Ready operations of the tenants with the most, per class; the others summed as (other).",
                &pairs,
                t.ready,
            )
            .gauge(
                "payonce_ready_tenant_due_operations",
                "Due ready operations of the tenants with the most ready, per class; the others summed as (other).",
                &pairs,
                t.due,
            );
        }
        self
    }

    /// The document, in the Prometheus text format.
    pub fn finish(self) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self));
        let mut text = String::new();
        // Writing to a String cannot fail, and every family was built well-formed above.
        if let Err(error) =
            prometheus_client::encoding::prometheus_text::encode(&mut text, &registry)
        {
            tracing::error!(%error, "metrics: the exposition could not be encoded");
        }
        text
    }
}

impl Collector for Exposition {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for family in &self.families {
            // The encoder appends `_total` to a counter's name.
            let name = match family.series {
                Series::Counters(_) => family.name.strip_suffix("_total").unwrap_or(family.name),
                _ => family.name,
            };
            let mut metric =
                encoder.encode_descriptor(name, family.help, None, family.series.metric_type())?;
            match &family.series {
                Series::Counters(v) => {
                    for (labels, m) in v {
                        m.encode(metric.encode_family(labels)?)?;
                    }
                }
                Series::Gauges(v) => {
                    for (labels, m) in v {
                        m.encode(metric.encode_family(labels)?)?;
                    }
                }
                Series::SecondsGauges(v) => {
                    for (labels, m) in v {
                        m.encode(metric.encode_family(labels)?)?;
                    }
                }
                Series::Histograms(v) => {
                    for (labels, m) in v {
                        m.encode(metric.encode_family(labels)?)?;
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_gauges_and_histograms_under_their_exposed_names() {
        let h = Histogram::default();
        h.observe_ms(3);
        h.observe(Duration::from_micros(700_250));
        let claims = Counter::default();
        claims.inc_by(7);
        let mut e = Exposition::default();
        e.counter("payonce_claims_total", "Claims.", &[], &claims)
            .gauge(
                "payonce_operations",
                "Rows per state.",
                &[("status", "ready")],
                2,
            )
            .gauge(
                "payonce_operations",
                "Rows per state.",
                &[("status", "unknown")],
                1,
            )
            .gauge_seconds("payonce_drift_seconds", "Drift", &[], -1_500)
            .histogram("payonce_submit_seconds", "Submit latency.", &h);
        let text = e.finish();
        // A counter keeps its `_total` name in HELP and TYPE too (the Prometheus text format).
        assert!(
            text.contains("# HELP payonce_claims_total Claims.\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE payonce_claims_total counter\n"),
            "{text}"
        );
        assert!(text.contains("payonce_claims_total 7\n"), "{text}");
        assert!(text.contains("payonce_operations{status=\"unknown\"} 1\n"));
        // One family for the two series, and a HELP text exactly as given (no period added).
        assert_eq!(text.matches("# TYPE payonce_operations gauge").count(), 1);
        assert!(
            text.contains("# HELP payonce_drift_seconds Drift\n"),
            "{text}"
        );
        assert!(text.contains("payonce_drift_seconds -1.5\n"), "{text}");
        assert!(text.contains("payonce_submit_seconds_bucket{le=\"0.005\"} 1\n"));
        assert!(
            text.contains("payonce_submit_seconds_bucket{le=\"1\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("payonce_submit_seconds_bucket{le=\"+Inf\"} 2\n"));
        assert!(text.contains("payonce_submit_seconds_count 2\n"));
        assert_eq!(h.count(), 2);
        // The sum keeps sub-millisecond time: 3 ms + 700.25 ms.
        let sum: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("payonce_submit_seconds_sum "))
            .expect("a sum")
            .parse()
            .expect("a number");
        assert!((sum - 0.70325).abs() < 1e-9, "{sum}");
    }

    #[test]
    fn the_ready_queue_reads_every_class_and_the_tenants_shown_with_the_rest_as_other() {
        use crate::clock::Timestamp;
        use crate::id::TenantId;
        use crate::priority::Priority;
        use crate::queue_depth::{ClassDepth, TenantDepth};
        let bulk = ClassDepth {
            priority: Priority::Bulk,
            ready: 7,
            due: 5,
            oldest_due: Some(Timestamp::from_millis(10_000)),
        };
        let tenants = [
            TenantDepth {
                tenant: Some(TenantId::parse("acme").unwrap()),
                priority: Priority::Bulk,
                ready: 4,
                due: 3,
            },
            TenantDepth {
                tenant: None,
                priority: Priority::Bulk,
                ready: 3,
                due: 2,
            },
        ];
        let mut e = Exposition::default();
        e.ready_by_class(&[bulk], Timestamp::from_millis(100_500))
            .ready_by_tenant(&tenants);
        let text = e.finish();
        for line in [
            "payonce_ready_operations{priority=\"interactive\"} 0\n",
            "payonce_ready_operations{priority=\"bulk\"} 7\n",
            "payonce_ready_due_operations{priority=\"interactive\"} 0\n",
            "payonce_ready_due_operations{priority=\"bulk\"} 5\n",
            "payonce_ready_oldest_age_seconds{priority=\"interactive\"} 0.0\n",
            "payonce_ready_oldest_age_seconds{priority=\"bulk\"} 90.5\n",
            "payonce_ready_tenant_operations{tenant=\"acme\",priority=\"bulk\"} 4\n",
            "payonce_ready_tenant_operations{tenant=\"(other)\",priority=\"bulk\"} 3\n",
            "payonce_ready_tenant_due_operations{tenant=\"acme\",priority=\"bulk\"} 3\n",
            "payonce_ready_tenant_due_operations{tenant=\"(other)\",priority=\"bulk\"} 2\n",
            "payonce_ready_tenant_operations{tenant=\"(other)\",priority=\"interactive\"} 0\n",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        assert_eq!(
            text.matches("# TYPE payonce_ready_operations gauge")
                .count(),
            1
        );
    }

    #[test]
    fn an_observation_on_a_bound_falls_in_that_bucket() {
        let h = Histogram::default();
        for ms in LATENCY_BUCKETS_MS {
            h.observe_ms(ms);
        }
        let mut e = Exposition::default();
        e.histogram("payonce_x_seconds", "X.", &h);
        let text = e.finish();
        for (i, ms) in LATENCY_BUCKETS_MS.iter().enumerate() {
            let line = format!(
                "payonce_x_seconds_bucket{{le=\"{}\"}} {}\n",
                *ms as f64 / 1_000.0,
                i + 1
            );
            assert!(text.contains(&line), "{line} in {text}");
        }
    }
}

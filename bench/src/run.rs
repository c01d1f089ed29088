//! Runs every section in order and puts each figure next to its baseline or target.

use crate::report::{Table, Target, per_second, thousands};
use crate::settings::Settings;
use crate::sweep::SweepCost;
use crate::{embedded, http, latency, sweep, throughput};

/// The least payonce/baseline ratio the issue asks for: 3,000 ops/s against ~1,700 jobs/s.
pub const TARGET_VS_SINGLE: f64 = 3_000.0 / 1_745.0;
/// The least share of concurrency / latency the HTTP run must reach.
pub const TARGET_HTTP_SHARE: f64 = 0.8;
/// The most sweep(large) / sweep(small) may be: cost follows stuck work, not table size.
pub const TARGET_SWEEP_GROWTH: f64 = 1.5;
/// The absolute throughput target on the reference machine (2 cores).
pub const TARGET_OPS_PER_SECOND: f64 = 3_000.0;

/// Everything a run measured.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The results table.
    pub table: Table,
    /// Zero-latency Postgres section.
    pub throughput: throughput::Throughput,
    /// HTTP section: (rate, concurrency / latency).
    pub http: (crate::report::Rate, f64),
    /// Latency section.
    pub latency: latency::Latencies,
    /// Sweep section, small and large table.
    pub sweep: (SweepCost, SweepCost),
    /// SQLite section.
    pub sqlite: crate::report::Rate,
}

/// Runs every section; fails on the first section whose correctness check fails.
pub async fn run(s: &Settings) -> anyhow::Result<Outcome> {
    let mut table = Table::default();
    let progress = |what: &str| eprintln!("payonce-bench: {what}");

    progress("zero-latency throughput on Postgres (baselines first)");
    let t =
        throughput::postgres(&s.admin_url, s.clients, &s.fleet, s.operations, s.deadline).await?;
    let ops = t.payonce.per_second();
    table.compare(
        format!(
            "Postgres end to end, in-process processor, {} ops, {} worker(s) × concurrency {}, claim batch {}, {} connections",
            thousands(s.operations),
            s.fleet.workers,
            s.fleet.config.concurrency,
            s.fleet.config.batch_size,
            s.clients
        ),
        (ops, &per_second(&t.payonce)),
        (t.baseline_single.per_second(), &format!("{} plain lifecycle, 1 job/statement", per_second(&t.baseline_single))),
        Some(Target::AtLeast(TARGET_VS_SINGLE)),
    );
    table.compare(
        "same, against the batched plain lifecycle",
        (ops, &per_second(&t.payonce)),
        (
            t.baseline_batched.per_second(),
            &format!(
                "{} plain lifecycle, {} jobs/statement",
                per_second(&t.baseline_batched),
                s.fleet.config.batch_size
            ),
        ),
        None,
    );
    table.compare(
        "same, against the absolute target",
        (ops, &per_second(&t.payonce)),
        (TARGET_OPS_PER_SECOND, "3,000/s"),
        Some(Target::AtLeast(1.0)),
    );
    table.fact(
        format!(
            "peak RSS (VmHWM) of the bench process while the workers ran{}",
            if t.peak_reset {
                ""
            } else {
                " (not reset: covers the run so far)"
            }
        ),
        t.peak_kib
            .map_or("unavailable".into(), |k| format!("{} MiB", k / 1024)),
    );

    progress("throughput over HTTP with processor latency");
    let h = http::postgres(
        &s.admin_url,
        s.clients,
        &s.http_fleet,
        s.http_operations,
        s.http_latency,
        s.deadline,
    )
    .await?;
    let in_flight = (s.http_fleet.workers * s.http_fleet.config.concurrency) as f64;
    let bound = in_flight / s.http_latency.as_secs_f64();
    table.compare(
        format!(
            "Postgres end to end over HTTP, simulator latency {} ms, {} ops, {} in flight",
            s.http_latency.as_millis(),
            thousands(s.http_operations),
            in_flight
        ),
        (h.per_second(), &per_second(&h)),
        (
            bound,
            &format!(
                "{}/s = concurrency / latency",
                thousands(bound.round() as u64)
            ),
        ),
        Some(Target::AtLeast(TARGET_HTTP_SHARE)),
    );

    progress("claim-to-submit latency at moderate load");
    let l = latency::moderate_load(
        &s.admin_url,
        s.clients,
        &s.fleet,
        s.latency_operations,
        s.latency_per_second,
        s.deadline,
    )
    .await?;
    table.fact(
        format!(
            "claim → submission recorded, p50 / p99, {} ops offered at {}/s",
            thousands(l.operations),
            l.offered_per_second
        ),
        format!(
            "{} ms / {} ms",
            l.claim_to_submit_ms.0, l.claim_to_submit_ms.1
        ),
    );
    table.fact(
        "approval committed → claimed (queue wait, NOTIFY wake-up), p50 / p99",
        format!(
            "{} ms / {} ms",
            l.approve_to_claim_ms.0, l.approve_to_claim_ms.1
        ),
    );

    progress("reconciler sweep cost (bulk loads first)");
    let small =
        sweep::measure(&s.admin_url, s.sweep_rows.0, s.sweep_stuck, s.sweep_repeats).await?;
    progress("reconciler sweep cost, larger table");
    let large =
        sweep::measure(&s.admin_url, s.sweep_rows.1, s.sweep_stuck, s.sweep_repeats).await?;
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1_000.0;
    table.compare(
        format!(
            "sweep resolving {} stuck among {} rows vs among {} (median of {})",
            thousands(s.sweep_stuck as u64),
            thousands(large.rows as u64),
            thousands(small.rows as u64),
            s.sweep_repeats
        ),
        (ms(large.median), &format!("{:.0} ms", ms(large.median))),
        (ms(small.median), &format!("{:.0} ms", ms(small.median))),
        Some(Target::AtMost(TARGET_SWEEP_GROWTH)),
    );

    progress("SQLite embedded throughput");
    let q = embedded::throughput(&s.fleet, s.operations, s.deadline).await?;
    table.compare(
        format!(
            "SQLite file (WAL, synchronous=FULL), in-process processor, {} ops",
            thousands(s.operations)
        ),
        (q.per_second(), &per_second(&q)),
        (ops, &format!("{} Postgres above", per_second(&t.payonce))),
        None,
    );

    Ok(Outcome {
        table,
        throughput: t,
        http: (h, bound),
        latency: l,
        sweep: (small, large),
        sqlite: q,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::database::ADMIN_URL_DEFAULT;

    /// Runs every section at quick sizes against the local Postgres: the bench code does not rot.
    /// Asserts correctness facts only (each section already checks one payment per operation and
    /// fails the run otherwise); never a time.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn quick_run_pays_every_operation_exactly_once_in_every_section() {
        let admin = std::env::var("DATABASE_URL").unwrap_or_else(|_| ADMIN_URL_DEFAULT.to_string());
        let s = Settings::quick(&admin);
        let outcome = match run(&s).await {
            Ok(o) => o,
            Err(e) => panic!("quick bench run failed: {e:#}"),
        };
        assert_eq!(outcome.throughput.payonce.count, s.operations);
        assert!(outcome.throughput.baseline_single.count > 0);
        assert!(outcome.throughput.baseline_batched.count > 0);
        assert_eq!(outcome.http.0.count, s.http_operations);
        assert_eq!(outcome.latency.operations, s.latency_operations);
        assert_eq!(outcome.sweep.0.samples.len(), s.sweep_repeats);
        assert_eq!(outcome.sweep.1.rows, s.sweep_rows.1);
        assert_eq!(outcome.sqlite.count, s.operations);
        assert_eq!(outcome.table.rows.len(), 10, "{}", outcome.table.markdown());
    }
}

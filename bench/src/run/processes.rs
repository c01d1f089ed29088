//! The sections that run real processes: one `payonce worker` process draining from a simulator
//! process (its rates, memory and CPU), a fleet under the processor's rate limits, and the peer
//! (graphile-worker's node processes) against payonce's drain.

use super::{Outcome, TARGET_HTTP_SHARE, TARGET_WORKER_MIB, progress};
use crate::process;
use crate::ratelimit;
use crate::report::{Target, per_second, thousands};
use crate::settings::Settings;

/// The most WAL bytes a payment may write from `ready` to `succeeded` under a real worker process
/// (issue 52).
const PROCESS_WAL_BYTES_TARGET: f64 = 1_000.0;

/// The worker-process section: a real `payonce worker` draining from a `payonce simulator`, over
/// each protocol.
pub(super) async fn process_rows(s: &Settings, out: &mut Outcome) -> anyhow::Result<()> {
    let Some(bin) = &s.payonce_bin else {
        progress(
            "worker process: skipped (no payonce binary next to payonce-bench; build it with `cargo build --release -p payonce`)",
        );
        return Ok(());
    };
    let mut default_run = None;
    for protocol in process::Protocol::ALL {
        progress(&format!(
            "a payonce worker process draining from a payonce simulator process over {}",
            protocol.label()
        ));
        let p = process::drain(
            &s.admin_url,
            bin,
            s.process_operations,
            (s.process_concurrency, protocol),
            s.process_latency,
            s.deadline,
        )
        .await?;
        let what = format!(
            "`payonce worker` process over {}, {} in flight, no fleet limiter, `payonce simulator` process at {} ms, {} ops",
            protocol.label(),
            s.process_concurrency,
            s.process_latency.as_millis(),
            thousands(s.process_operations),
        );
        drain_rows(out, s, &what, &p);
        if let Some((concurrency, latency)) = s.process_ceiling {
            progress("the same processes at the HTTP ceiling's latency");
            let c = process::drain(
                &s.admin_url,
                bin,
                s.process_operations,
                (concurrency, protocol),
                latency,
                s.deadline,
            )
            .await?;
            let what = format!(
                "`payonce worker` process over {}, {concurrency} in flight, no fleet limiter, `payonce simulator` process at {} ms, {} ops",
                protocol.label(),
                latency.as_millis(),
                thousands(s.process_operations),
            );
            out.table
                .fact(format!("{what}: payments/s"), per_second(&c.rate));
            cpu_row(out, &what, &c);
        }
        default_run.get_or_insert(p);
    }
    out.process = default_run;
    Ok(())
}

/// The rows of one worker-process drain at the settings' concurrency and latency: its rates
/// against concurrency / latency, its memory, its CPU and its connections.
fn drain_rows(out: &mut Outcome, s: &Settings, what: &str, p: &process::WorkerProcess) {
    let bound = s.process_concurrency as f64 / s.process_latency.as_secs_f64();
    let against = format!("{bound:.0}/s concurrency / latency");
    out.table.compare(
        format!("{what}: payments/s"),
        (p.rate.per_second(), &per_second(&p.rate)),
        (bound, &against),
        Some(Target::AtLeast(TARGET_HTTP_SHARE)),
    );
    out.table.compare(
        format!(
            "{what}: payments/s from the worker's first claim to its last outcome (the ledger's timestamps; the process's start-up before it: {} ms)",
            p.start_up.as_millis()
        ),
        (p.working.per_second(), &per_second(&p.working)),
        (bound, &against),
        Some(Target::AtLeast(TARGET_HTTP_SHARE)),
    );
    if let Some(steady) = &p.steady {
        out.table.compare(
            format!(
                "{what}: payments/s in steady state (between the polls that first saw {:.0} % and {:.0} % succeeded)",
                process::STEADY_FROM * 100.0,
                process::STEADY_TO * 100.0
            ),
            (steady.per_second(), &per_second(steady)),
            (bound, &against),
            Some(Target::AtLeast(TARGET_HTTP_SHARE)),
        );
    }
    let mib = p.peak_kib as f64 / 1024.0;
    out.table.compare(
        format!("{what}: the worker's peak RSS (VmHWM)"),
        (mib, &format!("{mib:.1} MiB")),
        (TARGET_WORKER_MIB, &format!("{TARGET_WORKER_MIB:.0} MiB")),
        Some(Target::AtMost(1.0)),
    );
    out.table.fact(
        format!("{what}: the worker's private memory at its largest (`RssAnon`, polled every 50 ms; the peak above adds the binary's code and read-only data mapped from its file)"),
        format!("{:.1} MiB", p.peak_anon_kib as f64 / 1024.0),
    );
    cpu_row(out, what, p);
    out.table.compare(
        format!(
            "{what}: Postgres written per payment while the worker ran (ready → succeeded, with its start-up): {}",
            p.wal.per(p.rate.count)
        ),
        (p.wal.bytes_per(p.rate.count), &format!("{:.0} B", p.wal.bytes_per(p.rate.count))),
        (PROCESS_WAL_BYTES_TARGET, &format!("{PROCESS_WAL_BYTES_TARGET} B (issue 52)")),
        Some(Target::AtMost(1.0)),
    );
    out.table.fact(
        format!(
            "{what}: TCP connections the worker opened to the simulator (the simulator's count)"
        ),
        thousands(p.connections),
    );
}

/// Where one drain's CPU went, per payment and by process.
fn cpu_row(out: &mut Outcome, what: &str, p: &process::WorkerProcess) {
    let us = |d| process::CpuSplit::per_operation_us(d, p.rate.count);
    out.table.fact(
        format!("{what}: CPU per payment by process (`/proc/PID/stat`; Postgres: every `postgres` process)"),
        format!(
            "worker {:.0} µs, simulator {:.0} µs, Postgres {:.0} µs; machine {:.0} µs, {:.0}% busy",
            us(p.cpu.worker),
            us(p.cpu.simulator),
            us(p.cpu.postgres),
            us(p.cpu.machine_busy),
            p.cpu.busy_share() * 100.0,
        ),
    );
    let g = &p.grouping;
    if let Some(steady) = &p.steady {
        // Each slot carries one operation at a time: concurrency / rate is one slot's turn.
        let turn_ms = p.concurrency as f64 * 1_000.0 / steady.per_second().max(f64::EPSILON);
        out.table.fact(
            format!("{what}: one slot's turn in steady state (concurrency / rate) and its parts, means from the worker's histograms"),
            format!(
                "{turn_ms:.1} ms: submission {:.1} ms, claimed → sent {:.1} ms, answer → recorded {:.1} ms (the write itself, with the claim it makes: {:.1} ms), the rest {:.1} ms (a freed slot waiting for the next claim, and a claim of its own)",
                g.submit_ms,
                g.claim_to_submit_ms,
                g.answer_to_recorded_ms,
                g.write_ms,
                turn_ms - g.submit_ms - g.claim_to_submit_ms - g.answer_to_recorded_ms,
            ),
        );
    }
    out.table.fact(
        format!("{what}: operations per claim, outcomes per write (the worker's `/metrics`)"),
        format!(
            "{:.1} per claim ({} claims, {} of them by outcome writes), {:.1} per write ({} writes)",
            g.per_claim(),
            thousands(g.claims),
            thousands(g.claims_with_outcomes),
            g.per_write(),
            thousands(g.record_writes),
        ),
    );
}

/// The least share of the processor's write limit the limited fleet must reach.
pub const TARGET_LIMIT_SHARE: f64 = 0.95;
/// The most 429s may be of the limited fleet's requests.
pub const TARGET_REFUSED_SHARE: f64 = 0.001;

/// The rate-limit section: a fleet under the processor's limits, in each limiter mode.
pub(super) async fn ratelimit_rows(s: &Settings, out: &mut Outcome) -> anyhow::Result<()> {
    let Some(bin) = &s.payonce_bin else {
        progress(
            "rate limits: skipped (no payonce binary next to payonce-bench, or pass --payonce-bin)",
        );
        return Ok(());
    };
    let n = s.ratelimit_operations;
    let limit = f64::from(ratelimit::LIMIT_PER_SECOND);
    let what = |m: &str| {
        format!(
            "{} worker processes + reconciler, simulator limit {}/s writes and reads, {} ops, {m}",
            ratelimit::WORKERS,
            ratelimit::LIMIT_PER_SECOND,
            thousands(n)
        )
    };
    let mut runs = Vec::new();
    for mode in [
        ratelimit::Mode::Shared,
        ratelimit::Mode::Off,
        ratelimit::Mode::RedisKilled,
    ] {
        progress(&format!("rate limits: {mode:?}"));
        let r = ratelimit::drain(&s.admin_url, bin, n, mode, s.deadline).await?;
        let rate = r.per_second();
        let refused = format!(
            "{} of {} requests 429 ({:.3}%)",
            thousands(r.refused_429),
            thousands(r.requests),
            r.refused_share() * 100.0
        );
        match mode {
            ratelimit::Mode::Shared => {
                out.table.compare(
                    what("shared limiter (Redis): submission rate"),
                    (rate, &format!("{rate:.1}/s")),
                    (limit, &format!("{limit:.0}/s limit")),
                    Some(Target::AtLeast(TARGET_LIMIT_SHARE)),
                );
                out.table.compare(
                    "same run: 429s as a share of requests (one payment per operation checked)",
                    (r.refused_share(), &refused),
                    (
                        TARGET_REFUSED_SHARE,
                        &format!("{:.1}% allowed", TARGET_REFUSED_SHARE * 100.0),
                    ),
                    Some(Target::AtMost(1.0)),
                );
            }
            ratelimit::Mode::Off => out.table.fact(
                what("no limiter (429s retried with the same key)"),
                format!("{rate:.1}/s, {refused}"),
            ),
            ratelimit::Mode::RedisKilled => out.table.fact(
                what("shared limiter, Redis killed at 1/3 and restarted at 2/3"),
                format!(
                    "{rate:.1}/s, {refused}, fallback entered {} times (gauge seen: {}), one payment per operation",
                    r.fallback_entered, r.fallback_seen
                ),
            ),
        }
        runs.push(r);
    }
    out.ratelimit = Some(runs);
    Ok(())
}

/// The least payonce / graphile-worker ratio, end to end on the same server (issue 52).
const TARGET_VS_GRAPHILE_WORKER: f64 = 1.0;
/// The most Postgres CPU per payment in the in-process drain, µs (issue 52).
const TARGET_POSTGRES_CPU_US: f64 = 25.0;

/// The peer section: graphile-worker and payonce's drain in alternating pairs on the same server.
pub(super) async fn peer_rows(s: &Settings, out: &mut Outcome) -> anyhow::Result<()> {
    progress(
        "graphile-worker and payonce in alternating pairs (installs graphile-worker from npm once)",
    );
    let Some(peers) = crate::peers::measure(
        &s.admin_url,
        s.clients,
        &s.fleet,
        s.operations,
        s.peer_pairs,
        s.deadline,
    )
    .await?
    else {
        progress("peers: skipped (graphile-worker could not be installed: no npm, or no registry)");
        return Ok(());
    };
    let Some((peer, ours)) = crate::peers::median_pair(&peers.pairs) else {
        return Ok(());
    };
    let pairs = peers
        .pairs
        .iter()
        .map(|(p, o)| format!("{:.2}", o.rate.per_second() / p.rate.per_second()))
        .collect::<Vec<_>>()
        .join(", ");
    let jobs = s.operations;
    out.table.compare(
        format!(
            "payonce end to end against graphile-worker {} ({} instances × 24 jobs, local queue 500), {} each, same server, alternating (median pair of {}; ratios {pairs})",
            "0.18.0",
            crate::peers::PEER_INSTANCES,
            thousands(jobs),
            peers.pairs.len(),
        ),
        (ours.rate.per_second(), &per_second(&ours.rate)),
        (peer.rate.per_second(), &per_second(&peer.rate)),
        Some(Target::AtLeast(TARGET_VS_GRAPHILE_WORKER)),
    );
    let us = |d: std::time::Duration| d.as_secs_f64() * 1e6 / jobs.max(1) as f64;
    out.table.compare(
        "that pair: Postgres CPU per payment (payonce) against per job (graphile-worker), every `postgres` process",
        (us(ours.postgres_cpu), &format!("{:.1} µs", us(ours.postgres_cpu))),
        (us(peer.postgres_cpu), &format!("{:.1} µs", us(peer.postgres_cpu))),
        None,
    );
    out.table.compare(
        "that pair: Postgres CPU per payment against the target",
        (
            us(ours.postgres_cpu),
            &format!("{:.1} µs", us(ours.postgres_cpu)),
        ),
        (
            TARGET_POSTGRES_CPU_US,
            &format!("{TARGET_POSTGRES_CPU_US:.0} µs (issue 52)"),
        ),
        Some(Target::AtMost(1.0)),
    );
    out.table.compare(
        format!(
            "that pair: WAL per payment {} against per job {}",
            ours.wal.per(jobs),
            peer.wal.per(jobs)
        ),
        (
            ours.wal.bytes_per(jobs),
            &format!("{:.0} B", ours.wal.bytes_per(jobs)),
        ),
        (
            peer.wal.bytes_per(jobs),
            &format!("{:.0} B", peer.wal.bytes_per(jobs)),
        ),
        None,
    );
    out.peers = Some(peers);
    Ok(())
}

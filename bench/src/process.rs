//! Real processes over real HTTP: a `payonce worker` process draining operations from a `payonce
//! simulator` process, each with its own CPU time and the worker's peak memory (`VmHWM` of that
//! process, not of the bench), read from `/proc` while they still run. Postgres's share is the CPU
//! time of the server's processes over the same span, so the three costs stand apart: what the
//! worker (ledger calls and the Stripe adapter) spends per payment, what the simulator spends, and
//! what the database spends.

use crate::database::ScratchDatabase;
use crate::load::{self, Kind};
use crate::report::Rate;
use anyhow::Context;
use payonce_core::state::Status;
use payonce_ledger::SharedLedger;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

/// How often the bench looks at the ledger while the process drains (one cheap count).
const POLL: Duration = Duration::from_millis(50);
/// How long a process gets to exit after SIGTERM before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(10);
/// How long the simulator process gets to answer its first request.
const START_DEADLINE: Duration = Duration::from_secs(30);
/// Linux reports process CPU times in these ticks per second (`USER_HZ`, fixed at 100).
const TICKS_PER_SECOND: u64 = 100;

/// What the worker process did.
#[derive(Debug, Clone)]
pub struct WorkerProcess {
    /// Operations recorded, start of the process to the last outcome seen.
    pub rate: Rate,
    /// The worker's in-flight limit.
    pub concurrency: usize,
    /// The worker process's peak resident set size, KiB.
    pub peak_kib: u64,
    /// The largest private resident memory (`RssAnon`) seen at the bench's polls, KiB: the peak
    /// without the binary's code and read-only data mapped from its file.
    pub peak_anon_kib: u64,
    /// CPU time spent over the drain, by process.
    pub cpu: CpuSplit,
    /// How the worker grouped its ledger writes, from its `/metrics` at the end of the drain.
    pub grouping: Grouping,
    /// The rate between the bench's polls that first saw [`STEADY_FROM`] and [`STEADY_TO`] of the
    /// operations succeeded: the drain without the process's start-up, the ramp to full
    /// concurrency and the tail; `None` when the drain was too short to see both.
    pub steady: Option<Rate>,
    /// Operations from the worker's first claim to its last outcome, as the ledger logged them:
    /// the drain without the process's start-up and the poll's lateness, with the ramp and the tail.
    pub working: Rate,
    /// From the bench spawning the worker to the worker's first claim (the ledger's timestamp).
    pub start_up: Duration,
    /// TCP connections the worker opened to the simulator (the simulator's count, less the bench's own reads).
    pub connections: u64,
    /// What the ledger's database wrote while the worker ran (ready → succeeded, with the
    /// process's start-up and shutdown writes).
    pub wal: crate::wal::Cost,
}

/// The worker's claims and outcome writes over one drain (its `/metrics` counters).
#[derive(Debug, Clone, Copy, Default)]
pub struct Grouping {
    /// `payonce_worker_claimed_total`: operations claimed.
    pub claimed: u64,
    /// `payonce_worker_claims_total`: claim statements that returned operations.
    pub claims: u64,
    /// `payonce_worker_outcomes_total`, every outcome.
    pub outcomes: u64,
    /// `payonce_worker_record_writes_total`: group writes of outcomes.
    pub record_writes: u64,
    /// Mean of `payonce_worker_submit_seconds`, ms: the processor's answer as the worker waits for it.
    pub submit_ms: f64,
    /// Mean of `payonce_worker_claim_to_submit_seconds`, ms: claimed → submission sent.
    pub claim_to_submit_ms: f64,
    /// Mean of `payonce_worker_outcome_to_recorded_seconds`, ms: answer → outcome written.
    pub answer_to_recorded_ms: f64,
    /// Mean of `payonce_worker_record_write_seconds`, ms: one group write (with its claim) itself.
    pub write_ms: f64,
    /// `payonce_worker_claims_with_outcomes_total`: claims made by outcome writes.
    pub claims_with_outcomes: u64,
}

impl Grouping {
    /// Scrapes the worker's `/metrics` at `metrics_url` and reads its grouping.
    pub async fn scrape(metrics_url: &str) -> anyhow::Result<Grouping> {
        Ok(Grouping::from_exposition(
            &reqwest::get(metrics_url)
                .await
                .and_then(reqwest::Response::error_for_status)
                .with_context(|| format!("scrape the worker's {metrics_url}"))?
                .text()
                .await?,
        ))
    }

    /// Reads the four counters from a `/metrics` page.
    pub fn from_exposition(text: &str) -> Grouping {
        Grouping {
            claimed: metric_sum(text, "payonce_worker_claimed_total"),
            claims: metric_sum(text, "payonce_worker_claims_total"),
            outcomes: metric_sum(text, "payonce_worker_outcomes_total"),
            record_writes: metric_sum(text, "payonce_worker_record_writes_total"),
            submit_ms: histogram_mean_ms(text, "payonce_worker_submit_seconds"),
            claim_to_submit_ms: histogram_mean_ms(text, "payonce_worker_claim_to_submit_seconds"),
            answer_to_recorded_ms: histogram_mean_ms(
                text,
                "payonce_worker_outcome_to_recorded_seconds",
            ),
            write_ms: histogram_mean_ms(text, "payonce_worker_record_write_seconds"),
            claims_with_outcomes: metric_sum(text, "payonce_worker_claims_with_outcomes_total"),
        }
    }

    /// Mean operations per claim.
    pub fn per_claim(&self) -> f64 {
        self.claimed as f64 / self.claims.max(1) as f64
    }

    /// Mean outcomes per write.
    pub fn per_write(&self) -> f64 {
        self.outcomes as f64 / self.record_writes.max(1) as f64
    }
}

/// The worker's count of outcomes recorded as succeeded.
const SUCCEEDED_SERIES: &str = "payonce_worker_outcomes_total{outcome=\"succeeded\"}";

/// The sum of every sample of `series` on a Prometheus text page: all its label sets, or one when
/// `series` names it (`name{label="…"}`); 0 if absent.
pub(crate) fn metric_sum(text: &str, series: &str) -> u64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(series)
                .is_some_and(|rest| rest.starts_with([' ', '{']))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// The mean of a histogram in seconds on a Prometheus text page, in ms: its `_sum` over its
/// `_count` (all label sets); 0 when it has no observations.
fn histogram_mean_ms(text: &str, histogram: &str) -> f64 {
    let total = |suffix: &str| -> f64 {
        let series = format!("{histogram}{suffix}");
        text.lines()
            .filter(|l| {
                l.strip_prefix(series.as_str())
                    .is_some_and(|rest| rest.starts_with([' ', '{']))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let count = total("_count");
    if count > 0.0 {
        total("_sum") * 1_000.0 / count
    } else {
        0.0
    }
}

/// CPU time over one drain: the two payonce-built processes, the database server, the whole machine.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuSplit {
    /// The `payonce worker` process (its ledger calls, the Stripe adapter, the HTTP client).
    pub worker: Duration,
    /// The `payonce simulator` process (HTTP server, its SQLite store, the added latency's timers).
    pub simulator: Duration,
    /// Every `postgres` process on the machine (the worker's connections; the bench polls the worker).
    pub postgres: Duration,
    /// Busy time of every core, everything included.
    pub machine_busy: Duration,
    /// Wall time of the drain times the cores.
    pub machine_capacity: Duration,
}

impl CpuSplit {
    /// Microseconds of `part` per operation drained.
    pub fn per_operation_us(part: Duration, operations: u64) -> f64 {
        part.as_secs_f64() * 1e6 / operations.max(1) as f64
    }

    /// Share of the machine's cores that were busy.
    pub fn busy_share(&self) -> f64 {
        self.machine_busy.as_secs_f64() / self.machine_capacity.as_secs_f64().max(f64::EPSILON)
    }
}

/// The `payonce` binary beside this executable (`target/release/payonce` next to
/// `target/release/payonce-bench`), if it was built.
pub fn sibling_binary() -> Option<PathBuf> {
    let path = std::env::current_exe().ok()?.with_file_name("payonce");
    path.is_file().then_some(path)
}

/// How the worker speaks to the simulator (`PAYONCE_PROCESSOR_HTTP2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// The default: a connection per request in flight.
    Http1,
    /// One connection, a stream per request in flight (cleartext, prior knowledge).
    Http2,
}

impl Protocol {
    /// Both, the default first.
    pub const ALL: [Protocol; 2] = [Protocol::Http1, Protocol::Http2];

    fn http2_setting(self) -> &'static str {
        match self {
            Protocol::Http1 => "false",
            Protocol::Http2 => "true",
        }
    }

    /// How a row names it.
    pub fn label(self) -> &'static str {
        match self {
            Protocol::Http1 => "HTTP/1.1",
            Protocol::Http2 => "HTTP/2",
        }
    }
}

/// Loads `operations` ready rows, starts `payonce simulator` with `latency`, runs `payonce worker`
/// with its defaults but `concurrency` in flight (and as many idle connections kept) over
/// `protocol` and no fleet limiter (so the in-flight limit, not the limiter's 100/s, bounds it)
/// against both, waits until every operation succeeded, reads the worker's peak memory and both
/// processes' CPU time, and stops both with SIGTERM (each must exit 0). Checks one payment per
/// operation at the simulator.
pub async fn drain(
    admin_url: &str,
    payonce_bin: &Path,
    operations: u64,
    (concurrency, protocol): (usize, Protocol),
    latency: Duration,
    deadline: Duration,
) -> anyhow::Result<WorkerProcess> {
    let db = ScratchDatabase::create(admin_url).await?;
    let ledger = db.ledger(2).await?;
    load::postgres(
        &db.url,
        Kind::Ready,
        1,
        i64::try_from(operations)?,
        crate::now_ms(),
    )
    .await?;
    let (mut sim, sim_pid, sim_url) = start_simulator(payonce_bin, latency).await?;

    let connections_before = crate::http::simulator_connections(&sim_url).await?;
    let mark = crate::wal::Mark::take(&db.url).await?;
    let cpu_before = CpuBefore::read(sim_pid)?;
    let started = Instant::now();
    let spawned_ms = crate::now_ms();
    let metrics_listen = format!("127.0.0.1:{}", free_port()?);
    let metrics_url = format!("http://{metrics_listen}/metrics");
    let mut child = spawn_worker(
        payonce_bin,
        &metrics_listen,
        &db.url,
        &sim_url,
        (concurrency, protocol),
    )?;
    let pid = child.id().context("the worker exited at once")?;
    let shared: SharedLedger = Arc::new(ledger.clone());
    let peak_anon = std::cell::Cell::new(0_u64);
    let progress = std::cell::RefCell::new(Vec::new());
    // Progress is read from the worker's own counter, not the ledger: a `count_by_status` every 50 ms
    // cost Postgres about 10 ms each, charged to the drain's CPU per payment and taken from the
    // processes being measured. The ledger is checked once the counter says done.
    let scraper = reqwest::Client::new();
    let succeeded = until(&mut child, "the worker", started, deadline, || async {
        if let Some(kib) = anon_kib_of(pid) {
            peak_anon.set(peak_anon.get().max(kib));
        }
        let page = match scraper.get(&metrics_url).send().await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(e) => return Ok(Err(format!("the worker's metrics are not up: {e}"))),
        };
        let done = metric_sum(&page, SUCCEEDED_SERIES);
        progress.borrow_mut().push((Instant::now(), done));
        Ok(if done >= operations {
            Ok(done)
        } else {
            Err(format!("only {done} of {operations} operations succeeded"))
        })
    })
    .await?;
    let elapsed = started.elapsed();
    let cpu = cpu_before.split_since(pid, sim_pid)?;
    let peak_kib = peak_kib_of(pid).context("read the worker's VmHWM")?;
    let grouping = Grouping::scrape(&metrics_url).await?;
    stop(&mut child, "worker").await?;
    let wal = mark.cost().await?;
    // Less this read's own connection.
    let connections = (crate::http::simulator_connections(&sim_url).await?)
        .saturating_sub(connections_before + 1);
    crate::drive::check_all_succeeded(&shared, operations).await?;
    let window = crate::drive::WorkWindow::read(ledger.pool()).await?;
    let payments = crate::http::simulator_payments(&sim_url).await?;
    anyhow::ensure!(
        payments == operations,
        "the simulator holds {payments} payments for {operations} operations"
    );
    stop(&mut sim, "simulator").await?;
    ledger.pool().close().await;
    db.drop_now().await?;
    Ok(WorkerProcess {
        rate: Rate::new(succeeded, elapsed),
        concurrency,
        peak_kib,
        peak_anon_kib: peak_anon.get(),
        cpu,
        grouping,
        steady: steady_rate(&progress.into_inner(), operations),
        working: window.rate(operations),
        start_up: Duration::from_millis((window.first_claim_ms - spawned_ms).max(0).unsigned_abs()),
        connections,
        wal,
    })
}

/// CPU counters read before a drain: the simulator's, every `postgres` process's, the machine's.
struct CpuBefore {
    simulator: Duration,
    postgres: Duration,
    machine: (Duration, Duration),
}

impl CpuBefore {
    /// Reads the counters, the simulator's (`sim_pid`) included.
    fn read(sim_pid: u32) -> anyhow::Result<CpuBefore> {
        Ok(CpuBefore {
            simulator: cpu_of(sim_pid).context("read the simulator's CPU time")?,
            postgres: postgres_cpu(),
            machine: machine_cpu().context("read /proc/stat")?,
        })
    }

    /// Where the CPU went since: the worker's (`worker_pid`) whole life, the others' difference.
    fn split_since(&self, worker_pid: u32, sim_pid: u32) -> anyhow::Result<CpuSplit> {
        let (machine_busy, machine_total) = machine_cpu().context("read /proc/stat")?;
        Ok(CpuSplit {
            worker: cpu_of(worker_pid).context("read the worker's CPU time")?,
            simulator: cpu_of(sim_pid)
                .context("read the simulator's CPU time")?
                .saturating_sub(self.simulator),
            postgres: postgres_cpu().saturating_sub(self.postgres),
            machine_busy: machine_busy.saturating_sub(self.machine.0),
            machine_capacity: machine_total.saturating_sub(self.machine.1),
        })
    }
}

/// Starts `payonce simulator` on a free port with `latency`, and waits until it answers: the child,
/// its pid and its base URL.
async fn start_simulator(
    payonce_bin: &Path,
    latency: Duration,
) -> anyhow::Result<(Child, u32, String)> {
    let port = free_port()?;
    let sim_url = format!("http://127.0.0.1:{port}");
    let mut sim = Command::new(payonce_bin)
        .arg("simulator")
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--latency-ms", &latency.as_millis().to_string()])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("spawn {} simulator", payonce_bin.display()))?;
    let sim_pid = sim.id().context("the simulator exited at once")?;
    until(
        &mut sim,
        "the simulator",
        Instant::now(),
        START_DEADLINE,
        || async {
            Ok(crate::http::simulator_payments(&sim_url)
                .await
                .map_err(|e| format!("{sim_url} does not answer: {e:#}")))
        },
    )
    .await?;
    Ok((sim, sim_pid, sim_url))
}

/// Spawns `payonce worker` on `db_url` against `sim_url` with `concurrency` in flight (and as many
/// idle connections) over `protocol`, no fleet limiter, its metrics on `metrics_listen`.
fn spawn_worker(
    payonce_bin: &Path,
    metrics_listen: &str,
    db_url: &str,
    sim_url: &str,
    (concurrency, protocol): (usize, Protocol),
) -> anyhow::Result<Child> {
    Command::new(payonce_bin)
        .arg("worker")
        .env("PAYONCE_METRICS_LISTEN", metrics_listen)
        .env("PAYONCE_DATABASE_URL", db_url)
        .env("PAYONCE_PROCESSOR_URL", sim_url)
        .env(
            "PAYONCE_PROCESSOR_SECRET_KEY",
            payonce_simulator::config::API_KEY_DEFAULT,
        )
        .env("PAYONCE_WORKER_CONCURRENCY", concurrency.to_string())
        .env(
            "PAYONCE_PROCESSOR_IDLE_CONNECTIONS",
            concurrency.max(1).to_string(),
        )
        .env("PAYONCE_PROCESSOR_HTTP2", protocol.http2_setting())
        .env("PAYONCE_LIMITER", "off")
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("spawn {} worker", payonce_bin.display()))
}

/// Where the steady-state window starts and ends, as shares of the operations succeeded.
pub const STEADY_FROM: f64 = 0.1;
/// See [`STEADY_FROM`].
pub const STEADY_TO: f64 = 0.9;

/// The rate between the first poll that saw [`STEADY_FROM`] of `operations` done and the first
/// that saw [`STEADY_TO`], from the counts those polls read (not the thresholds).
fn steady_rate(polls: &[(Instant, u64)], operations: u64) -> Option<Rate> {
    let seen = |share: f64| {
        polls
            .iter()
            .find(|(_, done)| *done as f64 >= share * operations as f64)
    };
    let (from_at, from_done) = seen(STEADY_FROM)?;
    let (to_at, to_done) = seen(STEADY_TO)?;
    (to_done > from_done && to_at > from_at)
        .then(|| Rate::new(to_done - from_done, to_at.duration_since(*from_at)))
}

/// Polls `check` every [`POLL`] until it is done (`Ok`); fails if `child` (`what`) exits first or
/// `deadline` passes after `started`, saying what `check` saw last (`Err`).
async fn until<T, F, Fut>(
    child: &mut Child,
    what: &str,
    started: Instant,
    deadline: Duration,
    mut check: F,
) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Result<T, String>>>,
{
    loop {
        let last = match check().await? {
            Ok(done) => return Ok(done),
            Err(last) => last,
        };
        if let Some(exit) = child.try_wait()? {
            anyhow::bail!("{what} exited early ({exit}): {last}");
        }
        anyhow::ensure!(
            started.elapsed() < deadline,
            "{what}: {last} within {deadline:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

pub(crate) use payonce_chaos::fleet::free_port;

/// Sends SIGTERM to `child` (a no-op if it already exited).
pub(crate) async fn sigterm(child: &Child) -> anyhow::Result<()> {
    if let Some(pid) = child.id() {
        let term = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .await?;
        anyhow::ensure!(term.success(), "kill -TERM {pid} failed");
    }
    Ok(())
}

/// SIGTERM, then the process must exit 0 within [`EXIT_GRACE`].
async fn stop(child: &mut Child, what: &str) -> anyhow::Result<()> {
    sigterm(child).await?;
    let exit = tokio::time::timeout(EXIT_GRACE, child.wait())
        .await
        .with_context(|| format!("the {what} did not exit after SIGTERM"))??;
    anyhow::ensure!(exit.success(), "the {what} exited with {exit} on SIGTERM");
    Ok(())
}

/// Operations the ledger holds as succeeded.
pub(crate) async fn succeeded(ledger: &SharedLedger) -> anyhow::Result<u64> {
    Ok(ledger
        .count_by_status()
        .await?
        .iter()
        .find(|c| c.status == Status::Succeeded)
        .map_or(0, |c| u64::try_from(c.count).unwrap_or(0)))
}

fn peak_kib_of(pid: u32) -> Option<u64> {
    crate::memory::vm_hwm_kib(&status_of(pid)?)
}

fn anon_kib_of(pid: u32) -> Option<u64> {
    crate::memory::rss_anon_kib(&status_of(pid)?)
}

/// `/proc/PID/status` of process `pid`.
fn status_of(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/status")).ok()
}

/// User plus system CPU time of process `pid`, all its threads (`/proc/PID/stat`).
fn cpu_of(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    cpu_of_stat(&stat).map(|(_, cpu)| cpu)
}

/// The command name and user plus system CPU time in a `/proc/PID/stat` line. The name is between
/// the first `(` and the last `)` (it may hold spaces); utime and stime are the 12th and 13th
/// fields after it.
fn cpu_of_stat(stat: &str) -> Option<(&str, Duration)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat.get(open + 1..close)?;
    let mut fields = stat.get(close + 1..)?.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((name, ticks(utime + stime)))
}

fn ticks(n: u64) -> Duration {
    Duration::from_millis(n * 1000 / TICKS_PER_SECOND)
}

/// The CPU time of a process's children that exited and were waited for (`cutime`, `cstime`, the
/// two fields after utime and stime): the postmaster's holds every backend that closed.
fn reaped_children_cpu(stat: &str) -> Option<Duration> {
    let close = stat.rfind(')')?;
    let mut fields = stat.get(close + 1..)?.split_whitespace().skip(13);
    let cutime: u64 = fields.next()?.parse().ok()?;
    let cstime: u64 = fields.next()?.parse().ok()?;
    Some(ticks(cutime + cstime))
}

/// CPU time of every process named `postgres` that is running now, with that of its children that
/// exited (a backend whose client disconnected during a drain still counts).
pub(crate) fn postgres_cpu() -> Duration {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Duration::ZERO;
    };
    dir.filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter_map(|stat| {
            let (name, cpu) = cpu_of_stat(&stat)?;
            (name == "postgres").then(|| cpu + reaped_children_cpu(&stat).unwrap_or_default())
        })
        .sum()
}

/// (busy, total) CPU time of all cores since boot (`/proc/stat`'s `cpu` line; idle and iowait
/// are not busy).
fn machine_cpu() -> Option<(Duration, Duration)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    machine_cpu_of(stat.lines().next()?)
}

fn machine_cpu_of(line: &str) -> Option<(Duration, Duration)> {
    let mut fields = line.split_whitespace();
    (fields.next()? == "cpu").then_some(())?;
    let values: Vec<u64> = fields
        .take(8)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    let total: u64 = values.iter().sum();
    let idle = values.get(3)? + values.get(4)?;
    Some((ticks(total - idle), ticks(total)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_its_name_and_cpu_time_even_with_spaces_in_the_name() {
        let line = "4242 (tokio runtime) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 75 3 1 20 0 9 0";
        let (name, cpu) = cpu_of_stat(line).unwrap();
        assert_eq!(name, "tokio runtime");
        assert_eq!(cpu, Duration::from_millis(3_250));
        assert_eq!(cpu_of_stat("4242 no parentheses"), None);
    }

    #[test]
    fn the_machine_line_counts_idle_and_iowait_as_not_busy() {
        let (busy, total) = machine_cpu_of("cpu  100 5 50 800 40 3 2 0 0 0").unwrap();
        assert_eq!(total, Duration::from_millis(10_000));
        assert_eq!(busy, Duration::from_millis(1_600));
        assert_eq!(machine_cpu_of("intr 1 2 3"), None);
    }

    #[test]
    fn this_process_has_a_cpu_time() {
        if cfg!(target_os = "linux") {
            assert!(cpu_of(std::process::id()).is_some());
            assert!(machine_cpu().is_some_and(|(busy, total)| busy <= total));
        }
    }

    #[test]
    fn the_steady_rate_counts_between_the_polls_that_first_saw_each_share() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        // 1,000 operations: 50 done at 100 ms (under 10 %), 150 at 200 ms (the first at 10 %),
        // 800 at 700 ms, 950 at 800 ms (the first at 90 %), all at 900 ms.
        let polls = [
            (at(100), 50),
            (at(200), 150),
            (at(700), 800),
            (at(800), 950),
            (at(900), 1_000),
        ];
        let steady = steady_rate(&polls, 1_000).unwrap();
        assert_eq!(steady.count, 800);
        assert_eq!(steady.elapsed, Duration::from_millis(600));
        // A drain seen only at its end has no window.
        assert!(steady_rate(&[(at(900), 1_000)], 1_000).is_none());
    }

    #[test]
    fn a_histogram_mean_is_its_sum_over_its_count_in_ms() {
        let page = "payonce_worker_submit_seconds_bucket{le=\"0.25\"} 3\n\
                    payonce_worker_submit_seconds_sum 0.63\n\
                    payonce_worker_submit_seconds_count 3\n\
                    payonce_worker_submit_seconds_total_other 9\n";
        assert!((histogram_mean_ms(page, "payonce_worker_submit_seconds") - 210.0).abs() < 1e-9);
        assert_eq!(
            histogram_mean_ms(page, "payonce_worker_claim_to_submit_seconds"),
            0.0
        );
    }

    #[test]
    fn grouping_reads_every_label_set_of_a_series_and_no_longer_name() {
        let page = "\
# TYPE payonce_worker_claimed_total counter
payonce_worker_claimed_total 1000
payonce_worker_claims_total 125
payonce_worker_outcomes_total{outcome=\"succeeded\"} 990
payonce_worker_outcomes_total{outcome=\"failed\"} 10
payonce_worker_record_writes_total 250
payonce_limiter_fallback 1
payonce_limiter_fallback_entered_total 4
";
        let g = Grouping::from_exposition(page);
        assert_eq!(
            (g.claimed, g.claims, g.outcomes, g.record_writes),
            (1000, 125, 1000, 250)
        );
        assert_eq!((g.per_claim(), g.per_write()), (8.0, 4.0));
        assert_eq!(metric_sum(page, "payonce_limiter_fallback"), 1);
        assert_eq!(
            metric_sum(page, "payonce_limiter_fallback_entered_total"),
            4
        );
        assert_eq!(Grouping::from_exposition("").per_claim(), 0.0);
        assert_eq!(metric_sum(page, SUCCEEDED_SERIES), 990);
        assert_eq!(
            metric_sum(page, "payonce_worker_outcomes_total{outcome=\"failed\"}"),
            10
        );
        assert_eq!(
            metric_sum(page, "payonce_worker_claimed"),
            0,
            "a prefix is not a sample"
        );
        assert_eq!(metric_sum("", SUCCEEDED_SERIES), 0);
    }
}

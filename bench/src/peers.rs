//! A peer on the same server in the same run: graphile-worker (node), with its documented
//! high-throughput settings and its own perfTest's shape (4 instances × 24 concurrent jobs, a local
//! queue of 500, jobs added in one `add_jobs` call beforehand), drained alternately with payonce's
//! zero-latency drain of as many payments. Each side is measured the same way: its rate, the WAL
//! its database wrote per job ([`crate::wal`]) and the CPU every `postgres` process spent per job.
//! graphile-worker is installed from npm into `bench/peers/graphile-worker` on first use; without
//! node and npm the section is skipped.

use crate::database::ScratchDatabase;
use crate::drive::Fleet;
use crate::report::Rate;
use crate::throughput::{self, Drain};
use crate::wal::Mark;
use anyhow::Context;
use sqlx::{Connection, PgConnection};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::Command;

/// graphile-worker instances draining at once (its perfTest's `PARALLELISM`).
pub const PEER_INSTANCES: usize = 4;

/// Adds `$1` jobs of the `pay` task (`tasks/pay.js`, which does nothing) in one call.
const ADD_JOBS: &str = "SELECT count(*) FROM graphile_worker.add_jobs(array( \
       SELECT json_populate_record(null::graphile_worker.job_spec, json_build_object( \
         'identifier', 'pay', 'payload', json_build_object('invoice', 'INV-' || i, 'amount', 2048))) \
       FROM generate_series(1, $1) i))";
/// Jobs left; graphile-worker deletes a job once it completes.
const JOBS_LEFT: &str = "SELECT count(*) FROM graphile_worker._private_jobs";

/// One side of one pair.
#[derive(Debug, Clone, Copy)]
pub struct Side {
    /// Jobs or payments per second (graphile-worker's without its start-up and shutdown, as its
    /// perfTest reports it).
    pub rate: Rate,
    /// What its database wrote, per the whole drain.
    pub wal: crate::wal::Cost,
    /// CPU of every `postgres` process over the drain.
    pub postgres_cpu: Duration,
}

/// Every pair, in the order run.
#[derive(Debug, Clone, Default)]
pub struct Peers {
    /// (graphile-worker, payonce), alternately measured.
    pub pairs: Vec<(Side, Side)>,
}

/// Where graphile-worker is installed (`package.json`, the preset, the task).
pub fn peer_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("peers/graphile-worker")
}

/// Runs `pairs` pairs of `jobs` each; `None` when graphile-worker cannot be installed.
pub async fn measure(
    admin_url: &str,
    clients: u32,
    fleet: &Fleet,
    jobs: u64,
    pairs: usize,
    deadline: Duration,
) -> anyhow::Result<Option<Peers>> {
    let Some(cli) = install().await? else {
        return Ok(None);
    };
    let mut out = Peers::default();
    for _ in 0..pairs {
        let peer = graphile_worker(&cli, admin_url, jobs, deadline).await?;
        let Drain {
            rate,
            wal,
            postgres_cpu,
        } = throughput::drain(admin_url, 1, clients, fleet, jobs, deadline).await?;
        let ours = Side {
            rate,
            wal,
            postgres_cpu,
        };
        out.pairs.push((peer, ours));
    }
    Ok(Some(out))
}

/// The graphile-worker CLI, installed from the pinned `package.json` if it is not yet; `None`
/// without npm or when the install fails.
async fn install() -> anyhow::Result<Option<PathBuf>> {
    let dir = peer_dir();
    let cli = dir.join("node_modules/.bin/graphile-worker");
    if cli.exists() {
        return Ok(Some(cli));
    }
    let status = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--silent"])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .status()
        .await;
    match status {
        Ok(s) if s.success() && cli.exists() => Ok(Some(cli)),
        // No registry reachable: the section is skipped, the rest of the run goes on.
        Ok(s) => {
            eprintln!(
                "payonce-bench: npm install of graphile-worker in {} failed ({s})",
                dir.display()
            );
            Ok(None)
        }
        Err(_) => Ok(None),
    }
}

/// One graphile-worker drain of `jobs` on a fresh database.
async fn graphile_worker(
    cli: &std::path::Path,
    admin_url: &str,
    jobs: u64,
    deadline: Duration,
) -> anyhow::Result<Side> {
    let db = ScratchDatabase::create(admin_url).await?;
    let run = |args: &[&str]| {
        let mut command = Command::new(cli);
        command
            .args(args)
            .current_dir(peer_dir())
            .env("PEER_DATABASE_URL", &db.url)
            .env("NO_LOG_SUCCESS", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        command
    };
    let schema = run(&["--schema-only"]).output().await?;
    anyhow::ensure!(
        schema.status.success(),
        "graphile-worker --schema-only: {}",
        String::from_utf8_lossy(&schema.stderr)
    );
    // Its perfTest's way: the time one instance takes to start and stop on an empty queue is taken
    // off the drain's (the four start at once, so it is paid once).
    let started = Instant::now();
    let empty = run(&["--once"]).output().await?;
    anyhow::ensure!(
        empty.status.success(),
        "graphile-worker --once on an empty queue failed"
    );
    let start_up = started.elapsed();
    let mut conn = PgConnection::connect(&db.url).await?;
    sqlx::query(ADD_JOBS)
        .bind(i64::try_from(jobs)?)
        .execute(&mut conn)
        .await?;
    let mark = Mark::take(&db.url).await?;
    let cpu = crate::process::postgres_cpu();
    let started = Instant::now();
    let mut instances = Vec::with_capacity(PEER_INSTANCES);
    for _ in 0..PEER_INSTANCES {
        instances.push(run(&["--once"]).spawn()?);
    }
    for instance in instances {
        let done = tokio::time::timeout(deadline, instance.wait_with_output())
            .await
            .context("graphile-worker did not drain within the deadline")??;
        anyhow::ensure!(
            done.status.success(),
            "graphile-worker --once: {}",
            String::from_utf8_lossy(&done.stderr)
        );
    }
    let elapsed = started.elapsed().saturating_sub(start_up);
    let postgres_cpu = crate::process::postgres_cpu().saturating_sub(cpu);
    let wal = mark.cost().await?;
    let left: i64 = sqlx::query_scalar(JOBS_LEFT).fetch_one(&mut conn).await?;
    anyhow::ensure!(left == 0, "graphile-worker left {left} of {jobs} jobs");
    conn.close().await.ok();
    db.drop_now().await?;
    Ok(Side {
        rate: Rate::new(jobs, elapsed),
        wal,
        postgres_cpu,
    })
}

/// The pair with the median ratio payonce / graphile-worker.
pub fn median_pair(pairs: &[(Side, Side)]) -> Option<(Side, Side)> {
    let ratio = |(peer, ours): &(Side, Side)| ours.rate.per_second() / peer.rate.per_second();
    let mut sorted = pairs.to_vec();
    sorted.sort_by(|a, b| ratio(a).total_cmp(&ratio(b)));
    sorted.get(sorted.len() / 2).copied()
}

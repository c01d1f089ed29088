//! The plain job lifecycle the payonce figures are compared with, measured in the same run on the
//! same server: insert, claim with `FOR UPDATE SKIP LOCKED`, mark done — each its own autocommit
//! statement, `batch` jobs per statement, `clients` connections at once (baselines.md's shape).

use crate::report::Rate;
use anyhow::Context;
use sqlx::postgres::PgPoolOptions;
use std::time::Instant;

const SCHEMA: &str = "CREATE TABLE jobs (id BIGSERIAL PRIMARY KEY, status TEXT NOT NULL, \
     payload TEXT NOT NULL, run_at BIGINT NOT NULL, locked_by TEXT, locked_at BIGINT, finished_at BIGINT); \
     CREATE INDEX jobs_ready_idx ON jobs (run_at) WHERE status = 'ready'";
const INSERT: &str = "INSERT INTO jobs (status, payload, run_at) \
     SELECT 'ready', '{\"invoice\":\"INV-BENCH\",\"amount\":2048}', $1 FROM generate_series(1, $2)";
const CLAIM: &str = "UPDATE jobs j SET status = 'running', locked_by = $1, locked_at = $2 \
     FROM (SELECT id FROM jobs WHERE status = 'ready' AND run_at <= $2 ORDER BY run_at LIMIT $3 \
           FOR UPDATE SKIP LOCKED) picked \
     WHERE j.id = picked.id RETURNING j.id";
const DONE: &str =
    "UPDATE jobs SET status = 'done', finished_at = $2 WHERE id = ANY($1) AND locked_by = $3";
const COUNT_DONE: &str = "SELECT COUNT(*) FROM jobs WHERE status = 'done'";

/// Runs `clients` loops of `rounds` × (insert `batch`, claim up to `batch`, mark them done) on the
/// database at `url` and returns the jobs finished per second. Checks the table agrees.
pub async fn job_lifecycle(
    url: &str,
    clients: u32,
    batch: u32,
    rounds: u32,
) -> anyhow::Result<Rate> {
    let pool = PgPoolOptions::new()
        .max_connections(clients)
        .connect(url)
        .await
        .context("connect for the baseline")?;
    sqlx::raw_sql(SCHEMA).execute(&pool).await?;
    let started = Instant::now();
    let mut loops = tokio::task::JoinSet::new();
    for client in 0..clients {
        let pool = pool.clone();
        loops.spawn(async move {
            let owner = format!("baseline-{client}");
            let mut done = 0_u64;
            for _ in 0..rounds {
                let now = crate::now_ms();
                sqlx::query(INSERT)
                    .bind(now)
                    .bind(i32::try_from(batch).unwrap_or(i32::MAX))
                    .execute(&pool)
                    .await?;
                let ids: Vec<i64> = sqlx::query_scalar(CLAIM)
                    .bind(&owner)
                    .bind(now)
                    .bind(i64::from(batch))
                    .fetch_all(&pool)
                    .await?;
                let marked = sqlx::query(DONE)
                    .bind(&ids)
                    .bind(crate::now_ms())
                    .bind(&owner)
                    .execute(&pool)
                    .await?;
                done += marked.rows_affected();
            }
            Ok::<u64, sqlx::Error>(done)
        });
    }
    let mut finished = 0_u64;
    while let Some(joined) = loops.join_next().await {
        finished += joined??;
    }
    let elapsed = started.elapsed();
    let in_table: i64 = sqlx::query_scalar(COUNT_DONE).fetch_one(&pool).await?;
    anyhow::ensure!(
        u64::try_from(in_table).ok() == Some(finished),
        "baseline counted {finished} done jobs, the table has {in_table}"
    );
    pool.close().await;
    Ok(Rate::new(finished, elapsed))
}

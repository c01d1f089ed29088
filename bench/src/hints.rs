//! Webhook-hint capacity: how many stored webhooks the real `Reconciler::check_hints_once` closes
//! per second, with the daemon's default batch and interval. Every hint here is the common case of
//! a steady day: a `payment_intent.succeeded` for an operation the worker already recorded as
//! succeeded with the same object, which is closed without a processor read (a hint that needs a
//! read is bounded by the fleet limiter's read budget, which is the processor's, not payonce's).

use crate::database::ScratchDatabase;
use crate::inprocess::InProcessProcessor;
use crate::load::{self, Kind};
use payonce_core::clock::SystemClock;
use payonce_ledger::SharedLedger;
use payonce_reconciler::{Reconciler, ReconcilerConfig};
use sqlx::{Connection, PgConnection};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Connections the checking reconciler's ledger may use: `payonce reconciler`'s default pool.
const HINT_CONNECTIONS: u32 = 16;
/// Longest the check may take before the section fails (a stuck backlog, not a slow machine).
const HINT_DEADLINE: Duration = Duration::from_secs(600);

/// Stored webhooks for operations `$1..=$2` (loaded `succeeded` with `pi_hist_<i>`), saying the
/// same: what the api stores for each delivery.
const PG_HINTS: &str = "INSERT INTO processor_events (processor, event_id, event_type, operation_id, \
     payload, received_at) SELECT 'stripe', 'evt_bench_' || i, 'payment_intent.succeeded', \
     'op_' || lpad(to_hex(i), 32, '0'), \
     json_build_object('id', 'evt_bench_' || i, 'object', 'event', 'type', 'payment_intent.succeeded', \
       'data', json_build_object('object', json_build_object('id', 'pi_hist_' || i, \
       'object', 'payment_intent', 'status', 'succeeded', 'amount', 2048, 'currency', 'usd', \
       'metadata', json_build_object('payonce_operation_id', 'op_' || lpad(to_hex(i), 32, '0')))))::text, \
     $3 FROM generate_series($1::bigint, $2::bigint) AS i";

/// What one measurement saw.
#[derive(Debug, Clone)]
pub struct HintCapacity {
    /// Hints checked.
    pub hints: u64,
    /// Calls of `check_hints_once` it took (each one sweep of the daemon).
    pub sweeps: usize,
    /// Time from the first call to an empty backlog.
    pub elapsed: Duration,
}

impl HintCapacity {
    /// Hints closed per second.
    pub fn per_second(&self) -> f64 {
        self.hints as f64 / self.elapsed.as_secs_f64().max(f64::EPSILON)
    }
}

/// Loads `hints` succeeded operations and one hint each, then checks them with the daemon's
/// defaults until the backlog is empty; fails if any was not closed as known, or any read was made.
pub async fn measure(admin_url: &str, hints: i64) -> anyhow::Result<HintCapacity> {
    anyhow::ensure!(hints > 0, "at least one hint");
    let db = ScratchDatabase::create(admin_url).await?;
    let ledger: SharedLedger = Arc::new(db.ledger(HINT_CONNECTIONS).await?);
    let now = crate::now_ms();
    load::postgres(&db.url, Kind::Succeeded, 1, hints, now).await?;
    let mut conn = PgConnection::connect(&db.url).await?;
    sqlx::query(PG_HINTS)
        .bind(1_i64)
        .bind(hints)
        .bind(now)
        .execute(&mut conn)
        .await?;
    conn.close().await?;
    let processor = Arc::new(InProcessProcessor::default());
    let reconciler = Reconciler::new(
        ledger.clone(),
        processor.clone(),
        Arc::new(SystemClock),
        ReconcilerConfig::new("bench-hints"),
    );
    let started = Instant::now();
    let mut sweeps = 0;
    let mut known = 0u64;
    loop {
        let report = reconciler.check_hints_once().await?;
        sweeps += 1;
        known += u64::from(report.known);
        anyhow::ensure!(
            report.errors == 0 && report.applied == 0 && report.deferred == 0,
            "every hint agrees with its row: {report:?}"
        );
        if ledger.processor_event_backlog().await?.0 == 0 {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < HINT_DEADLINE,
            "the backlog was not worked down in {HINT_DEADLINE:?}"
        );
    }
    let elapsed = started.elapsed();
    anyhow::ensure!(
        known == hints.unsigned_abs() && processor.requests() == 0,
        "{known} of {hints} hints closed as known, {} processor requests",
        processor.requests()
    );
    drop(reconciler);
    drop(ledger);
    db.drop_now().await?;
    Ok(HintCapacity {
        hints: hints.unsigned_abs(),
        sweeps,
        elapsed,
    })
}

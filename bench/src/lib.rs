//! payonce-bench: throughput, latency and cost growth, each figure measured next to its baseline or
//! target in the same run on the same database server (fresh databases per section).
//!
//! Crate map:
//! - [`settings`]: the full and quick configurations, every size and limit named.
//! - [`run`]: runs every section in order and builds the results table.
//! - [`baseline`]: the plain job lifecycle (insert, claim with SKIP LOCKED, mark done).
//! - [`throughput`]: payonce end to end on Postgres with the in-process processor.
//! - [`intake`]: creating and approving through the ledger calls, next to plain single-row inserts.
//! - [`http`]: payonce end to end over HTTP against the simulator with a fixed latency.
//! - [`latency`]: claim-to-submit percentiles at moderate load, from the audit trail.
//! - [`sweep`]: reconciler sweep cost, stuck work among 100k and 1M rows.
//! - [`hints`]: webhook hints the reconciler closes per second.
//! - [`embedded`]: SQLite single-node throughput.
//! - [`process`]: a real `payonce worker` process draining over HTTP, and its own peak memory.
//! - [`ratelimit`]: four worker processes and a reconciler under the processor's rate limits (shared
//!   limiter, none, Redis killed mid-run).
//! - [`peers`]: graphile-worker on the same server, alternating with payonce's drain.
//! - [`drive`]: runs worker engines until a count of outcomes is recorded.
//! - [`inprocess`]: the simulator's payment semantics without HTTP.
//! - [`load`]: bulk loads through the real schema.
//! - [`database`]: fresh Postgres databases and SQLite files.
//! - [`memory`]: peak resident memory.
//! - [`profile`]: the hot-path ledger calls timed one by one (`--profile`).
//! - [`report`]: rates and the Markdown table.
//! - [`wal`]: WAL bytes, records, commits and statements a stretch wrote in one database.

pub mod baseline;
pub mod database;
pub mod drive;
pub mod embedded;
pub mod hints;
pub mod http;
pub mod inprocess;
pub mod intake;
pub mod latency;
pub mod load;
pub mod memory;
pub mod peers;
pub mod process;
pub mod profile;
pub mod ratelimit;
pub mod report;
pub mod run;
pub mod settings;
pub mod sweep;
pub mod tenants;
pub mod throughput;
pub mod wal;

pub use run::{Outcome, run};
pub use settings::Settings;

use payonce_core::clock::{Clock, SystemClock, Timestamp};

/// Now, from the system clock.
pub fn now() -> Timestamp {
    SystemClock.now()
}

/// Now, in ms since the epoch (the stored unit), for the load generator's SQL.
pub fn now_ms() -> i64 {
    now().as_millis()
}

/// Checks the in-process processor made exactly one payment per operation and was asked once per
/// operation (no resubmission in a clean run).
pub fn check_paid_once(
    processor: &inprocess::InProcessProcessor,
    operations: u64,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        processor.payments() == operations && processor.requests() == operations,
        "{} payments from {} requests for {operations} operations",
        processor.payments(),
        processor.requests()
    );
    Ok(())
}

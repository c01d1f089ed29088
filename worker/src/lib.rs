//! The worker: turns approved operations into exactly one processor submission each, on as many
//! machines as needed.
//!
//! - [`config`]: every limit, named, with defaults.
//! - [`execution`]: one operation's path — server-side checks, submission record, submit, outcome.
//! - [`daemon`]: the claim loop, lease renewal, group-committed recording, graceful shutdown.
//! - [`metrics`]: what the worker counts.

pub mod config;
pub mod daemon;
pub mod execution;
pub mod metrics;

pub use config::{ConfigError, WorkerConfig};
pub use daemon::{RunSummary, Worker};
pub use execution::{execute_one, precheck, settle, submit_claimed, to_recorded};
pub use metrics::WorkerMetrics;

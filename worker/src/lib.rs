//! The worker: turns approved operations into exactly one processor submission each, on as many
//! machines as needed.
//!
//! - [`config`]: every limit, named, with defaults.
//! - [`daemon`]: the claim loop, lease renewal, group-committed recording, graceful shutdown;
//!   each operation runs through `payonce_execution::execute`.
//! - [`metrics`]: what the worker counts.

pub mod config;
pub mod daemon;
pub mod fair;
pub mod metrics;

pub use config::{ConfigError, WorkerConfig};
pub use daemon::{RunSummary, Worker};
pub use metrics::WorkerMetrics;

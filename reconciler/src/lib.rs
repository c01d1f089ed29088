//! The reconciler: never resolves an unknown outcome with a new key. Sweep, look up, converge.
//!
//! - [`config`]: sweep limits and the resubmission policy.
//! - [`sweep`]: expired leases and unknown outcomes, each a plan then one write, in bounded batches,
//!   with a dry run; a same-key retry runs the one execution path (`payonce_execution`).
//! - [`evidence`]: stored webhooks (verified and stored by `payonce_processor::ingest`) checked by retrieving the processor object before anything applies;
//!   stored Adyen notifications checked against the operation instead ([`evidence::notification`]: Adyen has no lookup by id).
//! - [`scan`]: the processor's recent payments checked against the ledger (money a restore or failover lost).
//! - [`oncall`]: listing, showing and resolving operations by hand, as tables or JSON.
//! - [`metrics`]: operations per state, oldest unknown, resolutions by path.

pub mod config;
pub mod evidence;
#[cfg(test)]
mod fixtures;
pub mod metrics;
pub mod oncall;
pub mod scan;
pub mod sweep;

pub use config::ReconcilerConfig;
pub use sweep::{Reconciler, SweepReport};

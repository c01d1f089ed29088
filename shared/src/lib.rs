//! Transitional facade: the old `payonce_shared::…` paths over the layered crates (removed once
//! callers moved).

pub use payonce_core::{clock, details, failpoint, id, intention, metrics, money, signing, state};
pub use payonce_execution as execution;
pub use payonce_ledger as ledger;
pub use payonce_ledger::time as ledger_clock;
pub use payonce_processor as processor;
pub use payonce_processor::ingest as webhooks;
pub use payonce_processor::limiter;

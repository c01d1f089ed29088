//! payonce's core: the vocabulary every layer above speaks, with no storage and no I/O.
//!
//! - [`money`]: integer minor units and ISO 4217 currencies.
//! - [`id`]: operation ids, tenants, business keys, idempotency keys, parsed at the boundary.
//! - [`intention`]: the processor key derived from the business action, not the row.
//! - [`details`]: an operation's consequential details and the hash approvals bind to.
//! - [`state`]: the operation state machine, one transition function.
//! - [`operation`]: the operation row, the outcomes recorded on it, and the processor kinds it binds to.
//! - [`priority`]: who waits for an operation (interactive, bulk), tenants' shares, `not_before`.
//! - [`queue_depth`]: how much ready work waits, by class and by tenant.
//! - [`summary`]: what of a processor's object is ever shown or serialized.
//! - [`clock`]: injected time.
//! - [`metrics`]: counters and histograms in the Prometheus text format.
//! - [`failpoint`]: named failure points that crash tests arm.
//! - [`signing`]: the HMAC signature every outbound call of payonce carries.
//!
//! The crates above, in reading order: `payonce-ledger` (the durable ledger), `payonce-processor`
//! (the adapters and the limiter), `payonce-execution` (one operation's execution); then the worker,
//! the reconciler and the api. No arrow runs up.

pub mod clock;
pub mod details;
pub mod failpoint;
pub mod id;
pub mod intention;
pub mod metrics;
pub mod money;
pub mod operation;
pub mod priority;
pub mod queue_depth;
pub mod signing;
pub mod state;
pub mod summary;

//! payonce's shared library: what every daemon stands on.
//!
//! - [`money`]: integer minor units and ISO 4217 currencies.
//! - [`id`]: operation ids, tenants, business keys, idempotency keys, parsed at the boundary.
//! - [`intention`]: the processor key derived from the business action, not the row.
//! - [`details`]: an operation's consequential details and the hash approvals bind to.
//! - [`state`]: the operation state machine, one transition function.
//! - [`clock`]: injected time.
//! - [`execution`]: one operation's checks, submission and recorded outcome, for the worker and the reconciler.
//! - [`ledger`]: the durable execution ledger (Postgres, SQLite) — the queue, the leases, the audit trail.
//! - [`ledger_clock`]: the database's time, which decides leases, as workers and reconcilers read it; their drift.
//! - [`processor`]: the processor trait, its contract, and the Stripe adapter.
//! - [`limiter`]: the fleet's request budget at the processor (in-process, or shared through Redis).
//! - [`metrics`]: counters and histograms in the Prometheus text format.
//! - [`failpoint`]: named failure points that crash tests arm.
//! - [`signing`]: the HMAC signature every outbound call of payonce carries.
//! - [`webhooks`]: Stripe webhook deliveries verified and stored once as hints (for the api).

pub mod clock;
pub mod details;
pub mod execution;
pub mod failpoint;
pub mod id;
pub mod intention;
pub mod ledger;
pub mod ledger_clock;
pub mod limiter;
pub mod metrics;
pub mod money;
pub mod processor;
pub mod signing;
pub mod state;
pub mod webhooks;

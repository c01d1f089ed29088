//! The one integration test binary: real processes, real Postgres, the simulator over real HTTP.
//! Each area is a module; `support` holds the harness (databases, processes, waiting with deadlines).

mod support;

mod api;

mod ledger_conformance;
mod simulator;
mod stripe_adapter;
mod worker;
mod reconciler;

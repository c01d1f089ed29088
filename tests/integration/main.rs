//! The one integration test binary: real processes, real Postgres, the simulator over real HTTP.
//! Each area is a module; `support` holds the harness (databases, processes, waiting with deadlines).

// Test code: helpers outside #[test] functions panic on failure by design.
#![allow(clippy::unwrap_used)]

mod support;

mod adyen_adapter;
mod adyen_notifications;
mod adyen_spec;
mod api;
mod approved_edges;
mod bench;
mod clock_skew;
mod contracts;
mod deployables;
mod evidence;
mod fair_claims;

mod failure_injection;
mod full_disk;
mod fuzz_bodies;
mod house;
mod ledger_conformance;
mod limiter;
mod lost_ledger;
mod managed_postgres;
mod manual_restore;
mod metrics_names;
mod oncall_refunds;
mod operator;
mod poolers;
mod properties;
mod queue_metrics;
mod reconciler;
mod refund_dispatch;
mod replication_harness;
mod rolling_upgrade;
mod serve;
mod simulator;
mod simulator_refunds;
mod startup;
mod stripe_adapter;
mod stripe_refunds;
mod sweep_concurrency;
mod tenant_processor;
mod tenant_share;
mod worker;

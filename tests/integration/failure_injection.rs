//! The failure-injection suite of issue #7: asking twice never pays twice, and every operation ends in
//! the truth. Each scenario runs real `payonce` processes against real Postgres and the simulator over
//! HTTP, injects its failure for real (SIGKILL at a paused failure point, a restarted Postgres, a
//! storm of processor faults) and checks both sides: the simulator's audit (exactly one successful
//! payment per approved operation, none for unapproved ones) and the ledger (a final state or
//! `needs_attention` within a deadline, with an event history that explains every step).
//!
//! Scenarios already covered elsewhere are referenced, not repeated (docs/failure-injection.md has
//! the full table):
//! - 5, retry after the retention window: `reconciler::a_closed_retention_window_goes_to_a_human_never_to_a_second_payment`.
//! - 7, zombie worker: `worker::a_zombie_worker_whose_lease_was_reclaimed_cannot_record`.
//! - 9, two reconcilers at once: `reconciler::two_reconcilers_racing_pay_each_operation_once`.

mod crashes;
mod fleet;
mod outages;
pub(crate) mod refund_fixtures;
mod refund_recovery;
mod refunds;
mod requests;
mod soak;
mod webhooks;

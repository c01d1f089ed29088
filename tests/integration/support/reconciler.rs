//! The one way the tests build a reconciler: `ReconcilerConfig::new(name)` with the test's own limits
//! set by a closure, on the wall clock unless the test hands in another. Nothing here runs a sweep.

use payonce_core::clock::{SharedClock, SystemClock};
use payonce_ledger::SharedLedger;
use payonce_processor::{Processor, Processors};
use payonce_reconciler::{Reconciler, ReconcilerConfig};
use std::sync::Arc;
use std::time::Duration;

/// A reconciler named `name` over `ledger` and `processor`, on the wall clock; `tweak` sets the
/// limits the test needs on the default config.
pub fn build(
    ledger: &SharedLedger,
    processor: Arc<dyn Processor>,
    name: &str,
    tweak: impl FnOnce(&mut ReconcilerConfig),
) -> Reconciler {
    build_on(ledger, processor, Arc::new(SystemClock), name, tweak)
}

/// [`build`] on `clock` (a manual clock, or one ahead of the wall clock).
pub fn build_on(
    ledger: &SharedLedger,
    processor: Arc<dyn Processor>,
    clock: SharedClock,
    name: &str,
    tweak: impl FnOnce(&mut ReconcilerConfig),
) -> Reconciler {
    build_serving(ledger, Processors::single(processor), clock, name, tweak)
}

/// [`build_on`] serving every processor in `processors`.
pub fn build_serving(
    ledger: &SharedLedger,
    processors: Processors,
    clock: SharedClock,
    name: &str,
    tweak: impl FnOnce(&mut ReconcilerConfig),
) -> Reconciler {
    let mut config = ReconcilerConfig::new(name);
    tweak(&mut config);
    Reconciler::with_processors(ledger.clone(), processors, clock, config)
}

/// Re-checks due again after 50 ms, not seconds: for tests that sweep until a row settles.
pub fn quick_rechecks(config: &mut ReconcilerConfig) {
    config.check_backoff_base = Duration::from_millis(50);
}

/// A deferred check due again at once (1 ms backoff, first and longest): for tests on the wall
/// clock that sweep again right away.
pub fn immediate_rechecks(config: &mut ReconcilerConfig) {
    config.check_backoff_base = Duration::from_millis(1);
    config.check_backoff_max = Duration::from_millis(1);
}

//! The api's clock is the database's (issue 43): an approval's expiry, a confirmation link's, a
//! code's and a console session's are decided on the same time as the worker's leases and the
//! reconciler's expiries, whatever the api host's clock says. The database's time is read once at
//! start and every [`API_CLOCK_REFRESH`]; between reads the api's clock is its own moved by the
//! drift last measured ([`LedgerClock`]'s `now`), so a request costs no extra round trip. A drift
//! past `CLOCK_DRIFT_WARN` is logged, as the worker and reconciler log theirs.

use payonce_core::clock::SharedClock;
use payonce_ledger::time::{Drift, LedgerClock};
use payonce_ledger::{LedgerError, Queue};
use std::sync::Arc;
use std::time::Duration;

/// How often the api reads the database's time again (a host whose clock is stepped is followed
/// within this long).
pub const API_CLOCK_REFRESH: Duration = Duration::from_secs(10);

/// The database's clock for the api, as `local` (the host's clock) sees it; reads it once now and
/// keeps it fresh in a task that ends when the clock is dropped. On SQLite, which runs inside the
/// process, it is `local` itself.
pub async fn database_clock(
    ledger: Arc<dyn Queue>,
    local: SharedClock,
) -> Result<SharedClock, LedgerError> {
    let clock = Arc::new(LedgerClock::new(
        ledger,
        local,
        Arc::new(Drift::default()),
        "api",
    ));
    clock.read().await?;
    let weak = Arc::downgrade(&clock);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(API_CLOCK_REFRESH);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let Some(clock) = weak.upgrade() else { break };
            if let Err(error) = clock.read().await {
                // The last drift stands; the next tick tries again.
                tracing::debug!(%error, "the database's time could not be read");
            }
        }
    });
    Ok(clock)
}

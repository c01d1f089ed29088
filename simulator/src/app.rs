//! The state every handler reaches ([`App`], shared as [`Shared`]): configuration, the store, fault
//! rules, in-flight keys, ids, the request audit, the limiter and the simulator's clock. Built once at
//! start; everything in it is safe to share between requests.

use crate::audit::RequestAudit;
use crate::config::SimulatorConfig;
use crate::faults::Faults;
use crate::idempotency::{self, InFlight, KeyState};
use crate::rng::{IdGen, now_ms};
use crate::store::Store;
use std::sync::Arc;
use tokio::sync::{Notify, watch};

/// Everything a handler can reach.
pub(crate) struct App {
    pub(crate) config: SimulatorConfig,
    pub(crate) store: Store,
    pub(crate) faults: Faults,
    pub(crate) in_flight: InFlight,
    pub(crate) ids: IdGen,
    pub(crate) audit: RequestAudit,
    pub(crate) shutdown: watch::Receiver<bool>,
    pub(crate) webhook_wake: Notify,
    pub(crate) limiter: crate::rate_limits::Limiter,
    /// How far `POST /_sim/clock` moved the simulator's clock ahead of the wall clock, ms.
    pub(crate) clock_offset_ms: std::sync::atomic::AtomicI64,
    /// TCP connections accepted since start.
    pub(crate) accepted: Arc<std::sync::atomic::AtomicU64>,
}

/// Shared application state.
pub(crate) type Shared = Arc<App>;

impl App {
    /// The simulator's "now", ms since the epoch: the wall clock plus what `POST /_sim/clock` added.
    /// Everything time-dependent reads it (key retention, settling, webhook schedules, `created`),
    /// except the webhook signature's timestamp, which the receiver checks against its own clock.
    pub(crate) fn now_ms(&self) -> i64 {
        now_ms()
            + self
                .clock_offset_ms
                .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// When webhooks for an event created now are first due, if webhooks are configured.
    pub(crate) fn webhooks_due_ms(&self, now_ms: i64) -> Option<i64> {
        self.config
            .webhook_url
            .as_ref()
            .map(|_| now_ms + self.config.webhook_delay.as_millis() as i64)
    }

    /// The oldest save time a remembered key may have and still count.
    pub(crate) fn key_not_before_ms(&self, now_ms: i64) -> i64 {
        now_ms - self.config.key_retention.as_millis() as i64
    }

    /// What `key` says a request with `fingerprint` arriving at `now_ms` should do (claiming it when
    /// fresh), under the running contract and key retention.
    pub(crate) async fn key_state(
        &self,
        key: &str,
        fingerprint: &str,
        now_ms: i64,
    ) -> Result<KeyState, sqlx::Error> {
        idempotency::begin(
            &self.in_flight,
            &self.store,
            self.config.contract,
            key,
            fingerprint,
            self.key_not_before_ms(now_ms),
        )
        .await
    }
}

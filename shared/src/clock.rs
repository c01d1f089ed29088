//! Injected time: production reads the system clock, tests move a manual one.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

/// A source of "now" in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
}

/// Shared handle to a clock.
pub type SharedClock = Arc<dyn Clock>;

/// The operating system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
    }
}

/// A clock that moves only when told to; for tests.
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ms: AtomicI64,
}

impl ManualClock {
    /// Starts at `now_ms`.
    pub fn new(now_ms: i64) -> Arc<Self> {
        Arc::new(ManualClock {
            now_ms: AtomicI64::new(now_ms),
        })
    }
    /// Moves time forward.
    pub fn advance_ms(&self, delta_ms: i64) {
        self.now_ms.fetch_add(delta_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}

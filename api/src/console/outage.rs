//! The console's processor-outage banner, on every signed-in page while the processor is
//! unreachable: as the ledger records it (the submitting processes write each change they see,
//! `payonce_ledger::outage`), so an api running apart from the workers shows it too, or as
//! this process's own submissions find it (`payonce serve`). The ledger's row is read at most once
//! per [`LEDGER_READ_TTL`] per process, and kept process-wide like the process's own view.

use super::views::utc;
use maud::{Markup, html};
use payonce_core::clock::Timestamp;
use payonce_core::metrics::Exposition;
use payonce_ledger::outage::OutageLedger;
use payonce_processor::reachability;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long an api trusts the ledger's outage row before reading it again: a banner appears or
/// goes at most this late, and a console refreshing itself costs one read per this per process.
pub const LEDGER_READ_TTL: Duration = Duration::from_secs(5);

/// The ledger's outage row as this process last read it.
#[derive(Debug, Default)]
pub struct LedgerView {
    /// When it was read (`None`: never).
    read_at: Option<Instant>,
    /// Since when the ledger says the processor is unreachable.
    down_since: Option<Timestamp>,
}

impl LedgerView {
    /// Whether the view read at `read_at` is still to be trusted at `at`.
    fn fresh(&self, at: Instant) -> bool {
        self.read_at
            .is_some_and(|read| at.saturating_duration_since(read) < LEDGER_READ_TTL)
    }
}

static LEDGER_VIEW: Mutex<LedgerView> = Mutex::new(LedgerView {
    read_at: None,
    down_since: None,
});

fn view() -> std::sync::MutexGuard<'static, LedgerView> {
    LEDGER_VIEW
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Reads the ledger's row unless this process read it less than [`LEDGER_READ_TTL`] ago. A
/// failed read keeps the last view (and is tried again after the TTL): the page still renders.
pub async fn refresh(ledger: &dyn OutageLedger) {
    let at = Instant::now();
    if view().fresh(at) {
        return;
    }
    match ledger.reachability().await {
        Ok(row) => {
            *view() = LedgerView {
                read_at: Some(at),
                down_since: row.down_since,
            };
        }
        Err(error) => {
            tracing::warn!(%error, "could not read the processor's reachability from the ledger");
            view().read_at = Some(at);
        }
    }
}

/// Since when the processor has been unreachable, as the ledger (last read) or this process's
/// own submissions say: the earlier of the two.
pub fn down_since() -> Option<Timestamp> {
    let ledger = view().down_since;
    match (ledger, reachability::process().down_since()) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The banner for the processor as last known (nothing while it is reachable).
pub fn banner() -> Markup {
    banner_for(down_since())
}

/// The banner for an outage that began at `down_since`, if one is going on.
pub fn banner_for(down_since: Option<Timestamp>) -> Markup {
    html! {
        @if let Some(since) = down_since {
            section.error id="processor-outage" role="alert" {
                strong { "The processor is unreachable" }
                " (since " (utc(since.as_millis())) "). Approved payments wait in ready and are retried \
                 with backoff while their approval holds; nothing was sent. A payment whose approval \
                 runs out first comes here as needs_attention. See the runbook, \"Processor outage\"."
            }
        }
    }
}

/// `payonce_processor_reachable` for the api's `/metrics`: 1, or 0 while the ledger (or this
/// process) says the processor is unreachable; the same gauge the worker exports for itself.
pub fn render(e: &mut Exposition) {
    e.gauge(
        "payonce_processor_reachable",
        "1 unless the processes that submit payments recorded the processor as unreachable (the api reads it from the ledger)",
        &[],
        i64::from(down_since().is_none()),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_banner_shows_only_during_an_outage() {
        assert_eq!(banner_for(None).into_string(), "");
        let shown = banner_for(Some(Timestamp::from_millis(0))).into_string();
        assert!(shown.contains("id=\"processor-outage\""), "{shown}");
        assert!(
            shown.contains("The processor is unreachable</strong> (since 1970-01-01 00:00:00 UTC)"),
            "{shown}"
        );
    }

    #[test]
    fn the_ledgers_row_is_trusted_for_its_ttl_only() {
        let read = Instant::now();
        let v = LedgerView {
            read_at: Some(read),
            down_since: None,
        };
        assert!(v.fresh(read));
        assert!(v.fresh(read + LEDGER_READ_TTL - Duration::from_millis(1)));
        assert!(!v.fresh(read + LEDGER_READ_TTL));
        assert!(!LedgerView::default().fresh(read), "never read: read now");
    }
}

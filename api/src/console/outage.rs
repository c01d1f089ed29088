//! The console's processor-outage banner: on every signed-in page while this process's submissions
//! cannot reach the processor (`payonce serve`, or an api sharing a process with a worker).

use super::views::utc;
use maud::{Markup, html};
use payonce_shared::clock::Timestamp;
use payonce_shared::processor::reachability;

/// The banner for this process's view of the processor (nothing while it is reachable).
pub fn banner() -> Markup {
    banner_for(reachability::process().down_since())
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
}

//! How much ready work waits, by class and by tenant: what on-call reads when interactive payments
//! wait (docs/runbook.md, "Interactive payments wait"). The ledger counts it
//! (`Operations::queue_depth`, `ConsoleLedger::overview`); [`crate::metrics`] exports it.

use crate::clock::Timestamp;
use crate::id::TenantId;
use crate::priority::{ALL_PRIORITIES, Priority};
use serde::Serialize;
use std::time::Duration;

/// Most tenants the queue depth names one by one (the most ready rows first); the others are
/// summed under [`QUEUE_TENANTS_OTHER`], so a metric's series stay bounded whatever the tenants.
pub const QUEUE_TENANTS_SHOWN: u32 = 10;
/// The label of the tenants past [`QUEUE_TENANTS_SHOWN`], summed: parentheses are no tenant id's
/// characters, so no tenant can be mistaken for it.
pub const QUEUE_TENANTS_OTHER: &str = "(other)";

/// The ready rows of one class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClassDepth {
    /// Which class.
    pub priority: Priority,
    /// Ready rows, due or not.
    pub ready: i64,
    /// Ready rows due now (`available_at <= now`): claimable.
    pub due: i64,
    /// The earliest `available_at` among the due rows, ms: since when the longest waiter waits.
    #[serde(rename = "oldest_due_ms")]
    pub oldest_due: Option<Timestamp>,
}

impl ClassDepth {
    /// A class with no ready row.
    pub fn empty(priority: Priority) -> ClassDepth {
        ClassDepth {
            priority,
            ready: 0,
            due: 0,
            oldest_due: None,
        }
    }

    /// How long the oldest due row has waited at `now` (zero without one).
    pub fn oldest_wait(&self, now: Timestamp) -> Duration {
        self.oldest_due
            .map_or(Duration::ZERO, |t| now.saturating_sub(t))
    }
}

/// The ready rows of one tenant (or of the tenants folded together) in one class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TenantDepth {
    /// Whose: `None` for the tenants past [`QUEUE_TENANTS_SHOWN`], summed.
    pub tenant: Option<TenantId>,
    /// Which class.
    pub priority: Priority,
    /// Ready rows, due or not.
    pub ready: i64,
    /// Ready rows due now.
    pub due: i64,
}

impl TenantDepth {
    /// The tenant's label value: its id, or [`QUEUE_TENANTS_OTHER`].
    pub fn label(&self) -> &str {
        self.tenant
            .as_ref()
            .map_or(QUEUE_TENANTS_OTHER, TenantId::as_str)
    }
}

/// The ready queue at one instant.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct QueueDepth {
    /// One per class, in claim order (every class, empty ones too).
    pub classes: Vec<ClassDepth>,
    /// The [`QUEUE_TENANTS_SHOWN`] tenants with the most ready rows, per class they have rows in,
    /// then the rest summed (`tenant: None`); by tenant, then class.
    pub tenants: Vec<TenantDepth>,
}

/// One class per priority, in claim order: the rows of `found` (a store's), empty where it has none.
pub fn every_class(found: &[ClassDepth]) -> Vec<ClassDepth> {
    ALL_PRIORITIES
        .into_iter()
        .map(|p| {
            found
                .iter()
                .find(|c| c.priority == p)
                .cloned()
                .unwrap_or_else(|| ClassDepth::empty(p))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_class_is_listed_in_claim_order_and_waits_are_measured_from_the_oldest_due() {
        let bulk = ClassDepth {
            priority: Priority::Bulk,
            ready: 3,
            due: 2,
            oldest_due: Some(Timestamp::from_millis(1_000)),
        };
        let all = every_class(std::slice::from_ref(&bulk));
        assert_eq!(all, vec![ClassDepth::empty(Priority::Interactive), bulk]);
        assert_eq!(
            all[1].oldest_wait(Timestamp::from_millis(61_000)),
            Duration::from_secs(60)
        );
        assert_eq!(
            all[0].oldest_wait(Timestamp::from_millis(61_000)),
            Duration::ZERO
        );
        let other = TenantDepth {
            tenant: None,
            priority: Priority::Bulk,
            ready: 1,
            due: 1,
        };
        assert_eq!(other.label(), "(other)");
        assert!(TenantId::parse(QUEUE_TENANTS_OTHER).is_err());
    }
}

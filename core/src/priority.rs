//! Who waits for an operation, and when it may run: the two things besides age that decide the
//! order workers claim ready work in (docs/decisions/080-fair-claims.md).
//!
//! - [`Priority`]: `interactive` (a customer or an assistant is waiting: approved on the
//!   confirmation page, through a tool call, or created one at a time) is claimed before `bulk` (a
//!   billing run: the batch route, `payonce enqueue`), and bulk keeps [`BULK_SHARE_PERCENT`] of the
//!   claims while interactive work waits, all of them otherwise.
//! - `not_before`: a scheduled payment is never claimed earlier (on the database's clock). Its
//!   limits are [`NOT_BEFORE_PAST_TOLERANCE`] and [`NOT_BEFORE_HORIZON`].

use crate::clock::Timestamp;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The share of claims bulk work keeps while interactive work waits, percent.
pub const BULK_SHARE_PERCENT: u32 = 20;
/// How far in the past a `not_before` may lie and still be taken (as "now"): a clock a little
/// behind the server's is not an error; a date long past is a mistake (a wrong unit, a stale file).
pub const NOT_BEFORE_PAST_TOLERANCE: Duration = Duration::from_secs(10 * 60);
/// How far ahead a `not_before` may lie: a year and a day, so a yearly renewal can be enqueued at
/// the previous one.
pub const NOT_BEFORE_HORIZON: Duration = Duration::from_secs(366 * 24 * 3600);
/// A tenant's default share of the claims within a class (`payonce tenant set-share`).
pub const SHARE_DEFAULT: u32 = 100;
/// Smallest share a tenant may be given.
pub const SHARE_MIN: u32 = 1;
/// Largest share a tenant may be given: a thousandfold the smallest, so no tenant starves another
/// for more than a thousand claims in a row.
pub const SHARE_MAX: u32 = 1_000;

/// Largest cap of a tenant's submissions a second (the fleet limiter's largest rate).
pub const CAP_PER_SECOND_MAX: u32 = 100_000;

/// Who waits for an operation; lower claims first.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default,
)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    /// A customer or an assistant is waiting.
    #[default]
    Interactive,
    /// A billing run: nobody waits for one payment of it.
    Bulk,
}

/// Every priority, claimed in this order.
pub const ALL_PRIORITIES: [Priority; 2] = [Priority::Interactive, Priority::Bulk];

impl Priority {
    /// The name callers write and the API shows.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Interactive => "interactive",
            Priority::Bulk => "bulk",
        }
    }

    /// The priority a name names; `None` for any other string.
    pub fn parse(name: &str) -> Option<Priority> {
        ALL_PRIORITIES.into_iter().find(|p| p.as_str() == name)
    }

    /// The stored number (`operations.priority`): lower claims first.
    pub fn stored(self) -> i64 {
        match self {
            Priority::Interactive => 0,
            Priority::Bulk => 1,
        }
    }

    /// The priority a stored number names.
    pub fn from_stored(n: i64) -> Option<Priority> {
        ALL_PRIORITIES.into_iter().find(|p| p.stored() == n)
    }
}

impl std::fmt::Display for Priority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a `not_before` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotBeforeError {
    /// Further in the past than [`NOT_BEFORE_PAST_TOLERANCE`].
    #[error("not_before lies {0} s in the past; at most {tol} s are taken as now", tol = NOT_BEFORE_PAST_TOLERANCE.as_secs())]
    Past(i64),
    /// Further ahead than [`NOT_BEFORE_HORIZON`].
    #[error("not_before lies more than {days} days ahead", days = NOT_BEFORE_HORIZON.as_secs() / 86_400)]
    Beyond,
}

/// Checks a requested `not_before` (ms) against `now` (ms): within the past tolerance and the
/// horizon. Returns the time to store: `None` when it is not later than now (nothing to wait for).
pub fn check_not_before(
    not_before: Timestamp,
    now: Timestamp,
) -> Result<Option<Timestamp>, NotBeforeError> {
    if not_before < now.saturating_sub_span(NOT_BEFORE_PAST_TOLERANCE) {
        return Err(NotBeforeError::Past(
            (now.as_millis() - not_before.as_millis()) / 1_000,
        ));
    }
    if not_before > now + NOT_BEFORE_HORIZON {
        return Err(NotBeforeError::Beyond);
    }
    Ok((not_before > now).then_some(not_before))
}

/// When an approval given at `now` for an operation scheduled at `not_before` stops being valid:
/// `approval_ttl` after the later of the two, so an approval never expires before the payment may
/// run (a billing run approved today for the 1st of next month keeps a whole TTL from the 1st).
pub fn approval_expires_at(
    now: Timestamp,
    not_before: Option<Timestamp>,
    approval_ttl: Duration,
) -> Timestamp {
    not_before.map_or(now, |at| at.max(now)) + approval_ttl
}

/// Checks a tenant's share: within [`SHARE_MIN`]..=[`SHARE_MAX`].
pub fn check_share(share: u32) -> Result<u32, String> {
    if (SHARE_MIN..=SHARE_MAX).contains(&share) {
        Ok(share)
    } else {
        Err(format!(
            "share must be between {SHARE_MIN} and {SHARE_MAX} (the default is {SHARE_DEFAULT}); got {share}"
        ))
    }
}

/// Checks a tenant's cap: within 1..=[`CAP_PER_SECOND_MAX`] submissions a second.
pub fn check_cap(per_second: u32) -> Result<u32, String> {
    if (1..=CAP_PER_SECOND_MAX).contains(&per_second) {
        Ok(per_second)
    } else {
        Err(format!(
            "a cap must be between 1 and {CAP_PER_SECOND_MAX} submissions a second; got {per_second}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_stored_numbers_round_trip() {
        for p in ALL_PRIORITIES {
            assert_eq!(Priority::parse(p.as_str()), Some(p));
            assert_eq!(Priority::from_stored(p.stored()), Some(p));
        }
        assert_eq!(Priority::parse("urgent"), None);
        assert_eq!(Priority::from_stored(2), None);
        assert!(Priority::Interactive.stored() < Priority::Bulk.stored());
    }

    #[test]
    fn not_before_is_bounded_on_both_sides() {
        let t = Timestamp::from_millis;
        let now = 1_800_000_000_000;
        let tol = NOT_BEFORE_PAST_TOLERANCE.as_millis() as i64;
        let horizon = NOT_BEFORE_HORIZON.as_millis() as i64;
        assert_eq!(check_not_before(t(now - tol), t(now)), Ok(None));
        assert_eq!(check_not_before(t(now), t(now)), Ok(None));
        assert_eq!(check_not_before(t(now + 1), t(now)), Ok(Some(t(now + 1))));
        assert_eq!(
            check_not_before(t(now + horizon), t(now)),
            Ok(Some(t(now + horizon)))
        );
        assert_eq!(
            check_not_before(t(now - tol - 1_000), t(now)),
            Err(NotBeforeError::Past(601))
        );
        assert_eq!(
            check_not_before(t(now + horizon + 1), t(now)),
            Err(NotBeforeError::Beyond)
        );
    }

    #[test]
    fn an_approval_lasts_its_ttl_from_when_the_payment_may_run() {
        let t = Timestamp::from_millis;
        let ttl = Duration::from_secs(60);
        assert_eq!(approval_expires_at(t(1_000), None, ttl), t(61_000));
        assert_eq!(approval_expires_at(t(1_000), Some(t(500)), ttl), t(61_000));
        assert_eq!(
            approval_expires_at(t(1_000), Some(t(9_000)), ttl),
            t(69_000)
        );
    }

    #[test]
    fn shares_are_bounded() {
        assert_eq!(check_share(SHARE_MIN), Ok(SHARE_MIN));
        assert_eq!(check_share(SHARE_MAX), Ok(SHARE_MAX));
        assert!(check_share(0).unwrap_err().contains("between 1 and 1000"));
        assert!(check_share(SHARE_MAX + 1).is_err());
        assert_eq!(check_cap(1), Ok(1));
        assert_eq!(check_cap(CAP_PER_SECOND_MAX), Ok(CAP_PER_SECOND_MAX));
        assert!(check_cap(0).unwrap_err().contains("between 1 and 100000"));
        assert!(check_cap(CAP_PER_SECOND_MAX + 1).is_err());
    }
}

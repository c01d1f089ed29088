//! Fault rules armed through the admin API, and the seeded decision of which request gets which fault.
//!
//! A rule matches a request whose `Idempotency-Key` contains `match` (or every request for `*`). The first
//! matching rule with `times` left and a successful `per_mille` roll applies; the roll uses the simulator's
//! seeded generator, so the same seed and the same request order give the same faults.

use crate::limits::FAULT_RULES_MAX;
use crate::rng::SeededRng;
use serde::{Deserialize, Serialize};
use std::sync::Mutex;

/// What goes wrong with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// Execute and commit, then abort the connection without a response.
    DropAfterCommit,
    /// Never answer (until the client gives up or the simulator shuts down); the key stays in flight meanwhile.
    Hang,
    /// Answer 500 before executing; nothing is committed or remembered under the key.
    #[serde(rename = "error_500_before_commit")]
    Error500BeforeCommit,
    /// Execute and commit, then answer 500; the 500 is what the key replays (as Stripe does).
    #[serde(rename = "error_500_after_commit")]
    Error500AfterCommit,
    /// Abort the connection before doing anything.
    Reset,
    /// Answer 429 `rate_limit` before doing anything.
    #[serde(rename = "rate_limit_429")]
    RateLimit429,
}

/// One armed rule, as posted to `POST /_sim/faults`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FaultRule {
    /// Substring of the Idempotency-Key, or `*` for every request.
    #[serde(rename = "match")]
    pub(crate) matcher: String,
    /// The fault.
    pub(crate) fault: FaultKind,
    /// How many requests it still applies to; unlimited when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) times: Option<u32>,
    /// Probability out of 1000 that a matching request gets it; always when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) per_mille: Option<u32>,
}

impl FaultRule {
    fn matches(&self, key: Option<&str>) -> bool {
        if self.matcher == "*" {
            return true;
        }
        key.is_some_and(|k| k.contains(self.matcher.as_str()))
    }
}

/// Why rules were refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FaultRuleError {
    /// More than [`FAULT_RULES_MAX`] rules.
    #[error("at most {FAULT_RULES_MAX} fault rules may be armed")]
    TooMany,
    /// A probability above 1000.
    #[error("per_mille must be at most 1000")]
    PerMille,
    /// An empty matcher.
    #[error("match must not be empty (use \"*\" for every request)")]
    EmptyMatch,
}

#[derive(Debug)]
struct FaultState {
    rules: Vec<FaultRule>,
    rng: SeededRng,
}

/// The armed rules and the seeded generator that rolls `per_mille`.
#[derive(Debug)]
pub(crate) struct Faults {
    state: Mutex<FaultState>,
}

impl Faults {
    /// No rules; rolls seeded with `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Faults {
            state: Mutex::new(FaultState {
                rules: Vec::new(),
                rng: SeededRng::new(seed ^ 0xFA17_FA17),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FaultState> {
        match self.state.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Appends rules.
    pub(crate) fn arm(&self, rules: Vec<FaultRule>) -> Result<(), FaultRuleError> {
        for r in &rules {
            if r.per_mille.is_some_and(|p| p > 1000) {
                return Err(FaultRuleError::PerMille);
            }
            if r.matcher.is_empty() {
                return Err(FaultRuleError::EmptyMatch);
            }
        }
        let mut state = self.lock();
        if state.rules.len() + rules.len() > FAULT_RULES_MAX {
            return Err(FaultRuleError::TooMany);
        }
        state.rules.extend(rules);
        Ok(())
    }

    /// Removes every rule.
    pub(crate) fn clear(&self) {
        self.lock().rules.clear();
    }

    /// The armed rules with what is left of their `times`.
    pub(crate) fn rules(&self) -> Vec<FaultRule> {
        self.lock().rules.clone()
    }

    /// Decides the fault for one request, consuming one of the rule's `times`.
    pub(crate) fn decide(&self, key: Option<&str>) -> Option<FaultKind> {
        let mut state = self.lock();
        let FaultState { rules, rng } = &mut *state;
        for rule in rules.iter_mut() {
            if !rule.matches(key) || rule.times == Some(0) {
                continue;
            }
            if let Some(p) = rule.per_mille
                && !rng.per_mille(p)
            {
                continue;
            }
            if let Some(t) = rule.times.as_mut() {
                *t -= 1;
            }
            return Some(rule.fault);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(
        matcher: &str,
        fault: FaultKind,
        times: Option<u32>,
        per_mille: Option<u32>,
    ) -> FaultRule {
        FaultRule {
            matcher: matcher.into(),
            fault,
            times,
            per_mille,
        }
    }

    #[test]
    fn times_are_consumed_and_matching_is_by_substring() {
        let f = Faults::new(1);
        f.arm(vec![rule("op_a", FaultKind::Reset, Some(1), None)])
            .unwrap();
        assert_eq!(f.decide(Some("k-op_b")), None);
        assert_eq!(f.decide(None), None);
        assert_eq!(f.decide(Some("k-op_a")), Some(FaultKind::Reset));
        assert_eq!(f.decide(Some("k-op_a")), None);
    }

    #[test]
    fn per_mille_is_deterministic_for_a_seed() {
        let run = |seed| {
            let f = Faults::new(seed);
            f.arm(vec![rule("*", FaultKind::Hang, None, Some(500))])
                .unwrap();
            (0..64)
                .map(|_| f.decide(None).is_some())
                .collect::<Vec<_>>()
        };
        assert_eq!(run(42), run(42));
        let hits = run(42).iter().filter(|h| **h).count();
        assert!(hits > 10 && hits < 54, "about half: {hits}");
    }

    #[test]
    fn names_are_the_documented_ones() {
        let names: Vec<String> = [
            FaultKind::DropAfterCommit,
            FaultKind::Hang,
            FaultKind::Error500BeforeCommit,
            FaultKind::Error500AfterCommit,
            FaultKind::Reset,
            FaultKind::RateLimit429,
        ]
        .iter()
        .map(|k| serde_json::to_string(k).unwrap())
        .collect();
        assert_eq!(
            names,
            [
                "\"drop_after_commit\"",
                "\"hang\"",
                "\"error_500_before_commit\"",
                "\"error_500_after_commit\"",
                "\"reset\"",
                "\"rate_limit_429\""
            ]
        );
    }
}

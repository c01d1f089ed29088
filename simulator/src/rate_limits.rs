//! Stripe's request limiters: per second, per account, checked after authentication and before the
//! idempotency layer, so a refused request is never remembered under its key.
//!
//! Scopes, every one a token bucket holding one second of requests: the account's global limit (every
//! `/v1` request), its read (GET) and write (POST) limits, each endpoint's own limit (Stripe: 25/s unless
//! stated; an endpoint is a method plus a route, so every PaymentIntent id shares one), and the stricter
//! search limit. A request must fit every scope that applies; tokens are taken only when all fit, so a
//! refusal costs nothing. The simulator has one account (one secret key), so "per account" is the
//! simulator's own limits.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// Stripe's global limit in live mode, requests per second.
pub const STRIPE_LIVE_GLOBAL_PER_SECOND: u32 = 100;
/// Stripe's global limit in a sandbox, requests per second.
pub const STRIPE_SANDBOX_GLOBAL_PER_SECOND: u32 = 25;
/// Stripe's per-endpoint limit unless an endpoint says otherwise, requests per second.
pub const STRIPE_ENDPOINT_PER_SECOND: u32 = 25;
/// Stripe's search limit, reads per second.
pub const STRIPE_SEARCH_PER_SECOND: u32 = 20;
/// Most per-endpoint overrides.
pub(crate) const ENDPOINT_OVERRIDES_MAX: usize = 32;
/// Largest configurable limit, requests per second.
pub(crate) const LIMIT_PER_SECOND_MAX: u32 = 1_000_000;

/// The limits of the account, requests per second; `None` means unlimited.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimits {
    /// Every API request of the account.
    #[serde(default)]
    pub global_per_second: Option<u32>,
    /// Read (GET) requests.
    #[serde(default)]
    pub read_per_second: Option<u32>,
    /// Write (POST) requests.
    #[serde(default)]
    pub write_per_second: Option<u32>,
    /// Each endpoint on its own, unless `endpoints` names it.
    #[serde(default)]
    pub endpoint_per_second: Option<u32>,
    /// `GET /v1/payment_intents/search`, on top of every other scope.
    #[serde(default)]
    pub search_per_second: Option<u32>,
    /// Per-endpoint overrides, keyed like `"POST /v1/payment_intents"` or `"GET /v1/payment_intents/:id"`.
    #[serde(default)]
    pub endpoints: BTreeMap<String, u32>,
}

impl RateLimits {
    /// Stripe's published sandbox limits: 25/s global, 25/s per endpoint, 20/s search.
    pub fn stripe_sandbox() -> Self {
        RateLimits {
            global_per_second: Some(STRIPE_SANDBOX_GLOBAL_PER_SECOND),
            endpoint_per_second: Some(STRIPE_ENDPOINT_PER_SECOND),
            search_per_second: Some(STRIPE_SEARCH_PER_SECOND),
            ..RateLimits::default()
        }
    }

    /// Refuses zero limits (use `None` for unlimited), absurd ones and too many overrides.
    pub fn validate(&self) -> Result<(), String> {
        if self.endpoints.len() > ENDPOINT_OVERRIDES_MAX {
            return Err(format!(
                "at most {ENDPOINT_OVERRIDES_MAX} endpoint overrides"
            ));
        }
        let all = [
            self.global_per_second,
            self.read_per_second,
            self.write_per_second,
            self.endpoint_per_second,
            self.search_per_second,
        ]
        .into_iter()
        .flatten()
        .chain(self.endpoints.values().copied());
        for v in all {
            if v == 0 || v > LIMIT_PER_SECOND_MAX {
                return Err(format!(
                    "limits must be between 1 and {LIMIT_PER_SECOND_MAX} requests per second (omit for unlimited)"
                ));
            }
        }
        Ok(())
    }
}

/// The endpoint a request path belongs to: method plus route, ids replaced by `:id`.
pub(crate) fn endpoint_of(method: &str, path: &str) -> String {
    let route = match path.strip_prefix("/v1/payment_intents/") {
        Some("search") => "/v1/payment_intents/search",
        Some(_) => "/v1/payment_intents/:id",
        None if path.starts_with("/v1/refunds/") => "/v1/refunds/:id",
        None => path,
    };
    format!("{method} {route}")
}

#[derive(Debug)]
struct Bucket {
    tokens_milli: u64,
    updated_ms: i64,
}

#[derive(Debug, Default)]
struct State {
    limits: RateLimits,
    buckets: HashMap<String, Bucket>,
    refused: BTreeMap<String, u64>,
    checked: BTreeMap<String, u64>,
}

/// The account's buckets and the count of refusals per endpoint.
#[derive(Debug, Default)]
pub(crate) struct Limiter {
    state: Mutex<State>,
}

impl Limiter {
    /// A limiter enforcing `limits`.
    pub(crate) fn new(limits: RateLimits) -> Self {
        Limiter {
            state: Mutex::new(State {
                limits,
                ..State::default()
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Replaces the limits; buckets start full again.
    pub(crate) fn set(&self, limits: RateLimits) {
        let mut s = self.lock();
        s.limits = limits;
        s.buckets.clear();
    }

    /// The limits in force.
    pub(crate) fn limits(&self) -> RateLimits {
        self.lock().limits.clone()
    }

    /// Refusals so far, per endpoint.
    pub(crate) fn refused(&self) -> BTreeMap<String, u64> {
        self.lock().refused.clone()
    }

    /// Requests checked so far (admitted or refused), per endpoint.
    pub(crate) fn checked(&self) -> BTreeMap<String, u64> {
        self.lock().checked.clone()
    }

    /// Takes one token from every scope of the request at `now_ms`, or none and counts a refusal.
    pub(crate) fn admit(&self, method: &str, path: &str, now_ms: i64) -> bool {
        let endpoint = endpoint_of(method, path);
        let mut s = self.lock();
        *s.checked.entry(endpoint.clone()).or_default() += 1;
        let l = &s.limits;
        let per_endpoint = l
            .endpoints
            .get(&endpoint)
            .copied()
            .or(l.endpoint_per_second);
        let class = if method == "GET" {
            ("account:read", l.read_per_second)
        } else {
            ("account:write", l.write_per_second)
        };
        let search = endpoint.ends_with("/search").then_some(l.search_per_second);
        let scopes: Vec<(String, u32)> = [
            ("account".to_string(), l.global_per_second),
            (class.0.to_string(), class.1),
            (format!("endpoint:{endpoint}"), per_endpoint),
            ("search".to_string(), search.flatten()),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .collect();
        // Refill every scope first, then take from all or none.
        let mut fits = true;
        for (scope, rate) in &scopes {
            let capacity_milli = u64::from(*rate) * 1000;
            let b = s.buckets.entry(scope.clone()).or_insert(Bucket {
                tokens_milli: capacity_milli,
                updated_ms: now_ms,
            });
            let elapsed_ms = u64::try_from(now_ms - b.updated_ms).unwrap_or(0);
            // rate tokens per 1000 ms = rate milli-tokens per ms.
            b.tokens_milli = (b.tokens_milli + elapsed_ms * u64::from(*rate)).min(capacity_milli);
            b.updated_ms = b.updated_ms.max(now_ms);
            fits &= b.tokens_milli >= 1000;
        }
        if fits {
            for (scope, _) in &scopes {
                if let Some(b) = s.buckets.get_mut(scope) {
                    b.tokens_milli -= 1000;
                }
            }
        } else {
            *s.refused.entry(endpoint).or_default() += 1;
        }
        fits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_group_ids_and_keep_search_apart() {
        assert_eq!(
            endpoint_of("GET", "/v1/payment_intents/pi_1"),
            "GET /v1/payment_intents/:id"
        );
        assert_eq!(
            endpoint_of("GET", "/v1/payment_intents/search"),
            "GET /v1/payment_intents/search"
        );
        assert_eq!(
            endpoint_of("POST", "/v1/payment_intents"),
            "POST /v1/payment_intents"
        );
        assert_eq!(
            endpoint_of("GET", "/v1/refunds/re_1"),
            "GET /v1/refunds/:id"
        );
    }

    #[test]
    fn a_scope_refuses_beyond_one_second_of_tokens_and_refills_at_its_rate() {
        let l = Limiter::new(RateLimits {
            write_per_second: Some(3),
            ..RateLimits::default()
        });
        let t = 1_000_000;
        assert!((0..3).all(|_| l.admit("POST", "/v1/payment_intents", t)));
        assert!(!l.admit("POST", "/v1/payment_intents", t));
        // Reads are another scope.
        assert!(l.admit("GET", "/v1/payment_intents/pi_1", t));
        // One token back after a third of a second.
        assert!(!l.admit("POST", "/v1/payment_intents", t + 332));
        assert!(l.admit("POST", "/v1/payment_intents", t + 334));
        assert_eq!(l.refused().get("POST /v1/payment_intents"), Some(&2));
    }

    #[test]
    fn a_refusal_takes_nothing_from_the_other_scopes() {
        let l = Limiter::new(RateLimits {
            global_per_second: Some(2),
            search_per_second: Some(1),
            ..RateLimits::default()
        });
        let t = 5_000;
        assert!(l.admit("GET", "/v1/payment_intents/search", t));
        assert!(!l.admit("GET", "/v1/payment_intents/search", t));
        // The refused search did not spend the global token.
        assert!(l.admit("GET", "/v1/payment_intents/pi_1", t));
        assert!(!l.admit("GET", "/v1/payment_intents/pi_1", t));
    }

    #[test]
    fn overrides_and_bounds_are_checked() {
        let mut limits = RateLimits {
            endpoint_per_second: Some(25),
            ..RateLimits::default()
        };
        limits.endpoints.insert("GET /v1/events".into(), 1);
        assert!(limits.validate().is_ok());
        let l = Limiter::new(limits);
        assert!(l.admit("GET", "/v1/events", 0));
        assert!(!l.admit("GET", "/v1/events", 0));
        let zero = RateLimits {
            global_per_second: Some(0),
            ..RateLimits::default()
        };
        assert!(zero.validate().is_err());
        let mut many = RateLimits::default();
        for i in 0..=ENDPOINT_OVERRIDES_MAX {
            many.endpoints.insert(format!("GET /v1/x{i}"), 1);
        }
        assert!(many.validate().is_err());
        assert_eq!(RateLimits::stripe_sandbox().global_per_second, Some(25));
    }
}

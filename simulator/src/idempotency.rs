//! `Idempotency-Key` handling, Stripe's way:
//! - a key's first request that begins executing has its response (success or error) remembered, and the
//!   same key with the same parameters replays it byte for byte with `Idempotent-Replayed: true`;
//! - the same key with different parameters is refused with `idempotency_error`;
//! - while the key's first request is in flight, another request with it gets 409 `idempotency_key_in_use`;
//! - requests refused before execution (validation, 429, 500 before commit) are not remembered;
//! - keys are forgotten after the configured retention; the same key then executes again.
//!
//! Two of the [`Contract`]s change this: `replay-any-payload` replays the first answer to the same
//! key with different parameters too, and `only-2xx-saved` saves only 2xx answers (the callers ask
//! [`Contract::saves`] before writing the key's record), so an executed request that answered 4xx
//! or 5xx executes again when retried.
//!
//! In-flight claims live in memory: they last as long as the request that holds them (the claim is released
//! when the request's work is committed, or when the client hangs up on a request that never executed).

use crate::contract::Contract;
use crate::form::Pairs;
use crate::store::{KeyRecord, SavedResponse, Store};
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// Keys whose first request is executing.
#[derive(Debug, Default, Clone)]
pub(crate) struct InFlight {
    keys: Arc<Mutex<HashSet<String>>>,
}

fn lock(keys: &Mutex<HashSet<String>>) -> std::sync::MutexGuard<'_, HashSet<String>> {
    match keys.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl InFlight {
    /// Claims `key`; `None` if another request holds it.
    pub(crate) fn claim(&self, key: &str) -> Option<Claim> {
        if !lock(&self.keys).insert(key.to_string()) {
            return None;
        }
        Some(Claim {
            keys: self.keys.clone(),
            key: key.to_string(),
        })
    }

    /// How many keys are in flight (for health and tests).
    pub(crate) fn len(&self) -> usize {
        lock(&self.keys).len()
    }
}

/// A held claim on a key; released on drop.
#[derive(Debug)]
pub(crate) struct Claim {
    keys: Arc<Mutex<HashSet<String>>>,
    key: String,
}

impl Drop for Claim {
    fn drop(&mut self) {
        lock(&self.keys).remove(&self.key);
    }
}

/// A fresh key held by the request that executes under it: the claim (released on drop, so it is
/// held until the request's work commits) and what the key's record will name.
#[derive(Debug)]
pub(crate) struct Held {
    claim: Claim,
    fingerprint: String,
}

impl Held {
    /// Holds `claim` for a request whose parameters have `fingerprint`.
    pub(crate) fn new(claim: Claim, fingerprint: String) -> Self {
        Held { claim, fingerprint }
    }

    /// What to remember under the key: this answer, saved at `created_ms`.
    pub(crate) fn record(&self, status: u16, body: &[u8], created_ms: i64) -> KeyRecord {
        KeyRecord {
            key: self.claim.key.clone(),
            fingerprint: self.fingerprint.clone(),
            status,
            body: body.to_vec(),
            created_ms,
        }
    }
}

/// What a request's key says it should do.
#[derive(Debug)]
pub(crate) enum KeyState {
    /// First use (or the earlier use was forgotten): execute, holding the claim until committed.
    Fresh(Claim),
    /// Replay this response.
    Replay(SavedResponse),
    /// The key was first used with different parameters.
    Mismatch,
    /// The key's first request is still executing.
    InUse,
}

/// The identity of a request's parameters: method, path and the parameters in canonical (sorted) order.
pub(crate) fn fingerprint(method: &str, path: &str, pairs: &Pairs) -> String {
    let mut sorted: Vec<&(String, String)> = pairs.iter().collect();
    sorted.sort();
    let mut h = Sha256::new();
    for part in [method, path] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    for (k, v) in sorted {
        h.update((k.len() as u64).to_be_bytes());
        h.update(k.as_bytes());
        h.update((v.len() as u64).to_be_bytes());
        h.update(v.as_bytes());
    }
    hex::encode(h.finalize())
}

/// Claims the key, then consults what is remembered under it. Claim first: checking the store first would let
/// a request that finished between the check and the claim execute twice.
pub(crate) async fn begin(
    in_flight: &InFlight,
    store: &Store,
    contract: Contract,
    key: &str,
    fingerprint: &str,
    not_before_ms: i64,
) -> Result<KeyState, sqlx::Error> {
    let Some(claim) = in_flight.claim(key) else {
        return Ok(KeyState::InUse);
    };
    // The store runs the lookup in its own task: a client hanging up (a worker's timeout) cannot cancel
    // the query half way (sqlx would then close the simulator's one connection).
    let saved = store.saved_response(key, not_before_ms).await?;
    match saved {
        Some(saved) if saved.fingerprint == fingerprint => Ok(KeyState::Replay(saved)),
        // Worldline's way: the first outcome, whatever this request asks.
        Some(saved) if contract.replays_any_payload() => Ok(KeyState::Replay(saved)),
        Some(_) => Ok(KeyState::Mismatch),
        None => Ok(KeyState::Fresh(claim)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_ignores_order_but_not_values() {
        let a: Pairs = vec![
            ("amount".into(), "1".into()),
            ("currency".into(), "usd".into()),
        ];
        let b: Pairs = vec![
            ("currency".into(), "usd".into()),
            ("amount".into(), "1".into()),
        ];
        let c: Pairs = vec![
            ("currency".into(), "usd".into()),
            ("amount".into(), "2".into()),
        ];
        assert_eq!(
            fingerprint("POST", "/v1/x", &a),
            fingerprint("POST", "/v1/x", &b)
        );
        assert_ne!(
            fingerprint("POST", "/v1/x", &a),
            fingerprint("POST", "/v1/x", &c)
        );
        assert_ne!(
            fingerprint("POST", "/v1/x", &a),
            fingerprint("POST", "/v1/y", &a)
        );
    }

    #[test]
    fn claims_are_exclusive_and_released_on_drop() {
        let f = InFlight::default();
        let c = f.claim("k").unwrap();
        assert!(f.claim("k").is_none());
        assert_eq!(f.len(), 1);
        drop(c);
        assert!(f.claim("k").is_some());
    }
}

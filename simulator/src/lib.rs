//! payonce-simulator: a Stripe-compatible payment processor on loopback, with real idempotency semantics,
//! durable state in SQLite, signed webhooks and seeded, deterministic fault injection.
//!
//! Crate map:
//! - [`config`]: what a simulator is started with ([`SimulatorConfig`]).
//! - [`contract`]: the processor contract it runs (`stripe`, or another processor's documented
//!   behaviour on Stripe's wire).
//! - `limits`: every bound the simulator enforces, with its name.
//! - `server`: the running simulator ([`Simulator`], [`run`]) and its background tasks.
//! - `connection`: the accept loop wrapper that lets a handler abort its own TCP connection.
//! - `app`: the state every handler reaches.
//! - `context`: one `/v1` request's context (authentication, faults, headers) and response shape.
//! - `routes`: the HTTP surface (Stripe API under `/v1`, admin under `/_sim`).
//! - `creation`: the create path every Stripe `POST` shares (key claim, replay, faults, saved answer).
//! - `lookup`: what every `GET` shares (read faults, detached store reads, the one-object retrieve).
//! - `payment_intents`, `refunds` (create), `refund_reads` (retrieve, list), `events`,
//!   `payment_methods`: the Stripe resources.
//! - `settlement`: settling `processing` payments and asynchronous refunds whose time has come.
//! - `admin`: fault rules, audits and health for tests.
//! - [`payment_audit`]: reading every page of the payment audit, for callers outside the simulator.
//! - `audit`: the recent requests and the parameter names each sent.
//! - `cards`: the test payment methods and the outcome each one decides.
//! - `form`: form-encoded parameter parsing and validation, Stripe's way.
//! - `adyen`: Adyen Checkout v71 payments and refunds, and HMAC-signed standard notifications (`--adyen`).
//! - `idempotency`: `Idempotency-Key` handling: fingerprints, in-flight claims, replays.
//! - `rate_limits`: Stripe's request limiters (global, read/write, per endpoint, search) and 429 counts.
//! - `faults`: fault rules and the seeded decision of which request gets which fault.
//! - `store`: the SQLite store; every statement in one place.
//! - `objects`: rendering of PaymentIntent, Refund and Event JSON.
//! - `webhooks`: signing and at-least-once delivery with duplicates, reordering and delay.
//! - `search`: the search query language subset (`metadata['k']:'v'`).
//! - `error`: Stripe's error shape and the simulator's start-up errors.
//! - `rng`: the seeded generator behind every random decision, and id generation.
//!
//! Test payment methods (`payment_method=` on create, with `confirm=true`):
//! `pm_card_visa`, `pm_card_mastercard` succeed; `pm_card_chargeDeclined` is declined (`card_declined`,
//! `generic_decline`); `pm_card_chargeDeclinedInsufficientFunds` is declined (`insufficient_funds`);
//! `pm_card_authenticationRequired` fails with `authentication_required` when `off_session=true` and
//! otherwise stops at `requires_action`; `pm_card_processing` (simulator-specific) stays `processing` for
//! `processing_settle`, then succeeds and emits `payment_intent.succeeded`.
//!
//! Refunds of a payment made with Stripe's `pm_card_pendingRefund` start `pending` and succeed
//! `refund_settle` later; with `pm_card_refundFail` they start `succeeded` and fail later
//! (`failure_reason: expired_or_canceled_card`, the amount becomes refundable again); with the
//! simulator's own `pm_card_pendingRefundFail` they start `pending` and fail later. Every other payment
//! method refunds at once.

// Errors here are rendered once per request into a response; boxing them would buy nothing measurable.
#![allow(clippy::result_large_err)]

pub mod config;
pub mod contract;
pub mod payment_audit;

mod admin;
mod adyen;
mod app;
mod audit;
mod cards;
mod connection;
mod context;
mod creation;
mod error;
mod events;
mod expand;
mod faults;
mod form;
mod idempotency;
mod limits;
mod lookup;
mod objects;
mod payment_intents;
mod payment_methods;
mod rate_limits;
mod refund_reads;
mod refunds;
mod rng;
mod routes;
mod search;
mod server;
mod settlement;
mod store;
mod webhooks;

pub use config::{AdyenSimConfig, SimulatorConfig, Wire};
pub use connection::HTTP2_MAX_STREAMS;
pub use contract::{CONTRACTS, Contract};
pub use error::SimulatorError;
pub use faults::FaultKind;
pub use rate_limits::{
    RateLimits, STRIPE_ENDPOINT_PER_SECOND, STRIPE_LIVE_GLOBAL_PER_SECOND,
    STRIPE_SANDBOX_GLOBAL_PER_SECOND, STRIPE_SEARCH_PER_SECOND,
};
pub use server::{Simulator, install_crypto_provider, run};
pub use webhooks::{sign_payload, signature_header};

/// Fuzzing entry point (fuzz/ and the integration tests' corpus replay): decodes `raw` as a form body
/// the way the API does, then as PaymentIntent and refund parameters. True if either decoding
/// accepted it. Must never panic, whatever the bytes.
#[doc(hidden)]
pub fn decode_form_for_fuzzing(raw: &[u8]) -> bool {
    let Ok(pairs) = form::parse_pairs(raw) else {
        return false;
    };
    let _ = form::keys(&pairs);
    let intent = form::payment_intent_params(&pairs).is_ok();
    let refund = form::refund_params(&pairs).is_ok();
    let lookup = pairs.iter().any(|(k, v)| match k.as_str() {
        "limit" => form::limit(Some(v)).is_ok(),
        "created" => form::timestamp(k, v).is_ok(),
        _ => false,
    });
    intent || refund || lookup
}

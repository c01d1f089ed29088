//! What a simulator is started with.

use crate::contract::Contract;
pub use crate::contract::{ADYEN_KEY_RETENTION_DEFAULT, Wire};
use crate::rate_limits::RateLimits;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

/// Default idempotency-key retention: Stripe's 24 hours.
pub const KEY_RETENTION_DEFAULT: Duration = Duration::from_secs(24 * 60 * 60);
/// Default time a `pm_card_processing` payment stays `processing`.
pub const PROCESSING_SETTLE_DEFAULT: Duration = Duration::from_secs(2);
/// Default time an asynchronous refund (`pm_card_pendingRefund`, `pm_card_refundFail`) waits before
/// its final status.
pub const REFUND_SETTLE_DEFAULT: Duration = Duration::from_secs(2);
/// Default accepted secret key.
pub const API_KEY_DEFAULT: &str = "sk_test_payonce";
/// Default webhook signing secret.
pub const WEBHOOK_SECRET_DEFAULT: &str = "whsec_payonce_simulator";
/// Default accepted Adyen API key (`X-API-Key`).
pub const ADYEN_API_KEY_DEFAULT: &str = "adyen_test_payonce";
/// Default Adyen merchant account.
pub const ADYEN_MERCHANT_ACCOUNT_DEFAULT: &str = "PayonceECOM";
/// Default Adyen HMAC key (hex, 32 bytes) notifications are signed with.
pub const ADYEN_HMAC_KEY_DEFAULT: &str =
    "7061796f6e63655f73696d756c61746f725f616479656e5f686d61635f6b3031";

/// What the simulator needs to speak Adyen's wire.
#[derive(Clone)]
pub struct AdyenSimConfig {
    /// The accepted `X-API-Key`.
    pub api_key: String,
    /// The one merchant account requests must name; notifications name it.
    pub merchant_account: String,
    /// The HMAC key notifications are signed with, hex.
    pub hmac_key_hex: String,
}

impl Default for AdyenSimConfig {
    fn default() -> Self {
        AdyenSimConfig {
            api_key: ADYEN_API_KEY_DEFAULT.to_string(),
            merchant_account: ADYEN_MERCHANT_ACCOUNT_DEFAULT.to_string(),
            hmac_key_hex: ADYEN_HMAC_KEY_DEFAULT.to_string(),
        }
    }
}

/// Configuration of one simulator instance.
#[derive(Clone)]
pub struct SimulatorConfig {
    /// Address to listen on; `127.0.0.1:0` picks a free port.
    pub listen: SocketAddr,
    /// `sqlite::memory:` or a file path (or a `sqlite:` URL).
    pub database: String,
    /// The processor contract the simulator runs (Stripe's by default).
    pub contract: Contract,
    /// How long an idempotency key is remembered; afterwards the same key creates a new payment.
    pub key_retention: Duration,
    /// How long after creation a payment becomes visible to search (Stripe's search lags).
    pub search_lag: Duration,
    /// Where events are POSTed, if anywhere.
    pub webhook_url: Option<String>,
    /// The `whsec_...` secret webhooks are signed with.
    pub webhook_secret: String,
    /// Probability, out of 1000, that a delivered webhook is delivered a second time (seeded).
    pub webhook_duplicates_per_mille: u32,
    /// Hold deliveries and send them newest first.
    pub webhook_reorder: bool,
    /// Delay before an event's first delivery attempt.
    pub webhook_delay: Duration,
    /// How long a `pm_card_processing` payment stays `processing` before it succeeds.
    pub processing_settle: Duration,
    /// How long an asynchronous refund keeps its first status before it takes its final one.
    pub refund_settle: Duration,
    /// Seed of every probabilistic decision (faults, duplicate webhooks).
    pub seed: u64,
    /// The accepted bearer secret key.
    pub api_key: String,
    /// Time from a `/v1` request's arrival to its answer (handled on arrival, the answer held for the
    /// rest): a processor's own latency, for benchmarks that must be bound by in-flight concurrency
    /// rather than by the database.
    pub latency: Duration,
    /// Stripe's request limiters for the account; unlimited by default (tests and benchmarks set them,
    /// or change them at run time through `PUT /_sim/rate_limits`).
    pub rate_limits: RateLimits,
    /// Which wire: Stripe's (`/v1`) or Adyen's (`/v71`, with Adyen notifications).
    pub wire: Wire,
    /// Adyen's credentials and HMAC key (used when `wire` is Adyen).
    pub adyen: AdyenSimConfig,
}

impl std::fmt::Debug for SimulatorConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Secrets are never printed.
        f.debug_struct("SimulatorConfig")
            .field("listen", &self.listen)
            .field("database", &self.database)
            .field("contract", &self.contract)
            .field("key_retention", &self.key_retention)
            .field("search_lag", &self.search_lag)
            .field("webhook_url", &self.webhook_url)
            .field(
                "webhook_duplicates_per_mille",
                &self.webhook_duplicates_per_mille,
            )
            .field("webhook_reorder", &self.webhook_reorder)
            .field("webhook_delay", &self.webhook_delay)
            .field("processing_settle", &self.processing_settle)
            .field("refund_settle", &self.refund_settle)
            .field("seed", &self.seed)
            .field("latency", &self.latency)
            .field("rate_limits", &self.rate_limits)
            .field("wire", &self.wire)
            .finish_non_exhaustive()
    }
}

impl Default for SimulatorConfig {
    fn default() -> Self {
        SimulatorConfig {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            database: "sqlite::memory:".to_string(),
            contract: Contract::Stripe,
            key_retention: KEY_RETENTION_DEFAULT,
            search_lag: Duration::ZERO,
            webhook_url: None,
            webhook_secret: WEBHOOK_SECRET_DEFAULT.to_string(),
            webhook_duplicates_per_mille: 0,
            webhook_reorder: false,
            webhook_delay: Duration::ZERO,
            processing_settle: PROCESSING_SETTLE_DEFAULT,
            refund_settle: REFUND_SETTLE_DEFAULT,
            seed: 0,
            api_key: API_KEY_DEFAULT.to_string(),
            latency: Duration::ZERO,
            rate_limits: RateLimits::default(),
            wire: Wire::Stripe,
            adyen: AdyenSimConfig::default(),
        }
    }
}

impl SimulatorConfig {
    /// A simulator speaking Adyen's wire, keys kept Adyen's 31 days.
    pub fn adyen() -> Self {
        SimulatorConfig {
            wire: Wire::Adyen,
            contract: Contract::Adyen,
            key_retention: ADYEN_KEY_RETENTION_DEFAULT,
            ..SimulatorConfig::default()
        }
    }
}

impl SimulatorConfig {
    /// The defaults running `contract`, with its default key retention.
    pub fn for_contract(contract: Contract) -> Self {
        SimulatorConfig {
            contract,
            wire: contract.wire(),
            key_retention: contract.key_retention_default(),
            ..SimulatorConfig::default()
        }
    }
}

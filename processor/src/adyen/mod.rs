//! The Adyen adapter: Adyen Checkout v71's real wire (JSON, `Idempotency-Key`, `X-API-Key`), against
//! Adyen or the payonce simulator started with `--adyen`.
//!
//! - `wire`: the exact JSON a payment or refund sends, within Adyen's limits, and the URLs.
//! - `classify`: the table from HTTP status, `resultCode`, `errorCode` and transport failure to the outcomes.
//! - [`webhook`]: standard notifications and their HMAC signatures (pure; storing is
//!   [`crate::ingest::ingest_adyen`]).
//!
//! Contract (documented by Adyen): honours `Idempotency-Key` (at most 64 characters, scoped to the
//! company account, not checked across regional endpoints), remembers it at least 31 days, answers
//! another body under a used key with an error, a key whose first request is in progress with a
//! transient error, and replays the saved result. There is no lookup of a payment by id: an unknown
//! outcome is resolved by the same key within the 31 days (the saved result comes back), and by
//! HMAC-signed notifications checked against the operation.

mod classify;
pub mod webhook;
pub mod wire;

pub use classify::{IN_PROGRESS_CODE, SHOPPER_ACTION_CODES, classify_payment, classify_refund};

use crate::stripe::{CONNECT_TIMEOUT_DEFAULT, REQUEST_TIMEOUT_DEFAULT, classify_transport};
use crate::{
    Contract, LookupOutcome, LookupQuery, Processor, RefundLookupQuery, RefundRequest,
    SubmitOutcome, SubmitRequest,
};
use async_trait::async_trait;
use payonce_core::id::IdempotencyKey;
use std::time::Duration;

/// Adyen's idempotency-key retention: "valid for a minimum period of 31 days after first submission".
pub use super::contract::ADYEN_KEY_RETENTION;
/// The `returnUrl` sent when none is configured: Adyen's schema requires one, and a merchant-initiated
/// card payment never redirects to it.
pub const RETURN_URL_DEFAULT: &str = "https://payonce.invalid/adyen/return";
/// Largest response body read; anything longer is treated as unreadable.
pub const RESPONSE_BYTES_MAX: usize = crate::stripe::RESPONSE_BYTES_MAX;
/// How long an idle pooled connection is kept.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Idle keep-alive connections kept to Adyen (the worker's default in-flight limit).
const IDLE_CONNECTIONS: usize = crate::stripe::IDLE_CONNECTIONS_DEFAULT;

/// How to reach Adyen (or the simulator).
#[derive(Clone)]
pub struct AdyenConfig {
    /// `https://checkout-test.adyen.com` (or the live prefix URL), or the simulator's base URL.
    pub api_base: String,
    /// The API key, sent as `X-API-Key`.
    pub api_key: String,
    /// The merchant account every request names (and every notification must name).
    pub merchant_account: String,
    /// TCP + TLS connect timeout: a failure within it means nothing was sent.
    pub connect_timeout: Duration,
    /// Total timeout of one request, connect included.
    pub request_timeout: Duration,
    /// The `returnUrl` Adyen's schema requires.
    pub return_url: String,
}

impl AdyenConfig {
    /// A configuration with the default timeouts and return URL.
    pub fn new(
        api_base: impl Into<String>,
        api_key: impl Into<String>,
        merchant_account: impl Into<String>,
    ) -> Self {
        AdyenConfig {
            api_base: api_base.into(),
            api_key: api_key.into(),
            merchant_account: merchant_account.into(),
            connect_timeout: CONNECT_TIMEOUT_DEFAULT,
            request_timeout: REQUEST_TIMEOUT_DEFAULT,
            return_url: RETURN_URL_DEFAULT.to_string(),
        }
    }
}

impl std::fmt::Debug for AdyenConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The API key is never printed.
        f.debug_struct("AdyenConfig")
            .field("api_base", &self.api_base)
            .field("merchant_account", &self.merchant_account)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("return_url", &self.return_url)
            .finish_non_exhaustive()
    }
}

/// Why the adapter could not be built.
#[derive(Debug, thiserror::Error)]
pub enum AdyenError {
    /// The configuration is unusable.
    #[error("adyen configuration: {0}")]
    Config(String),
    /// The HTTP client could not be built.
    #[error("adyen http client: {0}")]
    Client(#[from] reqwest::Error),
}

/// The Adyen processor.
#[derive(Debug, Clone)]
pub struct AdyenProcessor {
    client: reqwest::Client,
    config: AdyenConfig,
    contract: Contract,
}

impl AdyenProcessor {
    /// Builds the adapter and its HTTP client with explicit connect and total timeouts.
    pub fn new(mut config: AdyenConfig) -> Result<Self, AdyenError> {
        let base = config.api_base.trim_end_matches('/').to_string();
        if !(base.starts_with("https://") || base.starts_with("http://")) {
            return Err(AdyenError::Config(format!(
                "api_base must be an http(s) URL, got {base:?}"
            )));
        }
        if config.api_key.is_empty() {
            return Err(AdyenError::Config("api_key must not be empty".into()));
        }
        if config.merchant_account.is_empty() {
            return Err(AdyenError::Config(
                "merchant_account must not be empty".into(),
            ));
        }
        if config.connect_timeout.is_zero() || config.request_timeout.is_zero() {
            return Err(AdyenError::Config("timeouts must be positive".into()));
        }
        config.api_base = base;
        // reqwest is built without a default crypto provider; installing twice is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .timeout(config.request_timeout)
            .pool_max_idle_per_host(IDLE_CONNECTIONS)
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .redirect(crate::redirect::policy())
            .http1_only()
            .user_agent(concat!("payonce/", env!("CARGO_PKG_VERSION")))
            .build()?;
        let contract = super::contract::ADYEN_CHECKOUT;
        Ok(AdyenProcessor {
            client,
            config,
            contract,
        })
    }

    /// Declares a different key retention, for a simulator configured with a short one. Adyen
    /// itself keeps keys at least 31 days.
    pub fn with_key_retention(mut self, retention: Duration) -> Self {
        self.contract = self.contract.with_key_retention(retention);
        self
    }

    /// The merchant account this adapter names.
    pub fn merchant_account(&self) -> &str {
        &self.config.merchant_account
    }

    /// POSTs JSON once with the stored key and classifies the answer with `classify`.
    async fn post_once(
        &self,
        url: String,
        key: &IdempotencyKey,
        body: &serde_json::Value,
        classify: fn(u16, bool, &[u8]) -> SubmitOutcome,
    ) -> SubmitOutcome {
        let sent = self
            .client
            .post(url)
            .header("X-API-Key", &self.config.api_key)
            .header("Idempotency-Key", key.as_str())
            .json(body)
            .send()
            .await;
        let response = match sent {
            Ok(r) => r,
            Err(e) => return classify_transport(&e),
        };
        if let Some(why) = crate::redirect::redirected(&response) {
            return crate::redirect::unknown_after(why);
        }
        let status = response.status().as_u16();
        let transient = response
            .headers()
            .get("transient-error")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"));
        match crate::stripe::read_body(response).await {
            Ok(bytes) => classify(status, transient, &bytes),
            // The status line arrived, so the request was received; what it did is not known.
            Err(why) => SubmitOutcome::Unknown {
                reason: format!("HTTP {status}, {why}"),
                reference: None,
            },
        }
    }
}

/// The outcome of a request the operation's details keep off Adyen's wire.
fn refused_locally(e: &wire::WireError) -> SubmitOutcome {
    SubmitOutcome::Declined {
        code: e.code().to_string(),
        message: format!("not sent to Adyen: {e}"),
        reference: None,
    }
}

/// Adyen has no lookup of a payment or refund by id: "not found", never consistent, so an unknown
/// outcome is retried with the same key while the key lasts and goes to a human after.
fn no_lookup() -> LookupOutcome {
    LookupOutcome::NotFound { consistent: false }
}

#[async_trait]
impl Processor for AdyenProcessor {
    fn contract(&self) -> &Contract {
        &self.contract
    }

    async fn submit(&self, request: &SubmitRequest<'_>) -> SubmitOutcome {
        let body = match wire::payment_body(
            request,
            &self.config.merchant_account,
            &self.config.return_url,
        ) {
            Ok(b) => b,
            Err(e) => return refused_locally(&e),
        };
        self.post_once(
            wire::payments_url(&self.config.api_base),
            request.idempotency_key,
            &body,
            classify_payment,
        )
        .await
    }

    async fn lookup(&self, _query: &LookupQuery<'_>) -> LookupOutcome {
        no_lookup()
    }

    async fn submit_refund(&self, request: &RefundRequest<'_>) -> SubmitOutcome {
        let Some(url) = wire::refunds_url(&self.config.api_base, request.payment_reference) else {
            return SubmitOutcome::Declined {
                code: "adyen_payment_reference_invalid".into(),
                message: format!(
                    "not sent to Adyen: {:?} is not an Adyen pspReference",
                    request.payment_reference
                ),
                reference: None,
            };
        };
        let body = match wire::refund_body(request, &self.config.merchant_account) {
            Ok(b) => b,
            Err(e) => return refused_locally(&e),
        };
        self.post_once(url, request.idempotency_key, &body, classify_refund)
            .await
    }

    async fn lookup_refund(&self, _query: &RefundLookupQuery<'_>) -> LookupOutcome {
        no_lookup()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_is_validated_and_the_key_is_never_printed() {
        let ok = AdyenConfig::new("http://127.0.0.1:1/", "AQE_secret_key", "PayonceECOM");
        assert!(!format!("{ok:?}").contains("AQE_secret_key"));
        let p = AdyenProcessor::new(ok).unwrap();
        assert_eq!(p.config.api_base, "http://127.0.0.1:1");
        assert_eq!(p.contract().name, "adyen");
        assert_eq!(p.contract().key_retention, Some(ADYEN_KEY_RETENTION));
        assert_eq!(p.contract(), &super::super::contract::ADYEN_CHECKOUT);
        assert!(AdyenProcessor::new(AdyenConfig::new("ftp://x", "k", "M")).is_err());
        assert!(AdyenProcessor::new(AdyenConfig::new("http://x", "", "M")).is_err());
        assert!(AdyenProcessor::new(AdyenConfig::new("http://x", "k", "")).is_err());
        let mut zero = AdyenConfig::new("http://x", "k", "M");
        zero.connect_timeout = Duration::ZERO;
        assert!(AdyenProcessor::new(zero).is_err());
    }
}

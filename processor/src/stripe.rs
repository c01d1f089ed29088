//! The Stripe adapter: Stripe's real wire format (form-encoded, `Idempotency-Key`, pinned `Stripe-Version`,
//! the operation id in metadata), against api.stripe.com or the payonce simulator.
//!
//! - `wire`: the exact parameters a submission sends and the URLs it calls.
//! - `classify`: the table from HTTP status, error type and transport failure to the four outcomes.
//! - `lookup`: finding a past submission, by reference or by a consistent list query (never search).
//! - `scan`: the account's recent payments, page by page (finding money the ledger lost).
//! - `refund`: refunds (`POST /v1/refunds`), their lookups, classification and facts.
//! - [`webhook`]: `Stripe-Signature` verification and event parsing (pure; storing is [`crate::ingest`]).
//!
//! Contract: Stripe's ([`contract::STRIPE`]): honours idempotency keys, remembers them 24 hours,
//! lookup is read-after-write consistent (retrieve and list are; search is not, and is used only by
//! the check before a first submission, for payments older than the key's retention, which search
//! has long indexed), and replays stored error responses. Pointed at the simulator, the adapter
//! declares the contract the simulator runs ([`StripeProcessor::with_contract`]); a lookup the
//! contract does not offer is reported unavailable without a request.

mod classify;
mod lookup;
mod refund;
mod scan;
pub mod webhook;
mod wire;

pub use classify::{classify_response, classify_transport};
pub use lookup::LOOKUP_PAGES_MAX;
pub use refund::{DEFINITIVE_REFUND_ERRORS, REFUND_LOOKUP_PAGES_MAX, classify_refund_response};

use crate::{
    AnswerFacts, CardLookup, Contract, LookupOutcome, LookupQuery, PriorPayment, Processor,
    ProcessorObject, RecentPage, RecentQuery, RefundLookupQuery, RefundRequest, Retrieved,
    SubmitOutcome, SubmitRequest, contract,
};
use async_trait::async_trait;
use payonce_core::id::IdempotencyKey;
use std::time::Duration;

/// The Stripe API version every request pins (the version the reference material was generated against).
pub const STRIPE_VERSION: &str = "2026-10-28.endive";
/// Stripe's idempotency-key retention.
pub const STRIPE_KEY_RETENTION: Duration = contract::DAY;
/// Default TCP + TLS connect timeout.
pub const CONNECT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(5);
/// Default total timeout of one request (Stripe's own libraries use 80 s; payments here are single calls).
pub const REQUEST_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);
/// Largest response body read; anything longer is treated as unreadable.
pub const RESPONSE_BYTES_MAX: usize = 1024 * 1024;
/// Default of [`StripeConfig::idle_connections`]: the worker's default in-flight limit, so a worker
/// at its default concurrency reuses its connections instead of opening new ones.
pub const IDLE_CONNECTIONS_DEFAULT: usize = 64;
/// How long an idle pooled connection is kept.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// How to reach Stripe (or the simulator).
#[derive(Clone)]
pub struct StripeConfig {
    /// `https://api.stripe.com` or the simulator's base URL, without a trailing slash.
    pub api_base: String,
    /// The secret key (`sk_...`), sent as a bearer token.
    pub secret_key: String,
    /// TCP + TLS connect timeout: a failure within it means nothing was sent.
    pub connect_timeout: Duration,
    /// Total timeout of one request, connect included.
    pub request_timeout: Duration,
    /// The pinned `Stripe-Version`.
    pub stripe_version: &'static str,
    /// Most idle keep-alive connections kept to the processor. Fewer than the requests in flight
    /// means each burst of answers closes connections the next burst opens again (a TCP and TLS
    /// handshake each): set it to the worker's concurrency.
    pub idle_connections: usize,
    /// Speak HTTP/2 to the processor: every request in flight a stream of one connection instead of
    /// a connection each (cleartext prior knowledge for an `http://` base, ALPN for `https://`). Off
    /// by default, as Stripe's own libraries speak HTTP/1.1: the server's stream limit then caps the
    /// requests in flight (the client queues past it rather than opening a second connection), and
    /// one lost connection is every request on it lost at once. See docs/decisions.md.
    pub http2: bool,
}

impl StripeConfig {
    /// A configuration with the default timeouts and the pinned version.
    pub fn new(api_base: impl Into<String>, secret_key: impl Into<String>) -> Self {
        StripeConfig {
            api_base: api_base.into(),
            secret_key: secret_key.into(),
            connect_timeout: CONNECT_TIMEOUT_DEFAULT,
            request_timeout: REQUEST_TIMEOUT_DEFAULT,
            stripe_version: STRIPE_VERSION,
            idle_connections: IDLE_CONNECTIONS_DEFAULT,
            http2: false,
        }
    }
}

impl std::fmt::Debug for StripeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The secret key is never printed.
        f.debug_struct("StripeConfig")
            .field("api_base", &self.api_base)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("stripe_version", &self.stripe_version)
            .field("idle_connections", &self.idle_connections)
            .field("http2", &self.http2)
            .finish_non_exhaustive()
    }
}

/// Why the adapter could not be built.
#[derive(Debug, thiserror::Error)]
pub enum StripeError {
    /// The configuration is unusable.
    #[error("stripe configuration: {0}")]
    Config(String),
    /// The HTTP client could not be built.
    #[error("stripe http client: {0}")]
    Client(#[from] reqwest::Error),
}

/// The Stripe processor.
#[derive(Debug, Clone)]
pub struct StripeProcessor {
    client: reqwest::Client,
    config: StripeConfig,
    contract: Contract,
    /// `POST /v1/payment_intents`, parsed once instead of at every submission (`None`: the base
    /// does not parse, and each submission fails to build its request as it did before).
    create_url: Option<reqwest::Url>,
}

impl StripeProcessor {
    /// Builds the adapter and its HTTP client with explicit connect and total timeouts.
    pub fn new(mut config: StripeConfig) -> Result<Self, StripeError> {
        let base = config.api_base.trim_end_matches('/').to_string();
        if !(base.starts_with("https://") || base.starts_with("http://")) {
            return Err(StripeError::Config(format!(
                "api_base must be an http(s) URL, got {base:?}"
            )));
        }
        if config.secret_key.is_empty() {
            return Err(StripeError::Config("secret_key must not be empty".into()));
        }
        if config.connect_timeout.is_zero() || config.request_timeout.is_zero() {
            return Err(StripeError::Config("timeouts must be positive".into()));
        }
        if config.idle_connections == 0 {
            return Err(StripeError::Config(
                "idle_connections must be positive".into(),
            ));
        }
        config.api_base = base;
        // reqwest is built without a default crypto provider; installing twice is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let builder = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .timeout(config.request_timeout)
            .pool_max_idle_per_host(config.idle_connections)
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .redirect(crate::redirect::policy())
            .user_agent(concat!("payonce/", env!("CARGO_PKG_VERSION")));
        let builder = match (config.http2, config.api_base.starts_with("http://")) {
            (false, _) => builder.http1_only(),
            (true, true) => builder.http2_prior_knowledge(),
            // https: offered by ALPN; a server that declines it gets HTTP/1.1.
            (true, false) => builder,
        };
        let client = builder.build()?;
        let create_url = reqwest::Url::parse(&wire::create_url(&config.api_base)).ok();
        Ok(StripeProcessor {
            client,
            config,
            contract: contract::STRIPE,
            create_url,
        })
    }

    /// Declares the contract of the simulator this adapter talks to (one on Stripe's wire);
    /// refused for another wire's, or one whose keys payonce's would not fit.
    pub fn with_contract(mut self, contract: Contract) -> Result<Self, StripeError> {
        if contract.wire != "stripe" {
            return Err(StripeError::Config(format!(
                "contract {} is not on Stripe's wire ({})",
                contract.name, contract.wire
            )));
        }
        if let Some(why) = contract.refuses_key_len(payonce_core::intention::INTENTION_KEY_LEN) {
            return Err(StripeError::Config(why));
        }
        self.contract = contract;
        Ok(self)
    }

    /// Declares a different key retention, for a simulator configured with a short one. Stripe itself is 24 h.
    pub fn with_key_retention(mut self, retention: Duration) -> Self {
        self.contract = self.contract.with_key_retention(retention);
        self
    }

    /// Why the declared contract cannot find `what` (a lookup it does not offer), if it cannot.
    fn lookup_refused(&self, offered: bool, what: &str) -> Option<String> {
        (!offered).then(|| {
            format!(
                "the {} contract offers no {what}: payonce does not ask",
                self.contract.name
            )
        })
    }

    fn request(
        &self,
        method: reqwest::Method,
        url: impl reqwest::IntoUrl,
    ) -> reqwest::RequestBuilder {
        self.client
            .request(method, url)
            .bearer_auth(&self.config.secret_key)
            .header("Stripe-Version", self.config.stripe_version)
    }
}

/// Longest `Retry-After` honoured; a longer one is capped (the worker's own backoff bounds it too).
pub const RETRY_AFTER_MAX: Duration = Duration::from_secs(60);

/// The processor's advice on when to try again: a `Retry-After` in whole seconds, capped at
/// [`RETRY_AFTER_MAX`]. Stripe sends none on rate limits (its `Stripe-Should-Retry` is absent there), so
/// this is usually `None` and the caller's jittered backoff decides.
fn retry_after_ms(headers: &reqwest::header::HeaderMap) -> Option<u64> {
    let secs: u64 = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(secs.min(RETRY_AFTER_MAX.as_secs()) * 1000)
}

/// Reads a body of at most [`RESPONSE_BYTES_MAX`] bytes.
/// Why a response's body could not be had.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    /// The connection failed while the body was read.
    #[error("reading the response failed: {0}")]
    Read(#[source] reqwest::Error),
    /// The body is longer than [`RESPONSE_BYTES_MAX`].
    #[error("response longer than {RESPONSE_BYTES_MAX} bytes")]
    TooLong,
}

pub(crate) async fn read_body(mut response: reqwest::Response) -> Result<Vec<u8>, BodyError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(BodyError::Read)? {
        if body.len() + chunk.len() > RESPONSE_BYTES_MAX {
            return Err(BodyError::TooLong);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

impl StripeProcessor {
    /// POSTs a form once with the stored key and classifies the answer with `classify` (payments
    /// and refunds differ only in which refusals are definitive). A 429 keeps its `Retry-After`.
    pub(crate) async fn post_once(
        &self,
        url: impl reqwest::IntoUrl + Send,
        key: &IdempotencyKey,
        body: String,
        classify: fn(u16, &[u8]) -> SubmitOutcome,
    ) -> SubmitOutcome {
        let sent = self
            .request(reqwest::Method::POST, url)
            .header("Idempotency-Key", key.as_str())
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(body)
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
        let retry_after_ms = retry_after_ms(response.headers());
        let replayed = response
            .headers()
            .get("idempotent-replayed")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"));
        match read_body(response).await {
            Ok(bytes) => match classify(status, &bytes) {
                SubmitOutcome::RateLimited { reason, .. } => SubmitOutcome::RateLimited {
                    reason,
                    retry_after_ms,
                },
                SubmitOutcome::Succeeded {
                    reference, result, ..
                } => SubmitOutcome::Succeeded {
                    reference,
                    result,
                    replayed,
                },
                other => other,
            },
            // The status line arrived, so the request was received; what it did is not known.
            Err(why) => SubmitOutcome::Unknown {
                reason: format!("HTTP {status}, {why}"),
                reference: None,
            },
        }
    }
}

#[async_trait]
impl Processor for StripeProcessor {
    fn contract(&self) -> &Contract {
        &self.contract
    }

    async fn submit(&self, request: &SubmitRequest<'_>) -> SubmitOutcome {
        let body = match wire::submit_body(request) {
            Ok(b) => b,
            Err(e) => {
                return SubmitOutcome::NotSubmitted {
                    reason: format!("could not encode the request: {e}"),
                };
            }
        };
        match &self.create_url {
            Some(url) => {
                self.post_once(
                    url.clone(),
                    request.idempotency_key,
                    body,
                    classify_response,
                )
                .await
            }
            None => {
                self.post_once(
                    wire::create_url(&self.config.api_base),
                    request.idempotency_key,
                    body,
                    classify_response,
                )
                .await
            }
        }
    }

    async fn lookup(&self, query: &LookupQuery<'_>) -> LookupOutcome {
        let offered = self
            .contract
            .lookups
            .finding(query.reference.is_some())
            .is_some();
        if let Some(reason) = self.lookup_refused(offered, "lookup that finds this payment") {
            return LookupOutcome::Unavailable { reason };
        }
        lookup::run(self, query).await
    }

    async fn recent_payments(&self, query: &RecentQuery<'_>) -> RecentPage {
        let offered = self.contract.lookups.list.is_some();
        if let Some(reason) = self.lookup_refused(offered, "list of payments") {
            return RecentPage::Unavailable { reason };
        }
        scan::page(self, scan::Listing::Payments, query).await
    }

    async fn recent_refunds(&self, query: &RecentQuery<'_>) -> RecentPage {
        let offered = self.contract.lookups.list.is_some();
        if let Some(reason) = self.lookup_refused(offered, "list of refunds") {
            return RecentPage::Unavailable { reason };
        }
        scan::page(self, scan::Listing::Refunds, query).await
    }

    async fn prior_payment(
        &self,
        tenant: &payonce_core::id::TenantId,
        business_key: &payonce_core::id::BusinessKey,
    ) -> PriorPayment {
        let offered = self.contract.lookups.search.is_some();
        if let Some(reason) = self.lookup_refused(offered, "search") {
            return PriorPayment::Unavailable { reason };
        }
        scan::prior_payment(self, tenant, business_key).await
    }

    async fn submit_refund(&self, request: &RefundRequest<'_>) -> SubmitOutcome {
        refund::submit(self, request).await
    }

    async fn lookup_refund(&self, query: &RefundLookupQuery<'_>) -> LookupOutcome {
        // A refund is found by listing its payment's refunds, or retrieved by its reference.
        let offered = self
            .contract
            .lookups
            .finding(query.reference.is_some())
            .is_some();
        if let Some(reason) = self.lookup_refused(offered, "lookup that finds this refund") {
            return LookupOutcome::Unavailable { reason };
        }
        refund::lookup(self, query).await
    }

    fn facts(&self, reference: &str, object: &serde_json::Value) -> Option<ProcessorObject> {
        if refund::is_refund(reference, object) {
            Some(refund::object_of(reference, object))
        } else {
            Some(lookup::object_of(reference, object))
        }
    }

    fn answer_facts(&self, reference: &str, object: &serde_json::Value) -> Option<AnswerFacts> {
        if refund::is_refund(reference, object) {
            self.facts(reference, object).map(AnswerFacts::from)
        } else {
            Some(lookup::answer_facts_of(object))
        }
    }

    async fn card(&self, payment_method: &str) -> CardLookup {
        lookup::card(self, payment_method).await
    }

    async fn retrieve(&self, reference: &str) -> Retrieved {
        if let Some(reason) = self.lookup_refused(self.contract.lookups.by_id, "retrieve by id") {
            return Retrieved::Unavailable { reason };
        }
        // Stripe's ids carry their object's kind: `re_` is a Refund, everything else a PaymentIntent.
        if reference.starts_with("re_") {
            refund::retrieve(self, reference).await
        } else {
            lookup::retrieve(self, reference).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_is_validated_and_the_secret_is_never_printed() {
        let ok = StripeConfig::new("http://127.0.0.1:1/", "sk_test_secret");
        assert!(!format!("{ok:?}").contains("sk_test_secret"));
        let p = StripeProcessor::new(ok).unwrap();
        assert_eq!(p.config.api_base, "http://127.0.0.1:1");
        assert_eq!(p.contract().key_retention, Some(STRIPE_KEY_RETENTION));
        assert_eq!(*p.contract(), contract::STRIPE);
        assert!(StripeProcessor::new(StripeConfig::new("ftp://x", "sk")).is_err());
        assert!(StripeProcessor::new(StripeConfig::new("http://x", "")).is_err());
        let mut zero = StripeConfig::new("http://x", "sk");
        zero.request_timeout = Duration::ZERO;
        assert!(StripeProcessor::new(zero).is_err());
        let mut no_idle = StripeConfig::new("http://x", "sk");
        no_idle.idle_connections = 0;
        assert!(StripeProcessor::new(no_idle).is_err());
    }

    #[test]
    fn an_answer_s_facts_are_those_of_its_object() {
        let p = StripeProcessor::new(StripeConfig::new("http://127.0.0.1:1", "sk")).unwrap();
        assert_eq!(
            p.create_url.as_ref().map(reqwest::Url::as_str),
            Some("http://127.0.0.1:1/v1/payment_intents")
        );
        let payment = serde_json::json!({
            "id": "pi_1", "object": "payment_intent", "amount": 2048, "currency": "USD",
            "customer": "cus_1", "status": "succeeded",
            "metadata": {
                "payonce_operation_id": "op_1", "payonce_tenant": "acme",
                "payonce_business_key": "invoice:INV-1:pay", "payonce_details_hash": "h"
            }
        });
        let without_intention = serde_json::json!({
            "id": "pi_2", "amount": 5, "metadata": { "payonce_operation_id": "op_2" }
        });
        let refund = serde_json::json!({
            "id": "re_1", "object": "refund", "amount": 100, "currency": "usd",
            "payment_intent": "pi_1", "status": "succeeded",
            "metadata": { "payonce_operation_id": "op_3" }
        });
        for (reference, object) in [
            ("pi_1", &payment),
            ("pi_2", &without_intention),
            ("re_1", &refund),
        ] {
            let facts = p.answer_facts(reference, object).unwrap();
            assert_eq!(
                facts,
                AnswerFacts::from(p.facts(reference, object).unwrap())
            );
        }
        let facts = p.answer_facts("pi_1", &payment).unwrap();
        assert_eq!(facts.currency.as_deref(), Some("usd"));
        assert_eq!(facts.intention.map(|i| i.tenant), Some("acme".into()));
    }
}

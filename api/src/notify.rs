//! Deliveries to a tenant's notification endpoint (approval requests, one-time codes): a JSON POST
//! signed with the tenant's secret ([`payonce_core::signing`]), explicit timeouts, retried with
//! exponential backoff on transport errors, 429 and 5xx. Deliveries run in the background: the
//! caller has already answered, and a slow endpoint must not hold a request open.

use backon::{ExponentialBuilder, Retryable};
use payonce_core::signing::{SIGNATURE_HEADER, sign};
use std::time::Duration;

/// Connect timeout of a delivery.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Whole-request timeout of one delivery attempt.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Retries after the first attempt.
pub const RETRY_MAX: usize = 4;
/// First backoff delay (doubling, jittered, up to [`BACKOFF_MAX`]).
pub const BACKOFF_MIN: Duration = Duration::from_millis(200);
/// Longest backoff delay.
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// The header naming the delivery, so a receiver can drop a retried duplicate.
pub const DELIVERY_HEADER: &str = "payonce-delivery-id";

/// Why a delivery failed (after its retries, for the retryable kinds).
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    /// The request could not be sent or timed out.
    #[error("the notification endpoint could not be reached")]
    Transport(#[source] reqwest::Error),
    /// The endpoint answered with this status.
    #[error("the notification endpoint answered {0}")]
    Status(u16),
}

impl NotifyError {
    fn retryable(&self) -> bool {
        match self {
            NotifyError::Transport(_) => true,
            NotifyError::Status(s) => *s == 429 || *s >= 500,
        }
    }
}

/// The delivery client.
#[derive(Debug, Clone)]
pub struct Notifier {
    client: reqwest::Client,
}

impl Notifier {
    /// Builds the client.
    pub fn new() -> Result<Self, reqwest::Error> {
        // reqwest is built without a default crypto provider; installing twice is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("payonce/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Notifier { client })
    }

    /// POSTs `body` to `url`, signed with `secret` at `timestamp_s`, retrying as the module says.
    pub async fn deliver(
        &self,
        url: &str,
        secret: &str,
        delivery_id: &str,
        timestamp_s: i64,
        body: &serde_json::Value,
    ) -> Result<(), NotifyError> {
        let bytes = body.to_string().into_bytes();
        let signature = sign(secret, timestamp_s, &bytes);
        let attempt = || async {
            let response = self
                .client
                .post(url)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .header(SIGNATURE_HEADER, &signature)
                .header(DELIVERY_HEADER, delivery_id)
                .body(bytes.clone())
                .send()
                .await
                .map_err(NotifyError::Transport)?;
            let status = response.status();
            if status.is_success() {
                Ok(())
            } else {
                Err(NotifyError::Status(status.as_u16()))
            }
        };
        attempt
            .retry(
                ExponentialBuilder::default()
                    .with_min_delay(BACKOFF_MIN)
                    .with_max_delay(BACKOFF_MAX)
                    .with_jitter()
                    .with_max_times(RETRY_MAX),
            )
            .when(NotifyError::retryable)
            .await
    }

    /// Delivers in the background and logs the outcome once.
    pub fn spawn(
        &self,
        url: String,
        secret: String,
        delivery_id: String,
        timestamp_s: i64,
        body: serde_json::Value,
    ) {
        let notifier = self.clone();
        tokio::spawn(async move {
            match notifier
                .deliver(&url, &secret, &delivery_id, timestamp_s, &body)
                .await
            {
                Ok(()) => tracing::info!(%delivery_id, "customer notification delivered"),
                Err(error) => {
                    tracing::warn!(%delivery_id, %error, "customer notification not delivered")
                }
            }
        });
    }
}

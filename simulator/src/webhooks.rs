//! Webhooks: Stripe's signature scheme and at-least-once delivery from a durable outbox.
//!
//! Signature: `Stripe-Signature: t=<unix seconds>,v1=<lowercase hex HMAC-SHA256 of "<t>.<body>">`, keyed by the
//! whole `whsec_...` secret as UTF-8 bytes (not base64-decoded), as Stripe's libraries compute it.
//!
//! Delivery: every event is POSTed until a 2xx answers, with exponential back-off, at most
//! [`WEBHOOK_ATTEMPTS_MAX`] attempts. On request, a delivered event is sent again (`webhook_duplicates_per_mille`,
//! seeded), deliveries are held and sent newest first (`webhook_reorder`), and first attempts wait `webhook_delay`.

use crate::app::Shared;
use crate::rng::{SeededRng, now_ms};
use crate::store::OutboxRow;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::time::{Duration, Instant};

/// What an Adyen notification receiver must answer.
const ADYEN_ACCEPTED: &str = "[accepted]";
/// Attempts per event before it is abandoned.
pub(crate) const WEBHOOK_ATTEMPTS_MAX: i64 = 8;
/// Back-off after the first failed attempt; doubles each time.
const WEBHOOK_RETRY_BASE: Duration = Duration::from_millis(200);
/// Longest back-off between attempts.
const WEBHOOK_RETRY_MAX: Duration = Duration::from_secs(30);
/// Connect timeout of the delivery client.
const WEBHOOK_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Total timeout of one delivery attempt.
const WEBHOOK_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Deliveries taken from the outbox per pass.
const WEBHOOK_BATCH_MAX: i64 = 50;
/// Longest sleep when nothing is due (new events also wake the deliverer at once).
const WEBHOOK_IDLE_POLL: Duration = Duration::from_millis(500);
/// With reordering, how long a lone event is held waiting for a second one to swap it with.
const REORDER_HOLD: Duration = Duration::from_millis(300);

/// Lowercase hex HMAC-SHA256 of `"<timestamp>.<payload>"` keyed by the whole secret.
pub fn sign_payload(secret: &str, timestamp: i64, payload: &[u8]) -> String {
    // HMAC takes keys of any length, so this never fails; an empty signature would simply not verify.
    let Ok(mut mac) = <Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes()) else {
        return String::new();
    };
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(payload);
    hex::encode(mac.finalize().into_bytes())
}

/// The `Stripe-Signature` header value for a payload.
pub fn signature_header(secret: &str, timestamp: i64, payload: &[u8]) -> String {
    format!(
        "t={timestamp},v1={}",
        sign_payload(secret, timestamp, payload)
    )
}

fn backoff(attempts: i64) -> Duration {
    let exp = u32::try_from(attempts.saturating_sub(1).clamp(0, 16)).unwrap_or(16);
    WEBHOOK_RETRY_BASE
        .saturating_mul(2_u32.saturating_pow(exp))
        .min(WEBHOOK_RETRY_MAX)
}

/// How a delivery is signed and what counts as accepted.
#[derive(Debug, Clone, Copy)]
enum Scheme<'a> {
    /// `Stripe-Signature` header; any 2xx accepts.
    Stripe(&'a str),
    /// Adyen's HMAC is inside the body; only a 2xx answering `[accepted]` accepts, as Adyen requires.
    Adyen,
}

async fn deliver(client: &reqwest::Client, url: &str, scheme: Scheme<'_>, body: &[u8]) -> bool {
    let t = now_ms() / 1000;
    let request = client
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_vec());
    let request = match scheme {
        Scheme::Stripe(secret) => {
            request.header("stripe-signature", signature_header(secret, t, body))
        }
        Scheme::Adyen => request,
    };
    match request.send().await {
        Ok(r) if matches!(scheme, Scheme::Adyen) => {
            r.status().is_success()
                && r.text()
                    .await
                    .is_ok_and(|text| text.contains(ADYEN_ACCEPTED))
        }
        Ok(r) => r.status().is_success(),
        Err(e) => {
            tracing::debug!(error = %e, "webhook delivery failed");
            false
        }
    }
}

async fn wait(app: &Shared, shutdown: &mut tokio::sync::watch::Receiver<bool>, timeout: Duration) {
    tokio::select! {
        _ = app.webhook_wake.notified() => {}
        _ = tokio::time::sleep(timeout) => {}
        _ = shutdown.changed() => {}
    }
}

/// Delivers the outbox until shutdown. Returns at once when no webhook URL is configured.
pub(crate) async fn run(app: Shared) {
    let Some(url) = app.config.webhook_url.clone() else {
        return;
    };
    let client = match reqwest::Client::builder()
        .connect_timeout(WEBHOOK_CONNECT_TIMEOUT)
        .timeout(WEBHOOK_REQUEST_TIMEOUT)
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "webhook client could not be built; webhooks disabled");
            return;
        }
    };
    let mut rng = SeededRng::new(app.config.seed ^ 0x5EB0_0C5D);
    let mut shutdown = app.shutdown.clone();
    let mut held_since: Option<Instant> = None;
    while !*shutdown.borrow() {
        let now = app.now_ms();
        let due = match app.store.outbox_due(now, WEBHOOK_BATCH_MAX).await {
            Ok(d) => d,
            Err(e) => {
                tracing::error!(error = %e, "webhook outbox read failed");
                wait(&app, &mut shutdown, WEBHOOK_IDLE_POLL).await;
                continue;
            }
        };
        if due.is_empty() {
            held_since = None;
            let next = app.store.outbox_next_due().await.ok().flatten();
            let timeout = next
                .map(|at| Duration::from_millis(u64::try_from(at - now).unwrap_or(0)))
                .unwrap_or(WEBHOOK_IDLE_POLL)
                .min(WEBHOOK_IDLE_POLL);
            wait(&app, &mut shutdown, timeout).await;
            continue;
        }
        if app.config.webhook_reorder && due.len() < 2 {
            let since = *held_since.get_or_insert_with(Instant::now);
            if since.elapsed() < REORDER_HOLD {
                wait(
                    &app,
                    &mut shutdown,
                    REORDER_HOLD.saturating_sub(since.elapsed()),
                )
                .await;
                continue;
            }
        }
        held_since = None;
        let ordered: Vec<OutboxRow> = if app.config.webhook_reorder {
            due.into_iter().rev().collect()
        } else {
            due
        };
        for row in ordered {
            if *shutdown.borrow() {
                break;
            }
            let attempts = row.attempts + 1;
            let scheme = match app.config.wire {
                crate::config::Wire::Stripe => Scheme::Stripe(&app.config.webhook_secret),
                crate::config::Wire::Adyen => Scheme::Adyen,
            };
            let ok = deliver(&client, &url, scheme, &row.body).await;
            let recorded = if ok {
                if rng.per_mille(app.config.webhook_duplicates_per_mille) {
                    deliver(&client, &url, scheme, &row.body).await;
                }
                app.store.outbox_delivered(row.event_seq).await
            } else if attempts >= WEBHOOK_ATTEMPTS_MAX {
                tracing::warn!(event_seq = row.event_seq, attempts, "webhook abandoned");
                app.store.outbox_abandon(row.event_seq, attempts).await
            } else {
                let due_ms = app.now_ms() + backoff(attempts).as_millis() as i64;
                app.store
                    .outbox_retry(row.event_seq, attempts, due_ms)
                    .await
            };
            if let Err(e) = recorded {
                tracing::error!(error = %e, "webhook outbox update failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    struct Vector {
        name: String,
        secret: String,
        timestamp: i64,
        payload: String,
        header: String,
    }

    #[test]
    fn stripe_library_vectors_verify() {
        let raw = include_str!("../../tests/fixtures/stripe/webhook_vectors.json");
        let vectors: Vec<Vector> = serde_json::from_str(raw).unwrap();
        assert!(vectors.len() >= 6);
        for v in vectors {
            assert_eq!(
                signature_header(&v.secret, v.timestamp, v.payload.as_bytes()),
                v.header,
                "{}",
                v.name
            );
        }
    }

    #[test]
    fn backoff_grows_and_is_bounded() {
        assert_eq!(backoff(1), WEBHOOK_RETRY_BASE);
        assert_eq!(backoff(2), WEBHOOK_RETRY_BASE * 2);
        assert_eq!(backoff(100), WEBHOOK_RETRY_MAX);
    }
}

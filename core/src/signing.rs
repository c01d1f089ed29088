//! The one signature scheme of payonce's outbound calls (tenant notifications today; any later
//! outbound webhook should use the same): header [`SIGNATURE_HEADER`] =
//! `t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>." + body)>`. The timestamp is inside the MAC so
//! a receiver can refuse old deliveries ([`TIMESTAMP_TOLERANCE_S`]); the compare is constant-time.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// The request header carrying the signature.
pub const SIGNATURE_HEADER: &str = "payonce-signature";
/// How far a receiver should accept a signature's timestamp from its own clock, seconds.
pub const TIMESTAMP_TOLERANCE_S: i64 = 300;
/// Longest signature header a verifier reads.
pub const HEADER_LEN_MAX: usize = 256;

/// Why a signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// The header is not `t=…,v1=…`.
    #[error("the signature header is malformed")]
    Malformed,
    /// The timestamp is outside the tolerance.
    #[error("the signature timestamp is too far from now")]
    Stale,
    /// The MAC does not match.
    #[error("the signature does not match")]
    Mismatch,
}

/// HMAC-SHA256 of `"{timestamp}.{body}"` in hex: the `v1` value of payonce's and Stripe's signatures.
pub fn mac_hex(secret: &str, timestamp_s: i64, body: &[u8]) -> String {
    // HMAC takes keys of any length, so this cannot fail.
    #[allow(clippy::expect_used)]
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes())
        .expect("HMAC accepts any key length");
    mac.update(timestamp_s.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// The signature header value for `body` sent at `timestamp_s`.
pub fn sign(secret: &str, timestamp_s: i64, body: &[u8]) -> String {
    format!("t={timestamp_s},v1={}", mac_hex(secret, timestamp_s, body))
}

/// Checks a signature header against `body` at `now_s`.
pub fn verify(
    secret: &str,
    header: &str,
    body: &[u8],
    now_s: i64,
    tolerance_s: i64,
) -> Result<(), SignatureError> {
    if header.len() > HEADER_LEN_MAX {
        return Err(SignatureError::Malformed);
    }
    let mut timestamp = None;
    let mut given = None;
    for part in header.split(',') {
        match part.split_once('=') {
            Some(("t", t)) => timestamp = t.parse::<i64>().ok(),
            Some(("v1", v)) => given = Some(v),
            _ => {}
        }
    }
    let (Some(timestamp), Some(given)) = (timestamp, given) else {
        return Err(SignatureError::Malformed);
    };
    if now_s.abs_diff(timestamp) > tolerance_s.unsigned_abs() {
        return Err(SignatureError::Stale);
    }
    let expected = mac_hex(secret, timestamp, body);
    if bool::from(expected.as_bytes().ct_eq(given.as_bytes())) {
        Ok(())
    } else {
        Err(SignatureError::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_only_for_its_secret_body_and_time() {
        let header = sign("s3cret", 1_000, b"{\"a\":1}");
        assert!(header.starts_with("t=1000,v1="));
        assert_eq!(verify("s3cret", &header, b"{\"a\":1}", 1_010, 300), Ok(()));
        assert_eq!(
            verify("other", &header, b"{\"a\":1}", 1_010, 300),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify("s3cret", &header, b"{\"a\":2}", 1_010, 300),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify("s3cret", &header, b"{\"a\":1}", 1_301, 300),
            Err(SignatureError::Stale)
        );
        assert_eq!(
            verify("s3cret", "v1=ab", b"", 1_000, 300),
            Err(SignatureError::Malformed)
        );
    }
}

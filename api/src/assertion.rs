//! Signed customer assertions: the tenant's app, which has logged its customer in, vouches that this
//! customer is approving this operation, now. Format (docs/api.md):
//!
//! `v1.` base64url(JSON payload) `.` base64url(HMAC-SHA256(key, `v1.` + base64url(payload)))
//!
//! with payload `{"kid": key id, "sub": customer id, "op": operation id, "exp": expiry in ms since the
//! epoch, "nonce": 16 to 64 of [A-Za-z0-9_-]}`, no padding. The MAC covers the version prefix, so a
//! later format cannot be confused with this one. Verifying is pure; the nonce is spent by the page
//! only when the approval goes through (see `confirm`).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use payonce_core::id::OperationId;
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// The version prefix of the current format.
pub const VERSION: &str = "v1";
/// Longest assertion read (a real one is about 300 characters).
pub const ASSERTION_LEN_MAX: usize = 2_048;
/// Longest an assertion may live, from now to its `exp`: it stands for a login that just happened.
pub const ASSERTION_LIFETIME_MAX_MS: i64 = 5 * 60 * 1000;
/// Shortest nonce accepted.
pub const NONCE_LEN_MIN: usize = 16;
/// Longest nonce accepted.
pub const NONCE_LEN_MAX: usize = 64;

/// What an assertion says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claims {
    /// The key id it was signed with.
    pub kid: String,
    /// The customer.
    pub sub: String,
    /// The operation.
    pub op: String,
    /// Expiry, ms since the epoch.
    pub exp: i64,
    /// Single-use nonce.
    pub nonce: String,
}

/// Why an assertion was refused; each has a stable code the page shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AssertionError {
    /// Not the format above.
    #[error("assertion_malformed")]
    Malformed,
    /// Signed with a key id this tenant does not have.
    #[error("assertion_unknown_key")]
    UnknownKey,
    /// The MAC does not match.
    #[error("assertion_bad_signature")]
    BadSignature,
    /// Past its expiry.
    #[error("assertion_expired")]
    Expired,
    /// Expires further out than [`ASSERTION_LIFETIME_MAX_MS`].
    #[error("assertion_lifetime_too_long")]
    LifetimeTooLong,
    /// For another customer than the operation's.
    #[error("assertion_wrong_customer")]
    WrongCustomer,
    /// For another operation.
    #[error("assertion_wrong_operation")]
    WrongOperation,
}

impl AssertionError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            AssertionError::Malformed => "assertion_malformed",
            AssertionError::UnknownKey => "assertion_unknown_key",
            AssertionError::BadSignature => "assertion_bad_signature",
            AssertionError::Expired => "assertion_expired",
            AssertionError::LifetimeTooLong => "assertion_lifetime_too_long",
            AssertionError::WrongCustomer => "assertion_wrong_customer",
            AssertionError::WrongOperation => "assertion_wrong_operation",
        }
    }
}

fn mac(key: &str, signed: &str) -> Vec<u8> {
    // HMAC takes keys of any length, so this cannot fail.
    #[allow(clippy::expect_used)]
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key.as_bytes())
        .expect("HMAC accepts any key length");
    mac.update(signed.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

/// Signs `claims` with `key` (what a tenant's app does; payonce uses it in its demo tenant app and
/// tests).
pub fn sign(key: &str, claims: &Claims) -> String {
    // Serializing a struct of strings and an integer cannot fail.
    let json = serde_json::to_vec(claims).unwrap_or_default();
    let signed = format!("{VERSION}.{}", URL_SAFE_NO_PAD.encode(json));
    let tag = URL_SAFE_NO_PAD.encode(mac(key, &signed));
    format!("{signed}.{tag}")
}

fn nonce_ok(nonce: &str) -> bool {
    (NONCE_LEN_MIN..=NONCE_LEN_MAX).contains(&nonce.len())
        && nonce
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Verifies `raw` for `operation` of `customer` at `now_ms` with the tenant's key. The MAC is checked
/// before any claim is believed.
pub fn verify(
    raw: &str,
    key_id: &str,
    key: &str,
    operation: &OperationId,
    customer: &str,
    now_ms: i64,
) -> Result<Claims, AssertionError> {
    if raw.len() > ASSERTION_LEN_MAX {
        return Err(AssertionError::Malformed);
    }
    let mut parts = raw.split('.');
    let (Some(version), Some(payload), Some(tag), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(AssertionError::Malformed);
    };
    if version != VERSION {
        return Err(AssertionError::Malformed);
    }
    let tag = URL_SAFE_NO_PAD
        .decode(tag)
        .map_err(|_| AssertionError::Malformed)?;
    let json = URL_SAFE_NO_PAD
        .decode(payload)
        .map_err(|_| AssertionError::Malformed)?;
    let claims: Claims = serde_json::from_slice(&json).map_err(|_| AssertionError::Malformed)?;
    if !bool::from(claims.kid.as_bytes().ct_eq(key_id.as_bytes())) {
        return Err(AssertionError::UnknownKey);
    }
    let expected = mac(key, &format!("{version}.{payload}"));
    if !bool::from(expected.ct_eq(&tag)) {
        return Err(AssertionError::BadSignature);
    }
    if !nonce_ok(&claims.nonce) {
        return Err(AssertionError::Malformed);
    }
    if claims.exp <= now_ms {
        return Err(AssertionError::Expired);
    }
    if claims.exp - now_ms > ASSERTION_LIFETIME_MAX_MS {
        return Err(AssertionError::LifetimeTooLong);
    }
    if claims.op != operation.as_str() {
        return Err(AssertionError::WrongOperation);
    }
    if claims.sub != customer {
        return Err(AssertionError::WrongCustomer);
    }
    Ok(claims)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(op: &OperationId, exp: i64) -> Claims {
        Claims {
            kid: "k1".into(),
            sub: "cus_1".into(),
            op: op.as_str().into(),
            exp,
            nonce: "n".repeat(NONCE_LEN_MIN),
        }
    }

    #[test]
    fn an_assertion_verifies_only_as_signed_and_in_time() {
        let op = OperationId::generate();
        let good = sign("key", &claims(&op, 10_000));
        assert!(verify(&good, "k1", "key", &op, "cus_1", 9_000).is_ok());
        let v = |raw: &str, now: i64| verify(raw, "k1", "key", &op, "cus_1", now).unwrap_err();
        assert_eq!(
            verify(&good, "k1", "other", &op, "cus_1", 9_000).unwrap_err(),
            AssertionError::BadSignature
        );
        assert_eq!(
            verify(&good, "k2", "key", &op, "cus_1", 9_000).unwrap_err(),
            AssertionError::UnknownKey
        );
        assert_eq!(v(&good, 10_000), AssertionError::Expired);
        assert_eq!(
            v(&good, 10_000 - ASSERTION_LIFETIME_MAX_MS - 1),
            AssertionError::LifetimeTooLong
        );
        assert_eq!(
            verify(&good, "k1", "key", &OperationId::generate(), "cus_1", 9_000).unwrap_err(),
            AssertionError::WrongOperation
        );
        assert_eq!(
            verify(&good, "k1", "key", &op, "cus_2", 9_000).unwrap_err(),
            AssertionError::WrongCustomer
        );
        // A payload swapped under a valid tag fails the MAC.
        let other = sign("key", &claims(&op, 10_001));
        let forged = format!(
            "{}.{}",
            other.rsplit_once('.').unwrap().0,
            good.rsplit_once('.').unwrap().1
        );
        assert_eq!(v(&forged, 9_000), AssertionError::BadSignature);
        for bad in [
            "",
            "v1.x",
            "v2.a.b",
            "v1.a.b.c",
            &"a".repeat(ASSERTION_LEN_MAX + 1),
        ] {
            assert_eq!(v(bad, 9_000), AssertionError::Malformed, "{bad}");
        }
        let mut short = claims(&op, 10_000);
        short.nonce = "abc".into();
        assert_eq!(v(&sign("key", &short), 9_000), AssertionError::Malformed);
    }
}

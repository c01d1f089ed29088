//! The API key lifecycle: issue (with an optional expiry), rotate, revoke. A key is a random secret
//! shown once and a public id (`key_…`) that names it everywhere else; the ledger keeps only the
//! secret's SHA-256. `payonce keys …` (the binary's `keys` module) is the front end.

use crate::auth::sha256_hex;
use payonce_core::clock::Timestamp;
use payonce_core::id::{TenantId, random_hex};
use payonce_ledger::{ApiKeyRecord, Keys, LedgerError, LimitError, RevokeKey, Role, RotateKey};
use std::time::Duration;

/// Bytes of randomness in a key secret (256 bits).
const KEY_RANDOM_BYTES: usize = 32;
/// Bytes of randomness in a public key id (64 bits: unique among a tenant's keys, not a secret).
const KEY_ID_RANDOM_BYTES: usize = 8;
/// Longest key label stored.
pub const LABEL_LEN_MAX: usize = 100;
/// Longest revocation reason or actor stored.
pub const REASON_LEN_MAX: usize = 500;
/// Longest lifetime a key may be given (`--expires-in`, rotation grace): ten years.
pub const KEY_LIFETIME_MAX: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// How long a rotated key keeps working by default, so deployments can switch to the new secret
/// without an outage; `--grace 0s` ends it at once.
pub const ROTATION_GRACE_DEFAULT: Duration = Duration::from_secs(3600);
/// Longest `keys list` answer.
pub const LIST_MAX: u32 = 1_000;

/// A key just issued: its public id and its secret (shown once, never stored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedKey {
    /// The public id (`key_…`).
    pub key_id: String,
    /// The bearer secret (`po_<role>_<64 hex>`).
    pub secret: String,
    /// The stored record (hash only).
    pub record: ApiKeyRecord,
}

/// What a rotation did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rotated {
    /// The new key.
    pub new: IssuedKey,
    /// The old key's id.
    pub old_id: String,
    /// When the old key stops working, ms.
    pub old_until: Timestamp,
}

/// Why a key command was refused.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// A label, reason or duration is outside its limits.
    #[error("{0}")]
    Invalid(String),
    /// No key has that id.
    #[error("no API key has the id {0:?}")]
    UnknownKey(String),
    /// Rotation of a key that is revoked, expired or already rotated.
    #[error(
        "API key {0} is revoked, expired or already rotated; issue a new one with `keys create`"
    )]
    NotActive(String),
    /// The ledger failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

fn printable(what: &str, value: &str, max: usize) -> Result<(), KeyError> {
    if value.is_empty() || value.chars().count() > max || value.chars().any(char::is_control) {
        return Err(KeyError::Invalid(format!(
            "{what} must be 1 to {max} printable characters"
        )));
    }
    Ok(())
}

/// Parses a lifetime such as `90d`, `12h`, `30m` or `45s` (1 s to [`KEY_LIFETIME_MAX`]; `0s` only
/// where `allow_zero`).
pub fn parse_lifetime(raw: &str, allow_zero: bool) -> Result<Duration, KeyError> {
    let bad = || {
        KeyError::Invalid(format!(
            "{raw:?} is not a duration: a whole number and a unit, s, m, h or d (e.g. 90d), \
             at most {} days",
            KEY_LIFETIME_MAX.as_secs() / 86_400
        ))
    };
    let raw_trimmed = raw.trim();
    let split = raw_trimmed.len().checked_sub(1).ok_or_else(bad)?;
    let (digits, unit) = raw_trimmed.split_at(split);
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) || digits.len() > 12 {
        return Err(bad());
    }
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let unit_s: u64 = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    let d = Duration::from_secs(n.checked_mul(unit_s).ok_or_else(bad)?);
    if d > KEY_LIFETIME_MAX || (d.is_zero() && !allow_zero) {
        return Err(bad());
    }
    Ok(d)
}

fn new_key(
    tenant: &TenantId,
    role: Role,
    label: &str,
    expires_in: Option<Duration>,
    now: Timestamp,
) -> Result<IssuedKey, KeyError> {
    printable("a key label", label, LABEL_LEN_MAX)?;
    if let Some(d) = expires_in
        && (d.is_zero() || d > KEY_LIFETIME_MAX)
    {
        return Err(KeyError::Invalid(format!(
            "a key's lifetime must be 1 s to {} days",
            KEY_LIFETIME_MAX.as_secs() / 86_400
        )));
    }
    let secret = format!("po_{}_{}", role.as_str(), random_hex(KEY_RANDOM_BYTES));
    let key_id = format!("key_{}", random_hex(KEY_ID_RANDOM_BYTES));
    let record = ApiKeyRecord {
        key_id: key_id.clone(),
        key_hash: sha256_hex(&secret),
        tenant: tenant.clone(),
        role,
        label: label.to_string(),
        created_at: now,
        expires_at: expires_in.map(|d| now + d),
        revoked_at: None,
        revoked_by: None,
        revoked_reason: None,
        replaced_by: None,
        last_used_at: None,
        read_only: false,
    };
    Ok(IssuedKey {
        key_id,
        secret,
        record,
    })
}

/// Issues a key for `tenant` with `role`, expiring after `expires_in` (never if `None`); stores its
/// hash and returns the secret (shown once) with the public id.
pub async fn issue(
    ledger: &dyn Keys,
    tenant: &TenantId,
    role: Role,
    label: &str,
    expires_in: Option<Duration>,
    now: Timestamp,
) -> Result<IssuedKey, KeyError> {
    let key = new_key(tenant, role, label, expires_in, now)?;
    ledger.insert_api_key(&key.record).await?;
    Ok(key)
}

/// Makes a new never-expiring key for `tenant` with `role`, stores its hash, and returns the secret
/// (shown once). [`issue`] also sets an expiry and returns the key's public id.
pub async fn create_api_key(
    ledger: &dyn Keys,
    tenant: &TenantId,
    role: Role,
    label: &str,
    now: Timestamp,
) -> Result<String, LedgerError> {
    match issue(ledger, tenant, role, label, None, now).await {
        Ok(key) => Ok(key.secret),
        Err(KeyError::Ledger(e)) => Err(e),
        Err(other) => Err(LimitError::ApiKey(other.to_string()).into()),
    }
}

/// Issues a read-only on-call key for `tenant`: it signs in to the console and reads what any
/// on-call key reads, and every route that resolves or approves refuses it (`403 forbidden`).
pub async fn issue_read_only(
    ledger: &dyn Keys,
    tenant: &TenantId,
    label: &str,
    expires_in: Option<Duration>,
    now: Timestamp,
) -> Result<IssuedKey, KeyError> {
    let mut key = new_key(tenant, Role::OnCall, label, expires_in, now)?;
    key.record.read_only = true;
    ledger.insert_api_key(&key.record).await?;
    Ok(key)
}

/// Replaces the active key `old_id` with a new one of the same tenant, role and label (expiring
/// after `expires_in`, or never); the old key keeps working for `grace` (0: stops at once), or
/// until its own earlier expiry. One transaction: a failed rotation changes nothing.
pub async fn rotate(
    ledger: &dyn Keys,
    old_id: &str,
    expires_in: Option<Duration>,
    grace: Duration,
    now: Timestamp,
) -> Result<Rotated, KeyError> {
    if grace > KEY_LIFETIME_MAX {
        return Err(KeyError::Invalid("the rotation grace is too long".into()));
    }
    let old = ledger
        .api_key(old_id)
        .await?
        .ok_or_else(|| KeyError::UnknownKey(old_id.to_string()))?;
    if !old.is_active(now) || old.replaced_by.is_some() {
        return Err(KeyError::NotActive(old_id.to_string()));
    }
    let mut new = new_key(&old.tenant, old.role, &old.label, expires_in, now)?;
    // A rotation never widens what the key may do.
    new.record.read_only = old.read_only;
    let old_until_ms = now + grace;
    match ledger
        .rotate_api_key(
            &RotateKey {
                old_id,
                new: &new.record,
                old_until: old_until_ms,
            },
            now,
        )
        .await
    {
        Ok(true) => Ok(Rotated {
            new,
            old_id: old_id.to_string(),
            old_until: old.expires_at.map_or(old_until_ms, |e| e.min(old_until_ms)),
        }),
        Ok(false) => Err(KeyError::NotActive(old_id.to_string())),
        Err(LedgerError::NotFound) => Err(KeyError::UnknownKey(old_id.to_string())),
        Err(e) => Err(e.into()),
    }
}

/// Revokes `key_id` at once. `Ok(false)`: it was already revoked.
pub async fn revoke(
    ledger: &dyn Keys,
    key_id: &str,
    revoked_by: &str,
    reason: &str,
    now: Timestamp,
) -> Result<bool, KeyError> {
    printable("the revoking actor", revoked_by, REASON_LEN_MAX)?;
    printable("a revocation reason", reason, REASON_LEN_MAX)?;
    match ledger
        .revoke_api_key(
            &RevokeKey {
                key_id,
                revoked_by,
                reason,
            },
            now,
        )
        .await
    {
        Err(LedgerError::NotFound) => Err(KeyError::UnknownKey(key_id.to_string())),
        other => Ok(other?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetimes_are_a_number_and_a_unit_within_the_limit() {
        assert_eq!(
            parse_lifetime("90d", false).unwrap(),
            Duration::from_secs(90 * 86_400)
        );
        assert_eq!(
            parse_lifetime("12h", false).unwrap(),
            Duration::from_secs(43_200)
        );
        assert_eq!(
            parse_lifetime("30m", false).unwrap(),
            Duration::from_secs(1_800)
        );
        assert_eq!(
            parse_lifetime("45s", false).unwrap(),
            Duration::from_secs(45)
        );
        assert_eq!(parse_lifetime("0s", true).unwrap(), Duration::ZERO);
        let max_days = KEY_LIFETIME_MAX.as_secs() / 86_400;
        assert!(parse_lifetime(&format!("{max_days}d"), false).is_ok());
        for bad in [
            "",
            "d",
            "0s",
            "-1d",
            "1.5h",
            "10",
            "10w",
            "1 d",
            "99999999999999999d",
            &format!("{}d", max_days + 1),
        ] {
            assert!(parse_lifetime(bad, false).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn a_new_key_has_a_public_id_and_stores_only_the_hash() {
        let tenant = TenantId::parse("acme").unwrap();
        let at = Timestamp::from_millis;
        let key = new_key(&tenant, Role::Service, "billing", None, at(1_000)).unwrap();
        assert!(key.key_id.starts_with("key_") && key.key_id.len() == 4 + 16);
        assert!(key.secret.starts_with("po_service_"));
        assert_eq!(key.record.key_hash, sha256_hex(&key.secret));
        assert!(!key.record.key_hash.contains(&key.secret));
        assert!(!key.key_id.contains(&key.secret[11..27]));
        assert_eq!(key.record.expires_at, None);
        let expiring = new_key(
            &tenant,
            Role::Service,
            "billing",
            Some(Duration::from_secs(2)),
            at(1_000),
        )
        .unwrap();
        assert_eq!(expiring.record.expires_at, Some(at(3_000)));
        assert!(expiring.record.is_active(at(2_999)) && !expiring.record.is_active(at(3_000)));
        for label in ["", "a\nb", &"x".repeat(LABEL_LEN_MAX + 1)] {
            assert!(new_key(&tenant, Role::Service, label, None, at(0)).is_err());
        }
        assert!(new_key(&tenant, Role::Service, "x", Some(Duration::ZERO), at(0)).is_err());
    }
}

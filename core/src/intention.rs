//! The processor's idempotency key (and the operation id sent with it) comes from the intention, not
//! from a ledger row.
//!
//! A ledger that forgets a row (a restore from an older backup, an asynchronous replica promoted
//! without the primary's last commits) would otherwise issue a new operation id for the same
//! business action, and a key made from that id would charge the customer a second time. The key
//! is instead a keyed hash of the business action the trusted workflow named: the tenant, its
//! business key, and a generation that only a human decision could raise. The same business key
//! re-created after a loss derives the same key, so the processor replays its first answer inside
//! its key retention instead of paying again; re-created with other details (a recomputed total),
//! it reaches the processor under the first key, which refuses the other parameters
//! (`SubmitOutcome::KeyReused`), and a human sees both payments' facts instead of a second charge.
//! The details stay bound by the approval and travel in the request's metadata.
//!
//! Keys of the first form (`po1_`, which also hashed the details hash) stay on the rows that hold
//! them; only new rows get `po2_` keys.
//!
//! The hash is keyed ([`KeySecret`], kept in configuration, outside the ledger, so a restored
//! ledger derives the same keys) because processors share keys across an account's API users and
//! advise unguessable ones: a plain hash of a business key would let anyone who knows an invoice
//! number pre-empt or probe its payment. The ledger keeps the secret's [`KeySecret::fingerprint`]
//! so a process started with another secret refuses to run (`ledger::identity`).

use crate::id::{BusinessKey, IdempotencyKey, OperationId, TenantId};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// Shortest key secret accepted, in characters (32 random characters carry ≥ 128 bits as base64 or hex).
pub const KEY_SECRET_LEN_MIN: usize = 32;
/// Longest key secret accepted, in characters.
pub const KEY_SECRET_LEN_MAX: usize = 512;
/// Prefix of an intention key; the version names the derivation below (tenant, business key,
/// generation).
pub const INTENTION_KEY_PREFIX: &str = "po2_";
/// Prefix of the first form of intention keys (tenant, business key, details hash, generation),
/// still held by rows created before `po2_`.
pub const INTENTION_KEY_V1_PREFIX: &str = "po1_";
/// Prefix of a key secret's fingerprint.
pub const FINGERPRINT_PREFIX: &str = "kf1_";
const _: () = assert!(INTENTION_KEY_PREFIX.len() == INTENTION_KEY_V1_PREFIX.len());
/// Bytes of the HMAC kept in a key: 160 bits, 40 hex digits, so `po1_` + 40 = 44 characters fits every
/// processor's limit (Stripe 255, Adyen 64).
const INTENTION_KEY_BYTES: usize = 20;
/// Length of an intention key.
pub const INTENTION_KEY_LEN: usize = INTENTION_KEY_PREFIX.len() + 2 * INTENTION_KEY_BYTES;
/// Whether `key` is an intention key of either form (its row's id was derived, and its requests
/// carry the intention in their metadata).
pub fn is_intention_key(key: &IdempotencyKey) -> bool {
    let key = key.as_str();
    key.starts_with(INTENTION_KEY_PREFIX) || key.starts_with(INTENTION_KEY_V1_PREFIX)
}

/// The shortest key limit of the processors payonce knows (Adyen: 64 characters; Stripe: 255).
pub const PROCESSOR_KEY_LEN_MAX: usize = 64;
const _: () = assert!(INTENTION_KEY_LEN <= PROCESSOR_KEY_LEN_MAX);

/// Why a key secret was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeySecretError {
    /// None was configured where operations are created.
    #[error(
        "no key secret is configured: set PAYONCE_KEY_SECRET (or --key-secret) to at least \
         {KEY_SECRET_LEN_MIN} random characters, the same on every api and reconciler of this \
         ledger, and keep it outside the ledger's backups (e.g. `openssl rand -hex 32`)"
    )]
    Missing,
    /// Too short or too long.
    #[error(
        "the key secret must be {KEY_SECRET_LEN_MIN} to {KEY_SECRET_LEN_MAX} characters, not {0}"
    )]
    Length(usize),
}

/// The secret of the keyed hash that derives processor keys. It never leaves the process; its
/// `Debug` shows nothing of it.
#[derive(Clone, PartialEq, Eq)]
pub struct KeySecret(String);

impl std::fmt::Debug for KeySecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeySecret(..)")
    }
}

impl KeySecret {
    /// Parses a configured secret: [`KEY_SECRET_LEN_MIN`]..=[`KEY_SECRET_LEN_MAX`] characters.
    pub fn parse(raw: &str) -> Result<Self, KeySecretError> {
        let len = raw.chars().count();
        if raw.is_empty() {
            return Err(KeySecretError::Missing);
        }
        if !(KEY_SECRET_LEN_MIN..=KEY_SECRET_LEN_MAX).contains(&len) {
            return Err(KeySecretError::Length(len));
        }
        Ok(KeySecret(raw.to_string()))
    }

    /// A fresh random secret (64 hex digits), for a quick-start ledger that keeps it in a file.
    pub fn generate() -> Self {
        KeySecret(crate::id::random_hex(32))
    }

    /// The secret's text, to be saved where it is kept (a mode-0600 file); never logged.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The operation id of a tenant's business key: `op_` + 32 hex digits of a keyed hash, as
    /// unguessable as a random id without the secret, and the same again when a ledger that lost
    /// the row creates the business key anew, so the processor sees the very same request (Stripe
    /// refuses a key whose parameters, metadata included, changed) and replays its first answer.
    pub fn operation_id_for(&self, tenant: &TenantId, business_key: &BusinessKey) -> OperationId {
        let digest = self.mac(
            b"payonce-operation-id-v1",
            &[tenant.as_str(), business_key.as_str()],
            0,
        );
        let id = format!("op_{}", hex::encode(&digest[..16]));
        // 32 lowercase hex digits after `op_` is exactly the id shape.
        #[allow(clippy::expect_used)]
        OperationId::parse(&id).expect("a derived operation id is a valid id")
    }

    fn mac(&self, domain: &[u8], fields: &[&str], generation: u32) -> Vec<u8> {
        // HMAC takes keys of any length, so this cannot fail.
        #[allow(clippy::expect_used)]
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(self.0.as_bytes())
            .expect("HMAC accepts any key length");
        mac.update(domain);
        for field in fields {
            mac.update(&(field.len() as u64).to_be_bytes());
            mac.update(field.as_bytes());
        }
        mac.update(&generation.to_be_bytes());
        mac.finalize().into_bytes().to_vec()
    }

    /// The fingerprint the ledger keeps of this secret: `kf1_` + 32 hex digits of an HMAC of a
    /// fixed label. It tells two secrets apart and says nothing of either.
    pub fn fingerprint(&self) -> String {
        let digest = self.mac(b"payonce-key-secret-fingerprint-v1", &[], 0);
        format!("{FINGERPRINT_PREFIX}{}", hex::encode(&digest[..16]))
    }

    /// Whether this secret derived `id` from `tenant` and `business_key`.
    pub fn derived(&self, id: &OperationId, tenant: &TenantId, business_key: &BusinessKey) -> bool {
        &self.operation_id_for(tenant, business_key) == id
    }

    /// The processor key of one intention: HMAC-SHA256 over length-prefixed tenant, business key
    /// and generation, truncated to [`INTENTION_KEY_BYTES`]. Not the details: the key names the
    /// business action, so other details under a business key the ledger lost reach the
    /// processor under the first key and are refused there.
    pub fn key_for(&self, intention: &Intention<'_>) -> IdempotencyKey {
        let digest = self.mac(
            b"payonce-intention-key-v2",
            &[intention.tenant.as_str(), intention.business_key.as_str()],
            intention.generation,
        );
        let key = format!(
            "{INTENTION_KEY_PREFIX}{}",
            hex::encode(&digest[..INTENTION_KEY_BYTES])
        );
        // The prefix and hex digits are token characters and the length is fixed below every limit.
        #[allow(clippy::expect_used)]
        IdempotencyKey::parse(&key).expect("an intention key is a valid idempotency key")
    }
}

/// What one processor key stands for: the business action, not the row that records it.
#[derive(Debug, Clone, Copy)]
pub struct Intention<'a> {
    /// The tenant, from the authenticated key.
    pub tenant: &'a TenantId,
    /// The trusted workflow's key for the action.
    pub business_key: &'a BusinessKey,
    /// 0 for every operation today; only an explicit human decision to pay the same intention again
    /// after a definitive failure may raise it (nothing does yet: such a retry is a new business key).
    pub generation: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_business_action_derives_the_same_key_and_any_change_another() {
        let secret = KeySecret::parse(&"s".repeat(KEY_SECRET_LEN_MIN)).unwrap();
        let (t, b) = (
            TenantId::parse("acme").unwrap(),
            BusinessKey::parse("invoice:INV-2048:pay").unwrap(),
        );
        let base = Intention {
            tenant: &t,
            business_key: &b,
            generation: 0,
        };
        let key = secret.key_for(&base);
        assert_eq!(secret.key_for(&base), key, "stable");
        assert_eq!(key.as_str().len(), INTENTION_KEY_LEN);
        assert!(key.as_str().starts_with(INTENTION_KEY_PREFIX));
        assert!(is_intention_key(&key));

        let (t2, b2) = (
            TenantId::parse("acme2").unwrap(),
            BusinessKey::parse("invoice:INV-2049:pay").unwrap(),
        );
        let others = [
            Intention {
                tenant: &t2,
                ..base
            },
            Intention {
                business_key: &b2,
                ..base
            },
            Intention {
                generation: 1,
                ..base
            },
        ];
        for other in others {
            assert_ne!(secret.key_for(&other), key, "{other:?}");
        }
        let other_secret = KeySecret::parse(&"t".repeat(KEY_SECRET_LEN_MIN)).unwrap();
        assert_ne!(
            other_secret.key_for(&base),
            key,
            "keyed: another secret, another key"
        );
    }

    #[test]
    fn operation_ids_come_from_the_tenant_and_business_key() {
        let secret = KeySecret::generate();
        let (t, b) = (
            TenantId::parse("acme").unwrap(),
            BusinessKey::parse("invoice:INV-2048:pay").unwrap(),
        );
        let id = secret.operation_id_for(&t, &b);
        assert_eq!(secret.operation_id_for(&t, &b), id, "stable");
        assert!(secret.derived(&id, &t, &b));
        let other = TenantId::parse("acme2").unwrap();
        assert_ne!(secret.operation_id_for(&other, &b), id);
        assert!(!secret.derived(&id, &other, &b));
        let another = KeySecret::generate();
        assert_ne!(another.operation_id_for(&t, &b), id, "keyed");
        assert!(!another.derived(&id, &t, &b));
    }

    #[test]
    fn fingerprints_tell_secrets_apart_and_show_neither() {
        let raw = "f".repeat(KEY_SECRET_LEN_MIN);
        let secret = KeySecret::parse(&raw).unwrap();
        let fingerprint = secret.fingerprint();
        assert_eq!(secret.fingerprint(), fingerprint, "stable");
        assert!(fingerprint.starts_with(FINGERPRINT_PREFIX));
        assert_eq!(fingerprint.len(), FINGERPRINT_PREFIX.len() + 32);
        assert!(!fingerprint.contains(&raw[..8]));
        assert_ne!(KeySecret::generate().fingerprint(), fingerprint);
        // Not the key of any intention: a fingerprint is no processor key.
        let (t, b) = (
            TenantId::parse("a").unwrap(),
            BusinessKey::parse("b").unwrap(),
        );
        let key = secret.key_for(&Intention {
            tenant: &t,
            business_key: &b,
            generation: 0,
        });
        assert!(
            !key.as_str()
                .contains(&fingerprint[FINGERPRINT_PREFIX.len()..])
        );
    }

    #[test]
    fn both_key_forms_are_intention_keys_and_a_legacy_key_is_not() {
        let v1 =
            IdempotencyKey::parse(&format!("{INTENTION_KEY_V1_PREFIX}{}", "a".repeat(40))).unwrap();
        let v2 =
            IdempotencyKey::parse(&format!("{INTENTION_KEY_PREFIX}{}", "a".repeat(40))).unwrap();
        let legacy = IdempotencyKey::parse("payonce-op_0123456789abcdef0123456789abcdef").unwrap();
        assert!(is_intention_key(&v1));
        assert!(is_intention_key(&v2));
        assert!(!is_intention_key(&legacy));
    }

    #[test]
    fn field_boundaries_cannot_be_shifted() {
        // "ab" + "c" and "a" + "bc" must not collide: every field is length-prefixed.
        let secret = KeySecret::generate();
        let (t1, b1) = (
            TenantId::parse("ab").unwrap(),
            BusinessKey::parse("c").unwrap(),
        );
        let (t2, b2) = (
            TenantId::parse("a").unwrap(),
            BusinessKey::parse("bc").unwrap(),
        );
        let one = Intention {
            tenant: &t1,
            business_key: &b1,
            generation: 0,
        };
        let two = Intention {
            tenant: &t2,
            business_key: &b2,
            ..one
        };
        assert_ne!(secret.key_for(&one), secret.key_for(&two));
    }

    #[test]
    fn secrets_are_bounded_and_never_printed() {
        assert_eq!(KeySecret::parse(""), Err(KeySecretError::Missing));
        assert_eq!(
            KeySecret::parse(&"s".repeat(KEY_SECRET_LEN_MIN - 1)),
            Err(KeySecretError::Length(KEY_SECRET_LEN_MIN - 1))
        );
        assert_eq!(
            KeySecret::parse(&"s".repeat(KEY_SECRET_LEN_MAX + 1)),
            Err(KeySecretError::Length(KEY_SECRET_LEN_MAX + 1))
        );
        let secret = KeySecret::parse(&"x".repeat(KEY_SECRET_LEN_MAX)).unwrap();
        assert!(!format!("{secret:?}").contains('x'));
        assert_eq!(KeySecret::generate().expose().len(), 64);
    }
}

//! Identifiers parsed at the boundary: operation ids (app-issued, unguessable), tenants, business keys,
//! idempotency keys.

use serde::{Deserialize, Serialize};

/// Longest tenant id accepted.
pub const TENANT_ID_LEN_MAX: usize = 64;
/// Longest business key accepted (invoice + purpose, checkout session, ...).
pub const BUSINESS_KEY_LEN_MAX: usize = 200;
/// Longest idempotency key accepted: Stripe's limit.
pub const IDEMPOTENCY_KEY_LEN_MAX: usize = 255;
/// Prefix of the keys of operations created before issue 37 (`payonce-` + operation id).
pub const LEGACY_KEY_PREFIX: &str = "payonce-";
/// Bytes of randomness in an operation id (128 bits).
const OPERATION_ID_RANDOM_BYTES: usize = 16;

/// Why an identifier was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// Wrong shape.
    #[error("{what} {value:?} is malformed: {why}")]
    Malformed {
        /// Which kind of identifier.
        what: &'static str,
        /// The offending input (truncated).
        value: String,
        /// What shape was expected.
        why: &'static str,
    },
}

fn malformed(what: &'static str, value: &str, why: &'static str) -> IdError {
    IdError::Malformed {
        what,
        value: value.chars().take(80).collect(),
        why,
    }
}

/// Random bytes from the operating system; panics only if the OS has no entropy source, which is not recoverable.
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0_u8; bytes];
    #[allow(clippy::expect_used)]
    getrandom::fill(&mut buf).expect("the operating system's random source is unavailable");
    hex::encode(buf)
}

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | '/')
}

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// The identifier as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<$name> for String {
            fn from(v: $name) -> String {
                v.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(v: String) -> Result<Self, IdError> {
                $name::parse(&v)
            }
        }
    };
}

string_id!(
    /// An operation's identity: `op_` + 32 lowercase hex digits (128 random bits), issued by payonce.
    OperationId
);
string_id!(
    /// A tenant: the scope of every query, taken from the authenticated key, never from tool arguments.
    TenantId
);
string_id!(
    /// The trusted workflow's key for one intended action, unique per tenant (e.g. `invoice:INV-2048:pay`).
    BusinessKey
);
string_id!(
    /// The key forwarded to the processor: derived once from the intention (`crate::intention`),
    /// stored, never regenerated.
    IdempotencyKey
);

impl OperationId {
    /// Issues a fresh, unguessable id.
    pub fn generate() -> Self {
        OperationId(format!("op_{}", random_hex(OPERATION_ID_RANDOM_BYTES)))
    }

    /// Parses an id from untrusted input.
    pub fn parse(raw: &str) -> Result<Self, IdError> {
        let hex_part = raw
            .strip_prefix("op_")
            .ok_or_else(|| malformed("operation id", raw, "must start with op_"))?;
        if hex_part.len() != OPERATION_ID_RANDOM_BYTES * 2
            || !hex_part
                .chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
        {
            return Err(malformed(
                "operation id",
                raw,
                "must be op_ followed by 32 lowercase hex digits",
            ));
        }
        Ok(OperationId(raw.to_string()))
    }
}

impl TenantId {
    /// Parses a tenant id: 1..=64 chars of `[A-Za-z0-9_-]`.
    pub fn parse(raw: &str) -> Result<Self, IdError> {
        if raw.is_empty() || raw.len() > TENANT_ID_LEN_MAX {
            return Err(malformed("tenant id", raw, "must be 1 to 64 characters"));
        }
        if !raw
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(malformed(
                "tenant id",
                raw,
                "may hold only letters, digits, _ and -",
            ));
        }
        Ok(TenantId(raw.to_string()))
    }
}

impl BusinessKey {
    /// Parses a business key: 1..=200 printable token characters (`[A-Za-z0-9_.:/-]`).
    pub fn parse(raw: &str) -> Result<Self, IdError> {
        if raw.is_empty() || raw.len() > BUSINESS_KEY_LEN_MAX {
            return Err(malformed(
                "business key",
                raw,
                "must be 1 to 200 characters",
            ));
        }
        if !raw.chars().all(is_token_char) {
            return Err(malformed(
                "business key",
                raw,
                "may hold only letters, digits and _ - . : /",
            ));
        }
        Ok(BusinessKey(raw.to_string()))
    }
}

impl IdempotencyKey {
    /// The operation a key of the first form (`payonce-` + the operation id, before issue 37) names;
    /// rows created then keep that key, and an intention key names no operation.
    pub fn legacy_operation(raw: &str) -> Option<OperationId> {
        OperationId::parse(raw.strip_prefix(LEGACY_KEY_PREFIX)?).ok()
    }

    /// Parses a stored key.
    pub fn parse(raw: &str) -> Result<Self, IdError> {
        if raw.is_empty() || raw.len() > IDEMPOTENCY_KEY_LEN_MAX {
            return Err(malformed(
                "idempotency key",
                raw,
                "must be 1 to 255 characters",
            ));
        }
        if !raw.chars().all(is_token_char) {
            return Err(malformed(
                "idempotency key",
                raw,
                "may hold only letters, digits and _ - . : /",
            ));
        }
        Ok(IdempotencyKey(raw.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_operation_ids_parse_and_differ() {
        let a = OperationId::generate();
        let b = OperationId::generate();
        assert_ne!(a, b);
        assert_eq!(OperationId::parse(a.as_str()).unwrap(), a);
        assert_eq!(a.as_str().len(), 3 + 32);
    }

    #[test]
    fn malformed_operation_ids_are_refused() {
        for bad in [
            "",
            "op_",
            "op_123",
            "pi_0123456789abcdef0123456789abcdef",
            "op_0123456789ABCDEF0123456789ABCDEF",
        ] {
            assert!(OperationId::parse(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn tenant_and_business_key_limits() {
        assert!(TenantId::parse("acme").is_ok());
        assert!(TenantId::parse(&"a".repeat(TENANT_ID_LEN_MAX)).is_ok());
        assert!(TenantId::parse(&"a".repeat(TENANT_ID_LEN_MAX + 1)).is_err());
        assert!(TenantId::parse("a b").is_err());
        assert!(BusinessKey::parse("invoice:INV-2048:pay").is_ok());
        assert!(BusinessKey::parse(&"k".repeat(BUSINESS_KEY_LEN_MAX + 1)).is_err());
        assert!(BusinessKey::parse("inv 1").is_err());
    }

    #[test]
    fn idempotency_keys_are_bounded_and_legacy_keys_name_their_operation() {
        let op = OperationId::generate();
        let legacy = format!("{LEGACY_KEY_PREFIX}{op}");
        assert!(IdempotencyKey::parse(&legacy).is_ok());
        assert_eq!(IdempotencyKey::legacy_operation(&legacy), Some(op));
        assert_eq!(IdempotencyKey::legacy_operation("po1_00"), None);
        assert!(IdempotencyKey::parse(&"k".repeat(IDEMPOTENCY_KEY_LEN_MAX + 1)).is_err());
    }
}

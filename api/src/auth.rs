//! Bearer API keys. A key is a random secret shown once; the ledger keeps only its SHA-256. A request's
//! tenant and role come from its key, never from its arguments.

use crate::app::AppState;
use crate::errors::{ErrorCode, HttpError};
use axum::extract::{FromRequestParts, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use payonce_shared::id::{TenantId, random_hex};
use payonce_shared::ledger::{ApiKeyRecord, LedgerError, Role, SharedLedger};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Bytes of randomness in a key secret (256 bits).
const KEY_RANDOM_BYTES: usize = 32;
/// Longest `Authorization` value considered; anything longer is refused without hashing.
pub const KEY_LEN_MAX: usize = 128;
/// Longest key label stored.
pub const LABEL_LEN_MAX: usize = 100;

/// Who is calling: the tenant and role of an authenticated key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// Every query is scoped to it.
    pub tenant: TenantId,
    /// What the key may do.
    pub role: Role,
    /// The key's label, for the audit trail.
    pub label: String,
}

impl Caller {
    /// The audit-trail actor: `service:billing`, `assistant:support-bot`.
    pub fn actor(&self) -> String {
        format!("{}:{}", self.role.as_str(), self.label)
    }

    /// Refuses unless the caller's role is one of `allowed`.
    pub fn require(&self, allowed: &[Role], what: &str) -> Result<(), HttpError> {
        if allowed.contains(&self.role) {
            Ok(())
        } else {
            Err(HttpError::forbidden(what))
        }
    }
}

/// SHA-256 hex of a secret (API keys, confirmation-link tokens).
pub fn sha256_hex(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Makes a new key for `tenant` with `role`, stores its hash, and returns the secret (shown once).
pub async fn create_api_key(
    ledger: &SharedLedger,
    tenant: &TenantId,
    role: Role,
    label: &str,
    now_ms: i64,
) -> Result<String, LedgerError> {
    if label.is_empty()
        || label.chars().count() > LABEL_LEN_MAX
        || label.chars().any(char::is_control)
    {
        return Err(LedgerError::Limit(format!(
            "a key label must be 1 to {LABEL_LEN_MAX} printable characters"
        )));
    }
    let secret = format!("po_{}_{}", role.as_str(), random_hex(KEY_RANDOM_BYTES));
    let record = ApiKeyRecord {
        key_hash: sha256_hex(&secret),
        tenant: tenant.clone(),
        role,
        label: label.to_string(),
        created_at_ms: now_ms,
    };
    ledger.insert_api_key(&record).await?;
    Ok(secret)
}

fn unauthorized(why: &str) -> HttpError {
    HttpError::new(ErrorCode::Unauthorized, why)
}

/// Authenticates the `Authorization: Bearer` header of a request.
pub async fn authenticate(state: &AppState, parts: &Parts) -> Result<Caller, HttpError> {
    let header = parts
        .headers
        .get(AUTHORIZATION)
        .ok_or_else(|| unauthorized("send an API key as `Authorization: Bearer <key>`"))?;
    let value = header
        .to_str()
        .map_err(|_| unauthorized("the Authorization header is not ASCII"))?;
    let secret = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
        .ok_or_else(|| unauthorized("the Authorization header must be `Bearer <key>`"))?
        .trim();
    if secret.is_empty() || secret.len() > KEY_LEN_MAX {
        return Err(unauthorized("unknown or revoked API key"));
    }
    let digest = sha256_hex(secret);
    let record = state
        .ledger()
        .find_api_key(&digest)
        .await?
        .ok_or_else(|| unauthorized("unknown or revoked API key"))?;
    // The store looked the row up by digest; compare again in constant time so a store that matched
    // loosely (collation, truncation) can never let a different key through.
    if !bool::from(record.key_hash.as_bytes().ct_eq(digest.as_bytes())) {
        return Err(unauthorized("unknown or revoked API key"));
    }
    Ok(Caller {
        tenant: record.tenant,
        role: record.role,
        label: record.label,
    })
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = HttpError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        if let Some(caller) = parts.extensions.get::<Caller>() {
            return Ok(caller.clone());
        }
        authenticate(state, parts).await
    }
}

/// Middleware for routes whose handlers are not axum extractors (MCP): authenticates, checks the
/// role is assistant or service, and leaves the [`Caller`] in the request's extensions.
pub async fn require_tool_caller(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let (mut parts, body) = request.into_parts();
    let caller = match authenticate(&state, &parts).await {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = caller.require(
        &[Role::Assistant, Role::Service],
        "call the assistant's tools",
    ) {
        return e.into_response();
    }
    parts.extensions.insert(caller);
    next.run(Request::from_parts(parts, body)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_sha256_hex() {
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}

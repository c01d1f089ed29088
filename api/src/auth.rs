//! Bearer API keys at request time. A key is a random secret shown once; the ledger keeps only its
//! SHA-256 (`keys` issues, rotates and revokes them). A request's tenant and role come from its key,
//! never from its arguments.

use crate::errors::{ErrorCode, HttpError};
use crate::state::AppState;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use payonce_core::id::TenantId;
use payonce_ledger::Role;
use sha2::{Digest, Sha256};
use std::time::Duration;
use subtle::ConstantTimeEq;

/// Longest `Authorization` value considered; anything longer is refused without hashing.
pub const KEY_LEN_MAX: usize = 128;
/// How precisely a key's last use is recorded: an accepted request writes `last_used_at` only when
/// the stored one is older than this, so a busy key costs one write a minute, not one per request.
pub const LAST_USED_RESOLUTION: Duration = Duration::from_secs(60);

/// Who is calling: the tenant and role of an authenticated key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// Every query is scoped to it.
    pub tenant: TenantId,
    /// What the key may do.
    pub role: Role,
    /// The key's label, for the audit trail.
    pub label: String,
    /// A read-only on-call key: reads what its role reads, changes nothing.
    pub read_only: bool,
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

    /// Refuses a read-only key (`what`: the change it asked for).
    pub fn require_writer(&self, what: &str) -> Result<(), HttpError> {
        if self.read_only {
            Err(HttpError::new(
                crate::errors::ErrorCode::Forbidden,
                format!("this key is read-only: it may not {what} (it reads and changes nothing)"),
            ))
        } else {
            Ok(())
        }
    }
}

/// SHA-256 hex of a secret (API keys, confirmation-link tokens).
pub fn sha256_hex(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
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
    // One answer for unknown, revoked and expired keys: a caller learns nothing about which.
    let refused = || unauthorized("unknown, revoked or expired API key");
    if secret.is_empty() || secret.len() > KEY_LEN_MAX {
        return Err(refused());
    }
    let digest = sha256_hex(secret);
    // Read from the ledger for every request (no cache), so a revocation or expiry takes effect at
    // once in every api process. Requests of one key that arrive while its read is in flight share
    // the next read, which starts after they arrived (`shared_reads`).
    let read = {
        let (state, digest) = (state.clone(), digest.clone());
        move || {
            let (state, digest) = (state.clone(), digest.clone());
            async move { Ok(state.ledger().find_api_key(&digest, state.now()).await?) }
        }
    };
    let record = state
        .key_reads()
        .read(digest.clone(), read)
        .await?
        .ok_or_else(refused)?;
    let now = state.now();
    // The store looked the row up by digest; compare again in constant time so a store that matched
    // loosely (collation, truncation) can never let a different key through. The expiry is checked
    // again here against the same clock.
    if !bool::from(record.key_hash.as_bytes().ct_eq(digest.as_bytes())) || !record.is_active(now) {
        return Err(refused());
    }
    if record
        .last_used_at
        .is_none_or(|at| at <= now.saturating_sub_span(LAST_USED_RESOLUTION))
        && let Err(error) = state
            .ledger()
            .touch_api_key(&record.key_id, now, LAST_USED_RESOLUTION)
            .await
    {
        // Bookkeeping only: the key was valid, so the request goes on.
        tracing::warn!(%error, key_id = %record.key_id, "could not record an API key's last use");
    }
    Ok(Caller {
        tenant: record.tenant,
        role: record.role,
        label: record.label,
        read_only: record.read_only,
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

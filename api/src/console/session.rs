//! Console sessions: an on-call key signs in once; the browser then holds a random session id in an
//! HttpOnly, SameSite=Strict cookie (Secure when the base URL is https). The ledger stores only the
//! id's SHA-256, so several api processes share sessions and a database reader cannot replay one.
//! Every request re-reads the session and the key behind it: a revoked or expired key, or a key that
//! is no longer on-call, ends the session at once, and a live session's requests record the key's last
//! use (at most once a minute). Forms carry a CSRF token derived from the session
//! id (so it is bound to the session and never stored), compared in constant time.

use crate::auth::sha256_hex;
use crate::errors::{ErrorCode, HttpError};
use crate::state::AppState;
use axum::http::HeaderMap;
use axum::http::header::COOKIE;
use payonce_core::id::{TenantId, random_hex};
use payonce_ledger::Role;
use payonce_ledger::console::ConsoleSession;
use std::time::Duration;
use subtle::ConstantTimeEq;

/// The session cookie.
pub const SESSION_COOKIE: &str = "payonce_console";
/// The sign-in form's CSRF cookie (before a session exists).
pub const SIGN_IN_COOKIE: &str = "payonce_console_sign_in";
/// How long a session lasts after sign-in (one on-call shift); it is never extended.
pub const SESSION_TTL: Duration = Duration::from_secs(8 * 3600);
/// How long a sign-in form stays usable.
pub const SIGN_IN_FORM_TTL: Duration = Duration::from_secs(15 * 60);
/// Bytes of randomness in a session id and a sign-in form token (256 bits).
const TOKEN_RANDOM_BYTES: usize = 32;
/// Longest `Cookie` header read.
const COOKIE_HEADER_MAX: usize = 4096;

/// The signed-in on-call engineer.
#[derive(Debug, Clone)]
pub struct OnCall {
    /// Every query is scoped to it.
    pub tenant: TenantId,
    /// The key's label.
    pub label: String,
    /// The stored session's hash (sign-out ends it).
    pub session_hash: String,
    /// The CSRF token every form of this session carries.
    pub csrf: String,
    /// Signed in with a read-only key: every page, no change.
    pub read_only: bool,
}

impl OnCall {
    /// Refuses a read-only session (`what`: the change it asked for).
    pub fn require_writer(&self, what: &str) -> Result<(), HttpError> {
        if self.read_only {
            Err(HttpError::new(
                ErrorCode::Forbidden,
                format!(
                    "you signed in with a read-only key: it may not {what} (it reads and changes nothing)"
                ),
            ))
        } else {
            Ok(())
        }
    }

    /// The audit-trail actor, as the API writes it for the same key: `on_call:<label>`.
    pub fn actor(&self) -> String {
        format!("{}:{}", Role::OnCall.as_str(), self.label)
    }

    /// Refuses a form whose CSRF token is not this session's.
    pub fn check_csrf(&self, sent: Option<&str>) -> Result<(), HttpError> {
        if tokens_equal(sent, &self.csrf) {
            Ok(())
        } else {
            Err(csrf_refused())
        }
    }
}

/// The 403 for a form without this session's token; nothing was changed.
pub fn csrf_refused() -> HttpError {
    HttpError::new(
        ErrorCode::Forbidden,
        "the form's CSRF token is missing or wrong; reload the page and try again (nothing was changed)",
    )
}

/// Constant-time equality of a sent token and the expected one (a missing token never matches).
pub fn tokens_equal(sent: Option<&str>, expected: &str) -> bool {
    match sent {
        Some(s) if !expected.is_empty() => bool::from(s.as_bytes().ct_eq(expected.as_bytes())),
        _ => false,
    }
}

/// A fresh random token (session ids, sign-in form tokens).
pub fn new_token() -> String {
    random_hex(TOKEN_RANDOM_BYTES)
}

/// The CSRF token of the session whose id is `session_id`.
fn csrf_of(session_id: &str) -> String {
    sha256_hex(&format!("payonce-console-csrf:{session_id}"))
}

/// The value of cookie `name` in the request, if well-formed (64 lowercase hex digits).
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter(|v| v.len() <= COOKIE_HEADER_MAX)
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
        .filter(|v| {
            v.len() == TOKEN_RANDOM_BYTES * 2
                && v.chars()
                    .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
        })
}

/// A `Set-Cookie` value: HttpOnly, SameSite=Strict, scoped to `/console`, Secure on https.
pub fn set_cookie(state: &AppState, name: &str, value: &str, max_age: Duration) -> String {
    cookie_header(
        name,
        value,
        max_age,
        state.config().base_url().starts_with("https://"),
    )
}

/// The `Set-Cookie` value itself (`secure`: the api is reached over TLS).
fn cookie_header(name: &str, value: &str, max_age: Duration, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!(
        "{name}={value}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
        max_age.as_secs()
    )
}

/// The signed-in caller of a console request, or why there is none (`unauthorized`).
pub async fn current(state: &AppState, headers: &HeaderMap) -> Result<OnCall, HttpError> {
    let signed_out = || HttpError::new(ErrorCode::Unauthorized, "sign in with an on-call key");
    let id = cookie(headers, SESSION_COOKIE).ok_or_else(signed_out)?;
    let hash = sha256_hex(&id);
    let now = state.now();
    let session = state
        .ledger()
        .console()
        .session(&hash, now)
        .await?
        .ok_or_else(signed_out)?;
    // The key is read on every request (no cache): a revocation or expiry ends the session in every
    // api process from the next request.
    let key = state.ledger().api_key(&session.key_id).await?;
    let live =
        key.filter(|k| k.is_active(now) && k.role == Role::OnCall && k.tenant == session.tenant);
    let Some(key) = live else {
        if let Err(e) = state.ledger().console().end_session(&hash, now).await {
            tracing::warn!(error = %e, "could not end a console session whose key is no longer active");
        }
        return Err(signed_out());
    };
    // Each request of a session is the key's use, recorded as a bearer request's is: at most one
    // write per `LAST_USED_RESOLUTION`, so a console refreshing itself costs one write a minute.
    if key
        .last_used_at
        .is_none_or(|at| at <= now.saturating_sub_span(crate::auth::LAST_USED_RESOLUTION))
        && let Err(error) = state
            .ledger()
            .touch_api_key(&key.key_id, now, crate::auth::LAST_USED_RESOLUTION)
            .await
    {
        tracing::warn!(%error, key_id = %key.key_id, "could not record an API key's last use");
    }
    Ok(OnCall {
        tenant: session.tenant,
        label: key.label,
        session_hash: hash,
        csrf: csrf_of(&id),
        read_only: key.read_only,
    })
}

/// Why a sign-in was refused.
#[derive(Debug)]
pub enum SignInError {
    /// Unknown, revoked or expired key (one answer for all three).
    Unknown,
    /// A valid key whose role is not on-call.
    NotOnCall,
    /// The ledger failed.
    Ledger(HttpError),
}

/// Checks an on-call key and stores a new session; returns the session id for the cookie.
pub async fn sign_in(state: &AppState, secret: &str) -> Result<String, SignInError> {
    let secret = secret.trim();
    if secret.is_empty() || secret.len() > crate::auth::KEY_LEN_MAX {
        return Err(SignInError::Unknown);
    }
    let digest = sha256_hex(secret);
    let now = state.now();
    let record = state
        .ledger()
        .find_api_key(&digest, now)
        .await
        .map_err(|e| SignInError::Ledger(e.into()))?
        .ok_or(SignInError::Unknown)?;
    if !bool::from(record.key_hash.as_bytes().ct_eq(digest.as_bytes())) || !record.is_active(now) {
        return Err(SignInError::Unknown);
    }
    if record.role != Role::OnCall {
        return Err(SignInError::NotOnCall);
    }
    // A sign-in is the key's use (and so is every request of its session, see `current`), recorded
    // as the api records a bearer request's.
    if let Err(error) = state
        .ledger()
        .touch_api_key(&record.key_id, now, crate::auth::LAST_USED_RESOLUTION)
        .await
    {
        tracing::warn!(%error, key_id = %record.key_id, "could not record an API key's last use");
    }
    let id = new_token();
    let session = ConsoleSession {
        session_hash: sha256_hex(&id),
        tenant: record.tenant,
        key_id: record.key_id,
        created_at: now,
        expires_at: now + SESSION_TTL,
    };
    state
        .ledger()
        .console()
        .create_session(&session)
        .await
        .map_err(|e| SignInError::Ledger(e.into()))?;
    tracing::info!(tenant = %session.tenant, key_id = %session.key_id, "console sign-in");
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn cookies_are_read_only_when_well_formed() {
        let good = "a".repeat(64);
        let mut h = HeaderMap::new();
        h.insert(
            COOKIE,
            HeaderValue::from_str(&format!("x=1; {SESSION_COOKIE}={good}")).unwrap(),
        );
        assert_eq!(cookie(&h, SESSION_COOKIE), Some(good));
        assert_eq!(cookie(&h, SIGN_IN_COOKIE), None);
        h.insert(
            COOKIE,
            HeaderValue::from_str(&format!("{SESSION_COOKIE}=ABC")).unwrap(),
        );
        assert_eq!(cookie(&h, SESSION_COOKIE), None);
    }

    #[test]
    fn cookies_are_http_only_strict_and_secure_over_tls() {
        let tls = cookie_header(SESSION_COOKIE, "v", SESSION_TTL, true);
        assert_eq!(
            tls,
            "payonce_console=v; Path=/console; HttpOnly; SameSite=Strict; Max-Age=28800; Secure"
        );
        let plain = cookie_header(SESSION_COOKIE, "v", SESSION_TTL, false);
        assert!(!plain.contains("Secure") && plain.contains("HttpOnly"));
    }

    #[test]
    fn csrf_tokens_compare_exactly_and_never_match_when_missing() {
        let t = csrf_of("session");
        assert!(tokens_equal(Some(&t), &t));
        assert!(!tokens_equal(None, &t));
        assert!(!tokens_equal(Some(""), &t));
        assert!(!tokens_equal(Some(&t[..10]), &t));
        assert!(!tokens_equal(Some(""), ""));
        assert_ne!(csrf_of("a"), csrf_of("b"));
    }
}

//! A tenant's public profile: the name, support page and support address a customer knows the
//! merchant by, shown on every page a customer sees (`confirm`). Set by the tenant's service
//! key (`PUT /v1/tenant/profile`) or the operator (`payonce tenant set-profile`); both go through
//! [`set_profile`], which refuses markup, control characters and overlong values, so nothing
//! changes on bad input.

use crate::auth::Caller;
use crate::body::ApiJson;
use crate::errors::{ErrorCode, HttpError};
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use payonce_core::clock::Timestamp;
use payonce_core::id::TenantId;
use payonce_ledger::profiles::{ProfileLedger, TenantProfile};
use payonce_ledger::{LedgerError, Role};
use serde::{Deserialize, Serialize};

/// Longest display name, in characters (the migration's CHECK says the same).
pub const DISPLAY_NAME_CHARS_MAX: usize = 80;
/// Longest support URL, in bytes.
pub const SUPPORT_URL_LEN_MAX: usize = 2_048;
/// Longest support email address, in bytes (RFC 5321's path limit).
pub const SUPPORT_EMAIL_LEN_MAX: usize = 254;

/// What a caller asks to set.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileRequest {
    /// The name a customer knows the merchant by.
    pub display_name: String,
    /// Where a customer gets help: an `https://` URL.
    #[serde(default)]
    pub support_url: Option<String>,
    /// Where a customer writes for help.
    #[serde(default)]
    pub support_email: Option<String>,
}

/// Why a profile was refused.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// A field is not acceptable; the message names it and the rule.
    #[error("{0}")]
    Invalid(String),
    /// The ledger failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

impl From<ProfileError> for HttpError {
    fn from(e: ProfileError) -> Self {
        match e {
            ProfileError::Invalid(why) => HttpError::new(ErrorCode::InvalidRequest, why),
            ProfileError::Ledger(e) => e.into(),
        }
    }
}

fn invalid<T>(why: String) -> Result<T, ProfileError> {
    Err(ProfileError::Invalid(why))
}

/// Characters no profile field may hold: markup (the pages escape everything, but a name with
/// tags is a mistake or an attack, never a name) and control characters.
fn has_forbidden(raw: &str) -> bool {
    raw.chars().any(|c| c == '<' || c == '>' || c.is_control())
}

fn display_name(raw: &str) -> Result<String, ProfileError> {
    let name = raw.trim();
    let chars = name.chars().count();
    if chars == 0 || chars > DISPLAY_NAME_CHARS_MAX {
        return invalid(format!(
            "display_name must be 1 to {DISPLAY_NAME_CHARS_MAX} characters, got {chars}"
        ));
    }
    if has_forbidden(name) {
        return invalid(
            "display_name must be plain text: no HTML (< or >) and no control characters".into(),
        );
    }
    Ok(name.to_string())
}

fn support_url(raw: &str) -> Result<String, ProfileError> {
    let url = raw.trim();
    let host = url.strip_prefix("https://").unwrap_or("");
    let ok = !host.is_empty()
        && !host.starts_with('/')
        && url.len() <= SUPPORT_URL_LEN_MAX
        && !url
            .chars()
            .any(|c| c.is_whitespace() || c == '"' || c == '\'')
        && !has_forbidden(url);
    if !ok {
        return invalid(format!(
            "support_url must be an https:// URL of at most {SUPPORT_URL_LEN_MAX} characters, \
             without spaces, quotes or < >"
        ));
    }
    Ok(url.to_string())
}

fn support_email(raw: &str) -> Result<String, ProfileError> {
    let email = raw.trim();
    let ok = email.len() <= SUPPORT_EMAIL_LEN_MAX
        && !has_forbidden(email)
        && !email
            .chars()
            .any(|c| c.is_whitespace() || c == '"' || c == '\'')
        && match email.split_once('@') {
            Some((local, domain)) => {
                !local.is_empty()
                    && !domain.contains('@')
                    && domain.contains('.')
                    && !domain.starts_with('.')
                    && !domain.ends_with('.')
            }
            None => false,
        };
    if !ok {
        return invalid(format!(
            "support_email must be an address like help@example.com of at most \
             {SUPPORT_EMAIL_LEN_MAX} characters"
        ));
    }
    Ok(email.to_string())
}

/// Checks every field, then stores the profile (replacing the tenant's previous one). Nothing is
/// written when any field is refused.
pub async fn set_profile(
    store: &dyn ProfileLedger,
    tenant: &TenantId,
    request: &ProfileRequest,
    now: Timestamp,
) -> Result<TenantProfile, ProfileError> {
    let profile = TenantProfile {
        tenant: tenant.clone(),
        display_name: display_name(&request.display_name)?,
        support_url: request
            .support_url
            .as_deref()
            .map(support_url)
            .transpose()?,
        support_email: request
            .support_email
            .as_deref()
            .map(support_email)
            .transpose()?,
        updated_at: now,
    };
    store.set_profile(&profile).await?;
    Ok(profile)
}

/// A profile as the API shows it: what the tenant's customers see.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProfileView {
    /// The tenant.
    pub tenant: String,
    /// The display name (the tenant id while none was set: what the pages show then).
    pub display_name: String,
    /// The support URL.
    pub support_url: Option<String>,
    /// The support email.
    pub support_email: Option<String>,
    /// Whether a profile was set.
    pub set: bool,
    /// Last set, ms.
    pub updated_at_ms: Option<i64>,
}

impl From<TenantProfile> for ProfileView {
    fn from(p: TenantProfile) -> Self {
        ProfileView {
            tenant: p.tenant.as_str().to_string(),
            display_name: p.display_name,
            support_url: p.support_url,
            support_email: p.support_email,
            set: true,
            updated_at_ms: Some(p.updated_at.as_millis()),
        }
    }
}

impl ProfileView {
    /// What the pages show for a tenant that set no profile.
    fn unset(tenant: &TenantId) -> ProfileView {
        ProfileView {
            tenant: tenant.as_str().to_string(),
            display_name: tenant.as_str().to_string(),
            support_url: None,
            support_email: None,
            set: false,
            updated_at_ms: None,
        }
    }
}

/// `PUT /v1/tenant/profile` (service): sets the caller's tenant's public profile.
pub async fn put(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<ProfileRequest>,
) -> Result<Json<ProfileView>, HttpError> {
    caller.require(&[Role::Service], "set the tenant's profile")?;
    let profile = set_profile(
        state.ledger().profiles(),
        &caller.tenant,
        &request,
        state.now(),
    )
    .await?;
    Ok(Json(profile.into()))
}

/// `GET /v1/tenant/profile` (service): the caller's tenant's public profile; while none was set,
/// what the pages show instead (`set: false`).
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<ProfileView>, HttpError> {
    caller.require(&[Role::Service], "read the tenant's profile")?;
    Ok(Json(
        match state.ledger().profiles().profile(&caller.tenant).await? {
            Some(p) => p.into(),
            None => ProfileView::unset(&caller.tenant),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_plain_bounded_text() {
        assert_eq!(display_name("  Acme & Sons ").unwrap(), "Acme & Sons");
        assert!(display_name("").is_err());
        assert!(display_name("   ").is_err());
        assert!(display_name(&"é".repeat(DISPLAY_NAME_CHARS_MAX)).is_ok());
        assert!(display_name(&"é".repeat(DISPLAY_NAME_CHARS_MAX + 1)).is_err());
        assert!(display_name("<b>Acme</b>").is_err());
        assert!(display_name("Acme\u{7}").is_err());
    }

    #[test]
    fn support_urls_are_https_and_emails_are_addresses() {
        assert!(support_url("https://acme.example/help").is_ok());
        assert!(support_url("http://acme.example/help").is_err());
        assert!(support_url("javascript:alert(1)").is_err());
        assert!(support_url("https://").is_err());
        assert!(support_url("https://a.example/\"onload=").is_err());
        assert!(
            support_url(&format!(
                "https://a.example/{}",
                "x".repeat(SUPPORT_URL_LEN_MAX)
            ))
            .is_err()
        );
        assert!(support_email("help@acme.example").is_ok());
        assert!(support_email("help@acme").is_err());
        assert!(support_email("a@b@c.example").is_err());
        assert!(support_email("<x>@acme.example").is_err());
        assert!(
            support_email(&format!(
                "{}@acme.example",
                "x".repeat(SUPPORT_EMAIL_LEN_MAX)
            ))
            .is_err()
        );
    }
}

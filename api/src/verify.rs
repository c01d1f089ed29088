//! Customer verification: a confirmation link alone approves nothing. Each tenant picks a method
//! (`payonce tenant set-verification`): a signed assertion from its own app, or a one-time code
//! payonce sends to its notification endpoint for delivery by email or SMS. This module issues links
//! (with their code), asks the customer when an assistant asks to pay, and sets a tenant's method.

use crate::auth::sha256_hex;
use crate::state::AppState;
use payonce_core::clock::Timestamp;
use payonce_core::details::OperationKind;
use payonce_core::id::{TenantId, random_hex};
use payonce_core::state::Status;
use payonce_ledger::verification::{
    ApprovalCode, LinkOrigin, NewLink, NoticeLimit, TenantVerification, VerificationMethod,
};
use payonce_ledger::{ApprovalLink, LedgerError, Operation};
use serde::Serialize;
use serde_json::json;
use std::time::Duration;

/// Bytes of randomness in a link token (256 bits).
pub const TOKEN_RANDOM_BYTES: usize = 32;
/// Most unused, unexpired links the service may hold open for one operation.
pub const OPEN_LINKS_MAX: u32 = 5;
/// Digits in a one-time code.
pub const CODE_DIGITS: u32 = 6;
/// Guesses allowed at one code: with [`CODE_DIGITS`] digits, a guesser wins one time in 200,000.
pub const CODE_ATTEMPTS_MAX: u32 = 5;
/// How long a code works (never past its link).
pub const CODE_TTL: Duration = Duration::from_secs(10 * 60);
/// Most customer requests payonce sends for one operation because an assistant asked to pay: an
/// assistant in a loop must not turn payonce into a mailer.
pub const ASSISTANT_REQUESTS_MAX: u32 = 3;
/// Least time between two such requests for one operation.
pub const ASSISTANT_REQUEST_INTERVAL: Duration = Duration::from_secs(10 * 60);
/// Most open links minted for assistant requests; bounded by [`ASSISTANT_REQUESTS_MAX`] anyway, and
/// counted apart from the service's [`OPEN_LINKS_MAX`] so an assistant can never starve the service.
pub const ASSISTANT_OPEN_LINKS_MAX: u32 = ASSISTANT_REQUESTS_MAX;
/// Bytes of randomness in a generated assertion key or notification secret (256 bits).
pub const SECRET_RANDOM_BYTES: usize = 32;
/// Longest key id accepted.
pub const KEY_ID_LEN_MAX: usize = 64;
/// Longest notification URL accepted.
pub const NOTIFY_URL_LEN_MAX: usize = 2_048;

/// A link just issued.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IssuedLink {
    /// The confirmation URL to send to the customer.
    pub url: String,
    /// When it stops working, ms.
    pub expires_at_ms: i64,
    /// How the customer will be asked to prove who they are on the page.
    pub verification: VerificationMethod,
}

/// The result of asking for a link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Issue {
    /// Issued.
    Issued(IssuedLink),
    /// The origin's budget of open links is spent; none was issued.
    TooManyOpen,
    /// The tenant has no verification method, so no link could approve anything.
    NotConfigured,
}

fn code_hash(delivery_id: &str, code: &str) -> String {
    sha256_hex(&format!("{delivery_id}:{code}"))
}

/// Whether `typed` is the code hashed in `code` (constant-time on the hashes).
pub fn code_matches(code: &ApprovalCode, typed: &str) -> bool {
    use subtle::ConstantTimeEq;
    let typed = typed.trim();
    typed.len() == CODE_DIGITS as usize
        && typed.chars().all(|c| c.is_ascii_digit())
        && bool::from(
            code_hash(&code.delivery_id, typed)
                .as_bytes()
                .ct_eq(code.code_hash.as_bytes()),
        )
}

fn new_code() -> String {
    let modulus = 10_u64.pow(CODE_DIGITS);
    // 64 random bits reduced mod 10^6: the bias is below 10^-13.
    let n = u64::from_str_radix(&random_hex(8), 16).unwrap_or(0) % modulus;
    format!("{n:0width$}", width = CODE_DIGITS as usize)
}

fn delivery_id() -> String {
    format!("dlv_{}", random_hex(16))
}

/// Whether `op` is a refund: a customer link never approves one (the merchant's on-call person does).
fn is_refund(op: &Operation) -> bool {
    match op.details.kind() {
        OperationKind::Payment => false,
        OperationKind::Refund => true,
    }
}

/// Issues a single-use, expiring link for an operation awaiting approval; for a one-time-code tenant
/// also its code, sent to the tenant's endpoint. Only hashes of the token and code are stored. A
/// link payonce mints for an assistant's request is also announced to the tenant's endpoint.
pub async fn issue_link(
    state: &AppState,
    op: &Operation,
    origin: LinkOrigin,
) -> Result<Issue, LedgerError> {
    if op.status != Status::AwaitingApproval {
        return Err(LedgerError::WrongState {
            id: op.id.clone(),
            status: op.status,
            why: "only an operation awaiting approval gets a confirmation link",
        });
    }
    if is_refund(op) {
        return Err(LedgerError::WrongState {
            id: op.id.clone(),
            status: op.status,
            why: "a refund is approved by a person of the merchant, never through a customer link",
        });
    }
    let ledger = state.ledger();
    let Some(config) = ledger
        .verification()
        .tenant_verification(&op.tenant)
        .await?
    else {
        return Ok(Issue::NotConfigured);
    };
    let token = random_hex(TOKEN_RANDOM_BYTES);
    let now = state.now();
    let expires_at = now + state.config().link_ttl;
    let link = ApprovalLink {
        token_hash: sha256_hex(&token),
        operation_id: op.id.clone(),
        details_hash: op.details_hash.as_str().to_string(),
        created_at: now,
        expires_at,
        used_at: None,
    };
    let delivery = delivery_id();
    let code = (config.method == VerificationMethod::OneTimeCode).then(new_code);
    let stored_code = code.as_ref().map(|c| ApprovalCode {
        delivery_id: delivery.clone(),
        operation_id: op.id.clone(),
        link_hash: link.token_hash.clone(),
        code_hash: code_hash(&delivery, c),
        created_at: now,
        expires_at: expires_at.min(now + CODE_TTL),
        attempts: 0,
        attempt_max: i64::from(CODE_ATTEMPTS_MAX),
        used_at: None,
    });
    let open_max = match origin {
        LinkOrigin::Service => OPEN_LINKS_MAX,
        LinkOrigin::Assistant => ASSISTANT_OPEN_LINKS_MAX,
    };
    if !ledger
        .verification()
        .create_link(&NewLink {
            link: &link,
            origin,
            open_max,
            code: stored_code.as_ref(),
        })
        .await?
    {
        return Ok(Issue::TooManyOpen);
    }
    let url = format!("{}/confirm/{token}", state.config().base_url());
    if code.is_some() || origin == LinkOrigin::Assistant {
        notify(
            state,
            &config,
            op,
            &url,
            expires_at,
            origin,
            &delivery,
            code.as_deref(),
        );
    }
    Ok(Issue::Issued(IssuedLink {
        url,
        expires_at_ms: expires_at.as_millis(),
        verification: config.method,
    }))
}

/// Sends the tenant's endpoint what it needs to reach the customer. The body goes to the tenant
/// (never to an assistant), signed with the tenant's secret.
#[allow(clippy::too_many_arguments)]
fn notify(
    state: &AppState,
    config: &TenantVerification,
    op: &Operation,
    url: &str,
    expires_at: Timestamp,
    origin: LinkOrigin,
    delivery: &str,
    code: Option<&str>,
) {
    let (Some(endpoint), Some(secret)) = (&config.notify_url, &config.notify_secret) else {
        return;
    };
    let mut body = json!({
        "type": "approval_requested",
        "delivery_id": delivery,
        "tenant": op.tenant.as_str(),
        "operation_id": op.id.as_str(),
        "customer": op.details.customer(),
        "amount": op.details.money().display(),
        "invoice": op.details.invoice(),
        "verification": config.method.as_str(),
        "requested_by": origin.as_str(),
        "confirmation_url": url,
        "expires_at_ms": expires_at.as_millis(),
    });
    if let Some(code) = code {
        body["code"] = json!(code);
    }
    let Some(notifier) = state.notifier() else {
        tracing::error!(%delivery, "no notification client; the customer was not asked");
        return;
    };
    notifier.spawn(
        endpoint.clone(),
        secret.clone(),
        delivery.to_string(),
        state.now_ms().div_euclid(1000),
        body,
    );
}

/// What happened when an assistant asked to pay an operation awaiting approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Asked {
    /// payonce just asked the customer (through the tenant's endpoint).
    Sent,
    /// The customer was asked recently, or as often as allowed; nothing new was sent.
    AlreadyAsked,
    /// payonce cannot ask the customer for this tenant (no verification method or no endpoint);
    /// the billing system must.
    Unavailable,
}

/// Asks the customer to approve, on an assistant's behalf, within [`ASSISTANT_REQUESTS_MAX`] and
/// [`ASSISTANT_REQUEST_INTERVAL`]. Returns what was done and the tenant's method.
pub async fn ask_customer(
    state: &AppState,
    op: &Operation,
) -> Result<(Asked, Option<VerificationMethod>), LedgerError> {
    if is_refund(op) {
        return Ok((Asked::Unavailable, None));
    }
    let ledger = state.ledger();
    let config = ledger
        .verification()
        .tenant_verification(&op.tenant)
        .await?;
    let Some(config) = config.filter(|c| c.notify_url.is_some()) else {
        return Ok((Asked::Unavailable, None));
    };
    let method = Some(config.method);
    let allowed = ledger
        .verification()
        .record_approval_notice(
            &op.id,
            NoticeLimit {
                max: ASSISTANT_REQUESTS_MAX,
                interval: ASSISTANT_REQUEST_INTERVAL,
            },
            state.now(),
        )
        .await?;
    if !allowed {
        return Ok((Asked::AlreadyAsked, method));
    }
    Ok(match issue_link(state, op, LinkOrigin::Assistant).await? {
        Issue::Issued(_) => (Asked::Sent, method),
        Issue::TooManyOpen => (Asked::AlreadyAsked, method),
        Issue::NotConfigured => (Asked::Unavailable, None),
    })
}

/// Most links payonce mints for one operation on assistants' requests in all, asked
/// ([`ask_customer`]) and elicited (MCP URL mode, [`elicitation_link`]) together. An elicited URL
/// reaches whoever runs the MCP client, and each one-time-code link allows [`CODE_ATTEMPTS_MAX`]
/// guesses: this caps an assistant's guesses at a customer's code, for good, at their product (30).
pub const ASSISTANT_LINKS_TOTAL_MAX: u32 = 2 * ASSISTANT_REQUESTS_MAX;

/// A confirmation link for an MCP client to show its user (URL-mode elicitation), or `None` when
/// none may be minted: [`ASSISTANT_LINKS_TOTAL_MAX`] reached, [`ASSISTANT_OPEN_LINKS_MAX`] open, or
/// no verification method. The link approves nothing by itself: the page asks for the customer's
/// proof, and a one-time code goes to the tenant's endpoint, never through the client.
pub async fn elicitation_link(
    state: &AppState,
    op: &Operation,
) -> Result<Option<String>, LedgerError> {
    if is_refund(op) {
        return Ok(None);
    }
    let counted = state
        .ledger()
        .verification()
        .record_approval_notice(
            &op.id,
            NoticeLimit {
                max: ASSISTANT_LINKS_TOTAL_MAX,
                interval: Duration::ZERO,
            },
            state.now(),
        )
        .await?;
    if !counted {
        return Ok(None);
    }
    Ok(match issue_link(state, op, LinkOrigin::Assistant).await? {
        Issue::Issued(link) => Some(link.url),
        Issue::TooManyOpen | Issue::NotConfigured => None,
    })
}

/// What an operator sets with `payonce tenant set-verification`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerificationRequest {
    /// The method.
    pub method: VerificationMethod,
    /// The assertion key id (signed assertion only).
    pub assertion_key_id: Option<String>,
    /// The notification endpoint (required for one-time codes).
    pub notify_url: Option<String>,
}

/// The secrets generated for a tenant, shown once to the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedSecrets {
    /// The assertion key, for the tenant's app.
    pub assertion_key: Option<String>,
    /// The notification signing secret, for the tenant's endpoint.
    pub notify_secret: Option<String>,
}

/// Why a verification setting was refused.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The request is not a valid setting.
    #[error("{0}")]
    Invalid(String),
    /// The ledger failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// Checks and stores a tenant's verification method with freshly generated secrets (never typed by
/// the operator, so never in a shell history).
pub async fn set_tenant_verification(
    ledger: &payonce_ledger::SharedLedger,
    tenant: &TenantId,
    request: &VerificationRequest,
    now: Timestamp,
) -> Result<IssuedSecrets, SetupError> {
    let invalid = |m: &str| Err(SetupError::Invalid(m.to_string()));
    if let Some(url) = &request.notify_url {
        let scheme_ok = url.starts_with("https://") || url.starts_with("http://");
        if !scheme_ok || url.len() > NOTIFY_URL_LEN_MAX || url.chars().any(char::is_whitespace) {
            return invalid(&format!(
                "notify URL must be an http(s) URL of at most {NOTIFY_URL_LEN_MAX} characters"
            ));
        }
    }
    let key_id = match request.method {
        VerificationMethod::SignedAssertion => {
            let kid = request
                .assertion_key_id
                .clone()
                .unwrap_or_else(|| "k1".into());
            let kid_ok = !kid.is_empty()
                && kid.len() <= KEY_ID_LEN_MAX
                && kid
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if !kid_ok {
                return invalid(&format!(
                    "key id must be 1 to {KEY_ID_LEN_MAX} of [A-Za-z0-9_-]"
                ));
            }
            Some(kid)
        }
        VerificationMethod::OneTimeCode => {
            if request.notify_url.is_none() {
                return invalid("the one_time_code method needs a notify URL to send codes to");
            }
            if request.assertion_key_id.is_some() {
                return invalid("an assertion key id only applies to the signed_assertion method");
            }
            None
        }
    };
    let assertion_key = key_id.as_ref().map(|_| random_hex(SECRET_RANDOM_BYTES));
    let notify_secret = request
        .notify_url
        .as_ref()
        .map(|_| format!("nsec_{}", random_hex(SECRET_RANDOM_BYTES)));
    let record = TenantVerification {
        tenant: tenant.clone(),
        method: request.method,
        assertion_key_id: key_id,
        assertion_key: assertion_key.clone(),
        notify_url: request.notify_url.clone(),
        notify_secret: notify_secret.clone(),
        updated_at: now,
    };
    ledger
        .verification()
        .set_tenant_verification(&record)
        .await?;
    Ok(IssuedSecrets {
        assertion_key,
        notify_secret,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use payonce_core::id::OperationId;

    #[test]
    fn codes_have_their_digits_and_match_only_themselves() {
        for _ in 0..100 {
            let code = new_code();
            assert_eq!(code.len(), CODE_DIGITS as usize);
            assert!(code.chars().all(|c| c.is_ascii_digit()));
        }
        let stored = ApprovalCode {
            delivery_id: "dlv_1".into(),
            operation_id: OperationId::generate(),
            link_hash: "h".into(),
            code_hash: code_hash("dlv_1", "012345"),
            created_at: Timestamp::EPOCH,
            expires_at: Timestamp::from_millis(1),
            attempts: 0,
            attempt_max: 5,
            used_at: None,
        };
        assert!(code_matches(&stored, "012345"));
        assert!(code_matches(&stored, " 012345 "));
        assert!(!code_matches(&stored, "012346"));
        assert!(!code_matches(&stored, "12345"));
        assert!(!code_matches(&stored, ""));
    }
}

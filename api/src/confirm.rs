//! The confirmation page. A link carries a random 256-bit token (only its SHA-256 is stored), but
//! holding a link is not being the customer: approving also needs the customer's own proof, by the
//! tenant's method (`verify.rs`): a signed assertion from the tenant's app (`?assertion=` on the link,
//! carried by a hidden field to the POST), or the one-time code sent out of band. A tenant with no
//! method approves nothing here. The page shows the exact details and posts back the hash of what it
//! showed; approval happens only if the proof holds, the link is unused and unexpired and that hash is
//! the link's and the operation's current one. Every refusal is a 4xx page with a stable code (in the
//! `payonce-error-code` header and on the page) and changes nothing but the counters it names (a
//! wrong code counts an attempt).

use crate::app::AppState;
use crate::assertion::{self, AssertionError};
use crate::auth::sha256_hex;
use crate::errors::cause_chain;
use crate::page::{self, escape};
use crate::verify::{self, code_matches};
use axum::Router;
use axum::extract::rejection::{FormRejection, QueryRejection};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::get;
use axum::{Form, extract::FromRequest as _};
use payonce_shared::clock::Timestamp;
use payonce_shared::details::DetailsHash;
use payonce_shared::ledger::verification::{
    CodeAttempt, TenantVerification, UsedNonce, VerificationMethod,
};
use payonce_shared::ledger::{ApprovalLink, LedgerError, NewApproval, Operation};
use payonce_shared::state::Status;
use serde::Deserialize;

pub use crate::verify::{IssuedLink, OPEN_LINKS_MAX, TOKEN_RANDOM_BYTES};

/// The page's Content-Security-Policy: nothing but our own stylesheet, forms only to ourselves, no
/// framing, no scripts at all.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'self'; img-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";
/// The response header carrying a refusal's stable code.
pub const ERROR_CODE_HEADER: &str = "payonce-error-code";

/// The confirmation routes, with their security headers.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/confirm/{token}", get(show).post(submit))
        .route(page::STYLESHEET_PATH, get(page::stylesheet))
        .layer(middleware::from_fn(security_headers))
}

/// The page security headers (CSP, no framing, no caching, no referrer), for every HTML page.
pub(crate) async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let h = response.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // The token (and an assertion) is in the URL: never send it onwards.
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        HeaderName::from_static("cross-origin-opener-policy"),
        HeaderValue::from_static("same-origin"),
    );
    response
}

/// What the page can say.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Approved {
        amount: String,
        invoice: String,
    },
    AlreadyUsed,
    Expired,
    Tampered,
    Invalid,
    NotAwaiting(Status),
    Unavailable,
    /// The tenant has no verification method: nothing can be approved here.
    NotConfigured,
    /// An assertion-method page opened without an assertion.
    AssertionRequired,
    /// The assertion was refused.
    Assertion(AssertionError),
    /// The assertion's nonce was used before.
    AssertionReplayed,
    /// No code (or not six digits) was typed.
    CodeRequired,
    /// The code is wrong; this many attempts remain.
    CodeWrong {
        remaining: i64,
    },
    /// Every attempt at the code was spent.
    CodeExhausted,
    /// The code expired.
    CodeExpired,
    /// The code was used already.
    CodeUsed,
    /// This link has no code (issued before the tenant chose codes).
    CodeMissing,
}

impl Outcome {
    /// The stable code of a refusal (docs/api.md); `None` for an approval.
    fn code(&self) -> Option<&'static str> {
        Some(match self {
            Outcome::Approved { .. } => return None,
            Outcome::AlreadyUsed => "link_used",
            Outcome::Expired => "link_expired",
            Outcome::Tampered => "details_mismatch",
            Outcome::Invalid => "link_invalid",
            Outcome::NotAwaiting(_) => "not_awaiting_approval",
            Outcome::Unavailable => "unavailable",
            Outcome::NotConfigured => "verification_not_configured",
            Outcome::AssertionRequired => "assertion_required",
            Outcome::Assertion(e) => e.code(),
            Outcome::AssertionReplayed => "assertion_replayed",
            Outcome::CodeRequired => "code_required",
            Outcome::CodeWrong { .. } => "code_wrong",
            Outcome::CodeExhausted => "code_exhausted",
            Outcome::CodeExpired => "code_expired",
            Outcome::CodeUsed => "code_used",
            Outcome::CodeMissing => "code_missing",
        })
    }
}

const ASK_AGAIN: &str = "Nothing was approved. Return to the app where you were asked to pay and start the confirmation again.";

fn result_page(outcome: &Outcome) -> Response {
    let (status, class, title, text) = match outcome {
        Outcome::Approved { amount, invoice } => (
            StatusCode::OK,
            "ok",
            "Payment approved",
            format!(
                "You approved the payment of <strong>{}</strong> for invoice <strong>{}</strong>. \
                 It will be collected once; you can close this page.",
                escape(amount),
                escape(invoice)
            ),
        ),
        Outcome::AlreadyUsed => (
            StatusCode::CONFLICT,
            "warn",
            "This link was already used",
            "This confirmation link has already been used, so nothing more was approved. \
             If you already approved this payment, it will be collected only once."
                .to_string(),
        ),
        Outcome::Expired => (
            StatusCode::GONE,
            "warn",
            "This link has expired",
            "This confirmation link has expired and nothing was approved. Ask for a new link to approve the payment."
                .to_string(),
        ),
        Outcome::Tampered => (
            StatusCode::CONFLICT,
            "bad",
            "The details did not match",
            "The details submitted are not the ones this link was issued for, so nothing was approved. \
             Ask for a new link and approve the payment from it."
                .to_string(),
        ),
        Outcome::Invalid => (
            StatusCode::NOT_FOUND,
            "bad",
            "This link is not valid",
            "This confirmation link is not valid. Check that you copied the whole link.".to_string(),
        ),
        Outcome::NotAwaiting(s) => (
            StatusCode::CONFLICT,
            "warn",
            "Nothing to approve",
            format!(
                "This payment is no longer waiting for approval (it is {}), so nothing was approved.",
                escape(&s.as_str().replace('_', " "))
            ),
        ),
        Outcome::Unavailable => (
            StatusCode::SERVICE_UNAVAILABLE,
            "bad",
            "Please try again",
            "We could not process this page right now and nothing was approved. Please try again in a moment."
                .to_string(),
        ),
        Outcome::NotConfigured => (
            StatusCode::FORBIDDEN,
            "bad",
            "Approval is not available here",
            "This merchant has not set up a way to confirm that you are the customer, so payments cannot be \
             approved on this page. Nothing was approved. Contact the merchant to approve this payment."
                .to_string(),
        ),
        Outcome::AssertionRequired => (
            StatusCode::UNAUTHORIZED,
            "warn",
            "Sign in to approve",
            format!("This page must be opened from your account in the merchant's app. {ASK_AGAIN}"),
        ),
        Outcome::Assertion(e) => {
            let (status, why) = match e {
                AssertionError::Expired => (StatusCode::UNAUTHORIZED, "Your sign-in for this approval has expired."),
                AssertionError::WrongCustomer => (StatusCode::FORBIDDEN, "You are signed in as a different customer than the one this payment is for."),
                AssertionError::WrongOperation => (StatusCode::FORBIDDEN, "Your sign-in was for a different payment."),
                AssertionError::BadSignature | AssertionError::UnknownKey => {
                    (StatusCode::UNAUTHORIZED, "Your sign-in could not be verified.")
                }
                AssertionError::Malformed | AssertionError::LifetimeTooLong => {
                    (StatusCode::BAD_REQUEST, "Your sign-in could not be read.")
                }
            };
            (status, "bad", "We could not confirm it is you", format!("{why} {ASK_AGAIN}"))
        }
        Outcome::AssertionReplayed => (
            StatusCode::CONFLICT,
            "warn",
            "This sign-in was already used",
            format!("Each sign-in approves at most once. {ASK_AGAIN}"),
        ),
        Outcome::CodeRequired => (
            StatusCode::BAD_REQUEST,
            "warn",
            "Enter your code",
            format!(
                "Enter the {}-digit code you were sent. Nothing was approved.",
                verify::CODE_DIGITS
            ),
        ),
        Outcome::CodeWrong { remaining } => (
            StatusCode::UNAUTHORIZED,
            "bad",
            "That code is not right",
            format!(
                "The code did not match and nothing was approved. Go back and try again: {remaining} attempt{} left.",
                if *remaining == 1 { "" } else { "s" }
            ),
        ),
        Outcome::CodeExhausted => (
            StatusCode::FORBIDDEN,
            "bad",
            "Too many wrong codes",
            format!("This code can no longer be used. {ASK_AGAIN}"),
        ),
        Outcome::CodeExpired => (
            StatusCode::GONE,
            "warn",
            "This code has expired",
            format!("This code has expired. {ASK_AGAIN}"),
        ),
        Outcome::CodeUsed => (
            StatusCode::CONFLICT,
            "warn",
            "This code was already used",
            format!("Each code approves at most once. {ASK_AGAIN}"),
        ),
        Outcome::CodeMissing => (
            StatusCode::CONFLICT,
            "warn",
            "No code was sent for this link",
            format!("This link cannot be confirmed with a code. {ASK_AGAIN}"),
        ),
    };
    let code = outcome.code();
    let code_line = code
        .map(|c| {
            format!(
                "\n<p class=\"fine\">Error code: <code id=\"error-code\">{}</code></p>",
                escape(c)
            )
        })
        .unwrap_or_default();
    let body = format!(
        "<h1>{}</h1>\n<div class=\"result {class}\"><p>{text}</p></div>{code_line}",
        escape(title)
    );
    let mut response = page::render(status, title, &body);
    if let Some(c) = code {
        response
            .headers_mut()
            .insert(ERROR_CODE_HEADER, HeaderValue::from_static(c));
    }
    response
}

/// A token as it appears in a link: 64 lowercase hex digits. Anything else is not looked up.
fn token_hash(token: &str) -> Option<String> {
    let well_formed = token.len() == TOKEN_RANDOM_BYTES * 2
        && token
            .chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c));
    well_formed.then(|| sha256_hex(token))
}

fn unavailable(e: &LedgerError) -> Outcome {
    tracing::error!(cause = %cause_chain(e), "confirmation page failed");
    Outcome::Unavailable
}

/// Why a link cannot be used now, given that it exists.
fn unusable(link: &ApprovalLink, now: Timestamp) -> Option<Outcome> {
    if link.used_at_ms.is_some() {
        Some(Outcome::AlreadyUsed)
    } else if link.expires_at_ms <= now {
        Some(Outcome::Expired)
    } else {
        None
    }
}

/// The proof field the review page carries to the POST.
enum Proof<'a> {
    Assertion(&'a str),
    Code,
}

fn review_page(op: &Operation, link: &ApprovalLink, proof: &Proof<'_>) -> Response {
    let d = &op.details;
    let money = d.money();
    let recipient = d.destination().unwrap_or(op.tenant.as_str());
    let description = d.description().unwrap_or("");
    let proof_fields = match proof {
        Proof::Assertion(a) => format!(
            "<input type=\"hidden\" name=\"assertion\" value=\"{}\">\n",
            escape(a)
        ),
        Proof::Code => format!(
            "<label for=\"code\">The {digits}-digit code you were sent</label>\n\
             <input class=\"code\" id=\"code\" name=\"code\" type=\"text\" inputmode=\"numeric\" \
             autocomplete=\"one-time-code\" pattern=\"[0-9]{{{digits}}}\" maxlength=\"{digits}\" required>\n",
            digits = verify::CODE_DIGITS
        ),
    };
    let body = format!(
        "<h1>Confirm your payment</h1>\n\
         <p class=\"lead\">Check the details below. Approving allows this exact payment, once.</p>\n\
         <div class=\"amount\" id=\"amount\">{amount}</div>\n\
         <dl>\n\
         <dt>Currency</dt><dd id=\"currency\">{currency}</dd>\n\
         <dt>Invoice</dt><dd id=\"invoice\">{invoice}</dd>\n\
         <dt>Customer</dt><dd id=\"customer\">{customer}</dd>\n\
         <dt>Recipient</dt><dd id=\"recipient\">{recipient}</dd>\n\
         <dt>Description</dt><dd id=\"description\">{description}</dd>\n\
         </dl>\n\
         <form method=\"post\">\n\
         <input type=\"hidden\" name=\"details_hash\" value=\"{hash}\">\n\
         {proof_fields}\
         <button type=\"submit\" id=\"approve\">Approve payment of {amount}</button>\n\
         </form>\n\
         <p class=\"fine\">This link works once and expires soon. If you did not expect this payment, close this page.</p>",
        amount = escape(&money.display()),
        currency = escape(&money.currency().code().to_ascii_uppercase()),
        invoice = escape(d.invoice()),
        customer = escape(d.customer()),
        recipient = escape(recipient),
        description = escape(description),
        hash = escape(&link.details_hash),
    );
    page::render(StatusCode::OK, "Confirm your payment", &body)
}

/// A link that can be used now, its operation (awaiting approval, details unchanged) and the
/// tenant's verification method. Reads only.
async fn usable(
    state: &AppState,
    token: &str,
) -> Result<(ApprovalLink, Operation, TenantVerification), Outcome> {
    let hash = token_hash(token).ok_or(Outcome::Invalid)?;
    let link = match state.ledger().approval_link(&hash).await {
        Ok(Some(link)) => link,
        Ok(None) => return Err(Outcome::Invalid),
        Err(e) => return Err(unavailable(&e)),
    };
    if let Some(outcome) = unusable(&link, state.now()) {
        return Err(outcome);
    }
    let op = match state.ledger().link_operation(&link).await {
        Ok(op) => op,
        Err(LedgerError::NotFound) => return Err(Outcome::Invalid),
        Err(e) => return Err(unavailable(&e)),
    };
    if op.status != Status::AwaitingApproval {
        return Err(Outcome::NotAwaiting(op.status));
    }
    if op.details_hash.as_str() != link.details_hash {
        return Err(Outcome::Tampered);
    }
    match state
        .ledger()
        .verification()
        .tenant_verification(&op.tenant)
        .await
    {
        Ok(Some(config)) => Ok((link, op, config)),
        Ok(None) => Err(Outcome::NotConfigured),
        Err(e) => Err(unavailable(&e)),
    }
}

/// Checks an assertion against the tenant's key and the operation (pure: spends nothing).
fn check_assertion(
    config: &TenantVerification,
    op: &Operation,
    raw: Option<&str>,
    now_ms: i64,
) -> Result<assertion::Claims, Outcome> {
    let raw = raw
        .filter(|a| !a.is_empty())
        .ok_or(Outcome::AssertionRequired)?;
    let (Some(kid), Some(key)) = (&config.assertion_key_id, &config.assertion_key) else {
        return Err(Outcome::NotConfigured);
    };
    assertion::verify(raw, kid, key, &op.id, op.details.customer(), now_ms)
        .map_err(Outcome::Assertion)
}

/// `GET /confirm/{token}` query.
#[derive(Debug, Deserialize)]
struct ShowQuery {
    assertion: Option<String>,
}

/// `GET /confirm/{token}`: the details to approve, or why they cannot be approved here.
async fn show(
    State(state): State<AppState>,
    Path(token): Path<String>,
    query: Result<Query<ShowQuery>, QueryRejection>,
) -> Response {
    let (link, op, config) = match usable(&state, &token).await {
        Ok(found) => found,
        Err(outcome) => return result_page(&outcome),
    };
    match config.method {
        VerificationMethod::SignedAssertion => {
            let Ok(Query(query)) = query else {
                return result_page(&Outcome::Assertion(AssertionError::Malformed));
            };
            let raw = query.assertion.as_deref();
            match check_assertion(&config, &op, raw, state.now_ms()) {
                Ok(_) => review_page(&op, &link, &Proof::Assertion(raw.unwrap_or(""))),
                Err(outcome) => result_page(&outcome),
            }
        }
        VerificationMethod::OneTimeCode => review_page(&op, &link, &Proof::Code),
    }
}

/// The posted form.
#[derive(Debug, Deserialize)]
struct Submitted {
    details_hash: String,
    assertion: Option<String>,
    code: Option<String>,
}

/// `POST /confirm/{token}`: checks the customer's proof, spends it and the link (once each), checks
/// the shown hash is the link's and the operation's, and records the approval with its evidence.
async fn submit(
    State(state): State<AppState>,
    Path(token): Path<String>,
    request: Request,
) -> Response {
    let posted: Result<Form<Submitted>, FormRejection> = Form::from_request(request, &state).await;
    let outcome = approve(&state, &token, posted.ok().map(|Form(s)| s)).await;
    if outcome == Outcome::Tampered {
        tracing::warn!(
            "confirmation submitted with details that do not match its link; nothing approved"
        );
    }
    result_page(&outcome)
}

/// Spends the proof: the assertion's nonce, or one counted attempt at the code (and the code, when
/// it matches). Returns the approval method with its evidence id for the audit trail.
async fn spend_proof(
    state: &AppState,
    config: &TenantVerification,
    op: &Operation,
    link: &ApprovalLink,
    posted: &Submitted,
) -> Result<String, Outcome> {
    let now = state.now();
    let store = state.ledger().verification();
    match config.method {
        VerificationMethod::SignedAssertion => {
            let claims = check_assertion(config, op, posted.assertion.as_deref(), now.as_millis())?;
            let used = UsedNonce {
                tenant: &op.tenant,
                nonce: &claims.nonce,
                operation: &op.id,
                expires_at: Timestamp::from_millis(claims.exp),
            };
            match store.use_assertion_nonce(&used, now).await {
                Ok(true) => Ok(format!("{}:{}", config.method.as_str(), claims.nonce)),
                Ok(false) => Err(Outcome::AssertionReplayed),
                Err(e) => Err(unavailable(&e)),
            }
        }
        VerificationMethod::OneTimeCode => {
            let typed = posted.code.as_deref().unwrap_or("").trim();
            let well_formed = typed.len() == verify::CODE_DIGITS as usize
                && typed.chars().all(|c| c.is_ascii_digit());
            if !well_formed {
                return Err(Outcome::CodeRequired);
            }
            let code = match store.count_code_attempt(&link.token_hash, now).await {
                Ok(CodeAttempt::Counted(code)) => code,
                Ok(CodeAttempt::Missing) => return Err(Outcome::CodeMissing),
                Ok(CodeAttempt::Used) => return Err(Outcome::CodeUsed),
                Ok(CodeAttempt::Exhausted) => return Err(Outcome::CodeExhausted),
                Ok(CodeAttempt::Expired) => return Err(Outcome::CodeExpired),
                Err(e) => return Err(unavailable(&e)),
            };
            if !code_matches(&code, typed) {
                let remaining = code.attempt_max - code.attempts;
                return Err(if remaining > 0 {
                    Outcome::CodeWrong { remaining }
                } else {
                    Outcome::CodeExhausted
                });
            }
            match store.use_code(&code.delivery_id, now).await {
                Ok(true) => Ok(format!("{}:{}", config.method.as_str(), code.delivery_id)),
                Ok(false) => Err(Outcome::CodeUsed),
                Err(e) => Err(unavailable(&e)),
            }
        }
    }
}

async fn approve(state: &AppState, token: &str, posted: Option<Submitted>) -> Outcome {
    let (link, op, config) = match usable(state, token).await {
        Ok(found) => found,
        Err(outcome) => return outcome,
    };
    let Some(posted) = posted else {
        return Outcome::Tampered;
    };
    let Ok(shown) = DetailsHash::parse(&posted.details_hash) else {
        return Outcome::Tampered;
    };
    if shown.as_str() != link.details_hash || op.details_hash != shown {
        return Outcome::Tampered;
    }
    let method = match spend_proof(state, &config, &op, &link, &posted).await {
        Ok(method) => method,
        Err(outcome) => return outcome,
    };
    let ledger = state.ledger();
    let now = state.now();
    // Single use of the link is decided by one conditional update, so two racing submits cannot both
    // get past this line (each proof is single-use on its own as well).
    match ledger.use_approval_link(&link.token_hash, now).await {
        Ok(true) => {}
        Ok(false) => {
            return match ledger.approval_link(&link.token_hash).await {
                Ok(Some(link)) => unusable(&link, now).unwrap_or(Outcome::AlreadyUsed),
                Ok(None) => Outcome::Invalid,
                Err(e) => unavailable(&e),
            };
        }
        Err(e) => return unavailable(&e),
    }
    let approval = NewApproval {
        operation: op.id.clone(),
        details_hash: shown,
        approved_by: format!("customer:{}", op.details.customer()),
        method,
        expires_at_ms: now + state.config().approval_ttl,
    };
    match ledger.approve(&op.tenant, approval, now).await {
        Ok(approved) => Outcome::Approved {
            amount: approved.details.money().display(),
            invoice: approved.details.invoice().to_string(),
        },
        Err(LedgerError::ApprovalMismatch) => Outcome::Tampered,
        Err(LedgerError::WrongState { status, .. }) => Outcome::NotAwaiting(status),
        Err(LedgerError::NotFound) => Outcome::Invalid,
        Err(e) => unavailable(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refusal_code_is_documented() {
        let doc = include_str!("../../docs/api.md");
        let mut outcomes = vec![
            Outcome::AlreadyUsed,
            Outcome::Expired,
            Outcome::Tampered,
            Outcome::Invalid,
            Outcome::NotAwaiting(Status::Ready),
            Outcome::Unavailable,
            Outcome::NotConfigured,
            Outcome::AssertionRequired,
            Outcome::AssertionReplayed,
            Outcome::CodeRequired,
            Outcome::CodeWrong { remaining: 1 },
            Outcome::CodeExhausted,
            Outcome::CodeExpired,
            Outcome::CodeUsed,
            Outcome::CodeMissing,
        ];
        outcomes.extend(
            [
                AssertionError::Malformed,
                AssertionError::UnknownKey,
                AssertionError::BadSignature,
                AssertionError::Expired,
                AssertionError::LifetimeTooLong,
                AssertionError::WrongCustomer,
                AssertionError::WrongOperation,
            ]
            .map(Outcome::Assertion),
        );
        for outcome in &outcomes {
            let code = outcome.code().unwrap();
            let status = result_page(outcome).status();
            assert!(status.is_client_error() || code == "unavailable", "{code}");
            let row = format!("| `{code}` | {} |", status.as_u16());
            assert!(doc.contains(&row), "docs/api.md lacks {row}");
        }
    }

    #[test]
    fn only_well_formed_tokens_are_looked_up() {
        assert!(token_hash(&"a".repeat(64)).is_some());
        assert!(token_hash(&"A".repeat(64)).is_none());
        assert!(token_hash(&"a".repeat(63)).is_none());
        assert!(token_hash("../../etc/passwd").is_none());
    }
}

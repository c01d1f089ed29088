//! The confirmation page. A link carries a random 256-bit token (only its SHA-256 is stored); the
//! token is the capability, so the page needs no login and CSRF is moot. The page shows the exact
//! details and posts back the hash of what it showed; approval happens only if the link is unused and
//! unexpired and that hash is the link's and the operation's current one.

use crate::app::AppState;
use crate::auth::sha256_hex;
use crate::config::duration_ms;
use crate::errors::cause_chain;
use crate::page::{self, escape};
use axum::Router;
use axum::extract::rejection::FormRejection;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::get;
use axum::{Form, extract::FromRequest as _};
use payonce_shared::details::DetailsHash;
use payonce_shared::id::random_hex;
use payonce_shared::ledger::{ApprovalLink, LedgerError, NewApproval, Operation};
use payonce_shared::state::Status;
use serde::Deserialize;

/// Bytes of randomness in a link token (256 bits).
pub const TOKEN_RANDOM_BYTES: usize = 32;
/// The approval method recorded for approvals given on this page.
pub const METHOD: &str = "confirmation_page";
/// The page's Content-Security-Policy: nothing but our own stylesheet, forms only to ourselves, no
/// framing, no scripts at all.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'self'; img-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// A link just issued.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct IssuedLink {
    /// The confirmation URL to send to the customer.
    pub url: String,
    /// When it stops working, ms.
    pub expires_at_ms: i64,
}

/// Most unused, unexpired confirmation links one operation may have: an assistant calling
/// `pay_invoice` in a loop must not mint links (and rows) without end.
pub const OPEN_LINKS_MAX: u32 = 5;

/// Issues a single-use, expiring link for an operation awaiting approval. Only the token's hash is
/// stored; the URL is the one place the token exists. `None`: [`OPEN_LINKS_MAX`] links are
/// already open, so none was issued; the customer should use one of those.
pub async fn issue_link(
    state: &AppState,
    op: &Operation,
) -> Result<Option<IssuedLink>, LedgerError> {
    if op.status != Status::AwaitingApproval {
        return Err(LedgerError::WrongState {
            id: op.id.clone(),
            status: op.status,
            why: "only an operation awaiting approval gets a confirmation link",
        });
    }
    let token = random_hex(TOKEN_RANDOM_BYTES);
    let now = state.now_ms();
    let expires_at_ms = now.saturating_add(duration_ms(state.config().link_ttl));
    let link = ApprovalLink {
        token_hash: sha256_hex(&token),
        operation_id: op.id.clone(),
        details_hash: op.details_hash.as_str().to_string(),
        created_at_ms: now,
        expires_at_ms,
        used_at_ms: None,
    };
    if !state
        .ledger()
        .create_approval_link(&link, OPEN_LINKS_MAX)
        .await?
    {
        return Ok(None);
    }
    Ok(Some(IssuedLink {
        url: format!("{}/confirm/{token}", state.config().base_url()),
        expires_at_ms,
    }))
}

/// The confirmation routes, with their security headers.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/confirm/{token}", get(show).post(submit))
        .route(page::STYLESHEET_PATH, get(page::stylesheet))
        .layer(middleware::from_fn(security_headers))
}

async fn security_headers(request: Request, next: Next) -> Response {
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
    // The token is in the URL: never send it onwards.
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
    Approved { amount: String, invoice: String },
    AlreadyUsed,
    Expired,
    Tampered,
    Invalid,
    NotAwaiting(Status),
    Unavailable,
}

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
    };
    let body = format!(
        "<h1>{}</h1>\n<div class=\"result {class}\"><p>{text}</p></div>",
        escape(title)
    );
    page::render(status, title, &body)
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
fn unusable(link: &ApprovalLink, now_ms: i64) -> Option<Outcome> {
    if link.used_at_ms.is_some() {
        Some(Outcome::AlreadyUsed)
    } else if link.expires_at_ms <= now_ms {
        Some(Outcome::Expired)
    } else {
        None
    }
}

fn review_page(op: &Operation, link: &ApprovalLink) -> Response {
    let d = &op.details;
    let money = d.money();
    let recipient = d.destination().unwrap_or(op.tenant.as_str());
    let description = d.description().unwrap_or("");
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

/// `GET /confirm/{token}`: the details to approve, or why the link cannot be used.
async fn show(State(state): State<AppState>, Path(token): Path<String>) -> Response {
    let Some(hash) = token_hash(&token) else {
        return result_page(&Outcome::Invalid);
    };
    let link = match state.ledger().approval_link(&hash).await {
        Ok(Some(link)) => link,
        Ok(None) => return result_page(&Outcome::Invalid),
        Err(e) => return result_page(&unavailable(&e)),
    };
    if let Some(outcome) = unusable(&link, state.now_ms()) {
        return result_page(&outcome);
    }
    let op = match state.ledger().get_unscoped(&link.operation_id).await {
        Ok(op) => op,
        Err(LedgerError::NotFound) => return result_page(&Outcome::Invalid),
        Err(e) => return result_page(&unavailable(&e)),
    };
    if op.status != Status::AwaitingApproval {
        return result_page(&Outcome::NotAwaiting(op.status));
    }
    if op.details_hash.as_str() != link.details_hash {
        return result_page(&Outcome::Tampered);
    }
    review_page(&op, &link)
}

/// The posted form.
#[derive(Debug, Deserialize)]
struct Submitted {
    details_hash: String,
}

/// `POST /confirm/{token}`: uses the link (once), checks the shown hash is the link's and the
/// operation's, and records the approval.
async fn submit(
    State(state): State<AppState>,
    Path(token): Path<String>,
    request: Request,
) -> Response {
    let Some(hash) = token_hash(&token) else {
        return result_page(&Outcome::Invalid);
    };
    let posted: Result<Form<Submitted>, FormRejection> = Form::from_request(request, &state).await;
    let outcome = approve_with_link(&state, &hash, posted.ok().map(|Form(s)| s.details_hash)).await;
    if outcome == Outcome::Tampered {
        tracing::warn!(
            "confirmation submitted with details that do not match its link; nothing approved"
        );
    }
    result_page(&outcome)
}

async fn approve_with_link(state: &AppState, token_hash: &str, posted: Option<String>) -> Outcome {
    let ledger = state.ledger();
    let now = state.now_ms();
    // Use the link first: single use is decided by one conditional update, so two racing submits
    // cannot both get past this line.
    match ledger.use_approval_link(token_hash, now).await {
        Ok(true) => {}
        Ok(false) => {
            return match ledger.approval_link(token_hash).await {
                Ok(Some(link)) => unusable(&link, now).unwrap_or(Outcome::AlreadyUsed),
                Ok(None) => Outcome::Invalid,
                Err(e) => unavailable(&e),
            };
        }
        Err(e) => return unavailable(&e),
    }
    let link = match ledger.approval_link(token_hash).await {
        Ok(Some(link)) => link,
        Ok(None) => return Outcome::Invalid,
        Err(e) => return unavailable(&e),
    };
    let op = match ledger.get_unscoped(&link.operation_id).await {
        Ok(op) => op,
        Err(LedgerError::NotFound) => return Outcome::Invalid,
        Err(e) => return unavailable(&e),
    };
    let Some(posted) = posted.and_then(|p| DetailsHash::parse(&p).ok()) else {
        return Outcome::Tampered;
    };
    if posted.as_str() != link.details_hash || op.details_hash != posted {
        return Outcome::Tampered;
    }
    let approval = NewApproval {
        details_hash: posted,
        approved_by: format!("customer:{}", op.details.customer()),
        method: METHOD.to_string(),
        expires_at_ms: now.saturating_add(duration_ms(state.config().approval_ttl)),
    };
    match ledger.approve(&op.tenant, &op.id, approval, now).await {
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
    fn only_well_formed_tokens_are_looked_up() {
        assert!(token_hash(&"a".repeat(64)).is_some());
        assert!(token_hash(&"A".repeat(64)).is_none());
        assert!(token_hash(&"a".repeat(63)).is_none());
        assert!(token_hash("../../etc/passwd").is_none());
    }
}

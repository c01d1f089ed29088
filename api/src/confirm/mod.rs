//! The confirmation page. A link carries a random 256-bit token (only its SHA-256 is stored), but
//! holding a link is not being the customer: approving also needs the customer's own proof, by the
//! tenant's method (`verify.rs`): a signed assertion from the tenant's app (`?assertion=` on the link,
//! carried by a hidden field to the POST), or the one-time code sent out of band. A tenant with no
//! method approves nothing here. The page shows the exact details and posts back the hash of what it
//! showed; approval happens only if the proof holds, the link is unused and unexpired and that hash is
//! the link's and the operation's current one. Every refusal is a 4xx page with a stable code (in the
//! `payonce-error-code` header and on the page) and changes nothing but the counters it names (a
//! wrong code counts an attempt, and keeps the customer on the form with the attempts left).
//! Declining takes the same proof and spends it and the link the same way: the operation ends
//! `cancelled` with the customer as the actor and the proof's evidence in the audit trail
//! (docs/decisions.md). The page names the merchant (its profile, `operations::profile`) and the card
//! (read once from the processor and kept); `view.rs` renders it.

use crate::assertion::{self, AssertionError};
use crate::auth::sha256_hex;
use crate::errors::cause_chain;
use crate::page::{self, security_headers};
use crate::state::AppState;
use crate::verify::{self, code_matches};
use axum::Router;
use axum::extract::rejection::{FormRejection, QueryRejection};
use axum::extract::{Path, Query, Request, State};
use axum::middleware;
use axum::response::Response;
use axum::routing::get;
use axum::{Form, extract::FromRequest as _};
use payonce_core::clock::Timestamp;
use payonce_core::details::DetailsHash;
use payonce_core::id::TenantId;
use payonce_core::state::Status;
use payonce_ledger::profiles::OperationCard;
use payonce_ledger::verification::{
    CodeAttempt, TenantVerification, UsedNonce, VerificationMethod,
};
use payonce_ledger::{ApprovalLink, CustomerDecline, LedgerError, NewApproval, Operation};
use payonce_processor::{Card, CardLookup};
use serde::Deserialize;
use view::{Merchant, Proof, Review, result_page};

pub use crate::verify::{IssuedLink, OPEN_LINKS_MAX, TOKEN_RANDOM_BYTES};

mod view;

pub use crate::page::{CONTENT_SECURITY_POLICY, ERROR_CODE_HEADER};

/// The confirmation routes, with their security headers.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/confirm/{token}", get(show).post(submit))
        .route(page::STYLESHEET_PATH, get(page::stylesheet))
        .layer(middleware::from_fn(security_headers))
}

/// What the page can say.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Approved {
        amount: String,
        invoice: String,
    },
    /// The customer declined; the operation is cancelled.
    Declined {
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
            Outcome::Approved { .. } | Outcome::Declined { .. } => return None,
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
    if link.used_at.is_some() {
        Some(Outcome::AlreadyUsed)
    } else if link.expires_at <= now {
        Some(Outcome::Expired)
    } else {
        None
    }
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

/// The merchant a token's link leads to, for a page that refuses it (reads only; `None` when the
/// link or its operation cannot be found, or the ledger fails).
async fn merchant_of_token(state: &AppState, token: &str) -> Option<Merchant> {
    let hash = token_hash(token)?;
    let link = state.ledger().approval_link(&hash).await.ok()??;
    let op = state.ledger().link_operation(&link).await.ok()?;
    Some(merchant_of(state, &op.tenant).await)
}

/// The tenant's merchant; its id when it set no profile or the profile cannot be read.
async fn merchant_of(state: &AppState, tenant: &TenantId) -> Merchant {
    let profile = state
        .ledger()
        .profiles()
        .profile(tenant)
        .await
        .inspect_err(|e| tracing::warn!(cause = %cause_chain(e), "tenant profile unreadable; the page names the tenant id"))
        .ok()
        .flatten();
    Merchant::of(profile, tenant)
}

/// The card the operation's payment method names: kept from an earlier view, or read from the
/// processor now and kept. `None` (no card line) when the processor cannot tell.
async fn card_of(state: &AppState, op: &Operation) -> Option<Card> {
    let cards = state.ledger().profiles();
    match cards.card(&op.id).await {
        Ok(Some(kept)) => return Card::parse(&kept.brand, &kept.last4),
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(cause = %cause_chain(&e), "kept card unreadable");
            return None;
        }
    }
    let processor = state.processor_for(op)?;
    let payment_method = op.details.payment_method();
    match processor.card(payment_method).await {
        CardLookup::Found(card) => {
            let kept = OperationCard {
                operation: op.id.clone(),
                payment_method: payment_method.to_string(),
                brand: card.brand.clone(),
                last4: card.last4.clone(),
                fetched_at: state.now(),
            };
            if let Err(e) = cards.keep_card(&kept).await {
                tracing::warn!(cause = %cause_chain(&e), "card not kept; the next view asks again");
            }
            Some(card)
        }
        CardLookup::NotACard => None,
        CardLookup::Unavailable { reason } => {
            tracing::warn!(%reason, "payment method lookup failed; the page shows no card");
            None
        }
    }
}

/// The review form for a usable link.
async fn review(
    state: &AppState,
    op: &Operation,
    link: &ApprovalLink,
    proof: Proof<'_>,
    error: Option<&Outcome>,
) -> Response {
    let merchant = merchant_of(state, &op.tenant).await;
    let card = card_of(state, op).await;
    view::review_page(&Review {
        op,
        link,
        proof,
        merchant: &merchant,
        card: card.as_ref(),
        error,
    })
}

/// A page that ends the visit, naming the merchant the token leads to.
async fn result(state: &AppState, token: &str, outcome: &Outcome) -> Response {
    let merchant = merchant_of_token(state, token).await;
    result_page(outcome, merchant.as_ref())
}

/// `GET /confirm/{token}`: the details to approve, or why they cannot be approved here.
async fn show(
    State(state): State<AppState>,
    Path(token): Path<String>,
    query: Result<Query<ShowQuery>, QueryRejection>,
) -> Response {
    let (link, op, config) = match usable(&state, &token).await {
        Ok(found) => found,
        Err(outcome) => return result(&state, &token, &outcome).await,
    };
    match config.method {
        VerificationMethod::SignedAssertion => {
            let Ok(Query(query)) = query else {
                let refused = Outcome::Assertion(AssertionError::Malformed);
                return result(&state, &token, &refused).await;
            };
            let raw = query.assertion.as_deref();
            match check_assertion(&config, &op, raw, state.now_ms()) {
                Ok(_) => {
                    let proof = Proof::Assertion(raw.unwrap_or(""));
                    review(&state, &op, &link, proof, None).await
                }
                Err(outcome) => result(&state, &token, &outcome).await,
            }
        }
        VerificationMethod::OneTimeCode => review(&state, &op, &link, Proof::Code, None).await,
    }
}

/// The posted form.
#[derive(Debug, Deserialize)]
struct Submitted {
    details_hash: String,
    assertion: Option<String>,
    code: Option<String>,
    /// `approve` (also when absent: a form served before Decline existed) or `decline`.
    action: Option<String>,
}

/// What the customer chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Choice {
    Approve,
    Decline,
}

/// What a submission ends on.
enum Decided {
    /// A page that ends the visit.
    Done(Outcome),
    /// The same form again with the error (a wrong or missing code): the customer stays.
    Again {
        op: Box<Operation>,
        link: ApprovalLink,
        error: Outcome,
    },
}

/// `POST /confirm/{token}`: checks the customer's proof, spends it and the link (once each), checks
/// the shown hash is the link's and the operation's, and records the approval, or the decline, with
/// its evidence.
async fn submit(
    State(state): State<AppState>,
    Path(token): Path<String>,
    request: Request,
) -> Response {
    let posted: Result<Form<Submitted>, FormRejection> = Form::from_request(request, &state).await;
    match decide(&state, &token, posted.ok().map(|Form(s)| s)).await {
        Decided::Done(outcome) => {
            if outcome == Outcome::Tampered {
                tracing::warn!(
                    "confirmation submitted with details that do not match its link; nothing approved"
                );
            }
            result(&state, &token, &outcome).await
        }
        Decided::Again { op, link, error } => {
            review(&state, &op, &link, Proof::Code, Some(&error)).await
        }
    }
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

async fn decide(state: &AppState, token: &str, posted: Option<Submitted>) -> Decided {
    let (link, op, config) = match usable(state, token).await {
        Ok(found) => found,
        Err(outcome) => return Decided::Done(outcome),
    };
    let Some(posted) = posted else {
        return Decided::Done(Outcome::Tampered);
    };
    let choice = match posted.action.as_deref() {
        None | Some("approve") => Choice::Approve,
        Some("decline") => Choice::Decline,
        Some(_) => return Decided::Done(Outcome::Tampered),
    };
    let Ok(shown) = DetailsHash::parse(&posted.details_hash) else {
        return Decided::Done(Outcome::Tampered);
    };
    if shown.as_str() != link.details_hash || op.details_hash != shown {
        return Decided::Done(Outcome::Tampered);
    }
    let method = match spend_proof(state, &config, &op, &link, &posted).await {
        Ok(method) => method,
        Err(error @ (Outcome::CodeWrong { .. } | Outcome::CodeRequired)) => {
            return Decided::Again {
                op: Box::new(op),
                link,
                error,
            };
        }
        Err(outcome) => return Decided::Done(outcome),
    };
    Decided::Done(record(state, &op, &link, shown, method, choice).await)
}

/// Spends the link and records the customer's choice with the proof's evidence.
async fn record(
    state: &AppState,
    op: &Operation,
    link: &ApprovalLink,
    shown: DetailsHash,
    method: String,
    choice: Choice,
) -> Outcome {
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
    let actor = format!("customer:{}", op.details.customer());
    let done = match choice {
        Choice::Approve => {
            let approval = NewApproval {
                operation: op.id.clone(),
                details_hash: shown,
                approved_by: actor,
                method,
                // Never before the payment may run (a scheduled one waits for its `not_before`).
                expires_at: payonce_core::priority::approval_expires_at(
                    now,
                    op.not_before,
                    state.config().approval_ttl,
                ),
                priority: Some(payonce_core::priority::Priority::Interactive),
            };
            ledger
                .approve(&op.tenant, approval, now)
                .await
                .map(|approved| Outcome::Approved {
                    amount: approved.details.money().for_people(),
                    invoice: approved.details.invoice().to_string(),
                })
        }
        Choice::Decline => {
            let decline = CustomerDecline {
                id: &op.id,
                details_hash: &shown,
                actor: &actor,
                evidence: &method,
            };
            ledger
                .decline(&op.tenant, &decline, now)
                .await
                .map(|declined| Outcome::Declined {
                    amount: declined.details.money().for_people(),
                    invoice: declined.details.invoice().to_string(),
                })
        }
    };
    match done {
        Ok(outcome) => outcome,
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
        let doc = include_str!("../../../docs/api.md");
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
            let status = view::status_of(outcome);
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

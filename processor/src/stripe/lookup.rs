//! Finding a past submission: by reference (`GET /v1/payment_intents/{id}`) when the ledger has one, otherwise
//! by a list query (customer + `created[gte]`, newest first, bounded pages) matched on
//! `metadata[payonce_operation_id]`. Retrieve and list are read-after-write consistent; search lags (up to an
//! hour, Stripe says) and is never used, so "not found" here means "never created".

use super::StripeProcessor;
use super::classify::failure_of;
use super::wire::{belongs, intention_of, operation_of};
use super::{BodyError, read_body};
use crate::{
    AnswerFacts, Card, CardLookup, FoundStatus, LookupOutcome, LookupQuery, ProcessorObject,
    Retrieved,
};
use payonce_core::details::DetailsHash;
use payonce_core::id::{BusinessKey, OperationId};
use serde_json::Value;

/// Most list pages read per lookup; when more payments than this for one customer came since submission, a
/// payment not seen in them is reported as `NotFound { consistent: false }`: it proves nothing, so the
/// reconciler only retries with the same key (the processor replays it if it landed) or asks a human.
pub const LOOKUP_PAGES_MAX: usize = 10;
/// Page size of list lookups (Stripe's maximum).
const LIST_PAGE_LIMIT: u32 = 100;
/// How far before the recorded first submission a list lookup starts: `created` is Stripe's clock, the
/// ledger's time is ours, and a skew must never hide a payment.
pub const CLOCK_SKEW_MARGIN_SECS: i64 = 600;

pub(crate) fn unavailable(reason: impl Into<String>) -> LookupOutcome {
    LookupOutcome::Unavailable {
        reason: reason.into(),
    }
}

/// One page of a Stripe list, or the lookup outcome that ends the search: a 429 defers it, any
/// other failure leaves it unavailable.
pub(crate) async fn list_page(p: &StripeProcessor, url: String) -> Result<Value, LookupOutcome> {
    match get_json(p, url).await {
        Ok((200, v)) => Ok(v),
        Ok((429, v)) => Err(LookupOutcome::RateLimited {
            reason: format!("list answered HTTP 429: {}", error_message(&v)),
        }),
        Ok((status, v)) => Err(unavailable(format!(
            "list answered HTTP {status}: {}",
            error_message(&v)
        ))),
        Err(why) => Err(unavailable(why.to_string())),
    }
}

pub(crate) fn is_id(raw: &str) -> bool {
    !raw.is_empty()
        && raw.len() <= 255
        && raw.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// What a PaymentIntent's status says about the operation.
pub(crate) fn found_status(pi: &Value) -> FoundStatus {
    let status = pi
        .get("status")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    match status.as_str() {
        "succeeded" => FoundStatus::Succeeded { result: pi.clone() },
        // Confirmed off-session with nobody to act on it: these do not turn into money on their own.
        "requires_payment_method" | "requires_action" | "canceled" => {
            let (code, message) = failure_of(pi, &status);
            FoundStatus::Failed { code, message }
        }
        _ => FoundStatus::Pending {
            processor_status: status,
        },
    }
}

fn rank(status: &FoundStatus) -> u8 {
    match status {
        FoundStatus::Succeeded { .. } => 0,
        FoundStatus::Pending { .. } => 1,
        FoundStatus::Failed { .. } => 2,
    }
}

/// Why a GET brought no JSON answer (the caller reports it as the lookup's reason).
#[derive(Debug, thiserror::Error)]
pub(crate) enum GetError {
    /// Nothing came back.
    #[error("request failed: {0}")]
    Request(#[source] reqwest::Error),
    /// A status came back, its body did not.
    #[error(transparent)]
    Body(#[from] BodyError),
    /// A redirect, not followed ([`crate::redirect`]).
    #[error("{0}")]
    Redirected(String),
    /// The body is not JSON.
    #[error("HTTP {status} with an unparseable body: {source}")]
    Unparseable {
        /// The answer's HTTP status.
        status: u16,
        /// Why it did not parse.
        source: serde_json::Error,
    },
}

pub(crate) async fn get_json(p: &StripeProcessor, url: String) -> Result<(u16, Value), GetError> {
    let response = p
        .request(reqwest::Method::GET, url)
        .send()
        .await
        .map_err(GetError::Request)?;
    if let Some(why) = crate::redirect::redirected(&response) {
        return Err(GetError::Redirected(why));
    }
    let status = response.status().as_u16();
    let body = read_body(response).await?;
    let v =
        serde_json::from_slice(&body).map_err(|source| GetError::Unparseable { status, source })?;
    Ok((status, v))
}

/// Whose object a lookup looks for: the operation, or its intention (business key and details hash).
pub(crate) struct Owner<'a> {
    pub(crate) operation_id: &'a OperationId,
    pub(crate) business_key: &'a BusinessKey,
    pub(crate) details_hash: &'a DetailsHash,
}

impl Owner<'_> {
    pub(crate) fn owns(&self, object: &Value) -> bool {
        belongs(
            object,
            self.operation_id,
            self.business_key,
            self.details_hash,
        )
    }
}

/// Retrieves `{path}/{reference}` (a payment intent or a refund): `Found` when it is `owner`'s (its
/// operation id or its intention), otherwise its facts (`facts_of`), for the caller to check
/// against the operation.
pub(crate) async fn by_reference(
    p: &StripeProcessor,
    path: &str,
    reference: &str,
    owner: &Owner<'_>,
    facts_of: fn(&str, &Value) -> ProcessorObject,
) -> LookupOutcome {
    if !is_id(reference) {
        return unavailable(format!("stored reference {reference:?} is not a Stripe id"));
    }
    let url = format!("{}{path}/{reference}", p.config.api_base);
    match get_json(p, url).await {
        Ok((200, object)) => {
            let facts = facts_of(reference, &object);
            if owner.owns(&object) {
                LookupOutcome::Found {
                    reference: reference.to_string(),
                    status: facts.status,
                }
            } else {
                // Whose it is and what that means is decided by the rule webhooks go through,
                // not here: "unavailable" would defer the operation forever.
                LookupOutcome::Unmatched {
                    object: Box::new(facts),
                }
            }
        }
        // Stripe issued this id; not finding it is an anomaly for a human, never proof of absence.
        Ok((404, _)) => unavailable(format!("{reference} not found by retrieve")),
        Ok((429, v)) => LookupOutcome::RateLimited {
            reason: format!("retrieve answered HTTP 429: {}", error_message(&v)),
        },
        Ok((status, v)) => unavailable(format!(
            "retrieve answered HTTP {status}: {}",
            error_message(&v)
        )),
        Err(why) => unavailable(why.to_string()),
    }
}

pub(crate) fn error_message(v: &Value) -> String {
    v.get("error")
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

async fn by_list(p: &StripeProcessor, query: &LookupQuery<'_>) -> LookupOutcome {
    let created_gte = query.created_after.as_millis().div_euclid(1000) - CLOCK_SKEW_MARGIN_SECS;
    let mut starting_after: Option<String> = None;
    let mut best: Option<(String, FoundStatus)> = None;
    let mut matches = 0_usize;
    for _ in 0..LOOKUP_PAGES_MAX {
        let mut params: Vec<(&str, String)> = vec![
            ("customer", query.customer.to_string()),
            ("created[gte]", created_gte.to_string()),
            ("limit", LIST_PAGE_LIMIT.to_string()),
        ];
        if let Some(after) = &starting_after {
            params.push(("starting_after", after.clone()));
        }
        let Ok(qs) = serde_urlencoded::to_string(&params) else {
            return unavailable("could not encode the list query");
        };
        let url = format!("{}/v1/payment_intents?{qs}", p.config.api_base);
        let page = match list_page(p, url).await {
            Ok(v) => v,
            Err(outcome) => return outcome,
        };
        let data = page
            .get("data")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for pi in &data {
            if !belongs(
                pi,
                query.operation_id,
                query.business_key,
                query.details_hash,
            ) {
                continue;
            }
            let Some(id) = pi.get("id").and_then(Value::as_str) else {
                continue;
            };
            matches += 1;
            let status = found_status(pi);
            if best.as_ref().is_none_or(|(_, b)| rank(&status) < rank(b)) {
                best = Some((id.to_string(), status));
            }
        }
        let has_more = page
            .get("has_more")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let last = data
            .last()
            .and_then(|pi| pi.get("id"))
            .and_then(Value::as_str)
            .map(str::to_string);
        match (has_more, last) {
            (true, Some(last)) => starting_after = Some(last),
            _ => {
                if matches > 1 {
                    tracing::warn!(operation_id = %query.operation_id, matches, "several payments carry one operation id");
                }
                return match best {
                    Some((reference, status)) => LookupOutcome::Found { reference, status },
                    None => LookupOutcome::NotFound { consistent: true },
                };
            }
        }
    }
    match best {
        // A success is a success however many pages remain.
        Some((reference, status @ FoundStatus::Succeeded { .. })) => {
            LookupOutcome::Found { reference, status }
        }
        // Waiting would not help: the pages only grow. What was not seen is not proven absent.
        _ => {
            tracing::warn!(operation_id = %query.operation_id,
                "more than {LOOKUP_PAGES_MAX} pages of payments for this customer since submission; \
                 the lookup is inconclusive");
            LookupOutcome::NotFound { consistent: false }
        }
    }
}

/// The facts of a PaymentIntent payonce checks, parsed from Stripe's wire shape.
pub(crate) fn object_of(reference: &str, pi: &Value) -> ProcessorObject {
    let facts = answer_facts_of(pi);
    ProcessorObject {
        reference: reference.to_string(),
        amount_minor: facts.amount_minor,
        currency: facts.currency,
        customer: pi
            .get("customer")
            .and_then(Value::as_str)
            .map(str::to_string),
        operation_id: facts.operation_id,
        intention: facts.intention,
        payment_reference: None,
        status: found_status(pi),
        object: pi.clone(),
    }
}

/// The facts of PaymentIntent `pi` that say which payment it is ([`object_of`] reads them here
/// too), read without a copy of the object.
pub(crate) fn answer_facts_of(pi: &Value) -> AnswerFacts {
    AnswerFacts {
        amount_minor: pi.get("amount").and_then(Value::as_i64),
        currency: pi
            .get("currency")
            .and_then(Value::as_str)
            .map(str::to_ascii_lowercase),
        operation_id: operation_of(pi).map(str::to_string),
        intention: intention_of(pi),
    }
}

/// `GET /v1/payment_intents/{reference}`: the object a webhook named, or why it cannot be had.
pub(crate) async fn retrieve(p: &StripeProcessor, reference: &str) -> Retrieved {
    if !is_id(reference) {
        // Not a Stripe id: no object can carry it.
        return Retrieved::NotFound;
    }
    let url = format!("{}/v1/payment_intents/{reference}", p.config.api_base);
    match get_json(p, url).await {
        Ok((200, pi)) => match pi.get("id").and_then(Value::as_str) {
            Some(id) if id == reference => Retrieved::Found(Box::new(object_of(reference, &pi))),
            other => Retrieved::Unavailable {
                reason: format!("retrieve of {reference} answered the object {other:?}"),
            },
        },
        Ok((404, _)) => Retrieved::NotFound,
        Ok((status, v)) => Retrieved::Unavailable {
            reason: format!("retrieve answered HTTP {status}: {}", error_message(&v)),
        },
        Err(why) => Retrieved::Unavailable {
            reason: why.to_string(),
        },
    }
}

/// The card of a payment method: `GET /v1/payment_methods/{id}`, its `card.brand` and
/// `card.last4`. A method that is not a card (or whose card fields are not as Stripe documents
/// them) is [`CardLookup::NotACard`]: the page then shows no card line rather than a guess.
pub(crate) async fn card(p: &StripeProcessor, payment_method: &str) -> CardLookup {
    if !is_id(payment_method) {
        return CardLookup::NotACard;
    }
    let url = format!("{}/v1/payment_methods/{payment_method}", p.config.api_base);
    match get_json(p, url).await {
        Ok((200, pm)) => {
            let field = |name: &str| pm["card"][name].as_str().unwrap_or("");
            match Card::parse(field("brand"), field("last4")) {
                Some(card) if pm["id"].as_str() == Some(payment_method) => CardLookup::Found(card),
                _ => CardLookup::NotACard,
            }
        }
        Ok((404, _)) => CardLookup::NotACard,
        Ok((status, v)) => CardLookup::Unavailable {
            reason: format!(
                "payment method lookup answered HTTP {status}: {}",
                error_message(&v)
            ),
        },
        Err(why) => CardLookup::Unavailable {
            reason: why.to_string(),
        },
    }
}

/// Runs a lookup.
pub(crate) async fn run(p: &StripeProcessor, query: &LookupQuery<'_>) -> LookupOutcome {
    match query.reference {
        Some(reference) => {
            let owner = Owner {
                operation_id: query.operation_id,
                business_key: query.business_key,
                details_hash: query.details_hash,
            };
            by_reference(p, "/v1/payment_intents", reference, &owner, object_of).await
        }
        None => by_list(p, query).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn statuses_map_to_found_status() {
        assert!(matches!(
            found_status(&json!({"status": "succeeded"})),
            FoundStatus::Succeeded { .. }
        ));
        assert!(matches!(
            found_status(&json!({"status": "processing"})),
            FoundStatus::Pending { .. }
        ));
        assert!(matches!(
            found_status(&json!({"status": "requires_capture"})),
            FoundStatus::Pending { .. }
        ));
        match found_status(&json!({"status": "requires_payment_method",
            "last_payment_error": {"code": "card_declined", "message": "no"}}))
        {
            FoundStatus::Failed { code, .. } => assert_eq!(code, "card_declined"),
            other => panic!("{other:?}"),
        }
        assert!(is_id("pi_3Abc") && !is_id("pi/../x") && !is_id(""));
    }
}

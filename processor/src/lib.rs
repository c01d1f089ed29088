//! The processor boundary: one trait every adapter implements, with the contract it declares.
//!
//! An adapter never decides the operation's state; it reports one of four outcomes and the worker
//! and reconciler apply them through the state machine. [`routing`] says which adapter serves an
//! operation.

pub mod adyen;
pub mod carry;
pub mod contract;
pub mod ingest;
pub mod limiter;
pub mod operation;
pub mod reachability;
pub mod redirect;
pub mod routing;
pub mod stripe;

use async_trait::async_trait;
use payonce_core::details::{Details, DetailsHash, RefundReason};
use payonce_core::id::{BusinessKey, IdempotencyKey, OperationId, TenantId};
use payonce_core::money::Money;
use serde::{Deserialize, Serialize};

pub use contract::Contract;
pub use payonce_core::operation::ProcessorKind;
pub use routing::{Processors, Unconfigured};

/// What a submission asks the processor to do. Everything comes from the ledger record.
#[derive(Debug, Clone)]
pub struct SubmitRequest<'a> {
    /// The operation (sent as metadata so lookups can find it).
    pub operation_id: &'a OperationId,
    /// The tenant (sent as metadata).
    pub tenant: &'a TenantId,
    /// The stored key; the same on every attempt.
    pub idempotency_key: &'a IdempotencyKey,
    /// The trusted workflow's key (sent as metadata: an operation re-created after the ledger lost it
    /// carries the same one, so its processor object is found again).
    pub business_key: &'a BusinessKey,
    /// The approved details' hash (sent as metadata, beside the business key).
    pub details_hash: &'a DetailsHash,
    /// The approved details.
    pub details: &'a Details,
}

/// What a refund submission asks the processor to do (Stripe: `POST /v1/refunds`). Everything comes
/// from the ledger record of the refund operation and of the succeeded payment it refers to.
#[derive(Debug, Clone)]
pub struct RefundRequest<'a> {
    /// The refund operation (sent as metadata so lookups and webhooks can find it).
    pub operation_id: &'a OperationId,
    /// The tenant (sent as metadata).
    pub tenant: &'a TenantId,
    /// The refund operation's stored key; the same on every attempt.
    pub idempotency_key: &'a IdempotencyKey,
    /// The trusted workflow's key (sent as metadata: an operation re-created after the ledger lost it
    /// carries the same one, so its processor object is found again).
    pub business_key: &'a BusinessKey,
    /// The approved details' hash (sent as metadata, beside the business key).
    pub details_hash: &'a DetailsHash,
    /// The processor reference of the refunded payment, e.g. `pi_...`.
    pub payment_reference: &'a str,
    /// The payment operation refunded (sent as metadata: a refund whose row the ledger lost is
    /// made again from its payment's row).
    pub payment_operation: &'a OperationId,
    /// How much to give back, in the payment's currency (partial refunds allowed).
    pub amount: Money,
    /// Why.
    pub reason: RefundReason,
}

/// What a refund lookup is asked to find (Stripe: the refunds of the payment, matched by metadata).
#[derive(Debug, Clone)]
pub struct RefundLookupQuery<'a> {
    /// The refund operation (matched against metadata).
    pub operation_id: &'a OperationId,
    /// The refund operation's stored key.
    pub idempotency_key: &'a IdempotencyKey,
    /// The operation's business key: an object whose metadata carries it and `details_hash` belongs
    /// to the same intention even when it names another operation id (a row the ledger lost).
    pub business_key: &'a BusinessKey,
    /// The approved details' hash.
    pub details_hash: &'a DetailsHash,
    /// The refund's processor reference (`re_...`), when the ledger has one.
    pub reference: Option<&'a str>,
    /// The processor reference of the refunded payment, e.g. `pi_...`.
    pub payment_reference: &'a str,
}

/// The four outcomes of a submission. An ambiguous outcome is a state, not an error string.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum SubmitOutcome {
    /// The processor confirmed the payment (or refund).
    Succeeded {
        /// Processor reference, e.g. `pi_...` or `re_...`.
        reference: String,
        /// The processor's response body, stored as the result.
        result: serde_json::Value,
        /// The processor answered with a response it had stored under the key (Stripe:
        /// `Idempotent-Replayed: true`): the request had been made before.
        #[serde(default)]
        replayed: bool,
    },
    /// A definitive unsuccessful outcome under the processor's documented semantics.
    Declined {
        /// Processor decline or error code.
        code: String,
        /// Processor message.
        message: String,
        /// Processor reference, when one was created.
        reference: Option<String>,
    },
    /// Nothing ran at the processor (connection refused, rate limited before execution, ...). Safe to retry.
    NotSubmitted {
        /// Why.
        reason: String,
    },
    /// The processor could not be reached at all (connection refused, DNS, TLS handshake, connect
    /// timeout): no byte of the request left this process. Safe to retry, and no failed attempt: the
    /// payment waits while its approval holds ([`reachability::while_unreachable`]).
    Unreachable {
        /// Why.
        reason: String,
    },
    /// The processor refused the request before executing it because of its rate limits (Stripe: 429
    /// `rate_limit`, answered before the idempotency layer, never stored under the key). Nothing ran: the
    /// same request with the same key may be sent again after a pause, and it is not a failed attempt.
    RateLimited {
        /// Why.
        reason: String,
        /// How long the processor asked us to wait, ms, when it said.
        retry_after_ms: Option<u64>,
    },
    /// The request may have reached the processor; nobody knows what it did. Only a lookup resolves it.
    Unknown {
        /// Why.
        reason: String,
        /// Processor reference, when known (e.g. a payment left `processing`).
        reference: Option<String>,
    },
    /// The processor refused the stored key because an earlier request under it carried other
    /// parameters (Stripe: 400 `idempotency_error`; Adyen: 422 `704`). The key names the business
    /// action ([`payonce_core::intention`]), so the processor already holds another request for this
    /// business key (a recomputed amount re-sent after the ledger lost the row): this one was not
    /// executed, the earlier one may have paid, and only a human can tell which is right. Never
    /// retried, with this key or another.
    KeyReused {
        /// What the processor said.
        reason: String,
    },
    /// The processor answered, refusing payonce's credentials, permissions or URL (HTTP 401, 403,
    /// 404): a configuration error. The request reached it, so it is never "not submitted"; nothing
    /// ran, so once a human mends the configuration a retry with the same key is safe.
    Misconfigured {
        /// What the processor said, and that the configuration is at fault.
        reason: String,
    },
}

impl SubmitOutcome {
    /// A [`SubmitOutcome::Misconfigured`] for the processor's answer `described`.
    pub fn misconfigured(described: &str) -> SubmitOutcome {
        SubmitOutcome::Misconfigured {
            reason: format!(
                "{described}: the processor refused payonce's credentials, permissions or URL, a \
                 configuration error (nothing ran; once it is mended, `resolve --as retry` sends \
                 the same key again)"
            ),
        }
    }
}

/// What a lookup is asked to find.
#[derive(Debug, Clone)]
pub struct LookupQuery<'a> {
    /// The operation (matched against metadata).
    pub operation_id: &'a OperationId,
    /// The stored key.
    pub idempotency_key: &'a IdempotencyKey,
    /// The operation's business key: an object whose metadata carries it and `details_hash` belongs
    /// to the same intention even when it names another operation id (a row the ledger lost).
    pub business_key: &'a BusinessKey,
    /// The approved details' hash.
    pub details_hash: &'a DetailsHash,
    /// The processor reference, when the ledger has one.
    pub reference: Option<&'a str>,
    /// The customer (narrows list queries).
    pub customer: &'a str,
    /// Earliest time the payment could have been created (narrows list queries).
    pub created_after: payonce_core::clock::Timestamp,
}

/// A processor-side status found by lookup.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum FoundStatus {
    /// Paid.
    Succeeded {
        /// The processor's object, stored as the result; serialized as its summary only.
        #[serde(serialize_with = "payonce_core::summary::serialize_summary_of")]
        result: serde_json::Value,
    },
    /// Definitively not paid.
    Failed {
        /// Decline or cancellation code.
        code: String,
        /// Processor message.
        message: String,
    },
    /// Still in progress at the processor (e.g. `processing`); poll again later.
    Pending {
        /// The processor's own status word.
        processor_status: String,
    },
}

/// The result of a lookup.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "lookup", rename_all = "snake_case")]
pub enum LookupOutcome {
    /// The processor has a record of this operation.
    Found {
        /// Processor reference.
        reference: String,
        /// Its status.
        status: FoundStatus,
    },
    /// No record found. `consistent` says whether the lookup is read-after-write consistent, i.e.
    /// whether "not found" means "never created".
    NotFound {
        /// Read-after-write consistent lookup.
        consistent: bool,
    },
    /// The processor refused the lookup because of its rate limits (429); check again later.
    RateLimited {
        /// Why.
        reason: String,
    },
    /// The lookup itself failed; try again later.
    Unavailable {
        /// Why.
        reason: String,
    },
    /// The stored reference names an object that does not carry this operation's id: its facts. Whose
    /// it is and whether it contradicts the approval is the caller's check, the same one a webhook's
    /// object goes through (the reconciler's `evidence::report_of`).
    Unmatched {
        /// What the processor holds under the reference.
        object: Box<ProcessorObject>,
    },
}

/// A processor object retrieved by its reference, parsed at the boundary into the facts payonce
/// checks against the operation before it believes anything a webhook said.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessorObject {
    /// Processor reference, e.g. `pi_...`.
    pub reference: String,
    /// Amount in minor units, as the processor holds it.
    pub amount_minor: Option<i64>,
    /// Currency, lowercase, as the processor holds it.
    pub currency: Option<String>,
    /// The processor's customer, if any.
    pub customer: Option<String>,
    /// The operation id the object carries in its metadata, if any.
    pub operation_id: Option<String>,
    /// The tenant, business key and details hash its metadata carries (objects created since issue
    /// 37): the intention, which outlives the operation id when a ledger forgets a row.
    pub intention: Option<IntentionMetadata>,
    /// For a refund: the payment it gives money back from (`pi_...`); `None` for a payment.
    pub payment_reference: Option<String>,
    /// What its status says about the operation.
    pub status: FoundStatus,
    /// The whole object (stored as the result; shown only through [`summary::summary`]).
    #[serde(serialize_with = "payonce_core::summary::serialize_summary_of")]
    pub object: serde_json::Value,
}

/// What a success answer says of itself: the facts of a [`ProcessorObject`] that name the payment
/// (amount, currency, whose), which the submission checks against the approved operation before it
/// records the answer as paid. Unlike a [`ProcessorObject`] it keeps no copy of the object: the
/// answer itself is what is recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnswerFacts {
    /// Amount in minor units, as the processor holds it.
    pub amount_minor: Option<i64>,
    /// Currency, lowercase, as the processor holds it.
    pub currency: Option<String>,
    /// The operation id the object carries in its metadata, if any.
    pub operation_id: Option<String>,
    /// The tenant, business key and details hash its metadata carries, if it carries all three.
    pub intention: Option<IntentionMetadata>,
}

impl From<ProcessorObject> for AnswerFacts {
    fn from(object: ProcessorObject) -> Self {
        AnswerFacts {
            amount_minor: object.amount_minor,
            currency: object.currency,
            operation_id: object.operation_id,
            intention: object.intention,
        }
    }
}

/// The intention a processor object's metadata names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntentionMetadata {
    /// The tenant.
    pub tenant: String,
    /// The trusted workflow's key.
    pub business_key: String,
    /// The approved details' hash.
    pub details_hash: String,
}

impl IntentionMetadata {
    /// Whether this is `op`'s intention: same tenant, business key and details.
    pub fn is_of(&self, op: &payonce_ledger::Operation) -> bool {
        self.tenant == op.tenant.as_str()
            && self.business_key == op.business_key.as_str()
            && self.details_hash == op.details_hash.as_str()
    }
}

/// The result of retrieving one object by reference.
#[derive(Debug, Clone, PartialEq)]
pub enum Retrieved {
    /// The processor has it.
    Found(Box<ProcessorObject>),
    /// The processor has no object with this reference (a hint naming one is not evidence).
    NotFound,
    /// The processor could not be asked; try again later, apply nothing.
    Unavailable {
        /// Why.
        reason: String,
    },
}

/// One page of a scan of the processor's recent payments: money the ledger may not know about
/// (a restore or a failover lost its row).
#[derive(Debug, Clone)]
pub struct RecentQuery<'a> {
    /// Earliest creation time, Unix seconds on the processor's clock.
    pub created_gte_s: i64,
    /// The last object of the previous page (lists run newest first).
    pub starting_after: Option<&'a str>,
}

/// A payment or refund found by a scan, with the details its metadata and fields carry.
#[derive(Debug, Clone)]
pub struct ScannedPayment {
    /// Its facts.
    pub object: ProcessorObject,
    /// The details it was created with, when everything a ledger row needs is on it (payments
    /// created by payonce since issue 37 carry the invoice in metadata; refunds: never).
    pub details: Option<Details>,
    /// For a refund: the payment operation its metadata names (refunds since issue 37).
    pub payment_operation: Option<OperationId>,
}

/// What one scan page brought.
#[derive(Debug, Clone)]
pub enum RecentPage {
    /// A page, and the cursor of the next one if there is more.
    Page {
        /// The payments, newest first.
        payments: Vec<ScannedPayment>,
        /// `starting_after` of the next page; `None` at the end.
        next: Option<String>,
    },
    /// The processor asked us to slow down; try the scan again later.
    RateLimited {
        /// Why.
        reason: String,
    },
    /// The processor could not be asked, or this adapter cannot list.
    Unavailable {
        /// Why.
        reason: String,
    },
}

/// What the processor holds for a business key, asked before a first submission.
#[derive(Debug, Clone, PartialEq)]
pub enum PriorPayment {
    /// Nothing paid or in progress carries this business key.
    None,
    /// The most consequential object carrying it (a success before one in progress before a failure).
    Found(Box<ProcessorObject>),
    /// The processor could not be asked (or this adapter cannot search); nothing is known.
    Unavailable {
        /// Why.
        reason: String,
    },
}

/// The card a payment method names, as a customer recognises it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Card {
    /// The brand as the processor names it (`visa`, `mastercard`), at most [`CARD_BRAND_LEN_MAX`].
    pub brand: String,
    /// The last four digits.
    pub last4: String,
}

/// Longest card brand kept (Stripe's longest today is `unionpay`).
pub const CARD_BRAND_LEN_MAX: usize = 32;

impl Card {
    /// A card from a processor's answer; `None` unless the brand is 1 to [`CARD_BRAND_LEN_MAX`]
    /// lowercase letters, digits or `_` and `last4` is four digits (nothing else reaches a page).
    pub fn parse(brand: &str, last4: &str) -> Option<Card> {
        let brand_ok = !brand.is_empty()
            && brand.len() <= CARD_BRAND_LEN_MAX
            && brand
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        let last4_ok = last4.len() == 4 && last4.chars().all(|c| c.is_ascii_digit());
        (brand_ok && last4_ok).then(|| Card {
            brand: brand.to_string(),
            last4: last4.to_string(),
        })
    }
}

/// What asking the processor for a payment method's card found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CardLookup {
    /// The card.
    Found(Card),
    /// The processor has no such payment method, or it is not a card.
    NotACard,
    /// The processor could not be asked, or this adapter cannot.
    Unavailable {
        /// Why.
        reason: String,
    },
}

/// One payment processor.
#[async_trait]
pub trait Processor: Send + Sync {
    /// The contract this adapter declares.
    fn contract(&self) -> &Contract;
    /// Submits the operation once, with its stored key. Never retries with a different key.
    async fn submit(&self, request: &SubmitRequest<'_>) -> SubmitOutcome;
    /// Looks for a past submission of the operation.
    async fn lookup(&self, query: &LookupQuery<'_>) -> LookupOutcome;
    /// Submits a refund once, with its stored key (Stripe: POST /v1/refunds).
    async fn submit_refund(&self, request: &RefundRequest<'_>) -> SubmitOutcome;
    /// Looks for a past refund submission (Stripe: list the payment's refunds, match metadata).
    async fn lookup_refund(&self, query: &RefundLookupQuery<'_>) -> LookupOutcome;
    /// The facts of an object this adapter returned (a lookup's result), for checking them against
    /// the operation; `None` when the adapter cannot read its own objects (nothing is checked).
    fn facts(&self, reference: &str, object: &serde_json::Value) -> Option<ProcessorObject> {
        let _ = (reference, object);
        None
    }
    /// The facts of a success answer this adapter returned that say which payment it is (those of
    /// [`Processor::facts`], without the copies of the object a lookup's result keeps): every
    /// success answer is checked with them before it is recorded. `None`: nothing is checked.
    fn answer_facts(&self, reference: &str, object: &serde_json::Value) -> Option<AnswerFacts> {
        self.facts(reference, object).map(AnswerFacts::from)
    }
    /// One page of the payments created since `query.created_gte_s`, newest first. An adapter that
    /// cannot list finds no money the ledger lost.
    async fn recent_payments(&self, query: &RecentQuery<'_>) -> RecentPage {
        let _ = query;
        RecentPage::Unavailable {
            reason: format!("the {} adapter cannot list payments", self.contract().name),
        }
    }
    /// The payment the processor holds for a tenant's business key, whenever it was made (Stripe:
    /// search by metadata, which lags writes by up to an hour: enough for a payment older than the
    /// key's retention, the only one a same-key submission would not replay).
    async fn prior_payment(&self, tenant: &TenantId, business_key: &BusinessKey) -> PriorPayment {
        let _ = (tenant, business_key);
        PriorPayment::Unavailable {
            reason: format!(
                "the {} adapter cannot search payments",
                self.contract().name
            ),
        }
    }
    /// One page of the refunds created since `query.created_gte_s`, newest first (their `details`
    /// are `None`: a refund's are made from its payment's row). An adapter that cannot list finds no
    /// refund the ledger lost.
    async fn recent_refunds(&self, query: &RecentQuery<'_>) -> RecentPage {
        let _ = query;
        RecentPage::Unavailable {
            reason: format!("the {} adapter cannot list refunds", self.contract().name),
        }
    }
    /// Retrieves one object by its reference (checking a webhook's claim). An adapter that cannot
    /// leaves every hint unapplied.
    async fn retrieve(&self, reference: &str) -> Retrieved {
        Retrieved::Unavailable {
            reason: format!(
                "the {} adapter cannot retrieve {reference} by reference",
                self.contract().name
            ),
        }
    }
    /// The card a payment method names, for the confirmation page (Stripe:
    /// `GET /v1/payment_methods/{id}`). An adapter that cannot leaves the page without a card line.
    async fn card(&self, payment_method: &str) -> CardLookup {
        let _ = payment_method;
        CardLookup::Unavailable {
            reason: format!("the {} adapter cannot read cards", self.contract().name),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn a_lookup_result_serializes_as_its_summary() {
        // `reconciler show --json` prints the processor's view of the operation.
        let found = crate::LookupOutcome::Found {
            reference: "pi_1".into(),
            status: crate::FoundStatus::Succeeded {
                result: json!({"id": "pi_1", "amount": 5, "client_secret": "pi_1_secret_x"}),
            },
        };
        let text = serde_json::to_string(&found).unwrap();
        assert!(
            text.contains("\"amount\":5") && !text.contains("secret"),
            "{text}"
        );
    }
}

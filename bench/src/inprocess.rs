//! The simulator's payment semantics without HTTP, for the zero-latency figures: on 2 cores an HTTP
//! server with its own SQLite store would measure itself, not the ledger and the worker.
//!
//! Kept: one payment (or refund) per idempotency key (a repeated key replays the first answer), decline
//! cards, consistent lookups by operation, refunds bounded by what a payment received. Dropped: the wire
//! format, faults, webhooks, persistence, asynchronous refunds.

use async_trait::async_trait;
use payonce_processor::{
    Contract, FoundStatus, LookupOutcome, LookupQuery, Processor, RefundLookupQuery, RefundRequest,
    SubmitOutcome, SubmitRequest,
};
use std::collections::HashMap;
use std::sync::Mutex;

/// The payment method the in-process processor declines, as the simulator does.
pub const DECLINE_CARD: &str = "pm_card_chargeDeclined";

#[derive(Debug, Default)]
struct Book {
    /// Idempotency key → the answer first given under it.
    by_key: HashMap<String, SubmitOutcome>,
    /// Operation id → payment reference (lookups).
    by_operation: HashMap<String, String>,
    /// Payment reference → amount it received.
    received: HashMap<String, i64>,
    /// Payment reference → amount refunded from it.
    refunded: HashMap<String, i64>,
    /// Refund operation id → refund reference (lookups).
    refund_by_operation: HashMap<String, String>,
    /// Submissions received, replays included.
    requests: u64,
}

/// An in-memory processor with the simulator's idempotency semantics.
#[derive(Debug)]
pub struct InProcessProcessor {
    contract: Contract,
    book: Mutex<Book>,
}

impl Default for InProcessProcessor {
    fn default() -> Self {
        InProcessProcessor {
            contract: Contract {
                name: "in-process simulator",
                ..payonce_processor::contract::STRIPE
            },
            book: Mutex::new(Book::default()),
        }
    }
}

impl InProcessProcessor {
    /// Payments created (distinct keys that succeeded).
    pub fn payments(&self) -> u64 {
        self.with_book(|b| b.by_operation.len() as u64)
    }

    /// Submissions received, replays included.
    pub fn requests(&self) -> u64 {
        self.with_book(|b| b.requests)
    }

    /// The reference paid for `operation`, if any.
    pub fn reference_of(&self, operation: &str) -> Option<String> {
        self.with_book(|b| b.by_operation.get(operation).cloned())
    }

    /// Records a payment made before a crash (the worker died before recording it), so a lookup
    /// finds it.
    pub fn preload_payment(&self, operation: &str, idempotency_key: &str) {
        self.with_book(|b| {
            let reference = format!("pi_pre_{}", b.by_operation.len());
            b.by_operation
                .insert(operation.to_string(), reference.clone());
            b.by_key.insert(
                idempotency_key.to_string(),
                SubmitOutcome::Succeeded {
                    result: serde_json::json!({ "id": reference, "status": "succeeded" }),
                    reference,
                    replayed: true,
                },
            );
        })
    }

    fn with_book<T>(&self, f: impl FnOnce(&mut Book) -> T) -> T {
        // A panic while holding the lock is a bench bug; the book itself stays consistent.
        let mut guard = match self.book.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut guard)
    }
}

/// Every `operation → reference` of the book on one scan page.
fn one_page(paid: &HashMap<String, String>) -> payonce_processor::RecentPage {
    payonce_processor::RecentPage::Page {
        payments: paid
            .iter()
            .map(|(operation, reference)| scanned(operation, reference))
            .collect(),
        next: None,
    }
}

/// A paid object of the book as a scan reads it: its reference and the operation it names; no
/// intention or details (this processor keeps neither), so a lost row is reported, not recreated.
fn scanned(operation: &str, reference: &str) -> payonce_processor::ScannedPayment {
    let object = serde_json::json!({ "id": reference, "status": "succeeded" });
    payonce_processor::ScannedPayment {
        object: payonce_processor::ProcessorObject {
            reference: reference.to_string(),
            amount_minor: None,
            currency: None,
            customer: None,
            operation_id: Some(operation.to_string()),
            intention: None,
            payment_reference: None,
            status: FoundStatus::Succeeded {
                result: object.clone(),
            },
            object,
        },
        details: None,
        payment_operation: None,
    }
}

/// A stored answer as a replay answers it (Stripe: `Idempotent-Replayed: true`).
fn replay_of(first: &SubmitOutcome) -> SubmitOutcome {
    match first.clone() {
        SubmitOutcome::Succeeded {
            reference, result, ..
        } => SubmitOutcome::Succeeded {
            reference,
            result,
            replayed: true,
        },
        other => other,
    }
}

#[async_trait]
impl Processor for InProcessProcessor {
    fn contract(&self) -> &Contract {
        &self.contract
    }

    async fn submit(&self, request: &SubmitRequest<'_>) -> SubmitOutcome {
        self.with_book(|b| {
            b.requests += 1;
            if let Some(first) = b.by_key.get(request.idempotency_key.as_str()) {
                return replay_of(first);
            }
            let reference = format!("pi_{}", b.by_key.len());
            let outcome = if request.details.payment_method() == DECLINE_CARD {
                SubmitOutcome::Declined {
                    code: "card_declined".into(),
                    message: "Your card was declined.".into(),
                    reference: Some(reference),
                }
            } else {
                b.by_operation
                    .insert(request.operation_id.as_str().to_string(), reference.clone());
                b.received
                    .insert(reference.clone(), request.details.money().amount_minor());
                SubmitOutcome::Succeeded {
                    result: serde_json::json!({ "id": reference, "status": "succeeded" }),
                    reference,
                    replayed: false,
                }
            };
            b.by_key.insert(
                request.idempotency_key.as_str().to_string(),
                outcome.clone(),
            );
            outcome
        })
    }

    /// Every payment it holds, on one page: it declares Stripe's list, so the reconciler's scan
    /// for lost rows reads it (a scan that cannot complete is never "all clear").
    async fn recent_payments(
        &self,
        _query: &payonce_processor::RecentQuery<'_>,
    ) -> payonce_processor::RecentPage {
        self.with_book(|b| one_page(&b.by_operation))
    }

    /// Every refund it holds, on one page (see `recent_payments`).
    async fn recent_refunds(
        &self,
        _query: &payonce_processor::RecentQuery<'_>,
    ) -> payonce_processor::RecentPage {
        self.with_book(|b| one_page(&b.refund_by_operation))
    }

    async fn lookup(&self, query: &LookupQuery<'_>) -> LookupOutcome {
        match self.reference_of(query.operation_id.as_str()) {
            Some(reference) => LookupOutcome::Found {
                status: FoundStatus::Succeeded {
                    result: serde_json::json!({ "id": reference, "status": "succeeded" }),
                },
                reference,
            },
            None => LookupOutcome::NotFound { consistent: true },
        }
    }

    async fn submit_refund(&self, request: &RefundRequest<'_>) -> SubmitOutcome {
        self.with_book(|b| {
            b.requests += 1;
            if let Some(first) = b.by_key.get(request.idempotency_key.as_str()) {
                return replay_of(first);
            }
            let payment = request.payment_reference;
            let received = b.received.get(payment).copied().unwrap_or(0);
            let refunded = b.refunded.get(payment).copied().unwrap_or(0);
            let amount = request.amount.amount_minor();
            if received == 0 || refunded + amount > received {
                // Stripe's second line: never more than what is left (nothing executed, nothing stored).
                return SubmitOutcome::Declined {
                    code: "amount_too_large".into(),
                    message: format!(
                        "refund of {amount} exceeds the {} left",
                        received - refunded
                    ),
                    reference: None,
                };
            }
            let reference = format!("re_{}", b.refund_by_operation.len());
            b.refunded.insert(payment.to_string(), refunded + amount);
            b.refund_by_operation
                .insert(request.operation_id.as_str().to_string(), reference.clone());
            let outcome = SubmitOutcome::Succeeded {
                result: serde_json::json!({ "id": reference, "object": "refund",
                    "status": "succeeded", "amount": amount, "payment_intent": payment }),
                reference,
                replayed: false,
            };
            b.by_key.insert(
                request.idempotency_key.as_str().to_string(),
                outcome.clone(),
            );
            outcome
        })
    }

    async fn lookup_refund(&self, query: &RefundLookupQuery<'_>) -> LookupOutcome {
        let found = self.with_book(|b| {
            b.refund_by_operation
                .get(query.operation_id.as_str())
                .cloned()
        });
        match found {
            Some(reference) => LookupOutcome::Found {
                status: FoundStatus::Succeeded {
                    result: serde_json::json!({ "id": reference, "object": "refund", "status": "succeeded" }),
                },
                reference,
            },
            None => LookupOutcome::NotFound { consistent: true },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use payonce_core::details::{Details, RawDetails, RefundReason};
    use payonce_core::id::{BusinessKey, IdempotencyKey, OperationId, TenantId};

    #[tokio::test]
    async fn refunds_replay_by_key_never_exceed_the_payment_and_are_found() {
        let p = InProcessProcessor::default();
        let tenant = TenantId::parse("acme").unwrap();
        let pay = OperationId::generate();
        let details = Details::parse(&RawDetails {
            kind: "payment".into(),
            amount: 1000,
            currency: "usd".into(),
            customer: "cus_1".into(),
            payment_method: "pm_card_visa".into(),
            invoice: "INV-1".into(),
            destination: None,
            description: None,
            refund_of: None,
        })
        .unwrap();
        let SubmitOutcome::Succeeded { reference: pi, .. } = p
            .submit(&SubmitRequest {
                operation_id: &pay,
                tenant: &tenant,
                idempotency_key: &IdempotencyKey::parse("po1_pay").unwrap(),
                business_key: &BusinessKey::parse("invoice:INV-1:pay").unwrap(),
                details_hash: &details.hash(),
                details: &details,
            })
            .await
        else {
            panic!("paid")
        };
        let refund = |op: &OperationId, amount: i64| {
            let refund =
                Details::refund(&details, &pay, &pi, amount, RefundReason::Duplicate).unwrap();
            let key = IdempotencyKey::parse(&format!("po1_{}", &op.as_str()[3..])).unwrap();
            let business_key = BusinessKey::parse(&format!("refund:{op}")).unwrap();
            (op.clone(), key, refund, business_key)
        };
        let first = OperationId::generate();
        let (id, key, d, bk) = refund(&first, 600);
        let request = RefundRequest {
            operation_id: &id,
            tenant: &tenant,
            idempotency_key: &key,
            business_key: &bk,
            details_hash: &d.hash(),
            payment_reference: &pi,
            payment_operation: &pay,
            amount: d.money(),
            reason: RefundReason::Duplicate,
        };
        let made = p.submit_refund(&request).await;
        assert!(matches!(made, SubmitOutcome::Succeeded { .. }), "{made:?}");
        assert_eq!(
            p.submit_refund(&request).await,
            replay_of(&made),
            "the same key replays"
        );
        let second = OperationId::generate();
        let (id2, key2, d2, bk2) = refund(&second, 401);
        let over = p
            .submit_refund(&RefundRequest {
                operation_id: &id2,
                tenant: &tenant,
                idempotency_key: &key2,
                business_key: &bk2,
                details_hash: &d2.hash(),
                payment_reference: &pi,
                payment_operation: &pay,
                amount: d2.money(),
                reason: RefundReason::Duplicate,
            })
            .await;
        assert!(
            matches!(&over, SubmitOutcome::Declined { code, .. } if code == "amount_too_large"),
            "{over:?}"
        );
        let found = p
            .lookup_refund(&RefundLookupQuery {
                operation_id: &id,
                idempotency_key: &key,
                business_key: &bk,
                details_hash: &d.hash(),
                reference: None,
                payment_reference: &pi,
            })
            .await;
        assert!(matches!(found, LookupOutcome::Found { .. }), "{found:?}");
        let missing = p
            .lookup_refund(&RefundLookupQuery {
                operation_id: &id2,
                idempotency_key: &key2,
                business_key: &bk2,
                details_hash: &d2.hash(),
                reference: None,
                payment_reference: &pi,
            })
            .await;
        assert_eq!(missing, LookupOutcome::NotFound { consistent: true });
    }
}

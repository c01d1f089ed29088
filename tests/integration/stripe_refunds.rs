//! The Stripe adapter's refunds against the simulator over real HTTP: every row of the refund table
//! (succeeded, pending, failed; the definitive refusals; faults before and after commit, 429, a hung
//! request), lookups by reference and by the payment's list, the facts of a Refund, and every
//! parameter sent checked against Stripe's spec.

// Test harness: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use crate::simulator::{DEADLINE, Sim, start_default, start_settling_refunds};
use crate::stripe_adapter::{Op, adapter};
use crate::support::{tenant, wait_for};
use payonce_core::details::RefundReason;
use payonce_core::id::{IdempotencyKey, OperationId};
use payonce_core::money::{Currency, Money};
use payonce_processor::stripe::StripeProcessor;
use payonce_processor::{
    FoundStatus, LookupOutcome, Processor, RefundLookupQuery, RefundRequest, Retrieved,
    SubmitOutcome,
};
use serde_json::{Value, json};
use std::time::Duration;

/// A refund operation as the worker would submit it.
struct RefundOp {
    id: OperationId,
    key: IdempotencyKey,
    business_key: payonce_core::id::BusinessKey,
    details_hash: payonce_core::details::DetailsHash,
    payment: String,
    amount: i64,
}

impl RefundOp {
    fn new(payment: &str, amount: i64) -> RefundOp {
        let id = OperationId::generate();
        RefundOp {
            key: IdempotencyKey::parse(&format!("po1_{}", &id.as_str()[3..])).unwrap(),
            business_key: payonce_core::id::BusinessKey::parse(&format!("refund:{id}")).unwrap(),
            details_hash: payonce_core::details::DetailsHash::parse(&"0".repeat(64)).unwrap(),
            id,
            payment: payment.to_string(),
            amount,
        }
    }

    async fn submit(&self, p: &StripeProcessor) -> SubmitOutcome {
        let tenant = tenant();
        p.submit_refund(&RefundRequest {
            operation_id: &self.id,
            tenant: &tenant,
            idempotency_key: &self.key,
            business_key: &self.business_key,
            details_hash: &self.details_hash,
            payment_reference: &self.payment,
            payment_operation: &self.id,
            amount: Money::new(self.amount, Currency::parse("usd").unwrap()).unwrap(),
            reason: RefundReason::RequestedByCustomer,
        })
        .await
    }

    async fn lookup(&self, p: &StripeProcessor, reference: Option<&str>) -> LookupOutcome {
        p.lookup_refund(&RefundLookupQuery {
            operation_id: &self.id,
            idempotency_key: &self.key,
            business_key: &self.business_key,
            details_hash: &self.details_hash,
            reference,
            payment_reference: &self.payment,
        })
        .await
    }
}

/// A payment of 2048 usd made through the adapter; its `pi_...`.
async fn paid(p: &StripeProcessor, payment_method: &str) -> String {
    match Op::new(payment_method).submit(p).await {
        SubmitOutcome::Succeeded { reference, .. } => reference,
        other => panic!("{other:?}"),
    }
}

async fn refunds_with_key(s: &Sim, key: &IdempotencyKey) -> u64 {
    s.refunds_audit().await["count_by_idempotency_key"][key.as_str()]
        .as_u64()
        .unwrap_or(0)
}

#[tokio::test]
async fn a_refund_succeeds_replays_and_is_found_by_reference_by_list_and_by_retrieve() {
    let s = start_default().await;
    let p = adapter(&s.base);
    let pi = paid(&p, "pm_card_visa").await;
    let op = RefundOp::new(&pi, 1000);
    let first = op.submit(&p).await;
    let SubmitOutcome::Succeeded {
        reference, result, ..
    } = &first
    else {
        panic!("{first:?}")
    };
    assert!(reference.starts_with("re_"), "{reference}");
    assert_eq!(result["metadata"]["payonce_operation_id"], op.id.as_str());
    assert_eq!(result["metadata"]["payonce_tenant"], "acme");
    assert_eq!(result["reason"], "requested_by_customer");
    let replayed = SubmitOutcome::Succeeded {
        reference: reference.clone(),
        result: result.clone(),
        replayed: true,
    };
    assert_eq!(op.submit(&p).await, replayed, "the same key replays");
    assert_eq!(refunds_with_key(&s, &op.key).await, 1);
    for by in [None, Some(reference.as_str())] {
        match op.lookup(&p, by).await {
            LookupOutcome::Found {
                reference: found,
                status: FoundStatus::Succeeded { result },
            } => {
                assert_eq!(&found, reference, "{by:?}");
                assert_eq!(result["amount"], 1000);
            }
            other => panic!("{by:?}: {other:?}"),
        }
    }
    let Retrieved::Found(facts) = p.retrieve(reference).await else {
        panic!("retrieve {reference}")
    };
    assert_eq!(facts.reference, *reference);
    assert_eq!(facts.amount_minor, Some(1000));
    assert_eq!(facts.currency.as_deref(), Some("usd"));
    assert_eq!(facts.customer, None, "a refund names no customer");
    assert_eq!(facts.operation_id.as_deref(), Some(op.id.as_str()));
    assert_eq!(facts.payment_reference.as_deref(), Some(pi.as_str()));
    assert_eq!(
        p.facts(reference, result)
            .as_ref()
            .map(|f| &f.payment_reference),
        Some(&Some(pi.clone())),
        "a stored refund result reads as a refund"
    );
    assert_eq!(p.retrieve("re_missing").await, Retrieved::NotFound);
    // Another refund operation on the same payment is not found under this one's id.
    let other = RefundOp::new(&pi, 10);
    assert_eq!(
        other.lookup(&p, None).await,
        LookupOutcome::NotFound { consistent: true }
    );
    // By reference: the Refund's facts, naming this one's operation, for the reconciler to check.
    match other.lookup(&p, Some(reference)).await {
        LookupOutcome::Unmatched { object } => {
            assert_eq!(object.operation_id.as_deref(), Some(op.id.as_str()));
            assert_eq!(object.payment_reference.as_deref(), Some(pi.as_str()));
        }
        unexpected => panic!("{unexpected:?}"),
    }
    s.sim.shutdown().await;
}

#[tokio::test]
async fn more_than_is_left_and_nothing_left_are_definitive_declines() {
    let s = start_default().await;
    let p = adapter(&s.base);
    let pi = paid(&p, "pm_card_visa").await;
    assert!(matches!(
        RefundOp::new(&pi, 2000).submit(&p).await,
        SubmitOutcome::Succeeded { .. }
    ));
    let too_large = RefundOp::new(&pi, 49);
    match too_large.submit(&p).await {
        SubmitOutcome::Declined {
            code,
            reference: None,
            message,
        } => {
            assert_eq!(code, "amount_too_large");
            assert!(
                message.contains("(49)") && message.contains("(48)"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        RefundOp::new(&pi, 48).submit(&p).await,
        SubmitOutcome::Succeeded { .. }
    ));
    match RefundOp::new(&pi, 1).submit(&p).await {
        SubmitOutcome::Declined {
            code,
            reference: None,
            ..
        } => assert_eq!(code, "charge_already_refunded"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        s.refunds_audit().await["amount_by_payment_intent"][pi.as_str()],
        2048
    );
    // A payment that does not exist: Stripe answered, refusing it by its code (never "not
    // submitted": a request that got an answer reached the processor).
    assert!(matches!(
        RefundOp::new("pi_missing", 1).submit(&p).await,
        SubmitOutcome::Declined { ref code, reference: None, .. } if code == "resource_missing"
    ));
    s.sim.shutdown().await;
}

async fn settled_lookup(p: &StripeProcessor, op: &RefundOp, reference: &str) -> FoundStatus {
    wait_for("the refund's final status", DEADLINE, || async move {
        match op.lookup(p, Some(reference)).await {
            LookupOutcome::Found {
                status: FoundStatus::Pending { .. },
                ..
            } => None,
            LookupOutcome::Found { status, .. } => Some(status),
            other => panic!("{other:?}"),
        }
    })
    .await
}

#[tokio::test]
async fn a_pending_refund_is_unknown_with_its_reference_and_lookup_follows_it_to_either_end() {
    let s = start_settling_refunds().await;
    let p = adapter(&s.base);
    for (pm, ends) in [
        ("pm_card_pendingRefund", "succeeded"),
        ("pm_card_pendingRefundFail", "failed"),
    ] {
        let pi = paid(&p, pm).await;
        let op = RefundOp::new(&pi, 2048);
        let outcome = op.submit(&p).await;
        let SubmitOutcome::Unknown {
            reference: Some(reference),
            reason,
        } = &outcome
        else {
            panic!("{pm}: {outcome:?}")
        };
        assert_eq!(reason, "refund is \"pending\"");
        assert_eq!(
            op.lookup(&p, Some(reference)).await,
            LookupOutcome::Found {
                reference: reference.clone(),
                status: FoundStatus::Pending {
                    processor_status: "pending".into()
                }
            }
        );
        match (settled_lookup(&p, &op, reference).await, ends) {
            (FoundStatus::Succeeded { result }, "succeeded") => {
                assert_eq!(result["status"], "succeeded")
            }
            (FoundStatus::Failed { code, .. }, "failed") => {
                assert_eq!(code, "expired_or_canceled_card")
            }
            (other, _) => panic!("{pm}: {other:?}"),
        }
    }
    // Stripe's pm_card_refundFail: succeeded at once, failed later (a webhook then contradicts the ledger).
    let pi = paid(&p, "pm_card_refundFail").await;
    let op = RefundOp::new(&pi, 2048);
    let SubmitOutcome::Succeeded { reference, .. } = op.submit(&p).await else {
        panic!("refundFail starts succeeded")
    };
    let failed = wait_for("the refund to fail", DEADLINE, || async {
        match p.retrieve(&reference).await {
            Retrieved::Found(f) => matches!(f.status, FoundStatus::Failed { .. }).then_some(f),
            other => panic!("{other:?}"),
        }
    })
    .await;
    assert_eq!(
        failed.status,
        FoundStatus::Failed {
            code: "expired_or_canceled_card".into(),
            message: "refund is failed".into()
        }
    );
    s.sim.shutdown().await;
}

async fn with_fault(s: &Sim, op: &RefundOp, fault: &str) {
    s.arm(json!([{ "match": op.key.as_str(), "fault": fault, "times": 1 }]))
        .await;
}

#[tokio::test]
async fn faults_classify_like_payments_and_never_make_a_second_refund() {
    let s = start_default().await;
    let p = adapter(&s.base);
    let pi = paid(&p, "pm_card_visa").await;

    // Committed, answer lost: Unknown; the list finds it; the same key replays it.
    let dropped = RefundOp::new(&pi, 100);
    with_fault(&s, &dropped, "drop_after_commit").await;
    let outcome = dropped.submit(&p).await;
    assert!(
        matches!(
            outcome,
            SubmitOutcome::Unknown {
                reference: None,
                ..
            }
        ),
        "{outcome:?}"
    );
    let LookupOutcome::Found {
        reference,
        status: FoundStatus::Succeeded { .. },
    } = dropped.lookup(&p, None).await
    else {
        panic!("the dropped refund is found by list")
    };
    match dropped.submit(&p).await {
        SubmitOutcome::Succeeded {
            reference: again, ..
        } => assert_eq!(again, reference),
        other => panic!("{other:?}"),
    }
    assert_eq!(refunds_with_key(&s, &dropped.key).await, 1);

    // 500 after commit: Unknown, one refund; before commit: Unknown, none.
    let after = RefundOp::new(&pi, 100);
    with_fault(&s, &after, "error_500_after_commit").await;
    assert!(matches!(
        after.submit(&p).await,
        SubmitOutcome::Unknown { .. }
    ));
    assert!(matches!(
        after.lookup(&p, None).await,
        LookupOutcome::Found {
            status: FoundStatus::Succeeded { .. },
            ..
        }
    ));
    assert_eq!(refunds_with_key(&s, &after.key).await, 1);
    let before = RefundOp::new(&pi, 100);
    with_fault(&s, &before, "error_500_before_commit").await;
    assert!(matches!(
        before.submit(&p).await,
        SubmitOutcome::Unknown { .. }
    ));
    assert_eq!(
        before.lookup(&p, None).await,
        LookupOutcome::NotFound { consistent: true }
    );
    assert_eq!(refunds_with_key(&s, &before.key).await, 0);

    // 429: its own outcome, nothing ran.
    let limited = RefundOp::new(&pi, 100);
    with_fault(&s, &limited, "rate_limit_429").await;
    assert!(matches!(
        limited.submit(&p).await,
        SubmitOutcome::RateLimited { .. }
    ));
    assert_eq!(refunds_with_key(&s, &limited.key).await, 0);

    // A reset connection: Unknown, nothing created.
    let reset = RefundOp::new(&pi, 100);
    with_fault(&s, &reset, "reset").await;
    assert!(matches!(
        reset.submit(&p).await,
        SubmitOutcome::Unknown { .. }
    ));
    assert_eq!(refunds_with_key(&s, &reset.key).await, 0);
    assert_eq!(
        s.refunds_audit().await["count_by_payment_intent"][pi.as_str()],
        2,
        "the dropped one and the 500-after-commit one, nothing else"
    );
    s.sim.shutdown().await;
}

#[tokio::test]
async fn a_hung_refund_times_out_as_unknown() {
    let s = start_default().await;
    let mut config =
        payonce_processor::stripe::StripeConfig::new(&s.base, crate::simulator::API_KEY);
    config.request_timeout = Duration::from_millis(500);
    let p = StripeProcessor::new(config).unwrap();
    let pi = paid(&p, "pm_card_visa").await;
    let op = RefundOp::new(&pi, 100);
    with_fault(&s, &op, "hang").await;
    let outcome = op.submit(&p).await;
    let SubmitOutcome::Unknown {
        reason,
        reference: None,
    } = &outcome
    else {
        panic!("{outcome:?}")
    };
    assert!(reason.contains("timed out after sending"), "{reason}");
    assert_eq!(refunds_with_key(&s, &op.key).await, 0);
    s.sim.shutdown().await;
}

#[tokio::test]
async fn every_sent_refund_parameter_is_a_documented_refund_create_parameter() {
    let facts: Value = serde_json::from_str(include_str!(
        "../fixtures/stripe/latest_facts_stripe_python.json"
    ))
    .unwrap();
    let documented: Vec<&str> = facts["RefundCreateParams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let reasons = facts["RefundCreateParams.reason"].as_array().unwrap();
    for reason in [
        RefundReason::Duplicate,
        RefundReason::Fraudulent,
        RefundReason::RequestedByCustomer,
    ] {
        assert!(reasons.contains(&json!(reason.as_str())), "{reason:?}");
    }
    let s = start_default().await;
    let p = adapter(&s.base);
    let pi = paid(&p, "pm_card_visa").await;
    let op = RefundOp::new(&pi, 300);
    assert!(matches!(
        op.submit(&p).await,
        SubmitOutcome::Succeeded { .. }
    ));
    assert!(matches!(
        op.submit(&p).await,
        SubmitOutcome::Succeeded { .. }
    ));
    let sent: Vec<Value> = s
        .requests()
        .await
        .into_iter()
        .filter(|r| r["method"] == "POST" && r["path"] == "/v1/refunds")
        .collect();
    assert_eq!(sent.len(), 2);
    assert_eq!(
        sent[0]["param_keys"], sent[1]["param_keys"],
        "the same parameters on every attempt"
    );
    assert_eq!(
        sent[0]["param_keys"],
        json!([
            "payment_intent",
            "amount",
            "reason",
            "metadata[payonce_operation_id]",
            "metadata[payonce_tenant]",
            "metadata[payonce_business_key]",
            "metadata[payonce_details_hash]",
            "metadata[payonce_payment_operation_id]"
        ])
    );
    for key in sent[0]["param_keys"].as_array().unwrap() {
        let top = key.as_str().unwrap().split('[').next().unwrap();
        assert!(
            documented.contains(&top),
            "{key} is not a RefundCreateParams field"
        );
    }
    assert_eq!(sent[0]["idempotency_key"], op.key.as_str());
    assert_eq!(
        sent[0]["stripe_version"],
        payonce_processor::stripe::STRIPE_VERSION
    );
    s.sim.shutdown().await;
}

//! Refund operations through the kind dispatch (`processor::operation`) and the evidence checks,
//! against the simulator over real HTTP: a refund is submitted with `submit_refund` and found with
//! `lookup_refund` naming its payment; a retrieved Refund is applied only when its amount, currency,
//! operation id and refunded payment are the approved ones (a Refund names no customer), and a
//! Refund is never taken for a payment nor a payment for a refund.

// Test harness: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use crate::support::now;
use crate::support::processes::{simulator, stripe};
use crate::support::{ready_operation, sqlite_ledger};
use payonce_core::clock::Timestamp;
use payonce_core::details::{Details, RefundReason};
use payonce_core::id::{IdempotencyKey, OperationId};
use payonce_ledger::{Declined, Operation, Paid, Report};
use payonce_processor::{
    FoundStatus, LookupOutcome, Processor, Retrieved, SubmitOutcome, operation,
};
use payonce_reconciler::evidence::{differences, report_of};
use payonce_simulator::SimulatorConfig;
use std::time::Duration;

/// A paid payment operation (2048 usd) and its `pi_...`.
async fn paid(p: &dyn Processor, invoice: &str, payment_method: &str) -> (Operation, String) {
    let ledger = sqlite_ledger().await;
    let mut op = ready_operation(&ledger, invoice, payment_method, now()).await;
    let SubmitOutcome::Succeeded { reference, .. } = operation::submit(p, &op).await else {
        panic!("the payment is paid")
    };
    op.external_ref = Some(reference.clone());
    (op, reference)
}

/// A refund operation of `payment` as the ledger would hold it, not yet submitted.
fn refund_of(payment: &Operation, payment_reference: &str, amount: i64) -> Operation {
    let id = OperationId::generate();
    let details = Details::refund(
        &payment.details,
        &payment.id,
        payment_reference,
        amount,
        RefundReason::Duplicate,
    )
    .unwrap();
    Operation {
        idempotency_key: IdempotencyKey::parse(&format!("po1_{}", &id.as_str()[3..])).unwrap(),
        id,
        details_hash: details.hash(),
        details,
        external_ref: None,
        ..payment.clone()
    }
}

async fn facts(p: &dyn Processor, reference: &str) -> payonce_processor::ProcessorObject {
    match p.retrieve(reference).await {
        Retrieved::Found(object) => *object,
        other => panic!("{reference}: {other:?}"),
    }
}

#[tokio::test]
async fn a_refund_operation_is_submitted_found_and_checked_as_a_refund() {
    let sim = simulator(SimulatorConfig::default()).await;
    let p = stripe(&sim, None);
    let (payment, pi) = paid(p.as_ref(), "INV-RD-1", "pm_card_visa").await;
    let mut refund = refund_of(&payment, &pi, 1000);

    let SubmitOutcome::Succeeded {
        reference: re,
        result,
        ..
    } = operation::submit(p.as_ref(), &refund).await
    else {
        panic!("the refund succeeds")
    };
    assert!(re.starts_with("re_"), "{re}");
    assert_eq!(result["payment_intent"], pi.as_str());
    assert_eq!(result["amount"], 1000);
    assert_eq!(result["reason"], "duplicate");
    assert_eq!(
        result["metadata"]["payonce_operation_id"],
        refund.id.as_str()
    );
    // By the payment's refund list, then by reference: the same refund.
    for external_ref in [None, Some(re.clone())] {
        refund.external_ref = external_ref.clone();
        match operation::lookup(p.as_ref(), &refund, Timestamp::from_millis(0)).await {
            LookupOutcome::Found {
                reference,
                status: FoundStatus::Succeeded { .. },
            } => assert_eq!(reference, re, "{external_ref:?}"),
            other => panic!("{external_ref:?}: {other:?}"),
        }
    }
    // The payment's own lookup still finds the payment, not the refund.
    match operation::lookup(
        p.as_ref(),
        &payment,
        now().saturating_sub_span(Duration::from_secs(60)),
    )
    .await
    {
        LookupOutcome::Found { reference, .. } => assert_eq!(reference, pi),
        other => panic!("{other:?}"),
    }

    let object = facts(p.as_ref(), &re).await;
    assert_eq!(differences(&refund, &object), Vec::<String>::new());
    assert_eq!(
        report_of(&refund, &object),
        Some(Report::Succeeded(Paid {
            reference: re.clone(),
            result: object.object.clone()
        }))
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn evidence_names_every_difference_between_a_refund_and_its_approval() {
    let sim = simulator(SimulatorConfig::default()).await;
    let p = stripe(&sim, None);
    let (payment, pi) = paid(p.as_ref(), "INV-RD-2", "pm_card_visa").await;
    let (_, other_pi) = paid(p.as_ref(), "INV-RD-3", "pm_card_visa").await;
    let refund = refund_of(&payment, &pi, 500);
    let SubmitOutcome::Succeeded { reference: re, .. } =
        operation::submit(p.as_ref(), &refund).await
    else {
        panic!("the refund succeeds")
    };
    let object = facts(p.as_ref(), &re).await;

    // Every approved detail is in the intention the Refund carries (its details hash): another
    // approval differs there first, then in each fact compared on its own.
    let intention_differs = |diffs: &[String]| {
        diffs
            .first()
            .is_some_and(|d| d.starts_with("intention (tenant acme"))
    };
    // Another amount approved than the processor holds.
    let mut wrong_amount = refund_of(&payment, &pi, 499);
    wrong_amount.id = refund.id.clone();
    let diffs = differences(&wrong_amount, &object);
    assert!(intention_differs(&diffs), "{diffs:?}");
    assert_eq!(
        diffs[1..],
        ["amount Some(500) at the processor, 499 approved"]
    );
    // A refund of another payment approved.
    let mut wrong_payment = refund_of(&payment, &other_pi, 500);
    wrong_payment.id = refund.id.clone();
    let diffs = differences(&wrong_payment, &object);
    assert!(intention_differs(&diffs), "{diffs:?}");
    assert_eq!(
        diffs[1..],
        [format!(
            "refund of Some(\"{pi}\") at the processor, of Some(\"{other_pi}\") approved"
        )]
    );
    // Another refund operation's Refund: another business key, the same facts otherwise.
    let mut stranger = refund_of(&payment, &pi, 500);
    stranger.business_key =
        payonce_core::id::BusinessKey::parse("refund:another-intention").unwrap();
    let diffs = differences(&stranger, &object);
    assert_eq!(diffs.len(), 1, "{diffs:?}");
    assert!(
        intention_differs(&diffs) && diffs[0].contains("business key refund:another-intention"),
        "{diffs:?}"
    );
    // The very refund it is: nothing differs.
    assert!(differences(&refund, &object).is_empty());
    match report_of(&wrong_amount, &object) {
        Some(Report::Mismatch {
            reference, paid, ..
        }) => {
            assert_eq!(reference, re);
            assert!(paid, "a succeeded refund moved money");
        }
        other => panic!("{other:?}"),
    }
    // A Refund is never a payment, and a payment never a refund.
    let mut as_payment = payment.clone();
    as_payment.id = refund.id.clone();
    let diffs = differences(&as_payment, &object);
    assert!(intention_differs(&diffs), "{diffs:?}");
    assert_eq!(
        diffs[1..],
        [
            "amount Some(500) at the processor, 2048 approved".to_string(),
            "customer None at the processor, cus_test approved".to_string(),
            format!("a refund of {pi} at the processor, a payment approved"),
        ]
    );
    let payment_object = facts(p.as_ref(), &pi).await;
    let mut as_refund = refund_of(&payment, &pi, 2048);
    as_refund.id = payment.id.clone();
    let diffs = differences(&as_refund, &payment_object);
    assert!(intention_differs(&diffs), "{diffs:?}");
    assert_eq!(
        diffs[1..],
        [format!(
            "refund of None at the processor, of Some(\"{pi}\") approved"
        )]
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn a_pending_refund_is_unknown_and_its_lookup_is_pending_then_failed() {
    let sim = simulator(SimulatorConfig {
        refund_settle: Duration::from_millis(300),
        ..SimulatorConfig::default()
    })
    .await;
    let p = stripe(&sim, None);
    let (payment, pi) = paid(p.as_ref(), "INV-RD-4", "pm_card_pendingRefundFail").await;
    let mut refund = refund_of(&payment, &pi, 2048);
    let SubmitOutcome::Unknown {
        reference: Some(re),
        ..
    } = operation::submit(p.as_ref(), &refund).await
    else {
        panic!("a pending refund is unknown with its reference")
    };
    refund.external_ref = Some(re.clone());
    assert_eq!(
        report_of(&refund, &facts(p.as_ref(), &re).await),
        None,
        "pending: nothing to apply"
    );
    let failed = crate::support::wait_for("the refund to fail", Duration::from_secs(15), || {
        let (p, refund) = (p.clone(), refund.clone());
        async move {
            match operation::lookup(p.as_ref(), &refund, Timestamp::from_millis(0)).await {
                LookupOutcome::Found {
                    status: status @ FoundStatus::Failed { .. },
                    ..
                } => Some(status),
                LookupOutcome::Found { .. } => None,
                other => panic!("{other:?}"),
            }
        }
    })
    .await;
    assert_eq!(
        failed,
        FoundStatus::Failed {
            code: "expired_or_canceled_card".into(),
            message: "refund is failed".into()
        }
    );
    assert_eq!(
        report_of(&refund, &facts(p.as_ref(), &re).await),
        Some(Report::Failed(Declined {
            code: "expired_or_canceled_card".into(),
            message: "refund is failed".into(),
            reference: Some(re.clone())
        }))
    );
    sim.shutdown().await;
}

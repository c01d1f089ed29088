//! What every refund scenario needs: a payment paid at the simulator through the ledger's own moves,
//! approved refund operations of it, and the checks made on both sides (the simulator's refund audit
//! and the ledger's row, totals and history).

use super::fleet::{assert_history_succeeded_once, successful_payments};
use crate::support::now;
use crate::support::refunds::create_refund;
use crate::support::rows;
use crate::support::{processes, ready_operation, recording, tenant};
use payonce_core::id::OperationId;
use payonce_core::state::Status;
use payonce_ledger::Fence;
use payonce_ledger::{NewApproval, Operation, OperationEvent, Paid, Recorded, SharedLedger};
use payonce_processor::SubmitOutcome;
use payonce_simulator::Simulator;
use serde_json::Value;
use std::time::Duration;

/// The amount every scenario's payment collects.
pub const PAYMENT_MINOR: i64 = 2048;

/// A payment of [`PAYMENT_MINOR`] usd for `invoice`, paid at the simulator with `payment_method`
/// (claimed, submitted with its stored key, recorded): the succeeded row with its real `pi_...`.
pub async fn paid_payment(
    ledger: &SharedLedger,
    sim: &Simulator,
    invoice: &str,
    payment_method: &str,
) -> Operation {
    let op = ready_operation(ledger, invoice, payment_method, now()).await;
    let c = rows::executing(
        ledger,
        &op.id,
        &rows::holder("payer", Duration::from_millis(60_000)),
        now(),
    )
    .await;
    let outcome = payonce_execution::submit::submit(
        processes::stripe(sim, None).as_ref(),
        &c,
        Duration::from_secs(5),
    )
    .await;
    let SubmitOutcome::Succeeded {
        reference, result, ..
    } = outcome
    else {
        panic!("the payment is paid: {outcome:?}")
    };
    let paid = ledger
        .record(
            &recording(
                &Fence::of(&c),
                &Recorded::Succeeded(Paid { reference, result }),
                "payer",
            ),
            now(),
        )
        .await
        .unwrap();
    assert_eq!(paid.status, Status::Succeeded);
    assert_eq!(successful_payments(sim, &op.id).await.len(), 1);
    paid
}

/// Approves `refund` as a person of the merchant would (the ledger records who; the api decides who may).
pub async fn approve(ledger: &SharedLedger, refund: &Operation) -> Operation {
    ledger
        .approve(
            &tenant(),
            NewApproval {
                operation: refund.id.clone(),
                details_hash: refund.details_hash.clone(),
                approved_by: "oncall:alice".into(),
                method: "test".into(),
                expires_at: now() + Duration::from_millis(86_400_000),
                priority: None,
            },
            now(),
        )
        .await
        .unwrap()
}

/// A refund of `amount` from `payment` under business key `key`, created and approved: `ready`.
pub async fn approved_refund(
    ledger: &SharedLedger,
    payment: &Operation,
    key: &str,
    amount: i64,
) -> Operation {
    let created = create_refund(ledger, payment, key, amount, now())
        .await
        .unwrap();
    assert!(created.inserted, "{key} is new");
    let ready = approve(ledger, &created.operation).await;
    assert_eq!(ready.status, Status::Ready);
    ready
}

/// The simulator's refund audit (`GET /_sim/audit/refunds`).
pub async fn refund_audit(sim: &Simulator) -> Value {
    crate::support::processes::refunds_audit_at(&sim.base_url()).await
}

/// The refunds the simulator holds for refund operation `id` (by metadata) that still give money back.
pub async fn refunds_for(sim: &Simulator, id: &OperationId) -> Vec<Value> {
    refund_audit(sim).await["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            r["metadata"]["payonce_operation_id"] == id.as_str()
                && r["status"] != "failed"
                && r["status"] != "canceled"
        })
        .cloned()
        .collect()
}

/// What the simulator gave back from payment `pi` in all (refunds not failed or canceled).
pub async fn refunded_at_processor(sim: &Simulator, pi: &str) -> i64 {
    refund_audit(sim).await["amount_by_payment_intent"][pi]
        .as_i64()
        .unwrap_or(0)
}

/// Both sides for an approved refund that must have been made: exactly one refund at the processor,
/// made with the stored key; the row succeeded with that refund's reference; a history with create,
/// approve, claim and one move into succeeded, ending there. Returns the history.
pub async fn assert_refunded_once(
    ledger: &SharedLedger,
    sim: &Simulator,
    id: &OperationId,
) -> Vec<OperationEvent> {
    let refunds = refunds_for(sim, id).await;
    assert_eq!(
        refunds.len(),
        1,
        "{id}: exactly one refund at the processor: {refunds:?}"
    );
    let row = ledger.get(&tenant(), id).await.unwrap();
    assert_eq!(row.status, Status::Succeeded, "{id}");
    assert_eq!(
        row.external_ref.as_deref(),
        refunds[0]["id"].as_str(),
        "{id}: the ledger holds the processor's refund"
    );
    assert_eq!(
        refunds[0]["idempotency_key"],
        row.idempotency_key.as_str(),
        "{id}: made with the stored key"
    );
    assert_eq!(
        refunds[0]["amount"],
        row.details.money().amount_minor(),
        "{id}"
    );
    assert_history_succeeded_once(ledger, id).await
}

/// The ledger's totals for `payment` agree with the simulator: what succeeded in the ledger is what
/// the processor gave back, nothing is still in flight, and neither exceeds the payment.
pub async fn assert_totals_agree(ledger: &SharedLedger, sim: &Simulator, payment: &Operation) {
    let totals = ledger.refund_totals(&tenant(), &payment.id).await.unwrap();
    let pi = payment.external_ref.as_deref().unwrap();
    let at_processor = refunded_at_processor(sim, pi).await;
    assert_eq!(
        totals.refunded_minor, at_processor,
        "ledger and processor agree: {totals:?}"
    );
    assert_eq!(totals.in_flight_minor, 0, "{totals:?}");
    assert!(
        totals.refunded_minor <= PAYMENT_MINOR,
        "never over-refunded: {totals:?}"
    );
}

//! Refund fixtures: a payment taken to `succeeded` through the ledger's own moves, and refund
//! operations of it.

use super::{details, rows, tenant};
use payonce_core::clock::Timestamp;
use payonce_core::details::{Details, RefundReason};
use payonce_core::id::BusinessKey;
use payonce_core::state::Status;
use payonce_ledger::{
    Created, LedgerError, NewApproval, NewOperation, Operation, Paid, Recorded, SharedLedger,
};
use std::time::Duration;

/// A payment of `amount` for `invoice`, created, approved, claimed, submitted and recorded as
/// succeeded with processor reference `pi_<invoice>` (the ledger's own moves, no processor).
pub async fn succeeded_payment(
    ledger: &SharedLedger,
    invoice: &str,
    amount: i64,
    now: Timestamp,
) -> Operation {
    let d = details(invoice, amount, "pm_card_visa");
    let created = rows::created(ledger, &tenant(), invoice, d, now)
        .await
        .operation;
    rows::approved(ledger, &created, now + Duration::from_secs(86_400), now).await;
    let worker = rows::holder("fixture", Duration::from_millis(30_000));
    let executing = rows::executing(ledger, &created.id, &worker, now).await;
    let succeeded = Recorded::Succeeded(Paid {
        reference: format!("pi_{invoice}"),
        result: serde_json::json!({"id": format!("pi_{invoice}"), "status": "succeeded"}),
    });
    let paid = rows::record(ledger, &executing, &succeeded, "fixture", now).await;
    assert_eq!(paid.status, Status::Succeeded);
    paid
}

/// The details of a refund of `amount` from `payment`, for `reason`.
pub fn refund_details(payment: &Operation, amount: i64, reason: RefundReason) -> Details {
    Details::refund(
        &payment.details,
        &payment.id,
        payment.external_ref.as_deref().unwrap(),
        amount,
        reason,
    )
    .unwrap()
}

/// Creates (or gets) a refund of `amount` from `payment` under business key `key`.
pub async fn create_refund(
    ledger: &SharedLedger,
    payment: &Operation,
    key: &str,
    amount: i64,
    now: Timestamp,
) -> Result<Created, LedgerError> {
    ledger
        .create_or_get(
            NewOperation::keyed(
                &crate::support::key_secret(),
                tenant(),
                BusinessKey::parse(key).unwrap(),
                refund_details(payment, amount, RefundReason::RequestedByCustomer),
                "service:test".into(),
            ),
            now,
        )
        .await
}

/// Approves `refund` as an on-call person, claims it and records `outcome` (the ledger's own moves,
/// no processor); returns the refund as recorded.
pub async fn settle_refund(
    ledger: &SharedLedger,
    refund: &Operation,
    outcome: Recorded,
) -> Operation {
    let now = refund.created_at;
    ledger
        .approve(
            &tenant(),
            NewApproval {
                operation: refund.id.clone(),
                details_hash: refund.details_hash.clone(),
                approved_by: "on_call:key_test".into(),
                method: "on_call_key".into(),
                expires_at: now + Duration::from_secs(86_400),
                priority: None,
            },
            now,
        )
        .await
        .unwrap();
    let worker = rows::holder("fixture", Duration::from_millis(30_000));
    let executing = rows::executing(ledger, &refund.id, &worker, now).await;
    rows::record(ledger, &executing, &outcome, "fixture", now).await
}

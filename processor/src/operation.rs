//! The processor calls of one ledger operation, chosen by its kind: a payment is submitted with
//! [`Processor::submit`] and found with [`Processor::lookup`]; a refund with [`Processor::submit_refund`]
//! and [`Processor::lookup_refund`], naming the payment its details refer to. The worker, the
//! reconciler's sweep and the on-call `show` all go through here, so the kind is matched in one place.

use super::{
    LookupOutcome, LookupQuery, Processor, RefundLookupQuery, RefundRequest, SubmitOutcome,
    SubmitRequest,
};
use payonce_core::details::OperationKind;
use payonce_ledger::Operation;

/// Why a refund's details name no payment: impossible through `Details`' constructors, and refused by
/// the worker's precheck before any call; here it submits nothing.
const REFUND_WITHOUT_PAYMENT: &str = "the refund's details name no payment";

/// Submits `op` once with its stored key, as its kind says.
pub async fn submit(processor: &dyn Processor, op: &Operation) -> SubmitOutcome {
    match op.details.kind() {
        OperationKind::Payment => {
            processor
                .submit(&SubmitRequest {
                    operation_id: &op.id,
                    tenant: &op.tenant,
                    idempotency_key: &op.idempotency_key,
                    business_key: &op.business_key,
                    details_hash: &op.details_hash,
                    details: &op.details,
                })
                .await
        }
        OperationKind::Refund => match op.details.refund_of() {
            Some(of) => {
                processor
                    .submit_refund(&RefundRequest {
                        operation_id: &op.id,
                        tenant: &op.tenant,
                        idempotency_key: &op.idempotency_key,
                        business_key: &op.business_key,
                        details_hash: &op.details_hash,
                        payment_reference: of.payment_reference(),
                        payment_operation: of.payment_operation(),
                        amount: op.details.money(),
                        reason: of.reason(),
                    })
                    .await
            }
            None => SubmitOutcome::NotSubmitted {
                reason: REFUND_WITHOUT_PAYMENT.into(),
            },
        },
    }
}

/// Looks for a past submission of `op`, as its kind says. `created_after` narrows a payment's list
/// query (a refund's list is its payment's refunds, already narrow).
pub async fn lookup(
    processor: &dyn Processor,
    op: &Operation,
    created_after: payonce_core::clock::Timestamp,
) -> LookupOutcome {
    match op.details.kind() {
        OperationKind::Payment => {
            processor
                .lookup(&LookupQuery {
                    operation_id: &op.id,
                    idempotency_key: &op.idempotency_key,
                    business_key: &op.business_key,
                    details_hash: &op.details_hash,
                    reference: op.external_ref.as_deref(),
                    customer: op.details.customer(),
                    created_after,
                })
                .await
        }
        OperationKind::Refund => match op.details.refund_of() {
            Some(of) => {
                processor
                    .lookup_refund(&RefundLookupQuery {
                        operation_id: &op.id,
                        idempotency_key: &op.idempotency_key,
                        business_key: &op.business_key,
                        details_hash: &op.details_hash,
                        reference: op.external_ref.as_deref(),
                        payment_reference: of.payment_reference(),
                    })
                    .await
            }
            None => LookupOutcome::Unavailable {
                reason: REFUND_WITHOUT_PAYMENT.into(),
            },
        },
    }
}

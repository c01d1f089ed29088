//! Operations brought to a state through the ledger's own moves, as the API, a worker and the
//! reconciler make them (create and approve; claim; start the submission; record; escalate), on any
//! store: the fixtures tests build their rows with instead of writing the moves out. Each asserts
//! that its move took, so a fixture that no longer reaches its state fails where the row is built.

use super::{details, key_secret, recording, tenant};
use payonce_core::clock::Timestamp;
use payonce_core::details::Details;
use payonce_core::id::{BusinessKey, OperationId, TenantId};
use payonce_core::priority::Priority;
use payonce_core::state::Status;
use payonce_ledger::{
    Created, Escalate, Fence, LeaseHolder, NewApproval, NewOperation, Operation, Recorded,
    SharedLedger,
};
use std::time::Duration;

/// Creates the payment of `invoice` that `details` describe for `tenant`, as the billing service
/// does (keyed `invoice:{invoice}:pay`) at `now`: a new row in `awaiting_approval`, or the one
/// already there ([`Created::inserted`] says which).
pub async fn created(
    ledger: &SharedLedger,
    tenant: &TenantId,
    invoice: &str,
    details: Details,
    now: Timestamp,
) -> Created {
    ledger
        .create_or_get(
            NewOperation::keyed(
                &key_secret(),
                tenant.clone(),
                BusinessKey::parse(&format!("invoice:{invoice}:pay")).unwrap(),
                details,
                "service:test".into(),
            ),
            now,
        )
        .await
        .unwrap()
}

/// Approves `row` as its customer does (its own details hash) at `now`, the approval valid until
/// `expires_at`; the row in `ready`.
pub async fn approved(
    ledger: &SharedLedger,
    row: &Operation,
    expires_at: Timestamp,
    now: Timestamp,
) -> Operation {
    ledger
        .approve(
            &row.tenant,
            NewApproval {
                operation: row.id.clone(),
                details_hash: row.details_hash.clone(),
                approved_by: "customer:cus_test".into(),
                method: "test".into(),
                expires_at,
                priority: None,
            },
            now,
        )
        .await
        .unwrap()
}

/// A payment of 2048 usd for `invoice` with `payment_method`, created and approved (for a day) at
/// `now`: the row in `ready`.
pub async fn ready(
    ledger: &SharedLedger,
    invoice: &str,
    payment_method: &str,
    now: Timestamp,
) -> Operation {
    let d = details(invoice, 2048, payment_method);
    let row = created(ledger, &tenant(), invoice, d, now).await.operation;
    approved(ledger, &row, now + Duration::from_secs(86_400), now).await
}

/// A payment of 2048 usd of `tenant` for `invoice` in class `priority`, not to be claimed before
/// `not_before`, created and approved (for a day) at `now`: the row in `ready`, available at the
/// later of `now` and `not_before`.
pub async fn ready_in_class(
    ledger: &SharedLedger,
    tenant: &TenantId,
    invoice: &str,
    (priority, not_before): (Priority, Option<Timestamp>),
    now: Timestamp,
) -> Operation {
    let mut new = NewOperation::keyed(
        &key_secret(),
        tenant.clone(),
        BusinessKey::parse(&format!("invoice:{invoice}:pay")).unwrap(),
        details(invoice, 2048, "pm_card_visa"),
        "service:test".into(),
    );
    new.priority = priority;
    new.not_before = not_before;
    let row = ledger.create_or_get(new, now).await.unwrap().operation;
    let ready = approved(ledger, &row, now + Duration::from_secs(86_400), now).await;
    assert_eq!(
        (ready.status, ready.priority, ready.not_before),
        (Status::Ready, priority, not_before)
    );
    ready
}

/// [`ready`], then claimed by worker "w" (a ten-minute lease, longer than any test) with its
/// submission started, all at `at`: the row as approved, and as it is now, `executing` with its
/// request sent as far as the ledger knows.
pub async fn ready_executing(
    ledger: &SharedLedger,
    invoice: &str,
    payment_method: &str,
    at: Timestamp,
) -> (Operation, Operation) {
    let op = ready(ledger, invoice, payment_method, at).await;
    let worker = holder("w", Duration::from_millis(600_000));
    let row = executing(ledger, &op.id, &worker, at).await;
    (op, row)
}

/// A worker's identity: `owner`, holding each lease `lease_ttl`.
pub fn holder(owner: &str, lease_ttl: Duration) -> LeaseHolder<'_> {
    LeaseHolder { owner, lease_ttl }
}

/// Claims one operation as `holder` at `at`, which must be `id` (the fixture claims its own
/// operation only); the row in `executing`, its submission not started.
pub async fn claimed(
    ledger: &SharedLedger,
    id: &OperationId,
    holder: &LeaseHolder<'_>,
    at: Timestamp,
) -> Operation {
    let mut claimed = ledger.claim(holder, 1, at).await.unwrap();
    assert_eq!(claimed.len(), 1, "one ready operation to claim");
    let row = claimed.remove(0);
    assert_eq!(&row.id, id, "the fixture claims its own operation only");
    row
}

/// Starts the submission of the claimed `row` under its fence at `at` (`mark_submitting`): from
/// here on, until an outcome is recorded, the processor may have the request.
pub async fn start_submission(ledger: &SharedLedger, row: &Operation, at: Timestamp) {
    assert_eq!(
        ledger.mark_submitting(&[Fence::of(row)], at).await.unwrap(),
        [true],
        "the submission of {} starts",
        row.id
    );
}

/// [`claimed`] and [`start_submission`], both at `at`: the row in `executing`, sent as far as the
/// ledger knows (a worker that vanishes now leaves an outcome nobody knows).
pub async fn executing(
    ledger: &SharedLedger,
    id: &OperationId,
    holder: &LeaseHolder<'_>,
    at: Timestamp,
) -> Operation {
    let row = claimed(ledger, id, holder, at).await;
    start_submission(ledger, &row, at).await;
    row
}

/// An unknown outcome: `reason`, the processor's `reference` if one came back, and when the
/// reconciler should look.
pub fn unknown_outcome(
    reason: &str,
    reference: Option<&str>,
    next_check_at: Timestamp,
) -> Recorded {
    Recorded::Unknown {
        reason: reason.into(),
        reference: reference.map(str::to_string),
        next_check_at,
    }
}

/// Records `outcome` on the executing `row` under its fence, as `actor` at `at`; the row after.
pub async fn record(
    ledger: &SharedLedger,
    row: &Operation,
    outcome: &Recorded,
    actor: &str,
    at: Timestamp,
) -> Operation {
    ledger
        .record(&recording(&Fence::of(row), outcome, actor), at)
        .await
        .unwrap()
}

/// [`executing`] as `holder`, then a timeout recorded by it (no reference, due for a check at
/// `next_check_at`), all at `at`: the row in `unknown`.
pub async fn unknown(
    ledger: &SharedLedger,
    id: &OperationId,
    holder: &LeaseHolder<'_>,
    next_check_at: Timestamp,
    at: Timestamp,
) -> Operation {
    let row = executing(ledger, id, holder, at).await;
    let outcome = unknown_outcome("timeout", None, next_check_at);
    let row = record(ledger, &row, &outcome, holder.owner, at).await;
    assert_eq!(row.status, Status::Unknown);
    row
}

/// Escalates the `unknown` row as the reconciler does when automatic progress would risk a
/// duplicate (`escalate` under its fence, `reason`, as `actor` at `at`): the row in
/// `needs_attention`, which only a human moves on.
pub async fn needs_attention(
    ledger: &SharedLedger,
    unknown: &Operation,
    reason: &str,
    actor: &str,
    at: Timestamp,
) -> Operation {
    let fence = Fence::of(unknown);
    ledger
        .escalate(
            &Escalate {
                fence: &fence,
                reason,
                actor,
            },
            at,
        )
        .await
        .unwrap();
    let row = ledger.get_unscoped(&unknown.id).await.unwrap();
    assert_eq!(row.status, Status::NeedsAttention);
    row
}

//! Refund operations: creation under the over-refund guard, a payment's refunds and their totals.
//!
//! The guard: the amounts of a payment's refund operations that still hold money (every state but
//! [`RELEASED`]: awaiting approval, ready, executing, unknown, needs attention and succeeded) plus
//! the new refund's amount never exceed the payment's amount, and only a succeeded payment of the
//! same tenant is refunded. One `INSERT ... SELECT` checks it and inserts; on Postgres it runs in a
//! transaction after locking the payment's row ([`Dialect::LOCK_OPERATION`]), so a second
//! refund racing for the same money waits and then sees the first; SQLite's one writer makes the
//! statement atomic by itself. Only creation adds to the sum; every later move of a refund keeps or
//! releases its money, except a contradicting processor report on a released refund (the processor
//! says money moved after all), which the processor's own over-refund refusal bounds.
//!
//! An assistant's proposals (business key [`PROPOSAL_KEY_PREFIX`]) hold money too, so they are
//! bounded ([`PROPOSALS_OPEN_MAX`] awaiting approval per payment, counted under the same lock) and
//! expire ([`PROPOSAL_TTL`]): every refund creation first cancels the payment's proposals left
//! unapproved that long, so the guard never counts them (docs/decisions.md).

use super::dialect::Dialect;
use super::moves::{legal, status_in, update};
use super::operations::{insert, taken_as_none};
use super::record::{decode_operation, operation_columns};
use super::row::LedgerRow;
use super::statement::Stmt;
use super::store::Store;
use super::{
    Created, LedgerError, LimitError, NewOperation, Operation, Operations, PAGE_MAX, Refunds,
};
use async_trait::async_trait;
use payonce_core::clock::Timestamp;
use payonce_core::details::OperationKind;
use payonce_core::id::{OperationId, TenantId};
use payonce_core::state::{Event, Status};
use serde::Serialize;
use std::sync::LazyLock;
use std::time::Duration;

/// The states in which a refund no longer holds any of the payment's money: it never reached the
/// processor (cancelled, rejected) or the processor definitively refused it (failed).
pub const RELEASED: [Status; 3] = [Status::Failed, Status::Cancelled, Status::Rejected];

/// How an assistant's refund proposal's business key starts (`refund-proposal:<payment>:<amount>`, made
/// by the api's `request_refund`): the rows the two limits below apply to.
pub const PROPOSAL_KEY_PREFIX: &str = "refund-proposal:";
/// Most assistant proposals one payment may have awaiting approval: each holds its money, and an
/// assistant in a loop must not hold the whole payment against the service's own refunds.
pub const PROPOSALS_OPEN_MAX: u32 = 3;
/// How long an assistant's proposal holds its money unapproved (a working day for a person of the
/// merchant to look, like an approval's default validity); past it, it is cancelled.
pub const PROPOSAL_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// The actor of a proposal's expiry in the audit trail.
const PROPOSAL_EXPIRY_ACTOR: &str = "ledger:proposal_expiry";

/// Cancels the payment's (`$1`) assistant proposals (`$5`: the prefix pattern) awaiting approval and
/// made at or before `$2`: they no longer hold money.
static EXPIRE_PROPOSALS: LazyLock<String> = LazyLock::new(|| {
    update(
        &legal(&[Status::AwaitingApproval], Event::Cancel),
        "updated_at = $3, last_actor = $4, last_detail = $6",
        "refund_of = $1 AND business_key LIKE $5 AND created_at <= $2",
        false,
    )
});
/// The payment's (`$1`) assistant proposals (`$2`: the prefix pattern) awaiting approval.
const OPEN_PROPOSALS: &str = "SELECT COUNT(*) AS n FROM operations WHERE refund_of = $1 \
     AND status = 'awaiting_approval' AND business_key LIKE $2";

/// Inserts the refund only if its payment is a succeeded payment of the tenant whose record matches
/// the refund's details, and the unreleased refunds plus this one fit in the payment's amount.
static INSERT_REFUND: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO operations (id, tenant_id, business_key, kind, amount_minor, currency, customer, \
         payment_method, invoice, destination, description, details_hash, status, attempt, idempotency_key, \
         available_at, last_event, last_actor, last_detail, created_at, updated_at, refund_of, \
         refund_payment_reference, refund_reason, processor) \
         SELECT $1, $2, $3, 'refund', $4, $5, $6, $7, $8, NULL, NULL, $9, 'awaiting_approval', 0, $10, $11, \
         'create', $12, NULL, $11, $11, $13, $14, $15, p.processor FROM operations p \
         WHERE p.id = $13 AND p.tenant_id = $2 AND p.kind = 'payment' AND p.status = 'succeeded' \
         AND p.external_ref = $14 AND p.currency = $5 AND p.customer = $6 AND p.payment_method = $7 \
         AND p.invoice = $8 \
         AND (SELECT COALESCE(SUM(r.amount_minor), 0) FROM operations r \
              WHERE r.refund_of = $13 AND NOT ({released})) + $4 <= p.amount_minor \
         ON CONFLICT DO NOTHING RETURNING {columns}",
        released = status_in("r.status", &RELEASED),
        columns = operation_columns!(),
    )
});
/// Succeeded and still-holding sums of a payment's refunds (`CAST`: Postgres sums `BIGINT` as `NUMERIC`).
static TOTALS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT CAST(COALESCE(SUM(CASE WHEN status = 'succeeded' THEN amount_minor ELSE 0 END), 0) AS BIGINT) \
         AS refunded, CAST(COALESCE(SUM(CASE WHEN status <> 'succeeded' AND NOT ({released}) \
         THEN amount_minor ELSE 0 END), 0) AS BIGINT) AS in_flight, COUNT(*) AS n \
         FROM operations WHERE refund_of = $1",
        released = status_in("status", &RELEASED)
    )
});
const SELECT_REFUNDS: &str = concat!(
    "SELECT ",
    operation_columns!(),
    " FROM operations WHERE refund_of = $1 AND tenant_id = $2 \
     ORDER BY created_at, id LIMIT $3"
);

/// How much of a payment its refunds have given back or hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RefundTotals {
    /// The payment's amount, minor units.
    pub payment_minor: i64,
    /// Sum of succeeded refunds.
    pub refunded_minor: i64,
    /// Sum of refunds that still hold money but have not succeeded (awaiting approval, ready,
    /// executing, unknown, needs attention).
    pub in_flight_minor: i64,
    /// Refund operations of the payment in any state.
    pub refund_count: i64,
}

impl RefundTotals {
    /// What a new refund may still ask for.
    pub fn refundable_minor(&self) -> i64 {
        self.payment_minor - self.refunded_minor - self.in_flight_minor
    }
}

/// The refund rows of one store, for creation under the guard and the reads it shares with
/// [`Refunds`].
pub(crate) struct RefundRows<'a, DB: Dialect>(pub(crate) &'a Store<DB>);

impl<DB: Dialect> RefundRows<'_, DB> {
    /// Creates a refund under the guard, or returns the existing one for the same business key and
    /// details (see [`Operations::create_or_get`](super::Operations::create_or_get)).
    pub(crate) async fn create_or_get(
        &self,
        new: NewOperation,
        now: Timestamp,
    ) -> Result<Created, LedgerError> {
        let d = &new.details;
        let of = d.refund_of().ok_or_else(|| {
            LedgerError::Corrupt("a refund's details always name the payment".into())
        })?;
        let payment = of.payment_operation();
        let hash = d.hash();
        // Committed on its own: an expired proposal holds nothing, whatever this creation does.
        self.expire_proposals(payment, now).await?;
        let mut tx = self.0.begin().await?;
        if let Some(lock) = DB::LOCK_OPERATION {
            DB::fetch_optional(&mut *tx, Stmt::new(lock).bind(payment)).await?;
        }
        let proposal = new.business_key.as_str().starts_with(PROPOSAL_KEY_PREFIX);
        if proposal {
            let count = Stmt::new(OPEN_PROPOSALS).bind(payment).bind(proposals());
            let open: i64 = match DB::fetch_optional(&mut *tx, count).await? {
                Some(row) => row.get("n")?,
                None => return Err(LedgerError::Corrupt("a count returned no row".into())),
            };
            if open >= i64::from(PROPOSALS_OPEN_MAX) {
                tx.rollback().await?;
                // Asking again for an open proposal still answers it.
                if let Some(existing) = self.0.by_business_key(&new).await? {
                    return super::operations::created_again(existing, hash);
                }
                return Err(LimitError::RefundProposals.into());
            }
        }
        let inserted = insert(INSERT_REFUND.as_str(), &new, &hash, now).bind(payment);
        let inserted = inserted
            .bind(of.payment_reference())
            .bind(of.reason().as_str());
        // A taken business key fails the statement on Postgres (the directory's unique index),
        // which ends the transaction: it is rolled back, and the key's owner looked up below.
        match taken_as_none(DB::fetch_optional(&mut *tx, inserted).await)? {
            Some(row) => {
                tx.commit().await?;
                return Ok(Created {
                    operation: decode_operation(&row)?,
                    inserted: true,
                });
            }
            None => tx.rollback().await?,
        }
        // Nothing inserted: the business key is taken, or the guard refused. Say which.
        if let Some(existing) = self.0.by_business_key(&new).await? {
            return super::operations::created_again(existing, hash);
        }
        let paid = self.0.get(&new.tenant, payment).await?;
        let not_refundable = |why| LedgerError::NotRefundable {
            payment: payment.clone(),
            why,
        };
        match paid.details.kind() {
            OperationKind::Payment => {}
            OperationKind::Refund => return Err(not_refundable("only a payment can be refunded")),
        }
        if paid.status != Status::Succeeded {
            return Err(not_refundable("only a succeeded payment can be refunded"));
        }
        let p = &paid.details;
        if paid.external_ref.as_deref() != Some(of.payment_reference())
            || p.money().currency() != d.money().currency()
            || p.customer() != d.customer()
            || p.payment_method() != d.payment_method()
            || p.invoice() != d.invoice()
        {
            return Err(not_refundable(
                "the refund's details are not the payment's record",
            ));
        }
        let totals = self.totals(&paid).await?;
        Err(LedgerError::OverRefund {
            payment: payment.clone(),
            requested_minor: d.money().amount_minor(),
            refundable_minor: totals.refundable_minor(),
        })
    }

    /// Cancels the payment's assistant proposals left unapproved for [`PROPOSAL_TTL`] (at `now`).
    async fn expire_proposals(
        &self,
        payment: &OperationId,
        now: Timestamp,
    ) -> Result<(), LedgerError> {
        let stmt = Stmt::new(EXPIRE_PROPOSALS.as_str())
            .bind(payment)
            .bind(now.saturating_sub_span(PROPOSAL_TTL))
            .bind(now)
            .bind(PROPOSAL_EXPIRY_ACTOR)
            .bind(proposals());
        let detail = format!(
            "an assistant's proposal left unapproved for {} h no longer holds money",
            PROPOSAL_TTL.as_secs() / 3600
        );
        self.0.execute(stmt.bind(detail)).await?;
        Ok(())
    }

    async fn totals(&self, payment: &Operation) -> Result<RefundTotals, LedgerError> {
        let stmt = Stmt::new(TOTALS.as_str()).bind(&payment.id);
        let totals = self.0.first(stmt, |row| {
            Ok(RefundTotals {
                payment_minor: payment.details.money().amount_minor(),
                refunded_minor: row.get("refunded")?,
                in_flight_minor: row.get("in_flight")?,
                refund_count: row.get("n")?,
            })
        });
        totals
            .await?
            .ok_or_else(|| LedgerError::Corrupt("an aggregate returned no row".into()))
    }
}

/// The `LIKE` pattern of an assistant proposal's business key.
fn proposals() -> String {
    format!("{PROPOSAL_KEY_PREFIX}%")
}

#[async_trait]
impl<DB: Dialect> Refunds for Store<DB> {
    async fn refund_totals(
        &self,
        tenant: &TenantId,
        payment: &OperationId,
    ) -> Result<RefundTotals, LedgerError> {
        let paid = self.get(tenant, payment).await?;
        RefundRows(self).totals(&paid).await
    }

    async fn refunds_of(
        &self,
        tenant: &TenantId,
        payment: &OperationId,
        limit: u32,
    ) -> Result<Vec<Operation>, LedgerError> {
        if limit == 0 || limit > PAGE_MAX {
            return Err(LimitError::PageSize.into());
        }
        let stmt = Stmt::new(SELECT_REFUNDS)
            .bind(payment)
            .bind(tenant)
            .bind(i64::from(limit));
        self.all(stmt, decode_operation).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guard_counts_every_state_but_the_released_ones() {
        assert!(INSERT_REFUND.contains(
            "WHERE r.refund_of = $13 AND NOT (r.status IN ('failed', 'cancelled', 'rejected'))"
        ));
        assert!(TOTALS.contains("AND NOT (status IN ('failed', 'cancelled', 'rejected'))"));
        // Released means terminal without money moved: succeeded is terminal but holds money.
        for s in payonce_core::state::ALL_STATUSES {
            let released = RELEASED.contains(&s);
            assert!(!released || s.is_terminal(), "{s:?}");
            assert_eq!(released, s.is_terminal() && s != Status::Succeeded, "{s:?}");
        }
    }
}

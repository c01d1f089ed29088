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

use super::dialect::Dialect;
use super::moves::status_in;
use super::operations::{insert, taken_as_none};
use super::record::decode_operation;
use super::row::LedgerRow;
use super::statement::Stmt;
use super::store::Store;
use super::{
    Created, LedgerError, LimitError, NewOperation, Operation, Operations, PAGE_MAX, Refunds,
};
use crate::clock::Timestamp;
use crate::details::OperationKind;
use crate::id::{OperationId, TenantId};
use crate::state::Status;
use async_trait::async_trait;
use serde::Serialize;
use std::sync::LazyLock;

/// The states in which a refund no longer holds any of the payment's money: it never reached the
/// processor (cancelled, rejected) or the processor definitively refused it (failed).
pub const RELEASED: [Status; 3] = [Status::Failed, Status::Cancelled, Status::Rejected];

/// Inserts the refund only if its payment is a succeeded payment of the tenant whose record matches
/// the refund's details, and the unreleased refunds plus this one fit in the payment's amount.
static INSERT_REFUND: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO operations (id, tenant_id, business_key, kind, amount_minor, currency, customer, \
         payment_method, invoice, destination, description, details_hash, status, attempt, idempotency_key, \
         available_at, last_event, last_actor, last_detail, created_at, updated_at, refund_of, \
         refund_payment_reference, refund_reason) \
         SELECT $1, $2, $3, 'refund', $4, $5, $6, $7, $8, NULL, NULL, $9, 'awaiting_approval', 0, $10, $11, \
         'create', $12, NULL, $11, $11, $13, $14, $15 FROM operations p \
         WHERE p.id = $13 AND p.tenant_id = $2 AND p.kind = 'payment' AND p.status = 'succeeded' \
         AND p.external_ref = $14 AND p.currency = $5 AND p.customer = $6 AND p.payment_method = $7 \
         AND p.invoice = $8 \
         AND (SELECT COALESCE(SUM(r.amount_minor), 0) FROM operations r \
              WHERE r.refund_of = $13 AND NOT ({released})) + $4 <= p.amount_minor \
         ON CONFLICT DO NOTHING RETURNING *",
        released = status_in("r.status", &RELEASED)
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
const SELECT_REFUNDS: &str = "SELECT * FROM operations WHERE refund_of = $1 AND tenant_id = $2 \
     ORDER BY created_at, id LIMIT $3";

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
        let mut tx = self.0.begin().await?;
        if let Some(lock) = DB::LOCK_OPERATION {
            DB::fetch_optional(&mut *tx, Stmt::new(lock).bind(payment)).await?;
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
            return existing.created_again(hash);
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
        for s in crate::state::ALL_STATUSES {
            let released = RELEASED.contains(&s);
            assert!(!released || s.is_terminal(), "{s:?}");
            assert_eq!(released, s.is_terminal() && s != Status::Succeeded, "{s:?}");
        }
    }
}

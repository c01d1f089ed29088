//! The refund statements: create (bounded by what is left to refund), read, list, settle.
//!
//! A refund counts against the payment's refundable amount from the moment it is created, `pending`
//! included, and gives it back only when it fails, as Stripe does.

use super::writes::{insert_events, upsert_key};
use super::{KeyRecord, NewEvent, Store};
use sqlx::Row;
use sqlx::sqlite::SqliteRow;

macro_rules! refund_columns {
    () => {
        "seq, id, payment_intent, charge, amount, status, created, idempotency_key, request_id, settle_at_ms, \
         settle_to, body"
    };
}

const ADD_REFUNDED: &str = "UPDATE payment_intents SET amount_refunded = amount_refunded + ?2 \
    WHERE id = ?1 AND status = 'succeeded' AND amount_refunded + ?2 <= amount_received";
const GIVE_BACK_REFUNDED: &str =
    "UPDATE payment_intents SET amount_refunded = amount_refunded - ?2 WHERE id = ?1";
const INSERT_REFUND: &str = "INSERT INTO refunds (id, payment_intent, charge, amount, status, created, \
    idempotency_key, request_id, settle_at_ms, settle_to, body) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";
const SETTLE_REFUND: &str = "UPDATE refunds SET status = ?3, body = ?4, settle_at_ms = NULL, settle_to = NULL \
    WHERE id = ?1 AND status = ?2 AND settle_at_ms IS NOT NULL";
const SELECT_REFUND_BY_ID: &str =
    concat!("SELECT ", refund_columns!(), " FROM refunds WHERE id = ?1");
// Newest first, older than the cursor (`starting_after`, or none).
const SELECT_REFUNDS_BEFORE: &str = concat!(
    "SELECT ",
    refund_columns!(),
    " FROM refunds WHERE (?1 IS NULL OR payment_intent = ?1) AND (?2 IS NULL OR charge = ?2) \
     AND created >= ?3 AND created <= ?4 AND seq < ?5 ORDER BY seq DESC LIMIT ?6"
);
// Oldest first, newer than the cursor (`ending_before`); the caller turns the page around.
const SELECT_REFUNDS_AFTER: &str = concat!(
    "SELECT ",
    refund_columns!(),
    " FROM refunds WHERE (?1 IS NULL OR payment_intent = ?1) AND (?2 IS NULL OR charge = ?2) \
     AND created >= ?3 AND created <= ?4 AND seq > ?5 ORDER BY seq ASC LIMIT ?6"
);
const SELECT_REFUNDS_ALL: &str = concat!(
    "SELECT ",
    refund_columns!(),
    " FROM refunds ORDER BY seq ASC LIMIT ?1"
);
const SELECT_REFUNDS_SETTLE_DUE: &str = concat!(
    "SELECT ",
    refund_columns!(),
    " FROM refunds WHERE settle_at_ms IS NOT NULL AND settle_at_ms <= ?1 ORDER BY seq LIMIT ?2"
);

/// One Refund as stored.
#[derive(Debug, Clone)]
pub(crate) struct RefundRow {
    pub(crate) seq: i64,
    pub(crate) id: String,
    pub(crate) payment_intent: String,
    pub(crate) charge: Option<String>,
    pub(crate) amount: i64,
    /// `pending`, `succeeded`, `failed` or `canceled`.
    pub(crate) status: String,
    pub(crate) created: i64,
    pub(crate) idempotency_key: Option<String>,
    pub(crate) request_id: String,
    /// When an asynchronous refund takes its final status.
    pub(crate) settle_at_ms: Option<i64>,
    /// The final status it takes then: `succeeded` or `failed`.
    pub(crate) settle_to: Option<String>,
    /// The Refund object as last rendered (JSON).
    pub(crate) body: Vec<u8>,
}

fn refund_row(r: &SqliteRow) -> Result<RefundRow, sqlx::Error> {
    Ok(RefundRow {
        seq: r.try_get("seq")?,
        id: r.try_get("id")?,
        payment_intent: r.try_get("payment_intent")?,
        charge: r.try_get("charge")?,
        amount: r.try_get("amount")?,
        status: r.try_get("status")?,
        created: r.try_get("created")?,
        idempotency_key: r.try_get("idempotency_key")?,
        request_id: r.try_get("request_id")?,
        settle_at_ms: r.try_get("settle_at_ms")?,
        settle_to: r.try_get("settle_to")?,
        body: r.try_get("body")?,
    })
}

/// Whether a refund fit in what is left to refund.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RefundCommit {
    /// Committed.
    Done,
    /// More than the unrefunded amount (or the payment is not refundable); nothing committed.
    Exceeds,
}

/// Which refunds a list reads: filters, a created range and a cursor.
#[derive(Debug, Clone)]
pub(crate) struct RefundPage<'a> {
    pub(crate) payment_intent: Option<&'a str>,
    pub(crate) charge: Option<&'a str>,
    pub(crate) created_gte: i64,
    pub(crate) created_lte: i64,
    /// `Ok(seq)`: older than `seq` (newest first); `Err(seq)`: newer than `seq` (oldest first).
    pub(crate) cursor: Result<i64, i64>,
    pub(crate) limit: i64,
}

/// A refund's move to its final status, with the events it emits.
#[derive(Debug, Clone)]
pub(crate) struct RefundSettle<'a> {
    pub(crate) row: &'a RefundRow,
    /// `succeeded` or `failed`.
    pub(crate) to: &'a str,
    /// The re-rendered Refund object.
    pub(crate) body: &'a [u8],
    pub(crate) events: &'a [NewEvent],
}

impl Store {
    /// Commits a refund with its events, deliveries and idempotent response, if it fits in the
    /// unrefunded amount of its payment.
    pub(crate) async fn commit_refund(
        &self,
        refund: &RefundRow,
        events: &[NewEvent],
        key: Option<&KeyRecord>,
        webhooks_due_ms: Option<i64>,
    ) -> Result<RefundCommit, sqlx::Error> {
        // Indexed before it is written: the index may name a key the table lacks, never the reverse.
        if let Some(key) = key {
            self.keys.saved(&key.key, key.created_ms);
        }
        let mut tx = self.pool.begin().await?;
        let done = sqlx::query(ADD_REFUNDED)
            .bind(&refund.payment_intent)
            .bind(refund.amount)
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 0 {
            tx.rollback().await?;
            return Ok(RefundCommit::Exceeds);
        }
        sqlx::query(INSERT_REFUND)
            .bind(&refund.id)
            .bind(&refund.payment_intent)
            .bind(&refund.charge)
            .bind(refund.amount)
            .bind(&refund.status)
            .bind(refund.created)
            .bind(&refund.idempotency_key)
            .bind(&refund.request_id)
            .bind(refund.settle_at_ms)
            .bind(&refund.settle_to)
            .bind(&refund.body)
            .execute(&mut *tx)
            .await?;
        insert_events(&mut tx, events, webhooks_due_ms).await?;
        if let Some(key) = key {
            upsert_key(&mut tx, key).await?;
        }
        tx.commit().await?;
        Ok(RefundCommit::Done)
    }

    /// Commits an answer with no payment or refund behind it (a refund Adyen received and then
    /// refused): its events, deliveries and idempotent response.
    pub(crate) async fn commit_answer(
        &self,
        events: &[NewEvent],
        key: Option<&KeyRecord>,
        webhooks_due_ms: Option<i64>,
    ) -> Result<(), sqlx::Error> {
        if let Some(key) = key {
            self.keys.saved(&key.key, key.created_ms);
        }
        let mut tx = self.pool.begin().await?;
        insert_events(&mut tx, events, webhooks_due_ms).await?;
        if let Some(key) = key {
            upsert_key(&mut tx, key).await?;
        }
        tx.commit().await
    }

    /// Moves an asynchronous refund to its final status with its events; a failed refund gives its
    /// amount back to the payment. False if another pass settled it first.
    pub(crate) async fn settle_refund(
        &self,
        settle: &RefundSettle<'_>,
        webhooks_due_ms: Option<i64>,
    ) -> Result<bool, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        let done = sqlx::query(SETTLE_REFUND)
            .bind(&settle.row.id)
            .bind(&settle.row.status)
            .bind(settle.to)
            .bind(settle.body)
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 0 {
            tx.rollback().await?;
            return Ok(false);
        }
        if settle.to == "failed" {
            sqlx::query(GIVE_BACK_REFUNDED)
                .bind(&settle.row.payment_intent)
                .bind(settle.row.amount)
                .execute(&mut *tx)
                .await?;
        }
        insert_events(&mut tx, settle.events, webhooks_due_ms).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// One Refund by id.
    pub(crate) async fn refund(&self, id: &str) -> Result<Option<RefundRow>, sqlx::Error> {
        let row = sqlx::query(SELECT_REFUND_BY_ID)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(refund_row).transpose()
    }

    /// One page of Refunds, in the order its cursor reads them (see [`RefundPage::cursor`]).
    pub(crate) async fn list_refunds(
        &self,
        page: &RefundPage<'_>,
    ) -> Result<Vec<RefundRow>, sqlx::Error> {
        let (statement, seq) = match page.cursor {
            Ok(seq) => (SELECT_REFUNDS_BEFORE, seq),
            Err(seq) => (SELECT_REFUNDS_AFTER, seq),
        };
        let rows = sqlx::query(statement)
            .bind(page.payment_intent)
            .bind(page.charge)
            .bind(page.created_gte)
            .bind(page.created_lte)
            .bind(seq)
            .bind(page.limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(refund_row).collect()
    }

    /// Every Refund, oldest first, up to `limit`.
    pub(crate) async fn all_refunds(&self, limit: i64) -> Result<Vec<RefundRow>, sqlx::Error> {
        let rows = sqlx::query(SELECT_REFUNDS_ALL)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(refund_row).collect()
    }

    /// Asynchronous refunds whose final status is due.
    pub(crate) async fn refunds_settle_due(
        &self,
        now_ms: i64,
        limit: i64,
    ) -> Result<Vec<RefundRow>, sqlx::Error> {
        let rows = sqlx::query(SELECT_REFUNDS_SETTLE_DUE)
            .bind(now_ms)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(refund_row).collect()
    }
}

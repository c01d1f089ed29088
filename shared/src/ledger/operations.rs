//! Creating and reading operations: create-or-get by business key, reads by id, the audit trail,
//! on-call listings and per-state counts.

use super::dialect::Dialect;
use super::record::{decode_event, decode_operation};
use super::refunds::Refunds;
use super::store::Store;
use super::{
    Created, LedgerError, LimitError, ListFilter, NewOperation, Operation, OperationEvent,
    PAGE_MAX, StatusCount, bounded,
};
use crate::details::OperationKind;
use crate::id::{IdempotencyKey, OperationId, TenantId};
use crate::state::{ALL_STATUSES, Status};
use sqlx::{ColumnIndex, Decode, Encode, Executor, Row, Type};

/// A new row starts in `awaiting_approval` with the `create` event (the one event with no
/// from-state; see `state::CREATED`).
const INSERT_OPERATION: &str = "INSERT INTO operations (id, tenant_id, business_key, kind, amount_minor, currency, \
     customer, payment_method, invoice, destination, description, details_hash, status, attempt, idempotency_key, \
     available_at, last_event, last_actor, last_detail, created_at, updated_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, 'awaiting_approval', 0, $13, $14, 'create', $15, NULL, $14, $14) \
     ON CONFLICT (tenant_id, business_key) DO NOTHING RETURNING *";
pub(crate) const SELECT_BY_BUSINESS_KEY: &str =
    "SELECT * FROM operations WHERE tenant_id = $1 AND business_key = $2";
const SELECT_BY_ID_IN_TENANT: &str = "SELECT * FROM operations WHERE id = $1 AND tenant_id = $2";
const SELECT_BY_ID: &str = "SELECT * FROM operations WHERE id = $1";
const SELECT_EVENTS: &str = "SELECT * FROM operation_events WHERE operation_id = $1 ORDER BY id";
const LIST: &str = "SELECT * FROM operations WHERE status = $1 AND updated_at < $2 \
     AND ($3 IS NULL OR tenant_id = $3) ORDER BY updated_at LIMIT $4";
const PING: &str = "SELECT 1";
const COUNT_BY_STATUS: &str = "SELECT status, COUNT(*) AS n, MIN(updated_at) AS oldest, \
     MIN(first_submitted_at) AS oldest_submitted FROM operations GROUP BY status";

/// The operation rows of one store.
pub(crate) struct Operations<'a, DB: Dialect>(pub(crate) &'a Store<DB>);

impl<DB> Operations<'_, DB>
where
    // LEDGER BOUNDS (see `dialect.rs`)
    DB: Dialect,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    &'static str: ColumnIndex<DB::Row>,
    for<'t> i64: Encode<'t, DB> + Decode<'t, DB> + Type<DB>,
    for<'t> String: Encode<'t, DB> + Decode<'t, DB> + Type<DB>,
    for<'t> &'t str: Encode<'t, DB> + Type<DB>,
    for<'t> Option<i64>: Encode<'t, DB>,
    for<'t> Option<String>: Encode<'t, DB>,
    for<'t> Option<&'t str>: Encode<'t, DB>,
{
    /// See [`Ledger::create_or_get`](super::Ledger::create_or_get).
    pub(crate) async fn create_or_get(
        &self,
        new: NewOperation,
        now_ms: i64,
    ) -> Result<Created, LedgerError> {
        match new.details.kind() {
            OperationKind::Payment => {}
            OperationKind::Refund => return Refunds(self.0).create_or_get(new, now_ms).await,
        }
        let d = &new.details;
        let hash = d.hash();
        let key = IdempotencyKey::derive(&new.id);
        let row = sqlx::query(INSERT_OPERATION)
            .bind(new.id.as_str())
            .bind(new.tenant.as_str())
            .bind(new.business_key.as_str())
            .bind(d.kind().as_str())
            .bind(d.money().amount_minor())
            .bind(d.money().currency().code())
            .bind(d.customer())
            .bind(d.payment_method())
            .bind(d.invoice())
            .bind(d.destination())
            .bind(d.description())
            .bind(hash.as_str())
            .bind(key.as_str())
            .bind(now_ms)
            .bind(bounded(&new.actor))
            .fetch_optional(&self.0.pool)
            .await?;
        if let Some(row) = row {
            return Ok(Created {
                operation: decode_operation(&row)?,
                inserted: true,
            });
        }
        let row = sqlx::query(SELECT_BY_BUSINESS_KEY)
            .bind(new.tenant.as_str())
            .bind(new.business_key.as_str())
            .fetch_optional(&self.0.pool)
            .await?
            .ok_or_else(|| LedgerError::Corrupt("business key conflict without a row".into()))?;
        let existing = decode_operation(&row)?;
        if existing.details_hash != hash {
            return Err(LedgerError::Conflict {
                existing: existing.id,
            });
        }
        Ok(Created {
            operation: existing,
            inserted: false,
        })
    }

    /// See [`Ledger::get`](super::Ledger::get).
    pub(crate) async fn get(
        &self,
        tenant: &TenantId,
        id: &OperationId,
    ) -> Result<Operation, LedgerError> {
        let row = sqlx::query(SELECT_BY_ID_IN_TENANT)
            .bind(id.as_str())
            .bind(tenant.as_str())
            .fetch_optional(&self.0.pool)
            .await?
            .ok_or(LedgerError::NotFound)?;
        decode_operation(&row)
    }

    /// See [`Ledger::get_unscoped`](super::Ledger::get_unscoped).
    pub(crate) async fn get_unscoped(&self, id: &OperationId) -> Result<Operation, LedgerError> {
        let row = sqlx::query(SELECT_BY_ID)
            .bind(id.as_str())
            .fetch_optional(&self.0.pool)
            .await?
            .ok_or(LedgerError::NotFound)?;
        decode_operation(&row)
    }

    /// See [`Ledger::events`](super::Ledger::events).
    pub(crate) async fn events(
        &self,
        id: &OperationId,
    ) -> Result<Vec<OperationEvent>, LedgerError> {
        let rows = sqlx::query(SELECT_EVENTS)
            .bind(id.as_str())
            .fetch_all(&self.0.pool)
            .await?;
        rows.iter().map(decode_event).collect()
    }

    /// See [`Ledger::list`](super::Ledger::list).
    pub(crate) async fn list(&self, filter: &ListFilter) -> Result<Vec<Operation>, LedgerError> {
        if filter.limit == 0 || filter.limit > PAGE_MAX {
            return Err(LimitError::PageSize.into());
        }
        let statuses: Vec<Status> = if filter.statuses.is_empty() {
            ALL_STATUSES.to_vec()
        } else {
            filter.statuses.clone()
        };
        let mut all = Vec::new();
        for status in statuses {
            let rows = sqlx::query(LIST)
                .bind(status.as_str())
                .bind(filter.updated_before_ms.unwrap_or(i64::MAX))
                .bind(filter.tenant.as_ref().map(|t| t.as_str().to_string()))
                .bind(i64::from(filter.limit))
                .fetch_all(&self.0.pool)
                .await?;
            for r in &rows {
                all.push(decode_operation(r)?);
            }
        }
        all.sort_by_key(|o| (o.updated_at_ms, o.id.clone()));
        all.truncate(filter.limit as usize);
        Ok(all)
    }

    /// See [`Ledger::ping`](super::Ledger::ping).
    pub(crate) async fn ping(&self) -> Result<(), LedgerError> {
        sqlx::query(PING).execute(&self.0.pool).await?;
        Ok(())
    }

    /// See [`Ledger::count_by_status`](super::Ledger::count_by_status).
    pub(crate) async fn count_by_status(&self) -> Result<Vec<StatusCount>, LedgerError> {
        let rows = sqlx::query(COUNT_BY_STATUS).fetch_all(&self.0.pool).await?;
        rows.iter()
            .map(|r| {
                let s: String = r.try_get("status")?;
                Ok(StatusCount {
                    status: Status::parse(&s)
                        .ok_or_else(|| LedgerError::Corrupt(format!("unknown status {s}")))?,
                    count: r.try_get("n")?,
                    oldest_updated_at_ms: r.try_get("oldest")?,
                    oldest_submitted_at_ms: r.try_get("oldest_submitted")?,
                })
            })
            .collect()
    }
}

//! Stored webhooks: each is a hint that the processor has news about an operation, kept once per
//! (processor, event id) and checked by retrieving the object it names before anything is applied.

use super::dialect::Dialect;
use super::store::Store;
use super::{LedgerError, PAGE_MAX, StoredProcessorEvent, bounded};
use crate::id::OperationId;
use sqlx::{ColumnIndex, Decode, Encode, Executor, Row, Type};

const INSERT_PROCESSOR_EVENT: &str = "INSERT INTO processor_events (processor, event_id, event_type, \
     operation_id, payload, received_at) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (processor, event_id) DO NOTHING";
/// Hints still to check: not applied, next check due (served by `processor_events_pending_idx`).
const PENDING_PROCESSOR_EVENTS: &str = "SELECT processor, event_id, event_type, operation_id, payload, \
     checks FROM processor_events WHERE applied_at IS NULL AND (check_after IS NULL OR check_after <= $1) \
     ORDER BY received_at LIMIT $2";
const DEFER_PROCESSOR_EVENT: &str = "UPDATE processor_events SET check_after = $3, checks = checks + 1, \
     outcome = $4 WHERE processor = $1 AND event_id = $2 AND applied_at IS NULL";
const MARK_PROCESSOR_EVENT: &str = "UPDATE processor_events SET applied_at = $3, outcome = $4 WHERE processor = $1 AND event_id = $2";

/// The stored webhooks of one store.
pub(crate) struct Webhooks<'a, DB: Dialect>(pub(crate) &'a Store<DB>);

impl<DB> Webhooks<'_, DB>
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
    /// See [`Ledger::insert_processor_event`](super::Ledger::insert_processor_event).
    pub(crate) async fn insert(
        &self,
        processor: &str,
        event_id: &str,
        event_type: &str,
        operation: Option<&OperationId>,
        payload: &str,
        now_ms: i64,
    ) -> Result<bool, LedgerError> {
        let done = sqlx::query(INSERT_PROCESSOR_EVENT)
            .bind(processor)
            .bind(event_id)
            .bind(event_type)
            .bind(operation.map(|o| o.as_str().to_string()))
            .bind(payload)
            .bind(now_ms)
            .execute(&self.0.pool)
            .await?;
        Ok(DB::rows_affected(&done) == 1)
    }

    /// See [`Ledger::pending_processor_events`](super::Ledger::pending_processor_events).
    pub(crate) async fn pending(
        &self,
        now_ms: i64,
        limit: u32,
    ) -> Result<Vec<StoredProcessorEvent>, LedgerError> {
        let limit = limit.min(PAGE_MAX);
        let rows = sqlx::query(PENDING_PROCESSOR_EVENTS)
            .bind(now_ms)
            .bind(i64::from(limit))
            .fetch_all(&self.0.pool)
            .await?;
        rows.iter()
            .map(|r| {
                let operation: Option<String> = r.try_get("operation_id")?;
                let operation = operation
                    .map(|o| OperationId::parse(&o))
                    .transpose()
                    .map_err(|e| {
                        LedgerError::Corrupt(format!("processor event operation id: {e}"))
                    })?;
                Ok(StoredProcessorEvent {
                    processor: r.try_get("processor")?,
                    event_id: r.try_get("event_id")?,
                    event_type: r.try_get("event_type")?,
                    operation,
                    payload: r.try_get("payload")?,
                    checks: r.try_get("checks")?,
                })
            })
            .collect()
    }

    /// See [`Ledger::defer_processor_event`](super::Ledger::defer_processor_event).
    pub(crate) async fn defer(
        &self,
        processor: &str,
        event_id: &str,
        check_after_ms: i64,
        why: &str,
    ) -> Result<(), LedgerError> {
        sqlx::query(DEFER_PROCESSOR_EVENT)
            .bind(processor)
            .bind(event_id)
            .bind(check_after_ms)
            .bind(bounded(why))
            .execute(&self.0.pool)
            .await?;
        Ok(())
    }

    /// See [`Ledger::mark_processor_event`](super::Ledger::mark_processor_event).
    pub(crate) async fn mark(
        &self,
        processor: &str,
        event_id: &str,
        outcome: &str,
        now_ms: i64,
    ) -> Result<(), LedgerError> {
        sqlx::query(MARK_PROCESSOR_EVENT)
            .bind(processor)
            .bind(event_id)
            .bind(now_ms)
            .bind(bounded(outcome))
            .execute(&self.0.pool)
            .await?;
        Ok(())
    }
}

//! Stored webhooks: each is a hint that the processor has news about an operation, kept once per
//! (processor, event id) and checked by retrieving the object it names before anything is applied.

use super::dialect::Dialect;
use super::store::Store;
use super::{
    HintChecks, LedgerError, NewProcessorEvent, PAGE_MAX, ProcessorEventKey, StoredProcessorEvent,
    Webhooks, bounded,
};
use crate::clock::Timestamp;
use crate::id::OperationId;
use async_trait::async_trait;
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

#[async_trait]
impl<DB> Webhooks for Store<DB>
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
    async fn insert_processor_event(
        &self,
        event: &NewProcessorEvent<'_>,
        now: Timestamp,
    ) -> Result<bool, LedgerError> {
        let done = sqlx::query(INSERT_PROCESSOR_EVENT)
            .bind(event.processor)
            .bind(event.event_id)
            .bind(event.event_type)
            .bind(event.operation.map(|o| o.as_str().to_string()))
            .bind(event.payload)
            .bind(now)
            .execute(&self.pool)
            .await?;
        Ok(DB::rows_affected(&done) == 1)
    }

    async fn mark_processor_event(
        &self,
        event: &ProcessorEventKey<'_>,
        outcome: &str,
        now: Timestamp,
    ) -> Result<(), LedgerError> {
        sqlx::query(MARK_PROCESSOR_EVENT)
            .bind(event.processor)
            .bind(event.event_id)
            .bind(now)
            .bind(bounded(outcome))
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

#[async_trait]
impl<DB> HintChecks for Store<DB>
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
    async fn pending_processor_events(
        &self,
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<StoredProcessorEvent>, LedgerError> {
        let limit = limit.min(PAGE_MAX);
        let rows = sqlx::query(PENDING_PROCESSOR_EVENTS)
            .bind(now)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
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

    async fn defer_processor_event(
        &self,
        event: &ProcessorEventKey<'_>,
        check_after: Timestamp,
        why: &str,
    ) -> Result<(), LedgerError> {
        sqlx::query(DEFER_PROCESSOR_EVENT)
            .bind(event.processor)
            .bind(event.event_id)
            .bind(check_after)
            .bind(bounded(why))
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

//! Stored webhooks: each is a hint that the processor has news about an operation, kept once per
//! (processor, event id) and checked by retrieving the object it names before anything is applied.

use super::dialect::Dialect;
use super::row::LedgerRow;
use super::statement::Stmt;
use super::store::Store;
use super::{
    HintChecks, LedgerError, NewProcessorEvent, PAGE_MAX, ProcessorEventKey, StoredProcessorEvent,
    Webhooks, bounded,
};
use async_trait::async_trait;
use payonce_core::clock::Timestamp;
use payonce_core::id::OperationId;

const INSERT_PROCESSOR_EVENT: &str = "INSERT INTO processor_events (processor, event_id, event_type, \
     operation_id, payload, received_at) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (processor, event_id) DO NOTHING";
/// Hints still to check: not applied, next check due (served by `processor_events_pending_idx`).
const PENDING_PROCESSOR_EVENTS: &str = "SELECT processor, event_id, event_type, operation_id, payload, \
     checks FROM processor_events WHERE applied_at IS NULL AND (check_after IS NULL OR check_after <= $1) \
     ORDER BY received_at LIMIT $2";
/// An operation's stored webhooks, checked or not, oldest first (served by
/// `processor_events_operation_idx`).
const OPERATION_PROCESSOR_EVENTS: &str = "SELECT processor, event_id, event_type, operation_id, \
     payload, checks FROM processor_events WHERE operation_id = $1 ORDER BY received_at, event_id \
     LIMIT $2";
/// The backlog of hints still to check (served by `processor_events_pending_idx`).
const PROCESSOR_EVENT_BACKLOG: &str = "SELECT COUNT(*) AS n, MIN(received_at) AS oldest FROM processor_events \
     WHERE applied_at IS NULL";
const DEFER_PROCESSOR_EVENT: &str = "UPDATE processor_events SET check_after = $3, checks = checks + 1, \
     outcome = $4 WHERE processor = $1 AND event_id = $2 AND applied_at IS NULL";
const MARK_PROCESSOR_EVENT: &str = "UPDATE processor_events SET applied_at = $3, outcome = $4 WHERE processor = $1 AND event_id = $2";

fn decode_stored(r: &impl LedgerRow) -> Result<StoredProcessorEvent, LedgerError> {
    Ok(StoredProcessorEvent {
        processor: r.get("processor")?,
        event_id: r.get("event_id")?,
        event_type: r.get("event_type")?,
        operation: r.get("operation_id")?,
        payload: r.get("payload")?,
        checks: r.get("checks")?,
    })
}

#[async_trait]
impl<DB: Dialect> Webhooks for Store<DB> {
    async fn insert_processor_event(
        &self,
        event: &NewProcessorEvent<'_>,
        now: Timestamp,
    ) -> Result<bool, LedgerError> {
        let stmt = event
            .key
            .stmt(INSERT_PROCESSOR_EVENT)
            .bind(event.event_type);
        let stmt = stmt.bind(event.operation.map(OperationId::as_str));
        Ok(self.execute(stmt.bind(event.payload).bind(now)).await? == 1)
    }

    async fn mark_processor_event(
        &self,
        event: &ProcessorEventKey<'_>,
        outcome: &str,
        now: Timestamp,
    ) -> Result<(), LedgerError> {
        let stmt = event.stmt(MARK_PROCESSOR_EVENT).bind(now);
        self.execute(stmt.bind(bounded(outcome))).await?;
        Ok(())
    }
}

/// [`Dialect::CLOSE_KNOWN_HINTS`], given how the store reads `$.data.object.<field>` of `p.payload`.
macro_rules! close_known_hints {
    ($id:literal, $status:literal) => {
        concat!(
            "UPDATE processor_events SET applied_at = $1, outcome = 'known: ' || operation_id || \
             ' already says succeeded with the object this webhook names; no processor read' \
             WHERE (processor, event_id) IN (SELECT p.processor, p.event_id FROM \
             (SELECT processor, event_id, operation_id, payload FROM processor_events \
             WHERE applied_at IS NULL AND (check_after IS NULL OR check_after <= $1) \
             ORDER BY received_at LIMIT $2) p \
             JOIN operations o ON o.id = p.operation_id \
             WHERE o.status = 'succeeded' AND o.external_ref = ",
            $id,
            " AND ",
            $status,
            " = 'succeeded')"
        )
    };
}
/// [`Dialect::CLOSE_KNOWN_HINTS`] on Postgres (the api stores only payloads it parsed as JSON).
pub(crate) const CLOSE_KNOWN_HINTS_POSTGRES: &str = close_known_hints!(
    "(p.payload::jsonb #>> '{data,object,id}')",
    "(p.payload::jsonb #>> '{data,object,status}')"
);
/// [`Dialect::CLOSE_KNOWN_HINTS`] on SQLite.
pub(crate) const CLOSE_KNOWN_HINTS_SQLITE: &str = close_known_hints!(
    "json_extract(p.payload, '$.data.object.id')",
    "json_extract(p.payload, '$.data.object.status')"
);

#[async_trait]
impl<DB: Dialect> HintChecks for Store<DB> {
    async fn close_known_hints(&self, now: Timestamp, limit: u32) -> Result<u64, LedgerError> {
        let limit = limit.min(PAGE_MAX);
        self.execute(
            Stmt::new(DB::CLOSE_KNOWN_HINTS)
                .bind(now)
                .bind(i64::from(limit)),
        )
        .await
    }

    async fn pending_processor_events(
        &self,
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<StoredProcessorEvent>, LedgerError> {
        let limit = limit.min(PAGE_MAX);
        let stmt = Stmt::new(PENDING_PROCESSOR_EVENTS).bind(now);
        self.all(stmt.bind(i64::from(limit)), decode_stored).await
    }

    async fn processor_events_of(
        &self,
        id: &OperationId,
        limit: u32,
    ) -> Result<Vec<StoredProcessorEvent>, LedgerError> {
        let limit = limit.min(PAGE_MAX);
        let stmt = Stmt::new(OPERATION_PROCESSOR_EVENTS).bind(id);
        self.all(stmt.bind(i64::from(limit)), decode_stored).await
    }

    async fn processor_event_backlog(&self) -> Result<(i64, Option<Timestamp>), LedgerError> {
        let backlog = self
            .first(Stmt::new(PROCESSOR_EVENT_BACKLOG), |r| {
                Ok((r.get("n")?, r.get("oldest")?))
            })
            .await?;
        Ok(backlog.unwrap_or((0, None)))
    }

    async fn defer_processor_event(
        &self,
        event: &ProcessorEventKey<'_>,
        check_after: Timestamp,
        why: &str,
    ) -> Result<(), LedgerError> {
        let stmt = event.stmt(DEFER_PROCESSOR_EVENT).bind(check_after);
        self.execute(stmt.bind(bounded(why))).await?;
        Ok(())
    }
}

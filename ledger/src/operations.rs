//! Operation rows: [`Operations`] (a tenant's create-or-get, reads, cancel, audit trail; the
//! store's health and per-state counts) and [`Inspection`] (reads across tenants for workers and
//! on-call).

use super::dialect::Dialect;
use super::intake::{Batch, ItemResult};
use super::moves::update;
use super::record::{decode_event, decode_operation, event_columns, operation_columns};
use super::refunds::RefundRows;
use super::row::LedgerRow;
use super::statement::{Arg, Stmt};
use super::store::Store;
use super::{
    Cancel, Created, Inspection, LedgerError, LimitError, ListFilter, NewOperation, Operation,
    OperationEvent, Operations, PAGE_MAX, READY_PROBE_TIMEOUT, Recovery, Resolve, StatusCount,
    WRITE_HEADROOM_PAGES_MIN, bounded, console,
};
use async_trait::async_trait;
use payonce_core::clock::Timestamp;
use payonce_core::details::{DetailsHash, OperationKind};
use payonce_core::id::{OperationId, TenantId};
use payonce_core::state::{ALL_STATUSES, Event, Move, Status};
use std::sync::LazyLock;

/// A new row starts in `awaiting_approval` with the `create` event (the one event with no
/// from-state; see `state::CREATED`), bound to the processor it names (`$16`), else to its
/// tenant's processor as the same statement reads it (none set: NULL, the serving process's
/// configured one).
const INSERT_OPERATION: &str = concat!(
    "INSERT INTO operations (id, tenant_id, business_key, kind, amount_minor, currency, \
     customer, payment_method, invoice, destination, description, details_hash, status, attempt, idempotency_key, \
     available_at, last_event, last_actor, last_detail, created_at, updated_at, processor, priority, not_before) \
     VALUES ($1, $2, $3, $13, $4, $5, $6, $7, $8, $14, $15, $9, 'awaiting_approval', 0, $10, $11, 'create', $12, NULL, $11, $11, \
     COALESCE($16, (SELECT tp.processor FROM tenant_processors tp WHERE tp.tenant_id = $2)), $17, $18) \
     ON CONFLICT DO NOTHING RETURNING ",
    operation_columns!()
);
/// Through the search directory, which holds each tenant's business keys (unique there; on
/// Postgres only there: migration `business_key_in_directory`).
const SELECT_BY_BUSINESS_KEY: &str = concat!(
    "SELECT ",
    operation_columns!("o."),
    " FROM operation_search s JOIN operations o ON o.id = s.id \
     WHERE s.tenant_id = $1 AND s.business_key = $2"
);
/// The directory's unique index on (tenant, business key): a create that finds the key taken fails
/// on it in the creating statement (Postgres; SQLite's insert finds it on operations and does
/// nothing).
pub(crate) const BUSINESS_KEY_TAKEN: &str = "operation_search_business_key";
const SELECT_BY_ID_IN_TENANT: &str = concat!(
    "SELECT ",
    operation_columns!(),
    " FROM operations WHERE id = $1 AND tenant_id = $2"
);
const SELECT_BY_ID: &str = concat!(
    "SELECT ",
    operation_columns!(),
    " FROM operations WHERE id = $1"
);
const SELECT_EVENTS: &str = concat!(
    "SELECT ",
    event_columns!(),
    " FROM operation_events WHERE operation_id = $1 ORDER BY id"
);
const SELECT_EVENTS_IN_TENANT: &str = concat!(
    "SELECT ",
    event_columns!(),
    " FROM operation_events WHERE operation_id = $1 \
     AND EXISTS (SELECT 1 FROM operations WHERE id = $1 AND tenant_id = $2) ORDER BY id"
);
/// Withdraws a row from every state the table lets `cancel` leave (not yet executing).
static CANCEL: LazyLock<String> = LazyLock::new(|| {
    let cancel = Move::every(Event::Cancel).expect("the table has a cancel move");
    update(
        &cancel,
        "updated_at = $3, last_actor = $4, last_detail = NULL",
        "id = $1 AND tenant_id = $2",
        true,
    )
});
const LIST: &str = concat!(
    "SELECT ",
    operation_columns!(),
    " FROM operations WHERE status = $1 AND updated_at < $2 \
     AND ($3 IS NULL OR tenant_id = $3) ORDER BY updated_at LIMIT $4"
);
/// The readiness probe's write: the one row of `write_probe` (migration `write_probe`). Committed,
/// because only a commit meets a full disk: SQLite's write-ahead log grows at `COMMIT`.
const PROBE_WRITE: &str = "UPDATE write_probe SET probed_at = $1 WHERE id = 1";
const COUNT_BY_STATUS: &str = "SELECT status, COUNT(*) AS n, MIN(updated_at) AS oldest, \
     MIN(first_submitted_at) AS oldest_submitted FROM operations GROUP BY status";

#[async_trait]
impl<DB: Dialect> Operations for Store<DB> {
    fn store(&self) -> &'static str {
        DB::STORE
    }

    fn console(&self) -> &dyn console::ConsoleLedger {
        self
    }

    fn outage(&self) -> &dyn super::outage::OutageLedger {
        self
    }

    fn identity(&self) -> &dyn super::identity::IdentityLedger {
        self
    }

    async fn create_or_get(
        &self,
        new: NewOperation,
        now: Timestamp,
    ) -> Result<Created, LedgerError> {
        match new.details.kind() {
            OperationKind::Payment => {}
            OperationKind::Refund => return RefundRows(self).create_or_get(new, now).await,
        }
        let d = &new.details;
        let hash = d.hash();
        let inserted = insert(INSERT_OPERATION, &new, &hash, now).bind(d.kind().as_str());
        let inserted = inserted.bind(d.destination()).bind(d.description());
        let inserted = inserted.bind(Arg::from(new.processor.map(|p| p.as_str())));
        let inserted = inserted.bind(new.priority.stored()).bind(new.not_before);
        if let Some(operation) = taken_as_none(self.first(inserted, decode_operation).await)? {
            return Ok(Created {
                operation,
                inserted: true,
            });
        }
        let existing = self
            .by_business_key(&new)
            .await?
            .ok_or_else(|| LedgerError::Corrupt("business key conflict without a row".into()))?;
        created_again(existing, hash)
    }

    async fn create_batch(
        &self,
        batch: &Batch,
        now: Timestamp,
    ) -> Result<Vec<ItemResult>, LedgerError> {
        self.write_batch(batch, now).await
    }

    async fn get(&self, tenant: &TenantId, id: &OperationId) -> Result<Operation, LedgerError> {
        let stmt = Stmt::new(SELECT_BY_ID_IN_TENANT).bind(id).bind(tenant);
        self.first(stmt, decode_operation)
            .await?
            .ok_or(LedgerError::NotFound)
    }

    async fn events(
        &self,
        tenant: &TenantId,
        id: &OperationId,
    ) -> Result<Vec<OperationEvent>, LedgerError> {
        let stmt = Stmt::new(SELECT_EVENTS_IN_TENANT).bind(id).bind(tenant);
        self.all(stmt, decode_event).await
    }

    async fn cancel(
        &self,
        tenant: &TenantId,
        request: &Cancel<'_>,
        now: Timestamp,
    ) -> Result<Operation, LedgerError> {
        let id = request.id;
        let stmt = Stmt::new(CANCEL.as_str())
            .bind(id)
            .bind(tenant)
            .bind(now)
            .bind(bounded(request.actor));
        match self.first(stmt, decode_operation).await? {
            Some(cancelled) => Ok(cancelled),
            None => {
                let current = self.get(tenant, id).await?;
                if current.status == Status::Cancelled {
                    return Ok(current);
                }
                Err(LedgerError::WrongState {
                    id: id.clone(),
                    status: current.status,
                    why: "only an operation that has not started executing can be cancelled",
                })
            }
        }
    }

    async fn resolve_in_tenant(
        &self,
        tenant: &TenantId,
        request: &Resolve<'_>,
        now: Timestamp,
    ) -> Result<Operation, LedgerError> {
        self.get(tenant, request.id).await?;
        Recovery::resolve(self, request, now).await
    }

    async fn probe_write(&self, now: Timestamp) -> Result<(), LedgerError> {
        // A schema this process cannot serve, or statements failing on one, take it out of
        // rotation even while the probe's own write still works (issue 56).
        if let Some(refusal) = self.schema.as_ref().and_then(|w| w.refusal()) {
            return Err(LedgerError::SchemaRefused(refusal));
        }
        if let Some(drift) = super::error::recent_schema_failure() {
            return Err(drift);
        }
        // A database that does not answer (a network black hole) must fail readiness within the
        // probe's own deadline, not hold it until the pool's or the kernel's timeouts.
        tokio::time::timeout(READY_PROBE_TIMEOUT, self.probe_write_now(now))
            .await
            .unwrap_or_else(|_| {
                Err(LedgerError::Database(sqlx::Error::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "the write probe had no answer within {} ms",
                        READY_PROBE_TIMEOUT.as_millis()
                    ),
                ))))
            })
    }

    async fn count_by_status(&self) -> Result<Vec<StatusCount>, LedgerError> {
        self.all(Stmt::new(COUNT_BY_STATUS), |r| {
            Ok(StatusCount {
                status: r.get("status")?,
                count: r.get("n")?,
                oldest_updated_at: r.get("oldest")?,
                oldest_submitted_at: r.get("oldest_submitted")?,
            })
        })
        .await
    }

    async fn queue_depth(
        &self,
        now: Timestamp,
    ) -> Result<payonce_core::queue_depth::QueueDepth, LedgerError> {
        self.queue_depth_now(now).await
    }
}

/// `$1`–`$12` of both inserts (this module's `INSERT_OPERATION`, the refund guard's
/// `INSERT_REFUND`): id, tenant, business key, amount, currency, customer, payment method, invoice,
/// details hash, idempotency key, the instant and the actor.
pub(crate) fn insert<'a>(
    sql: &'static str,
    new: &'a NewOperation,
    hash: &'a DetailsHash,
    now: Timestamp,
) -> Stmt<'a> {
    let d = &new.details;
    let stmt = Stmt::new(sql).bind(&new.id).bind(&new.tenant);
    let stmt = stmt
        .bind(new.business_key.as_str())
        .bind(d.money().amount_minor());
    let stmt = stmt.bind(d.money().currency().code()).bind(d.customer());
    let stmt = stmt
        .bind(d.payment_method())
        .bind(d.invoice())
        .bind(hash.as_str());
    stmt.bind(new.idempotency_key.as_str())
        .bind(now)
        .bind(bounded(&new.actor))
}

/// An insert's result with "the business key is taken" read as nothing inserted: the unique
/// violation on the search directory's key (see `BUSINESS_KEY_TAKEN`), as `ON CONFLICT DO NOTHING`
/// answers where the key is on operations itself.
pub(crate) fn taken_as_none<T>(
    inserted: Result<Option<T>, LedgerError>,
) -> Result<Option<T>, LedgerError> {
    match inserted {
        Err(LedgerError::Database(sqlx::Error::Database(e)))
            if e.constraint() == Some(BUSINESS_KEY_TAKEN) =>
        {
            Ok(None)
        }
        other => other,
    }
}

impl<DB: Dialect> Store<DB> {
    /// `Operations::probe_write` without its deadline.
    async fn probe_write_now(&self, now: Timestamp) -> Result<(), LedgerError> {
        if let Some(pages) = DB::write_headroom(self).await?
            && pages < WRITE_HEADROOM_PAGES_MIN
        {
            return Err(LedgerError::Full {
                headroom_pages: pages,
            });
        }
        match self.execute(Stmt::new(PROBE_WRITE).bind(now)).await? {
            1 => Ok(()),
            n => Err(LedgerError::Corrupt(format!(
                "the write probe changed {n} rows instead of its one"
            ))),
        }
    }

    /// The operation a new one's business key already names in its tenant, if any.
    pub(crate) async fn by_business_key(
        &self,
        new: &NewOperation,
    ) -> Result<Option<Operation>, LedgerError> {
        let stmt = Stmt::new(SELECT_BY_BUSINESS_KEY)
            .bind(&new.tenant)
            .bind(new.business_key.as_str());
        self.first(stmt, decode_operation).await
    }
}

/// What create-or-get answers when the business key already names `existing`: it, if the details
/// are the same (`hash`), else [`LedgerError::Conflict`].
pub(crate) fn created_again(
    existing: Operation,
    hash: DetailsHash,
) -> Result<Created, LedgerError> {
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

#[async_trait]
impl<DB: Dialect> Inspection for Store<DB> {
    async fn get_unscoped(&self, id: &OperationId) -> Result<Operation, LedgerError> {
        self.first(Stmt::new(SELECT_BY_ID).bind(id), decode_operation)
            .await?
            .ok_or(LedgerError::NotFound)
    }

    async fn events_unscoped(&self, id: &OperationId) -> Result<Vec<OperationEvent>, LedgerError> {
        self.all(Stmt::new(SELECT_EVENTS).bind(id), decode_event)
            .await
    }

    async fn recent_lost_rows(
        &self,
        limit: u32,
    ) -> Result<Vec<super::lost_rows::LostRow>, LedgerError> {
        if limit == 0 || limit > PAGE_MAX {
            return Err(LimitError::PageSize.into());
        }
        self.select_recent_lost_rows(limit).await
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<Operation>, LedgerError> {
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
            let stmt = Stmt::new(LIST)
                .bind(status.as_str())
                .bind(
                    filter
                        .updated_before
                        .unwrap_or(Timestamp::from_millis(i64::MAX)),
                )
                .bind(filter.tenant.as_ref().map(TenantId::as_str))
                .bind(i64::from(filter.limit));
            all.extend(self.all(stmt, decode_operation).await?);
        }
        all.sort_by_key(|o| (o.updated_at, o.id.clone()));
        all.truncate(filter.limit as usize);
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cancel_is_a_legal_move() {
        assert!(CANCEL.contains("AND status IN ('awaiting_approval', 'ready')"));
    }
}

//! The reconciler's writes: expired leases, unknown outcomes (defer, same-key retry, escalate),
//! processor reports in any arrival order, on-call resolution, and the sweep's maintenance lease
//! (one sweeper at a time).

use super::dialect::Dialect;
use super::moves::{legal, update};
use super::operations::Operations;
use super::queue::fenced;
use super::record::decode_operation;
use super::report::{Plan, REPORT_RETRIES_MAX, plan_report, plan_resolution};
use super::store::Store;
use super::{
    Applied, Claimed, ExpiredLease, LedgerError, LimitError, Operation, PAGE_MAX, Report,
    Resolution, bounded,
};
use crate::id::OperationId;
use crate::state::{Event, Move, Status, transition};
use sqlx::{ColumnIndex, Decode, Encode, Executor, Row, Type};
use std::sync::LazyLock;

const EXPIRED_LEASES: &str = "SELECT id, attempt, lease_owner, lease_expires_at, first_submitted_at \
     FROM operations WHERE status = 'executing' AND lease_expires_at <= $1 ORDER BY lease_expires_at LIMIT $2";
/// The sweep's fence: the attempt it saw, the lease still expired (the moves add `executing`).
const EXPIRED: &str = "id = $1 AND attempt = $2 AND lease_expires_at <= $3";
static EXPIRE_UNSUBMITTED: LazyLock<String> = LazyLock::new(|| {
    update(
        &legal(&[Status::Executing], Event::LeaseExpiredUnsubmitted),
        "lease_owner = NULL, lease_expires_at = NULL, available_at = $3, updated_at = $3, \
         last_actor = $4, last_detail = $5",
        &format!("{EXPIRED} AND first_submitted_at IS NULL"),
        false,
    )
});
static EXPIRE_SUBMITTED: LazyLock<String> = LazyLock::new(|| {
    update(
        &legal(&[Status::Executing], Event::LeaseExpiredSubmitted),
        "next_check_at = $6, lease_owner = NULL, lease_expires_at = NULL, updated_at = $3, \
         last_actor = $4, last_detail = $5",
        &format!("{EXPIRED} AND first_submitted_at IS NOT NULL"),
        false,
    )
});
const DUE_FOR_CHECK: &str = "SELECT * FROM operations WHERE status = 'unknown' AND next_check_at <= $1 \
     ORDER BY next_check_at LIMIT $2";
/// A note (no state change): the reconciler will look again at `$3`.
const DEFER_CHECK: &str = "UPDATE operations SET next_check_at = $3, check_count = check_count + 1, \
     failure_message = $4, updated_at = $6, last_event = 'check_deferred', last_actor = $5, last_detail = $4 \
     WHERE id = $1 AND attempt = $2 AND status = 'unknown'";
/// A same-key retry under a fresh lease, fenced by the attempt the reconciler saw.
static CLAIM_UNKNOWN: LazyLock<String> = LazyLock::new(|| {
    update(
        &legal(&[Status::Unknown], Event::Claim),
        "attempt = attempt + 1, lease_owner = $3, lease_expires_at = $4, next_check_at = NULL, \
         updated_at = $5, last_actor = $3, last_detail = $6",
        "id = $1 AND attempt = $2",
        true,
    )
});
static ESCALATE_UNKNOWN: LazyLock<String> = LazyLock::new(|| {
    update(
        &legal(&[Status::Unknown], Event::Escalate),
        "failure_message = $3, next_check_at = NULL, updated_at = $5, last_actor = $4, last_detail = $3",
        "id = $1 AND attempt = $2",
        false,
    )
});
/// Report or resolution: the row becomes `succeeded` (`$3` the state the plan was made from, `$4`
/// the table's target, `$5` the event; see `write_plan`).
const SET_SUCCEEDED: &str = "UPDATE operations SET status = $4, last_event = $5, external_ref = $6, \
     result = COALESCE($7, result), failure_code = NULL, lease_owner = NULL, lease_expires_at = NULL, \
     next_check_at = NULL, updated_at = $8, last_actor = $9, last_detail = $10 \
     WHERE id = $1 AND attempt = $2 AND status = $3 RETURNING *";
/// Report or resolution: the row becomes `failed`.
const SET_FAILED: &str = "UPDATE operations SET status = $4, last_event = $5, \
     external_ref = COALESCE($6, external_ref), failure_code = $7, failure_message = $8, lease_owner = NULL, \
     lease_expires_at = NULL, next_check_at = NULL, updated_at = $9, last_actor = $10, last_detail = $11 \
     WHERE id = $1 AND attempt = $2 AND status = $3 RETURNING *";
/// A contradicting report: `needs_attention`, the stored result and reference kept.
const SET_CONFLICT: &str = "UPDATE operations SET status = $4, last_event = $5, failure_message = $6, \
     lease_owner = NULL, lease_expires_at = NULL, next_check_at = NULL, updated_at = $7, last_actor = $8, \
     last_detail = $6 \
     WHERE id = $1 AND attempt = $2 AND status = $3 RETURNING *";
/// On-call retry with the same key.
const SET_RETRY: &str = "UPDATE operations SET status = $4, last_event = $5, available_at = $6, \
     next_check_at = NULL, updated_at = $6, last_actor = $7, last_detail = $8 \
     WHERE id = $1 AND attempt = $2 AND status = $3 RETURNING *";
/// An event with no state change (an ignored report, or a further report on a row waiting for a
/// human).
const NOTE: &str = "UPDATE operations SET updated_at = $2, last_event = $3, last_actor = $4, last_detail = $5 \
     WHERE id = $1";
const TRY_MAINTENANCE_LEASE: &str = "INSERT INTO maintenance_leases (name, owner, expires_at) VALUES ($1, $2, $3) \
     ON CONFLICT (name) DO UPDATE SET owner = $2, expires_at = $3 \
     WHERE maintenance_leases.expires_at <= $4 OR maintenance_leases.owner = $2";
const DROP_MAINTENANCE_LEASE: &str =
    "DELETE FROM maintenance_leases WHERE name = $1 AND owner = $2";

/// A sweep's page size, refused outside `1..=PAGE_MAX`.
fn sweep_page(limit: u32) -> Result<i64, LedgerError> {
    if limit == 0 || limit > PAGE_MAX {
        return Err(LimitError::SweepBatch.into());
    }
    Ok(i64::from(limit))
}

/// Recovery of one store.
pub(crate) struct Recovery<'a, DB: Dialect>(pub(crate) &'a Store<DB>);

impl<DB> Recovery<'_, DB>
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
    /// See [`Ledger::expired_leases`](super::Ledger::expired_leases).
    pub(crate) async fn expired_leases(
        &self,
        now_ms: i64,
        limit: u32,
    ) -> Result<Vec<ExpiredLease>, LedgerError> {
        let rows = sqlx::query(EXPIRED_LEASES)
            .bind(now_ms)
            .bind(sweep_page(limit)?)
            .fetch_all(&self.0.pool)
            .await?;
        rows.iter()
            .map(|r| {
                let id: String = r.try_get("id")?;
                Ok(ExpiredLease {
                    id: OperationId::parse(&id).map_err(|e| LedgerError::Corrupt(e.to_string()))?,
                    attempt: r.try_get("attempt")?,
                    lease_owner: r.try_get("lease_owner")?,
                    lease_expires_at_ms: r.try_get("lease_expires_at")?,
                    submitted: r.try_get::<Option<i64>, _>("first_submitted_at")?.is_some(),
                })
            })
            .collect()
    }

    /// See [`Ledger::expire_lease`](super::Ledger::expire_lease).
    pub(crate) async fn expire_lease(
        &self,
        lease: &ExpiredLease,
        actor: &str,
        now_ms: i64,
        next_check_at_ms: i64,
    ) -> Result<Status, LedgerError> {
        let detail = format!(
            "lease of {} expired at {}",
            lease.lease_owner, lease.lease_expires_at_ms
        );
        let (statement, event) = if lease.submitted {
            (&EXPIRE_SUBMITTED, Event::LeaseExpiredSubmitted)
        } else {
            (&EXPIRE_UNSUBMITTED, Event::LeaseExpiredUnsubmitted)
        };
        let to = transition(Status::Executing, event)?;
        let done = sqlx::query(statement.as_str())
            .bind(lease.id.as_str())
            .bind(lease.attempt)
            .bind(now_ms)
            .bind(bounded(actor))
            .bind(detail)
            .bind(next_check_at_ms)
            .execute(&self.0.pool)
            .await?;
        fenced(DB::rows_affected(&done), &lease.id, lease.attempt)?;
        Ok(to)
    }

    /// See [`Ledger::due_for_check`](super::Ledger::due_for_check).
    pub(crate) async fn due_for_check(
        &self,
        now_ms: i64,
        limit: u32,
    ) -> Result<Vec<Operation>, LedgerError> {
        let rows = sqlx::query(DUE_FOR_CHECK)
            .bind(now_ms)
            .bind(sweep_page(limit)?)
            .fetch_all(&self.0.pool)
            .await?;
        rows.iter().map(decode_operation).collect()
    }

    /// See [`Ledger::defer_check`](super::Ledger::defer_check).
    pub(crate) async fn defer_check(
        &self,
        id: &OperationId,
        attempt: i64,
        next_check_at_ms: i64,
        detail: &str,
        actor: &str,
        now_ms: i64,
    ) -> Result<(), LedgerError> {
        let done = sqlx::query(DEFER_CHECK)
            .bind(id.as_str())
            .bind(attempt)
            .bind(next_check_at_ms)
            .bind(bounded(detail))
            .bind(bounded(actor))
            .bind(now_ms)
            .execute(&self.0.pool)
            .await?;
        fenced(DB::rows_affected(&done), id, attempt)
    }

    /// See [`Ledger::claim_unknown`](super::Ledger::claim_unknown).
    pub(crate) async fn claim_unknown(
        &self,
        id: &OperationId,
        attempt: i64,
        owner: &str,
        lease_ttl_ms: i64,
        why: &str,
        now_ms: i64,
    ) -> Result<Claimed, LedgerError> {
        let row = sqlx::query(CLAIM_UNKNOWN.as_str())
            .bind(id.as_str())
            .bind(attempt)
            .bind(owner)
            .bind(now_ms + lease_ttl_ms)
            .bind(now_ms)
            .bind(bounded(why))
            .fetch_optional(&self.0.pool)
            .await?
            .ok_or_else(|| LedgerError::Fenced {
                id: id.clone(),
                attempt,
            })?;
        decode_operation(&row)
    }

    /// See [`Ledger::escalate`](super::Ledger::escalate).
    pub(crate) async fn escalate(
        &self,
        id: &OperationId,
        attempt: i64,
        reason: &str,
        actor: &str,
        now_ms: i64,
    ) -> Result<(), LedgerError> {
        let done = sqlx::query(ESCALATE_UNKNOWN.as_str())
            .bind(id.as_str())
            .bind(attempt)
            .bind(bounded(reason))
            .bind(bounded(actor))
            .bind(now_ms)
            .execute(&self.0.pool)
            .await?;
        fenced(DB::rows_affected(&done), id, attempt)
    }

    /// See [`Ledger::apply_report`](super::Ledger::apply_report).
    pub(crate) async fn apply_report(
        &self,
        id: &OperationId,
        report: &Report,
        source: &str,
        now_ms: i64,
    ) -> Result<Applied, LedgerError> {
        // A racing writer can move the row between the read and the fenced write: re-plan.
        let mut lost_at = None;
        for _ in 0..REPORT_RETRIES_MAX {
            let current = Operations(self.0).get_unscoped(id).await?;
            let plan = plan_report(&current, report, source)?;
            if let Some(applied) = self.write_plan(&current, plan, source, now_ms).await? {
                return Ok(applied);
            }
            lost_at = Some(current.attempt);
        }
        // Every try lost to a racing writer: report the attempt the last one was fenced at.
        Err(LedgerError::Fenced {
            id: id.clone(),
            attempt: lost_at.unwrap_or_default(),
        })
    }

    /// See [`Ledger::resolve`](super::Ledger::resolve).
    pub(crate) async fn resolve(
        &self,
        id: &OperationId,
        resolution: &Resolution,
        actor: &str,
        reason: &str,
        now_ms: i64,
    ) -> Result<Operation, LedgerError> {
        let current = Operations(self.0).get_unscoped(id).await?;
        let plan = plan_resolution(&current, resolution, reason)?;
        match self.write_plan(&current, plan, actor, now_ms).await? {
            Some(_) => Operations(self.0).get_unscoped(id).await,
            None => Err(LedgerError::Fenced {
                id: id.clone(),
                attempt: current.attempt,
            }),
        }
    }

    /// Writes a planned report or resolution, fenced by the status and attempt it was planned
    /// from, to the state the table gives for the plan's event: `Some(applied)` when written (or
    /// nothing to write), `None` when a racing writer won.
    async fn write_plan(
        &self,
        current: &Operation,
        plan: Plan,
        actor: &str,
        now_ms: i64,
    ) -> Result<Option<Applied>, LedgerError> {
        let pool = &self.0.pool;
        let actor = bounded(actor);
        let id = current.id.as_str();
        let moved = |event: Event| Move::new(&[current.status], event);
        let row = match plan {
            Plan::Nothing(applied) => return Ok(Some(applied)),
            Plan::Note {
                event,
                detail,
                applied,
            } => {
                sqlx::query(NOTE)
                    .bind(id)
                    .bind(now_ms)
                    .bind(event)
                    .bind(actor.as_str())
                    .bind(bounded(&detail))
                    .execute(pool)
                    .await?;
                return Ok(Some(applied));
            }
            Plan::Succeed {
                event,
                reference,
                result,
                detail,
                applied,
            } => {
                let mv = moved(event)?;
                sqlx::query(SET_SUCCEEDED)
                    .bind(id)
                    .bind(current.attempt)
                    .bind(current.status.as_str())
                    .bind(mv.to.as_str())
                    .bind(mv.event.as_str())
                    .bind(reference)
                    .bind(result.map(|r| r.to_string()))
                    .bind(now_ms)
                    .bind(actor.as_str())
                    .bind(bounded(&detail))
                    .fetch_optional(pool)
                    .await?
                    .map(|_| applied)
            }
            Plan::Fail {
                event,
                reference,
                code,
                message,
                detail,
                applied,
            } => {
                let mv = moved(event)?;
                sqlx::query(SET_FAILED)
                    .bind(id)
                    .bind(current.attempt)
                    .bind(current.status.as_str())
                    .bind(mv.to.as_str())
                    .bind(mv.event.as_str())
                    .bind(reference)
                    .bind(bounded(&code))
                    .bind(bounded(&message))
                    .bind(now_ms)
                    .bind(actor.as_str())
                    .bind(bounded(&detail))
                    .fetch_optional(pool)
                    .await?
                    .map(|_| applied)
            }
            Plan::Conflict { detail, applied } => {
                let mv = moved(Event::ConflictingReport)?;
                sqlx::query(SET_CONFLICT)
                    .bind(id)
                    .bind(current.attempt)
                    .bind(current.status.as_str())
                    .bind(mv.to.as_str())
                    .bind(mv.event.as_str())
                    .bind(bounded(&detail))
                    .bind(now_ms)
                    .bind(actor.as_str())
                    .fetch_optional(pool)
                    .await?
                    .map(|_| applied)
            }
            Plan::Retry { detail } => {
                let mv = moved(Event::ResolveRetry)?;
                sqlx::query(SET_RETRY)
                    .bind(id)
                    .bind(current.attempt)
                    .bind(current.status.as_str())
                    .bind(mv.to.as_str())
                    .bind(mv.event.as_str())
                    .bind(now_ms)
                    .bind(actor.as_str())
                    .bind(bounded(&detail))
                    .fetch_optional(pool)
                    .await?
                    .map(|_| Applied::Moved(mv.to))
            }
        };
        Ok(row)
    }

    /// See [`Ledger::try_maintenance_lease`](super::Ledger::try_maintenance_lease).
    pub(crate) async fn try_maintenance_lease(
        &self,
        name: &str,
        owner: &str,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Result<bool, LedgerError> {
        let done = sqlx::query(TRY_MAINTENANCE_LEASE)
            .bind(name)
            .bind(owner)
            .bind(now_ms + ttl_ms)
            .bind(now_ms)
            .execute(&self.0.pool)
            .await?;
        Ok(DB::rows_affected(&done) == 1)
    }

    /// See [`Ledger::drop_maintenance_lease`](super::Ledger::drop_maintenance_lease).
    pub(crate) async fn drop_maintenance_lease(
        &self,
        name: &str,
        owner: &str,
    ) -> Result<(), LedgerError> {
        sqlx::query(DROP_MAINTENANCE_LEASE)
            .bind(name)
            .bind(owner)
            .execute(&self.0.pool)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_statement_is_a_legal_move() {
        for statement in [&EXPIRE_UNSUBMITTED, &EXPIRE_SUBMITTED] {
            assert!(statement.contains("AND status = 'executing'"));
        }
        for statement in [&CLAIM_UNKNOWN, &ESCALATE_UNKNOWN] {
            assert!(statement.contains("AND status = 'unknown'"));
        }
    }
}

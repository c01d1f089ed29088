//! The reconciler's writes: expired leases, unknown outcomes (defer, same-key retry, escalate),
//! processor reports in any arrival order, on-call resolution, and the sweep's maintenance lease
//! (one sweeper at a time).

use super::dialect::Dialect;
use super::moves::{legal, update};
use super::queue::{fenced, lost};
use super::record::{decode_operation, operation_columns};
use super::report::{Plan, REPORT_RETRIES_MAX, plan_report, plan_resolution};
use super::row::LedgerRow;
use super::statement::Stmt;
use super::store::Store;
use super::{
    Applied, ApplyReport, ClaimUnknown, Claimed, Created, DeferCheck, Escalate, ExpireLease,
    ExpireLeases, ExpiredLease, Fence, Inspection, LedgerError, LimitError, MaintenanceLease,
    NewOperation, Operation, Operations, PAGE_MAX, RecordLookups, Recovery, Resolve, bounded,
};
use async_trait::async_trait;
use payonce_core::clock::Timestamp;
use payonce_core::id::TenantId;
use payonce_core::state::{Event, Move, Status, transition};
use std::sync::LazyLock;
use std::time::Duration;

const EXPIRED_LEASES: &str = "SELECT id, attempt, lease_owner, lease_expires_at, first_submitted_at \
     FROM operations WHERE status = 'executing' AND lease_expires_at <= $1 ORDER BY lease_expires_at LIMIT $2";
/// The sweep's fence: the attempt it saw, the lease still expired (the moves add `executing`).
const EXPIRED: &str = "id = $1 AND attempt = $2 AND lease_expires_at <= $3";
pub(crate) static EXPIRE_UNSUBMITTED: LazyLock<String> = LazyLock::new(|| {
    update(
        &legal(&[Status::Executing], Event::LeaseExpiredUnsubmitted),
        "lease_owner = NULL, lease_expires_at = NULL, available_at = $3, updated_at = $3, \
         last_actor = $4, last_detail = $5",
        &format!("{EXPIRED} AND first_submitted_at IS NULL"),
        false,
    )
});
pub(crate) static EXPIRE_SUBMITTED: LazyLock<String> = LazyLock::new(|| {
    update(
        &legal(&[Status::Executing], Event::LeaseExpiredSubmitted),
        "next_check_at = $6, lease_owner = NULL, lease_expires_at = NULL, updated_at = $3, \
         last_actor = $4, last_detail = $5",
        &format!("{EXPIRED} AND first_submitted_at IS NOT NULL"),
        false,
    )
});
const DUE_FOR_CHECK: &str = concat!(
    "SELECT ",
    operation_columns!(),
    " FROM operations WHERE status = 'unknown' AND next_check_at <= $1 \
     ORDER BY next_check_at LIMIT $2"
);
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
pub(crate) const SET_SUCCEEDED: &str = concat!(
    "UPDATE operations SET status = $4, last_event = $5, external_ref = $6, \
     result = COALESCE($7, result), failure_code = NULL, lease_owner = NULL, lease_expires_at = NULL, \
     next_check_at = NULL, updated_at = $8, last_actor = $9, last_detail = $10 \
     WHERE id = $1 AND attempt = $2 AND status = $3 RETURNING ",
    operation_columns!()
);
/// Report or resolution: the row becomes `failed`.
const SET_FAILED: &str = concat!(
    "UPDATE operations SET status = $4, last_event = $5, \
     external_ref = COALESCE($6, external_ref), failure_code = $7, failure_message = $8, lease_owner = NULL, \
     lease_expires_at = NULL, next_check_at = NULL, updated_at = $9, last_actor = $10, last_detail = $11 \
     WHERE id = $1 AND attempt = $2 AND status = $3 RETURNING ",
    operation_columns!()
);
/// A contradicting report: `needs_attention`, the stored result and reference kept.
const SET_CONFLICT: &str = concat!(
    "UPDATE operations SET status = $4, last_event = $5, failure_message = $6, \
     lease_owner = NULL, lease_expires_at = NULL, next_check_at = NULL, updated_at = $7, last_actor = $8, \
     last_detail = $6, failure_code = COALESCE($9, failure_code), \
     external_ref = COALESCE($10, external_ref), result = COALESCE($11, result) \
     WHERE id = $1 AND attempt = $2 AND status = $3 RETURNING ",
    operation_columns!()
);
/// On-call retry with the same key.
const SET_RETRY: &str = concat!(
    "UPDATE operations SET status = $4, last_event = $5, available_at = $6, \
     next_check_at = NULL, updated_at = $6, last_actor = $7, last_detail = $8, not_sent_attempts = 0 \
     WHERE id = $1 AND attempt = $2 AND status = $3 RETURNING ",
    operation_columns!()
);
/// An event with no state change (an ignored report, or a further report on a row waiting for a
/// human).
const NOTE: &str = "UPDATE operations SET updated_at = $2, last_event = $3, last_actor = $4, last_detail = $5 \
     WHERE id = $1";
/// Taken when free, expired, already ours, or expiring later than one lease length from now ($3):
/// no live holder can have set that, so it came from another clock (a replica promoted after a
/// failover, whose old primary ran ahead), and waiting on it would stand every reconciler down
/// for as long as that clock was ahead.
const TRY_MAINTENANCE_LEASE: &str = "INSERT INTO maintenance_leases (name, owner, expires_at) VALUES ($1, $2, $3) \
     ON CONFLICT (name) DO UPDATE SET owner = $2, expires_at = $3 \
     WHERE maintenance_leases.expires_at <= $4 OR maintenance_leases.owner = $2 \
     OR maintenance_leases.expires_at > $3";
const SELECT_SCAN_WATERMARK: &str = "SELECT watermark_ms FROM processor_scans WHERE processor = $1";
const SET_SCAN_WATERMARK: &str = "INSERT INTO processor_scans (processor, watermark_ms, updated_at) \
     VALUES ($1, $2, $3) ON CONFLICT (processor) DO UPDATE SET watermark_ms = $2, updated_at = $3";
const DROP_MAINTENANCE_LEASE: &str =
    "DELETE FROM maintenance_leases WHERE name = $1 AND owner = $2";

/// A sweep's page size, refused outside `1..=PAGE_MAX`.
fn sweep_page(limit: u32) -> Result<i64, LedgerError> {
    if limit == 0 || limit > PAGE_MAX {
        return Err(LimitError::SweepBatch.into());
    }
    Ok(i64::from(limit))
}

#[async_trait]
impl<DB: Dialect> Recovery for Store<DB> {
    async fn expired_leases(
        &self,
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<ExpiredLease>, LedgerError> {
        let stmt = Stmt::new(EXPIRED_LEASES).bind(now).bind(sweep_page(limit)?);
        self.all(stmt, |r| {
            Ok(ExpiredLease {
                id: r.get("id")?,
                attempt: r.get("attempt")?,
                lease_owner: r.get("lease_owner")?,
                lease_expires_at: r.get("lease_expires_at")?,
                submitted: r.get::<Option<i64>>("first_submitted_at")?.is_some(),
            })
        })
        .await
    }

    async fn expire_lease(
        &self,
        request: &ExpireLease<'_>,
        now: Timestamp,
    ) -> Result<Status, LedgerError> {
        let lease = request.lease;
        let detail = expiry_detail(lease);
        let (statement, event) = if lease.submitted {
            (&EXPIRE_SUBMITTED, Event::LeaseExpiredSubmitted)
        } else {
            (&EXPIRE_UNSUBMITTED, Event::LeaseExpiredUnsubmitted)
        };
        let to = transition(Status::Executing, event)?;
        let fence = Fence {
            id: lease.id.clone(),
            attempt: lease.attempt,
        };
        let stmt = fence.stmt(statement.as_str()).bind(now);
        let stmt = stmt.bind(bounded(request.actor)).bind(detail);
        fenced(
            self.execute(stmt.bind(request.next_check_at)).await?,
            &fence,
        )?;
        Ok(to)
    }

    async fn expire_leases(
        &self,
        request: &ExpireLeases<'_>,
        now: Timestamp,
    ) -> Result<Vec<Option<Status>>, LedgerError> {
        if request.leases.is_empty() {
            return Ok(Vec::new());
        }
        DB::expire_leases(self, request, now).await
    }

    async fn due_for_check(
        &self,
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<Operation>, LedgerError> {
        let stmt = Stmt::new(DUE_FOR_CHECK).bind(now).bind(sweep_page(limit)?);
        self.all(stmt, decode_operation).await
    }

    async fn defer_check(
        &self,
        request: &DeferCheck<'_>,
        now: Timestamp,
    ) -> Result<(), LedgerError> {
        let stmt = request.fence.stmt(DEFER_CHECK).bind(request.next_check_at);
        let stmt = stmt
            .bind(bounded(request.detail))
            .bind(bounded(request.actor));
        self.fenced(stmt.bind(now), request.fence).await
    }

    async fn claim_unknown(
        &self,
        request: &ClaimUnknown<'_>,
        now: Timestamp,
    ) -> Result<Claimed, LedgerError> {
        let stmt = request
            .fence
            .stmt(CLAIM_UNKNOWN.as_str())
            .bind(request.holder.owner);
        let stmt = stmt.bind(now + request.holder.lease_ttl).bind(now);
        self.first(stmt.bind(bounded(request.why)), decode_operation)
            .await?
            .ok_or_else(|| lost(request.fence))
    }

    async fn escalate(&self, request: &Escalate<'_>, now: Timestamp) -> Result<(), LedgerError> {
        let stmt = request.fence.stmt(ESCALATE_UNKNOWN.as_str());
        let stmt = stmt
            .bind(bounded(request.reason))
            .bind(bounded(request.actor));
        self.fenced(stmt.bind(now), request.fence).await
    }

    async fn apply_report(
        &self,
        request: &ApplyReport<'_>,
        now: Timestamp,
    ) -> Result<Applied, LedgerError> {
        let ApplyReport { id, report, source } = *request;
        // A racing writer can move the row between the read and the fenced write: re-plan.
        let mut lost_at = None;
        for _ in 0..REPORT_RETRIES_MAX {
            let current = self.get_unscoped(id).await?;
            let plan = plan_report(&current, report, source)?;
            if let Some(applied) = write_plan(self, &current, plan, source, now).await? {
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

    async fn record_lookups(
        &self,
        request: &RecordLookups<'_>,
        now: Timestamp,
    ) -> Result<Vec<bool>, LedgerError> {
        if request.found.is_empty() {
            return Ok(Vec::new());
        }
        DB::record_lookups(self, request, now).await
    }

    async fn resolve(
        &self,
        request: &Resolve<'_>,
        now: Timestamp,
    ) -> Result<Operation, LedgerError> {
        let id = request.id;
        let current = self.get_unscoped(id).await?;
        let plan = plan_resolution(&current, request.resolution, request.reason)?;
        match write_plan(self, &current, plan, request.actor, now).await? {
            Some(_) => self.get_unscoped(id).await,
            None => Err(LedgerError::Fenced {
                id: id.clone(),
                attempt: current.attempt,
            }),
        }
    }

    async fn try_maintenance_lease(
        &self,
        lease: &MaintenanceLease<'_>,
        ttl: Duration,
        now: Timestamp,
    ) -> Result<bool, LedgerError> {
        let stmt = Stmt::new(TRY_MAINTENANCE_LEASE)
            .bind(lease.name)
            .bind(lease.owner);
        Ok(self.execute(stmt.bind(now + ttl).bind(now)).await? == 1)
    }

    async fn recreate(&self, new: NewOperation, now: Timestamp) -> Result<Created, LedgerError> {
        Operations::create_or_get(self, new, now).await
    }

    async fn prune(
        &self,
        retention: &super::retention::Retention,
        now: Timestamp,
    ) -> Result<super::retention::Pruned, LedgerError> {
        Store::prune(self, retention, now).await
    }

    async fn set_operation_retention(
        &self,
        tenant: &TenantId,
        days: Option<u32>,
        now: Timestamp,
    ) -> Result<(), LedgerError> {
        Store::set_operation_retention(self, tenant, days, now).await
    }

    async fn operation_retention(&self, tenant: &TenantId) -> Result<Option<u32>, LedgerError> {
        Store::operation_retention(self, tenant).await
    }

    async fn scan_watermark(&self, processor: &str) -> Result<Option<Timestamp>, LedgerError> {
        let stmt = Stmt::new(SELECT_SCAN_WATERMARK).bind(processor);
        self.first(stmt, |r| r.get("watermark_ms")).await
    }

    async fn set_scan_watermark(
        &self,
        processor: &str,
        watermark: Timestamp,
        now: Timestamp,
    ) -> Result<(), LedgerError> {
        let stmt = Stmt::new(SET_SCAN_WATERMARK)
            .bind(processor)
            .bind(watermark);
        self.execute(stmt.bind(now)).await?;
        Ok(())
    }

    async fn drop_maintenance_lease(
        &self,
        lease: &MaintenanceLease<'_>,
    ) -> Result<(), LedgerError> {
        let stmt = Stmt::new(DROP_MAINTENANCE_LEASE).bind(lease.name);
        self.execute(stmt.bind(lease.owner)).await?;
        Ok(())
    }

    async fn unreported_lost_rows(
        &self,
        limit: u32,
    ) -> Result<Vec<super::lost_rows::LostRow>, LedgerError> {
        self.select_unreported_lost_rows(limit).await
    }

    async fn report_lost_row(
        &self,
        lost: &super::lost_rows::LostRow,
        actor: &str,
        now: Timestamp,
    ) -> Result<bool, LedgerError> {
        self.mark_lost_row_reported(lost, &bounded(actor), now)
            .await
    }
}

/// Settles a row the processor scan made again from its payment ([`Report::Recreated`]) when its
/// intention comes back from upstream with its approval (`approved_hash`, by `approved_by`): the
/// same details that payment was made for, approved again, are that payment. `None` when `current`
/// is not such a row, or these are other details (the caller answers as it would otherwise).
pub(crate) async fn settle_recreated<DB: Dialect>(
    store: &Store<DB>,
    current: &Operation,
    approved_hash: &payonce_core::details::DetailsHash,
    approved_by: &str,
    now: Timestamp,
) -> Result<Option<Operation>, LedgerError> {
    let recreated = current.status == Status::NeedsAttention
        && current.failure_code.as_deref() == Some(super::LOST_ROW_RECREATED)
        && &current.details_hash == approved_hash;
    let Some(reference) = current.external_ref.clone().filter(|_| recreated) else {
        return Ok(None);
    };
    let plan = Plan::Succeed {
        event: Event::ResolveSucceeded,
        detail: format!(
            "the same intention came back with its approval ({approved_by}): settled as \
             {reference}, the payment the processor scan found"
        ),
        reference,
        result: None,
        applied: Applied::Moved(Status::Succeeded),
    };
    match write_plan(store, current, plan, approved_by, now).await? {
        Some(_) => Ok(Some(store.get_unscoped(&current.id).await?)),
        // Someone (on-call) moved it first: the caller answers from the row as it is now.
        None => Ok(None),
    }
}

/// The audit detail of a lease expiry.
pub(crate) fn expiry_detail(lease: &ExpiredLease) -> String {
    format!(
        "lease of {} expired at {}",
        lease.lease_owner,
        lease.lease_expires_at.rfc3339()
    )
}

/// The audit detail of a lookup that found the approved object (as `plan_report` words it).
pub(crate) fn found_detail(source: &str, reference: &str) -> String {
    format!("{source}: succeeded as {reference}")
}

/// Writes a planned report or resolution, fenced by the status and attempt it was planned
/// from, to the state the table gives for the plan's event: `Some(applied)` when written (or
/// nothing to write), `None` when a racing writer won.
async fn write_plan<DB: Dialect>(
    store: &Store<DB>,
    current: &Operation,
    plan: Plan,
    actor: &str,
    now: Timestamp,
) -> Result<Option<Applied>, LedgerError> {
    let actor = bounded(actor);
    // Every move below: `$1` id, `$2` attempt and `$3` state as planned from, `$4` to, `$5` event.
    let planned = |sql: &'static str, event: Event| -> Result<Stmt<'_>, LedgerError> {
        let mv = Move::new(&[current.status], event)?;
        Ok(Stmt::new(sql)
            .bind(&current.id)
            .bind(current.attempt)
            .bind(current.status.as_str())
            .bind(mv.to.as_str())
            .bind(mv.event.as_str()))
    };
    let (stmt, applied) = match plan {
        Plan::Nothing(applied) => return Ok(Some(applied)),
        Plan::Note {
            event,
            detail,
            applied,
        } => {
            let note = Stmt::new(NOTE).bind(&current.id).bind(now).bind(event);
            store
                .execute(note.bind(actor.as_str()).bind(bounded(&detail)))
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
            let result = result.map(|r| r.to_string());
            let stmt = planned(SET_SUCCEEDED, event)?.bind(reference).bind(result);
            (
                stmt.bind(now).bind(actor.as_str()).bind(bounded(&detail)),
                applied,
            )
        }
        Plan::Fail {
            event,
            reference,
            code,
            message,
            detail,
            applied,
        } => {
            let stmt = planned(SET_FAILED, event)?
                .bind(reference)
                .bind(bounded(&code));
            let stmt = stmt.bind(bounded(&message)).bind(now).bind(actor.as_str());
            (stmt.bind(bounded(&detail)), applied)
        }
        Plan::Conflict {
            detail,
            applied,
            recreated,
        } => {
            let stmt = planned(SET_CONFLICT, Event::ConflictingReport)?.bind(bounded(&detail));
            let code = recreated.is_some().then_some(super::LOST_ROW_RECREATED);
            let (reference, result) = match recreated {
                Some(super::Paid { reference, result }) => {
                    (Some(reference), Some(result.to_string()))
                }
                None => (None, None),
            };
            let stmt = stmt.bind(now).bind(actor.as_str()).bind(code);
            (stmt.bind(reference).bind(result), applied)
        }
        Plan::Retry { detail } => {
            let to = transition(current.status, Event::ResolveRetry)?;
            let stmt = planned(SET_RETRY, Event::ResolveRetry)?
                .bind(now)
                .bind(actor.as_str());
            (stmt.bind(bounded(&detail)), Applied::Moved(to))
        }
    };
    Ok(store.first(stmt, |_| Ok(())).await?.map(|()| applied))
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

//! The worker's writes: claim ready work under a lease, renew it, record that a request is about
//! to leave, give the lease back, and record the outcome. Every write out of `executing` is fenced
//! by the attempt the worker holds.

use super::dialect::Dialect;
use super::lanes::{Pick, ReadyLane, Take, claim_lanes_on};
use super::moves::{legal, update};
use super::record::decode_operation;
use super::row::LedgerRow;
use super::statement::{Single, Stmt};
use super::store::Store;
use super::{
    CLAIM_BATCH_MAX, Claimed, Fence, Inspection, LeaseHolder, LedgerError, LedgerTime, LimitError,
    Operation, Queue, RecordOutcome, Recorded, bounded,
};
use crate::{Declined, Paid};
use async_trait::async_trait;
use payonce_core::clock::Timestamp;
use payonce_core::id::OperationId;
use payonce_core::state::{Event, Status};
use std::sync::LazyLock;
use std::time::Duration;

/// The worker's fence: its attempt, and the row still `executing` (the moves below say so).
const FENCE: &str = "id = $1 AND attempt = $2";
const LEASE_CLEARED: &str = "lease_owner = NULL, lease_expires_at = NULL";

/// No attempt before this one (`$2`) recorded a submission: this attempt's own record, if any (a
/// claim that recorded it, `Queue::claim_to_submit`), is the caller's to withdraw, since the caller
/// says nothing left. `RECORD_RETRY`, `RECORD_REJECTED` and `RELEASE` clear it
/// (`OWN_SUBMISSION_CLEARED`); an earlier attempt's record is never cleared.
const NO_EARLIER_SUBMISSION: &str =
    "(first_submitted_attempt IS NULL OR first_submitted_attempt = $2)";
const OWN_SUBMISSION_CLEARED: &str = "first_submitted_at = NULL, first_submitted_attempt = NULL";

/// The assignments that make a claim also record its submission start, as `mark_submitting`
/// would (`$1` now; `old` prefixes the old row's columns: `o.` on Postgres's `UPDATE … FROM`).
/// The first submission is this attempt's unless an earlier one is on record, which it keeps: a
/// row an on-call person sent back to ready (`resolve retry`) after a submission that may have
/// reached the processor; then this attempt's release, retry or rejection cannot withdraw it and
/// goes to `unknown` or `needs_attention` instead. Such a claim is logged as one
/// `submission_started` with the claim's move (`state::SUBMITTING_CLAIM`; migrations:
/// `one_event_per_claim`).
pub(crate) fn submission_started_at_claim(old: &str) -> String {
    format!(
        ", first_submitted_at = COALESCE({old}first_submitted_at, $1), \
         first_submitted_attempt = COALESCE({old}first_submitted_attempt, {old}attempt + 1), \
         last_submitted_at = $1, submit_count = {old}submit_count + 1"
    )
}

/// Gives a lease back before this attempt sent anything, and no earlier attempt submitted: to
/// `ready`, withdrawing this attempt's own submission record if its claim made one.
static RELEASE: LazyLock<String> = LazyLock::new(|| {
    update(
        &legal(&[Status::Executing], Event::Release),
        &format!(
            "{LEASE_CLEARED}, {OWN_SUBMISSION_CLEARED}, next_check_at = NULL, available_at = $3, \
          updated_at = $3, last_actor = $4, last_detail = 'lease given back before submitting'"
        ),
        &format!("{FENCE} AND {NO_EARLIER_SUBMISSION}"),
        false,
    )
});
/// Gives a lease back after an earlier attempt submitted: that request may have reached the
/// processor, so the outcome is unknown and the reconciler checks at once.
static RELEASE_SUBMITTED: LazyLock<String> = LazyLock::new(|| {
    update(
        &legal(&[Status::Executing], Event::OutcomeUnknown),
        &format!(
            "{LEASE_CLEARED}, next_check_at = $3, available_at = $3, updated_at = $3, \
          last_actor = $4, last_detail = 'lease given back before submitting'"
        ),
        &format!("{FENCE} AND NOT {NO_EARLIER_SUBMISSION}"),
        false,
    )
});
static RECORD_SUCCEEDED: LazyLock<String> = LazyLock::new(|| {
    update(
        &legal(&[Status::Executing], Event::ProcessorSucceeded),
        &format!(
            "external_ref = $3, result = $4, failure_code = NULL, failure_message = NULL, \
          {LEASE_CLEARED}, next_check_at = NULL, updated_at = $6, last_actor = $5, last_detail = $3"
        ),
        FENCE,
        true,
    )
});
static RECORD_FAILED: LazyLock<String> = LazyLock::new(|| {
    update(
        &legal(&[Status::Executing], Event::ProcessorFailed),
        &format!(
            "external_ref = COALESCE($3, external_ref), failure_code = $4, failure_message = $5, \
          {LEASE_CLEARED}, next_check_at = NULL, updated_at = $7, last_actor = $6, last_detail = $4"
        ),
        FENCE,
        true,
    )
});
/// Nothing was sent by this attempt and no earlier attempt sent anything: back to `ready`.
/// `$7`: 1 when the attempt counts toward `attempt_max`, else 0.
static RECORD_RETRY: LazyLock<String> = LazyLock::new(|| {
    update(
        &legal(&[Status::Executing], Event::NotSubmittedRetry),
        &format!(
            "available_at = $3, failure_message = $4, {OWN_SUBMISSION_CLEARED}, \
          {LEASE_CLEARED}, updated_at = $6, last_actor = $5, last_detail = $4, \
          not_sent_attempts = not_sent_attempts + $7"
        ),
        &format!("{FENCE} AND {NO_EARLIER_SUBMISSION}"),
        true,
    )
});
static RECORD_EXHAUSTED: LazyLock<String> = LazyLock::new(|| {
    update(
        &legal(&[Status::Executing], Event::NotSubmittedExhausted),
        &format!(
            "failure_code = 'attempts_exhausted', failure_message = $3, {LEASE_CLEARED}, \
          next_check_at = NULL, updated_at = $5, last_actor = $4, last_detail = $3"
        ),
        FENCE,
        true,
    )
});
static RECORD_UNKNOWN: LazyLock<String> = LazyLock::new(|| {
    update(
        &legal(&[Status::Executing], Event::OutcomeUnknown),
        &format!(
            "next_check_at = $3, external_ref = COALESCE($4, external_ref), failure_message = $5, \
          {LEASE_CLEARED}, updated_at = $7, last_actor = $6, last_detail = $5"
        ),
        FENCE,
        true,
    )
});
/// Rejected only if no earlier attempt submitted (this attempt's own record, made by its claim, is
/// withdrawn: a rejection is decided before anything is sent); otherwise the caller escalates.
static RECORD_REJECTED: LazyLock<String> = LazyLock::new(|| {
    update(
        &legal(&[Status::Executing], Event::RejectBeforeSubmit),
        &format!(
            "failure_code = $3, failure_message = $4, {OWN_SUBMISSION_CLEARED}, {LEASE_CLEARED}, \
          updated_at = $6, last_actor = $5, last_detail = $3"
        ),
        &format!("{FENCE} AND {NO_EARLIER_SUBMISSION}"),
        true,
    )
});
static RECORD_ATTENTION: LazyLock<String> = LazyLock::new(|| {
    update(
        &legal(&[Status::Executing], Event::Escalate),
        &format!(
            "failure_message = $3, {LEASE_CLEARED}, next_check_at = NULL, updated_at = $5, \
          last_actor = $4, last_detail = $3"
        ),
        FENCE,
        true,
    )
});

#[async_trait]
impl<DB: Dialect> LedgerTime for Store<DB> {
    async fn now(&self, local: Timestamp) -> Result<Timestamp, LedgerError> {
        match DB::NOW {
            Some(read) if !self.callers_clock => self
                .first(Stmt::new(read), |r| r.get("now"))
                .await?
                .ok_or_else(|| LedgerError::Corrupt("the clock read returned no row".into())),
            _ => Ok(local),
        }
    }
}

#[async_trait]
impl<DB: Dialect> Queue for Store<DB> {
    async fn claim(
        &self,
        holder: &LeaseHolder<'_>,
        batch: u32,
        now: Timestamp,
    ) -> Result<Vec<Claimed>, LedgerError> {
        self.claim_with(holder, batch, now, false).await
    }

    async fn claim_to_submit(
        &self,
        holder: &LeaseHolder<'_>,
        batch: u32,
        now: Timestamp,
    ) -> Result<Vec<Claimed>, LedgerError> {
        self.claim_with(holder, batch, now, true).await
    }

    async fn renew(
        &self,
        holder: &LeaseHolder<'_>,
        held: &[OperationId],
        now: Timestamp,
    ) -> Result<Vec<(OperationId, i64)>, LedgerError> {
        if held.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<&str> = held.iter().map(|id| id.as_str()).collect();
        let ids = serde_json::to_string(&ids).map_err(|e| LedgerError::Corrupt(e.to_string()))?;
        let stmt = Stmt::new(DB::RENEW).bind(holder.owner).bind(now);
        let stmt = stmt.bind(now + holder.lease_ttl).bind(ids);
        self.all(stmt, |r| Ok((r.get("id")?, r.get("attempt")?)))
            .await
    }

    async fn mark_submitting(
        &self,
        fences: &[Fence],
        now: Timestamp,
    ) -> Result<Vec<bool>, LedgerError> {
        if fences.is_empty() {
            return Ok(Vec::new());
        }
        DB::mark_submitting(self, fences, now).await
    }

    async fn release(&self, fence: &Fence, actor: &str, now: Timestamp) -> Result<(), LedgerError> {
        // At most one of the two matches: they split on whether anything was ever submitted.
        for statement in [&RELEASE, &RELEASE_SUBMITTED] {
            let stmt = fence.stmt(statement.as_str()).bind(now);
            if self.execute(stmt.bind(bounded(actor))).await? == 1 {
                return Ok(());
            }
        }
        fenced(0, fence)
    }

    async fn record(
        &self,
        request: &RecordOutcome<'_>,
        now: Timestamp,
    ) -> Result<Operation, LedgerError> {
        let mut one = Single::take(&self.pool).await?;
        let RecordOutcome {
            fence,
            outcome,
            actor,
        } = *request;
        let recorded = record_on::<DB>(one.conn(), fence, outcome, actor, now).await?;
        one.done().await?;
        Ok(recorded)
    }

    async fn record_batch(
        &self,
        items: &[(Fence, Recorded)],
        actor: &str,
        now: Timestamp,
    ) -> Result<Vec<bool>, LedgerError> {
        DB::record_batch(self, items, actor, now).await
    }

    async fn record_and_claim(
        &self,
        items: &[(Fence, Recorded)],
        holder: &LeaseHolder<'_>,
        pick: Pick<'_>,
        now: Timestamp,
    ) -> Result<(Vec<bool>, Vec<Claimed>), LedgerError> {
        if pick.is_empty() {
            return Ok((
                self.record_batch(items, holder.owner, now).await?,
                Vec::new(),
            ));
        }
        let mut tx = self.begin().await?;
        let recorded = DB::record_batch_on(&mut tx, items, holder.owner, now).await?;
        let claimed = match pick {
            Pick::Oldest(batch) => {
                let claim = claim_statement::<DB>(holder, batch, now, true)?;
                let rows = DB::fetch_all(&mut *tx, claim).await?;
                rows.iter()
                    .map(decode_operation)
                    .collect::<Result<_, _>>()?
            }
            Pick::Lanes(takes) => claim_lanes_on::<DB>(&mut tx, holder, takes, now).await?,
        };
        tx.commit().await?;
        Ok((recorded, claimed))
    }

    async fn claim_lanes(
        &self,
        holder: &LeaseHolder<'_>,
        takes: &[Take],
        now: Timestamp,
    ) -> Result<Vec<Claimed>, LedgerError> {
        self.claim_lanes_now(holder, takes, now).await
    }

    async fn ready_lanes(&self, limit: u32) -> Result<Vec<ReadyLane>, LedgerError> {
        self.ready_lanes_now(limit).await
    }

    async fn current(&self, fence: &Fence) -> Result<Operation, LedgerError> {
        self.get_unscoped(&fence.id).await
    }

    async fn record_lost_row(
        &self,
        id: &OperationId,
        reference: &str,
        found_by: &str,
        now: Timestamp,
    ) -> Result<(), LedgerError> {
        self.insert_lost_row(id, reference, found_by, now).await
    }

    async fn wait_for_ready(&self, max_wait: Duration) {
        DB::wait_ready(self, max_wait).await
    }
}

impl<DB: Dialect> Store<DB> {
    /// `claim`, and with `to_submit` also the submission start of each claimed operation.
    async fn claim_with(
        &self,
        holder: &LeaseHolder<'_>,
        batch: u32,
        now: Timestamp,
        to_submit: bool,
    ) -> Result<Vec<Claimed>, LedgerError> {
        let stmt = claim_statement::<DB>(holder, batch, now, to_submit)?;
        self.all(stmt, decode_operation).await
    }

    /// Runs a write fenced by `fence`: `Ok` if it changed its one row, else
    /// [`LedgerError::Fenced`].
    pub(crate) async fn fenced(&self, stmt: Stmt<'_>, fence: &Fence) -> Result<(), LedgerError> {
        fenced(self.execute(stmt).await?, fence)
    }
}

/// The claim statement (`Dialect::claim`), its limits checked: `batch` within 1..=`CLAIM_BATCH_MAX`,
/// a lease that lasts.
fn claim_statement<'a, DB: Dialect>(
    holder: &LeaseHolder<'a>,
    batch: u32,
    now: Timestamp,
    to_submit: bool,
) -> Result<Stmt<'a>, LedgerError> {
    if batch == 0 || batch > CLAIM_BATCH_MAX {
        return Err(LimitError::ClaimBatch.into());
    }
    lease_checked(holder)?;
    Ok(Stmt::new(DB::claim(to_submit))
        .bind(now)
        .bind(i64::from(batch))
        .bind(holder.owner)
        .bind(now + holder.lease_ttl))
}

/// A lease that lasts at least a millisecond (the stored unit).
pub(crate) fn lease_checked(holder: &LeaseHolder<'_>) -> Result<(), LedgerError> {
    if holder.lease_ttl.as_millis() == 0 {
        return Err(LimitError::LeaseTtl.into());
    }
    Ok(())
}

/// `Ok` if a fenced write changed its one row, else [`LedgerError::Fenced`].
pub(crate) fn fenced(rows: u64, fence: &Fence) -> Result<(), LedgerError> {
    if rows == 1 { Ok(()) } else { Err(lost(fence)) }
}

/// The error of a write whose fence no longer holds.
pub(crate) fn lost(fence: &Fence) -> LedgerError {
    LedgerError::Fenced {
        id: fence.id.clone(),
        attempt: fence.attempt,
    }
}

/// Records one fenced outcome on a connection (pooled, or inside a batch's transaction). An
/// outcome that would hide an earlier submission is written as its [`fallback`] instead.
pub(crate) async fn record_on<DB: Dialect>(
    conn: &mut DB::Connection,
    fence: &Fence,
    outcome: &Recorded,
    actor: &str,
    now: Timestamp,
) -> Result<Operation, LedgerError> {
    let actor = bounded(actor);
    let mut row = write_outcome::<DB>(&mut *conn, fence, outcome, &actor, now).await?;
    if row.is_none()
        && let Some(instead) = fallback(outcome, now)
    {
        row = write_outcome::<DB>(&mut *conn, fence, &instead, &actor, now).await?;
    }
    match row {
        Some(row) => decode_operation(&row),
        None => Err(lost(fence)),
    }
}

/// What to record when `outcome`'s own statement did not match although the fence may still hold:
/// its guard saw an earlier attempt's submission.
fn fallback(outcome: &Recorded, now: Timestamp) -> Option<Recorded> {
    match outcome {
        // An earlier attempt may have reached the processor: this is unknown, not retryable.
        Recorded::RetryLater { reason, .. } => Some(Recorded::Unknown {
            reason: format!("{reason}; an earlier attempt may have reached the processor"),
            reference: None,
            next_check_at: now,
        }),
        // Something was submitted earlier: "rejected" would hide it. A human decides.
        Recorded::Rejected { code, message } => Some(Recorded::NeedsAttention {
            reason: format!("{code}: {message}; an earlier attempt was submitted"),
        }),
        Recorded::Succeeded(_)
        | Recorded::Failed(_)
        | Recorded::Exhausted { .. }
        | Recorded::Unknown { .. }
        | Recorded::NeedsAttention { .. } => None,
    }
}

/// Runs `outcome`'s one statement; `None` when it matched no row.
async fn write_outcome<DB: Dialect>(
    conn: &mut DB::Connection,
    fence: &Fence,
    outcome: &Recorded,
    actor: &str,
    now: Timestamp,
) -> Result<Option<DB::Row>, LedgerError> {
    let fence = |statement: &'static LazyLock<String>| fence.stmt(statement.as_str());
    let stmt = match outcome {
        Recorded::Succeeded(Paid { reference, result }) => fence(&RECORD_SUCCEEDED)
            .bind(reference.as_str())
            .bind(result.to_string())
            .bind(actor)
            .bind(now),
        Recorded::Failed(Declined {
            code,
            message,
            reference,
        }) => fence(&RECORD_FAILED)
            .bind(reference.as_deref())
            .bind(bounded(code))
            .bind(bounded(message))
            .bind(actor)
            .bind(now),
        Recorded::RetryLater {
            reason,
            available_at: available_at_ms,
            counted,
        } => fence(&RECORD_RETRY)
            .bind(*available_at_ms)
            .bind(bounded(reason))
            .bind(actor)
            .bind(now)
            .bind(i64::from(*counted)),
        Recorded::Exhausted { reason } => fence(&RECORD_EXHAUSTED)
            .bind(bounded(reason))
            .bind(actor)
            .bind(now),
        Recorded::Unknown {
            reason,
            reference,
            next_check_at: next_check_at_ms,
        } => fence(&RECORD_UNKNOWN)
            .bind(*next_check_at_ms)
            .bind(reference.as_deref())
            .bind(bounded(reason))
            .bind(actor)
            .bind(now),
        Recorded::Rejected { code, message } => fence(&RECORD_REJECTED)
            .bind(bounded(code))
            .bind(bounded(message))
            .bind(actor)
            .bind(now),
        Recorded::NeedsAttention { reason } => fence(&RECORD_ATTENTION)
            .bind(bounded(reason))
            .bind(actor)
            .bind(now),
    };
    DB::fetch_optional(conn, stmt).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_statement_is_a_legal_move() {
        for statement in [
            &RELEASE,
            &RELEASE_SUBMITTED,
            &RECORD_SUCCEEDED,
            &RECORD_FAILED,
            &RECORD_RETRY,
            &RECORD_EXHAUSTED,
            &RECORD_UNKNOWN,
            &RECORD_REJECTED,
            &RECORD_ATTENTION,
        ] {
            assert!(
                statement.contains("AND status = 'executing'"),
                "{}",
                statement.as_str()
            );
        }
        assert!(RELEASE.contains("status = 'ready', last_event = 'release'"));
        assert!(RELEASE_SUBMITTED.contains("status = 'unknown', last_event = 'outcome_unknown'"));
    }
}

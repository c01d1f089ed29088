//! Batch intake ([`Operations::create_batch`](super::Operations::create_batch)): up to
//! [`BATCH_ITEMS_MAX`] payments of one tenant created, and those that carry the service's approval
//! enqueued, in one transaction of a fixed number of statements whatever the batch's size: one
//! insert of every new row (a row that carries its approval is inserted `ready`), one read of the
//! rows whose business key was already taken (only if some were), one approval of those of them
//! to enqueue (on Postgres, locked in id order first), and one insert of the approval records.
//! The wake-up of other processes' workers follows the commit ([`Store::wake`]). A new payment
//! created and approved in one request costs, with its key's lookup, five round trips on
//! Postgres (key, `BEGIN`, insert, records, `COMMIT`), where a create and an approve cost nine.
//! The audit trail is the same as for a create then an approve (`create`, then `approve`, written
//! by the insert's trigger for a row inserted `ready`), in the same transaction.
//!
//! Each item is answered as `create_or_get` then `approve` would answer it one by one: created,
//! existing with the same details (approved now, or already approved for them), a conflict, an
//! approval of other details, or an operation no longer awaiting approval. A refused item changes
//! nothing; the others are written.
//!
//! The rows travel to the database as one JSON array bound to one placeholder; each store reads it
//! as a table with its own JSON functions ([`Dialect::json_rows`]).

use super::dialect::Dialect;
use super::moves::{legal, status_in};
use super::record::{decode_operation, operation_columns};
use super::statement::Stmt;
use super::store::Store;
use super::{Created, LedgerError, LimitError, NewOperation, Operation, bounded};
use payonce_core::clock::Timestamp;
use payonce_core::details::{DetailsHash, OperationKind};
use payonce_core::id::{TenantId, random_hex};
use payonce_core::state::{Event, Status};
use serde_json::{Value, json};
use std::collections::HashMap;

/// Most operations one batch may hold.
pub const BATCH_ITEMS_MAX: usize = 1_000;
/// How many times a batch is tried when a concurrent creator took one of its business keys under
/// another id between the batch's check and its insert (Postgres refuses the whole statement then;
/// the next try reads the key as taken), or a deadlock chose it as the victim.
pub const BATCH_ATTEMPTS_MAX: u32 = 4;

/// The type of a column read out of a JSON array ([`Dialect::json_rows`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonColumn {
    /// `TEXT` (a JSON string or `null`).
    Text,
    /// `BIGINT` (a JSON integer).
    Int,
}

/// The columns of a new row, as [`new_rows`] writes them.
const NEW_COLUMNS: [(&str, JsonColumn); 15] = [
    ("id", JsonColumn::Text),
    ("business_key", JsonColumn::Text),
    ("amount_minor", JsonColumn::Int),
    ("currency", JsonColumn::Text),
    ("customer", JsonColumn::Text),
    ("payment_method", JsonColumn::Text),
    ("invoice", JsonColumn::Text),
    ("destination", JsonColumn::Text),
    ("description", JsonColumn::Text),
    ("details_hash", JsonColumn::Text),
    ("idempotency_key", JsonColumn::Text),
    // Who approved it, if it carries its approval (`null`: created awaiting approval).
    ("approved_by", JsonColumn::Text),
    // Its approval record's id (`null` without one), for the insert that records it.
    ("approval_id", JsonColumn::Text),
    // `Priority::stored`, and the scheduled time (`null`: none).
    ("priority", JsonColumn::Int),
    ("not_before", JsonColumn::Int),
];
/// The columns of an approval, as [`approval_rows`] writes them.
const APPROVAL_COLUMNS: [(&str, JsonColumn); 4] = [
    ("id", JsonColumn::Text),
    ("operation_id", JsonColumn::Text),
    ("details_hash", JsonColumn::Text),
    ("approved_by", JsonColumn::Text),
];
/// The one column of a list of business keys.
const KEY_COLUMNS: [(&str, JsonColumn); 1] = [("business_key", JsonColumn::Text)];
/// The one column of a list of ids.
const ID_COLUMNS: [(&str, JsonColumn); 1] = [("id", JsonColumn::Text)];

/// A store's batch statements, built once from its [`Dialect::json_rows`].
#[derive(Debug)]
pub struct IntakeSql {
    /// `$1` tenant, `$2` now, `$3` actor, `$4` the new rows, `$5` approval expiry, `$6` approval
    /// method: inserts those whose business key is free (in id order, so two batches sharing keys
    /// wait for each other instead of deadlocking), a row that carries its approval already
    /// `ready` (the insert trigger logs its `create` and `approve`); returns the rows inserted.
    /// Whether a key is free is one probe of the directory's unique index per row: a scalar
    /// subquery, which Postgres runs per row, where `NOT EXISTS` let it plan an anti-join that
    /// read every directory row of the tenant for each statement (one create-and-approve
    /// statement from 10 clients fell from 2,000–2,800/s to 154/s as a tenant grew to 60,000
    /// operations; pgbench on this machine).
    pub insert: String,
    /// The same insert with the same parameters, recording in the same statement the approval of
    /// every row it inserts `ready`, if the store can (Postgres: a data-modifying `WITH`). Run
    /// alone, outside a transaction, it makes a new payment created and approved one statement.
    pub insert_recorded: Option<String>,
    /// `$1` tenant, `$2` business keys: the operations holding them.
    pub select: String,
    /// `$1` ids: locks the rows in id order, if the store has row locks.
    pub lock: Option<String>,
    /// `$1` tenant, `$2` approval expiry, `$3` now, `$4` method, `$5` approvals: enqueues the
    /// rows awaiting approval whose details are the approved ones; returns them.
    pub approve: String,
    /// `$1` method, `$2` now, `$3` expiry (if the row has none), `$4` approvals: the records.
    pub record_approvals: String,
}

impl IntakeSql {
    /// The statements over `rows` (the store's [`Dialect::json_rows`]), `returning` the updated
    /// row's own columns (an update joined to another table), `lock` (ids in `$1`, a JSON array)
    /// if the store locks rows, and `insert_recorded` if the store runs data-modifying `WITH`
    /// queries. The wake-up of other processes' workers is not among them: it is sent after the
    /// commit ([`Store::wake`](super::store::Store::wake)).
    pub fn build(
        rows: impl Fn(&str, &[(&str, JsonColumn)]) -> String,
        returning: &str,
        lock: Option<String>,
        insert_recorded: bool,
    ) -> Self {
        let record = format!(
            "INSERT INTO approvals (id, operation_id, details_hash, approved_by, method, \
               approved_at, expires_at) \
             SELECT b.id, b.operation_id, b.details_hash, b.approved_by, $1, $2, COALESCE( \
               (SELECT o.approval_expires_at FROM operations o WHERE o.id = b.operation_id), $3) \
             FROM {rows}",
            rows = rows("$4", &APPROVAL_COLUMNS),
        );
        let approve = legal(&[Status::AwaitingApproval], Event::Approve);
        let insert = format!(
            "INSERT INTO operations (id, tenant_id, business_key, kind, amount_minor, currency, \
               customer, payment_method, invoice, destination, description, details_hash, status, \
               attempt, idempotency_key, available_at, approved_hash, approved_by, \
               approval_expires_at, last_event, last_actor, last_detail, created_at, updated_at, \
               processor, priority, not_before) \
             SELECT b.id, $1, b.business_key, '{kind}', b.amount_minor, b.currency, b.customer, \
               b.payment_method, b.invoice, b.destination, b.description, b.details_hash, \
               CASE WHEN b.approved_by IS NULL THEN '{awaiting}' ELSE '{ready}' END, 0, \
               b.idempotency_key, CASE WHEN b.not_before > $2 THEN b.not_before ELSE $2 END, \
               CASE WHEN b.approved_by IS NULL THEN NULL ELSE b.details_hash END, b.approved_by, \
               CASE WHEN b.approved_by IS NULL THEN NULL \
                 WHEN b.not_before > $2 THEN b.not_before + ($5 - $2) ELSE $5 END, \
               CASE WHEN b.approved_by IS NULL THEN 'create' ELSE '{approved}' END, $3, \
               CASE WHEN b.approved_by IS NULL THEN NULL ELSE $6 END, $2, $2, \
               (SELECT tp.processor FROM tenant_processors tp WHERE tp.tenant_id = $1), \
               b.priority, b.not_before \
             FROM {rows} WHERE (SELECT 1 FROM operation_search s \
               WHERE s.tenant_id = $1 AND s.business_key = b.business_key LIMIT 1) IS NULL \
             ORDER BY b.id ON CONFLICT DO NOTHING RETURNING {columns}",
            columns = operation_columns!(),
            kind = OperationKind::Payment.as_str(),
            awaiting = Status::AwaitingApproval.as_str(),
            ready = approve.to.as_str(),
            approved = approve.event.as_str(),
            rows = rows("$4", &NEW_COLUMNS),
        );
        IntakeSql {
            insert_recorded: insert_recorded.then(|| {
                format!(
                    "WITH ins AS ({insert}), recorded AS (INSERT INTO approvals (id, operation_id, \
                       details_hash, approved_by, method, approved_at, expires_at) \
                     SELECT b.approval_id, ins.id, ins.details_hash, ins.approved_by, $6, $2, \
                       ins.approval_expires_at \
                     FROM ins JOIN {rows} ON b.id = ins.id WHERE b.approval_id IS NOT NULL) \
                     SELECT {columns} FROM ins",
                    columns = operation_columns!(),
                    rows = rows("$4", &NEW_COLUMNS),
                )
            }),
            insert,
            select: format!(
                "SELECT {columns} FROM operation_search s JOIN operations o ON o.id = s.id \
                 WHERE s.tenant_id = $1 AND s.business_key IN (SELECT b.business_key FROM {rows})",
                columns = operation_columns!("o."),
                rows = rows("$2", &KEY_COLUMNS),
            ),
            lock,
            approve: format!(
                "UPDATE operations SET status = '{to}', last_event = '{event}', \
                   approved_hash = b.details_hash, approved_by = b.approved_by, \
                   approval_expires_at = CASE WHEN operations.not_before > $3 THEN \
                   operations.not_before + ($2 - $3) ELSE $2 END, updated_at = $3, \
                   available_at = CASE \
                   WHEN operations.not_before > $3 THEN operations.not_before ELSE $3 END, \
                   last_actor = b.approved_by, last_detail = $4 \
                 FROM {rows} WHERE operations.id = b.operation_id AND operations.tenant_id = $1 \
                   AND operations.details_hash = b.details_hash AND {from} RETURNING {returning}",
                to = approve.to.as_str(),
                event = approve.event.as_str(),
                from = status_in("operations.status", &approve.from),
                rows = rows("$5", &APPROVAL_COLUMNS),
            ),
            record_approvals: record,
        }
    }

    /// The lock statement's ids column list (for the stores that build one).
    pub fn id_columns() -> &'static [(&'static str, JsonColumn)] {
        &ID_COLUMNS
    }
}

/// A batch of new payments of one tenant ([`Operations::create_batch`](super::Operations::create_batch)).
#[derive(Debug, Clone)]
pub struct Batch {
    /// The tenant of every item (from the caller's key).
    pub tenant: TenantId,
    /// The operations, in the caller's order.
    pub items: Vec<BatchItem>,
    /// Who creates them (for the audit trail).
    pub actor: String,
    /// How the batch's approvals were given (`service`).
    pub method: String,
    /// When the approvals of items that may run now expire; an item scheduled later keeps its
    /// approval as long after its `not_before` (`priority::approval_expires_at`).
    pub approval_expires_at: Timestamp,
}

/// One operation of a [`Batch`].
#[derive(Debug, Clone)]
pub struct BatchItem {
    /// The operation (its tenant must be the batch's).
    pub new: NewOperation,
    /// Its approval, if the caller holds one (the customer's mandate): the operation is enqueued.
    pub approval: Option<BatchApproval>,
}

/// The approval a batch item carries.
#[derive(Debug, Clone)]
pub struct BatchApproval {
    /// The hash of the details approved; must be the item's.
    pub details_hash: DetailsHash,
    /// Who approved.
    pub approved_by: String,
}

/// One item's answer: what `create_or_get` (then `approve`) would have answered for it alone.
pub type ItemResult = Result<Created, LedgerError>;

/// What the checks before any write decided for an item.
enum Plan {
    /// Refused before the database was asked.
    Refused(LedgerError),
    /// To insert (or find existing) and maybe approve.
    Write,
    /// An approval of other details than the item's: not inserted, only looked up, so that a
    /// business key naming other details is still answered as a conflict (as one by one).
    Mismatch,
}

/// Checks that need no database, per item: the tenant, the kind, a repeated business key, an
/// approval of other details. The first occurrence of a business key is the one written.
fn plan(batch: &Batch) -> Vec<Plan> {
    let mut first: HashMap<&str, usize> = HashMap::new();
    batch
        .items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let new = &item.new;
            if new.tenant != batch.tenant {
                return Plan::Refused(LimitError::BatchTenant.into());
            }
            if new.details.kind() != OperationKind::Payment {
                return Plan::Refused(LimitError::BatchRefund.into());
            }
            if let Some(at) = first.get(new.business_key.as_str()) {
                return Plan::Refused(LimitError::BatchRepeat(*at).into());
            }
            first.insert(new.business_key.as_str(), i);
            if let Some(approval) = &item.approval
                && approval.details_hash != new.details.hash()
            {
                return Plan::Mismatch;
            }
            Plan::Write
        })
        .collect()
}

/// The JSON array of the rows to insert.
fn new_rows<'a>(items: impl Iterator<Item = &'a BatchItem>) -> String {
    let rows: Vec<Value> = items
        .map(|item| {
            let (new, d) = (&item.new, &item.new.details);
            json!({
                "id": new.id.as_str(),
                "business_key": new.business_key.as_str(),
                "amount_minor": d.money().amount_minor(),
                "currency": d.money().currency().code(),
                "customer": d.customer(),
                "payment_method": d.payment_method(),
                "invoice": d.invoice(),
                "destination": d.destination(),
                "description": d.description(),
                "details_hash": d.hash().as_str(),
                "idempotency_key": new.idempotency_key.as_str(),
                "approved_by": item.approval.as_ref().map(|a| bounded(&a.approved_by)),
                "approval_id": item.approval.as_ref().map(|_| format!("apv_{}", random_hex(16))),
                "priority": new.priority.stored(),
                "not_before": new.not_before,
            })
        })
        .collect();
    Value::Array(rows).to_string()
}

/// One approval to record: operation id, approved details hash, approver.
type ApprovalRow = (String, String, String);

/// The approvals a batch's transaction writes.
#[derive(Default)]
struct ApprovalWork {
    /// Of the rows this transaction inserted, those it inserted `ready` (created with their
    /// approval).
    records: Vec<ApprovalRow>,
    /// Of the others, those still awaiting approval with the approved details, recorded once the
    /// update has moved them.
    to_approve: Vec<ApprovalRow>,
    /// The rows of `to_approve`, which other transactions may be writing: locked first.
    to_lock: Vec<Value>,
}

/// Which of `found` the batch's approvals record now and which they must move first.
fn approval_work(
    batch: &Batch,
    plans: &[Plan],
    found: &HashMap<String, (Operation, bool)>,
    inserted_alone: bool,
) -> ApprovalWork {
    let mut work = ApprovalWork::default();
    for (i, item) in batch.items.iter().enumerate() {
        let (Plan::Write, Some(approval), Some((op, inserted))) = (
            &plans[i],
            &item.approval,
            found.get(item.new.business_key.as_str()),
        ) else {
            continue;
        };
        let record = (
            op.id.as_str().to_string(),
            approval.details_hash.as_str().to_string(),
            bounded(&approval.approved_by),
        );
        if *inserted {
            if op.status == Status::Ready && !inserted_alone {
                work.records.push(record);
            }
        } else if op.status == Status::AwaitingApproval && op.details_hash == approval.details_hash
        {
            work.to_lock.push(json!({ "id": op.id.as_str() }));
            work.to_approve.push(record);
        }
    }
    work
}

/// The JSON array of the approvals to record: `(operation id, details hash, approved by)`.
fn approval_rows(approvals: &[ApprovalRow]) -> String {
    let rows: Vec<Value> = approvals
        .iter()
        .map(|(operation, hash, by)| {
            json!({
                "id": format!("apv_{}", random_hex(16)),
                "operation_id": operation,
                "details_hash": hash,
                "approved_by": by,
            })
        })
        .collect();
    Value::Array(rows).to_string()
}

/// Whether a failed try may be tried again from the start: a business key taken under another id
/// by a concurrent creator (the directory's unique index), or a deadlock's victim.
fn retryable(e: &LedgerError) -> bool {
    match e {
        LedgerError::Database(sqlx::Error::Database(db)) => {
            db.constraint() == Some(super::operations::BUSINESS_KEY_TAKEN)
                || db.code().as_deref() == Some("40P01")
        }
        _ => false,
    }
}

impl<DB: Dialect> Store<DB> {
    /// [`Operations::create_batch`](super::Operations::create_batch).
    pub(crate) async fn write_batch(
        &self,
        batch: &Batch,
        now: Timestamp,
    ) -> Result<Vec<ItemResult>, LedgerError> {
        if batch.items.is_empty() || batch.items.len() > BATCH_ITEMS_MAX {
            return Err(LimitError::BatchSize.into());
        }
        if batch.items.iter().any(|i| i.approval.is_some()) && batch.approval_expires_at <= now {
            return Err(LimitError::ApprovalExpiry.into());
        }
        let plans = plan(batch);
        // Rows found by business key: the row, and whether this batch inserted it.
        let mut found: HashMap<String, (Operation, bool)> = HashMap::new();
        let mut inserted_alone = false;
        if let Some(insert) = &DB::intake().insert_recorded
            && plans.iter().any(|p| matches!(p, Plan::Write))
        {
            let ops = self
                .tried(|| self.insert_alone(insert, batch, &plans, now))
                .await?;
            for op in ops {
                found.insert(op.business_key.as_str().to_string(), (op, true));
            }
            inserted_alone = true;
        }
        let (enqueued, found) = self
            .tried(|| self.try_batch(batch, &plans, found.clone(), inserted_alone, now))
            .await?;
        if enqueued > 0 {
            self.wake();
        }
        let mut answers = answers(batch, plans, &found);
        // A row the processor scan made again waits for a human, unless its intention comes back
        // with its approval: then it is the payment the scan found (`settle_recreated`).
        for (item, answer) in batch.items.iter().zip(answers.iter_mut()) {
            let (
                Some(approval),
                Err(LedgerError::WrongState {
                    status: Status::NeedsAttention,
                    ..
                }),
                Some((op, _)),
            ) = (
                &item.approval,
                &answer,
                found.get(item.new.business_key.as_str()),
            )
            else {
                continue;
            };
            if let Some(settled) = super::recovery::settle_recreated(
                self,
                op,
                &approval.details_hash,
                &approval.approved_by,
                now,
            )
            .await?
            {
                *answer = Ok(Created {
                    operation: settled,
                    inserted: false,
                });
            }
        }
        Ok(answers)
    }

    /// `step`, tried again from the start while it fails in a way a new try may not
    /// ([`retryable`]), at most [`BATCH_ATTEMPTS_MAX`] times.
    async fn tried<T, F>(&self, step: impl Fn() -> F) -> Result<T, LedgerError>
    where
        F: Future<Output = Result<T, LedgerError>>,
    {
        let mut attempt = 1;
        loop {
            match step().await {
                Err(e) if attempt < BATCH_ATTEMPTS_MAX && retryable(&e) => attempt += 1,
                other => return other,
            }
        }
    }

    /// The store's insert that also records the approvals of the rows it inserts `ready`
    /// ([`IntakeSql::insert_recorded`]), run alone (its own transaction, one round trip): the
    /// rows it inserted.
    async fn insert_alone(
        &self,
        insert: &'static str,
        batch: &Batch,
        plans: &[Plan],
        now: Timestamp,
    ) -> Result<Vec<Operation>, LedgerError> {
        let insert = insert_statement(insert, batch, plans, now);
        self.all(insert, decode_operation).await
    }

    /// The batch's writes in one transaction, or none if nothing is left to write: the insert
    /// (unless `inserted_alone` did it), the rows whose business key was taken, the approval of
    /// those awaiting one, the approval records. How many rows it enqueued, and every row found.
    async fn try_batch(
        &self,
        batch: &Batch,
        plans: &[Plan],
        mut found: HashMap<String, (Operation, bool)>,
        inserted_alone: bool,
        now: Timestamp,
    ) -> Result<(usize, HashMap<String, (Operation, bool)>), LedgerError> {
        let sql = DB::intake();
        // Rows inserted `ready` alone had their approvals recorded by the same statement.
        let recorded_alone = found
            .values()
            .filter(|(op, inserted)| *inserted && op.status == Status::Ready)
            .count();
        let taken: Vec<&str> = (0..plans.len())
            .filter(|&i| matches!(plans[i], Plan::Write | Plan::Mismatch))
            .map(|i| batch.items[i].new.business_key.as_str())
            .filter(|key| !found.contains_key(*key))
            .collect();
        if inserted_alone && taken.is_empty() {
            return Ok((recorded_alone, found));
        }
        let mut tx = self.begin().await?;
        if !inserted_alone && plans.iter().any(|p| matches!(p, Plan::Write)) {
            let insert = insert_statement(sql.insert.as_str(), batch, plans, now);
            for row in &DB::fetch_all(&mut *tx, insert).await? {
                let op = decode_operation(row)?;
                found.insert(op.business_key.as_str().to_string(), (op, true));
            }
        }
        let taken: Vec<&str> = taken
            .into_iter()
            .filter(|key| !found.contains_key(*key))
            .collect();
        if !taken.is_empty() {
            for op in self
                .by_business_keys(&mut tx, &batch.tenant, &taken)
                .await?
            {
                found.insert(op.business_key.as_str().to_string(), (op, false));
            }
        }
        let ApprovalWork {
            mut records,
            to_approve,
            to_lock,
        } = approval_work(batch, plans, &found, inserted_alone);
        if !to_approve.is_empty() {
            let moved = self
                .approve_awaiting(&mut tx, batch, to_lock, &to_approve, &mut found, now)
                .await?;
            // Only the approvals that enqueued their row are recorded (a row that changed between
            // the read and the update is answered from its state below).
            records.extend(
                to_approve
                    .into_iter()
                    .filter(|(id, _, _)| moved.contains(id)),
            );
        }
        let enqueued = recorded_alone + records.len();
        if !records.is_empty() {
            DB::execute(
                &mut *tx,
                Stmt::new(sql.record_approvals.as_str())
                    .bind(bounded(&batch.method))
                    .bind(now)
                    .bind(batch.approval_expires_at)
                    .bind(approval_rows(&records)),
            )
            .await?;
        }
        tx.commit().await?;
        Ok((enqueued, found))
    }

    /// Moves the rows awaiting approval that `to_approve` names to `ready` (locking them first
    /// where the store needs it), updating `found`; the ids it moved.
    async fn approve_awaiting(
        &self,
        tx: &mut sqlx::Transaction<'static, DB>,
        batch: &Batch,
        to_lock: Vec<Value>,
        to_approve: &[ApprovalRow],
        found: &mut HashMap<String, (Operation, bool)>,
        now: Timestamp,
    ) -> Result<std::collections::HashSet<String>, LedgerError> {
        let sql = DB::intake();
        if let Some(lock) = &sql.lock {
            DB::execute(
                &mut **tx,
                Stmt::new(lock.as_str()).bind(Value::Array(to_lock).to_string()),
            )
            .await?;
        }
        let approved = DB::fetch_all(
            &mut **tx,
            Stmt::new(sql.approve.as_str())
                .bind(&batch.tenant)
                .bind(batch.approval_expires_at)
                .bind(now)
                .bind(bounded(&batch.method))
                .bind(approval_rows(to_approve)),
        )
        .await?;
        let mut moved = std::collections::HashSet::new();
        for row in &approved {
            let op = decode_operation(row)?;
            moved.insert(op.id.as_str().to_string());
            found.insert(op.business_key.as_str().to_string(), (op, false));
        }
        Ok(moved)
    }

    /// The operations holding `keys` in `tenant`, read inside the batch's transaction.
    async fn by_business_keys(
        &self,
        tx: &mut sqlx::Transaction<'static, DB>,
        tenant: &TenantId,
        keys: &[&str],
    ) -> Result<Vec<Operation>, LedgerError> {
        let keys: Vec<Value> = keys.iter().map(|k| json!({ "business_key": k })).collect();
        let rows = DB::fetch_all(
            &mut **tx,
            Stmt::new(DB::intake().select.as_str())
                .bind(tenant)
                .bind(Value::Array(keys).to_string()),
        )
        .await?;
        rows.iter().map(decode_operation).collect()
    }
}

/// `insert` (the store's [`IntakeSql::insert`] or [`IntakeSql::insert_recorded`]) over the items
/// planned as writes.
fn insert_statement<'a>(
    insert: &'static str,
    batch: &'a Batch,
    plans: &[Plan],
    now: Timestamp,
) -> Stmt<'a> {
    let writes = batch
        .items
        .iter()
        .zip(plans)
        .filter(|(_, plan)| matches!(plan, Plan::Write))
        .map(|(item, _)| item);
    Stmt::new(insert)
        .bind(&batch.tenant)
        .bind(now)
        .bind(bounded(&batch.actor))
        .bind(new_rows(writes))
        .bind(batch.approval_expires_at)
        .bind(bounded(&batch.method))
}

/// Every item's answer, in the batch's order, from its plan and the rows `found`.
fn answers(
    batch: &Batch,
    plans: Vec<Plan>,
    found: &HashMap<String, (Operation, bool)>,
) -> Vec<ItemResult> {
    batch
        .items
        .iter()
        .zip(plans)
        .map(|(item, plan)| match plan {
            Plan::Refused(e) => Err(e),
            Plan::Write => answer(item, found.get(item.new.business_key.as_str())),
            Plan::Mismatch => match found.get(item.new.business_key.as_str()) {
                Some((op, _)) if op.details_hash != item.new.details.hash() => {
                    Err(LedgerError::Conflict {
                        existing: op.id.clone(),
                    })
                }
                _ => Err(LedgerError::ApprovalMismatch),
            },
        })
        .collect()
}

/// An item's answer from the row its business key names after the batch's writes (`found`:
/// the row and whether this batch inserted it).
fn answer(item: &BatchItem, found: Option<&(Operation, bool)>) -> ItemResult {
    let Some((op, inserted)) = found else {
        return Err(LedgerError::Corrupt(
            "a batch's business key names no row after its insert".into(),
        ));
    };
    let hash = item.new.details.hash();
    if op.details_hash != hash {
        return Err(LedgerError::Conflict {
            existing: op.id.clone(),
        });
    }
    if let Some(approval) = &item.approval
        && op.approved_hash.as_ref() != Some(&approval.details_hash)
    {
        // Approving twice is the same approval (the stored truth is answered); anything else
        // not awaiting approval cannot be approved, as `approve` answers one by one.
        return Err(LedgerError::WrongState {
            id: op.id.clone(),
            status: op.status,
            why: "only an operation awaiting approval can be approved",
        });
    }
    Ok(Created {
        operation: op.clone(),
        inserted: *inserted,
    })
}

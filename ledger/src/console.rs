//! What the on-call console reads and writes (migration 0007): server-side sessions (only the session
//! id's hash), keyset pages of a tenant's operations with search, the overview's counts and last-hour
//! chart, and the rows an operation's timeline is built from. A trait of its own, reached through
//! [`Operations::console`](super::Operations::console), so the core ledger stays about operations. Every
//! operation query is scoped to one tenant.

use super::dialect::Dialect;
use super::record::{decode_operation, operation_columns};
use super::row::LedgerRow;
use super::statement::{Arg, Stmt};
use super::store::Store;
use super::{LedgerError, Operation};
use async_trait::async_trait;
use payonce_core::clock::Timestamp;
use payonce_core::id::{OperationId, TenantId};
use payonce_core::state::Status;
use std::time::Duration;

/// Largest console page.
pub const CONSOLE_PAGE_MAX: u32 = 200;
/// Most related rows of one kind (approvals, webhooks, links, tool calls) read for one timeline.
pub const RELATED_MAX: i64 = 500;

/// One console session, as stored (the session id itself is never stored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleSession {
    /// SHA-256 hex of the session id the browser holds.
    pub session_hash: String,
    /// The tenant of the key that signed in.
    pub tenant: TenantId,
    /// The key that signed in (`key_…`); re-checked on every request.
    pub key_id: String,
    /// Signed in, ms.
    pub created_at: Timestamp,
    /// Ends, ms.
    pub expires_at: Timestamp,
}

/// A page request: filters, search and the keyset cursor (newest first).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OperationQuery {
    /// Only this state.
    pub status: Option<Status>,
    /// Only operations created at or after this time, ms.
    pub created_from: Option<Timestamp>,
    /// Only operations created before this time, ms.
    pub created_before: Option<Timestamp>,
    /// An operation id, or an exact business key, invoice, customer or processor reference.
    pub search: Option<String>,
    /// Only operations strictly older than this `(created_at, id)` (the last row of the previous page).
    pub after: Option<(Timestamp, OperationId)>,
    /// Page size, 1 to [`CONSOLE_PAGE_MAX`].
    pub limit: u32,
}

/// Operations of each kind per chart bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Bucket {
    /// Submissions started (`submission_started`).
    pub submissions: i64,
    /// Moves into `succeeded`.
    pub successes: i64,
    /// Moves into `failed` or `rejected`.
    pub failures: i64,
}

/// The overview's chart: `buckets` buckets of `bucket` each, the last ending at the call's `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chart {
    /// One bucket's span (at least a millisecond is used).
    pub bucket: Duration,
    /// How many buckets.
    pub buckets: u32,
}

/// The overview's figures for one tenant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overview {
    /// (state, count, oldest `updated_at`) for every state with rows; `succeeded` has no oldest
    /// (terminal: nobody waits on it, and finding it would read every such row).
    pub by_status: Vec<(Status, i64, Option<Timestamp>)>,
    /// The chart's buckets, oldest first.
    pub buckets: Vec<Bucket>,
    /// The tenant's operations paid by a row the ledger had lost, learned of in the last
    /// [`LOST_ROWS_SHOWN_FOR`] (newest first, at most [`LOST_ROWS_SHOWN_MAX`]).
    pub lost_rows: Vec<super::lost_rows::LostRow>,
    /// The tenant's ready operations by class, every class listed, at the call's `now`.
    pub queue: Vec<payonce_core::queue_depth::ClassDepth>,
}

/// How long the overview shows a lost row after a worker learned of it.
pub const LOST_ROWS_SHOWN_FOR: Duration = Duration::from_secs(7 * 24 * 3_600);
/// Most lost rows the overview shows.
pub const LOST_ROWS_SHOWN_MAX: i64 = 20;

/// An approval as the timeline shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ApprovalRow {
    /// Its id.
    pub id: String,
    /// The approved details hash.
    pub details_hash: String,
    /// Who approved.
    pub approved_by: String,
    /// How (the verification method and its evidence id).
    pub method: String,
    /// When, ms.
    #[serde(rename = "approved_at_ms")]
    pub approved_at: Timestamp,
    /// Valid until, ms.
    #[serde(rename = "expires_at_ms")]
    pub expires_at: Timestamp,
    /// Revoked, ms.
    #[serde(rename = "revoked_at_ms")]
    pub revoked_at: Option<Timestamp>,
}

/// A processor webhook stored for the operation (its payload is summarised by the caller).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookRow {
    /// The processor.
    pub processor: String,
    /// The processor's event id.
    pub event_id: String,
    /// Its type.
    pub event_type: String,
    /// The raw payload (never shown as is: callers show `summary()` of its object).
    pub payload: String,
    /// Received, ms.
    pub received_at: Timestamp,
    /// Applied, ms.
    pub applied_at: Option<Timestamp>,
    /// What applying it did.
    pub outcome: Option<String>,
}

/// A confirmation link (never its token or hash).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LinkRow {
    /// Who asked for it (`service`, `assistant`).
    pub origin: String,
    /// Issued, ms.
    #[serde(rename = "created_at_ms")]
    pub created_at: Timestamp,
    /// Expires, ms.
    #[serde(rename = "expires_at_ms")]
    pub expires_at: Timestamp,
    /// Used, ms.
    #[serde(rename = "used_at_ms")]
    pub used_at: Option<Timestamp>,
}

/// A tool call about the operation.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ToolCallRow {
    /// The provider format.
    pub provider: String,
    /// The tool.
    pub tool: String,
    /// When, ms.
    #[serde(rename = "at_ms")]
    pub at: Timestamp,
}

/// The rows besides the audit trail that an operation's timeline shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Related {
    /// Approvals, oldest first.
    pub approvals: Vec<ApprovalRow>,
    /// Webhooks, oldest first.
    pub webhooks: Vec<WebhookRow>,
    /// Confirmation links, oldest first.
    pub links: Vec<LinkRow>,
    /// Tool calls, oldest first.
    pub tool_calls: Vec<ToolCallRow>,
}

/// The console store.
#[async_trait]
pub trait ConsoleLedger: Send + Sync {
    /// Stores a new session.
    async fn create_session(&self, session: &ConsoleSession) -> Result<(), LedgerError>;
    /// The live session with this hash (not ended, not expired at `now`).
    async fn session(
        &self,
        session_hash: &str,
        now: Timestamp,
    ) -> Result<Option<ConsoleSession>, LedgerError>;
    /// Ends a session. False: it was not live.
    async fn end_session(&self, session_hash: &str, now: Timestamp) -> Result<bool, LedgerError>;
    /// One page of a tenant's operations, newest first.
    async fn page(
        &self,
        tenant: &TenantId,
        query: &OperationQuery,
    ) -> Result<Vec<Operation>, LedgerError>;
    /// Counts by state and the chart ending at `now`.
    async fn overview(
        &self,
        tenant: &TenantId,
        chart: Chart,
        now: Timestamp,
    ) -> Result<Overview, LedgerError>;
    /// The related rows of an operation of the tenant (another tenant's: [`LedgerError::NotFound`]).
    async fn related(&self, tenant: &TenantId, id: &OperationId) -> Result<Related, LedgerError>;
}

const INSERT_SESSION: &str = "INSERT INTO console_sessions (session_hash, tenant_id, key_id, created_at, expires_at) \
     VALUES ($1, $2, $3, $4, $5)";
const SELECT_SESSION: &str = "SELECT session_hash, tenant_id, key_id, created_at, expires_at \
     FROM console_sessions WHERE session_hash = $1 AND ended_at IS NULL \
     AND expires_at > $2";
const END_SESSION: &str =
    "UPDATE console_sessions SET ended_at = $2 WHERE session_hash = $1 AND ended_at IS NULL";
/// Per state, without visiting a succeeded row: the states on-call watches through
/// `operations_console_status_idx` (partial on Postgres: it leaves out the worker's two states,
/// migration `console_state_index`), executing rows through `operations_lease_idx`, and succeeded,
/// most of a tenant's rows, as the tenant's directory entries (an index-only count of
/// `operation_search`) less every other state's count, all in one statement's snapshot. Succeeded has
/// no oldest time: it is terminal, and finding one would read every succeeded row.
const COUNTS: &str = "WITH other AS (\
     SELECT status, COUNT(*) AS n, MIN(updated_at) AS oldest FROM operations \
     WHERE tenant_id = $1 AND status NOT IN ('executing', 'succeeded') GROUP BY status \
     UNION ALL SELECT status, COUNT(*) AS n, MIN(updated_at) AS oldest FROM operations \
     WHERE status = 'executing' AND tenant_id = $1 GROUP BY status), \
     succeeded AS (SELECT (SELECT COUNT(*) FROM operation_search WHERE tenant_id = $1) \
     - (SELECT COALESCE(SUM(n), 0) FROM other) AS n) \
     SELECT status, n, oldest FROM other \
     UNION ALL SELECT 'succeeded' AS status, CAST(n AS BIGINT) AS n, NULL AS oldest FROM succeeded WHERE n > 0";
/// Joined to operations for the tenant; `operation_events_at_idx` bounds the scan to the hour.
const CHART: &str = "SELECT (e.at - $2) / $3 AS bucket, e.event AS event, e.to_status AS to_status, \
     COUNT(*) AS n FROM operation_events e JOIN operations o ON o.id = e.operation_id \
     WHERE o.tenant_id = $1 AND e.at >= $2 AND e.at < $4 \
     AND (e.event = 'submission_started' OR e.to_status IN ('succeeded', 'failed', 'rejected')) \
     GROUP BY (e.at - $2) / $3, e.event, e.to_status";
const OWNED: &str = "SELECT 1 FROM operations WHERE id = $1 AND tenant_id = $2";
/// The tenant's lost rows since $2 (by its primary key into operations: a handful of rows).
const LOST_ROWS: &str = "SELECT l.operation_id, l.reference, l.found_by, l.found_at, l.reported_at \
     FROM lost_rows l JOIN operations o ON o.id = l.operation_id \
     WHERE o.tenant_id = $1 AND l.found_at >= $2 ORDER BY l.found_at DESC LIMIT $3";
const APPROVALS: &str = "SELECT id, details_hash, approved_by, method, approved_at, expires_at, revoked_at \
     FROM approvals WHERE operation_id = $1 ORDER BY approved_at, id LIMIT $2";
const WEBHOOKS: &str = "SELECT processor, event_id, event_type, payload, received_at, applied_at, outcome \
     FROM processor_events WHERE operation_id = $1 ORDER BY received_at, event_id LIMIT $2";
const LINKS: &str = "SELECT origin, created_at, expires_at, used_at FROM approval_links \
     WHERE operation_id = $1 ORDER BY created_at LIMIT $2";
const TOOL_CALLS: &str = "SELECT provider, tool, at FROM tool_calls WHERE operation_id = $1 AND tenant_id = $2 \
     ORDER BY id LIMIT $3";

/// The page statement and its arguments, in placeholder order. Only the conditions asked for are
/// in the text, so each shape gets its own plan (a `$n IS NULL OR …` pattern would defeat the
/// indexes in a generic plan).
///
/// A page in one state walks `operations_console_status_idx`, except in the worker's two states,
/// which have no entry there on Postgres (migration `console_state_index`: the claim and the outcome
/// write add none): `succeeded`, most rows, walks the directory and keeps the rows in that state;
/// `executing`, at most the fleet's in-flight work, is found through `operations_lease_idx`. The
/// state is written into the text (a closed set of names), not bound, so a generic plan still
/// matches the partial indexes' predicates. Any other page walks the write-once directory
/// `operation_search` (tenant, creation time, invoice, customer, business key: columns no update
/// changes, so the hot path's row versions add no entry to its indexes; migration
/// `search_directory`) and joins each operation by id. A text search finds ids by business key,
/// invoice or customer in the directory and by processor reference in operations.
fn page_sql(
    tenant: &TenantId,
    q: &OperationQuery,
) -> Result<(String, Vec<Arg<'static>>), LedgerError> {
    if q.limit == 0 || q.limit > CONSOLE_PAGE_MAX {
        return Err(LedgerError::Limit(super::LimitError::ConsolePageSize(
            CONSOLE_PAGE_MAX,
        )));
    }
    let mut args = vec![Arg::from(tenant.as_str().to_string())];
    fn push(sql: &mut String, args: &mut Vec<Arg<'static>>, cond: &str, arg: Arg<'static>) {
        args.push(arg);
        sql.push_str(&cond.replace("$n", &format!("${}", args.len())));
    }
    // `k`: the table whose (tenant, created_at, id) index orders the page.
    let (mut sql, k) = match q.status {
        Some(Status::Succeeded) => (
            format!(
                "SELECT {} FROM operation_search s JOIN operations o ON o.id = s.id \
                 WHERE s.tenant_id = $1 AND o.status = '{}'",
                operation_columns!("o."),
                Status::Succeeded.as_str()
            ),
            "s",
        ),
        Some(status) => (
            format!(
                "SELECT {} FROM operations o WHERE o.tenant_id = $1 AND o.status = '{}'",
                operation_columns!("o."),
                status.as_str()
            ),
            "o",
        ),
        None => (
            String::from(concat!(
                "SELECT ",
                operation_columns!("o."),
                " FROM operation_search s JOIN operations o ON o.id = s.id \
                 WHERE s.tenant_id = $1",
            )),
            "s",
        ),
    };
    if let Some(from) = q.created_from {
        push(
            &mut sql,
            &mut args,
            &format!(" AND {k}.created_at >= $n"),
            Arg::from(from),
        );
    }
    if let Some(before) = q.created_before {
        push(
            &mut sql,
            &mut args,
            &format!(" AND {k}.created_at < $n"),
            Arg::from(before),
        );
    }
    if let Some(search) = q.search.as_deref() {
        match OperationId::parse(search) {
            Ok(id) => push(
                &mut sql,
                &mut args,
                " AND o.id = $n",
                Arg::from(id.as_str().to_string()),
            ),
            Err(_) => push(
                &mut sql,
                &mut args,
                " AND o.id IN (SELECT id FROM operation_search WHERE tenant_id = $1 \
                 AND (business_key = $n OR invoice = $n OR customer = $n) UNION ALL \
                 SELECT id FROM operations WHERE tenant_id = $1 AND external_ref = $n)",
                Arg::from(search.to_string()),
            ),
        }
    }
    if let Some((created, id)) = &q.after {
        // A row-value comparison: one index condition on (created_at, id) in both stores, so a
        // page deep in the table starts where the cursor points instead of sorting what is older.
        push(
            &mut sql,
            &mut args,
            &format!(" AND ({k}.created_at, {k}.id) < ($n"),
            Arg::from(*created),
        );
        push(
            &mut sql,
            &mut args,
            ", $n)",
            Arg::from(id.as_str().to_string()),
        );
    }
    args.push(Arg::Int(i64::from(q.limit)));
    sql.push_str(&format!(
        " ORDER BY {k}.created_at DESC, {k}.id DESC LIMIT ${}",
        args.len()
    ));
    Ok((sql, args))
}

/// The overview's count by state, as the store runs it (for `EXPLAIN` in tests; `$1`: the tenant).
pub fn counts_statement() -> &'static str {
    COUNTS
}

/// The page statement for a tenant and query, as the store runs it (for `EXPLAIN` in tests).
pub fn page_statement(tenant: &TenantId, q: &OperationQuery) -> Result<String, LedgerError> {
    page_sql(tenant, q).map(|(sql, _)| sql)
}

fn decode_session(row: &impl LedgerRow) -> Result<ConsoleSession, LedgerError> {
    Ok(ConsoleSession {
        session_hash: row.get("session_hash")?,
        tenant: row.get("tenant_id")?,
        key_id: row.get("key_id")?,
        created_at: row.get("created_at")?,
        expires_at: row.get("expires_at")?,
    })
}

/// Adds one chart row to its bucket.
fn tally(buckets: &mut [Bucket], bucket: i64, event: &str, to_status: &str, n: i64) {
    let Some(b) = usize::try_from(bucket)
        .ok()
        .and_then(|i| buckets.get_mut(i))
    else {
        return;
    };
    if event == "submission_started" {
        b.submissions += n;
    }
    match to_status {
        "succeeded" => b.successes += n,
        "failed" | "rejected" => b.failures += n,
        _ => {}
    }
}

#[async_trait]
impl<DB: Dialect> ConsoleLedger for Store<DB> {
    async fn create_session(&self, s: &ConsoleSession) -> Result<(), LedgerError> {
        let stmt = Stmt::new(INSERT_SESSION).bind(s.session_hash.as_str());
        let stmt = stmt.bind(&s.tenant).bind(s.key_id.as_str());
        self.execute(stmt.bind(s.created_at).bind(s.expires_at))
            .await?;
        Ok(())
    }

    async fn session(
        &self,
        session_hash: &str,
        now: Timestamp,
    ) -> Result<Option<ConsoleSession>, LedgerError> {
        let stmt = Stmt::new(SELECT_SESSION).bind(session_hash).bind(now);
        self.first(stmt, decode_session).await
    }

    async fn end_session(&self, session_hash: &str, now: Timestamp) -> Result<bool, LedgerError> {
        Ok(self
            .execute(Stmt::new(END_SESSION).bind(session_hash).bind(now))
            .await?
            == 1)
    }

    async fn page(
        &self,
        tenant: &TenantId,
        q: &OperationQuery,
    ) -> Result<Vec<Operation>, LedgerError> {
        let (sql, args) = page_sql(tenant, q)?;
        self.all(Stmt::built(sql).bind_all(args), decode_operation)
            .await
    }

    async fn overview(
        &self,
        tenant: &TenantId,
        Chart { bucket, buckets }: Chart,
        now: Timestamp,
    ) -> Result<Overview, LedgerError> {
        let mut by_status = self
            .all(Stmt::new(COUNTS).bind(tenant), |row| {
                Ok((row.get("status")?, row.get("n")?, row.get("oldest")?))
            })
            .await?;
        by_status.sort_by_key(|(s, _, _): &(Status, _, _)| s.as_str());
        let bucket = bucket.max(Duration::from_millis(1));
        let start = now.saturating_sub_span(bucket * buckets);
        let mut chart = vec![Bucket::default(); buckets as usize];
        let stmt = Stmt::new(CHART).bind(tenant).bind(start).bind(bucket);
        let counted = self
            .all(stmt.bind(now), |row| {
                let (event, to_status): (String, String) =
                    (row.get("event")?, row.get("to_status")?);
                Ok((row.get("bucket")?, event, to_status, row.get("n")?))
            })
            .await?;
        for (at, event, to_status, n) in counted {
            tally(&mut chart, at, &event, &to_status, n);
        }
        let lost = Stmt::new(LOST_ROWS)
            .bind(tenant)
            .bind(now.saturating_sub_span(LOST_ROWS_SHOWN_FOR))
            .bind(LOST_ROWS_SHOWN_MAX);
        Ok(Overview {
            by_status,
            buckets: chart,
            lost_rows: self.all(lost, super::lost_rows::decode).await?,
            queue: self.tenant_queue_now(tenant, now).await?,
        })
    }

    async fn related(&self, tenant: &TenantId, id: &OperationId) -> Result<Related, LedgerError> {
        self.first(Stmt::new(OWNED).bind(id).bind(tenant), |_| Ok(()))
            .await?
            .ok_or(LedgerError::NotFound)?;
        let of = |sql: &'static str| Stmt::new(sql).bind(id).bind(RELATED_MAX);
        let tool_calls = Stmt::new(TOOL_CALLS)
            .bind(id)
            .bind(tenant)
            .bind(RELATED_MAX);
        Ok(Related {
            approvals: self.all(of(APPROVALS), decode_approval).await?,
            webhooks: self.all(of(WEBHOOKS), decode_webhook).await?,
            links: self.all(of(LINKS), decode_link).await?,
            tool_calls: self.all(tool_calls, decode_tool_call).await?,
        })
    }
}

fn decode_approval(r: &impl LedgerRow) -> Result<ApprovalRow, LedgerError> {
    Ok(ApprovalRow {
        id: r.get("id")?,
        details_hash: r.get("details_hash")?,
        approved_by: r.get("approved_by")?,
        method: r.get("method")?,
        approved_at: r.get("approved_at")?,
        expires_at: r.get("expires_at")?,
        revoked_at: r.get("revoked_at")?,
    })
}

fn decode_webhook(r: &impl LedgerRow) -> Result<WebhookRow, LedgerError> {
    Ok(WebhookRow {
        processor: r.get("processor")?,
        event_id: r.get("event_id")?,
        event_type: r.get("event_type")?,
        payload: r.get("payload")?,
        received_at: r.get("received_at")?,
        applied_at: r.get("applied_at")?,
        outcome: r.get("outcome")?,
    })
}

fn decode_link(r: &impl LedgerRow) -> Result<LinkRow, LedgerError> {
    Ok(LinkRow {
        origin: r.get("origin")?,
        created_at: r.get("created_at")?,
        expires_at: r.get("expires_at")?,
        used_at: r.get("used_at")?,
    })
}

fn decode_tool_call(r: &impl LedgerRow) -> Result<ToolCallRow, LedgerError> {
    Ok(ToolCallRow {
        provider: r.get("provider")?,
        tool: r.get("tool")?,
        at: r.get("at")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The page statement for a tenant's first page of 50, in `status` if given.
    fn first_page(t: &TenantId, status: Option<Status>) -> String {
        page_statement(
            t,
            &OperationQuery {
                status,
                limit: 50,
                ..Default::default()
            },
        )
        .unwrap()
    }

    #[test]
    fn page_statements_carry_only_the_conditions_asked_for() {
        let t = TenantId::parse("acme").unwrap();
        assert_eq!(
            first_page(&t, None),
            concat!(
                "SELECT ",
                operation_columns!("o."),
                " FROM operation_search s JOIN operations o ON o.id = s.id \
             WHERE s.tenant_id = $1 ORDER BY s.created_at DESC, s.id DESC LIMIT $2"
            )
        );
        let id = OperationId::parse(&format!("op_{}", "a".repeat(32))).unwrap();
        let (sql, args) = page_sql(
            &t,
            &OperationQuery {
                status: Some(Status::NeedsAttention),
                search: Some("INV-1".into()),
                after: Some((Timestamp::from_millis(5), id)),
                limit: 10,
                ..Default::default()
            },
        )
        .unwrap();
        assert!(sql.contains("o.status = 'needs_attention'"), "{sql}");
        assert!(
            sql.contains("(business_key = $2 OR invoice = $2 OR customer = $2)"),
            "{sql}"
        );
        assert!(sql.contains("AND external_ref = $2)"), "{sql}");
        assert!(sql.contains("AND (o.created_at, o.id) < ($3, $4)"), "{sql}");
        assert!(sql.ends_with("LIMIT $5"), "{sql}");
        assert_eq!(args.len(), 5);
        // Succeeded rows, most of a tenant's, walk the directory in order; other states read
        // operations (executing ones through the lease index: the planner's choice, tested on
        // Postgres by the plan test).
        assert_eq!(
            first_page(&t, Some(Status::Succeeded)),
            concat!(
                "SELECT ",
                operation_columns!("o."),
                " FROM operation_search s JOIN operations o ON o.id = s.id \
             WHERE s.tenant_id = $1 AND o.status = 'succeeded' ORDER BY s.created_at DESC, s.id DESC LIMIT $2"
            )
        );
        assert_eq!(
            first_page(&t, Some(Status::Executing)),
            concat!(
                "SELECT ",
                operation_columns!("o."),
                " FROM operations o WHERE o.tenant_id = $1 AND o.status = 'executing' \
             ORDER BY o.created_at DESC, o.id DESC LIMIT $2"
            )
        );
        for bad in [0, CONSOLE_PAGE_MAX + 1] {
            assert!(
                page_sql(
                    &t,
                    &OperationQuery {
                        limit: bad,
                        ..Default::default()
                    }
                )
                .is_err()
            );
        }
    }

    #[test]
    fn chart_rows_land_in_their_bucket() {
        let mut b = vec![Bucket::default(); 2];
        tally(&mut b, 0, "submission_started", "executing", 3);
        tally(&mut b, 1, "processor_succeeded", "succeeded", 2);
        tally(&mut b, 1, "processor_failed", "failed", 1);
        tally(&mut b, 7, "processor_failed", "failed", 1);
        tally(&mut b, -1, "processor_failed", "failed", 1);
        assert_eq!(b[0].submissions, 3);
        assert_eq!((b[1].successes, b[1].failures), (2, 1));
    }
}

//! Retention: what may be deleted, and when. Bounded batches of rows no live guarantee needs:
//! - webhook payloads ([`processor_events`]) once checked (`applied_at` set) and older than their
//!   period: a pending hint is never deleted, whatever its age;
//! - tool-call correlation rows older than theirs (the kept tool answers, `tool_call_keys`, are
//!   not touched: they are what makes a repeated call answer the same);
//! - confirmation links and console sessions past their expiry by their period.
//!
//! Operations and their events are the evidence of what was paid and are never pruned here.

use super::LedgerError;
use super::dialect::Dialect;
use super::statement::Stmt;
use super::store::Store;
use crate::clock::Timestamp;
use serde::Serialize;
use std::time::Duration;

/// Most rows one prune statement deletes; a prune repeats it until a batch comes back short or
/// [`PRUNE_BATCHES_MAX`] is reached (the next run goes on).
pub const PRUNE_BATCH_DEFAULT: u32 = 1_000;
/// Most batches one prune runs per table.
pub const PRUNE_BATCHES_MAX: u32 = 100;

const PRUNE_WEBHOOKS: &str = "DELETE FROM processor_events WHERE (processor, event_id) IN \
     (SELECT processor, event_id FROM processor_events WHERE applied_at IS NOT NULL AND applied_at < $1 \
     ORDER BY applied_at LIMIT $2)";
const PRUNE_TOOL_CALLS: &str = "DELETE FROM tool_calls WHERE id IN \
     (SELECT id FROM tool_calls WHERE at < $1 ORDER BY id LIMIT $2)";
const PRUNE_LINKS: &str = "DELETE FROM approval_links WHERE token_hash IN \
     (SELECT token_hash FROM approval_links WHERE expires_at < $1 LIMIT $2)";
const PRUNE_SESSIONS: &str = "DELETE FROM console_sessions WHERE session_hash IN \
     (SELECT session_hash FROM console_sessions WHERE expires_at < $1 LIMIT $2)";

/// How long each kind of row is kept once nothing needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// A checked webhook's payload, after it was checked.
    pub webhooks: Duration,
    /// A tool call's correlation row, after the call.
    pub tool_calls: Duration,
    /// A confirmation link or a console session, after it expired.
    pub expired_tokens: Duration,
    /// Rows per delete statement (at least one).
    pub batch: u32,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            webhooks: Duration::from_secs(7 * 24 * 60 * 60),
            tool_calls: Duration::from_secs(30 * 24 * 60 * 60),
            expired_tokens: Duration::from_secs(7 * 24 * 60 * 60),
            batch: PRUNE_BATCH_DEFAULT,
        }
    }
}

/// Rows one prune deleted, per kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Pruned {
    /// Checked webhook payloads.
    pub webhooks: u64,
    /// Tool-call correlation rows.
    pub tool_calls: u64,
    /// Expired confirmation links.
    pub links: u64,
    /// Expired console sessions.
    pub sessions: u64,
}

impl<DB: Dialect> Store<DB> {
    /// Deletes, in bounded batches, every row `retention` lets go of at `now`.
    pub async fn prune(
        &self,
        retention: &Retention,
        now: Timestamp,
    ) -> Result<Pruned, LedgerError> {
        let cutoff = |period: Duration| now.saturating_sub_span(period);
        Ok(Pruned {
            webhooks: self
                .prune_table(PRUNE_WEBHOOKS, cutoff(retention.webhooks), retention.batch)
                .await?,
            tool_calls: self
                .prune_table(
                    PRUNE_TOOL_CALLS,
                    cutoff(retention.tool_calls),
                    retention.batch,
                )
                .await?,
            links: self
                .prune_table(
                    PRUNE_LINKS,
                    cutoff(retention.expired_tokens),
                    retention.batch,
                )
                .await?,
            sessions: self
                .prune_table(
                    PRUNE_SESSIONS,
                    cutoff(retention.expired_tokens),
                    retention.batch,
                )
                .await?,
        })
    }

    async fn prune_table(
        &self,
        sql: &'static str,
        before: Timestamp,
        batch: u32,
    ) -> Result<u64, LedgerError> {
        let batch = batch.max(1);
        let mut deleted = 0;
        for _ in 0..PRUNE_BATCHES_MAX {
            let n = self
                .execute(Stmt::new(sql).bind(before).bind(i64::from(batch)))
                .await?;
            deleted += n;
            if n < u64::from(batch) {
                break;
            }
        }
        Ok(deleted)
    }
}

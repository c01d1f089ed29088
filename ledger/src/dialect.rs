//! Everything that differs between the two stores, in one place: the [`Dialect`] trait. Postgres
//! (`postgres.rs`) and SQLite (`sqlite.rs`) implement it; every other ledger module is generic
//! over it and runs the same statements on both, needing nothing but `DB: Dialect` (running a
//! statement and reading a row come with it: see the trait).
//!
//! What differs: the claim statement (`FOR UPDATE SKIP LOCKED` on Postgres), lease renewal (row
//! locks in id order and `jsonb` on Postgres), the wake-up after an approval (`NOTIFY`/`LISTEN` on
//! Postgres, in-process only on SQLite), the batched writes (marking submissions, recording
//! outcomes, the sweep's lease expiries and found lookups: array statements on Postgres, one
//! statement per item in one transaction on SQLite), the row lock of the over-refund guard
//! (Postgres only; the open-link cap takes it too), whose clock decides leases (the server's on
//! Postgres, the caller's on SQLite), the page headroom the readiness probe checks (SQLite only), how
//! a write's row count is read (`RowCount`), and migrations (`migrate.rs`: an advisory lock on
//! Postgres, foreign keys off during table rebuilds on SQLite).

use super::row::LedgerRow;
use super::statement::Driver;
use super::store::Store;
use super::{ExpireLeases, Fence, LedgerError, RecordLookups, Recorded};
use async_trait::async_trait;
use payonce_core::clock::Timestamp;
use payonce_core::state::Status;
use std::time::Duration;

/// A store's own statements and behaviour; see the module documentation for the list.
///
/// Ledger code needs nothing but `DB: Dialect`: running a `Stmt` comes
/// from the `Driver` supertrait (whose one `impl` states the sqlx bounds) and reading a row from
/// the `LedgerRow` bound on the row type; both are supertrait bounds, which Rust carries to every
/// user of `Dialect` (a `where` clause it would not).
#[async_trait]
pub trait Dialect: Driver + sqlx::Database<Row: LedgerRow> {
    /// Store name (`postgres`, `sqlite`).
    const STORE: &'static str;
    /// Renews the leases in `$4` (a JSON array of ids) that `$1` holds unexpired at `$2`, until `$3`.
    const RENEW: &'static str;
    /// A statement that wakes workers elsewhere, if the store has one; sent after the commit that
    /// made work ready ([`Store::wake`]).
    const NOTIFY_READY: Option<&'static str>;
    /// Locks one operation's row (`$1`) until the transaction ends, if the store has row locks
    /// (Postgres): a check that counts other rows before inserting (the over-refund guard, on the
    /// payment; the open-link cap, on the operation) then sees every racer that went first. SQLite's
    /// single writer already serializes those statements.
    const LOCK_OPERATION: Option<&'static str>;
    /// Reads the database server's clock, in milliseconds since the epoch, if the store has a
    /// clock of its own (Postgres, shared by processes on many machines). `None`: the store runs
    /// inside its caller's process (SQLite), so its clock is that process's.
    const NOW: Option<&'static str>;
    /// Of the operations in `$1` (a JSON array of ids), those a prune may still delete at cutoff
    /// `$2` (the condition of [`super::retention`]'s candidates, checked again), locked until the
    /// transaction ends where the store has row locks: a refund created meanwhile waits, then fails.
    const LOCK_PRUNABLE: &'static str;
    /// Closes those of the `$2` oldest due hints at `$1` that agree with their `succeeded` operation's row
    /// ([`HintChecks::close_known_hints`](super::HintChecks::close_known_hints)): the payload's
    /// object is read with the store's own JSON functions.
    const CLOSE_KNOWN_HINTS: &'static str;
    /// Every foreign key of the ledger's schema, from the store's catalog: columns `table_name`,
    /// `column_name`, `parent_name`, `parent_column`, `columns` (`ownership.rs` plans a prune's
    /// deletes from them).
    const FOREIGN_KEYS: &'static str;
    /// The ledger's tables with an `operation_id` column, from the store's catalog: column
    /// `table_name`.
    const KEYED_TABLES: &'static str;
    /// A table expression of the ids in the JSON array bound at `$1`.
    const JSON_IDS: &'static str;

    /// A table expression named `b` of the objects of the JSON array bound at `param`, one column
    /// per `(name, type)` read from the member of the same name (`null` or absent: `NULL`).
    fn json_rows(param: &str, columns: &[(&str, super::intake::JsonColumn)]) -> String;

    /// The batch intake's statements (`intake.rs`), built once from [`Dialect::json_rows`].
    fn intake() -> &'static super::intake::IntakeSql;

    /// Claims ready rows: `$1` now, `$2` batch size, `$3` owner, `$4` lease expiry; built from
    /// the table's `claim` move (`moves.rs`). With `to_submit`, the same update also records the
    /// submission start (`queue::submission_started_at_claim`).
    fn claim(to_submit: bool) -> &'static str;

    /// How the store claims by lanes (`Queue::claim_lanes`).
    fn claim_lanes() -> super::lanes::LanesClaim;

    /// The lanes' discovery (`Queue::ready_lanes`): `$1` most lanes; columns `priority`,
    /// `tenant_id`, `oldest`, `share`.
    const READY_LANES: &'static str;

    /// Pages the store may still grow by, if it knows (SQLite: under `max_page_count` and in the
    /// filesystem's free space), for the readiness probe (`Operations::probe_write`). Postgres
    /// knows nothing of its room: it tries a write that needs a new page instead, and answers `None`
    /// when it succeeded.
    async fn write_headroom(store: &Store<Self>) -> Result<Option<i64>, LedgerError>;

    /// Waits until an approval may have made work ready, or `max_wait` passes.
    async fn wait_ready(store: &Store<Self>, max_wait: Duration);

    /// Records submission starts (one or many) in one transaction; returns which were fenced in.
    async fn mark_submitting(
        store: &Store<Self>,
        fences: &[Fence],
        now: Timestamp,
    ) -> Result<Vec<bool>, LedgerError>;

    /// Moves many expired leases on in one write, each fenced on its own (`Recovery::expire_leases`).
    async fn expire_leases(
        store: &Store<Self>,
        request: &ExpireLeases<'_>,
        now: Timestamp,
    ) -> Result<Vec<Option<Status>>, LedgerError>;

    /// Records many successful lookups in one write, each fenced on its own
    /// (`Recovery::record_lookups`).
    async fn record_lookups(
        store: &Store<Self>,
        request: &RecordLookups<'_>,
        now: Timestamp,
    ) -> Result<Vec<bool>, LedgerError>;

    /// Records many outcomes in one transaction, each fenced on its own.
    async fn record_batch(
        store: &Store<Self>,
        items: &[(Fence, Recorded)],
        actor: &str,
        now: Timestamp,
    ) -> Result<Vec<bool>, LedgerError>;

    /// Records many outcomes, each fenced on its own, on a connection inside the caller's
    /// transaction (`Queue::record_and_claim`), which commits them.
    async fn record_batch_on(
        conn: &mut Self::Connection,
        items: &[(Fence, Recorded)],
        actor: &str,
        now: Timestamp,
    ) -> Result<Vec<bool>, LedgerError>;
}

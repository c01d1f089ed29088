//! The one implementation of [`Ledger`](super::Ledger): [`Store`], generic over the store's
//! [`Dialect`] (`PostgresLedger` and `SqliteLedger` are `Store<Postgres>` and `Store<Sqlite>`).
//! Each interface is implemented in the module of its concern, where the SQL sits beside the code
//! that runs it:
//!
//! - `operations.rs`: `Operations` (create, read, cancel, count) and `Inspection` (reads across
//!   tenants);
//! - `approvals.rs`: approve, confirmation links;
//! - `queue.rs`: claim, renew, mark submitting, release, record an outcome (the worker's writes);
//! - `recovery.rs`: expired leases, unknown outcomes, processor reports, on-call resolution, the
//!   sweep's maintenance lease (the reconciler's writes);
//! - `refunds.rs`: `Refunds` (a payment's refunds and totals) and refund creation under the
//!   over-refund guard;
//! - `webhooks.rs`, `keys.rs`, `tool_calls.rs`: stored webhooks, API keys, assistant tool calls;
//! - `verification.rs`, `console.rs`: the customer verification and on-call console stores;
//! - `dialect.rs`: what differs between Postgres and SQLite.
//!
//! A module runs a [`Stmt`] with [`Store::execute`], [`Store::first`] or [`Store::all`] (on the
//! pool), or with the [`Driver`](super::statement::Driver) methods on a transaction's connection;
//! it never names a sqlx bound.
//!
//! Every state change is written by a statement whose from-states, to-state and event name come
//! from [`payonce_core::state`]'s table (`state::Move`).

use super::LedgerError;
use super::dialect::Dialect;
use super::schema::SchemaWatch;
use super::statement::Stmt;
use sqlx::{Database, Pool};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::Notify;

/// A ledger on one database: the pool and the in-process wake-up for idle workers.
pub struct Store<DB: Database> {
    pub(crate) pool: Pool<DB>,
    pub(crate) ready: Arc<Notify>,
    /// The wake-ups this process sends other processes' workers, coalesced ([`Store::wake`]).
    remote: Arc<RemoteWake>,
    /// Whether the store's listener (Postgres `LISTEN`) has been started.
    pub(crate) listening: Arc<AtomicBool>,
    /// Where the listener connects: the pool, or a pool of the server's direct address when a
    /// pooler keeps no session; `None`: nowhere (idle workers poll).
    pub(crate) listener: Option<Pool<DB>>,
    /// The callers' clocks are the store's (`Queue::now`): always on SQLite (`Dialect::NOW` is
    /// `None`), on Postgres only when a test moves time by hand ([`Store::on_callers_clock`]).
    pub(crate) callers_clock: bool,
    /// The schema check's latest refusal, for readiness: set on a Postgres store a serving process
    /// opened (`connect_serving`), `None` on one that migrated its own schema.
    pub(crate) schema: Option<Arc<SchemaWatch>>,
}

impl<DB: Database> Clone for Store<DB> {
    fn clone(&self) -> Self {
        Store {
            pool: self.pool.clone(),
            ready: self.ready.clone(),
            remote: self.remote.clone(),
            listening: self.listening.clone(),
            listener: self.listener.clone(),
            callers_clock: self.callers_clock,
            schema: self.schema.clone(),
        }
    }
}

impl<DB: Database> std::fmt::Debug for Store<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("pool", &self.pool).finish()
    }
}

impl<DB: Database> Store<DB> {
    /// Wraps an open, migrated pool.
    pub(crate) fn new(pool: Pool<DB>) -> Self {
        Store {
            ready: Arc::new(Notify::new()),
            remote: Arc::default(),
            listening: Arc::new(AtomicBool::new(false)),
            listener: Some(pool.clone()),
            pool,
            callers_clock: false,
            schema: None,
        }
    }

    /// Listens for wake-ups on `listener` instead of the pool (see [`Store::listener`]).
    pub(crate) fn listening_on(mut self, listener: Option<Pool<DB>>) -> Self {
        self.listener = listener;
        self
    }

    /// This store's time is whatever its callers' clocks say (`Queue::now` answers the `local`
    /// it is given), as SQLite's always is. For tests that move a Postgres ledger's time by hand
    /// (a manual clock, a clock ahead to lapse a lease at once); production never calls it: there
    /// the server's clock decides leases, whatever each process's clock says (issue 43).
    pub fn on_callers_clock(mut self) -> Self {
        self.callers_clock = true;
        self
    }

    /// The pool, for tests and benchmarks that inspect the database directly.
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    /// Opens a transaction that a cancelled caller cannot leave half open. sqlx 0.9 sends `BEGIN`
    /// and counts the transaction only once the server has answered; a caller dropped in between
    /// (a timeout, a client that hung up) returns the connection to the pool inside a transaction
    /// nobody will end, and later autocommit writes on it would never commit. The `BEGIN` runs in
    /// a task of its own, which finishes even when the caller is gone; a transaction nobody takes
    /// rolls back when dropped, as any unfinished one does. (Checking every released connection
    /// instead cost a round trip and a server-logged error per ledger call.) Behind a transaction
    /// pooler it starts with `statement::POOLED_BEGIN`.
    pub(crate) async fn begin(&self) -> Result<sqlx::Transaction<'static, DB>, LedgerError>
    where
        DB: 'static,
    {
        super::statement::begin_on(&self.pool).await
    }
}

/// Whether a wake-up of other processes' workers is wanted, and whether a task is sending one.
#[derive(Debug, Default)]
struct RemoteWake {
    asked: AtomicBool,
    sending: AtomicBool,
}

impl<DB: Dialect> Store<DB> {
    /// Wakes idle workers after a commit that made work ready: this process's at once, other
    /// processes' with the dialect's `NOTIFY_READY`, sent by a task after the commit rather than
    /// inside the transaction. Postgres serializes every committing transaction that notified
    /// (one lock for its notification queue, held to the end of the commit), which roughly halved
    /// the rate of single create-and-approve transactions from 10 clients (pgbench on this
    /// machine: 2,294–3,195/s without, 1,116–1,783/s with the notify inside, 2,184–2,691/s with
    /// it after the commit). Coalesced: while one is being sent, any number asked for meanwhile
    /// become one more, so a billing run's thousands of approvals send a few. One lost (the
    /// process ends first, the database refuses it) delays nothing beyond the workers' next poll
    /// (their `wait_ready`'s longest wait).
    pub(crate) fn wake(&self) {
        self.ready.notify_waiters();
        let Some(notify) = DB::NOTIFY_READY else {
            return;
        };
        self.remote.asked.store(true, Ordering::SeqCst);
        if self.remote.sending.swap(true, Ordering::SeqCst) {
            return;
        }
        let pool = self.pool.clone();
        let remote = self.remote.clone();
        tokio::spawn(async move {
            loop {
                while remote.asked.swap(false, Ordering::SeqCst) {
                    if let Err(error) = DB::execute(&pool, Stmt::new(notify)).await {
                        tracing::debug!(%error, "wake-up of other workers not sent; they poll");
                    }
                }
                remote.sending.store(false, Ordering::SeqCst);
                // One asked for between the last check and the line above found a sender
                // running and left it to this one.
                if !remote.asked.load(Ordering::SeqCst)
                    || remote.sending.swap(true, Ordering::SeqCst)
                {
                    return;
                }
            }
        });
    }
}

/// The pool's side of the [`Driver`](super::statement::Driver): statements that need no
/// transaction, each on a connection taken from the pool for it.
impl<DB: Dialect> Store<DB> {
    /// Runs a write; the rows it changed.
    pub(crate) async fn execute(&self, stmt: Stmt<'_>) -> Result<u64, LedgerError> {
        DB::execute(&self.pool, stmt).await
    }

    /// Runs a statement and decodes its first row, if it returned one.
    pub(crate) async fn first<T>(
        &self,
        stmt: Stmt<'_>,
        decode: impl FnOnce(&DB::Row) -> Result<T, LedgerError> + Send,
    ) -> Result<Option<T>, LedgerError> {
        DB::fetch_optional(&self.pool, stmt)
            .await?
            .as_ref()
            .map(decode)
            .transpose()
    }

    /// Runs a statement and decodes every row it returned.
    pub(crate) async fn all<T>(
        &self,
        stmt: Stmt<'_>,
        decode: impl FnMut(&DB::Row) -> Result<T, LedgerError> + Send,
    ) -> Result<Vec<T>, LedgerError> {
        let rows = DB::fetch_all(&self.pool, stmt).await?;
        rows.iter().map(decode).collect()
    }
}

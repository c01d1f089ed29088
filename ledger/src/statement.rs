//! The ledger's own statement and its one way to a driver: module code builds a [`Stmt`] (a
//! named SQL constant and its [`Arg`]s) and runs it with the [`Driver`] methods every
//! [`Dialect`](super::Dialect) has, on the pool or inside a transaction ([`On`]). The sqlx bounds
//! the binding and running need (an executor for a connection, encoders for `i64` and text and
//! their `NULL`s) are stated once, on the one `impl` of [`Driver`] below, so no ledger module is
//! generic over them.

use super::{Fence, LedgerError, ProcessorEventKey};
use async_trait::async_trait;
use payonce_core::clock::Timestamp;
use payonce_core::id::{OperationId, TenantId};
use sqlx::database::HasStatementCache;
use sqlx::pool::PoolConnection;
use sqlx::query::Query;
use sqlx::{
    AssertSqlSafe, Connection, Database, Encode, Executor, IntoArguments, Pool, Transaction, Type,
};
use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Whether this process's Postgres ledger sits behind a pooler in transaction mode (PgBouncer's
/// `pool_mode = transaction`), where each transaction may run on another server connection. Set
/// once, by the Postgres store when it opens so configured (`Pooler::Transaction`), before any
/// statement runs; never unset. Process-wide rather than per store because statements inside a
/// transaction reach sqlx here without a store at hand, and a process opens one ledger.
static TRANSACTION_POOLER: AtomicBool = AtomicBool::new(false);

/// How a transaction starts behind a transaction pooler: the statement timeout (and JIT off, as
/// `connect::SET_STATEMENT_TIMEOUT` says why) is set for the transaction (`SET LOCAL`), as a
/// session setting would leak to whichever client the pooler hands the server connection next, or
/// be lost. Sent as one simple query (one round trip). Only the Postgres store turns the pooler
/// mode on.
pub(crate) const POOLED_BEGIN: &str =
    "BEGIN; SET LOCAL jit = off; SET LOCAL statement_timeout = 15000";

/// Marks this process's ledger as behind a transaction pooler ([`TRANSACTION_POOLER`]).
pub(crate) fn set_behind_transaction_pooler() {
    TRANSACTION_POOLER.store(true, Ordering::SeqCst);
}

/// Whether this process's ledger is behind a transaction pooler ([`TRANSACTION_POOLER`]).
pub(crate) fn behind_transaction_pooler() -> bool {
    TRANSACTION_POOLER.load(Ordering::Relaxed)
}

/// Whether statements may be prepared under a name and reused on their connection. Not behind a
/// transaction pooler: the next transaction may run on another server, which does not know the
/// name, or knows another client's statement by it (`prepared statement "sqlx_s_1" already
/// exists`, issue 50). Unnamed statements live only until the next one, inside the transaction.
pub(crate) fn named_statements() -> bool {
    !behind_transaction_pooler()
}

/// Opens a transaction on `pool` (with [`POOLED_BEGIN`] behind a transaction pooler) that a
/// cancelled caller cannot leave half open: see `Store::begin`.
pub(crate) async fn begin_on<DB: Database>(
    pool: &Pool<DB>,
) -> Result<Transaction<'static, DB>, LedgerError> {
    let pool = pool.clone();
    tokio::spawn(async move {
        if behind_transaction_pooler() {
            pool.begin_with(POOLED_BEGIN).await
        } else {
            pool.begin().await
        }
    })
    .await
    .map_err(|e| LedgerError::Database(sqlx::Error::Protocol(format!("begin: {e}"))))?
    .map_err(LedgerError::from)
}

/// A connection from the pool for statements that need no transaction of their own: the
/// connection itself, or behind a transaction pooler a transaction (its statements, parsed and
/// bound in separate round trips, must reach one server connection), committed by
/// [`Single::done`].
pub(crate) enum Single<DB: Database> {
    /// A pooled connection.
    Conn(PoolConnection<DB>),
    /// A transaction, behind a transaction pooler.
    Tx(Transaction<'static, DB>),
}

impl<DB: Database> Single<DB> {
    /// Takes a connection (or opens a transaction) from `pool`.
    pub(crate) async fn take(pool: &Pool<DB>) -> Result<Self, LedgerError> {
        if behind_transaction_pooler() {
            Ok(Single::Tx(begin_on(pool).await?))
        } else {
            Ok(Single::Conn(pool.acquire().await?))
        }
    }

    /// The connection to run statements on.
    pub(crate) fn conn(&mut self) -> &mut DB::Connection {
        match self {
            Single::Conn(conn) => &mut *conn,
            Single::Tx(tx) => &mut *tx,
        }
    }

    /// Commits the transaction, if there is one; a connection goes back to the pool when dropped.
    pub(crate) async fn done(self) -> Result<(), LedgerError> {
        if let Single::Tx(tx) = self {
            tx.commit().await?;
        }
        Ok(())
    }
}

/// A value bound to a placeholder: the two column types the ledger stores, or their `NULL`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Arg<'a> {
    /// A `BIGINT` (`INTEGER` in SQLite): counts, amounts, attempts, instants in ms.
    Int(i64),
    /// A `TEXT`.
    Text(Cow<'a, str>),
    /// A `NULL` typed as a `BIGINT`.
    NullInt,
    /// A `NULL` typed as a `TEXT`.
    NullText,
}

impl From<i64> for Arg<'_> {
    fn from(v: i64) -> Self {
        Arg::Int(v)
    }
}

impl<'a> From<&'a str> for Arg<'a> {
    fn from(v: &'a str) -> Self {
        Arg::Text(v.into())
    }
}

/// An instant is stored as its milliseconds since the epoch: this is where it crosses into SQL.
impl From<Timestamp> for Arg<'_> {
    fn from(v: Timestamp) -> Self {
        Arg::Int(v.as_millis())
    }
}

/// A span is stored as its whole milliseconds (saturating).
impl From<Duration> for Arg<'_> {
    fn from(v: Duration) -> Self {
        Arg::Int(i64::try_from(v.as_millis()).unwrap_or(i64::MAX))
    }
}

impl From<String> for Arg<'_> {
    fn from(v: String) -> Self {
        Arg::Text(Cow::Owned(v))
    }
}

impl From<Option<String>> for Arg<'_> {
    fn from(v: Option<String>) -> Self {
        v.map_or(Arg::NullText, Arg::from)
    }
}

impl<'a> From<&'a OperationId> for Arg<'a> {
    fn from(v: &'a OperationId) -> Self {
        Arg::from(v.as_str())
    }
}

impl<'a> From<&'a TenantId> for Arg<'a> {
    fn from(v: &'a TenantId) -> Self {
        Arg::Text(v.as_str().into())
    }
}

impl<'a> From<Option<&'a str>> for Arg<'a> {
    fn from(v: Option<&'a str>) -> Self {
        v.map_or(Arg::NullText, Arg::from)
    }
}

impl From<Option<i64>> for Arg<'_> {
    fn from(v: Option<i64>) -> Self {
        v.map_or(Arg::NullInt, Arg::from)
    }
}

impl From<Option<Timestamp>> for Arg<'_> {
    fn from(v: Option<Timestamp>) -> Self {
        v.map_or(Arg::NullInt, Arg::from)
    }
}

/// A statement: one of a module's named SQL constants (or one built from fixed fragments, never
/// from input) and its arguments in placeholder order.
#[derive(Debug, Clone)]
#[must_use = "a statement does nothing until a `Driver` method runs it"]
pub struct Stmt<'a> {
    sql: Cow<'static, str>,
    args: Vec<Arg<'a>>,
}

impl<'a> Stmt<'a> {
    /// A named statement.
    pub fn new(sql: &'static str) -> Self {
        Stmt {
            sql: Cow::Borrowed(sql),
            args: Vec::new(),
        }
    }

    /// A statement assembled at run time from fixed fragments (the console's page query).
    pub fn built(sql: String) -> Self {
        Stmt {
            sql: Cow::Owned(sql),
            args: Vec::new(),
        }
    }

    /// Binds the next placeholder.
    pub fn bind(mut self, value: impl Into<Arg<'a>>) -> Self {
        self.args.push(value.into());
        self
    }

    /// Binds many placeholders, in order.
    pub fn bind_all(mut self, values: impl IntoIterator<Item = Arg<'a>>) -> Self {
        self.args.extend(values);
        self
    }
}

impl Fence {
    /// A statement fenced by this attempt: `$1` the operation, `$2` the attempt.
    pub(crate) fn stmt(&self, sql: &'static str) -> Stmt<'_> {
        Stmt::new(sql).bind(&self.id).bind(self.attempt)
    }
}

impl ProcessorEventKey<'_> {
    /// A statement about this stored webhook: `$1` the processor, `$2` its event id.
    pub(crate) fn stmt(&self, sql: &'static str) -> Stmt<'_> {
        Stmt::new(sql).bind(self.processor).bind(self.event_id)
    }
}

/// Where a statement runs: a connection taken from the pool for it, or the connection of an open
/// transaction (`&mut *tx`).
pub enum On<'c, DB: Database> {
    /// The store's pool.
    Pool(&'c Pool<DB>),
    /// One connection (a transaction's, or one held for several statements).
    Conn(&'c mut DB::Connection),
}

impl<'c, DB: Database> From<&'c Pool<DB>> for On<'c, DB> {
    fn from(pool: &'c Pool<DB>) -> Self {
        On::Pool(pool)
    }
}

impl<'c, DB: Database> From<&'c mut DB::Connection> for On<'c, DB> {
    fn from(conn: &'c mut DB::Connection) -> Self {
        On::Conn(conn)
    }
}

/// How many rows a write changed (sqlx has no driver-independent accessor: one impl per store).
pub trait RowCount {
    /// Rows changed.
    fn rows(&self) -> u64;
}

/// Runs [`Stmt`]s: what the ledger needs of a sqlx driver. Implemented once, below, for every
/// driver that can bind the ledger's [`Arg`]s; [`Dialect`](super::Dialect) requires it, so ledger
/// code needs only `DB: Dialect`.
#[async_trait]
pub trait Driver: Database {
    /// The sqlx query for a statement, its arguments bound (the one place [`Arg`]s meet sqlx).
    fn query(stmt: Stmt<'_>) -> Query<'static, Self, Self::Arguments>;

    /// Runs a write on the pool or a connection; the rows it changed.
    async fn execute<'c, O>(on: O, stmt: Stmt<'_>) -> Result<u64, LedgerError>
    where
        O: Into<On<'c, Self>> + Send;

    /// Runs a statement to its end (a write outside a transaction commits there); its first row,
    /// if any.
    async fn fetch_optional<'c, O>(on: O, stmt: Stmt<'_>) -> Result<Option<Self::Row>, LedgerError>
    where
        O: Into<On<'c, Self>> + Send;

    /// Runs a statement; every row it returns.
    async fn fetch_all<'c, O>(on: O, stmt: Stmt<'_>) -> Result<Vec<Self::Row>, LedgerError>
    where
        O: Into<On<'c, Self>> + Send;
}

#[async_trait]
impl<DB> Driver for DB
where
    DB: Database<Arguments: IntoArguments<DB>, QueryResult: RowCount> + HasStatementCache,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'t> i64: Encode<'t, DB> + Type<DB>,
    for<'t> &'t str: Encode<'t, DB> + Type<DB>,
    for<'t> Option<i64>: Encode<'t, DB>,
    for<'t> Option<&'t str>: Encode<'t, DB>,
{
    fn query(stmt: Stmt<'_>) -> Query<'static, DB, DB::Arguments> {
        let query = match stmt.sql {
            Cow::Borrowed(sql) => sqlx::query(sql),
            // Built from the module's fixed fragments; every value is a bound argument.
            Cow::Owned(sql) => sqlx::query(AssertSqlSafe(sql)),
        };
        let mut query = query.persistent(named_statements());
        for arg in &stmt.args {
            query = match arg {
                Arg::Int(v) => query.bind(*v),
                Arg::Text(v) => query.bind(v.as_ref()),
                Arg::NullInt => query.bind(None::<i64>),
                Arg::NullText => query.bind(None::<&str>),
            };
        }
        query
    }

    async fn execute<'c, O>(on: O, stmt: Stmt<'_>) -> Result<u64, LedgerError>
    where
        O: Into<On<'c, DB>> + Send,
    {
        let done = match on.into() {
            // Unnamed statements (behind a transaction pooler) have no cached plan to go stale.
            On::Pool(pool) if behind_transaction_pooler() => {
                let mut one = Single::take(pool).await?;
                let done = DB::query(stmt).execute(one.conn()).await?;
                one.done().await?;
                done
            }
            On::Pool(pool) => {
                let mut conn = pool.acquire().await?;
                match DB::query(stmt.clone()).execute(&mut *conn).await {
                    Err(e) if stale_plan(&e) => {
                        forget_plans(&mut *conn).await;
                        DB::query(stmt).execute(&mut *conn).await?
                    }
                    done => done?,
                }
            }
            On::Conn(conn) => match DB::query(stmt.clone()).execute(&mut *conn).await {
                Err(e) if stale_plan(&e) => {
                    forget_plans(conn).await;
                    if conn.is_in_transaction() {
                        return Err(e.into());
                    }
                    DB::query(stmt).execute(&mut *conn).await?
                }
                done => done?,
            },
        };
        Ok(done.rows())
    }

    async fn fetch_optional<'c, O>(on: O, stmt: Stmt<'_>) -> Result<Option<DB::Row>, LedgerError>
    where
        O: Into<On<'c, DB>> + Send,
    {
        // Every row, not sqlx's `fetch_optional`: on SQLite that stops stepping after the first row
        // and drops the error of the statement's end, which for a write outside a transaction is
        // its `COMMIT` (a full disk: issue 43). A write would be answered with a row SQLite then
        // rolled back. (Postgres's `fetch_optional` reads to the end as well.) The ledger runs
        // only statements of at most a few rows through here.
        let rows = Self::fetch_all(on, stmt).await?;
        Ok(rows.into_iter().next())
    }

    async fn fetch_all<'c, O>(on: O, stmt: Stmt<'_>) -> Result<Vec<DB::Row>, LedgerError>
    where
        O: Into<On<'c, DB>> + Send,
    {
        let rows = match on.into() {
            On::Pool(pool) if behind_transaction_pooler() => {
                let mut one = Single::take(pool).await?;
                let rows = DB::query(stmt).fetch_all(one.conn()).await?;
                one.done().await?;
                rows
            }
            On::Pool(pool) => {
                let mut conn = pool.acquire().await?;
                match DB::query(stmt.clone()).fetch_all(&mut *conn).await {
                    Err(e) if stale_plan(&e) => {
                        forget_plans(&mut *conn).await;
                        DB::query(stmt).fetch_all(&mut *conn).await?
                    }
                    rows => rows?,
                }
            }
            On::Conn(conn) => match DB::query(stmt.clone()).fetch_all(&mut *conn).await {
                Err(e) if stale_plan(&e) => {
                    forget_plans(conn).await;
                    if conn.is_in_transaction() {
                        return Err(e.into());
                    }
                    DB::query(stmt).fetch_all(&mut *conn).await?
                }
                rows => rows?,
            },
        };
        Ok(rows)
    }
}

/// SQLSTATE `feature_not_supported`, which Postgres answers a prepared statement whose result type a
/// schema change altered ("cached plan must not change result type"): the statement did not run.
const STALE_PLAN_SQLSTATE: &str = "0A000";

/// Whether `e` is a prepared statement the server no longer accepts as prepared (see
/// [`STALE_PLAN_SQLSTATE`]). Explicit column lists keep an additive migration from causing it; a
/// change they cannot hide (a column's type) still does, once per connection and statement.
pub(crate) fn stale_plan(e: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = e else {
        return false;
    };
    db.code().as_deref() == Some(STALE_PLAN_SQLSTATE) || db.message().contains("cached plan")
}

/// Forgets a connection's prepared statements, so the next run of each is prepared again against
/// the schema as it is now (inside a transaction too: the next transaction on this connection must
/// not meet the same stale plan). Logged: a process that keeps meeting this runs beside a schema it
/// was not built for. A connection that cannot forget them fails the retry, which reports it.
async fn forget_plans<C: Connection>(conn: &mut C)
where
    C::Database: HasStatementCache,
{
    tracing::warn!(
        "a prepared statement no longer matches the schema (a migration ran beside this process); \
         preparing this connection's statements again"
    );
    if let Err(error) = conn.clear_cached_statements().await {
        tracing::warn!(%error, "the connection's prepared statements could not be forgotten");
    }
}

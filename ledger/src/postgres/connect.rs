//! How a Postgres ledger is opened: through a pooler or not (`Route`), with the connection options
//! a pooler accepts, the first connection tried with backoff while the server is unavailable, the
//! statement timeout set and read back, the schema migrated or checked, and `LISTEN` where a
//! session allows it.

use super::super::error::unavailable;
use super::super::statement::named_statements;
use super::super::store::Store;
use super::super::{LedgerError, migrate, schema};
use super::{
    ACQUIRE_TIMEOUT, CONNECT_ATTEMPT_TIMEOUT, CONNECT_RETRY_MAX, CONNECT_RETRY_MIN, LISTEN_RETRY,
    PostgresLedger, READY_CHANNEL, STATEMENT_TIMEOUT_MS,
};
use backon::{BackoffBuilder, ExponentialBuilder};
use payonce_core::clock::{Clock, SystemClock};
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::{Connection, PgConnection, PgPool};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::Notify;
/// What sits between the processes and Postgres (docs/runbook.md, "Deploying on managed
/// Postgres").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Pooler {
    /// Nothing, or a proxy that keeps one server connection per client connection.
    #[default]
    None,
    /// A pooler in session mode (PgBouncer `pool_mode = session`): one server connection per
    /// client connection while it lasts, session settings kept, startup `options` dropped.
    Session,
    /// A pooler in transaction mode (PgBouncer `pool_mode = transaction`): each transaction may
    /// run on another server connection. No named prepared statements, every statement in a
    /// transaction that sets its own statement timeout, no session state.
    Transaction,
}

/// How this process reaches its Postgres: through `pooler`, and, if set, `direct_url` (the server
/// itself, bypassing the pooler) for what needs a session of its own: `LISTEN` and migrations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Route {
    /// What sits behind the ledger's URL.
    pub pooler: Pooler,
    /// A URL of the same database without the pooler; `None`: none.
    pub direct_url: Option<String>,
}

/// Connection options without what a pooler refuses or drops at startup. PgBouncer's defaults
/// refuse `options` and `extra_float_digits` (sqlx's default, for floats the ledger does not
/// store), and in session pooling an ignored `options` silently dropped the statement timeout
/// (issue 50): the timeout is set by a statement instead. `payonce` names the connections unless
/// the URL does (`?application_name=…`): an operator, or the chaos soak's observer, can then tell
/// them apart in `pg_stat_activity`.
fn pooler_safe(url: &str) -> Result<PgConnectOptions, LedgerError> {
    let options = PgConnectOptions::from_str(url)?;
    let name = options
        .get_application_name()
        .unwrap_or("payonce")
        .to_string();
    Ok(options.extra_float_digits(None).application_name(&name))
}

/// What opening a Postgres ledger does with its schema.
enum SchemaAtStart {
    /// Applies pending migrations (`payonce migrate`, tools, tests).
    Migrate,
    /// Checks it and watches it, never changing it (the serving processes).
    Check,
}

impl PostgresLedger {
    /// [`PostgresLedger::connect_routed`] with nothing between the process and the server.
    pub async fn connect(
        url: &str,
        max_connections: u32,
        connect_timeout: Duration,
    ) -> Result<Self, LedgerError> {
        Self::connect_routed(url, &Route::default(), max_connections, connect_timeout).await
    }

    /// Connects, runs pending migrations and opens a pool of up to `max_connections`: what
    /// `payonce migrate`, tools and tests do. A server that is down, starting, out of connection
    /// slots or unreachable is tried again with backoff for up to `connect_timeout`; past it, or at
    /// once for what a retry cannot change (credentials, no such database, a refused TLS
    /// handshake), the error names the server and the last attempt's cause. The statement timeout
    /// is read back on the first connection: a route that loses it refuses to start
    /// ([`LedgerError::SessionSetting`]).
    pub async fn connect_routed(
        url: &str,
        route: &Route,
        max_connections: u32,
        connect_timeout: Duration,
    ) -> Result<Self, LedgerError> {
        Self::open(
            url,
            route,
            max_connections,
            connect_timeout,
            SchemaAtStart::Migrate,
        )
        .await
    }

    /// Connects as a serving process does: never migrates. Refuses a schema behind this binary
    /// ([`LedgerError::SchemaBehind`], "run payonce migrate") or ahead of it by a contract step it
    /// predates ([`LedgerError::SchemaIncompatible`]); runs beside newer expand steps, saying so;
    /// and checks again every [`SCHEMA_CHECK_INTERVAL`](super::schema::SCHEMA_CHECK_INTERVAL),
    /// failing readiness (`Operations::probe_write`) while the schema is one it cannot serve.
    pub async fn connect_serving(
        url: &str,
        route: &Route,
        max_connections: u32,
        connect_timeout: Duration,
    ) -> Result<Self, LedgerError> {
        Self::open(
            url,
            route,
            max_connections,
            connect_timeout,
            SchemaAtStart::Check,
        )
        .await
    }

    async fn open(
        url: &str,
        route: &Route,
        max_connections: u32,
        connect_timeout: Duration,
        schema: SchemaAtStart,
    ) -> Result<Self, LedgerError> {
        let per_transaction = route.pooler == Pooler::Transaction;
        if per_transaction {
            // Before any statement: every one from here on is unnamed and in a transaction.
            super::super::statement::set_behind_transaction_pooler();
        }
        let options = pooler_safe(url)?;
        let direct = route.direct_url.as_deref().map(pooler_safe).transpose()?;
        // The first connection is made here, not by the pool: the pool's own retries end after a
        // fixed 10 s in "pool timed out", without the cause.
        let mut conn = first_connection(&options, connect_timeout).await?;
        if per_transaction {
            let mut tx = conn
                .begin_with(super::super::statement::POOLED_BEGIN)
                .await?;
            check_session_settings(&mut tx).await?;
            tx.rollback().await?;
        } else {
            session_settings(&mut conn).await?;
            check_session_settings(&mut conn).await?;
        }
        let checked = match (schema, &direct) {
            (SchemaAtStart::Migrate, Some(direct)) => {
                let mut direct_conn = first_connection(direct, connect_timeout).await?;
                session_settings(&mut direct_conn).await?;
                migrate::postgres(&mut direct_conn, SystemClock.now()).await?;
                direct_conn.close().await.ok();
                false
            }
            (SchemaAtStart::Migrate, None) => {
                migrate::postgres(&mut conn, SystemClock.now()).await?;
                false
            }
            (SchemaAtStart::Check, _) => {
                let verdict = match schema::check_postgres(&mut conn, migrate::POSTGRES).await {
                    Ok(verdict) => verdict,
                    Err(refused) => {
                        conn.close().await.ok();
                        return Err(refused);
                    }
                };
                schema::announce(&verdict);
                true
            }
        };
        // The pool opens its own connections as they are needed; a failed goodbye changes nothing.
        conn.close().await.ok();
        let mut pool = PgPoolOptions::new()
            .max_connections(max_connections.max(1))
            .acquire_timeout(ACQUIRE_TIMEOUT);
        if !per_transaction {
            pool = pool.after_connect(|conn, _| Box::pin(session_settings(conn)));
        }
        let pool = pool.connect_lazy_with(options);
        // Wake-ups need a session: over the direct connection when there is one; through a
        // transaction pooler none arrive, and idle workers poll.
        let listener = match (direct, per_transaction) {
            (Some(direct), _) => Some(
                PgPoolOptions::new()
                    .max_connections(1)
                    .acquire_timeout(ACQUIRE_TIMEOUT)
                    .connect_lazy_with(direct),
            ),
            (None, true) => {
                tracing::info!(
                    "behind a transaction pooler without a direct_database_url: no LISTEN; idle workers poll"
                );
                None
            }
            (None, false) => Some(pool.clone()),
        };
        let mut store = Store::new(pool).listening_on(listener);
        if checked {
            let watch = schema::new_watch();
            schema::spawn_watch(
                store.pool.clone(),
                Arc::downgrade(&watch),
                migrate::POSTGRES,
            );
            store.schema = Some(watch);
        }
        Ok(store)
    }

    pub(super) fn ensure_listening(&self) {
        if self.listening.swap(true, Ordering::SeqCst) {
            return;
        }
        let Some(pool) = self.listener.clone() else {
            return;
        };
        let ready = self.ready.clone();
        tokio::spawn(async move {
            loop {
                match listen(&pool, &ready).await {
                    Ok(()) => return,
                    Err(error) => {
                        tracing::warn!(%error, "LISTEN connection failed; polling until it is back")
                    }
                }
                tokio::time::sleep(LISTEN_RETRY).await;
            }
        });
    }
}

/// One connection to the server `options` name, tried until it answers, with backoff
/// (`CONNECT_RETRY_MIN` doubling to `CONNECT_RETRY_MAX`, jittered so a fleet started together does
/// not come back together), while the server is unavailable and `connect_timeout` leaves room for
/// another attempt. Each failed attempt is logged with its cause.
async fn first_connection(
    options: &PgConnectOptions,
    connect_timeout: Duration,
) -> Result<PgConnection, LedgerError> {
    let address = format!("{}:{}", options.get_host(), options.get_port());
    let started = tokio::time::Instant::now();
    let mut pauses = ExponentialBuilder::default()
        .with_min_delay(CONNECT_RETRY_MIN)
        .with_max_delay(CONNECT_RETRY_MAX)
        .with_jitter()
        .without_max_times()
        .build();
    let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let mut attempts = 0_u32;
    loop {
        attempts = attempts.saturating_add(1);
        let limit = connect_timeout
            .saturating_sub(started.elapsed())
            .clamp(CONNECT_RETRY_MIN, CONNECT_ATTEMPT_TIMEOUT);
        let cause = match tokio::time::timeout(limit, PgConnection::connect_with(options)).await {
            Ok(Ok(conn)) => return Ok(conn),
            Ok(Err(e)) => e,
            Err(_) => sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {} ms", millis(limit)),
            )),
        };
        let waited = started.elapsed();
        // The last pause is cut short so that the last attempt still has the shortest pause's time
        // to answer before `connect_timeout`.
        let left = connect_timeout.saturating_sub(waited + CONNECT_RETRY_MIN);
        let pause = pauses.next().unwrap_or(CONNECT_RETRY_MAX).min(left);
        if !unavailable(&cause) || left.is_zero() {
            return Err(LedgerError::Connect {
                address,
                attempts,
                waited_ms: millis(waited),
                cause,
            });
        }
        tracing::warn!(%address, attempt = attempts, waited_ms = millis(waited),
            retry_in_ms = millis(pause), cause = %cause, "the database is not reachable yet; retrying");
        tokio::time::sleep(pause).await;
    }
}

/// Sets the statement timeout for the connection's session, and turns JIT compilation off. Statements,
/// not startup parameters, so that a pooler in session mode passes them to the server connection it
/// binds. JIT is for long analytic queries: on the ledger's, whose row counts the planner cannot
/// know (a claim's plan of lanes, a batch's rows read from JSON), it estimated a 1,000,000-row cost
/// and compiled for 160–230 ms a claim that runs in 5 ms (issue 51, EXPLAIN ANALYZE).
pub(super) const SET_STATEMENT_TIMEOUT: &str = "SET jit = off; SET statement_timeout = 15000";
/// The session's statement timeout in milliseconds, as the server applies it.
const SHOW_STATEMENT_TIMEOUT: &str =
    "SELECT setting::bigint FROM pg_settings WHERE name = 'statement_timeout'";

/// Runs [`SET_STATEMENT_TIMEOUT`] (and JIT off) on a new connection (the pool's `after_connect`).
async fn session_settings(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(SET_STATEMENT_TIMEOUT).execute(conn).await?;
    Ok(())
}

/// Reads the statement timeout back at start: a server, or something between, that does not keep
/// it (issue 50: a create behind a held lock answered after 28.9 s instead of failing at 15 s)
/// stops the process with the reason instead of running without the limit.
async fn check_session_settings(conn: &mut PgConnection) -> Result<(), LedgerError> {
    let found: i64 = sqlx::query_scalar(SHOW_STATEMENT_TIMEOUT)
        .persistent(named_statements())
        .fetch_one(&mut *conn)
        .await?;
    let wanted = i64::try_from(STATEMENT_TIMEOUT_MS).unwrap_or(i64::MAX);
    if found == wanted {
        Ok(())
    } else {
        Err(LedgerError::SessionSetting {
            setting: "statement_timeout",
            wanted,
            found,
        })
    }
}

async fn listen(pool: &PgPool, ready: &Notify) -> Result<(), sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(READY_CHANNEL).await?;
    loop {
        listener.recv().await?;
        ready.notify_waiters();
    }
}

//! The production store: many workers on many machines share one Postgres.

use super::{LedgerError, migrate, store::impl_ledger};
use crate::clock::{Clock, SystemClock};
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::{Connection, PgPool};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::Notify;

/// How long a caller waits for a pooled connection before the call fails.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);
/// Statement timeout set on every connection: no ledger statement may run longer.
pub const STATEMENT_TIMEOUT_MS: u64 = 15_000;
/// The channel approvals notify on, so idle workers wake at once.
pub const READY_CHANNEL: &str = "payonce_ready";
/// Pause before re-opening a failed LISTEN connection.
const LISTEN_RETRY: Duration = Duration::from_secs(1);

pub(crate) const CLAIM: &str = "WITH picked AS ( \
       SELECT id FROM operations WHERE status = 'ready' AND available_at <= $1 \
       ORDER BY available_at LIMIT $2 FOR UPDATE SKIP LOCKED) \
     UPDATE operations o SET status = 'executing', attempt = o.attempt + 1, lease_owner = $3, \
       lease_expires_at = $4, updated_at = $1, last_event = 'claim', last_actor = $3, last_detail = NULL \
     FROM picked WHERE o.id = picked.id RETURNING o.*";
pub(crate) const NOTIFY_READY: Option<&str> = Some("SELECT pg_notify('payonce_ready', '')");

/// The Postgres ledger.
#[derive(Debug, Clone)]
pub struct PostgresLedger {
    pool: PgPool,
    ready: Arc<Notify>,
    listening: Arc<AtomicBool>,
}

impl PostgresLedger {
    /// Connects, installs the release guard and runs pending migrations.
    pub async fn connect(url: &str, max_connections: u32) -> Result<Self, LedgerError> {
        let options = PgConnectOptions::from_str(url)?
            .options([("statement_timeout", STATEMENT_TIMEOUT_MS.to_string())])
            .application_name("payonce");
        let pool = PgPoolOptions::new()
            .max_connections(max_connections.max(1))
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .after_release(|conn, _meta| {
                Box::pin(async move { Ok(!still_in_transaction(conn).await) })
            })
            .connect_with(options)
            .await?;
        let mut conn = pool.acquire().await?;
        migrate::postgres(&mut conn, SystemClock.now_ms()).await?;
        drop(conn);
        Ok(PostgresLedger {
            pool,
            ready: Arc::new(Notify::new()),
            listening: Arc::new(AtomicBool::new(false)),
        })
    }

    /// The pool, for tests and benchmarks that inspect the database directly.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    fn ensure_listening(&self) {
        if self.listening.swap(true, Ordering::SeqCst) {
            return;
        }
        let pool = self.pool.clone();
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

    async fn wait_ready(&self, max_wait: Duration) {
        self.ensure_listening();
        let _ = tokio::time::timeout(max_wait, self.ready.notified()).await;
    }

    fn wake_local(&self) {
        self.ready.notify_waiters();
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

/// Guards against sqlx 0.9 returning a connection to the pool inside an open transaction (a
/// cancelled `begin()` leaves `BEGIN` sent but uncounted; later autocommit writes on it would never
/// commit). `SAVEPOINT` succeeds only inside a transaction block, so success means: close it.
async fn still_in_transaction(conn: &mut sqlx::PgConnection) -> bool {
    if conn.is_in_transaction() {
        return true;
    }
    match sqlx::raw_sql("SAVEPOINT payonce_release_probe")
        .execute(&mut *conn)
        .await
    {
        Ok(_) => true,
        // 25P01 no_active_sql_transaction: the healthy case.
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("25P01") => false,
        Err(_) => true,
    }
}

impl_ledger!(PostgresLedger, "postgres", self_dialect);

/// The statements only Postgres has.
mod self_dialect {
    pub(crate) use super::{CLAIM, NOTIFY_READY};
}

//! The SQLite store: one connection, WAL for files, every statement named in one place.
//!
//! Writes that belong together (a payment, its events, its webhook deliveries and its idempotent response)
//! commit in one transaction, so a key is never remembered without its payment or the other way round.
//! Callers run store work in spawned tasks, so a client hanging up never cancels a transaction half way.

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
};
use sqlx::{Connection, Row};

mod groups;
mod keys;
mod refunds;
mod writes;
use std::str::FromStr;
use std::time::Duration;

/// How long a statement waits for the database lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a caller waits for the one connection.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30);

const SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS payment_intents (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        created INTEGER NOT NULL,
        created_ms INTEGER NOT NULL,
        amount INTEGER NOT NULL,
        currency TEXT NOT NULL,
        customer TEXT,
        description TEXT,
        payment_method TEXT,
        status TEXT NOT NULL CHECK (status IN ('requires_payment_method', 'requires_confirmation', 'requires_action',
            'processing', 'requires_capture', 'canceled', 'succeeded')),
        metadata TEXT NOT NULL,
        transfer_destination TEXT,
        latest_charge TEXT,
        last_payment_error TEXT,
        next_action TEXT,
        amount_received INTEGER NOT NULL,
        amount_refunded INTEGER NOT NULL DEFAULT 0 CHECK (amount_refunded <= amount_received),
        client_secret TEXT NOT NULL,
        idempotency_key TEXT,
        request_id TEXT NOT NULL,
        settle_at_ms INTEGER
    )",
    "CREATE INDEX IF NOT EXISTS payment_intents_customer ON payment_intents (customer, seq)",
    "CREATE INDEX IF NOT EXISTS payment_intents_processing ON payment_intents (status, settle_at_ms)",
    "CREATE TABLE IF NOT EXISTS idempotency_keys (
        key TEXT PRIMARY KEY,
        fingerprint TEXT NOT NULL,
        status INTEGER NOT NULL,
        body BLOB NOT NULL,
        created_ms INTEGER NOT NULL
    )",
    "CREATE TABLE IF NOT EXISTS events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        created INTEGER NOT NULL,
        type TEXT NOT NULL,
        body BLOB NOT NULL
    )",
    // `settle_at_ms`/`settle_to`: an asynchronous refund's final status and when it takes it.
    "CREATE TABLE IF NOT EXISTS refunds (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        payment_intent TEXT NOT NULL,
        charge TEXT,
        amount INTEGER NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed', 'canceled')),
        created INTEGER NOT NULL,
        idempotency_key TEXT,
        request_id TEXT NOT NULL,
        settle_at_ms INTEGER,
        settle_to TEXT CHECK (settle_to IN ('succeeded', 'failed')),
        body BLOB NOT NULL
    )",
    "CREATE INDEX IF NOT EXISTS refunds_payment_intent ON refunds (payment_intent, seq)",
    "CREATE INDEX IF NOT EXISTS refunds_settling ON refunds (settle_at_ms)",
    "CREATE TABLE IF NOT EXISTS webhook_outbox (
        event_seq INTEGER PRIMARY KEY,
        due_ms INTEGER NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        state TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'abandoned'))
    )",
];

/// What a refunds table made before asynchronous refunds lacks; added in place (old refunds were
/// all synchronous and succeeded) before the schema's indexes name the new columns.
const REFUNDS_UPGRADE: &[&str] = &[
    "ALTER TABLE refunds ADD COLUMN charge TEXT",
    "ALTER TABLE refunds ADD COLUMN status TEXT NOT NULL DEFAULT 'succeeded' \
     CHECK (status IN ('pending', 'succeeded', 'failed', 'canceled'))",
    "ALTER TABLE refunds ADD COLUMN created INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE refunds ADD COLUMN idempotency_key TEXT",
    "ALTER TABLE refunds ADD COLUMN request_id TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE refunds ADD COLUMN settle_at_ms INTEGER",
    "ALTER TABLE refunds ADD COLUMN settle_to TEXT CHECK (settle_to IN ('succeeded', 'failed'))",
    "UPDATE refunds SET created = COALESCE(json_extract(body, '$.created'), 0), \
     charge = json_extract(body, '$.charge'), request_id = 'req_before_upgrade'",
];
const SELECT_REFUNDS_HAS_STATUS: &str =
    "SELECT COUNT(*) FROM pragma_table_info('refunds') WHERE name = 'status'";
const SELECT_REFUNDS_EXISTS: &str =
    "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'refunds'";

/// Brings a refunds table from a file made before asynchronous refunds up to the current columns,
/// in one transaction; a new file or a current one is left alone.
async fn upgrade_refunds(pool: &SqlitePool) -> Result<(), sqlx::Error> {
    let exists: i64 = sqlx::query_scalar(SELECT_REFUNDS_EXISTS)
        .fetch_one(pool)
        .await?;
    let current: i64 = sqlx::query_scalar(SELECT_REFUNDS_HAS_STATUS)
        .fetch_one(pool)
        .await?;
    if exists == 0 || current == 1 {
        return Ok(());
    }
    let mut tx = pool.begin().await?;
    for statement in REFUNDS_UPGRADE {
        sqlx::query(*statement).execute(&mut *tx).await?;
    }
    tx.commit().await
}

macro_rules! payment_columns {
    () => {
        "seq, id, created, created_ms, amount, currency, customer, description, payment_method, status, metadata, \
         transfer_destination, latest_charge, last_payment_error, next_action, amount_received, amount_refunded, \
         client_secret, idempotency_key, request_id, settle_at_ms"
    };
}

const SELECT_SAVED_RESPONSE: &str =
    "SELECT fingerprint, status, body FROM idempotency_keys WHERE key = ?1 AND created_ms >= ?2";
const DELETE_EXPIRED_KEYS: &str = "DELETE FROM idempotency_keys WHERE created_ms < ?1";
const SETTLE_PAYMENT: &str = "UPDATE payment_intents SET status = 'succeeded', latest_charge = ?2, \
    amount_received = amount, settle_at_ms = NULL WHERE id = ?1 AND status = 'processing'";
const SELECT_EVENTS: &str =
    "SELECT seq, body FROM events WHERE seq < ?1 ORDER BY seq DESC LIMIT ?2";
const SELECT_EVENT_SEQ: &str = "SELECT seq FROM events WHERE id = ?1";
const SELECT_OUTBOX_DUE: &str = "SELECT o.event_seq, o.attempts, e.body FROM webhook_outbox o \
    JOIN events e ON e.seq = o.event_seq WHERE o.state = 'pending' AND o.due_ms <= ?1 ORDER BY o.event_seq LIMIT ?2";
const SELECT_OUTBOX_PENDING_OLDEST: &str =
    "SELECT MIN(due_ms) FROM webhook_outbox WHERE state = 'pending'";
const MARK_DELIVERED: &str =
    "UPDATE webhook_outbox SET state = 'delivered', attempts = attempts + 1 WHERE event_seq = ?1";
const MARK_RETRY: &str =
    "UPDATE webhook_outbox SET attempts = ?2, due_ms = ?3 WHERE event_seq = ?1";
const MARK_ABANDONED: &str =
    "UPDATE webhook_outbox SET state = 'abandoned', attempts = ?2 WHERE event_seq = ?1";

const SELECT_PAYMENT_BY_ID: &str = concat!(
    "SELECT ",
    payment_columns!(),
    " FROM payment_intents WHERE id = ?1"
);
const SELECT_PAYMENTS_LIST: &str = concat!(
    "SELECT ",
    payment_columns!(),
    " FROM payment_intents WHERE (?1 IS NULL OR customer = ?1) AND created >= ?2 AND created <= ?3 AND seq < ?4 \
     ORDER BY seq DESC LIMIT ?5"
);
const SELECT_PAYMENTS_VISIBLE: &str = concat!(
    "SELECT ",
    payment_columns!(),
    " FROM payment_intents WHERE created_ms <= ?1 ORDER BY seq DESC LIMIT ?2"
);
const SELECT_PAYMENTS_AFTER: &str = concat!(
    "SELECT ",
    payment_columns!(),
    " FROM payment_intents WHERE seq > ?1 ORDER BY seq ASC LIMIT ?2"
);
const SELECT_PROCESSING_DUE: &str = concat!(
    "SELECT ",
    payment_columns!(),
    " FROM payment_intents WHERE status = 'processing' AND settle_at_ms <= ?1 ORDER BY seq LIMIT ?2"
);

/// One PaymentIntent as stored.
#[derive(Debug, Clone)]
pub(crate) struct PaymentRow {
    pub(crate) seq: i64,
    pub(crate) id: String,
    pub(crate) created: i64,
    pub(crate) created_ms: i64,
    pub(crate) amount: i64,
    pub(crate) currency: String,
    pub(crate) customer: Option<String>,
    pub(crate) description: Option<String>,
    pub(crate) payment_method: Option<String>,
    pub(crate) status: String,
    /// JSON object text.
    pub(crate) metadata: String,
    pub(crate) transfer_destination: Option<String>,
    pub(crate) latest_charge: Option<String>,
    /// JSON text.
    pub(crate) last_payment_error: Option<String>,
    /// JSON text.
    pub(crate) next_action: Option<String>,
    pub(crate) amount_received: i64,
    pub(crate) amount_refunded: i64,
    pub(crate) client_secret: String,
    pub(crate) idempotency_key: Option<String>,
    pub(crate) request_id: String,
    pub(crate) settle_at_ms: Option<i64>,
}

fn payment_row(r: &SqliteRow) -> Result<PaymentRow, sqlx::Error> {
    Ok(PaymentRow {
        seq: r.try_get("seq")?,
        id: r.try_get("id")?,
        created: r.try_get("created")?,
        created_ms: r.try_get("created_ms")?,
        amount: r.try_get("amount")?,
        currency: r.try_get("currency")?,
        customer: r.try_get("customer")?,
        description: r.try_get("description")?,
        payment_method: r.try_get("payment_method")?,
        status: r.try_get("status")?,
        metadata: r.try_get("metadata")?,
        transfer_destination: r.try_get("transfer_destination")?,
        latest_charge: r.try_get("latest_charge")?,
        last_payment_error: r.try_get("last_payment_error")?,
        next_action: r.try_get("next_action")?,
        amount_received: r.try_get("amount_received")?,
        amount_refunded: r.try_get("amount_refunded")?,
        client_secret: r.try_get("client_secret")?,
        idempotency_key: r.try_get("idempotency_key")?,
        request_id: r.try_get("request_id")?,
        settle_at_ms: r.try_get("settle_at_ms")?,
    })
}

/// An event to insert, rendered.
#[derive(Debug, Clone)]
pub(crate) struct NewEvent {
    pub(crate) id: String,
    pub(crate) created: i64,
    pub(crate) kind: &'static str,
    pub(crate) body: Vec<u8>,
}

/// A response remembered under an idempotency key.
#[derive(Debug, Clone)]
pub(crate) struct SavedResponse {
    pub(crate) fingerprint: String,
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
}

/// What to remember under a key, committed with the work it answers for.
#[derive(Debug, Clone)]
pub(crate) struct KeyRecord {
    pub(crate) key: String,
    pub(crate) fingerprint: String,
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
    pub(crate) created_ms: i64,
}

/// A pending webhook delivery.
#[derive(Debug, Clone)]
pub(crate) struct OutboxRow {
    pub(crate) event_seq: i64,
    pub(crate) attempts: i64,
    pub(crate) body: Vec<u8>,
}

/// The simulator's database.
#[derive(Debug, Clone)]
pub(crate) struct Store {
    pool: SqlitePool,
    /// For an in-memory database: a second connection that is never used, so the database outlives
    /// the pool's connection. sqlx closes that connection when it cannot trust its state (a query
    /// cancelled half way, a failed release check); without the anchor that silently replaced the
    /// whole simulator with an empty database (found by the chaos soak: "no such table").
    _anchor: Option<std::sync::Arc<sqlx::SqliteConnection>>,
    /// The queue of key lookups and payment commits run in groups (`groups`).
    groups: groups::Queue,
    /// Which keys may have a remembered response, and the newest `created_ms` saved under each
    /// (`keys`): a key it does not hold, or holds older than a lookup's window, has none, and the
    /// lookup answers without a statement.
    keys: keys::KeyIndex,
}

type Tx<'a> = sqlx::Transaction<'a, sqlx::Sqlite>;

pub(crate) use groups::PaymentCommit;
pub(crate) use refunds::{RefundCommit, RefundPage, RefundRow, RefundSettle};
use writes::insert_events;

/// Runs store work in its own task so a client hanging up cannot cancel it half way.
pub(crate) async fn detached<T: Send + 'static>(
    work: impl Future<Output = Result<T, sqlx::Error>> + Send + 'static,
) -> Result<T, String> {
    match tokio::spawn(work).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

impl Store {
    /// Opens (creating if needed) `sqlite::memory:`, a `sqlite:` URL or a file path, and creates the schema.
    pub(crate) async fn open(database: &str) -> Result<Store, sqlx::Error> {
        let memory = database.contains(":memory:") || database.contains("mode=memory");
        // sqlx opens `sqlite::memory:` as a uniquely named shared-cache database, so the anchor
        // below and the pool's (possibly replaced) connection see the same data.
        let options = if database.starts_with("sqlite:") {
            SqliteConnectOptions::from_str(database)?
        } else {
            SqliteConnectOptions::new().filename(database)
        };
        let anchor = if memory {
            Some(std::sync::Arc::new(
                sqlx::ConnectOptions::connect(&options).await?,
            ))
        } else {
            None
        };
        let mut options = options.create_if_missing(true).busy_timeout(BUSY_TIMEOUT);
        if !memory {
            options = options.journal_mode(SqliteJournalMode::Wal);
        }
        // One connection, never recycled (the anchor keeps an in-memory database alive if it is).
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .after_release(|conn, _meta| {
                Box::pin(async move {
                    // sqlx 0.9.0 can hand back a connection inside a transaction after a cancelled begin();
                    // roll it back rather than let later writes vanish into it.
                    if conn.is_in_transaction() {
                        tracing::error!(
                            "simulator connection released inside a transaction; rolling back"
                        );
                        sqlx::query("ROLLBACK").execute(&mut *conn).await?;
                    }
                    Ok(true)
                })
            })
            .connect_with(options)
            .await?;
        upgrade_refunds(&pool).await?;
        for statement in SCHEMA {
            sqlx::query(*statement).execute(&pool).await?;
        }
        let keys = keys::KeyIndex::load(&pool).await?;
        Ok(Store {
            groups: groups::start(pool.clone()),
            pool,
            _anchor: anchor,
            keys,
        })
    }

    /// Closes the connection.
    pub(crate) async fn close(&self) {
        self.pool.close().await;
    }

    /// The response remembered under `key`, if it was saved at or after `not_before_ms`.
    pub(crate) async fn saved_response(
        &self,
        key: &str,
        not_before_ms: i64,
    ) -> Result<Option<SavedResponse>, sqlx::Error> {
        if !self.keys.may_hold(key, not_before_ms) {
            return Ok(None);
        }
        groups::lookup(&self.groups, key, not_before_ms).await
    }

    /// Commits a new PaymentIntent with its events, webhook deliveries and idempotent response, in a
    /// group with whatever other payments are waiting (`groups`). `hold` is dropped once the commit has
    /// finished, even if the caller stopped waiting.
    pub(crate) async fn commit_payment(
        &self,
        commit: PaymentCommit,
        hold: impl Send + 'static,
    ) -> Result<(), sqlx::Error> {
        // Indexed before it is written: the index may name a key the table lacks, never the reverse.
        if let Some(key) = &commit.key {
            self.keys.saved(&key.key, key.created_ms);
        }
        groups::commit(&self.groups, commit, Box::new(hold)).await
    }

    /// Forgets keys saved before `before_ms`.
    pub(crate) async fn forget_keys_before(&self, before_ms: i64) -> Result<u64, sqlx::Error> {
        let forgotten = sqlx::query(DELETE_EXPIRED_KEYS)
            .bind(before_ms)
            .execute(&self.pool)
            .await?
            .rows_affected();
        // After the rows: a key saved meanwhile is newer than `before_ms` and stays.
        self.keys.forget_before(before_ms);
        Ok(forgotten)
    }

    /// Moves a `processing` payment to `succeeded` with its event; false if it was no longer processing.
    pub(crate) async fn settle(
        &self,
        id: &str,
        latest_charge: &str,
        event: &NewEvent,
        webhooks_due_ms: Option<i64>,
    ) -> Result<bool, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        let done = sqlx::query(SETTLE_PAYMENT)
            .bind(id)
            .bind(latest_charge)
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 0 {
            tx.rollback().await?;
            return Ok(false);
        }
        insert_events(&mut tx, std::slice::from_ref(event), webhooks_due_ms).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// One PaymentIntent by id.
    pub(crate) async fn payment(&self, id: &str) -> Result<Option<PaymentRow>, sqlx::Error> {
        let row = sqlx::query(SELECT_PAYMENT_BY_ID)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(payment_row).transpose()
    }

    /// A page of PaymentIntents, newest first, older than `before_seq`.
    pub(crate) async fn list_payments(
        &self,
        customer: Option<&str>,
        created_gte: i64,
        created_lte: i64,
        before_seq: i64,
        limit: i64,
    ) -> Result<Vec<PaymentRow>, sqlx::Error> {
        let rows = sqlx::query(SELECT_PAYMENTS_LIST)
            .bind(customer)
            .bind(created_gte)
            .bind(created_lte)
            .bind(before_seq)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(payment_row).collect()
    }

    /// PaymentIntents created at or before `created_ms_lte`, newest first (the search index's view).
    pub(crate) async fn payments_visible(
        &self,
        created_ms_lte: i64,
        limit: i64,
    ) -> Result<Vec<PaymentRow>, sqlx::Error> {
        let rows = sqlx::query(SELECT_PAYMENTS_VISIBLE)
            .bind(created_ms_lte)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(payment_row).collect()
    }

    /// PaymentIntents created after the one numbered `after_seq`, oldest first, up to `limit`.
    pub(crate) async fn payments_after(
        &self,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<PaymentRow>, sqlx::Error> {
        let rows = sqlx::query(SELECT_PAYMENTS_AFTER)
            .bind(after_seq)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(payment_row).collect()
    }

    /// `processing` payments whose settle time has come.
    pub(crate) async fn processing_due(
        &self,
        now_ms: i64,
        limit: i64,
    ) -> Result<Vec<PaymentRow>, sqlx::Error> {
        let rows = sqlx::query(SELECT_PROCESSING_DUE)
            .bind(now_ms)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(payment_row).collect()
    }

    /// A page of event bodies, newest first, older than `before_seq`.
    pub(crate) async fn events(
        &self,
        before_seq: i64,
        limit: i64,
    ) -> Result<Vec<(i64, Vec<u8>)>, sqlx::Error> {
        let rows = sqlx::query(SELECT_EVENTS)
            .bind(before_seq)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("seq")?, r.try_get("body")?)))
            .collect()
    }

    /// The position of an event, for `starting_after`.
    pub(crate) async fn event_seq(&self, id: &str) -> Result<Option<i64>, sqlx::Error> {
        let row = sqlx::query(SELECT_EVENT_SEQ)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| r.try_get("seq")).transpose()
    }

    /// Deliveries due now, oldest event first.
    pub(crate) async fn outbox_due(
        &self,
        now_ms: i64,
        limit: i64,
    ) -> Result<Vec<OutboxRow>, sqlx::Error> {
        let rows = sqlx::query(SELECT_OUTBOX_DUE)
            .bind(now_ms)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| {
                Ok(OutboxRow {
                    event_seq: r.try_get("event_seq")?,
                    attempts: r.try_get("attempts")?,
                    body: r.try_get("body")?,
                })
            })
            .collect()
    }

    /// The earliest due time of any pending delivery.
    pub(crate) async fn outbox_next_due(&self) -> Result<Option<i64>, sqlx::Error> {
        let row = sqlx::query(SELECT_OUTBOX_PENDING_OLDEST)
            .fetch_one(&self.pool)
            .await?;
        row.try_get(0)
    }

    /// Marks a delivery done.
    pub(crate) async fn outbox_delivered(&self, event_seq: i64) -> Result<(), sqlx::Error> {
        sqlx::query(MARK_DELIVERED)
            .bind(event_seq)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Schedules another attempt.
    pub(crate) async fn outbox_retry(
        &self,
        event_seq: i64,
        attempts: i64,
        due_ms: i64,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(MARK_RETRY)
            .bind(event_seq)
            .bind(attempts)
            .bind(due_ms)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Gives up on a delivery.
    pub(crate) async fn outbox_abandon(
        &self,
        event_seq: i64,
        attempts: i64,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(MARK_ABANDONED)
            .bind(event_seq)
            .bind(attempts)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A simulator file written before asynchronous refunds opens, keeps its refunds (as the
    /// succeeded refunds they were) and takes new ones.
    #[tokio::test]
    async fn a_file_from_before_asynchronous_refunds_is_upgraded_in_place() {
        let dir = std::env::temp_dir().join(format!("payonce-sim-upgrade-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sim.db");
        let _ = std::fs::remove_file(&path);
        let url = format!("sqlite://{}?mode=rwc", path.display());
        {
            let pool = SqlitePool::connect(&url).await.unwrap();
            sqlx::query(
                "CREATE TABLE refunds (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, \
                 payment_intent TEXT NOT NULL, amount INTEGER NOT NULL, body BLOB NOT NULL)",
            )
            .execute(&pool)
            .await
            .unwrap();
            sqlx::query("INSERT INTO refunds (id, payment_intent, amount, body) VALUES ('re_old', 'pi_old', 300, ?1)")
                .bind(br#"{"id":"re_old","created":1700000000,"charge":"ch_old","status":"succeeded"}"#.to_vec())
                .execute(&pool)
                .await
                .unwrap();
            pool.close().await;
        }
        let store = Store::open(&format!("sqlite://{}", path.display()))
            .await
            .unwrap();
        let old = store.refund("re_old").await.unwrap().expect("kept");
        assert_eq!(
            (
                old.amount,
                old.status.as_str(),
                old.charge.as_deref(),
                old.created
            ),
            (300, "succeeded", Some("ch_old"), 1_700_000_000)
        );
        // Opening again finds a current table and changes nothing.
        store.close().await;
        let again = Store::open(&format!("sqlite://{}", path.display()))
            .await
            .unwrap();
        assert_eq!(again.all_refunds(10).await.unwrap().len(), 1);
        again.close().await;
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// sqlx closes the one pooled connection when it cannot trust it; an in-memory simulator must
    /// keep its data (and schema) through that.
    #[tokio::test]
    async fn an_in_memory_store_survives_its_connection_being_closed() {
        let store = Store::open("sqlite::memory:").await.unwrap();
        sqlx::query("INSERT INTO idempotency_keys (key, fingerprint, status, body, created_ms) VALUES ('k', 'f', 200, x'00', 1)")
            .execute(&store.pool)
            .await
            .unwrap();
        let mut conn = store.pool.acquire().await.unwrap();
        conn.close_on_drop();
        drop(conn);
        store.keys.saved("k", 1);
        let saved = store.saved_response("k", 0).await.unwrap();
        assert_eq!(
            saved.map(|s| s.fingerprint).as_deref(),
            Some("f"),
            "the data outlived the connection"
        );
    }
}

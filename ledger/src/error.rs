//! What the ledger refuses, as callers branch on it.

use super::{CLAIM_BATCH_MAX, PAGE_MAX, WRITE_HEADROOM_PAGES_MIN};
use payonce_core::id::OperationId;
use payonce_core::metrics::Counter;
use payonce_core::state::{IllegalTransition, Status};
use sqlx::sqlite::SqliteError;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What the ledger refuses, as callers branch on it.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The business key already names an operation with different details. Nothing was changed.
    #[error("business key already used for operation {existing} with different details")]
    Conflict {
        /// The operation that owns the business key.
        existing: OperationId,
    },
    /// No such operation in this tenant.
    #[error("operation not found")]
    NotFound,
    /// The approval's details hash is not the operation's current one.
    #[error("approval is for different details than the operation's current ones")]
    ApprovalMismatch,
    /// The operation's state does not allow the move.
    #[error("operation {id} is {status:?}: {why}")]
    WrongState {
        /// The operation.
        id: OperationId,
        /// Its current state.
        status: Status,
        /// What was refused.
        why: &'static str,
    },
    /// A refund would take its payment's unreleased refunds past the payment's amount. Nothing was
    /// changed.
    #[error(
        "a refund of {requested_minor} exceeds the {refundable_minor} still refundable on payment {payment}"
    )]
    OverRefund {
        /// The payment.
        payment: OperationId,
        /// What the refund asked for, minor units.
        requested_minor: i64,
        /// What its refunds leave, minor units (when the guard refused).
        refundable_minor: i64,
    },
    /// The operation a refund names cannot be refunded. Nothing was changed.
    #[error("operation {payment} cannot be refunded: {why}")]
    NotRefundable {
        /// The operation named as the payment.
        payment: OperationId,
        /// Why not.
        why: &'static str,
    },
    /// A fenced write lost: the attempt or state moved on (a stale worker, a racing reconciler).
    #[error("fenced write lost for {id} at attempt {attempt}")]
    Fenced {
        /// The operation.
        id: OperationId,
        /// The attempt the writer held.
        attempt: i64,
    },
    /// A caller asked for something outside a named limit; nothing was changed. The limit's own
    /// message is the whole message (it names the limit and the allowed range).
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// The state machine refused a move (a bug in the caller).
    #[error(transparent)]
    Illegal(#[from] IllegalTransition),
    /// A stored row could not be decoded (schema drift or corruption).
    #[error("stored row is invalid: {0}")]
    Corrupt(String),
    /// The store is about to run out of room: fewer than [`WRITE_HEADROOM_PAGES_MIN`] pages left
    /// under its page limit or on its disk (the readiness probe, `Operations::probe_write`).
    /// Nothing was changed.
    #[error(
        "only {headroom_pages} pages left for writes (at least {WRITE_HEADROOM_PAGES_MIN} wanted)"
    )]
    Full {
        /// Pages the store may still grow by (the least of its limit's and its disk's).
        headroom_pages: i64,
    },
    /// The database failed. Its error is part of the message and not a `source()`: a log line that
    /// prints the error names the cause, and chain walkers (the api's `cause_chain`, anyhow's `{:#}`)
    /// do not print it twice.
    #[error("database error: {}", cause_text(.0))]
    Database(sqlx::Error),
    /// The ledger's schema lacks migrations this binary was built with: a serving process refuses
    /// to start (or stops being ready) rather than migrate the ledger under other processes.
    #[error(
        "the ledger's schema is behind this binary (migrations {missing:?} are not applied): run payonce migrate with this release before starting it"
    )]
    SchemaBehind {
        /// The migrations this binary needs that the ledger has not applied.
        missing: Vec<i64>,
    },
    /// The ledger's schema has a contract step this binary is too old to run beside
    /// (docs/decisions/004-expand-contract-migrations.md).
    #[error(
        "the ledger's schema is ahead of this binary by an incompatible migration: {version} is a contract step that only binaries knowing migration {needs} may run beside, and this one knows up to {newest_known}; deploy a newer release"
    )]
    SchemaIncompatible {
        /// The contract step.
        version: i64,
        /// The oldest migration a binary must know to run beside it.
        needs: i64,
        /// The newest migration this binary knows.
        newest_known: i64,
    },
    /// The timer's schema check refused the schema this process was started on: it has changed
    /// since (the message is the check's [`LedgerError::SchemaBehind`] or
    /// [`LedgerError::SchemaIncompatible`]).
    #[error("{0}")]
    SchemaRefused(String),
    /// The ledger's statements met a schema they were not written for (a column or table gone, a
    /// type changed) within [`SCHEMA_FAILURE_UNREADY`]: readiness fails until they stop.
    #[error(
        "a ledger statement failed {ago_ms} ms ago on a schema it was not written for: {cause}"
    )]
    SchemaDrift {
        /// How long ago, ms.
        ago_ms: u64,
        /// The database's message.
        cause: String,
    },
    /// The server (or a pooler in front of it) does not keep a session setting the ledger set on
    /// its connection: it would run without that limit (docs/runbook.md, "Deploying on managed
    /// Postgres").
    #[error(
        "the database session's {setting} is {found} after setting it to {wanted}: a pooler in \
         transaction mode does not keep session settings; use session pooling or a direct \
         connection (docs/runbook.md, \"Deploying on managed Postgres\")"
    )]
    SessionSetting {
        /// The setting.
        setting: &'static str,
        /// What the ledger set.
        wanted: i64,
        /// What the server answered.
        found: i64,
    },
    /// Opening the ledger found no database to talk to: it kept refusing or failing within the
    /// connect timeout, or refused in a way a retry cannot change (credentials, no such database).
    #[error(
        "could not connect to the database at {address} (attempts: {attempts} in {waited_ms} ms): {}",
        cause_text(.cause)
    )]
    Connect {
        /// The `host:port` tried.
        address: String,
        /// Connection attempts made.
        attempts: u32,
        /// How long it kept trying, ms.
        waited_ms: u64,
        /// The last attempt's error (in the message, as for [`LedgerError::Database`]).
        cause: sqlx::Error,
    },
}

/// A driver error as an operator reads it: the database's own message without the server's source
/// line that sqlx appends to a Postgres error ("role \"x\" does not exist at line 768" names a line
/// of Postgres's C code, not of anything the operator wrote).
pub fn cause_text(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::Database(db) => format!("error returned from database: {}", db.message()),
        other => other.to_string(),
    }
}

/// Storage failures ([`LedgerError::is_storage_failure`]) this process has met, for
/// `payonce_ledger_storage_failures_total`. Process-wide because the conversion from a driver
/// error, the one place every failure passes (a statement, a `COMMIT`, inside a transaction or
/// not), has no store at hand.
static STORAGE_FAILURES: std::sync::LazyLock<Counter> = std::sync::LazyLock::new(Counter::default);

/// Storage failures met by this process so far (see [`STORAGE_FAILURES`]).
pub fn storage_failures() -> u64 {
    STORAGE_FAILURES.get()
}

/// The counter behind [`storage_failures`], for `/metrics`.
pub fn storage_failures_counter() -> &'static Counter {
    &STORAGE_FAILURES
}

impl From<sqlx::Error> for LedgerError {
    fn from(e: sqlx::Error) -> Self {
        let e = LedgerError::Database(e);
        if e.is_storage_failure() {
            STORAGE_FAILURES.inc();
        }
        if let LedgerError::Database(sqlx::Error::Database(db)) = &e
            && db
                .code()
                .is_some_and(|c| SCHEMA_DRIFT_SQLSTATES.contains(&c.as_ref()))
        {
            schema_drift_seen(db.message());
        }
        e
    }
}

/// How long readiness fails after a ledger statement met a schema it was not written for: long
/// enough that a load balancer polling every few seconds sees it, short enough that a process
/// whose statements work again (a rolled back migration) comes back by itself.
pub const SCHEMA_FAILURE_UNREADY: Duration = Duration::from_secs(30);

/// SQLSTATEs a ledger statement meets only when the schema is not the one it was written for:
/// `feature_not_supported` (a stale cached plan), `undefined_column`, `undefined_table`,
/// `undefined_function`, `datatype_mismatch`, and `not_null_violation` (the ledger names every
/// column a row needs, so a NOT NULL it does not fill is a column it does not know).
const SCHEMA_DRIFT_SQLSTATES: [&str; 6] = ["0A000", "42703", "42P01", "42883", "42804", "23502"];

/// The last schema failure this process met: when, and the database's message.
/// Process-wide for the reason [`STORAGE_FAILURES`] is.
static SCHEMA_FAILURE: Mutex<Option<(Instant, String)>> = Mutex::new(None);

fn schema_drift_seen(message: &str) {
    if let Ok(mut last) = SCHEMA_FAILURE.lock() {
        *last = Some((Instant::now(), message.to_string()));
    }
}

/// The schema failure readiness reports: one met within [`SCHEMA_FAILURE_UNREADY`], if any.
pub fn recent_schema_failure() -> Option<LedgerError> {
    let last = SCHEMA_FAILURE.lock().ok()?.clone()?;
    let ago = last.0.elapsed();
    (ago < SCHEMA_FAILURE_UNREADY).then(|| LedgerError::SchemaDrift {
        ago_ms: u64::try_from(ago.as_millis()).unwrap_or(u64::MAX),
        cause: last.1,
    })
}

/// SQLSTATEs that mean "the server is going away or not taking connections": a failover, a
/// restart, a backend terminated by an operator, no free connection slot.
const UNAVAILABLE_SQLSTATES: [&str; 4] = ["57P01", "57P02", "57P03", "53300"];
/// `query_canceled`: a statement timeout, or a cancel request ([`timed_out`]).
const QUERY_CANCELED: &str = "57014";
/// SQLite primary result codes of a store that could not keep a write: `SQLITE_IOERR` (10) and
/// `SQLITE_FULL` (13) (sqlite.org/rescode.html; an extended code carries its primary one in its low
/// byte). SQLite has rolled the statement or the whole transaction back by then.
const STORAGE_SQLITE_CODES: [i32; 2] = [10, 13];
/// SQLSTATEs of the same on Postgres: `disk_full`, `io_error`.
const STORAGE_SQLSTATES: [&str; 2] = ["53100", "58030"];

impl LedgerError {
    /// Whether the database could not be reached or dropped the connection (a failover, a restart,
    /// a terminated backend, a full pool), ran out of its statement timeout (SQLSTATE 57014), or
    /// could not store a write (a full disk, an I/O error:
    /// [`is_storage_failure`](Self::is_storage_failure), [`LedgerError::Full`]): the caller answers
    /// "unavailable, retry" instead of an internal error. What ran before the drop is unknown to the
    /// caller, so only an idempotent request may be retried as it is (every create is: by business
    /// key).
    pub fn is_unavailable(&self) -> bool {
        if self.is_storage_failure() {
            return true;
        }
        match self {
            LedgerError::Full { .. } => true,
            LedgerError::Database(e) if timed_out(e) => true,
            LedgerError::Database(e) | LedgerError::Connect { cause: e, .. } => unavailable(e),
            _ => false,
        }
    }

    /// Whether the store refused to keep a write: out of space (`SQLITE_FULL`, Postgres
    /// `disk_full`) or an I/O error. Nothing of the statement or transaction that met it was stored.
    pub fn is_storage_failure(&self) -> bool {
        let LedgerError::Database(sqlx::Error::Database(db)) = self else {
            return false;
        };
        let Some(code) = db.code() else {
            return false;
        };
        if db.try_downcast_ref::<SqliteError>().is_some() {
            code.parse::<i32>()
                .is_ok_and(|code| STORAGE_SQLITE_CODES.contains(&(code & 0xff)))
        } else {
            STORAGE_SQLSTATES.contains(&code.as_ref())
        }
    }
}

/// Whether `e` says the server could not be reached or is not taking connections (see
/// [`LedgerError::is_unavailable`]); opening the ledger retries exactly these.
pub(crate) fn unavailable(e: &sqlx::Error) -> bool {
    match e {
        // A refused TLS handshake (an unknown CA, a name the certificate does not carry, a client
        // certificate the server rejects) reaches sqlx as the I/O error rustls wraps it in; it is
        // the configuration's, and a retry would only hide it for the whole connect timeout.
        sqlx::Error::Io(io) => !tls_refused(io),
        // No TLS where the URL requires it, an unreadable `sslrootcert`: configuration too.
        sqlx::Error::Tls(_) => false,
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            code.starts_with("08") || UNAVAILABLE_SQLSTATES.contains(&code.as_ref())
        }),
        _ => false,
    }
}

/// Whether the server cancelled the statement (`query_canceled`, SQLSTATE 57014): the statement
/// timeout every ledger connection sets (`SET_STATEMENT_TIMEOUT`) ran out, on a ledger stalled by
/// a lock or an overloaded server, or an operator cancelled it. Nothing of it was kept, and the
/// same request may succeed a moment later: unavailable, never an internal error (issue 53). Not
/// a reason to retry opening the ledger ([`unavailable`]): a connection's first statements do
/// not wait on locks.
fn timed_out(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.code().as_deref() == Some(QUERY_CANCELED))
}

/// Whether an I/O error is rustls refusing the handshake (its own error or the server's alert),
/// not the network failing.
fn tls_refused(io: &std::io::Error) -> bool {
    io.get_ref()
        .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some())
}

/// Which named limit a request broke (the api answers each with `400 invalid_request`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// A claim asked for no rows or more than [`CLAIM_BATCH_MAX`].
    #[error("claim batch must be 1..={CLAIM_BATCH_MAX}")]
    ClaimBatch,
    /// A tenant's share outside `priority::SHARE_MIN..=SHARE_MAX`, or a cap outside
    /// `1..=priority::CAP_PER_SECOND_MAX`.
    #[error("{0}")]
    Share(String),
    /// A lease shorter than one millisecond (the stored unit).
    #[error("lease TTL must be at least one millisecond")]
    LeaseTtl,
    /// A listing page of no rows or more than [`PAGE_MAX`].
    #[error("page size must be 1..={PAGE_MAX}")]
    PageSize,
    /// A sweep page of no rows or more than [`PAGE_MAX`].
    #[error("sweep batch must be 1..={PAGE_MAX}")]
    SweepBatch,
    /// An approval that would already have expired.
    #[error("approval expiry must be in the future")]
    ApprovalExpiry,
    /// An on-call resolution without a reason.
    #[error("a resolution needs a reason")]
    ResolutionReason,
    /// Resolving as succeeded without the processor's reference.
    #[error("resolving as succeeded needs the processor reference")]
    ResolutionReference,
    /// A console page of no rows or more than the console's page limit.
    #[error("console page size must be 1..={0}")]
    ConsolePageSize(u32),
    /// A database URL naming neither store.
    #[error("unsupported database URL {0:?}: expected postgres:// or sqlite:")]
    DatabaseUrl(String),
    /// An API key request outside the key limits (label, reason or duration; api's `KeyError`).
    #[error("{0}")]
    ApiKey(String),
    /// An assistant's refund proposal for a payment that already has
    /// [`PROPOSALS_OPEN_MAX`](super::refunds::PROPOSALS_OPEN_MAX) awaiting approval.
    #[error(
        "the payment already has {} refund proposals awaiting approval",
        super::refunds::PROPOSALS_OPEN_MAX
    )]
    RefundProposals,
    /// A tenant's operation retention period outside
    /// [`OPERATION_RETENTION_DAYS_MIN`](super::retention::OPERATION_RETENTION_DAYS_MIN)..=
    /// [`OPERATION_RETENTION_DAYS_MAX`](super::retention::OPERATION_RETENTION_DAYS_MAX) days.
    #[error(
        "an operation retention period must be {min}..={max} days (a card dispute can come {min} days after a payment); got {0}",
        min = super::retention::OPERATION_RETENTION_DAYS_MIN,
        max = super::retention::OPERATION_RETENTION_DAYS_MAX
    )]
    OperationRetention(u32),
    /// A batch of no operations or more than [`BATCH_ITEMS_MAX`](super::intake::BATCH_ITEMS_MAX).
    #[error(
        "a batch holds 1..={} operations; split a longer list into several batches",
        super::intake::BATCH_ITEMS_MAX
    )]
    BatchSize,
    /// A batch item whose business key an earlier item of the same batch already holds.
    #[error(
        "this business key is already item {0} of the batch (a batch names each business key once); nothing was written for this item"
    )]
    BatchRepeat(usize),
    /// A refund in a batch: refunds are created one by one, under the over-refund guard.
    #[error(
        "details.kind: a batch creates payments; refunds are created with POST /v1/refunds, which reads the payment from the ledger"
    )]
    BatchRefund,
    /// A batch item of another tenant than the batch's.
    #[error("a batch item belongs to another tenant than the batch")]
    BatchTenant,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_that_went_away_is_unavailable_and_nothing_else_is() {
        for gone in [
            sqlx::Error::PoolTimedOut,
            sqlx::Error::PoolClosed,
            sqlx::Error::WorkerCrashed,
            sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset)),
        ] {
            assert!(LedgerError::Database(gone).is_unavailable());
        }
        assert!(!LedgerError::Database(sqlx::Error::RowNotFound).is_unavailable());
        assert!(!LedgerError::NotFound.is_unavailable());
        assert!(LedgerError::Full { headroom_pages: 0 }.is_unavailable());
    }

    /// What a retry cannot change fails the first connect attempt: a handshake rustls refused
    /// (here an unknown CA), a server without TLS where the URL requires it.
    #[test]
    fn a_refused_tls_handshake_is_not_retried_as_unavailable() {
        let unknown_ca = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let refused = std::io::Error::new(std::io::ErrorKind::InvalidData, unknown_ca);
        assert!(!unavailable(&sqlx::Error::Io(refused)));
        assert!(!unavailable(&sqlx::Error::Tls(
            "server does not support TLS".into()
        )));
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        assert!(
            unavailable(&sqlx::Error::Io(reset)),
            "a dropped link still is"
        );
    }

    /// SQLite's own `SQLITE_FULL` (a database at its `max_page_count`) is a storage failure, and
    /// counted; a constraint it refuses is neither.
    #[tokio::test]
    async fn a_full_sqlite_database_is_a_storage_failure_and_a_constraint_is_not() {
        use sqlx::Connection;
        let mut conn = sqlx::SqliteConnection::connect("sqlite::memory:")
            .await
            .expect("an in-memory database");
        sqlx::raw_sql("CREATE TABLE t (v TEXT PRIMARY KEY); PRAGMA max_page_count = 3")
            .execute(&mut conn)
            .await
            .expect("the table");
        let before = storage_failures();
        let mut full = None;
        for i in 0..1_000 {
            let insert = sqlx::query("INSERT INTO t (v) VALUES ($1)")
                .bind(format!("{i:0>500}"))
                .execute(&mut conn)
                .await;
            if let Err(e) = insert {
                full = Some(LedgerError::from(e));
                break;
            }
        }
        let full = full.expect("three pages fill up");
        assert!(full.is_storage_failure(), "{full:?}");
        assert!(full.is_unavailable());
        assert!(storage_failures() > before);
        let taken = sqlx::query("INSERT INTO t (v) VALUES ($1)")
            .bind(format!("{:0>500}", 0))
            .execute(&mut conn)
            .await
            .expect_err("a duplicate key");
        let taken = LedgerError::from(taken);
        assert!(
            !taken.is_storage_failure() && !taken.is_unavailable(),
            "{taken:?}"
        );
    }

    #[test]
    fn a_database_failure_renders_with_its_cause_once() {
        let refused = std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "connection refused by 10.0.0.7:5432",
        );
        let e = LedgerError::Database(sqlx::Error::Io(refused));
        let rendered = e.to_string();
        assert!(rendered.starts_with("database error: "), "{rendered}");
        assert!(rendered.contains("refused by 10.0.0.7:5432"), "{rendered}");
        // What a chain walker (the api's `cause_chain`, anyhow's `{:#}`) prints: the cause once.
        let mut chain = rendered.clone();
        let mut next = std::error::Error::source(&e);
        while let Some(inner) = next {
            chain.push_str(": ");
            chain.push_str(&inner.to_string());
            next = inner.source();
        }
        assert_eq!(chain.matches("refused by").count(), 1, "{chain}");
    }
}

//! The test harness: a fresh Postgres database per test, a fresh SQLite ledger, waiting on a condition
//! with a deadline (never a bare sleep), and the `payonce` binary for tests that need real processes.

pub mod cluster;
pub mod postgres;
pub mod processes;
pub mod reconciler;
pub mod refunds;
pub mod replication;
pub mod rows;

/// [`rows::ready`], under the name most tests import.
pub use rows::ready as ready_operation;

use payonce_core::clock::Timestamp;
use payonce_core::details::{Details, RawDetails};
use payonce_core::id::TenantId;
use payonce_ledger::{self as ledger, Fence, RecordOutcome, Recorded, SharedLedger};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The wall clock's now: the one clock helper of the test binary (tests that move time use a
/// `ManualClock` instead).
pub fn now() -> Timestamp {
    use payonce_core::clock::Clock;
    payonce_core::clock::SystemClock.now()
}

/// The `payonce` binary built for this test run.
pub fn payonce_bin() -> &'static str {
    env!("CARGO_BIN_EXE_payonce")
}

/// The Python of `tests/{name}/.venv`, after running `tests/{name}/setup.sh` unless the venv holds
/// exactly the pins of `tests/{name}/requirements.txt` (the stamp `tests/pinned_venv.sh` writes)
/// and `also_ready` says the rest of the setup is in place: a fresh machine installs the packages
/// instead of skipping the test, and a ready one pays no interpreter start-up to find out.
pub fn pinned_python(name: &str, also_ready: impl FnOnce(&Path) -> bool) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(name);
    let pins = |file: &str| std::fs::read(dir.join(file)).ok();
    let stamped = pins(".venv/pins").is_some_and(|p| Some(p) == pins("requirements.txt"));
    if !(stamped && also_ready(&dir)) {
        let status = std::process::Command::new("bash")
            .arg(dir.join("setup.sh"))
            .status()
            .unwrap_or_else(|e| panic!("run tests/{name}/setup.sh: {e}"));
        assert!(status.success(), "tests/{name}/setup.sh failed: {status}");
    }
    dir.join(".venv/bin/python")
}

/// The request of a write a test makes as a worker: `actor` records `outcome` under `fence`.
pub fn recording<'a>(fence: &'a Fence, outcome: &'a Recorded, actor: &'a str) -> RecordOutcome<'a> {
    RecordOutcome {
        fence,
        outcome,
        actor,
    }
}

/// A Postgres ledger on a database of its own; the database is dropped with the handle returned
/// beside it, so keep that bound for the test (`let (ledger, _db) = …`).
pub async fn postgres_ledger() -> (SharedLedger, postgres::TestDatabase) {
    let database = postgres::fresh_database().await;
    let ledger = ledger::connect(database.url(), 20)
        .await
        .expect("connect to the test database");
    (ledger, database)
}

/// A Postgres ledger on a database of its own whose time is its callers' clocks
/// (`Store::on_callers_clock`), as SQLite's is: for tests that move a worker's or a reconciler's
/// time by hand (a manual clock, a clock ahead to lapse a lease at once) and the ledger's with it.
pub async fn postgres_ledger_on_callers_clock() -> (SharedLedger, postgres::TestDatabase) {
    let database = postgres::fresh_database().await;
    let ledger = ledger::postgres::PostgresLedger::connect(
        database.url(),
        20,
        ledger::CONNECT_TIMEOUT_DEFAULT,
    )
    .await
    .expect("connect to the test database")
    .on_callers_clock();
    (std::sync::Arc::new(ledger), database)
}

/// A private in-memory SQLite ledger.
pub async fn sqlite_ledger() -> SharedLedger {
    ledger::connect("sqlite::memory:", 1)
        .await
        .expect("open in-memory sqlite")
}

/// A new api key of the test tenant in `ledger`, for `role`, labelled `label`, made now (system
/// clock) as `payonce keys create` makes one: its secret.
pub async fn api_key(ledger: &SharedLedger, role: payonce_ledger::Role, label: &str) -> String {
    payonce_api::create_api_key(ledger.as_ref(), &tenant(), role, label, now())
        .await
        .expect("an api key")
}

/// A SQLite ledger file of a test's own in the temp directory (nothing is created until something
/// opens it); the file and its `-wal` and `-shm` companions are removed when this is dropped.
pub struct SqliteFile {
    /// Where the file is.
    pub path: std::path::PathBuf,
    /// Its URL: `sqlite:` and the path.
    pub url: String,
}

impl SqliteFile {
    /// A fresh file named `payonce-{what}-{random}.db`.
    pub fn new(what: &str) -> SqliteFile {
        let path = std::env::temp_dir().join(format!(
            "payonce-{what}-{}.db",
            payonce_core::id::random_hex(8)
        ));
        let url = format!("sqlite:{}", path.display());
        SqliteFile { path, url }
    }
}

impl Drop for SqliteFile {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.path.display()));
        }
    }
}

/// Both stores, for the conformance suite: every test runs against each (`for ledger in
/// every_store().await`). The Postgres database is dropped when the loop is done with them.
pub async fn every_store() -> Stores {
    let (postgres, database) = postgres_ledger().await;
    Stores {
        ledgers: vec![postgres, sqlite_ledger().await].into_iter(),
        _database: database,
    }
}

/// [`every_store`]'s ledgers, one store after the other, and the Postgres database they hold.
pub struct Stores {
    ledgers: std::vec::IntoIter<SharedLedger>,
    _database: postgres::TestDatabase,
}

impl Iterator for Stores {
    type Item = SharedLedger;
    fn next(&mut self) -> Option<SharedLedger> {
        self.ledgers.next()
    }
}

/// Waits until `check` returns `Some`, polling every 20 ms, failing the test after `deadline`.
pub async fn wait_for<T, F, Fut>(what: &str, deadline: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    // The poll cadence of the condition; a tick missed under load is not made up in a burst.
    let mut poll = tokio::time::interval(Duration::from_millis(20));
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        poll.tick().await;
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            start.elapsed() < deadline,
            "timed out after {deadline:?} waiting for {what}"
        );
    }
}

/// The key secret of every test ledger (fixed, so a test that stands for two processes, or a
/// restore, derives the same keys in both).
pub fn key_secret() -> payonce_core::intention::KeySecret {
    payonce_core::intention::KeySecret::parse(KEY_SECRET).unwrap()
}

/// [`key_secret`]'s text, for processes the tests start (`PAYONCE_KEY_SECRET`).
pub const KEY_SECRET: &str = "payonce-integration-tests-key-secret-0123456789";

/// The tenant most tests use.
pub fn tenant() -> TenantId {
    TenantId::parse("acme").unwrap()
}

/// Invoice details for `amount` minor units of usd with the given payment method.
pub fn details(invoice: &str, amount: i64, payment_method: &str) -> Details {
    Details::parse(&RawDetails {
        kind: "payment".into(),
        amount,
        currency: "usd".into(),
        customer: "cus_test".into(),
        payment_method: payment_method.into(),
        invoice: invoice.into(),
        destination: None,
        description: Some(format!("Invoice {invoice}")),
        refund_of: None,
    })
    .unwrap()
}

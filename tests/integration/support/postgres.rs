//! Postgres for tests: `DATABASE_URL` when set, else the server on 127.0.0.1:5432, else a throwaway
//! cluster started from the installed Postgres binaries. Never skipped silently: with no Postgres at
//! all, the test fails and says how to install one. Each call makes a new database, owned by a
//! [`TestDatabase`] that drops it when the test ends, passing or panicking; a run killed before its
//! handles dropped leaves databases the stale sweep of a later run drops.

use sqlx::Connection;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

const LOCAL_SERVER: &str = "postgres://postgres@127.0.0.1:5432/postgres";
const THROWAWAY_PORT: u16 = 55432;

/// What every test database's name starts with: `payonce_t_<unix seconds>_<random hex>`.
const TEST_DATABASE_PREFIX: &str = "payonce_t_";
/// A test database older than this was left by an earlier run (no run takes this long: CI's limit is
/// 90 minutes) and is dropped by the next [`fresh_database`]. Only a run killed before its
/// [`TestDatabase`] handles dropped leaves one (10 MiB each).
const STALE_TEST_DATABASE_AGE: Duration = Duration::from_secs(3 * 60 * 60);
/// How long dropping a test database at the end of a test may take before the drop gives up and
/// leaves it to the stale sweep (`WITH (FORCE)` ends its sessions, so this is a server in trouble).
const DROP_TIMEOUT: Duration = Duration::from_secs(30);

/// One test's database: its URL, and the database dropped (`DROP DATABASE … WITH (FORCE)`, which ends
/// any session still on it) when this handle is, the test passing or panicking. Keep it bound for as
/// long as the test uses the database (`let (ledger, _db) = …`: a bare `_` drops it at once).
#[must_use = "the database is dropped with this handle"]
pub struct TestDatabase {
    url: String,
    admin: String,
    name: String,
}

impl TestDatabase {
    /// The URL of the database.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl std::ops::Deref for TestDatabase {
    type Target = str;
    fn deref(&self) -> &str {
        &self.url
    }
}

impl std::fmt::Display for TestDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.url)
    }
}

impl std::fmt::Debug for TestDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("TestDatabase").field(&self.url).finish()
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let admin = std::mem::take(&mut self.admin);
        let name = std::mem::take(&mut self.name);
        // Drop cannot await, and runs inside the test's runtime, which refuses a nested `block_on`: a
        // thread of its own with a small runtime of its own does the drop, and the test waits for it.
        let dropping = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async {
                tokio::time::timeout(DROP_TIMEOUT, drop_database(&admin, &name))
                    .await
                    .map_err(|_| format!("no answer in {DROP_TIMEOUT:?}"))?
                    .map_err(|e| e.to_string())
            })?;
            Ok::<_, String>(name)
        });
        // Never panic here: this may run while a failed test unwinds.
        match dropping.join() {
            Ok(Ok(name)) => eprintln!("test database {name}: dropped"),
            Ok(Err(e)) => eprintln!("could not drop the test database {}: {e}", self.url),
            Err(_) => eprintln!("dropping the test database {} panicked", self.url),
        }
    }
}

/// Drops the database `name` on the server `admin` names; one already gone is not an error.
async fn drop_database(admin: &str, name: &str) -> Result<(), sqlx::Error> {
    let mut conn = sqlx::PgConnection::connect(admin).await?;
    // Made by `fresh_database` as prefix, digits and hex: nothing to quote.
    let drop = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
    let dropped = sqlx::raw_sql(sqlx::AssertSqlSafe(drop))
        .execute(&mut conn)
        .await
        .map(|_| ());
    conn.close().await.ok();
    dropped
}

fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// When a test database was made, read from its name; `None` for any other name (an older
/// naming included: those are left alone).
fn test_database_created_secs(name: &str) -> Option<u64> {
    let (secs, rest) = name.strip_prefix(TEST_DATABASE_PREFIX)?.split_once('_')?;
    let hex = !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_hexdigit());
    hex.then(|| secs.parse().ok()).flatten()
}

fn is_stale_test_database(name: &str, now_secs: u64) -> bool {
    test_database_created_secs(name)
        .is_some_and(|made| now_secs.saturating_sub(made) > STALE_TEST_DATABASE_AGE.as_secs())
}

/// Drops the test databases earlier runs left behind. Tests running at the same time may try the same
/// ones: a database already gone is not an error.
async fn drop_stale_test_databases(conn: &mut sqlx::PgConnection) {
    let names: Vec<String> =
        sqlx::query_scalar("SELECT datname FROM pg_database WHERE starts_with(datname, $1)")
            .bind(TEST_DATABASE_PREFIX)
            .fetch_all(&mut *conn)
            .await
            .unwrap_or_default();
    let now = unix_secs();
    for name in names.iter().filter(|n| is_stale_test_database(n, now)) {
        // The name parsed as prefix, digits and hex: nothing to quote.
        let drop = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
        if let Err(e) = sqlx::raw_sql(sqlx::AssertSqlSafe(drop))
            .execute(&mut *conn)
            .await
        {
            eprintln!("could not drop the stale test database {name}: {e}");
        }
    }
}

/// Applies every migration to the database `url` names, as `payonce migrate` does: serving
/// processes (`api`, `worker`, `reconciler`, `serve`) never migrate a Postgres ledger, they refuse a
/// schema behind them (issue 56).
pub async fn migrate(url: &str) {
    payonce_ledger::connect(url, 1)
        .await
        .unwrap_or_else(|e| panic!("migrating {url}: {e}"));
}

/// A new database with every migration applied (what `payonce migrate` leaves). For tests that
/// start serving processes on it.
pub async fn migrated_database() -> TestDatabase {
    let database = fresh_database().await;
    migrate(database.url()).await;
    database
}

/// Creates a new, empty database, dropped when the handle returned is.
pub async fn fresh_database() -> TestDatabase {
    let admin = admin_url().await;
    let name = format!(
        "{TEST_DATABASE_PREFIX}{}_{}",
        unix_secs(),
        payonce_core::id::random_hex(8)
    );
    let mut conn = sqlx::PgConnection::connect(&admin)
        .await
        .expect("connect to the admin database");
    drop_stale_test_databases(&mut conn).await;
    // A test database need not survive a crash of the server it shares (the throwaway cluster runs
    // with fsync off for the same reason; the crash scenarios start a cluster of their own): commits
    // return without waiting for the WAL flush, which is most of a small write's time.
    for statement in [
        format!("CREATE DATABASE {name}"),
        format!("ALTER DATABASE {name} SET synchronous_commit = off"),
    ] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(statement))
            .execute(&mut conn)
            .await
            .unwrap();
    }
    conn.close().await.ok();
    let url = match admin.rsplit_once('/') {
        Some((base, _)) => format!("{base}/{name}"),
        None => panic!("admin URL {admin} has no database part"),
    };
    eprintln!("test database {name}: created");
    TestDatabase { url, admin, name }
}

async fn reachable(url: &str) -> bool {
    match sqlx::PgConnection::connect(url).await {
        Ok(conn) => {
            conn.close().await.ok();
            true
        }
        Err(_) => false,
    }
}

async fn admin_url() -> String {
    if let Ok(url) = std::env::var("DATABASE_URL") {
        assert!(
            reachable(&url).await,
            "DATABASE_URL={url} is set but not reachable"
        );
        return url;
    }
    if reachable(LOCAL_SERVER).await {
        return LOCAL_SERVER.to_string();
    }
    let url = format!("postgres://postgres@127.0.0.1:{THROWAWAY_PORT}/postgres");
    if reachable(&url).await {
        return url;
    }
    start_throwaway_cluster();
    super::wait_for(
        "the throwaway Postgres cluster to accept connections",
        std::time::Duration::from_secs(10),
        || async { reachable(&url).await.then_some(()) },
    )
    .await;
    url
}

/// The newest installed Postgres `bin` directory, if any.
pub fn postgres_bin_dir() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("initdb").exists())
        .collect();
    dirs.sort();
    dirs.pop()
}

/// Runs `initdb` and `pg_ctl start` as the `postgres` user (Postgres refuses to run as root).
fn start_throwaway_cluster() {
    let Some(bin) = postgres_bin_dir() else {
        panic!(
            "no Postgres reachable (DATABASE_URL unset, nothing on 127.0.0.1:5432) and no Postgres binaries \
             under /usr/lib/postgresql to start one: install them with `apt-get install postgresql` or set \
             DATABASE_URL"
        );
    };
    let dir = std::env::temp_dir().join("payonce-throwaway-pg");
    let as_postgres = |program: PathBuf, args: &[&str]| {
        let status = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(program)
            .args(args)
            .status()
            .expect("run runuser");
        assert!(
            status.success(),
            "throwaway Postgres command failed: {status}"
        );
    };
    if !dir.join("PG_VERSION").exists() {
        std::fs::create_dir_all(&dir).unwrap();
        let _ = Command::new("chown")
            .args(["postgres:postgres"])
            .arg(&dir)
            .status();
        let d = dir.to_string_lossy().to_string();
        as_postgres(
            bin.join("initdb"),
            &["-D", &d, "-A", "trust", "-U", "postgres"],
        );
    }
    let d = dir.to_string_lossy().to_string();
    let opts = format!("-p {THROWAWAY_PORT} -k {d} -c listen_addresses=127.0.0.1 -c fsync=off");
    as_postgres(
        bin.join("pg_ctl"),
        &[
            "-D",
            &d,
            "-o",
            &opts,
            "-l",
            &format!("{d}/log"),
            "-w",
            "start",
        ],
    );
}

#[test]
fn only_this_suites_databases_older_than_the_limit_are_stale() {
    let now = 1_800_000_000;
    let limit = STALE_TEST_DATABASE_AGE.as_secs();
    let named = |made: u64| format!("{TEST_DATABASE_PREFIX}{made}_0123456789abcdef");
    assert!(is_stale_test_database(&named(now - limit - 1), now));
    assert!(
        !is_stale_test_database(&named(now - limit), now),
        "at the limit"
    );
    assert!(!is_stale_test_database(&named(now), now));
    assert!(
        !is_stale_test_database(&named(now + 60), now),
        "a clock behind another"
    );
    // Not ours, or not this naming: never dropped.
    for other in [
        "payonce_t_0123456789abcdef",
        "payonce_t_12_",
        "payonce_t_12_not-hex",
        "payonce_t_x_0123",
        "postgres",
        "test",
        "payonce",
    ] {
        assert!(!is_stale_test_database(other, now), "{other}");
    }
    assert_eq!(
        test_database_created_secs(&named(1_700_000_000)),
        Some(1_700_000_000)
    );
}

/// Whether a database named `name` exists on the test server.
async fn database_exists(name: &str) -> bool {
    let mut conn = sqlx::PgConnection::connect(&admin_url().await)
        .await
        .expect("connect to the admin database");
    let found: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_database WHERE datname = $1")
        .bind(name)
        .fetch_one(&mut conn)
        .await
        .unwrap();
    conn.close().await.ok();
    found == 1
}

#[test]
fn a_test_database_is_dropped_when_its_test_ends_passing_or_panicking() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Passing: the handle goes out of scope at the end of the test.
    let passed = runtime.block_on(async {
        let database = fresh_database().await;
        assert!(database_exists(&database.name).await);
        database.name.clone()
    });
    assert!(!runtime.block_on(database_exists(&passed)), "{passed}");
    // Panicking: the handle is dropped while the test unwinds.
    let name = std::sync::Mutex::new(String::new());
    let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(async {
            let database = fresh_database().await;
            *name.lock().unwrap() = database.name.clone();
            panic!("a failing test on {database}");
        })
    }));
    assert!(failed.is_err());
    let name = name.into_inner().unwrap();
    assert!(!name.is_empty());
    assert!(!runtime.block_on(database_exists(&name)), "{name}");
}

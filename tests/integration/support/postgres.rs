//! Postgres for tests: `DATABASE_URL` when set, else the server on 127.0.0.1:5432, else a throwaway
//! cluster started from the installed Postgres binaries. Never skipped silently: with no Postgres at
//! all, the test fails and says how to install one. Each call makes a new database.

use sqlx::Connection;
use std::path::PathBuf;
use std::process::Command;

const LOCAL_SERVER: &str = "postgres://postgres@127.0.0.1:5432/postgres";
const THROWAWAY_PORT: u16 = 55432;

/// Creates a new, empty database and returns its URL.
pub async fn fresh_database() -> String {
    let admin = admin_url().await;
    let name = format!("payonce_t_{}", payonce_shared::id::random_hex(8));
    let mut conn = sqlx::PgConnection::connect(&admin)
        .await
        .expect("connect to the admin database");
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
    match admin.rsplit_once('/') {
        Some((base, _)) => format!("{base}/{name}"),
        None => panic!("admin URL {admin} has no database part"),
    }
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

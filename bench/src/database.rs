//! Fresh databases, one per section, so no section measures another's leftovers.

use anyhow::Context;
use payonce_ledger::sqlite::SqliteLedger;
use payonce_ledger::{self as ledger, postgres::PostgresLedger};
use sqlx::Connection;
use std::path::PathBuf;

/// The server the bench creates its databases on, unless told otherwise.
pub const ADMIN_URL_DEFAULT: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// A database created for one section; dropped by [`ScratchDatabase::drop_now`].
#[derive(Debug)]
pub struct ScratchDatabase {
    admin_url: String,
    name: String,
    /// The URL of the new database.
    pub url: String,
}

impl ScratchDatabase {
    /// Creates an empty database on the server `admin_url` names.
    pub async fn create(admin_url: &str) -> anyhow::Result<Self> {
        let name = format!("payonce_bench_{}", payonce_core::id::random_hex(6));
        let mut conn = sqlx::PgConnection::connect(admin_url)
            .await
            .with_context(|| format!("connect to {admin_url}"))?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await?;
        conn.close().await.ok();
        let (base, _) = admin_url
            .rsplit_once('/')
            .context("the admin URL has no database part")?;
        Ok(ScratchDatabase {
            admin_url: admin_url.to_string(),
            url: format!("{base}/{name}"),
            name,
        })
    }

    /// Opens the payonce ledger on it (running the migrations) with at most `connections`.
    pub async fn ledger(&self, connections: u32) -> anyhow::Result<PostgresLedger> {
        PostgresLedger::connect(&self.url, connections, ledger::CONNECT_TIMEOUT_DEFAULT)
            .await
            .context("open the Postgres ledger")
    }

    /// Drops the database (the 1M-row ones are large); connections still open are cut.
    pub async fn drop_now(self) -> anyhow::Result<()> {
        let mut conn = sqlx::PgConnection::connect(&self.admin_url).await?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        )))
        .execute(&mut conn)
        .await?;
        conn.close().await.ok();
        Ok(())
    }
}

/// A SQLite ledger in a new file under the temp directory (a file, not memory: the single-node
/// case is durable).
pub async fn sqlite_file() -> anyhow::Result<(SqliteLedger, PathBuf)> {
    let path = std::env::temp_dir().join(format!(
        "payonce-bench-{}.sqlite",
        payonce_core::id::random_hex(6)
    ));
    let ledger = SqliteLedger::connect(&format!("sqlite:{}", path.display()))
        .await
        .context("open the SQLite ledger")?;
    Ok((ledger, path))
}

/// Removes a SQLite file and its WAL companions.
pub fn remove_sqlite(path: &std::path::Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(p));
    }
}

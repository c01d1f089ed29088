//! A throwaway Postgres cluster of one test's own (its own data directory and port), for tests that
//! restart Postgres: the shared server on 5432 is never stopped or restarted. Stopped and removed
//! on drop, also when the test fails.

use std::path::PathBuf;
use std::process::Command;

/// A running private cluster.
pub struct Cluster {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
}

fn as_postgres(program: PathBuf, args: &[&str]) {
    let status = Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .arg(&program)
        .args(args)
        .status()
        .expect("run runuser");
    assert!(
        status.success(),
        "{} {args:?} failed: {status}",
        program.display()
    );
}

impl Cluster {
    /// Initialises and starts a cluster on a free port (trust auth, fsync off).
    pub fn start() -> Cluster {
        let bin = super::postgres::postgres_bin_dir().expect(
            "a test that restarts Postgres needs the Postgres binaries under /usr/lib/postgresql",
        );
        let port = crate::serve::free_port();
        let dir = std::env::temp_dir().join(format!(
            "payonce-cluster-{}",
            payonce_shared::id::random_hex(6)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let _ = Command::new("chown")
            .arg("postgres:postgres")
            .arg(&dir)
            .status();
        let d = dir.to_string_lossy().to_string();
        as_postgres(
            bin.join("initdb"),
            &["-D", &d, "-A", "trust", "-U", "postgres", "--no-sync"],
        );
        let cluster = Cluster { bin, dir, port };
        cluster.pg_ctl(&["start"]);
        cluster
    }

    fn pg_ctl(&self, action: &[&str]) {
        let d = self.dir.to_string_lossy().to_string();
        let opts = format!(
            "-p {} -k {d} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=60",
            self.port
        );
        let log = format!("{d}/log");
        let mut args = vec![
            "-D",
            d.as_str(),
            "-o",
            opts.as_str(),
            "-l",
            log.as_str(),
            "-w",
        ];
        args.extend_from_slice(action);
        as_postgres(self.bin.join("pg_ctl"), &args);
    }

    /// The URL of database `name` (created by [`Cluster::create_database`]).
    pub fn url(&self, name: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }

    /// Creates database `name`.
    pub async fn create_database(&self, name: &str) {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(&self.url("postgres"))
            .await
            .unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
            .unwrap();
        conn.close().await.ok();
    }

    /// Restarts the server the hard way: `immediate` stops without a checkpoint and drops every
    /// connection, as a crash would; `start` brings it back (crash recovery runs).
    pub fn crash_restart(&self) {
        self.pg_ctl(&["-m", "immediate", "stop"]);
        self.pg_ctl(&["start"]);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let d = self.dir.to_string_lossy().to_string();
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .args(["-D", &d, "-m", "immediate", "-w", "stop"])
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

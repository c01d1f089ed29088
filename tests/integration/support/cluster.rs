//! A throwaway Postgres cluster of one test's own (its own data directory and port), for tests that
//! restart Postgres: the shared server on 5432 is never stopped or restarted. Stopped and removed
//! on drop, also when the test fails.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A private cluster: running once started, stopped and removed on drop.
pub struct Cluster {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    /// Server options beyond the defaults every cluster gets (`-c name=value ...`).
    settings: String,
}

/// Runs a Postgres program as the `postgres` OS user (the server refuses to run as root, and CI
/// runs as root), returning how it exited.
fn run_as_postgres(program: &Path, args: &[&str]) -> std::process::ExitStatus {
    Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .arg(program)
        .args(args)
        .status()
        .expect("run runuser")
}

/// Runs a Postgres program as the `postgres` OS user, panicking if it fails.
pub fn as_postgres(program: PathBuf, args: &[&str]) {
    let status = run_as_postgres(&program, args);
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
        let cluster = Cluster::initdb(bin, "");
        cluster.pg_ctl(&["start"]);
        cluster
    }

    /// A cluster initialised by `initdb` (trust auth) but not started, to run with the extra server
    /// `settings` (`-c name=value ...`): the caller may edit its configuration first.
    pub fn initdb(bin: PathBuf, settings: &str) -> Cluster {
        let cluster = Cluster::empty(bin, settings);
        let d = cluster.dir.to_string_lossy().to_string();
        as_postgres(
            cluster.bin.join("initdb"),
            &["-D", &d, "-A", "trust", "-U", "postgres", "--no-sync"],
        );
        cluster
    }

    /// A cluster whose data directory is empty and owned by `postgres`, for a base backup to fill
    /// before it is started with the extra server `settings`.
    pub fn empty(bin: PathBuf, settings: &str) -> Cluster {
        let dir = std::env::temp_dir().join(format!(
            "payonce-cluster-{}",
            payonce_core::id::random_hex(6)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let _ = Command::new("chown")
            .arg("postgres:postgres")
            .arg(&dir)
            .status();
        // The server refuses a data directory others can read; initdb fixes that itself, but
        // pg_basebackup keeps the mode of a directory that already exists.
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .unwrap();
        Cluster {
            bin,
            dir,
            port: crate::serve::free_port(),
            settings: settings.to_string(),
        }
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The port the server listens on (127.0.0.1 only).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Runs `pg_ctl` on this cluster with its options, waiting for the action to finish (`-w`).
    pub fn pg_ctl(&self, action: &[&str]) {
        let d = self.dir.to_string_lossy().to_string();
        let opts = format!(
            "-p {} -k {d} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=60 {}",
            self.port, self.settings
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
        let status = run_as_postgres(&self.bin.join("pg_ctl"), &args);
        if !status.success() {
            // pg_ctl only says to look at the log, which drop removes: the cause goes in the panic.
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            panic!(
                "pg_ctl {action:?} on {d} failed: {status}; its log ends:\n{}",
                tail.join("\n")
            );
        }
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

    /// Stops the server as a crash would: `immediate` writes no shutdown checkpoint and drops every
    /// connection.
    pub fn kill(&self) {
        self.pg_ctl(&["-m", "immediate", "stop"]);
    }

    /// Restarts the server the hard way: killed as by [`Cluster::kill`], then started again (crash
    /// recovery runs).
    pub fn crash_restart(&self) {
        self.kill();
        self.pg_ctl(&["start"]);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // No pid file: never started, or already killed; pg_ctl would only complain.
        if self.dir.join("postmaster.pid").exists() {
            let d = self.dir.to_string_lossy().to_string();
            let pg_ctl = self.bin.join("pg_ctl");
            let _ = run_as_postgres(&pg_ctl, &["-D", &d, "-m", "immediate", "-w", "stop"]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

//! What a measured stretch cost the server in one database, counted the way that does not depend
//! on the machine: WAL bytes and records, full-page images among them, commits and statements.
//!
//! WAL is one stream for the whole cluster, so other databases' writes (a test run beside the
//! bench, autovacuum elsewhere) would count in a plain `pg_current_wal_lsn()` difference. With
//! `pg_walinspect` (a contrib extension of Postgres 15) each record is attributed to the database
//! whose blocks it changes, and a commit to the database its transaction wrote; without it the
//! plain difference is reported and marked as such. Statements come from `pg_stat_statements`
//! when the server preloads it, else they are not reported.

use anyhow::Context;
use sqlx::{Connection, PgConnection, Row};

/// Where a measured stretch starts. Holds a connection with a temporary replication slot, so the
/// server keeps the stretch's WAL for [`Mark::cost`] to read (a checkpoint would recycle it); the
/// slot goes with the connection, whatever happens to the bench.
#[derive(Debug)]
pub struct Mark {
    conn: PgConnection,
    lsn: String,
    statements: Option<i64>,
}

/// What the stretch wrote.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cost {
    /// WAL bytes (the records' lengths, full-page images included).
    pub bytes: u64,
    /// WAL records.
    pub records: u64,
    /// Bytes of full-page images among [`Cost::bytes`].
    pub fpi_bytes: u64,
    /// Commit records.
    pub commits: u64,
    /// Statements executed in the database, when `pg_stat_statements` is loaded.
    pub statements: Option<u64>,
    /// Whether the records were attributed to the database (`pg_walinspect`); otherwise
    /// [`Cost::bytes`] is the whole cluster's LSN difference and the record counts are 0.
    pub attributed: bool,
}

/// Sums the stretch's records of the current database: those that change one of its blocks, and
/// the commits of transactions that did. `$1` the start.
const ATTRIBUTED: &str = "WITH r AS MATERIALIZED ( \
       SELECT xid, resource_manager, record_type, record_length, fpi_length, \
              block_ref LIKE '%rel %/' || (SELECT oid FROM pg_database WHERE datname = current_database()) || '/%' AS mine \
       FROM pg_get_wal_records_info($1::pg_lsn, pg_current_wal_flush_lsn())), \
     writers AS (SELECT DISTINCT xid FROM r WHERE mine AND xid <> '0'::xid) \
     SELECT count(*)::bigint AS records, coalesce(sum(record_length), 0)::bigint AS bytes, \
            coalesce(sum(fpi_length), 0)::bigint AS fpi_bytes, \
            count(*) FILTER (WHERE resource_manager = 'Transaction' AND record_type LIKE 'COMMIT%')::bigint AS commits \
     FROM r WHERE mine OR (resource_manager = 'Transaction' AND xid IN (SELECT xid FROM writers))";
/// The stretch's records of the current database by kind (`PAYONCE_BENCH_DEBUG`).
const BY_KIND: &str = "SELECT resource_manager || '/' || split_part(record_type, ' ', 1) AS kind, \
       count(*)::bigint AS records, sum(record_length)::bigint AS bytes \
     FROM pg_get_wal_records_info($1::pg_lsn, pg_current_wal_flush_lsn()) \
     WHERE block_ref LIKE '%rel %/' || (SELECT oid FROM pg_database WHERE datname = current_database()) || '/%' \
     GROUP BY 1 ORDER BY 3 DESC LIMIT 12";
/// Reserves WAL (from the last checkpoint's redo point) for as long as the connection lives.
const RESERVE: &str = "SELECT pg_create_physical_replication_slot( \
       'payonce_bench_' || pg_backend_pid(), true, true)";
const LSN: &str = "SELECT pg_current_wal_lsn()::text";
const LSN_DIFF: &str = "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint";
const STATEMENTS: &str = "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements \
     WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())";

impl Mark {
    /// Starts a stretch on the database at `url` (installing the two extensions there if the
    /// server has them; the bench connects as a superuser).
    pub async fn take(url: &str) -> anyhow::Result<Mark> {
        let mut conn = PgConnection::connect(url)
            .await
            .context("connect to count WAL")?;
        for extension in ["pg_walinspect", "pg_stat_statements"] {
            let create = format!("CREATE EXTENSION IF NOT EXISTS {extension}");
            let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(create))
                .execute(&mut conn)
                .await;
        }
        let statements = statements(&mut conn).await;
        // The slot keeps WAL from the last checkpoint's redo point on; the stretch starts now.
        if let Err(e) = sqlx::query(RESERVE).execute(&mut conn).await {
            // No slot to spare (max_replication_slots): a long stretch may lose its start.
            if std::env::var_os("PAYONCE_BENCH_DEBUG").is_some() {
                eprintln!("payonce-bench: no WAL reserved: {e}");
            }
        }
        let lsn: String = sqlx::query_scalar(LSN).fetch_one(&mut conn).await?;
        Ok(Mark {
            conn,
            lsn,
            statements,
        })
    }

    /// What was written since the mark.
    pub async fn cost(self) -> anyhow::Result<Cost> {
        let Mark {
            mut conn,
            lsn,
            statements: before,
        } = self;
        let statements = match (before, statements(&mut conn).await) {
            (Some(before), Some(after)) => u64::try_from(after - before).ok(),
            _ => None,
        };
        let cost = match sqlx::query(ATTRIBUTED)
            .bind(&lsn)
            .fetch_one(&mut conn)
            .await
        {
            Ok(row) => Cost {
                bytes: unsigned(row.try_get("bytes")?),
                records: unsigned(row.try_get("records")?),
                fpi_bytes: unsigned(row.try_get("fpi_bytes")?),
                commits: unsigned(row.try_get("commits")?),
                statements,
                attributed: true,
            },
            // No pg_walinspect (or the start's segment already recycled): the cluster's difference.
            Err(e) => {
                if std::env::var_os("PAYONCE_BENCH_DEBUG").is_some() {
                    eprintln!("payonce-bench: WAL not attributed: {e}");
                }
                let diff: i64 = sqlx::query_scalar(LSN_DIFF)
                    .bind(&lsn)
                    .fetch_one(&mut conn)
                    .await?;
                Cost {
                    bytes: unsigned(diff),
                    records: 0,
                    fpi_bytes: 0,
                    commits: 0,
                    statements,
                    attributed: false,
                }
            }
        };
        if cost.attributed && std::env::var_os("PAYONCE_BENCH_DEBUG").is_some() {
            let kinds = sqlx::query(BY_KIND).bind(&lsn).fetch_all(&mut conn).await?;
            for k in kinds {
                let (kind, records, bytes): (String, i64, i64) = (
                    k.try_get("kind")?,
                    k.try_get("records")?,
                    k.try_get("bytes")?,
                );
                eprintln!("payonce-bench: WAL {kind:<28} {records:>9} records {bytes:>12} B");
            }
        }
        conn.close().await.ok();
        Ok(cost)
    }
}

impl Cost {
    /// WAL bytes per item.
    pub fn bytes_per(&self, items: u64) -> f64 {
        self.bytes as f64 / items.max(1) as f64
    }

    /// `2,301 B, 14.0 records (FPI 120 B), 0.04 commits, 5.1 statements` per item.
    pub fn per(&self, items: u64) -> String {
        let n = items.max(1) as f64;
        let bytes = crate::report::thousands(self.bytes_per(items).round() as u64);
        if !self.attributed {
            return format!("{bytes} B (whole cluster: no pg_walinspect)");
        }
        let statements = self
            .statements
            .map_or("statements: no pg_stat_statements".into(), |s| {
                format!("{:.1} statements", s as f64 / n)
            });
        format!(
            "{bytes} B, {:.1} records (full-page images {} B), {:.3} commits, {statements}",
            self.records as f64 / n,
            (self.fpi_bytes as f64 / n).round(),
            self.commits as f64 / n,
        )
    }
}

async fn statements(conn: &mut PgConnection) -> Option<i64> {
    sqlx::query_scalar(STATEMENTS).fetch_one(conn).await.ok()
}

fn unsigned(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

//! What a serving process checks of a Postgres ledger's schema, at start and on a timer, instead of
//! migrating it: every migration it was built with is applied (else "run payonce migrate"), and
//! every applied migration it does not know is one it may run beside (an expand step, or a
//! contract step whose `needs` it has reached). The rule, and why a contract waits a release:
//! docs/decisions/004-expand-contract-migrations.md. Only `payonce migrate` changes the schema.

use super::LedgerError;
use super::migrate::Migration;
use sqlx::PgConnection;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// How often a serving process checks the schema again: a migration applied beside it (or a
/// rollback to an older schema) is noticed within this, and readiness answers for it.
pub const SCHEMA_CHECK_INTERVAL: Duration = Duration::from_secs(5);

/// The header that marks a migration as a contract step: `-- payonce: contract needs NNNN`, where
/// NNNN is the first migration of the release that stopped using what the step removes. A binary
/// that knows migration NNNN may run beside it; an older one refuses.
pub const CONTRACT_HEADER: &str = "-- payonce: contract needs ";

/// How a migration may change the schema under processes already running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Adds only what old code ignores (a nullable column, a column with a default, a table, an
    /// index): every binary that ran before may run after.
    Expand,
    /// Removes or tightens what old code may still use: only binaries that know migration `needs`
    /// may run beside it.
    Contract {
        /// The oldest migration a binary must know to run beside this one.
        needs: i64,
    },
}

/// The step a migration's SQL declares: a contract step by its [`CONTRACT_HEADER`] line, anything
/// else an expand step. A header whose version does not parse is refused (a typo must not turn a
/// contract into an expand).
pub fn step_of(sql: &str) -> Result<Step, String> {
    for line in sql.lines() {
        if let Some(rest) = line.trim().strip_prefix(CONTRACT_HEADER) {
            return rest
                .trim()
                .parse::<i64>()
                .map(|needs| Step::Contract { needs })
                .map_err(|e| format!("{line:?}: the version after `needs` does not parse: {e}"));
        }
    }
    Ok(Step::Expand)
}

/// The `needs` a migration records in `payonce_migrations` (`NULL` for an expand step).
pub(crate) fn needs_of(sql: &str) -> Option<i64> {
    match step_of(sql) {
        Ok(Step::Contract { needs }) => Some(needs),
        // A header that does not parse is caught by the migrations test; recorded as needing this
        // very binary's knowledge it errs on the side of older binaries refusing.
        Err(_) => Some(i64::MAX),
        Ok(Step::Expand) => None,
    }
}

/// One row of `payonce_migrations` as the check reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppliedMigration {
    /// The migration's number.
    pub version: i64,
    /// What a contract step recorded (`None` for an expand step, or one applied before steps were
    /// recorded).
    pub needs: Option<i64>,
}

/// A schema this binary may serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Exactly the migrations this binary was built with.
    Current,
    /// Newer migrations it does not know, each one it may run beside.
    AheadCompatible {
        /// Their numbers.
        unknown: Vec<i64>,
    },
}

/// What the schema of `applied` is to a binary built with `known`: behind (a known migration is
/// missing) and ahead by an incompatible step are errors naming what to do.
pub fn judge(known: &[i64], applied: &[AppliedMigration]) -> Result<Verdict, LedgerError> {
    let missing: Vec<i64> = known
        .iter()
        .copied()
        .filter(|v| !applied.iter().any(|a| a.version == *v))
        .collect();
    if !missing.is_empty() {
        return Err(LedgerError::SchemaBehind { missing });
    }
    let newest_known = known.iter().copied().max().unwrap_or(0);
    let unknown: Vec<&AppliedMigration> = applied
        .iter()
        .filter(|a| !known.contains(&a.version))
        .collect();
    if let Some(refused) = unknown
        .iter()
        .find(|a| a.needs.is_some_and(|needs| needs > newest_known))
    {
        return Err(LedgerError::SchemaIncompatible {
            version: refused.version,
            needs: refused.needs.unwrap_or_default(),
            newest_known,
        });
    }
    if unknown.is_empty() {
        Ok(Verdict::Current)
    } else {
        Ok(Verdict::AheadCompatible {
            unknown: unknown.iter().map(|a| a.version).collect(),
        })
    }
}

/// Whether the migrations table exists (an empty database has none; the check creates nothing).
const MIGRATIONS_TABLE_PRESENT: &str =
    "SELECT to_regclass('payonce_migrations') IS NOT NULL AS present";
/// The applied migrations, `needs_version` read through `to_jsonb` so that a table written by a
/// migrator from before steps were recorded (no such column) reads as all expand steps.
const APPLIED_MIGRATIONS: &str = "SELECT version, (to_jsonb(m) ->> 'needs_version')::bigint AS needs \
     FROM payonce_migrations m ORDER BY version";

/// Reads a Postgres ledger's applied migrations and judges them against `known`.
pub(crate) async fn check_postgres(
    conn: &mut PgConnection,
    known: &[Migration],
) -> Result<Verdict, LedgerError> {
    if !super::statement::behind_transaction_pooler() {
        return read_and_judge(conn, known).await;
    }
    // Behind a transaction pooler only a transaction keeps one server connection: an unnamed
    // statement's parse and its execution may otherwise meet different servers.
    use sqlx::Connection;
    let mut tx = conn.begin_with(super::statement::POOLED_BEGIN).await?;
    let verdict = read_and_judge(&mut tx, known).await;
    tx.rollback().await?;
    verdict
}

/// [`check_postgres`] on a connection (or in a transaction) as it is.
async fn read_and_judge(
    conn: &mut PgConnection,
    known: &[Migration],
) -> Result<Verdict, LedgerError> {
    let present: bool = sqlx::query_scalar(MIGRATIONS_TABLE_PRESENT)
        .persistent(super::statement::named_statements())
        .fetch_one(&mut *conn)
        .await?;
    let applied: Vec<AppliedMigration> = if present {
        sqlx::query_as::<_, (i64, Option<i64>)>(APPLIED_MIGRATIONS)
            .persistent(super::statement::named_statements())
            .fetch_all(&mut *conn)
            .await?
            .into_iter()
            .map(|(version, needs)| AppliedMigration { version, needs })
            .collect()
    } else {
        Vec::new()
    };
    let known: Vec<i64> = known.iter().map(|(v, _, _)| *v).collect();
    judge(&known, &applied)
}

/// Logs a schema this binary runs beside without knowing all of it: said once per change.
pub(crate) fn announce(verdict: &Verdict) {
    if let Verdict::AheadCompatible { unknown } = verdict {
        tracing::warn!(
            ?unknown,
            "the ledger's schema is ahead of this binary by migrations it may run beside \
             (expand steps, or contract steps it is past); running"
        );
    }
}

/// The latest check's refusal, shared by a store's clones and read by readiness: `None` while the
/// schema is one this binary may serve.
#[derive(Debug, Default)]
pub struct SchemaWatch {
    refusal: Mutex<Option<String>>,
}

impl SchemaWatch {
    /// Why the schema cannot be served now, if it cannot.
    pub fn refusal(&self) -> Option<String> {
        self.refusal.lock().map_or(None, |r| r.clone())
    }

    fn set(&self, refusal: Option<String>) {
        if let Ok(mut r) = self.refusal.lock() {
            *r = refusal;
        }
    }
}

/// Checks the schema every [`SCHEMA_CHECK_INTERVAL`] on a connection from `pool`, until the store
/// that owns `watch` is gone. A check that cannot reach the database changes nothing (the readiness
/// probe's own write answers for that).
pub(crate) fn spawn_watch(
    pool: sqlx::PgPool,
    watch: Weak<SchemaWatch>,
    known: &'static [Migration],
) {
    tokio::spawn(async move {
        let mut last: Option<Result<Verdict, String>> = None;
        loop {
            tokio::time::sleep(SCHEMA_CHECK_INTERVAL).await;
            let Some(watch) = watch.upgrade() else {
                return;
            };
            let verdict = match pool.acquire().await {
                Ok(mut conn) => check_postgres(&mut conn, known).await,
                Err(e) => Err(e.into()),
            };
            let verdict = match verdict {
                Ok(v) => Ok(v),
                Err(
                    e @ (LedgerError::SchemaBehind { .. } | LedgerError::SchemaIncompatible { .. }),
                ) => Err(e.to_string()),
                Err(other) => {
                    tracing::debug!(error = %other, "schema check skipped: the database did not answer");
                    continue;
                }
            };
            if last.as_ref() != Some(&verdict) {
                match &verdict {
                    Ok(v) => announce(v),
                    Err(refusal) => {
                        tracing::error!(%refusal, "this process can no longer serve the ledger's schema: not ready")
                    }
                }
            }
            watch.set(verdict.as_ref().err().cloned());
            last = Some(verdict);
            drop(watch);
        }
    });
}

/// A fresh watch, for a store that checks its schema.
pub(crate) fn new_watch() -> Arc<SchemaWatch> {
    Arc::default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(versions: &[(i64, Option<i64>)]) -> Vec<AppliedMigration> {
        versions
            .iter()
            .map(|&(version, needs)| AppliedMigration { version, needs })
            .collect()
    }

    #[test]
    fn a_schema_missing_a_known_migration_is_behind() {
        let err = judge(&[1, 2, 3], &applied(&[(1, None)])).expect_err("behind");
        assert!(matches!(&err, LedgerError::SchemaBehind { missing } if missing == &[2, 3]));
        assert!(err.to_string().contains("run payonce migrate"), "{err}");
        let empty = judge(&[1], &[]).expect_err("an empty database is behind");
        assert!(empty.to_string().contains("run payonce migrate"), "{empty}");
    }

    #[test]
    fn a_schema_ahead_by_expand_steps_or_contracts_this_binary_is_past_is_served() {
        assert_eq!(
            judge(&[1, 2], &applied(&[(1, None), (2, None)])).expect("current"),
            Verdict::Current
        );
        assert_eq!(
            judge(
                &[1, 2],
                &applied(&[(1, None), (2, None), (3, None), (4, Some(2))])
            )
            .expect("ahead, compatible"),
            Verdict::AheadCompatible {
                unknown: vec![3, 4]
            }
        );
    }

    #[test]
    fn a_schema_ahead_by_a_contract_this_binary_predates_is_refused() {
        let err = judge(
            &[1, 2],
            &applied(&[(1, None), (2, None), (3, None), (4, Some(3))]),
        )
        .expect_err("incompatible");
        assert!(
            matches!(
                err,
                LedgerError::SchemaIncompatible {
                    version: 4,
                    needs: 3,
                    newest_known: 2
                }
            ),
            "{err:?}"
        );
    }

    /// Statements that remove or tighten what a binary of the previous release may still use
    /// (docs/decisions/004-expand-contract-migrations.md): a migration with one is a contract step.
    fn contract_statements(sql: &str) -> Vec<String> {
        let code: String = sql
            .lines()
            .map(|l| l.split("--").next().unwrap_or_default())
            .collect::<Vec<_>>()
            .join(" ");
        let mut found = Vec::new();
        for statement in code.split(';') {
            let s = statement
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .to_uppercase();
            let destructive = s.contains("DROP COLUMN")
                || s.contains("DROP TABLE")
                || s.contains(" RENAME ")
                || (s.contains("ALTER COLUMN") && s.contains(" TYPE "))
                || s.contains("SET NOT NULL")
                || s.split("ADD COLUMN").skip(1).any(|column| {
                    let column = column.split(',').next().unwrap_or_default();
                    column.contains("NOT NULL") && !column.contains("DEFAULT")
                });
            if destructive {
                found.push(s);
            }
        }
        found
    }

    /// The rule over `migrations/postgres`: a migration that drops or renames a column or table,
    /// changes a column's type, makes a column NOT NULL or adds a NOT NULL column without a default
    /// declares itself a contract step, naming a migration at or before its own; every file of
    /// the folder is one the binary applies.
    #[test]
    fn every_postgres_migration_that_removes_or_tightens_is_a_contract_step() {
        use super::super::migrate::POSTGRES;
        for (version, name, sql) in POSTGRES {
            let step = step_of(sql).unwrap_or_else(|e| panic!("migration {version} {name}: {e}"));
            let destructive = contract_statements(sql);
            match step {
                Step::Expand => assert!(
                    destructive.is_empty(),
                    "migration {version} {name} removes or tightens what older binaries use, so it \
                     must start with `{CONTRACT_HEADER}NNNN` (docs/decisions/004-expand-contract-migrations.md): \
                     {destructive:?}"
                ),
                Step::Contract { needs } => assert!(
                    needs <= *version,
                    "migration {version} {name} needs {needs}, a migration after itself"
                ),
            }
        }
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations/postgres");
        for entry in std::fs::read_dir(&dir).expect("migrations/postgres") {
            let file = entry.expect("a directory entry").file_name();
            let file = file.to_string_lossy();
            let version: i64 = file
                .split('_')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{file}: not NNNN_name.sql"));
            assert!(
                POSTGRES.iter().any(|(v, name, _)| *v == version && file == format!("{version:04}_{name}.sql")),
                "{file} is not in migrate::POSTGRES"
            );
        }
    }

    #[test]
    fn the_rule_catches_each_kind_of_contract_statement() {
        for sql in [
            "ALTER TABLE operations DROP COLUMN invoice;",
            "ALTER TABLE operations RENAME COLUMN invoice TO invoice_id;",
            "ALTER TABLE operations ALTER COLUMN amount_minor TYPE numeric;",
            "ALTER TABLE operations ALTER COLUMN destination SET NOT NULL;",
            "ALTER TABLE operations ADD COLUMN region TEXT NOT NULL;",
            "DROP TABLE approval_codes;",
        ] {
            assert!(!contract_statements(sql).is_empty(), "{sql}");
        }
        for sql in [
            "ALTER TABLE operations ADD COLUMN x int; ALTER TABLE api_keys ADD COLUMN x int;",
            "ALTER TABLE operations ADD COLUMN region TEXT NOT NULL DEFAULT 'eu';",
            "-- we will DROP COLUMN x next release\nCREATE INDEX i ON operations (x);",
        ] {
            assert!(contract_statements(sql).is_empty(), "{sql}");
        }
    }

    #[test]
    fn the_contract_header_is_read_and_a_bad_one_refused() {
        assert_eq!(step_of("ALTER TABLE t ADD COLUMN x int;"), Ok(Step::Expand));
        assert_eq!(
            step_of("-- why\n-- payonce: contract needs 0031\nALTER TABLE t DROP COLUMN x;"),
            Ok(Step::Contract { needs: 31 })
        );
        assert!(step_of("-- payonce: contract needs soon\n").is_err());
    }
}

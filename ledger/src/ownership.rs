//! What an operation owns: every row that refers to it, read from the store's own catalog (the
//! foreign keys that lead to `operations`, directly or through another such table, and the tables
//! with an `operation_id` column but no key, as the Postgres audit trail has none for its hot path),
//! so a prune deletes the rows of a table a later migration adds without anyone keeping a list
//! (issue 53: `operation_cards` was missing from the hand-kept one and every prune stopped on its
//! key). Only the tables that keep such rows on their own terms are named here ([`KEPT_APART`]).
//!
//! The plan is a list of deletes, children before the tables they refer to, `operations` last;
//! each takes the JSON array of the operations' ids as `$1` and selects its rows through the
//! foreign keys, so a row that refers to an operation only through another table (a code through
//! its link) goes too. Names come from the catalog, never from input, and are quoted.

use super::LedgerError;
use super::dialect::Dialect;
use super::row::LedgerRow;
use super::statement::Stmt;
use super::store::Store;
use std::collections::{BTreeMap, BTreeSet};

/// The table every owned row leads to.
const OPERATIONS: &str = "operations";

/// Rows keyed by an operation's id with no foreign key (a directory kept beside the table for its
/// index, written in the same transaction): the catalog cannot name them.
const UNLINKED: [(&str, &str); 1] = [("operation_search", "id")];

/// Tables with an `operation_id` column and no foreign key on it whose rows outlive their
/// operation on their own terms, never deleted with it: tool-call correlation rows and webhook
/// payloads have their own retention periods (a pending hint is never deleted, whatever its
/// age), and a lost row's alert stays until it is reported.
const KEPT_APART: [&str; 3] = ["tool_calls", "processor_events", "lost_rows"];

/// The column naming an operation in a table that owns rows of it.
const OPERATION_COLUMN: &str = "operation_id";

/// Most tables a plan follows: a schema past it is not this ledger's.
const OWNED_TABLES_MAX: usize = 64;

/// Every foreign key of the ledger's schema on Postgres, first column and column count.
pub(crate) const FOREIGN_KEYS_POSTGRES: &str = "SELECT cl.relname::text AS table_name, \
     ca.attname::text AS column_name, pc.relname::text AS parent_name, \
     pa.attname::text AS parent_column, cardinality(c.conkey)::bigint AS columns \
     FROM pg_constraint c \
     JOIN pg_class cl ON cl.oid = c.conrelid \
     JOIN pg_class pc ON pc.oid = c.confrelid \
     JOIN pg_attribute ca ON ca.attrelid = c.conrelid AND ca.attnum = c.conkey[1] \
     JOIN pg_attribute pa ON pa.attrelid = c.confrelid AND pa.attnum = c.confkey[1] \
     WHERE c.contype = 'f' \
     AND cl.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = 'operations'::regclass) \
     AND pc.relnamespace = cl.relnamespace \
     ORDER BY cl.relname, c.conname";
/// Every foreign key of the ledger's schema on SQLite, first column and column count (a key
/// naming no parent column refers to the parent's primary key).
pub(crate) const FOREIGN_KEYS_SQLITE: &str = "SELECT m.name AS table_name, f.\"from\" AS column_name, \
     f.\"table\" AS parent_name, \
     COALESCE(f.\"to\", (SELECT p.name FROM pragma_table_info(f.\"table\") p WHERE p.pk = 1)) \
     AS parent_column, \
     (SELECT count(*) FROM pragma_foreign_key_list(m.name) g WHERE g.id = f.id) AS columns \
     FROM sqlite_master m JOIN pragma_foreign_key_list(m.name) f \
     WHERE m.type = 'table' AND f.seq = 0 ORDER BY m.name, f.id";

/// The ledger's tables with an [`OPERATION_COLUMN`] on Postgres (a partition's rows are its
/// parent's).
pub(crate) const KEYED_TABLES_POSTGRES: &str = "SELECT c.relname::text AS table_name \
     FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid \
     WHERE a.attname = 'operation_id' AND a.attnum > 0 AND NOT a.attisdropped \
     AND c.relkind IN ('r', 'p') AND NOT c.relispartition \
     AND c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = 'operations'::regclass) \
     ORDER BY c.relname";
/// The same on SQLite.
pub(crate) const KEYED_TABLES_SQLITE: &str = "SELECT m.name AS table_name \
     FROM sqlite_master m JOIN pragma_table_info(m.name) c \
     WHERE m.type = 'table' AND c.name = 'operation_id' ORDER BY m.name";

/// One foreign key of the catalog: `table.column` refers to `parent.parent_column`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignKey {
    /// The referring table.
    pub table: String,
    /// Its (first) referring column.
    pub column: String,
    /// The table referred to.
    pub parent: String,
    /// The column referred to.
    pub parent_column: String,
    /// How many columns the key has (the plan follows single-column keys only).
    pub columns: i64,
}

/// The deletes that remove a set of operations with every row they own, in an order no foreign
/// key refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedRows {
    tables: Vec<String>,
    deletes: Vec<String>,
}

impl OwnedRows {
    /// The plan for a schema's foreign `keys` and its tables with an [`OPERATION_COLUMN`]
    /// (`keyed`); `ids` is the store's table expression of the ids in `$1`. Refuses (with a
    /// sentence) a schema it cannot delete from safely: a key of several columns into an owned
    /// table, a cycle, or more than [`OWNED_TABLES_MAX`] tables.
    pub fn plan(
        keys: &[ForeignKey],
        keyed: &[String],
        ids: &str,
    ) -> Result<OwnedRows, LedgerError> {
        let refused = |why: String| LedgerError::Corrupt(format!("prune plan: {why}"));
        // A table naming an operation without a key on it: as if it had one (unless it keeps its
        // rows on its own terms).
        let unkeyed: Vec<ForeignKey> = keyed
            .iter()
            .filter(|t| t.as_str() != OPERATIONS && !KEPT_APART.contains(&t.as_str()))
            .filter(|t| {
                !keys
                    .iter()
                    .any(|k| &k.table == *t && k.column == OPERATION_COLUMN)
            })
            .map(|t| ForeignKey {
                table: t.clone(),
                column: OPERATION_COLUMN.to_string(),
                parent: OPERATIONS.to_string(),
                parent_column: "id".to_string(),
                columns: 1,
            })
            .collect();
        let keys: Vec<&ForeignKey> = keys.iter().chain(&unkeyed).collect();
        // The owned tables and the keys that make them owned (a self-reference is not one: a
        // refund's row refers to its payment in the same table, and goes first by the prune's rule).
        let mut owned: BTreeMap<&str, Vec<&ForeignKey>> = BTreeMap::new();
        owned.insert(OPERATIONS, Vec::new());
        loop {
            let mut grew = false;
            for &key in &keys {
                if key.table == key.parent || !owned.contains_key(key.parent.as_str()) {
                    continue;
                }
                if key.columns != 1 {
                    return Err(refused(format!(
                        "{}.{} refers to {} by {} columns; only single-column keys are followed",
                        key.table, key.column, key.parent, key.columns
                    )));
                }
                let edges = owned.entry(key.table.as_str()).or_default();
                if !edges.contains(&key) {
                    edges.push(key);
                    grew = true;
                }
            }
            if owned.len() > OWNED_TABLES_MAX {
                return Err(refused(format!(
                    "more than {OWNED_TABLES_MAX} tables refer to operations"
                )));
            }
            if !grew {
                break;
            }
        }
        // Children first: a table goes once no remaining owned table refers to it.
        let mut left: BTreeSet<&str> = owned.keys().copied().filter(|t| *t != OPERATIONS).collect();
        let mut tables = Vec::new();
        while !left.is_empty() {
            let next = left.iter().copied().find(|t| {
                !left
                    .iter()
                    .any(|other| other != t && owned[other].iter().any(|k| k.parent == *t))
            });
            let Some(next) = next else {
                return Err(refused(format!(
                    "the tables {left:?} refer to each other in a cycle"
                )));
            };
            left.remove(next);
            tables.push(next.to_string());
        }
        let mut deletes = Vec::with_capacity(tables.len() + UNLINKED.len() + 1);
        for table in &tables {
            let rows = rows_of(&owned, table, ids, 0)?;
            deletes.push(format!("DELETE FROM {} WHERE {rows}", ident(table)));
        }
        for (table, column) in UNLINKED {
            tables.push(table.to_string());
            deletes.push(format!(
                "DELETE FROM {} WHERE {} IN {ids}",
                ident(table),
                ident(column)
            ));
        }
        tables.push(OPERATIONS.to_string());
        deletes.push(format!(
            "DELETE FROM {} WHERE id IN {ids}",
            ident(OPERATIONS)
        ));
        Ok(OwnedRows { tables, deletes })
    }

    /// Every table the plan deletes from, in its order (`operations` last).
    pub fn tables(&self) -> &[String] {
        &self.tables
    }

    /// The deletes, in order; each binds the ids' JSON array as `$1`. The last one deletes the
    /// operations themselves.
    pub(crate) fn deletes(&self) -> &[String] {
        &self.deletes
    }
}

/// The condition selecting `table`'s rows owned by the operations in `ids`: through any of its
/// keys into an owned table.
fn rows_of(
    owned: &BTreeMap<&str, Vec<&ForeignKey>>,
    table: &str,
    ids: &str,
    depth: usize,
) -> Result<String, LedgerError> {
    if depth > OWNED_TABLES_MAX {
        return Err(LedgerError::Corrupt(format!(
            "prune plan: the keys from {table} lead back to it"
        )));
    }
    let mut any = Vec::new();
    for key in &owned[table] {
        let parent_rows = if key.parent == OPERATIONS && key.parent_column == "id" {
            ids.to_string()
        } else {
            format!(
                "(SELECT {} FROM {} WHERE {})",
                ident(&key.parent_column),
                ident(&key.parent),
                parent_condition(owned, &key.parent, ids, depth)?
            )
        };
        any.push(format!("{} IN {parent_rows}", ident(&key.column)));
    }
    Ok(any.join(" OR "))
}

/// [`rows_of`] for a table referred to, `operations` included.
fn parent_condition(
    owned: &BTreeMap<&str, Vec<&ForeignKey>>,
    parent: &str,
    ids: &str,
    depth: usize,
) -> Result<String, LedgerError> {
    if parent == OPERATIONS {
        Ok(format!("id IN {ids}"))
    } else {
        rows_of(owned, parent, ids, depth + 1)
    }
}

/// A quoted identifier (both stores quote with `"` and double one inside).
fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

impl<DB: Dialect> Store<DB> {
    /// The store's foreign keys, read from its catalog.
    pub async fn foreign_keys(&self) -> Result<Vec<ForeignKey>, LedgerError> {
        self.all(Stmt::new(DB::FOREIGN_KEYS), |r| {
            Ok(ForeignKey {
                table: r.get("table_name")?,
                column: r.get("column_name")?,
                parent: r.get("parent_name")?,
                parent_column: r.get("parent_column")?,
                columns: r.get("columns")?,
            })
        })
        .await
    }

    /// The store's tables with an [`OPERATION_COLUMN`], read from its catalog.
    pub async fn keyed_tables(&self) -> Result<Vec<String>, LedgerError> {
        self.all(Stmt::new(DB::KEYED_TABLES), |r| r.get("table_name"))
            .await
    }

    /// The plan deleting operations with every row they own, for the schema as it is now.
    pub async fn owned_rows(&self) -> Result<OwnedRows, LedgerError> {
        let keys = self.foreign_keys().await?;
        let keyed = self.keyed_tables().await?;
        OwnedRows::plan(&keys, &keyed, DB::JSON_IDS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(table: &str, column: &str, parent: &str, parent_column: &str) -> ForeignKey {
        ForeignKey {
            table: table.into(),
            column: column.into(),
            parent: parent.into(),
            parent_column: parent_column.into(),
            columns: 1,
        }
    }

    #[test]
    fn children_go_first_through_every_key_and_rows_kept_apart_stay() {
        let keys = [
            key("links", "operation_id", "operations", "id"),
            key("codes", "operation_id", "operations", "id"),
            key("codes", "link_hash", "links", "token_hash"),
            key("marks", "code_id", "codes", "id"),
            key("operations", "refund_of", "operations", "id"),
            key("unrelated", "x", "elsewhere", "y"),
        ];
        let keyed = ["events", "tool_calls", "codes", "operations"].map(String::from);
        let plan = OwnedRows::plan(&keys, &keyed, "(IDS)").unwrap();
        assert_eq!(
            plan.tables(),
            [
                "events",
                "marks",
                "codes",
                "links",
                "operation_search",
                "operations"
            ]
        );
        assert_eq!(
            plan.deletes()[0],
            "DELETE FROM \"events\" WHERE \"operation_id\" IN (IDS)"
        );
        assert_eq!(
            plan.deletes()[1],
            "DELETE FROM \"marks\" WHERE \"code_id\" IN (SELECT \"id\" FROM \"codes\" WHERE \
             \"operation_id\" IN (IDS) OR \"link_hash\" IN (SELECT \"token_hash\" FROM \"links\" \
             WHERE \"operation_id\" IN (IDS)))"
        );
    }

    #[test]
    fn a_schema_it_cannot_follow_is_refused_with_a_sentence() {
        let mut composite = key("pairs", "operation_id", "operations", "id");
        composite.columns = 2;
        let cycle = [
            key("a", "operation_id", "operations", "id"),
            key("a", "b_id", "b", "id"),
            key("b", "a_id", "a", "id"),
        ];
        for keys in [vec![composite], cycle.to_vec()] {
            let refused = OwnedRows::plan(&keys, &[], "(IDS)")
                .unwrap_err()
                .to_string();
            assert!(refused.contains("prune plan:"), "{refused}");
        }
    }
}

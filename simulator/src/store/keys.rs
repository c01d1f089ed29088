//! Which idempotency keys may have a remembered response, in memory. Nearly every request a worker
//! sends carries a key the simulator has never seen; without this index each of them costs a
//! statement (through the group task and SQLite's thread and back) to learn that.
//!
//! The one rule: whenever the table holds a row for a key saved at or after a lookup's
//! `not_before_ms`, the index holds that key with a time at least as new, so the lookup goes to
//! the table. The index may name keys the table lacks (a commit that failed); it never lacks one the
//! table would answer. It holds because a key is indexed before its row is written (with the newest
//! of its saved times), and entries are dropped only when older than a cutoff the table's rows were
//! already deleted below, and lookups' windows never reach back past an earlier cutoff (the
//! simulator's clock never moves back).

use sqlx::{Row, SqlitePool};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

const SELECT_KEYS: &str =
    "SELECT key, MAX(created_ms) AS created_ms FROM idempotency_keys GROUP BY key";

/// The keys that may have a remembered response, each with the newest time one was saved.
#[derive(Debug, Clone, Default)]
pub(crate) struct KeyIndex {
    newest: Arc<Mutex<HashMap<String, i64>>>,
}

impl KeyIndex {
    /// The index of what `pool`'s table already holds (a simulator reopening its file).
    pub(crate) async fn load(pool: &SqlitePool) -> Result<KeyIndex, sqlx::Error> {
        let index = KeyIndex::default();
        for row in sqlx::query(SELECT_KEYS).fetch_all(pool).await? {
            index.saved(row.try_get("key")?, row.try_get("created_ms")?);
        }
        Ok(index)
    }

    fn map(&self) -> MutexGuard<'_, HashMap<String, i64>> {
        // Every change is one map operation: a panic elsewhere cannot leave it half done.
        self.newest
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A response is about to be saved under `key` at `created_ms`.
    pub(crate) fn saved(&self, key: &str, created_ms: i64) {
        let mut map = self.map();
        match map.get_mut(key) {
            Some(newest) => *newest = (*newest).max(created_ms),
            None => {
                map.insert(key.to_string(), created_ms);
            }
        }
    }

    /// False when the table cannot hold a response for `key` saved at or after `not_before_ms`.
    pub(crate) fn may_hold(&self, key: &str, not_before_ms: i64) -> bool {
        self.map()
            .get(key)
            .is_some_and(|newest| *newest >= not_before_ms)
    }

    /// The table's rows saved before `before_ms` were deleted: forget keys whose newest save is older.
    pub(crate) fn forget_before(&self, before_ms: i64) {
        self.map().retain(|_, newest| *newest >= before_ms);
    }

    /// How many keys it holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_held_from_its_newest_save_until_forgotten_below_it() {
        let index = KeyIndex::default();
        assert!(!index.may_hold("k", 0), "never saved");
        index.saved("k", 100);
        assert!(index.may_hold("k", 100));
        assert!(
            !index.may_hold("k", 101),
            "saved before the lookup's window"
        );
        index.saved("k", 50);
        assert!(
            index.may_hold("k", 100),
            "an older save does not move it back"
        );
        index.saved("k", 200);
        index.forget_before(150);
        assert!(
            index.may_hold("k", 150),
            "its newest save is after the cutoff"
        );
        index.forget_before(201);
        assert!(!index.may_hold("k", 0));
        assert_eq!(index.len(), 0);
    }

    #[tokio::test]
    async fn it_loads_what_the_table_holds_with_each_keys_newest_time() {
        let pool = SqlitePool::connect("sqlite::memory:").await.unwrap();
        sqlx::query("CREATE TABLE idempotency_keys (key TEXT, created_ms INTEGER)")
            .execute(&pool)
            .await
            .unwrap();
        sqlx::query("INSERT INTO idempotency_keys VALUES ('a', 10), ('a', 30), ('b', 20)")
            .execute(&pool)
            .await
            .unwrap();
        let index = KeyIndex::load(&pool).await.unwrap();
        assert_eq!(index.len(), 2);
        assert!(index.may_hold("a", 30) && !index.may_hold("a", 31));
        assert!(index.may_hold("b", 20) && !index.may_hold("b", 21));
    }
}

//! API keys: stored as hashes with tenant, role and expiry; found by hash, revoked, rotated with
//! an overlap, and touched at most once per resolution.

use super::dialect::Dialect;
use super::record::decode_api_key;
use super::store::Store;
use super::{ApiKeyRecord, LedgerError, PAGE_MAX, bounded};
use crate::id::TenantId;
use sqlx::{ColumnIndex, Decode, Encode, Executor, Type};

const INSERT_API_KEY: &str = "INSERT INTO api_keys (key_id, key_hash, tenant_id, role, label, created_at, \
     expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7)";
const FIND_API_KEY: &str = "SELECT * FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL \
     AND (expires_at IS NULL OR expires_at > $2)";
const SELECT_API_KEY: &str = "SELECT * FROM api_keys WHERE key_id = $1";
const LIST_API_KEYS: &str = "SELECT * FROM api_keys WHERE ($1 IS NULL OR tenant_id = $1) \
     ORDER BY created_at DESC, key_id LIMIT $2";
const REVOKE_API_KEY: &str = "UPDATE api_keys SET revoked_at = $2, revoked_by = $3, revoked_reason = $4 \
     WHERE key_id = $1 AND revoked_at IS NULL";
const RETIRE_API_KEY: &str = "UPDATE api_keys SET replaced_by = $2, \
     expires_at = CASE WHEN expires_at IS NULL OR expires_at > $3 THEN $3 ELSE expires_at END \
     WHERE key_id = $1 AND revoked_at IS NULL AND replaced_by IS NULL \
     AND (expires_at IS NULL OR expires_at > $4)";
const TOUCH_API_KEY: &str = "UPDATE api_keys SET last_used_at = $2 WHERE key_id = $1 \
     AND (last_used_at IS NULL OR last_used_at <= $3)";

/// The API keys of one store.
pub(crate) struct Keys<'a, DB: Dialect>(pub(crate) &'a Store<DB>);

impl<DB> Keys<'_, DB>
where
    // LEDGER BOUNDS (see `dialect.rs`)
    DB: Dialect,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    &'static str: ColumnIndex<DB::Row>,
    for<'t> i64: Encode<'t, DB> + Decode<'t, DB> + Type<DB>,
    for<'t> String: Encode<'t, DB> + Decode<'t, DB> + Type<DB>,
    for<'t> &'t str: Encode<'t, DB> + Type<DB>,
    for<'t> Option<i64>: Encode<'t, DB>,
    for<'t> Option<String>: Encode<'t, DB>,
    for<'t> Option<&'t str>: Encode<'t, DB>,
{
    /// See [`Ledger::insert_api_key`](super::Ledger::insert_api_key).
    pub(crate) async fn insert(&self, key: &ApiKeyRecord) -> Result<(), LedgerError> {
        insert_on::<DB>(&mut *self.0.pool.acquire().await?, key).await
    }

    /// See [`Ledger::find_api_key`](super::Ledger::find_api_key).
    pub(crate) async fn find(
        &self,
        key_hash: &str,
        now_ms: i64,
    ) -> Result<Option<ApiKeyRecord>, LedgerError> {
        let row = sqlx::query(FIND_API_KEY)
            .bind(key_hash)
            .bind(now_ms)
            .fetch_optional(&self.0.pool)
            .await?;
        row.as_ref().map(decode_api_key).transpose()
    }

    /// See [`Ledger::api_key`](super::Ledger::api_key).
    pub(crate) async fn get(&self, key_id: &str) -> Result<Option<ApiKeyRecord>, LedgerError> {
        let row = sqlx::query(SELECT_API_KEY)
            .bind(key_id)
            .fetch_optional(&self.0.pool)
            .await?;
        row.as_ref().map(decode_api_key).transpose()
    }

    /// See [`Ledger::list_api_keys`](super::Ledger::list_api_keys).
    pub(crate) async fn list(
        &self,
        tenant: Option<&TenantId>,
        limit: u32,
    ) -> Result<Vec<ApiKeyRecord>, LedgerError> {
        let rows = sqlx::query(LIST_API_KEYS)
            .bind(tenant.map(TenantId::as_str))
            .bind(i64::from(limit.min(PAGE_MAX)))
            .fetch_all(&self.0.pool)
            .await?;
        rows.iter().map(decode_api_key).collect()
    }

    /// See [`Ledger::revoke_api_key`](super::Ledger::revoke_api_key).
    pub(crate) async fn revoke(
        &self,
        key_id: &str,
        revoked_by: &str,
        reason: &str,
        now_ms: i64,
    ) -> Result<bool, LedgerError> {
        let done = sqlx::query(REVOKE_API_KEY)
            .bind(key_id)
            .bind(now_ms)
            .bind(bounded(revoked_by))
            .bind(bounded(reason))
            .execute(&self.0.pool)
            .await?;
        if DB::rows_affected(&done) == 1 {
            return Ok(true);
        }
        match self.get(key_id).await? {
            Some(_) => Ok(false),
            None => Err(LedgerError::NotFound),
        }
    }

    /// See [`Ledger::rotate_api_key`](super::Ledger::rotate_api_key).
    pub(crate) async fn rotate(
        &self,
        old_id: &str,
        new: &ApiKeyRecord,
        old_until_ms: i64,
        now_ms: i64,
    ) -> Result<bool, LedgerError> {
        let mut tx = self.0.pool.begin().await?;
        let retired = sqlx::query(RETIRE_API_KEY)
            .bind(old_id)
            .bind(new.key_id.as_str())
            .bind(old_until_ms)
            .bind(now_ms)
            .execute(&mut *tx)
            .await?;
        if DB::rows_affected(&retired) != 1 {
            tx.rollback().await?;
            return match self.get(old_id).await? {
                Some(_) => Ok(false),
                None => Err(LedgerError::NotFound),
            };
        }
        insert_on::<DB>(&mut *tx, new).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// See [`Ledger::touch_api_key`](super::Ledger::touch_api_key).
    pub(crate) async fn touch(
        &self,
        key_id: &str,
        now_ms: i64,
        resolution_ms: i64,
    ) -> Result<(), LedgerError> {
        sqlx::query(TOUCH_API_KEY)
            .bind(key_id)
            .bind(now_ms)
            .bind(now_ms.saturating_sub(resolution_ms))
            .execute(&self.0.pool)
            .await?;
        Ok(())
    }
}

/// Inserts a key on a connection (pooled, or inside the rotation's transaction).
async fn insert_on<DB>(conn: &mut DB::Connection, key: &ApiKeyRecord) -> Result<(), LedgerError>
where
    // LEDGER BOUNDS (see `dialect.rs`)
    DB: Dialect,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    &'static str: ColumnIndex<DB::Row>,
    for<'t> i64: Encode<'t, DB> + Decode<'t, DB> + Type<DB>,
    for<'t> String: Encode<'t, DB> + Decode<'t, DB> + Type<DB>,
    for<'t> &'t str: Encode<'t, DB> + Type<DB>,
    for<'t> Option<i64>: Encode<'t, DB>,
    for<'t> Option<String>: Encode<'t, DB>,
    for<'t> Option<&'t str>: Encode<'t, DB>,
{
    sqlx::query(INSERT_API_KEY)
        .bind(key.key_id.as_str())
        .bind(key.key_hash.as_str())
        .bind(key.tenant.as_str())
        .bind(key.role.as_str())
        .bind(bounded(&key.label))
        .bind(key.created_at_ms)
        .bind(key.expires_at_ms)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

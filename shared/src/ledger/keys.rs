//! API keys: stored as hashes with tenant, role and expiry; found by hash, revoked, rotated with
//! an overlap, and touched at most once per resolution.

use super::dialect::Dialect;
use super::record::decode_api_key;
use super::store::Store;
use super::{ApiKeyRecord, Keys, LedgerError, PAGE_MAX, RevokeKey, RotateKey, bounded};
use crate::clock::Timestamp;
use crate::id::TenantId;
use async_trait::async_trait;
use sqlx::{ColumnIndex, Decode, Encode, Executor, Type};
use std::time::Duration;

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

#[async_trait]
impl<DB> Keys for Store<DB>
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
    async fn insert_api_key(&self, key: &ApiKeyRecord) -> Result<(), LedgerError> {
        insert_on::<DB>(&mut *self.pool.acquire().await?, key).await
    }

    async fn find_api_key(
        &self,
        key_hash: &str,
        now: Timestamp,
    ) -> Result<Option<ApiKeyRecord>, LedgerError> {
        let row = sqlx::query(FIND_API_KEY)
            .bind(key_hash)
            .bind(now)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(decode_api_key).transpose()
    }

    async fn api_key(&self, key_id: &str) -> Result<Option<ApiKeyRecord>, LedgerError> {
        let row = sqlx::query(SELECT_API_KEY)
            .bind(key_id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(decode_api_key).transpose()
    }

    async fn list_api_keys(
        &self,
        tenant: Option<&TenantId>,
        limit: u32,
    ) -> Result<Vec<ApiKeyRecord>, LedgerError> {
        let rows = sqlx::query(LIST_API_KEYS)
            .bind(tenant.map(TenantId::as_str))
            .bind(i64::from(limit.min(PAGE_MAX)))
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(decode_api_key).collect()
    }

    async fn revoke_api_key(
        &self,
        request: &RevokeKey<'_>,
        now: Timestamp,
    ) -> Result<bool, LedgerError> {
        let key_id = request.key_id;
        let done = sqlx::query(REVOKE_API_KEY)
            .bind(key_id)
            .bind(now)
            .bind(bounded(request.revoked_by))
            .bind(bounded(request.reason))
            .execute(&self.pool)
            .await?;
        if DB::rows_affected(&done) == 1 {
            return Ok(true);
        }
        match self.api_key(key_id).await? {
            Some(_) => Ok(false),
            None => Err(LedgerError::NotFound),
        }
    }

    async fn rotate_api_key(
        &self,
        request: &RotateKey<'_>,
        now: Timestamp,
    ) -> Result<bool, LedgerError> {
        let RotateKey {
            old_id,
            new,
            old_until,
        } = *request;
        let mut tx = self.pool.begin().await?;
        let retired = sqlx::query(RETIRE_API_KEY)
            .bind(old_id)
            .bind(new.key_id.as_str())
            .bind(old_until)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        if DB::rows_affected(&retired) != 1 {
            tx.rollback().await?;
            return match self.api_key(old_id).await? {
                Some(_) => Ok(false),
                None => Err(LedgerError::NotFound),
            };
        }
        insert_on::<DB>(&mut *tx, new).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn touch_api_key(
        &self,
        key_id: &str,
        now: Timestamp,
        resolution: Duration,
    ) -> Result<(), LedgerError> {
        sqlx::query(TOUCH_API_KEY)
            .bind(key_id)
            .bind(now)
            .bind(now.saturating_sub_span(resolution))
            .execute(&self.pool)
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
        // (sqlx encodes `Option` per driver, so the optional instant goes in as its integer.)
        .bind(key.expires_at_ms.map(Timestamp::as_millis))
        .execute(&mut *conn)
        .await?;
    Ok(())
}

//! API keys: stored as hashes with tenant, role and expiry; found by hash, revoked, rotated with
//! an overlap, and touched at most once per resolution.

use super::dialect::Dialect;
use super::record::decode_api_key;
use super::statement::Stmt;
use super::store::Store;
use super::{ApiKeyRecord, Keys, LedgerError, PAGE_MAX, RevokeKey, RotateKey, bounded};
use crate::clock::Timestamp;
use crate::id::TenantId;
use async_trait::async_trait;
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
impl<DB: Dialect> Keys for Store<DB> {
    async fn insert_api_key(&self, key: &ApiKeyRecord) -> Result<(), LedgerError> {
        DB::execute(&self.pool, insert_key(key)).await?;
        Ok(())
    }

    async fn find_api_key(
        &self,
        key_hash: &str,
        now: Timestamp,
    ) -> Result<Option<ApiKeyRecord>, LedgerError> {
        let row = DB::fetch_optional(&self.pool, Stmt::new(FIND_API_KEY).bind(key_hash).bind(now))
            .await?;
        row.as_ref().map(decode_api_key).transpose()
    }

    async fn api_key(&self, key_id: &str) -> Result<Option<ApiKeyRecord>, LedgerError> {
        let row = DB::fetch_optional(&self.pool, Stmt::new(SELECT_API_KEY).bind(key_id)).await?;
        row.as_ref().map(decode_api_key).transpose()
    }

    async fn list_api_keys(
        &self,
        tenant: Option<&TenantId>,
        limit: u32,
    ) -> Result<Vec<ApiKeyRecord>, LedgerError> {
        let rows = DB::fetch_all(
            &self.pool,
            Stmt::new(LIST_API_KEYS)
                .bind(tenant.map(TenantId::as_str))
                .bind(i64::from(limit.min(PAGE_MAX))),
        )
        .await?;
        rows.iter().map(decode_api_key).collect()
    }

    async fn revoke_api_key(
        &self,
        request: &RevokeKey<'_>,
        now: Timestamp,
    ) -> Result<bool, LedgerError> {
        let key_id = request.key_id;
        let done = DB::execute(
            &self.pool,
            Stmt::new(REVOKE_API_KEY)
                .bind(key_id)
                .bind(now)
                .bind(bounded(request.revoked_by))
                .bind(bounded(request.reason)),
        )
        .await?;
        if done == 1 {
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
        let retired = DB::execute(
            &mut *tx,
            Stmt::new(RETIRE_API_KEY)
                .bind(old_id)
                .bind(new.key_id.as_str())
                .bind(old_until)
                .bind(now),
        )
        .await?;
        if retired != 1 {
            tx.rollback().await?;
            return match self.api_key(old_id).await? {
                Some(_) => Ok(false),
                None => Err(LedgerError::NotFound),
            };
        }
        DB::execute(&mut *tx, insert_key(new)).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn touch_api_key(
        &self,
        key_id: &str,
        now: Timestamp,
        resolution: Duration,
    ) -> Result<(), LedgerError> {
        DB::execute(
            &self.pool,
            Stmt::new(TOUCH_API_KEY)
                .bind(key_id)
                .bind(now)
                .bind(now.saturating_sub_span(resolution)),
        )
        .await?;
        Ok(())
    }
}

/// The statement that stores a key (on the pool, or inside the rotation's transaction).
fn insert_key(key: &ApiKeyRecord) -> Stmt<'_> {
    Stmt::new(INSERT_API_KEY)
        .bind(key.key_id.as_str())
        .bind(key.key_hash.as_str())
        .bind(key.tenant.as_str())
        .bind(key.role.as_str())
        .bind(bounded(&key.label))
        .bind(key.created_at_ms)
        .bind(key.expires_at_ms)
}

//! API keys: stored as hashes with tenant, role and expiry; found by hash, revoked, rotated with
//! an overlap, and touched at most once per resolution.

use super::dialect::Dialect;
use super::record::{api_key_columns, decode_api_key};
use super::statement::Stmt;
use super::store::Store;
use super::{ApiKeyRecord, Keys, LedgerError, PAGE_MAX, RevokeKey, RotateKey, bounded};
use async_trait::async_trait;
use payonce_core::clock::Timestamp;
use payonce_core::id::TenantId;
use std::time::Duration;

const INSERT_API_KEY: &str = "INSERT INTO api_keys (key_id, key_hash, tenant_id, role, label, created_at, \
     expires_at, read_only) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";
const FIND_API_KEY: &str = concat!(
    "SELECT ",
    api_key_columns!(),
    " FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL \
     AND (expires_at IS NULL OR expires_at > $2)"
);
const SELECT_API_KEY: &str = concat!(
    "SELECT ",
    api_key_columns!(),
    " FROM api_keys WHERE key_id = $1"
);
const LIST_API_KEYS: &str = concat!(
    "SELECT ",
    api_key_columns!(),
    " FROM api_keys WHERE ($1 IS NULL OR tenant_id = $1) \
     ORDER BY created_at DESC, key_id LIMIT $2"
);
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
        self.execute(insert_key(key)).await?;
        Ok(())
    }

    async fn find_api_key(
        &self,
        key_hash: &str,
        now: Timestamp,
    ) -> Result<Option<ApiKeyRecord>, LedgerError> {
        let stmt = Stmt::new(FIND_API_KEY).bind(key_hash).bind(now);
        self.first(stmt, decode_api_key).await
    }

    async fn api_key(&self, key_id: &str) -> Result<Option<ApiKeyRecord>, LedgerError> {
        self.first(Stmt::new(SELECT_API_KEY).bind(key_id), decode_api_key)
            .await
    }

    async fn list_api_keys(
        &self,
        tenant: Option<&TenantId>,
        limit: u32,
    ) -> Result<Vec<ApiKeyRecord>, LedgerError> {
        let stmt = Stmt::new(LIST_API_KEYS).bind(tenant.map(TenantId::as_str));
        self.all(stmt.bind(i64::from(limit.min(PAGE_MAX))), decode_api_key)
            .await
    }

    async fn revoke_api_key(
        &self,
        request: &RevokeKey<'_>,
        now: Timestamp,
    ) -> Result<bool, LedgerError> {
        let key_id = request.key_id;
        let stmt = Stmt::new(REVOKE_API_KEY).bind(key_id).bind(now);
        let stmt = stmt
            .bind(bounded(request.revoked_by))
            .bind(bounded(request.reason));
        if self.execute(stmt).await? == 1 {
            return Ok(true);
        }
        self.unchanged(key_id).await
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
        let mut tx = self.begin().await?;
        let retire = Stmt::new(RETIRE_API_KEY)
            .bind(old_id)
            .bind(new.key_id.as_str());
        if DB::execute(&mut *tx, retire.bind(old_until).bind(now)).await? != 1 {
            tx.rollback().await?;
            return self.unchanged(old_id).await;
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
        let stmt = Stmt::new(TOUCH_API_KEY).bind(key_id).bind(now);
        self.execute(stmt.bind(now.saturating_sub_span(resolution)))
            .await?;
        Ok(())
    }
}

impl<DB: Dialect> Store<DB> {
    /// What revoking or rotating a key that matched nothing answers: `Ok(false)` if the key
    /// exists (nothing changed), else [`LedgerError::NotFound`].
    async fn unchanged(&self, key_id: &str) -> Result<bool, LedgerError> {
        match self.api_key(key_id).await? {
            Some(_) => Ok(false),
            None => Err(LedgerError::NotFound),
        }
    }
}

/// The statement that stores a key (on the pool, or inside the rotation's transaction).
fn insert_key(key: &ApiKeyRecord) -> Stmt<'_> {
    Stmt::new(INSERT_API_KEY)
        .bind(key.key_id.as_str())
        .bind(key.key_hash.as_str())
        .bind(&key.tenant)
        .bind(key.role.as_str())
        .bind(bounded(&key.label))
        .bind(key.created_at)
        .bind(key.expires_at)
        .bind(i64::from(key.read_only))
}

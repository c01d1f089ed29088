//! What customer verification stores (migration 0002): each tenant's verification method and keys,
//! used assertion nonces, one-time codes and the approval requests payonce sent for an assistant.
//! A trait of its own, reached through [`Approvals::verification`](super::Approvals::verification), so the
//! core ledger stays about operations.

use super::dialect::Dialect;
use super::row::{LedgerRow, corrupt};
use super::statement::{Arg, Stmt};
use super::store::Store;
use super::{ApprovalLink, LedgerError};
use async_trait::async_trait;
use payonce_core::clock::Timestamp;
use payonce_core::id::{OperationId, TenantId};
use std::time::Duration;

/// How a tenant's customers prove, on the confirmation page, that they are the customer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VerificationMethod {
    /// The tenant's app signs a short-lived assertion for its logged-in customer.
    SignedAssertion,
    /// payonce sends a one-time code to the tenant's notification endpoint, which delivers it.
    OneTimeCode,
}

impl VerificationMethod {
    /// The stored (and CLI) name.
    pub fn as_str(&self) -> &'static str {
        match self {
            VerificationMethod::SignedAssertion => "signed_assertion",
            VerificationMethod::OneTimeCode => "one_time_code",
        }
    }

    /// Parses a stored or typed name.
    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "signed_assertion" => Some(VerificationMethod::SignedAssertion),
            "one_time_code" => Some(VerificationMethod::OneTimeCode),
            _ => None,
        }
    }
}

/// A tenant's verification settings. The keys are symmetric HMAC keys (payonce computes the same MAC
/// the tenant does), so they are stored as issued; the table is as sensitive as the API key table's
/// owner, and no read path shows them.
#[derive(Clone, PartialEq, Eq)]
pub struct TenantVerification {
    /// The tenant.
    pub tenant: TenantId,
    /// The method its confirmation page requires.
    pub method: VerificationMethod,
    /// The id of the assertion key, carried in every assertion (`kid`).
    pub assertion_key_id: Option<String>,
    /// The assertion key (signed-assertion method).
    pub assertion_key: Option<String>,
    /// Where approval requests and codes are POSTed.
    pub notify_url: Option<String>,
    /// What those POSTs are signed with.
    pub notify_secret: Option<String>,
    /// Last set, ms.
    pub updated_at: Timestamp,
}

impl std::fmt::Debug for TenantVerification {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the keys.
        f.debug_struct("TenantVerification")
            .field("tenant", &self.tenant)
            .field("method", &self.method)
            .field("assertion_key_id", &self.assertion_key_id)
            .field("notify_url", &self.notify_url)
            .finish_non_exhaustive()
    }
}

/// One one-time code, as stored (only its hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalCode {
    /// The delivery id, sent with the code and recorded as the approval's evidence.
    pub delivery_id: String,
    /// The operation.
    pub operation_id: OperationId,
    /// The link the code belongs to (its token's hash).
    pub link_hash: String,
    /// SHA-256 of the delivery id and the code.
    pub code_hash: String,
    /// Created, ms.
    pub created_at: Timestamp,
    /// Expires, ms.
    pub expires_at: Timestamp,
    /// Attempts counted so far.
    pub attempts: i64,
    /// Attempts allowed.
    pub attempt_max: i64,
    /// Used, ms.
    pub used_at: Option<Timestamp>,
}

/// An assertion nonce to record as used
/// ([`VerificationLedger::use_assertion_nonce`]).
#[derive(Debug, Clone, Copy)]
pub struct UsedNonce<'a> {
    /// The tenant whose key signed the assertion.
    pub tenant: &'a TenantId,
    /// The assertion's nonce.
    pub nonce: &'a str,
    /// The operation it approves.
    pub operation: &'a OperationId,
    /// When the assertion expires (the nonce need not be kept past it).
    pub expires_at: Timestamp,
}

/// A link to insert, with its code ([`VerificationLedger::create_link`]).
#[derive(Debug, Clone, Copy)]
pub struct NewLink<'a> {
    /// The link.
    pub link: &'a ApprovalLink,
    /// Who asked for it; its open links are counted apart from the other origin's.
    pub origin: LinkOrigin,
    /// Most unused, unexpired links of this origin the operation may have.
    pub open_max: u32,
    /// Its one-time code, if the tenant's method sends one.
    pub code: Option<&'a ApprovalCode>,
}

/// How often payonce may ask a customer to approve one operation
/// ([`VerificationLedger::record_approval_notice`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoticeLimit {
    /// Most requests in all.
    pub max: u32,
    /// Least time between two requests.
    pub interval: Duration,
}

/// Who asked for a confirmation link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkOrigin {
    /// The tenant's service (`POST /v1/operations/{id}/approval-requests`).
    Service,
    /// payonce itself, because an assistant asked to pay.
    Assistant,
}

impl LinkOrigin {
    /// The stored name.
    pub fn as_str(&self) -> &'static str {
        match self {
            LinkOrigin::Service => "service",
            LinkOrigin::Assistant => "assistant",
        }
    }
}

/// The result of counting one attempt at a link's code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodeAttempt {
    /// The attempt was counted; compare the typed code with this one's hash.
    Counted(ApprovalCode),
    /// The link has no code.
    Missing,
    /// The code was already used.
    Used,
    /// Every allowed attempt was spent.
    Exhausted,
    /// The code expired.
    Expired,
}

/// The verification store.
#[async_trait]
pub trait VerificationLedger: Send + Sync {
    /// Sets (replaces) a tenant's verification settings.
    async fn set_tenant_verification(&self, v: &TenantVerification) -> Result<(), LedgerError>;
    /// A tenant's settings; `None` when none were set.
    async fn tenant_verification(
        &self,
        tenant: &TenantId,
    ) -> Result<Option<TenantVerification>, LedgerError>;
    /// Records an assertion nonce as used. False: it was used before (a replay, or a race lost).
    async fn use_assertion_nonce(
        &self,
        used: &UsedNonce<'_>,
        now: Timestamp,
    ) -> Result<bool, LedgerError>;
    /// Inserts a link (and its code, in the same transaction) while the operation has fewer than
    /// `open_max` unused, unexpired links of the same origin. False: none was inserted.
    async fn create_link(&self, new: &NewLink<'_>) -> Result<bool, LedgerError>;
    /// Counts one attempt at the link's live code (before the caller compares it), or says why
    /// there is none to try.
    async fn count_code_attempt(
        &self,
        link_hash: &str,
        now: Timestamp,
    ) -> Result<CodeAttempt, LedgerError>;
    /// Marks a code used. False: it was used already or expired (a racing second use loses).
    async fn use_code(&self, delivery_id: &str, now: Timestamp) -> Result<bool, LedgerError>;
    /// Records that payonce asked the customer to approve, if the operation has had fewer than
    /// `limit.max` such requests and none in the last `limit.interval`. False: over the limit,
    /// nothing sent.
    async fn record_approval_notice(
        &self,
        operation: &OperationId,
        limit: NoticeLimit,
        now: Timestamp,
    ) -> Result<bool, LedgerError>;
}

const UPSERT_TENANT: &str = "INSERT INTO tenant_verification (tenant_id, method, assertion_key_id, assertion_key, \
     notify_url, notify_secret, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7) \
     ON CONFLICT (tenant_id) DO UPDATE SET method = $2, assertion_key_id = $3, assertion_key = $4, \
     notify_url = $5, notify_secret = $6, updated_at = $7";
const SELECT_TENANT: &str = "SELECT tenant_id, method, assertion_key_id, assertion_key, \
     notify_url, notify_secret, updated_at FROM tenant_verification WHERE tenant_id = $1";
const INSERT_NONCE: &str = "INSERT INTO used_assertions (tenant_id, nonce, operation_id, used_at, expires_at) \
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant_id, nonce) DO NOTHING";
/// A link counted against the open links of its own origin only; run after [`lock_operation`] on the
/// operation, or racing inserts each count the same open links and all get in.
const INSERT_LINK_OF: &str = "INSERT INTO approval_links (token_hash, operation_id, details_hash, created_at, \
     expires_at, origin) SELECT $1, $2, $3, $4, $5, $7 WHERE (SELECT COUNT(*) FROM approval_links \
     WHERE operation_id = $2 AND used_at IS NULL AND expires_at > $4 AND origin = $7) < $6";
const INSERT_CODE: &str = "INSERT INTO approval_codes (delivery_id, operation_id, link_hash, code_hash, created_at, \
     expires_at, attempts, attempt_max) VALUES ($1, $2, $3, $4, $5, $6, 0, $7)";
/// Counts an attempt first, in one conditional statement: two racing guesses cannot both slip under
/// the limit.
const COUNT_CODE_ATTEMPT: &str = "UPDATE approval_codes SET attempts = attempts + 1 WHERE link_hash = $1 \
     AND used_at IS NULL AND expires_at > $2 AND attempts < attempt_max RETURNING delivery_id, operation_id, \
     link_hash, code_hash, created_at, expires_at, attempts, attempt_max, used_at";
const LATEST_CODE: &str = "SELECT delivery_id, operation_id, link_hash, code_hash, created_at, expires_at, attempts, \
     attempt_max, used_at FROM approval_codes WHERE link_hash = $1 ORDER BY created_at DESC LIMIT 1";
const USE_CODE: &str = "UPDATE approval_codes SET used_at = $2 WHERE delivery_id = $1 AND used_at IS NULL \
     AND expires_at > $2";
/// Numbered per operation: two racing requests compute the same number and the primary key lets
/// only one in.
const INSERT_NOTICE: &str = "INSERT INTO approval_notices (operation_id, seq, at) \
     SELECT $1, COUNT(*), $2 FROM approval_notices WHERE operation_id = $1 \
     HAVING COUNT(*) < $3 AND COALESCE(MAX(at), $2 - $4) <= $2 - $4 \
     ON CONFLICT (operation_id, seq) DO NOTHING";

/// Locks the operation's row in `tx` (where the store has row locks), so the open-link count of an
/// [`insert_link`] after it sees every link a racing request inserted before.
pub(crate) async fn lock_operation<DB: Dialect>(
    tx: &mut sqlx::Transaction<'_, DB>,
    operation: &OperationId,
) -> Result<(), LedgerError> {
    if let Some(lock) = DB::LOCK_OPERATION {
        DB::fetch_optional(&mut **tx, Stmt::new(lock).bind(operation)).await?;
    }
    Ok(())
}

/// Inserts a link, counted against the open links of its origin (a service link from
/// [`Approvals::create_approval_link`](super::Approvals::create_approval_link) too); run it in a
/// transaction after [`lock_operation`].
pub(crate) fn insert_link<'a>(new: &NewLink<'a>) -> Stmt<'a> {
    let NewLink {
        link,
        origin,
        open_max,
        ..
    } = *new;
    Stmt::new(INSERT_LINK_OF)
        .bind(link.token_hash.as_str())
        .bind(&link.operation_id)
        .bind(link.details_hash.as_str())
        .bind(link.created_at)
        .bind(link.expires_at)
        .bind(i64::from(open_max))
        .bind(origin.as_str())
}

fn decode_tenant(row: &impl LedgerRow) -> Result<TenantVerification, LedgerError> {
    let method: String = row.get("method")?;
    Ok(TenantVerification {
        tenant: row.get("tenant_id")?,
        method: VerificationMethod::parse(&method)
            .ok_or_else(|| corrupt(format!("verification method {method}")))?,
        assertion_key_id: row.get("assertion_key_id")?,
        assertion_key: row.get("assertion_key")?,
        notify_url: row.get("notify_url")?,
        notify_secret: row.get("notify_secret")?,
        updated_at: row.get("updated_at")?,
    })
}

fn decode_code(row: &impl LedgerRow) -> Result<ApprovalCode, LedgerError> {
    Ok(ApprovalCode {
        delivery_id: row.get("delivery_id")?,
        operation_id: row.get("operation_id")?,
        link_hash: row.get("link_hash")?,
        code_hash: row.get("code_hash")?,
        created_at: row.get("created_at")?,
        expires_at: row.get("expires_at")?,
        attempts: row.get("attempts")?,
        attempt_max: row.get("attempt_max")?,
        used_at: row.get("used_at")?,
    })
}

#[async_trait]
impl<DB: Dialect> VerificationLedger for Store<DB> {
    async fn set_tenant_verification(&self, v: &TenantVerification) -> Result<(), LedgerError> {
        let stmt = Stmt::new(UPSERT_TENANT)
            .bind(&v.tenant)
            .bind(v.method.as_str());
        let keys = [
            &v.assertion_key_id,
            &v.assertion_key,
            &v.notify_url,
            &v.notify_secret,
        ];
        let stmt = stmt.bind_all(keys.map(|k| Arg::from(k.as_deref())));
        self.execute(stmt.bind(v.updated_at)).await?;
        Ok(())
    }

    async fn tenant_verification(
        &self,
        tenant: &TenantId,
    ) -> Result<Option<TenantVerification>, LedgerError> {
        self.first(Stmt::new(SELECT_TENANT).bind(tenant), decode_tenant)
            .await
    }

    async fn use_assertion_nonce(
        &self,
        used: &UsedNonce<'_>,
        now: Timestamp,
    ) -> Result<bool, LedgerError> {
        let stmt = Stmt::new(INSERT_NONCE).bind(used.tenant).bind(used.nonce);
        let stmt = stmt.bind(used.operation).bind(now).bind(used.expires_at);
        Ok(self.execute(stmt).await? == 1)
    }

    async fn create_link(&self, new: &NewLink<'_>) -> Result<bool, LedgerError> {
        let mut tx = self.begin().await?;
        lock_operation(&mut tx, &new.link.operation_id).await?;
        if DB::execute(&mut *tx, insert_link(new)).await? != 1 {
            tx.rollback().await?;
            return Ok(false);
        }
        if let Some(c) = new.code {
            let stmt = Stmt::new(INSERT_CODE).bind(c.delivery_id.as_str());
            let stmt = stmt.bind(&c.operation_id).bind(c.link_hash.as_str());
            let stmt = stmt.bind(c.code_hash.as_str()).bind(c.created_at);
            DB::execute(&mut *tx, stmt.bind(c.expires_at).bind(c.attempt_max)).await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    async fn count_code_attempt(
        &self,
        link_hash: &str,
        now: Timestamp,
    ) -> Result<CodeAttempt, LedgerError> {
        let counted = Stmt::new(COUNT_CODE_ATTEMPT).bind(link_hash).bind(now);
        if let Some(code) = self.first(counted, decode_code).await? {
            return Ok(CodeAttempt::Counted(code));
        }
        let latest = Stmt::new(LATEST_CODE).bind(link_hash);
        Ok(match self.first(latest, decode_code).await? {
            None => CodeAttempt::Missing,
            Some(code) if code.used_at.is_some() => CodeAttempt::Used,
            Some(code) if code.attempts >= code.attempt_max => CodeAttempt::Exhausted,
            Some(_) => CodeAttempt::Expired,
        })
    }

    async fn use_code(&self, delivery_id: &str, now: Timestamp) -> Result<bool, LedgerError> {
        Ok(self
            .execute(Stmt::new(USE_CODE).bind(delivery_id).bind(now))
            .await?
            == 1)
    }

    async fn record_approval_notice(
        &self,
        operation: &OperationId,
        limit: NoticeLimit,
        now: Timestamp,
    ) -> Result<bool, LedgerError> {
        let stmt = Stmt::new(INSERT_NOTICE).bind(operation).bind(now);
        Ok(self
            .execute(stmt.bind(i64::from(limit.max)).bind(limit.interval))
            .await?
            == 1)
    }
}

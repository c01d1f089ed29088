//! Which key secret a ledger is used with (migration `key_secret_fingerprint`).
//!
//! Operation ids and processor keys are keyed hashes under `PAYONCE_KEY_SECRET`
//! ([`payonce_core::intention`]); the secret is kept outside the ledger so that a restored ledger derives
//! the same keys again. A process started with another secret (forgotten, rotated, taken from the
//! wrong vault entry) would derive new ids and keys for every invoice the restore lost, and the
//! processor would pay each of them again. So the ledger keeps the secret's fingerprint (a keyed
//! hash of a fixed label, never the secret), and every process that derives keys compares its own
//! with it before it serves ([`payonce_core::intention::KeySecret::fingerprint`]). A ledger from before
//! the fingerprint is checked against one of its own derived operation ids instead, once, and then
//! gets the fingerprint.
//!
//! A trait of its own, reached through [`Operations::identity`](super::Operations::identity).

use super::LedgerError;
use super::dialect::Dialect;
use super::row::LedgerRow;
use super::statement::Stmt;
use super::store::Store;
use async_trait::async_trait;
use payonce_core::clock::Timestamp;
use payonce_core::id::{BusinessKey, OperationId, TenantId};

/// The `ledger_identity` row holding the key secret's fingerprint.
pub const KEY_SECRET_FINGERPRINT: &str = "key_secret_fingerprint";

/// An operation whose id was derived from its tenant and business key under the ledger's secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DerivedId {
    /// The stored id.
    pub id: OperationId,
    /// Its tenant.
    pub tenant: TenantId,
    /// Its business key.
    pub business_key: BusinessKey,
}

/// What the ledger says about the secret it was used with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretEvidence {
    /// The recorded fingerprint, if one was recorded.
    pub fingerprint: Option<String>,
    /// Without a fingerprint: one operation whose id was derived (it holds an intention key), to
    /// check a secret against.
    pub derived: Option<DerivedId>,
    /// Whether the ledger holds any operation at all.
    pub holds_operations: bool,
}

impl SecretEvidence {
    /// Whether keys were already derived in this ledger with some secret: a new secret must never
    /// be made up for it.
    pub fn in_use(&self) -> bool {
        self.fingerprint.is_some() || self.holds_operations
    }
}

/// The identity store.
#[async_trait]
pub trait IdentityLedger: Send + Sync {
    /// The fingerprint and, when none is recorded, what else can tell a secret apart.
    async fn secret_evidence(&self) -> Result<SecretEvidence, LedgerError>;
    /// Records `fingerprint` unless one is recorded already; returns the one recorded now (two
    /// processes starting at once with different secrets: the first wins, the second sees it).
    async fn record_fingerprint(
        &self,
        fingerprint: &str,
        now: Timestamp,
    ) -> Result<String, LedgerError>;
}

const SELECT_IDENTITY: &str = "SELECT value FROM ledger_identity WHERE name = $1";
const INSERT_IDENTITY: &str = "INSERT INTO ledger_identity (name, value, set_at) VALUES ($1, $2, $3) \
     ON CONFLICT (name) DO NOTHING";
/// Any row with an intention key (`po1_`, `po2_`): its id was derived. No ORDER BY: the first one
/// found ends the scan, which runs once per ledger (until the fingerprint is recorded).
const SELECT_DERIVED: &str = "SELECT id, tenant_id, business_key FROM operations \
     WHERE idempotency_key LIKE 'po%' LIMIT 1";
const SELECT_ANY: &str = "SELECT id FROM operations LIMIT 1";

#[async_trait]
impl<DB: Dialect> IdentityLedger for Store<DB> {
    async fn secret_evidence(&self) -> Result<SecretEvidence, LedgerError> {
        let fingerprint = self
            .first(
                Stmt::new(SELECT_IDENTITY).bind(KEY_SECRET_FINGERPRINT),
                |r| r.get::<String>("value"),
            )
            .await?;
        if fingerprint.is_some() {
            return Ok(SecretEvidence {
                fingerprint,
                derived: None,
                holds_operations: true,
            });
        }
        let derived = self
            .first(Stmt::new(SELECT_DERIVED), |r| {
                Ok(DerivedId {
                    id: r.get("id")?,
                    tenant: r.get("tenant_id")?,
                    business_key: r.parse("business_key", BusinessKey::parse)?,
                })
            })
            .await?;
        let holds_operations = derived.is_some()
            || self
                .first(Stmt::new(SELECT_ANY), |r| r.get::<String>("id"))
                .await?
                .is_some();
        Ok(SecretEvidence {
            fingerprint: None,
            derived,
            holds_operations,
        })
    }

    async fn record_fingerprint(
        &self,
        fingerprint: &str,
        now: Timestamp,
    ) -> Result<String, LedgerError> {
        let insert = Stmt::new(INSERT_IDENTITY)
            .bind(KEY_SECRET_FINGERPRINT)
            .bind(fingerprint)
            .bind(now);
        self.execute(insert).await?;
        self.first(
            Stmt::new(SELECT_IDENTITY).bind(KEY_SECRET_FINGERPRINT),
            |r| r.get::<String>("value"),
        )
        .await?
        .ok_or_else(|| LedgerError::Corrupt("the key secret fingerprint vanished".into()))
    }
}

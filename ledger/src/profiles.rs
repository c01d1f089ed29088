//! What the customer's pages show besides the operation (migration `customer_pages`): each
//! tenant's public profile and the card an operation will be charged to, read once from the
//! processor; and the tenant's processor (migration `tenant_processor`), which every operation it
//! creates afterwards is bound to. A trait of its own, reached through
//! [`Approvals::profiles`](super::Approvals::profiles).

use super::LedgerError;
use super::dialect::Dialect;
use super::row::LedgerRow;
use super::statement::{Arg, Stmt};
use super::store::Store;
use async_trait::async_trait;
use payonce_core::clock::Timestamp;
use payonce_core::id::{OperationId, TenantId};
use payonce_core::operation::ProcessorKind;
use payonce_core::state::ALL_STATUSES;
use std::sync::LazyLock;

/// A tenant's public profile, as stored (the api checks every field before it gets here).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TenantProfile {
    /// The tenant.
    pub tenant: TenantId,
    /// The name a customer knows the merchant by.
    pub display_name: String,
    /// Where a customer gets help (an http(s) URL).
    pub support_url: Option<String>,
    /// Where a customer writes for help.
    pub support_email: Option<String>,
    /// Last set, ms.
    #[serde(rename = "updated_at_ms")]
    pub updated_at: Timestamp,
}

/// The card an operation's payment method names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperationCard {
    /// The operation.
    pub operation: OperationId,
    /// The payment method it was read from.
    pub payment_method: String,
    /// The card brand as the processor names it (`visa`).
    pub brand: String,
    /// The last four digits.
    pub last4: String,
    /// When it was read, ms.
    pub fetched_at: Timestamp,
}

/// The profile and card store.
#[async_trait]
pub trait ProfileLedger: Send + Sync {
    /// Sets (replaces) a tenant's profile.
    async fn set_profile(&self, profile: &TenantProfile) -> Result<(), LedgerError>;
    /// A tenant's profile; `None` when none was set.
    async fn profile(&self, tenant: &TenantId) -> Result<Option<TenantProfile>, LedgerError>;
    /// Keeps the card read for an operation; a card kept before wins (the first read is the one
    /// every later view shows).
    async fn keep_card(&self, card: &OperationCard) -> Result<(), LedgerError>;
    /// The card kept for an operation, if one was read.
    async fn card(&self, operation: &OperationId) -> Result<Option<OperationCard>, LedgerError>;
    /// Sets (replaces) a tenant's processor: operations the tenant creates from now on are bound
    /// to it; those created before keep theirs.
    async fn set_processor(
        &self,
        tenant: &TenantId,
        processor: ProcessorKind,
        now: Timestamp,
    ) -> Result<(), LedgerError>;
    /// A tenant's processor; `None` when none was set (its operations name none, and each process
    /// serves them with its configured one).
    async fn processor(&self, tenant: &TenantId) -> Result<Option<ProcessorKind>, LedgerError>;
    /// Up to `limit` of the tenant's open operations (not in a terminal state) that carry a
    /// `destination`, oldest id first: `tenant set-processor` refuses a switch to a processor that
    /// cannot carry one while any is open.
    async fn open_with_destination(
        &self,
        tenant: &TenantId,
        limit: u32,
    ) -> Result<Vec<OperationId>, LedgerError>;
    /// Sets a tenant's share of the claims within a class (`None`: back to the default,
    /// `priority::SHARE_DEFAULT`); a share outside `SHARE_MIN..=SHARE_MAX` is refused.
    async fn set_share(
        &self,
        tenant: &TenantId,
        share: Option<u32>,
        actor: &str,
        now: Timestamp,
    ) -> Result<(), LedgerError>;
    /// Every share set, by tenant.
    async fn shares(&self) -> Result<Vec<(TenantId, u32)>, LedgerError>;
    /// Sets a tenant's own cap of the fleet's submissions a second (`None`: no cap beyond the
    /// fleet's); a cap outside `1..=priority::CAP_PER_SECOND_MAX` is refused.
    async fn set_cap(
        &self,
        tenant: &TenantId,
        per_second: Option<u32>,
        actor: &str,
        now: Timestamp,
    ) -> Result<(), LedgerError>;
    /// Every cap set, by tenant.
    async fn caps(&self) -> Result<Vec<(TenantId, u32)>, LedgerError>;
}

const UPSERT_PROFILE: &str = "INSERT INTO tenant_profiles (tenant_id, display_name, support_url, support_email, \
     updated_at) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant_id) DO UPDATE SET display_name = $2, \
     support_url = $3, support_email = $4, updated_at = $5";
const SELECT_PROFILE: &str = "SELECT tenant_id, display_name, support_url, support_email, \
     updated_at FROM tenant_profiles WHERE tenant_id = $1";
const INSERT_CARD: &str = "INSERT INTO operation_cards (operation_id, payment_method, brand, last4, fetched_at) \
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (operation_id) DO NOTHING";
const SELECT_CARD: &str = "SELECT operation_id, payment_method, brand, last4, fetched_at \
     FROM operation_cards WHERE operation_id = $1";
const UPSERT_PROCESSOR: &str = "INSERT INTO tenant_processors (tenant_id, processor, updated_at) \
     VALUES ($1, $2, $3) ON CONFLICT (tenant_id) DO UPDATE SET processor = $2, updated_at = $3";
const SELECT_PROCESSOR: &str = "SELECT processor FROM tenant_processors WHERE tenant_id = $1";
/// `$1` tenant, `$2` limit: its open operations carrying a destination.
static OPEN_WITH_DESTINATION: LazyLock<String> = LazyLock::new(|| {
    let terminal: Vec<String> = ALL_STATUSES
        .iter()
        .filter(|s| s.is_terminal())
        .map(|s| format!("'{}'", s.as_str()))
        .collect();
    format!(
        "SELECT id FROM operations WHERE tenant_id = $1 AND destination IS NOT NULL \
         AND status NOT IN ({}) ORDER BY id LIMIT $2",
        terminal.join(", ")
    )
});

fn decode_profile(row: &impl LedgerRow) -> Result<TenantProfile, LedgerError> {
    Ok(TenantProfile {
        tenant: row.get("tenant_id")?,
        display_name: row.get("display_name")?,
        support_url: row.get("support_url")?,
        support_email: row.get("support_email")?,
        updated_at: row.get("updated_at")?,
    })
}

fn decode_card(row: &impl LedgerRow) -> Result<OperationCard, LedgerError> {
    Ok(OperationCard {
        operation: row.get("operation_id")?,
        payment_method: row.get("payment_method")?,
        brand: row.get("brand")?,
        last4: row.get("last4")?,
        fetched_at: row.get("fetched_at")?,
    })
}

#[async_trait]
impl<DB: Dialect> ProfileLedger for Store<DB> {
    async fn set_profile(&self, p: &TenantProfile) -> Result<(), LedgerError> {
        let stmt = Stmt::new(UPSERT_PROFILE)
            .bind(&p.tenant)
            .bind(p.display_name.as_str())
            .bind(Arg::from(p.support_url.as_deref()))
            .bind(Arg::from(p.support_email.as_deref()))
            .bind(p.updated_at);
        self.execute(stmt).await?;
        Ok(())
    }

    async fn profile(&self, tenant: &TenantId) -> Result<Option<TenantProfile>, LedgerError> {
        self.first(Stmt::new(SELECT_PROFILE).bind(tenant), decode_profile)
            .await
    }

    async fn keep_card(&self, c: &OperationCard) -> Result<(), LedgerError> {
        let stmt = Stmt::new(INSERT_CARD)
            .bind(&c.operation)
            .bind(c.payment_method.as_str())
            .bind(c.brand.as_str())
            .bind(c.last4.as_str())
            .bind(c.fetched_at);
        self.execute(stmt).await?;
        Ok(())
    }

    async fn card(&self, operation: &OperationId) -> Result<Option<OperationCard>, LedgerError> {
        self.first(Stmt::new(SELECT_CARD).bind(operation), decode_card)
            .await
    }

    async fn set_processor(
        &self,
        tenant: &TenantId,
        processor: ProcessorKind,
        now: Timestamp,
    ) -> Result<(), LedgerError> {
        let stmt = Stmt::new(UPSERT_PROCESSOR)
            .bind(tenant)
            .bind(processor.as_str())
            .bind(now);
        self.execute(stmt).await?;
        Ok(())
    }

    async fn set_share(
        &self,
        tenant: &TenantId,
        share: Option<u32>,
        actor: &str,
        now: Timestamp,
    ) -> Result<(), LedgerError> {
        self.set_share_now(tenant, share, actor, now).await
    }

    async fn shares(&self) -> Result<Vec<(TenantId, u32)>, LedgerError> {
        self.shares_now().await
    }

    async fn set_cap(
        &self,
        tenant: &TenantId,
        per_second: Option<u32>,
        actor: &str,
        now: Timestamp,
    ) -> Result<(), LedgerError> {
        self.set_cap_now(tenant, per_second, actor, now).await
    }

    async fn caps(&self) -> Result<Vec<(TenantId, u32)>, LedgerError> {
        self.caps_now().await
    }

    async fn open_with_destination(
        &self,
        tenant: &TenantId,
        limit: u32,
    ) -> Result<Vec<OperationId>, LedgerError> {
        let stmt = Stmt::new(OPEN_WITH_DESTINATION.as_str())
            .bind(tenant)
            .bind(i64::from(limit));
        self.all(stmt, |row| row.get("id")).await
    }

    async fn processor(&self, tenant: &TenantId) -> Result<Option<ProcessorKind>, LedgerError> {
        let name = self
            .first(Stmt::new(SELECT_PROCESSOR).bind(tenant), |row| {
                row.get::<String>("processor")
            })
            .await?;
        name.map(|n| {
            ProcessorKind::parse(&n).ok_or_else(|| {
                LedgerError::Corrupt(format!("tenant {tenant} names an unknown processor {n:?}"))
            })
        })
        .transpose()
    }
}

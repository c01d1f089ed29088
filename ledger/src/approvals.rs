//! Approving an operation, and the single-use confirmation links that lead a
//! customer to the approval. (Links payonce mints for an assistant's request have their own budget:
//! `verification.rs`.)

use super::dialect::Dialect;
use super::moves::{legal, update};
use super::record::decode_operation;
use super::row::LedgerRow;
use super::statement::Stmt;
use super::store::Store;
use super::{
    Approval, ApprovalLink, Approvals, CustomerDecline, Inspection, LedgerError, LimitError,
    NewApproval, Operation, Operations, bounded, verification,
    verification::{LinkOrigin, NewLink},
};
use async_trait::async_trait;
use payonce_core::clock::Timestamp;
use payonce_core::id::{OperationId, TenantId, random_hex};
use payonce_core::priority::Priority;
use payonce_core::state::{Event, Status};
use std::sync::LazyLock;

/// Approves only the details the row holds now (`$3`), and enqueues the row.
static APPROVE: LazyLock<String> = LazyLock::new(|| {
    update(
        &legal(&[Status::AwaitingApproval], Event::Approve),
        "approved_hash = $3, approved_by = $4, approval_expires_at = $5, \
         available_at = CASE WHEN not_before > $6 THEN not_before ELSE $6 END, \
         updated_at = $6, last_actor = $4, last_detail = $7, priority = COALESCE($8, priority)",
        "id = $1 AND tenant_id = $2 AND details_hash = $3",
        true,
    )
});
/// The failure code a customer's decline leaves on the cancelled row, for the assistant's answer.
pub const DECLINED_BY_CUSTOMER: &str = "declined_by_customer";

/// The customer declines the details the row holds now (`$6`): the row is cancelled with the
/// customer as the actor and the proof's evidence as the event's detail.
static DECLINE: LazyLock<String> = LazyLock::new(|| {
    update(
        &legal(&[Status::AwaitingApproval], Event::Cancel),
        "updated_at = $3, last_actor = $4, last_detail = $5, failure_code = 'declined_by_customer', \
         failure_message = 'the customer declined it on the confirmation page'",
        "id = $1 AND tenant_id = $2 AND details_hash = $6",
        true,
    )
});
const INSERT_APPROVAL: &str = "INSERT INTO approvals (id, operation_id, details_hash, approved_by, method, \
     approved_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7)";
const LATEST_APPROVAL: &str = "SELECT id, details_hash, approved_by, method, approved_at, expires_at \
     FROM approvals WHERE operation_id = $1 AND revoked_at IS NULL \
     AND EXISTS (SELECT 1 FROM operations WHERE id = $1 AND tenant_id = $2) \
     ORDER BY approved_at DESC, id DESC LIMIT 1";
const SELECT_LINK: &str = "SELECT token_hash, operation_id, details_hash, created_at, expires_at, used_at \
     FROM approval_links WHERE token_hash = $1";
const USE_LINK: &str = "UPDATE approval_links SET used_at = $2 WHERE token_hash = $1 AND used_at IS NULL \
     AND expires_at > $2";

#[async_trait]
impl<DB: Dialect> Approvals for Store<DB> {
    async fn approve(
        &self,
        tenant: &TenantId,
        approval: NewApproval,
        now: Timestamp,
    ) -> Result<Operation, LedgerError> {
        let id = &approval.operation;
        if approval.expires_at <= now {
            return Err(LimitError::ApprovalExpiry.into());
        }
        let mut tx = self.begin().await?;
        let row = DB::fetch_optional(
            &mut *tx,
            Stmt::new(APPROVE.as_str())
                .bind(id)
                .bind(tenant)
                .bind(approval.details_hash.as_str())
                .bind(bounded(&approval.approved_by))
                .bind(approval.expires_at)
                .bind(now)
                .bind(bounded(&approval.method))
                .bind(approval.priority.map(Priority::stored)),
        )
        .await?;
        let Some(row) = row else {
            tx.rollback().await?;
            let current = self.get(tenant, id).await?;
            if current.details_hash != approval.details_hash {
                return Err(LedgerError::ApprovalMismatch);
            }
            if current.status != Status::AwaitingApproval
                && current.approved_hash.as_ref() == Some(&approval.details_hash)
            {
                // Approving twice is the same approval: report the stored truth.
                return Ok(current);
            }
            if let Some(settled) = super::recovery::settle_recreated(
                self,
                &current,
                &approval.details_hash,
                &approval.approved_by,
                now,
            )
            .await?
            {
                return Ok(settled);
            }
            return Err(LedgerError::WrongState {
                id: id.clone(),
                status: current.status,
                why: "only an operation awaiting approval can be approved",
            });
        };
        let op = decode_operation(&row)?;
        DB::execute(
            &mut *tx,
            Stmt::new(INSERT_APPROVAL)
                .bind(format!("apv_{}", random_hex(16)))
                .bind(id)
                .bind(approval.details_hash.as_str())
                .bind(bounded(&approval.approved_by))
                .bind(bounded(&approval.method))
                .bind(now)
                .bind(approval.expires_at),
        )
        .await?;
        tx.commit().await?;
        self.wake();
        Ok(op)
    }

    fn verification(&self) -> &dyn verification::VerificationLedger {
        self
    }

    fn profiles(&self) -> &dyn super::profiles::ProfileLedger {
        self
    }

    async fn decline(
        &self,
        tenant: &TenantId,
        decline: &CustomerDecline<'_>,
        now: Timestamp,
    ) -> Result<Operation, LedgerError> {
        let stmt = Stmt::new(DECLINE.as_str())
            .bind(decline.id)
            .bind(tenant)
            .bind(now)
            .bind(bounded(decline.actor))
            .bind(bounded(decline.evidence))
            .bind(decline.details_hash.as_str());
        match self.first(stmt, decode_operation).await? {
            Some(declined) => Ok(declined),
            None => {
                let current = self.get(tenant, decline.id).await?;
                if current.details_hash != *decline.details_hash {
                    return Err(LedgerError::ApprovalMismatch);
                }
                Err(LedgerError::WrongState {
                    id: decline.id.clone(),
                    status: current.status,
                    why: "only an operation awaiting approval can be declined by its customer",
                })
            }
        }
    }

    async fn latest_approval(
        &self,
        tenant: &TenantId,
        id: &OperationId,
    ) -> Result<Option<Approval>, LedgerError> {
        let stmt = Stmt::new(LATEST_APPROVAL).bind(id).bind(tenant);
        self.first(stmt, |r| {
            Ok(Approval {
                id: r.get("id")?,
                operation_id: id.clone(),
                details_hash: r.get("details_hash")?,
                approved_by: r.get("approved_by")?,
                method: r.get("method")?,
                approved_at: r.get("approved_at")?,
                expires_at: r.get("expires_at")?,
            })
        })
        .await
    }

    async fn create_approval_link(
        &self,
        link: &ApprovalLink,
        open_max: u32,
    ) -> Result<bool, LedgerError> {
        let stmt = verification::insert_link(&NewLink {
            link,
            origin: LinkOrigin::Service,
            open_max,
            code: None,
        });
        let mut tx = self.begin().await?;
        verification::lock_operation(&mut tx, &link.operation_id).await?;
        let inserted = DB::execute(&mut *tx, stmt).await? == 1;
        tx.commit().await?;
        Ok(inserted)
    }

    async fn approval_link(&self, token_hash: &str) -> Result<Option<ApprovalLink>, LedgerError> {
        self.first(Stmt::new(SELECT_LINK).bind(token_hash), |r| {
            Ok(ApprovalLink {
                token_hash: r.get("token_hash")?,
                operation_id: r.get("operation_id")?,
                details_hash: r.get("details_hash")?,
                created_at: r.get("created_at")?,
                expires_at: r.get("expires_at")?,
                used_at: r.get("used_at")?,
            })
        })
        .await
    }

    async fn link_operation(&self, link: &ApprovalLink) -> Result<Operation, LedgerError> {
        self.get_unscoped(&link.operation_id).await
    }

    async fn use_approval_link(
        &self,
        token_hash: &str,
        now: Timestamp,
    ) -> Result<bool, LedgerError> {
        Ok(self
            .execute(Stmt::new(USE_LINK).bind(token_hash).bind(now))
            .await?
            == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_statement_is_a_legal_move() {
        assert!(APPROVE.contains("status = 'ready', last_event = 'approve'"));
        assert!(APPROVE.contains("AND status = 'awaiting_approval'"));
    }
}

//! The one implementation of [`Ledger`](super::Ledger), expanded once per store. The statements are
//! shared (`sql.rs`) except where a store needs its own (`$dialect::CLAIM`, `$dialect::NOTIFY_READY`,
//! `$dialect::RENEW`) and the two hot-path batches (`$dialect::mark_submitting_batch`,
//! `$dialect::record_batch`), which Postgres writes with array statements.
//! Each method asserts its move through [`crate::state::transition`] before writing it.

macro_rules! impl_ledger {
    ($store:ty, $name:literal, $dialect:ident) => {
        #[async_trait::async_trait]
        impl $crate::ledger::Ledger for $store {
            fn store(&self) -> &'static str {
                $name
            }

            fn verification(&self) -> &dyn $crate::ledger::verification::VerificationLedger {
                self
            }

            fn console(&self) -> &dyn $crate::ledger::console::ConsoleLedger { self }

            async fn create_or_get(
                &self,
                new: $crate::ledger::NewOperation,
                now_ms: i64,
            ) -> Result<$crate::ledger::Created, $crate::ledger::LedgerError> {
                use $crate::ledger::{Created, LedgerError, record::decode_operation, sql};
                let d = &new.details;
                let hash = d.hash();
                let key = $crate::id::IdempotencyKey::derive(&new.id);
                let row = sqlx::query(sql::INSERT_OPERATION)
                    .bind(new.id.as_str())
                    .bind(new.tenant.as_str())
                    .bind(new.business_key.as_str())
                    .bind(d.kind().as_str())
                    .bind(d.money().amount_minor())
                    .bind(d.money().currency().code())
                    .bind(d.customer())
                    .bind(d.payment_method())
                    .bind(d.invoice())
                    .bind(d.destination())
                    .bind(d.description())
                    .bind(hash.as_str())
                    .bind(key.as_str())
                    .bind(now_ms)
                    .bind($crate::ledger::bounded(&new.actor))
                    .fetch_optional(&self.pool)
                    .await?;
                if let Some(row) = row {
                    return Ok(Created { operation: decode_operation(&row)?, inserted: true });
                }
                let row = sqlx::query(sql::SELECT_BY_BUSINESS_KEY)
                    .bind(new.tenant.as_str())
                    .bind(new.business_key.as_str())
                    .fetch_optional(&self.pool)
                    .await?
                    .ok_or_else(|| LedgerError::Corrupt("business key conflict without a row".into()))?;
                let existing = decode_operation(&row)?;
                if existing.details_hash != hash {
                    return Err(LedgerError::Conflict { existing: existing.id });
                }
                Ok(Created { operation: existing, inserted: false })
            }

            async fn get(
                &self,
                tenant: &$crate::id::TenantId,
                id: &$crate::id::OperationId,
            ) -> Result<$crate::ledger::Operation, $crate::ledger::LedgerError> {
                use $crate::ledger::{LedgerError, record::decode_operation, sql};
                let row = sqlx::query(sql::SELECT_BY_ID_IN_TENANT)
                    .bind(id.as_str())
                    .bind(tenant.as_str())
                    .fetch_optional(&self.pool)
                    .await?
                    .ok_or(LedgerError::NotFound)?;
                decode_operation(&row)
            }

            async fn get_unscoped(
                &self,
                id: &$crate::id::OperationId,
            ) -> Result<$crate::ledger::Operation, $crate::ledger::LedgerError> {
                use $crate::ledger::{LedgerError, record::decode_operation, sql};
                let row = sqlx::query(sql::SELECT_BY_ID)
                    .bind(id.as_str())
                    .fetch_optional(&self.pool)
                    .await?
                    .ok_or(LedgerError::NotFound)?;
                decode_operation(&row)
            }

            async fn events(
                &self,
                id: &$crate::id::OperationId,
            ) -> Result<Vec<$crate::ledger::OperationEvent>, $crate::ledger::LedgerError> {
                use $crate::ledger::{record::decode_event, sql};
                let rows = sqlx::query(sql::SELECT_EVENTS).bind(id.as_str()).fetch_all(&self.pool).await?;
                rows.iter().map(|r| decode_event(r)).collect()
            }

            async fn approve(
                &self,
                tenant: &$crate::id::TenantId,
                id: &$crate::id::OperationId,
                approval: $crate::ledger::NewApproval,
                now_ms: i64,
            ) -> Result<$crate::ledger::Operation, $crate::ledger::LedgerError> {
                use $crate::ledger::{LedgerError, record::decode_operation, sql};
                use $crate::state::{Event, Status, transition};
                if approval.expires_at_ms <= now_ms {
                    return Err(LedgerError::Limit("approval expiry must be in the future".into()));
                }
                let mut tx = self.pool.begin().await?;
                let row = sqlx::query(sql::APPROVE)
                    .bind(id.as_str())
                    .bind(tenant.as_str())
                    .bind(approval.details_hash.as_str())
                    .bind($crate::ledger::bounded(&approval.approved_by))
                    .bind(approval.expires_at_ms)
                    .bind(now_ms)
                    .bind($crate::ledger::bounded(&approval.method))
                    .fetch_optional(&mut *tx)
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
                    return Err(LedgerError::WrongState {
                        id: id.clone(),
                        status: current.status,
                        why: "only an operation awaiting approval can be approved",
                    });
                };
                let op = decode_operation(&row)?;
                transition(Status::AwaitingApproval, Event::Approve)?;
                sqlx::query(sql::INSERT_APPROVAL)
                    .bind(format!("apv_{}", $crate::id::random_hex(16)))
                    .bind(id.as_str())
                    .bind(approval.details_hash.as_str())
                    .bind($crate::ledger::bounded(&approval.approved_by))
                    .bind($crate::ledger::bounded(&approval.method))
                    .bind(now_ms)
                    .bind(approval.expires_at_ms)
                    .execute(&mut *tx)
                    .await?;
                if let Some(notify) = $dialect::NOTIFY_READY {
                    sqlx::query(notify).execute(&mut *tx).await?;
                }
                tx.commit().await?;
                self.wake_local();
                Ok(op)
            }

            async fn wait_for_ready(&self, max_wait: std::time::Duration) {
                self.wait_ready(max_wait).await
            }

            async fn latest_approval(
                &self,
                id: &$crate::id::OperationId,
            ) -> Result<Option<$crate::ledger::Approval>, $crate::ledger::LedgerError> {
                use $crate::ledger::{Approval, LedgerError, sql};
                use sqlx::Row;
                let row = sqlx::query(sql::LATEST_APPROVAL).bind(id.as_str()).fetch_optional(&self.pool).await?;
                row.map(|r| {
                    Ok::<_, LedgerError>(Approval {
                        id: r.try_get("id")?,
                        operation_id: id.clone(),
                        details_hash: r.try_get("details_hash")?,
                        approved_by: r.try_get("approved_by")?,
                        method: r.try_get("method")?,
                        approved_at_ms: r.try_get("approved_at")?,
                        expires_at_ms: r.try_get("expires_at")?,
                    })
                })
                .transpose()
            }

            async fn cancel(
                &self,
                tenant: &$crate::id::TenantId,
                id: &$crate::id::OperationId,
                actor: &str,
                now_ms: i64,
            ) -> Result<$crate::ledger::Operation, $crate::ledger::LedgerError> {
                use $crate::ledger::{LedgerError, record::decode_operation, sql};
                use $crate::state::Status;
                let row = sqlx::query(sql::CANCEL)
                    .bind(id.as_str())
                    .bind(tenant.as_str())
                    .bind(now_ms)
                    .bind($crate::ledger::bounded(actor))
                    .fetch_optional(&self.pool)
                    .await?;
                match row {
                    Some(row) => decode_operation(&row),
                    None => {
                        let current = self.get(tenant, id).await?;
                        if current.status == Status::Cancelled {
                            return Ok(current);
                        }
                        Err(LedgerError::WrongState {
                            id: id.clone(),
                            status: current.status,
                            why: "only an operation that has not started executing can be cancelled",
                        })
                    }
                }
            }

            async fn claim(
                &self,
                owner: &str,
                batch: u32,
                lease_ttl_ms: i64,
                now_ms: i64,
            ) -> Result<Vec<$crate::ledger::Claimed>, $crate::ledger::LedgerError> {
                use $crate::ledger::{CLAIM_BATCH_MAX, LedgerError, record::decode_operation};
                if batch == 0 || batch > CLAIM_BATCH_MAX {
                    return Err(LedgerError::Limit(format!("claim batch must be 1..={CLAIM_BATCH_MAX}")));
                }
                if lease_ttl_ms <= 0 {
                    return Err(LedgerError::Limit("lease TTL must be positive".into()));
                }
                let rows = sqlx::query($dialect::CLAIM)
                    .bind(now_ms)
                    .bind(i64::from(batch))
                    .bind(owner)
                    .bind(now_ms + lease_ttl_ms)
                    .fetch_all(&self.pool)
                    .await?;
                rows.iter().map(|r| decode_operation(r)).collect()
            }

            async fn renew(
                &self,
                owner: &str,
                held: &[$crate::id::OperationId],
                lease_ttl_ms: i64,
                now_ms: i64,
            ) -> Result<Vec<($crate::id::OperationId, i64)>, $crate::ledger::LedgerError> {
                use $crate::ledger::LedgerError;
                use sqlx::Row;
                if held.is_empty() {
                    return Ok(Vec::new());
                }
                let ids: Vec<&str> = held.iter().map(|id| id.as_str()).collect();
                let ids = serde_json::to_string(&ids).map_err(|e| LedgerError::Corrupt(e.to_string()))?;
                let rows = sqlx::query($dialect::RENEW)
                    .bind(owner)
                    .bind(now_ms)
                    .bind(now_ms + lease_ttl_ms)
                    .bind(ids)
                    .fetch_all(&self.pool)
                    .await?;
                rows.iter()
                    .map(|r| {
                        let id: String = r.try_get("id")?;
                        let id = $crate::id::OperationId::parse(&id)
                            .map_err(|e| LedgerError::Corrupt(e.to_string()))?;
                        Ok((id, r.try_get("attempt")?))
                    })
                    .collect()
            }

            async fn mark_submitting(
                &self,
                id: &$crate::id::OperationId,
                attempt: i64,
                now_ms: i64,
            ) -> Result<(), $crate::ledger::LedgerError> {
                use $crate::ledger::{LedgerError, sql};
                let done = sqlx::query(sql::MARK_SUBMITTING)
                    .bind(id.as_str())
                    .bind(attempt)
                    .bind(now_ms)
                    .execute(&self.pool)
                    .await?;
                if done.rows_affected() == 1 { Ok(()) } else { Err(LedgerError::Fenced { id: id.clone(), attempt }) }
            }

            async fn mark_submitting_batch(
                &self,
                items: &[($crate::id::OperationId, i64)],
                now_ms: i64,
            ) -> Result<Vec<bool>, $crate::ledger::LedgerError> {
                $dialect::mark_submitting_batch(&self.pool, items, now_ms).await
            }

            async fn release(
                &self,
                id: &$crate::id::OperationId,
                attempt: i64,
                actor: &str,
                now_ms: i64,
            ) -> Result<(), $crate::ledger::LedgerError> {
                use $crate::ledger::{LedgerError, sql};
                let done = sqlx::query(sql::RELEASE)
                    .bind(id.as_str())
                    .bind(attempt)
                    .bind(now_ms)
                    .bind($crate::ledger::bounded(actor))
                    .execute(&self.pool)
                    .await?;
                if done.rows_affected() == 1 { Ok(()) } else { Err(LedgerError::Fenced { id: id.clone(), attempt }) }
            }

            async fn record(
                &self,
                id: &$crate::id::OperationId,
                attempt: i64,
                outcome: &$crate::ledger::Recorded,
                actor: &str,
                now_ms: i64,
            ) -> Result<$crate::ledger::Operation, $crate::ledger::LedgerError> {
                let mut conn = self.pool.acquire().await?;
                $crate::ledger::store::record_on!(&mut *conn, id, attempt, outcome, actor, now_ms)
            }

            async fn record_batch(
                &self,
                items: &[($crate::id::OperationId, i64, $crate::ledger::Recorded)],
                actor: &str,
                now_ms: i64,
            ) -> Result<Vec<bool>, $crate::ledger::LedgerError> {
                $dialect::record_batch(&self.pool, items, actor, now_ms).await
            }

            async fn expired_leases(
                &self,
                now_ms: i64,
                limit: u32,
            ) -> Result<Vec<$crate::ledger::ExpiredLease>, $crate::ledger::LedgerError> {
                use $crate::ledger::{ExpiredLease, LedgerError, PAGE_MAX, sql};
                use sqlx::Row;
                if limit == 0 || limit > PAGE_MAX {
                    return Err(LedgerError::Limit(format!("sweep batch must be 1..={PAGE_MAX}")));
                }
                let rows = sqlx::query(sql::EXPIRED_LEASES)
                    .bind(now_ms)
                    .bind(i64::from(limit))
                    .fetch_all(&self.pool)
                    .await?;
                rows.iter()
                    .map(|r| {
                        let id: String = r.try_get("id")?;
                        Ok(ExpiredLease {
                            id: $crate::id::OperationId::parse(&id)
                                .map_err(|e| LedgerError::Corrupt(e.to_string()))?,
                            attempt: r.try_get("attempt")?,
                            lease_owner: r.try_get("lease_owner")?,
                            lease_expires_at_ms: r.try_get("lease_expires_at")?,
                            submitted: r.try_get::<Option<i64>, _>("first_submitted_at")?.is_some(),
                        })
                    })
                    .collect()
            }

            async fn expire_lease(
                &self,
                lease: &$crate::ledger::ExpiredLease,
                actor: &str,
                now_ms: i64,
                next_check_at_ms: i64,
            ) -> Result<$crate::state::Status, $crate::ledger::LedgerError> {
                use $crate::ledger::{LedgerError, sql};
                use $crate::state::{Event, Status, transition};
                let detail = format!("lease of {} expired at {}", lease.lease_owner, lease.lease_expires_at_ms);
                let (statement, event) = if lease.submitted {
                    (sql::EXPIRE_SUBMITTED, Event::LeaseExpiredSubmitted)
                } else {
                    (sql::EXPIRE_UNSUBMITTED, Event::LeaseExpiredUnsubmitted)
                };
                let to = transition(Status::Executing, event)?;
                let done = sqlx::query(statement)
                    .bind(lease.id.as_str())
                    .bind(lease.attempt)
                    .bind(now_ms)
                    .bind($crate::ledger::bounded(actor))
                    .bind(detail)
                    .bind(next_check_at_ms)
                    .execute(&self.pool)
                    .await?;
                if done.rows_affected() == 1 {
                    Ok(to)
                } else {
                    Err(LedgerError::Fenced { id: lease.id.clone(), attempt: lease.attempt })
                }
            }

            async fn due_for_check(
                &self,
                now_ms: i64,
                limit: u32,
            ) -> Result<Vec<$crate::ledger::Operation>, $crate::ledger::LedgerError> {
                use $crate::ledger::{LedgerError, PAGE_MAX, record::decode_operation, sql};
                if limit == 0 || limit > PAGE_MAX {
                    return Err(LedgerError::Limit(format!("sweep batch must be 1..={PAGE_MAX}")));
                }
                let rows = sqlx::query(sql::DUE_FOR_CHECK)
                    .bind(now_ms)
                    .bind(i64::from(limit))
                    .fetch_all(&self.pool)
                    .await?;
                rows.iter().map(|r| decode_operation(r)).collect()
            }

            async fn defer_check(
                &self,
                id: &$crate::id::OperationId,
                attempt: i64,
                next_check_at_ms: i64,
                detail: &str,
                actor: &str,
                now_ms: i64,
            ) -> Result<(), $crate::ledger::LedgerError> {
                use $crate::ledger::{LedgerError, sql};
                $crate::state::transition($crate::state::Status::Unknown, $crate::state::Event::OutcomeUnknown)?;
                let done = sqlx::query(sql::DEFER_CHECK)
                    .bind(id.as_str())
                    .bind(attempt)
                    .bind(next_check_at_ms)
                    .bind($crate::ledger::bounded(detail))
                    .bind($crate::ledger::bounded(actor))
                    .bind(now_ms)
                    .execute(&self.pool)
                    .await?;
                if done.rows_affected() == 1 { Ok(()) } else { Err(LedgerError::Fenced { id: id.clone(), attempt }) }
            }

            async fn claim_unknown(
                &self,
                id: &$crate::id::OperationId,
                attempt: i64,
                owner: &str,
                lease_ttl_ms: i64,
                why: &str,
                now_ms: i64,
            ) -> Result<$crate::ledger::Claimed, $crate::ledger::LedgerError> {
                use $crate::ledger::{LedgerError, record::decode_operation, sql};
                $crate::state::transition($crate::state::Status::Unknown, $crate::state::Event::Claim)?;
                let row = sqlx::query(sql::CLAIM_UNKNOWN)
                    .bind(id.as_str())
                    .bind(attempt)
                    .bind(owner)
                    .bind(now_ms + lease_ttl_ms)
                    .bind(now_ms)
                    .bind($crate::ledger::bounded(why))
                    .fetch_optional(&self.pool)
                    .await?
                    .ok_or_else(|| LedgerError::Fenced { id: id.clone(), attempt })?;
                decode_operation(&row)
            }

            async fn escalate(
                &self,
                id: &$crate::id::OperationId,
                attempt: i64,
                reason: &str,
                actor: &str,
                now_ms: i64,
            ) -> Result<(), $crate::ledger::LedgerError> {
                use $crate::ledger::{LedgerError, sql};
                $crate::state::transition($crate::state::Status::Unknown, $crate::state::Event::Escalate)?;
                let done = sqlx::query(sql::ESCALATE_UNKNOWN)
                    .bind(id.as_str())
                    .bind(attempt)
                    .bind($crate::ledger::bounded(reason))
                    .bind($crate::ledger::bounded(actor))
                    .bind(now_ms)
                    .execute(&self.pool)
                    .await?;
                if done.rows_affected() == 1 { Ok(()) } else { Err(LedgerError::Fenced { id: id.clone(), attempt }) }
            }

            async fn apply_report(
                &self,
                id: &$crate::id::OperationId,
                report: &$crate::ledger::Report,
                source: &str,
                now_ms: i64,
            ) -> Result<$crate::ledger::Applied, $crate::ledger::LedgerError> {
                use $crate::ledger::{LedgerError, report::plan_report};
                // A racing writer can move the row between the read and the fenced write: re-plan.
                for _ in 0..$crate::ledger::report::REPORT_RETRIES_MAX {
                    let current = self.get_unscoped(id).await?;
                    let plan = plan_report(&current, report, source)?;
                    let mut conn = self.pool.acquire().await?;
                    if let Some(applied) =
                        $crate::ledger::store::write_plan!(&mut *conn, &current, plan, source, now_ms)
                    {
                        return Ok(applied);
                    }
                }
                Err(LedgerError::Fenced { id: id.clone(), attempt: -1 })
            }

            async fn resolve(
                &self,
                id: &$crate::id::OperationId,
                resolution: &$crate::ledger::Resolution,
                actor: &str,
                reason: &str,
                now_ms: i64,
            ) -> Result<$crate::ledger::Operation, $crate::ledger::LedgerError> {
                use $crate::ledger::{LedgerError, report::plan_resolution};
                let current = self.get_unscoped(id).await?;
                let plan = plan_resolution(&current, resolution, reason)?;
                let mut conn = self.pool.acquire().await?;
                let written = $crate::ledger::store::write_plan!(&mut *conn, &current, plan, actor, now_ms);
                // SQLite has one connection: give it back before reading.
                drop(conn);
                match written {
                    Some(_) => self.get_unscoped(id).await,
                    None => Err(LedgerError::Fenced { id: id.clone(), attempt: current.attempt }),
                }
            }

            async fn list(
                &self,
                filter: &$crate::ledger::ListFilter,
            ) -> Result<Vec<$crate::ledger::Operation>, $crate::ledger::LedgerError> {
                use $crate::ledger::{LedgerError, PAGE_MAX, record::decode_operation, sql};
                if filter.limit == 0 || filter.limit > PAGE_MAX {
                    return Err(LedgerError::Limit(format!("page size must be 1..={PAGE_MAX}")));
                }
                let statuses: Vec<$crate::state::Status> = if filter.statuses.is_empty() {
                    $crate::state::ALL_STATUSES.to_vec()
                } else {
                    filter.statuses.clone()
                };
                let mut all = Vec::new();
                for status in statuses {
                    let rows = sqlx::query(sql::LIST)
                        .bind(status.as_str())
                        .bind(filter.updated_before_ms.unwrap_or(i64::MAX))
                        .bind(filter.tenant.as_ref().map(|t| t.as_str().to_string()))
                        .bind(i64::from(filter.limit))
                        .fetch_all(&self.pool)
                        .await?;
                    for r in &rows {
                        all.push(decode_operation(r)?);
                    }
                }
                all.sort_by_key(|o| (o.updated_at_ms, o.id.clone()));
                all.truncate(filter.limit as usize);
                Ok(all)
            }

            async fn ping(&self) -> Result<(), $crate::ledger::LedgerError> {
                sqlx::query($crate::ledger::sql::PING).execute(&self.pool).await?;
                Ok(())
            }

            async fn count_by_status(
                &self,
            ) -> Result<Vec<$crate::ledger::StatusCount>, $crate::ledger::LedgerError> {
                use $crate::ledger::{LedgerError, StatusCount, sql};
                use sqlx::Row;
                let rows = sqlx::query(sql::COUNT_BY_STATUS).fetch_all(&self.pool).await?;
                rows.iter()
                    .map(|r| {
                        let s: String = r.try_get("status")?;
                        Ok(StatusCount {
                            status: $crate::state::Status::parse(&s)
                                .ok_or_else(|| LedgerError::Corrupt(format!("unknown status {s}")))?,
                            count: r.try_get("n")?,
                            oldest_updated_at_ms: r.try_get("oldest")?,
                            oldest_submitted_at_ms: r.try_get("oldest_submitted")?,
                        })
                    })
                    .collect()
            }

            async fn create_approval_link(
                &self,
                link: &$crate::ledger::ApprovalLink,
                open_max: u32,
            ) -> Result<bool, $crate::ledger::LedgerError> {
                let done = sqlx::query($crate::ledger::sql::INSERT_LINK)
                    .bind(&link.token_hash)
                    .bind(link.operation_id.as_str())
                    .bind(&link.details_hash)
                    .bind(link.created_at_ms)
                    .bind(link.expires_at_ms)
                    .bind(i64::from(open_max))
                    .execute(&self.pool)
                    .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn approval_link(
                &self,
                token_hash: &str,
            ) -> Result<Option<$crate::ledger::ApprovalLink>, $crate::ledger::LedgerError> {
                use $crate::ledger::{ApprovalLink, LedgerError};
                use sqlx::Row;
                let row = sqlx::query($crate::ledger::sql::SELECT_LINK)
                    .bind(token_hash)
                    .fetch_optional(&self.pool)
                    .await?;
                row.map(|r| {
                    let op: String = r.try_get("operation_id")?;
                    Ok::<_, LedgerError>(ApprovalLink {
                        token_hash: r.try_get("token_hash")?,
                        operation_id: $crate::id::OperationId::parse(&op)
                            .map_err(|e| LedgerError::Corrupt(e.to_string()))?,
                        details_hash: r.try_get("details_hash")?,
                        created_at_ms: r.try_get("created_at")?,
                        expires_at_ms: r.try_get("expires_at")?,
                        used_at_ms: r.try_get("used_at")?,
                    })
                })
                .transpose()
            }

            async fn use_approval_link(
                &self,
                token_hash: &str,
                now_ms: i64,
            ) -> Result<bool, $crate::ledger::LedgerError> {
                let done = sqlx::query($crate::ledger::sql::USE_LINK)
                    .bind(token_hash)
                    .bind(now_ms)
                    .execute(&self.pool)
                    .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn insert_processor_event(
                &self,
                processor: &str,
                event_id: &str,
                event_type: &str,
                operation: Option<&$crate::id::OperationId>,
                payload: &str,
                now_ms: i64,
            ) -> Result<bool, $crate::ledger::LedgerError> {
                let done = sqlx::query($crate::ledger::sql::INSERT_PROCESSOR_EVENT)
                    .bind(processor)
                    .bind(event_id)
                    .bind(event_type)
                    .bind(operation.map(|o| o.as_str().to_string()))
                    .bind(payload)
                    .bind(now_ms)
                    .execute(&self.pool)
                    .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn pending_processor_events(
                &self,
                now_ms: i64,
                limit: u32,
            ) -> Result<Vec<$crate::ledger::StoredProcessorEvent>, $crate::ledger::LedgerError> {
                use sqlx::Row;
                use $crate::ledger::LedgerError;
                let limit = limit.min($crate::ledger::PAGE_MAX);
                let rows = sqlx::query($crate::ledger::sql::PENDING_PROCESSOR_EVENTS)
                    .bind(now_ms)
                    .bind(i64::from(limit))
                    .fetch_all(&self.pool)
                    .await?;
                rows.iter()
                    .map(|r| {
                        let operation: Option<String> = r.try_get("operation_id")?;
                        let operation = operation
                            .map(|o| $crate::id::OperationId::parse(&o))
                            .transpose()
                            .map_err(|e| LedgerError::Corrupt(format!("processor event operation id: {e}")))?;
                        Ok($crate::ledger::StoredProcessorEvent {
                            processor: r.try_get("processor")?,
                            event_id: r.try_get("event_id")?,
                            event_type: r.try_get("event_type")?,
                            operation,
                            payload: r.try_get("payload")?,
                            checks: r.try_get("checks")?,
                        })
                    })
                    .collect()
            }

            async fn defer_processor_event(
                &self,
                processor: &str,
                event_id: &str,
                check_after_ms: i64,
                why: &str,
                _now_ms: i64,
            ) -> Result<(), $crate::ledger::LedgerError> {
                sqlx::query($crate::ledger::sql::DEFER_PROCESSOR_EVENT)
                    .bind(processor)
                    .bind(event_id)
                    .bind(check_after_ms)
                    .bind($crate::ledger::bounded(why))
                    .execute(&self.pool)
                    .await?;
                Ok(())
            }

            async fn mark_processor_event(
                &self,
                processor: &str,
                event_id: &str,
                outcome: &str,
                now_ms: i64,
            ) -> Result<(), $crate::ledger::LedgerError> {
                sqlx::query($crate::ledger::sql::MARK_PROCESSOR_EVENT)
                    .bind(processor)
                    .bind(event_id)
                    .bind(now_ms)
                    .bind($crate::ledger::bounded(outcome))
                    .execute(&self.pool)
                    .await?;
                Ok(())
            }

            async fn record_tool_call(
                &self,
                tenant: &$crate::id::TenantId,
                operation: Option<&$crate::id::OperationId>,
                provider: &str,
                provider_call_id: Option<&str>,
                tool: &str,
                now_ms: i64,
            ) -> Result<(), $crate::ledger::LedgerError> {
                sqlx::query($crate::ledger::sql::INSERT_TOOL_CALL)
                    .bind(tenant.as_str())
                    .bind(operation.map(|o| o.as_str().to_string()))
                    .bind($crate::ledger::bounded(provider))
                    .bind(provider_call_id.map($crate::ledger::bounded))
                    .bind($crate::ledger::bounded(tool))
                    .bind(now_ms)
                    .execute(&self.pool)
                    .await?;
                Ok(())
            }

            async fn tool_calls(
                &self,
                id: &$crate::id::OperationId,
            ) -> Result<Vec<(String, Option<String>, String)>, $crate::ledger::LedgerError> {
                use sqlx::Row;
                let rows = sqlx::query($crate::ledger::sql::SELECT_TOOL_CALLS)
                    .bind(id.as_str())
                    .fetch_all(&self.pool)
                    .await?;
                rows.iter()
                    .map(|r| Ok((r.try_get("provider")?, r.try_get("provider_call_id")?, r.try_get("tool")?)))
                    .collect()
            }

            async fn keep_tool_answer(
                &self,
                tenant: &$crate::id::TenantId,
                key: &str,
                fingerprint: &str,
                answer: &str,
                now_ms: i64,
            ) -> Result<(String, String), $crate::ledger::LedgerError> {
                sqlx::query($crate::ledger::sql::KEEP_TOOL_ANSWER)
                    .bind(tenant.as_str())
                    .bind(key)
                    .bind(fingerprint)
                    .bind(answer)
                    .bind(now_ms)
                    .execute(&self.pool)
                    .await?;
                self.tool_answer(tenant, key).await?.ok_or_else(|| {
                    $crate::ledger::LedgerError::Corrupt("a kept tool answer is missing".into())
                })
            }

            async fn tool_answer(
                &self,
                tenant: &$crate::id::TenantId,
                key: &str,
            ) -> Result<Option<(String, String)>, $crate::ledger::LedgerError> {
                use sqlx::Row;
                let row = sqlx::query($crate::ledger::sql::SELECT_TOOL_ANSWER)
                    .bind(tenant.as_str())
                    .bind(key)
                    .fetch_optional(&self.pool)
                    .await?;
                row.map(|r| Ok((r.try_get("fingerprint")?, r.try_get("answer")?)))
                    .transpose()
            }

            async fn try_maintenance_lease(
                &self,
                name: &str,
                owner: &str,
                ttl_ms: i64,
                now_ms: i64,
            ) -> Result<bool, $crate::ledger::LedgerError> {
                let done = sqlx::query($crate::ledger::sql::TRY_MAINTENANCE_LEASE)
                    .bind(name)
                    .bind(owner)
                    .bind(now_ms + ttl_ms)
                    .bind(now_ms)
                    .execute(&self.pool)
                    .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn drop_maintenance_lease(&self, name: &str, owner: &str) -> Result<(), $crate::ledger::LedgerError> {
                sqlx::query($crate::ledger::sql::DROP_MAINTENANCE_LEASE).bind(name).bind(owner).execute(&self.pool).await?;
                Ok(())
            }

            async fn insert_api_key(
                &self,
                key: &$crate::ledger::ApiKeyRecord,
            ) -> Result<(), $crate::ledger::LedgerError> {
                sqlx::query($crate::ledger::sql::INSERT_API_KEY)
                    .bind(&key.key_id)
                    .bind(&key.key_hash)
                    .bind(key.tenant.as_str())
                    .bind(key.role.as_str())
                    .bind($crate::ledger::bounded(&key.label))
                    .bind(key.created_at_ms)
                    .bind(key.expires_at_ms)
                    .execute(&self.pool)
                    .await?;
                Ok(())
            }

            async fn find_api_key(
                &self,
                key_hash: &str,
                now_ms: i64,
            ) -> Result<Option<$crate::ledger::ApiKeyRecord>, $crate::ledger::LedgerError> {
                let row = sqlx::query($crate::ledger::sql::FIND_API_KEY)
                    .bind(key_hash)
                    .bind(now_ms)
                    .fetch_optional(&self.pool)
                    .await?;
                row.as_ref().map($crate::ledger::record::decode_api_key).transpose()
            }

            async fn api_key(
                &self,
                key_id: &str,
            ) -> Result<Option<$crate::ledger::ApiKeyRecord>, $crate::ledger::LedgerError> {
                let row = sqlx::query($crate::ledger::sql::SELECT_API_KEY)
                    .bind(key_id)
                    .fetch_optional(&self.pool)
                    .await?;
                row.as_ref().map($crate::ledger::record::decode_api_key).transpose()
            }

            async fn list_api_keys(
                &self,
                tenant: Option<&$crate::id::TenantId>,
                limit: u32,
            ) -> Result<Vec<$crate::ledger::ApiKeyRecord>, $crate::ledger::LedgerError> {
                let rows = sqlx::query($crate::ledger::sql::LIST_API_KEYS)
                    .bind(tenant.map($crate::id::TenantId::as_str))
                    .bind(i64::from(limit.min($crate::ledger::PAGE_MAX)))
                    .fetch_all(&self.pool)
                    .await?;
                rows.iter().map($crate::ledger::record::decode_api_key).collect()
            }

            async fn revoke_api_key(
                &self,
                key_id: &str,
                revoked_by: &str,
                reason: &str,
                now_ms: i64,
            ) -> Result<bool, $crate::ledger::LedgerError> {
                let done = sqlx::query($crate::ledger::sql::REVOKE_API_KEY)
                    .bind(key_id)
                    .bind(now_ms)
                    .bind($crate::ledger::bounded(revoked_by))
                    .bind($crate::ledger::bounded(reason))
                    .execute(&self.pool)
                    .await?;
                if done.rows_affected() == 1 {
                    return Ok(true);
                }
                match self.api_key(key_id).await? {
                    Some(_) => Ok(false),
                    None => Err($crate::ledger::LedgerError::NotFound),
                }
            }

            async fn rotate_api_key(
                &self,
                old_id: &str,
                new: &$crate::ledger::ApiKeyRecord,
                old_until_ms: i64,
                now_ms: i64,
            ) -> Result<bool, $crate::ledger::LedgerError> {
                let mut tx = self.pool.begin().await?;
                let retired = sqlx::query($crate::ledger::sql::RETIRE_API_KEY)
                    .bind(old_id)
                    .bind(&new.key_id)
                    .bind(old_until_ms)
                    .bind(now_ms)
                    .execute(&mut *tx)
                    .await?;
                if retired.rows_affected() != 1 {
                    tx.rollback().await?;
                    return match self.api_key(old_id).await? {
                        Some(_) => Ok(false),
                        None => Err($crate::ledger::LedgerError::NotFound),
                    };
                }
                sqlx::query($crate::ledger::sql::INSERT_API_KEY)
                    .bind(&new.key_id)
                    .bind(&new.key_hash)
                    .bind(new.tenant.as_str())
                    .bind(new.role.as_str())
                    .bind($crate::ledger::bounded(&new.label))
                    .bind(new.created_at_ms)
                    .bind(new.expires_at_ms)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(true)
            }

            async fn touch_api_key(
                &self,
                key_id: &str,
                now_ms: i64,
                resolution_ms: i64,
            ) -> Result<(), $crate::ledger::LedgerError> {
                sqlx::query($crate::ledger::sql::TOUCH_API_KEY)
                    .bind(key_id)
                    .bind(now_ms)
                    .bind(now_ms.saturating_sub(resolution_ms))
                    .execute(&self.pool)
                    .await?;
                Ok(())
            }
        }
    };
}

/// Records one fenced outcome on an executor (a pooled connection or an open transaction).
macro_rules! record_on {
    ($exec:expr, $id:expr, $attempt:expr, $outcome:expr, $actor:expr, $now:expr) => {{
        use $crate::ledger::{LedgerError, Recorded, bounded, record::decode_operation, sql};
        use $crate::state::{Event, Status, transition};
        let (id, attempt, actor, now_ms): (&$crate::id::OperationId, i64, &str, i64) = ($id, $attempt, $actor, $now);
        let exec = $exec;
        let actor = bounded(actor);
        let row = match $outcome {
            Recorded::Succeeded { reference, result } => {
                transition(Status::Executing, Event::ProcessorSucceeded)?;
                sqlx::query(sql::RECORD_SUCCEEDED)
                    .bind(id.as_str())
                    .bind(attempt)
                    .bind(reference.as_str())
                    .bind(result.to_string())
                    .bind(&actor)
                    .bind(now_ms)
                    .fetch_optional(&mut *exec)
                    .await?
            }
            Recorded::Failed { code, message, reference } => {
                transition(Status::Executing, Event::ProcessorFailed)?;
                sqlx::query(sql::RECORD_FAILED)
                    .bind(id.as_str())
                    .bind(attempt)
                    .bind(reference.as_deref())
                    .bind(bounded(code))
                    .bind(bounded(message))
                    .bind(&actor)
                    .bind(now_ms)
                    .fetch_optional(&mut *exec)
                    .await?
            }
            Recorded::RetryLater { reason, available_at_ms } => {
                transition(Status::Executing, Event::NotSubmittedRetry)?;
                let row = sqlx::query(sql::RECORD_RETRY)
                    .bind(id.as_str())
                    .bind(attempt)
                    .bind(*available_at_ms)
                    .bind(bounded(reason))
                    .bind(&actor)
                    .bind(now_ms)
                    .fetch_optional(&mut *exec)
                    .await?;
                match row {
                    Some(row) => Some(row),
                    // An earlier attempt may have reached the processor: this is unknown, not retryable.
                    None => {
                        transition(Status::Executing, Event::OutcomeUnknown)?;
                        sqlx::query(sql::RECORD_UNKNOWN)
                            .bind(id.as_str())
                            .bind(attempt)
                            .bind(now_ms)
                            .bind(Option::<String>::None)
                            .bind(bounded(&format!("{reason}; an earlier attempt may have reached the processor")))
                            .bind(&actor)
                            .bind(now_ms)
                            .fetch_optional(&mut *exec)
                            .await?
                    }
                }
            }
            Recorded::Exhausted { reason } => {
                transition(Status::Executing, Event::NotSubmittedExhausted)?;
                sqlx::query(sql::RECORD_EXHAUSTED)
                    .bind(id.as_str())
                    .bind(attempt)
                    .bind(bounded(reason))
                    .bind(&actor)
                    .bind(now_ms)
                    .fetch_optional(&mut *exec)
                    .await?
            }
            Recorded::Unknown { reason, reference, next_check_at_ms } => {
                transition(Status::Executing, Event::OutcomeUnknown)?;
                sqlx::query(sql::RECORD_UNKNOWN)
                    .bind(id.as_str())
                    .bind(attempt)
                    .bind(*next_check_at_ms)
                    .bind(reference.as_deref())
                    .bind(bounded(reason))
                    .bind(&actor)
                    .bind(now_ms)
                    .fetch_optional(&mut *exec)
                    .await?
            }
            Recorded::Rejected { code, message } => {
                transition(Status::Executing, Event::RejectBeforeSubmit)?;
                let row = sqlx::query(sql::RECORD_REJECTED)
                    .bind(id.as_str())
                    .bind(attempt)
                    .bind(bounded(code))
                    .bind(bounded(message))
                    .bind(&actor)
                    .bind(now_ms)
                    .fetch_optional(&mut *exec)
                    .await?;
                match row {
                    Some(row) => Some(row),
                    // Something was submitted earlier: "rejected" would hide it. A human decides.
                    None => {
                        transition(Status::Executing, Event::Escalate)?;
                        sqlx::query(sql::RECORD_ATTENTION)
                            .bind(id.as_str())
                            .bind(attempt)
                            .bind(bounded(&format!("{code}: {message}; an earlier attempt was submitted")))
                            .bind(&actor)
                            .bind(now_ms)
                            .fetch_optional(&mut *exec)
                            .await?
                    }
                }
            }
            Recorded::NeedsAttention { reason } => {
                transition(Status::Executing, Event::Escalate)?;
                sqlx::query(sql::RECORD_ATTENTION)
                    .bind(id.as_str())
                    .bind(attempt)
                    .bind(bounded(reason))
                    .bind(&actor)
                    .bind(now_ms)
                    .fetch_optional(&mut *exec)
                    .await?
            }
        };
        match row {
            Some(row) => decode_operation(&row),
            None => Err(LedgerError::Fenced { id: id.clone(), attempt }),
        }
    }};
}

/// Writes a planned report or resolution, fenced by the status and attempt it was planned from.
/// Evaluates to `Some(applied)` when written (or nothing to write), `None` when a racing writer won.
macro_rules! write_plan {
    ($exec:expr, $current:expr, $plan:expr, $actor:expr, $now:expr) => {{
        use $crate::ledger::report::Plan;
        use $crate::ledger::{bounded, sql};
        let exec = $exec;
        let current: &$crate::ledger::Operation = $current;
        let (actor, now_ms): (&str, i64) = ($actor, $now);
        let actor = bounded(actor);
        let id = current.id.as_str();
        let from = current.status.as_str();
        match $plan {
            Plan::Nothing(applied) => Some(applied),
            Plan::Note {
                event,
                detail,
                applied,
            } => {
                sqlx::query(sql::NOTE)
                    .bind(id)
                    .bind(now_ms)
                    .bind(event)
                    .bind(&actor)
                    .bind(bounded(&detail))
                    .execute(&mut *exec)
                    .await?;
                Some(applied)
            }
            Plan::Succeed {
                event,
                reference,
                result,
                detail,
                applied,
            } => sqlx::query(sql::SET_SUCCEEDED)
                .bind(id)
                .bind(current.attempt)
                .bind(from)
                .bind(reference)
                .bind(result.map(|r| r.to_string()))
                .bind(event)
                .bind(&actor)
                .bind(now_ms)
                .bind(bounded(&detail))
                .fetch_optional(&mut *exec)
                .await?
                .map(|_| applied),
            Plan::Fail {
                event,
                reference,
                code,
                message,
                detail,
                applied,
            } => sqlx::query(sql::SET_FAILED)
                .bind(id)
                .bind(current.attempt)
                .bind(from)
                .bind(reference)
                .bind(bounded(&code))
                .bind(bounded(&message))
                .bind(event)
                .bind(&actor)
                .bind(now_ms)
                .bind(bounded(&detail))
                .fetch_optional(&mut *exec)
                .await?
                .map(|_| applied),
            Plan::Conflict { detail, applied } => sqlx::query(sql::SET_CONFLICT)
                .bind(id)
                .bind(current.attempt)
                .bind(from)
                .bind(bounded(&detail))
                .bind(&actor)
                .bind(now_ms)
                .fetch_optional(&mut *exec)
                .await?
                .map(|_| applied),
            Plan::Retry { detail } => sqlx::query(sql::SET_RETRY)
                .bind(id)
                .bind(current.attempt)
                .bind(from)
                .bind(now_ms)
                .bind(&actor)
                .bind(bounded(&detail))
                .fetch_optional(&mut *exec)
                .await?
                .map(|_| $crate::ledger::Applied::Moved($crate::state::Status::Ready)),
        }
    }};
}

pub(crate) use impl_ledger;
pub(crate) use record_on;
pub(crate) use write_plan;

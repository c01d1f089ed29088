//! Creating and approving operations at full speed through the real ledger calls (`create_or_get`,
//! then `approve`: the row, its audit events, the approval record, the wake-up), next to a plain
//! single-row insert on the same server in the same run, both with the same number of clients, each
//! statement its own commit.

use crate::database::ScratchDatabase;
use crate::load::bench_details;
use crate::report::Rate;
use anyhow::Context;
use payonce_shared::id::{BusinessKey, OperationId, TenantId};
use payonce_shared::ledger::{NewApproval, NewOperation, SharedLedger};
use payonce_shared::state::Status;
use sqlx::postgres::PgPoolOptions;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SCHEMA: &str = "CREATE TABLE intake (id BIGSERIAL PRIMARY KEY, business_key TEXT NOT NULL UNIQUE, \
     payload TEXT NOT NULL, created_at BIGINT NOT NULL)";
const INSERT: &str = "INSERT INTO intake (business_key, payload, created_at) VALUES ($1, $2, $3)";
const COUNT: &str = "SELECT COUNT(*) FROM intake";

/// Both rates.
#[derive(Debug, Clone)]
pub struct Intake {
    /// Operations created and approved through the ledger, per second.
    pub payonce: Rate,
    /// Plain single-row inserts, per second.
    pub baseline: Rate,
}

/// Creates and approves `operations` with `clients` concurrent callers, then inserts as many plain
/// rows the same way; checks every operation ended `ready` and every row is in the table.
pub async fn measure(admin_url: &str, clients: u32, operations: u64) -> anyhow::Result<Intake> {
    let db = ScratchDatabase::create(admin_url).await?;
    let pool = PgPoolOptions::new()
        .max_connections(clients)
        .connect(&db.url)
        .await
        .context("connect for the insert baseline")?;
    sqlx::raw_sql(SCHEMA).execute(&pool).await?;
    let started = Instant::now();
    let mut loops = tokio::task::JoinSet::new();
    for client in 0..u64::from(clients) {
        let pool = pool.clone();
        loops.spawn(async move {
            let mut i = client;
            while i < operations {
                sqlx::query(INSERT)
                    .bind(format!("bench:intake:{i}"))
                    .bind("{\"invoice\":\"INV-BENCH\",\"amount\":2048}")
                    .bind(crate::now_ms())
                    .execute(&pool)
                    .await?;
                i += u64::from(clients);
            }
            Ok::<(), sqlx::Error>(())
        });
    }
    while let Some(joined) = loops.join_next().await {
        joined??;
    }
    let baseline = Rate::new(operations, started.elapsed());
    let rows: i64 = sqlx::query_scalar(COUNT).fetch_one(&pool).await?;
    anyhow::ensure!(
        u64::try_from(rows).ok() == Some(operations),
        "the insert baseline left {rows} rows for {operations}"
    );
    pool.close().await;

    let ledger = db.ledger(clients).await?;
    let shared: SharedLedger = Arc::new(ledger.clone());
    let started = Instant::now();
    let mut loops = tokio::task::JoinSet::new();
    for client in 0..u64::from(clients) {
        let shared = shared.clone();
        loops.spawn(async move {
            let mut i = client;
            while i < operations {
                create_and_approve(&shared, &format!("bench:intake:{i}")).await?;
                i += u64::from(clients);
            }
            Ok::<(), anyhow::Error>(())
        });
    }
    while let Some(joined) = loops.join_next().await {
        joined??;
    }
    let payonce = Rate::new(operations, started.elapsed());
    let counts = shared.count_by_status().await?;
    let ready = counts
        .iter()
        .find(|c| c.status == Status::Ready)
        .map_or(0, |c| c.count);
    anyhow::ensure!(
        u64::try_from(ready).ok() == Some(operations) && counts.len() == 1,
        "after intake: {counts:?}, expected {operations} ready"
    );
    ledger.pool().close().await;
    db.drop_now().await?;
    Ok(Intake { payonce, baseline })
}

/// One operation created and approved through the ledger calls, as the API does for a service key.
pub async fn create_and_approve(ledger: &SharedLedger, business_key: &str) -> anyhow::Result<()> {
    let details = bench_details();
    let hash = details.hash();
    let tenant = TenantId::parse("bench")?;
    let now = crate::now();
    let created = ledger
        .create_or_get(
            NewOperation {
                id: OperationId::generate(),
                tenant: tenant.clone(),
                business_key: BusinessKey::parse(business_key)?,
                details,
                actor: "bench".into(),
            },
            now,
        )
        .await?;
    ledger
        .approve(
            &tenant,
            &created.operation.id,
            NewApproval {
                details_hash: hash,
                approved_by: "bench".into(),
                method: "bench".into(),
                expires_at_ms: now + Duration::from_secs(86_400),
            },
            crate::now(),
        )
        .await?;
    Ok(())
}

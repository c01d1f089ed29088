//! Creating and approving operations at full speed through the real ledger calls (`create_or_get`,
//! then `approve`: the row, its audit events, the approval record, the wake-up), and through the HTTP
//! API with a real service key (`POST /v1/operations`, then `POST /v1/operations/{id}/approve`: key
//! lookup, JSON, validation, the same ledger calls), next to a plain single-row insert on the same
//! server in the same run, all with the same number of clients, each statement its own commit.

use crate::database::ScratchDatabase;
use crate::load::bench_details;
use crate::report::Rate;
use anyhow::Context;
use payonce_shared::id::{BusinessKey, TenantId};
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
    /// Operations created and approved through the HTTP API with a service key, per second.
    pub http: Rate,
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
    let pool_for_loops = pool.clone();
    let baseline = spread(clients, operations, move |i| {
        let pool = pool_for_loops.clone();
        async move {
            sqlx::query(INSERT)
                .bind(format!("bench:intake:{i}"))
                .bind("{\"invoice\":\"INV-BENCH\",\"amount\":2048}")
                .bind(crate::now_ms())
                .execute(&pool)
                .await?;
            Ok(())
        }
    })
    .await?;
    let rows: i64 = sqlx::query_scalar(COUNT).fetch_one(&pool).await?;
    anyhow::ensure!(
        u64::try_from(rows).ok() == Some(operations),
        "the insert baseline left {rows} rows for {operations}"
    );
    pool.close().await;

    let ledger = db.ledger(clients).await?;
    let shared: SharedLedger = Arc::new(ledger.clone());
    let callers = shared.clone();
    let payonce = spread(clients, operations, move |i| {
        let ledger = callers.clone();
        async move { create_and_approve(&ledger, &format!("bench:intake:{i}")).await }
    })
    .await?;
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
    let http = through_api(admin_url, clients, operations).await?;
    Ok(Intake {
        payonce,
        http,
        baseline,
    })
}

/// Creates and approves `operations` through the API (served in this process on a loopback port, a
/// pool of `clients` connections) with `clients` concurrent HTTP callers holding one service key;
/// checks every operation ended `ready`.
async fn through_api(admin_url: &str, clients: u32, operations: u64) -> anyhow::Result<Rate> {
    let db = ScratchDatabase::create(admin_url).await?;
    let ledger = db.ledger(clients).await?;
    let shared: SharedLedger = Arc::new(ledger.clone());
    let tenant = TenantId::parse("bench")?;
    let key = payonce_api::create_api_key(
        shared.as_ref(),
        &tenant,
        payonce_shared::ledger::Role::Service,
        "bench-billing",
        crate::now(),
    )
    .await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let config = payonce_api::ApiConfig {
        listen: addr,
        public_base_url: format!("http://{addr}"),
        ..payonce_api::ApiConfig::default()
    };
    let state = payonce_api::AppState::new(
        shared.clone(),
        Arc::new(payonce_shared::clock::SystemClock),
        config,
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(payonce_api::serve_listener(listener, state, async move {
        let _ = stopped.await;
    }));
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(usize::try_from(clients)?)
        .build()?;
    let base = format!("http://{addr}");
    let rate = spread(clients, operations, move |i| {
        let (http, base, key) = (http.clone(), base.clone(), key.clone());
        async move { create_and_approve_over_http(&http, &base, &key, i).await }
    })
    .await?;
    let counts = shared.count_by_status().await?;
    anyhow::ensure!(
        counts.len() == 1
            && counts[0].status == Status::Ready
            && u64::try_from(counts[0].count).ok() == Some(operations),
        "after intake over HTTP: {counts:?}, expected {operations} ready"
    );
    let _ = stop.send(());
    server.await??;
    ledger.pool().close().await;
    db.drop_now().await?;
    Ok(rate)
}

/// One operation created and approved through the API with a service key, as a merchant's backend
/// does: the create answers 201 with the details hash the approval must name.
async fn create_and_approve_over_http(
    http: &reqwest::Client,
    base: &str,
    key: &str,
    i: u64,
) -> anyhow::Result<()> {
    let created = http
        .post(format!("{base}/v1/operations"))
        .bearer_auth(key)
        .json(&serde_json::json!({
            "business_key": format!("bench:intake:{i}"),
            "details": {
                "kind": "payment", "amount": 2048, "currency": "usd", "customer": "cus_bench",
                "payment_method": "pm_card_visa", "invoice": format!("INV-BENCH-{i}"),
            },
        }))
        .send()
        .await?;
    anyhow::ensure!(
        created.status() == reqwest::StatusCode::CREATED,
        "create answered {}",
        created.status()
    );
    let op: serde_json::Value = created.json().await?;
    let id = op["id"]
        .as_str()
        .context("the created operation has an id")?;
    let approved = http
        .post(format!("{base}/v1/operations/{id}/approve"))
        .bearer_auth(key)
        .json(&serde_json::json!({
            "details_hash": op["details_hash"],
            "approved_by": "customer:cus_bench",
        }))
        .send()
        .await?;
    anyhow::ensure!(
        approved.status() == reqwest::StatusCode::OK,
        "approve answered {}",
        approved.status()
    );
    Ok(())
}

/// One operation created and approved through the ledger calls, as the API does for a service key.
pub async fn create_and_approve(ledger: &SharedLedger, business_key: &str) -> anyhow::Result<()> {
    let details = bench_details();
    let hash = details.hash();
    let tenant = TenantId::parse("bench")?;
    let now = crate::now();
    let created = ledger
        .create_or_get(
            NewOperation::keyed(
                &payonce_shared::intention::KeySecret::generate(),
                tenant.clone(),
                BusinessKey::parse(business_key)?,
                details,
                "bench".into(),
            ),
            now,
        )
        .await?;
    ledger
        .approve(
            &tenant,
            NewApproval {
                operation: created.operation.id.clone(),
                details_hash: hash,
                approved_by: "bench".into(),
                method: "bench".into(),
                expires_at: now + Duration::from_secs(86_400),
            },
            crate::now(),
        )
        .await?;
    Ok(())
}

/// Runs `one(i)` for every `i` in `0..operations`, spread over `clients` concurrent loops (loop `c`
/// takes `c`, `c + clients`, …); the rate from the first call to the last answer.
async fn spread<F, Fut>(clients: u32, operations: u64, one: F) -> anyhow::Result<Rate>
where
    F: Fn(u64) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = anyhow::Result<()>> + Send,
{
    let started = Instant::now();
    let mut loops = tokio::task::JoinSet::new();
    for client in 0..u64::from(clients) {
        let one = one.clone();
        loops.spawn(async move {
            let mut i = client;
            while i < operations {
                one(i).await?;
                i += u64::from(clients);
            }
            Ok::<(), anyhow::Error>(())
        });
    }
    while let Some(joined) = loops.join_next().await {
        joined??;
    }
    Ok(Rate::new(operations, started.elapsed()))
}

//! Creating and approving operations at full speed through the real ledger calls (`create_or_get`,
//! then `approve`: the row, its audit events, the approval record, the wake-up), and through the HTTP
//! API with a real service key: `POST /v1/operations`, then `POST /v1/operations/{id}/approve` (key
//! lookup, JSON, validation, the same ledger calls); `POST /v1/operations` with its approval (one
//! request); `POST /v1/operations/batch`; and `payonce enqueue` on a CSV file. All next to a plain
//! single-row insert on the same server in the same run, with the same number of clients, each
//! plain insert its own commit, and the batch route next to one `COPY` of as many plain rows; each
//! with the WAL it wrote.

use crate::database::ScratchDatabase;
use crate::load::bench_details;
use crate::report::Rate;
use crate::wal::{Cost, Mark};
use anyhow::Context;
use payonce_core::id::{BusinessKey, TenantId};
use payonce_core::state::Status;
use payonce_ledger::{NewApproval, NewOperation, SharedLedger};
use sqlx::Connection;
use sqlx::postgres::PgPoolOptions;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SCHEMA: &str = "CREATE TABLE intake (id BIGSERIAL PRIMARY KEY, business_key TEXT NOT NULL UNIQUE, \
     payload TEXT NOT NULL, created_at BIGINT NOT NULL)";
const INSERT: &str = "INSERT INTO intake (business_key, payload, created_at) VALUES ($1, $2, $3)";
const COUNT: &str = "SELECT COUNT(*) FROM intake";
/// The same rows as the plain inserts, streamed in one `COPY` (text format).
const COPY: &str = "COPY intake (business_key, payload, created_at) FROM STDIN";

/// Every rate of the section.
#[derive(Debug, Clone)]
pub struct Intake {
    /// Operations created and approved through the ledger calls, per second.
    pub payonce: Rate,
    /// Operations created and approved through the HTTP API with a service key (create, then
    /// approve: two requests each), per second.
    pub http: Rate,
    /// The same, one request each (`POST /v1/operations` with its `approval`).
    pub http_one: Rate,
    /// Single creates per ledger write in that row (the api's group commit).
    pub http_one_per_group: f64,
    /// The same through `POST /v1/operations/batch`, [`batch_size`] per request.
    pub http_batch: Rate,
    /// The same through `payonce enqueue` on a CSV file (one process, one batch at a time); `None`
    /// without a `payonce` binary.
    pub enqueue: Option<Rate>,
    /// Plain single-row inserts, per second.
    pub baseline: Rate,
    /// The batch route's row count in one `COPY` into the plain table, one client, per second.
    pub copy: Rate,
    /// What each wrote, for as many items as its rate counts: the plain inserts, `COPY`, one
    /// request per operation, the batch route.
    pub wal: IntakeWal,
}

/// The WAL of the intake rows (see [`Intake::wal`]).
#[derive(Debug, Clone, Copy)]
pub struct IntakeWal {
    /// Plain single-row inserts.
    pub baseline: Cost,
    /// `COPY` of the plain rows.
    pub copy: Cost,
    /// `POST /v1/operations` with its approval, one request per operation.
    pub http_one: Cost,
    /// `POST /v1/operations/batch`.
    pub http_batch: Cost,
}

/// How many times the section's operation count the batch and enqueue rows create: a batch of
/// 1,000 holds a fifth of a 5,000-operation run, so the rows would time one round of requests.
pub const BATCH_ROWS_SCALE: u64 = 4;

/// Operations per batch request for a run of `operations` with `clients` callers: every caller
/// sends at least one, none more than the route takes.
pub fn batch_size(clients: u32, operations: u64) -> u64 {
    let per_client = operations.div_ceil(u64::from(clients.max(1))).max(1);
    per_client.min(payonce_ledger::intake::BATCH_ITEMS_MAX as u64)
}

/// How the HTTP rows send their operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    /// `POST /v1/operations`, then `POST /v1/operations/{id}/approve`.
    CreateThenApprove,
    /// `POST /v1/operations` with its approval.
    OneRequest,
    /// `POST /v1/operations/batch`, this many a request.
    Batch(u64),
}

/// Creates and approves `operations` with `clients` concurrent callers, then inserts as many plain
/// rows the same way; checks every operation ended `ready` and every row is in the table. The
/// batch and enqueue rows create [`BATCH_ROWS_SCALE`] times as many.
pub async fn measure(
    admin_url: &str,
    clients: u32,
    operations: u64,
    payonce_bin: Option<&std::path::Path>,
) -> anyhow::Result<Intake> {
    let db = ScratchDatabase::create(admin_url).await?;
    let pool = PgPoolOptions::new()
        .max_connections(clients)
        .connect(&db.url)
        .await
        .context("connect for the insert baseline")?;
    sqlx::raw_sql(SCHEMA).execute(&pool).await?;
    let pool_for_loops = pool.clone();
    let mark = Mark::take(&db.url).await?;
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
    let baseline_wal = mark.cost().await?;
    pool.close().await;

    let ledger = db.ledger(clients).await?;
    let shared: SharedLedger = Arc::new(ledger.clone());
    let callers = shared.clone();
    let payonce = spread(clients, operations, move |i| {
        let ledger = callers.clone();
        async move { create_and_approve(&ledger, &format!("bench:intake:{i}")).await }
    })
    .await?;
    ensure_ready(&shared, operations).await?;
    ledger.pool().close().await;
    db.drop_now().await?;
    let (http, _, _) = through_api(admin_url, clients, operations, Way::CreateThenApprove).await?;
    let (http_one, http_one_per_group, http_one_wal) =
        through_api(admin_url, clients, operations, Way::OneRequest).await?;
    let scaled = operations * BATCH_ROWS_SCALE;
    let (copy, copy_wal) = copy_rows(admin_url, scaled).await?;
    let (http_batch, _, http_batch_wal) = through_api(
        admin_url,
        clients,
        scaled,
        Way::Batch(batch_size(clients, scaled)),
    )
    .await?;
    let enqueue = match payonce_bin {
        Some(bin) => Some(through_enqueue(admin_url, bin, scaled).await?),
        None => None,
    };
    Ok(Intake {
        payonce,
        http,
        http_one,
        http_one_per_group,
        http_batch,
        enqueue,
        baseline,
        copy,
        wal: IntakeWal {
            baseline: baseline_wal,
            copy: copy_wal,
            http_one: http_one_wal,
            http_batch: http_batch_wal,
        },
    })
}

/// `rows` of the plain insert baseline's rows streamed into its table in one `COPY` on one
/// connection (as `psql \copy` would), on a fresh database; checks the table holds them all.
async fn copy_rows(admin_url: &str, rows: u64) -> anyhow::Result<(Rate, Cost)> {
    let db = ScratchDatabase::create(admin_url).await?;
    let mut conn = sqlx::PgConnection::connect(&db.url).await?;
    sqlx::raw_sql(SCHEMA).execute(&mut conn).await?;
    let now = crate::now_ms();
    let mut data = String::with_capacity(usize::try_from(rows)? * 64);
    for i in 0..rows {
        data.push_str(&format!(
            "bench:intake:{i}\t{{\"invoice\":\"INV-BENCH\",\"amount\":2048}}\t{now}\n"
        ));
    }
    let mark = Mark::take(&db.url).await?;
    let started = Instant::now();
    let mut copy = conn.copy_in_raw(COPY).await?;
    copy.send(data.as_bytes()).await?;
    let copied = copy.finish().await?;
    let rate = Rate::new(copied, started.elapsed());
    let wal = mark.cost().await?;
    let in_table: i64 = sqlx::query_scalar(COUNT).fetch_one(&mut conn).await?;
    anyhow::ensure!(
        copied == rows && u64::try_from(in_table).ok() == Some(rows),
        "COPY wrote {copied} rows, the table has {in_table}, for {rows}"
    );
    conn.close().await.ok();
    db.drop_now().await?;
    Ok((rate, wal))
}

/// Checks every operation of the ledger is `ready` and there are `operations` of them.
async fn ensure_ready(ledger: &SharedLedger, operations: u64) -> anyhow::Result<()> {
    let counts = ledger.count_by_status().await?;
    anyhow::ensure!(
        counts.len() == 1
            && counts[0].status == Status::Ready
            && u64::try_from(counts[0].count).ok() == Some(operations),
        "after intake: {counts:?}, expected {operations} ready"
    );
    Ok(())
}

/// The api served in this process on a loopback port over a fresh database, with one service key.
struct ServedApi {
    db: ScratchDatabase,
    ledger: payonce_ledger::postgres::PostgresLedger,
    shared: SharedLedger,
    base: String,
    key: String,
    group: Arc<payonce_api::group_commit::GroupCommit>,
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<Result<(), payonce_api::ApiError>>,
}

impl ServedApi {
    async fn start(admin_url: &str, connections: u32) -> anyhow::Result<Self> {
        let db = ScratchDatabase::create(admin_url).await?;
        let ledger = db.ledger(connections).await?;
        let shared: SharedLedger = Arc::new(ledger.clone());
        let tenant = TenantId::parse("bench")?;
        let key = payonce_api::create_api_key(
            shared.as_ref(),
            &tenant,
            payonce_ledger::Role::Service,
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
            Arc::new(payonce_core::clock::SystemClock),
            config,
        );
        let group = Arc::clone(state.group_commit());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(payonce_api::serve_listener(listener, state, async move {
            let _ = stopped.await;
        }));
        Ok(ServedApi {
            db,
            ledger,
            shared,
            base: format!("http://{addr}"),
            key,
            group,
            stop,
            server,
        })
    }

    async fn finish(self) -> anyhow::Result<()> {
        let _ = self.stop.send(());
        self.server.await??;
        self.ledger.pool().close().await;
        self.db.drop_now().await?;
        Ok(())
    }
}

/// Creates and approves `operations` through the API (served in this process on a loopback port, a
/// pool of `clients` connections) with `clients` concurrent HTTP callers holding one service key,
/// sent the `way` given; checks every operation ended `ready`. The rate, and the single creates
/// the api wrote per ledger write (0 when it grouped none).
async fn through_api(
    admin_url: &str,
    clients: u32,
    operations: u64,
    way: Way,
) -> anyhow::Result<(Rate, f64, Cost)> {
    let api = ServedApi::start(admin_url, clients).await?;
    let mark = Mark::take(&api.db.url).await?;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(usize::try_from(clients)?)
        .build()?;
    let (base, key) = (api.base.clone(), api.key.clone());
    let rate = match way {
        Way::CreateThenApprove | Way::OneRequest => {
            spread(clients, operations, move |i| {
                let (http, base, key) = (http.clone(), base.clone(), key.clone());
                async move {
                    if way == Way::OneRequest {
                        create_approved_over_http(&http, &base, &key, i).await
                    } else {
                        create_and_approve_over_http(&http, &base, &key, i).await
                    }
                }
            })
            .await?
        }
        Way::Batch(size) => {
            let requests = operations.div_ceil(size);
            let started = Instant::now();
            spread(clients, requests, move |r| {
                let (http, base, key) = (http.clone(), base.clone(), key.clone());
                let first = r * size;
                let last = (first + size).min(operations);
                async move { batch_over_http(&http, &base, &key, first..last).await }
            })
            .await?;
            Rate::new(operations, started.elapsed())
        }
    };
    let wal = mark.cost().await?;
    ensure_ready(&api.shared, operations).await?;
    let (items, groups) = (api.group.items().get(), api.group.groups().get());
    let per_group = if groups == 0 {
        0.0
    } else {
        items as f64 / groups as f64
    };
    api.finish().await?;
    Ok((rate, per_group, wal))
}

/// The JSON body of operation `i` with its approval, as a billing system holding the customer's
/// mandate sends it.
fn approved_body(i: u64) -> serde_json::Value {
    let details = serde_json::json!({
        "kind": "payment", "amount": 2048, "currency": "usd", "customer": "cus_bench",
        "payment_method": "pm_card_visa", "invoice": format!("INV-BENCH-{i}"),
    });
    let raw: payonce_core::details::RawDetails =
        serde_json::from_value(details.clone()).unwrap_or_else(|e| unreachable!("{e}"));
    let hash = payonce_core::details::Details::parse(&raw)
        .unwrap_or_else(|e| unreachable!("the bench details are valid: {e}"))
        .hash();
    serde_json::json!({
        "business_key": format!("bench:intake:{i}"),
        "details": details,
        "approval": {"details_hash": hash.as_str(), "approved_by": "mandate:cus_bench"},
    })
}

/// One operation created and approved in one request (`POST /v1/operations` with `approval`).
async fn create_approved_over_http(
    http: &reqwest::Client,
    base: &str,
    key: &str,
    i: u64,
) -> anyhow::Result<()> {
    let created = http
        .post(format!("{base}/v1/operations"))
        .bearer_auth(key)
        .json(&approved_body(i))
        .send()
        .await?;
    anyhow::ensure!(
        created.status() == reqwest::StatusCode::CREATED,
        "create with approval answered {}",
        created.status()
    );
    Ok(())
}

/// Operations `range` created and approved in one `POST /v1/operations/batch`.
async fn batch_over_http(
    http: &reqwest::Client,
    base: &str,
    key: &str,
    range: std::ops::Range<u64>,
) -> anyhow::Result<()> {
    let count = range.end - range.start;
    let items: Vec<serde_json::Value> = range.map(approved_body).collect();
    let answer = http
        .post(format!("{base}/v1/operations/batch"))
        .bearer_auth(key)
        .json(&serde_json::json!({ "operations": items }))
        .send()
        .await?;
    anyhow::ensure!(
        answer.status() == reqwest::StatusCode::OK,
        "the batch answered {}",
        answer.status()
    );
    let answer: serde_json::Value = answer.json().await?;
    anyhow::ensure!(
        answer["summary"]["created"].as_u64() == Some(count),
        "the batch created {} of {count}",
        answer["summary"]["created"]
    );
    Ok(())
}

/// `operations` created and approved by `payonce enqueue` (the binary `bin`) from a CSV file,
/// against the api served in this process; the rate from the command's start to its exit.
async fn through_enqueue(
    admin_url: &str,
    bin: &std::path::Path,
    operations: u64,
) -> anyhow::Result<Rate> {
    let api = ServedApi::start(admin_url, 4).await?;
    let file =
        std::env::temp_dir().join(format!("payonce-bench-enqueue-{}.csv", std::process::id()));
    let mut csv =
        String::from("business_key,amount,currency,customer,payment_method,invoice,approved_by\n");
    for i in 0..operations {
        csv.push_str(&format!(
            "bench:intake:{i},2048,usd,cus_bench,pm_card_visa,INV-BENCH-{i},mandate:cus_bench\n"
        ));
    }
    std::fs::write(&file, csv).context("write the enqueue file")?;
    let started = Instant::now();
    let output = tokio::process::Command::new(bin)
        .arg("enqueue")
        .arg(&file)
        .arg("--json")
        .env("PAYONCE_API_URL", &api.base)
        .env("PAYONCE_API_KEY", &api.key)
        .kill_on_drop(true)
        .output()
        .await
        .context("run payonce enqueue")?;
    let elapsed = started.elapsed();
    std::fs::remove_file(&file).ok();
    anyhow::ensure!(
        output.status.success(),
        "payonce enqueue exited {}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    anyhow::ensure!(
        summary["created"].as_u64() == Some(operations),
        "payonce enqueue created {} of {operations}",
        summary["created"]
    );
    ensure_ready(&api.shared, operations).await?;
    api.finish().await?;
    Ok(Rate::new(operations, elapsed))
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
                &payonce_core::intention::KeySecret::generate(),
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
                priority: None,
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

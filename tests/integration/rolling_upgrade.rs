//! Rolling upgrades (issue 56): running `payonce api`, `worker` and `reconciler` processes on Postgres
//! keep paying across the next migration's shape applied beside them, with no restart (the previous
//! release's binary cannot be built here, so the mixed-version window is a running fleet meeting a
//! schema newer than itself); a serving process never migrates and refuses a schema behind it or
//! ahead of it by a contract step, with the sentence that says what to do; a process whose
//! statements fail goes unready within seconds; a reconciler whose sweeps fail gives the sweep
//! lease back. Each test has a database of its own; the shared server is never stopped.

use crate::api::post_json as post;
use crate::serve::{free_port, get, payonce, scratch};
use crate::support::postgres::{TestDatabase, fresh_database, migrated_database};
use crate::support::processes::{arm_faults, payments_for, simulator, stripe};
use crate::support::reconciler;
use crate::support::{KEY_SECRET, postgres_ledger, tenant, wait_for};
use payonce_core::clock::{Clock, SystemClock};
use payonce_ledger::schema::SCHEMA_CHECK_INTERVAL;
use payonce_ledger::{Role, SCHEMA_FAILURE_UNREADY};
use payonce_simulator::{Simulator, SimulatorConfig};
use serde_json::json;
use sqlx::Connection;
use std::process::Stdio;
use std::time::Duration;
use tokio::process::Child;

/// How long a process may take to start, refuse, or a payment to settle.
const DEADLINE: Duration = Duration::from_secs(60);
/// Invoices paid before and after the migration.
const INVOICES: usize = 3;

/// The next release's migration shape: a column on the two tables the issue saw fail.
const ADDITIVE: &str =
    "ALTER TABLE operations ADD COLUMN x int; ALTER TABLE api_keys ADD COLUMN x int";

/// `payonce ARGS` on `url` and `sim`, its stderr kept in `dir/<log>`.
fn spawn(dir: &std::path::Path, args: &[&str], url: &str, sim: &str, log: &str) -> Child {
    let log = std::fs::File::create(dir.join(log)).expect("a log file");
    payonce(dir, args)
        .env("PAYONCE_DATABASE_URL", url)
        .env("PAYONCE_KEY_SECRET", KEY_SECRET)
        .env("PAYONCE_PROCESSOR_URL", sim)
        .env("PAYONCE_POLL_MS", "50")
        .env("PAYONCE_SWEEP_INTERVAL_MS", "200")
        .env("PAYONCE_CHECK_BACKOFF_MS", "200")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn payonce")
}

async fn ready(base: &str) -> u16 {
    get(&format!("{base}/readyz")).await.0
}

/// A migrated Postgres database of its own, and a service key of the test tenant in it.
async fn database_with_service_key() -> (TestDatabase, String) {
    let (ledger, url) = postgres_ledger().await;
    let key = crate::support::api_key(&ledger, Role::Service, "billing").await;
    (url, key)
}

/// Creates and approves `invoice` through the api with a service key; its id. Every answer must be
/// a success: a 500 is what the issue saw after a migration.
async fn create_and_approve(http: &reqwest::Client, api: &str, key: &str, invoice: &str) -> String {
    let details = json!({"amount": 2048, "currency": "usd", "customer": "cus_up",
        "payment_method": "pm_card_visa", "invoice": invoice});
    let (status, created) = post(
        http,
        format!("{api}/v1/operations"),
        key,
        json!({"business_key": format!("invoice:{invoice}:pay"), "details": details}),
    )
    .await;
    assert_eq!(status, 201, "create {invoice}: {created}");
    let id = created["id"].as_str().expect("an id").to_string();
    let (status, approved) = post(
        http,
        format!("{api}/v1/operations/{id}/approve"),
        key,
        json!({"details_hash": created["details_hash"], "approved_by": "mandate:cus_up"}),
    )
    .await;
    assert_eq!(status, 200, "approve {invoice}: {approved}");
    id
}

/// Waits until `id` succeeded (read through the api) and checks the processor has one payment.
async fn paid_once(http: &reqwest::Client, api: &str, key: &str, sim: &Simulator, id: &str) {
    crate::serve::succeeded_over_http(http, api, key, id, DEADLINE).await;
    assert_eq!(payments_for(sim, id).await, 1, "{id}: one payment");
}

#[tokio::test]
async fn a_running_fleet_keeps_paying_across_an_additive_migration_applied_beside_it() {
    let (url, key) = database_with_service_key().await;
    let sim = simulator(SimulatorConfig::default()).await;
    let dir = scratch("rolling-additive");
    let (api, worker, reconciler) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let base = sim.base_url();
    let _fleet = [
        spawn(&dir, &["api", "--listen", &api], &url, &base, "api.log"),
        spawn(
            &dir,
            &["worker", "--metrics-listen", &worker],
            &url,
            &base,
            "worker.log",
        ),
        spawn(
            &dir,
            &["reconciler", "--metrics-listen", &reconciler, "run"],
            &url,
            &base,
            "reconciler.log",
        ),
    ];
    let bases = [api, worker, reconciler].map(|a| format!("http://{a}"));
    for b in &bases {
        wait_for(&format!("{b} ready"), DEADLINE, || async {
            (ready(b).await == 200).then_some(())
        })
        .await;
    }
    let http = reqwest::Client::new();
    let api = &bases[0];
    // Every statement the fleet prepares is prepared now, before the schema changes under it.
    for i in 0..INVOICES {
        let id = create_and_approve(&http, api, &key, &format!("INV-UP-BEFORE-{i}")).await;
        paid_once(&http, api, &key, &sim, &id).await;
    }

    // The next release's `payonce migrate`, beside the running fleet: its expand step and its row.
    let mut admin = sqlx::PgConnection::connect(&url).await.expect("connect");
    sqlx::raw_sql(ADDITIVE)
        .execute(&mut admin)
        .await
        .expect("the migration");
    sqlx::query(
        "INSERT INTO payonce_migrations (version, name, applied_at, needs_version) \
         VALUES (1000, 'next_release_expand', 0, NULL)",
    )
    .execute(&mut admin)
    .await
    .expect("its record");

    // The first payment after it loses its response: the reconciler must settle it on the new
    // schema too.
    arm_faults(
        &sim,
        json!([{"match": "*", "fault": "drop_after_commit", "times": 1}]),
    )
    .await;
    for i in 0..INVOICES {
        let id = create_and_approve(&http, api, &key, &format!("INV-UP-AFTER-{i}")).await;
        paid_once(&http, api, &key, &sim, &id).await;
    }
    // Through two schema checks of every process, each stays ready on the newer schema.
    let watched = std::time::Instant::now();
    while watched.elapsed() < SCHEMA_CHECK_INTERVAL * 2 {
        for b in &bases {
            assert_eq!(ready(b).await, 200, "{b} /readyz after the migration");
        }
    }
    let id = create_and_approve(&http, api, &key, "INV-UP-LAST").await;
    paid_once(&http, api, &key, &sim, &id).await;
    let logs = std::fs::read_to_string(dir.join("api.log")).unwrap_or_default();
    assert!(
        logs.contains("ahead of this binary"),
        "the api says it runs beside a newer schema: {logs}"
    );
}

/// `payonce api`, `worker` and `reconciler run` on an empty Postgres database: each exits at once,
/// saying "run payonce migrate", and the database still has no table.
#[tokio::test]
async fn a_serving_process_on_an_empty_database_refuses_with_the_sentence_and_creates_nothing() {
    let url = fresh_database().await;
    let dir = scratch("rolling-empty");
    for args in [
        vec!["api", "--listen", "127.0.0.1:0"],
        vec!["worker"],
        vec!["reconciler", "run"],
    ] {
        let out = tokio::time::timeout(
            DEADLINE,
            payonce(&dir, &args)
                .env("PAYONCE_DATABASE_URL", url.url())
                .env("PAYONCE_KEY_SECRET", KEY_SECRET)
                .env("PAYONCE_PROCESSOR_URL", "http://127.0.0.1:9")
                .output(),
        )
        .await
        .expect("refuses at once")
        .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {stderr}");
        assert!(
            stderr.contains("run payonce migrate"),
            "{args:?} says what to do: {stderr}"
        );
    }
    let mut conn = sqlx::PgConnection::connect(&url).await.expect("connect");
    let tables: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
            .fetch_one(&mut conn)
            .await
            .expect("count");
    assert_eq!(tables, 0, "a serving process created nothing");
}

/// A database ahead of the binary by an expand step: `payonce api` starts and says so. Then the
/// next release's contract step, which only binaries knowing migration 1001 may run beside: the
/// running api stops being ready within a schema check, and a new one refuses to start.
#[tokio::test]
async fn a_serving_process_runs_beside_expand_steps_and_refuses_a_contract_it_predates() {
    let url = migrated_database().await;
    let dir = scratch("rolling-ahead");
    let mut admin = sqlx::PgConnection::connect(&url).await.expect("connect");
    sqlx::query(
        "INSERT INTO payonce_migrations (version, name, applied_at, needs_version) \
         VALUES (1000, 'next_release_expand', 0, NULL)",
    )
    .execute(&mut admin)
    .await
    .expect("an expand step");
    let listen = format!("127.0.0.1:{}", free_port());
    let _api = spawn(
        &dir,
        &["api", "--listen", &listen],
        &url,
        "http://127.0.0.1:9",
        "api.log",
    );
    let base = format!("http://{listen}");
    wait_for(
        "the api is ready beside an expand step",
        DEADLINE,
        || async { (ready(&base).await == 200).then_some(()) },
    )
    .await;
    let logs = std::fs::read_to_string(dir.join("api.log")).unwrap_or_default();
    assert!(logs.contains("ahead of this binary"), "says so: {logs}");

    sqlx::query(
        "INSERT INTO payonce_migrations (version, name, applied_at, needs_version) \
         VALUES (1001, 'next_release_contract', 0, 1001)",
    )
    .execute(&mut admin)
    .await
    .expect("a contract step");
    wait_for(
        "the running api stops being ready",
        SCHEMA_CHECK_INTERVAL * 3,
        || async { (ready(&base).await == 503).then_some(()) },
    )
    .await;
    let out = tokio::time::timeout(
        DEADLINE,
        payonce(&dir, &["api", "--listen", "127.0.0.1:0"])
            .env("PAYONCE_DATABASE_URL", url.url())
            .env("PAYONCE_KEY_SECRET", KEY_SECRET)
            .output(),
    )
    .await
    .expect("refuses at once")
    .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("incompatible migration") && stderr.contains("deploy a newer release"),
        "{stderr}"
    );
}

/// A column the running processes use is renamed beside them (a contract step applied a release
/// too early): their statements fail, and the api and the worker go unready within seconds, long
/// before anyone restarts them.
#[tokio::test]
async fn a_process_whose_ledger_statements_fail_goes_unready_within_seconds() {
    let (url, key) = database_with_service_key().await;
    let sim = simulator(SimulatorConfig::default()).await;
    let dir = scratch("rolling-unready");
    let (api, worker) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let _fleet = [
        spawn(
            &dir,
            &["api", "--listen", &api],
            &url,
            &sim.base_url(),
            "api.log",
        ),
        spawn(
            &dir,
            &["worker", "--metrics-listen", &worker],
            &url,
            &sim.base_url(),
            "worker.log",
        ),
    ];
    let bases = [api, worker].map(|a| format!("http://{a}"));
    for b in &bases {
        wait_for(&format!("{b} ready"), DEADLINE, || async {
            (ready(b).await == 200).then_some(())
        })
        .await;
    }
    // A payment scheduled a few seconds ahead: the idle worker claims nothing (it reads only the
    // lanes) until it is due, and then its claim fails as the api's create does.
    let ledger = payonce_ledger::connect(&url, 2).await.expect("connect");
    let now = ledger.now(SystemClock.now()).await.unwrap();
    let mut scheduled = payonce_ledger::NewOperation::keyed(
        &crate::support::key_secret(),
        tenant(),
        payonce_core::id::BusinessKey::parse("invoice:INV-DUE-SOON:pay").unwrap(),
        crate::support::details("INV-DUE-SOON", 2048, "pm_card_visa"),
        "service:test".into(),
    );
    scheduled.not_before = Some(now + Duration::from_secs(3));
    let row = ledger
        .create_or_get(scheduled, now)
        .await
        .unwrap()
        .operation;
    crate::support::rows::approved(&ledger, &row, now + Duration::from_secs(600), now).await;
    let mut admin = sqlx::PgConnection::connect(&url).await.expect("connect");
    sqlx::raw_sql("ALTER TABLE operations RENAME COLUMN description TO description_gone")
        .execute(&mut admin)
        .await
        .expect("the rename");
    let http = reqwest::Client::new();
    let details = json!({"amount": 2048, "currency": "usd", "customer": "cus_up",
        "payment_method": "pm_card_visa", "invoice": "INV-GONE"});
    let (status, body) = post(
        &http,
        format!("{}/v1/operations", bases[0]),
        &key,
        json!({"business_key": "invoice:INV-GONE:pay", "details": details}),
    )
    .await;
    assert!(status >= 500, "the create fails: {status} {body}");
    // The worker's claim of the scheduled payment, once due, fails the same way without any request.
    for b in &bases {
        wait_for(&format!("{b} unready"), Duration::from_secs(10), || async {
            (ready(b).await == 503).then_some(())
        })
        .await;
    }
    // And stays so while its statements keep failing (it comes back by itself once they stop).
    assert!(SCHEMA_FAILURE_UNREADY > Duration::from_secs(10));
}

/// The failing reconciler connects as a role that may take the sweep lease but not read
/// operations, so its first sweep step fails right after taking the lease. The healthy one sweeps
/// at once instead of standing down for the lease's TTL (60 s).
#[tokio::test]
async fn a_reconciler_whose_sweeps_fail_lets_another_sweep() {
    let (ledger, url) = postgres_ledger().await;
    let sim = simulator(SimulatorConfig::default()).await;
    let role = format!("payonce_t_role_{}", payonce_core::id::random_hex(6));
    let mut admin = sqlx::PgConnection::connect(&url).await.expect("connect");
    for grant in [
        format!("CREATE ROLE {role} LOGIN"),
        format!("GRANT SELECT ON payonce_migrations TO {role}"),
        format!("GRANT SELECT, INSERT, UPDATE, DELETE ON maintenance_leases TO {role}"),
    ] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(grant))
            .execute(&mut admin)
            .await
            .expect("the role");
    }
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    let failing_url = format!("{scheme}://{role}@{host}");
    let failing = payonce_ledger::connect_serving(
        &failing_url,
        &payonce_ledger::postgres::Route::default(),
        1,
        payonce_ledger::CONNECT_TIMEOUT_DEFAULT,
    )
    .await
    .expect("the failing reconciler opens the ledger");
    let reconciler = |ledger: payonce_ledger::SharedLedger, owner: &str| {
        reconciler::build(&ledger, stripe(&sim, None), owner, |c| {
            c.sweep_lease_ttl = Duration::from_secs(60);
        })
    };
    let failing_rec = reconciler(failing.clone(), "rec-failing");
    let healthy_rec = reconciler(ledger.clone(), "rec-healthy");
    // Checked before asserting, so that the role below is dropped whatever the outcome.
    let mut refused = Vec::new();
    for round in 0..2 {
        if failing_rec.sweep_once(false).await.is_ok() {
            refused.push(format!("round {round}: the failing sweep succeeded"));
        }
        match healthy_rec.sweep_once(false).await {
            Ok(report) if report.swept => {}
            Ok(report) => refused.push(format!(
                "round {round}: the healthy reconciler stood down: {:?}",
                report.actions
            )),
            Err(e) => refused.push(format!("round {round}: the healthy sweep failed: {e}")),
        }
    }
    drop((failing_rec, failing));
    // Roles are the server's, not the database's: dropped here (a session the failing pool still
    // holds may keep it; the grants are revoked either way).
    for cleanup in [
        format!("REVOKE ALL ON payonce_migrations, maintenance_leases FROM {role}"),
        format!("DROP ROLE {role}"),
    ] {
        if let Err(e) = sqlx::raw_sql(sqlx::AssertSqlSafe(cleanup))
            .execute(&mut admin)
            .await
        {
            eprintln!("cleanup of {role}: {e}");
        }
    }
    assert!(refused.is_empty(), "{refused:#?}");
}

/// A statement prepared before a change explicit column lists cannot hide (a column's type): the
/// next run meets Postgres's "cached plan must not change result type" (0A000), is prepared again
/// on the same connection and answers; the process stays ready.
#[tokio::test]
async fn a_statement_whose_cached_plan_went_stale_is_prepared_again_not_failed() {
    let url = migrated_database().await;
    // One connection: the statement below is prepared on it, then meets the change on it.
    let ledger = payonce_ledger::connect_serving(
        &url,
        &payonce_ledger::postgres::Route::default(),
        1,
        payonce_ledger::CONNECT_TIMEOUT_DEFAULT,
    )
    .await
    .expect("the ledger");
    let op =
        crate::support::ready_operation(&ledger, "INV-STALE", "pm_card_visa", SystemClock.now())
            .await;
    ledger.get(&tenant(), &op.id).await.expect("prepared");
    let mut admin = sqlx::PgConnection::connect(&url).await.expect("connect");
    sqlx::raw_sql("ALTER TABLE operations ALTER COLUMN failure_code TYPE varchar(200)")
        .execute(&mut admin)
        .await
        .expect("the type change");
    let again = ledger.get(&tenant(), &op.id).await.expect("prepared again");
    assert_eq!(again.id, op.id);
    ledger
        .probe_write(SystemClock.now())
        .await
        .expect("still ready: nothing failed");
}

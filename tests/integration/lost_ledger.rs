//! The ledger forgets what it had acknowledged (issue 37): restored from a backup taken before an
//! operation existed, after the processor was paid. The same intention must not be paid twice,
//! and the payment the ledger lost must be found and named.
//!
//! The backup and the restore are real (`pg_dump`, `psql` into a new database); the processor is
//! the simulator over HTTP; the sweep right after the restore is the real `payonce reconciler sweep
//! --once` process.

use crate::failure_injection::refund_fixtures::{approved_refund, refund_audit};
use crate::support::now;
use crate::support::postgres::{TestDatabase, fresh_database};
use crate::support::processes::{self, audit};
use crate::support::reconciler;
use crate::support::rows;
use crate::support::{self, KEY_SECRET, details, key_secret, tenant};
use payonce_core::clock::SystemClock;
use payonce_core::id::BusinessKey;
use payonce_core::state::Status;
use payonce_ledger::{self as ledger, NewOperation, SharedLedger};
use payonce_reconciler::Reconciler;
use payonce_simulator::{Simulator, SimulatorConfig};
use payonce_worker::{Worker, WorkerConfig};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

const INVOICE: &str = "INV-2048";

/// Upstream asks for `invoice:INV-2048:pay` with the same details, and the customer approves.
async fn create_and_approve(ledger: &SharedLedger) -> payonce_ledger::Operation {
    create_and_approve_invoice(ledger, INVOICE).await
}

/// Upstream asks for `invoice:{invoice}:pay`, and the customer approves.
async fn create_and_approve_invoice(
    ledger: &SharedLedger,
    invoice: &str,
) -> payonce_ledger::Operation {
    create_and_approve_amount(ledger, invoice, 2048).await
}

/// [`create_and_approve_invoice`] for `amount`.
pub(crate) async fn create_and_approve_amount(
    ledger: &SharedLedger,
    invoice: &str,
    amount: i64,
) -> payonce_ledger::Operation {
    let now = now();
    let d = details(invoice, amount, "pm_card_visa");
    let created = rows::created(ledger, &tenant(), invoice, d, now).await;
    assert!(created.inserted, "a new row in this ledger");
    rows::approved(
        ledger,
        &created.operation,
        now + Duration::from_secs(86_400),
        now,
    )
    .await
}

/// Worker passes until nothing is ready; how many operations they ran.
async fn work_all(ledger: &SharedLedger, sim: &Simulator) -> usize {
    work_counting_replays(ledger, sim).await.0
}

/// [`work_all`], and how many first submissions the processor answered as replays (the worker's
/// alert that the ledger had lost the row that paid them).
pub(crate) async fn work_counting_replays(ledger: &SharedLedger, sim: &Simulator) -> (usize, u64) {
    let worker = Worker::new(
        ledger.clone(),
        processes::stripe(sim, None),
        Arc::new(SystemClock),
        WorkerConfig::new("lost-ledger-worker"),
    )
    .unwrap();
    let mut ran = 0;
    loop {
        match worker.run_once().await.unwrap() {
            0 => {
                return (
                    ran,
                    worker.metrics().execution.replayed_first_submissions.get(),
                );
            }
            n => ran += n,
        }
    }
}

/// One worker pass: claims the ready operation and submits it.
pub(crate) async fn work(ledger: &SharedLedger, sim: &Simulator) {
    let worker = Worker::new(
        ledger.clone(),
        processes::stripe(sim, None),
        Arc::new(SystemClock),
        WorkerConfig::new("lost-ledger-worker"),
    )
    .unwrap();
    assert_eq!(worker.run_once().await.unwrap(), 1, "one operation claimed");
}

/// A reconciler on `ledger` that recreates lost rows (it holds the key secret).
pub(crate) fn scanning_reconciler(
    ledger: &SharedLedger,
    sim: &Simulator,
    name: &str,
) -> Reconciler {
    reconciler::build(ledger, processes::stripe(sim, None), name, |c| {
        c.key_secret = Some(key_secret());
    })
}

/// `pg_dump` of `url` as plain SQL.
pub(crate) fn backup(url: &str) -> Vec<u8> {
    let out = Command::new("pg_dump")
        .args(["--no-owner", "--dbname", url])
        .output()
        .expect("run pg_dump");
    assert!(
        out.status.success(),
        "pg_dump: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// A new database loaded from `dump`, dropped with the handle returned.
pub(crate) async fn restore(dump: &[u8]) -> TestDatabase {
    let url = fresh_database().await;
    let path = std::env::temp_dir().join(format!(
        "payonce-backup-{}.sql",
        payonce_core::id::random_hex(6)
    ));
    std::fs::write(&path, dump).unwrap();
    let out = Command::new("psql")
        .args(["-q", "-v", "ON_ERROR_STOP=1", "--dbname", url.url(), "-f"])
        .arg(&path)
        .output()
        .expect("run psql");
    std::fs::remove_file(&path).ok();
    assert!(
        out.status.success(),
        "psql restore: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    url
}

pub(crate) async fn paid(sim: &Simulator) -> Vec<serde_json::Value> {
    audit(sim)
        .await
        .into_iter()
        .filter(|p| p["status"] == "succeeded")
        .collect()
}

#[tokio::test]
async fn a_restored_ledger_pays_the_same_intention_once_and_the_sweep_names_the_lost_payment() {
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let (ledger, url) = support::postgres_ledger().await;
    let dump = backup(&url);

    let lost = create_and_approve(&ledger).await;
    work(&ledger, &sim).await;
    let paid_once = ledger.get(&tenant(), &lost.id).await.unwrap();
    assert_eq!(paid_once.status, Status::Succeeded);
    let reference = paid_once.external_ref.clone().unwrap();
    assert!(
        lost.idempotency_key.as_str().starts_with("po2_"),
        "the key comes from the business action: {}",
        lost.idempotency_key
    );

    // Restored twice from the backup taken before the operation existed.
    let (first, second) = (restore(&dump).await, restore(&dump).await);

    // 1. Right after the restore, cron's sweep finds the payment the ledger lost and exits 3.
    // (tokio's Command: the simulator answers on this test's runtime while the sweep runs.)
    let out = tokio::process::Command::new(support::payonce_bin())
        .args(["reconciler", "sweep", "--once"])
        .env("PAYONCE_DATABASE_URL", first.url())
        .env("PAYONCE_PROCESSOR_URL", sim.base_url())
        .env("PAYONCE_KEY_SECRET", KEY_SECRET)
        .env("RUST_LOG", "warn")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&reference) && stdout.contains(lost.id.as_str()),
        "the sweep names the payment and the operation: {stdout}"
    );
    let restored = ledger::connect(&first, 4).await.unwrap();
    let back = restored.get(&tenant(), &lost.id).await.unwrap();
    assert_eq!(back.status, Status::NeedsAttention);
    assert_eq!(
        back.idempotency_key, lost.idempotency_key,
        "recreated with the intention's key"
    );
    // Upstream asks again: it gets the row that waits for a human, not a second payment.
    let again = restored
        .create_or_get(
            NewOperation::keyed(
                &key_secret(),
                tenant(),
                BusinessKey::parse(&format!("invoice:{INVOICE}:pay")).unwrap(),
                details(INVOICE, 2048, "pm_card_visa"),
                "service:test".into(),
            ),
            now(),
        )
        .await
        .unwrap();
    assert_eq!(
        (again.inserted, again.operation.id),
        (false, lost.id.clone())
    );

    // 2. Upstream re-drives before any sweep: a new row with the same id and key, so the
    // processor sees the very same request and replays its first answer.
    let redriven = ledger::connect(&second, 4).await.unwrap();
    let new = create_and_approve(&redriven).await;
    assert_eq!(
        (&new.id, &new.idempotency_key),
        (&lost.id, &lost.idempotency_key)
    );
    work(&redriven, &sim).await;
    let done = redriven.get(&tenant(), &new.id).await.unwrap();
    assert_eq!(
        (done.status, done.external_ref.as_deref()),
        (Status::Succeeded, Some(reference.as_str())),
        "the replay is the first payment"
    );
    // The scan then finds the ledger knows this money: nothing to report.
    let rec = scanning_reconciler(&redriven, &sim, "lost-ledger-rec");
    let report = rec.sweep_once(false).await.unwrap();
    let scan = report.scan.unwrap();
    assert_eq!((scan.scanned, scan.findings(), scan.complete), (1, 0, true));

    // The processor's side: one payment for the invoice, whatever the ledgers did.
    let payments = paid(&sim).await;
    assert_eq!(payments.len(), 1, "{payments:?}");
    assert_eq!(payments[0]["id"], reference.as_str());
}

#[tokio::test]
async fn the_scan_walks_again_the_period_a_restored_watermark_covers() {
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let (ledger, url) = support::postgres_ledger().await;
    let rec = |l: &SharedLedger| scanning_reconciler(l, &sim, "scan-rec");
    // A first scan sets the watermark; the backup keeps it.
    let first = rec(&ledger).sweep_once(false).await.unwrap().scan.unwrap();
    assert_eq!((first.scanned, first.complete), (0, true));
    let dump = backup(&url);
    let lost = create_and_approve(&ledger).await;
    work(&ledger, &sim).await;
    // The live ledger scans again: it knows the payment.
    let live = rec(&ledger).sweep_once(false).await.unwrap().scan.unwrap();
    assert_eq!((live.scanned, live.findings()), (1, 0));

    // The restored ledger's watermark is the backup's, before the payment: found.
    let restored_db = restore(&dump).await;
    let restored = ledger::connect(&restored_db, 4).await.unwrap();
    let found = rec(&restored)
        .sweep_once(false)
        .await
        .unwrap()
        .scan
        .unwrap();
    assert_eq!((found.recreated, found.findings()), (1, 1), "{found:?}");
    let row = restored.get(&tenant(), &lost.id).await.unwrap();
    assert_eq!(row.status, Status::NeedsAttention);
    let events = restored.events(&tenant(), &lost.id).await.unwrap();
    assert!(
        events.iter().any(|e| e
            .detail
            .as_deref()
            .unwrap_or("")
            .starts_with(payonce_ledger::report::RECREATED_HEAD)),
        "{events:?}"
    );
    assert!(
        !events.iter().any(|e| e
            .detail
            .as_deref()
            .unwrap_or("")
            .contains("PAYMENT WITHOUT APPROVAL")),
        "one alert, not two with opposite instructions: {events:?}"
    );
    // Found once: a later scan of the same period reports nothing new.
    let later = rec(&restored)
        .sweep_once(false)
        .await
        .unwrap()
        .scan
        .unwrap();
    assert_eq!(later.findings(), 0, "{later:?}");
}

/// An asynchronous replica 0 WAL behind its primary is fine; one that never received the last
/// commits is promoted without them. Invoices 1-20 reached the replica; 21-40 were paid on the
/// primary only. After the promotion, upstream re-drives 21-30 at once (the same id and key: the
/// processor replays), the sweep runs (it finds 31-40, which the ledger lost, and recreates them
/// in needs_attention), then upstream re-drives 31-40 (they answer the rows waiting for a human).
/// One payment per invoice at the processor, and every lost one reported.
#[tokio::test]
async fn a_promoted_async_replica_pays_every_invoice_once_and_reports_what_it_lost() {
    let Some(pair) = crate::support::replication::Replicated::start() else {
        return;
    };
    let sim = processes::simulator(SimulatorConfig::default()).await;
    pair.create_database("ledger").await;
    let primary = ledger::connect(&pair.primary_url("ledger"), 4)
        .await
        .unwrap();
    let invoice = |n: usize| format!("INV-FO-{n:02}");
    for n in 1..=20 {
        create_and_approve_invoice(&primary, &invoice(n)).await;
    }
    assert_eq!(work_counting_replays(&primary, &sim).await, (20, 0));
    pair.wait_caught_up().await;
    pair.hold_wal().await;
    let mut lost = Vec::new();
    for n in 21..=40 {
        lost.push(create_and_approve_invoice(&primary, &invoice(n)).await);
    }
    assert_eq!(work_all(&primary, &sim).await, 20);
    pair.kill_primary();
    pair.promote().await;

    let promoted = ledger::connect(&pair.replica_url("ledger"), 4)
        .await
        .unwrap();
    for op in &lost {
        assert!(
            matches!(
                promoted.get(&tenant(), &op.id).await,
                Err(ledger::LedgerError::NotFound)
            ),
            "{} reached the replica",
            op.id
        );
    }
    // Re-driven before any sweep: the same rows again, the processor replays, and the worker
    // reports each replayed first submission (the ledger had lost the row that paid it).
    for n in 21..=30 {
        create_and_approve_invoice(&promoted, &invoice(n)).await;
    }
    assert_eq!(work_counting_replays(&promoted, &sim).await, (10, 10));

    let rec = scanning_reconciler(&promoted, &sim, "failover-rec");
    let scan = rec.sweep_once(false).await.unwrap().scan.unwrap();
    assert_eq!(
        (
            scan.scanned,
            scan.recreated,
            scan.unrecorded,
            scan.unrecoverable
        ),
        (40, 10, 0, 0),
        "{scan:?}"
    );
    for op in &lost[10..] {
        assert!(
            scan.found.iter().any(|line| line.contains(op.id.as_str())),
            "{} is reported: {:?}",
            op.id,
            scan.found
        );
        let row = promoted.get(&tenant(), &op.id).await.unwrap();
        assert_eq!(row.status, Status::NeedsAttention);
    }
    // Upstream re-drives the rest: each finds its row waiting for a human; nothing is submitted.
    for n in 31..=40 {
        let again = promoted
            .create_or_get(
                NewOperation::keyed(
                    &key_secret(),
                    tenant(),
                    BusinessKey::parse(&format!("invoice:{}:pay", invoice(n))).unwrap(),
                    details(&invoice(n), 2048, "pm_card_visa"),
                    "service:test".into(),
                ),
                now(),
            )
            .await
            .unwrap();
        assert_eq!(
            (again.inserted, again.operation.status),
            (false, Status::NeedsAttention)
        );
    }
    assert_eq!(work_all(&promoted, &sim).await, 0);

    // The processor's side: exactly one payment per invoice.
    let payments = paid(&sim).await;
    let mut per_invoice = std::collections::BTreeMap::<String, usize>::new();
    for p in &payments {
        let inv = p["metadata"]["payonce_invoice"]
            .as_str()
            .unwrap()
            .to_string();
        *per_invoice.entry(inv).or_default() += 1;
    }
    assert_eq!(per_invoice.len(), 40, "{per_invoice:?}");
    assert!(per_invoice.values().all(|n| *n == 1), "{per_invoice:?}");
}

/// A ledger that goes away (a failover, a restart) is a `503 unavailable` with `Retry-After`, never
/// a 500; the same create retried once the server is back makes the one operation.
#[tokio::test]
async fn an_api_whose_ledger_went_away_answers_503_with_retry_after_and_the_retry_creates_once() {
    let cluster = crate::support::cluster::Cluster::start();
    cluster.create_database("ledger").await;
    let ledger = ledger::connect(&cluster.url("ledger"), 2).await.unwrap();
    let api = crate::api::spawn(ledger.clone()).await;
    let body = serde_json::json!({
        "business_key": "invoice:INV-503:pay",
        "details": crate::api::raw_details("INV-503", 2048),
    });

    cluster.kill();
    let down = api.post("/v1/operations", &api.service, body.clone()).await;
    assert_eq!(
        (
            down.status,
            down.code().as_str(),
            down.header("retry-after")
        ),
        (503, "unavailable", "2"),
        "{}",
        down.text
    );

    cluster.pg_ctl(&["start"]);
    let back = crate::support::wait_for("the ledger is back", Duration::from_secs(30), || {
        let (api, body) = (&api, body.clone());
        async move {
            let r = api.post("/v1/operations", &api.service, body).await;
            (r.status != 503).then_some(r)
        }
    })
    .await;
    assert_eq!(back.status, 201, "{}", back.text);
    let again = api.post("/v1/operations", &api.service, body).await;
    assert_eq!(
        (again.status, again.json()["id"].clone()),
        (200, back.json()["id"].clone())
    );
    api.stop().await;
}

/// A refund the processor made after the backup the ledger was restored from: the scan makes its
/// row again from the payment's row and the refund's metadata, and sends it to a human.
#[tokio::test]
async fn a_refund_the_restored_ledger_lost_is_recreated_from_its_payment_and_reported() {
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let (ledger, url) = support::postgres_ledger().await;
    let payment = create_and_approve(&ledger).await;
    work(&ledger, &sim).await;
    let payment = ledger.get(&tenant(), &payment.id).await.unwrap();
    assert_eq!(payment.status, Status::Succeeded);
    let dump = backup(&url);

    let refund = approved_refund(&ledger, &payment, "refund:INV-2048:1", 500).await;
    work(&ledger, &sim).await;
    let refunded = ledger.get(&tenant(), &refund.id).await.unwrap();
    assert_eq!(refunded.status, Status::Succeeded);
    let reference = refunded.external_ref.clone().unwrap();

    let restored_db = restore(&dump).await;
    let restored = ledger::connect(&restored_db, 4).await.unwrap();
    let rec = scanning_reconciler(&restored, &sim, "refund-scan-rec");
    let scan = rec.sweep_once(false).await.unwrap().scan.unwrap();
    assert_eq!(
        (scan.scanned, scan.recreated, scan.findings(), scan.complete),
        (2, 1, 1, true),
        "the payment is known, the refund was lost: {scan:?}"
    );
    assert!(
        scan.found.iter().any(|l| l.contains(&reference)),
        "{:?}",
        scan.found
    );
    let back = restored.get(&tenant(), &refund.id).await.unwrap();
    assert_eq!(
        (back.status, &back.details_hash, &back.idempotency_key),
        (
            Status::NeedsAttention,
            &refund.details_hash,
            &refund.idempotency_key
        )
    );
    let refunds = refund_audit(&sim).await;
    assert_eq!(refunds["data"].as_array().unwrap().len(), 1, "{refunds}");
}

/// SIGTERM while the database is gone (a failover in progress): the worker, blocked on a claim that
/// waits for a connection, and the reconciler stop within their `shutdown_grace_ms`, and the api
/// within its own grace, instead of waiting for the pool's timeouts or an orchestrator's SIGKILL.
#[tokio::test]
async fn daemons_stop_within_their_grace_while_the_database_is_gone() {
    let cluster = crate::support::cluster::Cluster::start();
    cluster.create_database("ledger").await;
    let url = cluster.url("ledger");
    ledger::connect(&url, 1).await.unwrap();
    let sim = processes::simulator(SimulatorConfig::default()).await;
    const GRACE_MS: u64 = 1_000;
    let grace = ("PAYONCE_SHUTDOWN_GRACE_MS", "1000");
    let mut worker = processes::worker_process(&url, &sim, &[grace, ("PAYONCE_POLL_MS", "50")]);
    let spawn = |args: &[&str]| {
        tokio::process::Command::new(support::payonce_bin())
            .args(args)
            .env("PAYONCE_DATABASE_URL", &url)
            .env("PAYONCE_KEY_SECRET", KEY_SECRET)
            .env("PAYONCE_PROCESSOR_URL", sim.base_url())
            .env("PAYONCE_SHUTDOWN_GRACE_MS", GRACE_MS.to_string())
            .env("RUST_LOG", "warn")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap()
    };
    let listen = format!("127.0.0.1:{}", crate::serve::free_port());
    let mut api = spawn(&["api", "--listen", &listen]);
    let mut reconciler = spawn(&["reconciler", "run", "--sweep-interval-ms", "50"]);
    crate::support::wait_for("the api is up", Duration::from_secs(20), || {
        let url = format!("http://{listen}/readyz");
        async move {
            let r = reqwest::get(url).await.ok()?;
            r.status().is_success().then_some(())
        }
    })
    .await;

    cluster.kill();
    // The daemons notice: their next claims, sweeps and probes wait for a connection.
    crate::support::wait_for("the api is not ready", Duration::from_secs(20), || {
        let url = format!("http://{listen}/readyz");
        async move {
            match reqwest::get(url).await {
                Ok(r) if r.status().is_success() => None,
                _ => Some(()),
            }
        }
    })
    .await;
    // Within the grace plus start-up slack for a loaded machine; the pools wait 10 s for a
    // connection, so a daemon that waited for them would miss it.
    let deadline = Duration::from_millis(GRACE_MS) + Duration::from_secs(4);
    for (name, child) in [
        ("worker", &mut worker),
        ("reconciler", &mut reconciler),
        ("api", &mut api),
    ] {
        let pid = child.id().unwrap().to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
        let exited = tokio::time::timeout(deadline, child.wait()).await;
        assert!(
            matches!(exited, Ok(Ok(_))),
            "{name} still running {deadline:?} after SIGTERM"
        );
    }
}

/// Past the processor's key retention a same-key request is a new payment, so a row lost and
/// re-created then would be paid twice. With `check_before_submit`, the worker asks the processor
/// (search by business key) before a payment's first submission: the same intention is recorded as
/// the payment it already is; other details under a paid business key go to a human.
#[tokio::test]
async fn past_the_key_retention_the_check_before_submission_pays_each_business_key_once() {
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let (ledger, url) = support::postgres_ledger().await;
    let dump = backup(&url);
    let lost = create_and_approve(&ledger).await;
    work(&ledger, &sim).await;
    let reference = ledger
        .get(&tenant(), &lost.id)
        .await
        .unwrap()
        .external_ref
        .unwrap();
    // A day and an hour later: the processor has forgotten the key.
    processes::advance_clock(&sim, Duration::from_secs(25 * 60 * 60)).await;

    let checking = |ledger: &SharedLedger| {
        let mut config = WorkerConfig::new("checking-worker");
        config.submit.check_before_submit = true;
        Worker::new(
            ledger.clone(),
            processes::stripe(&sim, None),
            Arc::new(SystemClock),
            config,
        )
        .unwrap()
    };
    // The same intention re-driven on a ledger restored from before it: recorded, not paid again.
    let same_db = restore(&dump).await;
    let same = ledger::connect(&same_db, 4).await.unwrap();
    let again = create_and_approve(&same).await;
    assert_eq!(checking(&same).run_once().await.unwrap(), 1);
    let row = same.get(&tenant(), &again.id).await.unwrap();
    assert_eq!(
        (row.status, row.external_ref.as_deref()),
        (Status::Succeeded, Some(reference.as_str()))
    );

    // Other details under the paid business key: a human decides, nothing is submitted.
    let other_db = restore(&dump).await;
    let other = ledger::connect(&other_db, 4).await.unwrap();
    let created = create_and_approve_amount(&other, INVOICE, 4096).await;
    assert_eq!(checking(&other).run_once().await.unwrap(), 1);
    let row = other.get(&tenant(), &created.id).await.unwrap();
    assert_eq!(row.status, Status::NeedsAttention);
    let events = other.events(&tenant(), &row.id).await.unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.detail.as_deref().unwrap_or("").contains(&reference)),
        "{events:?}"
    );

    let payments = paid(&sim).await;
    assert_eq!(payments.len(), 1, "{payments:?}");
}

//! A SQLite ledger that runs out of room (issue 43): made full deterministically with
//! `PRAGMA max_page_count`, and for real on a small tmpfs (skipped where `mount` is refused). The api
//! answers every write it could not commit with `503` + `Retry-After`, every `201` names a row a
//! fresh connection finds in the file, `/readyz` is not 200 while full, the metrics count the
//! failures, and once there is room again new writes commit (the one connection is not left inside
//! a transaction). `payonce serve` on a full disk still stops within its grace of SIGTERM.

use crate::api::{Reply, TestApi, raw_details, spawn};
use crate::serve::scratch;
use crate::support::every_store;
use payonce_ledger::sqlite::SqliteLedger;
use payonce_ledger::{LedgerError, Operations, WRITE_HEADROOM_PAGES_MIN};
use serde_json::json;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{Connection, SqliteConnection};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Most creates a test drives while waiting for the ledger to refuse one.
const CREATES_MAX: usize = 5_000;
/// Refusals in a row that show the ledger is full (a write that needs no new page, or fits in
/// blocks a refused commit left, may still succeed between refusals before that).
const REFUSALS: usize = 5;
/// Pages `max_page_count` leaves a ledger beyond its size when a test starts filling it: room for
/// readiness (above the headroom it wants) and for some creates.
const ROOM_PAGES: i64 = WRITE_HEADROOM_PAGES_MIN + 40;
/// What a test raises `max_page_count` to once the ledger is full: plenty.
const PLENTY_PAGES: i64 = 1_000_000;
/// The real filesystem: small enough to fill in seconds, large enough for the migrated ledger
/// (its write-ahead log keeps the migrations' table rebuilds).
const TMPFS_SIZE: &str = "8m";
/// Room a tmpfs test leaves free after filling the filesystem: a few creates' worth.
const SPARE_BYTES: usize = 256 * 1024;
/// Operations a tmpfs test creates to approve once the disk is full.
const WAITING: usize = 4 * REFUSALS;

/// What driving creates until the ledger refused answered: business key → id of each `201`, and
/// every refusal.
struct Driven {
    created: BTreeMap<String, String>,
    refused: Vec<(String, Reply)>,
}

/// `POST /v1/operations` for invoice `invoice`.
async fn create(api: &TestApi, invoice: &str) -> Reply {
    api.post(
        "/v1/operations",
        &api.service,
        json!({"business_key": business_key(invoice), "details": raw_details(invoice, 2048)}),
    )
    .await
}

fn business_key(invoice: &str) -> String {
    format!("invoice:{invoice}:pay")
}

/// Creates `{prefix}-0`, `{prefix}-1`, … until [`REFUSALS`] in a row were refused.
async fn create_until_refused(api: &TestApi, prefix: &str) -> Driven {
    let mut driven = Driven {
        created: BTreeMap::new(),
        refused: Vec::new(),
    };
    let mut in_a_row = 0;
    for i in 0..CREATES_MAX {
        let invoice = format!("{prefix}-{i}");
        let r = create(api, &invoice).await;
        if r.status == 201 {
            in_a_row = 0;
            let id = r.json()["id"].as_str().unwrap().to_string();
            driven.created.insert(business_key(&invoice), id);
        } else {
            driven.refused.push((invoice, r));
            in_a_row += 1;
            if in_a_row == REFUSALS {
                return driven;
            }
        }
    }
    panic!("the ledger took {CREATES_MAX} creates without refusing {REFUSALS} in a row");
}

/// The operations a fresh connection finds in the file: business key → id.
async fn stored(path: &Path) -> BTreeMap<String, String> {
    let mut conn = SqliteConnection::connect_with(&SqliteConnectOptions::new().filename(path))
        .await
        .unwrap();
    let rows: Vec<(String, String)> = sqlx::query_as("SELECT business_key, id FROM operations")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    rows.into_iter().collect()
}

/// Every `201` names a row in the file, under its business key.
async fn assert_every_201_stored(path: &Path, created: &BTreeMap<String, String>) {
    let stored = stored(path).await;
    let lost: Vec<_> = created
        .iter()
        .filter(|(key, id)| stored.get(*key) != Some(*id))
        .collect();
    assert!(
        lost.is_empty(),
        "{} of {} creates answered 201 are not in the file: {lost:?}",
        lost.len(),
        created.len()
    );
}

/// Each refusal is a retryable `503 unavailable`, never a 500 or a success.
fn assert_unavailable(refused: &[(String, Reply)]) {
    for (invoice, r) in refused {
        assert_eq!(r.status, 503, "{invoice}: {}", r.text);
        assert_eq!(r.code(), "unavailable", "{invoice}");
        assert!(
            !r.header("retry-after").is_empty(),
            "{invoice}: no Retry-After"
        );
    }
}

async fn readyz(api: &TestApi) -> u16 {
    api.send("GET", "/readyz", None, None).await.status
}

/// `payonce_ledger_storage_failures_total` on the api's `/metrics`.
async fn storage_failures(api: &TestApi) -> u64 {
    let metrics = api.send("GET", "/metrics", None, None).await;
    assert_eq!(metrics.status, 200, "{}", metrics.text);
    let name = "payonce_ledger_storage_failures_total ";
    let line = metrics
        .text
        .lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("no {name}in /metrics"));
    line[name.len()..].parse().unwrap()
}

/// A duplicate create of each key answered `201` names the same operation (`200`).
async fn assert_duplicates_same(api: &TestApi, created: &BTreeMap<String, String>) {
    for (key, id) in created.iter().rev().take(REFUSALS) {
        let invoice = key
            .strip_prefix("invoice:")
            .and_then(|k| k.strip_suffix(":pay"))
            .unwrap();
        let again = create(api, invoice).await;
        assert_eq!(again.status, 200, "{key}: {}", again.text);
        assert_eq!(again.json()["id"].as_str(), Some(id.as_str()), "{key}");
    }
}

/// Creates and approves one operation per invoice in `invoices` after room came back, and checks
/// a fresh connection sees each: the one connection commits again (not stuck in a transaction).
async fn assert_writes_commit_again(api: &TestApi, path: &Path, invoices: &[String]) {
    let mut created = BTreeMap::new();
    for invoice in invoices {
        let r = create(api, invoice).await;
        assert!(r.status == 201 || r.status == 200, "{invoice}: {}", r.text);
        let op = r.json();
        let id = op["id"].as_str().unwrap().to_string();
        // An approval is a transaction; approving twice rolls one back (`Approvals::approve`).
        for _ in 0..2 {
            let approved = api
                .post(
                    &format!("/v1/operations/{id}/approve"),
                    &api.service,
                    json!({"details_hash": op["details_hash"], "approved_by": "customer:cus_test"}),
                )
                .await;
            assert_eq!(approved.status, 200, "{invoice}: {}", approved.text);
        }
        created.insert(business_key(invoice), id);
    }
    assert_every_201_stored(path, &created).await;
    assert_approved_in_file(path, created.values()).await;
}

/// Each operation in `ids`, approved with a `200`, is `ready` in the file.
async fn assert_approved_in_file(path: &Path, ids: impl Iterator<Item = &String>) {
    let mut conn = SqliteConnection::connect_with(&SqliteConnectOptions::new().filename(path))
        .await
        .unwrap();
    for id in ids {
        let (status,): (String,) = sqlx::query_as("SELECT status FROM operations WHERE id = $1")
            .bind(id)
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(
            status, "ready",
            "{id}: the approval answered 200 is not in the file"
        );
    }
    conn.close().await.unwrap();
}

/// Sets the ledger connection's `max_page_count` (a per-connection setting; the ledger has one).
async fn set_max_page_count(ledger: &SqliteLedger, pages: i64) {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "PRAGMA max_page_count = {pages}"
    )))
    .execute(ledger.pool())
    .await
    .unwrap();
}

async fn page_count(ledger: &SqliteLedger) -> i64 {
    let (pages,): (i64,) = sqlx::query_as("PRAGMA page_count")
        .fetch_one(ledger.pool())
        .await
        .unwrap();
    pages
}

/// A SQLite file ledger in `dir` and the api on it.
async fn ledger_and_api(dir: &Path) -> (SqliteLedger, TestApi, PathBuf) {
    let path = dir.join("ledger.db");
    let ledger = SqliteLedger::connect(&format!("sqlite:{}", path.display()))
        .await
        .unwrap();
    let api = spawn(Arc::new(ledger.clone())).await;
    (ledger, api, path)
}

#[tokio::test]
async fn a_sqlite_ledger_at_its_max_page_count_answers_503_and_every_201_is_stored() {
    let dir = scratch("full-max-page-count");
    let (ledger, api, path) = ledger_and_api(&dir).await;
    set_max_page_count(&ledger, page_count(&ledger).await + ROOM_PAGES).await;
    assert_eq!(readyz(&api).await, 200, "ready with room left");
    let failures_before = storage_failures(&api).await;

    let full = create_until_refused(&api, "mpc").await;
    assert!(
        !full.created.is_empty(),
        "no create fitted before the limit"
    );
    assert_unavailable(&full.refused);
    assert_ne!(readyz(&api).await, 200, "/readyz while the ledger is full");
    assert!(storage_failures(&api).await >= failures_before + REFUSALS as u64);
    assert_every_201_stored(&path, &full.created).await;
    assert_duplicates_same(&api, &full.created).await;
    eprintln!(
        "max_page_count: {} creates answered 201 and stored, {} refused with 503",
        full.created.len(),
        full.refused.len()
    );

    set_max_page_count(&ledger, PLENTY_PAGES).await;
    assert_eq!(readyz(&api).await, 200, "ready once there is room again");
    let retried: Vec<String> = full.refused.iter().map(|(inv, _)| inv.clone()).collect();
    assert_writes_commit_again(&api, &path, &retried).await;
    api.stop().await;
}

/// The readiness probe wants [`WRITE_HEADROOM_PAGES_MIN`] pages of room: one fewer is
/// [`LedgerError::Full`], exactly that many is ready.
#[tokio::test]
async fn readiness_wants_the_named_page_headroom() {
    let dir = scratch("full-headroom");
    let path = dir.join("ledger.db");
    let ledger = SqliteLedger::connect(&format!("sqlite:{}", path.display()))
        .await
        .unwrap();
    let now = crate::api::T0;
    // No free pages: the headroom is then exactly what `max_page_count` leaves.
    sqlx::query("VACUUM").execute(ledger.pool()).await.unwrap();
    let pages = page_count(&ledger).await;
    set_max_page_count(&ledger, pages + WRITE_HEADROOM_PAGES_MIN - 1).await;
    match ledger.probe_write(now).await {
        Err(LedgerError::Full { headroom_pages }) => {
            assert_eq!(headroom_pages, WRITE_HEADROOM_PAGES_MIN - 1);
        }
        other => panic!("expected Full, got {other:?}"),
    }
    set_max_page_count(&ledger, pages + WRITE_HEADROOM_PAGES_MIN).await;
    ledger.probe_write(now).await.unwrap();
}

#[tokio::test]
async fn the_write_probe_commits_on_every_store() {
    for ledger in every_store().await {
        ledger.probe_write(crate::api::T0).await.unwrap();
    }
}

/// A tmpfs mounted on a fresh directory, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts one, or `None` (with the reason on stderr) where this test may not mount.
    fn mount(name: &str, size: &str) -> Option<Tmpfs> {
        let dir = scratch(name);
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .output();
        match out {
            Ok(out) if out.status.success() => Some(Tmpfs(dir)),
            Ok(out) => {
                eprintln!(
                    "SKIPPED: cannot mount a tmpfs here ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("SKIPPED: cannot run mount: {e}");
                None
            }
        }
    }

    /// Fills the filesystem but for about `spare` bytes: returns the file holding the rest.
    fn fill_leaving(&self, spare: usize) -> PathBuf {
        let spare_file = self.0.join("spare");
        std::fs::write(&spare_file, vec![0_u8; spare]).unwrap();
        let filler = self.fill("filler");
        std::fs::remove_file(spare_file).unwrap();
        filler
    }

    /// Writes a file `name` until the filesystem has no block left; returns it.
    fn fill(&self, name: &str) -> PathBuf {
        let path = self.0.join(name);
        let mut f = std::fs::File::create(&path).unwrap();
        let chunk = vec![0_u8; 4096];
        while f.write_all(&chunk).is_ok() {}
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazy: a connection the test did not close must not keep the mount behind.
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

#[tokio::test]
async fn a_commit_that_fails_on_a_full_filesystem_is_never_acknowledged() {
    let Some(fs) = Tmpfs::mount("full-tmpfs", TMPFS_SIZE) else {
        return;
    };
    let (ledger, api, path) = ledger_and_api(&fs.0).await;
    // Operations to approve while full: an approval is a transaction, whose COMMIT fails.
    let mut waiting = Vec::new();
    for i in 0..WAITING {
        waiting.push(api.create(&format!("waiting-{i}"), 2048).await);
    }
    let filler = fs.fill_leaving(SPARE_BYTES);

    let full = create_until_refused(&api, "tmpfs").await;
    assert_unavailable(&full.refused);
    // A create no longer fits; a smaller write may still, in the blocks a refused commit had
    // taken for its log frames (a later commit writes over them): take the last free blocks too,
    // and approve until approvals are refused as well.
    let rest = fs.fill("rest");
    let mut approved = BTreeMap::new();
    let mut refused = Vec::new();
    let mut in_a_row = 0;
    for op in &waiting {
        let id = op["id"].as_str().unwrap();
        let r = api
            .post(
                &format!("/v1/operations/{id}/approve"),
                &api.service,
                json!({"details_hash": op["details_hash"], "approved_by": "customer:cus_test"}),
            )
            .await;
        if r.status == 200 {
            in_a_row = 0;
            approved.insert(id.to_string(), r.json()["status"].to_string());
        } else {
            refused.push((id.to_string(), r));
            in_a_row += 1;
            if in_a_row == REFUSALS {
                break;
            }
        }
    }
    assert_eq!(in_a_row, REFUSALS, "{WAITING} approvals on a full disk");
    assert_unavailable(&refused);
    assert_approved_in_file(&path, approved.keys()).await;
    assert_ne!(readyz(&api).await, 200, "/readyz while the disk is full");
    assert!(storage_failures(&api).await >= REFUSALS as u64);
    assert_every_201_stored(&path, &full.created).await;
    assert_duplicates_same(&api, &full.created).await;
    eprintln!(
        "tmpfs: {} creates answered 201 and stored, {} refused with 503; {} approvals \
         answered 200 and stored, {} refused with 503",
        full.created.len(),
        full.refused.len(),
        approved.len(),
        refused.len()
    );

    std::fs::remove_file(filler).unwrap();
    std::fs::remove_file(rest).unwrap();
    assert_eq!(readyz(&api).await, 200, "ready once there is room again");
    let mut again: Vec<String> = full.refused.iter().map(|(inv, _)| inv.clone()).collect();
    again.extend((0..REFUSALS).map(|i| format!("after-{i}")));
    assert_writes_commit_again(&api, &path, &again).await;
    api.stop().await;
    ledger.pool().close().await;
}

/// `serve`'s shutdown grace in [`serve_on_a_full_disk_stops_within_its_grace_of_sigterm`].
const SERVE_GRACE: std::time::Duration = std::time::Duration::from_secs(6);
/// Its submit timeout: the payments in flight at SIGTERM end (unknown outcomes to record) well
/// inside the grace, and their outcomes then meet the full disk.
const SERVE_SUBMIT_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(5_500);
/// What a process may take past its grace to exit (the runtime winding down, a loaded machine).
const EXIT_MARGIN: std::time::Duration = std::time::Duration::from_secs(3);
/// Payments in flight when the disk fills.
const IN_FLIGHT: usize = 4;

/// The single create route's body for `invoice`, carrying its own approval (enqueued at once).
fn approved_create(invoice: &str) -> serde_json::Value {
    let details = raw_details(invoice, 2048);
    let raw: payonce_core::details::RawDetails = serde_json::from_value(details.clone()).unwrap();
    let hash = payonce_core::details::Details::parse(&raw).unwrap().hash();
    json!({
        "business_key": business_key(invoice),
        "details": details,
        "approval": {"details_hash": hash.as_str(), "approved_by": format!("mandate:{invoice}")},
    })
}

/// Issue 53, item 6: `payonce serve` on a SQLite ledger whose filesystem is full, with payments in
/// flight (the processor not answering until the submit timeout) and outcomes it then cannot
/// write, exits within its `shutdown_grace_ms` of SIGTERM, as the separate daemons do (it used to
/// wait a grace for the submissions, then another for the outcomes, and had no bound of its own):
/// the real binary on a real tmpfs.
#[tokio::test]
async fn serve_on_a_full_disk_stops_within_its_grace_of_sigterm() {
    use crate::serve::{banner_api, banner_word, read_banner, serve_command, stdout_lines};
    let Some(fs) = Tmpfs::mount("full-serve", TMPFS_SIZE) else {
        return;
    };
    let database_url = format!("sqlite:{}", fs.0.join("ledger.db").display());
    let grace_ms = SERVE_GRACE.as_millis().to_string();
    let submit_timeout_ms = SERVE_SUBMIT_TIMEOUT.as_millis().to_string();
    let mut child = serve_command(
        &fs.0,
        &[],
        &database_url,
        &[
            "--shutdown-grace-ms",
            &grace_ms,
            "--submit-timeout-ms",
            &submit_timeout_ms,
        ],
    )
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::null())
    .spawn()
    .unwrap();
    let mut stdout = stdout_lines(&mut child);
    let banner = read_banner(&mut stdout, crate::serve::START_DEADLINE).await;
    // Keep reading: a full pipe must not be what holds the process.
    tokio::spawn(async move { while let Ok(Some(_)) = stdout.next_line().await {} });
    let api = banner_api(&banner);
    let service = banner_word(&banner, "service key");
    let processor = banner
        .iter()
        .find_map(|l| l.trim_start().strip_prefix("processor "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .to_string();
    let http = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(10))
        .build()
        .unwrap();
    // The processor takes the payments and does not answer: they stay in flight until the worker's
    // submit timeout.
    let armed = http
        .post(format!("{processor}/_sim/faults"))
        .json(&json!([{"match": "*", "fault": "hang"}]))
        .send()
        .await
        .unwrap();
    assert!(armed.status().is_success(), "{armed:?}");
    let mut ids = Vec::new();
    for i in 0..IN_FLIGHT {
        let r = http
            .post(format!("{api}/v1/operations"))
            .bearer_auth(&service)
            .json(&approved_create(&format!("FS-{i}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        let op: serde_json::Value = r.json().await.unwrap();
        ids.push(op["id"].as_str().unwrap().to_string());
    }
    crate::support::wait_for(
        "every payment submitted and in flight",
        std::time::Duration::from_secs(30),
        || {
            let (http, api, service, ids) =
                (http.clone(), api.clone(), service.clone(), ids.clone());
            async move {
                for id in ids {
                    let op: serde_json::Value = http
                        .get(format!("{api}/v1/operations/{id}"))
                        .bearer_auth(&service)
                        .send()
                        .await
                        .ok()?
                        .json()
                        .await
                        .ok()?;
                    if op["status"] != "executing" {
                        return None;
                    }
                }
                Some(())
            }
        },
    )
    .await;
    let _filler = fs.fill("filler");
    // Writes now fail: the disk is full for the ledger too.
    let refused = http
        .post(format!("{api}/v1/operations"))
        .bearer_auth(&service)
        .json(&approved_create("FS-full"))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503);

    let pid = child.id().unwrap().to_string();
    let asked = std::time::Instant::now();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let within = SERVE_GRACE + EXIT_MARGIN;
    let exited = tokio::time::timeout(within * 10, child.wait()).await;
    let took = asked.elapsed();
    eprintln!("serve stopped {took:?} after SIGTERM (grace {SERVE_GRACE:?})");
    assert!(
        exited.is_ok() && took <= within,
        "serve took {took:?} (still running: {}) to stop after SIGTERM; its grace is {SERVE_GRACE:?}",
        exited.is_err()
    );
}

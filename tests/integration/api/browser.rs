//! The confirmation page in a real headless Chromium (tests/browser/confirm.test.mjs, playwright-core on
//! Debian's chromium): approve, double submit, expired link, tampered details; then the ledger must
//! show exactly one approval and nothing approved for the expired or tampered links.

use super::{repo_root, spawn};
use crate::support::postgres_ledger;
use payonce_shared::id::OperationId;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

/// How long the whole browser run may take (Chromium start-up included).
const BROWSER_RUN_DEADLINE: Duration = Duration::from_secs(180);

/// Runs tests/browser/setup.sh when Chromium or playwright-core is missing: a fresh machine installs
/// them instead of skipping the test.
pub fn ensure_browser() {
    let dir = repo_root().join("tests/browser");
    let ready = Path::new("/usr/bin/chromium").exists()
        && dir
            .join("node_modules/playwright-core/package.json")
            .exists();
    if ready {
        return;
    }
    let status = std::process::Command::new("bash")
        .arg(dir.join("setup.sh"))
        .status()
        .expect("run tests/browser/setup.sh");
    assert!(status.success(), "tests/browser/setup.sh failed: {status}");
}

fn op_id(v: &serde_json::Value) -> OperationId {
    OperationId::parse(v["id"].as_str().unwrap()).unwrap()
}

#[tokio::test]
async fn chromium_approves_once_and_refuses_double_submit_expired_and_tampered() {
    ensure_browser();
    let api = spawn(postgres_ledger().await.0).await;
    let approve = api.create("INV-90", 2048).await;
    let expire = api.create("INV-91", 2048).await;
    let tamper = api.create("INV-92", 2048).await;
    let bigger = api.create("INV-93", 999_999).await;

    // The expired link is made first; the clock then passes its TTL before the others are made.
    // Every URL is the one the tenant's app redirects its logged-in customer to (link + assertion).
    let expired_url = api.signed_in(
        &api.link(expire["id"].as_str().unwrap()).await,
        expire["id"].as_str().unwrap(),
    );
    api.clock.advance_ms(15 * 60 * 1000 + 1_000);
    let confirm_url = api.signed_in(
        &api.link(approve["id"].as_str().unwrap()).await,
        approve["id"].as_str().unwrap(),
    );
    let tamper_url = api.signed_in(
        &api.link(tamper["id"].as_str().unwrap()).await,
        tamper["id"].as_str().unwrap(),
    );

    let screens = std::env::temp_dir().join("payonce-browser");
    std::fs::create_dir_all(&screens).unwrap();
    let script = repo_root().join("tests/browser/confirm.test.mjs");
    let child = tokio::process::Command::new("node")
        .arg("--test")
        .arg("--test-reporter=spec")
        .arg(&script)
        .current_dir(repo_root().join("tests/browser"))
        .env("PAYONCE_CONFIRM_URL", &confirm_url)
        .env("PAYONCE_EXPIRED_URL", &expired_url)
        .env("PAYONCE_TAMPER_URL", &tamper_url)
        .env(
            "PAYONCE_FORGED_HASH",
            bigger["details_hash"].as_str().unwrap(),
        )
        .env("PAYONCE_EXPECT_AMOUNT", "20.48 USD")
        .env("PAYONCE_EXPECT_INVOICE", "INV-90")
        .env("PAYONCE_SCREENSHOT_DIR", &screens)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run node (is Node.js installed?)");
    let output = tokio::time::timeout(BROWSER_RUN_DEADLINE, child.wait_with_output())
        .await
        .expect("the browser test finishes in time")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("{stdout}\n{stderr}");
    assert!(
        output.status.success(),
        "node --test confirm.test.mjs failed"
    );
    assert!(stdout.contains("pass 3"), "three browser tests passed");
    assert!(screens.join("confirm.png").exists());

    let approved = api.ledger.get_unscoped(&op_id(&approve)).await.unwrap();
    assert_eq!(approved.status.as_str(), "ready");
    assert_eq!(approved.approved_by.as_deref(), Some("customer:cus_test"));
    let events = api.ledger.events(&op_id(&approve)).await.unwrap();
    assert_eq!(
        events.iter().filter(|e| e.event == "approve").count(),
        1,
        "approved exactly once"
    );
    for untouched in [&expire, &tamper, &bigger] {
        let op = api.ledger.get_unscoped(&op_id(untouched)).await.unwrap();
        assert_eq!(op.status.as_str(), "awaiting_approval", "{}", op.id);
        assert!(api.ledger.latest_approval(&op.id).await.unwrap().is_none());
    }
    api.stop().await;
}

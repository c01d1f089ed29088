//! The confirmation page in a real headless Chromium (tests/browser/confirm.test.mjs, playwright-core on
//! Debian's chromium): approve, double submit, expired link, tampered details; then the ledger must
//! show exactly one approval and nothing approved for the expired or tampered links.

use super::tenant;
use super::verification::{Inbox, use_codes_for};
use super::{OTHER_TENANT, raw_details, repo_root, spawn, spawn_on_postgres, spawn_with_processor};
use crate::support::postgres_ledger_on_callers_clock;
use crate::support::processes::{self, payments_for};
use payonce_core::clock::Clock;
use payonce_core::id::{OperationId, TenantId};
use payonce_core::signing::TIMESTAMP_TOLERANCE_S;
use payonce_simulator::SimulatorConfig;
use serde_json::json;
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
        && ["playwright-core", "axe-core"].iter().all(|pkg| {
            dir.join("node_modules")
                .join(pkg)
                .join("package.json")
                .exists()
        });
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

/// Where the browser tests keep their screenshots, for a person to look at.
fn screenshot_dir(name: &str) -> std::path::PathBuf {
    let dir = repo_root().join("target").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn chromium_approves_declines_and_refuses_double_submit_expired_and_tampered() {
    ensure_browser();
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let (ledger, _db) = postgres_ledger_on_callers_clock().await;
    let api = spawn_with_processor(ledger, processes::stripe(&sim, None)).await;
    let worker = api.worker(&sim, "browser-worker");
    let profile = api
        .send(
            "PUT",
            "/v1/tenant/profile",
            Some(&api.service),
            Some(
                json!({"display_name": "Acme Hosting", "support_url": "https://acme.example/help",
                        "support_email": "billing@acme.example"}),
            ),
        )
        .await;
    assert_eq!(profile.status, 200, "{}", profile.text);
    let approve = api.create("INV-90", 2048).await;
    let expire = api.create("INV-91", 2048).await;
    let tamper = api.create("INV-92", 2048).await;
    let bigger = api.create("INV-93", 999_999).await;
    let decline = api.create("INV-94", 2048).await;
    let mut jpy_details = raw_details("INV-95", 1299);
    jpy_details["currency"] = json!("jpy");
    jpy_details["payment_method"] = json!("pm_card_mastercard");
    let jpy = api
        .post(
            "/v1/operations",
            &api.service,
            json!({"business_key": "invoice:INV-95:pay", "details": jpy_details}),
        )
        .await;
    assert_eq!(jpy.status, 201, "{}", jpy.text);
    let jpy = jpy.json();

    // The expired link is made first; the clock then passes its TTL before the others are made.
    // Every URL is the one the tenant's app redirects its logged-in customer to (link + assertion).
    let signed_link = |op: &serde_json::Value| {
        let id = op["id"].as_str().unwrap().to_string();
        let api = &api;
        async move { api.signed_in(&api.link(&id).await, &id) }
    };
    let expired_url = signed_link(&expire).await;
    api.clock
        .advance(payonce_api::ApiConfig::default().link_ttl + Duration::from_secs(1));
    let confirm_url = signed_link(&approve).await;
    let tamper_url = signed_link(&tamper).await;
    let decline_url = signed_link(&decline).await;
    let jpy_url = signed_link(&jpy).await;

    let screens = screenshot_dir("confirm-screenshots");
    let stdout = run_node(
        "confirm.test.mjs",
        &[
            ("PAYONCE_CONFIRM_URL", confirm_url),
            ("PAYONCE_EXPIRED_URL", expired_url),
            ("PAYONCE_TAMPER_URL", tamper_url),
            (
                "PAYONCE_FORGED_HASH",
                bigger["details_hash"].as_str().unwrap().to_string(),
            ),
            ("PAYONCE_EXPECT_AMOUNT", "$20.48".to_string()),
            ("PAYONCE_EXPECT_INVOICE", "INV-90".to_string()),
            ("PAYONCE_MERCHANT", "Acme Hosting".to_string()),
            ("PAYONCE_JPY_URL", jpy_url),
            ("PAYONCE_DECLINE_URL", decline_url),
            (
                "PAYONCE_SCREENSHOT_DIR",
                screens.to_string_lossy().to_string(),
            ),
        ],
    )
    .await;
    assert!(stdout.contains("pass 5"), "five browser tests passed");
    for shot in [
        "confirm.png",
        "confirm-phone.png",
        "approved.png",
        "used.png",
        "expired.png",
        "tampered.png",
        "declined.png",
        "confirm-jpy-phone.png",
    ] {
        assert!(screens.join(shot).exists(), "{shot}");
    }

    let approved = api.ledger.get_unscoped(&op_id(&approve)).await.unwrap();
    assert_eq!(approved.status.as_str(), "ready");
    assert_eq!(approved.approved_by.as_deref(), Some("customer:cus_test"));
    let events = api.ledger.events_unscoped(&op_id(&approve)).await.unwrap();
    assert_eq!(
        events.iter().filter(|e| e.event == "approve").count(),
        1,
        "approved exactly once"
    );
    for untouched in [&expire, &tamper, &bigger, &jpy] {
        let op = api.ledger.get_unscoped(&op_id(untouched)).await.unwrap();
        assert_eq!(op.status.as_str(), "awaiting_approval", "{}", op.id);
        assert!(
            api.ledger
                .latest_approval(&tenant(), &op.id)
                .await
                .unwrap()
                .is_none()
        );
    }
    // Declined: cancelled by the customer, and the worker pays only the approved one.
    let declined = api.ledger.get_unscoped(&op_id(&decline)).await.unwrap();
    assert_eq!(declined.status.as_str(), "cancelled");
    assert_eq!(
        declined.failure_code.as_deref(),
        Some("declined_by_customer")
    );
    let last = api
        .ledger
        .events_unscoped(&op_id(&decline))
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert_eq!(last.actor, "customer:cus_test");
    assert!(
        last.detail
            .as_deref()
            .is_some_and(|d| d.starts_with("signed_assertion:")),
        "{:?}",
        last.detail
    );
    assert_eq!(worker.run_once().await.unwrap(), 1, "only the approved one");
    assert_eq!(payments_for(&sim, decline["id"].as_str().unwrap()).await, 0);
    assert_eq!(payments_for(&sim, approve["id"].as_str().unwrap()).await, 1);
    sim.shutdown().await;
    api.stop().await;
}

/// Runs one node test file with `envs`; returns its stdout after asserting it passed.
async fn run_node(script: &str, envs: &[(&str, String)]) -> String {
    let mut command = tokio::process::Command::new("node");
    command
        .arg("--test")
        .arg("--test-reporter=spec")
        .arg(repo_root().join("tests/browser").join(script))
        .current_dir(repo_root().join("tests/browser"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in envs {
        command.env(k, v);
    }
    let child = command.spawn().expect("run node (is Node.js installed?)");
    let output = tokio::time::timeout(BROWSER_RUN_DEADLINE, child.wait_with_output())
        .await
        .expect("the browser test finishes in time")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    eprintln!("{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "node --test {script} failed");
    stdout
}

#[tokio::test]
async fn chromium_refuses_an_assistants_link_and_a_customer_approves_with_a_code() {
    ensure_browser();
    // The worker runs on the api's manual clock, and the ledger with it.
    let api = {
        let (ledger, database) = postgres_ledger_on_callers_clock().await;
        spawn(ledger).await.holding(database)
    };
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let worker = api.worker(&sim, "browser-worker");

    // The assistant's target, in the signed-assertion tenant: its answer has no link, and a link it
    // got hold of anyway, bare or with an assertion it signed itself, is refused.
    let target = api.create("INV-140", 2048).await;
    let target_id = target["id"].as_str().unwrap();
    let answer = api
        .post(
            &format!("/v1/operations/{target_id}/execute"),
            &api.assistant,
            json!({}),
        )
        .await;
    assert!(!answer.text.contains("/confirm/"), "{}", answer.text);
    let leaked = api.link(target_id).await;
    let forged = payonce_api::assertion::sign(
        "a key the assistant guessed",
        &payonce_api::assertion::Claims {
            kid: super::ASSERTION_KEY_ID.into(),
            sub: "cus_test".into(),
            op: target_id.into(),
            exp: api.clock.now().as_millis() + 60_000,
            nonce: "n".repeat(32),
        },
    );

    // A one-time-code tenant: the test plays its endpoint, checks the signature, reads the code.
    let globex = TenantId::parse(OTHER_TENANT).unwrap();
    let inbox = Inbox::start(0).await;
    let secret = use_codes_for(&api, &globex, &inbox).await;
    let created = api
        .post(
            "/v1/operations",
            &api.other_service,
            json!({"business_key": "invoice:G-140:pay", "details": raw_details("G-140", 2048)}),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let paid = created.json();
    let paid_id = paid["id"].as_str().unwrap();
    let link = api
        .post(
            &format!("/v1/operations/{paid_id}/approval-requests"),
            &api.other_service,
            json!({}),
        )
        .await;
    assert_eq!(link.status, 201, "{}", link.text);
    let code_url = link.json()["url"].as_str().unwrap().to_string();
    let delivery = inbox.wait_for(1).await.remove(0);
    payonce_core::signing::verify(
        &secret,
        &delivery.signature,
        &delivery.body,
        api.clock.now().as_millis() / 1000,
        TIMESTAMP_TOLERANCE_S,
    )
    .expect("signed with the tenant's secret");
    let code = delivery.json()["code"].as_str().unwrap().to_string();
    let wrong = if code == "000000" { "000001" } else { "000000" };

    let screens = screenshot_dir("confirm-screenshots");
    let stdout = run_node(
        "verification.test.mjs",
        &[
            ("PAYONCE_LEAKED_URL", leaked.clone()),
            ("PAYONCE_FORGED_URL", format!("{leaked}?assertion={forged}")),
            ("PAYONCE_CODE_URL", code_url),
            ("PAYONCE_CODE", code),
            ("PAYONCE_WRONG_CODE", wrong.to_string()),
            (
                "PAYONCE_SCREENSHOT_DIR",
                screens.to_string_lossy().to_string(),
            ),
        ],
    )
    .await;
    assert!(stdout.contains("pass 2"), "two browser tests passed");

    // The assistant's target never left awaiting_approval and was never paid; the customer's was,
    // once (so the processor check could see a payment).
    let target_op = api
        .ledger
        .get_unscoped(&OperationId::parse(target_id).unwrap())
        .await
        .unwrap();
    assert_eq!(target_op.status.as_str(), "awaiting_approval");
    assert!(
        api.ledger
            .latest_approval(&tenant(), &target_op.id)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(worker.run_once().await.unwrap(), 1, "only the customer's");
    assert_eq!(payments_for(&sim, target_id).await, 0);
    assert_eq!(payments_for(&sim, paid_id).await, 1);
    let events = api
        .ledger
        .events_unscoped(&OperationId::parse(paid_id).unwrap())
        .await
        .unwrap();
    let approve = events.iter().find(|e| e.event == "approve").unwrap();
    assert_eq!(
        approve.detail.as_deref(),
        Some(format!("one_time_code:{}", delivery.delivery_id).as_str())
    );
    sim.shutdown().await;
    api.stop().await;
}

#[tokio::test]
async fn chromium_on_call_console_signs_in_searches_and_resolves() {
    ensure_browser();
    let api = spawn_on_postgres().await;
    for i in 0..3 {
        api.create(&format!("INV-C{i}"), 2048).await;
    }
    let attention = super::console::needs_attention(&api, "INV-C9").await;
    let read_only_target = super::console::needs_attention(&api, "INV-C10").await;
    let reader = payonce_api::keys::issue_read_only(
        api.ledger.as_ref(),
        &tenant(),
        "auditor",
        None,
        api.clock.now(),
    )
    .await
    .unwrap();
    let other = api
        .post(
            "/v1/operations",
            &api.other_service,
            json!({"business_key": "invoice:G-C1:pay", "details": raw_details("G-C1", 2048)}),
        )
        .await;
    assert_eq!(other.status, 201, "{}", other.text);
    // A paid payment with a refund waiting for a person: the refund pages axe checks.
    let payment =
        crate::support::refunds::succeeded_payment(&api.ledger, "INV-CR9", 2048, api.clock.now())
            .await;
    let refund = api
        .post(
            "/v1/refunds",
            &api.service,
            json!({"business_key": "refund:CR9:a", "payment_operation_id": payment.id.as_str(),
                   "amount": 1000, "reason": "duplicate"}),
        )
        .await;
    assert_eq!(refund.status, 201, "{}", refund.text);
    // Screenshots are kept as test artifacts (docs/runbook.md shows them).
    let screens = repo_root().join("target/console-screenshots");
    std::fs::create_dir_all(&screens).unwrap();
    // The live-refresh test asks for a change while its page is open (a file `STEP-open`) and is
    // told when it is made (`STEP-made`, holding the new operation's id).
    let handshake = crate::serve::scratch("console-handshake");
    let changes = async {
        let mut made = Vec::new();
        for (step, invoice) in [("overview", "INV-C30"), ("list", "INV-C31"), ("outage", "")] {
            let open = handshake.join(format!("{step}-open"));
            crate::support::wait_for(
                &format!("the browser's {step} page to be open"),
                BROWSER_RUN_DEADLINE,
                || {
                    let open = open.clone();
                    async move { open.exists().then_some(()) }
                },
            )
            .await;
            let id = if step == "outage" {
                // A worker elsewhere records the processor unreachable; this api's view of the
                // ledger is current once its /metrics says so.
                api.ledger
                    .outage()
                    .record_reachability(true, "worker-elsewhere", api.clock.now())
                    .await
                    .unwrap();
                crate::support::wait_for(
                    "the api to read the outage",
                    BROWSER_RUN_DEADLINE,
                    || async {
                        let m = api
                            .http
                            .get(format!("{}/metrics", api.base))
                            .send()
                            .await
                            .ok()?;
                        let text = m.text().await.ok()?;
                        text.contains("payonce_processor_reachable 0\n")
                            .then_some(())
                    },
                )
                .await;
                String::new()
            } else {
                let id = super::console::needs_attention(&api, invoice).await;
                made.push(id.clone());
                id.to_string()
            };
            std::fs::write(handshake.join(format!("{step}-made")), id).unwrap();
        }
        made
    };
    let envs = [
        (
            "PAYONCE_HANDSHAKE_DIR",
            handshake.to_string_lossy().to_string(),
        ),
        (
            "PAYONCE_REFRESH_MS",
            payonce_api::console::REFRESH.as_millis().to_string(),
        ),
        ("PAYONCE_PAYMENT_ID", payment.id.to_string()),
        (
            "PAYONCE_REFUND_ID",
            refund.json()["id"].as_str().unwrap().to_string(),
        ),
        ("PAYONCE_CONSOLE_BASE", api.base.clone()),
        ("PAYONCE_ON_CALL_KEY", api.on_call.clone()),
        ("PAYONCE_ATTENTION_ID", attention.to_string()),
        ("PAYONCE_ATTENTION_INVOICE", "INV-C9".to_string()),
        ("PAYONCE_READ_ONLY_KEY", reader.secret.clone()),
        ("PAYONCE_READ_ONLY_TARGET_ID", read_only_target.to_string()),
        (
            "PAYONCE_OTHER_ID",
            other.json()["id"].as_str().unwrap().to_string(),
        ),
        (
            "PAYONCE_SCREENSHOT_DIR",
            screens.to_string_lossy().to_string(),
        ),
    ];
    let (stdout, made) = tokio::join!(run_node("console.test.mjs", &envs), changes);
    assert!(
        stdout.contains("pass 3"),
        "the three console browser tests passed"
    );
    for shot in [
        "overview.png",
        "operation.png",
        "resolve-refused.png",
        "resolve-many.png",
        "resolved.png",
        "read-only.png",
        "payment-refunds.png",
        "refund-approval.png",
        "read-only-refund.png",
        "live-list.png",
        "resolved-many.png",
        "outage.png",
        "session-ended.png",
        "sign-in-refused.png",
    ] {
        assert!(screens.join(shot).exists(), "{shot}");
    }
    // The two operations made while the pages were open were resolved together, one event each.
    for id in &made {
        let op = api.ledger.get_unscoped(id).await.unwrap();
        assert_eq!(op.status.as_str(), "failed", "{id}");
        let events = api.ledger.events_unscoped(id).await.unwrap();
        assert_eq!(
            events
                .iter()
                .filter(|e| e.event == "resolve_failed")
                .count(),
            1
        );
    }
    let op = api.ledger.get_unscoped(&attention).await.unwrap();
    assert_eq!(op.status.as_str(), "failed");
    let last = api
        .ledger
        .events_unscoped(&attention)
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert_eq!(last.actor, "on_call:alice");
    assert_eq!(
        last.detail.as_deref(),
        Some("No payment in the processor dashboard; customer told to retry.")
    );
    // The read-only key changed nothing.
    let untouched = api.ledger.get_unscoped(&read_only_target).await.unwrap();
    assert_eq!(untouched.status.as_str(), "needs_attention");
    api.stop().await;
}

//! `POST /v1/operations/batch` and `POST /v1/operations` with an approval, over real HTTP on
//! Postgres: per-item answers identical to the single route's, nothing written for a refused item
//! or a retried batch, the limits, and who may not call it. `payonce enqueue` as a real process:
//! killed mid-file and run again, it creates each line's operation once and names refused lines.

use super::{OTHER_TENANT, T0, TestApi, raw_details, spawn_on_postgres, tenant};
use crate::support::{payonce_bin, wait_for};
use payonce_api::intake::BATCH_BODY_LIMIT_BYTES;
use payonce_core::details::{Details, RawDetails};
use payonce_core::id::TenantId;
use payonce_core::state::{ALL_STATUSES, Status};
use payonce_ledger::intake::BATCH_ITEMS_MAX;
use payonce_ledger::{ListFilter, SharedLedger};
use serde_json::{Value, json};
use std::time::Duration;

const BATCH: &str = "/v1/operations/batch";

fn hash_of(details: &Value) -> String {
    let raw: RawDetails = serde_json::from_value(details.clone()).unwrap();
    Details::parse(&raw).unwrap().hash().as_str().to_string()
}

/// A batch item for `invoice`, approved for its own details when `approved`.
fn item(invoice: &str, approved: bool) -> Value {
    let details = raw_details(invoice, 2048);
    let mut item = json!({"business_key": format!("invoice:{invoice}:pay"), "details": details});
    if approved {
        item["approval"] = json!({"details_hash": hash_of(&item["details"]), "approved_by": format!("mandate:{invoice}")});
    }
    item
}

/// Every operation of `tenant`: (id, status, events, approval recorded).
async fn rows(ledger: &SharedLedger, tenant: &TenantId) -> Vec<(String, Status, usize, bool)> {
    let mut all = Vec::new();
    let listed = ledger
        .list(&ListFilter {
            statuses: ALL_STATUSES.to_vec(),
            updated_before: None,
            tenant: Some(tenant.clone()),
            limit: 10_000,
        })
        .await
        .unwrap();
    for op in listed {
        let events = ledger.events(tenant, &op.id).await.unwrap().len();
        let approved = ledger
            .latest_approval(tenant, &op.id)
            .await
            .unwrap()
            .is_some();
        all.push((op.id.as_str().to_string(), op.status, events, approved));
    }
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all
}

async fn api() -> TestApi {
    spawn_on_postgres().await
}

#[tokio::test]
async fn a_mixed_batch_answers_each_item_as_the_single_route_would() {
    let api = api().await;
    let existing = api.create("EX", 2048).await;
    api.create("CF", 1000).await;
    let before = rows(&api.ledger, &tenant()).await;
    let mut mismatch = item("MM", false);
    mismatch["approval"] = json!({"details_hash": "0".repeat(64), "approved_by": "mandate:MM"});
    let mut bad_currency = item("BC", false);
    bad_currency["details"]["currency"] = json!("zzz");
    let mut refund = item("RF", false);
    refund["details"]["kind"] = json!("refund");
    let mut bad_approver = item("BA", false);
    bad_approver["approval"] =
        json!({"details_hash": hash_of(&bad_approver["details"]), "approved_by": " "});
    let body = json!({"operations": [
        item("N1", true),                                  // 0: 201 ready
        item("N2", false),                                 // 1: 201 awaiting approval
        item("EX", true),                                  // 2: 200, approved now
        item("CF", false),                                 // 3: 409 business_key_conflict
        mismatch,                                          // 4: 409 approval_mismatch
        bad_currency,                                      // 5: 400 invalid_request
        {"business_key": "invoice:NF:pay"},                // 6: 400 invalid_json
        refund,                                            // 7: 400 invalid_request
        item("N1", false),                                 // 8: 400 a repeat of item 0
        bad_approver,                                      // 9: 400 invalid_request
    ]});
    let r = api.post(BATCH, &api.service, body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let answer = r.json();
    let results = answer["results"].as_array().unwrap();
    let statuses: Vec<u64> = results
        .iter()
        .map(|r| r["status"].as_u64().unwrap())
        .collect();
    assert_eq!(
        statuses,
        [201, 201, 200, 409, 409, 400, 400, 400, 400, 400],
        "{answer}"
    );
    let codes: Vec<&str> = results
        .iter()
        .map(|r| r["error"]["code"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        codes,
        [
            "",
            "",
            "",
            "business_key_conflict",
            "approval_mismatch",
            "invalid_request",
            "invalid_json",
            "invalid_request",
            "invalid_request",
            "invalid_request"
        ]
    );
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["index"], i);
    }
    assert_eq!(results[0]["operation"]["status"], "ready");
    assert_eq!(results[0]["operation"]["approved_by"], "mandate:N1");
    assert_eq!(results[1]["operation"]["status"], "awaiting_approval");
    assert_eq!(results[2]["operation"]["id"], existing["id"]);
    assert_eq!(results[2]["operation"]["status"], "ready");
    assert!(
        results[8]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("item 0")
    );
    assert_eq!(
        answer["summary"],
        json!({"created": 2, "existing": 1, "conflicts": 2, "invalid": 5})
    );
    // The single route answers the same items the same way (on a fresh key each, or the same key).
    let single = api
        .post(
            "/v1/operations",
            &api.service,
            json!({"business_key": "invoice:CF:pay", "details": raw_details("CF", 2048)}),
        )
        .await;
    assert_eq!(
        (single.status, single.code().as_str()),
        (409, "business_key_conflict")
    );
    // Only items 0, 1 and 2 wrote anything.
    let after = rows(&api.ledger, &tenant()).await;
    let changed: Vec<&String> = after
        .iter()
        .filter(|r| !before.contains(r))
        .map(|r| &r.0)
        .collect();
    let mut expected: Vec<String> = [0, 1, 2]
        .iter()
        .map(|&i| results[i]["operation"]["id"].as_str().unwrap().to_string())
        .collect();
    expected.sort();
    let mut changed: Vec<String> = changed.into_iter().cloned().collect();
    changed.sort();
    assert_eq!(changed, expected);
    assert_eq!(after.len(), before.len() + 2);
}

/// Issue 53, item 9: a batch item whose body the single route would refuse as `invalid_json` names
/// the same field, prefixed with the item (`operations[1].details.amount: …`).
#[tokio::test]
async fn a_malformed_item_names_its_field_as_the_single_route_does() {
    let api = super::spawn(crate::support::sqlite_ledger().await).await;
    let mut wrong_type = item("WT", false);
    wrong_type["details"]["amount"] = json!("lots");
    let single = api
        .post("/v1/operations", &api.service, wrong_type.clone())
        .await;
    assert_eq!(single.status, 400, "{}", single.text);
    assert_eq!(single.code(), "invalid_json");
    let single_message = single.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        single_message.contains("details.amount"),
        "{single_message}"
    );

    let body =
        json!({"operations": [item("OK", false), wrong_type, {"business_key": "invoice:NF:pay"}]});
    let r = api.post(BATCH, &api.service, body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let results = r.json()["results"].as_array().unwrap().clone();
    assert_eq!(results[1]["error"]["code"], "invalid_json");
    let message = results[1]["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("operations[1].details.amount: invalid type"),
        "{message} (the single route: {single_message})"
    );
    let missing = results[2]["error"]["message"].as_str().unwrap();
    assert!(
        missing.starts_with("operations[2]: missing field `details`"),
        "{missing}"
    );
}

#[tokio::test]
async fn a_batch_retried_after_its_response_was_lost_enqueues_nothing_twice() {
    let api = api().await;
    let items: Vec<Value> = (0..100).map(|i| item(&format!("R{i}"), true)).collect();
    let body = json!({"operations": items});
    // The first answer is lost: the client gives up before reading it (a timeout far shorter than
    // the batch), and may or may not have reached the server's commit.
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(1))
        .build()
        .unwrap();
    let lost = impatient
        .post(format!("{}{BATCH}", api.base))
        .bearer_auth(&api.service)
        .json(&body)
        .send()
        .await;
    assert!(lost.is_err(), "the first answer was meant to be lost");
    // The retry, and a second one after it: every item answered, each operation once.
    let first = api.post(BATCH, &api.service, body.clone()).await;
    assert_eq!(first.status, 200, "{}", first.text);
    let after_first = rows(&api.ledger, &tenant()).await;
    assert_eq!(after_first.len(), 100);
    assert!(
        after_first
            .iter()
            .all(|r| r.1 == Status::Ready && r.2 == 2 && r.3)
    );
    let again = api.post(BATCH, &api.service, body).await;
    assert_eq!(again.status, 200, "{}", again.text);
    assert_eq!(
        again.json()["summary"],
        json!({"created": 0, "existing": 100, "conflicts": 0, "invalid": 0})
    );
    for (a, b) in first.json()["results"]
        .as_array()
        .unwrap()
        .iter()
        .zip(again.json()["results"].as_array().unwrap())
    {
        assert_eq!(a["operation"]["id"], b["operation"]["id"]);
    }
    assert_eq!(
        rows(&api.ledger, &tenant()).await,
        after_first,
        "the retry wrote nothing"
    );
}

#[tokio::test]
async fn a_batch_past_its_limits_is_refused_and_writes_nothing() {
    let api = api().await;
    let too_many: Vec<Value> = (0..=BATCH_ITEMS_MAX)
        .map(|i| item(&format!("L{i}"), false))
        .collect();
    let r = api
        .post(BATCH, &api.service, json!({"operations": too_many}))
        .await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (400, "invalid_request"),
        "{}",
        r.text
    );
    assert!(r.text.contains("1..=1000"), "{}", r.text);
    let r = api
        .post(BATCH, &api.service, json!({"operations": []}))
        .await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (400, "invalid_request"),
        "{}",
        r.text
    );
    // One item, over the body limit.
    let mut big = item("BIG", false);
    big["details"]["description"] = json!("x".repeat(BATCH_BODY_LIMIT_BYTES));
    let r = api
        .post(BATCH, &api.service, json!({"operations": [big]}))
        .await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (413, "body_too_large"),
        "{}",
        r.text
    );
    let r = api.post(BATCH, &api.service, json!({"items": []})).await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (400, "invalid_json"),
        "{}",
        r.text
    );
    assert!(rows(&api.ledger, &tenant()).await.is_empty());
    // The body limit is the batch route's own: a batch of 1,000 plain items (about 300 KB) passes
    // where the single route's 64 KiB would refuse it.
    let full: Vec<Value> = (0..BATCH_ITEMS_MAX)
        .map(|i| item(&format!("F{i}"), true))
        .collect();
    let r = api
        .post(BATCH, &api.service, json!({"operations": full}))
        .await;
    assert_eq!(r.status, 200, "{}", &r.text[..r.text.len().min(500)]);
    assert_eq!(r.json()["summary"]["created"], BATCH_ITEMS_MAX);
}

#[tokio::test]
async fn no_key_an_assistant_an_on_call_a_read_only_key_and_another_tenant_cannot_write_ours() {
    let api = api().await;
    let read_only =
        payonce_api::keys::issue_read_only(api.ledger.as_ref(), &tenant(), "auditor", None, T0)
            .await
            .unwrap()
            .secret;
    let body = json!({"operations": [item("X1", true)]});
    let r = api.send("POST", BATCH, None, Some(body.clone())).await;
    assert_eq!((r.status, r.code().as_str()), (401, "unauthorized"));
    for (who, key) in [
        ("assistant", &api.assistant),
        ("on-call", &api.on_call),
        ("read-only", &read_only),
        ("other assistant", &api.other_assistant),
    ] {
        let r = api.post(BATCH, key, body.clone()).await;
        assert_eq!(
            (r.status, r.code().as_str()),
            (403, "forbidden"),
            "{who}: {}",
            r.text
        );
    }
    assert!(rows(&api.ledger, &tenant()).await.is_empty());
    // Ours exists; another tenant's service key with the same business key creates its own and
    // learns nothing of ours (no conflict, a different id), and ours is unchanged.
    let ours = api.post(BATCH, &api.service, body.clone()).await.json();
    let before = rows(&api.ledger, &tenant()).await;
    let mut other_body = body.clone();
    other_body["operations"][0]["details"]["amount"] = json!(1);
    other_body["operations"][0]["approval"]["details_hash"] =
        json!(hash_of(&other_body["operations"][0]["details"]));
    let theirs = api.post(BATCH, &api.other_service, other_body).await;
    assert_eq!(theirs.status, 200, "{}", theirs.text);
    let theirs = theirs.json();
    assert_eq!(theirs["results"][0]["status"], 201);
    assert_ne!(
        theirs["results"][0]["operation"]["id"],
        ours["results"][0]["operation"]["id"]
    );
    assert_eq!(rows(&api.ledger, &tenant()).await, before);
    let other = TenantId::parse(OTHER_TENANT).unwrap();
    assert_eq!(rows(&api.ledger, &other).await.len(), 1);
    let id = theirs["results"][0]["operation"]["id"].as_str().unwrap();
    let r = api.get(&format!("/v1/operations/{id}"), &api.service).await;
    assert_eq!(r.status, 404);
}

#[tokio::test]
async fn the_single_route_creates_and_enqueues_in_one_request() {
    let api = api().await;
    let one = item("S1", true);
    let r = api.post("/v1/operations", &api.service, one.clone()).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json()["status"], "ready");
    assert_eq!(r.json()["approved_by"], "mandate:S1");
    let again = api.post("/v1/operations", &api.service, one).await;
    assert_eq!(again.status, 200, "{}", again.text);
    assert_eq!(again.json()["id"], r.json()["id"]);
    let id = r.json()["id"].as_str().unwrap().to_string();
    let events = api
        .get(&format!("/v1/operations/{id}"), &api.service)
        .await
        .json()["events"]
        .clone();
    let names: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["create", "approve"]);
    // An approval of other details creates nothing.
    let mut wrong = item("S2", false);
    wrong["approval"] = json!({"details_hash": "1".repeat(64), "approved_by": "mandate:S2"});
    let r = api.post("/v1/operations", &api.service, wrong).await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (409, "approval_mismatch"),
        "{}",
        r.text
    );
    assert_eq!(rows(&api.ledger, &tenant()).await.len(), 1);
    // An existing operation that was cancelled cannot be approved this way either.
    let cancelled = api.create("S3", 2048).await;
    let c = api
        .post(
            &format!(
                "/v1/operations/{}/cancel",
                cancelled["id"].as_str().unwrap()
            ),
            &api.service,
            json!({}),
        )
        .await;
    assert_eq!(c.status, 200, "{}", c.text);
    let r = api
        .post("/v1/operations", &api.service, item("S3", true))
        .await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (409, "wrong_state"),
        "{}",
        r.text
    );
}

/// Runs `payonce enqueue` on `file` against the API; returns the child.
fn enqueue(api: &TestApi, file: &std::path::Path, extra: &[&str]) -> tokio::process::Child {
    tokio::process::Command::new(payonce_bin())
        .arg("enqueue")
        .arg(file)
        .args(extra)
        .env("PAYONCE_API_URL", &api.base)
        .env("PAYONCE_API_KEY", &api.service)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start payonce enqueue")
}

#[tokio::test]
async fn the_enqueue_command_resumes_after_a_kill_and_names_refused_lines() {
    let api = api().await;
    let dir = std::env::temp_dir().join(format!("payonce-enqueue-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("run.csv");
    const LINES: usize = 3_000;
    let mut csv = String::from(
        "business_key,amount,currency,customer,payment_method,invoice,description,approved_by\n",
    );
    for i in 0..LINES {
        // Line numbers: the header is line 1, item i is line i + 2.
        match i {
            10 => csv.push_str("invoice:E10:pay,12.50,usd,cus_1,pm_card_visa,E10,,mandate:1\n"),
            20 => csv.push_str("invoice:E20:pay,2048,zzz,cus_1,pm_card_visa,E20,,mandate:1\n"),
            _ => csv.push_str(&format!(
                "invoice:E{i}:pay,2048,usd,cus_1,pm_card_visa,E{i},\"Invoice E{i}, monthly\",mandate:cus_1\n"
            )),
        }
    }
    std::fs::write(&file, csv).unwrap();
    // Small batches, so the kill lands mid-file.
    let mut first = enqueue(&api, &file, &["--batch-size", "10"]);
    let ledger = api.ledger.clone();
    let written = wait_for("the first batches", Duration::from_secs(60), || {
        let ledger = ledger.clone();
        async move {
            let n: i64 = ledger
                .count_by_status()
                .await
                .unwrap()
                .iter()
                .map(|c| c.count)
                .sum();
            (n >= 100).then_some(n)
        }
    })
    .await;
    first.start_kill().unwrap();
    let status = first.wait().await.unwrap();
    assert!(!status.success(), "killed: {status}");
    let at_kill: i64 = api
        .ledger
        .count_by_status()
        .await
        .unwrap()
        .iter()
        .map(|c| c.count)
        .sum();
    assert!(
        written >= 100 && at_kill < i64::try_from(LINES).unwrap() - 2,
        "the kill landed mid-file: {at_kill}"
    );
    // Run again to the end.
    let second = enqueue(&api, &file, &["--batch-size", "10", "--json"])
        .wait_with_output()
        .await
        .unwrap();
    assert_eq!(
        second.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let summary: Value = serde_json::from_slice(&second.stdout).unwrap();
    assert_eq!(summary["lines"], LINES);
    assert_eq!(summary["invalid"], 2, "{summary}");
    assert_eq!(summary["conflicts"], 0, "{summary}");
    let created = summary["created"].as_i64().unwrap();
    let existing = summary["existing"].as_i64().unwrap();
    // What the killed run wrote is answered existing (plus at most the one batch the server may
    // still have been committing when the count was read).
    assert!(
        existing >= at_kill && existing <= at_kill + 10,
        "{existing} existing, {at_kill} at the kill"
    );
    assert_eq!(created + existing, i64::try_from(LINES).unwrap() - 2);
    let refused = summary["refused"].as_array().unwrap();
    assert_eq!(refused[0]["line"], 12, "{summary}");
    assert_eq!(refused[0]["code"], "invalid_line");
    assert_eq!(refused[1]["line"], 22, "{summary}");
    assert_eq!(refused[1]["code"], "invalid_request");
    // Each operation once, created and approved once.
    let all = rows(&api.ledger, &tenant()).await;
    assert_eq!(all.len(), LINES - 2);
    assert!(
        all.iter().all(|r| r.1 == Status::Ready && r.2 == 2 && r.3),
        "one create and one approve each"
    );
    // The plain summary names the refused lines.
    let third = enqueue(&api, &file, &["--batch-size", "500"])
        .wait_with_output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&third.stdout);
    assert!(
        text.contains("created 0, existing 2998, conflicts 0, invalid 2"),
        "{text}"
    );
    // Line numbers are the file's everywhere: the header is one of its 3001 lines.
    assert!(
        text.starts_with("3001 lines, 3000 operations, in "),
        "{text}"
    );
    assert!(text.contains("line 12: 400 invalid_line: amount"), "{text}");
    assert!(text.contains("line 22: 400 invalid_request"), "{text}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A CSV of `n` approved payments, `prefix`-keyed, after its header (line 1).
fn billing_run(dir: &std::path::Path, prefix: &str, n: usize) -> std::path::PathBuf {
    let file = dir.join(format!("{prefix}.csv"));
    let mut csv =
        String::from("business_key,amount,currency,customer,payment_method,invoice,approved_by\n");
    for i in 0..n {
        csv.push_str(&format!(
            "invoice:{prefix}{i}:pay,2048,usd,cus_1,pm_card_visa,{prefix}{i},mandate:cus_1\n"
        ));
    }
    std::fs::write(&file, csv).unwrap();
    file
}

/// Operations of the test tenant, every state.
async fn written(ledger: &SharedLedger) -> i64 {
    ledger
        .count_by_status()
        .await
        .unwrap()
        .iter()
        .map(|c| c.count)
        .sum()
}

#[tokio::test]
async fn enqueue_stopped_by_ctrl_c_names_the_line_it_reached_and_the_next_run_resumes_there() {
    let api = api().await;
    let dir = std::env::temp_dir().join(format!("payonce-enqueue-int-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    const LINES: i64 = 3_000;
    let file = billing_run(&dir, "C", 3_000);
    let first = enqueue(&api, &file, &["--batch-size", "10"]);
    let ledger = api.ledger.clone();
    wait_for("the first batches", Duration::from_secs(60), || {
        let ledger = ledger.clone();
        async move { (written(&ledger).await >= 100).then_some(()) }
    })
    .await;
    let pid = first.id().unwrap().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let out = tokio::time::timeout(Duration::from_secs(30), first.wait_with_output())
        .await
        .expect("Ctrl-C stops it")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    let said = stderr
        .lines()
        .find_map(|l| l.strip_prefix("stopped at line "))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(said.contains(" of 3001; run again to resume"), "{stderr}");
    let line: i64 = said.split(' ').next().unwrap().parse().unwrap();
    // Every line up to it is written (the header is line 1); at most the batch in flight beyond.
    let at_stop = written(&api.ledger).await;
    assert!(
        line > 1 && line < LINES && at_stop >= line - 1 && at_stop <= line - 1 + 10,
        "stopped at line {line}, {at_stop} written"
    );
    let second = enqueue(&api, &file, &["--json"])
        .wait_with_output()
        .await
        .unwrap();
    assert!(second.status.success(), "{second:?}");
    let summary: Value = serde_json::from_slice(&second.stdout).unwrap();
    assert_eq!(summary["file_lines"], 3_001, "{summary}");
    // What the stopped run wrote is answered existing (plus at most the batch it left in flight,
    // which the api may still have been committing when the count was read).
    let existing = summary["existing"].as_i64().unwrap();
    assert!(
        existing >= at_stop && existing <= at_stop + 10,
        "{existing} existing, {at_stop} at the stop"
    );
    assert_eq!(summary["created"].as_i64().unwrap() + existing, LINES);
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test]
async fn enqueue_on_a_terminal_shows_the_line_of_the_total_a_percentage_and_an_eta() {
    // `script` (util-linux) gives enqueue a pseudo-terminal, as an operator's shell does.
    let api = api().await;
    let dir = std::env::temp_dir().join(format!("payonce-enqueue-tty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = billing_run(&dir, "T", 50);
    let command = format!(
        "{} enqueue {} --batch-size 10",
        payonce_bin(),
        file.display()
    );
    let out = tokio::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env("PAYONCE_API_URL", &api.base)
        .env("PAYONCE_API_KEY", &api.service)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("`script` is installed (util-linux)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for reached in ["line 11 of 51 (21%), ETA ", "line 51 of 51 (100%), ETA 0s"] {
        assert!(text.contains(reached), "{reached:?} in {text:?}");
    }
    assert!(text.contains("51 lines, 50 operations, in "), "{text:?}");
    std::fs::remove_dir_all(&dir).ok();
}

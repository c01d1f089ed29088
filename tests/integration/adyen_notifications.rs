//! Adyen notifications: the api's `POST /v1/webhooks/adyen` verifies every item's HMAC signature
//! (cross-checked with Python's own hmac and base64) and merchant account and stores each item once;
//! the reconciler checks a stored notification against its operation and applies it only when it
//! names the reference Adyen answered the operation with, after a same-key resubmission otherwise.

use crate::adyen_adapter::{Op, adapter, adyen_sim};
use crate::api::{ADYEN_HMAC_KEY, ADYEN_MERCHANT, spawn};
use crate::support::now;
use crate::support::reconciler;
use crate::support::rows;
use crate::support::{recording, sqlite_ledger, tenant, wait_for};
use payonce_core::clock::Timestamp;
use payonce_core::state::Status;
use payonce_ledger::{Fence, Operation, Recorded, SharedLedger};
use payonce_processor::adyen::webhook::{NotificationItem, decode_key, sign};
use payonce_processor::ingest as webhooks;
use payonce_processor::{Processor, SubmitOutcome};
use payonce_reconciler::Reconciler;
use payonce_simulator::SimulatorConfig;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// A notification item for `reference` (the operation id), signed with `key_hex` unless `None`.
pub(crate) fn item(
    psp: &str,
    reference: &str,
    amount: i64,
    success: bool,
    key_hex: Option<&str>,
) -> Value {
    let mut item = json!({
        "additionalData": {},
        "amount": {"currency": "USD", "value": amount},
        "eventCode": "AUTHORISATION",
        "eventDate": "2026-12-06T22:00:00+01:00",
        "merchantAccountCode": ADYEN_MERCHANT,
        "merchantReference": reference,
        "paymentMethod": "visa",
        "pspReference": psp,
        "reason": "",
        "success": if success { "true" } else { "false" },
    });
    if let Some(key) = key_hex {
        let parsed: NotificationItem = serde_json::from_value(item.clone()).unwrap();
        item["additionalData"]["hmacSignature"] = json!(sign(&decode_key(key).unwrap(), &parsed));
    }
    item
}

pub(crate) fn notification(items: Vec<Value>) -> String {
    let items: Vec<Value> = items
        .into_iter()
        .map(|i| json!({"NotificationRequestItem": i}))
        .collect();
    json!({"live": "false", "notificationItems": items}).to_string()
}

/// The signature Python's standard library computes for `item` under `key_hex`, independently of
/// the Rust code: the signing string, `bytes.fromhex`, `hmac`/`hashlib.sha256`, `base64`.
fn python_signature(key_hex: &str, item: &Value) -> String {
    let script = r#"
import base64, hashlib, hmac, json, sys
key, item = sys.argv[1], json.loads(sys.argv[2])
fields = [item.get("pspReference", ""), item.get("originalReference", ""),
          item.get("merchantAccountCode", ""), item.get("merchantReference", ""),
          str(item["amount"]["value"]), item["amount"]["currency"],
          item.get("eventCode", ""), item.get("success", "")]
mac = hmac.new(bytes.fromhex(key), ":".join(fields).encode("utf-8"), hashlib.sha256)
print(base64.b64encode(mac.digest()).decode())
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", script, key_hex, &item.to_string()])
        .output()
        .expect("python3 is needed to cross-check Adyen's HMAC independently");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

async fn stored_adyen_events(ledger: &SharedLedger) -> Vec<String> {
    ledger
        .pending_processor_events(Timestamp::from_millis(i64::MAX), 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.processor == "adyen")
        .map(|e| e.event_id)
        .collect()
}

#[test]
fn the_signature_matches_an_independent_implementation() {
    for (psp, amount, success) in [
        ("7914073381342284", 1130, true),
        ("ABCDEF0123456789", 1, false),
    ] {
        let signed = item(psp, "op_python", amount, success, Some(ADYEN_HMAC_KEY));
        let ours = signed["additionalData"]["hmacSignature"].as_str().unwrap();
        assert_eq!(ours, python_signature(ADYEN_HMAC_KEY, &signed), "{psp}");
    }
}

#[tokio::test]
async fn signed_notifications_are_accepted_once_and_anything_else_is_refused_with_nothing_stored() {
    let ledger = sqlite_ledger().await;
    let api = spawn(ledger.clone()).await;
    let op = api.create_ready("INV-ADY-1").await;
    let id = op["id"].as_str().unwrap();
    let url = format!("{}/v1/webhooks/adyen", api.base);
    let post = |body: String| {
        let http = api.http.clone();
        let url = url.clone();
        async move {
            let r = http
                .post(url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    // Refused, nothing stored: no signature, a wrong one, another key's, another merchant account,
    // one bad item among good ones, not a notification at all.
    let mut wrong = item("PSPWRONG00000001", id, 2048, true, Some(ADYEN_HMAC_KEY));
    wrong["additionalData"]["hmacSignature"] = json!("AAAA");
    let mut other_account = item("PSPOTHER00000001", id, 2048, true, None);
    other_account["merchantAccountCode"] = json!("SomeoneElseECOM");
    let parsed: NotificationItem = serde_json::from_value(other_account.clone()).unwrap();
    other_account["additionalData"]["hmacSignature"] =
        json!(sign(&decode_key(ADYEN_HMAC_KEY).unwrap(), &parsed));
    let other_key = "ff".repeat(32);
    for (what, body, status) in [
        (
            "unsigned",
            notification(vec![item("PSPNONE000000001", id, 2048, true, None)]),
            400,
        ),
        ("wrong signature", notification(vec![wrong]), 400),
        (
            "another key",
            notification(vec![item(
                "PSPKEY0000000001",
                id,
                2048,
                true,
                Some(&other_key),
            )]),
            400,
        ),
        (
            "another merchant account",
            notification(vec![other_account]),
            400,
        ),
        (
            "one bad item",
            notification(vec![
                item("PSPGOOD000000001", id, 2048, true, Some(ADYEN_HMAC_KEY)),
                item("PSPBAD0000000001", id, 2048, true, None),
            ]),
            400,
        ),
        (
            "not a notification",
            json!({"hello": "world"}).to_string(),
            400,
        ),
        ("no items", notification(vec![]), 400),
    ] {
        let (got, text) = post(body).await;
        assert_eq!(got, status, "{what}: {text}");
        assert!(
            stored_adyen_events(&ledger).await.is_empty(),
            "{what} stored something"
        );
    }
    // Signed: `[accepted]`, stored once however often Adyen redelivers it.
    let good = notification(vec![item(
        "PSPGOOD000000002",
        id,
        2048,
        true,
        Some(ADYEN_HMAC_KEY),
    )]);
    for _ in 0..3 {
        assert_eq!(post(good.clone()).await, (200, "[accepted]".to_string()));
    }
    assert_eq!(
        stored_adyen_events(&ledger).await,
        ["AUTHORISATION:PSPGOOD000000002:true"]
    );
    api.stop().await;
}

#[tokio::test]
async fn without_an_hmac_key_every_notification_is_refused() {
    let ledger = sqlite_ledger().await;
    let api = crate::api::spawn_with(ledger.clone(), |c| c.adyen_hmac_key = None).await;
    let r = api
        .http
        .post(format!("{}/v1/webhooks/adyen", api.base))
        .body(notification(vec![item(
            "PSP0000000000009",
            "op_x",
            1,
            true,
            Some(ADYEN_HMAC_KEY),
        )]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 503);
    assert!(stored_adyen_events(&ledger).await.is_empty());
    api.stop().await;
}

#[tokio::test]
async fn the_simulators_notifications_reach_the_api_signed_as_python_verifies_them() {
    let ledger = sqlite_ledger().await;
    let api = spawn(ledger.clone()).await;
    let mut config = SimulatorConfig::adyen();
    config.adyen.hmac_key_hex = ADYEN_HMAC_KEY.into();
    config.webhook_url = Some(format!("{}/v1/webhooks/adyen", api.base));
    config.webhook_duplicates_per_mille = 1000;
    let s = crate::simulator::start(config).await;
    let op = Op::new("pm_card_chargeDeclined");
    assert!(matches!(
        op.submit(&adapter(&s.base)).await,
        SubmitOutcome::Declined { .. }
    ));
    let paid = Op::new("pm_card_visa");
    assert!(matches!(
        paid.submit(&adapter(&s.base)).await,
        SubmitOutcome::Succeeded { .. }
    ));
    let stored = wait_for(
        "both notifications stored",
        crate::simulator::DEADLINE,
        || async {
            let events = ledger
                .pending_processor_events(Timestamp::from_millis(i64::MAX), 100)
                .await
                .unwrap();
            (events.iter().filter(|e| e.processor == "adyen").count() >= 2).then_some(events)
        },
    )
    .await;
    // Each was delivered twice (duplicates on) and stored once.
    assert_eq!(stored.iter().filter(|e| e.processor == "adyen").count(), 2);
    for event in stored.iter().filter(|e| e.processor == "adyen") {
        let item: Value = serde_json::from_str(&event.payload).unwrap();
        assert_eq!(
            item["additionalData"]["hmacSignature"].as_str().unwrap(),
            python_signature(ADYEN_HMAC_KEY, &item),
            "the simulator signs as Python computes"
        );
        let declined = item["merchantReference"] == op.id.as_str();
        assert_eq!(item["success"], if declined { "false" } else { "true" });
        if declined {
            assert_eq!(item["reason"], "Refused");
        }
    }
    s.sim.shutdown().await;
    api.stop().await;
}

fn reconciler(ledger: &SharedLedger, processor: Arc<dyn Processor>) -> Reconciler {
    reconciler::build(
        ledger,
        processor,
        "rec-adyen",
        reconciler::immediate_rechecks,
    )
}

/// An operation whose submission reached Adyen and came back unknown, recorded with `reference`.
async fn unknown(ledger: &SharedLedger, invoice: &str, reference: Option<&str>) -> Operation {
    let (_, c) = rows::ready_executing(ledger, invoice, "pm_card_visa", now()).await;
    rows::record(
        ledger,
        &c,
        &rows::unknown_outcome("test", reference, now() + Duration::from_secs(3600)),
        "w",
        now(),
    )
    .await
}

/// Stores a signed notification of `items` as the api's Adyen route does.
pub(crate) async fn deliver(ledger: &SharedLedger, items: Vec<Value>) {
    webhooks::ingest_adyen(
        ledger.as_ref(),
        Some(ADYEN_HMAC_KEY),
        Some(ADYEN_MERCHANT),
        notification(items).as_bytes(),
        now(),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_notification_naming_the_answered_reference_settles_the_operation() {
    let ledger = sqlite_ledger().await;
    let s = adyen_sim().await;
    let rec = reconciler(&ledger, Arc::new(adapter(&s.base)));
    let op = unknown(&ledger, "INV-ADY-2", Some("PSPRECEIVED00001")).await;
    deliver(
        &ledger,
        vec![item(
            "PSPRECEIVED00001",
            op.id.as_str(),
            2048,
            true,
            Some(ADYEN_HMAC_KEY),
        )],
    )
    .await;
    let pass = rec.check_hints_once().await.unwrap();
    assert_eq!(pass.applied, 1, "{pass:?}");
    let after = ledger.get(&tenant(), &op.id).await.unwrap();
    assert_eq!(after.status, Status::Succeeded);
    assert_eq!(after.external_ref.as_deref(), Some("PSPRECEIVED00001"));
    // Redelivered after the fact: known, nothing changes.
    deliver(
        &ledger,
        vec![item(
            "PSPRECEIVED00001",
            op.id.as_str(),
            2048,
            true,
            Some(ADYEN_HMAC_KEY),
        )],
    )
    .await;
    assert_eq!(rec.check_hints_once().await.unwrap().applied, 0);
    s.sim.shutdown().await;
}

#[tokio::test]
async fn a_notification_without_the_reference_waits_for_the_same_key_resubmission() {
    let ledger = sqlite_ledger().await;
    let s = adyen_sim().await;
    let p = adapter(&s.base);
    let rec = reconciler(&ledger, Arc::new(adapter(&s.base)));
    let op = unknown(&ledger, "INV-ADY-3", None).await;
    // The worker's request was executed and its answer lost.
    s.arm(
        json!([{ "match": op.idempotency_key.as_str(), "fault": "drop_after_commit", "times": 1 }]),
    )
    .await;
    let lost = payonce_processor::operation::submit(&p, &op).await;
    assert!(
        matches!(
            lost,
            SubmitOutcome::Unknown {
                reference: None,
                ..
            }
        ),
        "{lost:?}"
    );
    let psp = s.payments_with_key(op.idempotency_key.as_str()).await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    deliver(
        &ledger,
        vec![item(&psp, op.id.as_str(), 2048, true, Some(ADYEN_HMAC_KEY))],
    )
    .await;
    let pass = rec.check_hints_once().await.unwrap();
    assert_eq!(
        (pass.applied, pass.deferred),
        (0, 1),
        "not trusted alone: {pass:?}"
    );
    assert_eq!(
        ledger.get(&tenant(), &op.id).await.unwrap().status,
        Status::Unknown
    );
    // The notification made the operation due: the sweep resubmits with the SAME key, Adyen
    // replays its saved result, and the payment is recorded with the notification's reference.
    let swept = rec.sweep_once(false).await.unwrap();
    // Adyen cannot list payments: the scan is skipped, not failed (nothing read, nothing to warn).
    assert_eq!(swept.scan, None);
    let after = ledger.get(&tenant(), &op.id).await.unwrap();
    assert_eq!(after.status, Status::Succeeded, "{swept:?}");
    assert_eq!(after.external_ref.as_deref(), Some(psp.as_str()));
    assert_eq!(
        s.payments_with_key(op.idempotency_key.as_str()).await.len(),
        1,
        "paid once"
    );
    // The waiting notification, read again, agrees.
    wait_for(
        "the notification to be closed",
        Duration::from_secs(15),
        || async {
            rec.check_hints_once().await.unwrap();
            stored_adyen_events(&ledger).await.is_empty().then_some(())
        },
    )
    .await;
    s.sim.shutdown().await;
}

#[tokio::test]
async fn contradicting_notifications_send_the_operation_to_a_human() {
    let ledger = sqlite_ledger().await;
    let s = adyen_sim().await;
    let rec = reconciler(&ledger, Arc::new(adapter(&s.base)));
    // Another amount than approved.
    let op = unknown(&ledger, "INV-ADY-4", Some("PSPAMOUNT0000001")).await;
    deliver(
        &ledger,
        vec![item(
            "PSPAMOUNT0000001",
            op.id.as_str(),
            4096,
            true,
            Some(ADYEN_HMAC_KEY),
        )],
    )
    .await;
    let pass = rec.check_hints_once().await.unwrap();
    assert_eq!(pass.mismatched, 1, "{pass:?}");
    assert_eq!(
        ledger.get(&tenant(), &op.id).await.unwrap().status,
        Status::NeedsAttention
    );
    // A second successful payment for an operation already paid: money paid twice.
    let paid = unknown(&ledger, "INV-ADY-5", Some("PSPFIRST00000001")).await;
    deliver(
        &ledger,
        vec![item(
            "PSPFIRST00000001",
            paid.id.as_str(),
            2048,
            true,
            Some(ADYEN_HMAC_KEY),
        )],
    )
    .await;
    rec.check_hints_once().await.unwrap();
    assert_eq!(
        ledger.get(&tenant(), &paid.id).await.unwrap().status,
        Status::Succeeded
    );
    deliver(
        &ledger,
        vec![item(
            "PSPSECOND0000001",
            paid.id.as_str(),
            2048,
            true,
            Some(ADYEN_HMAC_KEY),
        )],
    )
    .await;
    let pass = rec.check_hints_once().await.unwrap();
    assert_eq!(pass.mismatched, 1, "{pass:?}");
    assert_eq!(
        ledger.get(&tenant(), &paid.id).await.unwrap().status,
        Status::NeedsAttention
    );
    s.sim.shutdown().await;
}

/// A signed REFUND item: `psp` refunds `original` by the refund operation `reference`.
fn refund_item(psp: &str, original: &str, reference: &str, amount: i64, success: bool) -> Value {
    let mut refund = item(psp, reference, amount, success, None);
    refund["eventCode"] = json!("REFUND");
    refund["originalReference"] = json!(original);
    refund.as_object_mut().unwrap().remove("paymentMethod");
    let parsed: NotificationItem = serde_json::from_value(refund.clone()).unwrap();
    refund["additionalData"]["hmacSignature"] =
        json!(sign(&decode_key(ADYEN_HMAC_KEY).unwrap(), &parsed));
    refund
}

#[tokio::test]
async fn a_refund_notification_settles_the_received_refund_and_one_of_another_payment_does_not() {
    use crate::support::refunds::{create_refund, settle_refund, succeeded_payment};
    let ledger = sqlite_ledger().await;
    let s = adyen_sim().await;
    let rec = reconciler(&ledger, Arc::new(adapter(&s.base)));
    let payment = succeeded_payment(&ledger, "INV-ADY-R1", 2048, now()).await;
    let original = payment.external_ref.clone().unwrap();
    let received = |reference: &str| Recorded::Unknown {
        reason: "refund received".into(),
        reference: Some(reference.to_string()),
        next_check_at: now() + Duration::from_secs(3600),
    };
    let refund = create_refund(&ledger, &payment, "refund:ady:1", 500, now())
        .await
        .unwrap()
        .operation;
    let refund = settle_refund(&ledger, &refund, received("RFDADYEN00000001")).await;
    assert_eq!(refund.status, Status::Unknown);
    deliver(
        &ledger,
        vec![refund_item(
            "RFDADYEN00000001",
            &original,
            refund.id.as_str(),
            500,
            true,
        )],
    )
    .await;
    let pass = rec.check_hints_once().await.unwrap();
    assert_eq!(pass.applied, 1, "{pass:?}");
    let settled = ledger.get(&tenant(), &refund.id).await.unwrap();
    assert_eq!(settled.status, Status::Succeeded);
    assert_eq!(settled.external_ref.as_deref(), Some("RFDADYEN00000001"));

    // A REFUND naming another payment than the one this refund gives money back from.
    let other = create_refund(&ledger, &payment, "refund:ady:2", 300, now())
        .await
        .unwrap()
        .operation;
    let other = settle_refund(&ledger, &other, received("RFDADYEN00000002")).await;
    deliver(
        &ledger,
        vec![refund_item(
            "RFDADYEN00000002",
            "SOMEOTHERPAYMENT",
            other.id.as_str(),
            300,
            true,
        )],
    )
    .await;
    let pass = rec.check_hints_once().await.unwrap();
    assert_eq!(pass.mismatched, 1, "{pass:?}");
    assert_eq!(
        ledger.get(&tenant(), &other.id).await.unwrap().status,
        Status::NeedsAttention
    );
    s.sim.shutdown().await;
}

#[tokio::test]
async fn notification_limits_refuse_with_nothing_stored() {
    let ledger = sqlite_ledger().await;
    let api = spawn(ledger.clone()).await;
    let url = format!("{}/v1/webhooks/adyen", api.base);
    let op = api.create_ready("INV-ADY-LIMIT").await;
    let id = op["id"].as_str().unwrap();
    let items = |n: usize| {
        notification(
            (0..n)
                .map(|i| item(&format!("PSP{i:013}"), id, 2048, true, Some(ADYEN_HMAC_KEY)))
                .collect(),
        )
    };
    // More items than ITEMS_MAX, each one signed: refused, nothing stored.
    let max = payonce_processor::adyen::webhook::ITEMS_MAX;
    let r = api
        .http
        .post(&url)
        .body(items(max + 1))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert!(stored_adyen_events(&ledger).await.is_empty());
    // ITEMS_MAX: accepted, each stored once.
    let r = api.http.post(&url).body(items(max)).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(stored_adyen_events(&ledger).await.len(), max);
    // A body over the limit: 413 before anything is read.
    let limit = payonce_api::webhooks::ADYEN_BODY_LIMIT_BYTES;
    let r = api
        .http
        .post(&url)
        .body(vec![b' '; limit + 1])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 413);
    assert_eq!(stored_adyen_events(&ledger).await.len(), max);
    api.stop().await;
}

#[tokio::test]
async fn a_received_payment_is_settled_by_its_notification_end_to_end() {
    let ledger = sqlite_ledger().await;
    let api = spawn(ledger.clone()).await;
    let mut config = SimulatorConfig::adyen();
    config.adyen.hmac_key_hex = ADYEN_HMAC_KEY.into();
    config.webhook_url = Some(format!("{}/v1/webhooks/adyen", api.base));
    config.processing_settle = Duration::from_millis(200);
    let s = crate::simulator::start(config).await;
    let p = adapter(&s.base);
    let rec = reconciler(&ledger, Arc::new(adapter(&s.base)));
    // The worker's moves: claim, submit once with the stored key, record what Adyen said.
    let (op, psp, _) = received_and_recorded(
        &ledger,
        &p,
        "INV-ADY-RECEIVED",
        now() + Duration::from_secs(3600),
    )
    .await;
    // The simulator settles it, signs the AUTHORISATION, the api stores it, the reconciler applies it.
    let settled = wait_for(
        "the notification to settle the payment",
        crate::simulator::DEADLINE,
        || async {
            rec.check_hints_once().await.unwrap();
            let op = ledger.get(&tenant(), &op.id).await.unwrap();
            (op.status == Status::Succeeded).then_some(op)
        },
    )
    .await;
    assert_eq!(settled.external_ref.as_deref(), Some(psp.as_str()));
    assert_eq!(
        s.payments_with_key(op.idempotency_key.as_str()).await.len(),
        1
    );
    s.sim.shutdown().await;
    api.stop().await;
}

#[tokio::test]
async fn a_received_payment_waits_past_four_sweeps_for_a_late_notification_instead_of_a_human() {
    let ledger = sqlite_ledger().await;
    // No webhook url: the notification comes only when the test delivers it, late.
    let s = adyen_sim().await;
    let p = adapter(&s.base);
    let rec = reconciler(&ledger, Arc::new(adapter(&s.base)));
    // Due at once, as the worker records it: every sweep below decides it.
    let (op, psp, recorded) = received_and_recorded(&ledger, &p, "INV-ADY-LATE", now()).await;
    // More than SUBMISSIONS_WITHOUT_LOOKUP_MAX (4) sweep passes decide it: each one waits for the
    // notification; none sends a request (it would replay the saved `Received`) or asks a human.
    let passes = std::sync::atomic::AtomicUsize::new(0);
    let waiting_passes = 5;
    wait_for(
        "five sweep passes to decide the payment",
        crate::simulator::DEADLINE,
        || async {
            let swept = rec.sweep_once(false).await.unwrap();
            assert_eq!(
                (swept.escalated, swept.retried_same_key),
                (0, 0),
                "{swept:?}"
            );
            let decided: Vec<&String> = swept
                .actions
                .iter()
                .filter(|a| a.starts_with(op.id.as_str()))
                .collect();
            if let Some(action) = decided.first() {
                assert!(action.contains("awaits its notification"), "{action}");
                passes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            (passes.load(std::sync::atomic::Ordering::Relaxed) >= waiting_passes).then_some(())
        },
    )
    .await;
    let waited = ledger.get(&tenant(), &op.id).await.unwrap();
    assert_eq!(waited.status, Status::Unknown);
    assert_eq!(
        (waited.attempt, waited.submit_count),
        (recorded.attempt, recorded.submit_count),
        "no request was sent while it waited"
    );
    assert!(waited.check_count >= 5, "{}", waited.check_count);
    // The notification arrives late: the next sweep settles the payment by it.
    deliver(
        &ledger,
        vec![item(&psp, op.id.as_str(), 2048, true, Some(ADYEN_HMAC_KEY))],
    )
    .await;
    let swept = rec.sweep_once(false).await.unwrap();
    assert_eq!(swept.hints.applied, 1, "{swept:?}");
    assert_eq!(swept.escalated, 0, "{swept:?}");
    let settled = ledger.get(&tenant(), &op.id).await.unwrap();
    assert_eq!(settled.status, Status::Succeeded);
    assert_eq!(settled.external_ref.as_deref(), Some(psp.as_str()));
    assert_eq!(
        s.payments_with_key(op.idempotency_key.as_str()).await.len(),
        1,
        "paid once"
    );
    s.sim.shutdown().await;
}

/// The worker's moves on a ready payment Adyen answers `Received` (`pm_card_processing`): claim,
/// submit once with the stored key, record the unknown outcome with Adyen's reference, due at
/// `next_check_at`. The operation as created, the reference, and the row as recorded.
async fn received_and_recorded(
    ledger: &SharedLedger,
    p: &impl Processor,
    invoice: &str,
    next_check_at: Timestamp,
) -> (Operation, String, Operation) {
    let (op, c) = rows::ready_executing(ledger, invoice, "pm_card_processing", now()).await;
    let outcome = payonce_processor::operation::submit(p, &c).await;
    let SubmitOutcome::Unknown {
        reference: Some(psp),
        reason,
    } = outcome
    else {
        panic!("a received payment is unknown with its reference: {outcome:?}")
    };
    assert!(reason.contains("Received"), "{reason}");
    let recorded = ledger
        .record(
            &recording(
                &Fence::of(&c),
                &Recorded::Unknown {
                    reason,
                    reference: Some(psp.clone()),
                    next_check_at,
                },
                "w",
            ),
            now(),
        )
        .await
        .unwrap();
    (op, psp, recorded)
}

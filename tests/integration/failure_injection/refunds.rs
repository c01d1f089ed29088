//! Refund scenarios with real processes (issue 19): callers racing for a payment's last money, a
//! worker SIGKILLed right after the processor accepted a refund, and a refund whose result was lost
//! after it committed. Each checks both sides: the simulator's refunds (one per refund operation,
//! made with its stored key, never more than the payment) and the ledger (the row, its history, the
//! payment's totals).

use super::fleet::{self, DEADLINE, settled};
use super::refund_fixtures::{
    PAYMENT_MINOR, approve, approved_refund, assert_refunded_once, assert_totals_agree,
    paid_payment, refund_audit, refunds_for,
};
use crate::support::now;
use crate::support::processes::{arm_faults, simulator};
use crate::support::refunds::create_refund;
use crate::support::{postgres_ledger, tenant};
use payonce_core::id::OperationId;
use payonce_core::state::Status;
use payonce_ledger::{LedgerError, Role};
use payonce_simulator::SimulatorConfig;
use serde_json::json;

/// Callers racing with distinct business keys, and with one business key.
const RACERS: usize = 8;
/// Each distinct racer's amount: three fit in the payment, the other five do not.
const RACER_MINOR: i64 = 600;

#[tokio::test]
async fn refund_racing_callers_create_only_what_fits_and_workers_refund_each_once() {
    let (ledger, url) = postgres_ledger().await;
    let sim = simulator(SimulatorConfig::default()).await;
    let payment = paid_payment(&ledger, &sim, "INV-RF1", "pm_card_visa").await;
    let pi = payment.external_ref.clone().unwrap();

    let racers: Vec<_> = (0..RACERS)
        .map(|i| {
            let (ledger, payment) = (ledger.clone(), payment.clone());
            tokio::spawn(async move {
                create_refund(
                    &ledger,
                    &payment,
                    &format!("refund:INV-RF1:{i}"),
                    RACER_MINOR,
                    now(),
                )
                .await
            })
        })
        .collect();
    let mut created = Vec::new();
    let mut refused = 0;
    for racer in racers {
        match racer.await.unwrap() {
            Ok(c) => {
                assert!(c.inserted);
                created.push(c.operation);
            }
            Err(LedgerError::OverRefund {
                requested_minor, ..
            }) => {
                assert_eq!(requested_minor, RACER_MINOR);
                refused += 1;
            }
            Err(other) => panic!("{other:?}"),
        }
    }
    assert_eq!((created.len(), refused), (3, 5), "3 × 600 fit in 2048");
    // One business key asked for eight times at once: one refund operation.
    let same: Vec<_> = (0..RACERS)
        .map(|_| {
            let (ledger, payment) = (ledger.clone(), payment.clone());
            tokio::spawn(async move {
                create_refund(&ledger, &payment, "refund:INV-RF1:same", 200, now()).await
            })
        })
        .collect();
    let mut inserted = 0;
    let mut ids = std::collections::BTreeSet::new();
    for s in same {
        let c = s.await.unwrap().unwrap();
        inserted += usize::from(c.inserted);
        ids.insert(c.operation.id.clone());
        if c.inserted {
            created.push(c.operation);
        }
    }
    assert_eq!(
        (inserted, ids.len()),
        (1, 1),
        "one operation per business key"
    );
    for refund in &created {
        approve(&ledger, refund).await;
    }

    let _workers = [
        fleet::worker(&url, &sim, &[]),
        fleet::worker(&url, &sim, &[]),
    ];
    for refund in &created {
        assert_eq!(
            settled(&ledger, &refund.id, DEADLINE).await,
            Status::Succeeded
        );
        assert_refunded_once(&ledger, &sim, &refund.id).await;
    }
    assert_totals_agree(&ledger, &sim, &payment).await;
    let audit = refund_audit(&sim).await;
    assert_eq!(audit["count_by_payment_intent"], json!({ pi.as_str(): 4 }));
    assert_eq!(
        audit["amount_by_payment_intent"][pi.as_str()],
        3 * RACER_MINOR + 200
    );
    let totals = ledger.refund_totals(&tenant(), &payment.id).await.unwrap();
    assert_eq!(totals.refundable_minor(), PAYMENT_MINOR - 2000);
}

#[tokio::test]
async fn refund_a_worker_sigkilled_after_processor_acceptance_refunds_once() {
    let (ledger, url) = postgres_ledger().await;
    let sim = simulator(SimulatorConfig::default()).await;
    let payment = paid_payment(&ledger, &sim, "INV-RF2", "pm_card_visa").await;
    let refund = approved_refund(&ledger, &payment, "refund:INV-RF2:1", 1000).await;
    let mut doomed = fleet::worker(
        &url,
        &sim,
        &[("PAYONCE_FAILPOINTS", "after_processor_accepted=pause")],
    );
    doomed.wait_paused("after_processor_accepted").await;
    // At the failure point: the processor holds the refund, the ledger does not know yet.
    assert_eq!(refunds_for(&sim, &refund.id).await.len(), 1);
    let row = ledger.get(&tenant(), &refund.id).await.unwrap();
    assert_eq!(row.status, Status::Executing);
    assert!(row.first_submitted_at.is_some());
    doomed.sigkill().await;

    // The lease lapses, the outcome is unknown, lookup_refund finds it in the payment's refunds.
    let _fleet = fleet::worker_and_reconciler(&url, &sim);
    assert_eq!(
        settled(&ledger, &refund.id, DEADLINE).await,
        Status::Succeeded
    );
    let events = assert_refunded_once(&ledger, &sim, &refund.id).await;
    let names: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert!(
        names.contains(&"lease_expired_submitted"),
        "the crash shows: {names:?}"
    );
    assert_eq!(
        events.last().unwrap().from_status.as_deref(),
        Some("unknown"),
        "resolved by lookup: {names:?}"
    );
    assert_totals_agree(&ledger, &sim, &payment).await;
}

#[tokio::test]
async fn refund_a_result_lost_after_commit_is_found_never_made_again() {
    let (ledger, url) = postgres_ledger().await;
    let sim = simulator(SimulatorConfig::default()).await;
    let payment = paid_payment(&ledger, &sim, "INV-RF3", "pm_card_visa").await;
    let refund = approved_refund(&ledger, &payment, "refund:INV-RF3:1", PAYMENT_MINOR).await;
    // The refund commits at the processor; the connection is cut before the worker reads the answer.
    arm_faults(
        &sim,
        json!([{ "match": refund.idempotency_key.as_str(), "fault": "drop_after_commit", "times": 1 }]),
    )
    .await;
    let _fleet = fleet::worker_and_reconciler(&url, &sim);
    assert_eq!(
        settled(&ledger, &refund.id, DEADLINE).await,
        Status::Succeeded
    );
    let events = assert_refunded_once(&ledger, &sim, &refund.id).await;
    let names: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert!(names.contains(&"outcome_unknown"), "{names:?}");
    assert_totals_agree(&ledger, &sim, &payment).await;
    // The whole payment is refunded: the guard refuses another refund before any request.
    assert!(matches!(
        create_refund(&ledger, &payment, "refund:INV-RF3:2", 1, now()).await,
        Err(LedgerError::OverRefund { .. })
    ));
}

async fn post(
    base: &str,
    path: &str,
    key: &str,
    body: serde_json::Value,
) -> (u16, serde_json::Value) {
    let http = crate::api::http_client();
    crate::api::post_json(&http, format!("{base}{path}"), key, body).await
}

async fn get(base: &str, path: &str, key: &str) -> serde_json::Value {
    let r = crate::api::http_client()
        .get(format!("{base}{path}"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{path}");
    r.json().await.unwrap()
}

/// An Anthropic `request_refund` call through the api: the structured answer.
async fn request_refund(
    base: &str,
    key: &str,
    call_id: &str,
    input: serde_json::Value,
) -> serde_json::Value {
    let body = json!({"format": "anthropic", "call": {"type": "tool_use", "id": call_id, "name": "request_refund", "input": input}});
    let (status, result) = post(base, "/v1/tool-calls", key, body).await;
    assert_eq!(status, 200, "{result}");
    assert!(!result["is_error"].as_bool().unwrap_or(false), "{result}");
    serde_json::from_str(result["content"].as_str().unwrap()).unwrap()
}

#[tokio::test]
async fn refund_proposed_by_the_assistant_approved_on_call_executed_by_a_worker_once() {
    let (ledger, url) = postgres_ledger().await;
    let (_api, base) = fleet::api(&url).await;
    let sim = simulator(SimulatorConfig::default()).await;
    let tenant = tenant();
    let key = |role| payonce_api::create_api_key(ledger.as_ref(), &tenant, role, "e2e", now());
    let service = key(Role::Service).await.unwrap();
    let assistant = key(Role::Assistant).await.unwrap();
    let oncall = key(Role::OnCall).await.unwrap();
    let payment = paid_payment(&ledger, &sim, "INV-RF4", "pm_card_visa").await;
    let _fleet = fleet::worker_and_reconciler(&url, &sim);

    let input = json!({"payment_operation_id": payment.id.as_str(), "amount": 700, "reason": "requested_by_customer"});
    let proposal = request_refund(&base, &assistant, "toolu_1", input.clone()).await;
    assert_eq!(proposal["outcome"], "approval_required", "{proposal}");
    let id = OperationId::parse(proposal["operation_id"].as_str().unwrap()).unwrap();
    // Nothing moves money before a person of the merchant approves.
    assert!(refunds_for(&sim, &id).await.is_empty());
    let stored = get(&base, &format!("/v1/operations/{id}"), &service).await;
    let (status, approved) = post(
        &base,
        &format!("/v1/refunds/{id}/approve"),
        &oncall,
        json!({"details_hash": stored["details_hash"]}),
    )
    .await;
    assert_eq!(status, 200, "{approved}");
    assert_eq!(approved["status"], "ready");

    assert_eq!(settled(&ledger, &id, DEADLINE).await, Status::Succeeded);
    assert_refunded_once(&ledger, &sim, &id).await;
    // The assistant asks again: the stored truth, no second refund.
    let again = request_refund(&base, &assistant, "toolu_2", input).await;
    assert_eq!(again["operation_id"], id.as_str(), "{again}");
    assert_eq!(again["status"], "succeeded", "{again}");
    assert_eq!(again["new_payment_submitted"], false, "{again}");
    assert_eq!(refunds_for(&sim, &id).await.len(), 1);
    let beside = get(
        &base,
        &format!("/v1/operations/{}/refunds", payment.id),
        &service,
    )
    .await;
    assert_eq!(beside["totals"]["refunded_minor"], 700, "{beside}");
    assert_eq!(beside["totals"]["in_flight_minor"], 0, "{beside}");
    assert_eq!(beside["totals"]["refund_count"], 1, "{beside}");
    assert_totals_agree(&ledger, &sim, &payment).await;
}

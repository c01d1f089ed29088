//! Exactly what was approved, at every edge (issue 53): a `destination` Adyen cannot carry is refused
//! at creation, before submission and at a processor switch, never dropped from the wire; a
//! processor's redirect is never followed; a request that got an answer is never "not submitted",
//! even after an outage; an Adyen notification nobody can verify leaves an operation payonce never
//! submitted alone, and an escalation names the reference a signed notification reports.

use crate::adyen_adapter::{Op, adapter, adyen_sim};
use crate::adyen_notifications::{deliver, item};
use crate::api::{ADYEN_HMAC_KEY, raw_details, spawn};
use crate::support::refunds::{create_refund, succeeded_payment};
use crate::support::{self, details, now, reconciler, rows, sqlite_ledger, tenant, wait_for};
use payonce_core::clock::SystemClock;
use payonce_core::details::{Details, RawDetails};
use payonce_core::state::Status;
use payonce_ledger::{Operation, SharedLedger};
use payonce_processor::stripe::{StripeConfig, StripeProcessor};
use payonce_processor::{Processor, ProcessorKind, Processors, SubmitOutcome};
use payonce_worker::{Worker, WorkerConfig};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// How long a test waits for a condition.
const DEADLINE: Duration = Duration::from_secs(20);

/// The payment details of `invoice` paying `destination`, a Stripe connected account.
fn to_destination(invoice: &str) -> Details {
    let mut raw: RawDetails = serde_json::from_value(raw_details(invoice, 2048)).unwrap();
    raw.destination = Some("acct_1Dest".into());
    Details::parse(&raw).unwrap()
}

// ---- 1: a destination on Adyen -----------------------------------------------------------------

#[tokio::test]
async fn a_destination_for_a_tenant_on_adyen_is_refused_at_creation_alone_and_in_a_batch() {
    let ledger = sqlite_ledger().await;
    let api = spawn(ledger.clone()).await;
    ledger
        .profiles()
        .set_processor(&tenant(), ProcessorKind::Adyen, now())
        .await
        .unwrap();
    let body = |invoice: &str, destination: bool| {
        let mut details = raw_details(invoice, 2048);
        if destination {
            details["destination"] = json!("acct_1Dest");
        }
        json!({"business_key": format!("invoice:{invoice}:pay"), "details": details})
    };
    let single = api
        .post("/v1/operations", &api.service, body("INV-DEST-1", true))
        .await;
    assert_eq!(single.status, 400, "{}", single.text);
    assert_eq!(single.code(), "invalid_request");
    let message = single.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.starts_with("details.destination: adyen cannot carry it"),
        "{message}"
    );
    // In a batch, the refused item is answered as the single route answers it; the other is created.
    let batch = api
        .post(
            "/v1/operations/batch",
            &api.service,
            json!({"operations": [body("INV-DEST-1", true), body("INV-DEST-2", false)]}),
        )
        .await;
    assert_eq!(batch.status, 200, "{}", batch.text);
    let results = batch.json()["results"].clone();
    assert_eq!(results[0]["status"], 400, "{results}");
    assert_eq!(results[0]["error"]["code"], single.code());
    assert_eq!(results[0]["error"]["message"], message.as_str());
    assert_eq!(results[1]["status"], 201, "{results}");
    assert_eq!(
        api.operation_count().await,
        1,
        "nothing created for the refused"
    );

    // The same details for a tenant on Stripe, which carries a destination: created.
    ledger
        .profiles()
        .set_processor(&tenant(), ProcessorKind::Stripe, now())
        .await
        .unwrap();
    let created = api
        .post("/v1/operations", &api.service, body("INV-DEST-1", true))
        .await;
    assert_eq!(created.status, 201, "{}", created.text);
    assert_eq!(created.json()["details"]["destination"], "acct_1Dest");
    api.stop().await;
}

#[tokio::test]
async fn an_approved_destination_is_never_sent_to_adyen_without_it() {
    let ledger = sqlite_ledger().await;
    let s = adyen_sim().await;
    // The adapter itself never builds a payment body without the destination.
    let mut direct = Op::new("pm_card_visa");
    let mut raw = direct.details.to_raw();
    raw.destination = Some("acct_1Dest".into());
    direct.details = Details::parse(&raw).unwrap();
    match direct.submit(&adapter(&s.base)).await {
        SubmitOutcome::Declined { code, message, .. } => {
            assert_eq!(code, "adyen_destination_unsupported");
            assert!(message.contains("details.destination"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // An operation bound to Adyen with a destination (created past the api, as a switch racing a
    // create would leave it) is rejected before submission: nothing reaches Adyen.
    ledger
        .profiles()
        .set_processor(&tenant(), ProcessorKind::Adyen, now())
        .await
        .unwrap();
    let row = rows::created(
        &ledger,
        &tenant(),
        "INV-DEST-3",
        to_destination("INV-DEST-3"),
        now(),
    )
    .await
    .operation;
    assert_eq!(row.processor, Some(ProcessorKind::Adyen));
    let ready = rows::approved(&ledger, &row, now() + Duration::from_secs(3600), now()).await;
    let processors = Processors::single(Arc::new(adapter(&s.base)));
    let worker = Worker::with_processors(
        ledger.clone(),
        processors,
        Arc::new(SystemClock),
        WorkerConfig::new("w-adyen"),
    )
    .unwrap();
    assert_eq!(worker.run_once().await.unwrap(), 1);
    let after = ledger.get(&tenant(), &ready.id).await.unwrap();
    assert_eq!(after.status, Status::Rejected, "{after:?}");
    assert_eq!(
        after.failure_code.as_deref(),
        Some("destination_unsupported")
    );
    assert_eq!(
        after.first_submitted_at, None,
        "a rejection withdraws the claim's submission record: nothing was sent"
    );
    assert!(
        s.payments_with_key(ready.idempotency_key.as_str())
            .await
            .is_empty()
    );
    assert!(
        s.payments_with_key(direct.key.as_str()).await.is_empty(),
        "nothing reached Adyen"
    );
    s.sim.shutdown().await;
}

#[tokio::test]
async fn a_switch_to_adyen_is_refused_while_an_operation_with_a_destination_is_open() {
    let dir = crate::serve::scratch("edge-switch");
    let (ledger, url) = support::postgres_ledger().await;
    let open = rows::created(
        &ledger,
        &tenant(),
        "INV-DEST-4",
        to_destination("INV-DEST-4"),
        now(),
    )
    .await
    .operation;
    let refused = crate::tenant_processor::set_processor(&dir, &url, "acme", "adyen").await;
    assert!(!refused.status.success(), "{refused:?}");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains(open.id.as_str()) && said.contains("destination"),
        "{said}"
    );
    assert_eq!(
        ledger.profiles().processor(&tenant()).await.unwrap(),
        None,
        "nothing was changed"
    );
    // Stripe carries it: that switch goes through.
    let set = crate::tenant_processor::set_processor(&dir, &url, "acme", "stripe").await;
    assert!(set.status.success(), "{set:?}");
}

// ---- 2: redirects -----------------------------------------------------------------------------

/// A server counting every connection made to it (the host a redirect names), answering 200 `{}`.
async fn counting_host() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(AtomicUsize::new(0));
    let counted = seen.clone();
    let app = axum::Router::new().fallback(move || {
        counted.fetch_add(1, Ordering::SeqCst);
        async { "{}" }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, seen)
}

/// A front answering every request with `status` and a `Location` on `target`.
async fn redirecting_front(status: u16, target: &str) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let location = format!("{target}/elsewhere");
    let app = axum::Router::new().fallback(move || {
        let location = location.clone();
        async move {
            (
                axum::http::StatusCode::from_u16(status).unwrap(),
                [("location", location)],
                "",
            )
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

#[tokio::test]
async fn a_processor_redirect_is_never_followed_and_a_sent_write_is_unknown() {
    for status in [301, 307] {
        let (target, seen) = counting_host().await;
        let front = redirecting_front(status, &target).await;
        let op = Op::new("pm_card_visa");
        let stripe = StripeProcessor::new(StripeConfig::new(&front, "sk_test_payonce")).unwrap();
        let stripe_op = crate::stripe_adapter::Op::new("pm_card_visa");
        for (wire, outcome) in [
            ("adyen", op.submit(&adapter(&front)).await),
            ("stripe", stripe_op.submit(&stripe).await),
        ] {
            match outcome {
                SubmitOutcome::Unknown { reason, reference } => {
                    assert!(
                        reason.contains(&format!("HTTP {status} redirect"))
                            && reason.contains("not followed")
                            && reason.contains("configuration error"),
                        "{wire} {status}: {reason}"
                    );
                    assert_eq!(reference, None);
                }
                other => panic!("{wire} {status}: {other:?}"),
            }
        }
        assert_eq!(
            seen.load(Ordering::SeqCst),
            0,
            "{status}: a request reached the redirect's host"
        );
    }
}

// ---- 3: an answer after an outage ------------------------------------------------------------

/// What the processor answers once it is back: a status, a JSON body, and whether Adyen's
/// `Transient-Error: true` header comes with it.
type Answer = (u16, Value, bool);

/// Serves `answer` on `port` (which refused connections until now).
async fn answering_on(port: u16, (status, body, transient): Answer) {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let app = axum::Router::new().fallback(move || {
        let body = body.clone();
        async move {
            let mut response = axum::response::IntoResponse::into_response((
                axum::http::StatusCode::from_u16(status).unwrap(),
                [("content-type", "application/json")],
                body.to_string(),
            ));
            if transient {
                response
                    .headers_mut()
                    .insert("transient-error", "true".parse().unwrap());
            }
            response
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
}

/// The Stripe adapter to `base`.
fn stripe_at(base: String) -> Arc<dyn Processor> {
    Arc::new(StripeProcessor::new(StripeConfig::new(base, "sk_test_payonce")).unwrap())
}

/// The Adyen adapter to `base`.
fn adyen_at(base: String) -> Arc<dyn Processor> {
    Arc::new(adapter(&base))
}

/// Runs `op` through `attempt_max` refused connections, then a processor (`processor` at the same
/// address, retrying at once: 1 ms backoff) answering `answer`: the row once it has left `ready`.
async fn outage_then(
    ledger: &SharedLedger,
    op: &Operation,
    processor: fn(String) -> Arc<dyn Processor>,
    answer: Answer,
) -> Operation {
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    let mut config = WorkerConfig::new("w-outage");
    config.submit.retry_base = Duration::from_millis(1);
    config.submit.retry_max = Duration::from_millis(2);
    let attempt_max = config.submit.attempt_max;
    let worker = Worker::with_processors(
        ledger.clone(),
        Processors::single(processor(format!("http://127.0.0.1:{port}"))),
        Arc::new(SystemClock),
        config,
    )
    .unwrap();
    let refused = wait_for("the refused claims", DEADLINE, || async {
        worker.run_once().await.unwrap();
        let row = ledger.get(&op.tenant, &op.id).await.unwrap();
        assert_eq!(
            row.status,
            Status::Ready,
            "refused connections send nothing"
        );
        (row.attempt >= attempt_max).then_some(row)
    })
    .await;
    assert_eq!(
        (refused.attempt, refused.not_sent_attempts),
        (attempt_max, 0),
        "an outage spends none of attempt_max"
    );
    answering_on(port, answer).await;
    wait_for("the answer recorded", DEADLINE, || async {
        worker.run_once().await.unwrap();
        let row = ledger.get(&op.tenant, &op.id).await.unwrap();
        (row.status != Status::Ready).then_some(row)
    })
    .await
}

/// A Stripe error answer: `status` with `{"error": {"type": ..., "code": ..., "message": ...}}`.
fn stripe_error(status: u16, code: &str) -> Answer {
    (
        status,
        json!({"error": {"type": "invalid_request_error", "code": code, "message": format!("refused: {code}")}}),
        false,
    )
}

#[tokio::test]
async fn a_refund_answered_400_after_an_outage_fails_by_its_code() {
    let ledger = sqlite_ledger().await;
    let payment = succeeded_payment(&ledger, "INV-OUTAGE-R", 2048, now()).await;
    let refund = create_refund(&ledger, &payment, "refund:outage:1", 500, now())
        .await
        .unwrap()
        .operation;
    let refund = rows::approved(&ledger, &refund, now() + Duration::from_secs(3600), now()).await;
    let after = outage_then(
        &ledger,
        &refund,
        stripe_at,
        stripe_error(400, "resource_missing"),
    )
    .await;
    assert_eq!(after.status, Status::Failed, "{after:?}");
    assert_eq!(after.failure_code.as_deref(), Some("resource_missing"));
    let message = after.failure_message.unwrap_or_default();
    assert!(!message.contains(" of 5"), "{message}");
    assert_eq!(after.attempt, 6, "one claim past the five refused");
}

#[tokio::test]
async fn a_payment_answered_4xx_after_an_outage_is_the_processors_answer_not_a_request_never_sent()
{
    let ledger = sqlite_ledger().await;
    let op = rows::ready(&ledger, "INV-OUTAGE-P", "pm_card_visa", now()).await;
    let after = outage_then(
        &ledger,
        &op,
        stripe_at,
        stripe_error(400, "parameter_missing"),
    )
    .await;
    assert_eq!(after.status, Status::Failed, "{after:?}");
    assert_eq!(after.failure_code.as_deref(), Some("parameter_missing"));
    // A wrong key after an outage: the processor answered, a configuration error for a human.
    let op = rows::ready(&ledger, "INV-OUTAGE-K", "pm_card_visa", now()).await;
    let after = outage_then(&ledger, &op, stripe_at, stripe_error(401, "")).await;
    assert_eq!(after.status, Status::NeedsAttention, "{after:?}");
    let message = after.failure_message.unwrap_or_default();
    assert!(
        message.contains("HTTP 401") && message.contains("configuration error"),
        "{message}"
    );
    assert!(!message.contains("attempt 6 of 5"), "{message}");
}

#[tokio::test]
async fn after_an_outage_the_attempt_cap_counts_only_attempts_that_executed_nothing() {
    let ledger = sqlite_ledger().await;
    let op = rows::ready(&ledger, "INV-OUTAGE-T", "pm_card_visa", now()).await;
    // Adyen answers 500 with `Transient-Error: true` every time: nothing reached the issuer.
    let transient = (
        500,
        json!({"status": 500, "errorCode": "000", "errorType": "internal", "message": "m"}),
        true,
    );
    let after = outage_then(&ledger, &op, adyen_at, transient).await;
    let attempt_max = WorkerConfig::new("x").submit.attempt_max;
    assert_eq!(after.status, Status::NeedsAttention, "{after:?}");
    assert_eq!(after.failure_code.as_deref(), Some("attempts_exhausted"));
    let message = after.failure_message.unwrap_or_default();
    assert!(
        message.ends_with(&format!(
            "(attempt {attempt_max} of {attempt_max} that executed nothing)"
        )),
        "{message}"
    );
    assert_eq!(
        (after.attempt, after.not_sent_attempts),
        (2 * attempt_max, attempt_max - 1),
        "five refused claims, then five that executed nothing; the cap reached, never passed"
    );
}

// ---- 8: Adyen notifications -------------------------------------------------------------------

#[tokio::test]
async fn an_unverifiable_notification_leaves_an_operation_never_submitted_alone() {
    let ledger = sqlite_ledger().await;
    let s = adyen_sim().await;
    let rec = reconciler::build(
        &ledger,
        Arc::new(adapter(&s.base)),
        "rec-edge",
        reconciler::immediate_rechecks,
    );
    let awaiting = rows::created(
        &ledger,
        &tenant(),
        "INV-UNPROVEN",
        details("INV-UNPROVEN", 2048, "pm_card_visa"),
        now(),
    )
    .await
    .operation;
    // Signed with the HMAC key, naming a pspReference Adyen never answered payonce with.
    deliver(
        &ledger,
        vec![item(
            "PSPMADEUP0000001",
            awaiting.id.as_str(),
            2048,
            true,
            Some(ADYEN_HMAC_KEY),
        )],
    )
    .await;
    let pass = rec.check_hints_once().await.unwrap();
    assert_eq!((pass.without_approval, pass.unproven), (0, 1), "{pass:?}");
    let row = ledger.get(&tenant(), &awaiting.id).await.unwrap();
    assert_eq!(row.status, Status::AwaitingApproval, "{row:?}");
    let events = ledger.events(&tenant(), &awaiting.id).await.unwrap();
    assert!(
        events.iter().all(|e| !e
            .detail
            .as_deref()
            .unwrap_or("")
            .contains("WITHOUT APPROVAL")),
        "{events:?}"
    );
    s.sim.shutdown().await;
}

#[tokio::test]
async fn a_saved_500_contradicted_by_a_signed_notification_is_escalated_naming_its_reference() {
    let ledger = sqlite_ledger().await;
    let s = adyen_sim().await;
    let p = adapter(&s.base);
    let rec = reconciler::build(
        &ledger,
        Arc::new(adapter(&s.base)),
        "rec-edge",
        reconciler::immediate_rechecks,
    );
    let (_, c) = rows::ready_executing(&ledger, "INV-SAVED-500", "pm_card_visa", now()).await;
    // Adyen executes the payment, then answers 500 and saves that 500 as the key's result.
    s.arm(json!([{ "match": c.idempotency_key.as_str(), "fault": "error_500_after_commit", "times": 1 }]))
        .await;
    let outcome = payonce_processor::operation::submit(&p, &c).await;
    assert!(
        matches!(
            outcome,
            SubmitOutcome::Unknown {
                reference: None,
                ..
            }
        ),
        "{outcome:?}"
    );
    rows::record(
        &ledger,
        &c,
        &rows::unknown_outcome("HTTP 500", None, now()),
        "w",
        now(),
    )
    .await;
    let psp = s.payments_with_key(c.idempotency_key.as_str()).await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    // Adyen's signed AUTHORISATION says it was paid.
    deliver(
        &ledger,
        vec![item(&psp, c.id.as_str(), 2048, true, Some(ADYEN_HMAC_KEY))],
    )
    .await;
    // Every same-key retry replays the saved 500: a human decides.
    let escalated = wait_for("the operation goes to a human", DEADLINE, || async {
        rec.check_hints_once().await.unwrap();
        rec.sweep_once(false).await.unwrap();
        let row = ledger.get(&tenant(), &c.id).await.unwrap();
        (row.status == Status::NeedsAttention).then_some(row)
    })
    .await;
    let reason = escalated.failure_message.unwrap_or_default();
    assert!(
        reason.contains(&psp) && reason.contains(&format!("--reference {psp}")),
        "the escalation names {psp}: {reason}"
    );
    assert_eq!(
        s.payments_with_key(c.idempotency_key.as_str()).await.len(),
        1,
        "paid once"
    );
    s.sim.shutdown().await;
}

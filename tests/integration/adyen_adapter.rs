//! The Adyen adapter over real HTTP: every row of its classification table against a server that
//! answers exactly what Adyen documents, then against the simulator's Adyen wire (idempotency per
//! key, another body under a used key, a key in progress, faults, declines, refunds, retention).

use crate::simulator::{Sim, start};
use crate::support::{details, key_secret, tenant};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use payonce_core::details::{Details, DetailsHash, RefundReason};
use payonce_core::id::{BusinessKey, IdempotencyKey, OperationId, TenantId};
use payonce_core::money::Money;
use payonce_processor::adyen::{AdyenConfig, AdyenProcessor};
use payonce_processor::{Processor, RefundRequest, SubmitOutcome, SubmitRequest};
use payonce_simulator::SimulatorConfig;
use payonce_simulator::config::{ADYEN_API_KEY_DEFAULT, ADYEN_MERCHANT_ACCOUNT_DEFAULT};
use serde_json::{Value, json};
use std::time::Duration;

pub(crate) fn adapter(base: &str) -> AdyenProcessor {
    let mut config = AdyenConfig::new(base, ADYEN_API_KEY_DEFAULT, ADYEN_MERCHANT_ACCOUNT_DEFAULT);
    config.connect_timeout = Duration::from_secs(2);
    config.request_timeout = Duration::from_secs(5);
    AdyenProcessor::new(config).unwrap()
}

/// One payment operation as the worker would submit it.
pub(crate) struct Op {
    pub(crate) id: OperationId,
    pub(crate) key: IdempotencyKey,
    pub(crate) business_key: BusinessKey,
    pub(crate) details: Details,
    tenant: TenantId,
    hash: DetailsHash,
}

impl Op {
    pub(crate) fn new(payment_method: &str) -> Op {
        Op::with_amount(payment_method, 2048)
    }

    pub(crate) fn with_amount(payment_method: &str, amount: i64) -> Op {
        let id = OperationId::generate();
        let invoice = format!("INV-{}", &id.as_str()[3..11]);
        let details = details(&invoice, amount, payment_method);
        let business_key = BusinessKey::parse(&format!("invoice:{invoice}:pay")).unwrap();
        let key = key_secret().key_for(&payonce_core::intention::Intention {
            tenant: &tenant(),
            business_key: &business_key,
            generation: 0,
        });
        Op {
            id,
            key,
            business_key,
            hash: details.hash(),
            details,
            tenant: tenant(),
        }
    }

    pub(crate) fn request(&self) -> SubmitRequest<'_> {
        SubmitRequest {
            operation_id: &self.id,
            tenant: &self.tenant,
            idempotency_key: &self.key,
            business_key: &self.business_key,
            details_hash: &self.hash,
            details: &self.details,
        }
    }

    pub(crate) async fn submit(&self, p: &AdyenProcessor) -> SubmitOutcome {
        p.submit(&self.request()).await
    }
}

/// A refund of `payment` (an Adyen pspReference) by the refund operation `id`.
pub(crate) async fn refund(
    p: &AdyenProcessor,
    paid: &Op,
    payment: &str,
    amount: i64,
    (id, key): (&OperationId, &IdempotencyKey),
) -> SubmitOutcome {
    let tenant = tenant();
    let bk = BusinessKey::parse(&format!("refund:{}", &id.as_str()[3..11])).unwrap();
    p.submit_refund(&RefundRequest {
        operation_id: id,
        tenant: &tenant,
        idempotency_key: key,
        business_key: &bk,
        details_hash: &paid.details.hash(),
        payment_reference: payment,
        payment_operation: &paid.id,
        amount: Money::new(amount, paid.details.money().currency()).unwrap(),
        reason: RefundReason::RequestedByCustomer,
    })
    .await
}

fn reference(outcome: &SubmitOutcome) -> Option<String> {
    match outcome {
        SubmitOutcome::Succeeded { reference, .. } => Some(reference.clone()),
        SubmitOutcome::Declined { reference, .. } | SubmitOutcome::Unknown { reference, .. } => {
            reference.clone()
        }
        _ => None,
    }
}

/// What the scripted server answers one request with.
#[derive(Clone)]
struct Scripted {
    status: u16,
    transient: bool,
    body: Value,
}

/// A server answering every `POST` with `answer` (Adyen's documented shapes, one per table row).
async fn scripted(answer: Scripted) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().fallback(move |headers: HeaderMap| {
        let answer = answer.clone();
        async move {
            // The adapter authenticates with X-API-Key and sends its key on every request.
            assert_eq!(headers["x-api-key"], ADYEN_API_KEY_DEFAULT);
            assert!(headers.contains_key("idempotency-key"));
            let mut response = (
                StatusCode::from_u16(answer.status).unwrap(),
                [("content-type", "application/json")],
                answer.body.to_string(),
            )
                .into_response();
            if answer.transient {
                response
                    .headers_mut()
                    .insert("transient-error", "true".parse().unwrap());
            }
            response
        }
    });
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (base, task)
}

fn error(status: u16, code: &str, kind: &str) -> Value {
    json!({"status": status, "errorCode": code, "message": "m", "errorType": kind})
}

#[tokio::test]
async fn every_row_of_the_payment_table_over_real_http() {
    let pay = |code: &str| json!({"pspReference": "PSP0000000000001", "resultCode": code});
    let refused = json!({"pspReference": "PSP0000000000001", "resultCode": "Refused",
        "refusalReason": "Not enough balance", "refusalReasonCode": "12"});
    let error_with_reason = json!({"pspReference": "PSP0000000000001", "resultCode": "Error",
        "refusalReason": "Acquirer Error", "refusalReasonCode": "4"});
    // (row, answer, expected outcome kind, reference expected)
    let rows: Vec<(&str, Scripted, &str, bool)> = vec![
        (
            "Authorised",
            Scripted {
                status: 200,
                transient: false,
                body: pay("Authorised"),
            },
            "succeeded",
            true,
        ),
        (
            "Refused",
            Scripted {
                status: 200,
                transient: false,
                body: refused,
            },
            "declined",
            true,
        ),
        (
            "Cancelled",
            Scripted {
                status: 200,
                transient: false,
                body: pay("Cancelled"),
            },
            "declined",
            true,
        ),
        (
            "Error with reason",
            Scripted {
                status: 200,
                transient: false,
                body: error_with_reason,
            },
            "declined",
            true,
        ),
        (
            "Error without",
            Scripted {
                status: 200,
                transient: false,
                body: pay("Error"),
            },
            "unknown",
            true,
        ),
        (
            "Received",
            Scripted {
                status: 200,
                transient: false,
                body: pay("Received"),
            },
            "unknown",
            true,
        ),
        (
            "Pending",
            Scripted {
                status: 200,
                transient: false,
                body: pay("Pending"),
            },
            "unknown",
            true,
        ),
        (
            "RedirectShopper",
            Scripted {
                status: 200,
                transient: false,
                body: pay("RedirectShopper"),
            },
            "declined",
            true,
        ),
        (
            "PartiallyAuthorised",
            Scripted {
                status: 200,
                transient: false,
                body: pay("PartiallyAuthorised"),
            },
            "unknown",
            true,
        ),
        (
            "no pspReference",
            Scripted {
                status: 200,
                transient: false,
                body: json!({"resultCode": "Authorised"}),
            },
            "unknown",
            false,
        ),
        (
            "401",
            Scripted {
                status: 401,
                transient: false,
                body: error(401, "000", "security"),
            },
            "misconfigured",
            false,
        ),
        (
            "403",
            Scripted {
                status: 403,
                transient: false,
                body: error(403, "010", "security"),
            },
            "misconfigured",
            false,
        ),
        (
            "404",
            Scripted {
                status: 404,
                transient: false,
                body: json!({}),
            },
            "misconfigured",
            false,
        ),
        (
            "409 in progress",
            Scripted {
                status: 409,
                transient: true,
                body: error(409, "704", "validation"),
            },
            "unknown",
            false,
        ),
        (
            "422 other body",
            Scripted {
                status: 422,
                transient: false,
                body: error(422, "704", "validation"),
            },
            "key_reused",
            false,
        ),
        (
            "422 contract not found",
            Scripted {
                status: 422,
                transient: false,
                body: error(422, "800", "validation"),
            },
            "declined",
            false,
        ),
        (
            "422 invalid amount",
            Scripted {
                status: 422,
                transient: false,
                body: error(422, "137", "validation"),
            },
            "declined",
            false,
        ),
        (
            "422 another validation error",
            Scripted {
                status: 422,
                transient: false,
                body: error(422, "702", "validation"),
            },
            "declined",
            false,
        ),
        (
            "400",
            Scripted {
                status: 400,
                transient: false,
                body: error(400, "702", "validation"),
            },
            "declined",
            false,
        ),
        (
            "429",
            Scripted {
                status: 429,
                transient: false,
                body: error(429, "000", "internal"),
            },
            "rate_limited",
            false,
        ),
        (
            "500 transient",
            Scripted {
                status: 500,
                transient: true,
                body: error(500, "000", "internal"),
            },
            "not_submitted",
            false,
        ),
        (
            "500",
            Scripted {
                status: 500,
                transient: false,
                body: error(500, "000", "internal"),
            },
            "unknown",
            false,
        ),
        (
            "503 html",
            Scripted {
                status: 503,
                transient: false,
                body: json!("<html>"),
            },
            "unknown",
            false,
        ),
    ];
    let op = Op::new("pm_card_visa");
    for (row, answer, expected, with_reference) in rows {
        let (base, server) = scripted(answer).await;
        let outcome = op.submit(&adapter(&base)).await;
        let kind = serde_json::to_value(&outcome).unwrap()["outcome"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(kind, expected, "{row}: {outcome:?}");
        assert_eq!(
            reference(&outcome).is_some(),
            with_reference,
            "{row}: {outcome:?}"
        );
        server.abort();
    }
}

#[tokio::test]
async fn a_received_refund_is_unknown_with_its_reference_over_real_http() {
    let (base, server) = scripted(Scripted {
        status: 201,
        transient: false,
        body: json!({"merchantAccount": "PayonceECOM", "paymentPspReference": "PSP0000000000001",
            "pspReference": "RFD0000000000001", "status": "received",
            "amount": {"currency": "USD", "value": 500}}),
    })
    .await;
    let paid = Op::new("pm_card_visa");
    let key = IdempotencyKey::parse(&format!("po1_{}", "b".repeat(40))).unwrap();
    let id = OperationId::generate();
    let outcome = refund(&adapter(&base), &paid, "PSP0000000000001", 500, (&id, &key)).await;
    assert!(
        matches!(&outcome, SubmitOutcome::Unknown { reference: Some(r), .. } if r == "RFD0000000000001"),
        "{outcome:?}"
    );
    server.abort();
}

#[tokio::test]
async fn transport_failures_are_unreachable_or_unknown() {
    // Nothing listens: no byte left this process.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", free.local_addr().unwrap());
    drop(free);
    let op = Op::new("pm_card_visa");
    assert!(matches!(
        op.submit(&adapter(&base)).await,
        SubmitOutcome::Unreachable { .. }
    ));
    // A timeout after sending, and a connection dropped after executing: Adyen may have run it.
    let s = adyen_sim().await;
    let mut config = AdyenConfig::new(
        &s.base,
        ADYEN_API_KEY_DEFAULT,
        ADYEN_MERCHANT_ACCOUNT_DEFAULT,
    );
    config.request_timeout = Duration::from_millis(300);
    let impatient = AdyenProcessor::new(config).unwrap();
    s.arm(json!([{ "match": op.key.as_str(), "fault": "hang", "times": 1 }]))
        .await;
    let outcome = op.submit(&impatient).await;
    assert!(
        matches!(&outcome, SubmitOutcome::Unknown { reason, .. } if reason.contains("timed out")),
        "{outcome:?}"
    );
    s.sim.shutdown().await;
}

pub(crate) async fn adyen_sim() -> Sim {
    start(SimulatorConfig::adyen()).await
}

/// Payments the simulator holds for `key`.
async fn payments_with_key(s: &Sim, key: &IdempotencyKey) -> usize {
    s.payments_with_key(key.as_str()).await.len()
}

#[tokio::test]
async fn the_simulator_pays_once_per_key_and_replays_the_saved_result() {
    let s = adyen_sim().await;
    let p = adapter(&s.base);
    let op = Op::new("pm_card_visa");
    let first = op.submit(&p).await;
    let SubmitOutcome::Succeeded {
        reference: psp,
        result,
        ..
    } = &first
    else {
        panic!("{first:?}")
    };
    assert_eq!(psp.len(), 16);
    assert_eq!(result["resultCode"], "Authorised");
    assert_eq!(result["merchantReference"], op.id.as_str());
    let again = op.submit(&p).await;
    assert_eq!(reference(&again).as_deref(), Some(psp.as_str()));
    assert_eq!(
        payments_with_key(&s, &op.key).await,
        1,
        "one payment per key"
    );
    // The payment carries the operation's intention in Adyen's metadata.
    let payments = s.payments_with_key(op.key.as_str()).await;
    assert_eq!(
        payments[0]["metadata"]["payonce_operation_id"],
        op.id.as_str()
    );
    assert_eq!(
        payments[0]["metadata"]["payonce_business_key"],
        op.business_key.as_str()
    );
    s.sim.shutdown().await;
}

#[tokio::test]
async fn decline_cards_are_refused_with_a_reason_and_unknown_cards_fail_for_good() {
    let s = adyen_sim().await;
    let p = adapter(&s.base);
    for (card, code) in [
        ("pm_card_chargeDeclined", "refusal_2"),
        ("pm_card_chargeDeclinedInsufficientFunds", "refusal_12"),
        ("pm_card_authenticationRequired", "refusal_38"),
    ] {
        let outcome = Op::new(card).submit(&p).await;
        assert!(
            matches!(&outcome, SubmitOutcome::Declined { code: c, reference: Some(_), .. } if c == code),
            "{card}: {outcome:?}"
        );
    }
    let unknown = Op::new("pm_card_nosuch").submit(&p).await;
    assert!(
        matches!(&unknown, SubmitOutcome::Declined { code, reference: None, .. } if code == "adyen_800"),
        "{unknown:?}"
    );
    s.sim.shutdown().await;
}

#[tokio::test]
async fn another_body_under_a_used_key_is_key_reused_and_a_key_in_progress_unknown() {
    let s = adyen_sim().await;
    let p = adapter(&s.base);
    let op = Op::new("pm_card_visa");
    assert!(matches!(
        op.submit(&p).await,
        SubmitOutcome::Succeeded { .. }
    ));
    // The same key with another amount: Adyen's error, never a second payment.
    let mut other = Op::with_amount("pm_card_visa", 4096);
    other.key = op.key.clone();
    let outcome = other.submit(&p).await;
    assert!(
        matches!(outcome, SubmitOutcome::KeyReused { .. }),
        "{outcome:?}"
    );
    assert_eq!(payments_with_key(&s, &op.key).await, 1);

    // A first request that hangs holds its key: a second one meanwhile gets the transient 409.
    let slow = Op::new("pm_card_visa");
    s.arm(json!([{ "match": slow.key.as_str(), "fault": "hang", "times": 1 }]))
        .await;
    let mut config = AdyenConfig::new(
        &s.base,
        ADYEN_API_KEY_DEFAULT,
        ADYEN_MERCHANT_ACCOUNT_DEFAULT,
    );
    config.request_timeout = Duration::from_secs(3);
    let first = AdyenProcessor::new(config).unwrap();
    let held = slow.key.clone();
    let hanging = tokio::spawn(async move { slow.submit(&first).await });
    crate::support::wait_for(
        "the first request to hold its key",
        crate::simulator::DEADLINE,
        || async { (s.in_flight().await == 1).then_some(()) },
    )
    .await;
    let mut second = Op::new("pm_card_visa");
    second.key = held;
    let outcome = second.submit(&p).await;
    assert!(
        matches!(&outcome, SubmitOutcome::Unknown { reason, .. } if reason.contains("in progress")),
        "{outcome:?}"
    );
    assert!(matches!(
        hanging.await.unwrap(),
        SubmitOutcome::Unknown { .. }
    ));
    s.sim.shutdown().await;
}

#[tokio::test]
async fn faults_apply_on_the_adyen_wire_and_the_same_key_pays_once() {
    let s = adyen_sim().await;
    let p = adapter(&s.base);
    // Dropped after executing: unknown; the same key replays the payment.
    let dropped = Op::new("pm_card_visa");
    s.arm(json!([{ "match": dropped.key.as_str(), "fault": "drop_after_commit", "times": 1 }]))
        .await;
    assert!(matches!(
        dropped.submit(&p).await,
        SubmitOutcome::Unknown {
            reference: None,
            ..
        }
    ));
    assert!(matches!(
        dropped.submit(&p).await,
        SubmitOutcome::Succeeded { .. }
    ));
    assert_eq!(payments_with_key(&s, &dropped.key).await, 1);
    // 500 after executing: stored as the key's final result (Adyen's non-transient error).
    let after = Op::new("pm_card_visa");
    s.arm(json!([{ "match": after.key.as_str(), "fault": "error_500_after_commit", "times": 1 }]))
        .await;
    assert!(matches!(
        after.submit(&p).await,
        SubmitOutcome::Unknown { .. }
    ));
    assert!(matches!(
        after.submit(&p).await,
        SubmitOutcome::Unknown { .. }
    ));
    assert_eq!(payments_with_key(&s, &after.key).await, 1);
    // 500 before executing, marked transient: nothing ran, and the same key then pays once.
    let before = Op::new("pm_card_visa");
    s.arm(
        json!([{ "match": before.key.as_str(), "fault": "error_500_before_commit", "times": 1 }]),
    )
    .await;
    assert!(matches!(
        before.submit(&p).await,
        SubmitOutcome::NotSubmitted { .. }
    ));
    assert_eq!(payments_with_key(&s, &before.key).await, 0);
    assert!(matches!(
        before.submit(&p).await,
        SubmitOutcome::Succeeded { .. }
    ));
    // 429 before anything: rate limited, nothing stored.
    let limited = Op::new("pm_card_visa");
    s.arm(json!([{ "match": limited.key.as_str(), "fault": "rate_limit_429", "times": 1 }]))
        .await;
    assert!(matches!(
        limited.submit(&p).await,
        SubmitOutcome::RateLimited { .. }
    ));
    assert_eq!(payments_with_key(&s, &limited.key).await, 0);
    // A wrong API key: Adyen answered, refusing it before anything ran (a configuration error).
    let mut config = AdyenConfig::new(&s.base, "wrong", ADYEN_MERCHANT_ACCOUNT_DEFAULT);
    config.request_timeout = Duration::from_secs(5);
    let wrong = AdyenProcessor::new(config).unwrap();
    assert!(matches!(
        Op::new("pm_card_visa").submit(&wrong).await,
        SubmitOutcome::Misconfigured { .. }
    ));
    // Another merchant account: refused (403) before anything runs.
    let other = AdyenProcessor::new(AdyenConfig::new(
        &s.base,
        ADYEN_API_KEY_DEFAULT,
        "SomeoneElse",
    ))
    .unwrap();
    assert!(matches!(
        Op::new("pm_card_visa").submit(&other).await,
        SubmitOutcome::Misconfigured { .. }
    ));
    s.sim.shutdown().await;
}

#[tokio::test]
async fn keys_are_kept_for_the_configured_retention_and_forgotten_after() {
    let mut config = SimulatorConfig::adyen();
    assert_eq!(config.key_retention, Duration::from_secs(31 * 24 * 60 * 60));
    config.key_retention = Duration::from_secs(60);
    let s = start(config).await;
    let p = adapter(&s.base);
    let op = Op::new("pm_card_visa");
    assert!(matches!(
        op.submit(&p).await,
        SubmitOutcome::Succeeded { .. }
    ));
    s.advance_clock(Duration::from_secs(59)).await;
    assert!(matches!(
        op.submit(&p).await,
        SubmitOutcome::Succeeded { .. }
    ));
    assert_eq!(
        payments_with_key(&s, &op.key).await,
        1,
        "inside retention: replayed"
    );
    s.advance_clock(Duration::from_secs(2)).await;
    assert!(matches!(
        op.submit(&p).await,
        SubmitOutcome::Succeeded { .. }
    ));
    assert_eq!(
        payments_with_key(&s, &op.key).await,
        2,
        "past retention the key runs again: why payonce never retries an unknown outcome past it"
    );
    s.sim.shutdown().await;
}

#[tokio::test]
async fn refunds_are_received_once_per_key_and_never_exceed_the_payment() {
    let s = adyen_sim().await;
    let p = adapter(&s.base);
    let paid = Op::new("pm_card_visa");
    let psp = reference(&paid.submit(&p).await).unwrap();
    let key = IdempotencyKey::parse(&format!("po1_{}", "c".repeat(40))).unwrap();
    let id = OperationId::generate();
    let first = refund(&p, &paid, &psp, 500, (&id, &key)).await;
    let SubmitOutcome::Unknown {
        reference: Some(rfd),
        ..
    } = &first
    else {
        panic!("{first:?}")
    };
    let again = refund(&p, &paid, &psp, 500, (&id, &key)).await;
    assert_eq!(reference(&again).as_deref(), Some(rfd.as_str()));
    let refunds = s.refunds_audit().await;
    let ours: Vec<&Value> = refunds["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["payment_intent"] == psp.as_str())
        .collect();
    assert_eq!(ours.len(), 1, "one refund per key: {refunds}");
    // More than is left: received, and no refund is made (its notification says it failed).
    let too_much = IdempotencyKey::parse(&format!("po1_{}", "d".repeat(40))).unwrap();
    assert!(matches!(
        refund(&p, &paid, &psp, 2048, (&OperationId::generate(), &too_much)).await,
        SubmitOutcome::Unknown {
            reference: Some(_),
            ..
        }
    ));
    let refunds = s.refunds_audit().await;
    assert_eq!(
        refunds["data"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["payment_intent"] == psp.as_str())
            .count(),
        1
    );
    // A reference that is not Adyen's is never put in a path.
    assert!(matches!(
        refund(&p, &paid, "../v71/x", 1, (&id, &key)).await,
        SubmitOutcome::Declined {
            reference: None,
            ..
        }
    ));
    s.sim.shutdown().await;
}

#[tokio::test]
async fn a_key_longer_than_adyens_64_characters_is_never_sent() {
    let s = adyen_sim().await;
    let p = adapter(&s.base);
    let mut op = Op::new("pm_card_visa");
    op.key = IdempotencyKey::parse(&"k".repeat(65)).unwrap();
    let outcome = op.submit(&p).await;
    assert!(
        matches!(&outcome, SubmitOutcome::Declined { code, .. } if code == "adyen_idempotency_key_too_long"),
        "{outcome:?}"
    );
    assert!(
        s.requests().await.is_empty(),
        "nothing reached the processor"
    );
    s.sim.shutdown().await;
}

#[tokio::test]
async fn the_simulator_refuses_keys_over_64_characters_and_unknown_fields() {
    let s = adyen_sim().await;
    let op = Op::new("pm_card_visa");
    let body = payonce_processor::adyen::wire::payment_body(
        &op.request(),
        ADYEN_MERCHANT_ACCOUNT_DEFAULT,
        payonce_processor::adyen::RETURN_URL_DEFAULT,
    )
    .unwrap();
    let post = |key: String, body: Value| {
        let http = s.http.clone();
        let url = format!("{}/v71/payments", s.base);
        async move {
            let r = http
                .post(url)
                .header("x-api-key", ADYEN_API_KEY_DEFAULT)
                .header("idempotency-key", key)
                .json(&body)
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let (status, error) = post("k".repeat(65), body.clone()).await;
    assert_eq!(
        (status, error["errorType"].as_str()),
        (422, Some("validation")),
        "{error}"
    );
    let mut unknown = body.clone();
    unknown["captureDelayHours"] = json!(0);
    let (status, error) = post("k".repeat(64), unknown).await;
    assert_eq!(
        (status, error["errorCode"].as_str()),
        (400, Some("702")),
        "{error}"
    );
    assert!(s.payments().await.is_empty(), "nothing executed");
    // At 64 characters, the payment runs.
    let (status, paid) = post("k".repeat(64), body).await;
    assert_eq!(
        (status, paid["resultCode"].as_str()),
        (200, Some("Authorised")),
        "{paid}"
    );
    s.sim.shutdown().await;
}

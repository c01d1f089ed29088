//! The Stripe adapter against the simulator over real HTTP: every row of the classification table, lookups by
//! reference and by list, and every parameter it sends checked against Stripe's spec.

// Test harness: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use crate::simulator::{API_KEY, DEADLINE, Sim, start, start_default};
use crate::support::{details, tenant, wait_for};
use payonce_core::clock::Timestamp;
use payonce_core::details::Details;
use payonce_core::id::{IdempotencyKey, OperationId};
use payonce_processor::stripe::{STRIPE_VERSION, StripeConfig, StripeProcessor};
use payonce_processor::{
    FoundStatus, LookupOutcome, LookupQuery, Processor, SubmitOutcome, SubmitRequest,
};
use payonce_simulator::SimulatorConfig;
use serde_json::{Value, json};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

pub(crate) fn adapter(base: &str) -> StripeProcessor {
    let mut config = StripeConfig::new(base, API_KEY);
    config.connect_timeout = Duration::from_secs(2);
    config.request_timeout = Duration::from_secs(5);
    StripeProcessor::new(config).unwrap()
}

/// One operation as the worker would submit it.
pub(crate) struct Op {
    id: OperationId,
    key: IdempotencyKey,
    business_key: payonce_core::id::BusinessKey,
    details: Details,
    submitted_ms: i64,
}

impl Op {
    pub(crate) fn new(payment_method: &str) -> Op {
        let id = OperationId::generate();
        let invoice = format!("INV-{}", &id.as_str()[3..11]);
        let details = details(&invoice, 2048, payment_method);
        let business_key =
            payonce_core::id::BusinessKey::parse(&format!("invoice:{invoice}:pay")).unwrap();
        let key = crate::support::key_secret().key_for(&payonce_core::intention::Intention {
            tenant: &tenant(),
            business_key: &business_key,
            generation: 0,
        });
        Op {
            key,
            business_key,
            details,
            id,
            submitted_ms: now_ms(),
        }
    }

    pub(crate) async fn submit(&self, p: &StripeProcessor) -> SubmitOutcome {
        let tenant = tenant();
        p.submit(&SubmitRequest {
            operation_id: &self.id,
            tenant: &tenant,
            idempotency_key: &self.key,
            business_key: &self.business_key,
            details_hash: &self.details.hash(),
            details: &self.details,
        })
        .await
    }

    async fn lookup(&self, p: &StripeProcessor, reference: Option<&str>) -> LookupOutcome {
        p.lookup(&LookupQuery {
            operation_id: &self.id,
            idempotency_key: &self.key,
            business_key: &self.business_key,
            details_hash: &self.details.hash(),
            reference,
            customer: self.details.customer(),
            created_after: Timestamp::from_millis(self.submitted_ms),
        })
        .await
    }
}

fn reference_of(outcome: &SubmitOutcome) -> Option<String> {
    match outcome {
        SubmitOutcome::Succeeded { reference, .. } => Some(reference.clone()),
        SubmitOutcome::Declined { reference, .. } | SubmitOutcome::Unknown { reference, .. } => {
            reference.clone()
        }
        SubmitOutcome::NotSubmitted { .. }
        | SubmitOutcome::Unreachable { .. }
        | SubmitOutcome::RateLimited { .. }
        | SubmitOutcome::KeyReused { .. }
        | SubmitOutcome::Misconfigured { .. } => None,
    }
}

#[tokio::test]
async fn a_successful_card_is_succeeded_with_its_reference_and_a_resubmit_replays_it() {
    let s = start_default().await;
    let p = adapter(&s.base);
    let op = Op::new("pm_card_visa");
    let first = op.submit(&p).await;
    let SubmitOutcome::Succeeded {
        reference, result, ..
    } = &first
    else {
        panic!("{first:?}")
    };
    assert!(reference.starts_with("pi_"));
    assert_eq!(result["metadata"]["payonce_operation_id"], op.id.as_str());
    // Same key, same parameters: the same answer, marked as a replay.
    let replayed = SubmitOutcome::Succeeded {
        reference: reference.clone(),
        result: result.clone(),
        replayed: true,
    };
    assert_eq!(op.submit(&p).await, replayed);
    assert_eq!(s.payments_with_key(op.key.as_str()).await.len(), 1);
    s.sim.shutdown().await;
}

#[tokio::test]
async fn card_errors_are_declined_with_the_payment_intent_reference() {
    let s = start_default().await;
    let p = adapter(&s.base);
    for (pm, code) in [
        ("pm_card_chargeDeclined", "card_declined"),
        ("pm_card_authenticationRequired", "authentication_required"),
    ] {
        let op = Op::new(pm);
        match op.submit(&p).await {
            SubmitOutcome::Declined {
                code: got,
                reference: Some(r),
                ..
            } => {
                assert_eq!(got, code);
                assert!(r.starts_with("pi_"));
                match op.lookup(&p, Some(&r)).await {
                    LookupOutcome::Found {
                        status: FoundStatus::Failed { code: c, .. },
                        ..
                    } => assert_eq!(c, code),
                    other => panic!("{other:?}"),
                }
            }
            other => panic!("{pm}: {other:?}"),
        }
    }
    s.sim.shutdown().await;
}

#[tokio::test]
async fn processing_is_unknown_with_a_reference_and_lookup_follows_it_to_success() {
    let s = start(SimulatorConfig {
        processing_settle: Duration::from_millis(400),
        ..SimulatorConfig::default()
    })
    .await;
    let p = adapter(&s.base);
    let op = Op::new("pm_card_processing");
    let outcome = op.submit(&p).await;
    let SubmitOutcome::Unknown {
        reference: Some(r), ..
    } = &outcome
    else {
        panic!("{outcome:?}")
    };
    // Whether the first lookup still sees `processing` depends on timing; it must end in success.
    wait_for(
        "the processing payment to be found succeeded",
        DEADLINE,
        || async {
            match op.lookup(&p, Some(r)).await {
                LookupOutcome::Found {
                    status: FoundStatus::Succeeded { .. },
                    reference,
                } if reference == *r => Some(()),
                LookupOutcome::Found {
                    status: FoundStatus::Pending { processor_status },
                    ..
                } => {
                    assert_eq!(processor_status, "processing");
                    None
                }
                other => panic!("{other:?}"),
            }
        },
    )
    .await;
    s.sim.shutdown().await;
}

#[tokio::test]
async fn connection_refused_is_unreachable() {
    let port = crate::serve::free_port();
    let p = adapter(&format!("http://127.0.0.1:{port}"));
    let op = Op::new("pm_card_visa");
    match op.submit(&p).await {
        SubmitOutcome::Unreachable { reason } => {
            assert!(
                reason.starts_with("could not connect to the processor"),
                "{reason}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        op.lookup(&p, None).await,
        LookupOutcome::Unavailable { .. }
    ));
}

async fn with_fault(s: &Sim, op: &Op, fault: &str) {
    s.arm(json!([{ "match": op.key.as_str(), "fault": fault, "times": 1 }]))
        .await;
}

#[tokio::test]
async fn dropped_after_commit_is_unknown_then_found_by_list_and_resubmit_replays_one_payment() {
    let s = start_default().await;
    let p = adapter(&s.base);
    let op = Op::new("pm_card_visa");
    with_fault(&s, &op, "drop_after_commit").await;
    let outcome = op.submit(&p).await;
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
    let found = op.lookup(&p, None).await;
    let LookupOutcome::Found {
        reference,
        status: FoundStatus::Succeeded { .. },
    } = &found
    else {
        panic!("{found:?}")
    };
    let again = op.submit(&p).await;
    assert_eq!(reference_of(&again).as_deref(), Some(reference.as_str()));
    assert_eq!(
        s.payments_with_key(op.key.as_str()).await.len(),
        1,
        "exactly one payment"
    );
    s.sim.shutdown().await;
}

#[tokio::test]
async fn a_reset_connection_is_unknown_and_nothing_was_created() {
    let s = start_default().await;
    let p = adapter(&s.base);
    let op = Op::new("pm_card_visa");
    with_fault(&s, &op, "reset").await;
    assert!(matches!(op.submit(&p).await, SubmitOutcome::Unknown { .. }));
    assert_eq!(
        op.lookup(&p, None).await,
        LookupOutcome::NotFound { consistent: true }
    );
    s.sim.shutdown().await;
}

#[tokio::test]
async fn a_timeout_after_sending_is_unknown() {
    let s = start_default().await;
    let mut config = StripeConfig::new(&s.base, API_KEY);
    config.request_timeout = Duration::from_millis(300);
    let p = StripeProcessor::new(config).unwrap();
    let op = Op::new("pm_card_visa");
    with_fault(&s, &op, "hang").await;
    let outcome = op.submit(&p).await;
    let SubmitOutcome::Unknown { reason, .. } = &outcome else {
        panic!("{outcome:?}")
    };
    assert!(reason.contains("timed out"), "{reason}");
    s.sim.shutdown().await;
}

#[tokio::test]
async fn server_errors_are_unknown_before_and_after_commit() {
    let s = start_default().await;
    let p = adapter(&s.base);
    let before = Op::new("pm_card_visa");
    with_fault(&s, &before, "error_500_before_commit").await;
    assert!(matches!(
        before.submit(&p).await,
        SubmitOutcome::Unknown { .. }
    ));
    assert_eq!(
        before.lookup(&p, None).await,
        LookupOutcome::NotFound { consistent: true }
    );
    let after = Op::new("pm_card_visa");
    with_fault(&s, &after, "error_500_after_commit").await;
    assert!(matches!(
        after.submit(&p).await,
        SubmitOutcome::Unknown { .. }
    ));
    // The 500 is what the key replays; only lookup can tell it succeeded.
    assert!(matches!(
        after.submit(&p).await,
        SubmitOutcome::Unknown { .. }
    ));
    assert!(matches!(
        after.lookup(&p, None).await,
        LookupOutcome::Found {
            status: FoundStatus::Succeeded { .. },
            ..
        }
    ));
    s.sim.shutdown().await;
}

#[tokio::test]
async fn rate_limited_is_its_own_outcome_for_submissions_and_lookups() {
    let s = start_default().await;
    let p = adapter(&s.base);
    let op = Op::new("pm_card_visa");
    with_fault(&s, &op, "rate_limit_429").await;
    assert!(matches!(
        op.submit(&p).await,
        SubmitOutcome::RateLimited {
            retry_after_ms: None,
            ..
        }
    ));
    assert!(s.payments().await.is_empty());
    assert!(
        matches!(op.submit(&p).await, SubmitOutcome::Succeeded { .. }),
        "a retry with the same key runs"
    );
    // A lookup refused by the processor's read limit says so (the reconciler defers the check).
    assert_eq!(
        s.set_rate_limits(&serde_json::json!({ "read_per_second": 1 }))
            .await,
        200
    );
    let mut refused = None;
    for _ in 0..100 {
        if let found @ LookupOutcome::RateLimited { .. } = op.lookup(&p, None).await {
            refused = Some(found);
            break;
        }
    }
    assert!(
        refused.is_some(),
        "a 1/s read limit refuses a burst of lookups"
    );
    s.sim.shutdown().await;
}

#[tokio::test]
async fn key_in_use_is_unknown() {
    let s = start_default().await;
    let p = adapter(&s.base);
    let op = std::sync::Arc::new(Op::new("pm_card_visa"));
    with_fault(&s, &op, "hang").await;
    let (p2, op2) = (p.clone(), op.clone());
    let hung = tokio::spawn(async move { op2.submit(&p2).await });
    wait_for("the first request to hold the key", DEADLINE, || async {
        (s.in_flight().await == 1).then_some(())
    })
    .await;
    let outcome = op.submit(&p).await;
    let SubmitOutcome::Unknown { reason, .. } = &outcome else {
        panic!("{outcome:?}")
    };
    assert!(
        reason.contains("409") && reason.contains("idempotency_key_in_use"),
        "{reason}"
    );
    hung.abort();
    s.sim.shutdown().await;
}

#[tokio::test]
async fn a_key_reused_with_other_parameters_is_key_reused() {
    let s = start_default().await;
    let p = adapter(&s.base);
    let op = Op::new("pm_card_visa");
    assert!(matches!(
        op.submit(&p).await,
        SubmitOutcome::Succeeded { .. }
    ));
    let changed = Op {
        details: details("INV-other", 999, "pm_card_visa"),
        ..Op::new("pm_card_visa")
    };
    let reused = Op {
        key: op.key.clone(),
        ..changed
    };
    let outcome = reused.submit(&p).await;
    let SubmitOutcome::KeyReused { reason } = &outcome else {
        panic!("{outcome:?}")
    };
    assert!(reason.contains("idempotency_error"), "{reason}");
    s.sim.shutdown().await;
}

#[tokio::test]
async fn an_unknown_payment_method_is_final_and_wrong_keys_and_missing_endpoints_are_configuration_errors()
 {
    let s = start_default().await;
    let unknown_card = Op::new("pm_card_doesNotExist");
    assert_eq!(
        unknown_card.submit(&adapter(&s.base)).await,
        SubmitOutcome::Declined {
            code: "resource_missing".into(),
            message: "No such PaymentMethod: 'pm_card_doesNotExist'".into(),
            reference: None
        }
    );
    let wrong_key = StripeProcessor::new(StripeConfig::new(&s.base, "sk_test_wrong")).unwrap();
    let op = Op::new("pm_card_visa");
    match op.submit(&wrong_key).await {
        SubmitOutcome::Misconfigured { reason } => {
            assert!(
                reason.contains("401") && reason.contains("configuration error"),
                "{reason}"
            )
        }
        other => panic!("{other:?}"),
    }
    let wrong_path = adapter(&format!("{}/not-stripe", s.base));
    match op.submit(&wrong_path).await {
        SubmitOutcome::Misconfigured { reason } => assert!(reason.contains("404"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert!(s.payments().await.is_empty());
    s.sim.shutdown().await;
}

#[tokio::test]
async fn lookup_by_list_pages_through_a_busy_customer_and_not_found_is_consistent() {
    let s = start_default().await;
    let p = adapter(&s.base);
    let target = Op::new("pm_card_visa");
    assert!(matches!(
        target.submit(&p).await,
        SubmitOutcome::Succeeded { .. }
    ));
    // 150 later payments of the same customer push the target onto the second page.
    for _ in 0..150 {
        assert!(matches!(
            Op::new("pm_card_visa").submit(&p).await,
            SubmitOutcome::Succeeded { .. }
        ));
    }
    match target.lookup(&p, None).await {
        LookupOutcome::Found {
            status: FoundStatus::Succeeded { result },
            ..
        } => {
            assert_eq!(
                result["metadata"]["payonce_operation_id"],
                target.id.as_str()
            );
        }
        other => panic!("{other:?}"),
    }
    let list_pages = s
        .requests()
        .await
        .iter()
        .filter(|r| r["method"] == "GET" && r["path"] == "/v1/payment_intents")
        .count();
    assert_eq!(list_pages, 2, "100 per page");
    let never = Op::new("pm_card_visa");
    assert_eq!(
        never.lookup(&p, None).await,
        LookupOutcome::NotFound { consistent: true }
    );
    s.sim.shutdown().await;
}

#[tokio::test]
async fn a_reference_of_another_operation_is_not_trusted() {
    let s = start_default().await;
    let p = adapter(&s.base);
    let a = Op::new("pm_card_visa");
    let reference = reference_of(&a.submit(&p).await).unwrap();
    let b = Op::new("pm_card_visa");
    // Not found for b: its facts, naming a, for the reconciler to check against b.
    match b.lookup(&p, Some(&reference)).await {
        LookupOutcome::Unmatched { object } => {
            assert_eq!(object.reference, reference);
            assert_eq!(object.operation_id.as_deref(), Some(a.id.as_str()));
            assert!(matches!(object.status, FoundStatus::Succeeded { .. }));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        b.lookup(&p, Some("pi_doesNotExist")).await,
        LookupOutcome::Unavailable { .. }
    ));
    assert!(matches!(
        b.lookup(&p, Some("../admin")).await,
        LookupOutcome::Unavailable { .. }
    ));
    s.sim.shutdown().await;
}

#[tokio::test]
async fn every_sent_parameter_is_a_documented_payment_intent_create_parameter() {
    let spec: Value = serde_json::from_str(include_str!(
        "../fixtures/stripe/stripe_openapi_subset.json"
    ))
    .unwrap();
    let facts: Value = serde_json::from_str(include_str!(
        "../fixtures/stripe/latest_facts_stripe_python.json"
    ))
    .unwrap();
    let form = &spec["paths"]["/v1/payment_intents"]["post"]["requestBody"]["content"]["application/x-www-form-urlencoded"];
    let properties = form["schema"]["properties"].as_object().unwrap();
    let latest: Vec<&str> = facts["PaymentIntentCreateParams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();

    let s = start_default().await;
    let p = adapter(&s.base);
    let mut op = Op::new("pm_card_visa");
    op.details = Details::parse(&payonce_core::details::RawDetails {
        destination: Some("acct_1Dest".into()),
        ..op.details.to_raw()
    })
    .unwrap();
    assert!(matches!(
        op.submit(&p).await,
        SubmitOutcome::Succeeded { .. }
    ));
    assert!(matches!(
        op.submit(&p).await,
        SubmitOutcome::Succeeded { .. }
    ));
    let sent: Vec<Value> = s
        .requests()
        .await
        .into_iter()
        .filter(|r| r["method"] == "POST")
        .collect();
    assert_eq!(sent.len(), 2);
    assert_eq!(
        sent[0]["param_keys"], sent[1]["param_keys"],
        "the same parameters on every attempt"
    );
    let keys: Vec<&str> = sent[0]["param_keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    for required in [
        "amount",
        "currency",
        "customer",
        "payment_method",
        "confirm",
        "off_session",
        "description",
        "metadata[payonce_operation_id]",
        "metadata[payonce_tenant]",
        "metadata[payonce_business_key]",
        "metadata[payonce_details_hash]",
        "metadata[payonce_invoice]",
        "transfer_data[destination]",
    ] {
        assert!(keys.contains(&required), "{required} is sent: {keys:?}");
    }
    for key in &keys {
        let (base, nested) = match key.split_once('[') {
            Some((b, rest)) => (b, Some(rest.trim_end_matches(']'))),
            None => (*key, None),
        };
        let property = properties
            .get(base)
            .unwrap_or_else(|| panic!("{base} is not a PaymentIntentCreate parameter"));
        assert!(
            latest.contains(&base),
            "{base} is still a parameter in {STRIPE_VERSION}"
        );
        if let Some(nested) = nested {
            assert_eq!(
                form["encoding"][base]["style"], "deepObject",
                "{base} is sent as a deep object"
            );
            let documented = property["properties"].get(nested).is_some()
                || property["additionalProperties"]["type"] == "string";
            assert!(documented, "{key} is a documented member of {base}");
        }
    }
    for r in &sent {
        assert_eq!(r["stripe_version"], STRIPE_VERSION);
        assert_eq!(r["idempotency_key"], op.key.as_str());
    }
    s.sim.shutdown().await;
}

#[tokio::test]
async fn a_lookup_past_its_page_limit_is_inconclusive_and_the_same_key_replays_the_payment() {
    let s = start_default().await;
    let p = std::sync::Arc::new(adapter(&s.base));
    let op = Op::new("pm_card_visa");
    with_fault(&s, &op, "drop_after_commit").await;
    assert!(matches!(op.submit(&p).await, SubmitOutcome::Unknown { .. }));
    // The same customer pays more than the lookup's pages hold after it (the list is newest first).
    let others = payonce_processor::stripe::LOOKUP_PAGES_MAX * 100 + 5;
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..16 {
        let p = p.clone();
        tasks.spawn(async move {
            for _ in (worker..others).step_by(16) {
                let other = Op::new("pm_card_visa");
                assert!(matches!(
                    other.submit(&p).await,
                    SubmitOutcome::Succeeded { .. }
                ));
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    let found = op.lookup(&p, None).await;
    assert_eq!(
        found,
        LookupOutcome::NotFound { consistent: false },
        "unseen is not absent, and waiting would not help"
    );
    // Inside the retention window the reconciler retries with the same key: the processor replays.
    let again = op.submit(&p).await;
    assert!(
        matches!(again, SubmitOutcome::Succeeded { .. }),
        "{again:?}"
    );
    assert_eq!(
        s.payments_with_key(op.key.as_str()).await.len(),
        1,
        "exactly one payment"
    );
    s.sim.shutdown().await;
}

/// The adapter keeps up to `idle_connections` keep-alive connections: a second burst of concurrent
/// submissions reuses what the first opened when that many are kept, and opens the difference again
/// when fewer are. Counted at the simulator's listener (the count includes this test's own read).
#[tokio::test]
async fn the_adapter_reuses_as_many_connections_as_it_keeps_idle() {
    const BURST: usize = 16;
    for (kept, accepted) in [(BURST, BURST), (4, BURST + (BURST - 4))] {
        // Each request is held long enough that a burst's requests all overlap.
        let s = start(SimulatorConfig {
            latency: Duration::from_millis(100),
            ..SimulatorConfig::default()
        })
        .await;
        let mut config = StripeConfig::new(&s.base, API_KEY);
        config.idle_connections = kept;
        let p = std::sync::Arc::new(StripeProcessor::new(config).unwrap());
        for _ in 0..2 {
            let mut burst = tokio::task::JoinSet::new();
            for _ in 0..BURST {
                let p = p.clone();
                burst.spawn(async move { Op::new("pm_card_visa").submit(&p).await });
            }
            for outcome in burst.join_all().await {
                assert!(
                    matches!(outcome, SubmitOutcome::Succeeded { .. }),
                    "{outcome:?}"
                );
            }
        }
        let counted = s.admin("/_sim/audit/connections").await;
        assert_eq!(
            counted["accepted"],
            json!(accepted + 1),
            "{kept} kept idle: two bursts of {BURST} and one audit read"
        );
    }
}

/// Over HTTP/2 every request in flight is a stream of one connection: two bursts of concurrent
/// submissions (each held at the simulator long enough that a burst's requests overlap) open one
/// connection between them, and each still makes exactly one payment.
#[tokio::test]
async fn over_http2_the_adapter_multiplexes_its_requests_on_one_connection() {
    const BURST: usize = 16;
    let s = start(SimulatorConfig {
        latency: Duration::from_millis(100),
        ..SimulatorConfig::default()
    })
    .await;
    let mut config = StripeConfig::new(&s.base, API_KEY);
    config.http2 = true;
    let p = std::sync::Arc::new(StripeProcessor::new(config).unwrap());
    let mut keys = Vec::new();
    for _ in 0..2 {
        let mut burst = tokio::task::JoinSet::new();
        for _ in 0..BURST {
            let p = p.clone();
            let op = Op::new("pm_card_visa");
            keys.push(op.key.clone());
            burst.spawn(async move { op.submit(&p).await });
        }
        for outcome in burst.join_all().await {
            assert!(
                matches!(outcome, SubmitOutcome::Succeeded { .. }),
                "{outcome:?}"
            );
        }
    }
    for key in &keys {
        assert_eq!(s.payments_with_key(key.as_str()).await.len(), 1, "{key}");
    }
    let counted = s.admin("/_sim/audit/connections").await;
    assert_eq!(
        counted["accepted"],
        json!(2),
        "one HTTP/2 connection for 32 submissions; the test's own reads share another"
    );
    s.sim.shutdown().await;
}

/// A connection reset over HTTP/2 is a reset of that request's stream: that submission is unknown
/// (it was sent) and made nothing, the other requests on the same connection are answered, and the
/// same key sent again makes the one payment.
#[tokio::test]
async fn over_http2_a_reset_stream_is_unknown_and_its_neighbours_are_answered() {
    const NEIGHBOURS: usize = 4;
    let s = start(SimulatorConfig {
        latency: Duration::from_millis(100),
        ..SimulatorConfig::default()
    })
    .await;
    let mut config = StripeConfig::new(&s.base, API_KEY);
    config.http2 = true;
    let p = std::sync::Arc::new(StripeProcessor::new(config).unwrap());
    let reset = std::sync::Arc::new(Op::new("pm_card_visa"));
    with_fault(&s, &reset, "reset").await;
    let mut burst = tokio::task::JoinSet::new();
    {
        let (p, reset) = (p.clone(), reset.clone());
        burst.spawn(async move { (true, reset.submit(&p).await) });
    }
    for _ in 0..NEIGHBOURS {
        let p = p.clone();
        burst.spawn(async move { (false, Op::new("pm_card_visa").submit(&p).await) });
    }
    let outcomes = burst.join_all().await;
    for (is_reset, outcome) in &outcomes {
        if *is_reset {
            assert!(
                matches!(outcome, SubmitOutcome::Unknown { .. }),
                "{outcome:?}"
            );
        } else {
            assert!(
                matches!(outcome, SubmitOutcome::Succeeded { .. }),
                "{outcome:?}"
            );
        }
    }
    assert_eq!(s.payments_with_key(reset.key.as_str()).await.len(), 0);
    assert!(matches!(
        reset.submit(&p).await,
        SubmitOutcome::Succeeded { .. }
    ));
    assert_eq!(s.payments_with_key(reset.key.as_str()).await.len(), 1);
    let counted = s.admin("/_sim/audit/connections").await;
    assert_eq!(
        counted["accepted"],
        json!(2),
        "the reset did not cost the adapter its one connection; the test's own reads share another"
    );
    s.sim.shutdown().await;
}

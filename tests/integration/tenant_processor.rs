//! A tenant's processor (`payonce tenant set-processor`, issue 41): every operation is bound at
//! creation to its tenant's processor and stays on it (submission, retries, lookups, refunds,
//! webhooks); one process serves both processors at once; an operation naming a processor the
//! process is not configured for is never sent anywhere.

use crate::adyen_notifications::{deliver, item};
use crate::api::{ADYEN_HMAC_KEY, spawn};
use crate::serve::{free_port, payonce, scratch};
use crate::support::now;
use crate::support::processes::{simulator, stripe};
use crate::support::reconciler;
use crate::support::refunds::{create_refund, succeeded_payment};
use crate::support::rows;
use crate::support::{
    self, KEY_SECRET, details, every_store, key_secret, sqlite_ledger, tenant, wait_for,
};
use payonce_core::clock::SystemClock;
use payonce_core::id::{BusinessKey, TenantId};
use payonce_core::state::Status;
use payonce_ledger::intake::{Batch, BatchApproval, BatchItem};
use payonce_ledger::{NewOperation, Operation, SharedLedger};
use payonce_processor::ingest as webhooks;
use payonce_processor::stripe::webhook::sign;
use payonce_processor::{ProcessorKind, Processors};
use payonce_simulator::{SimulatorConfig, payment_audit};
use payonce_worker::{Worker, WorkerConfig};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::process::Child;

/// How long the worker process gets to pay everything it was given.
const DEADLINE: Duration = Duration::from_secs(30);
/// The Stripe webhook secret of the in-process tests.
const STRIPE_SECRET: &str = "whsec_tenant_processor_test";

fn globex() -> TenantId {
    TenantId::parse("globex").unwrap()
}

/// Creates an operation of `tenant` for `invoice` (awaiting approval).
async fn created(ledger: &SharedLedger, tenant: &TenantId, invoice: &str) -> Operation {
    let d = details(invoice, 2048, "pm_card_visa");
    rows::created(ledger, tenant, invoice, d, now())
        .await
        .operation
}

/// The Stripe adapter `stripe` and the Adyen adapter to `adyen_base`, each for its own operations.
fn stripe_and_adyen(stripe: Arc<dyn payonce_processor::Processor>, adyen_base: &str) -> Processors {
    Processors::single(stripe)
        .with(
            ProcessorKind::Adyen,
            Arc::new(crate::adyen_adapter::adapter(adyen_base)),
        )
        .unwrap()
}

/// Approves `op`; returns it in `ready`.
async fn approved(ledger: &SharedLedger, op: &Operation) -> Operation {
    rows::approved(ledger, op, now() + Duration::from_secs(86_400), now()).await
}

/// An operation of `tenant` whose submission may have reached its processor, recorded unknown
/// with `reference` and due for a check now (the ledger's own moves: claimed alone, marked
/// submitting, recorded).
async fn unknown(
    ledger: &SharedLedger,
    tenant: &TenantId,
    invoice: &str,
    reference: &str,
) -> Operation {
    let op = approved(ledger, &created(ledger, tenant, invoice).await).await;
    let c = rows::executing(
        ledger,
        &op.id,
        &rows::holder("w", Duration::from_secs(600)),
        now(),
    )
    .await;
    rows::record(
        ledger,
        &c,
        &rows::unknown_outcome("test", Some(reference), now()),
        "w",
        now(),
    )
    .await
}

/// `payonce simulator ARGS` on a free port, answering its health probe; with its base URL.
async fn simulator_process(dir: &Path, args: &[&str]) -> (Child, String) {
    let listen = format!("127.0.0.1:{}", free_port());
    let mut all = vec!["simulator", "--listen", &listen];
    all.extend_from_slice(args);
    let child = payonce(dir, &all)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let base = format!("http://{listen}");
    let http = crate::api::http_client();
    wait_for("the simulator answers", DEADLINE, || {
        let (http, base) = (http.clone(), base.clone());
        async move {
            let r = http.get(format!("{base}/healthz")).send().await.ok()?;
            r.status().is_success().then_some(())
        }
    })
    .await;
    (child, base)
}

/// `payonce tenant set-processor TENANT PROCESSOR` on `database_url`: its exit status and output.
pub(crate) async fn set_processor(
    dir: &Path,
    database_url: &str,
    tenant: &str,
    processor: &str,
) -> std::process::Output {
    payonce(dir, &["tenant", "set-processor", tenant, processor])
        .env("PAYONCE_DATABASE_URL", database_url)
        .output()
        .await
        .unwrap()
}

/// The payments (or refunds) a simulator holds for `operation`.
async fn held_for(base: &str, what: &str, operation: &Operation) -> Vec<Value> {
    let http = crate::api::http_client();
    let rows = if what == "payments" {
        payment_audit::read_all(&http, base, payment_audit::PAGE_SIZE_MAX)
            .await
            .unwrap()
    } else {
        let page = crate::support::processes::refunds_audit_at(base).await;
        page["data"].as_array().cloned().unwrap_or_default()
    };
    // By the key only this operation sends (Adyen's refund answers carry no metadata).
    rows.into_iter()
        .filter(|p| p["idempotency_key"] == operation.idempotency_key.as_str())
        .collect()
}

#[tokio::test]
async fn each_tenant_pays_once_on_its_own_processor_and_a_switch_keeps_older_operations_on_theirs()
{
    let dir = scratch("tenant-processor");
    let (ledger, url) = support::postgres_ledger().await;
    let (mut stripe_sim, stripe_base) = simulator_process(&dir, &[]).await;
    let (mut adyen_sim, adyen_base) = simulator_process(&dir, &["--contract", "adyen"]).await;

    // globex moves to Adyen; acme sets nothing and stays on the processes' configured Stripe.
    let set = set_processor(&dir, &url, "globex", "adyen").await;
    assert!(set.status.success(), "{set:?}");
    let said = String::from_utf8_lossy(&set.stdout);
    assert!(
        said.contains("tenant globex") && said.contains("adyen"),
        "{said}"
    );
    let refused = set_processor(&dir, &url, "globex", "paypal").await;
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert_eq!(
        ledger.profiles().processor(&globex()).await.unwrap(),
        Some(ProcessorKind::Adyen),
        "a refused name changes nothing"
    );

    let a1 = approved(&ledger, &created(&ledger, &tenant(), "INV-TP-A1").await).await;
    let g1 = approved(&ledger, &created(&ledger, &globex(), "INV-TP-G1").await).await;
    // Created while acme was on Stripe, approved only after it moved to Adyen.
    let a2 = created(&ledger, &tenant(), "INV-TP-A2").await;
    let set = set_processor(&dir, &url, "acme", "adyen").await;
    assert!(set.status.success(), "{set:?}");
    let a3 = approved(&ledger, &created(&ledger, &tenant(), "INV-TP-A3").await).await;
    let a2 = approved(&ledger, &a2).await;
    assert_eq!(
        a1.processor, None,
        "acme had set nothing: the configured one"
    );
    assert_eq!(a2.processor, None, "bound at creation, not at approval");
    assert_eq!(g1.processor, Some(ProcessorKind::Adyen));
    assert_eq!(a3.processor, Some(ProcessorKind::Adyen));

    // One worker, configured for Stripe (its default) and Adyen beside it.
    let mut worker = payonce(&dir, &["worker"])
        .env("PAYONCE_DATABASE_URL", url.url())
        .env("PAYONCE_KEY_SECRET", KEY_SECRET)
        .env("PAYONCE_PROCESSOR_URL", &stripe_base)
        .env("PAYONCE_ADYEN_URL", &adyen_base)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let paid = |op: Operation| {
        let ledger = ledger.clone();
        async move {
            wait_for(&format!("{} succeeded", op.id), DEADLINE, || async {
                let row = ledger.get(&op.tenant, &op.id).await.unwrap();
                (row.status == Status::Succeeded).then_some(row)
            })
            .await
        }
    };
    let (a1, a2, a3, g1) = (
        paid(a1).await,
        paid(a2).await,
        paid(a3).await,
        paid(g1).await,
    );
    for (op, on, off) in [
        (&a1, &stripe_base, &adyen_base),
        (&a2, &stripe_base, &adyen_base),
        (&a3, &adyen_base, &stripe_base),
        (&g1, &adyen_base, &stripe_base),
    ] {
        let held = held_for(on, "payments", op).await;
        assert_eq!(held.len(), 1, "{} paid once on {on}: {held:?}", op.id);
        assert_eq!(
            held[0]["idempotency_key"],
            op.idempotency_key.as_str(),
            "{}",
            op.id
        );
        assert!(
            held_for(off, "payments", op).await.is_empty(),
            "{} never reached {off}",
            op.id
        );
        assert_eq!(
            held[0]["id"].as_str(),
            op.external_ref.as_deref(),
            "the ledger records the reference of its own processor's payment"
        );
    }
    assert!(a1.external_ref.as_deref().unwrap().starts_with("pi_"));
    assert!(!g1.external_ref.as_deref().unwrap().starts_with("pi_"));

    // A refund of a Stripe payment made after the tenant moved to Adyen is Stripe's.
    let refund = create_refund(&ledger, &a1, "invoice:INV-TP-A1:refund", 500, now())
        .await
        .unwrap()
        .operation;
    assert_eq!(refund.processor, None, "a refund carries its payment's");
    let refund = approved(&ledger, &refund).await;
    let refund = paid(refund).await;
    let on_stripe = held_for(&stripe_base, "refunds", &refund).await;
    assert_eq!(on_stripe.len(), 1, "{on_stripe:?}");
    assert_eq!(on_stripe[0]["amount"], 500);
    assert!(held_for(&adyen_base, "refunds", &refund).await.is_empty());
    // And one of an Adyen payment is Adyen's.
    let refund = create_refund(&ledger, &a3, "invoice:INV-TP-A3:refund", 700, now())
        .await
        .unwrap()
        .operation;
    assert_eq!(refund.processor, Some(ProcessorKind::Adyen));
    let refund = approved(&ledger, &refund).await;
    wait_for("the Adyen refund is received", DEADLINE, || async {
        let held = held_for(&adyen_base, "refunds", &refund).await;
        (held.len() == 1).then_some(())
    })
    .await;
    assert!(held_for(&stripe_base, "refunds", &refund).await.is_empty());

    crate::serve::sigterm_and_wait(&mut worker).await;
    let _ = stripe_sim.kill().await;
    let _ = adyen_sim.kill().await;
}

#[tokio::test]
async fn an_operation_naming_a_processor_this_process_is_not_configured_for_is_never_sent() {
    let ledger = sqlite_ledger().await;
    let sim = simulator(SimulatorConfig::default()).await;
    let stripe_only = stripe(&sim, None);
    ledger
        .profiles()
        .set_processor(&globex(), ProcessorKind::Adyen, now())
        .await
        .unwrap();
    let ready = approved(&ledger, &created(&ledger, &globex(), "INV-TP-NC").await).await;
    let worker = Worker::new(
        ledger.clone(),
        stripe_only.clone(),
        Arc::new(SystemClock),
        WorkerConfig::new("w-stripe-only"),
    )
    .unwrap();
    assert_eq!(worker.run_once().await.unwrap(), 1);
    let row = ledger.get(&globex(), &ready.id).await.unwrap();
    assert_eq!(row.status, Status::NeedsAttention);
    let reason = row.failure_message.unwrap_or_default();
    assert!(
        reason.contains("processor adyen") && reason.contains("no configuration"),
        "{reason}"
    );
    assert_eq!(worker.metrics().execution.unconfigured_processor.get(), 1);
    assert_eq!(stripe_payments(&sim).await, 0, "nothing reached Stripe");

    // An unknown outcome on Adyen is never looked up or retried on Stripe: a human sees why.
    let doubt = unknown(&ledger, &globex(), "INV-TP-NC2", "ADYENPSP00000001").await;
    let rec = reconciler::build(&ledger, stripe_only, "rec-stripe-only", |c| {
        c.lookup_permit_wait_max = Duration::from_secs(1);
    });
    let requests_before = sim_requests(&sim).await;
    let report = rec.sweep_once(false).await.unwrap();
    assert_eq!(report.escalated, 1, "{report:?}");
    let row = ledger.get(&globex(), &doubt.id).await.unwrap();
    assert_eq!(row.status, Status::NeedsAttention);
    assert!(
        row.failure_message
            .as_deref()
            .is_some_and(|m| m.contains("processor adyen")),
        "{row:?}"
    );
    assert_eq!(
        sim_requests(&sim).await,
        requests_before,
        "no Stripe request"
    );

    // The same worker configured for Adyen too pays the next one there, and Stripe still nothing.
    let adyen = crate::adyen_adapter::adyen_sim().await;
    let both = stripe_and_adyen(stripe(&sim, None), &adyen.base);
    let worker = Worker::with_processors(
        ledger.clone(),
        both,
        Arc::new(SystemClock),
        WorkerConfig::new("w-both"),
    )
    .unwrap();
    let next = approved(&ledger, &created(&ledger, &globex(), "INV-TP-NC3").await).await;
    assert_eq!(worker.run_once().await.unwrap(), 1);
    let row = ledger.get(&globex(), &next.id).await.unwrap();
    assert_eq!(row.status, Status::Succeeded, "{row:?}");
    assert_eq!(
        adyen
            .payments_with_key(next.idempotency_key.as_str())
            .await
            .len(),
        1
    );
    assert_eq!(stripe_payments(&sim).await, 0);
    adyen.sim.shutdown().await;
}

/// Payments the in-process Stripe simulator holds.
async fn stripe_payments(sim: &payonce_simulator::Simulator) -> usize {
    crate::support::processes::audit(sim).await.len()
}

/// Requests the in-process Stripe simulator has seen that could concern one operation: every
/// submission (POST) and every read of one object by id (a lookup by reference, a webhook's
/// check). The scan's and searches' list reads are left out: they name no operation.
async fn sim_requests(sim: &payonce_simulator::Simulator) -> usize {
    let page: Value = crate::api::http_client()
        .get(format!("{}/_sim/audit/requests", sim.base_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    page["data"].as_array().map_or(0, |all| {
        all.iter()
            .filter(|r| {
                let path = r["path"].as_str().unwrap_or("");
                r["method"] == "POST"
                    || (path.starts_with("/v1/payment_intents/")
                        && path != "/v1/payment_intents/search")
            })
            .count()
    })
}

/// A signed Stripe delivery of `payment_intent.succeeded` about `object`.
fn stripe_delivery(event_id: &str, object: Value) -> (String, String) {
    let t = now().as_millis() / 1000;
    let body = json!({"id": event_id, "object": "event", "type": "payment_intent.succeeded",
        "created": t, "data": {"object": object}})
    .to_string();
    (
        format!("t={t},v1={}", sign(STRIPE_SECRET, t, body.as_bytes())),
        body,
    )
}

/// A PaymentIntent created at the simulator directly for `op` (as the worker's request would).
async fn paid_at_stripe(sim: &payonce_simulator::Simulator, op: &Operation) -> Value {
    crate::support::processes::pay_directly(sim, &op.id, 2048, "cus_test").await
}

#[tokio::test]
async fn a_webhook_applies_only_to_an_operation_of_its_own_processor() {
    let ledger = sqlite_ledger().await;
    let sim = simulator(SimulatorConfig::default()).await;
    ledger
        .profiles()
        .set_processor(&tenant(), ProcessorKind::Stripe, now())
        .await
        .unwrap();
    ledger
        .profiles()
        .set_processor(&globex(), ProcessorKind::Adyen, now())
        .await
        .unwrap();
    let on_stripe = unknown(&ledger, &tenant(), "INV-TP-WS", "pi_pending").await;
    let psp = "ADYENPSP00000042";
    let on_adyen = unknown(&ledger, &globex(), "INV-TP-WA", psp).await;
    assert_eq!(on_stripe.processor, Some(ProcessorKind::Stripe));
    assert_eq!(on_adyen.processor, Some(ProcessorKind::Adyen));
    // Never asked: Adyen's notifications are checked against the operation.
    let processors = stripe_and_adyen(stripe(&sim, None), "http://127.0.0.1:9");
    let rec = reconciler::build_serving(
        &ledger,
        processors,
        Arc::new(SystemClock),
        "rec-tenant-processor",
        reconciler::immediate_rechecks,
    );

    // Signed, authentic, and each naming the other processor's operation: nothing applied.
    let pi = paid_at_stripe(&sim, &on_adyen).await;
    let (header, body) = stripe_delivery("evt_tp_cross", pi.clone());
    webhooks::ingest(
        ledger.as_ref(),
        &[STRIPE_SECRET.to_string()],
        Some(&header),
        body.as_bytes(),
        now(),
    )
    .await
    .unwrap();
    let items = vec![item(
        "ADYENPSP00000099",
        on_stripe.id.as_str(),
        2048,
        true,
        Some(ADYEN_HMAC_KEY),
    )];
    deliver(&ledger, items).await;
    let requests_before = sim_requests(&sim).await;
    let report = rec.check_hints_once().await.unwrap();
    assert_eq!(report.closed, 2, "{report:?}");
    assert_eq!(report.applied, 0, "{report:?}");
    assert_eq!(
        sim_requests(&sim).await,
        requests_before,
        "no Stripe read spent on an Adyen operation"
    );
    for op in [&on_stripe, &on_adyen] {
        let row = ledger.get(&op.tenant, &op.id).await.unwrap();
        assert_eq!(row.status, Status::Unknown, "{} untouched", op.id);
        assert_eq!(row.external_ref, op.external_ref);
    }
    assert_eq!(rec.metrics().webhook_mismatches.get(), 2);

    // Each processor's own report settles its own operation.
    let pi = paid_at_stripe(&sim, &on_stripe).await;
    let own = stripe_delivery("evt_tp_own", pi.clone());
    webhooks::ingest(
        ledger.as_ref(),
        &[STRIPE_SECRET.to_string()],
        Some(&own.0),
        own.1.as_bytes(),
        now(),
    )
    .await
    .unwrap();
    let items = vec![item(
        psp,
        on_adyen.id.as_str(),
        2048,
        true,
        Some(ADYEN_HMAC_KEY),
    )];
    deliver(&ledger, items).await;
    let report = rec.check_hints_once().await.unwrap();
    assert_eq!(report.applied, 2, "{report:?}");
    let row = ledger.get(&tenant(), &on_stripe.id).await.unwrap();
    assert_eq!(row.status, Status::Succeeded);
    assert_eq!(row.external_ref.as_deref(), pi["id"].as_str());
    let row = ledger.get(&globex(), &on_adyen.id).await.unwrap();
    assert_eq!(row.status, Status::Succeeded);
    assert_eq!(row.external_ref.as_deref(), Some(psp));

    // A Stripe webhook naming a Stripe operation whose retrieved object carries an Adyen
    // operation's id: the object's own operation is checked, and it is not Stripe's either.
    let named = unknown(&ledger, &tenant(), "INV-TP-WS2", "pi_pending2").await;
    let carried = unknown(&ledger, &globex(), "INV-TP-WA2", "ADYENPSP00000043").await;
    let pi = paid_at_stripe(&sim, &carried).await;
    let mut claimed = pi.clone();
    claimed["metadata"]["payonce_operation_id"] = json!(named.id.as_str());
    let (header, body) = stripe_delivery("evt_tp_carried", claimed);
    webhooks::ingest(
        ledger.as_ref(),
        &[STRIPE_SECRET.to_string()],
        Some(&header),
        body.as_bytes(),
        now(),
    )
    .await
    .unwrap();
    let report = rec.check_hints_once().await.unwrap();
    assert_eq!((report.closed, report.applied), (1, 0), "{report:?}");
    for op in [&named, &carried] {
        let row = ledger.get(&op.tenant, &op.id).await.unwrap();
        assert_eq!(row.status, Status::Unknown, "{} untouched", op.id);
        assert_eq!(row.external_ref, op.external_ref);
    }
}

#[tokio::test]
async fn operations_are_bound_at_creation_and_refunds_to_their_payment_on_every_store() {
    for ledger in every_store().await {
        let profiles = ledger.profiles();
        assert_eq!(profiles.processor(&tenant()).await.unwrap(), None);
        let before = created(&ledger, &tenant(), "INV-TP-B0").await;
        assert_eq!(before.processor, None);
        let paid = succeeded_payment(&ledger, "INV-TP-B1", 2048, now()).await;
        profiles
            .set_processor(&tenant(), ProcessorKind::Adyen, now())
            .await
            .unwrap();
        assert_eq!(
            profiles.processor(&tenant()).await.unwrap(),
            Some(ProcessorKind::Adyen)
        );
        assert_eq!(
            profiles.processor(&globex()).await.unwrap(),
            None,
            "one tenant's choice"
        );
        let after = created(&ledger, &tenant(), "INV-TP-B2").await;
        assert_eq!(after.processor, Some(ProcessorKind::Adyen));
        let other = created(&ledger, &globex(), "INV-TP-B3").await;
        assert_eq!(other.processor, None);
        // Reads and repeats of an existing row keep its binding.
        let again = created(&ledger, &tenant(), "INV-TP-B0").await;
        assert_eq!((again.id, again.processor), (before.id.clone(), None));
        let row = ledger.get(&tenant(), &before.id).await.unwrap();
        assert_eq!(row.processor, None);
        // A refund of a payment made before the switch stays on the payment's processor.
        let refund = create_refund(&ledger, &paid, "invoice:INV-TP-B1:refund", 100, now())
            .await
            .unwrap()
            .operation;
        assert_eq!(refund.processor, None);
        // Switching back does not move anything created on Adyen.
        profiles
            .set_processor(&tenant(), ProcessorKind::Stripe, now())
            .await
            .unwrap();
        let row = ledger.get(&tenant(), &after.id).await.unwrap();
        assert_eq!(row.processor, Some(ProcessorKind::Adyen));
        // The batch intake binds as the single create does.
        let d = details("INV-TP-B4", 2048, "pm_card_visa");
        let batch = Batch {
            tenant: tenant(),
            items: vec![BatchItem {
                new: NewOperation::keyed(
                    &key_secret(),
                    tenant(),
                    BusinessKey::parse("invoice:INV-TP-B4:pay").unwrap(),
                    d.clone(),
                    "service:test".into(),
                ),
                approval: Some(BatchApproval {
                    details_hash: d.hash(),
                    approved_by: "mandate:INV-TP-B4".into(),
                }),
            }],
            actor: "service:test".into(),
            method: "service".into(),
            approval_expires_at: now() + Duration::from_secs(86_400),
        };
        let answered = ledger.create_batch(&batch, now()).await.unwrap();
        assert_eq!(answered.len(), 1);
        let row = ledger
            .get(
                &tenant(),
                &key_secret().operation_id_for(
                    &tenant(),
                    &BusinessKey::parse("invoice:INV-TP-B4:pay").unwrap(),
                ),
            )
            .await
            .unwrap();
        assert_eq!(row.processor, Some(ProcessorKind::Stripe));
        // A row the processor scan recreates is bound to the processor it was found at.
        let mut lost = NewOperation::keyed(
            &key_secret(),
            tenant(),
            BusinessKey::parse("invoice:INV-TP-B5:pay").unwrap(),
            details("INV-TP-B5", 2048, "pm_card_visa"),
            "reconciler: processor scan".into(),
        );
        lost.processor = Some(ProcessorKind::Adyen);
        let recreated = ledger.recreate(lost, now()).await.unwrap().operation;
        assert_eq!(recreated.processor, Some(ProcessorKind::Adyen));
    }
}

#[tokio::test]
async fn no_api_key_sets_a_tenants_processor() {
    let ledger = sqlite_ledger().await;
    let api = spawn(ledger.clone()).await;
    let keys = [
        ("service", Some(api.service.clone())),
        ("assistant", Some(api.assistant.clone())),
        ("on_call", Some(api.on_call.clone())),
        ("other tenant's service", Some(api.other_service.clone())),
        ("no key", None),
    ];
    for (who, key) in &keys {
        for method in [reqwest::Method::PUT, reqwest::Method::POST] {
            let mut request = api
                .http
                .request(method.clone(), format!("{}/v1/tenant/processor", api.base))
                .json(&json!({"processor": "adyen"}));
            if let Some(key) = key {
                request = request.bearer_auth(key);
            }
            let status = request.send().await.unwrap().status().as_u16();
            assert_eq!(status, 404, "{who} {method}: the CLI is the operator's");
        }
        // The profile a service key may set carries no processor.
        let mut request = api
            .http
            .put(format!("{}/v1/tenant/profile", api.base))
            .json(&json!({"display_name": "Acme", "processor": "adyen"}));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        let _ = request.send().await.unwrap();
    }
    for tenant in [tenant(), TenantId::parse("globex").unwrap()] {
        assert_eq!(ledger.profiles().processor(&tenant).await.unwrap(), None);
    }
    let op = created(&ledger, &tenant(), "INV-TP-ROLE").await;
    assert_eq!(op.processor, None);
}

#[tokio::test]
async fn the_reconciler_decides_under_the_contract_of_the_operations_own_processor() {
    let ledger = sqlite_ledger().await;
    let processors = stripe_and_adyen(
        stripe(&simulator(SimulatorConfig::default()).await, None),
        "http://127.0.0.1:9",
    );
    let rec = reconciler::build_serving(
        &ledger,
        processors,
        Arc::new(SystemClock),
        "rec-contracts",
        |_| {},
    );
    // Submitted once two days ago, no reference, nothing found: past Stripe's 24 h key retention,
    // inside Adyen's 31 days.
    let now = now();
    let sent = now.saturating_sub_span(Duration::from_secs(2 * 86_400));
    let base = created(&ledger, &tenant(), "INV-TP-DECIDE").await;
    let doubt = |processor: Option<ProcessorKind>| Operation {
        status: Status::Unknown,
        attempt: 1,
        first_submitted_at: Some(sent),
        first_submitted_attempt: Some(1),
        last_submitted_at: Some(sent),
        submit_count: 1,
        processor,
        ..base.clone()
    };
    assert_eq!(
        rec.decide(&doubt(Some(ProcessorKind::Adyen)), None, now),
        payonce_reconciler::sweep::Decision::RetrySameKey,
        "Adyen still replays what it saved under the key"
    );
    for stripe_bound in [Some(ProcessorKind::Stripe), None] {
        match rec.decide(&doubt(stripe_bound), None, now) {
            payonce_reconciler::sweep::Decision::Escalate(why) => {
                assert!(why.contains("stripe"), "{why}")
            }
            other => panic!(
                "{stripe_bound:?}: Stripe forgot the key; a retry could pay twice: {other:?}"
            ),
        }
    }
}

#[tokio::test]
async fn both_stores_refuse_a_processor_they_do_not_know() {
    let (pg, url) = support::postgres_ledger().await;
    let pg_db = sqlx::PgPool::connect(&url).await.unwrap();
    let lite = payonce_ledger::sqlite::SqliteLedger::connect("sqlite::memory:")
        .await
        .unwrap();
    let lite_shared: SharedLedger = Arc::new(lite.clone());
    let pg_op = created(&pg, &tenant(), "INV-TP-CHECK").await;
    let lite_op = created(&lite_shared, &tenant(), "INV-TP-CHECK").await;
    for (op, known) in [
        ("stripe", true),
        ("adyen", true),
        ("paypal", false),
        ("", false),
    ] {
        let statements = [
            format!(
                "UPDATE operations SET processor = '{op}' WHERE id = '{}'",
                pg_op.id
            ),
            // A tenant of its own per name: only the check can refuse it.
            format!(
                "INSERT INTO tenant_processors (tenant_id, processor, updated_at) \
                 VALUES ('t-{op}', '{op}', 0)"
            ),
        ];
        for sql in &statements {
            let on_pg = sqlx::raw_sql(sqlx::AssertSqlSafe(sql.clone()))
                .execute(&pg_db)
                .await;
            let on_lite = sqlx::raw_sql(sqlx::AssertSqlSafe(
                sql.replace(pg_op.id.as_str(), lite_op.id.as_str()),
            ))
            .execute(lite.pool())
            .await;
            assert_eq!(on_pg.is_ok(), known, "postgres, {sql}: {on_pg:?}");
            assert_eq!(on_lite.is_ok(), known, "sqlite, {sql}: {on_lite:?}");
        }
    }
}

#[tokio::test]
async fn a_payment_the_scan_finds_at_another_processor_than_its_rows_goes_to_a_human() {
    let ledger = sqlite_ledger().await;
    let sim = simulator(SimulatorConfig::default()).await;
    ledger
        .profiles()
        .set_processor(&globex(), ProcessorKind::Adyen, now())
        .await
        .unwrap();
    let on_adyen = approved(&ledger, &created(&ledger, &globex(), "INV-TP-SCAN").await).await;
    let on_stripe = approved(&ledger, &created(&ledger, &tenant(), "INV-TP-SCAN2").await).await;
    // Money for each at Stripe: only for the Adyen-bound one is that a contradiction.
    let wrong = paid_at_stripe(&sim, &on_adyen).await;
    let right = paid_at_stripe(&sim, &on_stripe).await;
    let processors = stripe_and_adyen(stripe(&sim, None), "http://127.0.0.1:9");
    let rec = reconciler::build_serving(
        &ledger,
        processors,
        Arc::new(SystemClock),
        "rec-scan",
        |_| {},
    );
    let report = rec.sweep_once(false).await.unwrap();
    let scan = report.scan.expect("Stripe lists: the sweep scans it");
    assert!(scan.complete, "{scan:?}");
    let row = ledger.get(&globex(), &on_adyen.id).await.unwrap();
    assert_eq!(row.status, Status::NeedsAttention, "{row:?}");
    let why = row.failure_message.unwrap_or_default();
    assert!(
        why.contains(wrong["id"].as_str().unwrap()) && why.contains("bound to adyen"),
        "{why}"
    );
    // The Stripe-bound row meets no processor contradiction (the scan leaves a ready row to its
    // worker, whose same-key request the processor answers).
    let row = ledger.get(&tenant(), &on_stripe.id).await.unwrap();
    assert_eq!(row.status, Status::Ready, "{row:?}");
    assert_eq!(row.failure_message, None, "{row:?}");
    assert!(right["id"].as_str().is_some_and(|id| id.starts_with("pi_")));
}

//! Issue 13, defect 2: views by role. The stored PaymentIntent is kept whole as evidence, but every
//! route shows only its summary (`processor::summary`): never the client secret, charge, payment
//! method options or metadata, to any role. Assistant keys also get no audit trail.

use super::{T0_MS, spawn};
use crate::support::rows;
use crate::support::sqlite_ledger;
use payonce_core::clock::Clock;
use payonce_ledger::Paid;
use payonce_ledger::Recorded;
use payonce_reconciler::oncall::{self, Format};
use serde_json::json;

/// Strings of the stored object no view may contain.
const HIDDEN: &[&str] = &[
    "pi_v_secret_",
    "client_secret",
    "latest_charge",
    "ch_v",
    "payment_method_options",
    "metadata",
    "pm_card_visa_v",
];

#[tokio::test]
async fn every_role_and_route_sees_the_summary_never_the_client_secret() {
    let api = spawn(sqlite_ledger().await).await;
    let (id, c) = api.create_executing("INV-V1").await;
    let now = api.clock.now();
    let stored = json!({"id": "pi_v", "object": "payment_intent", "status": "succeeded", "amount": 2048,
        "amount_received": 2048, "currency": "usd", "customer": "cus_test", "created": T0_MS / 1000,
        "client_secret": "pi_v_secret_abc", "latest_charge": "ch_v", "payment_method": "pm_card_visa_v",
        "payment_method_options": {"card": {"request_three_d_secure": "automatic"}},
        "metadata": {"payonce_operation_id": id.as_str()}});
    let outcome = Recorded::Succeeded(Paid {
        reference: "pi_v".into(),
        result: stored.clone(),
    });
    rows::record(&api.ledger, &c, &outcome, "w", now).await;
    // The ledger keeps the whole object: the evidence is not thrown away, only never shown.
    let row = api.ledger.get_unscoped(&id).await.unwrap();
    assert_eq!(row.result.as_ref(), Some(&stored));

    let path = format!("/v1/operations/{id}");
    for (role, key) in [
        ("service", &api.service),
        ("assistant", &api.assistant),
        ("on_call", &api.on_call),
    ] {
        let r = api.get(&path, key).await;
        assert_eq!(r.status, 200, "{role}: {}", r.text);
        for hidden in HIDDEN {
            assert!(!r.text.contains(hidden), "{role} sees {hidden}: {}", r.text);
        }
        let view = r.json();
        assert_eq!(
            view["result"],
            json!({"id": "pi_v", "object": "payment_intent", "status": "succeeded", "amount": 2048,
                "amount_received": 2048, "currency": "usd", "customer": "cus_test", "created": T0_MS / 1000}),
            "{role}"
        );
        assert_eq!(
            view.get("events").is_some(),
            role != "assistant",
            "{role}: the audit trail is for service and on-call keys"
        );
    }
    // The execute answer (and through it every tool format) uses the same summary.
    let r = api
        .post(&format!("{path}/execute"), &api.assistant, json!({}))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    for hidden in HIDDEN {
        assert!(
            !r.text.contains(hidden),
            "execute shows {hidden}: {}",
            r.text
        );
    }
    assert_eq!(r.json()["result"]["id"], "pi_v");
    // The on-call CLI's JSON (show and list) serializes the same summary.
    let shown = oncall::show(api.ledger.as_ref(), None, &id, now, Format::Json)
        .await
        .unwrap();
    let listed = oncall::list(
        api.ledger.as_ref(),
        vec![payonce_core::state::Status::Succeeded],
        -1,
        10,
        now,
        Format::Json,
    )
    .await
    .unwrap();
    for (what, text) in [("show", &shown), ("list", &listed)] {
        assert!(text.contains("pi_v"), "{what}: {text}");
        for hidden in HIDDEN {
            assert!(
                !text.contains(hidden),
                "oncall {what} shows {hidden}: {text}"
            );
        }
    }
    api.stop().await;
}

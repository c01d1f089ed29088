//! The pages a customer sees (issue 38): the tenant's public profile (API and CLI, with every
//! role's and tenant's limits and bad input refused without a change), the merchant, the card and
//! the amount on the confirmation page, Decline, and refusals that say how to get a new link.

use super::confirm::{hidden_hash, page, submit};
use super::{OTHER_TENANT, TestApi, raw_details, spawn_on_postgres, spawn_with_processor, tenant};
use crate::support::postgres_ledger;
use crate::support::processes::{self};
use payonce_api::profile::DISPLAY_NAME_CHARS_MAX;
use payonce_core::id::{OperationId, TenantId};
use payonce_simulator::SimulatorConfig;
use serde_json::{Value, json};
use std::time::Duration;

const PROFILE: &str = "/v1/tenant/profile";

fn acme() -> Value {
    json!({"display_name": "Acme Hosting", "support_url": "https://acme.example/help",
           "support_email": "billing@acme.example"})
}

async fn put_profile(api: &TestApi, key: Option<&str>, body: Value) -> super::Reply {
    api.send("PUT", PROFILE, key, Some(body)).await
}

/// A payment in yen paid with the Mastercard test method.
async fn create_jpy(api: &TestApi, invoice: &str, amount: i64) -> Value {
    let mut details = raw_details(invoice, amount);
    details["currency"] = json!("jpy");
    details["payment_method"] = json!("pm_card_mastercard");
    details["description"] = json!("Annual hosting plan");
    let r = api
        .post(
            "/v1/operations",
            &api.service,
            json!({"business_key": format!("invoice:{invoice}:pay"), "details": details}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.json()
}

fn id(op: &Value) -> &str {
    op["id"].as_str().unwrap()
}

#[tokio::test]
async fn only_a_tenants_service_key_sets_its_profile_and_bad_input_changes_nothing() {
    let api = spawn_on_postgres().await;
    let unset = api.get(PROFILE, &api.service).await;
    assert_eq!(unset.status, 200, "{}", unset.text);
    assert_eq!(unset.json()["set"], false);
    assert_eq!(
        unset.json()["display_name"],
        tenant().as_str(),
        "what the pages show"
    );

    let set = put_profile(&api, Some(&api.service), acme()).await;
    assert_eq!(set.status, 200, "{}", set.text);
    let stored = api.get(PROFILE, &api.service).await.json();
    assert_eq!(stored["display_name"], "Acme Hosting");
    assert_eq!(stored["support_email"], "billing@acme.example");
    assert_eq!(stored["tenant"], tenant().as_str());

    // Every other role is refused, and no key at all is unauthorised.
    for (key, status) in [
        (Some(api.assistant.as_str()), 403),
        (Some(api.on_call.as_str()), 403),
        (None, 401),
    ] {
        let r = put_profile(&api, key, json!({"display_name": "Hijacked"})).await;
        assert_eq!(r.status, status, "{}", r.text);
        if let Some(key) = key {
            assert_eq!(api.get(PROFILE, key).await.status, 403);
        }
    }
    // Another tenant's service key sets its own tenant's profile, never this one's.
    let other = put_profile(
        &api,
        Some(&api.other_service),
        json!({"display_name": "Globex"}),
    )
    .await;
    assert_eq!(other.status, 200, "{}", other.text);
    assert_eq!(other.json()["tenant"], OTHER_TENANT);

    // Bad input: a clear 400 naming the field, and the stored profile is unchanged.
    let overlong = "n".repeat(DISPLAY_NAME_CHARS_MAX + 1);
    let bad = [
        (
            json!({"display_name": overlong}),
            "invalid_request",
            "display_name",
        ),
        (
            json!({"display_name": "<script>alert(1)</script>"}),
            "invalid_request",
            "no HTML",
        ),
        (
            json!({"display_name": "  "}),
            "invalid_request",
            "display_name",
        ),
        (
            json!({"display_name": "Acme", "support_url": "http://acme.example"}),
            "invalid_request",
            "https://",
        ),
        (
            json!({"display_name": "Acme", "support_url": "javascript:alert(1)"}),
            "invalid_request",
            "https://",
        ),
        (
            json!({"display_name": "Acme", "support_email": "not-an-address"}),
            "invalid_request",
            "support_email",
        ),
        (
            json!({"display_name": "Acme", "logo": "x"}),
            "invalid_json",
            "logo",
        ),
        (json!({}), "invalid_json", "display_name"),
    ];
    for (body, code, says) in bad {
        let r = put_profile(&api, Some(&api.service), body.clone()).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text);
        assert_eq!(r.json()["error"]["code"], code, "{body}: {}", r.text);
        assert!(r.text.contains(says), "{body}: {}", r.text);
    }
    assert_eq!(api.get(PROFILE, &api.service).await.json(), stored);
    api.stop().await;
}

#[tokio::test]
async fn an_unknown_currency_is_refused_and_creates_nothing() {
    let api = spawn_on_postgres().await;
    let before = api.operation_count().await;
    let mut details = raw_details("INV-X1", 100);
    details["currency"] = json!("xyz");
    let r = api
        .post(
            "/v1/operations",
            &api.service,
            json!({"business_key": "invoice:INV-X1:pay", "details": details}),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(r.text.contains("unsupported currency"), "{}", r.text);
    assert_eq!(api.operation_count().await, before);
    api.stop().await;
}

#[tokio::test]
async fn the_page_names_the_merchant_the_card_and_yen_as_people_read_them() {
    let sim = processes::simulator(SimulatorConfig::default()).await;
    let api = {
        let (ledger, database) = postgres_ledger().await;
        spawn_with_processor(ledger, processes::stripe(&sim, None))
            .await
            .holding(database)
    };
    assert_eq!(
        put_profile(&api, Some(&api.service), acme()).await.status,
        200
    );
    let op = create_jpy(&api, "INV-JP1", 1299).await;
    let url = api.signed_in(&api.link(id(&op)).await, id(&op));

    let shown = page(&api, &url).await;
    assert_eq!(shown.status, 200, "{}", shown.text);
    for expected in [
        "<dd id=\"payee\">Acme Hosting</dd>",
        "<div class=\"amount\" id=\"amount\">¥1,299</div>",
        "<dd id=\"card\">Mastercard ending in 4444</dd>",
        "<dd id=\"description\">Annual hosting plan</dd>",
        "<dd id=\"invoice\">INV-JP1</dd>",
        "id=\"decline\"",
        "href=\"mailto:billing@acme.example\"",
    ] {
        assert!(
            shown.text.contains(expected),
            "{expected} in {}",
            shown.text
        );
    }
    for never in ["cus_test", "pm_card", "1299.00", "JPY 1299"] {
        assert!(!shown.text.contains(never), "{never} on the page");
    }
    // The card is kept with the operation: a second view needs no processor.
    let kept = api
        .ledger
        .profiles()
        .card(&OperationId::parse(id(&op)).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (kept.brand.as_str(), kept.last4.as_str()),
        ("mastercard", "4444")
    );
    assert_eq!(kept.payment_method, "pm_card_mastercard");
    sim.shutdown().await;
    let again = page(&api, &url).await;
    assert!(
        again.text.contains("Mastercard ending in 4444"),
        "{}",
        again.text
    );

    // Without a processor answer the page still works, without the card line.
    let other = create_jpy(&api, "INV-JP2", 50).await;
    let other_url = api.signed_in(&api.link(id(&other)).await, id(&other));
    let no_card = page(&api, &other_url).await;
    assert_eq!(no_card.status, 200, "{}", no_card.text);
    assert!(no_card.text.contains("¥50"));
    assert!(!no_card.text.contains("id=\"card\""), "{}", no_card.text);
    api.stop().await;
}

#[tokio::test]
async fn declining_cancels_with_the_customers_proof_spends_the_link_and_the_assistant_says_so() {
    let api = spawn_on_postgres().await;
    assert_eq!(
        put_profile(&api, Some(&api.service), acme()).await.status,
        200
    );
    let op = api.create("INV-D1", 2048).await;
    let op_id = OperationId::parse(id(&op)).unwrap();
    let url = api.link(id(&op)).await;
    let assertion = api.assertion(id(&op), "cus_test", 60_000);
    let shown = page(&api, &format!("{url}?assertion={assertion}")).await;
    let hash = hidden_hash(&shown.text);

    // Without the customer's proof, a decline is refused like an approval and changes nothing.
    let unproven = submit(
        &api,
        &url,
        &[("details_hash", &hash), ("action", "decline")],
    )
    .await;
    assert_eq!(unproven.status, 401, "{}", unproven.text);
    assert_eq!(unproven.header("payonce-error-code"), "assertion_required");
    let still = api.ledger.get_unscoped(&op_id).await.unwrap();
    assert_eq!(still.status.as_str(), "awaiting_approval");
    // An action the form never offers is refused too.
    let odd = submit(
        &api,
        &url,
        &[
            ("details_hash", &hash),
            ("assertion", &assertion),
            ("action", "refund"),
        ],
    )
    .await;
    assert_eq!(odd.status, 409, "{}", odd.text);
    assert_eq!(
        api.ledger
            .get_unscoped(&op_id)
            .await
            .unwrap()
            .status
            .as_str(),
        "awaiting_approval"
    );

    let declined = submit(
        &api,
        &url,
        &[
            ("details_hash", &hash),
            ("assertion", &assertion),
            ("action", "decline"),
        ],
    )
    .await;
    assert_eq!(declined.status, 200, "{}", declined.text);
    assert!(
        declined.text.contains("<h1>Payment declined</h1>"),
        "{}",
        declined.text
    );
    assert!(declined.text.contains("$20.48"));
    let op_now = api.ledger.get_unscoped(&op_id).await.unwrap();
    assert_eq!(op_now.status.as_str(), "cancelled");
    assert_eq!(op_now.failure_code.as_deref(), Some("declined_by_customer"));
    assert!(
        api.ledger
            .latest_approval(&tenant(), &op_id)
            .await
            .unwrap()
            .is_none()
    );
    let last = api
        .ledger
        .events_unscoped(&op_id)
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert_eq!(last.event, "cancel");
    assert_eq!(last.actor, "customer:cus_test");
    let nonce = last
        .detail
        .as_deref()
        .and_then(|d| d.strip_prefix("signed_assertion:"))
        .unwrap_or_else(|| panic!("evidence recorded: {:?}", last.detail));
    assert_eq!(nonce.len(), 32, "the assertion's nonce");

    // The link is spent, and its page says how to reach the merchant.
    let spent = page(&api, &format!("{url}?assertion={assertion}")).await;
    assert_eq!(spent.status, 409);
    assert_eq!(spent.header("payonce-error-code"), "link_used");
    assert!(
        spent
            .text
            .contains("<p class=\"merchant\" id=\"merchant\">Acme Hosting</p>")
    );
    assert!(
        spent.text.contains("href=\"https://acme.example/help\""),
        "{}",
        spent.text
    );
    assert!(!spent.text.contains("<form"));

    // The assistant's next answer says the customer declined; nothing is paid.
    let answer = api
        .post(
            &format!("/v1/operations/{}/execute", id(&op)),
            &api.assistant,
            json!({}),
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    let answer = answer.json();
    assert_eq!(answer["outcome"], "cancelled");
    assert_eq!(answer["failure_code"], "declined_by_customer");
    assert_eq!(
        answer["message"],
        "The customer declined the payment of 20.48 USD for invoice INV-D1 on the confirmation page, so nothing was paid and nothing will be."
    );
    assert_eq!(answer["new_payment_submitted"], false);
    api.stop().await;
}

#[tokio::test]
async fn an_expired_link_says_what_happened_and_whom_to_ask() {
    let api = spawn_on_postgres().await;
    assert_eq!(
        put_profile(&api, Some(&api.service), acme()).await.status,
        200
    );
    let op = api.create("INV-E1", 2048).await;
    let url = api.signed_in(&api.link(id(&op)).await, id(&op));
    api.clock.advance(api_link_ttl() + Duration::from_secs(1));
    let expired = page(&api, &url).await;
    assert_eq!(expired.status, 410);
    assert_eq!(expired.header("payonce-error-code"), "link_expired");
    assert!(expired.text.contains("<h1>This link has expired</h1>"));
    assert!(
        expired.text.contains(
            "To get a new link or ask about this payment, contact Acme Hosting: \
             <a id=\"support-url\" href=\"https://acme.example/help\">https://acme.example/help</a> or \
             <a id=\"support-email\" href=\"mailto:billing@acme.example\">billing@acme.example</a>."
        ),
        "{}",
        expired.text
    );
    api.stop().await;
}

fn api_link_ttl() -> Duration {
    payonce_api::ApiConfig::default().link_ttl
}

#[tokio::test]
async fn the_operator_command_sets_a_profile_and_refuses_bad_input() {
    use crate::serve::{payonce, scratch};
    let dir = scratch("tenant-set-profile");
    let db = format!("sqlite:{}", dir.join("tenant.db").display());
    // Every command but migrate, serve and demo refuses a ledger that does not exist yet.
    crate::serve::migrate(&dir, &db, &[]).await;
    let run = |args: Vec<&str>| {
        let mut all = vec![
            "tenant",
            "--database-url",
            db.as_str(),
            "set-profile",
            "--tenant",
            "acme",
        ];
        all.extend(args);
        let mut command = payonce(&dir, &all);
        async move { command.output().await.unwrap() }
    };
    let set = run(vec![
        "--display-name",
        "Acme Hosting",
        "--support-email",
        "billing@acme.example",
    ])
    .await;
    assert!(set.status.success(), "{set:?}");
    let ledger = payonce_ledger::connect(&db, 1).await.unwrap();
    let acme = TenantId::parse("acme").unwrap();
    let stored = ledger.profiles().profile(&acme).await.unwrap().unwrap();
    assert_eq!(stored.display_name, "Acme Hosting");
    assert_eq!(
        stored.support_email.as_deref(),
        Some("billing@acme.example")
    );
    assert_eq!(stored.support_url, None);

    let overlong = "n".repeat(DISPLAY_NAME_CHARS_MAX + 1);
    for (args, says) in [
        (vec!["--display-name", "<b>Acme</b>"], "no HTML"),
        (
            vec!["--display-name", overlong.as_str()],
            "1 to 80 characters",
        ),
        (
            vec![
                "--display-name",
                "Acme",
                "--support-url",
                "ftp://acme.example",
            ],
            "https://",
        ),
    ] {
        let refused = run(args).await;
        assert!(!refused.status.success());
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(stderr.contains(says), "{stderr}");
    }
    assert_eq!(
        ledger.profiles().profile(&acme).await.unwrap().unwrap(),
        stored
    );
}

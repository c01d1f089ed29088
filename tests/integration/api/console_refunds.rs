//! Refunds in the on-call console: a payment's page lists its refunds beside it with the totals; a
//! refund's page names its payment and takes the approval of the signed-in person of the merchant
//! (session token and the shown details hash required; refusals change nothing).

use super::console::{csrf_of, get, post, sign_in};
use super::tenant;
use super::{T0, spawn};
use crate::support::refunds::succeeded_payment;
use crate::support::sqlite_ledger;
use payonce_core::id::OperationId;
use serde_json::json;

#[tokio::test]
async fn the_console_shows_refunds_beside_their_payment_and_an_on_call_person_approves_one() {
    let api = spawn(sqlite_ledger().await).await;
    let payment = succeeded_payment(&api.ledger, "INV-CR1", 2048, T0).await;
    let pid = payment.id.as_str().to_string();
    let create = |key: &'static str, amount: i64| {
        let api = &api;
        let pid = pid.clone();
        async move {
            let r = api
                .post("/v1/refunds", &api.service,
                      json!({"business_key": key, "payment_operation_id": pid, "amount": amount, "reason": "duplicate"}))
                .await;
            assert_eq!(r.status, 201, "{}", r.text);
            r.json()
        }
    };
    let refund = create("refund:CR1:a", 1000).await;
    let withdrawn = create("refund:CR1:b", 300).await;
    let rid = refund["id"].as_str().unwrap().to_string();
    let wid = withdrawn["id"].as_str().unwrap();
    let cancelled = api
        .post(
            &format!("/v1/operations/{wid}/cancel"),
            &api.service,
            json!({}),
        )
        .await;
    assert_eq!(cancelled.status, 200);

    let session = sign_in(&api, &api.on_call).await;
    let page = get(&api, &format!("/console/operations/{pid}"), Some(&session)).await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(page.text.contains("id=\"refunds\""), "{}", page.text);
    assert!(
        page.text
            .contains("2 refund(s): refunded 0.00 USD, in flight 10.00 USD, refundable 10.48 USD"),
        "{}",
        page.text
    );
    for id in [&rid, wid] {
        assert!(
            page.text
                .contains(&format!("href=\"/console/operations/{id}\"")),
            "{}",
            page.text
        );
    }
    assert!(
        !page.text.contains("approve-refund"),
        "a payment has no refund approval"
    );

    let page = get(&api, &format!("/console/operations/{rid}"), Some(&session)).await;
    assert_eq!(page.status, 200);
    assert!(
        page.text
            .contains(&format!("href=\"/console/operations/{pid}\"")),
        "{}",
        page.text
    );
    assert!(page.text.contains("pi_INV-CR1"));
    assert!(page.text.contains("id=\"approve-refund\""), "{}", page.text);
    let csrf = csrf_of(&api, &session).await;
    let path = format!("/console/operations/{rid}/approve-refund");
    let hash = refund["details_hash"].as_str().unwrap();
    let status = || {
        let api = &api;
        let rid = rid.clone();
        async move {
            api.get(&format!("/v1/operations/{rid}"), &api.service)
                .await
                .json()["status"]
                .clone()
        }
    };

    // Refusals change nothing: no session token, a hash that is not the refund's, a payment's id.
    let no_token = post(&api, &path, &session, &[("details_hash", hash)]).await;
    assert_eq!((no_token.status, no_token.code()), (403, "forbidden"));
    let zeros = "0".repeat(64);
    let wrong = post(
        &api,
        &path,
        &session,
        &[("csrf", &csrf), ("details_hash", &zeros)],
    )
    .await;
    assert_eq!((wrong.status, wrong.code()), (409, "approval_mismatch"));
    let no_hash = post(&api, &path, &session, &[("csrf", &csrf)]).await;
    assert_eq!((no_hash.status, no_hash.code()), (400, "invalid_request"));
    let of_payment = post(
        &api,
        &format!("/console/operations/{pid}/approve-refund"),
        &session,
        &[
            ("csrf", &csrf),
            ("details_hash", payment.details_hash.as_str()),
        ],
    )
    .await;
    assert_eq!(
        (of_payment.status, of_payment.code()),
        (404, "operation_not_found")
    );
    assert_eq!(status().await, "awaiting_approval");

    let approved = post(
        &api,
        &path,
        &session,
        &[("csrf", &csrf), ("details_hash", hash)],
    )
    .await;
    assert_eq!(approved.status, 303, "{}", approved.text);
    assert_eq!(approved.location(), format!("/console/operations/{rid}"));
    assert_eq!(status().await, "ready");
    let stored = api
        .ledger
        .latest_approval(&tenant(), &OperationId::parse(&rid).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (stored.method.as_str(), stored.approved_by.as_str()),
        ("console", "on_call:alice")
    );
    let page = get(&api, &format!("/console/operations/{rid}"), Some(&session)).await;
    assert!(
        !page.text.contains("id=\"approve-refund\""),
        "approved: no form any more"
    );
    let again = post(
        &api,
        &path,
        &session,
        &[("csrf", &csrf), ("details_hash", hash)],
    )
    .await;
    assert_eq!(again.status, 303, "approving twice is the same approval");

    // Declining a proposal frees its money: refused without the session token and for a payment.
    let proposal = create("refund:CR1:c", 1048).await;
    let cid = proposal["id"].as_str().unwrap().to_string();
    let page = get(&api, &format!("/console/operations/{cid}"), Some(&session)).await;
    assert!(page.text.contains("id=\"decline-refund\""), "{}", page.text);
    let decline = format!("/console/operations/{cid}/decline-refund");
    let no_token = post(&api, &decline, &session, &[]).await;
    assert_eq!((no_token.status, no_token.code()), (403, "forbidden"));
    let of_payment = post(
        &api,
        &format!("/console/operations/{pid}/decline-refund"),
        &session,
        &[("csrf", &csrf)],
    )
    .await;
    assert_eq!(
        (of_payment.status, of_payment.code()),
        (404, "operation_not_found")
    );
    let payment_status = api
        .get(&format!("/v1/operations/{pid}"), &api.service)
        .await
        .json()["status"]
        .clone();
    assert_eq!(payment_status, "succeeded");
    assert_eq!(
        status_of_in(&api, &cid).await,
        "awaiting_approval",
        "refusals declined nothing"
    );
    let declined = post(&api, &decline, &session, &[("csrf", &csrf)]).await;
    assert_eq!(declined.status, 303, "{}", declined.text);
    let read = api
        .get(&format!("/v1/operations/{cid}"), &api.service)
        .await
        .json();
    assert_eq!(read["status"], "cancelled");
    let last = read["events"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (last["event"].as_str(), last["actor"].as_str()),
        (Some("cancel"), Some("on_call:alice"))
    );
    let page = get(&api, &format!("/console/operations/{pid}"), Some(&session)).await;
    assert!(
        page.text
            .contains("3 refund(s): refunded 0.00 USD, in flight 10.00 USD, refundable 10.48 USD"),
        "{}",
        page.text
    );
    // The approved refund is past the decision: its page offers no form.
    let page = get(&api, &format!("/console/operations/{rid}"), Some(&session)).await;
    assert!(!page.text.contains("id=\"decline-refund\""));
    api.stop().await;
}

async fn status_of_in(api: &super::TestApi, id: &str) -> serde_json::Value {
    api.get(&format!("/v1/operations/{id}"), &api.service)
        .await
        .json()["status"]
        .clone()
}

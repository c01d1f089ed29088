//! Priorities and scheduled payments at the intake (issue 51): `priority`, `not_before` and
//! `not_before_ms` on `POST /v1/operations` (alone and through the group commit) and on each item
//! of its batch; their defaults (single: interactive, batch: bulk), the claim that waits for
//! `not_before`, the approval that lasts its TTL from `not_before` (create, approve route,
//! confirmation page), and every bad value refused naming its field with nothing written. On
//! SQLite and on Postgres.

use super::confirm::{hidden_hash, page, submit};
use super::{T0, TestApi, raw_details, spawn, spawn_on_postgres, tenant};
use crate::support::rows::holder;
use crate::support::sqlite_ledger;
use payonce_api::config::APPROVAL_TTL_DEFAULT;
use payonce_core::clock::Timestamp;
use payonce_core::details::{Details, RawDetails};
use payonce_core::id::{BusinessKey, OperationId};
use payonce_core::priority::{NOT_BEFORE_HORIZON, NOT_BEFORE_PAST_TOLERANCE, Priority};
use serde_json::{Value, json};
use std::time::Duration;

const BATCH: &str = "/v1/operations/batch";
/// The test clock's now (2027-01-15T08:00:00Z) in RFC 3339, and the 1st of next month.
const FIRST_OF_NEXT_MONTH: &str = "2027-02-01T00:00:00Z";
const FIRST_OF_NEXT_MONTH_MS: i64 = 1_801_440_000_000;
const DAY: Duration = Duration::from_secs(86_400);

/// The test both stores run: an API on SQLite, then one on Postgres.
async fn on_both_stores<F, Fut>(check: F)
where
    F: Fn(TestApi) -> Fut,
    Fut: Future<Output = TestApi>,
{
    check(spawn(sqlite_ledger().await).await).await.stop().await;
    check(spawn_on_postgres().await).await.stop().await;
}

fn hash_of(details: &Value) -> String {
    let raw: RawDetails = serde_json::from_value(details.clone()).unwrap();
    Details::parse(&raw).unwrap().hash().as_str().to_string()
}

/// A create body for `invoice`, approved by the service's mandate when `approved`, with `extra`
/// fields.
fn body(invoice: &str, approved: bool, extra: Value) -> Value {
    let mut body = json!({"business_key": format!("invoice:{invoice}:pay"), "details": raw_details(invoice, 2048)});
    if approved {
        body["approval"] = json!({"details_hash": hash_of(&body["details"]), "approved_by": format!("mandate:{invoice}")});
    }
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

fn id_of(op: &Value) -> OperationId {
    OperationId::parse(op["id"].as_str().unwrap()).unwrap()
}

/// The ledger's row of `op`.
async fn row(api: &TestApi, op: &Value) -> payonce_ledger::Operation {
    api.ledger.get(&tenant(), &id_of(op)).await.unwrap()
}

/// Whether the ledger holds a row under `invoice`'s business key.
async fn exists(api: &TestApi, invoice: &str) -> bool {
    let key = BusinessKey::parse(&format!("invoice:{invoice}:pay")).unwrap();
    let id = crate::support::key_secret().operation_id_for(&tenant(), &key);
    api.ledger.get(&tenant(), &id).await.is_ok()
}

#[tokio::test]
async fn a_single_create_is_interactive_and_a_batch_item_bulk_unless_told() {
    on_both_stores(|api| async move {
        let single = api
            .post("/v1/operations", &api.service, body("S1", false, json!({})))
            .await;
        assert_eq!(single.status, 201, "{}", single.text);
        assert_eq!(single.json()["priority"], "interactive");
        assert_eq!(single.json()["not_before_ms"], Value::Null);
        let bulk = api
            .post(
                "/v1/operations",
                &api.service,
                body("S2", true, json!({"priority": "bulk"})),
            )
            .await;
        assert_eq!(bulk.status, 201, "{}", bulk.text);
        assert_eq!(bulk.json()["priority"], "bulk");
        assert_eq!(bulk.json()["status"], "ready");
        let batch = api
            .post(
                BATCH,
                &api.service,
                json!({"operations": [
                    body("B1", true, json!({})),
                    body("B2", false, json!({"priority": "interactive"})),
                ]}),
            )
            .await;
        assert_eq!(batch.status, 200, "{}", batch.text);
        let results = batch.json()["results"].clone();
        assert_eq!(results[0]["status"], 201, "{results}");
        assert_eq!(results[0]["operation"]["priority"], "bulk");
        assert_eq!(results[1]["status"], 201, "{results}");
        assert_eq!(results[1]["operation"]["priority"], "interactive");
        // Stored, and shown on a read.
        let expected = [
            (single.json(), Priority::Interactive),
            (bulk.json(), Priority::Bulk),
            (results[0]["operation"].clone(), Priority::Bulk),
            (results[1]["operation"].clone(), Priority::Interactive),
        ];
        for (op, priority) in expected {
            assert_eq!(row(&api, &op).await.priority, priority);
            assert_eq!(row(&api, &op).await.not_before, None);
            let read = api
                .get(
                    &format!("/v1/operations/{}", id_of(&op).as_str()),
                    &api.service,
                )
                .await;
            assert_eq!(read.json()["priority"], priority.as_str());
        }
        api
    })
    .await;
}

#[tokio::test]
async fn a_scheduled_payment_is_not_claimed_before_not_before_and_its_approval_lasts_from_it() {
    on_both_stores(|api| async move {
        // Created with its mandate (the group commit's path), for the 1st of next month.
        let r = api
            .post(
                "/v1/operations",
                &api.service,
                body("SCH-1", true, json!({"not_before": FIRST_OF_NEXT_MONTH})),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        let op = r.json();
        let at = Timestamp::from_millis(FIRST_OF_NEXT_MONTH_MS);
        assert_eq!(op["status"], "ready");
        assert_eq!(op["priority"], "interactive");
        assert_eq!(op["not_before_ms"], FIRST_OF_NEXT_MONTH_MS);
        assert_eq!(
            op["approval_expires_at_ms"],
            (at + APPROVAL_TTL_DEFAULT).as_millis()
        );
        let stored = row(&api, &op).await;
        assert_eq!(stored.not_before, Some(at));
        assert_eq!(stored.approval_expires_at, Some(at + APPROVAL_TTL_DEFAULT));
        let approval = api
            .ledger
            .latest_approval(&tenant(), &id_of(&op))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(approval.expires_at, at + APPROVAL_TTL_DEFAULT);

        // The ledger's claim takes its now: nothing a millisecond before, the row at not_before.
        let worker = holder("w", Duration::from_secs(30));
        let before = Timestamp::from_millis(FIRST_OF_NEXT_MONTH_MS - 1);
        let early = api
            .ledger
            .claim_to_submit(&worker, 10, before)
            .await
            .unwrap();
        assert!(early.is_empty(), "claimed before not_before: {early:?}");
        let due = api.ledger.claim_to_submit(&worker, 10, at).await.unwrap();
        assert_eq!(
            due.iter().map(|c| c.id.clone()).collect::<Vec<_>>(),
            vec![id_of(&op)]
        );
        api
    })
    .await;
}

#[tokio::test]
async fn every_approval_of_a_scheduled_payment_lasts_its_ttl_from_not_before() {
    on_both_stores(|api| async move {
        let in_3_days = T0 + 3 * DAY;
        let in_5_days = T0 + 5 * DAY;
        // A batch: each item keeps its own not_before and expiry; an item due now expires a TTL
        // from now.
        let batch = api
            .post(
                BATCH,
                &api.service,
                json!({"operations": [
                    body("BX-1", true, json!({"not_before_ms": in_3_days.as_millis()})),
                    body("BX-2", true, json!({})),
                    body("BX-3", true, json!({"not_before": "2027-01-20T08:00:00Z"})),
                ]}),
            )
            .await;
        assert_eq!(batch.status, 200, "{}", batch.text);
        let results = batch.json()["results"].clone();
        let expected = [
            (Some(in_3_days), in_3_days + APPROVAL_TTL_DEFAULT),
            (None, T0 + APPROVAL_TTL_DEFAULT),
            (Some(in_5_days), in_5_days + APPROVAL_TTL_DEFAULT),
        ];
        for (i, (not_before, expires)) in expected.into_iter().enumerate() {
            let op = &results[i]["operation"];
            assert_eq!(results[i]["status"], 201, "{results}");
            assert_eq!(op["priority"], "bulk");
            assert_eq!(row(&api, op).await.not_before, not_before, "item {i}");
            assert_eq!(
                row(&api, op).await.approval_expires_at,
                Some(expires),
                "item {i}"
            );
            let approval = api
                .ledger
                .latest_approval(&tenant(), &id_of(op))
                .await
                .unwrap();
            assert_eq!(approval.unwrap().expires_at, expires, "item {i}");
        }

        // Created without approval, then approved by the service route.
        let created = api
            .post(
                "/v1/operations",
                &api.service,
                body(
                    "AP-1",
                    false,
                    json!({"not_before_ms": in_3_days.as_millis()}),
                ),
            )
            .await;
        assert_eq!(created.status, 201, "{}", created.text);
        let op = created.json();
        assert_eq!(op["approval_expires_at_ms"], Value::Null);
        let approved = api
            .post(
                &format!("/v1/operations/{}/approve", id_of(&op).as_str()),
                &api.service,
                json!({"details_hash": op["details_hash"], "approved_by": "customer:cus_test"}),
            )
            .await;
        assert_eq!(approved.status, 200, "{}", approved.text);
        assert_eq!(
            approved.json()["approval_expires_at_ms"],
            (in_3_days + APPROVAL_TTL_DEFAULT).as_millis()
        );

        // A batch approving an existing scheduled row (the batch's update of a row awaiting).
        let existing = api
            .post(
                "/v1/operations",
                &api.service,
                body(
                    "AP-2",
                    false,
                    json!({"not_before_ms": in_5_days.as_millis()}),
                ),
            )
            .await;
        assert_eq!(existing.status, 201, "{}", existing.text);
        let again = api
            .post(
                BATCH,
                &api.service,
                json!({"operations": [body("AP-2", true, json!({}))]}),
            )
            .await;
        let result = again.json()["results"][0].clone();
        assert_eq!(result["status"], 200, "{result}");
        assert_eq!(result["operation"]["status"], "ready");
        assert_eq!(
            result["operation"]["approval_expires_at_ms"],
            (in_5_days + APPROVAL_TTL_DEFAULT).as_millis()
        );
        let approval = api
            .ledger
            .latest_approval(&tenant(), &id_of(&result["operation"]))
            .await
            .unwrap();
        assert_eq!(
            approval.unwrap().expires_at,
            in_5_days + APPROVAL_TTL_DEFAULT
        );

        // The customer's approval on the confirmation page.
        let created = api
            .post(
                "/v1/operations",
                &api.service,
                body(
                    "CF-1",
                    false,
                    json!({"priority": "bulk", "not_before_ms": in_3_days.as_millis()}),
                ),
            )
            .await;
        let op = created.json();
        let url = api.link(op["id"].as_str().unwrap()).await;
        let assertion = api.assertion(op["id"].as_str().unwrap(), "cus_test", 60_000);
        let shown = page(&api, &format!("{url}?assertion={assertion}")).await;
        let hash = hidden_hash(&shown.text);
        let form = [
            ("details_hash", hash.as_str()),
            ("assertion", assertion.as_str()),
        ];
        let done = submit(&api, &url, &form).await;
        assert_eq!(done.status, 200, "{}", done.text);
        let stored = row(&api, &op).await;
        assert_eq!(
            stored.approval_expires_at,
            Some(in_3_days + APPROVAL_TTL_DEFAULT)
        );
        assert_eq!(
            stored.priority,
            Priority::Interactive,
            "a customer waits for it now"
        );
        api
    })
    .await;
}

/// Every bad schedule value: the field, the value, and how the message starts.
fn bad_values() -> Vec<(&'static str, Value, &'static str)> {
    let now = T0.as_millis();
    let too_far_back = now - NOT_BEFORE_PAST_TOLERANCE.as_millis() as i64 - 1_000;
    let beyond = now + NOT_BEFORE_HORIZON.as_millis() as i64 + 1;
    vec![
        (
            "priority",
            json!("urgent"),
            "priority: must be \"interactive\" or \"bulk\"; got \"urgent\"",
        ),
        (
            "priority",
            json!(0),
            "priority: must be the string \"interactive\" or \"bulk\"; got a number",
        ),
        (
            "not_before",
            json!(now + 1_000),
            "not_before: must be an RFC 3339 string",
        ),
        (
            "not_before",
            json!("2027-02-01"),
            "not_before: must be an RFC 3339 time with its offset",
        ),
        (
            "not_before",
            json!("2027-01-15T07:49:59Z"),
            "not_before: not_before lies 601 s in the past",
        ),
        (
            "not_before",
            json!("2028-01-17T08:00:00Z"),
            "not_before: not_before lies more than 366 days ahead",
        ),
        (
            "not_before_ms",
            json!(FIRST_OF_NEXT_MONTH),
            "not_before_ms: must be an integer",
        ),
        (
            "not_before_ms",
            json!(too_far_back),
            "not_before_ms: not_before lies 601 s in the past",
        ),
        (
            "not_before_ms",
            json!(beyond),
            "not_before_ms: not_before lies more than 366 days ahead",
        ),
    ]
}

#[tokio::test]
async fn a_bad_schedule_is_refused_naming_its_field_and_writes_nothing() {
    on_both_stores(|api| async move {
        for (n, (field, value, message)) in bad_values().into_iter().enumerate() {
            for approved in [false, true] {
                let invoice = format!("BAD-{n}-{approved}");
                let r = api
                    .post(
                        "/v1/operations",
                        &api.service,
                        body(&invoice, approved, json!({field: value})),
                    )
                    .await;
                assert_eq!(r.status, 400, "{field}={value}: {}", r.text);
                assert_eq!(r.code(), "invalid_request", "{}", r.text);
                let said = r.json()["error"]["message"].as_str().unwrap().to_string();
                assert!(said.starts_with(message), "{field}={value}: {said}");
                assert!(!exists(&api, &invoice).await, "{field}={value} wrote a row");
            }
        }
        let both = body(
            "BOTH",
            false,
            json!({"not_before": FIRST_OF_NEXT_MONTH, "not_before_ms": FIRST_OF_NEXT_MONTH_MS}),
        );
        let r = api.post("/v1/operations", &api.service, both).await;
        assert_eq!(r.status, 400);
        assert_eq!(
            r.json()["error"]["message"],
            "not_before, not_before_ms: give at most one of them"
        );
        assert!(!exists(&api, "BOTH").await);
        assert_eq!(api.operation_count().await, 0);

        // In a batch, the bad item is answered 400 naming its place and field, and not written;
        // the others are written, as for any refused item of the route.
        let mut items = vec![body("OK-0", true, json!({}))];
        for (n, (field, value, _)) in bad_values().into_iter().enumerate() {
            items.push(body(&format!("BB-{n}"), true, json!({field: value})));
        }
        let r = api
            .post(BATCH, &api.service, json!({"operations": items}))
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        let answer = r.json();
        assert_eq!(answer["results"][0]["status"], 201, "{answer}");
        for (n, (field, value, message)) in bad_values().into_iter().enumerate() {
            let item = &answer["results"][n + 1];
            assert_eq!(item["index"], n + 1);
            assert_eq!(item["status"], 400, "{field}={value}: {item}");
            assert_eq!(item["error"]["code"], "invalid_request");
            let said = item["error"]["message"].as_str().unwrap();
            assert!(
                said.strip_prefix(&format!("operations[{}].", n + 1))
                    .unwrap()
                    .starts_with(message),
                "{field}={value}: {said}"
            );
            assert!(
                !exists(&api, &format!("BB-{n}")).await,
                "{field}={value} wrote a row"
            );
        }
        assert_eq!(answer["summary"]["created"], 1);
        assert_eq!(answer["summary"]["invalid"], bad_values().len());
        assert_eq!(api.operation_count().await, 1);
        api
    })
    .await;
}

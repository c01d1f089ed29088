//! JSON rendering of the Stripe objects the simulator serves: PaymentIntent, Refund, Event, lists.
//! Field names and enum values follow Stripe's spec (see `tests/fixtures/stripe/`).

use crate::rng::IdGen;
use crate::store::{NewEvent, PaymentRow};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// The API version the simulator speaks and stamps on events when the request pinned none.
pub(crate) const API_VERSION: &str = "2026-10-28.endive";

fn parse_json(raw: Option<&str>) -> Value {
    raw.and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or(Value::Null)
}

/// A PaymentIntent object.
pub(crate) fn payment_intent(row: &PaymentRow) -> Value {
    let metadata: Value = serde_json::from_str(&row.metadata).unwrap_or_else(|_| json!({}));
    let processing = if row.status == "processing" {
        json!({ "type": "card" })
    } else {
        Value::Null
    };
    json!({
        "id": row.id,
        "object": "payment_intent",
        "amount": row.amount,
        "amount_capturable": 0,
        "amount_received": row.amount_received,
        "application": null,
        "application_fee_amount": null,
        "automatic_payment_methods": null,
        "canceled_at": null,
        "cancellation_reason": null,
        "capture_method": "automatic",
        "client_secret": row.client_secret,
        "confirmation_method": "automatic",
        "created": row.created,
        "currency": row.currency,
        "customer": row.customer,
        "description": row.description,
        "last_payment_error": parse_json(row.last_payment_error.as_deref()),
        "latest_charge": row.latest_charge,
        "livemode": false,
        "metadata": metadata,
        "next_action": parse_json(row.next_action.as_deref()),
        "on_behalf_of": null,
        "payment_method": row.payment_method,
        "payment_method_options": {},
        "payment_method_types": ["card"],
        "processing": processing,
        "receipt_email": null,
        "review": null,
        "setup_future_usage": null,
        "shipping": null,
        "statement_descriptor": null,
        "statement_descriptor_suffix": null,
        "status": row.status,
        "transfer_data": row.transfer_destination.as_ref().map(|d| json!({ "destination": d })),
        "transfer_group": null,
    })
}

/// A PaymentIntent object's JSON text: the bytes `serde_json::to_vec(&payment_intent(row))` gives,
/// written from the row without building the object's tree first (its fields below in the sorted
/// order a `Value`'s keys are written in). A payment's create renders its PaymentIntent this way
/// once, for its answer and both its events; every other reader keeps [`payment_intent`].
pub(crate) fn payment_intent_json(row: &PaymentRow) -> Vec<u8> {
    let metadata: Value = serde_json::from_str(&row.metadata).unwrap_or_else(|_| json!({}));
    let text = PaymentIntentText {
        amount: row.amount,
        amount_capturable: 0,
        amount_received: row.amount_received,
        application: (),
        application_fee_amount: (),
        automatic_payment_methods: (),
        canceled_at: (),
        cancellation_reason: (),
        capture_method: "automatic",
        client_secret: &row.client_secret,
        confirmation_method: "automatic",
        created: row.created,
        currency: &row.currency,
        customer: row.customer.as_deref(),
        description: row.description.as_deref(),
        id: &row.id,
        last_payment_error: parse_json(row.last_payment_error.as_deref()),
        latest_charge: row.latest_charge.as_deref(),
        livemode: false,
        metadata,
        next_action: parse_json(row.next_action.as_deref()),
        object: "payment_intent",
        on_behalf_of: (),
        payment_method: row.payment_method.as_deref(),
        payment_method_options: Map::new(),
        payment_method_types: ["card"],
        processing: (row.status == "processing").then_some(Processing { kind: "card" }),
        receipt_email: (),
        review: (),
        setup_future_usage: (),
        shipping: (),
        statement_descriptor: (),
        statement_descriptor_suffix: (),
        status: &row.status,
        transfer_data: row
            .transfer_destination
            .as_deref()
            .map(|destination| TransferData { destination }),
        transfer_group: (),
    };
    serde_json::to_vec(&text).unwrap_or_default()
}

/// [`payment_intent`]'s fields in the order its keys are written (sorted); `()` is `null`.
#[derive(serde::Serialize)]
struct PaymentIntentText<'a> {
    amount: i64,
    amount_capturable: i64,
    amount_received: i64,
    application: (),
    application_fee_amount: (),
    automatic_payment_methods: (),
    canceled_at: (),
    cancellation_reason: (),
    capture_method: &'static str,
    client_secret: &'a str,
    confirmation_method: &'static str,
    created: i64,
    currency: &'a str,
    customer: Option<&'a str>,
    description: Option<&'a str>,
    id: &'a str,
    last_payment_error: Value,
    latest_charge: Option<&'a str>,
    livemode: bool,
    metadata: Value,
    next_action: Value,
    object: &'static str,
    on_behalf_of: (),
    payment_method: Option<&'a str>,
    payment_method_options: Map<String, Value>,
    payment_method_types: [&'static str; 1],
    processing: Option<Processing>,
    receipt_email: (),
    review: (),
    setup_future_usage: (),
    shipping: (),
    statement_descriptor: (),
    statement_descriptor_suffix: (),
    status: &'a str,
    transfer_data: Option<TransferData<'a>>,
    transfer_group: (),
}

#[derive(serde::Serialize)]
struct Processing {
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(serde::Serialize)]
struct TransferData<'a> {
    destination: &'a str,
}

/// What a Refund object is rendered from.
#[derive(Debug, Clone)]
pub(crate) struct RefundFields<'a> {
    pub(crate) id: &'a str,
    pub(crate) pi: &'a PaymentRow,
    pub(crate) amount: i64,
    pub(crate) created: i64,
    pub(crate) reason: Option<&'a str>,
    pub(crate) metadata: &'a BTreeMap<String, String>,
    /// `pending` or `succeeded` at creation.
    pub(crate) status: &'a str,
}

/// A Refund object.
pub(crate) fn refund(f: &RefundFields<'_>) -> Value {
    json!({
        "id": f.id,
        "object": "refund",
        "amount": f.amount,
        "balance_transaction": null,
        "charge": f.pi.latest_charge,
        "created": f.created,
        "currency": f.pi.currency,
        "description": null,
        "destination_details": null,
        "metadata": f.metadata,
        "payment_intent": f.pi.id,
        "pending_reason": if f.status == "pending" { json!("processing") } else { Value::Null },
        "reason": f.reason,
        "receipt_number": null,
        "source_transfer_reversal": null,
        "status": f.status,
        "transfer_reversal": null,
    })
}

/// Why a refund of the simulator fails asynchronously (one of Stripe's documented `failure_reason`s).
pub(crate) const REFUND_FAILURE_REASON: &str = "expired_or_canceled_card";

/// A stored Refund object moved to its final status `to`: `failure_reason` when it failed, no
/// `pending_reason` any more.
pub(crate) fn refund_settled(mut refund: Value, to: &str) -> Value {
    if let Some(obj) = refund.as_object_mut() {
        obj.insert("status".into(), json!(to));
        obj.insert("pending_reason".into(), Value::Null);
        if to == "failed" {
            obj.insert("failure_reason".into(), json!(REFUND_FAILURE_REASON));
            obj.insert("failure_balance_transaction".into(), Value::Null);
        }
    }
    refund
}

/// A charge-shaped object for `charge.refunded` (only the fields a consumer needs).
pub(crate) fn charge(pi: &PaymentRow, amount_refunded: i64) -> Value {
    json!({
        "id": pi.latest_charge,
        "object": "charge",
        "amount": pi.amount,
        "amount_captured": pi.amount_received,
        "amount_refunded": amount_refunded,
        "currency": pi.currency,
        "customer": pi.customer,
        "metadata": serde_json::from_str::<Value>(&pi.metadata).unwrap_or_else(|_| json!({})),
        "paid": true,
        "payment_intent": pi.id,
        "refunded": amount_refunded >= pi.amount_received,
        "status": "succeeded",
    })
}

/// Who caused an event.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EventCause<'a> {
    /// The API request id (`req_...`).
    pub(crate) request_id: Option<&'a str>,
    /// Its Idempotency-Key.
    pub(crate) idempotency_key: Option<&'a str>,
    /// The API version to stamp.
    pub(crate) api_version: &'a str,
}

/// An Event object; for an update, `data.previous_attributes` holds the changed fields' old values.
pub(crate) fn event_with_previous(
    id: &str,
    created: i64,
    kind: &str,
    object: Value,
    previous: Option<Value>,
    cause: EventCause<'_>,
) -> Value {
    // `object` and `previous` are moved into place: naming a `Value` inside `json!` would copy it
    // through the serializer (measured: a tenth of the simulator's CPU per payment went to those copies).
    let mut data = Map::new();
    data.insert("object".into(), object);
    if let Some(previous) = previous {
        data.insert("previous_attributes".into(), previous);
    }
    let mut event = Map::new();
    event.insert("id".into(), id.into());
    event.insert("object".into(), "event".into());
    event.insert("account".into(), Value::Null);
    event.insert("api_version".into(), cause.api_version.into());
    event.insert("created".into(), created.into());
    event.insert("data".into(), Value::Object(data));
    event.insert("livemode".into(), false.into());
    event.insert("pending_webhooks".into(), 0.into());
    event.insert(
        "request".into(),
        json!({ "id": cause.request_id, "idempotency_key": cause.idempotency_key }),
    );
    event.insert("type".into(), kind.into());
    Value::Object(event)
}

/// A Stripe Event to store (its body rendered now, `previous` the changed fields' old values), with
/// a fresh id.
pub(crate) fn new_event(
    ids: &IdGen,
    created: i64,
    kind: &'static str,
    object: Value,
    previous: Option<Value>,
    cause: EventCause<'_>,
) -> NewEvent {
    let id = ids.id("evt");
    let body = serde_json::to_vec(&event_with_previous(
        &id, created, kind, object, previous, cause,
    ))
    .unwrap_or_default();
    NewEvent {
        id,
        created,
        kind,
        body,
    }
}

/// An Event object's JSON text for an object already rendered (`object_json`, compact JSON): the
/// bytes `serde_json::to_vec(&event_with_previous(.., None, ..))` gives (the same keys, in the same sorted order), without
/// a copy of the object's tree per event and a second rendering of it. A payment's create renders
/// its PaymentIntent once for its answer and its two events (measured: the copies and renderings
/// were about a seventh of the simulator's instructions per payment).
pub(crate) fn event_json(
    id: &str,
    created: i64,
    kind: &str,
    object_json: &[u8],
    cause: EventCause<'_>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(object_json.len() + 256);
    // Strings go through serde_json so they are escaped exactly as a `Value`'s would be.
    let text = |out: &mut Vec<u8>, s: Option<&str>| {
        // Writing to a Vec fails only if a string cannot be rendered, which a &str always can.
        let _ = serde_json::to_writer(&mut *out, &s);
    };
    out.extend_from_slice(b"{\"account\":null,\"api_version\":");
    text(&mut out, Some(cause.api_version));
    out.extend_from_slice(b",\"created\":");
    out.extend_from_slice(created.to_string().as_bytes());
    out.extend_from_slice(b",\"data\":{\"object\":");
    out.extend_from_slice(object_json);
    out.extend_from_slice(b"},\"id\":");
    text(&mut out, Some(id));
    out.extend_from_slice(
        b",\"livemode\":false,\"object\":\"event\",\"pending_webhooks\":0,\"request\":{\"id\":",
    );
    text(&mut out, cause.request_id);
    out.extend_from_slice(b",\"idempotency_key\":");
    text(&mut out, cause.idempotency_key);
    out.extend_from_slice(b"},\"type\":");
    text(&mut out, Some(kind));
    out.push(b'}');
    out
}

/// A list page.
pub(crate) fn list(url: &str, data: Vec<Value>, has_more: bool) -> Value {
    json!({ "object": "list", "data": data, "has_more": has_more, "url": url })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(status: &str) -> PaymentRow {
        PaymentRow {
            seq: 7,
            id: "pi_3Nxyz".into(),
            created: 1_700_000_000,
            created_ms: 1_700_000_000_123,
            amount: 2048,
            currency: "usd".into(),
            customer: Some("cus_1".into()),
            description: Some("March \"&\" April \u{e9}\n".into()),
            payment_method: Some("pm_card_visa".into()),
            status: status.into(),
            metadata: r#"{"payonce_invoice":"INV-1","payonce_operation_id":"op_1"}"#.into(),
            transfer_destination: None,
            latest_charge: Some("ch_1".into()),
            last_payment_error: None,
            next_action: None,
            amount_received: 2048,
            amount_refunded: 0,
            client_secret: "pi_3Nxyz_secret_abc".into(),
            idempotency_key: Some("po1_key".into()),
            request_id: "req_1".into(),
            settle_at_ms: None,
        }
    }

    #[test]
    fn a_payment_intent_written_from_its_row_is_the_object_value_rendered() {
        let mut rows = vec![row("succeeded"), row("processing")];
        let mut declined = row("requires_payment_method");
        declined.last_payment_error = Some(
            r#"{"type":"card_error","code":"card_declined","decline_code":"generic_decline"}"#
                .into(),
        );
        declined.customer = None;
        declined.description = None;
        rows.push(declined);
        let mut action = row("requires_action");
        action.next_action = Some(r#"{"type":"use_stripe_sdk","use_stripe_sdk":{}}"#.into());
        action.transfer_destination = Some("acct_1".into());
        action.payment_method = None;
        rows.push(action);
        let mut odd = row("succeeded");
        odd.metadata = "not json".into();
        odd.last_payment_error = Some("not json either".into());
        rows.push(odd);
        for row in &rows {
            assert_eq!(
                String::from_utf8(payment_intent_json(row)).unwrap(),
                serde_json::to_string(&payment_intent(row)).unwrap(),
                "{}",
                row.status
            );
        }
    }

    #[test]
    fn an_event_rendered_around_its_object_is_the_event_value_rendered() {
        let object = json!({
            "id": "pi_1",
            "amount": 2048,
            "description": "March \"&\" April \u{e9}\n",
            "metadata": { "payonce_invoice": "INV-1", "a": "\\" },
            "next_action": null,
        });
        let rendered = serde_json::to_vec(&object).unwrap();
        for (request_id, key, version) in [
            (Some("req_1"), Some("po1_key\"quoted"), "2026-10-28.endive"),
            (None, None, API_VERSION),
            (Some("req_2"), None, "2020-08-27"),
        ] {
            let cause = EventCause {
                request_id,
                idempotency_key: key,
                api_version: version,
            };
            for (created, kind) in [(1_700_000_000, "payment_intent.created"), (-1, "x.y")] {
                let value =
                    event_with_previous("evt_1", created, kind, object.clone(), None, cause);
                assert_eq!(
                    String::from_utf8(event_json("evt_1", created, kind, &rendered, cause))
                        .unwrap(),
                    serde_json::to_string(&value).unwrap()
                );
            }
        }
    }
}

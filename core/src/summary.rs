//! The one redaction every view of a processor object goes through. A PaymentIntent carries a
//! `client_secret` (enough to confirm the payment from a browser), payment method details, charge
//! ids and free-form metadata; no role needs them to know whether an operation paid. Views show a
//! whitelist, so a field the processor adds tomorrow stays hidden until someone decides otherwise.

use serde_json::{Map, Value};

/// Top-level fields of a processor object shown to every role (docs/api.md).
pub const FIELDS_SHOWN: &[&str] = &[
    "id",
    "object",
    "status",
    "amount",
    "amount_received",
    "currency",
    "customer",
    "created",
];

/// Fields of `last_payment_error` shown: why it failed, never the payment method it names.
pub const ERROR_FIELDS_SHOWN: &[&str] = &["code", "decline_code"];

/// The whitelisted summary of a processor object; a non-object becomes `null`.
pub fn summary(object: &Value) -> Value {
    let Some(object) = object.as_object() else {
        return Value::Null;
    };
    let mut shown: Map<String, Value> = FIELDS_SHOWN
        .iter()
        .filter_map(|k| object.get(*k).map(|v| ((*k).to_string(), v.clone())))
        .collect();
    if let Some(error) = object.get("last_payment_error").and_then(Value::as_object) {
        let error: Map<String, Value> = ERROR_FIELDS_SHOWN
            .iter()
            .filter_map(|k| error.get(*k).map(|v| ((*k).to_string(), v.clone())))
            .collect();
        shown.insert("last_payment_error".into(), Value::Object(error));
    }
    Value::Object(shown)
}

/// `serialize_with` for an optional stored processor object: only its summary is ever written out.
pub fn serialize_summary<S: serde::Serializer>(
    object: &Option<Value>,
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::Serialize;
    object.as_ref().map(summary).serialize(s)
}

/// `serialize_with` for a processor object: only its summary is ever written out.
pub fn serialize_summary_of<S: serde::Serializer>(object: &Value, s: S) -> Result<S::Ok, S::Error> {
    use serde::Serialize;
    summary(object).serialize(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_whitelisted_fields_survive() {
        let pi = json!({"id": "pi_1", "object": "payment_intent", "status": "requires_payment_method",
            "amount": 2048, "currency": "usd", "customer": "cus_1", "created": 1,
            "client_secret": "pi_1_secret_x", "latest_charge": "ch_1", "payment_method": "pm_1",
            "payment_method_options": {"card": {}}, "metadata": {"payonce_operation_id": "op_x", "note": "pii"},
            "last_payment_error": {"code": "card_declined", "decline_code": "insufficient_funds",
                "message": "Your card has insufficient funds.", "payment_method": {"id": "pm_1"}}});
        let shown = summary(&pi);
        assert_eq!(
            shown,
            json!({"id": "pi_1", "object": "payment_intent", "status": "requires_payment_method",
                "amount": 2048, "currency": "usd", "customer": "cus_1", "created": 1,
                "last_payment_error": {"code": "card_declined", "decline_code": "insufficient_funds"}})
        );
        assert!(!shown.to_string().contains("secret"));
        assert_eq!(summary(&json!("pi_1_secret_x")), Value::Null);
    }
}

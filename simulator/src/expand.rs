//! The query of a retrieve (`GET /v1/payment_intents/{id}`, `GET /v1/refunds/{id}`): `expand[]`
//! replaces an id field with the object it names, as Stripe does; any other parameter is refused
//! with Stripe's `parameter_unknown`.

use crate::error::ApiError;
use crate::limits::PARAMS_MAX;

/// The fields a retrieve may expand, each with the object kind it names.
pub(crate) type Expandable = &'static [&'static str];

/// What a payment intent retrieve can expand.
pub(crate) const PAYMENT_INTENT: Expandable = &["latest_charge"];
/// What a refund retrieve can expand.
pub(crate) const REFUND: Expandable = &["payment_intent", "charge"];

/// [`parse`] for a retrieve, which refuses a bad query only after its faults: the fields to expand
/// (none when the query is refused) and why it was refused, if it was.
pub(crate) fn requested(
    raw: Option<&str>,
    expandable: Expandable,
) -> (Vec<String>, Option<ApiError>) {
    match parse(raw, expandable) {
        Ok(fields) => (fields, None),
        Err(e) => (Vec::new(), Some(e)),
    }
}

/// The fields `raw` (the query string) asks to expand; `expand[]` may repeat (and `expand[N]`).
pub(crate) fn parse(raw: Option<&str>, expandable: Expandable) -> Result<Vec<String>, ApiError> {
    let pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(raw.unwrap_or("")).map_err(|e| {
            ApiError::invalid_request("parameter_invalid_string", format!("malformed query: {e}"))
        })?;
    if pairs.len() > PARAMS_MAX {
        return Err(ApiError::invalid_request(
            "parameter_invalid_string",
            format!("at most {PARAMS_MAX} parameters per request"),
        ));
    }
    let mut fields = Vec::new();
    for (key, value) in pairs {
        let is_expand = key == "expand[]"
            || key
                .strip_prefix("expand[")
                .and_then(|rest| rest.strip_suffix(']'))
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if !is_expand {
            return Err(ApiError::invalid_param(
                "parameter_unknown",
                key.clone(),
                format!("Received unknown parameter: {key}"),
            ));
        }
        if !expandable.contains(&value.as_str()) {
            return Err(ApiError::invalid_param(
                "parameter_invalid_string",
                "expand",
                format!("This property cannot be expanded ({value})."),
            ));
        }
        if !fields.contains(&value) {
            fields.push(value);
        }
    }
    Ok(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expand_repeats_and_anything_else_is_unknown() {
        assert_eq!(parse(None, REFUND).unwrap(), Vec::<String>::new());
        assert_eq!(
            parse(
                Some("expand%5B%5D=payment_intent&expand[1]=charge&expand[]=charge"),
                REFUND
            )
            .unwrap(),
            ["payment_intent", "charge"]
        );
        let unknown = parse(Some("foo=1"), PAYMENT_INTENT).unwrap_err();
        assert_eq!(unknown.code, Some("parameter_unknown"));
        assert_eq!(unknown.message, "Received unknown parameter: foo");
        let refused = parse(Some("expand[]=customer"), PAYMENT_INTENT).unwrap_err();
        assert_eq!(
            refused.message,
            "This property cannot be expanded (customer)."
        );
    }
}

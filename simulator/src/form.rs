//! Form-encoded parameters, parsed and validated Stripe's way: unknown parameters are refused by name,
//! every value is bounded, and a refusal names the offending `param`.

use crate::error::ApiError;
use crate::limits::{
    AMOUNT_MAX, DESCRIPTION_LEN_MAX, METADATA_KEY_LEN_MAX, METADATA_KEYS_MAX,
    METADATA_VALUE_LEN_MAX, PARAMS_MAX, STRING_PARAM_LEN_MAX,
};
use std::collections::BTreeMap;

/// Decoded `key=value` pairs in request order.
pub(crate) type Pairs = Vec<(String, String)>;

/// Decodes a form body (or query string).
pub(crate) fn parse_pairs(raw: &[u8]) -> Result<Pairs, ApiError> {
    let pairs: Pairs = serde_urlencoded::from_bytes(raw).map_err(|e| {
        ApiError::invalid_request(
            "parameter_invalid_string",
            format!("malformed form body: {e}"),
        )
    })?;
    if pairs.len() > PARAMS_MAX {
        return Err(ApiError::invalid_request(
            "parameter_invalid_string",
            format!("at most {PARAMS_MAX} parameters per request"),
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for (k, _) in &pairs {
        if !seen.insert(k.as_str()) {
            return Err(ApiError::invalid_param(
                "parameter_invalid_string",
                k,
                format!("duplicate parameter {k}"),
            ));
        }
    }
    Ok(pairs)
}

/// The parameter names a request used, in order (for the request audit).
pub(crate) fn keys(pairs: &Pairs) -> Vec<String> {
    pairs.iter().map(|(k, _)| k.clone()).collect()
}

/// Parameters of `POST /v1/payment_intents`.
#[derive(Debug, Clone)]
pub(crate) struct PaymentIntentParams {
    pub(crate) amount: i64,
    pub(crate) currency: String,
    pub(crate) customer: Option<String>,
    pub(crate) payment_method: Option<String>,
    pub(crate) confirm: bool,
    pub(crate) off_session: bool,
    pub(crate) description: Option<String>,
    pub(crate) metadata: BTreeMap<String, String>,
    pub(crate) transfer_destination: Option<String>,
}

fn string(param: &str, value: &str, max: usize) -> Result<String, ApiError> {
    if value.is_empty() {
        return Err(ApiError::invalid_param(
            "parameter_invalid_string_empty",
            param,
            format!(
                "You passed an empty string for '{param}'. We assume empty values are an attempt to unset a parameter; however '{param}' cannot be unset."
            ),
        ));
    }
    if value.chars().count() > max {
        return Err(ApiError::invalid_param(
            "parameter_invalid_string",
            param,
            format!("Invalid {param}: must be at most {max} characters"),
        ));
    }
    Ok(value.to_string())
}

fn boolean(param: &str, value: &str) -> Result<bool, ApiError> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(ApiError::invalid_param(
            "parameter_invalid_boolean",
            param,
            format!("Invalid boolean: {value}"),
        )),
    }
}

/// A positive amount in minor units, at most [`AMOUNT_MAX`].
pub(crate) fn amount(param: &str, value: &str) -> Result<i64, ApiError> {
    let n: i64 = value.parse().map_err(|_| {
        ApiError::invalid_param(
            "parameter_invalid_integer",
            param,
            format!("Invalid integer: {value}"),
        )
    })?;
    if n < 1 {
        return Err(ApiError::invalid_param(
            "amount_too_small",
            param,
            "Amount must be at least 1 minor unit",
        ));
    }
    if n > AMOUNT_MAX {
        return Err(ApiError::invalid_param(
            "amount_too_large",
            param,
            format!("Amount must be no more than {AMOUNT_MAX} minor units"),
        ));
    }
    Ok(n)
}

fn metadata_entry(
    metadata: &mut BTreeMap<String, String>,
    param: &str,
    key: &str,
    value: &str,
) -> Result<(), ApiError> {
    if key.is_empty() || key.chars().count() > METADATA_KEY_LEN_MAX || key.contains(['[', ']']) {
        return Err(ApiError::invalid_param(
            "parameter_invalid_string",
            param,
            format!(
                "Metadata keys must be 1 to {METADATA_KEY_LEN_MAX} characters without brackets"
            ),
        ));
    }
    if value.chars().count() > METADATA_VALUE_LEN_MAX {
        return Err(ApiError::invalid_param(
            "parameter_invalid_string",
            param,
            format!("Metadata values can have up to {METADATA_VALUE_LEN_MAX} characters"),
        ));
    }
    // An empty value unsets the key (Stripe's rule); on create that simply means "absent".
    if !value.is_empty() {
        metadata.insert(key.to_string(), value.to_string());
    }
    if metadata.len() > METADATA_KEYS_MAX {
        return Err(ApiError::invalid_param(
            "parameter_invalid_string",
            "metadata",
            format!("Metadata can have up to {METADATA_KEYS_MAX} keys"),
        ));
    }
    Ok(())
}

/// Stripe's refusal of a parameter the endpoint does not take.
pub(crate) fn unknown(param: &str) -> ApiError {
    ApiError::invalid_param(
        "parameter_unknown",
        param,
        format!("Received unknown parameter: {param}"),
    )
}

fn missing(param: &str) -> ApiError {
    ApiError::invalid_param(
        "parameter_missing",
        param,
        format!("Missing required param: {param}."),
    )
}

/// Parses and validates the parameters of a PaymentIntent create.
pub(crate) fn payment_intent_params(pairs: &Pairs) -> Result<PaymentIntentParams, ApiError> {
    let mut amount_v = None;
    let mut currency = None;
    let mut p = PaymentIntentParams {
        amount: 0,
        currency: String::new(),
        customer: None,
        payment_method: None,
        confirm: false,
        off_session: false,
        description: None,
        metadata: BTreeMap::new(),
        transfer_destination: None,
    };
    let mut off_session_given = false;
    for (k, v) in pairs {
        match k.as_str() {
            "amount" => amount_v = Some(amount(k, v)?),
            "currency" => {
                let c = v.to_ascii_lowercase();
                if c.len() != 3 || !c.chars().all(|ch| ch.is_ascii_lowercase()) {
                    return Err(ApiError::invalid_param(
                        "parameter_invalid_string",
                        k,
                        format!(
                            "Invalid currency: {v}. Stripe currencies are three-letter ISO codes."
                        ),
                    ));
                }
                currency = Some(c);
            }
            "customer" => p.customer = Some(string(k, v, STRING_PARAM_LEN_MAX)?),
            "payment_method" => p.payment_method = Some(string(k, v, STRING_PARAM_LEN_MAX)?),
            "confirm" => p.confirm = boolean(k, v)?,
            "off_session" => {
                off_session_given = true;
                p.off_session = match v.as_str() {
                    "one_off" | "recurring" => true,
                    other => boolean(k, other)?,
                };
            }
            "description" => p.description = Some(string(k, v, DESCRIPTION_LEN_MAX)?),
            "metadata" if v.is_empty() => {}
            "transfer_data[destination]" => {
                p.transfer_destination = Some(string(k, v, STRING_PARAM_LEN_MAX)?)
            }
            other => match other
                .strip_prefix("metadata[")
                .and_then(|rest| rest.strip_suffix(']'))
            {
                Some(mk) => metadata_entry(&mut p.metadata, k, mk, v)?,
                None => return Err(unknown(other)),
            },
        }
    }
    p.amount = amount_v.ok_or_else(|| missing("amount"))?;
    p.currency = currency.ok_or_else(|| missing("currency"))?;
    if off_session_given && !p.confirm {
        return Err(ApiError::invalid_param(
            "parameter_invalid_string",
            "off_session",
            "off_session can only be used with confirm=true.",
        ));
    }
    if p.confirm && p.payment_method.is_none() {
        return Err(ApiError::invalid_param(
            "payment_intent_unexpected_state",
            "payment_method",
            "You cannot confirm this PaymentIntent because it's missing a payment method.",
        ));
    }
    Ok(p)
}

/// Parameters of `POST /v1/refunds`.
#[derive(Debug, Clone)]
pub(crate) struct RefundParams {
    pub(crate) payment_intent: String,
    pub(crate) amount: Option<i64>,
    pub(crate) reason: Option<String>,
    pub(crate) metadata: BTreeMap<String, String>,
}

/// Parses and validates the parameters of a Refund create.
pub(crate) fn refund_params(pairs: &Pairs) -> Result<RefundParams, ApiError> {
    let mut payment_intent = None;
    let mut r = RefundParams {
        payment_intent: String::new(),
        amount: None,
        reason: None,
        metadata: BTreeMap::new(),
    };
    for (k, v) in pairs {
        match k.as_str() {
            "payment_intent" => payment_intent = Some(string(k, v, STRING_PARAM_LEN_MAX)?),
            "amount" => r.amount = Some(amount(k, v)?),
            "reason" => match v.as_str() {
                "duplicate" | "fraudulent" | "requested_by_customer" => r.reason = Some(v.clone()),
                _ => {
                    return Err(ApiError::invalid_param(
                        "parameter_invalid_string",
                        k,
                        "Invalid reason: must be one of duplicate, fraudulent, or requested_by_customer",
                    ));
                }
            },
            "metadata" if v.is_empty() => {}
            other => match other
                .strip_prefix("metadata[")
                .and_then(|rest| rest.strip_suffix(']'))
            {
                Some(mk) => metadata_entry(&mut r.metadata, k, mk, v)?,
                None => return Err(unknown(other)),
            },
        }
    }
    r.payment_intent = payment_intent.ok_or_else(|| missing("payment_intent"))?;
    Ok(r)
}

/// Parses a list `limit` (default [`crate::limits::LIST_LIMIT_DEFAULT`], 1 to [`crate::limits::LIST_LIMIT_MAX`]).
pub(crate) fn limit(raw: Option<&str>) -> Result<i64, ApiError> {
    use crate::limits::{LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX};
    let Some(raw) = raw else {
        return Ok(LIST_LIMIT_DEFAULT);
    };
    match raw.parse::<i64>() {
        Ok(n) if (1..=LIST_LIMIT_MAX).contains(&n) => Ok(n),
        _ => Err(ApiError::invalid_param(
            "parameter_invalid_integer",
            "limit",
            format!("This value must be between 1 and {LIST_LIMIT_MAX}."),
        )),
    }
}

/// A list's `created` filter: the inclusive range of Unix seconds it keeps (all of them by default).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CreatedRange {
    /// The earliest `created` kept.
    pub(crate) gte: i64,
    /// The latest `created` kept.
    pub(crate) lte: i64,
}

impl Default for CreatedRange {
    fn default() -> Self {
        CreatedRange {
            gte: i64::MIN,
            lte: i64::MAX,
        }
    }
}

impl CreatedRange {
    /// Narrows the range by `created`, `created[gte]`, `created[gt]`, `created[lte]` or
    /// `created[lt]`; false (and unchanged) for any other parameter.
    pub(crate) fn narrow(&mut self, k: &str, v: &str) -> Result<bool, ApiError> {
        match k {
            "created" => {
                let t = timestamp(k, v)?;
                self.gte = self.gte.max(t);
                self.lte = self.lte.min(t);
            }
            "created[gte]" => self.gte = self.gte.max(timestamp(k, v)?),
            "created[gt]" => self.gte = self.gte.max(timestamp(k, v)?.saturating_add(1)),
            "created[lte]" => self.lte = self.lte.min(timestamp(k, v)?),
            "created[lt]" => self.lte = self.lte.min(timestamp(k, v)?.saturating_sub(1)),
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// Which parameters a list endpoint takes besides `limit` and `starting_after`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ListShape {
    /// The plain filters it takes (`customer`, `type`, …), each kept as sent.
    pub(crate) filters: &'static [&'static str],
    /// Whether it takes the `created` range ([`CreatedRange::narrow`]).
    pub(crate) created: bool,
    /// Whether it takes `ending_before` (never together with `starting_after`).
    pub(crate) ending_before: bool,
}

/// What a list request asks for: its filters, `created` range, page size and cursor.
#[derive(Debug, Clone)]
pub(crate) struct ListQuery {
    filters: Vec<(&'static str, String)>,
    /// The `created` range (everything when the endpoint takes none).
    pub(crate) created: CreatedRange,
    /// The page size ([`limit`]).
    pub(crate) limit: i64,
    /// The id the page starts after, newest first.
    pub(crate) starting_after: Option<String>,
    /// The id the page ends before.
    pub(crate) ending_before: Option<String>,
}

impl ListQuery {
    /// Parses a list's query: a parameter `shape` does not take is Stripe's `parameter_unknown`, a
    /// repeated one counts as sent last.
    pub(crate) fn parse(pairs: &Pairs, shape: ListShape) -> Result<ListQuery, ApiError> {
        let mut q = ListQuery {
            filters: Vec::new(),
            created: CreatedRange::default(),
            limit: 0,
            starting_after: None,
            ending_before: None,
        };
        let mut limit_raw = None;
        for (k, v) in pairs {
            if shape.created && q.created.narrow(k, v)? {
                continue;
            }
            match k.as_str() {
                "limit" => limit_raw = Some(v.as_str()),
                "starting_after" => q.starting_after = Some(v.clone()),
                "ending_before" if shape.ending_before => q.ending_before = Some(v.clone()),
                other => match shape.filters.iter().find(|f| **f == other) {
                    Some(name) => q.filters.push((name, v.clone())),
                    None => return Err(unknown(other)),
                },
            }
        }
        if q.starting_after.is_some() && q.ending_before.is_some() {
            return Err(ApiError::invalid_request(
                "parameters_exclusive",
                "You may only specify one of these parameters: ending_before, starting_after.",
            ));
        }
        q.limit = limit(limit_raw)?;
        Ok(q)
    }

    /// The value of the filter `name`, if the request sent it.
    pub(crate) fn filter(&self, name: &str) -> Option<&str> {
        self.filters
            .iter()
            .rev()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses a Unix-seconds timestamp parameter.
pub(crate) fn timestamp(param: &str, raw: &str) -> Result<i64, ApiError> {
    raw.parse().map_err(|_| {
        ApiError::invalid_param(
            "parameter_invalid_integer",
            param,
            format!("Invalid timestamp: {raw}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(raw: &str) -> Pairs {
        parse_pairs(raw.as_bytes()).unwrap()
    }

    #[test]
    fn full_create_parses() {
        let p = payment_intent_params(&pairs(
            "amount=2048&currency=USD&customer=cus_1&payment_method=pm_card_visa&confirm=true&off_session=true\
             &metadata[payonce_operation_id]=op_1&transfer_data[destination]=acct_1&description=d",
        ))
        .unwrap();
        assert_eq!(p.amount, 2048);
        assert_eq!(p.currency, "usd");
        assert!(p.confirm && p.off_session);
        assert_eq!(
            p.metadata.get("payonce_operation_id").map(String::as_str),
            Some("op_1")
        );
        assert_eq!(p.transfer_destination.as_deref(), Some("acct_1"));
    }

    #[test]
    fn refusals_name_the_param() {
        let cases = [
            ("currency=usd", "amount"),
            ("amount=1", "currency"),
            ("amount=0&currency=usd", "amount"),
            ("amount=x&currency=usd", "amount"),
            ("amount=1&currency=usd&bogus=1", "bogus"),
            ("amount=1&currency=usd&confirm=maybe", "confirm"),
            ("amount=1&currency=usd&off_session=true", "off_session"),
            ("amount=1&currency=usd&confirm=true", "payment_method"),
            ("amount=1&currency=dollars", "currency"),
        ];
        for (raw, param) in cases {
            let e = payment_intent_params(&pairs(raw)).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{raw}");
            assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST);
        }
        let many: String = (0..=METADATA_KEYS_MAX)
            .map(|i| format!("&metadata[k{i}]=v"))
            .collect();
        let e = payment_intent_params(&pairs(&format!("amount=1&currency=usd{many}"))).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("metadata"));
        assert!(parse_pairs(b"amount=1&amount=2").is_err());
    }

    const REFUNDS: ListShape = ListShape {
        filters: &["payment_intent", "charge"],
        created: true,
        ending_before: true,
    };
    const EVENTS: ListShape = ListShape {
        filters: &["type"],
        created: false,
        ending_before: false,
    };

    #[test]
    fn a_list_query_takes_its_shape_and_narrows_created() {
        let q = ListQuery::parse(
            &pairs("charge=ch_1&created[gt]=10&created[lte]=20&limit=5&ending_before=re_1"),
            REFUNDS,
        )
        .unwrap();
        assert_eq!(q.filter("charge"), Some("ch_1"));
        assert_eq!(q.filter("payment_intent"), None);
        assert_eq!((q.created.gte, q.created.lte), (11, 20));
        assert_eq!(q.limit, 5);
        assert_eq!(q.ending_before.as_deref(), Some("re_1"));
        let all = ListQuery::parse(&pairs("type=refund.created"), EVENTS).unwrap();
        assert_eq!(all.filter("type"), Some("refund.created"));
        assert_eq!((all.created.gte, all.created.lte), (i64::MIN, i64::MAX));
        assert_eq!(all.limit, crate::limits::LIST_LIMIT_DEFAULT);
    }

    #[test]
    fn a_list_query_refuses_what_its_shape_does_not_take() {
        let cases = [
            ("created=1", EVENTS, Some("created")),
            ("ending_before=evt_1", EVENTS, Some("ending_before")),
            ("customer=cus_1", REFUNDS, Some("customer")),
            ("created[gte]=soon", REFUNDS, Some("created[gte]")),
            ("limit=0", REFUNDS, Some("limit")),
            ("starting_after=re_1&ending_before=re_2", REFUNDS, None),
        ];
        for (raw, shape, param) in cases {
            let e = ListQuery::parse(&pairs(raw), shape).unwrap_err();
            assert_eq!(e.param.as_deref(), param, "{raw}");
            assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST, "{raw}");
        }
    }
}

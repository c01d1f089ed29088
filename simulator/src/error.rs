//! Stripe's error shape (`{"error":{"type","code","message","param"}}`) and the simulator's start-up errors.

use axum::http::StatusCode;
use serde_json::{Map, Value, json};

/// Why a simulator could not start.
#[derive(Debug, thiserror::Error)]
pub enum SimulatorError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// The database could not be opened or migrated.
    #[error("simulator database: {0}")]
    Database(#[from] sqlx::Error),
    /// The configuration is unusable.
    #[error("simulator configuration: {0}")]
    Config(String),
}

/// One Stripe API error, ready to be rendered.
#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) kind: &'static str,
    pub(crate) code: Option<&'static str>,
    pub(crate) message: String,
    pub(crate) param: Option<String>,
    pub(crate) decline_code: Option<&'static str>,
    pub(crate) payment_intent: Option<Value>,
    pub(crate) charge: Option<String>,
    /// `Stripe-Should-Retry`, where Stripe sends one (a conflict on an in-flight key: `true`). Absent on
    /// rate-limit 429s, as Stripe's own libraries do not retry those: the client decides how to slow down.
    pub(crate) should_retry: Option<bool>,
}

impl ApiError {
    fn new(
        status: StatusCode,
        kind: &'static str,
        code: Option<&'static str>,
        message: impl Into<String>,
    ) -> Self {
        ApiError {
            status,
            kind,
            code,
            message: message.into(),
            param: None,
            decline_code: None,
            payment_intent: None,
            charge: None,
            should_retry: None,
        }
    }

    /// 400 `invalid_request_error` about one parameter.
    pub(crate) fn invalid_param(
        code: &'static str,
        param: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        let mut e = ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            Some(code),
            message,
        );
        e.param = Some(param.into());
        e
    }

    /// 400 `invalid_request_error` without a parameter.
    pub(crate) fn invalid_request(code: &'static str, message: impl Into<String>) -> Self {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            Some(code),
            message,
        )
    }

    /// 404 `resource_missing`.
    pub(crate) fn missing(param: &str, what: &str, id: &str) -> Self {
        let mut e = ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            Some("resource_missing"),
            format!("No such {what}: '{id}'"),
        );
        e.param = Some(param.to_string());
        e
    }

    /// 404 for a path or method Stripe does not serve. Stripe answers these with no `code` and this
    /// exact message (`DELETE /v1/refunds` included: a wrong method is an unrecognized URL there).
    pub(crate) fn unrecognized(method: &str, path: &str) -> Self {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            None,
            format!(
                "Unrecognized request URL ({method}: {path}). Please see https://stripe.com/docs or we can help at \
                 https://support.stripe.com/."
            ),
        )
    }

    /// 401: no or wrong secret key. Stripe's current type enum has no `authentication_error`; Stripe answers
    /// 401 with `invalid_request_error`, and clients branch on the status.
    pub(crate) fn unauthorized() -> Self {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            Some("api_key_invalid"),
            "Invalid API Key provided.",
        )
    }

    /// 400 `idempotency_error`: the key was used with different parameters.
    pub(crate) fn idempotency_mismatch(key: &str) -> Self {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "idempotency_error",
            Some("idempotency_key_reused"),
            format!(
                "Keys for idempotent requests can only be used with the same parameters they were first used with. \
                 Try using a key other than '{key}' if you meant to execute a different request."
            ),
        )
    }

    /// 409 `idempotency_key_in_use`: the key's first request is still executing.
    pub(crate) fn key_in_use() -> Self {
        let mut e = ApiError::new(
            StatusCode::CONFLICT,
            "invalid_request_error",
            Some("idempotency_key_in_use"),
            "There is currently another in-progress request using this Stripe token (probably the same \
             idempotency key). Please retry this request later.",
        );
        e.should_retry = Some(true);
        e
    }

    /// 429 `rate_limit`: refused before any work.
    pub(crate) fn rate_limited() -> Self {
        ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "invalid_request_error",
            Some("rate_limit"),
            "Too many requests hit the API too quickly.",
        )
    }

    /// 500 `api_error`.
    pub(crate) fn internal(message: impl Into<String>) -> Self {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "api_error",
            None,
            message,
        )
    }

    /// 402 `card_error`.
    pub(crate) fn card(code: &'static str, decline_code: &'static str, message: &str) -> Self {
        let mut e = ApiError::new(
            StatusCode::PAYMENT_REQUIRED,
            "card_error",
            Some(code),
            message,
        );
        e.decline_code = Some(decline_code);
        e
    }

    /// The `error` object alone (also stored as `last_payment_error`).
    pub(crate) fn object(&self) -> Value {
        let mut m = Map::new();
        m.insert("type".into(), json!(self.kind));
        if let Some(code) = self.code {
            m.insert("code".into(), json!(code));
            m.insert(
                "doc_url".into(),
                json!(format!(
                    "https://stripe.com/docs/error-codes/{}",
                    code.replace('_', "-")
                )),
            );
        }
        m.insert("message".into(), json!(self.message));
        if let Some(param) = &self.param {
            m.insert("param".into(), json!(param));
        }
        if let Some(d) = self.decline_code {
            m.insert("decline_code".into(), json!(d));
        }
        if let Some(c) = &self.charge {
            m.insert("charge".into(), json!(c));
        }
        if let Some(pi) = &self.payment_intent {
            m.insert("payment_intent".into(), pi.clone());
        }
        Value::Object(m)
    }

    /// The response body bytes.
    pub(crate) fn body(&self) -> Vec<u8> {
        serde_json::to_vec(&json!({ "error": self.object() })).unwrap_or_default()
    }
}

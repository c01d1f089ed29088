//! The stable table of API error codes (documented in docs/api.md) and the JSON error body
//! `{"error": {"code", "message"}}`. 5xx bodies are opaque; their cause chain is logged once, here.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use payonce_ledger::LedgerError;

/// Every error code the API answers with. The strings are a contract: never rename one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// No `Authorization: Bearer` header, or the key is unknown or revoked.
    Unauthorized,
    /// The key's role may not do this.
    Forbidden,
    /// No such operation in the key's tenant (unknown and other-tenant ids look the same).
    OperationNotFound,
    /// No such route.
    NotFound,
    /// The route exists but not with this method.
    MethodNotAllowed,
    /// The body is not valid JSON or does not have the documented shape.
    InvalidJson,
    /// A field is outside its limits or malformed (the message names it).
    InvalidRequest,
    /// The body is not `application/json`.
    UnsupportedMediaType,
    /// The body is larger than the configured limit.
    BodyTooLarge,
    /// The business key already names an operation with different details; nothing was changed.
    BusinessKeyConflict,
    /// The approved details hash is not the operation's current one; nothing was approved.
    ApprovalMismatch,
    /// The operation's state does not allow this (e.g. approving a cancelled operation).
    WrongState,
    /// The operation already has the most unused confirmation links allowed; nothing was issued.
    TooManyOpenLinks,
    /// The refund would take the payment's refunds (succeeded or still able to move money) past its
    /// amount; nothing was created.
    OverRefund,
    /// The named operation is not a succeeded payment of the tenant, so it cannot be refunded.
    NotRefundable,
    /// The caller may not approve this operation (a refund is approved by a person of the merchant,
    /// never by the key that created it); nothing was approved.
    ApproverNotAllowed,
    /// The tenant has no customer verification method, so no link could approve anything.
    VerificationNotConfigured,
    /// `format` is not one of the supported tool-call formats.
    UnsupportedFormat,
    /// The tool-call envelope is not the named provider's shape (missing id, name, ...).
    InvalidToolCall,
    /// A webhook's signature is missing, malformed, stale or wrong.
    WebhookSignatureInvalid,
    /// A signed webhook body is not a Stripe event.
    WebhookPayloadInvalid,
    /// The ledger is unreachable or cannot store a write (readiness, a full disk), or the webhook
    /// cannot be stored now; retry later.
    Unavailable,
    /// The request took longer than the server allows.
    RequestTimeout,
    /// Something failed inside the server; the body says nothing more.
    Internal,
}

/// Every code, for the documentation test.
pub const ALL_ERROR_CODES: [ErrorCode; 24] = [
    ErrorCode::Unauthorized,
    ErrorCode::Forbidden,
    ErrorCode::OperationNotFound,
    ErrorCode::NotFound,
    ErrorCode::MethodNotAllowed,
    ErrorCode::InvalidJson,
    ErrorCode::InvalidRequest,
    ErrorCode::UnsupportedMediaType,
    ErrorCode::BodyTooLarge,
    ErrorCode::BusinessKeyConflict,
    ErrorCode::ApprovalMismatch,
    ErrorCode::WrongState,
    ErrorCode::TooManyOpenLinks,
    ErrorCode::OverRefund,
    ErrorCode::NotRefundable,
    ErrorCode::ApproverNotAllowed,
    ErrorCode::VerificationNotConfigured,
    ErrorCode::UnsupportedFormat,
    ErrorCode::InvalidToolCall,
    ErrorCode::WebhookSignatureInvalid,
    ErrorCode::WebhookPayloadInvalid,
    ErrorCode::Unavailable,
    ErrorCode::RequestTimeout,
    ErrorCode::Internal,
];

impl ErrorCode {
    /// The stable string.
    pub fn code(&self) -> &'static str {
        match self {
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::OperationNotFound => "operation_not_found",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::InvalidJson => "invalid_json",
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::UnsupportedMediaType => "unsupported_media_type",
            ErrorCode::BodyTooLarge => "body_too_large",
            ErrorCode::BusinessKeyConflict => "business_key_conflict",
            ErrorCode::ApprovalMismatch => "approval_mismatch",
            ErrorCode::WrongState => "wrong_state",
            ErrorCode::TooManyOpenLinks => "too_many_open_links",
            ErrorCode::OverRefund => "over_refund",
            ErrorCode::NotRefundable => "not_refundable",
            ErrorCode::ApproverNotAllowed => "approver_not_allowed",
            ErrorCode::VerificationNotConfigured => "verification_not_configured",
            ErrorCode::UnsupportedFormat => "unsupported_format",
            ErrorCode::InvalidToolCall => "invalid_tool_call",
            ErrorCode::WebhookSignatureInvalid => "webhook_signature_invalid",
            ErrorCode::WebhookPayloadInvalid => "webhook_payload_invalid",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::RequestTimeout => "request_timeout",
            ErrorCode::Internal => "internal",
        }
    }

    /// The HTTP status that goes with it.
    pub fn status(&self) -> StatusCode {
        match self {
            ErrorCode::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorCode::Forbidden => StatusCode::FORBIDDEN,
            ErrorCode::OperationNotFound | ErrorCode::NotFound => StatusCode::NOT_FOUND,
            ErrorCode::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::InvalidJson
            | ErrorCode::InvalidRequest
            | ErrorCode::UnsupportedFormat
            | ErrorCode::InvalidToolCall
            | ErrorCode::WebhookSignatureInvalid
            | ErrorCode::WebhookPayloadInvalid => StatusCode::BAD_REQUEST,
            ErrorCode::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorCode::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::BusinessKeyConflict
            | ErrorCode::ApprovalMismatch
            | ErrorCode::WrongState
            | ErrorCode::TooManyOpenLinks
            | ErrorCode::OverRefund
            | ErrorCode::NotRefundable
            | ErrorCode::VerificationNotConfigured => StatusCode::CONFLICT,
            ErrorCode::ApproverNotAllowed => StatusCode::FORBIDDEN,
            ErrorCode::Unavailable | ErrorCode::RequestTimeout => StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// An error answer: a code, a human message, and for 5xx the cause (logged, never sent).
#[derive(Debug)]
pub struct HttpError {
    code: ErrorCode,
    message: String,
    cause: Option<Box<dyn std::error::Error + Send + Sync>>,
}

/// The message every 5xx body carries instead of its cause.
const OPAQUE_MESSAGE: &str = "the server could not complete the request; it has been logged";

impl HttpError {
    /// A 4xx with a message the caller may read.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        HttpError {
            code,
            message: message.into(),
            cause: None,
        }
    }

    /// A server-side failure: the cause is logged with its chain, the body stays opaque.
    pub fn internal(cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        HttpError {
            code: ErrorCode::Internal,
            message: OPAQUE_MESSAGE.into(),
            cause: Some(Box::new(cause)),
        }
    }

    /// The same answer for another request (a group's requests share one failed write): the same
    /// code and message, the cause carried as its text.
    pub fn for_another(&self) -> Self {
        HttpError {
            code: self.code,
            message: self.message.clone(),
            cause: self.cause.as_ref().map(|c| {
                Box::new(std::io::Error::other(cause_chain(c.as_ref())))
                    as Box<dyn std::error::Error + Send + Sync>
            }),
        }
    }

    /// The message the caller may read (opaque for 5xx).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The code.
    pub fn code(&self) -> ErrorCode {
        self.code
    }

    /// The unknown-or-other-tenant answer.
    pub fn not_found() -> Self {
        HttpError::new(ErrorCode::OperationNotFound, "no such operation")
    }

    /// The wrong-role answer.
    pub fn forbidden(what: &str) -> Self {
        HttpError::new(
            ErrorCode::Forbidden,
            format!("this key's role may not {what}"),
        )
    }
}

/// The cause chain as one line: `outer: inner: innermost`.
pub fn cause_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(inner) = next {
        out.push_str(": ");
        out.push_str(&inner.to_string());
        next = inner.source();
    }
    out
}

impl From<LedgerError> for HttpError {
    fn from(e: LedgerError) -> Self {
        match e {
            LedgerError::NotFound => HttpError::not_found(),
            LedgerError::Conflict { .. } => HttpError::new(
                ErrorCode::BusinessKeyConflict,
                "this business key already names an operation with different details; nothing was changed",
            ),
            LedgerError::ApprovalMismatch => HttpError::new(
                ErrorCode::ApprovalMismatch,
                "the approved details hash is not the operation's current details hash; nothing was approved",
            ),
            LedgerError::WrongState { status, why, .. } => HttpError::new(
                ErrorCode::WrongState,
                format!("the operation is {}: {why}", status.as_str()),
            ),
            LedgerError::Limit(why) => HttpError::new(ErrorCode::InvalidRequest, why.to_string()),
            LedgerError::OverRefund {
                requested_minor,
                refundable_minor,
                ..
            } => HttpError::new(
                ErrorCode::OverRefund,
                format!(
                    "a refund of {requested_minor} exceeds the {refundable_minor} the payment still has \
                     unrefunded (succeeded and in-flight refunds count); nothing was created"
                ),
            ),
            LedgerError::NotRefundable { why, .. } => HttpError::new(
                ErrorCode::NotRefundable,
                format!("{why}; nothing was created"),
            ),
            // A failover, a restart, a terminated backend, a full disk: retry, never a 500, and
            // never a success for a write that did not commit.
            unavailable @ (LedgerError::Database(_)
            | LedgerError::Full { .. }
            | LedgerError::Connect { .. })
                if unavailable.is_unavailable() =>
            {
                HttpError {
                    code: ErrorCode::Unavailable,
                    message:
                        "the ledger cannot take this request right now; retry the same request \
                              shortly (creates are idempotent by business key)"
                            .into(),
                    cause: Some(Box::new(unavailable)),
                }
            }
            // A schema this process cannot serve (readiness fails with it): another instance, on
            // a release that matches the schema, can take the request.
            schema @ (LedgerError::SchemaBehind { .. }
            | LedgerError::SchemaIncompatible { .. }
            | LedgerError::SchemaRefused(_)
            | LedgerError::SchemaDrift { .. }) => HttpError {
                code: ErrorCode::Unavailable,
                message:
                    "this instance cannot serve the ledger's schema right now; retry the same \
                          request shortly (creates are idempotent by business key)"
                        .into(),
                cause: Some(Box::new(schema)),
            },
            other @ (LedgerError::Fenced { .. }
            | LedgerError::Full { .. }
            | LedgerError::Illegal(_)
            | LedgerError::Corrupt(_)
            | LedgerError::Database(_)
            | LedgerError::SessionSetting { .. }
            | LedgerError::Connect { .. }) => HttpError::internal(other),
        }
    }
}

#[derive(serde::Serialize)]
struct Body<'a> {
    error: Inner<'a>,
}

#[derive(serde::Serialize)]
struct Inner<'a> {
    code: &'static str,
    message: &'a str,
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        if let Some(cause) = &self.cause {
            tracing::error!(code = self.code.code(), cause = %cause_chain(cause.as_ref()), "request failed");
        }
        let body = Body {
            error: Inner {
                code: self.code.code(),
                message: &self.message,
            },
        };
        let mut response = (self.code.status(), Json(body)).into_response();
        if self.code == ErrorCode::Unavailable {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static(UNAVAILABLE_RETRY_AFTER_S),
            );
        }
        if self.code == ErrorCode::Unauthorized {
            // RFC 6750 §3 (and MCP's authorization spec): a 401 names the scheme it wants.
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static(WWW_AUTHENTICATE),
            );
        }
        response
    }
}

/// Seconds a `503 unavailable` asks the caller to wait (`Retry-After`): a failover or a restart
/// takes seconds.
pub const UNAVAILABLE_RETRY_AFTER_S: &str = "2";

/// The `WWW-Authenticate` challenge every 401 carries.
pub const WWW_AUTHENTICATE: &str = "Bearer realm=\"payonce\"";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_snake_case_and_documented() {
        let docs = include_str!("../../docs/api.md");
        let mut seen = std::collections::HashSet::new();
        for c in ALL_ERROR_CODES {
            assert!(seen.insert(c.code()), "duplicate code {}", c.code());
            assert!(
                c.code()
                    .chars()
                    .all(|ch| ch.is_ascii_lowercase() || ch == '_')
            );
            assert!(
                docs.contains(&format!("`{}`", c.code())),
                "docs/api.md does not document {}",
                c.code()
            );
        }
    }

    #[test]
    fn every_unauthorized_answer_names_the_bearer_scheme() {
        let r = HttpError::new(ErrorCode::Unauthorized, "no key").into_response();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            r.headers()[axum::http::header::WWW_AUTHENTICATE],
            WWW_AUTHENTICATE
        );
        let forbidden = HttpError::new(ErrorCode::Forbidden, "no").into_response();
        assert!(
            forbidden
                .headers()
                .get(axum::http::header::WWW_AUTHENTICATE)
                .is_none()
        );
    }

    #[test]
    fn unavailable_asks_the_caller_to_retry_after_a_pause() {
        let response = HttpError::new(ErrorCode::Unavailable, "later").into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            response.headers()[axum::http::header::RETRY_AFTER],
            UNAVAILABLE_RETRY_AFTER_S
        );
    }

    #[test]
    fn internal_errors_are_opaque() {
        let e = HttpError::from(LedgerError::Corrupt("secret table layout".into()));
        assert_eq!(e.code(), ErrorCode::Internal);
        assert!(!e.message.contains("secret"));
    }
}

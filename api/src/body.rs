//! The JSON body extractor: axum's own, with its rejections mapped onto the error table so a bad body
//! answers `{"error": {...}}` like everything else.

use crate::errors::{ErrorCode, HttpError};
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

/// A JSON request body of type `T`.
#[derive(Debug, Clone)]
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = HttpError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(ApiJson(v)),
            Err(rejection) => Err(reject(&rejection)),
        }
    }
}

fn reject(rejection: &JsonRejection) -> HttpError {
    match rejection {
        JsonRejection::MissingJsonContentType(_) => HttpError::new(
            ErrorCode::UnsupportedMediaType,
            "send the body as application/json",
        ),
        JsonRejection::JsonDataError(e) => HttpError::new(ErrorCode::InvalidJson, e.body_text()),
        JsonRejection::JsonSyntaxError(e) => HttpError::new(ErrorCode::InvalidJson, e.body_text()),
        other if other.status() == StatusCode::PAYLOAD_TOO_LARGE => HttpError::new(
            ErrorCode::BodyTooLarge,
            "the request body is larger than the server accepts",
        ),
        other => HttpError::new(ErrorCode::InvalidJson, other.body_text()),
    }
}

//! The OpenAPI 3.1 document, checked in as `api/openapi.json` and served as is at `/openapi.json`,
//! and the route table it must cover (a test keeps the two in step).

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// `/openapi.json`, for a router of any state.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new().route("/openapi.json", get(document))
}

/// The checked-in document.
pub const DOCUMENT: &str = include_str!("../openapi.json");

/// Every route the router serves: (method, path in OpenAPI template form).
pub const ROUTES: &[(&str, &str)] = &[
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("get", "/openapi.json"),
    ("post", "/v1/operations"),
    ("post", "/v1/operations/batch"),
    ("get", "/v1/operations/{id}"),
    ("post", "/v1/operations/{id}/approval-requests"),
    ("post", "/v1/operations/{id}/approve"),
    ("post", "/v1/operations/{id}/cancel"),
    ("post", "/v1/operations/{id}/execute"),
    ("get", "/v1/operations/{id}/refunds"),
    ("post", "/v1/refunds"),
    ("post", "/v1/refunds/{id}/approve"),
    ("get", "/v1/tenant/profile"),
    ("put", "/v1/tenant/profile"),
    ("get", "/v1/tools"),
    ("post", "/v1/tool-calls"),
    ("post", "/v1/webhooks/stripe"),
    ("post", "/v1/webhooks/adyen"),
    ("get", "/confirm/{token}"),
    ("post", "/confirm/{token}"),
    ("get", "/static/confirm.css"),
    ("post", "/mcp"),
    ("get", "/console"),
    ("get", "/console/sign-in"),
    ("post", "/console/sign-in"),
    ("post", "/console/sign-out"),
    ("get", "/console/operations"),
    ("get", "/console/operations/{id}"),
    ("get", "/console/operations/{id}/export"),
    ("post", "/console/operations/{id}/resolve"),
    ("get", "/console/resolve-many"),
    ("post", "/console/resolve-many"),
    ("post", "/console/operations/{id}/approve-refund"),
    ("post", "/console/operations/{id}/decline-refund"),
    ("get", "/static/console.css"),
    ("get", "/console/assets/{file}"),
];

/// `GET /openapi.json`.
pub async fn document() -> Response {
    let mut response = DOCUMENT.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_is_openapi_3_1_and_covers_every_route() {
        let doc: serde_json::Value = serde_json::from_str(DOCUMENT).unwrap();
        assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
        for (method, path) in ROUTES {
            assert!(
                doc["paths"][path][method].is_object(),
                "{method} {path} is missing from api/openapi.json"
            );
        }
        let documented: usize = doc["paths"]
            .as_object()
            .unwrap()
            .values()
            .map(|p| p.as_object().unwrap().len())
            .sum();
        assert_eq!(
            documented,
            ROUTES.len(),
            "api/openapi.json documents a route the router does not serve"
        );
    }
}

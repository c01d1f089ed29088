//! PaymentMethods: `GET /v1/payment_methods/{id}`, the card behind one of the simulator's test
//! payment methods ([`crate::cards`]), as the confirmation page reads it.

use crate::app::Shared;
use crate::cards::payment_method_object;
use crate::connection::ConnHandle;
use crate::lookup::Retrieve;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::HeaderMap;
use axum::response::Response;

/// `GET /v1/payment_methods/{id}`: the test payment method's card, or Stripe's missing-resource error.
pub(crate) async fn retrieve(
    State(app): State<Shared>,
    ConnectInfo(conn): ConnectInfo<ConnHandle>,
    headers: HeaderMap,
    Path(id): Path<String>,
    axum::extract::RawQuery(raw): axum::extract::RawQuery,
) -> Response {
    let path = format!("/v1/payment_methods/{id}");
    // Nothing of a payment method is expandable here: any query parameter is refused, as Stripe
    // refuses one it does not know.
    let query_error = crate::expand::parse(raw.as_deref(), &[]).err();
    let found = Retrieve {
        path: &path,
        param: "payment_method",
        kind: "payment_method",
        what: "payment method retrieve",
        query_error,
    };
    found
        .run(app, conn, &headers, id, |_, id| async move {
            Ok(payment_method_object(&id))
        })
        .await
}

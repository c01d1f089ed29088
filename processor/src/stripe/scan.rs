//! The account's recent payments, newest first (`GET /v1/payment_intents?created[gte]=…`), for the
//! reconciler's scan for money the ledger does not know about. List is read-after-write consistent,
//! so a payment created before the scan started is on its pages.

use super::StripeProcessor;
use super::lookup::{error_message, get_json, object_of};
use super::wire::{METADATA_BUSINESS_KEY, METADATA_INVOICE, METADATA_TENANT};
use crate::{FoundStatus, PriorPayment, RecentPage, RecentQuery, ScannedPayment};
use payonce_core::details::{Details, RawDetails};
use payonce_core::id::{BusinessKey, OperationId, TenantId};
use serde_json::Value;

/// Page size of a scan (Stripe's maximum).
const SCAN_PAGE_LIMIT: u32 = 100;

/// Metadata key of a refund carrying the payment operation it refunds.
const METADATA_PAYMENT_OPERATION_ID: &str = "payonce_payment_operation_id";

/// Which list a scan walks.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Listing {
    /// `GET /v1/payment_intents`.
    Payments,
    /// `GET /v1/refunds`.
    Refunds,
}

/// One page of the scan.
pub(crate) async fn page(
    p: &StripeProcessor,
    listing: Listing,
    query: &RecentQuery<'_>,
) -> RecentPage {
    let mut params: Vec<(&str, String)> = vec![
        ("created[gte]", query.created_gte_s.to_string()),
        ("limit", SCAN_PAGE_LIMIT.to_string()),
    ];
    if let Some(after) = query.starting_after {
        params.push(("starting_after", after.to_string()));
    }
    let Ok(qs) = serde_urlencoded::to_string(&params) else {
        return RecentPage::Unavailable {
            reason: "could not encode the list query".into(),
        };
    };
    let path = match listing {
        Listing::Payments => "/v1/payment_intents",
        Listing::Refunds => "/v1/refunds",
    };
    let url = format!("{}{path}?{qs}", p.config.api_base);
    let page = match get_json(p, url).await {
        Ok((200, v)) => v,
        Ok((429, v)) => {
            return RecentPage::RateLimited {
                reason: format!("list answered HTTP 429: {}", error_message(&v)),
            };
        }
        Ok((status, v)) => {
            return RecentPage::Unavailable {
                reason: format!("list answered HTTP {status}: {}", error_message(&v)),
            };
        }
        Err(why) => {
            return RecentPage::Unavailable {
                reason: why.to_string(),
            };
        }
    };
    let data = page
        .get("data")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut payments = Vec::with_capacity(data.len());
    for object in &data {
        let Some(id) = object.get("id").and_then(Value::as_str) else {
            continue;
        };
        payments.push(match listing {
            Listing::Payments => ScannedPayment {
                object: object_of(id, object),
                details: details_of(object),
                payment_operation: None,
            },
            Listing::Refunds => ScannedPayment {
                object: super::refund::object_of(id, object),
                details: None,
                payment_operation: object
                    .get("metadata")
                    .and_then(|m| m.get(METADATA_PAYMENT_OPERATION_ID))
                    .and_then(Value::as_str)
                    .and_then(|raw| OperationId::parse(raw).ok()),
            },
        });
    }
    let has_more = page
        .get("has_more")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let next = data
        .last()
        .and_then(|pi| pi.get("id"))
        .and_then(Value::as_str)
        .filter(|_| has_more)
        .map(str::to_string);
    RecentPage::Page { payments, next }
}

/// Most payments one search for a business key reads (one page, Stripe's maximum).
const PRIOR_SEARCH_LIMIT: u32 = 100;

/// `GET /v1/payment_intents/search` for the tenant's business key in metadata: the most
/// consequential payment found (succeeded, then in progress, then failed).
pub(crate) async fn prior_payment(
    p: &StripeProcessor,
    tenant: &TenantId,
    business_key: &BusinessKey,
) -> PriorPayment {
    // Tenant ids and business keys hold only token characters: no quote can end the value early.
    let query = format!(
        "metadata['{METADATA_TENANT}']:'{tenant}' AND metadata['{METADATA_BUSINESS_KEY}']:'{business_key}'"
    );
    let params = [("query", query), ("limit", PRIOR_SEARCH_LIMIT.to_string())];
    let Ok(qs) = serde_urlencoded::to_string(params) else {
        return PriorPayment::Unavailable {
            reason: "could not encode the search".into(),
        };
    };
    let url = format!("{}/v1/payment_intents/search?{qs}", p.config.api_base);
    let page = match get_json(p, url).await {
        Ok((200, v)) => v,
        Ok((status, v)) => {
            return PriorPayment::Unavailable {
                reason: format!("search answered HTTP {status}: {}", error_message(&v)),
            };
        }
        Err(why) => {
            return PriorPayment::Unavailable {
                reason: why.to_string(),
            };
        }
    };
    let rank = |status: &FoundStatus| match status {
        FoundStatus::Succeeded { .. } => 0,
        FoundStatus::Pending { .. } => 1,
        FoundStatus::Failed { .. } => 2,
    };
    let best = page
        .get("data")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|pi| Some(object_of(pi.get("id")?.as_str()?, pi)))
        .min_by_key(|object| rank(&object.status));
    match best {
        Some(object) => PriorPayment::Found(Box::new(object)),
        None => PriorPayment::None,
    }
}

/// The details a PaymentIntent payonce created carries: its own fields, the invoice from metadata.
fn details_of(pi: &Value) -> Option<Details> {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
    let raw = RawDetails {
        kind: "payment".into(),
        amount: pi.get("amount")?.as_i64()?,
        currency: text(pi.get("currency"))?,
        customer: text(pi.get("customer"))?,
        payment_method: text(pi.get("payment_method"))?,
        invoice: text(pi.get("metadata").and_then(|m| m.get(METADATA_INVOICE)))?,
        destination: text(pi.get("transfer_data").and_then(|t| t.get("destination"))),
        description: text(pi.get("description")),
        refund_of: None,
    };
    Details::parse(&raw).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn details_come_back_from_the_fields_and_the_invoice_metadata() {
        let pi = json!({"id": "pi_1", "amount": 2048, "currency": "usd", "customer": "cus_1",
            "payment_method": "pm_card_visa", "description": "March",
            "transfer_data": {"destination": "acct_1"},
            "metadata": {"payonce_invoice": "INV-1"}});
        let d = details_of(&pi).unwrap();
        assert_eq!(d.money().amount_minor(), 2048);
        assert_eq!(d.invoice(), "INV-1");
        assert_eq!(d.destination(), Some("acct_1"));
        assert_eq!(d.description(), Some("March"));
        let mut old = pi.clone();
        old["metadata"] = json!({});
        assert!(
            details_of(&old).is_none(),
            "no invoice: not enough for a row"
        );
    }
}

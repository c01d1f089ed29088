//! The test payment methods and the outcome each one decides when confirmed.

use crate::error::ApiError;
use serde_json::{Value, json};

/// What confirming a payment method does.
#[derive(Debug, Clone)]
pub(crate) enum CardOutcome {
    /// Paid at once.
    Succeeded,
    /// Declined: 402 `card_error`, the PaymentIntent goes back to `requires_payment_method`.
    Declined(ApiError),
    /// The customer must authenticate: `requires_action` with a `next_action`.
    RequiresAction(Value),
    /// `processing`, settling to `succeeded` later.
    Processing,
}

/// The payment methods the simulator knows; anything else is `resource_missing`.
pub(crate) const KNOWN_PAYMENT_METHODS: &[&str] = &[
    "pm_card_visa",
    "pm_card_mastercard",
    "pm_card_chargeDeclined",
    "pm_card_chargeDeclinedInsufficientFunds",
    "pm_card_authenticationRequired",
    "pm_card_processing",
    "pm_card_pendingRefund",
    "pm_card_refundFail",
    "pm_card_pendingRefundFail",
];

/// How a refund of a payment made with a test payment method behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RefundBehaviour {
    /// The status the refund is created with.
    pub(crate) initial: &'static str,
    /// The status it takes `refund_settle` later, if it changes.
    pub(crate) settles_to: Option<&'static str>,
}

/// The refund behaviour of a payment's method: Stripe's `pm_card_pendingRefund` (pending, then
/// succeeded) and `pm_card_refundFail` (succeeded, then failed), the simulator's own
/// `pm_card_pendingRefundFail` (pending, then failed); every other method refunds at once.
pub(crate) fn refund_behaviour(payment_method: Option<&str>) -> RefundBehaviour {
    let (initial, settles_to) = match payment_method {
        Some("pm_card_pendingRefund") => ("pending", Some("succeeded")),
        Some("pm_card_refundFail") => ("succeeded", Some("failed")),
        Some("pm_card_pendingRefundFail") => ("pending", Some("failed")),
        _ => ("succeeded", None),
    };
    RefundBehaviour {
        initial,
        settles_to,
    }
}

/// Whether the simulator knows the payment method.
pub(crate) fn is_known(payment_method: &str) -> bool {
    KNOWN_PAYMENT_METHODS.contains(&payment_method)
}

/// The outcome of confirming `payment_method`, `off_session` or not.
pub(crate) fn confirm(payment_method: &str, off_session: bool) -> CardOutcome {
    match payment_method {
        "pm_card_chargeDeclined" => CardOutcome::Declined(ApiError::card(
            "card_declined",
            "generic_decline",
            "Your card was declined.",
        )),
        "pm_card_chargeDeclinedInsufficientFunds" => CardOutcome::Declined(ApiError::card(
            "card_declined",
            "insufficient_funds",
            "Your card has insufficient funds.",
        )),
        // Off-session, nobody can authenticate: Stripe fails the attempt with authentication_required.
        "pm_card_authenticationRequired" if off_session => CardOutcome::Declined(ApiError::card(
            "authentication_required",
            "authentication_required",
            "Your card was declined. This transaction requires authentication.",
        )),
        "pm_card_authenticationRequired" => CardOutcome::RequiresAction(json!({
            "type": "use_stripe_sdk",
            "use_stripe_sdk": { "type": "three_d_secure_redirect" }
        })),
        "pm_card_processing" => CardOutcome::Processing,
        _ => CardOutcome::Succeeded,
    }
}

/// The card behind a known test payment method, as Stripe's test cards are numbered: brand and
/// last four digits.
fn card_of(payment_method: &str) -> Option<(&'static str, &'static str)> {
    Some(match payment_method {
        "pm_card_visa" => ("visa", "4242"),
        "pm_card_mastercard" => ("mastercard", "4444"),
        "pm_card_chargeDeclined" => ("visa", "0002"),
        "pm_card_chargeDeclinedInsufficientFunds" => ("visa", "9995"),
        "pm_card_authenticationRequired" => ("visa", "3184"),
        "pm_card_processing" => ("visa", "0077"),
        "pm_card_pendingRefund" => ("visa", "3155"),
        "pm_card_refundFail" => ("visa", "5126"),
        "pm_card_pendingRefundFail" => ("visa", "5128"),
        _ => return None,
    })
}

/// A PaymentMethod object of type `card`, in Stripe's shape (the fields payonce reads and a few
/// around them).
pub(crate) fn payment_method_object(id: &str) -> Option<Value> {
    let (brand, last4) = card_of(id)?;
    Some(json!({
        "id": id,
        "object": "payment_method",
        "type": "card",
        "livemode": false,
        "card": { "brand": brand, "last4": last4, "exp_month": 12, "exp_year": 2034, "funding": "credit", "country": "US" },
    }))
}

#[cfg(test)]
mod card_tests {
    use super::*;

    #[test]
    fn every_known_payment_method_has_a_card() {
        for pm in KNOWN_PAYMENT_METHODS {
            let object = payment_method_object(pm).unwrap();
            assert_eq!(object["card"]["last4"].as_str().unwrap().len(), 4, "{pm}");
        }
        assert!(payment_method_object("pm_unknown").is_none());
    }
}

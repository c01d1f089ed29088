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

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
];

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

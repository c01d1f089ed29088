//! Every bound the simulator enforces, with its name. Stripe's own limits where it documents them.

/// Largest accepted request body.
pub(crate) const BODY_BYTES_MAX: usize = 64 * 1024;
/// Longest accepted `Idempotency-Key` (Stripe: 255 characters).
pub(crate) const IDEMPOTENCY_KEY_LEN_MAX: usize = 255;
/// Largest `limit` on list and search endpoints (Stripe: 100).
pub(crate) const LIST_LIMIT_MAX: i64 = 100;
/// `limit` when none is given (Stripe: 10).
pub(crate) const LIST_LIMIT_DEFAULT: i64 = 10;
/// Most metadata keys on one object (Stripe: 50).
pub(crate) const METADATA_KEYS_MAX: usize = 50;
/// Longest metadata key (Stripe: 40 characters).
pub(crate) const METADATA_KEY_LEN_MAX: usize = 40;
/// Longest metadata value (Stripe: 500 characters).
pub(crate) const METADATA_VALUE_LEN_MAX: usize = 500;
/// Longest string parameter (Stripe's spec: maxLength 5000).
pub(crate) const STRING_PARAM_LEN_MAX: usize = 5000;
/// Longest description (Stripe's spec: maxLength 1000).
pub(crate) const DESCRIPTION_LEN_MAX: usize = 1000;
/// Largest amount in minor units (Stripe: eight digits).
pub(crate) const AMOUNT_MAX: i64 = 99_999_999;
/// Most parameters in one request.
pub(crate) const PARAMS_MAX: usize = 200;
/// Most fault rules armed at once.
pub(crate) const FAULT_RULES_MAX: usize = 100;
/// Longest search query.
pub(crate) const SEARCH_QUERY_LEN_MAX: usize = 1000;
/// Most recent requests kept by the request audit.
pub(crate) const REQUEST_AUDIT_MAX: usize = 1000;
/// Farthest one `POST /_sim/clock` may move the simulator's clock (a year: past Stripe's 24 h key
/// retention and any settle delay, short of overflowing a timestamp).
pub(crate) const CLOCK_ADVANCE_MS_MAX: i64 = 366 * 24 * 60 * 60 * 1000;
/// Most payments on one page of the payment audit, and its page size when none is asked for
/// (`has_more` says another page follows).
pub(crate) const AUDIT_PAYMENTS_MAX: i64 = 10_000;
/// Most refunds returned by the refund audit.
pub(crate) const AUDIT_REFUNDS_MAX: i64 = 10_000;

//! A processor's documented idempotency and lookup contract, as data: what its key is, how long it
//! lasts, what the same key does with another payload or a concurrent request, what is saved under
//! it, and how a past request can be found. The reconciler's decisions and the worker's submission
//! path read these fields instead of assuming Stripe's semantics.
//!
//! Two sets of constants:
//! - [`DOCUMENTED`]: six processors' contracts as their documentation states them (the values of the
//!   table in docs/processor-contract.md, which a test renders from these constants);
//! - [`ON_STRIPE_WIRE`]: the contracts the simulator runs on Stripe's wire (`payonce simulator
//!   --contract NAME`), each one documented behaviour beside Stripe's; an adapter declares the one
//!   its simulator runs (setting `processor_contract`).

use serde::Serialize;
use std::time::Duration;

/// Thirty minutes: Qonto's documented key retention.
pub const QONTO_KEY_RETENTION: Duration = Duration::from_secs(30 * 60);
/// Twenty-four hours: Stripe's and Checkout.com's documented key retention, Worldline's lower bound.
pub const DAY: Duration = Duration::from_secs(24 * 60 * 60);
/// Thirty-one days: Adyen's documented lower bound on key retention.
pub const ADYEN_KEY_RETENTION: Duration = Duration::from_secs(31 * 24 * 60 * 60);
/// Longest idempotency key Stripe accepts (its API reference: "up to 255 characters").
pub const STRIPE_KEY_LEN_MAX: usize = 255;
/// Longest idempotency key Adyen accepts (64 characters).
pub const ADYEN_KEY_LEN_MAX: usize = 64;

/// How the processor receives the idempotency key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct KeyFormat {
    /// The HTTP header that carries it (`Idempotency-Key`, `Cko-Idempotency-Key`, ...).
    pub header: &'static str,
    /// The longest key accepted, when the documentation says (`None`: not stated).
    pub len_max: Option<usize>,
}

/// Across what the processor compares keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyScope {
    /// One key space per account (Stripe: per account, test and live apart).
    Account,
    /// One key space per company account (Adyen), and whether a key is checked across the regions
    /// the account is served from (Adyen: it is not, so a retry must go to the same region).
    CompanyAccount {
        /// Whether the same key sent to another region is recognised.
        checked_across_regions: bool,
    },
    /// The documentation does not say.
    Unstated,
}

/// What the same key with another payload (another amount, say) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OtherPayload {
    /// Refused with an error (Stripe: 400 `idempotency_error`; Adyen: an error).
    Refused,
    /// Answered with the first request's outcome as if it were this one's (Worldline; Qonto's cached
    /// response; PayPal: the latest status of the first request). payonce never relies on a refusal
    /// anyway: its key changes with the details, and an answer whose amount or currency differ from
    /// the approved ones is a contradiction for a human.
    ReplaysFirst,
    /// Not checked, or not documented (Checkout.com: nothing stated): assumed not checked.
    NotChecked,
}

/// What a second request with the key does while the first is still executing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Concurrent {
    /// Refused with a conflict error (Stripe: 409; Worldline: 409 while in progress).
    ConflictError,
    /// A transient error while the first is in progress (Adyen).
    TransientError,
    /// Only one of them is processed (Checkout.com).
    OnlyOneProcessed,
    /// The second may fail (PayPal): its error says nothing about the first.
    MayFailSecond,
    /// The documentation does not say (Qonto).
    Unstated,
}

/// What the processor saves under a key, i.e. what a retry with the key gets back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Saved {
    /// The first answer, errors included, once execution has started (Stripe): a retry returns
    /// exactly what the first request did, a 500 included.
    FirstAnswer,
    /// Only successful (2xx) answers (Checkout.com; Qonto: "success"): a request that executed and
    /// answered 4xx or 5xx is executed AGAIN when retried with its key, so an ambiguous outcome is
    /// never retried with the key before a lookup proves nothing executed.
    Only2xx,
    /// The outcome of the operation (Adyen: "the result"; Worldline).
    Outcome,
    /// The request (PayPal: a retry returns the latest status of the first request).
    Request,
}

/// How consistent a lookup is with the writes before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Consistency {
    /// Reflects every committed write at once: "not found" means "never created".
    ReadAfterWrite,
    /// May lag writes (Stripe's search: up to an hour): "not found" proves nothing.
    Lagging,
}

/// Which lookups exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Lookups {
    /// Retrieve one object by the processor's reference (read-after-write where it exists).
    pub by_id: bool,
    /// List recent objects and match the operation in them, without its reference.
    pub list: Option<Consistency>,
    /// Search by metadata.
    pub search: Option<Consistency>,
}

impl Lookups {
    /// No lookup at all.
    pub const NONE: Lookups = Lookups {
        by_id: false,
        list: None,
        search: None,
    };

    /// How consistently payonce can find an operation's object: by its reference when the ledger
    /// has one (`has_reference`) and the processor retrieves by id, else by a list. Search is not
    /// counted: it lags, and serves only the check before a first submission. `None`: nothing can
    /// find it.
    pub fn finding(&self, has_reference: bool) -> Option<Consistency> {
        if has_reference && self.by_id {
            return Some(Consistency::ReadAfterWrite);
        }
        self.list
    }
}

/// How the processor signs its notifications.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WebhookScheme {
    /// `Stripe-Signature`: HMAC-SHA256 of `timestamp.payload`, with a tolerance on the timestamp.
    StripeSignature,
    /// Adyen's HMAC-signed standard notifications (HMAC-SHA256 over the notification's fields).
    AdyenHmac,
    /// Not part of the contract recorded here.
    Unstated,
}

impl WebhookScheme {
    /// Whether a verified notification is itself the outcome payonce applies (once checked against
    /// the operation), rather than a hint whose object must be retrieved first. Adyen's are: a
    /// payment cannot be retrieved, and its notification names the `pspReference` Adyen answered
    /// with (`reconciler/src/notification.rs`). A Stripe event is not: payonce applies only what a
    /// retrieve of its object returns.
    pub fn carries_outcome(self) -> bool {
        match self {
            WebhookScheme::AdyenHmac => true,
            WebhookScheme::StripeSignature | WebhookScheme::Unstated => false,
        }
    }
}

/// The documentation's own words per column of docs/processor-contract.md's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Words {
    /// Key header (and its limits).
    pub key: &'static str,
    /// Retention.
    pub retention: &'static str,
    /// Same key, other payload.
    pub other_payload: &'static str,
    /// Concurrent same key.
    pub concurrent: &'static str,
    /// What is saved.
    pub saved: &'static str,
    /// Lookup.
    pub lookup: &'static str,
}

/// A processor's contract. Built only as the constants below or from them ([`by_name`],
/// [`Contract::with_key_retention`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Contract {
    /// The contract's name: `stripe`, `adyen`, ...; for the simulator's, its `--contract` name.
    pub name: &'static str,
    /// Whose documentation it follows (`Stripe`, `Adyen Checkout`, ...).
    pub processor: &'static str,
    /// The wire format an adapter speaks to it: `stripe` for every contract the simulator runs on
    /// Stripe's wire (the scan's watermark is kept per wire).
    pub wire: &'static str,
    /// The idempotency key; `None`: no idempotent submission at all.
    pub key: Option<KeyFormat>,
    /// How long the processor remembers a key; `None`: no single documented figure (PayPal: per
    /// API), so payonce never counts on it: the window is treated as closed.
    pub key_retention: Option<Duration>,
    /// Across what keys are compared.
    pub scope: KeyScope,
    /// What the same key with another payload does.
    pub other_payload: OtherPayload,
    /// What a concurrent request with the same key does.
    pub concurrent: Concurrent,
    /// What is saved under the key.
    pub saved: Saved,
    /// Which lookups exist, and how consistent they are.
    pub lookups: Lookups,
    /// How notifications are signed.
    pub webhooks: WebhookScheme,
    /// The documentation's own words, one per column of the table.
    pub words: Words,
}

impl Contract {
    /// The same contract with another key retention: a simulator configured shorter (tests), or the
    /// 30-minute `short-retention` contract shortened further.
    pub fn with_key_retention(mut self, retention: Duration) -> Contract {
        self.key_retention = Some(retention);
        self
    }

    /// Whether the processor deduplicates submissions by key at all.
    pub fn idempotent(&self) -> bool {
        self.key.is_some()
    }

    /// Whether a retry with the key, while the processor remembers it, returns what the first
    /// request did instead of executing again, whatever that first request answered. False for a
    /// contract that saves only 2xx answers: the retry of an executed request that answered 5xx
    /// executes again.
    pub fn retry_replays(&self) -> bool {
        self.idempotent() && self.saved != Saved::Only2xx
    }

    /// Whether a request first submitted at `first_submitted` (ms, `None`: never sent) can still be
    /// retried with its key at `now`, landing at least `margin` before the processor forgets it.
    /// Closed without idempotent submission, and without a documented retention.
    pub fn window_open(
        &self,
        first_submitted: Option<payonce_core::clock::Timestamp>,
        now: payonce_core::clock::Timestamp,
        margin: Duration,
    ) -> bool {
        if !self.idempotent() {
            return false;
        }
        match (self.key_retention, first_submitted) {
            (None, _) => false,
            // No submission time recorded: nothing can have used the key yet.
            (Some(_), None) => true,
            (Some(retention), Some(first)) => now + margin < first + retention,
        }
    }

    /// Whether an operation holding the reference the processor answered with is settled only by
    /// its notification: nothing retrieves it by that reference, and the notification carries the
    /// outcome. A same-key retry then only replays the saved answer (`Received`), so the operation
    /// waits for the notification instead.
    pub fn notification_settles_reference(&self) -> bool {
        !self.lookups.by_id && self.webhooks.carries_outcome()
    }

    /// Why a key of `len` characters cannot be sent to this processor, if it cannot.
    pub fn refuses_key_len(&self, len: usize) -> Option<String> {
        let key = self.key?;
        let max = key.len_max?;
        (len > max).then(|| {
            format!(
                "{} accepts keys of at most {max} characters in {}; payonce's are {len}",
                self.processor, key.header
            )
        })
    }
}

/// Stripe: `Idempotency-Key`, 24 h, mismatches refused, 409 on concurrency, the first answer saved
/// (errors included), lookups by id and list (consistent) and search (lagging).
pub const STRIPE: Contract = Contract {
    name: "stripe",
    processor: "Stripe",
    wire: "stripe",
    key: Some(KeyFormat {
        header: "Idempotency-Key",
        len_max: Some(STRIPE_KEY_LEN_MAX),
    }),
    key_retention: Some(DAY),
    scope: KeyScope::Account,
    other_payload: OtherPayload::Refused,
    concurrent: Concurrent::ConflictError,
    saved: Saved::FirstAnswer,
    lookups: Lookups {
        by_id: true,
        list: Some(Consistency::ReadAfterWrite),
        search: Some(Consistency::Lagging),
    },
    webhooks: WebhookScheme::StripeSignature,
    words: Words {
        key: "Idempotency-Key",
        retention: "24 h",
        other_payload: "400 idempotency_error",
        concurrent: "409",
        saved: "first answer, incl. errors after execution starts",
        lookup: "by id, list, search (lags)",
    },
};

/// Adyen Checkout: `Idempotency-Key` of at most 64 characters scoped to the company account and not
/// checked across regions, at least 31 days, mismatches refused, a transient error while in
/// progress, the result saved; no lookup of a payment by id: webhooks (HMAC-signed notifications).
pub const ADYEN_CHECKOUT: Contract = Contract {
    name: "adyen",
    processor: "Adyen Checkout",
    wire: "adyen",
    key: Some(KeyFormat {
        header: "Idempotency-Key",
        len_max: Some(ADYEN_KEY_LEN_MAX),
    }),
    key_retention: Some(ADYEN_KEY_RETENTION),
    scope: KeyScope::CompanyAccount {
        checked_across_regions: false,
    },
    other_payload: OtherPayload::Refused,
    concurrent: Concurrent::TransientError,
    saved: Saved::Outcome,
    lookups: Lookups::NONE,
    webhooks: WebhookScheme::AdyenHmac,
    words: Words {
        key: "Idempotency-Key (≤ 64 chars, company-account scope, not checked across regions)",
        retention: "at least 31 days",
        other_payload: "error",
        concurrent: "transient error while in progress",
        saved: "the result",
        lookup: "none by id for payments: webhooks (HMAC-signed notifications)",
    },
};

/// Checkout.com: `Cko-Idempotency-Key`, 24 h, mismatches not documented, only one of concurrent
/// requests processed, only 2xx answers saved (4xx/5xx re-execute), lookup by id.
pub const CHECKOUT_COM: Contract = Contract {
    name: "checkout-com",
    processor: "Checkout.com",
    wire: "checkout-com",
    key: Some(KeyFormat {
        header: "Cko-Idempotency-Key",
        len_max: None,
    }),
    key_retention: Some(DAY),
    scope: KeyScope::Unstated,
    other_payload: OtherPayload::NotChecked,
    concurrent: Concurrent::OnlyOneProcessed,
    saved: Saved::Only2xx,
    lookups: Lookups {
        by_id: true,
        list: None,
        search: None,
    },
    webhooks: WebhookScheme::Unstated,
    words: Words {
        key: "Cko-Idempotency-Key",
        retention: "24 h",
        other_payload: "—",
        concurrent: "only one processed",
        saved: "only 2xx answers (4xx/5xx re-executes)",
        lookup: "by id",
    },
};

/// Worldline Direct: `X-GCS-Idempotence-Key`, at least 24 h, the first outcome replayed even for
/// other payloads, 409 while in progress, the outcome saved, lookup by id.
pub const WORLDLINE_DIRECT: Contract = Contract {
    name: "worldline-direct",
    processor: "Worldline Direct",
    wire: "worldline-direct",
    key: Some(KeyFormat {
        header: "X-GCS-Idempotence-Key",
        len_max: None,
    }),
    key_retention: Some(DAY),
    scope: KeyScope::Unstated,
    other_payload: OtherPayload::ReplaysFirst,
    concurrent: Concurrent::ConflictError,
    saved: Saved::Outcome,
    lookups: Lookups {
        by_id: true,
        list: None,
        search: None,
    },
    webhooks: WebhookScheme::Unstated,
    words: Words {
        key: "X-GCS-Idempotence-Key",
        retention: "≥ 24 h",
        other_payload: "replays the first outcome even for other payloads",
        concurrent: "409 while in progress",
        saved: "the outcome",
        lookup: "by id",
    },
};

/// PayPal REST: `PayPal-Request-Id`, retention per API (no single figure), the latest status of the
/// first request for the same key, the second of concurrent requests may fail, the request saved,
/// lookup by id.
pub const PAYPAL_REST: Contract = Contract {
    name: "paypal-rest",
    processor: "PayPal REST",
    wire: "paypal-rest",
    key: Some(KeyFormat {
        header: "PayPal-Request-Id",
        len_max: None,
    }),
    key_retention: None,
    scope: KeyScope::Unstated,
    other_payload: OtherPayload::ReplaysFirst,
    concurrent: Concurrent::MayFailSecond,
    saved: Saved::Request,
    lookups: Lookups {
        by_id: true,
        list: None,
        search: None,
    },
    webhooks: WebhookScheme::Unstated,
    words: Words {
        key: "PayPal-Request-Id",
        retention: "per API",
        other_payload: "returns the latest status of the first request",
        concurrent: "may fail the second",
        saved: "the request",
        lookup: "by id",
    },
};

/// Qonto: `X-Qonto-Idempotency-Key`, 30 minutes, the cached response for the same key, concurrency
/// not documented, success saved, lookup by list (its consistency not documented: taken as lagging).
pub const QONTO: Contract = Contract {
    name: "qonto",
    processor: "Qonto",
    wire: "qonto",
    key: Some(KeyFormat {
        header: "X-Qonto-Idempotency-Key",
        len_max: None,
    }),
    key_retention: Some(QONTO_KEY_RETENTION),
    scope: KeyScope::Unstated,
    other_payload: OtherPayload::ReplaysFirst,
    concurrent: Concurrent::Unstated,
    saved: Saved::Only2xx,
    lookups: Lookups {
        by_id: false,
        list: Some(Consistency::Lagging),
        search: None,
    },
    webhooks: WebhookScheme::Unstated,
    words: Words {
        key: "X-Qonto-Idempotency-Key",
        retention: "30 minutes",
        other_payload: "cached response",
        concurrent: "—",
        saved: "success",
        lookup: "list",
    },
};

/// The six documented contracts, in the table's order.
pub const DOCUMENTED: [&Contract; 6] = [
    &STRIPE,
    &ADYEN_CHECKOUT,
    &CHECKOUT_COM,
    &WORLDLINE_DIRECT,
    &PAYPAL_REST,
    &QONTO,
];

/// `short-retention` on Stripe's wire: Stripe's contract with Qonto's 30-minute retention
/// (configurable shorter for tests).
pub const SHORT_RETENTION: Contract = Contract {
    name: "short-retention",
    processor: "simulator (Qonto-like retention)",
    key_retention: Some(QONTO_KEY_RETENTION),
    words: Words {
        retention: "30 minutes (configurable)",
        ..STRIPE.words
    },
    ..STRIPE
};

/// `replay-any-payload` on Stripe's wire: the same key with another payload replays the first
/// outcome (Worldline) instead of 400 `idempotency_error`.
pub const REPLAY_ANY_PAYLOAD: Contract = Contract {
    name: "replay-any-payload",
    processor: "simulator (Worldline-like mismatches)",
    other_payload: OtherPayload::ReplaysFirst,
    words: Words {
        other_payload: "replays the first outcome",
        ..STRIPE.words
    },
    ..STRIPE
};

/// `only-2xx-saved` on Stripe's wire: a request that executed and answered 4xx or 5xx is executed
/// again when retried with its key (Checkout.com).
pub const ONLY_2XX_SAVED: Contract = Contract {
    name: "only-2xx-saved",
    processor: "simulator (Checkout.com-like saving)",
    saved: Saved::Only2xx,
    words: Words {
        saved: "only 2xx answers (4xx/5xx re-executes)",
        ..STRIPE.words
    },
    ..STRIPE
};

/// `no-lookup` on Stripe's wire: retrieve, list and search are refused.
pub const NO_LOOKUP: Contract = Contract {
    name: "no-lookup",
    processor: "simulator (no lookup)",
    lookups: Lookups::NONE,
    words: Words {
        lookup: "none (retrieve, list and search refused)",
        ..STRIPE.words
    },
    ..STRIPE
};

/// The contracts the simulator runs on Stripe's wire, by `--contract` name; the Stripe adapter
/// declares one of them (setting `processor_contract`). Another wire's contracts (`adyen`, with its
/// adapter and simulator wire) join the registry in [`REGISTRY`].
pub const ON_STRIPE_WIRE: [&Contract; 5] = [
    &STRIPE,
    &SHORT_RETENTION,
    &REPLAY_ANY_PAYLOAD,
    &ONLY_2XX_SAVED,
    &NO_LOOKUP,
];

/// Every contract an adapter can declare and the simulator can run, by name: today the ones on
/// Stripe's wire. A contract of another wire is added here with its adapter.
pub const REGISTRY: &[&Contract] = &ON_STRIPE_WIRE;

/// The registered contract called `name`.
pub fn by_name(name: &str) -> Option<Contract> {
    REGISTRY
        .iter()
        .find(|c| c.name == name)
        .map(|c| (*c).clone())
}

/// The registered contracts' names, in order.
pub fn names() -> Vec<&'static str> {
    REGISTRY.iter().map(|c| c.name).collect()
}

/// The Markdown table of [`DOCUMENTED`] (docs/processor-contract.md holds it), one row per contract
/// in the documentation's words.
pub fn documented_table() -> String {
    let mut out = String::from(
        "| processor (documented) | key header | retention | same key, other payload | concurrent same key | what is saved | lookup |\n\
         | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for c in DOCUMENTED {
        let w = c.words;
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            c.processor, w.key, w.retention, w.other_payload, w.concurrent, w.saved, w.lookup
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use payonce_core::clock::Timestamp;
    use payonce_core::intention::INTENTION_KEY_LEN;

    #[test]
    fn names_are_unique_and_resolve() {
        let mut seen = std::collections::HashSet::new();
        for c in DOCUMENTED.iter().chain(REGISTRY.iter()) {
            // `stripe` is in both lists: the same constant.
            if !seen.insert(c.name) {
                assert_eq!(**c, STRIPE, "{} named twice", c.name);
            }
        }
        for name in names() {
            assert_eq!(by_name(name).map(|c| c.name), Some(name));
        }
        assert_eq!(by_name("adyen-v0"), None);
        assert!(ON_STRIPE_WIRE.iter().all(|c| c.wire == "stripe"));
    }

    #[test]
    fn every_payonce_key_fits_every_documented_processor() {
        let len = INTENTION_KEY_LEN;
        for c in DOCUMENTED.iter().chain(REGISTRY.iter()) {
            assert_eq!(c.refuses_key_len(len), None, "{}", c.name);
        }
        assert!(ADYEN_CHECKOUT.refuses_key_len(65).is_some());
        assert!(STRIPE.refuses_key_len(256).is_some());
    }

    #[test]
    fn the_window_closes_at_retention_minus_margin_and_never_opens_without_a_figure() {
        let first = Timestamp::from_millis(0);
        let margin = Duration::from_secs(300);
        let at = |d: Duration| Timestamp::from_millis(0) + d;
        assert!(STRIPE.window_open(Some(first), at(DAY - margin * 2), margin));
        assert!(!STRIPE.window_open(Some(first), at(DAY - margin / 2), margin));
        assert!(!STRIPE.window_open(Some(first), at(DAY), margin));
        assert!(STRIPE.window_open(None, at(DAY * 2), margin));
        // PayPal's retention is per API: never counted on.
        assert!(!PAYPAL_REST.window_open(Some(first), at(Duration::from_secs(1)), margin));
        let unkeyed = Contract {
            key: None,
            ..STRIPE
        };
        assert!(!unkeyed.window_open(None, at(Duration::ZERO), margin));
        let short = SHORT_RETENTION.with_key_retention(Duration::from_secs(2));
        assert!(!short.window_open(Some(first), at(Duration::from_secs(3)), Duration::ZERO));
    }

    #[test]
    fn only_contracts_that_save_every_answer_replay_a_retry() {
        let replaying: Vec<&str> = DOCUMENTED
            .iter()
            .chain(ON_STRIPE_WIRE.iter())
            .filter(|c| c.retry_replays())
            .map(|c| c.name)
            .collect();
        assert_eq!(
            replaying,
            [
                "stripe",
                "adyen",
                "worldline-direct",
                "paypal-rest",
                "stripe",
                "short-retention",
                "replay-any-payload",
                "no-lookup"
            ]
        );
    }

    #[test]
    fn finding_an_operation_needs_a_list_or_its_reference_and_a_retrieve() {
        assert_eq!(
            STRIPE.lookups.finding(false),
            Some(Consistency::ReadAfterWrite)
        );
        assert_eq!(CHECKOUT_COM.lookups.finding(false), None);
        assert_eq!(
            CHECKOUT_COM.lookups.finding(true),
            Some(Consistency::ReadAfterWrite)
        );
        assert_eq!(QONTO.lookups.finding(true), Some(Consistency::Lagging));
        assert_eq!(ADYEN_CHECKOUT.lookups.finding(true), None);
        assert_eq!(NO_LOOKUP.lookups.finding(true), None);
    }

    #[test]
    fn only_adyens_notifications_settle_a_reference_nothing_retrieves() {
        let settling: Vec<&str> = DOCUMENTED
            .iter()
            .chain(ON_STRIPE_WIRE.iter())
            .filter(|c| c.notification_settles_reference())
            .map(|c| c.name)
            .collect();
        assert_eq!(settling, ["adyen"]);
        // No lookup on Stripe's wire: its events are hints that need a retrieve, so nothing settles.
        assert!(!NO_LOOKUP.notification_settles_reference());
        let retrievable = Contract {
            lookups: STRIPE.lookups,
            ..ADYEN_CHECKOUT
        };
        assert!(!retrievable.notification_settles_reference());
    }

    #[test]
    fn the_table_is_the_documentations_words() {
        let table = documented_table();
        assert_eq!(table.lines().count(), 2 + DOCUMENTED.len());
        assert!(table.contains(
            "| Stripe | Idempotency-Key | 24 h | 400 idempotency_error | 409 | first answer, incl. \
             errors after execution starts | by id, list, search (lags) |"
        ));
        assert!(table.contains("| Qonto | X-Qonto-Idempotency-Key | 30 minutes | cached response | — | success | list |"));
    }
}

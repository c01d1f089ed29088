//! The processor contract the simulator runs (`payonce simulator --contract NAME`): Stripe's, or one
//! documented behaviour of another processor on Stripe's wire. Each one is implemented where the
//! behaviour lives: the idempotency layer (`idempotency`: other payloads, what is saved),
//! the key retention (`config`), and the lookup routes (`routes`). The fault
//! injection works the same under every contract.
//!
//! The names are payonce's contract registry's on Stripe's wire (`payonce_processor::
//! contract::ON_STRIPE_WIRE`; a test compares the two lists). Another wire's contract (`adyen`)
//! is added here as a variant with its wire's routes.

use std::time::Duration;

/// Adyen's idempotency-key retention: at least 31 days.
pub const ADYEN_KEY_RETENTION_DEFAULT: Duration = Duration::from_secs(31 * 24 * 60 * 60);

/// Which processor's wire the simulator speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Wire {
    /// Stripe's API under `/v1`, Stripe-signed events.
    #[default]
    Stripe,
    /// Adyen Checkout v71 under `/v71`, HMAC-signed standard notifications.
    Adyen,
}

/// Thirty minutes: `short-retention`'s default key retention (Qonto's documented one).
pub const SHORT_RETENTION_DEFAULT: Duration = Duration::from_secs(30 * 60);
/// Twenty-four hours: Stripe's key retention, every other contract's default.
pub const STRIPE_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

/// A contract the simulator can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Contract {
    /// Stripe's: the same key with other parameters is refused (400 `idempotency_error`), a
    /// concurrent request gets 409, the first answer of a request that began executing is saved
    /// (errors included), keys last 24 hours, retrieve and list are consistent, search lags.
    #[default]
    Stripe,
    /// Stripe's, with Qonto's 30-minute key retention (configurable shorter for tests).
    ShortRetention,
    /// Stripe's, except that the same key with another payload replays the first outcome
    /// (Worldline) instead of 400 `idempotency_error`.
    ReplayAnyPayload,
    /// Stripe's, except that only 2xx answers are saved under the key (Checkout.com): a request
    /// that executed and answered 4xx or 5xx is executed again when retried with its key.
    Only2xxSaved,
    /// Stripe's, except that retrieve, list and search are refused (404, no such endpoint).
    NoLookup,
    /// Adyen Checkout's, on Adyen's own wire ([`Wire::Adyen`], `adyen`): the
    /// same key with another payload refused (422 `704`), a concurrent one a transient 409, the
    /// result saved, keys kept 31 days, no lookup: notifications.
    Adyen,
}

/// Every contract, in `--list-contracts` order.
pub const CONTRACTS: [Contract; 6] = [
    Contract::Stripe,
    Contract::ShortRetention,
    Contract::ReplayAnyPayload,
    Contract::Only2xxSaved,
    Contract::NoLookup,
    Contract::Adyen,
];

impl Contract {
    /// The `--contract` name.
    pub fn name(self) -> &'static str {
        match self {
            Contract::Stripe => "stripe",
            Contract::ShortRetention => "short-retention",
            Contract::ReplayAnyPayload => "replay-any-payload",
            Contract::Only2xxSaved => "only-2xx-saved",
            Contract::NoLookup => "no-lookup",
            Contract::Adyen => "adyen",
        }
    }

    /// The contract called `name`, or why there is none.
    pub fn parse(name: &str) -> Result<Contract, String> {
        CONTRACTS
            .into_iter()
            .find(|c| c.name() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = CONTRACTS.iter().map(|c| c.name()).collect();
                format!(
                    "no simulator contract {name:?}; one of {}",
                    names.join(", ")
                )
            })
    }

    /// The key retention when none is configured.
    pub fn key_retention_default(self) -> Duration {
        match self {
            Contract::ShortRetention => SHORT_RETENTION_DEFAULT,
            Contract::Adyen => ADYEN_KEY_RETENTION_DEFAULT,
            _ => STRIPE_RETENTION,
        }
    }

    /// Whether the same key with another payload replays the first outcome instead of being
    /// refused.
    pub(crate) fn replays_any_payload(self) -> bool {
        self == Contract::ReplayAnyPayload
    }

    /// Whether an answer with `status` from a request that began executing is saved under its key.
    pub(crate) fn saves(self, status: u16) -> bool {
        match self {
            Contract::Only2xxSaved => (200..300).contains(&status),
            _ => true,
        }
    }

    /// Whether retrieve, list and search are served.
    pub(crate) fn offers_lookups(self) -> bool {
        self != Contract::NoLookup
    }

    /// The wire this contract is spoken on.
    pub fn wire(self) -> Wire {
        match self {
            Contract::Adyen => Wire::Adyen,
            _ => Wire::Stripe,
        }
    }
}

impl std::fmt::Display for Contract {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_ones_are_refused_with_the_list() {
        for c in CONTRACTS {
            assert_eq!(Contract::parse(c.name()), Ok(c));
        }
        let refused = Contract::parse("adyen-ish").unwrap_err();
        assert!(refused.contains("stripe, short-retention"), "{refused}");
    }

    #[test]
    fn each_contract_differs_from_stripe_in_its_one_behaviour() {
        let differs = |c: Contract| {
            [
                c.key_retention_default() != STRIPE_RETENTION,
                c.replays_any_payload(),
                !c.saves(500) || !c.saves(402),
                !c.offers_lookups(),
            ]
        };
        assert_eq!(differs(Contract::Stripe), [false; 4]);
        assert_eq!(
            differs(Contract::ShortRetention),
            [true, false, false, false]
        );
        assert_eq!(
            differs(Contract::ReplayAnyPayload),
            [false, true, false, false]
        );
        assert_eq!(differs(Contract::Only2xxSaved), [false, false, true, false]);
        assert_eq!(differs(Contract::NoLookup), [false, false, false, true]);
        assert_eq!(Contract::Adyen.wire(), Wire::Adyen);
        assert!(
            CONTRACTS
                .iter()
                .all(|c| (c.wire() == Wire::Adyen) == (*c == Contract::Adyen))
        );
        assert!(Contract::Only2xxSaved.saves(200));
    }
}

//! The settings' own tests: limiter modes, the processor contract, a second processor.

use super::{Common, builtin_defaults};
use clap::{Args, Command, FromArgMatches};
use payonce_processor::ProcessorKind;
use payonce_processor::limiter::Budget;
use std::time::Duration;

#[tokio::test]
async fn the_limiter_settings_build_each_mode_and_refuse_bad_values() {
    let mut common: Common = builtin_defaults().unwrap();
    let rates = common.limiter_rates();
    assert_eq!(rates.global_per_second, None, "0 means no account-wide cap");
    assert_eq!(rates.class_per_second(Budget::Write), 100);
    assert!(common.limiter().is_ok(), "local by default");
    common.limiter = "off".into();
    assert!(common.limiter().is_ok());
    common.limiter = "redis".into();
    assert!(common.limiter().is_ok(), "lazy: Redis need not be up");
    common.limiter_key_prefix = "bad prefix!".into();
    assert!(common.limiter().is_err());
    common.limiter = "local".into();
    common.limiter_global_per_second = 3;
    // 20% of 3/s is less than one request per second.
    assert!(common.limiter().is_err());
    let parsed = Common::augment_args(Command::new("t").no_binary_name(true))
        .try_get_matches_from(["--limiter-write-per-second", "0"]);
    assert!(parsed.is_err(), "a zero rate is refused at the boundary");
}

#[test]
fn the_processor_contract_is_one_of_the_registry_and_the_adapter_declares_it() {
    let parse = |args: &[&str]| {
        let matches = Common::augment_args(Command::new("t").no_binary_name(true))
            .try_get_matches_from(args)?;
        Common::from_arg_matches(&matches)
    };
    let defaults = parse(&[]).unwrap();
    assert_eq!(defaults.processor_contract, "stripe");
    let short = parse(&[
        "--processor-contract",
        "short-retention",
        "--key-retention-s",
        "5",
    ])
    .unwrap();
    let processor = short.processor().unwrap();
    assert_eq!(processor.contract().name, "short-retention");
    assert_eq!(
        processor.contract().key_retention,
        Some(Duration::from_secs(5))
    );
    assert!(parse(&["--processor-contract", "worldline"]).is_err());
    // Documented but not on this adapter's wire: refused too.
    assert!(parse(&["--processor-contract", "paypal-rest"]).is_err());
    let mut bypassed = defaults.clone();
    bypassed.processor_contract = "no-such".into();
    assert!(bypassed.processor().is_err(), "refused past the parser too");
}

#[test]
fn a_process_serves_the_other_processor_only_when_its_url_is_set() {
    let parse = |args: &[&str]| {
        let matches = Common::augment_args(Command::new("t").no_binary_name(true))
            .try_get_matches_from(args)
            .unwrap();
        Common::from_arg_matches(&matches).unwrap()
    };
    let configured = |c: &Common| c.processors().map(|p| p.configured());
    // Every existing configuration serves one processor, its own, as before.
    assert_eq!(configured(&parse(&[])).unwrap(), "stripe");
    assert_eq!(
        configured(&parse(&["--processor", "adyen"])).unwrap(),
        "adyen"
    );
    let both = parse(&["--adyen-url", "http://127.0.0.1:2"]);
    let processors = both.processors().unwrap();
    assert_eq!(processors.configured(), "stripe, adyen");
    assert_eq!(processors.default_kind(), ProcessorKind::Stripe);
    assert_eq!(
        processors
            .get(ProcessorKind::Adyen)
            .unwrap()
            .contract()
            .name,
        "adyen"
    );
    let both = parse(&["--processor", "adyen", "--stripe-url", "http://127.0.0.1:3"]);
    let processors = both.processors().unwrap();
    assert_eq!(processors.configured(), "adyen, stripe");
    assert_eq!(
        processors
            .get(ProcessorKind::Stripe)
            .unwrap()
            .contract()
            .name,
        "stripe"
    );
    // The default's own URL setting beside it is refused, not ignored.
    assert!(
        configured(&parse(&["--stripe-url", "http://127.0.0.1:3"]))
            .unwrap_err()
            .to_string()
            .contains("stripe_url")
    );
    assert!(
        configured(&parse(&["--processor", "adyen", "--adyen-url", "http://x"]))
            .unwrap_err()
            .to_string()
            .contains("adyen_url")
    );
}

//! `payonce simulator`: the simulator on its own, with its settings (a processor contract, its
//! key retention, webhooks and rate limits), until SIGTERM or Ctrl-C.

use clap::Args;
use payonce_simulator::{RateLimits, SimulatorConfig};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

/// `payonce simulator` settings.
#[derive(Debug, Clone, Args)]
pub struct SimulatorArgs {
    /// Listen address.
    #[arg(
        long,
        env = "PAYONCE_SIMULATOR_LISTEN",
        default_value = "127.0.0.1:12111"
    )]
    pub listen: SocketAddr,
    /// `sqlite::memory:` or a file.
    #[arg(
        long,
        env = "PAYONCE_SIMULATOR_DATABASE",
        default_value = "sqlite::memory:"
    )]
    pub database: String,
    /// The processor contract to run (`--list-contracts` names them): Stripe's, Adyen's (on Adyen's
    /// wire: `/v71`, `X-API-Key`, HMAC-signed standard notifications), or another processor's
    /// documented behaviour on Stripe's wire.
    #[arg(long, env = "PAYONCE_SIMULATOR_CONTRACT", default_value = "stripe",
          value_parser = payonce_simulator::Contract::parse)]
    pub contract: payonce_simulator::Contract,
    /// Print the contracts `--contract` takes, one name a line, and exit.
    #[arg(long)]
    pub list_contracts: bool,
    /// Idempotency key retention, seconds (default: the contract's; Stripe: 86400,
    /// short-retention: 1800, or shorter; adyen: 31 days).
    #[arg(long, env = "PAYONCE_SIMULATOR_KEY_RETENTION_S")]
    pub key_retention_s: Option<u64>,
    /// The `X-API-Key` the Adyen wire accepts.
    #[arg(
        long,
        env = "PAYONCE_SIMULATOR_ADYEN_API_KEY",
        default_value = "adyen_test_payonce",
        hide_env_values = true
    )]
    pub adyen_api_key: String,
    /// The one merchant account the Adyen wire accepts and its notifications name.
    #[arg(
        long,
        env = "PAYONCE_SIMULATOR_ADYEN_MERCHANT_ACCOUNT",
        default_value = "PayonceECOM"
    )]
    pub adyen_merchant_account: String,
    /// The HMAC key (hex) Adyen notifications are signed with (the default is published: a sandbox only).
    #[arg(
        long,
        env = "PAYONCE_SIMULATOR_ADYEN_HMAC_KEY",
        default_value = payonce_simulator::config::ADYEN_HMAC_KEY_DEFAULT,
        hide_env_values = true
    )]
    pub adyen_hmac_key: String,
    /// Where to deliver signed webhooks.
    #[arg(long, env = "PAYONCE_SIMULATOR_WEBHOOK_URL")]
    pub webhook_url: Option<String>,
    /// Webhook signing secret.
    #[arg(
        long,
        env = "PAYONCE_SIMULATOR_WEBHOOK_SECRET",
        default_value = "whsec_payonce_simulator",
        hide_env_values = true
    )]
    pub webhook_secret: String,
    /// Per mille of webhooks delivered twice.
    #[arg(
        long,
        env = "PAYONCE_SIMULATOR_WEBHOOK_DUPLICATES",
        default_value_t = 0
    )]
    pub webhook_duplicates_per_mille: u32,
    /// Seed for every random decision.
    #[arg(long, env = "PAYONCE_SIMULATOR_SEED", default_value_t = 1)]
    pub seed: u64,
    /// Stripe's rate limits to enforce, as JSON (`{"global_per_second":25,"endpoint_per_second":25,
    /// "search_per_second":20}`; also `read_per_second`, `write_per_second`, `endpoints`); `{}`: none.
    #[arg(long, env = "PAYONCE_SIMULATOR_RATE_LIMITS", default_value = "{}",
          value_parser = parse_rate_limits)]
    pub rate_limits: RateLimits,
    /// Time from a `/v1` request's arrival to its answer, ms (handled on arrival): a processor's own
    /// latency, so a benchmark's worker fills its in-flight limit (0: none).
    #[arg(long, env = "PAYONCE_SIMULATOR_LATENCY_MS", default_value_t = 0)]
    pub latency_ms: u64,
}

/// Parses and validates `--rate-limits`.
fn parse_rate_limits(raw: &str) -> Result<RateLimits, String> {
    let limits: RateLimits =
        serde_json::from_str(raw).map_err(|e| format!("rate limits JSON: {e}"))?;
    limits.validate()?;
    Ok(limits)
}

impl SimulatorArgs {
    fn config(&self) -> SimulatorConfig {
        let base = if self.contract == payonce_simulator::Contract::Adyen {
            SimulatorConfig::adyen()
        } else {
            SimulatorConfig::default()
        };
        SimulatorConfig {
            listen: self.listen,
            database: self.database.clone(),
            contract: self.contract,
            key_retention: self.key_retention_s.map_or_else(
                || self.contract.key_retention_default(),
                Duration::from_secs,
            ),
            adyen: payonce_simulator::AdyenSimConfig {
                api_key: self.adyen_api_key.clone(),
                merchant_account: self.adyen_merchant_account.clone(),
                hmac_key_hex: self.adyen_hmac_key.clone(),
            },
            webhook_url: self.webhook_url.clone(),
            webhook_secret: self.webhook_secret.clone(),
            webhook_duplicates_per_mille: self.webhook_duplicates_per_mille,
            seed: self.seed,
            rate_limits: self.rate_limits.clone(),
            latency: Duration::from_millis(self.latency_ms),
            ..base
        }
    }
}

/// Runs the simulator until SIGTERM or Ctrl-C (or lists its contracts).
pub async fn run(args: SimulatorArgs) -> anyhow::Result<ExitCode> {
    if args.list_contracts {
        for contract in payonce_simulator::CONTRACTS {
            println!("{contract}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    payonce_simulator::run(args.config(), crate::ops::shutdown_signal()).await?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulator_rate_limits_are_parsed_and_validated_at_the_boundary() {
        let sandbox = parse_rate_limits(
            r#"{"global_per_second":25,"endpoint_per_second":25,"search_per_second":20}"#,
        )
        .unwrap();
        assert_eq!(sandbox, RateLimits::stripe_sandbox());
        assert_eq!(parse_rate_limits("{}").unwrap(), RateLimits::default());
        assert!(parse_rate_limits(r#"{"global_per_second":0}"#).is_err());
        assert!(
            parse_rate_limits(r#"{"global":25}"#).is_err(),
            "unknown keys are refused"
        );
        assert!(parse_rate_limits("25").is_err());
    }

    #[test]
    fn the_simulators_contracts_are_the_registrys_on_stripes_wire_and_adyens() {
        use payonce_processor::contract::{ADYEN_CHECKOUT, ON_STRIPE_WIRE, by_name};
        let simulator: Vec<&str> = payonce_simulator::CONTRACTS
            .iter()
            .map(|c| c.name())
            .collect();
        let mut registry: Vec<&str> = ON_STRIPE_WIRE.iter().map(|c| c.name).collect();
        registry.push(ADYEN_CHECKOUT.name);
        assert_eq!(simulator, registry);
        // Each one's default retention is the retention the adapter's contract declares.
        for c in payonce_simulator::CONTRACTS {
            let declared = by_name(c.name())
                .or((c.name() == ADYEN_CHECKOUT.name).then_some(ADYEN_CHECKOUT))
                .and_then(|d| d.key_retention);
            assert_eq!(declared, Some(c.key_retention_default()), "{c}");
        }
    }

    #[test]
    fn the_simulator_command_takes_a_contract_and_its_default_retention() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            sim: SimulatorArgs,
        }
        let parse = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("simulator").chain(args.iter().copied()))
                .map(|c| c.sim)
        };
        let short = parse(&["--contract", "short-retention"]).unwrap().config();
        assert_eq!(short.contract, payonce_simulator::Contract::ShortRetention);
        assert_eq!(short.key_retention, Duration::from_secs(1_800));
        let shorter = parse(&["--contract", "short-retention", "--key-retention-s", "2"])
            .unwrap()
            .config();
        assert_eq!(shorter.key_retention, Duration::from_secs(2));
        assert_eq!(
            parse(&[]).unwrap().config().key_retention,
            Duration::from_secs(86_400)
        );
        assert!(parse(&["--contract", "stripe-ish"]).is_err());
    }
}

//! The soak's processes: `payonce api`, `payonce worker`s and a `payonce reconciler run`, spawned from
//! the binary under test, SIGKILLed at random and respawned, some with a failure point armed. Every
//! process speaks the wire of the contract the simulator runs (`--processor stripe` or `--processor
//! adyen`), and the api verifies the simulator's webhooks or notifications with this run's secret.

use anyhow::Context;
use payonce_core::failpoint::{self, FailPoint};
use payonce_simulator::Wire;
use payonce_simulator::config::{ADYEN_API_KEY_DEFAULT, ADYEN_MERCHANT_ACCOUNT_DEFAULT};
use std::fs::File;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::process::{Child, Command};

/// Worker and reconciler limits for the soak: short leases so a killed process's work is taken over
/// within seconds, and processor timeouts short enough that a hanging request is given up quickly.
/// The key secret of every chaos process and of the soak's own creates: one ledger, one secret.
pub const CHAOS_KEY_SECRET: &str = "payonce-chaos-soak-key-secret-0123456789abcdef";

const DAEMON_ENV: [(&str, &str); 16] = [
    ("RUST_LOG", "warn"),
    ("PAYONCE_LEASE_TTL_MS", "1500"),
    ("PAYONCE_LEASE_RENEW_MS", "400"),
    ("PAYONCE_WORKER_CONCURRENCY", "16"),
    ("PAYONCE_WORKER_BATCH", "8"),
    ("PAYONCE_POLL_MS", "200"),
    ("PAYONCE_FIRST_CHECK_MS", "500"),
    ("PAYONCE_PROCESSOR_TIMEOUT_MS", "2000"),
    ("PAYONCE_SUBMIT_TIMEOUT_MS", "3000"),
    ("PAYONCE_SHUTDOWN_GRACE_MS", "2000"),
    ("PAYONCE_SWEEP_INTERVAL_MS", "300"),
    ("PAYONCE_CHECK_BACKOFF_MS", "300"),
    ("PAYONCE_CHECK_BACKOFF_MAX_MS", "5000"),
    // A killed reconciler holds off the next one for this long.
    ("PAYONCE_SWEEP_LEASE_TTL_MS", "3000"),
    // Same-key retries land this long before the key is forgotten: above the submit timeout, and
    // short enough for a soak with a key retention of seconds to see both sides of its edge.
    ("PAYONCE_RETENTION_MARGIN_MS", "5000"),
    ("PAYONCE_DB_MAX_CONNECTIONS", "8"),
];

/// The processor contract a soak runs: the simulator runs it, every process declares it.
#[derive(Debug, Clone, Copy, Default)]
pub struct ContractRun {
    /// The contract.
    pub contract: payonce_simulator::Contract,
    /// Its key retention, when shorter than the contract's default (both sides use it).
    pub key_retention: Option<Duration>,
}

impl ContractRun {
    /// The key retention both sides use.
    pub fn key_retention(&self) -> Duration {
        self.key_retention
            .unwrap_or_else(|| self.contract.key_retention_default())
    }

    /// The wire the contract is spoken on, which the simulator serves and every process speaks.
    pub fn wire(&self) -> Wire {
        self.contract.wire()
    }
}

/// How the simulator signs what it sends the api, and the secret of this run the api verifies it
/// with (never the simulator's published default, which the api refuses).
#[derive(Clone)]
pub enum Signing {
    /// Stripe's `Stripe-Signature` header under a `whsec_` secret, posted to `/v1/webhooks/stripe`.
    Stripe {
        /// The webhook secret.
        secret: String,
    },
    /// Adyen's HMAC-SHA256 in every notification item (`additionalData.hmacSignature`) under a
    /// 32-byte hex key, posted to `/v1/webhooks/adyen`.
    Adyen {
        /// The HMAC key, hex.
        hmac_key_hex: String,
    },
}

impl Signing {
    /// A fresh secret for `wire`.
    pub fn fresh(wire: Wire) -> Signing {
        match wire {
            Wire::Stripe => Signing::Stripe {
                secret: format!("whsec_{}", payonce_core::id::random_hex(24)),
            },
            Wire::Adyen => Signing::Adyen {
                hmac_key_hex: payonce_core::id::random_hex(ADYEN_HMAC_KEY_BYTES),
            },
        }
    }

    /// The api's path the simulator posts to.
    pub fn path(&self) -> &'static str {
        match self {
            Signing::Stripe { .. } => "/v1/webhooks/stripe",
            Signing::Adyen { .. } => "/v1/webhooks/adyen",
        }
    }

    /// The api's setting that holds the secret, and its value.
    pub fn api_env(&self) -> (&'static str, &str) {
        match self {
            Signing::Stripe { secret } => ("PAYONCE_WEBHOOK_SECRETS", secret),
            Signing::Adyen { hmac_key_hex } => ("PAYONCE_ADYEN_HMAC_KEY", hmac_key_hex),
        }
    }
}

/// Bytes of a run's Adyen HMAC key (Adyen's keys are 32 bytes, shown as 64 hex digits).
const ADYEN_HMAC_KEY_BYTES: usize = 32;

/// What is needed to start any process of the fleet.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The `payonce` binary.
    pub bin: PathBuf,
    /// The ledger every process shares.
    pub database_url: String,
    /// The simulator's base URL.
    pub processor_url: String,
    /// Where every process's stderr goes.
    pub log: PathBuf,
    /// The contract every process declares (the simulator's).
    pub contract: ContractRun,
}

impl Launch {
    /// `payonce ARGS` on this fleet's ledger, simulator and log, with `env`.
    fn base(&self, args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<Command> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("opening the process log {}", self.log.display()))?;
        let mut cmd = Command::new(&self.bin);
        cmd.args(args)
            .env("PAYONCE_DATABASE_URL", &self.database_url)
            .env("PAYONCE_KEY_SECRET", CHAOS_KEY_SECRET)
            .env("PAYONCE_PROCESSOR_URL", &self.processor_url)
            .env(
                "PAYONCE_KEY_RETENTION_S",
                self.contract.key_retention().as_secs().to_string(),
            );
        match self.contract.wire() {
            Wire::Stripe => {
                cmd.args(["--processor", "stripe"])
                    .env("PAYONCE_PROCESSOR_CONTRACT", self.contract.contract.name());
            }
            // Adyen's adapter declares Adyen's own contract; a contract of Stripe's wire named
            // beside it is refused, so none is inherited either.
            Wire::Adyen => {
                cmd.args(["--processor", "adyen"])
                    .env_remove("PAYONCE_PROCESSOR_CONTRACT")
                    .env("PAYONCE_ADYEN_API_KEY", ADYEN_API_KEY_DEFAULT)
                    .env(
                        "PAYONCE_ADYEN_MERCHANT_ACCOUNT",
                        ADYEN_MERCHANT_ACCOUNT_DEFAULT,
                    );
            }
        }
        cmd.envs(env.iter().copied())
            .env_remove(failpoint::ENV)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true);
        Ok(cmd)
    }

    fn command(&self, args: &[&str], failpoint: Option<FailPoint>) -> anyhow::Result<Command> {
        let mut cmd = self.base(args, &DAEMON_ENV)?;
        if let Some(point) = failpoint {
            cmd.env(failpoint::ENV, point.name());
        }
        Ok(cmd)
    }

    /// Starts `payonce ARGS` with `env` instead of the failure soak's settings, after `customize`
    /// (the steady soak's processes run production defaults).
    pub fn spawn(
        &self,
        args: &[&str],
        env: &[(&str, &str)],
        customize: impl FnOnce(&mut Command),
    ) -> anyhow::Result<Child> {
        let mut cmd = self.base(args, env)?;
        customize(&mut cmd);
        cmd.spawn()
            .with_context(|| format!("spawning payonce {}", args.join(" ")))
    }

    /// Starts `payonce worker`, aborting at `failpoint` if given.
    pub fn worker(&self, failpoint: Option<FailPoint>) -> anyhow::Result<Child> {
        self.command(&["worker"], failpoint)?
            .spawn()
            .context("spawning payonce worker")
    }

    /// Starts `payonce reconciler run`, aborting at `failpoint` if given.
    pub fn reconciler(&self, failpoint: Option<FailPoint>) -> anyhow::Result<Child> {
        self.command(&["reconciler", "run"], failpoint)?
            .spawn()
            .context("spawning payonce reconciler run")
    }

    /// Starts `payonce api` on `port`, accepting webhooks or notifications signed as `signing` says.
    pub fn api(&self, port: u16, signing: &Signing) -> anyhow::Result<Child> {
        let listen = format!("127.0.0.1:{port}");
        let mut cmd = self.command(&["api", "--listen", &listen], None)?;
        let (setting, secret) = signing.api_env();
        cmd.env(setting, secret)
            .spawn()
            .context("spawning payonce api")
    }
}

/// A soak's stage before its processes start: the in-process simulator, sending its signed webhooks
/// (Stripe's wire) or notifications (Adyen's) to an api about to listen on a free port, and how to
/// launch the fleet against both.
pub struct Stage {
    /// The api's port.
    pub port: u16,
    /// The api's base URL.
    pub api_base: String,
    /// How the simulator signs, with this run's secret.
    pub signing: Signing,
    /// The simulator.
    pub sim: payonce_simulator::Simulator,
    /// The fleet's launcher, on `database_url` and the simulator.
    pub launch: Launch,
}

/// Starts the simulator (`processing` payments settle in 0.5 s) running `contract` for a fleet of
/// `bin` on `database_url`, logging to `log`; `duplicates_per_mille` of its webhooks are sent twice.
pub async fn stage(
    bin: PathBuf,
    database_url: String,
    log: PathBuf,
    duplicates_per_mille: u32,
    seed: u64,
    contract: ContractRun,
) -> anyhow::Result<Stage> {
    let port = free_port()?;
    let api_base = format!("http://127.0.0.1:{port}");
    let signing = Signing::fresh(contract.wire());
    let mut config = payonce_simulator::SimulatorConfig {
        webhook_url: Some(format!("{api_base}{}", signing.path())),
        webhook_duplicates_per_mille: duplicates_per_mille,
        processing_settle: Duration::from_millis(500),
        seed,
        key_retention: contract.key_retention(),
        ..payonce_simulator::SimulatorConfig::for_contract(contract.contract)
    };
    match &signing {
        Signing::Stripe { secret } => config.webhook_secret = secret.clone(),
        Signing::Adyen { hmac_key_hex } => {
            config.adyen.api_key = ADYEN_API_KEY_DEFAULT.to_string();
            config.adyen.merchant_account = ADYEN_MERCHANT_ACCOUNT_DEFAULT.to_string();
            config.adyen.hmac_key_hex = hmac_key_hex.clone();
        }
    }
    let sim = payonce_simulator::Simulator::start(config).await?;
    let launch = Launch {
        bin,
        database_url,
        processor_url: sim.base_url(),
        log,
        contract,
    };
    Ok(Stage {
        port,
        api_base,
        signing,
        sim,
        launch,
    })
}

/// SIGKILLs `child` (tokio's `start_kill` sends SIGKILL on Unix) and reaps it.
pub async fn sigkill(child: &mut Child) {
    let _ = child.start_kill();
    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
}

/// Whether `child` has exited (e.g. aborted at its failure point).
pub fn exited(child: &mut Child) -> bool {
    matches!(child.try_wait(), Ok(Some(_)))
}

/// The lowest port [`free_port`] hands out (below it sit well-known services).
pub const FREE_PORT_FLOOR: u16 = 10_000;
/// The kernel's ephemeral range, read where the machine does not say.
const EPHEMERAL_RANGE_FILE: &str = "/proc/sys/net/ipv4/ip_local_port_range";
/// Linux's default first ephemeral port, when the file above cannot be read.
const EPHEMERAL_LOW_DEFAULT: u16 = 32_768;

/// A loopback port nothing listens on now, for a child process to listen on.
///
/// Taken from below the kernel's ephemeral range (`net.ipv4.ip_local_port_range`). A port from
/// `bind("127.0.0.1:0")` lies inside that range, so between its release and the child's own bind
/// an outgoing connection of any process (a Postgres pool, an HTTP client with 512 requests in
/// flight) could be given it, and the child died with "Address already in use" (seen in the bench's
/// fleet). Below the range only an explicit bind can take it. Each process starts at its own random
/// point and walks on from there, so one process never hands out the same port twice and two
/// processes rarely try the same one.
pub fn free_port() -> anyhow::Result<u16> {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU32, Ordering};
    // Read once a process: the ephemeral range's start, the span below it, this process's start.
    static WALK: OnceLock<(u16, u32, u32)> = OnceLock::new();
    static TAKEN: AtomicU32 = AtomicU32::new(0);
    let (low, span, start) = *WALK.get_or_init(|| {
        let low = ephemeral_low();
        let span = u32::from(low.saturating_sub(FREE_PORT_FLOOR));
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        (low, span, (h.finish() % u64::from(span.max(1))) as u32)
    });
    anyhow::ensure!(
        span > 0,
        "no ports between {FREE_PORT_FLOOR} and the ephemeral range's start {low}"
    );
    for _ in 0..span {
        let step = TAKEN.fetch_add(1, Ordering::Relaxed);
        let port = FREE_PORT_FLOOR + (start.wrapping_add(step) % span) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    anyhow::bail!("no free loopback port between {FREE_PORT_FLOOR} and {low}")
}

/// The first port of the kernel's ephemeral range.
fn ephemeral_low() -> u16 {
    std::fs::read_to_string(EPHEMERAL_RANGE_FILE)
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(EPHEMERAL_LOW_DEFAULT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_lie_below_the_ephemeral_range_and_are_never_handed_out_twice() {
        let low = ephemeral_low();
        let ports: Vec<u16> = (0..64).map(|_| free_port().expect("a free port")).collect();
        for &port in &ports {
            assert!(
                (FREE_PORT_FLOOR..low).contains(&port),
                "{port} outside {FREE_PORT_FLOOR}..{low}"
            );
        }
        let distinct: std::collections::HashSet<u16> = ports.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            ports.len(),
            "a port handed out twice: {ports:?}"
        );
        let port = free_port().expect("a free port");
        std::net::TcpListener::bind(("127.0.0.1", port)).expect("the port handed out is free");
    }
}

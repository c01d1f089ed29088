//! The api's settings: where it listens, its webhook secrets, approval and link lifetimes, and its
//! connection limits.

use clap::Args;
use std::time::Duration;

/// API settings.
#[derive(Debug, Clone, Args)]
pub struct ApiArgs {
    /// Listen address.
    #[arg(long, env = "PAYONCE_API_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: std::net::SocketAddr,
    /// Externally visible base URL for confirmation links (default: http://LISTEN).
    #[arg(long, env = "PAYONCE_PUBLIC_BASE_URL")]
    pub public_base_url: Option<String>,
    /// Stripe webhook secrets, comma-separated (several during rotation).
    #[arg(
        long,
        env = "PAYONCE_WEBHOOK_SECRETS",
        default_value = "",
        hide_env_values = true
    )]
    pub webhook_secrets: String,
    /// Adyen HMAC key (hex, from the Customer Area) the api verifies notifications with; empty:
    /// every Adyen notification is refused.
    #[arg(
        long,
        env = "PAYONCE_ADYEN_HMAC_KEY",
        default_value = "",
        hide_env_values = true
    )]
    pub adyen_hmac_key: String,
    /// How long an approval stays valid, seconds.
    #[arg(long, env = "PAYONCE_APPROVAL_TTL_S", default_value_t = 86_400)]
    pub approval_ttl_s: u64,
    /// How long a confirmation link stays usable, seconds.
    #[arg(long, env = "PAYONCE_LINK_TTL_S", default_value_t = 900)]
    pub link_ttl_s: u64,
    /// Accept the simulator's published webhook secret (a sandbox that only talks to the simulator).
    #[arg(long, env = "PAYONCE_SIMULATOR_DEV_MODE", default_value_t = false)]
    pub simulator_dev_mode: bool,
    /// Longest a client may take to send a request's headers before its connection is closed, ms.
    #[arg(long, env = "PAYONCE_HEADER_READ_TIMEOUT_MS", default_value_t = 10_000)]
    pub header_read_timeout_ms: u64,
    /// Most HTTP connections the api serves at once.
    #[arg(long, env = "PAYONCE_CONNECTIONS_MAX", default_value_t = 1024)]
    pub connections_max: usize,
    /// Browser origins allowed to call /mcp besides the public base URL's, comma-separated (`https://app.example.com`).
    #[arg(long, env = "PAYONCE_MCP_ALLOWED_ORIGINS", default_value = "")]
    pub mcp_allowed_origins: String,
}

impl ApiArgs {
    /// The API configuration.
    pub fn config(&self) -> payonce_api::ApiConfig {
        payonce_api::ApiConfig {
            listen: self.listen,
            public_base_url: self
                .public_base_url
                .clone()
                .unwrap_or_else(|| format!("http://{}", self.listen)),
            approval_ttl: Duration::from_secs(self.approval_ttl_s),
            link_ttl: Duration::from_secs(self.link_ttl_s),
            webhook_secrets: self
                .webhook_secrets
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect(),
            adyen_hmac_key: (!self.adyen_hmac_key.is_empty()).then(|| self.adyen_hmac_key.clone()),
            simulator_dev_mode: self.simulator_dev_mode,
            header_read_timeout: Duration::from_millis(self.header_read_timeout_ms),
            connections_max: self.connections_max,
            mcp_allowed_origins: self
                .mcp_allowed_origins
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect(),
            ..payonce_api::ApiConfig::default()
        }
    }
}

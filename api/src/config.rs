//! The API's settings. Every limit has a named default; the binary may override them.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

/// Default listen address: loopback only, so a quick start never exposes the API by accident.
pub const LISTEN_DEFAULT: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 8080);
/// How long a recorded approval stays valid by default: a day, so a queued payment is not executed
/// on a week-old "yes".
pub const APPROVAL_TTL_DEFAULT: Duration = Duration::from_secs(24 * 60 * 60);
/// How long a confirmation link stays usable by default: long enough to read an email, short enough
/// that a leaked link is soon worthless.
pub const LINK_TTL_DEFAULT: Duration = Duration::from_secs(15 * 60);
/// Largest request body accepted by default. Operation bodies are a few hundred bytes; 64 KiB leaves
/// room for tool-call envelopes without letting a client make the server buffer megabytes.
pub const BODY_LIMIT_BYTES_DEFAULT: usize = 64 * 1024;
/// Longest any request may take before the server answers 503 `request_timeout`: no handler waits on
/// anything but the ledger, so a slow request means a sick database.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest a client may take to send a request's complete header block (every request on a
/// connection, the first and each keep-alive one) before the connection is closed: slow-loris
/// clients trickling header lines must not hold sockets (issue 13).
pub const HEADER_READ_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);
/// Most connections served at once; further ones wait in the listen backlog until one closes, so a
/// flood of idle sockets cannot exhaust file descriptors.
pub const CONNECTIONS_MAX_DEFAULT: usize = 1024;
/// The simulator's published webhook secret (`payonce_simulator::config::WEBHOOK_SECRET_DEFAULT`):
/// anyone can sign with it, so the api refuses it unless `simulator_dev_mode` is on.
pub const SIMULATOR_WEBHOOK_SECRET: &str = "whsec_payonce_simulator";
/// The simulator's published Adyen HMAC key (`payonce_simulator::config::ADYEN_HMAC_KEY_DEFAULT`):
/// refused like the published webhook secret.
pub const SIMULATOR_ADYEN_HMAC_KEY: &str =
    "7061796f6e63655f73696d756c61746f725f616479656e5f686d61635f6b3031";

/// A configuration the api refuses to start with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A webhook secret everyone knows would let anyone sign webhooks.
    #[error(
        "webhook_secrets contains the simulator's published default secret, which anyone can sign with; \
         set a secret of your own (serve and demo generate one per run), or turn on simulator_dev_mode \
         for a sandbox that only ever talks to the simulator"
    )]
    PublishedWebhookSecret,
    /// A limit set to zero would refuse everything.
    #[error("{0} must be greater than zero")]
    Zero(&'static str),
}

/// How the API listens and what it promises.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// Address to bind.
    pub listen: SocketAddr,
    /// The externally visible base URL (scheme, host, port), used to build confirmation links.
    pub public_base_url: String,
    /// How long an approval stays valid once given.
    pub approval_ttl: Duration,
    /// How long a confirmation link stays usable.
    pub link_ttl: Duration,
    /// Largest request body accepted (webhooks use the reconciler's own, larger limit).
    pub body_limit_bytes: usize,
    /// Stripe `whsec_` signing secrets; several during a rotation.
    pub webhook_secrets: Vec<String>,
    /// Adyen's HMAC key (hex) notifications are verified with; `None`: every notification refused.
    pub adyen_hmac_key: Option<String>,
    /// The Adyen merchant account notifications must name.
    pub adyen_merchant_account: Option<String>,
    /// Accept the simulator's published webhook secret (a sandbox against the simulator only).
    pub simulator_dev_mode: bool,
    /// Longest a client may take to send a request's header block.
    pub header_read_timeout: Duration,
    /// Most connections served at once.
    pub connections_max: usize,
    /// Browser origins (`scheme://host[:port]`) allowed to call `/mcp` besides the public base
    /// URL's own; a request without `Origin` (not from a browser) is not affected.
    pub mcp_allowed_origins: Vec<String>,
    /// Derives each new operation's processor key from its intention (`payonce_core::intention`);
    /// the default is a fresh random one, which only a ledger nothing will restore may use.
    pub key_secret: payonce_core::intention::KeySecret,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            listen: LISTEN_DEFAULT,
            public_base_url: format!("http://{LISTEN_DEFAULT}"),
            approval_ttl: APPROVAL_TTL_DEFAULT,
            link_ttl: LINK_TTL_DEFAULT,
            body_limit_bytes: BODY_LIMIT_BYTES_DEFAULT,
            webhook_secrets: Vec::new(),
            adyen_hmac_key: None,
            adyen_merchant_account: None,
            simulator_dev_mode: false,
            header_read_timeout: HEADER_READ_TIMEOUT_DEFAULT,
            connections_max: CONNECTIONS_MAX_DEFAULT,
            mcp_allowed_origins: Vec::new(),
            key_secret: payonce_core::intention::KeySecret::generate(),
        }
    }
}

impl ApiConfig {
    /// Refuses a configuration the api must not serve with (checked before it listens).
    pub fn check(&self) -> Result<(), ConfigError> {
        if !self.simulator_dev_mode
            && self
                .webhook_secrets
                .iter()
                .any(|s| s == SIMULATOR_WEBHOOK_SECRET)
        {
            return Err(ConfigError::PublishedWebhookSecret);
        }
        if !self.simulator_dev_mode
            && self
                .adyen_hmac_key
                .as_deref()
                .is_some_and(|k| k.eq_ignore_ascii_case(SIMULATOR_ADYEN_HMAC_KEY))
        {
            return Err(ConfigError::PublishedWebhookSecret);
        }
        if self.header_read_timeout.is_zero() {
            return Err(ConfigError::Zero("header_read_timeout_ms"));
        }
        if self.connections_max == 0 {
            return Err(ConfigError::Zero("connections_max"));
        }
        Ok(())
    }

    /// The base URL without a trailing slash.
    pub fn base_url(&self) -> &str {
        self.public_base_url.trim_end_matches('/')
    }

    /// The host (and port) of the public base URL, for the MCP transport's `Host` allow-list.
    pub fn public_host(&self) -> Option<&str> {
        let rest = self
            .base_url()
            .split_once("://")
            .map_or(self.base_url(), |(_, rest)| rest);
        let authority = rest.split('/').next().unwrap_or(rest);
        (!authority.is_empty()).then_some(authority)
    }
}

/// An origin as RFC 6454 compares it: lowercase scheme and host, and the port, the scheme's default
/// when none is written. `None` for anything that is not `http(s)://host[:port]` (`null` included).
pub fn normalized_origin(raw: &str) -> Option<(String, String, u16)> {
    let (scheme, rest) = raw.trim().trim_end_matches('/').split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    if rest.is_empty() || rest.contains(['/', '?', '#', '@']) {
        return None;
    }
    let (host, port) = match rest.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => (host, port.parse::<u16>().ok()?),
        _ => (rest, default_port),
    };
    if host.is_empty() {
        return None;
    }
    Some((scheme, host.to_ascii_lowercase(), port))
}

impl ApiConfig {
    /// Whether a browser `Origin` header value may call `/mcp`: the public base URL's origin and
    /// the configured ones, compared as RFC 6454 origins.
    pub fn mcp_origin_allowed(&self, origin: &str) -> bool {
        let Some(origin) = normalized_origin(origin) else {
            return false;
        };
        std::iter::once(self.base_url())
            .chain(self.mcp_allowed_origins.iter().map(String::as_str))
            .filter_map(|allowed| {
                // The base URL may carry a path; its origin is what precedes it.
                let (scheme, rest) = allowed.split_once("://")?;
                let authority = rest.split('/').next().unwrap_or(rest);
                normalized_origin(&format!("{scheme}://{authority}"))
            })
            .any(|allowed| allowed == origin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_published_simulator_secret_is_refused_outside_dev_mode() {
        let mut c = ApiConfig {
            webhook_secrets: vec!["whsec_own".into(), SIMULATOR_WEBHOOK_SECRET.into()],
            ..ApiConfig::default()
        };
        assert_eq!(c.check(), Err(ConfigError::PublishedWebhookSecret));
        c.simulator_dev_mode = true;
        assert_eq!(c.check(), Ok(()));
        c.simulator_dev_mode = false;
        c.webhook_secrets = vec!["whsec_own".into()];
        assert_eq!(c.check(), Ok(()));
        c.connections_max = 0;
        assert_eq!(c.check(), Err(ConfigError::Zero("connections_max")));
        c.connections_max = 1;
        c.header_read_timeout = Duration::ZERO;
        assert_eq!(c.check(), Err(ConfigError::Zero("header_read_timeout_ms")));
    }

    #[test]
    fn public_host_is_the_authority_of_the_base_url() {
        let mut c = ApiConfig {
            public_base_url: "https://pay.example.com/".into(),
            ..ApiConfig::default()
        };
        assert_eq!(c.public_host(), Some("pay.example.com"));
        assert_eq!(c.base_url(), "https://pay.example.com");
        c.public_base_url = "http://127.0.0.1:9000/base".into();
        assert_eq!(c.public_host(), Some("127.0.0.1:9000"));
    }

    #[test]
    fn mcp_origins_are_the_base_urls_and_the_configured_ones() {
        let c = ApiConfig {
            public_base_url: "https://pay.example.com/base".into(),
            mcp_allowed_origins: vec!["http://localhost:6274".into()],
            ..ApiConfig::default()
        };
        assert!(c.mcp_origin_allowed("https://pay.example.com"));
        assert!(c.mcp_origin_allowed("HTTPS://PAY.example.com:443"));
        assert!(c.mcp_origin_allowed("http://localhost:6274"));
        assert!(!c.mcp_origin_allowed("http://localhost:6275"));
        assert!(!c.mcp_origin_allowed("http://pay.example.com"));
        assert!(!c.mcp_origin_allowed("https://pay.example.com.evil.test"));
        assert!(!c.mcp_origin_allowed("null"));
        assert!(!c.mcp_origin_allowed("https://pay.example.com/path"));
    }
}

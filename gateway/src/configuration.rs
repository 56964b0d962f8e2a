//! The gateway's settings: the shared sections from `seckill_common::config` plus its own
//! (`dev_token`, `rate_limit`, `admin`), loaded in layers and checked once at start, so a bad value stops
//! the process with the key named instead of failing on the first request.

use std::num::NonZeroU32;
use std::time::Duration;

use seckill_common::config::{
    AuthSettings, ConfigError, HttpSettings, LogSettings, UpstreamSettings, split_urls,
};
use seckill_common::trust::TrustSettings;
use serde::Deserialize;

use crate::auth::MAX_LEEWAY_SECS;

pub const SERVICE: &str = "gateway";
/// The gateway's standard port (`http.port` overrides it; 0 asks the OS, as tests do).
pub const STANDARD_PORT: u16 = 8080;

/// Everything the gateway reads from `config/gateway.toml` and `SECKILL__*`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    pub http: HttpSettings,
    pub log: LogSettings,
    pub auth: AuthSettings,
    pub dev_token: DevTokenSettings,
    pub upstreams: UpstreamSettings,
    pub rate_limit: RateLimitSettings,
    pub admin: AdminSettings,
    /// The keys the gateway signs the forwarded identity with, one per service.
    pub trust: TrustSettings,
}

/// `dev_token.*`: tokens minted by `POST /api/auth/dev-token` (only when `auth.dev_tokens`).
/// A section of the gateway's own, because `auth.*` is shared and closed to unknown keys.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DevTokenSettings {
    /// Lifetime of a minted token (its `exp` is now plus this).
    pub ttl_secs: u64,
}

impl Default for DevTokenSettings {
    fn default() -> Self {
        Self { ttl_secs: 86_400 }
    }
}

/// `rate_limit.*`: per-user limit on every route that takes a token (the `/api/seckill/...`
/// ones are those a buyer hammers during a sale), and per-address limit on the routes anyone
/// may call without a token.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RateLimitSettings {
    /// Sustained requests per second one user may make.
    pub per_user_per_sec: u32,
    /// Requests one user may make at once before the sustained rate applies.
    pub burst: u32,
    /// Sustained requests per second one client address may make to the anonymous routes
    /// (`GET /api/goods[/{id}]`, `POST /api/auth/dev-token`). Generous: clients behind one NAT
    /// share it.
    pub anonymous_per_sec: u32,
    /// Anonymous requests one address may make at once before the sustained rate applies.
    pub anonymous_burst: u32,
    /// Proxies in front of the gateway that append the address they received a request from
    /// to `X-Forwarded-For` (an Ingress controller: 1). 0 keys the anonymous limit by the
    /// connection's peer; N by the N-th address from the right of that header, the one the
    /// outermost trusted proxy saw (what a client writes there itself lies further left).
    pub trusted_proxy_hops: u8,
    /// How often users and addresses idle long enough to be back at a full bucket are forgotten.
    pub cleanup_interval_secs: u64,
}

impl Default for RateLimitSettings {
    fn default() -> Self {
        Self {
            per_user_per_sec: 20,
            burst: 40,
            anonymous_per_sec: 50,
            anonymous_burst: 100,
            trusted_proxy_hops: 0,
            cleanup_interval_secs: 60,
        }
    }
}

/// `admin.*`: the listener for `GET /metrics` and the detailed `GET /readyz`, which the public
/// port does not serve. Keep it off the public network (no Ingress, no public Service).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminSettings {
    /// Default: `http.host`.
    pub host: Option<String>,
    /// Default: 9080, or 0 (any free port) when `http.port` is 0, as in tests.
    pub port: Option<u16>,
}

/// The admin listener's standard port.
pub const ADMIN_STANDARD_PORT: u16 = 9080;

impl RateLimitSettings {
    pub fn cleanup_interval(&self) -> Duration {
        Duration::from_secs(self.cleanup_interval_secs)
    }
}

/// Shortest `auth.jwt_secret` accepted: HS256's key should be at least as long as its hash.
pub const MIN_JWT_SECRET_BYTES: usize = 32;

/// What `Settings::validate` hands on once it has checked the fields that may be absent.
#[derive(Debug, Clone, Copy)]
pub struct Quota {
    pub per_sec: NonZeroU32,
    pub burst: NonZeroU32,
}

seckill_common::service_settings!(Settings, SERVICE);

impl Settings {
    /// Fails on the first unusable value, naming its key and environment variable.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.jwt_secret()?;
        if let Some(previous) = &self.auth.jwt_previous_secret
            && previous.len() < MIN_JWT_SECRET_BYTES
        {
            return Err(ConfigError::at(
                "auth.jwt_previous_secret",
                format!("is {} bytes; it must be at least {MIN_JWT_SECRET_BYTES}", previous.len()),
            ));
        }
        if self.auth.leeway_secs > MAX_LEEWAY_SECS {
            return Err(ConfigError::at(
                "auth.leeway_secs",
                format!("must be at most {MAX_LEEWAY_SECS} (it is clock skew, not extra lifetime)"),
            ));
        }
        if self.auth.issuer.as_deref().is_some_and(|v| v.trim().is_empty()) {
            return Err(ConfigError::at("auth.issuer", "is empty; unset it or name one"));
        }
        if self.auth.audience.as_deref().is_some_and(|v| v.trim().is_empty()) {
            return Err(ConfigError::at("auth.audience", "is empty; unset it or name one"));
        }
        ConfigError::check_positive("dev_token.ttl_secs", self.dev_token.ttl_secs)?;
        let upstreams = &self.upstreams;
        validate_urls("upstreams.seckill", &upstreams.seckill)?;
        validate_urls("upstreams.order", &upstreams.order)?;
        validate_urls("upstreams.stock", &upstreams.stock)?;
        ConfigError::check_positive("upstreams.connect_timeout_ms", upstreams.connect_timeout_ms)?;
        ConfigError::check_positive("upstreams.timeout_ms", upstreams.timeout_ms)?;
        self.quota()?;
        self.anonymous_quota()?;
        if self.admin.host.as_deref().is_some_and(|h| h.trim().is_empty()) {
            return Err(ConfigError::at("admin.host", "is empty; unset it to use http.host"));
        }
        let admin = self.admin_port();
        if admin != 0 && admin == self.http.port_or(STANDARD_PORT) {
            return Err(ConfigError::at(
                "admin.port",
                format!("is {admin}, the public port (http.port): metrics must not be served there"),
            ));
        }
        ConfigError::check_positive("rate_limit.cleanup_interval_secs", self.rate_limit.cleanup_interval_secs)
    }

    /// The JWT secret. There is no built-in one: a gateway without a secret must not start, nor
    /// one with a secret short enough to guess offline from any token it signed.
    pub fn jwt_secret(&self) -> Result<&str, ConfigError> {
        match self.auth.jwt_secret.as_deref() {
            Some(secret) if secret.trim().is_empty() => Err(missing_secret("is empty")),
            Some(secret) if secret.len() < MIN_JWT_SECRET_BYTES => Err(missing_secret(&format!(
                "is {} bytes; it must be at least {MIN_JWT_SECRET_BYTES} (e.g. `openssl rand -base64 48`)",
                secret.len()
            ))),
            Some(secret) => Ok(secret),
            None => Err(missing_secret("is not set; there is no built-in secret")),
        }
    }

    /// The rate limit as non-zero numbers.
    pub fn quota(&self) -> Result<Quota, ConfigError> {
        let per_sec = non_zero("rate_limit.per_user_per_sec", self.rate_limit.per_user_per_sec)?;
        let burst = non_zero("rate_limit.burst", self.rate_limit.burst)?;
        Ok(Quota { per_sec, burst })
    }

    /// The anonymous routes' per-address limit as non-zero numbers.
    pub fn anonymous_quota(&self) -> Result<Quota, ConfigError> {
        let per_sec = non_zero("rate_limit.anonymous_per_sec", self.rate_limit.anonymous_per_sec)?;
        let burst = non_zero("rate_limit.anonymous_burst", self.rate_limit.anonymous_burst)?;
        Ok(Quota { per_sec, burst })
    }

    /// Where the admin listener binds: `admin.host`, else `http.host`.
    pub fn admin_host(&self) -> &str {
        self.admin.host.as_deref().unwrap_or(&self.http.host)
    }

    /// The admin listener's port: `admin.port`, else 9080, or 0 when `http.port` is 0 (a
    /// process starting several gateways, as tests do, would find 9080 taken).
    pub fn admin_port(&self) -> u16 {
        self.admin.port.unwrap_or(if self.http.port == Some(0) { 0 } else { ADMIN_STANDARD_PORT })
    }
}

fn non_zero(key: &'static str, value: u32) -> Result<NonZeroU32, ConfigError> {
    NonZeroU32::new(value).ok_or_else(|| ConfigError::at(key, "must be at least 1"))
}

fn missing_secret(problem: &str) -> ConfigError {
    ConfigError::at("auth.jwt_secret", problem)
}

/// One or more `http(s)://host:port` base URLs, comma-separated.
fn validate_urls(key: &'static str, list: &str) -> Result<(), ConfigError> {
    let urls = split_urls(list);
    if urls.is_empty() {
        return Err(ConfigError::at(key, "needs at least one replica URL"));
    }
    for url in &urls {
        let parsed = reqwest::Url::parse(url)
            .map_err(|e| ConfigError::at(key, format!("`{url}` is not a URL: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
            return Err(ConfigError::at(key, format!("`{url}` is not an http(s) base URL")));
        }
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(ConfigError::at(key, format!("`{url}` must not carry a query")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid() -> Settings {
        let mut s = Settings::default();
        s.auth.jwt_secret = Some("a-unit-test-secret-of-32-bytes-at-least".into());
        s
    }

    #[test]
    fn defaults_with_a_secret_are_valid() {
        valid().validate().unwrap();
        assert_eq!(valid().rate_limit.per_user_per_sec, 20);
        assert_eq!(valid().rate_limit.burst, 40);
        assert_eq!(valid().dev_token.ttl_secs, 86_400);
        assert!(!valid().auth.dev_tokens, "dev tokens are off by default");
    }

    #[test]
    fn a_missing_or_blank_secret_names_the_key() {
        let mut s = valid();
        s.auth.jwt_secret = None;
        assert!(s.validate().unwrap_err().to_string().contains("auth.jwt_secret"));
        s.auth.jwt_secret = Some("  ".into());
        assert!(s.validate().unwrap_err().to_string().contains("SECKILL__AUTH__JWT_SECRET"));
    }

    #[test]
    fn a_short_secret_is_refused_naming_the_key() {
        let mut s = valid();
        s.auth.jwt_secret = Some("x".repeat(MIN_JWT_SECRET_BYTES - 1));
        let message = s.validate().unwrap_err().to_string();
        assert!(message.contains("auth.jwt_secret"), "{message}");
        assert!(message.contains("SECKILL__AUTH__JWT_SECRET"), "{message}");
        assert!(message.contains("at least 32"), "{message}");
        s.auth.jwt_secret = Some("x".repeat(MIN_JWT_SECRET_BYTES));
        s.validate().unwrap();
    }

    #[test]
    fn auth_rules_are_checked() {
        assert_eq!(valid().auth.leeway_secs, 5);
        let mut s = valid();
        s.auth.leeway_secs = MAX_LEEWAY_SECS + 1;
        assert!(s.validate().unwrap_err().to_string().contains("auth.leeway_secs"));
        let mut s = valid();
        s.auth.issuer = Some(" ".into());
        assert!(s.validate().unwrap_err().to_string().contains("auth.issuer"));
        let mut s = valid();
        s.auth.audience = Some(String::new());
        assert!(s.validate().unwrap_err().to_string().contains("SECKILL__AUTH__AUDIENCE"));
        let mut s = valid();
        s.auth.issuer = Some("seckill-gateway".into());
        s.auth.audience = Some("seckill".into());
        s.validate().unwrap();
        let s: Settings =
            serde_json::from_str(r#"{"auth": {"leeway_secs": 2, "issuer": "i", "audience": "a"}}"#).unwrap();
        assert_eq!((s.auth.leeway_secs, s.auth.issuer.as_deref()), (2, Some("i")));
    }

    #[test]
    fn an_empty_or_bad_upstream_list_names_the_key() {
        let mut s = valid();
        s.upstreams.order = " , ".into();
        assert!(s.validate().unwrap_err().to_string().contains("upstreams.order"));
        let mut s = valid();
        s.upstreams.stock = "http://a:1,ftp://b:2".into();
        assert!(s.validate().unwrap_err().to_string().contains("upstreams.stock"));
        let mut s = valid();
        s.upstreams.seckill = "http://a:1, http://b:2/".into();
        s.validate().unwrap();
    }

    #[test]
    fn a_zero_rate_names_the_key() {
        let mut s = valid();
        s.rate_limit.burst = 0;
        assert!(s.validate().unwrap_err().to_string().contains("rate_limit.burst"));
        let mut s = valid();
        s.rate_limit.anonymous_per_sec = 0;
        assert!(s.validate().unwrap_err().to_string().contains("SECKILL__RATE_LIMIT__ANONYMOUS_PER_SEC"));
        let mut s = valid();
        s.rate_limit.anonymous_burst = 0;
        assert!(s.validate().unwrap_err().to_string().contains("rate_limit.anonymous_burst"));
        assert_eq!((valid().rate_limit.anonymous_per_sec, valid().rate_limit.anonymous_burst), (50, 100));
    }

    #[test]
    fn the_admin_listener_defaults_and_never_shares_the_public_port() {
        let mut s = valid();
        s.http.host = "10.0.0.7".into();
        assert_eq!((s.admin_host(), s.admin_port()), ("10.0.0.7", ADMIN_STANDARD_PORT));
        s.http.port = Some(0);
        assert_eq!(s.admin_port(), 0, "any free port when the public one is any free port");
        s.admin.host = Some("127.0.0.1".into());
        s.admin.port = Some(9191);
        assert_eq!((s.admin_host(), s.admin_port()), ("127.0.0.1", 9191));
        s.validate().unwrap();

        let mut s = valid();
        s.admin.port = Some(STANDARD_PORT);
        assert!(s.validate().unwrap_err().to_string().contains("admin.port"));
        let mut s = valid();
        s.http.port = Some(9000);
        s.admin.port = Some(9000);
        assert!(s.validate().unwrap_err().to_string().contains("SECKILL__ADMIN__PORT"));
        let mut s = valid();
        s.admin.host = Some(" ".into());
        assert!(s.validate().unwrap_err().to_string().contains("admin.host"));
        let s: Settings = serde_json::from_str(r#"{"admin": {"port": 9999}}"#).unwrap();
        assert_eq!(s.admin_port(), 9999);
        assert!(serde_json::from_str::<Settings>(r#"{"admin": {"bind": 1}}"#).is_err());
    }

    #[test]
    fn unknown_keys_are_refused() {
        let err = serde_json::from_str::<Settings>(r#"{"rate_limit": {"per_user": 3}}"#);
        assert!(err.is_err());
        let s: Settings = serde_json::from_str(r#"{"dev_token": {"ttl_secs": 5}}"#).unwrap();
        assert_eq!(s.dev_token.ttl_secs, 5);
    }
}

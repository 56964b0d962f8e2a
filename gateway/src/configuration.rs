//! The gateway's settings: the shared sections from `seckill_common::config` plus its own
//! (`dev_token`, `rate_limit`), loaded in layers and checked once at start, so a bad value stops
//! the process with the key named instead of failing on the first request.

use std::num::NonZeroU32;
use std::time::Duration;

use seckill_common::config::{
    self, AuthSettings, ConfigError, HttpSettings, LogSettings, UpstreamSettings, split_urls,
};
use serde::Deserialize;

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

/// `rate_limit.*`: per-user limit on the `/api/seckill/...` routes, the ones a buyer hammers
/// during a sale.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RateLimitSettings {
    /// Sustained requests per second one user may make.
    pub per_user_per_sec: u32,
    /// Requests one user may make at once before the sustained rate applies.
    pub burst: u32,
    /// How often users idle long enough to be back at a full bucket are forgotten.
    pub cleanup_interval_secs: u64,
}

impl Default for RateLimitSettings {
    fn default() -> Self {
        Self { per_user_per_sec: 20, burst: 40, cleanup_interval_secs: 60 }
    }
}

impl RateLimitSettings {
    pub fn cleanup_interval(&self) -> Duration {
        Duration::from_secs(self.cleanup_interval_secs)
    }
}

/// What `Settings::validate` hands on once it has checked the fields that may be absent.
#[derive(Debug, Clone, Copy)]
pub struct Quota {
    pub per_sec: NonZeroU32,
    pub burst: NonZeroU32,
}

impl Settings {
    /// Reads the layered configuration and checks it.
    pub fn load() -> Result<Self, ConfigError> {
        let settings: Self = config::load("gateway")?;
        settings.validate()?;
        Ok(settings)
    }

    /// Fails on the first unusable value, naming its key and environment variable.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.jwt_secret()?;
        if self.dev_token.ttl_secs == 0 {
            return Err(ConfigError::invalid(
                "dev_token.ttl_secs",
                "SECKILL__DEV_TOKEN__TTL_SECS",
                "must be at least 1",
            ));
        }
        let upstreams = &self.upstreams;
        validate_urls("upstreams.seckill", "SECKILL__UPSTREAMS__SECKILL", &upstreams.seckill)?;
        validate_urls("upstreams.order", "SECKILL__UPSTREAMS__ORDER", &upstreams.order)?;
        validate_urls("upstreams.stock", "SECKILL__UPSTREAMS__STOCK", &upstreams.stock)?;
        if upstreams.connect_timeout_ms == 0 {
            return Err(ConfigError::invalid(
                "upstreams.connect_timeout_ms",
                "SECKILL__UPSTREAMS__CONNECT_TIMEOUT_MS",
                "must be at least 1",
            ));
        }
        if upstreams.timeout_ms == 0 {
            return Err(ConfigError::invalid(
                "upstreams.timeout_ms",
                "SECKILL__UPSTREAMS__TIMEOUT_MS",
                "must be at least 1",
            ));
        }
        self.quota()?;
        if self.rate_limit.cleanup_interval_secs == 0 {
            return Err(ConfigError::invalid(
                "rate_limit.cleanup_interval_secs",
                "SECKILL__RATE_LIMIT__CLEANUP_INTERVAL_SECS",
                "must be at least 1",
            ));
        }
        Ok(())
    }

    /// The JWT secret. There is no built-in one: a gateway without a secret must not start.
    pub fn jwt_secret(&self) -> Result<&str, ConfigError> {
        match self.auth.jwt_secret.as_deref() {
            Some(secret) if !secret.trim().is_empty() => Ok(secret),
            Some(_) => Err(missing_secret("is empty")),
            None => Err(missing_secret("is not set; there is no built-in secret")),
        }
    }

    /// The rate limit as non-zero numbers.
    pub fn quota(&self) -> Result<Quota, ConfigError> {
        let per_sec = NonZeroU32::new(self.rate_limit.per_user_per_sec).ok_or_else(|| {
            ConfigError::invalid(
                "rate_limit.per_user_per_sec",
                "SECKILL__RATE_LIMIT__PER_USER_PER_SEC",
                "must be at least 1",
            )
        })?;
        let burst = NonZeroU32::new(self.rate_limit.burst).ok_or_else(|| {
            ConfigError::invalid("rate_limit.burst", "SECKILL__RATE_LIMIT__BURST", "must be at least 1")
        })?;
        Ok(Quota { per_sec, burst })
    }
}

fn missing_secret(problem: &str) -> ConfigError {
    ConfigError::invalid("auth.jwt_secret", "SECKILL__AUTH__JWT_SECRET", problem)
}

/// One or more `http(s)://host:port` base URLs, comma-separated.
fn validate_urls(key: &'static str, env: &'static str, list: &str) -> Result<(), ConfigError> {
    let urls = split_urls(list);
    if urls.is_empty() {
        return Err(ConfigError::invalid(key, env, "needs at least one replica URL"));
    }
    for url in &urls {
        let parsed = reqwest::Url::parse(url)
            .map_err(|e| ConfigError::invalid(key, env, format!("`{url}` is not a URL: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
            return Err(ConfigError::invalid(key, env, format!("`{url}` is not an http(s) base URL")));
        }
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(ConfigError::invalid(key, env, format!("`{url}` must not carry a query")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid() -> Settings {
        let mut s = Settings::default();
        s.auth.jwt_secret = Some("s3cret".into());
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
    }

    #[test]
    fn unknown_keys_are_refused() {
        let err = serde_json::from_str::<Settings>(r#"{"rate_limit": {"per_user": 3}}"#);
        assert!(err.is_err());
        let s: Settings = serde_json::from_str(r#"{"dev_token": {"ttl_secs": 5}}"#).unwrap();
        assert_eq!(s.dev_token.ttl_secs, 5);
    }
}

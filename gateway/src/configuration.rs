//! The gateway's settings: the shared sections from `seckill_common::config` plus its own
//! (`dev_token`, `rate_limit`, `admin`, `storefront`), loaded in layers and checked once at start, so a bad value stops
//! the process with the key named instead of failing on the first request.

use std::num::NonZeroU32;
use std::time::Duration;

use seckill_common::config::{
    AuthSettings, ConfigError, HttpSettings, LogSettings, RedisSettings, ServiceSettings, UpstreamSettings,
    split_urls,
};
use seckill_common::room::RoomSettings;
use seckill_common::trust::TrustSettings;
use seckill_web::shed::{Limits, SettingKeys};
use serde::Deserialize;

use crate::auth::MAX_LEEWAY_SECS;
use crate::rate_limit::Class;

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
    pub sold_out: SoldOutSettings,
    pub overload: OverloadSettings,
    /// Where the shared rate-limit buckets live (`rate_limit.shared`).
    pub redis: RedisSettings,
    pub admin: AdminSettings,
    /// The keys the gateway signs the forwarded identity with, one per service.
    pub trust: TrustSettings,
    pub storefront: StorefrontSettings,
    /// The waiting rooms' key, to answer status polls from memory (`crate::rooms`).
    pub room: RoomSettings,
    pub push: PushSettings,
}

/// `push.*`: buyers' event streams (`crate::push`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PushSettings {
    /// Open streams one replica holds at most; past it a new one is answered 503 `BUSY`.
    pub max_streams: usize,
    /// A comment line this often keeps proxies from closing a quiet stream and finds dead
    /// clients.
    pub heartbeat_secs: u64,
    /// A stream that told nothing for this long ends (a page still open reconnects).
    pub idle_secs: u64,
    /// A stream whose buyer has a request in flight and that heard nothing for this long reads
    /// the result again, then after twice as long, up to a minute: a lost notice delays a final
    /// answer by at most that. A stream at rest re-reads once a minute.
    pub reread_secs: u64,
    /// How long a stream ticket (`POST .../events/ticket`) may wait for its one use.
    pub ticket_ttl_secs: u64,
}

impl Default for PushSettings {
    fn default() -> Self {
        Self { max_streams: 50_000, heartbeat_secs: 15, idle_secs: 600, reread_secs: 5, ticket_ttl_secs: 30 }
    }
}

impl PushSettings {
    fn validate(&self) -> Result<(), ConfigError> {
        ConfigError::check_positive("push.max_streams", self.max_streams as u64)?;
        ConfigError::check_positive("push.heartbeat_secs", self.heartbeat_secs)?;
        ConfigError::check_positive("push.idle_secs", self.idle_secs)?;
        ConfigError::check_positive("push.reread_secs", self.reread_secs)?;
        ConfigError::check_positive("push.ticket_ttl_secs", self.ticket_ttl_secs)?;
        if self.ticket_ttl_secs > MAX_TICKET_TTL_SECS {
            return Err(ConfigError::at(
                "push.ticket_ttl_secs",
                format!(
                    "must be at most {MAX_TICKET_TTL_SECS} (a ticket in a URL is meant to be spent at once)"
                ),
            ));
        }
        Ok(())
    }
}

/// Longest `push.ticket_ttl_secs`.
pub const MAX_TICKET_TTL_SECS: u64 = 300;

/// `storefront.*`: the buyers' pages (`crate::storefront`), rendered from stock-service's
/// goods and kept in memory.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorefrontSettings {
    /// How long a rendered page is served before one request renders it again (also its
    /// `Cache-Control: max-age`): a replica asks stock-service at most once per page this often.
    pub refresh_secs: u64,
}

impl Default for StorefrontSettings {
    fn default() -> Self {
        Self { refresh_secs: 10 }
    }
}

impl StorefrontSettings {
    pub fn refresh(&self) -> Duration {
        Duration::from_secs(self.refresh_secs)
    }
}

/// Longest `storefront.refresh_secs`: a day-old page would hide every sale created since.
pub const MAX_STOREFRONT_REFRESH_SECS: u64 = 86_400;

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

/// `sold_out.*`: buy clicks on a sale seckill-service just answered `410` for (sold out or
/// ended), answered by the gateway itself for a moment (`crate::closed`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SoldOutSettings {
    /// How long such an answer is given without asking seckill-service; a unit given back
    /// sells again at most this much later. 0 forwards every click.
    pub remember_ms: u64,
}

impl Default for SoldOutSettings {
    fn default() -> Self {
        Self { remember_ms: 1_000 }
    }
}

impl SoldOutSettings {
    pub fn remember(&self) -> Duration {
        Duration::from_millis(self.remember_ms)
    }
}

/// `overload.*`: load shedding at the door. Buy clicks this replica has forwarded to
/// seckill-service and not yet had answered are bounded; past the bound a click is answered
/// 503 `BUSY` with `Retry-After` at once, before the hop, so an overload costs a buyer
/// milliseconds instead of a place in a queue of seconds. The bound follows the clicks'
/// latency (`seckill_web::shed`), between `min_in_flight` and `max_in_flight`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OverloadSettings {
    /// The bound's ceiling, and where it starts (an opening burst goes through up to this).
    pub max_in_flight: usize,
    /// The bound's floor; equal to `max_in_flight`, the bound is fixed.
    pub min_in_flight: usize,
    /// The mean latency of a forwarded click the bound aims at, in milliseconds.
    pub latency_target_ms: u64,
}

impl Default for OverloadSettings {
    fn default() -> Self {
        Self { max_in_flight: 1_024, min_in_flight: 256, latency_target_ms: 50 }
    }
}

impl OverloadSettings {
    pub const KEYS: SettingKeys = SettingKeys {
        min: "overload.min_in_flight",
        max: "overload.max_in_flight",
        latency_target: "overload.latency_target_ms",
    };

    pub fn limits(&self) -> Result<Limits, ConfigError> {
        Limits::from_settings(&Self::KEYS, self.min_in_flight, self.max_in_flight, self.latency_target_ms)
    }
}

/// Longest `sold_out.remember_ms`: past it, a unit given back would wait too long for a buyer.
pub const MAX_SOLD_OUT_REMEMBER_MS: u64 = 10_000;

/// `rate_limit.*`: a limit per class of routes (see `rate_limit::Class`), per user on the
/// routes that take a token and per client address on those that do not, kept in Redis so it
/// holds across gateway replicas (`shared`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RateLimitSettings {
    /// Getting a path token and placing a buy: what a buyer's script hammers during a sale.
    pub buy: LimitSettings,
    /// Polling a buy's result: a page polls with back-off, so more than buying.
    pub poll: LimitSettings,
    /// Listing, reading, paying and cancelling orders.
    pub orders: LimitSettings,
    /// The admin routes (creating a sale, its audit and repair).
    pub admin: LimitSettings,
    /// Per client address on the routes without a token (`GET /api/goods[/{id}]`,
    /// `POST /api/auth/dev-token`). Generous: clients behind one NAT share it.
    pub anonymous: LimitSettings,
    /// Per client address, joining a sale's waiting room (each join also takes from the user's
    /// `buy` limit): how many accounts one address may line up. Clients behind one NAT share it.
    pub join: LimitSettings,
    /// Opening a stream of pushed answers, or asking for its ticket: a page opens one a buy.
    pub stream: LimitSettings,
    /// Keep the buckets in Redis (`redis.*`), shared by every gateway replica. Off: each
    /// replica limits alone, so N replicas let a client through N times the limit.
    pub shared: bool,
    /// Tokens a replica takes from a shared bucket at once and spends locally (1: a Redis ask
    /// for every request that passes the replica's own bucket). More saves asks only for a
    /// client that comes back to the same replica within the lease's life (lease x 1/rate), and
    /// one spread over replicas may find up to `lease - 1` of its tokens held by another.
    pub lease: u32,
    /// How long a shared-bucket call may take before the replica decides alone.
    pub shared_timeout_ms: u64,
    /// Proxies in front of the gateway that append the address they received a request from
    /// to `X-Forwarded-For` (an Ingress controller: 1). 0 keys the anonymous limit by the
    /// connection's peer; N by the N-th address from the right of that header, the one the
    /// outermost trusted proxy saw (what a client writes there itself lies further left).
    pub trusted_proxy_hops: u8,
    /// How often users and addresses idle long enough to be back at a full bucket are forgotten.
    pub cleanup_interval_secs: u64,
}

/// `rate_limit.<class>.*`; an unset value takes the class's default (`Class::default_quota`).
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitSettings {
    /// Sustained requests per second.
    pub per_sec: Option<u32>,
    /// Requests at once before the sustained rate applies.
    pub burst: Option<u32>,
}

impl Default for RateLimitSettings {
    fn default() -> Self {
        Self {
            buy: LimitSettings::default(),
            poll: LimitSettings::default(),
            orders: LimitSettings::default(),
            admin: LimitSettings::default(),
            anonymous: LimitSettings::default(),
            join: LimitSettings::default(),
            stream: LimitSettings::default(),
            shared: true,
            lease: 1,
            shared_timeout_ms: 100,
            trusted_proxy_hops: 0,
            cleanup_interval_secs: 60,
        }
    }
}

impl RateLimitSettings {
    fn class(&self, class: Class) -> LimitSettings {
        match class {
            Class::Buy => self.buy,
            Class::Poll => self.poll,
            Class::Orders => self.orders,
            Class::Admin => self.admin,
            Class::Anonymous => self.anonymous,
            Class::Join => self.join,
            Class::Stream => self.stream,
        }
    }
}

/// Defaults a shop can ship: a buyer clicks a few times a second at most, a page polls about
/// twice a second, an order page makes a handful of calls; a browser loading the goods list
/// and a few sales stays far below the anonymous limit.
impl Class {
    pub fn default_quota(self) -> (u32, u32) {
        match self {
            Class::Buy => (5, 10),
            Class::Poll => (10, 20),
            Class::Orders => (10, 20),
            Class::Admin => (20, 40),
            Class::Anonymous => (50, 100),
            Class::Join => (10, 50),
            // A page opens one stream a buy, and again after a drop.
            Class::Stream => (1, 10),
        }
    }

    /// The class's setting keys: `rate_limit.<class>.per_sec` and `.burst`.
    fn keys(self) -> (&'static str, &'static str) {
        match self {
            Class::Buy => ("rate_limit.buy.per_sec", "rate_limit.buy.burst"),
            Class::Poll => ("rate_limit.poll.per_sec", "rate_limit.poll.burst"),
            Class::Orders => ("rate_limit.orders.per_sec", "rate_limit.orders.burst"),
            Class::Admin => ("rate_limit.admin.per_sec", "rate_limit.admin.burst"),
            Class::Anonymous => ("rate_limit.anonymous.per_sec", "rate_limit.anonymous.burst"),
            Class::Join => ("rate_limit.join.per_sec", "rate_limit.join.burst"),
            Class::Stream => ("rate_limit.stream.per_sec", "rate_limit.stream.burst"),
        }
    }
}

/// Highest `per_sec` accepted: the shared bucket counts in whole microseconds.
pub const MAX_PER_SEC: u32 = 1_000_000;
/// Highest `rate_limit.lease`: a lease is tokens a user may not get on another replica.
pub const MAX_LEASE: u32 = 16;

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

impl ServiceSettings for Settings {
    const SERVICE: &'static str = SERVICE;

    fn log(&self) -> &LogSettings {
        &self.log
    }

    /// Fails on the first unusable value, naming its key and environment variable.
    fn validate(&self) -> Result<(), ConfigError> {
        self.jwt_secret()?;
        self.http.validate()?;
        self.room.key()?;
        self.redis.validate()?;
        self.push.validate()?;
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
        for class in Class::ALL {
            self.quota(class)?;
        }
        if !(1..=MAX_LEASE).contains(&self.rate_limit.lease) {
            return Err(ConfigError::at("rate_limit.lease", format!("must be 1 to {MAX_LEASE}")));
        }
        ConfigError::check_positive("rate_limit.shared_timeout_ms", self.rate_limit.shared_timeout_ms)?;
        self.overload.limits()?;
        if self.sold_out.remember_ms > MAX_SOLD_OUT_REMEMBER_MS {
            return Err(ConfigError::at(
                "sold_out.remember_ms",
                format!(
                    "must be at most {MAX_SOLD_OUT_REMEMBER_MS} (a unit given back waits that long to sell)"
                ),
            ));
        }
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
        ConfigError::check_positive("storefront.refresh_secs", self.storefront.refresh_secs)?;
        if self.storefront.refresh_secs > MAX_STOREFRONT_REFRESH_SECS {
            return Err(ConfigError::at(
                "storefront.refresh_secs",
                format!("must be at most {MAX_STOREFRONT_REFRESH_SECS}"),
            ));
        }
        ConfigError::check_positive("rate_limit.cleanup_interval_secs", self.rate_limit.cleanup_interval_secs)
    }
}

impl Settings {
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

    /// A class's limit, its defaults filled in, as non-zero numbers.
    pub fn quota(&self, class: Class) -> Result<Quota, ConfigError> {
        let set = self.rate_limit.class(class);
        let (per_sec, burst) = class.default_quota();
        let (per_sec_key, burst_key) = class.keys();
        let per_sec = set.per_sec.unwrap_or(per_sec);
        if per_sec > MAX_PER_SEC {
            return Err(ConfigError::at(per_sec_key, format!("must be at most {MAX_PER_SEC}")));
        }
        let per_sec = non_zero(per_sec_key, per_sec)?;
        let burst = non_zero(burst_key, set.burst.unwrap_or(burst))?;
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
        let buy = valid().quota(Class::Buy).unwrap();
        assert_eq!((buy.per_sec.get(), buy.burst.get()), (5, 10));
        assert!(valid().rate_limit.shared, "the limits hold across replicas by default");
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
    fn a_zero_or_huge_rate_names_the_key() {
        let mut s = valid();
        s.rate_limit.buy.burst = Some(0);
        assert!(s.validate().unwrap_err().to_string().contains("rate_limit.buy.burst"));
        let mut s = valid();
        s.rate_limit.anonymous.per_sec = Some(0);
        assert!(s.validate().unwrap_err().to_string().contains("SECKILL__RATE_LIMIT__ANONYMOUS__PER_SEC"));
        let mut s = valid();
        s.rate_limit.poll.per_sec = Some(MAX_PER_SEC + 1);
        assert!(s.validate().unwrap_err().to_string().contains("rate_limit.poll.per_sec"));
        let mut s = valid();
        s.sold_out.remember_ms = MAX_SOLD_OUT_REMEMBER_MS + 1;
        assert!(s.validate().unwrap_err().to_string().contains("SECKILL__SOLD_OUT__REMEMBER_MS"));
        s.sold_out.remember_ms = 0;
        s.overload.max_in_flight = 0;
        assert!(s.validate().unwrap_err().to_string().contains("overload.max_in_flight"));
        s.overload.max_in_flight = 16;
        assert!(
            s.validate().unwrap_err().to_string().contains("overload.min_in_flight"),
            "a floor over the ceiling"
        );
        s.overload.min_in_flight = 16;
        s.overload.latency_target_ms = 0;
        assert!(s.validate().unwrap_err().to_string().contains("overload.latency_target_ms"));
        s.overload.latency_target_ms = 40;
        s.rate_limit.lease = 0;
        assert!(s.validate().unwrap_err().to_string().contains("rate_limit.lease"));
        s.rate_limit.lease = MAX_LEASE + 1;
        assert!(s.validate().unwrap_err().to_string().contains("SECKILL__RATE_LIMIT__LEASE"));
        let mut s = valid();
        s.rate_limit.shared_timeout_ms = 0;
        assert!(s.validate().unwrap_err().to_string().contains("rate_limit.shared_timeout_ms"));
    }

    #[test]
    fn a_class_set_in_part_keeps_its_own_defaults() {
        let s: Settings =
            serde_json::from_str(r#"{"rate_limit": {"buy": {"per_sec": 2}, "anonymous": {"burst": 7}}}"#)
                .unwrap();
        let (buy, anonymous) = (s.quota(Class::Buy).unwrap(), s.quota(Class::Anonymous).unwrap());
        assert_eq!((buy.per_sec.get(), buy.burst.get()), (2, 10));
        assert_eq!((anonymous.per_sec.get(), anonymous.burst.get()), (50, 7));
        for class in Class::ALL {
            let (per_sec, burst) = class.default_quota();
            assert!(burst >= per_sec, "{}: a burst smaller than a second's rate", class.name());
        }
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
    fn storefront_settings_are_checked() {
        let s = valid();
        assert_eq!(s.storefront.refresh_secs, 10);
        let mut s = valid();
        s.storefront.refresh_secs = 0;
        assert!(s.validate().unwrap_err().to_string().contains("SECKILL__STOREFRONT__REFRESH_SECS"));
        s.storefront.refresh_secs = MAX_STOREFRONT_REFRESH_SECS + 1;
        assert!(s.validate().unwrap_err().to_string().contains("storefront.refresh_secs"));
        let s: Settings = serde_json::from_str(r#"{"storefront": {"refresh_secs": 3}}"#).unwrap();
        assert_eq!(s.storefront.refresh_secs, 3);
        assert!(serde_json::from_str::<Settings>(r#"{"storefront": {"ttl": 3}}"#).is_err());
        // The pages are no longer written to a directory: a configuration that still says where
        // is refused at the start rather than silently ignored.
        assert!(serde_json::from_str::<Settings>(r#"{"storefront": {"dir": "/srv/shop"}}"#).is_err());
    }

    #[test]
    fn unknown_keys_are_refused() {
        let err = serde_json::from_str::<Settings>(r#"{"rate_limit": {"per_user": 3}}"#);
        assert!(err.is_err());
        let err = serde_json::from_str::<Settings>(r#"{"rate_limit": {"buy": {"rate": 3}}}"#);
        assert!(err.is_err());
        let s: Settings = serde_json::from_str(r#"{"dev_token": {"ttl_secs": 5}}"#).unwrap();
        assert_eq!(s.dev_token.ttl_secs, 5);
    }
}

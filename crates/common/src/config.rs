//! Layered configuration: built-in defaults, then `config/<service>.toml` (or the file named by
//! `SECKILL_CONFIG`), then environment variables `SECKILL__SECTION__KEY`.
//!
//! Each service composes its own settings from the sections below; every section has serde
//! defaults, so a file or the environment only names what differs.

use std::collections::HashMap;
use std::time::Duration;

use serde::Deserialize;
use serde::de::DeserializeOwned;

/// How long a caller (the gateway, a service calling another) keeps an idle pooled connection:
/// shorter than any listener's `http.keep_alive_secs`, so the caller drops it first. The other way round, a
/// request sent just as the server closes an idle connection fails ("connection closed before
/// message completed"), and a buy cannot be sent again blindly.
pub const CLIENT_POOL_IDLE: Duration = Duration::from_secs(60);
const _: () = assert!(CLIENT_POOL_IDLE.as_secs() < DEFAULT_KEEP_ALIVE_SECS);

/// `http.keep_alive_secs` unless set.
const DEFAULT_KEEP_ALIVE_SECS: u64 = 75;
/// Longest `http.keep_alive_secs`: between two requests a connection may hold its socket this
/// long (and `http.read_timeout_ms` more), so it is bounded like every other wait.
pub const MAX_KEEP_ALIVE_SECS: u64 = 3_600;

/// Reads the layered configuration of `service` into `T`: its file, then the process environment.
pub fn load<T: DeserializeOwned>(service: &str) -> Result<T, ConfigError> {
    let file = match std::env::var("SECKILL_CONFIG") {
        Ok(path) => ConfigFile::Required(path),
        Err(_) => ConfigFile::Optional(format!("config/{service}")),
    };
    load_from(file, None)
}

/// Which file [`load_from`] reads under the environment.
#[derive(Debug, Clone)]
pub enum ConfigFile {
    /// None, as in a container image (built-in defaults and the environment only).
    None,
    /// This file if it exists (a name without extension finds `.toml`).
    Optional(String),
    /// This file; a missing one is an error.
    Required(String),
}

/// The layers of [`load`] from explicit sources: `env` stands in for the process environment
/// when given (all its variables; only `SECKILL__*` ones are read), so deployment checks read
/// manifests' variables exactly as a service would, unknown keys refused the same way.
pub fn load_from<T: DeserializeOwned>(
    file: ConfigFile,
    env: Option<HashMap<String, String>>,
) -> Result<T, ConfigError> {
    let mut builder = config::Config::builder();
    match file {
        ConfigFile::None => {}
        ConfigFile::Optional(path) => {
            builder = builder.add_source(config::File::with_name(&path).required(false))
        }
        ConfigFile::Required(path) => {
            builder = builder.add_source(config::File::with_name(&path).required(true))
        }
    }
    let env = config::Environment::with_prefix("SECKILL")
        .prefix_separator("__")
        .separator("__")
        .try_parsing(true)
        .source(env.map(|vars| vars.into_iter().collect()));
    Ok(builder.add_source(env).build()?.try_deserialize()?)
}

/// The settings of one service: its name (which names its config file), where its log
/// settings are, and its checks. [`ServiceSettings::load`] is the one way a service reads them.
pub trait ServiceSettings: DeserializeOwned {
    /// The service's name: `config/<SERVICE>.toml`, its logs, its broker connections.
    const SERVICE: &'static str;

    fn log(&self) -> &LogSettings;

    /// Fails on the first unusable value, naming its key and environment variable.
    fn validate(&self) -> Result<(), ConfigError>;

    /// Reads the layered configuration ([`load`]) and checks it, once.
    fn load() -> Result<Self, ConfigError> {
        let settings: Self = load(Self::SERVICE)?;
        settings.validate()?;
        Ok(settings)
    }
}

/// The environment variable that sets `key`: `order.consumers` is `SECKILL__ORDER__CONSUMERS`.
pub fn env_name(key: &str) -> String {
    format!("SECKILL__{}", key.replace('.', "__").to_uppercase())
}

/// A configuration that cannot be used; the message names the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration: {0}")]
    Source(#[from] config::ConfigError),
    #[error("configuration key `{key}` (env {env}): {problem}")]
    Invalid { key: &'static str, env: String, problem: String },
}

impl ConfigError {
    /// `key` is unusable; its environment variable follows from it ([`env_name`]).
    pub fn at(key: &'static str, problem: impl Into<String>) -> Self {
        Self::Invalid { key, env: env_name(key), problem: problem.into() }
    }

    /// As [`ConfigError::at`], for a key whose variable is spelled out by the caller.
    pub fn invalid(key: &'static str, env: impl Into<String>, problem: impl Into<String>) -> Self {
        Self::Invalid { key, env: env.into(), problem: problem.into() }
    }

    /// `key` must be at least 1 (instead of being raised to 1 in silence).
    pub fn check_positive(key: &'static str, value: u64) -> Result<(), Self> {
        if value == 0 { Err(Self::at(key, "must be at least 1")) } else { Ok(()) }
    }
}

/// `http.*`: where the service listens.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpSettings {
    pub host: String,
    /// None means the service's standard port; 0 asks the OS for a free one (tests).
    pub port: Option<u16>,
    /// Worker threads; 0 means one per core.
    pub workers: usize,
    /// Largest request body accepted, in bytes.
    pub body_limit_bytes: usize,
    /// How long a graceful shutdown waits for in-flight requests, in seconds.
    pub shutdown_timeout_secs: u64,
    /// How long a client may take to send a request: its head from the connection's first
    /// byte, then its body from the end of the head. Past it the request is answered 408 and
    /// the connection closed, so slow senders cannot hold a server's sockets and memory.
    pub read_timeout_ms: u64,
    /// How long a listener keeps an idle connection open after an answer, in seconds. Past it
    /// (and `read_timeout_ms` more, for a next request begun just before it) a connection
    /// without a request being served is closed, sending or not (`seckill_web::keep_alive`).
    /// On a port other services call, keep it above [`CLIENT_POOL_IDLE`] (as the default is),
    /// so callers drop their idle pooled connections first (see [`HttpSettings::keep_alive_outlives_callers_pools`]).
    pub keep_alive_secs: u64,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            // Loopback unless told otherwise: a service is not reachable from the network by
            // accident. Containers set SECKILL__HTTP__HOST=0.0.0.0.
            host: "127.0.0.1".into(),
            port: None,
            workers: 0,
            body_limit_bytes: 64 * 1024,
            shutdown_timeout_secs: 20,
            // The bodies are small JSON documents: a client that has not sent one in 5 s is
            // stalled or stalling on purpose.
            read_timeout_ms: 5_000,
            keep_alive_secs: DEFAULT_KEEP_ALIVE_SECS,
        }
    }
}

/// Longest `http.read_timeout_ms`: the bound is what keeps slow senders from holding sockets, and
/// no request of this system takes a live client anywhere near this long to send.
pub const MAX_READ_TIMEOUT_MS: u64 = 60_000;

impl HttpSettings {
    pub fn port_or(&self, standard: u16) -> u16 {
        self.port.unwrap_or(standard)
    }

    pub fn read_timeout(&self) -> Duration {
        Duration::from_millis(self.read_timeout_ms)
    }

    pub fn keep_alive(&self) -> Duration {
        Duration::from_secs(self.keep_alive_secs)
    }

    /// Whether callers' pools (which keep an idle connection [`CLIENT_POOL_IDLE`]) drop their
    /// idle connections to this server before it closes them. Not refused when false: a test
    /// or a port no service calls may want a short keep-alive. The server warns at start.
    pub fn keep_alive_outlives_callers_pools(&self) -> bool {
        self.keep_alive() > CLIENT_POOL_IDLE
    }

    /// Every service checks its `http.*` here.
    pub fn validate(&self) -> Result<(), ConfigError> {
        // 0 would not mean "at once": the server reads it as "never", the very hole the bound closes.
        ConfigError::check_positive("http.read_timeout_ms", self.read_timeout_ms)?;
        if self.read_timeout_ms > MAX_READ_TIMEOUT_MS {
            return Err(ConfigError::at(
                "http.read_timeout_ms",
                format!("must be at most {MAX_READ_TIMEOUT_MS}"),
            ));
        }
        // 0 would not mean "at once": the server reads it as "never".
        ConfigError::check_positive("http.keep_alive_secs", self.keep_alive_secs)?;
        if self.keep_alive_secs > MAX_KEEP_ALIVE_SECS {
            return Err(ConfigError::at(
                "http.keep_alive_secs",
                format!("must be at most {MAX_KEEP_ALIVE_SECS}"),
            ));
        }
        Ok(())
    }
}

/// `log.*`: `format` is `pretty` or `json`; `level` is an env-filter directive (RUST_LOG wins).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogSettings {
    pub format: LogFormat,
    pub level: String,
}

impl Default for LogSettings {
    fn default() -> Self {
        Self { format: LogFormat::Pretty, level: "info".into() }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Pretty,
    Json,
}

/// `database.*`: a PostgreSQL pool.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseSettings {
    /// None means `postgres://postgres:postgres@127.0.0.1:5432/<the service's database>`.
    pub url: Option<String>,
    pub pool_size: usize,
    /// How long a request waits for a free connection before answering 503.
    pub acquire_timeout_ms: u64,
    /// `statement_timeout` set on every connection.
    pub statement_timeout_ms: u64,
}

impl Default for DatabaseSettings {
    fn default() -> Self {
        Self { url: None, pool_size: 16, acquire_timeout_ms: 2_000, statement_timeout_ms: 5_000 }
    }
}

impl DatabaseSettings {
    pub fn url_or(&self, database: &str) -> String {
        self.url.clone().unwrap_or_else(|| format!("postgres://postgres:postgres@127.0.0.1:5432/{database}"))
    }

    pub fn acquire_timeout(&self) -> Duration {
        Duration::from_millis(self.acquire_timeout_ms)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        ConfigError::check_positive("database.pool_size", self.pool_size as u64)
    }
}

/// `redis.*`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisSettings {
    /// The server; with `cluster`, one or more of the cluster's nodes, comma-separated (the
    /// client learns the others from them).
    pub url: String,
    /// `url` names a Redis Cluster: commands go to the node that holds their keys' slot.
    pub cluster: bool,
    /// Put before every key (tests give each run its own).
    pub key_prefix: String,
    /// How long a call waits for a connection and an answer before answering 503.
    pub timeout_ms: u64,
}

impl Default for RedisSettings {
    fn default() -> Self {
        Self {
            url: "redis://127.0.0.1:6379".into(),
            cluster: false,
            key_prefix: String::new(),
            timeout_ms: 2_000,
        }
    }
}

impl RedisSettings {
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    /// The URLs of `url` (one unless `cluster`).
    pub fn urls(&self) -> Vec<String> {
        split_urls(&self.url)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        ConfigError::check_positive("redis.timeout_ms", self.timeout_ms)?;
        match self.urls().len() {
            0 => Err(ConfigError::at("redis.url", "is empty")),
            1 => Ok(()),
            _ if self.cluster => Ok(()),
            n => Err(ConfigError::at(
                "redis.url",
                format!("names {n} servers: several are the nodes of a cluster (set redis.cluster = true)"),
            )),
        }
    }
}

/// `amqp.*`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AmqpSettings {
    pub url: String,
    /// Put before every queue and exchange name (tests give each run its own).
    pub prefix: String,
    /// How long an accepted request waits for the broker's publisher confirm.
    pub confirm_timeout_ms: u64,
    /// Publishing channels (each keeps its own confirms in flight).
    pub publish_channels: usize,
    /// Declare quorum queues (a RabbitMQ cluster) instead of classic ones.
    pub quorum_queues: bool,
    /// Tries a consumed message gets before it goes to its dead-letter queue (and, for a buy
    /// request, its reservation is given back).
    pub max_attempts: u32,
    /// How long a message that failed a try waits before the next.
    pub retry_delay_ms: u64,
}

impl Default for AmqpSettings {
    fn default() -> Self {
        Self {
            url: "amqp://guest:guest@127.0.0.1:5672/%2f".into(),
            prefix: String::new(),
            confirm_timeout_ms: 5_000,
            publish_channels: 4,
            quorum_queues: false,
            max_attempts: 5,
            retry_delay_ms: 1_000,
        }
    }
}

impl AmqpSettings {
    pub fn validate(&self) -> Result<(), ConfigError> {
        ConfigError::check_positive("amqp.publish_channels", self.publish_channels as u64)?;
        ConfigError::check_positive("amqp.max_attempts", u64::from(self.max_attempts))
    }
}

/// `auth.*`. Secure by default: no dev tokens and no built-in secret.
#[derive(Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthSettings {
    pub jwt_secret: Option<String>,
    /// The secret being replaced, still accepted (never used to sign) while tokens it signed
    /// live on: rotating `jwt_secret` logs nobody out.
    pub jwt_previous_secret: Option<String>,
    pub dev_tokens: bool,
    /// Clock skew allowed on `exp` and `nbf`, in seconds.
    pub leeway_secs: u64,
    /// When set, a token must carry this `iss` (and minted dev tokens carry it).
    pub issuer: Option<String>,
    /// When set, a token must carry this `aud` (and minted dev tokens carry it).
    pub audience: Option<String>,
}

impl Default for AuthSettings {
    fn default() -> Self {
        Self {
            jwt_secret: None,
            jwt_previous_secret: None,
            dev_tokens: false,
            leeway_secs: 5,
            issuer: None,
            audience: None,
        }
    }
}

impl std::fmt::Debug for AuthSettings {
    // The secrets are never printed, only whether they are set.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthSettings")
            .field("jwt_secret", &self.jwt_secret.as_ref().map(|_| "<set>"))
            .field("jwt_previous_secret", &self.jwt_previous_secret.as_ref().map(|_| "<set>"))
            .field("dev_tokens", &self.dev_tokens)
            .field("leeway_secs", &self.leeway_secs)
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .finish()
    }
}

/// `upstreams.*`: base URLs of the other services, each a URL or a comma-separated list of
/// replicas.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UpstreamSettings {
    pub seckill: String,
    pub order: String,
    pub stock: String,
    /// Time to open a connection to an upstream.
    pub connect_timeout_ms: u64,
    /// Time for a whole upstream call.
    pub timeout_ms: u64,
}

impl Default for UpstreamSettings {
    fn default() -> Self {
        Self {
            seckill: "http://127.0.0.1:8081".into(),
            order: "http://127.0.0.1:8082".into(),
            stock: "http://127.0.0.1:8083".into(),
            connect_timeout_ms: 500,
            timeout_ms: 5_000,
        }
    }
}

/// Splits `a, b,c` into trimmed URLs without a trailing slash.
pub fn split_urls(list: &str) -> Vec<String> {
    list.split(',').map(|s| s.trim().trim_end_matches('/').to_owned()).filter(|s| !s.is_empty()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names_follow_from_the_key() {
        assert_eq!(env_name("order.consumers"), "SECKILL__ORDER__CONSUMERS");
        assert_eq!(env_name("rate_limit.per_user_per_sec"), "SECKILL__RATE_LIMIT__PER_USER_PER_SEC");
        let message = ConfigError::at("stock.outage_pause_ms", "must be at least 1").to_string();
        assert!(
            message.contains("`stock.outage_pause_ms` (env SECKILL__STOCK__OUTAGE_PAUSE_MS)"),
            "{message}"
        );
        assert!(ConfigError::check_positive("order.consumers", 0).is_err());
        assert!(ConfigError::check_positive("order.consumers", 1).is_ok());
    }

    #[test]
    fn an_explicit_environment_stands_in_for_the_process_one() {
        #[derive(Debug, Default, Deserialize)]
        #[serde(default, deny_unknown_fields)]
        struct Two {
            http: HttpSettings,
            log: LogSettings,
        }
        let env = |pairs: &[(&str, &str)]| {
            Some(pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect::<HashMap<_, _>>())
        };
        let s: Two =
            load_from(ConfigFile::None, env(&[("SECKILL__HTTP__PORT", "9"), ("OTHER", "x")])).unwrap();
        assert_eq!((s.http.port, s.log.level.as_str()), (Some(9), "info"));
        let err = load_from::<Two>(ConfigFile::None, env(&[("SECKILL__HTTP__PROT", "9")])).unwrap_err();
        assert!(err.to_string().contains("prot"), "{err}");
        assert!(load_from::<Two>(ConfigFile::None, env(&[("SECKILL__REDIS__URL", "redis://r")])).is_err());
        assert!(load_from::<Two>(ConfigFile::Required("no/such/file".into()), env(&[])).is_err());
    }

    #[test]
    fn a_read_timeout_of_zero_or_past_the_most_is_refused_naming_the_key() {
        HttpSettings::default().validate().unwrap();
        for bad in [0, MAX_READ_TIMEOUT_MS + 1] {
            let s = HttpSettings { read_timeout_ms: bad, ..HttpSettings::default() };
            let message = s.validate().unwrap_err().to_string();
            assert!(message.contains("SECKILL__HTTP__READ_TIMEOUT_MS"), "{message}");
        }
        let s = HttpSettings { read_timeout_ms: MAX_READ_TIMEOUT_MS, ..HttpSettings::default() };
        assert_eq!(s.read_timeout(), Duration::from_secs(60));
        s.validate().unwrap();
    }

    #[test]
    fn a_keep_alive_of_zero_or_past_the_most_is_refused_naming_the_key() {
        for bad in [0, MAX_KEEP_ALIVE_SECS + 1] {
            let s = HttpSettings { keep_alive_secs: bad, ..HttpSettings::default() };
            let message = s.validate().unwrap_err().to_string();
            assert!(message.contains("SECKILL__HTTP__KEEP_ALIVE_SECS"), "{message}");
        }
        for good in [1, MAX_KEEP_ALIVE_SECS] {
            HttpSettings { keep_alive_secs: good, ..HttpSettings::default() }.validate().unwrap();
        }
        let default = HttpSettings::default();
        assert_eq!(default.keep_alive(), Duration::from_secs(75));
        assert!(default.keep_alive_outlives_callers_pools());
        let short = HttpSettings { keep_alive_secs: CLIENT_POOL_IDLE.as_secs(), ..default };
        assert!(!short.keep_alive_outlives_callers_pools());
    }

    #[test]
    fn urls_split_and_trim() {
        assert_eq!(split_urls(" http://a:1/ , http://b:2,"), vec!["http://a:1", "http://b:2"]);
        assert!(split_urls("").is_empty());
    }
}

//! The Redis connection and the buy-path scripts, loaded once at start and run with EVALSHA.

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, Script};
use seckill_common::config::RedisSettings;
use seckill_common::scripts;

/// The process's Redis connection: one multiplexed connection shared by every request (a
/// cheap clone), on which concurrent calls are pipelined: under a spike one socket write
/// carries many gate calls and Redis reads them in one go. It reconnects by itself.
pub type Redis = ConnectionManager;

/// Opens nothing yet: the first call connects (the services' first call loads the scripts at
/// start). A connection attempt and an answer each wait at most `redis.timeout_ms`; a failed
/// attempt is not retried inside the call: the next call tries again, so a Redis outage
/// while running is a quick 503 per request, not a hang, and the connection comes back with
/// Redis.
///
/// `rediss://` connects over TLS, checking the certificate against the system's roots (or
/// `SSL_CERT_FILE`) and the URL's host name.
pub fn connect(settings: &RedisSettings) -> anyhow::Result<Redis> {
    if settings.url.starts_with("rediss:") {
        // redis builds its rustls config from the process's provider: name aws-lc-rs (reqwest's
        // and lapin's) rather than rely on it being the only one compiled in. Already set: fine.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    }
    let client = Client::open(settings.url.as_str())?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(settings.timeout()))
        .set_response_timeout(Some(settings.timeout()))
        .set_number_of_retries(0);
    Ok(ConnectionManager::new_lazy_with_config(client, config)?)
}

/// `/readyz` check.
pub async fn ping(redis: &Redis) -> Result<(), String> {
    let mut conn = redis.clone();
    redis::cmd("PING").query_async::<String>(&mut conn).await.map(|_| ()).map_err(|e| e.to_string())
}

/// The commands every service with Redis runs through this module: PING (`/readyz`), then
/// SCRIPT LOAD and EVALSHA for its scripts. (ACL spelling: lower case, `|` for a subcommand.)
pub const BASE_COMMANDS: [&str; 3] = ["ping", "script|load", "evalsha"];

/// What a service runs on Redis besides [`BASE_COMMANDS`]: the Lua scripts it runs (texts of
/// `seckill_common::scripts`; Redis checks each command a script calls against the ACL too)
/// and the commands it sends itself, in ACL spelling. Its ACL user must allow exactly these
/// (crates/deploy-check); [`Scripts::of`] loads only the listed scripts.
#[derive(Debug, Clone, Copy)]
pub struct RedisUse {
    pub scripts: &'static [&'static str],
    pub commands: &'static [&'static str],
}

/// The buy-path scripts (see `seckill_common::scripts`), hashed once.
pub struct Scripts {
    pub reserve: Script,
    pub load: Script,
    pub undo: Script,
    pub claim: Script,
    pub succeed: Script,
    pub fail_claimed: Script,
    pub supersede: Script,
    pub restore: Script,
    pub path_token: Script,
    pub snapshot: Script,
    pub adjust: Script,
}

impl Default for Scripts {
    fn default() -> Self {
        Self::new()
    }
}

impl Scripts {
    /// Every script (tests; a service takes [`Scripts::of`]).
    pub fn new() -> Self {
        Self::with(|_| true)
    }

    /// The scripts `uses` lists; any other answers an error naming it, so a service running a
    /// script its `RedisUse` misses fails its tests rather than its ACL user in production.
    pub fn of(uses: &RedisUse) -> Self {
        Self::with(|source| uses.scripts.contains(&source))
    }

    fn with(listed: impl Fn(&str) -> bool) -> Self {
        let script = |name: &str, source: &str| {
            if listed(source) {
                Script::new(source)
            } else {
                Script::new(&format!(
                    "return redis.error_reply(\"ERR script {name} is not in this service's RedisUse\")"
                ))
            }
        };
        Self {
            reserve: script("reserve", scripts::RESERVE),
            load: script("load", scripts::LOAD),
            undo: script("undo", scripts::UNDO),
            claim: script("claim", scripts::CLAIM),
            succeed: script("succeed", scripts::SUCCEED),
            fail_claimed: script("fail_claimed", scripts::FAIL_CLAIMED),
            supersede: script("supersede", scripts::SUPERSEDE),
            restore: script("restore", scripts::RESTORE),
            path_token: script("path_token", scripts::PATH_TOKEN),
            snapshot: script("snapshot", scripts::SNAPSHOT),
            adjust: script("adjust", scripts::ADJUST),
        }
    }

    /// SCRIPT LOAD each one, so EVALSHA (alone or pipelined) finds them. Single calls also
    /// reload by themselves on NOSCRIPT (after a Redis restart); pipelines call this again.
    pub async fn load(&self, redis: &Redis) -> anyhow::Result<()> {
        let mut conn = redis.clone();
        for s in [
            &self.reserve,
            &self.load,
            &self.undo,
            &self.claim,
            &self.succeed,
            &self.fail_claimed,
            &self.supersede,
            &self.restore,
            &self.path_token,
            &self.snapshot,
            &self.adjust,
        ] {
            s.prepare_invoke().load_async(&mut conn).await?;
        }
        Ok(())
    }
}

/// True for the error Redis gives an EVALSHA of a script it does not hold.
pub fn is_noscript(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

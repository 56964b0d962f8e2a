//! The Redis connection and the buy-path scripts, loaded once at start and run with EVALSHA.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;

use futures_util::future::try_join_all;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Client, Cmd, FromRedisValue, Pipeline, RedisFuture, Script, Value};
use seckill_common::config::{ConfigError, RedisSettings};
use seckill_common::ready::{self, Readiness};
use seckill_common::scripts;

/// The process's Redis connection, one server or a cluster behind one type: every call goes
/// through [`ConnectionLike`], so the services' code is the same for both. A cheap clone.
///
/// One server: one multiplexed connection shared by every request, on which concurrent calls
/// are pipelined (under a spike one socket write carries many gate calls and Redis reads them
/// in one go); it reconnects by itself. A cluster: one such connection per node, each command
/// sent to the node holding its keys' slot (every key of a sale shares one: the `{<goods id>}`
/// tag), following the cluster through failovers and resharding.
///
/// A pipeline on a cluster must keep to one slot (Redis refuses a cross-slot one):
/// [`pipelined`] splits a pipeline over many sales by slot.
#[derive(Clone)]
pub enum Redis {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Redis {
    pub fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }
}

impl ConnectionLike for Redis {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}

/// Tries a cluster call gets when the cluster moved a slot or lost a node (a MOVED or ASK
/// redirection, a reconnection), all within `redis.timeout_ms`.
const CLUSTER_RETRIES: u32 = 3;
/// The pause before a cluster call's next try, at least and at most (milliseconds).
const CLUSTER_RETRY_WAIT_MS: (u64, u64) = (10, 200);

/// Opens nothing yet: the first call connects (the services load their scripts in the
/// background: [`load_scripts_in_background`]). A connection attempt and an answer each wait at most `redis.timeout_ms`; a failed
/// attempt is not retried inside the call: the next call tries again, so a Redis outage
/// while running is a quick 503 per request, not a hang, and the connection comes back with
/// Redis. On a cluster a call may follow a redirection or a failover within that time.
///
/// `rediss://` connects over TLS, checking the certificate against the system's roots (or
/// `SSL_CERT_FILE`) and the URL's host name.
pub fn connect(settings: &RedisSettings) -> anyhow::Result<Redis> {
    if settings.url.contains("rediss:") {
        // redis builds its rustls config from the process's provider: name aws-lc-rs (reqwest's
        // and lapin's) rather than rely on it being the only one compiled in. Already set: fine.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    }
    let timeout = settings.timeout();
    if settings.cluster {
        let (min_wait, max_wait) = CLUSTER_RETRY_WAIT_MS;
        let client = ClusterClient::builder(settings.urls())
            .connection_timeout(timeout)
            .response_timeout(timeout)
            .retries(CLUSTER_RETRIES)
            .min_retry_wait(min_wait)
            .max_retry_wait(max_wait)
            .build()
            .map_err(|e| ConfigError::at("redis.url", e.to_string()))?;
        let config = ClusterConfig::new().set_connection_timeout(timeout).set_response_timeout(timeout);
        return Ok(Redis::Cluster(client.get_pending_async_connection_with_config(config)));
    }
    // A URL that does not parse is a wrong setting, the one failure that stops a start.
    let client =
        Client::open(settings.url.as_str()).map_err(|e| ConfigError::at("redis.url", e.to_string()))?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(0);
    Ok(Redis::Single(ConnectionManager::new_lazy_with_config(client, config)?))
}

/// Runs one pipelined command per item and answers their replies in the items' order. On one
/// server that is one pipeline; on a cluster one pipeline per `slot_of(item)` (all the keys of
/// one item's command must share a slot, as a sale's do), sent at once, so a batch over many
/// sales costs one round trip either way. `add` appends an item's command.
pub async fn pipelined<T, S: Hash + Eq, R: FromRedisValue>(
    redis: &Redis,
    items: &[T],
    slot_of: impl Fn(&T) -> S,
    add: impl Fn(&mut Pipeline, &T),
) -> redis::RedisResult<Vec<R>> {
    if items.is_empty() {
        return Ok(Vec::new());
    }
    if !redis.is_cluster() {
        // One server: the one pipeline, its replies as they come.
        let mut pipe = redis::pipe();
        items.iter().for_each(|item| add(&mut pipe, item));
        return pipe.query_async(&mut redis.clone()).await;
    }
    // A cluster: one pipeline per slot, each remembering which items it carries.
    let mut groups: Vec<(Pipeline, Vec<usize>)> = Vec::new();
    let mut by_slot: HashMap<S, usize> = HashMap::new();
    for (i, item) in items.iter().enumerate() {
        let g = *by_slot.entry(slot_of(item)).or_insert_with(|| {
            groups.push((redis::pipe(), Vec::new()));
            groups.len() - 1
        });
        add(&mut groups[g].0, item);
        groups[g].1.push(i);
    }
    let replies = try_join_all(groups.iter().map(|(pipe, _)| {
        let mut conn = redis.clone();
        async move { pipe.query_async::<Vec<Value>>(&mut conn).await }
    }))
    .await?;
    let mut out = vec![Value::Nil; items.len()];
    for ((_, positions), values) in groups.iter().zip(replies) {
        for (&i, v) in positions.iter().zip(values) {
            out[i] = v;
        }
    }
    Ok(out.into_iter().map(redis::from_redis_value).collect::<Result<_, _>>()?)
}

/// Deletes the keys matching `pattern` on one server (a cluster node: those of its slots), one
/// DEL each, so keys of different slots never share a command. For tools and tests cleaning
/// up their own prefix; never on a request's path.
pub async fn delete_matching(node_url: &str, pattern: &str) -> redis::RedisResult<usize> {
    use redis::AsyncCommands;
    let mut conn = Client::open(node_url)?.get_multiplexed_async_connection().await?;
    let keys: Vec<String> = {
        let mut iter: redis::AsyncIter<String> = conn.scan_match(pattern).await?;
        let mut keys = Vec::new();
        while let Some(k) = iter.next_item().await {
            keys.push(k?);
        }
        keys
    };
    for chunk in keys.chunks(1_000) {
        let mut pipe = redis::pipe();
        chunk.iter().for_each(|k| {
            pipe.del(k).ignore();
        });
        pipe.query_async::<()>(&mut conn).await?;
    }
    Ok(keys.len())
}

/// A service's scripts loaded into Redis in the background (`load` is its `load_scripts`), so
/// it starts while Redis is away: returns the part's readiness and the task setting it (for
/// `Lifecycle::spawn_start_up`). Calls made meanwhile fail as Redis being away does (503), and
/// load the scripts themselves on NOSCRIPT once it answers.
pub fn load_scripts_in_background<F, Fut>(
    load: F,
) -> (Arc<Readiness>, impl Future<Output = ()> + Send + 'static)
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = anyhow::Result<()>> + Send,
{
    let readiness = Arc::new(Readiness::new("redis", "scripts not loaded yet"));
    let r = readiness.clone();
    let task = async move {
        ready::keep_trying(&r, |e: &anyhow::Error| format!("scripts not loaded ({e:#})"), &load).await;
    };
    (readiness, task)
}

/// `/readyz` line of a service with scripts: waiting for them to load (and why), else PING.
pub async fn readiness(redis: &Redis, scripts: &Readiness) -> Result<(), String> {
    scripts.check()?;
    ping(redis).await
}

/// `/readyz` check.
pub async fn ping(redis: &Redis) -> Result<(), String> {
    let mut conn = redis.clone();
    redis::cmd("PING").query_async::<String>(&mut conn).await.map(|_| ()).map_err(|e| e.to_string())
}

/// The commands every service with Redis runs through this module: PING (`/readyz`), then
/// SCRIPT LOAD and EVALSHA for its scripts, and on a cluster CLUSTER SLOTS (where each slot
/// is). (ACL spelling: lower case, `|` for a subcommand.)
pub const BASE_COMMANDS: [&str; 4] = ["ping", "script|load", "evalsha", "cluster|slots"];

/// What a service runs on Redis besides [`BASE_COMMANDS`]: the Lua scripts it runs (texts of
/// `seckill_common::scripts`; Redis checks each command a script calls against the ACL too)
/// and the commands it sends itself, in ACL spelling. Its ACL user must allow exactly these
/// (crates/deploy-check); [`Scripts::of`] loads only the listed scripts.
#[derive(Debug, Clone, Copy)]
pub struct RedisUse {
    pub scripts: &'static [&'static str],
    pub commands: &'static [&'static str],
    /// Whether it publishes or listens on the sales' notice channels (`seckill:{<g>}:events`,
    /// `seckill_common::push`): its ACL user may use the channels `seckill:*`, else none.
    pub channels: bool,
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
    pub transfer_take: Script,
    pub transfer_give: Script,
    pub transfer_settle: Script,
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
            transfer_take: script("transfer_take", scripts::TRANSFER_TAKE),
            transfer_give: script("transfer_give", scripts::TRANSFER_GIVE),
            transfer_settle: script("transfer_settle", scripts::TRANSFER_SETTLE),
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
            &self.transfer_take,
            &self.transfer_give,
            &self.transfer_settle,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn connects_to_nothing_yet_and_refuses_only_a_url_it_cannot_read() {
        // Nothing listens there: connecting is left to the first call.
        let away = RedisSettings { url: "redis://127.0.0.1:1".into(), ..RedisSettings::default() };
        assert!(connect(&away).is_ok());
        let wrong = RedisSettings { url: "http://127.0.0.1:6379".into(), ..RedisSettings::default() };
        let e = connect(&wrong).err().expect("a URL that is not Redis's stops the start").to_string();
        assert!(e.contains("SECKILL__REDIS__URL"), "{e}");
    }
}

//! The Redis pool and the buy-path scripts, loaded once at start and run with EVALSHA.

use deadpool_redis::redis::{self, Script};
use deadpool_redis::{Pool, Runtime};
use seckill_common::config::RedisSettings;
use seckill_common::scripts;

/// A pool whose waits are bounded, so a Redis outage turns into quick 503s rather than hangs.
pub fn pool(settings: &RedisSettings) -> anyhow::Result<Pool> {
    let timeout = Some(settings.timeout());
    Ok(deadpool_redis::Config::from_url(settings.url.clone())
        .builder()?
        .max_size(settings.pool_size.max(1))
        .wait_timeout(timeout)
        .create_timeout(timeout)
        .recycle_timeout(timeout)
        .runtime(Runtime::Tokio1)
        .build()?)
}

/// `/readyz` check.
pub async fn ping(pool: &Pool) -> Result<(), String> {
    let mut conn = pool.get().await.map_err(|e| e.to_string())?;
    redis::cmd("PING").query_async::<String>(&mut conn).await.map(|_| ()).map_err(|e| e.to_string())
}

/// The buy-path scripts (see `seckill_common::scripts`), hashed once.
pub struct Scripts {
    pub reserve: Script,
    pub undo: Script,
    pub claim: Script,
    pub fail_claimed: Script,
    pub restore: Script,
    pub path_token: Script,
}

impl Default for Scripts {
    fn default() -> Self {
        Self::new()
    }
}

impl Scripts {
    pub fn new() -> Self {
        Self {
            reserve: Script::new(scripts::RESERVE),
            undo: Script::new(scripts::UNDO),
            claim: Script::new(scripts::CLAIM),
            fail_claimed: Script::new(scripts::FAIL_CLAIMED),
            restore: Script::new(scripts::RESTORE),
            path_token: Script::new(scripts::PATH_TOKEN),
        }
    }

    /// SCRIPT LOAD each one, so EVALSHA (alone or pipelined) finds them. Single calls also
    /// reload by themselves on NOSCRIPT (after a Redis restart); pipelines call this again.
    pub async fn load(&self, pool: &Pool) -> anyhow::Result<()> {
        let mut conn = pool.get().await?;
        for s in [&self.reserve, &self.undo, &self.claim, &self.fail_claimed, &self.restore, &self.path_token]
        {
            s.prepare_invoke().load_async(&mut conn).await?;
        }
        Ok(())
    }
}

/// True for the error Redis gives an EVALSHA of a script it does not hold.
pub fn is_noscript(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

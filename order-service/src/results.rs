//! The order consumer's side of Redis: claiming reservations and telling buyers how their
//! request ended. Batches go in one pipeline each.

use seckill_common::amqp::OrderRequest;
use seckill_common::keys::RedisKeys;
use seckill_common::scripts::StoredResult;
use seckill_infra::redis::{Redis, Scripts, is_noscript};

pub struct ResultStore {
    redis: Redis,
    scripts: Scripts,
    keys: RedisKeys,
}

impl ResultStore {
    pub fn new(redis: Redis, keys: RedisKeys) -> Self {
        Self { redis, scripts: Scripts::new(), keys }
    }

    pub fn redis(&self) -> &Redis {
        &self.redis
    }

    pub async fn load_scripts(&self) -> anyhow::Result<()> {
        self.scripts.load(&self.redis).await
    }

    /// Runs a pipeline of script calls; if Redis lost the scripts (a restart), loads them and
    /// runs it once more. Safe to repeat: every script here is idempotent.
    async fn run<T: redis::FromRedisValue>(&self, pipe: &redis::Pipeline) -> anyhow::Result<T> {
        let mut conn = self.redis.clone();
        match pipe.query_async(&mut conn).await {
            Err(e) if is_noscript(&e) => {
                self.scripts.load(&self.redis).await?;
                Ok(pipe.query_async(&mut conn).await?)
            }
            other => Ok(other?),
        }
    }

    /// For each request: does its reservation stand (now claimed for it)? False means it was
    /// given back (its publish was not confirmed) and the message must not become an order.
    pub async fn claim(&self, requests: &[OrderRequest]) -> anyhow::Result<Vec<bool>> {
        if requests.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for r in requests {
            let mut inv = self.scripts.claim.prepare_invoke();
            inv.key(self.keys.users(r.goods_id))
                .key(self.keys.pending(r.goods_id))
                .arg(r.user_id.get())
                .arg(r.request_id.to_string());
            pipe.invoke_script(&inv);
        }
        let claimed: Vec<i64> = self.run(&pipe).await?;
        Ok(claimed.into_iter().map(|c| c == 1).collect())
    }

    /// Tells each buyer their order id.
    pub async fn succeed(&self, done: &[(OrderRequest, i64)]) -> anyhow::Result<()> {
        if done.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for (r, order_id) in done {
            pipe.set(self.keys.result(r.goods_id, r.user_id), StoredResult::Success(*order_id).encode())
                .ignore();
        }
        self.run::<()>(&pipe).await
    }

    /// Ends claimed requests without an order: `failed` for the buyer, who may try again; the
    /// unit goes back to the Redis stock where `give_back` (it exists at the authority).
    pub async fn fail(&self, failed: &[(OrderRequest, bool)]) -> anyhow::Result<()> {
        if failed.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for (r, give_back) in failed {
            let mut inv = self.scripts.fail_claimed.prepare_invoke();
            inv.key(self.keys.stock(r.goods_id))
                .key(self.keys.users(r.goods_id))
                .key(self.keys.result(r.goods_id, r.user_id))
                .arg(r.user_id.get())
                .arg(r.request_id.to_string())
                .arg(if *give_back { "1" } else { "0" });
            pipe.invoke_script(&inv).ignore();
        }
        self.run::<()>(&pipe).await
    }
}

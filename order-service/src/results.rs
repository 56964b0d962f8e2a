//! The order consumer's side of Redis: claiming reservations and telling buyers how their
//! request ended, in the stock bucket each request names. Batches go in one pipeline each
//! (one per bucket of a sale on a cluster).

use seckill_common::amqp::OrderRequest;
use seckill_common::keys::{RedisKeys, SaleBucket};
use seckill_common::scripts;
use seckill_infra::redis::{Redis, RedisUse, Scripts, is_noscript, pipelined};

/// What the claim found of a request's reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// It stands, and is now this consumer's.
    Claimed,
    /// It was given back in the epoch it was taken in (the buyer was answered 503, or the
    /// request ended): the message must not become an order.
    GivenBack,
    /// Redis lost it (the sale was reloaded since, or is not loaded): the request was
    /// accepted and is served against the authorities.
    Lost,
}

/// What the store runs on Redis: its scripts (which publish on the sales' channels), no command of its own (its ACL user allows
/// exactly these; crates/deploy-check).
pub const REDIS_USE: RedisUse = RedisUse {
    scripts: &[scripts::CLAIM, scripts::SUCCEED, scripts::SUPERSEDE, scripts::FAIL_CLAIMED],
    commands: &[],
    // The result scripts publish each result on the sale's channel.
    channels: true,
};

pub struct ResultStore {
    redis: Redis,
    scripts: Scripts,
    keys: RedisKeys,
}

impl ResultStore {
    pub fn new(redis: Redis, keys: RedisKeys) -> Self {
        Self { redis, scripts: Scripts::of(&REDIS_USE), keys }
    }

    pub fn redis(&self) -> &Redis {
        &self.redis
    }

    pub async fn load_scripts(&self) -> anyhow::Result<()> {
        self.scripts.load(&self.redis).await
    }

    /// Runs one script call per item, pipelined (on a cluster, one pipeline per bucket of a sale: see
    /// [`pipelined`]); if Redis lost the scripts (a restart), loads them and runs it once more.
    /// Safe to repeat: every script here is idempotent. The replies, in the items' order.
    async fn run<T, R: redis::FromRedisValue>(
        &self,
        items: &[T],
        sale: impl Fn(&T) -> SaleBucket,
        call: impl Fn(&mut redis::Pipeline, &T),
    ) -> anyhow::Result<Vec<R>> {
        match pipelined(&self.redis, items, &sale, &call).await {
            Err(e) if is_noscript(&e) => {
                self.scripts.load(&self.redis).await?;
                Ok(pipelined(&self.redis, items, &sale, &call).await?)
            }
            other => Ok(other?),
        }
    }

    /// For each request, what became of its reservation (see [`Claim`]).
    pub async fn claim(&self, requests: &[OrderRequest]) -> anyhow::Result<Vec<Claim>> {
        if requests.is_empty() {
            return Ok(Vec::new());
        }
        let claimed: Vec<i64> = self
            .run(
                requests,
                |r| r.sale_bucket(),
                |pipe, r| {
                    let mut inv = self.scripts.claim.prepare_invoke();
                    inv.key(self.keys.bucket_users(r.sale_bucket()))
                        .key(self.keys.bucket_pending(r.sale_bucket()))
                        .key(self.keys.bucket_epoch(r.sale_bucket()))
                        .key(self.keys.bucket_stock(r.sale_bucket()))
                        .key(self.keys.bucket_holdback(r.sale_bucket()))
                        .arg(r.user_id.get())
                        .arg(r.request_id.to_string())
                        .arg(r.epoch.map(|e| e.to_string()).unwrap_or_default());
                    pipe.invoke_script(&inv);
                },
            )
            .await?;
        Ok(claimed
            .into_iter()
            .map(|c| match c {
                scripts::CLAIMED => Claim::Claimed,
                scripts::LOST => Claim::Lost,
                _ => Claim::GivenBack,
            })
            .collect())
    }

    /// Tells each buyer their order id (and the gateways holding their streams, on the sale's
    /// channel), and marks their reservation as that order.
    pub async fn succeed(&self, done: &[(OrderRequest, i64)]) -> anyhow::Result<()> {
        self.tell(
            &self.scripts.succeed,
            done,
            |(r, _)| r,
            |inv, (r, order_id)| {
                inv.key(self.keys.bucket_users(r.sale_bucket()))
                    .key(self.keys.bucket_result(r.sale_bucket(), r.user_id))
                    .arg(r.user_id.get())
                    .arg(r.request_id.to_string())
                    .arg(order_id)
                    .arg(self.keys.sale_events(r.goods_id));
            },
        )
        .await
    }

    /// Requests whose buyer holds another active order of the sale: (request, that order's
    /// request id, its order id). The buyer is told that order; the unit the request held in
    /// Redis goes back to the stock (its deduction was released).
    pub async fn supersede(&self, superseded: &[(OrderRequest, uuid::Uuid, i64)]) -> anyhow::Result<()> {
        self.tell(
            &self.scripts.supersede,
            superseded,
            |(r, _, _)| r,
            |inv, (r, holder, order_id)| {
                inv.key(self.keys.bucket_stock(r.sale_bucket()))
                    .key(self.keys.bucket_users(r.sale_bucket()))
                    .key(self.keys.bucket_result(r.sale_bucket(), r.user_id))
                    .arg(r.user_id.get())
                    .arg(r.request_id.to_string())
                    .arg(holder.to_string())
                    .arg(order_id)
                    .arg(self.keys.sale_events(r.goods_id));
            },
        )
        .await
    }

    /// Ends claimed requests without an order: `failed` for the buyer, who may try again; the
    /// unit goes back to the Redis stock where `give_back` (it exists at the authority).
    pub async fn fail(&self, failed: &[(OrderRequest, bool)]) -> anyhow::Result<()> {
        self.tell(
            &self.scripts.fail_claimed,
            failed,
            |(r, _)| r,
            |inv, (r, give_back)| {
                inv.key(self.keys.bucket_stock(r.sale_bucket()))
                    .key(self.keys.bucket_users(r.sale_bucket()))
                    .key(self.keys.bucket_result(r.sale_bucket(), r.user_id))
                    .arg(r.user_id.get())
                    .arg(r.request_id.to_string())
                    .arg(if *give_back { "1" } else { "0" })
                    .arg(self.keys.sale_events(r.goods_id));
            },
        )
        .await
    }

    /// Calls `script` once per item, pipelined, its answers ignored; `request` names an item's
    /// request and `call` gives a call its keys and arguments.
    async fn tell<T>(
        &self,
        script: &redis::Script,
        items: &[T],
        request: impl Fn(&T) -> &OrderRequest,
        call: impl Fn(&mut redis::ScriptInvocation<'_>, &T),
    ) -> anyhow::Result<()> {
        self.run::<T, redis::Value>(
            items,
            |item| request(item).sale_bucket(),
            |pipe, item| {
                let mut inv = script.prepare_invoke();
                call(&mut inv, item);
                pipe.invoke_script(&inv);
            },
        )
        .await?;
        Ok(())
    }
}

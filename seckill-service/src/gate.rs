//! The Redis side of a sale: stock loading, the reserve/undo scripts, path tokens, results,
//! each on the keys of one bucket of the sale (`keys::SaleBucket`; a sale of one bucket is
//! bucket 0, the sale's own keys).
//! Every call is bounded by `redis.timeout_ms`, which the shared connection itself enforces
//! (`seckill_infra::redis::connect`); a Redis that does not answer is a 503.

use redis::AsyncCommands;
use seckill_common::api::ActiveOrder;
use seckill_common::keys::{RedisKeys, SaleBucket};
use seckill_common::room::scripts as room;
use seckill_common::scripts::{self, Epoch, StoredResult};
use seckill_common::{GoodsId, UserId};
use seckill_infra::redis::{Redis, RedisUse, Scripts, pipelined};
use seckill_web::ApiError;
use uuid::Uuid;

/// Redis refused, failed or did not answer in time (its timeouts are `RedisError`s too).
#[derive(Debug, thiserror::Error)]
#[error("redis: {0}")]
pub struct GateError(#[from] redis::RedisError);

impl From<GateError> for ApiError {
    fn from(e: GateError) -> Self {
        ApiError::unavailable("redis", e)
    }
}

/// What the reserve script decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reserve {
    /// A unit is held for this request; `left` units remain.
    Reserved {
        left: i64,
    },
    Repeated,
    SoldOut,
    BadToken,
    /// The sale's stock is not in Redis (never loaded, or Redis lost it).
    NotLoaded,
}

/// Where a sale stands after a loss of its Redis data ([`Gate::recovering`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recovery {
    /// Some bucket holds units back: a request of the lost data may still wait in the broker.
    pub held_back: bool,
    /// Every bucket is loaded.
    pub loaded: bool,
}

/// One bucket's Redis data at one instant (see `scripts::SNAPSHOT`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub stock: Option<i64>,
    pub epoch: Option<Epoch>,
    pub holdback: Option<i64>,
    /// Reservations that are orders.
    pub ordered: i64,
    pub pending: i64,
    /// Units this bucket gave to another and nobody has settled (`buckets`).
    pub in_transit: i64,
    /// The requests holding a reservation that is not an order yet.
    pub in_flight: Vec<Uuid>,
}

/// What the gate and the bucket transfers (`buckets`) run on Redis: the scripts they load, and
/// the commands of their own calls (its ACL user allows exactly these; crates/deploy-check).
pub const REDIS_USE: RedisUse = RedisUse {
    scripts: &[
        scripts::LOAD,
        scripts::RESERVE,
        scripts::UNDO,
        scripts::RESTORE,
        scripts::SNAPSHOT,
        scripts::ADJUST,
        scripts::PATH_TOKEN,
        scripts::TRANSFER_TAKE,
        scripts::TRANSFER_GIVE,
        scripts::TRANSFER_SETTLE,
        room::JOIN,
        room::LOAD,
        room::RAISE_CAP,
        room::CLOSE,
        room::DRAWN,
        room::LEAD,
        room::ADVANCE,
    ],
    commands: &[
        "get",
        "set",
        "del",
        "exists",
        "zrem",
        "zrangebyscore",
        "hsetnx",
        "hgetall",
        "hget",
        "hmget",
        "lrange",
        "incrby",
        "publish",
    ],
    // A sell-out, told to the gateways' streams.
    channels: true,
};

pub struct Gate {
    redis: Redis,
    scripts: Scripts,
    keys: RedisKeys,
}

impl Gate {
    pub fn new(redis: Redis, keys: RedisKeys) -> Self {
        Self { redis, scripts: Scripts::of(&REDIS_USE), keys }
    }

    pub fn redis(&self) -> &Redis {
        &self.redis
    }

    pub fn keys(&self) -> &RedisKeys {
        &self.keys
    }

    /// Loads the scripts into Redis (EVALSHA then finds them on the first call).
    pub async fn load_scripts(&self) -> anyhow::Result<()> {
        self.scripts.load(&self.redis).await
    }

    /// Tells the gateways holding buyers' streams of `g` that it sold out, on the sale's
    /// channel (`seckill_common::push`).
    pub async fn publish_sold_out(&self, g: GoodsId) -> redis::RedisResult<()> {
        redis::cmd("PUBLISH")
            .arg(self.keys.sale_events(g))
            .arg(seckill_common::push::SOLD_OUT_NOTICE)
            .query_async(&mut self.conn())
            .await
    }

    /// A handle on the shared connection (a clone costs an Arc).
    fn conn(&self) -> Redis {
        self.redis.clone()
    }

    /// Loads a bucket of a sale into Redis unless its stock is there already: a sale under way
    /// keeps its count across restarts of this service. `holdback` is Some while the sale
    /// recovers from a loss of its Redis data (see `rebuild`). Returns true if this call
    /// loaded it.
    pub async fn load(
        &self,
        at: SaleBucket,
        stock: i64,
        epoch: Epoch,
        holdback: Option<i64>,
    ) -> Result<bool, GateError> {
        let mut conn = self.conn();
        let loaded: i64 = self
            .scripts
            .load
            .key(self.keys.bucket_stock(at))
            .key(self.keys.bucket_epoch(at))
            .key(self.keys.bucket_holdback(at))
            .arg(stock)
            .arg(epoch.to_string())
            .arg(holdback.map(|h| h.to_string()).unwrap_or_default())
            .invoke_async(&mut conn)
            .await?;
        Ok(loaded == 1)
    }

    /// Reserves a unit for `u` in the bucket that serves them.
    pub async fn reserve(
        &self,
        at: SaleBucket,
        u: UserId,
        request_id: Uuid,
        now_ms: i64,
        token: Option<&str>,
    ) -> Result<(Reserve, Option<Epoch>), GateError> {
        let mut conn = self.conn();
        let (code, epoch): (i64, Option<String>) = self
            .scripts
            .reserve
            .key(self.keys.bucket_stock(at))
            .key(self.keys.bucket_users(at))
            .key(self.keys.bucket_pending(at))
            .key(self.keys.bucket_result(at, u))
            .key(self.keys.bucket_token(at, u))
            .key(self.keys.bucket_epoch(at))
            .arg(u.get())
            .arg(request_id.to_string())
            .arg(now_ms)
            .arg(token.unwrap_or(""))
            .invoke_async(&mut conn)
            .await?;
        let outcome = match code {
            left if left >= 0 => Reserve::Reserved { left },
            scripts::RESERVE_REPEATED => Reserve::Repeated,
            scripts::RESERVE_BAD_TOKEN => Reserve::BadToken,
            scripts::RESERVE_SOLD_OUT => Reserve::SoldOut,
            _ => Reserve::NotLoaded,
        };
        Ok((outcome, epoch.as_deref().and_then(Epoch::parse)))
    }

    /// Gives back a reservation nobody has claimed; `leave` is the result the user then sees
    /// (None: no result, as if they never asked). False when the order consumer claimed it.
    pub async fn undo(
        &self,
        at: SaleBucket,
        u: UserId,
        request_id: Uuid,
        leave: Option<StoredResult>,
    ) -> Result<bool, GateError> {
        let mut conn = self.conn();
        let undone: i64 = self
            .scripts
            .undo
            .key(self.keys.bucket_stock(at))
            .key(self.keys.bucket_users(at))
            .key(self.keys.bucket_pending(at))
            .key(self.keys.bucket_result(at, u))
            .arg(u.get())
            .arg(request_id.to_string())
            .arg(leave.map(StoredResult::encode).unwrap_or_default())
            .invoke_async(&mut conn)
            .await?;
        Ok(undone == 1)
    }

    /// Orders' units came back at the authority: back into the Redis stock, and their buyers
    /// may try again. One script call for many (user, request id) pairs of one bucket (the
    /// bucket that serves those users). Returns how many were restored now (the rest: restored
    /// by an earlier copy, or not held).
    pub async fn restore(&self, at: SaleBucket, released: &[(UserId, Uuid)]) -> Result<usize, GateError> {
        if released.is_empty() {
            return Ok(0);
        }
        let mut call = self.scripts.restore.key(self.keys.bucket_stock(at));
        call.key(self.keys.bucket_users(at));
        for (u, request_id) in released {
            call.key(self.keys.bucket_result(at, *u)).arg(u.get()).arg(request_id.to_string());
        }
        let mut conn = self.conn();
        let restored: i64 = call.invoke_async(&mut conn).await?;
        Ok(usize::try_from(restored).unwrap_or_default())
    }

    /// The broker confirmed these requests' messages: the reconciler need not look at them.
    /// One pipeline for many (see `confirmations`).
    pub async fn confirmed(&self, requests: &[(SaleBucket, UserId, Uuid)]) -> Result<(), GateError> {
        if requests.is_empty() {
            return Ok(());
        }
        pipelined::<_, _, redis::Value>(
            &self.redis,
            requests,
            |(at, _, _)| *at,
            |pipe, (at, u, request_id)| {
                pipe.zrem(self.keys.bucket_pending(*at), format!("{u}:{request_id}"));
            },
        )
        .await?;
        Ok(())
    }

    /// Reservations older than `before_ms` that the broker never confirmed.
    pub async fn unconfirmed(
        &self,
        at: SaleBucket,
        before_ms: i64,
    ) -> Result<Vec<(UserId, Uuid)>, GateError> {
        let mut conn = self.conn();
        let members: Vec<String> =
            conn.zrangebyscore_limit(self.keys.bucket_pending(at), "-inf", before_ms, 0, 500).await?;
        Ok(members
            .iter()
            .filter_map(|m| {
                let (u, r) = m.split_once(':')?;
                Some((u.parse().ok()?, r.parse().ok()?))
            })
            .collect())
    }

    /// Writes what the order authority says back into Redis: each active order's buyer holds a
    /// reservation that is that order (unless they hold one already: a request in flight
    /// settles on its own), and their result names it, in the bucket that serves the buyer
    /// (`bucket_of`). Pipelines of a thousand (on a cluster, one per bucket at once).
    pub async fn restore_orders(
        &self,
        orders: &[ActiveOrder],
        bucket_of: impl Fn(UserId) -> SaleBucket,
    ) -> Result<(), GateError> {
        for chunk in orders.chunks(1_000) {
            // Two commands an order, one per item (`pipelined` answers one reply per item):
            // the reservation (false), then the result (true).
            let items: Vec<(SaleBucket, &ActiveOrder, bool)> = chunk
                .iter()
                .flat_map(|o| {
                    let at = bucket_of(o.user_id);
                    [(at, o, false), (at, o, true)]
                })
                .collect();
            pipelined::<_, _, redis::Value>(
                &self.redis,
                &items,
                |(at, _, _)| *at,
                |pipe, (at, o, result)| {
                    if *result {
                        pipe.set(
                            self.keys.bucket_result(*at, o.user_id),
                            StoredResult::Success(o.order_id.get()).encode(),
                        );
                    } else {
                        pipe.hset_nx(
                            self.keys.bucket_users(*at),
                            o.user_id.get(),
                            format!("o:{}", o.request_id),
                        );
                    }
                },
            )
            .await?;
        }
        Ok(())
    }

    /// A consistent look at one bucket's Redis data (see `scripts::SNAPSHOT`).
    pub async fn snapshot(&self, at: SaleBucket) -> Result<Snapshot, GateError> {
        let mut conn = self.conn();
        let raw: Vec<Option<String>> = self
            .scripts
            .snapshot
            .key(self.keys.bucket_stock(at))
            .key(self.keys.bucket_users(at))
            .key(self.keys.bucket_pending(at))
            .key(self.keys.bucket_epoch(at))
            .key(self.keys.bucket_holdback(at))
            .key(self.keys.transfers_out(at))
            .invoke_async(&mut conn)
            .await?;
        let int = |i: usize| raw.get(i).cloned().flatten().and_then(|v| v.parse::<i64>().ok());
        Ok(Snapshot {
            stock: int(0),
            epoch: raw.get(1).cloned().flatten().as_deref().and_then(Epoch::parse),
            holdback: int(2),
            ordered: int(3).unwrap_or_default(),
            pending: int(4).unwrap_or_default(),
            in_transit: int(5).unwrap_or_default(),
            in_flight: raw.iter().skip(6).flatten().filter_map(|id| id.parse().ok()).collect(),
        })
    }

    /// Corrects the stock by `delta` if the sale is still in `epoch` (see `scripts::ADJUST`);
    /// `end_recovery` also drops the held-back units. The new stock, or None if unchanged.
    pub async fn adjust(
        &self,
        at: SaleBucket,
        epoch: Epoch,
        delta: i64,
        end_recovery: bool,
    ) -> Result<Option<i64>, GateError> {
        let mut conn = self.conn();
        Ok(self
            .scripts
            .adjust
            .key(self.keys.bucket_stock(at))
            .key(self.keys.bucket_epoch(at))
            .key(self.keys.bucket_holdback(at))
            .arg(epoch.to_string())
            .arg(delta)
            .arg(if end_recovery { "1" } else { "0" })
            .invoke_async(&mut conn)
            .await?)
    }

    /// Takes the sale's rebuild lock for `ttl_ms` (it lapses if its holder dies). False when
    /// another instance holds it.
    pub async fn lock_rebuild(&self, g: GoodsId, ttl_ms: u64) -> Result<bool, GateError> {
        let mut conn = self.conn();
        let set: Option<String> = redis::cmd("SET")
            .arg(self.keys.rebuild_lock(g))
            .arg(1)
            .arg("NX")
            .arg("PX")
            .arg(ttl_ms)
            .query_async(&mut conn)
            .await?;
        Ok(set.is_some())
    }

    pub async fn unlock_rebuild(&self, g: GoodsId) -> Result<(), GateError> {
        let mut conn = self.conn();
        conn.del::<_, ()>(self.keys.rebuild_lock(g)).await?;
        Ok(())
    }

    /// Writes a buyer's result (the result poll's answer from the order authority), for
    /// `ttl_secs` when given.
    pub async fn set_result(
        &self,
        at: SaleBucket,
        u: UserId,
        result: StoredResult,
        ttl_secs: Option<u64>,
    ) -> Result<(), GateError> {
        let mut conn = self.conn();
        match ttl_secs {
            // NX: a reservation taken meanwhile wrote `queued`, which must stay.
            Some(ttl) => {
                redis::cmd("SET")
                    .arg(self.keys.bucket_result(at, u))
                    .arg(result.encode())
                    .arg("NX")
                    .arg("EX")
                    .arg(ttl)
                    .query_async::<()>(&mut conn)
                    .await?
            }
            None => conn.set::<_, _, ()>(self.keys.bucket_result(at, u), result.encode()).await?,
        }
        Ok(())
    }

    /// Whether the sale recovers from a loss of its Redis data, and whether every bucket is
    /// loaded. One round trip (one per bucket at once on a cluster).
    pub async fn recovering(&self, buckets: &[SaleBucket]) -> Result<Recovery, GateError> {
        // One EXISTS per key (`pipelined` answers one reply per item): holdback, stock, ...
        let keys: Vec<(SaleBucket, String)> = buckets
            .iter()
            .flat_map(|at| [(*at, self.keys.bucket_holdback(*at)), (*at, self.keys.bucket_stock(*at))])
            .collect();
        let found: Vec<bool> = pipelined(
            &self.redis,
            &keys,
            |(at, _)| *at,
            |pipe, (_, key)| {
                pipe.exists(key);
            },
        )
        .await?;
        let held = found.iter().step_by(2).any(|h| *h);
        let loaded = found.iter().skip(1).step_by(2).all(|l| *l);
        Ok(Recovery { held_back: held, loaded })
    }

    /// The bucket's epoch, if it is loaded.
    pub async fn epoch(&self, at: SaleBucket) -> Result<Option<Epoch>, GateError> {
        let mut conn = self.conn();
        let raw: Option<String> = conn.get(self.keys.bucket_epoch(at)).await?;
        Ok(raw.as_deref().and_then(Epoch::parse))
    }

    /// The user's path token: the live one, or a new one valid for `ttl_secs`.
    pub async fn path_token(&self, at: SaleBucket, u: UserId, ttl_secs: u64) -> Result<String, GateError> {
        let fresh = Uuid::new_v4().simple().to_string();
        let mut conn = self.conn();
        Ok(self
            .scripts
            .path_token
            .key(self.keys.bucket_token(at, u))
            .arg(fresh)
            .arg(ttl_secs)
            .invoke_async(&mut conn)
            .await?)
    }

    pub async fn result(&self, at: SaleBucket, u: UserId) -> Result<Option<StoredResult>, GateError> {
        let mut conn = self.conn();
        let raw: Option<String> = conn.get(self.keys.bucket_result(at, u)).await?;
        Ok(raw.as_deref().and_then(StoredResult::parse))
    }

    /// Units left in each bucket (None: that bucket is not loaded). One round trip (one per
    /// bucket at once on a cluster).
    pub async fn stocks(&self, buckets: &[SaleBucket]) -> Result<Vec<Option<i64>>, GateError> {
        Ok(pipelined(
            &self.redis,
            buckets,
            |at| *at,
            |pipe, at| {
                pipe.get(self.keys.bucket_stock(*at));
            },
        )
        .await?)
    }
}

//! The Redis side of a sale: stock loading, the reserve/undo scripts, path tokens, results.
//! Every call is bounded by `redis.timeout_ms`, which the shared connection itself enforces
//! (`seckill_infra::redis::connect`); a Redis that does not answer is a 503.

use redis::AsyncCommands;
use seckill_common::keys::RedisKeys;
use seckill_common::scripts::{self, StoredResult};
use seckill_common::{GoodsId, UserId};
use seckill_infra::redis::{Redis, Scripts};
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

pub struct Gate {
    redis: Redis,
    scripts: Scripts,
    keys: RedisKeys,
}

impl Gate {
    pub fn new(redis: Redis, keys: RedisKeys) -> Self {
        Self { redis, scripts: Scripts::new(), keys }
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

    /// A handle on the shared connection (a clone costs an Arc).
    fn conn(&self) -> Redis {
        self.redis.clone()
    }

    /// Puts a sale's stock into Redis unless it is there already: a sale under way keeps its
    /// count across restarts of this service. Returns true if this call loaded it.
    pub async fn load_stock(&self, g: GoodsId, available: i64) -> Result<bool, GateError> {
        let mut conn = self.conn();
        let set: bool = redis::cmd("SET")
            .arg(self.keys.stock(g))
            .arg(available)
            .arg("NX")
            .query_async::<Option<String>>(&mut conn)
            .await?
            .is_some();
        Ok(set)
    }

    pub async fn reserve(
        &self,
        g: GoodsId,
        u: UserId,
        request_id: Uuid,
        now_ms: i64,
        token: Option<&str>,
    ) -> Result<Reserve, GateError> {
        let mut conn = self.conn();
        let code: i64 = self
            .scripts
            .reserve
            .key(self.keys.stock(g))
            .key(self.keys.users(g))
            .key(self.keys.pending(g))
            .key(self.keys.result(g, u))
            .key(self.keys.token(g, u))
            .arg(u.get())
            .arg(request_id.to_string())
            .arg(now_ms)
            .arg(token.unwrap_or(""))
            .invoke_async(&mut conn)
            .await?;
        Ok(match code {
            left if left >= 0 => Reserve::Reserved { left },
            scripts::RESERVE_REPEATED => Reserve::Repeated,
            scripts::RESERVE_BAD_TOKEN => Reserve::BadToken,
            scripts::RESERVE_SOLD_OUT => Reserve::SoldOut,
            _ => Reserve::NotLoaded,
        })
    }

    /// Gives back a reservation nobody has claimed; `leave` is the result the user then sees
    /// (None: no result, as if they never asked). False when the order consumer claimed it.
    pub async fn undo(
        &self,
        g: GoodsId,
        u: UserId,
        request_id: Uuid,
        leave: Option<StoredResult>,
    ) -> Result<bool, GateError> {
        let mut conn = self.conn();
        let undone: i64 = self
            .scripts
            .undo
            .key(self.keys.stock(g))
            .key(self.keys.users(g))
            .key(self.keys.pending(g))
            .key(self.keys.result(g, u))
            .arg(u.get())
            .arg(request_id.to_string())
            .arg(leave.map(StoredResult::encode).unwrap_or_default())
            .invoke_async(&mut conn)
            .await?;
        Ok(undone == 1)
    }

    /// An order's unit came back at the authority: back into the Redis stock, and the buyer
    /// may try again. True if restored now (false: already restored, by an earlier copy).
    pub async fn restore(&self, g: GoodsId, u: UserId, request_id: Uuid) -> Result<bool, GateError> {
        let mut conn = self.conn();
        let restored: i64 = self
            .scripts
            .restore
            .key(self.keys.stock(g))
            .key(self.keys.users(g))
            .key(self.keys.result(g, u))
            .arg(u.get())
            .arg(request_id.to_string())
            .invoke_async(&mut conn)
            .await?;
        Ok(restored == 1)
    }

    /// The broker confirmed these requests' messages: the reconciler need not look at them.
    /// One pipeline for many (see `confirmations`).
    pub async fn confirmed(&self, requests: &[(GoodsId, UserId, Uuid)]) -> Result<(), GateError> {
        if requests.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for (g, u, request_id) in requests {
            pipe.zrem(self.keys.pending(*g), format!("{u}:{request_id}")).ignore();
        }
        let mut conn = self.conn();
        pipe.query_async::<()>(&mut conn).await?;
        Ok(())
    }

    /// Reservations older than `before_ms` that the broker never confirmed.
    pub async fn unconfirmed(&self, g: GoodsId, before_ms: i64) -> Result<Vec<(UserId, Uuid)>, GateError> {
        let mut conn = self.conn();
        let members: Vec<String> =
            conn.zrangebyscore_limit(self.keys.pending(g), "-inf", before_ms, 0, 500).await?;
        Ok(members
            .iter()
            .filter_map(|m| {
                let (u, r) = m.split_once(':')?;
                Some((u.parse().ok()?, r.parse().ok()?))
            })
            .collect())
    }

    /// The user's path token: the live one, or a new one valid for `ttl_secs`.
    pub async fn path_token(&self, g: GoodsId, u: UserId, ttl_secs: u64) -> Result<String, GateError> {
        let fresh = Uuid::new_v4().simple().to_string();
        let mut conn = self.conn();
        Ok(self
            .scripts
            .path_token
            .key(self.keys.token(g, u))
            .arg(fresh)
            .arg(ttl_secs)
            .invoke_async(&mut conn)
            .await?)
    }

    pub async fn result(&self, g: GoodsId, u: UserId) -> Result<Option<StoredResult>, GateError> {
        let mut conn = self.conn();
        let raw: Option<String> = conn.get(self.keys.result(g, u)).await?;
        Ok(raw.as_deref().and_then(StoredResult::parse))
    }

    /// Units left in Redis, if the sale is loaded.
    pub async fn stock(&self, g: GoodsId) -> Result<Option<i64>, GateError> {
        let mut conn = self.conn();
        Ok(conn.get(self.keys.stock(g)).await?)
    }
}

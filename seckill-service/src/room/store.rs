//! Where a room lives outside this process: its counts in Redis (`room::scripts`), the marks
//! that make them survive a loss of Redis at stock-service. Every number handed out is below
//! a cap stock-service has recorded first, so Redis can lose everything and, loaded again
//! from the marks, give no join number twice and admit no place twice.

use std::sync::Arc;

use redis::Script;
use seckill_common::api::Goods;
use seckill_common::keys::RedisKeys;
use seckill_common::room::scripts::{
    self, AFTER_BASE, JOIN_LEASE_AFTER, JOIN_LEASE_BEFORE, JOIN_NOT_LOADED, JOIN_WORK_NEEDED, JOIN_WORK_USED,
};
use seckill_common::room::{CameUp, RoomMarks, RoomRecord};
use seckill_common::{ErrorCode, GoodsId, UserId};
use seckill_infra::redis::Redis;
use seckill_infra::stock_client::StockClient;
use seckill_web::ApiError;

use crate::gate::GateError;

/// Join numbers leased from stock-service at once: one call per this many joins, and at most
/// this many numbers skipped (empty places) after a loss of Redis.
pub const JOIN_BLOCK: u64 = 1_024;

/// Rounds of "lease, then join again" one join makes before it gives up (503): other joins
/// may use the numbers leased before this one's turn.
const JOIN_ROUNDS: usize = 4;

/// The most time one advance credits at the rate: three ticks. A leader taking over after
/// its predecessor died (a lease, a second, without advances) lets in no burst.
const MOST_CREDITED_MS: i64 = 300;

/// The room's Redis side and its marks at stock-service.
pub struct RoomStore {
    redis: Redis,
    keys: RedisKeys,
    stock: Arc<StockClient>,
    join: Script,
    load: Script,
    raise_cap: Script,
    close: Script,
    drawn: Script,
    lead: Script,
    advance: Script,
    /// One lease of join numbers at a time on this replica: when a block runs out every join
    /// in flight is told so, and one call to stock-service serves them all (the others find
    /// the cap raised and join again).
    leasing: tokio::sync::Mutex<()>,
}

/// What a join brings of the proof of work a new place may need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Work {
    /// The room asks for none.
    NotAsked,
    /// The room asks for it and the join brought none: a place held already is answered, a
    /// new one refused.
    Missing,
    /// A solved challenge: its nonce (hex), remembered for `ttl_ms` so it serves once.
    Done { nonce: String, ttl_ms: i64 },
}

/// One read of a room's Redis hash ([`scripts::VIEW_FIELDS`]) and its recent marks: `None`
/// when not loaded.
#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    pub drawn: Option<u64>,
    pub after: u64,
    pub admitted: u64,
    pub rate: Option<f64>,
    /// The leader's last marks, `(instant ms, places admitted)`, oldest first.
    pub marks: Vec<(i64, u64)>,
}

/// What one advance did (`scripts::ADVANCE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advanced {
    pub admitted: u64,
    pub cap: u64,
    pub busy: u64,
}

fn stock_down(e: seckill_infra::stock_client::StockError) -> ApiError {
    ApiError::unavailable("stock-service", e)
}

impl RoomStore {
    pub fn new(redis: Redis, keys: RedisKeys, stock: Arc<StockClient>) -> Self {
        Self {
            redis,
            keys,
            stock,
            join: Script::new(scripts::JOIN),
            load: Script::new(scripts::LOAD),
            raise_cap: Script::new(scripts::RAISE_CAP),
            close: Script::new(scripts::CLOSE),
            drawn: Script::new(scripts::DRAWN),
            lead: Script::new(scripts::LEAD),
            advance: Script::new(scripts::ADVANCE),
            leasing: tokio::sync::Mutex::new(()),
        }
    }

    fn conn(&self) -> Redis {
        self.redis.clone()
    }

    /// `u`'s join code: the one they hold, or `ticket`'s (a code this room signed), or a new
    /// one. Loads the room from its marks, or leases more numbers, as the script asks.
    pub async fn join(
        &self,
        goods: &Goods,
        u: UserId,
        ticket: Option<u64>,
        work: &Work,
        now_ms: i64,
    ) -> Result<u64, ApiError> {
        let g = goods.id;
        let (work_key, needed, ttl) = match work {
            Work::NotAsked => (self.keys.room(g), "0", String::new()),
            Work::Missing => (self.keys.room(g), "1", String::new()),
            Work::Done { nonce, ttl_ms } => {
                (self.keys.room_work(g, nonce), "1", (*ttl_ms).max(1).to_string())
            }
        };
        for _ in 0..JOIN_ROUNDS {
            let mut conn = self.conn();
            let reply: i64 = self
                .join
                .key(self.keys.room(g))
                .key(self.keys.room_members(g, u))
                .key(&work_key)
                .arg(u.get())
                .arg(now_ms)
                .arg(goods.start_at.timestamp_millis())
                .arg(ticket.map(|t| t.to_string()).unwrap_or_default())
                .arg(needed)
                .arg(&ttl)
                .invoke_async(&mut conn)
                .await
                .map_err(GateError::from)?;
            match reply {
                JOIN_WORK_NEEDED => {
                    return Err(ApiError::new(
                        ErrorCode::ChallengeRequired,
                        "this waiting room asks for proof of work: solve a challenge from POST \
                         /api/seckill/{id}/queue/challenge and join with it",
                    ));
                }
                JOIN_WORK_USED => {
                    return Err(ApiError::new(
                        ErrorCode::ChallengeRequired,
                        "this challenge was used before: ask for a new one",
                    ));
                }
                JOIN_NOT_LOADED => self.load(goods, now_ms).await?,
                JOIN_LEASE_BEFORE => self.lease_joins(g, false).await?,
                JOIN_LEASE_AFTER => self.lease_joins(g, true).await?,
                code => {
                    return u64::try_from(code)
                        .map_err(|_| ApiError::internal(anyhow::anyhow!("a negative join code")));
                }
            }
        }
        Err(ApiError::new(ErrorCode::Busy, "the waiting room is very busy, join again"))
    }

    /// Puts the room into Redis from stock-service's marks, unless it is there: its counts, and
    /// the leader's marks of the last admission's life (so a replica that starts after the
    /// loss ends each admission about when the others do, not an admission's life from now).
    pub async fn load(&self, goods: &Goods, now_ms: i64) -> Result<(), ApiError> {
        let RoomRecord { marks, came_up } = self.stock.room_record(goods.id).await.map_err(stock_down)?;
        // stock-service keeps the longest admission's life of them; this room's is enough.
        let life_ms = goods.waiting_room.map_or(0, |r| i64::from(r.admission_secs) * 1000);
        let newest = came_up.last().map_or(0, |c| c.at_ms);
        let recent = came_up
            .iter()
            .filter(|c| c.at_ms >= newest - life_ms - 10_000)
            .map(|c| format!("{}:{}", c.at_ms, c.admitted));
        let mut conn = self.conn();
        let loaded: i64 = self
            .load
            .key(self.keys.room(goods.id))
            .key(self.keys.room_marks(goods.id))
            .arg(marks.joins_before)
            .arg(marks.joins_after)
            .arg(marks.drawn.map(|n| n.to_string()).unwrap_or_default())
            .arg(marks.admitted)
            .arg(marks.admitted_at_ms)
            .arg(now_ms)
            .arg(goods.start_at.timestamp_millis())
            .arg(recent.collect::<Vec<_>>())
            .invoke_async(&mut conn)
            .await
            .map_err(GateError::from)?;
        if loaded == 1 {
            tracing::info!(goods_id = %goods.id, ?marks, "waiting room loaded into Redis from its marks");
            metrics::counter!("seckill_room_loads_total").increment(1);
        }
        Ok(())
    }

    /// Leases another block of join numbers for one phase, recorded at stock-service before
    /// Redis may hand any of them out.
    async fn lease_joins(&self, g: GoodsId, after: bool) -> Result<(), ApiError> {
        let (count, field) = if after { ("after", "after_cap") } else { ("before", "before_cap") };
        let _one_at_a_time = self.leasing.lock().await;
        let mut conn = self.conn();
        let (handed_out, cap): (Option<u64>, Option<u64>) = redis::cmd("HMGET")
            .arg(self.keys.room(g))
            .arg(count)
            .arg(field)
            .query_async(&mut conn)
            .await
            .map_err(GateError::from)?;
        let cap = cap.unwrap_or(0);
        if handed_out.unwrap_or(0) < cap {
            // Another join's lease (here or on another replica) came first: numbers are left.
            return Ok(());
        }
        let wanted = cap + JOIN_BLOCK;
        let ask = if after {
            RoomMarks { joins_after: wanted, ..RoomMarks::default() }
        } else {
            RoomMarks { joins_before: wanted, ..RoomMarks::default() }
        };
        let marks = self.stock.raise_room(g, &ask).await.map_err(stock_down)?;
        self.raise_cap(g, field, if after { marks.joins_after } else { marks.joins_before }).await
    }

    async fn raise_cap(&self, g: GoodsId, field: &str, value: u64) -> Result<(), ApiError> {
        let mut conn = self.conn();
        let _: i64 = self
            .raise_cap
            .key(self.keys.room(g))
            .arg(field)
            .arg(value)
            .invoke_async(&mut conn)
            .await
            .map_err(GateError::from)?;
        Ok(())
    }

    /// The room's state as every replica keeps it in memory; `None` when not in Redis.
    pub async fn observe(&self, g: GoodsId) -> Result<Option<Observed>, GateError> {
        let mut conn = self.conn();
        let mut pipe = redis::pipe();
        pipe.cmd("HMGET").arg(self.keys.room(g)).arg(&scripts::VIEW_FIELDS[..]);
        pipe.cmd("LRANGE").arg(self.keys.room_marks(g)).arg(-scripts::RECENT_MARKS).arg(-1);
        let ([drawn, after, admitted_milli, rate], marks): ([Option<String>; 4], Vec<String>) =
            pipe.query_async(&mut conn).await?;
        if drawn.is_none() && after.is_none() && admitted_milli.is_none() {
            return Ok(None);
        }
        let int = |v: &Option<String>| v.as_deref().and_then(|v| v.parse::<u64>().ok());
        Ok(Some(Observed {
            drawn: int(&drawn),
            after: int(&after).unwrap_or(0),
            admitted: int(&admitted_milli).unwrap_or(0) / 1000,
            rate: rate.as_deref().and_then(|r| r.parse().ok()),
            marks: parse_marks(&marks),
        }))
    }

    /// The marks kept in Redis (`<instant>:<admitted>`), oldest first: where a replica that
    /// starts learns when each admission began.
    pub async fn marks(&self, g: GoodsId) -> Result<Vec<(i64, u64)>, GateError> {
        let mut conn = self.conn();
        let raw: Vec<String> =
            redis::cmd("LRANGE").arg(self.keys.room_marks(g)).arg(0).arg(-1).query_async(&mut conn).await?;
        Ok(parse_marks(&raw))
    }

    /// Whether this replica leads the room for the next `lease_ms`.
    pub async fn lead(&self, g: GoodsId, replica: &str, lease_ms: u64) -> Result<bool, GateError> {
        let mut conn = self.conn();
        let led: i64 = self
            .lead
            .key(self.keys.room_leader(g))
            .arg(replica)
            .arg(lease_ms)
            .invoke_async(&mut conn)
            .await?;
        Ok(led == 1)
    }

    /// The draw: closes the joins before the opening, records their count at stock-service
    /// (whose first record stands), then in Redis. Returns the draw's size.
    pub async fn draw(&self, goods: &Goods, now_ms: i64) -> Result<u64, ApiError> {
        let g = goods.id;
        let mut conn = self.conn();
        let counted: i64 =
            self.close.key(self.keys.room(g)).invoke_async(&mut conn).await.map_err(GateError::from)?;
        let Ok(counted) = u64::try_from(counted) else {
            self.load(goods, now_ms).await?;
            return Box::pin(self.draw(goods, now_ms)).await;
        };
        let marks = self
            .stock
            .raise_room(g, &RoomMarks { drawn: Some(counted), ..RoomMarks::default() })
            .await
            .map_err(stock_down)?;
        let drawn = marks.drawn.unwrap_or(counted);
        let _: i64 = self
            .drawn
            .key(self.keys.room(g))
            .arg(drawn)
            .invoke_async(&mut conn)
            .await
            .map_err(GateError::from)?;
        tracing::info!(goods_id = %g, drawn, "waiting room drawn");
        Ok(drawn)
    }

    /// Moves the admissions on at `rate` a second; `None` before the draw or when not loaded.
    pub async fn advance(
        &self,
        g: GoodsId,
        now_ms: i64,
        rate: f64,
        keep: u64,
    ) -> Result<Option<Advanced>, GateError> {
        let mut conn = self.conn();
        let [admitted, cap, busy]: [i64; 3] = self
            .advance
            .key(self.keys.room(g))
            .key(self.keys.room_marks(g))
            .key(self.keys.room_busy(g))
            .arg(now_ms)
            .arg(format!("{rate:.3}"))
            .arg(keep)
            .arg(MOST_CREDITED_MS)
            .invoke_async(&mut conn)
            .await?;
        Ok(u64::try_from(admitted).ok().map(|admitted| Advanced {
            admitted,
            cap: u64::try_from(cap).unwrap_or(0),
            busy: u64::try_from(busy).unwrap_or(0),
        }))
    }

    /// Leases admissions up to `admitted`, reached no sooner than `at_ms`: recorded at
    /// stock-service with the leader's mark of the places come up so far, then the cap raised
    /// in Redis.
    pub async fn lease_admissions(
        &self,
        g: GoodsId,
        admitted: u64,
        at_ms: i64,
        came_up: CameUp,
    ) -> Result<(), ApiError> {
        let ask = RoomMarks {
            admitted,
            admitted_at_ms: at_ms,
            came_up: (came_up.admitted > 0).then_some(came_up),
            ..RoomMarks::default()
        };
        let marks = self.stock.raise_room(g, &ask).await.map_err(stock_down)?;
        self.raise_cap(g, "admitted_cap", marks.admitted).await
    }

    /// Admitted buyers' buys this replica refused `BUSY` since its last tick: counted for the
    /// `auto` rate, which the leader reads.
    pub async fn count_busy(&self, g: GoodsId, refused: u64) -> Result<(), GateError> {
        let mut conn = self.conn();
        let _: i64 =
            redis::cmd("INCRBY").arg(self.keys.room_busy(g)).arg(refused).query_async(&mut conn).await?;
        Ok(())
    }
}

/// Marks as Redis keeps them, `<instant ms>:<places admitted>`, oldest first.
fn parse_marks(raw: &[String]) -> Vec<(i64, u64)> {
    raw.iter()
        .filter_map(|m| {
            let (at, places) = m.split_once(':')?;
            Some((at.parse().ok()?, places.parse().ok()?))
        })
        .collect()
}

/// Whether a join code was given after the opening (the back of the queue).
pub fn joined_after(code: u64) -> bool {
    code >= AFTER_BASE
}

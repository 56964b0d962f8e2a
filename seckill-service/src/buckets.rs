//! Units moving between the buckets of a sale whose stock is split over several Redis slots
//! (`keys::SaleBucket`), so a bucket that ran dry while another holds units can be given some
//! instead of telling its buyers `SOLD_OUT`.
//!
//! The two buckets are on different slots (on a cluster, often different nodes), so no one
//! script can touch both: a transfer is three scripts, `TRANSFER_TAKE` on the giving bucket
//! (the units leave its stock and a log entry names them), `TRANSFER_GIVE` on the receiving
//! one (the units arrive, once per transfer id) and `TRANSFER_SETTLE` (the log entry goes).
//! A process that dies between them leaves the entry; [`Transfers::finish_stale`] (the
//! reconciler) gives and settles it. Giving twice adds once, so a reconciler racing the
//! process that took the units costs nothing: a unit is never lost nor counted twice.

use std::collections::HashMap;
use std::time::Duration;

use redis::AsyncCommands;
use seckill_common::keys::{RedisKeys, SaleBucket};
use seckill_common::scripts;
use seckill_infra::redis::{Redis, Scripts};
use uuid::Uuid;

use crate::gate::{GateError, REDIS_USE};

/// What a transfer came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moved {
    /// These units left the giving bucket; they are in the receiving one, or in transit to it
    /// while it is not loaded (or a Redis error cut the transfer: the reconciler finishes it).
    Units(i64),
    /// The giving bucket is empty.
    Empty,
    /// The giving bucket is empty, and units it gave are on their way to another bucket (or
    /// were stranded there by a process that died between the steps, and this call has just
    /// finished those transfers): look again.
    Sending,
    /// The giving bucket is not loaded (Redis lost it, or it was never loaded).
    NotLoaded,
}

/// How old an unfinished transfer must be for a transfer from its bucket to finish it: its
/// process would have given its units within milliseconds.
const STRANDED_AFTER: Duration = Duration::from_secs(1);

pub struct Transfers {
    redis: Redis,
    scripts: Scripts,
    keys: RedisKeys,
}

impl Transfers {
    pub fn new(redis: Redis, keys: RedisKeys) -> Self {
        Self { redis, scripts: Scripts::of(&REDIS_USE), keys }
    }

    /// Moves units from `from` to `to` of the same sale: half of what `from` holds (rounded
    /// up), at most `most`.
    pub async fn transfer(&self, from: SaleBucket, to: SaleBucket, most: i64) -> Result<Moved, GateError> {
        debug_assert_eq!(from.goods, to.goods, "a transfer stays within one sale");
        let id = Uuid::new_v4().simple().to_string();
        let mut conn = self.redis.clone();
        let taken: i64 = self
            .scripts
            .transfer_take
            .key(self.keys.bucket_stock(from))
            .key(self.keys.transfers_out(from))
            .arg(&id)
            .arg(to.bucket)
            .arg(most)
            .arg(now_ms())
            .invoke_async(&mut conn)
            .await?;
        match taken {
            scripts::TRANSFER_NOT_LOADED => Ok(Moved::NotLoaded),
            0 => Ok(Moved::Empty),
            scripts::TRANSFER_EMPTY_SENDING => Ok(Moved::Sending),
            // A dead process's transfers: finished here rather than after the reconciler's
            // wait (giving twice adds once), so no buyer waits for their units.
            scripts::TRANSFER_EMPTY_STRANDED => {
                self.finish_stale(from, STRANDED_AFTER).await?;
                Ok(Moved::Sending)
            }
            units => {
                self.give_and_settle(from, to, &id, units).await?;
                Ok(Moved::Units(units))
            }
        }
    }

    /// The second and third steps of a transfer; false when `to` is not loaded (the units stay
    /// in transit, logged).
    async fn give_and_settle(
        &self,
        from: SaleBucket,
        to: SaleBucket,
        id: &str,
        units: i64,
    ) -> Result<bool, GateError> {
        let mut conn = self.redis.clone();
        let given: i64 = self
            .scripts
            .transfer_give
            .key(self.keys.bucket_stock(to))
            .key(self.keys.transfers_in(to))
            .arg(id)
            .arg(units)
            .arg(now_ms())
            .invoke_async(&mut conn)
            .await?;
        if given < 0 {
            return Ok(false);
        }
        let _: i64 = self
            .scripts
            .transfer_settle
            .key(self.keys.transfers_out(from))
            .arg(id)
            .invoke_async(&mut conn)
            .await?;
        Ok(true)
    }

    /// The transfers `from` logged and did not settle: (id, receiving bucket, units, taken at).
    pub async fn unsettled(&self, from: SaleBucket) -> Result<Vec<(String, u8, i64, i64)>, GateError> {
        let mut conn = self.redis.clone();
        let entries: HashMap<String, String> = conn.hgetall(self.keys.transfers_out(from)).await?;
        Ok(entries
            .into_iter()
            .filter_map(|(id, entry)| {
                let mut parts = entry.split('|');
                let to = parts.next()?.parse().ok()?;
                let units = parts.next()?.parse().ok()?;
                let at = parts.next()?.parse().ok()?;
                Some((id, to, units, at))
            })
            .collect())
    }

    /// Units that left `from` and have not been seen to arrive (the audit reads the same count
    /// inside its snapshot of the bucket, `scripts::SNAPSHOT`).
    pub async fn in_transit(&self, from: SaleBucket) -> Result<i64, GateError> {
        Ok(self.unsettled(from).await?.iter().map(|(_, _, units, _)| units).sum())
    }

    /// Gives and settles each transfer `from` logged at least `after` ago and left
    /// unsettled: its process died, or Redis failed, between the steps. One still under way
    /// (younger) is its process's. Returns the transfers finished; one whose receiving bucket is
    /// not loaded waits for a later call.
    pub async fn finish_stale(&self, from: SaleBucket, after: Duration) -> Result<usize, GateError> {
        let before = now_ms() - i64::try_from(after.as_millis()).unwrap_or(i64::MAX);
        let mut finished = 0;
        for (id, to, units, at) in self.unsettled(from).await? {
            if at > before {
                continue;
            }
            if self.give_and_settle(from, SaleBucket::new(from.goods, to), &id, units).await? {
                tracing::info!(goods_id = %from.goods, from = from.bucket, to, units, transfer = %id, "finished a transfer left half done");
                finished += 1;
            }
        }
        Ok(finished)
    }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

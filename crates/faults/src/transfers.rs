//! What a case on a sale of several stock buckets checks beyond the usual: units did move
//! between the buckets during the sale (the case exercised transfers, so its kill could land
//! in one), no transfer is left between its steps once the reconciler had its time, and every
//! bucket ends empty. Read straight from the suite's private Redis.

use std::time::Duration;

use seckill_common::GoodsId;
use seckill_common::keys::{RedisKeys, SaleBucket};
use tokio::time::Instant;

use seckill_harness::invariants::Check;

pub const NAME: &str = "units moved between the stock buckets, every transfer settled, every bucket empty";

/// One look at the sale's buckets: transfers received, transfers not settled, each stock.
async fn look(
    conn: &mut redis::aio::MultiplexedConnection,
    g: GoodsId,
    buckets: u8,
) -> redis::RedisResult<(i64, i64, Vec<Option<i64>>)> {
    let keys = RedisKeys::default();
    let mut pipe = redis::pipe();
    for at in SaleBucket::all(g, buckets) {
        pipe.zcard(keys.transfers_in(at)).hlen(keys.transfers_out(at)).get(keys.bucket_stock(at));
    }
    let values: Vec<(i64, i64, Option<i64>)> = pipe.query_async(conn).await?;
    Ok((
        values.iter().map(|(received, _, _)| received).sum(),
        values.iter().map(|(_, unsettled, _)| unsettled).sum(),
        values.into_iter().map(|(_, _, stock)| stock).collect(),
    ))
}

/// Waits up to `within` for every transfer to be settled and every bucket empty (the
/// reconciler finishes a transfer a killed process left after `seckill.reconcile_after_secs`).
pub async fn settled(redis_url: &str, g: i64, buckets: u8, within: Duration) -> Check {
    let fail = |detail: String| Check { name: NAME.into(), ok: false, detail };
    let Some(g) = GoodsId::new(g) else { return fail(format!("goods id {g}")) };
    let conn = match redis::Client::open(redis_url) {
        Ok(client) => client.get_multiplexed_async_connection().await,
        Err(e) => Err(e),
    };
    let mut conn = match conn {
        Ok(conn) => conn,
        Err(e) => return fail(format!("redis at {redis_url}: {e}")),
    };
    let deadline = Instant::now() + within;
    loop {
        let (received, unsettled, stocks) = match look(&mut conn, g, buckets).await {
            Ok(seen) => seen,
            Err(e) => return fail(format!("redis: {e}")),
        };
        let empty = stocks.iter().all(|s| *s == Some(0));
        let ok = received > 0 && unsettled == 0 && empty;
        if ok || Instant::now() >= deadline {
            return Check {
                name: NAME.into(),
                ok,
                detail: format!(
                    "{received} transfers received over {buckets} buckets, {unsettled} not settled, stocks {stocks:?}"
                ),
            };
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

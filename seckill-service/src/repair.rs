//! The operator's repair of a sale (and the end of a recovery): its Redis data set again from
//! the authorities.

use seckill_common::ErrorCode;
use seckill_common::api::SaleRepair;
use seckill_web::ApiError;

use crate::audit::audit;
use crate::rebuild::{back_on_sale, expected_stock, rebuild, split, unavailable};
use crate::sales::Sale;
use crate::snapshot::SaleSnapshot;
use crate::state::AppState;

/// Sets the sale's Redis data from the authorities: the active orders' buyers and results
/// written back, the stock corrected to what the authority has less what is in flight (less
/// the held-back units, unless `end_recovery`). A sale missing in Redis is rebuilt instead.
/// With buckets, the correction of the sum is spread: units added evenly, units taken from
/// the fullest buckets first.
pub async fn repair(state: &AppState, sale: &Sale, end_recovery: bool) -> Result<SaleRepair, ApiError> {
    let g = sale.id();
    let buckets = sale.buckets();
    if !state.gate.stocks(&buckets).await?.iter().all(Option::is_some) {
        rebuild(state, sale).await?;
        let audit = audit(state, sale).await?;
        return Ok(SaleRepair {
            stock_before: None,
            stock_after: audit.redis.stock,
            orders_restored: usize::try_from(audit.redis.reservations_ordered).unwrap_or_default(),
            audit,
        });
    }
    let orders = state.orders.all_active(g).await.map_err(unavailable("order-service"))?;
    state.gate.restore_orders(&orders, |u| sale.bucket_of(u)).await?;
    let snapshot = SaleSnapshot::take(state, &buckets).await?;
    let changed = || ApiError::new(ErrorCode::Busy, "the sale's redis data changed meanwhile, try again");
    let Some(stock) = snapshot.stock() else { return Err(changed()) };
    let in_flight = snapshot.in_flight();
    let in_flight_count = i64::try_from(in_flight.len()).unwrap_or(i64::MAX);
    let authority = state.stock.held(g, in_flight).await.map_err(unavailable("stock-service"))?;
    let holdback = if end_recovery { 0 } else { snapshot.holdback().unwrap_or(0) };
    let target = expected_stock(&authority, in_flight_count, holdback);
    let stocks: Vec<i64> = snapshot.buckets.iter().map(|(_, s)| s.stock.unwrap_or(0)).collect();
    let corrections = spread(target - stock - snapshot.in_transit(), &stocks);
    let mut after = Some(0);
    for (((at, bucket), delta), before) in snapshot.buckets.iter().zip(corrections).zip(&stocks) {
        let Some(epoch) = bucket.epoch else { return Err(changed()) };
        let now = if delta != 0 || end_recovery {
            state.gate.adjust(*at, epoch, delta, end_recovery).await?
        } else {
            Some(*before)
        };
        after = after.zip(now).map(|(sum, s)| sum + s);
    }
    if after.is_some_and(|s| s != stock) {
        metrics::counter!("seckill_sales_repaired_total").increment(1);
        tracing::warn!(goods_id = %g, stock_before = stock, stock_after = ?after, "redis stock repaired from the authority");
    }
    if after.is_some_and(|s| s > 0) {
        back_on_sale(state, g).await;
    }
    Ok(SaleRepair {
        stock_before: Some(stock),
        stock_after: after,
        orders_restored: orders.len(),
        audit: audit(state, sale).await?,
    })
}

/// A correction of `delta` units to the sum of `stocks`, bucket by bucket: units added go
/// evenly (the rest to the first), units taken come from the fullest buckets first, never
/// more than a bucket holds.
fn spread(delta: i64, stocks: &[i64]) -> Vec<i64> {
    if delta >= 0 {
        return split(delta, stocks.len());
    }
    let mut out = vec![0; stocks.len()];
    let mut order: Vec<usize> = (0..stocks.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(stocks[i]));
    let mut owed = -delta;
    for i in order {
        let take = owed.min(stocks[i].max(0));
        out[i] = -take;
        owed -= take;
    }
    // More taken than the buckets hold: the rest from the first (ADJUST stops at zero).
    if owed > 0
        && let Some(first) = out.first_mut()
    {
        *first -= owed;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_correction_takes_from_the_fullest_buckets_and_adds_evenly() {
        assert_eq!(spread(5, &[1, 1, 1]), [3, 1, 1]);
        assert_eq!(spread(-4, &[1, 5, 2]), [0, -4, 0]);
        assert_eq!(spread(-6, &[1, 5, 2]), [0, -5, -1]);
        assert_eq!(spread(-10, &[1, 5, 2]), [-3, -5, -2], "past what they hold, from the first");
        assert_eq!(spread(0, &[3, 3]), [0, 0]);
        for (delta, stocks) in [(-7, vec![4, 4, 4]), (9, vec![0, 2]), (-1, vec![0, 0, 1])] {
            assert_eq!(spread(delta, &stocks).iter().sum::<i64>(), delta);
        }
    }
}

//! The operator's audit of a sale: how Redis, the stock ledger, the orders and the queue
//! compare.

use seckill_common::api::{AuthorityAudit, QueueAudit, RedisAudit, SaleAudit};
use seckill_web::ApiError;

use crate::rebuild::{authority_error, expected_stock, unavailable, waiting_requests};
use crate::sales::Sale;
use crate::snapshot::SaleSnapshot;
use crate::state::AppState;

/// How Redis, the stock ledger, the orders and the queue compare for one sale. Also sets the
/// metrics an alert watches: `seckill_audit_differences{goods_id}` (0 when all agree) and
/// `seckill_audit_stock_difference{goods_id}` (Redis stock less what it should be).
pub async fn audit(state: &AppState, sale: &Sale) -> Result<SaleAudit, ApiError> {
    let g = sale.id();
    let snapshot = SaleSnapshot::take(state, &sale.buckets()).await?;
    let in_flight = snapshot.in_flight();
    let in_flight_count = i64::try_from(in_flight.len()).unwrap_or(i64::MAX);
    let authority = state.stock.held(g, in_flight).await.map_err(authority_error(g))?;
    let active_orders = state.orders.count_active(g).await.map_err(unavailable("order-service"))?;
    let (waiting, consumers) = waiting_requests(state).await?;
    let holdback = snapshot.holdback().unwrap_or(0);
    let expected = expected_stock(&authority, in_flight_count, holdback);
    let in_transit = snapshot.in_transit();
    let ordered = snapshot.ordered();

    let mut differences = Vec::new();
    match (snapshot.stock(), snapshot.not_loaded().as_slice()) {
        (None, _) if sale.goods.buckets <= 1 => {
            differences.push("the sale is not loaded in redis".to_owned())
        }
        (None, lost) => differences.push(format!("buckets {lost:?} of the sale are not loaded in redis")),
        (Some(stock), _) if stock + in_transit != expected => differences.push(format!(
            "redis stock is {stock} ({in_transit} more moving between buckets), the authority's figures give \
             {expected} (available {}, {} in flight not deducted, {holdback} held back)",
            authority.stock_available,
            in_flight_count - authority.keys_held
        )),
        (Some(_), _) => {}
    }
    if ordered != active_orders {
        differences.push(format!(
            "redis marks {ordered} reservations as orders; the order database has {active_orders} active orders"
        ));
    }
    if authority.held_units != active_orders + authority.keys_held {
        differences.push(format!(
            "the ledger holds {} units for {active_orders} active orders and {} deducted requests in flight",
            authority.held_units, authority.keys_held
        ));
    }
    if authority.stock_total != authority.stock_available + authority.held_units {
        differences.push(format!(
            "stock-service: total {} != available {} + held {}",
            authority.stock_total, authority.stock_available, authority.held_units
        ));
    }
    if snapshot.holdback().is_some() {
        differences.push(format!("recovering from a loss of redis data: {holdback} units held back"));
    }
    let label = g.to_string();
    metrics::gauge!("seckill_audit_differences", "goods_id" => label.clone()).set(differences.len() as f64);
    metrics::gauge!("seckill_audit_stock_difference", "goods_id" => label)
        .set(snapshot.stock().map_or(-(expected as f64), |s| (s + in_transit - expected) as f64));
    Ok(SaleAudit {
        goods_id: g,
        redis: RedisAudit {
            loaded: snapshot.stock().is_some(),
            epoch: snapshot.epoch(),
            stock: snapshot.stock(),
            in_transit,
            holdback: snapshot.holdback(),
            reservations_ordered: ordered,
            reservations_in_flight: in_flight_count,
            pending: snapshot.pending(),
            buckets: snapshot.per_bucket(),
        },
        authority: AuthorityAudit {
            stock_total: authority.stock_total,
            stock_available: authority.stock_available,
            ledger_held: authority.held_units,
            active_orders,
            in_flight_deducted: authority.keys_held,
        },
        queue: QueueAudit { waiting, consumers },
        expected_redis_stock: expected,
        agrees: differences.is_empty(),
        differences,
    })
}

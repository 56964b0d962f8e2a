//! `GET /api/seckill/{goods_id}/state`: a sale's window, its sold-out flag and the server's
//! clock, for the sale's page. Every buyer's page asks once as it opens, so it is answered from
//! the sale book and the flag in memory: no database sees the page views, and Redis only once
//! per `seckill.sold_out_recheck_ms` for a sale sold out that nobody clicks any more (the flag
//! lapsed: one read of the stock raises it again, or shows a unit came back).

use actix_web::http::header::{CacheControl, CacheDirective};
use actix_web::{HttpResponse, web};
use seckill_common::GoodsId;
use seckill_common::api::SaleState;
use seckill_web::ApiError;

use crate::sales::now_ms;
use crate::state::AppState;

/// Anonymous (the gateway vouches for no user). A sale this instance has not met yet is asked
/// of stock-service once, as the buy routes do; an unknown one is 404 `GOODS_NOT_FOUND`.
pub async fn sale_state(
    state: web::Data<AppState>,
    path: web::Path<GoodsId>,
) -> Result<HttpResponse, ApiError> {
    let sale = state.sales.get(*path).await?;
    let now = now_ms();
    let mut sold_out = sale.flagged_sold_out(now);
    if !sold_out && sale.sold_out_lapsed(now) {
        // Raised again for another period, so the next views read the flag. Redis not
        // answering: the flag stays down, and a click says for sure.
        let stocks = state.gate.stocks(&sale.buckets()).await;
        if stocks.is_ok_and(|s| s.iter().all(|units| *units == Some(0))) {
            sale.flag_sold_out(now, state.settings.sold_out_recheck());
            sold_out = true;
        }
    }
    let body = SaleState {
        goods_id: sale.id(),
        start_at: sale.goods.start_at,
        end_at: sale.goods.end_at,
        sold_out,
        now_ms: now,
    };
    // The clock and the flag are of this instant: no cache may keep them.
    Ok(HttpResponse::Ok().insert_header(CacheControl(vec![CacheDirective::NoStore])).json(body))
}

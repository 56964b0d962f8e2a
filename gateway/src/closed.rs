//! Sales seckill-service just called gone: a buy click (path token or order) answered `410`
//! (sold out, or ended) makes this replica answer the sale's next clicks itself, with the same
//! body, for `sold_out.remember_ms`. Most of a spike's clicks come after the sell-out; they
//! then cost no hop and nothing of seckill-service. They still count against the user's buy
//! limit, this replica's bucket and the shared one: a user gets one limit across replicas
//! whoever answers the click. A unit given back later (a cancel, an expiry) sells again at
//! most that long after, as with seckill-service's own flag (`seckill.sold_out_recheck_ms`).
//!
//! Only seckill-service's own `410` answers are remembered, one entry per sale it named, so
//! the map holds at most the sales that exist.

use std::time::{Duration, Instant};

use actix_web::HttpResponse;
use actix_web::http::StatusCode;
use actix_web::http::header::ContentType;
use actix_web::web::Bytes;
use dashmap::DashMap;
use seckill_common::GoodsId;

pub struct ClosedSales {
    remember: Duration,
    sales: DashMap<GoodsId, Closed>,
}

struct Closed {
    /// seckill-service's answer, as it came (`{"code": "SOLD_OUT" | "ENDED", ...}`).
    body: Bytes,
    until: Instant,
}

impl ClosedSales {
    /// `remember` zero: nothing is remembered, every click is forwarded.
    pub fn new(remember: Duration) -> Self {
        Self { remember, sales: DashMap::new() }
    }

    /// The answer to a click on `g`, while seckill-service's last `410` for it is fresh.
    pub fn answer(&self, g: GoodsId) -> Option<HttpResponse> {
        let closed = self.sales.get(&g)?;
        if closed.until <= Instant::now() {
            drop(closed);
            self.sales.remove_if(&g, |_, c| c.until <= Instant::now());
            return None;
        }
        metrics::counter!("gateway_closed_sale_answers_total").increment(1);
        Some(
            HttpResponse::build(StatusCode::GONE).content_type(ContentType::json()).body(closed.body.clone()),
        )
    }

    /// seckill-service answered a click on `g` with `410` and `body`.
    pub fn remember(&self, g: GoodsId, body: Bytes) {
        if !self.remember.is_zero() {
            self.sales.insert(g, Closed { body, until: Instant::now() + self.remember });
        }
    }

    /// seckill-service's last `410` body for `g` while it is fresh, without answering a click:
    /// the sale state route (`crate::storefront`) reads it.
    pub fn remembered(&self, g: GoodsId) -> Option<Bytes> {
        self.sales.get(&g).filter(|closed| closed.until > Instant::now()).map(|closed| closed.body.clone())
    }

    /// Whether no sale is remembered (expired ones count until asked again).
    pub fn is_empty(&self) -> bool {
        self.sales.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn goods(id: i64) -> GoodsId {
        GoodsId::new(id).unwrap()
    }

    #[test]
    fn a_gone_sale_is_answered_with_its_body_until_it_is_stale() {
        let closed = ClosedSales::new(Duration::from_millis(50));
        assert!(closed.answer(goods(1)).is_none());
        closed.remember(goods(1), Bytes::from_static(br#"{"code":"SOLD_OUT","message":"sold out"}"#));
        let res = closed.answer(goods(1)).unwrap();
        assert_eq!(res.status(), StatusCode::GONE);
        assert_eq!(
            closed.remembered(goods(1)).as_deref(),
            Some(&br#"{"code":"SOLD_OUT","message":"sold out"}"#[..])
        );
        assert!(closed.remembered(goods(2)).is_none());
        assert!(closed.answer(goods(2)).is_none(), "another sale is not touched");
        std::thread::sleep(Duration::from_millis(60));
        assert!(closed.remembered(goods(1)).is_none(), "stale: not remembered");
        assert!(closed.answer(goods(1)).is_none(), "stale: the next click is forwarded");
        assert!(closed.is_empty());
    }

    #[test]
    fn zero_remembers_nothing() {
        let closed = ClosedSales::new(Duration::ZERO);
        closed.remember(goods(1), Bytes::from_static(b"{}"));
        assert!(closed.answer(goods(1)).is_none());
        assert!(closed.is_empty());
    }
}

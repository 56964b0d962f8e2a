//! The typed client of stock-service's API, used by seckill-service (goods, sale creation,
//! the authority's counts, the waiting rooms' marks) and order-service (goods, deduct, release).

use std::sync::Arc;

use reqwest::Method;
use seckill_common::GoodsId;
use seckill_common::api::{
    DeductBatchRequest, DeductBatchResponse, DeductItemResult, DeductRequest, Goods, HeldRequest,
    HeldResponse, NewGoods, ReleaseRequest, ReleaseResponse,
};
use seckill_common::config::UpstreamSettings;
use seckill_common::listing::{GoodsQuery, MAX_PAGE, StateSet};
use seckill_common::room::{RoomMarks, RoomRecord};
use seckill_common::trust::{Peer, Trust};

use crate::upstream::Upstream;
pub use crate::upstream::UpstreamError as StockError;

pub struct StockClient {
    upstream: Upstream,
}

impl StockClient {
    pub fn new(settings: &UpstreamSettings, trust: Arc<Trust>) -> anyhow::Result<Self> {
        let upstream = Upstream::new(
            "stock-service",
            trust,
            Peer::Stock,
            &settings.stock,
            "upstreams.stock (SECKILL__UPSTREAMS__STOCK)",
            settings,
        )?;
        Ok(Self { upstream })
    }

    /// The goods, or None if stock-service knows no such id.
    pub async fn goods(&self, id: GoodsId) -> Result<Option<Goods>, StockError> {
        match self.upstream.retried::<(), Goods>(Method::GET, &format!("/api/goods/{id}"), None).await {
            Ok(g) => Ok(Some(g)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// One page of `GET /api/goods`.
    pub async fn goods_page(&self, query: &GoodsQuery) -> Result<Vec<Goods>, StockError> {
        let path = format!("/api/goods?{}", query.to_query_string());
        self.upstream.retried::<(), _>(Method::GET, &path, None).await
    }

    /// The sales in `states`, page after page in the listing's order, up to the first that
    /// `wanted` refuses (the ended ones come latest first: the walk stops where the ones of
    /// interest end). A full page is followed by another, so the walk asks once more than
    /// there are full pages.
    pub async fn walk_goods(
        &self,
        states: StateSet,
        wanted: impl Fn(&Goods) -> bool,
    ) -> Result<Vec<Goods>, StockError> {
        let mut query = GoodsQuery { limit: MAX_PAGE, ..GoodsQuery::first(states) };
        let mut all = Vec::new();
        loop {
            let page = self.goods_page(&query).await?;
            let full = page.len() == query.limit as usize;
            let next = page.last().map(|last| query.next(last));
            for goods in page {
                if !wanted(&goods) {
                    return Ok(all);
                }
                all.push(goods);
            }
            match next {
                Some(next) if full => query = next,
                _ => return Ok(all),
            }
        }
    }

    /// Creates a sale (seckill-service checked that an admin asked). Not idempotent, so not
    /// retried: a failure is reported to the admin, who may try again.
    pub async fn create_goods(&self, new: &NewGoods) -> Result<Goods, StockError> {
        self.upstream.call(Method::POST, "/internal/stock/goods", Some(new), &[]).await
    }

    /// Deducts many keys in one call; idempotent on each key, so retried.
    pub async fn deduct_batch(&self, items: Vec<DeductRequest>) -> Result<Vec<DeductItemResult>, StockError> {
        let body = DeductBatchRequest { items };
        let res: DeductBatchResponse =
            self.upstream.retried(Method::POST, "/internal/stock/deduct-batch", Some(&body)).await?;
        Ok(res.results)
    }

    /// Gives a key's stock back; idempotent, so retried. True if this call released it.
    pub async fn release(&self, order_key: uuid::Uuid) -> Result<bool, StockError> {
        let res: ReleaseResponse = self
            .upstream
            .retried(Method::POST, "/internal/stock/release", Some(&ReleaseRequest { order_key }))
            .await?;
        Ok(res.released)
    }

    /// The sale's counts at the authority, and how many of `order_keys` hold a unit there.
    pub async fn held(&self, g: GoodsId, order_keys: Vec<uuid::Uuid>) -> Result<HeldResponse, StockError> {
        self.upstream
            .retried(Method::POST, &format!("/internal/stock/{g}/held"), Some(&HeldRequest { order_keys }))
            .await
    }

    /// Raises the marks of sale `g`'s waiting room to at least `marks` and returns them as they
    /// now stand (all zeros reads them). Every mark only rises, so a repeat changes nothing:
    /// retried. A sale without a room is refused 404 `NO_WAITING_ROOM`, an unknown one 404
    /// `GOODS_NOT_FOUND`.
    pub async fn raise_room(&self, g: GoodsId, marks: &RoomMarks) -> Result<RoomMarks, StockError> {
        self.upstream.retried(Method::POST, &format!("/internal/stock/rooms/{g}"), Some(marks)).await
    }

    /// Sale `g`'s waiting room as stock-service keeps it: the marks and the leader's marks of
    /// when places came up.
    pub async fn room_record(&self, g: GoodsId) -> Result<RoomRecord, StockError> {
        self.upstream.retried(Method::GET, &format!("/internal/stock/rooms/{g}"), None::<&()>).await
    }
}

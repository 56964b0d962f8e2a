//! The sales this instance knows: goods details cached in-process (they do not change during a
//! sale), each with its sold-out flag, and the loading of their stock into Redis.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use chrono::Utc;
use dashmap::DashMap;
use seckill_common::api::{Goods, SaleWindow};
use seckill_common::{ErrorCode, GoodsId};
use seckill_infra::stock_client::StockClient;
use seckill_web::ApiError;
use tokio::sync::Mutex;

use crate::gate::Gate;

/// How long an unknown goods id is answered 404 without asking stock-service again, so a
/// flood of requests for a bad id does not become a flood of calls.
const UNKNOWN_TTL: Duration = Duration::from_secs(2);

pub struct Sale {
    pub goods: Goods,
    /// Until this instant (Unix ms) requests are answered SOLD_OUT without asking Redis.
    sold_out_until_ms: AtomicI64,
}

impl Sale {
    fn new(goods: Goods) -> Self {
        Self { goods, sold_out_until_ms: AtomicI64::new(0) }
    }

    pub fn id(&self) -> GoodsId {
        self.goods.id
    }

    pub fn window_now(&self) -> SaleWindow {
        self.goods.window_at(Utc::now())
    }

    pub fn flagged_sold_out(&self, now_ms: i64) -> bool {
        now_ms < self.sold_out_until_ms.load(Ordering::Relaxed)
    }

    /// Redis said sold out: answer from memory for `recheck`, then ask Redis again (a unit
    /// may have come back). True when the flag was down until now (never raised, or cleared by
    /// a restock): the moment to tell the other replicas.
    pub fn flag_sold_out(&self, now_ms: i64, recheck: Duration) -> bool {
        let until = now_ms + i64::try_from(recheck.as_millis()).unwrap_or(i64::MAX / 2);
        self.sold_out_until_ms.fetch_max(until, Ordering::Relaxed) == 0
    }

    pub fn clear_sold_out(&self) {
        self.sold_out_until_ms.store(0, Ordering::Relaxed);
    }
}

/// Unix milliseconds now.
pub fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

pub struct SaleBook {
    sales: DashMap<GoodsId, Arc<Sale>>,
    unknown: DashMap<GoodsId, Instant>,
    /// One cache miss at a time asks stock-service; the others wait and find it cached.
    loading: Mutex<()>,
    stock: Arc<StockClient>,
    gate: Arc<Gate>,
}

impl SaleBook {
    pub fn new(stock: Arc<StockClient>, gate: Arc<Gate>) -> Self {
        Self { sales: DashMap::new(), unknown: DashMap::new(), loading: Mutex::new(()), stock, gate }
    }

    /// The sale, from memory or, on a miss, from stock-service (then loaded into Redis).
    pub async fn get(&self, g: GoodsId) -> Result<Arc<Sale>, ApiError> {
        if let Some(sale) = self.sales.get(&g) {
            return Ok(sale.clone());
        }
        if self.recently_unknown(g) {
            return Err(not_found(g));
        }
        let _one_at_a_time = self.loading.lock().await;
        if let Some(sale) = self.sales.get(&g) {
            return Ok(sale.clone());
        }
        if self.recently_unknown(g) {
            return Err(not_found(g));
        }
        match self.stock.goods(g).await.map_err(|e| ApiError::unavailable("stock-service", e))? {
            Some(goods) => Ok(self.publish(goods).await?),
            None => {
                self.unknown.insert(g, Instant::now());
                Err(not_found(g))
            }
        }
    }

    fn recently_unknown(&self, g: GoodsId) -> bool {
        self.unknown.get(&g).is_some_and(|at| at.elapsed() < UNKNOWN_TTL)
    }

    /// Makes a sale ready to sell: its stock into Redis (unless already there) and into the
    /// cache.
    pub async fn publish(&self, goods: Goods) -> Result<Arc<Sale>, crate::gate::GateError> {
        let g = goods.id;
        if self.gate.load_stock(g, goods.stock_available).await? {
            tracing::info!(goods_id = %g, stock = goods.stock_available, "sale stock loaded into redis");
        }
        self.unknown.remove(&g);
        let sale = Arc::new(Sale::new(goods));
        self.sales.insert(g, sale.clone());
        Ok(sale)
    }

    /// Redis lost a sale's stock (flushed or replaced): load it again from the authority.
    pub async fn reload(&self, g: GoodsId) -> Result<Arc<Sale>, ApiError> {
        let goods = self
            .stock
            .goods(g)
            .await
            .map_err(|e| ApiError::unavailable("stock-service", e))?
            .ok_or_else(|| not_found(g))?;
        tracing::warn!(goods_id = %g, stock = goods.stock_available, "sale stock missing in redis: reloaded");
        Ok(self.publish(goods).await?)
    }

    /// At start: every sale not yet ended, loaded. Returns how many.
    pub async fn warm_all(&self) -> anyhow::Result<usize> {
        let now = Utc::now();
        let mut loaded = 0;
        for goods in self.stock.list_goods().await? {
            if goods.window_at(now) != SaleWindow::Ended {
                self.publish(goods).await?;
                loaded += 1;
            }
        }
        Ok(loaded)
    }

    /// The sale if this instance knows it (no call to stock-service).
    pub fn cached(&self, g: GoodsId) -> Option<Arc<Sale>> {
        self.sales.get(&g).map(|s| s.clone())
    }

    pub fn all(&self) -> Vec<Arc<Sale>> {
        self.sales.iter().map(|e| e.value().clone()).collect()
    }
}

fn not_found(g: GoodsId) -> ApiError {
    ApiError::new(ErrorCode::GoodsNotFound, format!("no sale with goods id {g}"))
}

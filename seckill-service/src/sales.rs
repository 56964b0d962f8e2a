//! The sales this instance knows: goods details cached in-process (they do not change during a
//! sale), each with its sold-out flag. Loading a sale into Redis is `restore`'s.
//!
//! Which of them the background upkeep (`reconcile`) looks after: every sale not ended, and
//! an ended one for `seckill.ended_grace_secs` after its end and after anything last touched
//! it (a buyer's request or result poll, a restock of its units, an operator's audit or
//! repair). Past that an ended sale costs nothing at rest: it leaves the book, and comes back
//! to it (and under the reconciler's eye) with the next thing that touches it. A shop that has
//! run thousands of sales pays for the few that are live or just ended, not for its history.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use chrono::Utc;
use dashmap::DashMap;
use seckill_common::api::{Goods, SaleWindow};
use seckill_common::keys::SaleBucket;
use seckill_common::listing::StateSet;
use seckill_common::{ErrorCode, GoodsId, UserId};
use seckill_infra::stock_client::StockClient;
use seckill_web::ApiError;
use tokio::sync::Mutex;

/// How long an unknown goods id is answered 404 without asking stock-service again, so a
/// flood of requests for a bad id does not become a flood of calls.
const UNKNOWN_TTL: Duration = Duration::from_secs(2);

/// Most unknown ids remembered at once (some hundred kilobytes): ids are the client's to
/// choose, so a flood of random ones must not grow memory.
const UNKNOWN_CAPACITY: usize = 10_000;

pub struct Sale {
    pub goods: Goods,
    /// Until this instant (Unix ms) requests are answered SOLD_OUT without asking Redis.
    sold_out_until_ms: AtomicI64,
    /// While the sale recovers from a loss of its Redis data: the broker was seen with no buy
    /// request waiting (the recovery ends at the second such look in a row; see `restore`).
    pub queue_seen_empty: AtomicBool,
    /// When something last asked for the sale (Unix ms): an ended sale is looked after for the
    /// grace period after this too.
    touched_ms: AtomicI64,
}

impl Sale {
    fn new(goods: Goods) -> Self {
        Self {
            goods,
            sold_out_until_ms: AtomicI64::new(0),
            queue_seen_empty: AtomicBool::new(false),
            touched_ms: AtomicI64::new(now_ms()),
        }
    }

    /// Something asked for the sale now. Written at most once a second: on the buy path every
    /// request touches its sale, and a store per request would bounce the cache line between
    /// the cores.
    pub fn touch(&self, now_ms: i64) {
        if now_ms - self.touched_ms.load(Ordering::Relaxed) >= 1_000 {
            self.touched_ms.store(now_ms, Ordering::Relaxed);
        }
    }

    /// Whether the upkeep looks after the sale at `now_ms`: not ended, or ended or touched less
    /// than `grace` ago.
    pub fn watched(&self, now_ms: i64, grace: Duration) -> bool {
        let grace_ms = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
        let end_ms = self.goods.end_at.timestamp_millis();
        let last = end_ms.max(self.touched_ms.load(Ordering::Relaxed));
        now_ms < last.saturating_add(grace_ms)
    }

    pub fn id(&self) -> GoodsId {
        self.goods.id
    }

    /// The bucket of the sale's stock that serves `u` (the sale itself when it has one).
    pub fn bucket_of(&self, u: UserId) -> SaleBucket {
        SaleBucket::of_user(self.goods.id, self.goods.buckets, u)
    }

    /// Every bucket of the sale's stock, bucket 0 first.
    pub fn buckets(&self) -> Vec<SaleBucket> {
        SaleBucket::all(self.goods.id, self.goods.buckets).collect()
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

    /// The flag was raised and has lapsed since (nobody clicked to raise it again): whether the
    /// sale is still sold out is for Redis to say.
    pub fn sold_out_lapsed(&self, now_ms: i64) -> bool {
        let until = self.sold_out_until_ms.load(Ordering::Relaxed);
        until != 0 && now_ms >= until
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
    unknown: UnknownIds,
    /// One cache miss at a time asks stock-service; the others wait and find it cached.
    loading: Mutex<()>,
    stock: Arc<StockClient>,
}

impl SaleBook {
    pub fn new(stock: Arc<StockClient>) -> Self {
        Self {
            sales: DashMap::new(),
            unknown: UnknownIds::new(UNKNOWN_TTL, UNKNOWN_CAPACITY),
            loading: Mutex::new(()),
            stock,
        }
    }

    /// The sale, from memory or, on a miss, from stock-service. Its Redis data is loaded by
    /// the first reserve that finds it missing (`rebuild::rebuild`).
    /// The sale counts as touched (see [`Sale::watched`]).
    pub async fn get(&self, g: GoodsId) -> Result<Arc<Sale>, ApiError> {
        if let Some(sale) = self.sales.get(&g) {
            sale.touch(now_ms());
            return Ok(sale.clone());
        }
        if self.unknown.contains(g) {
            return Err(not_found(g));
        }
        let _one_at_a_time = self.loading.lock().await;
        if let Some(sale) = self.sales.get(&g) {
            return Ok(sale.clone());
        }
        if self.unknown.contains(g) {
            return Err(not_found(g));
        }
        match self.stock.goods(g).await.map_err(|e| ApiError::unavailable("stock-service", e))? {
            Some(goods) => Ok(self.cache(goods)),
            None => {
                self.unknown.insert(g);
                Err(not_found(g))
            }
        }
    }

    /// Remembers a sale (its goods do not change).
    pub fn cache(&self, goods: Goods) -> Arc<Sale> {
        let g = goods.id;
        self.unknown.remove(g);
        let sale = Arc::new(Sale::new(goods));
        self.sales.insert(g, sale.clone());
        sale
    }

    /// At start: the sales the upkeep looks after, from stock-service (a page at a time):
    /// every live and upcoming one, and those that ended less than `grace` ago (the ended are
    /// listed latest first, so the walk stops at the first that ended before). The thousands
    /// that ended long ago are not read.
    pub async fn cache_watched(&self, grace: Duration) -> anyhow::Result<Vec<Arc<Sale>>> {
        let current = self.stock.walk_goods(StateSet::CURRENT, |_| true).await?;
        let since = Utc::now() - chrono::Duration::from_std(grace).unwrap_or(chrono::Duration::MAX);
        let ended = self.stock.walk_goods(StateSet::ENDED, |g| g.end_at > since).await?;
        Ok(current.into_iter().chain(ended).map(|goods| self.cache(goods)).collect())
    }

    /// The sale if this instance knows it (no call to stock-service).
    pub fn cached(&self, g: GoodsId) -> Option<Arc<Sale>> {
        self.sales.get(&g).map(|s| s.clone())
    }

    /// The sales the upkeep looks after now (see [`Sale::watched`]); the ended ones left alone
    /// for `grace` leave the book (the next request for one reads it again).
    pub fn watched(&self, grace: Duration) -> Vec<Arc<Sale>> {
        let now = now_ms();
        self.sales.retain(|_, sale| sale.watched(now, grace));
        self.sales.iter().map(|e| e.value().clone()).collect()
    }
}

pub fn not_found(g: GoodsId) -> ApiError {
    ApiError::new(ErrorCode::GoodsNotFound, format!("no sale with goods id {g}"))
}

/// Goods ids stock-service said it does not know, each with when it said so. Bounded in time
/// (an entry older than the TTL is not used, and goes when looked up or swept) and in size:
/// once full, the expired entries are swept, and if that does not free half the room, all
/// go. Forgetting an id costs one more call to stock-service, never a wrong answer; halving
/// keeps the sweeps rare (at most one per `capacity / 2` inserts).
struct UnknownIds {
    ids: DashMap<GoodsId, Instant>,
    ttl: Duration,
    capacity: usize,
}

impl UnknownIds {
    fn new(ttl: Duration, capacity: usize) -> Self {
        Self { ids: DashMap::new(), ttl, capacity }
    }

    /// Whether stock-service said `g` is unknown less than the TTL ago.
    fn contains(&self, g: GoodsId) -> bool {
        // The shard's read lock ends with this statement, before the removal below.
        let fresh = match self.ids.get(&g) {
            Some(at) => at.elapsed() < self.ttl,
            None => return false,
        };
        if !fresh {
            self.ids.remove_if(&g, |_, at| at.elapsed() >= self.ttl);
        }
        fresh
    }

    fn insert(&self, g: GoodsId) {
        if self.ids.len() >= self.capacity {
            self.ids.retain(|_, at| at.elapsed() < self.ttl);
            if self.ids.len() > self.capacity / 2 {
                self.ids.clear();
            }
        }
        self.ids.insert(g, Instant::now());
    }

    fn remove(&self, g: GoodsId) {
        self.ids.remove(&g);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.ids.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: i64) -> GoodsId {
        GoodsId::new(n).unwrap()
    }

    /// A random positive id.
    fn random_id() -> GoodsId {
        let bits = uuid::Uuid::new_v4().as_u64_pair().0 >> 1;
        GoodsId::new(i64::try_from(bits).unwrap().max(1)).unwrap()
    }

    #[test]
    fn a_hundred_thousand_random_ids_leave_it_bounded() {
        let unknown = UnknownIds::new(Duration::from_secs(60), 1_000);
        let mut peak = 0;
        for _ in 0..100_000 {
            let g = random_id();
            unknown.insert(g);
            assert!(unknown.contains(g), "the id just inserted is remembered");
            peak = peak.max(unknown.len());
        }
        assert!(peak <= 1_000, "{peak} ids remembered");
        // Nor did the table's allocation grow past what that many entries need.
        assert!(unknown.ids.capacity() < 10_000, "room for {} ids", unknown.ids.capacity());
    }

    #[test]
    fn ids_are_forgotten_after_the_ttl() {
        let unknown = UnknownIds::new(Duration::from_millis(50), 100);
        unknown.insert(id(7));
        assert!(unknown.contains(id(7)));
        assert!(!unknown.contains(id(8)));
        std::thread::sleep(Duration::from_millis(80));
        assert!(!unknown.contains(id(7)));
        assert_eq!(unknown.len(), 0, "an expired entry goes when looked up");

        // Expired entries are swept when the map is full; fresh ones then stay.
        for n in 1..=100 {
            unknown.insert(id(n));
        }
        std::thread::sleep(Duration::from_millis(80));
        for n in 1_000..1_010 {
            unknown.insert(id(n));
        }
        assert_eq!(unknown.len(), 10);
        assert!(unknown.contains(id(1_005)));
        unknown.remove(id(1_005));
        assert!(!unknown.contains(id(1_005)));
    }
}

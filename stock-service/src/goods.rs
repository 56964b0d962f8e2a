//! Goods rows: reading, listing (by state, a page at a time) and creating sales; the first
//! pages' short-lived cache.

use std::future::Future;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use actix_web::web::Bytes;
use chrono::{DateTime, Utc};
use diesel::dsl::sql;
use diesel::pg::Pg;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Timestamptz};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use seckill_common::api::{Goods, MAX_BUCKETS, ValidGoods};
use seckill_common::listing::{DEFAULT_PAGE, GoodsQuery, GoodsState, ListOrder, StateSet};
use seckill_common::{ErrorCode, GoodsId};
use seckill_web::ApiError;

use crate::rooms;
use crate::schema::goods;

/// A `goods` row, all of its columns in the table's order: the fields of [`Goods`] (defined
/// once, in `seckill_common::api`) up to `end_at`, then `created_at`, which the API does not
/// show, then `buckets` and the waiting room's four columns (added by later migrations).
/// PostgreSQL only appends columns, so the order holds; a column more fails to compile here.
type GoodsRow = (
    i64,
    String,
    i64,
    i64,
    i64,
    i64,
    DateTime<Utc>,
    DateTime<Utc>,
    DateTime<Utc>,
    i16,
    Option<i32>,
    Option<i32>,
    Option<i32>,
    Option<i16>,
);

/// A row as the API shows it; an id that is not positive is a corrupt row.
fn to_goods(row: GoodsRow) -> QueryResult<Goods> {
    let (
        id,
        name,
        price_cents,
        seckill_price_cents,
        stock_total,
        stock_available,
        start_at,
        end_at,
        _,
        b,
        rate,
        opens,
        admission,
        pow,
    ) = row;
    let corrupt = |what: String| diesel::result::Error::DeserializationError(what.into());
    let id = GoodsId::new(id).ok_or_else(|| corrupt(format!("goods id {id} is not positive")))?;
    // The table's CHECK keeps `buckets` in 1..=MAX_BUCKETS; a value outside is a corrupt row,
    // refused like a bad id rather than clamped: a sale read with another count of buckets
    // than its stock was split over would look for its units under the wrong keys.
    let buckets = u8::try_from(b)
        .ok()
        .filter(|b| (1..=MAX_BUCKETS).contains(b))
        .ok_or_else(|| corrupt(format!("goods {id} has {b} buckets, not 1 to {MAX_BUCKETS}")))?;
    // Likewise a room no valid room has: the CHECKs keep it out, and a sale shown with another
    // room than it was made with would admit its buyers otherwise than the shop asked.
    let waiting_room = rooms::from_columns((rate, opens, admission, pow))
        .map_err(|why| corrupt(format!("goods {id}: {why}")))?;
    Ok(Goods {
        id,
        name,
        price_cents,
        seckill_price_cents,
        stock_total,
        stock_available,
        start_at,
        end_at,
        buckets,
        waiting_room,
    })
}

/// One page of `GET /api/goods` (see `seckill_common::listing`) as of `now`, and whether
/// another follows it. One range scan of an index (`goods_by_start` or `goods_by_end`), however
/// many sales the shop has run.
pub async fn list_page(
    conn: &mut AsyncPgConnection,
    query: &GoodsQuery,
    now: DateTime<Utc>,
) -> QueryResult<(Vec<Goods>, bool)> {
    let order = query.states.order();
    let mut q = goods::table.select(goods::all_columns).filter(in_states(query.states, now)).into_boxed();
    if let Some(after) = &query.after {
        let (at, id) = after.key();
        // A row comparison, which PostgreSQL answers from the index: strictly past the key.
        let past = match order {
            ListOrder::StartAsc => "(start_at, id) > (",
            ListOrder::EndDesc => "(end_at, id) < (",
        };
        q = q.filter(sql::<Bool>(past).bind::<Timestamptz, _>(at).sql(", ").bind::<BigInt, _>(id).sql(")"));
    }
    q = match order {
        ListOrder::StartAsc => q.order((goods::start_at.asc(), goods::id.asc())),
        ListOrder::EndDesc => q.order((goods::end_at.desc(), goods::id.desc())),
    };
    // One more than the page: whether another page follows, without a cursor to an empty one.
    let mut rows = q.limit(i64::from(query.limit) + 1).load::<GoodsRow>(conn).await?;
    let more = rows.len() > query.limit as usize;
    rows.truncate(query.limit as usize);
    Ok((rows.into_iter().map(to_goods).collect::<QueryResult<_>>()?, more))
}

type GoodsPredicate = Box<dyn BoxableExpression<goods::table, Pg, SqlType = Bool>>;

/// The rows in any of `states` at `now` (a sale is open from `start_at` up to, not including,
/// `end_at`, as `Goods::window_at` says).
fn in_states(states: StateSet, now: DateTime<Utc>) -> GoodsPredicate {
    let one = |s: GoodsState| -> GoodsPredicate {
        match s {
            GoodsState::Upcoming => Box::new(goods::start_at.gt(now)),
            GoodsState::Live => Box::new(goods::start_at.le(now).and(goods::end_at.gt(now))),
            GoodsState::Ended => Box::new(goods::end_at.le(now)),
        }
    };
    // The default listing in one range condition, which the `goods_by_end` index answers.
    if states == StateSet::CURRENT {
        return Box::new(goods::end_at.gt(now));
    }
    let mut chosen = GoodsState::ALL.into_iter().filter(|s| states.contains(*s)).map(one);
    let first = chosen.next().unwrap_or_else(|| Box::new(diesel::dsl::sql::<Bool>("TRUE")));
    chosen.fold(first, |acc, p| Box::new(acc.or(p)))
}

pub async fn find(conn: &mut AsyncPgConnection, id: GoodsId) -> QueryResult<Option<Goods>> {
    goods::table
        .find(id.get())
        .select(goods::all_columns)
        .first::<GoodsRow>(conn)
        .await
        .optional()?
        .map(to_goods)
        .transpose()
}

/// Writes a sale: only a [`ValidGoods`], whose name and times the database can store.
pub async fn insert(conn: &mut AsyncPgConnection, new: &ValidGoods) -> QueryResult<Goods> {
    // `validate` checked the room and that the sale has not started; the CHECKs refuse a
    // room out of bounds or stored in part.
    let (rate, opens_before, admission, pow) = rooms::to_columns(new.waiting_room.as_ref());
    diesel::insert_into(goods::table)
        .values((
            // Trimmed by `validate`.
            goods::name.eq(&new.name),
            goods::price_cents.eq(new.price_cents),
            goods::seckill_price_cents.eq(new.seckill_price_cents),
            goods::stock_total.eq(new.stock_total),
            // A new sale has all of its stock.
            goods::stock_available.eq(new.stock_total),
            goods::start_at.eq(new.start_at),
            goods::end_at.eq(new.end_at),
            // `validate` kept it in 1..=MAX_BUCKETS; the table's CHECK refuses any other.
            goods::buckets.eq(i16::from(new.buckets)),
            goods::room_rate.eq(rate),
            goods::room_opens_before_secs.eq(opens_before),
            goods::room_admission_secs.eq(admission),
            goods::room_pow_difficulty.eq(pow),
        ))
        .returning(goods::all_columns)
        .get_result::<GoodsRow>(conn)
        .await
        .and_then(to_goods)
}

/// How long `GET /api/goods` answers from memory before asking PostgreSQL again.
pub const LIST_CACHE_TTL: Duration = Duration::from_secs(1);

/// A page of the list as answered: the JSON array and the cursor to the next page, if any.
#[derive(Debug, Clone)]
pub struct ListPage {
    pub body: Bytes,
    pub next: Option<String>,
}

/// The cached first pages, one per set of states at the default page size: at most
/// `StateSet::COUNT` lists in memory, whatever the callers ask (a page past the first, or
/// of another size, is a query of its own: one indexed range scan).
pub struct FirstPages {
    lists: [ListCache; StateSet::COUNT],
}

impl FirstPages {
    pub fn new(ttl: Duration) -> Self {
        Self { lists: std::array::from_fn(|_| ListCache::new(ttl)) }
    }

    /// The cache for `query`, if it asks for a first page at the default size.
    pub fn cache_for(&self, query: &GoodsQuery) -> Option<&ListCache> {
        (query.after.is_none() && query.limit == DEFAULT_PAGE).then(|| &self.lists[query.states.index()])
    }

    /// Forgets every list (a sale was created).
    pub fn invalidate(&self) {
        self.lists.iter().for_each(ListCache::invalidate);
    }
}

/// A first page of `GET /api/goods` (its JSON and its cursor to the next), kept for a short
/// while: during a spike every buyer's page asks for the list, and each ask would otherwise be
/// a query. So `stock_available` in the list may be up to the TTL behind; `GET /api/goods/{id}` is not cached, because buyers and
/// checks read a sale's stock there right after it changed. Goods this process creates are
/// listed at once ([`ListCache::invalidate`]); goods another replica creates, within the TTL.
pub struct ListCache<T = ListPage> {
    ttl: Duration,
    state: Mutex<ListState<T>>,
    /// One refill at a time; callers arriving meanwhile wait and take its list.
    refill: tokio::sync::Mutex<()>,
}

struct ListState<T> {
    /// Bumped by every `invalidate`: a refill that began before one must not store its list.
    generation: u64,
    list: Option<(Instant, T)>,
    /// The last refill, if it failed: when it ended and what its caller was told.
    failed: Option<(Instant, ErrorCode, String)>,
}

impl<T: Clone> ListCache<T> {
    pub fn new(ttl: Duration) -> Self {
        let state = ListState { generation: 0, list: None, failed: None };
        Self { ttl, state: Mutex::new(state), refill: tokio::sync::Mutex::new(()) }
    }

    /// The list from memory while it is fresh, else from `refill`.
    pub async fn get_or_refill<F, Fut>(&self, refill: F) -> Result<T, ApiError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, ApiError>>,
    {
        let asked = Instant::now();
        if let Some(list) = self.fresh() {
            return Ok(list);
        }
        let _one_at_a_time = self.refill.lock().await;
        if let Some(list) = self.fresh() {
            return Ok(list);
        }
        let generation = {
            let state = self.state();
            // A refill failed while this caller waited: its answer is this caller's too, rather
            // than one more try per waiting caller, one after another, while the database is
            // down. The cause was logged once, with the first answer.
            if let Some((at, code, message)) = &state.failed
                && *at >= asked
            {
                return Err(ApiError::new(*code, message.clone()));
            }
            state.generation
        };
        let started = Instant::now();
        match refill().await {
            Ok(list) => {
                let mut state = self.state();
                state.failed = None;
                if state.generation == generation {
                    // Its age counts from before the query: never older than the TTL says.
                    state.list = Some((started, list.clone()));
                }
                Ok(list)
            }
            Err(e) => {
                self.state().failed = Some((Instant::now(), e.code, e.message.clone()));
                Err(e)
            }
        }
    }

    /// Forgets the list: the next call reads the database (after a creation, so that the
    /// creator sees its goods listed at once).
    pub fn invalidate(&self) {
        let mut state = self.state();
        state.generation = state.generation.wrapping_add(1);
        state.list = None;
    }

    fn fresh(&self) -> Option<T> {
        match &self.state().list {
            Some((at, list)) if at.elapsed() < self.ttl => Some(list.clone()),
            _ => None,
        }
    }

    fn state(&self) -> MutexGuard<'_, ListState<T>> {
        // Nothing in the state can be left half-written: a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use actix_web::web::Bytes;
    use seckill_common::ErrorCode;
    use seckill_web::ApiError;

    // Not `super::*`: diesel's `RunQueryDsl::load` would shadow the atomics' `load`.
    use super::ListCache;

    /// A cache and a refill that counts its calls and answers the count.
    fn counted(ttl: Duration) -> (Arc<ListCache<Bytes>>, Arc<AtomicUsize>) {
        (Arc::new(ListCache::new(ttl)), Arc::new(AtomicUsize::new(0)))
    }

    async fn get(cache: &ListCache<Bytes>, calls: &AtomicUsize) -> Result<Bytes, ApiError> {
        cache
            .get_or_refill(|| async {
                let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
                Ok(Bytes::from(n.to_string()))
            })
            .await
    }

    #[tokio::test]
    async fn many_calls_within_the_ttl_make_one_query() {
        let (cache, calls) = counted(Duration::from_secs(60));
        for _ in 0..1_000 {
            assert_eq!(get(&cache, &calls).await.unwrap(), "1");
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    /// `callers` calls at once on a cold cache, whose refill takes 50 ms and answers `answer`.
    async fn slow_refills(
        callers: usize,
        answer: fn() -> Result<Bytes, ApiError>,
    ) -> (Vec<Result<Bytes, ApiError>>, Arc<ListCache<Bytes>>, Arc<AtomicUsize>) {
        let (cache, calls) = counted(Duration::from_secs(60));
        let tasks: Vec<_> = (0..callers)
            .map(|_| {
                let (cache, calls) = (cache.clone(), calls.clone());
                tokio::spawn(async move {
                    cache
                        .get_or_refill(|| async {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            calls.fetch_add(1, Ordering::SeqCst);
                            answer()
                        })
                        .await
                })
            })
            .collect();
        let mut answers = Vec::with_capacity(callers);
        for task in tasks {
            answers.push(task.await.unwrap());
        }
        (answers, cache, calls)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_misses_share_one_refill() {
        let (answers, _, calls) = slow_refills(100, || Ok(Bytes::from_static(b"[]"))).await;
        assert!(answers.iter().all(|a| a.as_ref().is_ok_and(|list| list == "[]")));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn the_list_expires_and_an_invalidation_is_seen_at_once() {
        let (cache, calls) = counted(Duration::from_millis(100));
        assert_eq!(get(&cache, &calls).await.unwrap(), "1");
        cache.invalidate();
        assert_eq!(get(&cache, &calls).await.unwrap(), "2");
        assert_eq!(get(&cache, &calls).await.unwrap(), "2");
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(get(&cache, &calls).await.unwrap(), "3");
    }

    #[tokio::test]
    async fn a_refill_overtaken_by_an_invalidation_is_answered_but_not_kept() {
        let (cache, calls) = counted(Duration::from_secs(60));
        let list = cache
            .get_or_refill(|| async {
                // A creation lands while the query runs.
                cache.invalidate();
                Ok(Bytes::from_static(b"old"))
            })
            .await
            .unwrap();
        assert_eq!(list, "old");
        assert_eq!(get(&cache, &calls).await.unwrap(), "1", "the old list was not kept");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn callers_waiting_on_a_failed_refill_share_its_answer() {
        let down = || Err(ApiError::unavailable("database", anyhow::anyhow!("down")));
        let (answers, cache, calls) = slow_refills(20, down).await;
        for answer in answers {
            assert_eq!(answer.unwrap_err().code, ErrorCode::Unavailable);
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1, "one try for all who waited");
        // A caller arriving after the failure tries again.
        assert_eq!(get(&cache, &calls).await.unwrap(), "2");
    }
}

//! A sale whose stock is split over several buckets (`NewGoods::buckets`), the whole system on
//! one Redis server and on the tests' Redis Cluster (where the buckets sit on different
//! nodes): buyers all served by one bucket buy every unit of the others before anyone is told
//! `SOLD_OUT`; one per user; a unit given back returns to its buyer's bucket and sells to a
//! buyer of another; a transfer between buckets cut after any of its steps (what a kill -9
//! leaves) loses and doubles nothing once the reconciler has finished it; a bucket lost alone
//! (a cluster node restarted empty) is rebuilt from the authorities.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use seckill_common::GoodsId;
use seckill_common::api::SeckillStatus;
use seckill_common::keys::SaleBucket;
use seckill_common::scripts;
use tokio::sync::Semaphore;

use crate::helpers::{Answer, Options, System, spawn_system_with};

/// The systems a test runs on: one Redis server, then the cluster (unless its tests are
/// skipped).
fn systems(test: &str, options: Options) -> Vec<Arc<System>> {
    let mut out = vec![Arc::new(spawn_system_with(options.clone()))];
    if let Some(nodes) = seckill_testkit::redis_cluster_url(test) {
        out.push(Arc::new(spawn_system_with(Options { redis_cluster: Some(nodes), ..options })));
    }
    out
}

/// Every click at once (at most 100 in flight), each answer with its user.
async fn click_all(
    sys: &Arc<System>,
    tokens: &HashMap<i64, String>,
    clicks: &[i64],
    g: GoodsId,
) -> Vec<(i64, Answer)> {
    let limit = Arc::new(Semaphore::new(100));
    join_all(clicks.iter().map(|u| {
        let (sys, limit, token, u) = (sys.clone(), limit.clone(), tokens[u].clone(), *u);
        async move {
            let _permit = limit.acquire().await.unwrap();
            // A 503 (a buyer whose bucket lost every race for moved units) is clicked again.
            (u, sys.buy_retrying(&token, g, Duration::from_secs(30)).await)
        }
    }))
    .await
}

/// Users `from`, `from + n`, `from + 2n`, ...: all served by one bucket of a sale of `n`.
fn served_by_one_bucket(from: i64, n: u8, count: i64) -> Vec<i64> {
    (0..count).map(|i| from + i64::from(n) * i).collect()
}

/// 40 units over 4 buckets (10 each); 40 buyers all served by bucket 1, ten of them clicking
/// twice at once. Every one of them is accepted (a `SOLD_OUT` would be false: units remained
/// in the other buckets), the repeats are refused; then buyers of the other buckets are told
/// SOLD_OUT. Orders, database stock, every bucket in Redis and the audit agree; a unit given
/// back goes to its buyer's bucket and a buyer of another bucket gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buyers_of_one_bucket_buy_every_unit_and_nobody_is_told_sold_out_while_one_is_left() {
    const STOCK: i64 = 40;
    const BUCKETS: u8 = 4;
    for sys in systems("skewed_buyers_buy_every_unit", Options::default()) {
        let g = sys.open_sale_in(STOCK, BUCKETS).await.id;
        assert_eq!(sys.redis_bucket_stocks(g, BUCKETS).await, vec![Some(10); 4], "split evenly");
        let buyers = served_by_one_bucket(20_001, BUCKETS, STOCK);
        assert!(buyers.iter().all(|u| u % 4 == 1));
        let others = [20_002, 20_003, 20_004];
        let all: Vec<i64> = buyers.iter().chain(&others).copied().collect();
        let tokens = sys.dev_tokens(&all).await;

        let clicks: Vec<i64> = buyers.iter().chain(&buyers[..10]).copied().collect();
        let mut accepted = BTreeSet::new();
        for (u, (status, body)) in click_all(&sys, &tokens, &clicks, g).await {
            match (status, body["code"].as_str()) {
                (202, _) => assert!(accepted.insert(u), "user {u} accepted twice"),
                // The repeat click, racing the first for the path token both fetched.
                (409, Some("REPEATED")) | (403, Some("BAD_TOKEN")) => {}
                other => panic!("user {u}: {other:?} while units remained in other buckets: {body}"),
            }
        }
        assert_eq!(accepted, buyers.iter().copied().collect(), "every buyer of bucket 1 bought");
        for u in others {
            let (status, body) = sys.buy(&tokens[&u], g).await;
            assert_eq!((status, body["code"].as_str()), (410, Some("SOLD_OUT")), "user {u}: {body}");
        }

        for u in &buyers {
            let r = sys.final_result(&tokens[u], g, Duration::from_secs(60)).await;
            assert_eq!(r.status, SeckillStatus::Success, "user {u}: {r:?}");
        }
        assert_eq!(sys.active_orders(g).await, (STOCK, 1), "the stock sold, one per user");
        assert_eq!(sys.goods(g).await.stock_available, 0);
        assert_eq!(sys.redis_bucket_stocks(g, BUCKETS).await, vec![Some(0); 4]);
        assert_eq!(sys.redis_bucket_users(g, BUCKETS).await, vec![0, STOCK, 0, 0], "all held in bucket 1");
        sys.eventually("the audit agrees", Duration::from_secs(20), || async {
            let a = sys.audit(g).await;
            a.agrees && a.redis.in_transit == 0
        })
        .await;
        // The audit shows each bucket: all empty, every reservation in bucket 1.
        let per_bucket: Vec<(u8, Option<i64>, i64)> =
            sys.audit(g).await.redis.buckets.iter().map(|b| (b.bucket, b.stock, b.reservations)).collect();
        assert_eq!(per_bucket, [(0, Some(0), 0), (1, Some(0), STOCK), (2, Some(0), 0), (3, Some(0), 0)]);

        // A unit given back goes to its buyer's bucket; a buyer of bucket 2 gets it from there.
        let order = sys.final_result(&tokens[&buyers[0]], g, Duration::from_secs(5)).await.order_id.unwrap();
        let (status, body) = sys.cancel(&tokens[&buyers[0]], order.get()).await;
        assert_eq!(status, 200, "{body}");
        sys.eventually("the unit is back in bucket 1", Duration::from_secs(20), || async {
            sys.redis_bucket_stocks(g, BUCKETS).await == vec![Some(0), Some(1), Some(0), Some(0)]
        })
        .await;
        let late = tokens[&20_002].clone();
        sys.eventually("a buyer of bucket 2 buys the unit", Duration::from_secs(20), || async {
            sys.buy(&late, g).await.0 == 202
        })
        .await;
        assert_eq!(sys.final_result(&late, g, Duration::from_secs(30)).await.status, SeckillStatus::Success);
        assert_eq!(sys.active_orders(g).await, (STOCK, 1));
        sys.eventually("the audit agrees after the restock", Duration::from_secs(20), || async {
            sys.audit(g).await.agrees
        })
        .await;
    }
}

/// Runs one step of a transfer by hand, as the process that died left it, `ago_ms` ago.
async fn take(sys: &System, from: SaleBucket, to: SaleBucket, id: &str, most: i64, ago_ms: i64) -> i64 {
    redis::Script::new(scripts::TRANSFER_TAKE)
        .key(sys.redis_keys.bucket_stock(from))
        .key(sys.redis_keys.transfers_out(from))
        .arg(id)
        .arg(to.bucket)
        .arg(most)
        .arg(chrono::Utc::now().timestamp_millis() - ago_ms)
        .invoke_async(&mut sys.redis().await)
        .await
        .unwrap()
}

async fn give(sys: &System, to: SaleBucket, id: &str, units: i64) -> i64 {
    redis::Script::new(scripts::TRANSFER_GIVE)
        .key(sys.redis_keys.bucket_stock(to))
        .key(sys.redis_keys.transfers_in(to))
        .arg(id)
        .arg(units)
        .arg(chrono::Utc::now().timestamp_millis())
        .invoke_async(&mut sys.redis().await)
        .await
        .unwrap()
}

/// Two transfers cut as a kill -9 leaves them: one after its take (5 units in neither bucket,
/// logged), one after its give (its units in the receiver, the log entry still there). The
/// audit counts the first in transit; the reconciler finishes both, giving the first once and
/// the second not again; then a spike over every bucket sells exactly the 40 units, one per
/// user: nothing lost, nothing doubled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_cut_after_any_step_lose_and_double_nothing() {
    const STOCK: i64 = 40;
    const BUCKETS: u8 = 4;
    // The shortest the service allows (past the publisher's confirm timeout).
    let options = Options { reconcile_after_secs: 6, ..Options::default() };
    for sys in systems("transfers_cut_after_any_step", options) {
        let g = sys.open_sale_in(STOCK, BUCKETS).await.id;
        let at = |b| SaleBucket::new(g, b);
        assert_eq!(take(&sys, at(2), at(1), "cut-after-take", 5, 0).await, 5);
        assert_eq!(sys.redis_bucket_stocks(g, BUCKETS).await, vec![Some(10), Some(10), Some(5), Some(10)]);
        let a = sys.audit(g).await;
        assert_eq!(a.redis.in_transit, 5, "{a:?}");
        assert!(a.agrees, "units in transit are units of the sale: {:?}", a.differences);

        assert_eq!(take(&sys, at(3), at(0), "cut-after-give", 5, 0).await, 5);
        assert_eq!(give(&sys, at(0), "cut-after-give", 5).await, 1);
        sys.eventually("the reconciler finishes both transfers", Duration::from_secs(20), || async {
            sys.redis_bucket_stocks(g, BUCKETS).await == vec![Some(15), Some(15), Some(5), Some(5)]
                && sys.audit(g).await.redis.in_transit == 0
        })
        .await;
        assert!(sys.audit(g).await.agrees);

        let buyers: Vec<i64> = (30_001..=30_060).collect();
        let tokens = sys.dev_tokens(&buyers).await;
        let mut accepted = BTreeSet::new();
        for (u, (status, body)) in click_all(&sys, &tokens, &buyers, g).await {
            match (status, body["code"].as_str()) {
                (202, _) => assert!(accepted.insert(u)),
                (410, Some("SOLD_OUT")) => {}
                other => panic!("user {u}: {other:?}: {body}"),
            }
        }
        assert_eq!(accepted.len() as i64, STOCK, "exactly the stock, neither a unit lost nor one doubled");
        for u in &accepted {
            assert_eq!(
                sys.final_result(&tokens[u], g, Duration::from_secs(60)).await.status,
                SeckillStatus::Success
            );
        }
        assert_eq!(sys.active_orders(g).await, (STOCK, 1));
        assert_eq!(sys.redis_bucket_stocks(g, BUCKETS).await, vec![Some(0); 4]);
        sys.eventually("the audit agrees", Duration::from_secs(20), || async { sys.audit(g).await.agrees })
            .await;
    }
}

/// A transfer a dead process left half done (bucket 2's one unit taken towards bucket 1 two
/// seconds ago, never given), every bucket otherwise sold: the next buyer whose bucket is dry
/// finishes it and buys that unit, without waiting for the reconciler (30 s away here); the
/// buyer after is told SOLD_OUT; the audit agrees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_a_dead_process_left_is_finished_by_the_next_buyer() {
    const BUCKETS: u8 = 4;
    let options = Options { reconcile_after_secs: 30, ..Options::default() };
    for sys in systems("a_transfer_a_dead_process_left", options) {
        let g = sys.open_sale_in(4, BUCKETS).await.id;
        let at = |b| SaleBucket::new(g, b);
        assert_eq!(take(&sys, at(2), at(1), "dead", 5, 2_000).await, 1);
        let tokens = sys.dev_tokens(&[50_000, 50_001, 50_003, 50_007, 50_011]).await;
        for u in [50_000, 50_001, 50_003] {
            sys.buy_order(&tokens[&u], g).await;
        }
        assert_eq!(sys.redis_bucket_stocks(g, BUCKETS).await, vec![Some(0); 4]);
        assert_eq!(sys.audit(g).await.redis.in_transit, 1, "one unit in no bucket");

        let (status, body) = sys.buy(&tokens[&50_007], g).await;
        assert_eq!(status, 202, "the stranded unit is found and sold: {body}");
        let r = sys.final_result(&tokens[&50_007], g, Duration::from_secs(30)).await;
        assert_eq!(r.status, SeckillStatus::Success);
        let (status, body) = sys.buy(&tokens[&50_011], g).await;
        assert_eq!((status, body["code"].as_str()), (410, Some("SOLD_OUT")), "{body}");
        assert_eq!(sys.active_orders(g).await, (4, 1));
        sys.eventually("the audit agrees", Duration::from_secs(20), || async {
            let a = sys.audit(g).await;
            a.agrees && a.redis.in_transit == 0
        })
        .await;
    }
}

/// One bucket of four loses every key (a cluster node restarted empty loses the buckets on it)
/// after 12 buyers, three of each bucket, bought. The audit names the bucket; a buyer without
/// an order is in doubt only if served by the lost bucket; the reconciler
/// rebuilds it from the authorities with what the others do not hold; its buyers are told
/// REPEATED and see their orders; then the sale sells exactly its stock, one per user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_lost_alone_is_rebuilt_and_the_sale_sells_exactly_its_stock() {
    const STOCK: i64 = 40;
    const BUCKETS: u8 = 4;
    for sys in systems("a_bucket_lost_alone", Options::default()) {
        let g = sys.open_sale_in(STOCK, BUCKETS).await.id;
        let first: Vec<i64> = (40_000..40_012).collect();
        let late: Vec<i64> = (40_100..40_160).collect();
        let all: Vec<i64> = first.iter().chain(&late).copied().collect();
        let tokens = sys.dev_tokens(&all).await;
        for u in &first {
            sys.buy_order(&tokens[u], g).await;
        }
        assert_eq!(sys.redis_bucket_stocks(g, BUCKETS).await, vec![Some(7); 4]);

        sys.lose_bucket(SaleBucket::new(g, 2)).await;
        let lost = sys.audit(g).await;
        assert!(!lost.agrees && lost.differences[0].contains("[2]"), "{:?}", lost.differences);
        let stocks: Vec<Option<i64>> = lost.redis.buckets.iter().map(|b| b.stock).collect();
        assert_eq!(stocks, [Some(7), Some(7), None, Some(7)], "the audit names the bucket not loaded");
        // A buyer without an order: in doubt when served by the lost bucket (a request of theirs
        // may wait in the broker), not when served by another (none of theirs was lost).
        assert_eq!(sys.result(&tokens[&40_102], g).await.status, SeckillStatus::Queued, "bucket 2");
        assert_eq!(sys.result(&tokens[&40_101], g).await.status, SeckillStatus::None, "bucket 1");
        sys.eventually("the lost bucket is rebuilt", Duration::from_secs(20), || async {
            sys.redis_bucket_stocks(g, BUCKETS).await == vec![Some(7); 4]
        })
        .await;
        for u in first.iter().filter(|u| *u % 4 == 2) {
            let (status, body) = sys.buy_retrying(&tokens[u], g, Duration::from_secs(10)).await;
            assert_eq!((status, body["code"].as_str()), (409, Some("REPEATED")), "user {u}: {body}");
            assert_eq!(sys.result(&tokens[u], g).await.status, SeckillStatus::Success, "user {u}");
        }
        sys.eventually("the recovery ends", Duration::from_secs(30), || async { sys.audit(g).await.agrees })
            .await;

        let mut accepted = 0;
        for (u, (status, body)) in click_all(&sys, &tokens, &late, g).await {
            match (status, body["code"].as_str()) {
                (202, _) => accepted += 1,
                (410, Some("SOLD_OUT")) => {}
                other => panic!("user {u}: {other:?}: {body}"),
            }
        }
        assert_eq!(accepted, STOCK - first.len() as i64, "the rest of the stock, no more, no less");
        for u in &late {
            sys.final_result(&tokens[u], g, Duration::from_secs(60)).await;
        }
        assert_eq!(sys.active_orders(g).await, (STOCK, 1));
        assert_eq!(sys.goods(g).await.stock_available, 0);
        sys.eventually("the audit agrees at the end", Duration::from_secs(20), || async {
            sys.audit(g).await.agrees
        })
        .await;
    }
}

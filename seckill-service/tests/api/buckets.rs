//! Units moving between a sale's buckets (`seckill_service::buckets`), on one Redis server
//! and on the tests' Redis Cluster, where the buckets are on different slots: what moves,
//! what a transfer cut after each of its steps leaves, and that the units of a sale are
//! conserved whatever interleaves.

use std::time::Duration;

use futures_util::future::join_all;
use redis::AsyncCommands;
use seckill_common::GoodsId;
use seckill_common::config::RedisSettings;
use seckill_common::keys::{RedisKeys, SaleBucket};
use seckill_common::scripts;
use seckill_infra::redis::{Redis, connect};
use seckill_service::buckets::{Moved, Transfers};
use seckill_testkit::{TestNames, redis_cluster_url, redis_url};

/// This test's Redis (one server, or the cluster's nodes) under keys of its own.
struct Place {
    redis: Redis,
    keys: RedisKeys,
    transfers: Transfers,
    _names: TestNames,
}

impl Place {
    async fn new(cluster: Option<String>) -> Self {
        let mut names = TestNames::new();
        if let Some(nodes) = &cluster {
            names.on_cluster(nodes);
        }
        let settings = RedisSettings {
            url: cluster.clone().unwrap_or_else(redis_url),
            cluster: cluster.is_some(),
            key_prefix: names.redis_prefix.clone(),
            ..RedisSettings::default()
        };
        let redis = connect(&settings).unwrap();
        let keys = RedisKeys::new(names.redis_prefix.clone());
        let transfers = Transfers::new(redis.clone(), keys.clone());
        Self { redis, keys, transfers, _names: names }
    }

    /// The places a test runs in: one server, then the cluster (unless its tests are skipped).
    async fn all(test: &str) -> Vec<Self> {
        let mut places = vec![Self::new(None).await];
        if let Some(nodes) = redis_cluster_url(test) {
            places.push(Self::new(Some(nodes)).await);
        }
        places
    }

    async fn set_stock(&self, at: SaleBucket, units: i64) {
        let mut conn = self.redis.clone();
        let _: () = conn.set(self.keys.bucket_stock(at), units).await.unwrap();
    }

    async fn stock(&self, at: SaleBucket) -> Option<i64> {
        let mut conn = self.redis.clone();
        conn.get(self.keys.bucket_stock(at)).await.unwrap()
    }

    /// TAKE alone, as a process that died right after it would have left things.
    async fn take_only(&self, from: SaleBucket, to: SaleBucket, id: &str, most: i64, at_ms: i64) -> i64 {
        let mut conn = self.redis.clone();
        redis::Script::new(scripts::TRANSFER_TAKE)
            .key(self.keys.bucket_stock(from))
            .key(self.keys.transfers_out(from))
            .arg(id)
            .arg(to.bucket)
            .arg(most)
            .arg(at_ms)
            .invoke_async(&mut conn)
            .await
            .unwrap()
    }

    async fn give_only(&self, to: SaleBucket, id: &str, units: i64) -> i64 {
        let mut conn = self.redis.clone();
        redis::Script::new(scripts::TRANSFER_GIVE)
            .key(self.keys.bucket_stock(to))
            .key(self.keys.transfers_in(to))
            .arg(id)
            .arg(units)
            .arg(0)
            .invoke_async(&mut conn)
            .await
            .unwrap()
    }
}

fn sale(n: i64) -> GoodsId {
    GoodsId::new(n).unwrap()
}

/// Long enough ago that the reconciler takes a logged transfer for one whose process died.
const LONG_AGO_MS: i64 = 1_000;
const STALE: Duration = Duration::from_millis(500);

#[tokio::test]
async fn a_transfer_moves_half_of_the_giving_bucket_at_most_what_is_asked() {
    for place in Place::all("a_transfer_moves_half").await {
        let (from, to) = (SaleBucket::new(sale(5), 1), SaleBucket::new(sale(5), 0));
        place.set_stock(from, 11).await;
        place.set_stock(to, 0).await;
        assert_eq!(place.transfers.transfer(from, to, 100).await.unwrap(), Moved::Units(6));
        assert_eq!((place.stock(from).await, place.stock(to).await), (Some(5), Some(6)));
        assert_eq!(place.transfers.transfer(from, to, 2).await.unwrap(), Moved::Units(2));
        assert_eq!((place.stock(from).await, place.stock(to).await), (Some(3), Some(8)));
        // The last unit goes too: a bucket that holds one gives it.
        place.set_stock(from, 1).await;
        assert_eq!(place.transfers.transfer(from, to, 100).await.unwrap(), Moved::Units(1));
        assert_eq!(place.transfers.transfer(from, to, 100).await.unwrap(), Moved::Empty);
        let unloaded = SaleBucket::new(sale(5), 2);
        assert_eq!(place.transfers.transfer(unloaded, to, 100).await.unwrap(), Moved::NotLoaded);
        assert_eq!(place.stock(to).await, Some(9));
        assert!(place.transfers.unsettled(from).await.unwrap().is_empty(), "every transfer settled");
    }
}

/// An empty bucket whose own transfer is between its steps says so (the asking bucket may be
/// about to get those units: no reason yet to tell a buyer sold out); one whose only unsettled
/// transfers are a second old or more says they are stranded (their process died), and
/// finishing them brings their units where they were going; with none at all, it is empty.
#[tokio::test]
async fn an_empty_bucket_that_is_sending_units_says_so_for_a_moment() {
    for place in Place::all("an_empty_bucket_that_is_sending").await {
        let (from, to, other) =
            (SaleBucket::new(sale(9), 1), SaleBucket::new(sale(9), 0), SaleBucket::new(sale(9), 2));
        place.set_stock(from, 2).await;
        place.set_stock(to, 0).await;
        place.set_stock(other, 0).await;
        let now = chrono::Utc::now().timestamp_millis();
        assert_eq!(place.take_only(from, to, "under-way", 10, now).await, 1);
        assert_eq!(place.take_only(from, to, "under-way-too", 10, now).await, 1);
        assert_eq!(place.transfers.transfer(from, other, 10).await.unwrap(), Moved::Sending);
        assert_eq!(place.take_only(from, other, "x", 10, now + 999).await, scripts::TRANSFER_EMPTY_SENDING);
        assert_eq!(
            place.take_only(from, other, "x", 10, now + 1_000).await,
            scripts::TRANSFER_EMPTY_STRANDED
        );
        assert_eq!(place.stock(from).await, Some(0));
        assert_eq!(place.transfers.in_transit(from).await.unwrap(), 2);
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        // The asker finishes the dead process's transfers itself, and is told to look again.
        assert_eq!(place.transfers.transfer(from, other, 10).await.unwrap(), Moved::Sending);
        assert_eq!(place.stock(to).await, Some(2), "the stranded units arrived where they were going");
        assert_eq!(place.transfers.in_transit(from).await.unwrap(), 0);
        assert_eq!(place.transfers.finish_stale(from, Duration::from_secs(1)).await.unwrap(), 0, "none left");
        assert_eq!(place.transfers.transfer(from, other, 10).await.unwrap(), Moved::Empty);
    }
}

#[tokio::test]
async fn a_transfer_cut_after_its_take_is_finished_once_by_the_reconciler() {
    for place in Place::all("a_transfer_cut_after_its_take").await {
        let (from, to) = (SaleBucket::new(sale(6), 0), SaleBucket::new(sale(6), 3));
        place.set_stock(from, 40).await;
        place.set_stock(to, 0).await;
        let at = chrono::Utc::now().timestamp_millis() - LONG_AGO_MS;
        assert_eq!(place.take_only(from, to, "cut-1", 10, at).await, 10);
        // In transit: out of the giving bucket, not yet in the receiving one.
        assert_eq!((place.stock(from).await, place.stock(to).await), (Some(30), Some(0)));
        assert_eq!(place.transfers.in_transit(from).await.unwrap(), 10);
        // A transfer under way (taken a moment ago) is its process's: left alone.
        let now = chrono::Utc::now().timestamp_millis();
        assert_eq!(place.take_only(from, to, "fresh", 5, now).await, 5);
        // Two reconcilers at once (two replicas): the units arrive once.
        let finished = join_all((0..2).map(|_| place.transfers.finish_stale(from, STALE))).await;
        let finished: usize = finished.into_iter().map(Result::unwrap).sum();
        assert!((1..=2).contains(&finished), "{finished}");
        assert_eq!((place.stock(from).await, place.stock(to).await), (Some(25), Some(10)));
        let left: Vec<String> =
            place.transfers.unsettled(from).await.unwrap().into_iter().map(|t| t.0).collect();
        assert_eq!(left, ["fresh"], "only the transfer under way is left");
    }
}

#[tokio::test]
async fn a_transfer_cut_after_its_give_is_settled_without_giving_twice() {
    for place in Place::all("a_transfer_cut_after_its_give").await {
        let (from, to) = (SaleBucket::new(sale(7), 2), SaleBucket::new(sale(7), 1));
        place.set_stock(from, 8).await;
        place.set_stock(to, 1).await;
        let at = chrono::Utc::now().timestamp_millis() - LONG_AGO_MS;
        assert_eq!(place.take_only(from, to, "cut-2", 100, at).await, 4);
        assert_eq!(place.give_only(to, "cut-2", 4).await, 1);
        assert_eq!(place.give_only(to, "cut-2", 4).await, 0, "a transfer is given once");
        assert_eq!(place.transfers.finish_stale(from, STALE).await.unwrap(), 1);
        assert_eq!((place.stock(from).await, place.stock(to).await), (Some(4), Some(5)));
        assert!(place.transfers.unsettled(from).await.unwrap().is_empty());
    }
}

#[tokio::test]
async fn units_for_a_bucket_not_loaded_wait_in_transit_until_it_is() {
    for place in Place::all("units_for_a_bucket_not_loaded").await {
        let (from, to) = (SaleBucket::new(sale(8), 0), SaleBucket::new(sale(8), 1));
        place.set_stock(from, 6).await;
        // `to` lost its data (or was never loaded): the units leave `from` and wait.
        assert_eq!(place.transfers.transfer(from, to, 100).await.unwrap(), Moved::Units(3));
        assert_eq!((place.stock(from).await, place.stock(to).await), (Some(3), None));
        assert_eq!(place.transfers.in_transit(from).await.unwrap(), 3);
        assert_eq!(
            place.transfers.finish_stale(from, Duration::ZERO).await.unwrap(),
            0,
            "still nowhere to go"
        );
        // Loaded (a load counts units in transit out of what it sets), they arrive.
        place.set_stock(to, 0).await;
        assert_eq!(place.transfers.finish_stale(from, Duration::ZERO).await.unwrap(), 1);
        assert_eq!((place.stock(from).await, place.stock(to).await), (Some(3), Some(3)));
        assert_eq!(place.transfers.in_transit(from).await.unwrap(), 0);
    }
}

/// Four buckets of 100 units; 200 transfers at once between random pairs, a quarter of them
/// cut after their take (as a process killed mid-transfer would leave them); then the
/// reconciler: the sale holds its 400 units again, none in transit, and every receiving
/// bucket counts each of its transfers once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_units_of_a_sale_are_conserved_whatever_the_transfers_and_cuts() {
    for place in Place::all("the_units_of_a_sale_are_conserved").await {
        let g = sale(9);
        let buckets: Vec<SaleBucket> = (0..4).map(|b| SaleBucket::new(g, b)).collect();
        for b in &buckets {
            place.set_stock(*b, 100).await;
        }
        let at = chrono::Utc::now().timestamp_millis() - LONG_AGO_MS;
        let moves = (0..200usize).map(|i| {
            let (from, to) = (buckets[i % 4], buckets[(i * 7 + 1) % 4]);
            let place = &place;
            async move {
                if from == to {
                    return 0;
                }
                if i % 4 == 0 {
                    let taken = place.take_only(from, to, &format!("cut-{i}"), 3, at).await;
                    return taken.max(0);
                }
                match place.transfers.transfer(from, to, 3).await.unwrap() {
                    Moved::Units(n) => n,
                    Moved::Empty | Moved::Sending => 0,
                    Moved::NotLoaded => panic!("bucket {from:?} not loaded"),
                }
            }
        });
        let moved: i64 = join_all(moves).await.into_iter().sum();
        assert!(moved > 0);
        let in_transit: i64 = join_all(buckets.iter().map(|b| place.transfers.in_transit(*b)))
            .await
            .into_iter()
            .map(Result::unwrap)
            .sum();
        let held: i64 = join_all(buckets.iter().map(|b| place.stock(*b))).await.into_iter().flatten().sum();
        assert_eq!(held + in_transit, 400, "before the reconciler: held {held} + in transit {in_transit}");
        for b in &buckets {
            place.transfers.finish_stale(*b, STALE).await.unwrap();
        }
        let held: i64 = join_all(buckets.iter().map(|b| place.stock(*b))).await.into_iter().flatten().sum();
        assert_eq!(held, 400, "after the reconciler every unit is in a bucket, once");
        for b in &buckets {
            assert_eq!(place.transfers.in_transit(*b).await.unwrap(), 0, "{b:?}");
        }
    }
}

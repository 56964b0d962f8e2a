//! The whole system on a Redis Cluster of three primaries (scripts/test.sh starts it): each
//! sale's keys on the node of its slot, the batches over many sales (the order consumer's
//! claims and results, the confirmations) split by slot, the gateway's shared rate limits in
//! one call per group of buckets. The same invariants as on one server.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use gateway::configuration::{LimitSettings, RateLimitSettings};
use redis::AsyncCommands;
use seckill_common::api::SeckillStatus;
use tokio::sync::Semaphore;

use crate::helpers::{Options, System, spawn_system_with};

fn on_cluster(test: &str, options: Options) -> Option<Arc<System>> {
    let nodes = seckill_testkit::redis_cluster_url(test)?;
    Some(Arc::new(spawn_system_with(Options { redis_cluster: Some(nodes), ..options })))
}

/// Five sales at once (their keys on different primaries), 40 units each, 100 buyers each, 10
/// of them clicking twice: every sale sells exactly its stock, one per user, in PostgreSQL and
/// in the cluster, every accepted request ends `success`, nothing is left in the queues.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_sales_at_once_on_a_cluster_sell_exactly_their_stock_one_per_user() {
    const STOCK: i64 = 40;
    let Some(sys) = on_cluster("five_sales_at_once", Options::default()) else { return };
    let mut sales = Vec::new();
    for _ in 0..5 {
        sales.push(sys.open_sale(STOCK).await.id);
    }
    let limit = Arc::new(Semaphore::new(200));
    let buyers: Vec<(usize, i64)> =
        (0..sales.len()).flat_map(|s| (0..100).map(move |i| (s, 10_000 * (s as i64 + 1) + i))).collect();
    let users: Vec<i64> = buyers.iter().map(|(_, u)| *u).collect();
    let tokens = sys.dev_tokens(&users).await;

    // All the sales' clicks interleaved, so the order consumer's batches mix sales.
    let clicks = buyers.iter().chain(buyers.iter().filter(|(_, u)| u % 100 < 10)).map(|(s, u)| {
        let (sys, limit, token, g) = (sys.clone(), limit.clone(), tokens[u].clone(), sales[*s]);
        let u = *u;
        async move {
            let _permit = limit.acquire().await.unwrap();
            (g, u, sys.buy(&token, g).await)
        }
    });
    let answers = join_all(clicks).await;
    let mut accepted: HashMap<_, BTreeSet<i64>> = HashMap::new();
    for (g, u, (status, body)) in &answers {
        match (*status, body["code"].as_str()) {
            (202, _) => assert!(accepted.entry(*g).or_default().insert(*u), "user {u} accepted twice"),
            (410, Some("SOLD_OUT")) | (409, Some("REPEATED")) | (403, Some("BAD_TOKEN")) => {}
            other => panic!("user {u} on sale {g}: unexpected answer {other:?}: {body}"),
        }
    }
    for (s, g) in sales.iter().enumerate() {
        let winners = accepted.get(g).cloned().unwrap_or_default();
        assert_eq!(winners.len() as i64, STOCK, "sale {g}: exactly the stock is accepted");
        for (_, u) in buyers.iter().filter(|(bs, _)| *bs == s) {
            let r = sys.final_result(&tokens[u], *g, Duration::from_secs(60)).await;
            let expected = if winners.contains(u) { SeckillStatus::Success } else { SeckillStatus::None };
            assert_eq!(r.status, expected, "user {u} on sale {g}: {r:?}");
        }
        let (orders, most_per_user) = sys.active_orders(*g).await;
        assert_eq!((orders, most_per_user), (STOCK, 1), "sale {g}: the stock sold, one per user");
        assert_eq!(sys.goods(*g).await.stock_available, 0, "sale {g}: database stock");
        assert_eq!(sys.redis_stock(*g).await, Some(0), "sale {g}: stock on its cluster node");
        assert_eq!(sys.redis_users(*g).await, STOCK, "sale {g}: reservations on its cluster node");
        sys.eventually("the audit agrees once the queue is drained", Duration::from_secs(20), || async {
            sys.audit(*g).await.agrees
        })
        .await;
    }
    assert_eq!(sys.queue_depth(&sys.amqp_names.orders_queue()).await, 0, "orders queue drained");
    assert_eq!(sys.queue_depth(&sys.amqp_names.orders_dead_queue()).await, 0, "nothing dead-lettered");
}

/// 48 users (their buckets in every group of the cluster) each fire 8 requests at once against
/// a limit of burst 3: the shared buckets answer on the cluster (no request decided without
/// it), and each user gets their burst, give or take the refill, never 8.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_rate_limits_hold_on_a_cluster_for_users_in_every_group() {
    const BURST: u32 = 3;
    let mut limits = RateLimitSettings::default();
    let user = LimitSettings { per_sec: Some(1), burst: Some(BURST) };
    (limits.buy, limits.poll, limits.orders, limits.admin) = (user, user, user, user);
    limits.anonymous = LimitSettings { per_sec: Some(1_000_000), burst: Some(1_000_000) };
    let Some(sys) =
        on_cluster("rate_limits_on_a_cluster", Options { rate_limits: Some(limits), ..Options::default() })
    else {
        return;
    };
    let users: Vec<i64> = (500..548).collect();
    let groups: BTreeSet<u16> =
        users.iter().map(|u| seckill_common::keys::rate_limit_group(&u.to_string())).collect();
    assert_eq!(groups.len(), usize::from(seckill_common::keys::RATE_LIMIT_GROUPS), "every group in play");
    let tokens: Vec<(i64, String)> = join_all(users.iter().map(|u| {
        let sys = sys.clone();
        async move { (*u, sys.dev_token(*u, "user").await) }
    }))
    .await;
    let answers = join_all(tokens.iter().flat_map(|(u, token)| {
        let sys = sys.clone();
        (0..8).map(move |_| {
            let sys = sys.clone();
            async move { (*u, sys.get("/api/orders", Some(token)).await.0) }
        })
    }))
    .await;
    let mut passed: HashMap<i64, u32> = HashMap::new();
    for (u, status) in answers {
        match status {
            200 => *passed.entry(u).or_default() += 1,
            429 => {}
            other => panic!("user {u}: {other}"),
        }
    }
    // Decided by the shared buckets, not by the replica alone (which one replica could not
    // tell apart): each user's bucket is in the cluster, on the node of its group's slot.
    let mut redis = sys.redis().await;
    let buckets: Vec<String> = redis.keys(format!("{}seckill:rl:*", sys.redis_keys.prefix())).await.unwrap();
    assert_eq!(buckets.len(), users.len(), "one shared bucket per user: {buckets:?}");
    for u in &users {
        let n = passed.get(u).copied().unwrap_or_default();
        // The burst, plus the tokens earned back (one a second) while the 8 were answered.
        assert!((BURST..=BURST + 2).contains(&n), "user {u}: {n} of 8 passed a burst of {BURST}");
    }
}

/// Redis loses the sale's data mid-sale on a cluster (the sale's nodes restarted without
/// persistence, or failed over to replicas that missed the last writes), with 30 accepted
/// requests waiting in the queue: the same run as on one server (`redis_loss`), the sale's
/// stock split over four buckets on the cluster's nodes, the same outcome: nothing accepted
/// lost, every result agreeing with the orders, exactly the stock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_losing_the_sales_data_with_requests_queued_loses_nothing() {
    let Some(nodes) = seckill_testkit::redis_cluster_url("losing_the_sales_data_on_a_cluster") else {
        return;
    };
    crate::redis_loss::losing_everything_with_requests_queued(
        Options { redis_cluster: Some(nodes), ..Options::default() },
        4,
    )
    .await;
}

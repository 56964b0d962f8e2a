//! Redis is a cache, never the truth: it loses every key mid-sale (a restart without
//! persistence, a fail-over to a replica that missed the last writes), and nothing accepted is
//! lost, every result agrees with the orders, and the sale sells on, exactly its stock.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use redis::AsyncCommands;
use seckill_common::api::SeckillStatus;
use seckill_common::trust::Peer;
use seckill_common::{GoodsId, UserId};

use crate::helpers::{Answer, Options, System, spawn_system, spawn_system_with};

async fn tokens(sys: &System, users: impl Iterator<Item = i64>) -> HashMap<i64, String> {
    join_all(users.map(|u| async move { (u, sys.dev_token(u, "user").await) })).await.into_iter().collect()
}

async fn buy_all(
    sys: &Arc<System>,
    tokens: &HashMap<i64, String>,
    users: &[i64],
    g: GoodsId,
) -> Vec<(i64, Answer)> {
    join_all(users.iter().map(|u| {
        let (sys, token, u) = (sys.clone(), tokens[u].clone(), *u);
        async move { (u, sys.buy_retrying(&token, g, Duration::from_secs(30)).await) }
    }))
    .await
}

/// Each of `users`' final result, and their active orders of the sale through the API.
async fn outcome(
    sys: &System,
    tokens: &HashMap<i64, String>,
    u: i64,
    g: GoodsId,
) -> (SeckillStatus, Option<i64>, Vec<i64>) {
    let r = sys.final_result(&tokens[&u], g, Duration::from_secs(60)).await;
    let (status, body) = sys.get("/api/orders", Some(&tokens[&u])).await;
    assert_eq!(status, 200, "{body}");
    let active: Vec<i64> = body
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["goods_id"] == g.get() && matches!(o["status"].as_str(), Some("unpaid" | "paid")))
        .map(|o| o["id"].as_i64().unwrap())
        .collect();
    (r.status, r.order_id.map(|o| o.get()), active)
}

/// The issue's own run, in small: 30 requests wait in the queue (order-service down) when Redis
/// loses everything; buyers go on arriving (some of the 30 clicking again), order-service
/// comes back. Every 202 ends in success, agreeing with the orders; repeat clicks are told
/// REPEATED (or answered with their order); exactly the stock is sold, one per buyer; and once
/// the recovery ends, Redis, the ledger and the orders agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_losing_everything_with_requests_queued_loses_nothing() {
    losing_everything_with_requests_queued(Options::default(), 1).await;
}

/// The run above on a system started with `options` (the cluster tests: on a Redis Cluster,
/// where the loss is that of the sale's nodes), the sale's stock split over `buckets`.
pub(crate) async fn losing_everything_with_requests_queued(options: Options, buckets: u8) {
    // Two replicas: one rebuilds, the other waits for it (503, retried) and follows.
    let sys = Arc::new(spawn_system_with(Options { seckill_replicas: 2, ..options }));
    let stock = 40;
    let g = sys.open_sale_in(stock, buckets).await.id;
    let first: Vec<i64> = (1_001..=1_030).collect();
    let second: Vec<i64> = (1_031..=1_090).collect();
    let tokens = tokens(&sys, first.iter().chain(&second).copied()).await;

    sys.stop_order().await;
    for (u, (status, body)) in buy_all(&sys, &tokens, &first, g).await {
        assert_eq!(status, 202, "user {u}: {body}");
    }
    // Accepted together, they wait in the queue in batches (at most one message each).
    let waiting = sys.queue_depth(&sys.amqp_names.orders_queue()).await;
    assert!((1..=30).contains(&waiting), "the requests wait in the queue: {waiting} messages");

    sys.lose_redis_data().await;
    // Nothing is known of them until order-service is back: their polls wait (503), they are
    // never told `none` or `failed`.
    let (status, _) = sys.get(&format!("/api/seckill/{g}/result"), Some(&tokens[&first[0]])).await;
    assert_eq!(status, 503, "order-service is down: the result cannot be known yet");
    sys.start_order();
    // Buyers keep coming, and ten of the first thirty click again.
    let again: Vec<i64> = first[..10].to_vec();
    let wave: Vec<i64> = second.iter().chain(&again).copied().collect();
    let answers = buy_all(&sys, &tokens, &wave, g).await;
    let mut accepted: Vec<i64> = first.clone();
    for (u, (status, body)) in &answers {
        match (*status, body["code"].as_str()) {
            (202, _) => accepted.push(*u),
            (409, Some("REPEATED")) | (410, Some("SOLD_OUT")) => {}
            other => panic!("user {u}: unexpected answer {other:?}: {body}"),
        }
    }

    // Every accepted request ends, agreeing with the buyer's orders.
    let mut winners = 0;
    for u in first.iter().chain(&second) {
        let (status, order_id, active) = outcome(&sys, &tokens, *u, g).await;
        assert!(active.len() <= 1, "user {u} holds {active:?}");
        if accepted.contains(u) {
            assert!(matches!(status, SeckillStatus::Success | SeckillStatus::Failed), "user {u}: {status:?}");
        }
        if first.contains(u) {
            assert_eq!(status, SeckillStatus::Success, "user {u}, accepted before the loss, ends in success");
        }
        match status {
            SeckillStatus::Success => {
                assert_eq!(active, vec![order_id.unwrap()], "user {u}: success names their order");
                winners += 1;
            }
            _ => assert!(active.is_empty(), "user {u} sees {status:?} but holds {active:?}"),
        }
    }
    assert!(winners <= stock, "no oversell: {winners}");

    // The recovery ends by itself once the broker holds nothing of the lost data; then more
    // buyers take what is left, and everything agrees.
    sys.eventually(
        "the recovery ends and redis agrees with the authorities",
        Duration::from_secs(30),
        || async {
            let a = sys.audit(g).await;
            a.agrees || {
                eprintln!("{:?}", a.differences);
                false
            }
        },
    )
    .await;
    let late: Vec<i64> = (1_091..=1_140).collect();
    let late_tokens = self::tokens(&sys, late.iter().copied()).await;
    buy_all(&sys, &late_tokens, &late, g).await;
    for u in &late {
        outcome(&sys, &late_tokens, *u, g).await;
    }
    let (orders, most_per_user) = sys.active_orders(g).await;
    assert_eq!(orders, stock, "every unit sold in the end");
    assert_eq!(most_per_user, 1);
    assert_eq!(sys.goods(g).await.stock_available, 0);
    assert_eq!(sys.held_at_stock(g).await, stock);
    sys.eventually("redis agrees at the end", Duration::from_secs(10), || async {
        sys.audit(g).await.agrees
    })
    .await;
    assert_eq!(sys.redis_bucket_stocks(g, buckets).await, vec![Some(0); usize::from(buckets)]);
    assert_eq!(sys.queue_depth(&sys.amqp_names.orders_dead_queue()).await, 0, "nothing dead-lettered");
}

async fn sale(sys: &System, stock: i64) -> GoodsId {
    sys.open_sale(stock).await.id
}

/// A buyer's result key is gone: the poll answers from the order authority (success with the
/// order id) and writes it back. A buyer with no order is told `queued` while their request
/// may still wait in the broker (the sale recovers), `none` once the recovery has ended.
#[tokio::test]
async fn a_lost_result_is_answered_from_the_orders() {
    let sys = spawn_system();
    let g = sale(&sys, 5).await;
    let buyer = sys.dev_token(2_001, "user").await;
    let order = sys.buy_order(&buyer, g).await;
    let nobody = sys.dev_token(2_002, "user").await;

    sys.lose_redis_data().await;
    let r = sys.result(&buyer, g).await;
    assert_eq!((r.status, r.order_id.map(|o| o.get())), (SeckillStatus::Success, Some(order)));
    let written: Option<String> =
        sys.redis().await.get(sys.redis_keys.result(g, UserId::new(2_001).unwrap())).await.unwrap();
    assert_eq!(written, Some(format!("success:{order}")), "written back to redis");
    assert_eq!(sys.result(&nobody, g).await.status, SeckillStatus::Queued, "in doubt");
    // The sale sells on from the authority: four units left, the buyer is told REPEATED.
    let (status, body) = sys.buy_retrying(&buyer, g, Duration::from_secs(10)).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("REPEATED")), "{body}");
    sys.eventually("the recovery ends", Duration::from_secs(20), || async { sys.audit(g).await.agrees })
        .await;
    assert_eq!(sys.result(&nobody, g).await.status, SeckillStatus::None);
    assert_eq!(sys.redis_stock(g).await, Some(4));
    assert_eq!(sys.buy_order(&nobody, g).await, order + 1);
    assert_eq!(sys.redis_stock(g).await, Some(3));
}

/// A pending entry outlives its confirm (a kill -9 before the confirmations were cleared) while
/// the request still waits in the queue: the reconciler publishes it again, never fails it, also
/// once the sale has ended; the buyer ends with exactly one order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reconciler_never_fails_a_request_the_broker_holds() {
    let sys = spawn_system_with(Options { reconcile_after_secs: 6, ..Options::default() });
    let g = sys.create_sale(3, chrono::Duration::seconds(-5), chrono::Duration::seconds(3)).await.id;
    let buyer = sys.dev_token(3_001, "user").await;
    sys.stop_order().await;
    let (status, body) = sys.buy(&buyer, g).await;
    assert_eq!(status, 202, "{body}");
    let request_id = body["request_id"].as_str().unwrap().to_owned();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(sys.buy(&buyer, g).await.1["code"], "ENDED");
    // As if the process died before clearing it: the entry is back, long unconfirmed.
    let _: () =
        sys.redis().await.zadd(sys.redis_keys.pending(g), format!("3001:{request_id}"), 1_000).await.unwrap();
    sys.eventually("the reconciler published it again", Duration::from_secs(20), || async {
        sys.queue_depth(&sys.amqp_names.orders_queue()).await == 2
    })
    .await;
    assert_eq!(sys.result(&buyer, g).await.status, SeckillStatus::Queued, "not failed");
    sys.start_order();
    let r = sys.final_result(&buyer, g, Duration::from_secs(20)).await;
    assert_eq!(r.status, SeckillStatus::Success);
    sys.eventually("both copies consumed", Duration::from_secs(10), || async {
        sys.queue_depth(&sys.amqp_names.orders_queue()).await == 0
    })
    .await;
    assert_eq!(sys.active_orders(g).await, (1, 1));
    assert_eq!(sys.goods(g).await.stock_available, 2);
    assert_eq!(sys.queue_depth(&sys.amqp_names.orders_dead_queue()).await, 0);
}

/// The operator's view: the audit shows a Redis stock that disagrees with the authorities, the
/// repair sets it right, and only an admin may do either.
#[tokio::test]
async fn audit_finds_a_difference_and_repair_mends_it() {
    let sys = spawn_system();
    let g = sale(&sys, 10).await;
    let buyer = sys.dev_token(4_001, "user").await;
    sys.buy_order(&buyer, g).await;
    let audit = sys.audit(g).await;
    assert!(audit.agrees, "{:?}", audit.differences);
    assert_eq!((audit.redis.stock, audit.expected_redis_stock), (Some(9), 9));
    assert_eq!((audit.authority.active_orders, audit.authority.ledger_held), (1, 1));

    let _: () = sys.redis().await.set(sys.redis_keys.stock(g), 25).await.unwrap();
    let audit = sys.audit(g).await;
    assert!(!audit.agrees);
    assert!(audit.differences.iter().any(|d| d.contains("redis stock is 25")), "{:?}", audit.differences);

    let (status, body) =
        sys.post(&format!("/api/admin/goods/{g}/repair"), Some(&buyer), serde_json::Value::Null).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("FORBIDDEN")));
    let (status, body) = sys.get(&format!("/api/admin/goods/{g}/audit"), Some(&buyer)).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("FORBIDDEN")));
    let admin = sys.dev_token(1, "admin").await;
    let (status, body) = sys.get("/api/admin/goods/999999/audit", Some(&admin)).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("GOODS_NOT_FOUND")), "{body}");

    let (status, body) =
        sys.post(&format!("/api/admin/goods/{g}/repair"), Some(&admin), serde_json::Value::Null).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!((body["stock_before"].as_i64(), body["stock_after"].as_i64()), (Some(25), Some(9)));
    assert_eq!(body["audit"]["agrees"], true, "{body}");
    assert_eq!(sys.redis_stock(g).await, Some(9));
}

/// A buyer whose reservation Redis lost can be accepted again before the first request is
/// served: both deduct, one order is written, and the other request is answered with that
/// order (its deduction released, its unit back), never `failed`.
#[tokio::test]
async fn a_buyer_accepted_twice_is_answered_with_their_order() {
    let sys = spawn_system();
    let g = sale(&sys, 5).await;
    let buyer = sys.dev_token(5_001, "user").await;
    let order = sys.buy_order(&buyer, g).await;
    // The lost request, as the broker still held it: an epoch Redis no longer has.
    let lost =
        seckill_common::amqp::OrderRequest::new(uuid::Uuid::new_v4(), UserId::new(5_001).unwrap(), g, 1)
            .with_epoch(Some(seckill_common::scripts::Epoch::new(1_000)));
    sys.publish_as(
        Peer::Seckill,
        Peer::Order,
        &sys.amqp_names.orders_queue(),
        &serde_json::to_vec(&lost).unwrap(),
    )
    .await;
    sys.eventually("the second request deducted, then released", Duration::from_secs(20), || async {
        ledger_rows(&sys, g).await == (2, 1)
    })
    .await;
    let r = sys.result(&buyer, g).await;
    assert_eq!((r.status, r.order_id.map(|o| o.get())), (SeckillStatus::Success, Some(order)));
    assert_eq!(sys.active_orders(g).await, (1, 1));
    assert_eq!(sys.goods(g).await.stock_available, 4, "the second deduction was released");
    assert_eq!(sys.redis_stock(g).await, Some(4));
    assert!(sys.audit(g).await.agrees);
}

/// The stock ledger's rows of a sale, and how many of them are released.
async fn ledger_rows(sys: &System, g: GoodsId) -> (i64, i64) {
    use diesel_async::RunQueryDsl;
    #[derive(diesel::QueryableByName)]
    struct Row {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        rows: i64,
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        released: i64,
    }
    let mut conn = sys.stock_db.connect().await;
    let row: Row = diesel::sql_query(
        "SELECT COUNT(*) AS rows, COUNT(released_at) AS released FROM stock_ledger WHERE goods_id = $1",
    )
    .bind::<diesel::sql_types::BigInt, _>(g.get())
    .get_result(&mut conn)
    .await
    .unwrap();
    (row.rows, row.released)
}

//! The expiry storm: every unpaid order of a sale expires at once (order-service was down while
//! their delay ran out) and the release chain takes them in batches, with a duplicate, a key
//! nobody deducted and a poison message riding along at each step. Every unit comes back once,
//! in the database and in Redis, and every buyer may buy again.

use std::time::Duration;

use futures_util::future::join_all;
use seckill_common::amqp::{MESSAGE_VERSION, Release, ReleaseBatch, ReleaseReason, dead_queue};
use seckill_common::trust::Peer;
use seckill_common::{OrderId, UserId};
use uuid::Uuid;

use crate::helpers::{Options, spawn_system_with};

const SETTLE: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_of_expiries_gives_every_unit_back_once_and_everyone_may_buy_again() {
    const BUYERS: i64 = 60;
    let sys = &spawn_system_with(Options { order_ttl_secs: 2, ..Options::default() });
    let sale = sys.open_sale(BUYERS).await;
    let buyers: Vec<(String, i64)> = join_all((0..BUYERS).map(|i| async move {
        let token = sys.dev_token(5_000 + i, "user").await;
        let order = sys.buy_order(&token, sale.id).await;
        (token, order)
    }))
    .await;
    // Their delay runs out while order-service is down: the expiries pile up in the broker.
    sys.stop_order().await;

    // Riding along, at stock-service and at seckill-service: a batch with the first buyer's
    // release twice and the second buyer's id under a key nobody deducted (it must not give
    // back the second buyer's reservation), and a message that cannot be read.
    let first_key: Uuid = sys.order_key_of(buyers[0].1).await.parse().unwrap();
    let release = |order_key, order, user| Release {
        v: MESSAGE_VERSION,
        order_key,
        order_id: OrderId::new(order).unwrap(),
        user_id: UserId::new(user).unwrap(),
        goods_id: sale.id,
        reason: ReleaseReason::Expired,
    };
    let batch = serde_json::to_vec(&ReleaseBatch::new(vec![
        release(first_key, buyers[0].1, 5_000),
        release(first_key, buyers[0].1, 5_000),
        release(Uuid::new_v4(), buyers[1].1, 5_001),
    ]))
    .unwrap();
    let (releases, restocks) = (sys.amqp_names.stock_release_queue(), sys.amqp_names.restock_queue());
    sys.publish_as(Peer::Order, Peer::Stock, &releases, &batch).await;
    sys.publish_as(Peer::Order, Peer::Stock, &releases, br#"{"v":2,"releases":[]}"#).await;
    sys.publish_as(Peer::Stock, Peer::Seckill, &restocks, &batch).await;
    sys.publish_as(Peer::Stock, Peer::Seckill, &restocks, br#"{"v":2,"releases":"all"}"#).await;

    tokio::time::sleep(Duration::from_millis(2_500)).await;
    sys.start_order();
    sys.eventually("every unit back in the database and in redis", SETTLE, || async {
        sys.goods(sale.id).await.stock_available == BUYERS
            && sys.redis_stock(sale.id).await == Some(BUYERS)
            && sys.redis_users(sale.id).await == 0
    })
    .await;
    sys.eventually("the queues drained", SETTLE, || async {
        sys.queue_depth(&releases).await == 0
            && sys.queue_depth(&restocks).await == 0
            && sys.queue_depth(&sys.amqp_names.order_expire_queue()).await == 0
    })
    .await;
    // Nothing more comes back than went out.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(sys.goods(sale.id).await.stock_available, BUYERS);
    assert_eq!(sys.redis_stock(sale.id).await, Some(BUYERS));
    assert_eq!(sys.held_at_stock(sale.id).await, 0);
    assert_eq!(sys.active_orders(sale.id).await, (0, 0));
    assert_eq!(sys.queue_depth(&dead_queue(&releases)).await, 1, "only the poison release is dead");
    assert_eq!(sys.queue_depth(&dead_queue(&restocks)).await, 1, "only the poison restock is dead");
    for (token, order) in &buyers {
        assert_eq!(sys.order_status(token, *order).await, "expired");
    }

    // Every buyer may buy again, and the stock sells out exactly once more.
    let again: Vec<i64> = join_all(buyers.iter().map(|(token, _)| sys.buy_order(token, sale.id))).await;
    assert!(again.iter().zip(&buyers).all(|(new, (_, old))| new != old));
    assert_eq!(sys.active_orders(sale.id).await, (BUYERS, 1));
    assert_eq!(sys.redis_stock(sale.id).await, Some(0));
}

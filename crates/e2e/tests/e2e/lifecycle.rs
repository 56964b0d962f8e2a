//! An order's whole life: pay, cancel, expiry through the TTL queue, and the unit given back
//! everywhere (database, Redis stock, the buyer's reservation, every replica's flag).

use std::time::Duration;

use futures_util::future::join_all;
use seckill_common::amqp::{MESSAGE_VERSION, Release, ReleaseReason};
use seckill_common::api::{Role, SeckillStatus};
use seckill_common::trust::Peer;
use seckill_common::{OrderId, UserId};
use seckill_testkit::keys;

use crate::helpers::{Options, spawn_system, spawn_system_with};

/// Generous: the TTL queue, the release chain and the restock each take a hop.
const SETTLE: Duration = Duration::from_secs(20);

#[tokio::test]
async fn an_unpaid_order_expires_and_its_unit_sells_again() {
    let sys = spawn_system_with(Options { order_ttl_secs: 2, ..Options::default() });
    let sale = sys.open_sale(1).await;
    let (alice, bob) = (sys.dev_token(11, "user").await, sys.dev_token(12, "user").await);

    let order = sys.buy_order(&alice, sale.id).await;
    let (status, body) = sys.buy(&bob, sale.id).await;
    assert_eq!((status, body["code"].as_str()), (410, Some("SOLD_OUT")));

    sys.eventually("the order expires", SETTLE, || async {
        sys.order_status(&alice, order).await == "expired"
    })
    .await;
    sys.eventually("the unit is back in the database and in redis", SETTLE, || async {
        sys.goods(sale.id).await.stock_available == 1 && sys.redis_stock(sale.id).await == Some(1)
    })
    .await;
    assert_eq!(sys.redis_users(sale.id).await, 0, "alice's reservation is gone");
    assert_eq!(sys.result(&alice, sale.id).await.status, SeckillStatus::None);
    let (status, body) = sys.pay(&alice, order).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("ORDER_NOT_PAYABLE")));

    // Bob buys the unit that came back (the sold-out flag was cleared by the restock).
    let bobs = sys.buy_order(&bob, sale.id).await;
    assert_eq!(sys.order_status(&bob, bobs).await, "unpaid");
    assert_eq!(sys.active_orders(sale.id).await, (1, 1));
}

#[tokio::test]
async fn a_paid_order_outlives_its_ttl_and_releases_nothing() {
    let sys = spawn_system_with(Options { order_ttl_secs: 2, ..Options::default() });
    let sale = sys.open_sale(2).await;
    let buyer = sys.dev_token(21, "user").await;
    let order = sys.buy_order(&buyer, sale.id).await;

    let (status, body) = sys.pay(&buyer, order).await;
    assert_eq!((status, body["status"].as_str()), (200, Some("paid")));
    let (status, body) = sys.pay(&buyer, order).await;
    assert_eq!((status, body["status"].as_str()), (200, Some("paid")), "paying again is a no-op");
    let (status, body) = sys.cancel(&buyer, order).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("ORDER_NOT_CANCELLABLE")));

    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(sys.order_status(&buyer, order).await, "paid");
    assert_eq!(sys.goods(sale.id).await.stock_available, 1);
    assert_eq!(sys.redis_stock(sale.id).await, Some(1));
    assert_eq!(sys.held_at_stock(sale.id).await, 1);
    // Another user's payment of it is a 404, not a payment.
    let other = sys.dev_token(22, "user").await;
    assert_eq!(sys.pay(&other, order).await.0, 404);
}

#[tokio::test]
async fn a_cancel_releases_once_however_often_it_is_asked_or_delivered() {
    let sys = spawn_system();
    let sale = sys.open_sale(3).await;
    let buyer = sys.dev_token(31, "user").await;
    let order = sys.buy_order(&buyer, sale.id).await;
    assert_eq!(sys.redis_stock(sale.id).await, Some(2));

    let (status, body) = sys.cancel(&buyer, order).await;
    assert_eq!((status, body["status"].as_str()), (200, Some("cancelled")));
    let (status, body) = sys.cancel(&buyer, order).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("ORDER_NOT_CANCELLABLE")));
    sys.eventually("the unit is back", SETTLE, || async {
        sys.goods(sale.id).await.stock_available == 3 && sys.redis_stock(sale.id).await == Some(3)
    })
    .await;

    // The same release delivered twice more: nothing moves.
    let (_, body) = sys.order_by_id(&buyer, order).await;
    let release = Release {
        v: MESSAGE_VERSION,
        order_key: serde_json::from_value(sys.order_key_of(order).await.into()).unwrap(),
        order_id: OrderId::new(order).unwrap(),
        user_id: UserId::new(31).unwrap(),
        goods_id: sale.id,
        reason: ReleaseReason::Cancelled,
    };
    assert_eq!(body["status"], "cancelled");
    for _ in 0..2 {
        sys.publish_as(
            Peer::Order,
            Peer::Stock,
            &sys.amqp_names.stock_release_queue(),
            &serde_json::to_vec(&release).unwrap(),
        )
        .await;
    }
    sys.eventually("both copies consumed", SETTLE, || async {
        sys.queue_depth(&sys.amqp_names.stock_release_queue()).await == 0
            && sys.queue_depth(&sys.amqp_names.restock_queue()).await == 0
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(sys.goods(sale.id).await.stock_available, 3);
    assert_eq!(sys.redis_stock(sale.id).await, Some(3));
    assert_eq!(sys.held_at_stock(sale.id).await, 0);

    // They may buy again.
    let again = sys.buy_order(&buyer, sale.id).await;
    assert_ne!(again, order);
}

/// Payments arriving around the deadline: each order ends paid or expired, never both, and
/// every unit is accounted for in the database, the ledger and Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pay_racing_expiry_has_one_winner_per_order() {
    let sys = &spawn_system_with(Options { order_ttl_secs: 2, ..Options::default() });
    let sale = sys.open_sale(40).await;
    let buyers: Vec<(String, i64)> = join_all((0..40).map(|i| async move {
        let token = sys.dev_token(1_000 + i, "user").await;
        let order = sys.buy_order(&token, sale.id).await;
        (token, order)
    }))
    .await;
    // Spread the payments across the deadline.
    let answers = join_all(buyers.iter().enumerate().map(|(i, (token, order))| async move {
        tokio::time::sleep(Duration::from_millis(1_500 + 25 * i as u64)).await;
        sys.pay(token, *order).await
    }))
    .await;
    let paid_answers = answers.iter().filter(|(s, _)| *s == 200).count();
    assert!(
        answers.iter().all(|(s, b)| *s == 200 || (*s == 409 && b["code"] == "ORDER_NOT_PAYABLE")),
        "{answers:?}"
    );

    let mut expired = 0;
    for (token, order) in &buyers {
        let status = loop {
            let s = sys.order_status(token, *order).await;
            if s != "unpaid" {
                break s;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        match status.as_str() {
            "paid" => {}
            "expired" => expired += 1,
            other => panic!("order {order} ended {other}"),
        }
    }
    assert_eq!(40 - expired, paid_answers, "every 200 is a paid order, every paid order had a 200");
    sys.eventually("released units are back everywhere", SETTLE, || async {
        sys.goods(sale.id).await.stock_available == expired as i64
            && sys.redis_stock(sale.id).await == Some(expired as i64)
    })
    .await;
    assert_eq!(sys.held_at_stock(sale.id).await, 40 - expired as i64);
    assert_eq!(sys.active_orders(sale.id).await.0, 40 - expired as i64);
}

/// Two replicas behind the gateway, their flags held for a minute: after the sell-out both
/// answer from the flag (Redis is not asked: we put stock there behind their back); after the
/// orders expire, the restock clears both flags (one replica consumes it, the broadcast tells
/// the other), and both sell again well within the minute.
#[tokio::test]
async fn every_replica_follows_sell_out_and_restock() {
    let sys = spawn_system_with(Options {
        order_ttl_secs: 3,
        seckill_replicas: 2,
        sold_out_recheck_ms: 60_000,
        require_token: false,
        ..Options::default()
    });
    let sale = sys.open_sale(2).await;
    // Straight to one replica, with the credential the gateway would sign.
    let direct = |replica: usize, user: i64| {
        let path = format!("/api/seckill/{}/orders", sale.id);
        let (name, value) = keys::as_user(Peer::Seckill, "POST", &path, user, Role::User);
        sys.http.post(format!("{}{path}", sys.seckill[replica].url())).header(name, value).send()
    };
    // Replica 0 sells both units; replica 1 is sold out too.
    assert_eq!(direct(0, 40).await.unwrap().status(), 202);
    assert_eq!(direct(0, 41).await.unwrap().status(), 202);
    let mut orders = Vec::new();
    for user in [40, 41] {
        let token = sys.dev_token(user, "user").await;
        let order = sys.final_result(&token, sale.id, SETTLE).await.order_id.expect("an order").get();
        orders.push((token, order));
    }
    sys.eventually("replica 1 is sold out", SETTLE, || async {
        direct(1, 42).await.unwrap().status() == 410
    })
    .await;

    // Stock appears in Redis behind their back: both still answer from their flag.
    let mut redis = sys.redis().await;
    let stock_key = sys.redis_keys.stock(sale.id);
    let _: () = redis::AsyncCommands::set(&mut redis, &stock_key, 1).await.unwrap();
    for replica in 0..2 {
        assert_eq!(
            direct(replica, 43).await.unwrap().status(),
            410,
            "replica {replica} answers from its flag"
        );
    }
    let _: () = redis::AsyncCommands::set(&mut redis, &stock_key, 0).await.unwrap();

    // Both orders expire; both units come back.
    for (token, order) in &orders {
        sys.eventually("the order expires", SETTLE, || async {
            sys.order_status(token, *order).await == "expired"
        })
        .await;
    }
    sys.eventually("both units are back", SETTLE, || async { sys.redis_stock(sale.id).await == Some(2) })
        .await;
    sys.eventually("replica 0 sells again", SETTLE, || async {
        direct(0, 44).await.unwrap().status() == 202
    })
    .await;
    sys.eventually("replica 1 sells again", SETTLE, || async {
        direct(1, 45).await.unwrap().status() == 202
    })
    .await;
    assert_eq!(direct(0, 46).await.unwrap().status(), 410);
    assert_eq!(direct(1, 47).await.unwrap().status(), 410);
}

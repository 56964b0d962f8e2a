//! seckill-service starts while Redis and RabbitMQ are away (each behind a relay that
//! refuses), says what it waits for on `/readyz`, answers a buy it cannot queue with a 503
//! BUSY (its unit given back), and sells as soon as both are back, without a restart.

use std::time::Duration;

use seckill_testkit::relay::Relay;
use seckill_testkit::{amqp_url, readyz, redis_url, wait_ready};

use crate::helpers::spawn_unready_with;

#[tokio::test]
async fn starts_while_redis_and_the_broker_are_away_and_sells_once_they_are_back() {
    let redis = Relay::to_server_of(&redis_url(), false).await;
    let broker = Relay::to_server_of(&amqp_url(), false).await;
    let app = spawn_unready_with(|s| {
        s.redis.url = redis.route(&s.redis.url);
        s.amqp.url = broker.route(&s.amqp.url);
    });

    let alive = app.http.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(alive.status(), 200, "it serves while its servers are away");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, body) = readyz(&app.service.url()).await;
    assert_eq!(status, 503, "{body}");
    let line = |name: &str| body["checks"][name].as_str().unwrap_or_default().to_owned();
    assert!(line("redis").starts_with("waiting: scripts not loaded ("), "{body}");
    assert!(line("broker").starts_with("waiting: not connected ("), "{body}");

    // Redis back, the broker still away: a sale opens, and a buy that cannot be queued is a
    // 503 BUSY (try again) whose unit goes back to the sale.
    redis.forward();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while readyz(&app.service.url()).await.1["checks"]["redis"] != "ok" {
        assert!(std::time::Instant::now() < deadline, "the scripts were not loaded once Redis was back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let goods = app.open_sale(5).await;
    let (status, body) = app.buy(7, goods.id).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["code"], "BUSY", "the order queue is unavailable: {body}");
    assert_eq!(app.redis_stock(goods.id).await, Some(5), "the unit is given back");
    let (status, body) = readyz(&app.service.url()).await;
    assert_eq!(status, 503, "{body}");

    broker.forward();
    let took = wait_ready(&app.service.url(), Duration::from_secs(15)).await;
    assert!(took < Duration::from_secs(10), "ready {took:?} after the broker came back");
    let (status, body) = app.buy(8, goods.id).await;
    assert_eq!(status, 202, "{body}");
    let queued = app.wait_for_order_messages(1, Duration::from_secs(10)).await;
    assert_eq!(queued[0].goods_id, goods.id);
}

#[tokio::test]
async fn stops_promptly_while_its_servers_are_away() {
    let redis = Relay::to_server_of(&redis_url(), false).await;
    let broker = Relay::to_server_of(&amqp_url(), false).await;
    let app = spawn_unready_with(|s| {
        s.redis.url = redis.route(&s.redis.url);
        s.amqp.url = broker.route(&s.amqp.url);
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stopping = std::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(10), app.service.stop())
        .await
        .expect("a service waiting for its servers stops on SIGTERM all the same");
    assert!(stopping.elapsed() < Duration::from_secs(5), "stopped in {:?}", stopping.elapsed());
}

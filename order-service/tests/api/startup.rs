//! order-service starts while PostgreSQL, Redis and RabbitMQ are all away (each behind a relay
//! that refuses), says what it waits for on `/readyz`, answers 503 meanwhile, and once they
//! are back turns the buy request that waited in the queue into an order, without a restart.

use std::time::Duration;

use seckill_common::amqp::AmqpNames;
use seckill_common::config::AmqpSettings;
use seckill_common::scripts::StoredResult;
use seckill_common::trust::Peer;
use seckill_infra::amqp::{Declare, declare};
use seckill_testkit::relay::Relay;
use seckill_testkit::{amqp_url, database_server_url, readyz, redis_url, wait_ready};

use crate::helpers::{publish_signed_now, spawn_unready_with};

#[tokio::test]
async fn starts_while_its_servers_are_away_and_makes_the_waiting_order_once_they_are_back() {
    let database = Relay::to_server_of(&database_server_url(), false).await;
    let redis = Relay::to_server_of(&redis_url(), false).await;
    let broker = Relay::to_server_of(&amqp_url(), false).await;
    let app = spawn_unready_with(|s| {
        s.database.url = Some(database.route(s.database.url.as_deref().unwrap()));
        s.redis.url = redis.route(&s.redis.url);
        s.amqp.url = broker.route(&s.amqp.url);
    });

    let alive = app.http.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(alive.status(), 200, "it serves while its servers are away");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, body) = readyz(&app.service.url()).await;
    assert_eq!(status, 503, "{body}");
    let line = |name: &str| body["checks"][name].as_str().unwrap_or_default().to_owned();
    assert!(line("database").starts_with("waiting: migrations not applied yet ("), "{body}");
    assert!(line("redis").starts_with("waiting: scripts not loaded ("), "{body}");
    assert!(line("broker").starts_with("waiting: not connected ("), "{body}");
    let (status, body) = app.get(7, "/api/orders").await;
    assert_eq!((status, body["code"].as_str()), (503, Some("UNAVAILABLE")), "{body}");

    // A buy seckill-service accepted meanwhile: reserved in Redis, its request in the queue
    // (declared as seckill-service's publisher declares it).
    let goods = app.open_sale(5).await;
    let request = app.reserve(goods.id, 7).await;
    let queue = app.amqp_names.orders_queue();
    declare_as_seckill(&app.amqp, &app.amqp_names, &queue).await;
    publish_signed_now(&queue, Peer::Seckill, &serde_json::to_vec(&request).unwrap()).await;

    // The broker first: the request is taken, and handed back while the others are away.
    broker.forward();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(app.result(goods.id, 7).await, Some(StoredResult::Queued));
    redis.forward();
    database.forward();
    let took = wait_ready(&app.service.url(), Duration::from_secs(15)).await;
    assert!(took < Duration::from_secs(10), "ready {took:?} after the servers came back");
    let StoredResult::Success(id) = app.final_result(goods.id, 7, Duration::from_secs(15)).await else {
        panic!("the waiting request did not become an order");
    };
    assert_eq!(app.order(7, id).await.goods_id, goods.id);
}

async fn declare_as_seckill(amqp: &AmqpSettings, names: &AmqpNames, queue: &str) {
    let direct = AmqpSettings { url: amqp_url(), ..amqp.clone() };
    let conn = lapin::Connection::connect(&direct.url, lapin::ConnectionProperties::default()).await.unwrap();
    let channel = conn.create_channel().await.unwrap();
    declare(&channel, names, &direct, &[Declare::WorkQueue(queue.to_owned())]).await.unwrap();
    let _ = conn.close(200, "declared".into()).await;
}

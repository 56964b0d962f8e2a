//! Nobody is trusted for reaching the port: every route but the probes wants a credential of
//! a peer stock-service accepts, each internal route the one service it serves, and the
//! release queue takes messages from order-service only.

use lapin::BasicProperties;
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use reqwest::Method;
use seckill_common::amqp::{AmqpNames, MESSAGE_VERSION, Release, ReleaseReason, dead_queue};
use seckill_common::trust::{AUTH_HEADER, Peer, RequestFacts, Trust, TrustSettings};
use seckill_common::{OrderId, UserId};
use seckill_infra::amqp::{Declare, Destination, Publisher};
use seckill_testkit::keys;
use serde_json::json;
use uuid::Uuid;

use crate::helpers::spawn_app;
use crate::outage::wait_for;

#[tokio::test]
async fn requests_without_a_good_credential_are_401_and_probes_stay_open() {
    let app = spawn_app();
    let goods = app.create_goods(2).await;
    let path = format!("/api/goods/{}", goods.id);
    let facts = RequestFacts { method: "GET", path: &path, request_id: "" };

    // A key of the right length that is not the link's key.
    let stranger = TrustSettings {
        send: [("stock".to_owned(), "an-attacker-made-this-key-up-0123456789".to_owned())].into(),
        ..TrustSettings::default()
    };
    let stranger = Trust::new(Peer::Gateway, &stranger, &[Peer::Stock], &[]).unwrap();
    let gateway = keys::trust(Peer::Gateway);
    let stale =
        gateway.sign_request_expiring(Peer::Stock, &facts, None, chrono::Utc::now().timestamp_millis() - 1);
    let for_another_path =
        gateway.sign_request(Peer::Stock, &RequestFacts { path: "/api/goods", ..facts }, None);
    let for_order_service = gateway.sign_request(Peer::Order, &facts, None);
    for (what, header) in [
        ("none", None),
        ("forged", Some(stranger.sign_request(Peer::Stock, &facts, None))),
        ("stale", Some(stale)),
        ("another path's", Some(for_another_path)),
        ("order-service's", Some(for_order_service)),
        ("garbage", Some("v1.gateway.0.-.1.abc".to_owned())),
    ] {
        let mut req = app.http.get(app.url(&path)).header("x-user-id", "1").header("x-user-role", "admin");
        if let Some(h) = header {
            req = req.header(AUTH_HEADER, h);
        }
        let res = req.send().await.unwrap();
        assert_eq!(res.status(), 401, "{what} credential");
        let body: serde_json::Value = res.json().await.unwrap();
        assert_eq!(body["code"], "UNAUTHORIZED", "{what}");
    }
    let res = app.signed(Peer::Gateway, Method::GET, &path).send().await.unwrap();
    assert_eq!(res.status(), 200);
    for open in ["/healthz", "/readyz", "/metrics"] {
        assert_eq!(app.http.get(app.url(open)).send().await.unwrap().status(), 200, "{open}");
    }
}

#[tokio::test]
async fn internal_routes_take_only_the_service_they_serve() {
    let app = spawn_app();
    let goods = app.create_goods(2).await;
    let key = Uuid::new_v4();
    let deduct = json!({"order_key": key, "goods_id": goods.id});
    let res = app.http.post(app.url("/internal/stock/deduct")).json(&deduct).send().await.unwrap();
    assert_eq!(res.status(), 401);
    let (status, _) = app.post_as(Peer::Seckill, "/internal/stock/deduct", deduct.clone()).await;
    assert_eq!(status, 403);
    let (status, _) = app.post_as(Peer::Gateway, "/internal/stock/deduct", deduct.clone()).await;
    assert_eq!(status, 401);
    assert_eq!(app.post("/internal/stock/deduct", deduct).await.0, 200);

    // Releasing a paid order's key would sell its unit twice: nobody but order-service may.
    for from in [Peer::Seckill, Peer::Gateway] {
        let (status, _) = app.post_as(from, "/internal/stock/release", json!({"order_key": key})).await;
        assert!(status == 401 || status == 403, "{from}: {status}");
    }
    let res = app
        .http
        .post(app.url("/internal/stock/release"))
        .json(&json!({"order_key": key}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    assert_eq!(app.goods(&goods).await.stock_available, 1);
    app.assert_conserved(&goods).await;

    let held = format!("/internal/stock/{}/held", goods.id);
    assert_eq!(app.post_as(Peer::Order, &held, json!({"order_keys": []})).await.0, 403);
    assert_eq!(app.post_as(Peer::Seckill, &held, json!({"order_keys": []})).await.0, 200);
}

#[tokio::test]
async fn releases_from_anyone_but_order_service_are_refused() {
    let app = spawn_app();
    let goods = app.create_goods(3).await;
    let key = Uuid::new_v4();
    assert_eq!(
        app.post("/internal/stock/deduct", json!({"order_key": key, "goods_id": goods.id})).await.0,
        200
    );

    let names = AmqpNames::new(app.amqp.prefix.clone());
    let queue = names.stock_release_queue();
    let release = Release {
        v: MESSAGE_VERSION,
        order_key: key,
        order_id: OrderId::new(1).unwrap(),
        user_id: UserId::new(1).unwrap(),
        goods_id: goods.id,
        reason: ReleaseReason::Cancelled,
    };
    let body = serde_json::to_vec(&release).unwrap();
    // seckill-service signing with its own key, and a sender with no key at all.
    let seckill = Publisher::connect(
        &app.amqp,
        "test-seckill",
        keys::trust(Peer::Seckill),
        vec![Declare::WorkQueue(queue.clone())],
        vec![Destination::Queue(queue.clone())],
    )
    .await
    .unwrap();
    seckill.publish(Peer::Stock, &queue, &body, BasicProperties::default()).await.unwrap();
    let broker = seckill_infra::amqp::connect(&app.amqp.url, "test").await.unwrap();
    let raw = broker.create_channel().await.unwrap();
    raw.basic_publish(
        "".into(),
        queue.as_str().into(),
        lapin::options::BasicPublishOptions::default(),
        &body,
        BasicProperties::default().with_delivery_mode(2),
    )
    .await
    .unwrap();

    let channel = broker.create_channel().await.unwrap();
    let count = async |queue: &str| {
        let passive = QueueDeclareOptions { passive: true, ..QueueDeclareOptions::default() };
        channel.queue_declare(queue.into(), passive, FieldTable::default()).await.unwrap().message_count()
    };
    wait_for("both refused", async || count(&dead_queue(&queue)).await == 2).await;
    assert_eq!(app.goods(&goods).await.stock_available, 2, "a forged release gave a unit back");
    assert_eq!(count(&names.restock_queue()).await, 0);

    // The same release from order-service goes through.
    let order = Publisher::connect(
        &app.amqp,
        "test-order",
        keys::trust(Peer::Order),
        vec![],
        vec![Destination::Queue(queue.clone())],
    )
    .await
    .unwrap();
    order.publish(Peer::Stock, &queue, &body, BasicProperties::default()).await.unwrap();
    wait_for("the release", async || count(&names.restock_queue()).await == 1).await;
    assert_eq!(app.goods(&goods).await.stock_available, 3);
    app.assert_conserved(&goods).await;
    for p in [seckill, order] {
        p.close().await;
    }
    seckill_infra::amqp::close_quietly(&broker).await;
}

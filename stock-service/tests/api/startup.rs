//! stock-service starts while PostgreSQL and RabbitMQ are away (each behind a relay that
//! refuses), says so on `/readyz`, answers 503 rather than query a database not migrated yet,
//! and serves as soon as they are back, without a restart. A setting that is wrong still
//! stops the start, naming its key.

use std::time::Duration;

use seckill_testkit::relay::Relay;
use seckill_testkit::{TestDb, TestNames, readyz, wait_ready};
use uuid::Uuid;

use crate::helpers::{spawn_unready_with, test_settings};

#[tokio::test]
async fn starts_while_postgres_and_the_broker_are_away_and_serves_once_they_are_back() {
    let database = Relay::to_server_of(&seckill_testkit::database_server_url(), false).await;
    let broker = Relay::to_server_of(&seckill_testkit::amqp_url(), false).await;
    let app = spawn_unready_with(|s| {
        s.database.url = Some(database.route(s.database.url.as_deref().unwrap()));
        s.amqp.url = broker.route(&s.amqp.url);
    });

    let alive = app.http.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(alive.status(), 200, "it serves while its servers are away");
    // A few tries in: still waiting, saying for what.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, body) = readyz(&app.service.url()).await;
    assert_eq!(status, 503, "{body}");
    let why = body["checks"]["database"].as_str().unwrap();
    assert!(why.starts_with("waiting: migrations not applied yet ("), "{body}");

    // Work that needs the database: a clean 503, not a query on a database not migrated.
    let res = app
        .signed(seckill_common::trust::Peer::Gateway, reqwest::Method::GET, "/api/goods")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 503);
    let refused: serde_json::Value = res.json().await.unwrap();
    assert_eq!(refused["code"], "UNAVAILABLE", "{refused}");
    let (status, body) = app.release(Uuid::new_v4()).await;
    assert_eq!(status, 503, "{body}");

    database.forward();
    broker.forward();
    let took = wait_ready(&app.service.url(), Duration::from_secs(15)).await;
    assert!(took < Duration::from_secs(10), "ready {took:?} after the servers came back");
    // Its own database, created and migrated in the background: it sells.
    let goods = app.create_goods(3).await;
    let (status, body) = app.deduct(Uuid::new_v4(), &goods).await;
    assert_eq!(status, 200, "{body}");
    app.assert_conserved(&goods).await;
}

#[tokio::test]
async fn a_wrong_setting_still_stops_the_start_naming_its_key() {
    let db = TestDb::new("stockwrong");
    let mut names = TestNames::new();

    let mut settings = test_settings(&db, &mut names);
    settings.database.url = Some(format!("{}/not-a-name", seckill_testkit::database_server_url()));
    let e = stock_service::startup::build(settings).await.err().expect("a bad database name stops it");
    assert!(format!("{e:#}").contains("SECKILL__DATABASE__URL"), "{e:#}");

    let mut settings = test_settings(&db, &mut names);
    settings.amqp.url = "http://127.0.0.1:5672/".into();
    let e = stock_service::startup::build(settings).await.err().expect("a bad broker URL stops it");
    assert!(format!("{e:#}").contains("SECKILL__AMQP__URL"), "{e:#}");
}

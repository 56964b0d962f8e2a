//! The database failing under stock-service: the API answers 503, never 500, and the next call
//! succeeds on a fresh connection; a release that fails is tried again, never dead-lettered.

use std::time::{Duration, Instant};

use diesel::sql_types::{BigInt, Integer};
use diesel_async::{AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use lapin::BasicProperties;
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use seckill_common::amqp::{AmqpNames, MESSAGE_VERSION, Release, ReleaseReason, dead_queue};
use seckill_common::trust::Peer;
use seckill_common::{OrderId, UserId};
use seckill_infra::amqp::{Declare, Destination, Publisher};
use seckill_testkit::keys;
use serde_json::json;
use uuid::Uuid;

use crate::helpers::{spawn_app, spawn_app_with};

#[derive(diesel::QueryableByName)]
struct Number {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

async fn number(conn: &mut AsyncPgConnection, sql: &str) -> i64 {
    diesel::sql_query(sql).get_result::<Number>(conn).await.unwrap().n
}

/// Polls `check` every 20 ms until it holds; panics naming `what` after 10 s.
pub async fn wait_for<F: AsyncFnMut() -> bool>(what: &str, mut check: F) {
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < Duration::from_secs(10), "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Terminates every backend of the connection's database but its own and `spare`'s.
async fn terminate_backends(conn: &mut AsyncPgConnection, spare: i32) {
    diesel::sql_query(
        "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid() AND pid <> $1",
    )
    .bind::<Integer, _>(spare)
    .execute(conn)
    .await
    .unwrap();
}

#[tokio::test]
async fn a_terminated_database_connection_is_a_503_and_the_next_call_succeeds() {
    let app = spawn_app();
    let goods = app.create_goods(3).await;
    let mut watch = app.db.connect().await;
    let mut locker = app.db.connect().await;
    let locker_pid = number(&mut locker, "SELECT pg_backend_pid()::bigint AS n").await as i32;

    // Idle pooled connections killed: the pool tries each one before lending it, so a call
    // gets a fresh connection and succeeds.
    terminate_backends(&mut watch, locker_pid).await;
    assert_eq!(app.deduct(Uuid::new_v4(), &goods).await, (200, json!({"deducted": true})));

    // A deduct in flight, queued on the sale's row lock, when its backend is terminated.
    locker
        .batch_execute(&format!("BEGIN; SELECT 1 FROM goods WHERE id = {} FOR UPDATE", goods.id))
        .await
        .unwrap();
    let key = Uuid::new_v4();
    let kill = async {
        let waiting = "SELECT COUNT(*) AS n FROM pg_stat_activity \
                       WHERE datname = current_database() AND wait_event_type = 'Lock'";
        wait_for("the deduct to wait on the lock", async || number(&mut watch, waiting).await == 1).await;
        terminate_backends(&mut watch, locker_pid).await;
    };
    let ((status, body), ()) = tokio::join!(app.deduct(key, &goods), kill);
    assert_eq!((status, body["code"].as_str()), (503, Some("UNAVAILABLE")), "{body}");
    locker.batch_execute("ROLLBACK").await.unwrap();

    // Nothing of it was kept; the retry goes through.
    assert_eq!(app.deduct(key, &goods).await, (200, json!({"deducted": true})));
    assert_eq!(app.goods(&goods).await.stock_available, 1);
    app.assert_conserved(&goods).await;
}

#[tokio::test]
async fn a_release_that_keeps_failing_is_tried_again_never_dead_lettered() {
    // One try only: before, the first failure sent a release to the dead letters.
    let app = spawn_app_with(|s| s.amqp.max_attempts = 1);
    let goods = app.create_goods(3).await;
    let key = Uuid::new_v4();
    assert_eq!(app.deduct(key, &goods).await.0, 200);

    // Every release fails (not an outage: an error of the query's own), counting its tries in
    // a sequence, which a failed transaction does not roll back.
    let mut conn = app.db.connect().await;
    conn.batch_execute(
        "CREATE SEQUENCE release_tries;
         CREATE FUNCTION fail_release() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN PERFORM nextval('release_tries'); RAISE EXCEPTION 'injected failure'; END $$;
         CREATE TRIGGER fail_release BEFORE UPDATE ON stock_ledger
         FOR EACH ROW EXECUTE FUNCTION fail_release();",
    )
    .await
    .unwrap();

    let names = AmqpNames::new(app.amqp.prefix.clone());
    let queue = names.stock_release_queue();
    let publisher = Publisher::connect(
        &app.amqp,
        "test",
        keys::trust(Peer::Order),
        vec![Declare::WorkQueue(queue.clone())],
        vec![Destination::Queue(queue.clone())],
    )
    .await
    .unwrap();
    publisher.publish(Peer::Stock, &queue, b"not json", BasicProperties::default()).await.unwrap();
    let release = Release {
        v: MESSAGE_VERSION,
        order_key: key,
        order_id: OrderId::new(1).unwrap(),
        user_id: UserId::new(1).unwrap(),
        goods_id: goods.id,
        reason: ReleaseReason::Cancelled,
    };
    publisher
        .publish(Peer::Stock, &queue, &serde_json::to_vec(&release).unwrap(), BasicProperties::default())
        .await
        .unwrap();

    let tries = "SELECT CASE WHEN is_called THEN last_value ELSE 0 END AS n FROM release_tries";
    wait_for("a second try", async || number(&mut conn, tries).await >= 2).await;
    // Only the undecodable message is a dead letter.
    let broker = seckill_infra::amqp::connect(&app.amqp.url, "test").await.unwrap();
    let channel = broker.create_channel().await.unwrap();
    let count = async |queue: &str| {
        let passive = QueueDeclareOptions { passive: true, ..QueueDeclareOptions::default() };
        channel.queue_declare(queue.into(), passive, FieldTable::default()).await.unwrap().message_count()
    };
    assert_eq!(count(&dead_queue(&queue)).await, 1);

    // Fixed: the release goes through and is forwarded to seckill-service.
    conn.batch_execute("DROP TRIGGER fail_release ON stock_ledger").await.unwrap();
    wait_for("the release", async || count(&names.restock_queue()).await == 1).await;
    assert_eq!(app.goods(&goods).await.stock_available, 3);
    assert_eq!(count(&dead_queue(&queue)).await, 1);
    app.assert_conserved(&goods).await;
    publisher.close().await;
    seckill_infra::amqp::close_quietly(&broker).await;
}

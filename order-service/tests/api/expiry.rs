//! Expiry messages, as the delay queue hands them on: each unpaid order among them expires and
//! its release goes out once; a copy of a message that comes back (redelivered after a crash,
//! or a retry) sends the releases of its orders expired before again; a release the broker
//! would not take is owed to the sweeper, never dropped.

use std::time::{Duration, Instant};

use seckill_common::amqp::ReleaseReason;
use seckill_common::api::OrderStatus;
use seckill_infra::amqp::Declare;

use crate::helpers::spawn_app;

fn ids_and_reasons(releases: &[seckill_common::amqp::Release]) -> Vec<(i64, ReleaseReason)> {
    let mut got: Vec<_> = releases.iter().map(|r| (r.order_id.get(), r.reason)).collect();
    got.sort_unstable_by_key(|(id, _)| *id);
    got
}

#[tokio::test]
async fn an_expiry_expires_the_unpaid_orders_and_releases_each_once() {
    let app = spawn_app();
    let g = app.open_sale(5).await.id;
    let (unpaid, paid, also_unpaid) =
        (app.buy_order(g, 7).await, app.buy_order(g, 8).await, app.buy_order(g, 9).await);
    assert_eq!(app.post(8, &format!("/api/orders/{paid}/pay")).await.0, 200);

    // One message with all three, an order that does not exist, and one id twice.
    app.publish_expiry(&[unpaid, paid, also_unpaid, 999_999, unpaid]).await;
    let releases = app.wait_for_releases(2, Duration::from_secs(10)).await;
    assert_eq!(
        ids_and_reasons(&releases),
        vec![(unpaid, ReleaseReason::Expired), (also_unpaid, ReleaseReason::Expired)]
    );
    assert_eq!(app.order(7, unpaid).await.status, OrderStatus::Expired);
    assert_eq!(app.order(8, paid).await.status, OrderStatus::Paid, "a paid order does not expire");
    // Recorded with the expiry itself: the sweeper owes nothing.
    assert!(app.release_sent(unpaid).await && app.release_sent(also_unpaid).await);

    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(app.take_releases().await.is_empty(), "each released once");
}

#[tokio::test]
async fn an_expiry_message_that_comes_back_sends_the_releases_of_its_orders_expired_before() {
    let app = spawn_app();
    let g = app.open_sale(5).await.id;
    let (expired, cancelled) = (app.buy_order(g, 7).await, app.buy_order(g, 8).await);
    assert_eq!(app.post(8, &format!("/api/orders/{cancelled}/cancel")).await.0, 200);
    assert_eq!(app.wait_for_releases(1, Duration::from_secs(5)).await.len(), 1, "the cancel's release");
    // An earlier try of the message expired the order (the statement sets release_sent_at
    // with the status) and died before the broker confirmed its release.
    app.sql(&format!(
        "UPDATE orders SET status = 'expired', updated_at = now(), release_sent_at = now() WHERE id = {expired}"
    ))
    .await;

    app.publish_expiry(&[expired, cancelled]).await;
    let releases = app.wait_for_releases(1, Duration::from_secs(10)).await;
    assert_eq!(ids_and_reasons(&releases), vec![(expired, ReleaseReason::Expired)]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(app.take_releases().await.is_empty(), "a cancelled order's release is its own row's to send");
}

#[tokio::test]
async fn a_release_the_broker_does_not_take_is_owed_to_the_sweeper_and_sent_when_it_does() {
    let app = spawn_app();
    let g = app.open_sale(5).await.id;
    let order = app.buy_order(g, 7).await;
    // The release queue gone: every publish to it comes back unroutable.
    let queue = app.amqp_names.stock_release_queue();
    let conn = lapin::Connection::connect(&seckill_testkit::amqp_url(), Default::default()).await.unwrap();
    let channel = conn.create_channel().await.unwrap();
    channel.queue_delete(queue.as_str().into(), Default::default()).await.unwrap();

    app.publish_expiry(&[order]).await;
    app.wait_for_status(7, order, OrderStatus::Expired, Duration::from_secs(10)).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while app.release_sent(order).await {
        assert!(Instant::now() < deadline, "the release not confirmed, yet not owed to the sweeper");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The queue back: the expiry message, handed back to its queue meanwhile, sends it.
    seckill_infra::amqp::declare(&channel, &app.amqp_names, &app.amqp, &[Declare::WorkQueue(queue)])
        .await
        .unwrap();
    let releases = app.wait_for_releases(1, Duration::from_secs(10)).await;
    assert_eq!(ids_and_reasons(&releases), vec![(order, ReleaseReason::Expired)]);
    let _ = conn.close(200, "done".into()).await;
}

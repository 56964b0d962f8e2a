//! The sweeper, the safety net behind the delay queue and the publish of a release: an unpaid
//! order past its expiry whose expiry message never came is expired and its unit released; a
//! release owed since a crash is published.

use std::time::Duration;

use seckill_common::amqp::ReleaseReason;
use seckill_common::api::OrderStatus;

use crate::helpers::{TestApp, spawn_app_with};

/// Sweeps every second, acting on what is a second overdue.
fn spawn_sweeping_app() -> TestApp {
    spawn_app_with(|s| {
        s.order.sweep_interval_secs = 1;
        s.order.sweep_grace_secs = 1;
    })
}

#[tokio::test]
async fn an_overdue_order_whose_expiry_never_came_is_expired_and_released() {
    let app = spawn_sweeping_app();
    let g = app.open_sale(5).await.id;
    let overdue = app.buy_order(g, 7).await;
    let current = app.buy_order(g, 8).await;
    // Its delay message is still half an hour away (order.ttl_secs): as if it were lost, the
    // order's deadline is moved a minute into the past.
    app.sql(&format!("UPDATE orders SET expires_at = now() - interval '1 minute' WHERE id = {overdue}"))
        .await;

    app.wait_for_status(7, overdue, OrderStatus::Expired, Duration::from_secs(10)).await;
    let releases = app.wait_for_releases(1, Duration::from_secs(5)).await;
    assert_eq!(releases.len(), 1, "{releases:?}");
    let r = releases[0];
    assert_eq!(
        (r.order_id.get(), r.user_id.get(), r.goods_id, r.reason),
        (overdue, 7, g, ReleaseReason::Expired)
    );
    assert!(app.release_sent(overdue).await, "recorded as sent");

    // A few more sweeps: the release is not sent twice; the order within its time stays.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(app.take_releases().await.is_empty(), "released once");
    assert_eq!(app.order(8, current).await.status, OrderStatus::Unpaid);
    let (status, body) = app.post(7, &format!("/api/orders/{overdue}/pay")).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("ORDER_NOT_PAYABLE")), "too late to pay");
}

#[tokio::test]
async fn an_owed_release_is_published_again_and_recorded() {
    let app = spawn_sweeping_app();
    let g = app.open_sale(5).await.id;
    let owed = app.buy_order(g, 7).await;
    let settled = app.buy_order(g, 8).await;
    // Cancelled with its release never published (the process died between the update and the
    // publish); and one whose release went out as it should.
    app.sql(&format!(
        "UPDATE orders SET status = 'cancelled', updated_at = now() - interval '1 minute' WHERE id = {owed}"
    ))
    .await;
    assert_eq!(app.post(8, &format!("/api/orders/{settled}/cancel")).await.0, 200);
    let first = app.wait_for_releases(2, Duration::from_secs(10)).await;
    let mut released: Vec<(i64, ReleaseReason)> =
        first.iter().map(|r| (r.order_id.get(), r.reason)).collect();
    released.sort_unstable_by_key(|(id, _)| *id);
    let mut want = vec![(owed, ReleaseReason::Cancelled), (settled, ReleaseReason::Cancelled)];
    want.sort_unstable_by_key(|(id, _)| *id);
    assert_eq!(released, want);
    assert!(app.release_sent(owed).await && app.release_sent(settled).await);

    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(app.take_releases().await.is_empty(), "each released once");
}

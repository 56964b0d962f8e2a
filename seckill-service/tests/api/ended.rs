//! A shop that has run sales for years: the ended ones cost nothing at rest. The reconciler
//! looks after the live sales and the ones that ended (or were touched) less than
//! `seckill.ended_grace_secs` ago, and leaves the 10,000 that ended long ago alone, whatever
//! stock-service holds; a request for one of them brings it back for a grace period.

use std::time::{Duration, Instant};

use reqwest::Method;
use seckill_common::api::Role;
use seckill_testkit::insert_ended_sales_blocking;

use crate::helpers::{TestApp, spawn_app_seeded};

const GRACE_SECS: u64 = 3;

/// The reconciler's `seckill_reconciler_sales_watched` gauge (this test's process is the
/// service's: nextest runs each test in a process of its own).
fn watched() -> Option<u64> {
    let text = seckill_web::metrics::handle().render();
    text.lines()
        .find_map(|l| l.strip_prefix("seckill_reconciler_sales_watched "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}

/// Waits (up to 10 s) for the gauge to read `want`; the readings on the way.
async fn wait_watched(want: u64) -> Vec<Option<u64>> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    loop {
        let now = watched();
        if seen.last() != Some(&now) {
            seen.push(now);
        }
        if now == Some(want) {
            return seen;
        }
        assert!(Instant::now() < deadline, "the reconciler never watched {want} sales: {seen:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn get(app: &TestApp, path: &str, role: Role) -> u16 {
    app.as_user(7, role, Method::GET, path).send().await.unwrap().status().as_u16()
}

#[tokio::test]
async fn ten_thousand_ended_sales_are_left_alone_and_one_touched_is_watched_for_the_grace() {
    let app = spawn_app_seeded(
        |db| insert_ended_sales_blocking(db, 10_000),
        |s| {
            s.seckill.ended_grace_secs = GRACE_SECS;
            // Below the grace, as the settings demand, and above the confirm timeout.
            s.seckill.reconcile_after_secs = 2;
            s.amqp.confirm_timeout_ms = 1_000;
        },
    );
    let live = [app.open_sale(5).await, app.open_sale(5).await];
    // From the start, only the live ones: warm-up read none of the ended ones.
    let seen = wait_watched(2).await;
    assert!(seen.iter().flatten().all(|n| *n <= 2), "an ended sale was watched: {seen:?}");

    // A buyer's result poll for a sale that ended a day ago (the 1,001st inserted) brings it
    // under the reconciler's eye, for the grace period...
    let old = 1_001;
    assert_eq!(get(&app, &format!("/api/seckill/{old}/result"), Role::User).await, 200);
    wait_watched(3).await;
    let touched = Instant::now();
    // ...then it is left alone again.
    wait_watched(2).await;
    assert!(touched.elapsed() >= Duration::from_secs(GRACE_SECS - 1), "left after {:?}", touched.elapsed());

    // So does an operator's audit.
    assert_eq!(get(&app, &format!("/api/admin/goods/{old}/audit"), Role::Admin).await, 200);
    wait_watched(3).await;
    wait_watched(2).await;

    // The live ones were looked after throughout: a buy still works.
    let (status, body) = app.buy(11, live[0].id).await;
    assert_eq!(status, 202, "{body}");
}

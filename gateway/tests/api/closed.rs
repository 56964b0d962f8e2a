//! A sale seckill-service just called gone (`410`) is answered by the gateway itself for
//! `sold_out.remember_ms`: no hop; the click still counts against the user's buy limit.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gateway::configuration::Settings;

use crate::helpers::{Echo, TestApp, metric, settings, user_token};

const SOLD_OUT: &str = r#"{"code":"SOLD_OUT","message":"sold out"}"#;

/// A gateway whose seckill-service answers every call `410 SOLD_OUT`, and that service's count
/// of calls.
fn gone_sale(change: impl FnOnce(&mut Settings)) -> (TestApp, Arc<AtomicUsize>) {
    let seckill = Echo::new("seckill").status(410).body(SOLD_OUT);
    let calls = seckill.calls.clone();
    let (seckill, order, stock) = (seckill.start(), Echo::new("order").start(), Echo::new("stock").start());
    let mut s = settings(&seckill.url(), &order.url(), &stock.url());
    change(&mut s);
    (TestApp::start(s, vec![seckill, order, stock]), calls)
}

async fn click(app: &TestApp, path: &str, user: i64) -> (u16, String) {
    let res = app.post(path).bearer_auth(user_token(user)).send().await.unwrap();
    (res.status().as_u16(), res.text().await.unwrap())
}

#[tokio::test]
async fn after_a_410_the_gateway_answers_the_sales_clicks_itself_until_it_is_stale() {
    let (app, calls) = gone_sale(|s| s.sold_out.remember_ms = 500);

    // Ten buyers, one click each, on the order and the path-token routes of sale 7.
    for user in 0..10 {
        let path = if user % 2 == 0 { "/api/seckill/7/orders" } else { "/api/seckill/7/token" };
        assert_eq!(click(&app, path, 100 + user).await, (410, SOLD_OUT.to_owned()), "click {user}");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1, "one click reached seckill-service");
    assert_eq!(metric(&app, "gateway_closed_sale_answers_total").await, 9.0);
    // Every click counted against its user's shared buy limit, answered here or not.
    assert_eq!(metric(&app, "gateway_rate_limit_shared_asks_total").await, 10.0);

    // Another sale, and the result poll, are still forwarded.
    assert_eq!(click(&app, "/api/seckill/8/orders", 200).await.0, 410);
    let res = app.get("/api/seckill/7/result").bearer_auth(user_token(201)).send().await.unwrap();
    assert_eq!(res.status(), 410);
    assert_eq!(calls.load(Ordering::SeqCst), 3);

    // Stale: the next click on sale 7 asks seckill-service again (a unit given back sells).
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(click(&app, "/api/seckill/7/orders", 202).await.0, 410);
    assert_eq!(calls.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn the_users_limit_still_counts_the_clicks_answered_here() {
    let (app, calls) = gone_sale(|s| {
        s.rate_limit.buy.per_sec = Some(1);
        s.rate_limit.buy.burst = Some(4);
    });

    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(click(&app, "/api/seckill/7/orders", 42).await.0);
    }

    assert_eq!(statuses, [410, 410, 410, 410, 429, 429]);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn remember_zero_forwards_every_click() {
    let (app, calls) = gone_sale(|s| s.sold_out.remember_ms = 0);

    for user in 0..5 {
        assert_eq!(click(&app, "/api/seckill/7/orders", 300 + user).await.0, 410);
    }

    assert_eq!(calls.load(Ordering::SeqCst), 5);
}

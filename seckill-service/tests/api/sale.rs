//! `GET /api/seckill/{goods_id}/state`: a sale's window, sold-out flag and clock, from memory.

use std::time::Duration;

use chrono::Utc;
use redis::AsyncCommands;
use reqwest::Method;
use seckill_common::api::SaleState;
use seckill_common::trust::Peer;
use seckill_testkit::keys;

use crate::helpers::{Answer, TestApp, answer, spawn_app_with};

/// The state as the gateway asks for it: anonymous, signed for seckill-service.
async fn sale_state(http: &reqwest::Client, base: &str, goods: &str) -> (Answer, Option<String>) {
    let path = format!("/api/seckill/{goods}/state");
    let (name, value) = keys::as_gateway(Peer::Seckill, Method::GET.as_str(), &path);
    let res = http.get(format!("{base}{path}")).header(name, value).send().await.unwrap();
    let cache = res.headers().get("cache-control").map(|v| v.to_str().unwrap().to_owned());
    (answer(res).await, cache)
}

fn spawn() -> TestApp {
    // A flag that stays up for the whole test: what is checked is that it is read.
    spawn_app_with(|s| s.seckill.sold_out_recheck_ms = 60_000)
}

#[tokio::test]
async fn the_state_carries_the_window_the_flag_and_the_clock_and_follows_the_sell_out() {
    let app = spawn();
    let goods = app.open_sale(2).await;
    let base = app.service.url();

    let before = Utc::now().timestamp_millis();
    let ((status, body), cache) = sale_state(&app.http, &base, &goods.id.to_string()).await;
    let after = Utc::now().timestamp_millis();
    assert_eq!(status, 200, "{body}");
    assert_eq!(cache.as_deref(), Some("no-store"), "the clock must never come from a cache");
    let state: SaleState = serde_json::from_value(body).unwrap();
    assert_eq!((state.goods_id, state.start_at, state.end_at), (goods.id, goods.start_at, goods.end_at));
    assert!(!state.sold_out);
    assert!((before..=after).contains(&state.now_ms), "{before} <= {} <= {after}", state.now_ms);

    assert_eq!(app.buy(70, goods.id).await.0, 202);
    assert_eq!(app.buy(71, goods.id).await.0, 202);
    assert_eq!(app.buy(72, goods.id).await.0, 410);
    let ((status, body), _) = sale_state(&app.http, &base, &goods.id.to_string()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["sold_out"], true, "{body}");
}

#[tokio::test]
async fn a_known_sale_is_answered_without_stock_service_and_an_unknown_one_is_404() {
    let app = spawn();
    let goods = app.open_sale(5).await;
    let base = app.service.url();
    let http = app.http.clone();

    let ((status, body), _) = sale_state(&http, &base, "987654321").await;
    assert_eq!((status, body["code"].as_str()), (404, Some("GOODS_NOT_FOUND")), "{body}");
    let ((status, body), _) = sale_state(&http, &base, "0").await;
    assert_eq!((status, body["code"].as_str()), (400, Some("INVALID_INPUT")), "{body}");

    // The sale book remembers the sale: stock-service gone, the state is still answered.
    app._stock.stop().await;
    let ((status, body), _) = sale_state(&http, &base, &goods.id.to_string()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["goods_id"], goods.id.get());
}

/// Sold out, then nobody clicks: the flag lapses (`sold_out_recheck_ms`), and the page opened
/// then is still told sold out (one read of the Redis stock raises the flag again), not shown a
/// live buy button; once a unit is back, it is told so at the next lapse.
#[tokio::test]
async fn a_quiet_sold_out_sale_stays_sold_out_on_its_page_until_a_unit_comes_back() {
    const RECHECK_MS: u64 = 300;
    let app = spawn_app_with(|s| s.seckill.sold_out_recheck_ms = RECHECK_MS);
    let goods = app.open_sale(1).await;
    let base = app.service.url();
    let sold_out = |app: &TestApp| {
        let (http, base, g) = (app.http.clone(), base.clone(), goods.id.to_string());
        async move {
            let ((status, body), _) = sale_state(&http, &base, &g).await;
            assert_eq!(status, 200, "{body}");
            body["sold_out"].as_bool().unwrap()
        }
    };
    assert_eq!(app.buy(80, goods.id).await.0, 202);
    assert_eq!(app.buy(81, goods.id).await.0, 410);
    assert!(sold_out(&app).await);

    let lapse = Duration::from_millis(RECHECK_MS * 2);
    tokio::time::sleep(lapse).await;
    assert!(sold_out(&app).await, "the flag lapsed with nobody clicking: still sold out");
    assert_eq!(app.redis_stock(goods.id).await, Some(0));

    // A unit comes back (an order expired or was cancelled) and its broadcast was missed.
    let mut redis = app.redis().await;
    let _: () = redis.set(app.redis_keys.stock(goods.id), 1).await.unwrap();
    tokio::time::sleep(lapse).await;
    assert!(!sold_out(&app).await, "a unit is back: the page offers it");
}

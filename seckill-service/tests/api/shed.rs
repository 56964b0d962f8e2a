//! Load shedding: past the bound on requests at once (fixed here at 2: `seckill.min_in_flight`
//! = `max_in_flight`), a buyer is told 503 `BUSY` at once, and what they hold (their path token, the stock) is untouched.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use reqwest::Method;
use seckill_common::api::Role;
use seckill_common::headers;

use crate::helpers::{answer, spawn_app_with};

#[tokio::test]
async fn past_the_in_flight_bound_a_buyer_is_busy_at_once_and_keeps_their_token() {
    let app = spawn_app_with(|s| {
        s.seckill.max_in_flight = 2;
        s.seckill.min_in_flight = 2;
    });
    let g = app.open_sale(5).await.id;
    let (status, body) = app.path_token(62, g).await;
    assert_eq!(status, 200, "{body}");
    let token = body["token"].as_str().unwrap().to_owned();

    // Two result polls of buyers Redis knows nothing of hold both slots: the order authority
    // takes two seconds to answer them.
    app.orders.book.delay_ms.store(2_000, Ordering::SeqCst);
    let polls_done = AtomicBool::new(false);
    let polls = async {
        let answers = tokio::join!(app.result(60, g), app.result(61, g));
        polls_done.store(true, Ordering::SeqCst);
        answers
    };
    let order = async {
        // Until both polls are at the order authority.
        for _ in 0..500 {
            if app.orders.book.signed_calls.load(Ordering::SeqCst) >= 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let path = format!("/api/seckill/{g}/orders");
        let res = app
            .as_user(62, Role::User, Method::POST, &path)
            .header(headers::SECKILL_TOKEN, &token)
            .send()
            .await
            .unwrap();
        let answered_while_held = !polls_done.load(Ordering::SeqCst);
        let retry_after = res.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
        (answer(res).await, retry_after, answered_while_held)
    };
    let ((first, second), ((status, body), retry_after, answered_while_held)) = tokio::join!(polls, order);

    assert_eq!((status, body["code"].as_str()), (503, Some("BUSY")), "{body}");
    assert_eq!(retry_after.as_deref(), Some("1"));
    assert!(answered_while_held, "the refusal did not wait for the requests in flight");
    assert_eq!((first.0, second.0), (200, 200), "the requests in flight finish: {first:?} {second:?}");
    // Nothing was touched: the stock is whole and the same token buys once a slot is free.
    assert_eq!(app.redis_stock(g).await, Some(5));
    app.orders.book.delay_ms.store(0, Ordering::SeqCst);
    let (status, body) = app.order(62, g, Some(&token)).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(app.redis_stock(g).await, Some(4));
}

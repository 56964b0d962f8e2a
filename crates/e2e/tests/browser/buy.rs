//! A buyer's whole way through a sale's page: the countdown, the button coming alive when the
//! sale opens, the buy, the order (told on a stream, without a poll), the payment.

use seckill_e2e::spawn_system;

use crate::browser::{self, PATIENCE};

#[tokio::test]
async fn a_buyer_waits_for_the_sale_buys_and_pays() {
    let Some((browser, sys)) = browser::start("a_buyer_waits_for_the_sale_buys_and_pays", spawn_system).await
    else {
        return;
    };
    // Opens in a few seconds: long enough to see the countdown, short enough for a test.
    let sale = sys.create_sale(5, chrono::Duration::seconds(4), chrono::Duration::hours(1)).await;

    browser.open(&sys.url(&format!("/sales/{}", sale.id))).await;
    browser.sign_in(71).await;
    let countdown = browser.wait_text("countdown", PATIENCE, |t| t.starts_with("Opens in 00:00:0")).await;
    assert!(!browser.enabled("buy").await, "the button waits for the sale ({countdown})");
    browser.screenshot("countdown").await;

    browser.wait_until("the button comes alive as the sale opens", || browser.enabled("buy")).await;
    assert!(browser.text("countdown").await.starts_with("On now: closes in "));
    browser.record_fetches().await;
    browser.click("buy").await;
    let said = browser.wait_text("status", PATIENCE, |t| t.starts_with("You got it: order ")).await;
    let order_id: i64 = browser.text("order-id").await.parse().expect("an order id on the page");
    assert_eq!(said, format!("You got it: order {order_id}"));
    // The order was told on the buy's stream: not one poll.
    let fetched = browser.fetched().await;
    let to = |path: &str| {
        fetched.iter().filter(|url| url.ends_with(&format!("/api/seckill/{}/{path}", sale.id))).count()
    };
    assert_eq!((to("result"), to("events")), (0, 1), "the page's requests: {fetched:?}");
    assert!(browser.displayed("pay").await && !browser.displayed("paid").await);
    assert!(!browser.enabled("buy").await, "one unit a buyer: the button stays off");
    browser.screenshot("success").await;

    browser.click("pay").await;
    browser.wait_until("the page says paid", || browser.displayed("paid")).await;
    assert_eq!(browser.text("paid").await, "Paid. Thank you!");
    assert!(!browser.displayed("pay").await, "nothing left to pay");
    browser.screenshot("paid").await;

    // The page's word against the API's: the same buyer's order is paid.
    let token = sys.dev_token(71, "user").await;
    assert_eq!(sys.order_status(&token, order_id).await, "paid");
    browser.close().await;
}

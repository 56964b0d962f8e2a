//! A buyer who comes after the last unit went is told so, and the button goes off.

use std::time::{Duration, Instant};

use seckill_e2e::spawn_system;

use crate::browser::{self, PATIENCE};

const SOLD_OUT: &str = "Sold out: every unit has been taken.";

#[tokio::test]
async fn a_buyer_after_the_last_unit_sees_sold_out() {
    let Some((browser, sys)) =
        browser::start("a_buyer_after_the_last_unit_sees_sold_out", spawn_system).await
    else {
        return;
    };
    let sale = sys.open_sale(1).await;
    let first = sys.dev_token(81, "user").await;
    sys.buy_order(&first, sale.id).await;

    browser.open(&sys.url(&format!("/sales/{}", sale.id))).await;
    browser.sign_in(82).await;
    // The page says sold out as it opens while seckill-service still holds its sold-out flag
    // (about a second); after that the button is on until a click is refused.
    let deadline = Instant::now() + PATIENCE;
    let mut clicked = false;
    loop {
        let status = browser.text("status").await;
        if status == SOLD_OUT {
            break;
        }
        if !clicked && browser.enabled("buy").await {
            browser.click("buy").await;
            clicked = true;
        }
        assert!(Instant::now() < deadline, "no sold out after {PATIENCE:?}: the page says {status:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    browser.wait_for_text("countdown", "Sold out").await;
    assert!(!browser.enabled("buy").await, "no button to press on a sold-out sale");
    browser.screenshot("sold-out").await;

    // Nothing for this buyer: the one order is the first buyer's.
    assert_eq!(sys.active_orders(sale.id).await, (1, 1));
    browser.close().await;
}

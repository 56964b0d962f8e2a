//! A sale behind a waiting room: the buyer presses Buy once, the page does the room's proof of
//! work, shows their place and those ahead going down as the room admits them (told on its
//! stream, not polled), and buys by itself when the turn comes.

use seckill_common::room::{RoomRate, WaitingRoom};
use seckill_e2e::spawn_system;

use crate::browser::{self, PATIENCE};

const IN_LINE: &str = "You are in line. Keep this page open: your turn starts the buy by itself.";

/// The count of "N ahead of you" in a text of #room-wait (none once admitted: it is empty).
fn ahead_in(wait: &str) -> Option<u64> {
    wait.split_once(" ahead of you")?.0.rsplit(' ').next()?.parse().ok()
}

#[tokio::test]
async fn a_buyer_waits_in_the_room_sees_the_place_move_and_buys_with_one_click() {
    let test = "a_buyer_waits_in_the_room_sees_the_place_move_and_buys_with_one_click";
    let Some((browser, sys)) = browser::start(test, spawn_system).await else {
        return;
    };
    // One place a second: three buyers ahead take about three seconds, long enough to see the
    // place move on the page's polling, short enough for a test. The room opens well before
    // the sale, so a join the test's clock makes a moment early is in the line all the same.
    let room = WaitingRoom {
        rate: RoomRate::PerSec(1),
        opens_before_secs: 60,
        admission_secs: 30,
        // Some thousands of hashes: the page does the work in its worker, the test's users in
        // `join_room`, and the server takes each answer once.
        pow_difficulty: 12,
    };
    let sale = sys.create_room_sale(5, chrono::Duration::seconds(3), chrono::Duration::hours(1), room).await;
    let others = sys.dev_tokens(&[91, 92, 93]).await;

    browser.open(&sys.url(&format!("/sales/{}", sale.id))).await;
    browser.sign_in(94).await;
    browser
        .wait_until("the sale opens: the button says Buy now", || async {
            browser.enabled("buy").await && browser.text("buy").await == "Buy now"
        })
        .await;

    // Three buyers join after the opening, then the browser's: arrival order makes them its
    // three places ahead (one the clock put before the opening is drawn, still ahead of it).
    for user in [91, 92, 93] {
        let (status, body) = sys.join_room(&others[&user], sale.id).await;
        assert_eq!(status, 200, "user {user} joins: {body}");
    }
    for id in ["room-place", "room-wait", "status"] {
        browser.record_texts(id).await;
    }
    // The one click of the test: everything after it is the page's own doing.
    browser.record_fetches().await;
    browser.click("buy").await;
    browser.wait_for_text("room-place", "#4").await;
    assert!(!browser.enabled("buy").await, "no second press while in line");

    let said = browser.wait_text("status", PATIENCE, |t| t.starts_with("You got it: order ")).await;
    let order_id: i64 = browser.text("order-id").await.parse().expect("an order id on the page");
    assert_eq!(said, format!("You got it: order {order_id}"));
    // The place and the result were told on streams (one for the wait, one for the buy): the
    // page asked for neither.
    let fetched = browser.fetched().await;
    let gets = |path: &str| {
        let end = format!("/api/seckill/{}/{path}", sale.id);
        fetched.iter().filter(|f| f.starts_with("GET ") && f.ends_with(&end)).count()
    };
    assert_eq!(
        (gets("queue"), gets("result"), gets("events")),
        (0, 0, 2),
        "the page's requests: {fetched:?}"
    );

    let places = browser.recorded_texts("room-place").await;
    assert!(
        places.iter().all(|p| p == "#4" || p == "drawn when the sale opens"),
        "only the buyer's place, #4, was shown: {places:?}"
    );
    // The place moved: each count of those ahead lower than the one before, more than one of
    // them, and none once admitted.
    let waits = browser.recorded_texts("room-wait").await;
    let mut ahead: Vec<u64> = waits.iter().filter_map(|w| ahead_in(w)).collect();
    ahead.dedup();
    assert!(
        ahead.len() >= 2 && ahead.windows(2).all(|w| w[1] < w[0]) && ahead[0] <= 3,
        "those ahead went down from at most 3: {ahead:?} (from {waits:?})"
    );
    assert_eq!(waits.last().map(String::as_str), Some(""), "nothing ahead once admitted: {waits:?}");
    let statuses = browser.recorded_texts("status").await;
    assert!(
        statuses.iter().any(|s| s.starts_with("Checking that you are not a robot")),
        "the page did the room's proof of work: {statuses:?}"
    );
    let in_line = statuses.iter().position(|s| s == IN_LINE);
    let buying = statuses.iter().position(|s| s == "Placing your order…");
    assert!(in_line.is_some() && in_line < buying, "in line, then the buy on its own: {statuses:?}");

    // The page's word against the API's: the buyer holds the sale's one order.
    let token = sys.dev_token(94, "user").await;
    assert_eq!(sys.order_status(&token, order_id).await, "unpaid");
    assert_eq!(sys.active_orders(sale.id).await, (1, 1));
    browser.close().await;
}

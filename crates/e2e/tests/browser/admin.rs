//! The admin page: an admin signs in, creates a sale with the form, and its figures show; a
//! sale made with a waiting room shows its room.

use fantoccini::Locator;
use seckill_common::GoodsId;
use seckill_common::room::{RoomRate, WaitingRoom};
use seckill_e2e::spawn_system;

use crate::browser::{self, PATIENCE};

#[tokio::test]
async fn an_admin_creates_a_sale_and_sees_its_figures() {
    let Some((browser, sys)) =
        browser::start("an_admin_creates_a_sale_and_sees_its_figures", spawn_system).await
    else {
        return;
    };
    browser.open(&sys.url("/admin")).await;
    assert!(!browser.displayed("admin-tools").await, "no tools before signing in");
    browser.fill(Locator::Id("admin-user"), "7").await;
    browser.click("admin-signin").await;
    browser.wait_until("the tools show", || browser.displayed("admin-tools")).await;
    assert_eq!(browser.text("admin-who").await, "7");

    // The form opens the sale in five minutes by default: those fields are left as they are.
    let form = [("name", "Desk lamp"), ("price", "40"), ("seckill_price", "19.90"), ("stock_total", "25")];
    for (name, value) in form {
        browser.fill(Locator::Css(&format!("#create-sale input[name={name}]")), value).await;
    }
    browser.click("create").await;
    let created = browser.wait_text("created", PATIENCE, |t| t.starts_with("Created sale ")).await;
    let id: i64 = created
        .strip_prefix("Created sale ")
        .and_then(|rest| rest.strip_suffix(": Desk lamp"))
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("a sale id in {created:?}"));

    // Its figures, from its audit: 25 units on sale everywhere, none sold, nothing waiting.
    browser.wait_for_text("fig-agrees", "yes").await;
    assert_eq!(browser.text("fig-total").await, "25");
    assert_eq!(browser.text("fig-authority").await, "25");
    assert_eq!(browser.text("fig-redis").await, "25");
    assert_eq!(browser.text("fig-sold").await, "0");
    assert_eq!(browser.text("fig-queued").await, "0");
    assert!(browser.text("fig-updated").await.starts_with("Updated "));
    browser.screenshot("admin").await;

    // What the form sent is what the shop holds.
    let goods = sys.goods(GoodsId::new(id).expect("a goods id")).await;
    assert_eq!((goods.name.as_str(), goods.stock_total), ("Desk lamp", 25));
    assert_eq!((goods.price_cents, goods.seckill_price_cents), (4_000, 1_990));
    let opens_in = goods.start_at - chrono::Utc::now();
    assert!(
        opens_in > chrono::Duration::minutes(3) && opens_in <= chrono::Duration::minutes(5),
        "{opens_in}"
    );
    assert_eq!(goods.waiting_room, None, "no room unless ticked");
    assert_eq!(browser.text("fig-room").await, "none");

    // A second sale, behind a waiting room: the box ticked, a rate and a proof of work typed,
    // the rest of the room as offered.
    assert!(!browser.displayed("room-settings").await, "the room's settings show once ticked");
    browser.fill(Locator::Css("#create-sale input[name=name]"), "Floor lamp").await;
    browser.click("room").await;
    browser.wait_until("the room's settings show", || browser.displayed("room-settings")).await;
    browser.fill(Locator::Css("#create-sale input[name=room_rate]"), "40").await;
    browser.fill(Locator::Css("#create-sale input[name=room_pow_difficulty]"), "4").await;
    browser.click("create").await;
    let created = browser.wait_text("created", PATIENCE, |t| t.ends_with(": Floor lamp")).await;
    let id: i64 = created
        .strip_prefix("Created sale ")
        .and_then(|rest| rest.strip_suffix(": Floor lamp"))
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("a sale id in {created:?}"));
    let room = "40 a second, opens 600 s before the sale, admissions of 120 s, proof of work of 4 bits";
    browser.wait_for_text("fig-room", room).await;
    let listed = browser.text("audit-goods").await;
    assert!(listed.contains(&format!("{id}: Floor lamp (waiting room, 40 a second)")), "{listed}");
    let goods = sys.goods(GoodsId::new(id).expect("a goods id")).await;
    let asked = WaitingRoom {
        rate: RoomRate::PerSec(40),
        opens_before_secs: 600,
        admission_secs: 120,
        pow_difficulty: 4,
    };
    assert_eq!(goods.waiting_room, Some(asked));
    browser.close().await;
}

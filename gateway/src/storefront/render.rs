//! The rendering: the sales as the templates show them, and the list and sale pages made from
//! stock-service's goods.

use actix_web::http::StatusCode;
use chrono::{DateTime, Utc};
use minijinja::value::Serde;
use seckill_common::api::{Goods, SaleWindow};
use serde::Serialize;
use serde_json::json;

use super::{ListKind, Rendered, Storefront};

/// A sale as the templates show it: every value formatted here, so the templates need no
/// filters.
#[derive(Debug, Serialize)]
struct SaleView {
    id: i64,
    name: String,
    price: String,
    sale_price: String,
    /// "50% off", or empty.
    discount: String,
    stock_available: i64,
    stock_total: i64,
    start_text: String,
    end_text: String,
    start_ms: i64,
    end_ms: i64,
    /// Where the sale stood when the page was made; the script keeps it current.
    window_text: &'static str,
    /// When the sale's waiting room opens (Unix ms): its page joins the room instead of
    /// buying at once. None for a sale without a room.
    room_opens_ms: Option<i64>,
}

impl SaleView {
    fn new(goods: &Goods, now: DateTime<Utc>) -> Self {
        let discount = if goods.price_cents > 0 && goods.seckill_price_cents < goods.price_cents {
            // In i128: any i64 price an admin may set times 100 fits (in i64 it overflowed).
            let price = i128::from(goods.price_cents);
            let cut = price - i128::from(goods.seckill_price_cents);
            // Rounded to the nearest percent: 499.00 for 999.00 is "50% off".
            let off = (cut * 100 + price / 2) / price;
            if off > 0 { format!("{off}% off") } else { String::new() }
        } else {
            String::new()
        };
        Self {
            id: goods.id.get(),
            name: goods.name.clone(),
            price: money(goods.price_cents),
            sale_price: money(goods.seckill_price_cents),
            discount,
            stock_available: goods.stock_available,
            stock_total: goods.stock_total,
            start_text: when(goods.start_at),
            end_text: when(goods.end_at),
            start_ms: goods.start_at.timestamp_millis(),
            end_ms: goods.end_at.timestamp_millis(),
            room_opens_ms: goods.waiting_room.map(|r| r.opens_at(goods.start_at).timestamp_millis()),
            window_text: match goods.window_at(now) {
                SaleWindow::NotStarted => "Opens soon",
                SaleWindow::Open => "On now",
                SaleWindow::Ended => "Ended",
            },
        }
    }
}

/// Cents as a price: `49900` is `499.00`.
fn money(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    let cents = cents.unsigned_abs();
    format!("{sign}{}.{:02}", cents / 100, cents % 100)
}

fn when(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M UTC").to_string()
}

impl Storefront {
    fn page_cache(&self) -> String {
        format!("public, max-age={}", self.refresh.as_secs())
    }

    /// A page of `kind`'s list; `next`, the cursor to the page after it.
    pub(super) fn list_page(
        &self,
        kind: ListKind,
        goods: &[Goods],
        next: Option<&str>,
    ) -> anyhow::Result<Rendered> {
        let now = Utc::now();
        let mut sales: Vec<&Goods> = goods.iter().collect();
        // Open sales first, then those to come, soonest first; ended ones last, latest first.
        sales.sort_by_key(|g| match g.window_at(now) {
            SaleWindow::Open => (0, g.end_at.timestamp_millis()),
            SaleWindow::NotStarted => (1, g.start_at.timestamp_millis()),
            SaleWindow::Ended => (2, -g.end_at.timestamp_millis()),
        });
        let sales: Vec<SaleView> = sales.into_iter().map(|g| SaleView::new(g, now)).collect();
        // A cursor is URL-safe base64: nothing to escape in the link.
        let next = next.map(|c| minijinja::Value::from_safe_string(format!("{}?cursor={c}", kind.path())));
        let view = json!({
            "title": kind.title(),
            "ended": kind == ListKind::Ended,
            "sales": sales,
        });
        let context = minijinja::context! { next => next, ..Serde(view) };
        self.templates.html(StatusCode::OK, self.page_cache(), "index.html", context)
    }

    pub(super) fn sale_page(&self, goods: &Goods) -> anyhow::Result<Rendered> {
        let view = SaleView::new(goods, Utc::now());
        self.templates.html(StatusCode::OK, self.page_cache(), "sale.html", json!({ "sale": view }))
    }
}

#[cfg(test)]
mod tests {
    use seckill_common::GoodsId;

    use super::*;
    use crate::configuration::StorefrontSettings;

    fn goods(id: i64, name: &str) -> Goods {
        let now = Utc::now();
        Goods {
            id: GoodsId::new(id).unwrap(),
            name: name.into(),
            price_cents: 99_900,
            seckill_price_cents: 49_900,
            stock_total: 100,
            stock_available: 37,
            start_at: now - chrono::Duration::minutes(1),
            end_at: now + chrono::Duration::hours(1),
            buckets: 1,
            waiting_room: None,
        }
    }

    fn storefront(dev_tokens: bool) -> Storefront {
        Storefront::new(&StorefrontSettings::default(), dev_tokens).unwrap()
    }

    fn text(r: &Rendered) -> &str {
        std::str::from_utf8(r.body()).unwrap()
    }

    #[test]
    fn a_sale_page_escapes_what_an_admin_typed_and_carries_the_ids_the_script_needs() {
        let page = storefront(true).sale_page(&goods(7, "<script>alert(1)</script> & co")).unwrap();
        let html = text(&page);
        assert!(!html.contains("<script>alert"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt; &amp; co"), "{html}");
        assert!(html.contains("data-dev-tokens=\"true\""));
        for id in [
            "signin-user",
            "signin-button",
            "signout",
            "countdown",
            "buy",
            "status",
            "order-id",
            "pay",
            "paid",
        ] {
            assert!(html.contains(&format!("id=\"{id}\"")), "no #{id}");
        }
        assert!(html.contains("499.00") && html.contains("999.00") && html.contains("50% off"), "{html}");
        assert!(html.contains("37 of 100 left"), "{html}");
        assert!(html.contains("data-goods-id=\"7\""));
    }

    #[test]
    fn without_dev_tokens_the_page_asks_for_a_token() {
        let html = text(&storefront(false).sale_page(&goods(7, "phone")).unwrap()).to_owned();
        assert!(html.contains("id=\"signin-token\"") && !html.contains("id=\"signin-user\""), "{html}");
        assert!(html.contains("data-dev-tokens=\"false\""));
    }

    #[test]
    fn the_same_goods_render_the_same_bytes_and_tag() {
        let (a, b) = (storefront(true), storefront(true));
        let list = [goods(1, "one"), goods(2, "two")];
        let page = |s: &Storefront, list: &[Goods]| s.list_page(ListKind::Current, list, None).unwrap();
        let (x, y) = (page(&a, &list), page(&b, &list));
        assert_eq!((x.body(), x.etag()), (y.body(), y.etag()));
        let mut other = list.clone();
        other[1].stock_available -= 1;
        assert_ne!(page(&a, &other).etag(), x.etag());
    }

    #[test]
    fn a_list_page_links_to_the_next_and_to_the_other_list() {
        let store = storefront(true);
        let current =
            text(&store.list_page(ListKind::Current, &[goods(1, "one")], Some("YzE6Mzox")).unwrap())
                .to_owned();
        assert!(current.contains("<h1>Flash sales</h1>"), "{current}");
        assert!(current.contains(r#"id="next-page" href="/?cursor=YzE6Mzox""#), "{current}");
        assert!(current.contains(r#"id="ended-sales" href="/ended""#), "{current}");
        let ended = text(&store.list_page(ListKind::Ended, &[], None).unwrap()).to_owned();
        assert!(ended.contains("<h1>Ended sales</h1>") && ended.contains("No sale has ended yet"), "{ended}");
        assert!(!ended.contains("next-page") && ended.contains(r#"id="current-sales" href="/""#), "{ended}");
    }

    #[test]
    fn money_and_discounts() {
        assert_eq!(money(49_900), "499.00");
        assert_eq!(money(5), "0.05");
        assert_eq!(money(0), "0.00");
        let mut g = goods(1, "x");
        g.seckill_price_cents = g.price_cents;
        assert_eq!(SaleView::new(&g, Utc::now()).discount, "");
        g.price_cents = 0;
        g.seckill_price_cents = 0;
        assert_eq!(SaleView::new(&g, Utc::now()).discount, "");
        // Any price the API accepts renders (schemathesis found the list page panicking on
        // these: `cut * 100` overflowed i64).
        g.price_cents = i64::MAX;
        g.seckill_price_cents = 0;
        assert_eq!(SaleView::new(&g, Utc::now()).discount, "100% off");
        g.seckill_price_cents = i64::MAX / 2;
        assert_eq!(SaleView::new(&g, Utc::now()).discount, "50% off");
        assert_eq!(money(i64::MAX), "92233720368547758.07");
        assert_eq!(money(i64::MIN), "-92233720368547758.08");
    }
}

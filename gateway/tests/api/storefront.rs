//! The storefront: the pages, their assets, the sale state route and the admin render, in
//! front of a stand-in shop (stock-service's goods routes and the seckill-service routes the
//! pages use) that counts what it is asked.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::{HttpResponse, web};
use chrono::Utc;
use futures_util::future::join_all;
use gateway::configuration::Settings;
use seckill_common::api::{Goods, NewGoods, SaleState};
use seckill_common::listing::{GoodsQuery, GoodsState, RawGoodsQuery};
use seckill_common::trust::Peer;
use seckill_common::{ErrorBody, GoodsId};
use seckill_testkit::{RunningService, keys};
use seckill_web::{Application, Door, Lifecycle};
use serde_json::{Value, json};

use crate::helpers::{TestApp, admin_token, assert_error, settings, test_http, user_token};

/// What the stand-ins hold and count.
#[derive(Default)]
struct Shop {
    goods: Mutex<Vec<Goods>>,
    /// `GET /api/goods[/{id}]` answered by the stand-in stock-service.
    stock_calls: AtomicUsize,
    /// While set, stock-service answers 503.
    stock_down: AtomicBool,
    /// How long stock-service takes to answer.
    stock_delay_ms: AtomicU64,
    /// Requests seckill-service answered.
    seckill_calls: AtomicUsize,
}

impl Shop {
    /// A sale of 100 units, open for an hour.
    fn add(&self, name: &str) -> Goods {
        self.add_units(name, 100)
    }

    fn add_units(&self, name: &str, units: i64) -> Goods {
        let mut goods = self.goods.lock().unwrap();
        let now = Utc::now();
        let g = Goods {
            id: GoodsId::new(goods.len() as i64 + 1).unwrap(),
            name: name.into(),
            price_cents: 99_900,
            seckill_price_cents: 49_900,
            stock_total: units,
            stock_available: units,
            start_at: now - chrono::Duration::minutes(1),
            end_at: now + chrono::Duration::hours(1),
            buckets: 1,
            waiting_room: None,
        };
        goods.push(g.clone());
        g
    }

    fn find(&self, id: &str) -> Option<Goods> {
        self.goods.lock().unwrap().iter().find(|g| g.id.to_string() == id).cloned()
    }

    fn stock_calls(&self) -> usize {
        self.stock_calls.load(Ordering::SeqCst)
    }
}

fn not_found() -> HttpResponse {
    HttpResponse::NotFound().json(json!({"code": "GOODS_NOT_FOUND", "message": "no such sale"}))
}

/// One page holds them all; the states asked are honoured (`state=ended` lists the ended ones).
async fn stock_list(shop: web::Data<Shop>, query: web::Query<RawGoodsQuery>) -> HttpResponse {
    shop.stock_calls.fetch_add(1, Ordering::SeqCst);
    if shop.stock_down.load(Ordering::SeqCst) {
        return HttpResponse::ServiceUnavailable().json(json!({"code": "UNAVAILABLE", "message": "down"}));
    }
    let states = GoodsQuery::parse(&query).unwrap().states;
    let now = Utc::now();
    let goods: Vec<Goods> = shop
        .goods
        .lock()
        .unwrap()
        .iter()
        .filter(|g| states.contains(GoodsState::of(g.window_at(now))))
        .cloned()
        .collect();
    HttpResponse::Ok().json(goods)
}

async fn stock_one(shop: web::Data<Shop>, id: web::Path<String>) -> HttpResponse {
    shop.stock_calls.fetch_add(1, Ordering::SeqCst);
    let delay = shop.stock_delay_ms.load(Ordering::SeqCst);
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    if shop.stock_down.load(Ordering::SeqCst) {
        return HttpResponse::ServiceUnavailable().json(json!({"code": "UNAVAILABLE", "message": "down"}));
    }
    shop.find(&id).map_or_else(not_found, |g| HttpResponse::Ok().json(g))
}

async fn seckill_create(shop: web::Data<Shop>, body: web::Json<NewGoods>) -> HttpResponse {
    shop.seckill_calls.fetch_add(1, Ordering::SeqCst);
    HttpResponse::Created().json(shop.add_units(&body.name, body.stock_total))
}

async fn seckill_state(shop: web::Data<Shop>, id: web::Path<String>) -> HttpResponse {
    shop.seckill_calls.fetch_add(1, Ordering::SeqCst);
    shop.find(&id).map_or_else(not_found, |g| {
        HttpResponse::Ok().insert_header(("cache-control", "no-store")).json(SaleState {
            goods_id: g.id,
            start_at: g.start_at,
            end_at: g.end_at,
            sold_out: false,
            now_ms: Utc::now().timestamp_millis(),
        })
    })
}

/// Every buy click: sold out.
async fn seckill_sold_out(shop: web::Data<Shop>) -> HttpResponse {
    shop.seckill_calls.fetch_add(1, Ordering::SeqCst);
    HttpResponse::Gone().json(json!({"code": "SOLD_OUT", "message": "sold out"}))
}

/// A stand-in for `me`, checking the gateway's credential as the real one would.
fn start_fake(me: Peer, shop: Arc<Shop>) -> RunningService {
    RunningService::start(move || async move {
        let (server, port) =
            seckill_web::serve(&test_http(), 0, Door::Trusted(keys::trust(me)), move |cfg| {
                cfg.app_data(web::Data::from(shop.clone()))
                    .route("/api/goods", web::get().to(stock_list))
                    .route("/api/goods/{id}", web::get().to(stock_one))
                    .route("/api/admin/goods", web::post().to(seckill_create))
                    .route("/api/seckill/{id}/state", web::get().to(seckill_state))
                    .route("/api/seckill/{id}/orders", web::post().to(seckill_sold_out));
            })?;
        Ok(Application::new(port, server, Lifecycle::new()))
    })
}

/// The gateway before a stand-in shop, its settings changed by `change`.
fn spawn_shop(change: impl FnOnce(&mut Settings)) -> (TestApp, Arc<Shop>) {
    let shop = Arc::new(Shop::default());
    let stock = start_fake(Peer::Stock, shop.clone());
    let seckill = start_fake(Peer::Seckill, shop.clone());
    let order = start_fake(Peer::Order, shop.clone());
    let mut s = settings(&seckill.url(), &order.url(), &stock.url());
    change(&mut s);
    (TestApp::start(s, vec![seckill, order, stock]), shop)
}

async fn page(app: &TestApp, path: &str) -> (u16, String) {
    let res = app.get(path).send().await.unwrap();
    (res.status().as_u16(), res.text().await.unwrap())
}

fn header(res: &reqwest::Response, name: &str) -> String {
    res.headers().get(name).map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default()
}

#[tokio::test]
async fn the_list_page_shows_a_sale_as_soon_as_an_admin_creates_it() {
    let (app, shop) = spawn_shop(|_| {});
    shop.add("kettle");

    let (status, html) = page(&app, "/").await;
    assert_eq!(status, 200);
    assert!(html.contains("kettle") && html.contains("href=\"/sales/1\""), "{html}");

    let now = Utc::now();
    let res = app
        .post("/api/admin/goods")
        .bearer_auth(admin_token(1))
        .json(&json!({"name": "phone <pro>", "price_cents": 99_900, "seckill_price_cents": 49_900,
            "stock_total": 10, "start_at": now, "end_at": now + chrono::Duration::hours(2)}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);

    // Well within refresh_secs (10): the list was dropped when the sale was created.
    let (status, html) = page(&app, "/").await;
    assert_eq!(status, 200);
    assert!(html.contains("phone &lt;pro&gt;") && html.contains("href=\"/sales/2\""), "{html}");
    assert!(html.contains("10 of 10 left") && html.contains("499.00") && html.contains("999.00"), "{html}");
}

#[tokio::test]
async fn a_sale_page_carries_its_sale_and_the_ids_the_script_uses() {
    let (app, shop) = spawn_shop(|_| {});
    let g = shop.add("espresso machine");

    let res = app.get(&format!("/sales/{}", g.id)).send().await.unwrap();

    assert_eq!(res.status(), 200);
    assert_eq!(header(&res, "content-type"), "text/html; charset=utf-8");
    assert_eq!(header(&res, "cache-control"), "public, max-age=10");
    assert!(header(&res, "content-security-policy").contains("script-src 'self'"));
    let html = res.text().await.unwrap();
    assert!(html.contains("<h1>espresso machine</h1>"), "{html}");
    for id in
        ["signin-user", "signin-button", "signout", "countdown", "buy", "status", "order-id", "pay", "paid"]
    {
        assert!(html.contains(&format!("id=\"{id}\"")), "no #{id} in {html}");
    }
    assert!(html.contains(&format!("data-goods-id=\"{}\"", g.id)), "{html}");
    assert!(html.contains(&format!("data-start-ms=\"{}\"", g.start_at.timestamp_millis())), "{html}");
    assert!(html.contains("100 of 100 left"), "{html}");
    // The assets it links to are served, at their versioned URLs.
    for asset in ["/static/store.js?v=", "/static/store.css?v="] {
        let at = html.find(asset).unwrap_or_else(|| panic!("no {asset} in {html}"));
        let url = &html[at..at + html[at..].find('"').unwrap()];
        assert_eq!(app.get(url).send().await.unwrap().status(), 200, "{url}");
    }
}

#[tokio::test]
async fn a_client_holding_the_pages_etag_gets_a_304() {
    let (app, shop) = spawn_shop(|_| {});
    let g = shop.add("toaster");

    for path in ["/".to_owned(), format!("/sales/{}", g.id), "/admin".into(), "/static/store.js".into()] {
        let first = app.get(&path).send().await.unwrap();
        assert_eq!(first.status(), 200, "{path}");
        let etag = header(&first, "etag");
        assert!(etag.starts_with('"') && etag.ends_with('"'), "{path}: a strong tag, {etag}");
        let body = first.bytes().await.unwrap();

        let again = app.get(&path).header("if-none-match", &etag).send().await.unwrap();
        assert_eq!(again.status(), 304, "{path}");
        assert_eq!(header(&again, "etag"), etag);
        assert!(again.bytes().await.unwrap().is_empty());

        // Another tag (or a weak form of this one, as a browser may send) compares by value.
        let other = app.get(&path).header("if-none-match", "\"0-0000000000000000\"").send().await.unwrap();
        assert_eq!((other.status().as_u16(), other.bytes().await.unwrap()), (200, body), "{path}");
        let weak = app.get(&path).header("if-none-match", format!("W/{etag}")).send().await.unwrap();
        assert_eq!(weak.status(), 304, "{path}");
    }
}

#[tokio::test]
async fn within_refresh_secs_the_pages_come_from_memory_and_a_stampede_makes_one_call() {
    let (app, shop) = spawn_shop(|_| {});
    let (one, two) = (shop.add("one"), shop.add("two"));

    for _ in 0..5 {
        assert_eq!(page(&app, "/").await.0, 200);
        assert_eq!(page(&app, &format!("/sales/{}", one.id)).await.0, 200);
    }
    assert_eq!(shop.stock_calls(), 2, "one call for the list, one for the sale");

    // Forty buyers open a cold page at once, stock-service slow to answer: one call.
    shop.stock_delay_ms.store(300, Ordering::SeqCst);
    let path = format!("/sales/{}", two.id);
    let pages = join_all((0..40).map(|_| page(&app, &path))).await;
    assert!(pages.iter().all(|(status, html)| *status == 200 && html.contains("<h1>two</h1>")));
    assert_eq!(shop.stock_calls(), 3, "the stampede made one call");

    // stock-service down: the kept pages are still served.
    shop.stock_down.store(true, Ordering::SeqCst);
    assert_eq!(page(&app, &path).await.0, 200);
    assert_eq!(page(&app, "/").await.0, 200);
    assert_eq!(shop.stock_calls(), 3);
}

#[tokio::test]
async fn a_stale_page_is_served_while_one_request_renders_it_and_stays_while_stock_is_down() {
    let (app, shop) = spawn_shop(|s| s.storefront.refresh_secs = 1);
    let g = shop.add("lamp");
    let path = format!("/sales/{}", g.id);
    let (_, first) = page(&app, &path).await;
    assert!(first.contains("100 of 100 left"));

    shop.goods.lock().unwrap()[0].stock_available = 60;
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    // Stale now: twenty requests, one render; none waits for it or fails.
    shop.stock_delay_ms.store(300, Ordering::SeqCst);
    let pages = join_all((0..20).map(|_| page(&app, &path))).await;
    assert!(pages.iter().all(|(status, _)| *status == 200));
    assert!(pages.iter().any(|(_, html)| html.contains("100 of 100 left")), "the stale page was served");
    assert_eq!(shop.stock_calls(), 2, "one render of the stale page");
    assert!(page(&app, &path).await.1.contains("60 of 100 left"), "the render's page is kept");

    // stock-service down when the page is stale again: the stale page, and a retry only after
    // another refresh_secs.
    shop.stock_delay_ms.store(0, Ordering::SeqCst);
    shop.stock_down.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    for _ in 0..5 {
        let (status, html) = page(&app, &path).await;
        assert_eq!(status, 200);
        assert!(html.contains("60 of 100 left"));
    }
    assert_eq!(shop.stock_calls(), 3);
}

#[tokio::test]
async fn an_unknown_sale_is_a_404_page_and_stock_down_with_nothing_kept_a_503_page() {
    let (app, shop) = spawn_shop(|_| {});
    let g = shop.add("fan");

    let res = app.get("/sales/999").send().await.unwrap();
    assert_eq!(res.status(), 404);
    assert_eq!(header(&res, "content-type"), "text/html; charset=utf-8");
    assert_eq!(header(&res, "cache-control"), "no-store");
    assert!(res.text().await.unwrap().contains("No such sale"));
    // Not a sale id at all: answered without asking stock-service.
    let calls = shop.stock_calls();
    for path in ["/sales/abc", "/sales/0", "/sales/-3"] {
        assert_eq!(page(&app, path).await.0, 404, "{path}");
    }
    assert_eq!(shop.stock_calls(), calls);
    // An unknown id is asked again next time (a sale may be created with it).
    assert_eq!(page(&app, "/sales/999").await.0, 404);
    assert_eq!(shop.stock_calls(), calls + 1);

    shop.stock_down.store(true, Ordering::SeqCst);
    let res = app.get(&format!("/sales/{}", g.id)).send().await.unwrap();
    assert_eq!(res.status(), 503);
    assert_eq!(header(&res, "content-type"), "text/html; charset=utf-8");
    assert!(res.text().await.unwrap().contains("Back in a moment"));
    assert_eq!(page(&app, "/").await.0, 503);

    // Back: the page renders.
    shop.stock_down.store(false, Ordering::SeqCst);
    assert_eq!(page(&app, &format!("/sales/{}", g.id)).await.0, 200);
}

#[tokio::test]
async fn the_state_is_answered_by_the_gateway_while_it_remembers_the_sale_sold_out() {
    let (app, shop) = spawn_shop(|_| {});
    let g = shop.add("headphones");
    let path = format!("/api/seckill/{}/state", g.id);

    let res = app.get(&path).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let state: SaleState = res.json().await.unwrap();
    assert_eq!((state.goods_id, state.sold_out), (g.id, false));
    assert_eq!(shop.seckill_calls.load(Ordering::SeqCst), 1, "forwarded");

    // A buy click answered 410 SOLD_OUT: the gateway remembers the sale closed.
    let res =
        app.post(&format!("/api/seckill/{}/orders", g.id)).bearer_auth(user_token(5)).send().await.unwrap();
    assert_eq!(res.status(), 410);
    assert_eq!(shop.seckill_calls.load(Ordering::SeqCst), 2);

    let before = Utc::now().timestamp_millis();
    let res = app.get(&path).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(header(&res, "cache-control"), "no-store");
    let state: SaleState = res.json().await.unwrap();
    assert_eq!((state.goods_id, state.start_at, state.end_at), (g.id, g.start_at, g.end_at));
    assert!(state.sold_out, "{state:?}");
    assert!(state.now_ms >= before && state.now_ms <= Utc::now().timestamp_millis());
    assert_eq!(shop.seckill_calls.load(Ordering::SeqCst), 2, "answered by the gateway, no hop");

    // Another sale, unknown to seckill-service: its 404 passes through.
    let res = app.get("/api/seckill/77/state").send().await.unwrap();
    assert_eq!(res.status(), 404);
    assert_eq!(res.json::<ErrorBody>().await.unwrap().code, "GOODS_NOT_FOUND");
}

#[tokio::test]
async fn the_assets_and_the_admin_page_are_served() {
    let (app, _shop) = spawn_shop(|_| {});

    let res = app.get("/static/store.js").send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(header(&res, "content-type"), "text/javascript; charset=utf-8");
    assert_eq!(header(&res, "cache-control"), "public, max-age=31536000, immutable");
    assert_eq!(res.text().await.unwrap(), gateway::storefront::STORE_JS);
    let res = app.get("/static/store.css").send().await.unwrap();
    assert_eq!(header(&res, "content-type"), "text/css; charset=utf-8");
    assert_eq!(app.get("/static/nothing.js").send().await.unwrap().status(), 404);

    let res = app.get("/admin").send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(header(&res, "content-type"), "text/html; charset=utf-8");
    let html = res.text().await.unwrap();
    for id in [
        "admin-user",
        "admin-signin",
        "create-sale",
        "room",
        "room-settings",
        "audit-goods",
        "fig-sold",
        "fig-queued",
        "fig-room",
        "render",
    ] {
        assert!(html.contains(&format!("id=\"{id}\"")), "no #{id} in {html}");
    }
    assert!(html.contains("/static/admin.js?v="), "{html}");
    // The new sale's stock buckets: optional, 1 to 8.
    assert!(html.contains(r#"<input name="buckets" type="number" min="1" max="8""#), "{html}");
    // The waiting room's settings: off, so neither checked nor sent, until the box is ticked.
    assert!(html.contains(r#"<fieldset id="room-settings" class="grid room" disabled hidden>"#), "{html}");
    for name in ["room_rate", "room_opens_before_secs", "room_admission_secs", "room_pow_difficulty"] {
        assert!(html.contains(&format!("name=\"{name}\"")), "no {name} in {html}");
    }
    assert_eq!(app.get("/static/admin.js").send().await.unwrap().status(), 200);
}

#[tokio::test]
async fn only_an_admin_renders_the_pages_now() {
    let (app, shop) = spawn_shop(|_| {});
    shop.add("a");
    shop.add("b");

    let res = app.post("/api/admin/storefront/render").send().await.unwrap();
    assert_error(res, 401, "UNAUTHORIZED").await;
    let res = app.post("/api/admin/storefront/render").bearer_auth(user_token(3)).send().await.unwrap();
    assert_error(res, 403, "FORBIDDEN").await;
    assert_eq!(shop.stock_calls(), 0);

    let res = app.post("/api/admin/storefront/render").bearer_auth(admin_token(1)).send().await.unwrap();
    assert_eq!(res.status(), 200);
    // Both lists (live and upcoming; ended) and each sale's page.
    assert_eq!(res.json::<Value>().await.unwrap(), json!({"pages": 4}));
    assert_eq!(shop.stock_calls(), 2, "one call for each list, none for a sale's page");
    // Rendered and kept: served with no call.
    assert_eq!(page(&app, "/sales/2").await.0, 200);
    assert_eq!(page(&app, "/").await.0, 200);
    assert_eq!(page(&app, "/ended").await.0, 200);
    assert_eq!(shop.stock_calls(), 2);

    shop.stock_down.store(true, Ordering::SeqCst);
    let res = app.post("/api/admin/storefront/render").bearer_auth(admin_token(1)).send().await.unwrap();
    assert_error(res, 503, "UPSTREAM_UNAVAILABLE").await;
}

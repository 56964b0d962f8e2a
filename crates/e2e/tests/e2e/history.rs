//! A shop that has run sales for years: 10,000 ended sales and a few live and upcoming ones.
//! Through the gateway, `GET /api/goods` lists by state in bounded pages whose cursor walks
//! every sale once (sale 1,001 included), and the storefront's pages stay bounded: the live
//! and upcoming sales on `/`, the ended ones behind a link, a page at a time.

use std::collections::HashSet;

use chrono::Duration;
use seckill_common::api::Goods;
use seckill_common::listing::{DEFAULT_PAGE, MAX_PAGE, NEXT_CURSOR};
use seckill_testkit::insert_ended_sales;

use crate::helpers::{System, spawn_system};

const ENDED: u32 = 10_000;
/// The most a list page of the storefront may weigh: a page of `DEFAULT_PAGE` cards.
const PAGE_BYTES: usize = 96 * 1024;

/// A list page through the gateway: its sales and the cursor to the next.
async fn api_page(sys: &System, query: &str) -> (Vec<Goods>, Option<String>, usize) {
    let res = sys.http.get(sys.url(&format!("/api/goods?{query}"))).send().await.unwrap();
    assert_eq!(res.status(), 200, "{query}");
    let next = res.headers().get(NEXT_CURSOR).map(|v| v.to_str().unwrap().to_owned());
    let body = res.bytes().await.unwrap();
    (serde_json::from_slice(&body).unwrap(), next, body.len())
}

async fn html(sys: &System, path: &str) -> String {
    let res = sys.http.get(sys.url(path)).send().await.unwrap();
    assert_eq!(res.status(), 200, "{path}");
    res.text().await.unwrap()
}

/// The `href` of the link with `id` in `html`, if it has one.
fn link(html: &str, id: &str) -> Option<String> {
    let at = html.find(&format!("id=\"{id}\" href=\""))? + id.len() + 12;
    Some(html[at..].split('"').next()?.to_owned())
}

#[tokio::test]
async fn ten_thousand_ended_sales_leave_the_api_and_the_pages_bounded_and_complete() {
    let sys = spawn_system();
    insert_ended_sales(&sys.stock_db, ENDED).await;
    let live = [sys.open_sale(3).await, sys.open_sale(3).await];
    let upcoming = sys.create_sale(3, Duration::hours(1), Duration::hours(2)).await;

    // The API without `state`: the live and upcoming sales, all on one page.
    let (current, next, _) = api_page(&sys, "").await;
    assert_eq!(current.iter().map(|g| g.id).collect::<Vec<_>>(), vec![live[0].id, live[1].id, upcoming.id]);
    assert_eq!(next, None);

    // The ended ones, walked by the cursor through the gateway: each once, each page bounded.
    let mut seen = HashSet::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let query = match &cursor {
            Some(c) => format!("state=ended&limit={MAX_PAGE}&cursor={c}"),
            None => format!("state=ended&limit={MAX_PAGE}"),
        };
        let (goods, next, bytes) = api_page(&sys, &query).await;
        pages += 1;
        assert!(
            goods.len() <= MAX_PAGE as usize && bytes < 64 * 1024,
            "{} sales, {bytes} bytes",
            goods.len()
        );
        for g in goods {
            assert!(seen.insert(g.id), "sale {} listed twice", g.id);
        }
        cursor = next;
        if cursor.is_none() {
            break;
        }
    }
    assert_eq!((seen.len(), pages), (ENDED as usize, (ENDED / MAX_PAGE) as usize));
    let found = sys.goods(seckill_common::GoodsId::new(1_001).unwrap()).await;
    assert_eq!(found.name, "ended 1001");
    assert!(seen.contains(&found.id), "sale 1,001 is found through the list");

    // The storefront: `/` shows the three current sales and a link to the ended ones.
    let front = html(&sys, "/").await;
    assert!(front.len() < PAGE_BYTES, "{} bytes", front.len());
    assert_eq!(front.matches("class=\"card\"").count(), 3, "{front}");
    assert!(!front.contains("ended 1"), "an ended sale on the front page");
    assert_eq!(link(&front, "ended-sales").as_deref(), Some("/ended"));
    assert_eq!(link(&front, "next-page"), None);

    // `/ended`: a bounded page, the latest first, and a link to the next; a few pages on, the
    // sales are all ended and none seen twice.
    let mut path = "/ended".to_owned();
    let mut names = HashSet::new();
    for _ in 0..5 {
        let page = html(&sys, &path).await;
        assert!(page.len() < PAGE_BYTES, "{path}: {} bytes", page.len());
        let cards = page.matches("class=\"card\"").count();
        assert_eq!(cards, DEFAULT_PAGE as usize, "{path}");
        for name in page.split("<h2><a href=\"/sales/").skip(1) {
            let name = name.split('>').nth(1).unwrap().split('<').next().unwrap().to_owned();
            assert!(name.starts_with("ended "), "{path}: {name}");
            assert!(names.insert(name.clone()), "{path}: {name} shown twice");
        }
        assert_eq!(link(&page, "current-sales").as_deref(), Some("/"));
        path = link(&page, "next-page").expect("a link to the next page");
    }
    // The latest ended first: `ended 1` and `ended 2` ended last.
    assert!(names.contains("ended 1") && names.contains("ended 2"));
    // A cursor the API never gave is a 404 page, not an error.
    let res = sys.http.get(sys.url("/ended?cursor=bm9wZQ")).send().await.unwrap();
    assert_eq!(res.status(), 404);
}

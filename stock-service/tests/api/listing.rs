//! `GET /api/goods` by state, a bounded page at a time, over a shop with 10,000 ended sales.

use std::collections::HashSet;

use chrono::{Duration, Utc};
use diesel::QueryableByName;
use diesel_async::RunQueryDsl;
use reqwest::Method;
use seckill_common::api::{Goods, NewGoods};
use seckill_common::listing::{MAX_PAGE, NEXT_CURSOR};
use seckill_common::trust::Peer;
use seckill_testkit::insert_ended_sales;

use crate::helpers::{TestApp, spawn_app};

const ENDED: u32 = 10_000;

/// One page: the sales, the cursor to the next (if any), the body's size.
struct Page {
    goods: Vec<Goods>,
    next: Option<String>,
    bytes: usize,
}

async fn page(app: &TestApp, query: &str) -> Page {
    let res = app.signed(Peer::Gateway, Method::GET, &format!("/api/goods?{query}")).send().await.unwrap();
    assert_eq!(res.status(), 200, "{query}");
    let next = res.headers().get(NEXT_CURSOR).map(|v| v.to_str().unwrap().to_owned());
    let link = res.headers().get("link").map(|v| v.to_str().unwrap().to_owned());
    // The Link header names the same next page.
    assert_eq!(link.is_some(), next.is_some(), "{query}");
    if let (Some(link), Some(next)) = (&link, &next) {
        assert!(
            link.starts_with("</api/goods?state=") && link.contains(&format!("cursor={next}>")),
            "{link}"
        );
        assert!(link.ends_with("; rel=\"next\""), "{link}");
    }
    let body = res.bytes().await.unwrap();
    Page { goods: serde_json::from_slice(&body).unwrap(), next, bytes: body.len() }
}

/// Every page of `state` at `limit`, first to last.
async fn walk(app: &TestApp, state: &str, limit: u32) -> Vec<Page> {
    let mut pages = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut query = format!("state={state}&limit={limit}");
        if let Some(c) = &cursor {
            query.push_str(&format!("&cursor={c}"));
        }
        let p = page(app, &query).await;
        cursor = p.next.clone();
        pages.push(p);
        if cursor.is_none() {
            return pages;
        }
        assert!(pages.len() <= 200, "the walk does not end");
    }
}

async fn create(app: &TestApp, name: &str, start_in: Duration) -> Goods {
    let start_at = Utc::now() + start_in;
    let new = NewGoods {
        name: name.into(),
        price_cents: 100,
        seckill_price_cents: 50,
        stock_total: 5,
        start_at,
        end_at: start_at + Duration::hours(2),
        buckets: 1,
        waiting_room: None,
    };
    let res =
        app.signed(Peer::Seckill, Method::POST, "/internal/stock/goods").json(&new).send().await.unwrap();
    assert_eq!(res.status(), 201);
    res.json().await.unwrap()
}

#[derive(QueryableByName)]
struct PlanLine {
    #[diesel(sql_type = diesel::sql_types::Text, column_name = "QUERY PLAN")]
    line: String,
}

#[tokio::test]
async fn ten_thousand_ended_sales_are_listed_by_state_in_bounded_pages_each_once() {
    let app = spawn_app();
    let live = [
        create(&app, "live a", -Duration::minutes(5)).await,
        create(&app, "live b", -Duration::minutes(1)).await,
    ];
    let upcoming =
        [create(&app, "soon", Duration::hours(1)).await, create(&app, "later", Duration::days(3)).await];
    insert_ended_sales(&app.db, ENDED).await;

    // Without `state`: the live and upcoming sales, soonest first, in one page with no next.
    let first = page(&app, "").await;
    let current: Vec<Goods> = live.iter().chain(&upcoming).cloned().collect();
    assert_eq!(first.goods, current);
    assert_eq!(first.next, None, "nothing more to list");
    assert_eq!(page(&app, "state=live").await.goods, live);
    assert_eq!(page(&app, "state=upcoming").await.goods, upcoming);

    // The ended ones, 200 at a time, latest first: every one exactly once, each page bounded.
    let pages = walk(&app, "ended", MAX_PAGE).await;
    assert_eq!(pages.len(), (ENDED / MAX_PAGE) as usize);
    let ended: Vec<&Goods> = pages.iter().flat_map(|p| &p.goods).collect();
    assert_eq!(ended.len(), ENDED as usize);
    let ids: HashSet<i64> = ended.iter().map(|g| g.id.get()).collect();
    assert_eq!(ids.len(), ENDED as usize, "a sale listed twice");
    assert!(ended.iter().all(|g| g.end_at <= Utc::now() && g.name.starts_with("ended ")));
    assert!(ended.windows(2).all(|w| (w[0].end_at, w[0].id) > (w[1].end_at, w[1].id)), "latest first");
    assert!(ended.iter().any(|g| g.name == "ended 1001"), "sale 1,001 is found");
    let biggest = pages.iter().map(|p| p.bytes).max().unwrap();
    assert!(pages.iter().all(|p| p.goods.len() <= MAX_PAGE as usize));
    assert!(biggest < 64 * 1024, "a page of {biggest} bytes");

    // All three states at the default size: the 10,004 sales once each.
    let pages = walk(&app, "upcoming,live,ended", 100).await;
    let all: Vec<&Goods> = pages.iter().flat_map(|p| &p.goods).collect();
    assert_eq!(all.len(), ENDED as usize + 4);
    assert_eq!(all.iter().map(|g| g.id).collect::<HashSet<_>>().len(), all.len());
    assert!(all.windows(2).all(|w| (w[0].start_at, w[0].id) < (w[1].start_at, w[1].id)), "soonest first");

    // Each page is one range scan of an index, not a sort of the table.
    let mut conn = app.db.connect().await;
    for (query, index) in [
        ("SELECT * FROM goods WHERE end_at <= now() ORDER BY end_at DESC, id DESC LIMIT 201", "goods_by_end"),
        (
            "SELECT * FROM goods WHERE end_at <= now() AND (end_at, id) < (now() - interval '1 day', 5000) \
          ORDER BY end_at DESC, id DESC LIMIT 201",
            "goods_by_end",
        ),
        ("SELECT * FROM goods ORDER BY start_at, id LIMIT 101", "goods_by_start"),
    ] {
        diesel::sql_query("ANALYZE goods").execute(&mut conn).await.unwrap();
        let plan: Vec<PlanLine> =
            diesel::sql_query(format!("EXPLAIN {query}")).load(&mut conn).await.unwrap();
        let plan: Vec<String> = plan.into_iter().map(|l| l.line).collect();
        assert!(plan.iter().any(|l| l.contains(index)), "{query}: {plan:#?}");
        assert!(!plan.iter().any(|l| l.contains("Sort")), "{query}: {plan:#?}");
    }
}

#[tokio::test]
async fn bad_states_limits_and_cursors_are_400_naming_the_parameter() {
    let app = spawn_app();
    create(&app, "a", -Duration::minutes(1)).await;
    create(&app, "b", Duration::minutes(1)).await;
    let live_cursor = page(&app, "state=upcoming,live&limit=1").await.next.unwrap();
    for (query, names) in [
        ("state=open", "state"),
        ("state=", "state"),
        ("state=live,,ended", "state"),
        ("limit=0", "limit"),
        ("limit=201", "limit"),
        ("limit=-3", "limit"),
        ("limit=1e3", "limit"),
        ("cursor=", "cursor"),
        ("cursor=bm90IGEgY3Vyc29y", "cursor"),
        ("cursor=%00%FF", "cursor"),
        (&format!("state=ended&cursor={live_cursor}"), "cursor"),
    ] {
        let res =
            app.signed(Peer::Gateway, Method::GET, &format!("/api/goods?{query}")).send().await.unwrap();
        assert_eq!(res.status(), 400, "{query}");
        let body: serde_json::Value = res.json().await.unwrap();
        assert_eq!(body["code"], "INVALID_INPUT", "{query}");
        assert!(body["message"].as_str().unwrap().contains(names), "{query}: {body}");
    }
    // The cursor from the first page gives the second, which is the last.
    let second = page(&app, &format!("limit=1&cursor={live_cursor}")).await;
    assert_eq!((second.goods.len(), second.next), (1, None));
    assert_eq!(second.goods[0].name, "b");
}

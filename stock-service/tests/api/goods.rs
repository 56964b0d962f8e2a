//! Goods: creation checks, lookups, bad ids.

use reqwest::Method;
use seckill_common::trust::Peer;
use serde_json::json;

use crate::helpers::spawn_app;

#[tokio::test]
async fn created_goods_are_listed_and_found() {
    let app = spawn_app();
    let goods = app.create_goods(7).await;
    assert_eq!(goods.stock_available, 7);
    assert_eq!(app.goods(&goods).await, goods);
    let list: Vec<seckill_common::api::Goods> =
        app.signed(Peer::Gateway, Method::GET, "/api/goods").send().await.unwrap().json().await.unwrap();
    assert_eq!(list, vec![goods]);
}

#[tokio::test]
async fn only_seckill_service_creates_and_bad_bodies_are_refused() {
    let app = spawn_app();
    let body = json!({"name": "x", "price_cents": 10, "seckill_price_cents": 5, "stock_total": 1,
        "start_at": "2030-01-01T00:00:00Z", "end_at": "2030-01-02T00:00:00Z"});
    let post = |from: Peer, body: serde_json::Value| {
        app.signed(from, Method::POST, "/internal/stock/goods").json(&body).send()
    };
    // order-service holds a key of its own towards stock-service, but sales are not its to make.
    let res = post(Peer::Order, body.clone()).await.unwrap();
    assert_eq!(res.status(), 403);
    // The gateway never forwards /internal/...: its credential is no good there.
    let res = post(Peer::Gateway, body.clone()).await.unwrap();
    assert_eq!(res.status(), 401);
    let mut bad = body.clone();
    bad["stock_total"] = json!(-5);
    let res = post(Peer::Seckill, bad).await.unwrap();
    assert_eq!(res.status(), 400);
    let err: serde_json::Value = res.json().await.unwrap();
    assert_eq!(err["code"], "INVALID_INPUT");
    assert!(err["message"].as_str().unwrap().contains("stock_total"));
    let res = app.http.post(app.url("/internal/stock/goods")).json(&body).send().await.unwrap();
    assert_eq!(res.status(), 401);
    // The old public route is gone.
    let res = app.signed(Peer::Gateway, Method::POST, "/api/admin/goods").json(&body).send().await.unwrap();
    assert_eq!(res.status(), 404);
}

#[tokio::test]
async fn unknown_and_malformed_ids() {
    let app = spawn_app();
    for (path, status, code) in [
        ("/api/goods/12345", 404, "GOODS_NOT_FOUND"),
        ("/api/goods/abc", 400, "INVALID_INPUT"),
        ("/api/goods/-1", 400, "INVALID_INPUT"),
        ("/api/goods/0", 400, "INVALID_INPUT"),
        ("/nope", 404, "NOT_FOUND"),
    ] {
        let res = app.signed(Peer::Gateway, Method::GET, path).send().await.unwrap();
        assert_eq!(res.status(), status, "{path}");
        let body: serde_json::Value = res.json().await.unwrap();
        assert_eq!(body["code"], code, "{path}");
    }
}

/// `GET /api/goods` is answered from memory for a moment (a change behind this process's back,
/// as another replica's, shows once that moment is over), a spike of calls is answered, and
/// goods this process creates are listed at once.
#[tokio::test]
async fn the_list_is_kept_briefly_and_a_creation_here_is_listed_at_once() {
    use diesel_async::SimpleAsyncConnection;
    use futures_util::StreamExt;
    use seckill_common::api::Goods;

    let app = spawn_app();
    let first = app.create_goods(3).await;
    let mut behind_its_back = app.db.connect().await;
    let list = || async {
        let res = app.signed(Peer::Gateway, Method::GET, "/api/goods").send().await.unwrap();
        assert_eq!(res.status(), 200);
        assert_eq!(res.headers()["content-type"], "application/json");
        res.json::<Vec<Goods>>().await.unwrap()
    };
    assert_eq!(list().await, vec![first.clone()]);

    let sql = format!("UPDATE goods SET stock_available = 0 WHERE id = {}", first.id);
    behind_its_back.batch_execute(&sql).await.unwrap();
    assert_eq!(list().await[0].stock_available, 3, "answered from memory");
    let spike: Vec<Vec<Goods>> =
        futures_util::stream::iter(0..200).map(|_| list()).buffer_unordered(50).collect().await;
    assert!(spike.iter().all(|l| l.len() == 1 && l[0].id == first.id));
    tokio::time::sleep(stock_service::goods::LIST_CACHE_TTL + std::time::Duration::from_millis(100)).await;
    assert_eq!(list().await[0].stock_available, 0, "read again once stale");

    let second = app.create_goods(5).await;
    let listed = list().await;
    // The live ones soonest first: the second opened a moment after the first.
    assert_eq!(listed.iter().map(|g| g.id).collect::<Vec<_>>(), vec![first.id, second.id]);
    assert_eq!(listed[1], second);
}

/// A sale's `buckets` (the Redis keys its stock is split over) is kept and shown: 1 unless
/// asked, and only 1 to 8.
#[tokio::test]
async fn buckets_are_kept_shown_defaulted_and_checked() {
    use seckill_common::api::Goods;

    let app = spawn_app();
    let body = json!({"name": "x", "price_cents": 10, "seckill_price_cents": 5, "stock_total": 8,
        "start_at": "2030-01-01T00:00:00Z", "end_at": "2030-01-02T00:00:00Z"});
    let create = |buckets: Option<u8>| {
        let mut body = body.clone();
        if let Some(b) = buckets {
            body["buckets"] = json!(b);
        }
        app.signed(Peer::Seckill, Method::POST, "/internal/stock/goods").json(&body).send()
    };

    let res = create(Some(4)).await.unwrap();
    assert_eq!(res.status(), 201);
    let four: Goods = res.json().await.unwrap();
    assert_eq!(four.buckets, 4);
    assert_eq!(app.goods(&four).await.buckets, 4, "GET by id");

    let res = create(None).await.unwrap();
    assert_eq!(res.status(), 201);
    let one: Goods = res.json().await.unwrap();
    assert_eq!(one.buckets, 1, "one bucket unless asked");
    assert_eq!(app.goods(&one).await.buckets, 1);

    let list: Vec<Goods> =
        app.signed(Peer::Gateway, Method::GET, "/api/goods").send().await.unwrap().json().await.unwrap();
    // Both open at the same time: by id.
    assert_eq!(list.iter().map(|g| (g.id, g.buckets)).collect::<Vec<_>>(), vec![(four.id, 4), (one.id, 1)]);
    assert_eq!(list, vec![four, one]);

    for wrong in [0, 9] {
        let res = create(Some(wrong)).await.unwrap();
        assert_eq!(res.status(), 400, "buckets {wrong}");
        let err: serde_json::Value = res.json().await.unwrap();
        assert_eq!(err["code"], "INVALID_INPUT", "buckets {wrong}");
        assert!(err["message"].as_str().unwrap().contains("buckets"), "buckets {wrong}: {err}");
    }
    let list: Vec<Goods> =
        app.signed(Peer::Gateway, Method::GET, "/api/goods").send().await.unwrap().json().await.unwrap();
    assert_eq!(list.len(), 2, "nothing refused was created");
}

/// A sale's waiting room is kept and shown, by id and in the list, its rate as a number or
/// `"auto"` and its other fields defaulted when left out; a sale without one shows null.
#[tokio::test]
async fn a_waiting_room_is_kept_and_shown() {
    use seckill_common::api::Goods;
    use seckill_common::room::{RoomRate, WaitingRoom};

    let app = spawn_app();
    let create = |room: serde_json::Value| {
        let body = json!({"name": "x", "price_cents": 10, "seckill_price_cents": 5, "stock_total": 8,
            "start_at": "2030-01-01T00:00:00Z", "end_at": "2030-01-02T00:00:00Z", "waiting_room": room});
        app.signed(Peer::Seckill, Method::POST, "/internal/stock/goods").json(&body).send()
    };
    let mut made = Vec::new();
    for room in [
        json!({"rate": 50, "opens_before_secs": 900, "admission_secs": 60, "pow_difficulty": 12}),
        json!({"rate": "auto"}),
        json!(null),
    ] {
        let res = create(room.clone()).await.unwrap();
        assert_eq!(res.status(), 201, "{room}");
        made.push(res.json::<Goods>().await.unwrap());
    }
    let fixed = WaitingRoom {
        rate: RoomRate::PerSec(50),
        opens_before_secs: 900,
        admission_secs: 60,
        pow_difficulty: 12,
    };
    let auto =
        WaitingRoom { rate: RoomRate::AUTO, opens_before_secs: 600, admission_secs: 120, pow_difficulty: 0 };
    assert_eq!(made.iter().map(|g| g.waiting_room).collect::<Vec<_>>(), vec![Some(fixed), Some(auto), None]);
    for g in &made {
        assert_eq!(&app.goods(g).await, g, "GET by id");
    }

    // As the JSON shows it: the rate a number or the word.
    let shown: serde_json::Value = app
        .signed(Peer::Gateway, Method::GET, &format!("/api/goods/{}", made[1].id))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        shown["waiting_room"],
        json!({"rate": "auto", "opens_before_secs": 600, "admission_secs": 120, "pow_difficulty": 0})
    );
    let list: serde_json::Value =
        app.signed(Peer::Gateway, Method::GET, "/api/goods").send().await.unwrap().json().await.unwrap();
    let rooms: Vec<_> = list.as_array().unwrap().iter().map(|g| g["waiting_room"].clone()).collect();
    assert_eq!(rooms[0]["rate"], 50);
    assert_eq!((&rooms[1]["rate"], &rooms[2]), (&json!("auto"), &json!(null)));
    let list: Vec<Goods> = serde_json::from_value(list).unwrap();
    assert_eq!(list, made);
}

/// A room out of bounds, or on a sale already open, is refused with a 400 naming the field,
/// and nothing is written.
#[tokio::test]
async fn a_waiting_room_out_of_bounds_or_on_a_started_sale_is_refused() {
    let app = spawn_app();
    let sale = |start_at: &str, room: serde_json::Value| {
        json!({"name": "x", "price_cents": 10, "seckill_price_cents": 5, "stock_total": 8,
            "start_at": start_at, "end_at": "2030-01-02T00:00:00Z", "waiting_room": room})
    };
    let later = "2030-01-01T00:00:00Z";
    for (body, names) in [
        (sale(later, json!({"rate": 0})), "waiting_room.rate"),
        (sale(later, json!({"rate": 1_000_001})), "waiting_room.rate"),
        (sale(later, json!({"rate": 1, "opens_before_secs": 604_801})), "waiting_room.opens_before_secs"),
        (sale(later, json!({"rate": 1, "admission_secs": 9})), "waiting_room.admission_secs"),
        (sale(later, json!({"rate": 1, "admission_secs": 3_601})), "waiting_room.admission_secs"),
        (sale(later, json!({"rate": 1, "pow_difficulty": 25})), "waiting_room.pow_difficulty"),
        (sale("2020-01-01T00:00:00Z", json!({"rate": "auto"})), "waiting_room"),
        // What serde refuses: not a rate, a field no room has, no rate at all.
        (sale(later, json!({"rate": "fast"})), "invalid JSON"),
        (sale(later, json!({"rate": 1, "size": 3})), "size"),
        (sale(later, json!({})), "rate"),
    ] {
        let res = app
            .signed(Peer::Seckill, Method::POST, "/internal/stock/goods")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 400, "{body}");
        let err: serde_json::Value = res.json().await.unwrap();
        assert_eq!(err["code"], "INVALID_INPUT", "{body}");
        let message = err["message"].as_str().unwrap();
        assert!(message.contains(names), "{names}: {message}");
    }
    let list: Vec<serde_json::Value> = app
        .signed(Peer::Gateway, Method::GET, "/api/goods?state=upcoming,live,ended")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(list.is_empty(), "nothing refused was created: {list:?}");
    // A sale already open may still be made, without a room.
    let res = app
        .signed(Peer::Seckill, Method::POST, "/internal/stock/goods")
        .json(&sale("2020-01-01T00:00:00Z", json!(null)))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
}

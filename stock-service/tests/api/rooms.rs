//! A waiting room's marks (`POST /internal/stock/rooms/{goods_id}`): every mark only rises,
//! `drawn` is set once, concurrent raises end at the largest, zeros read; only seckill-service
//! may call it, and only for a sale that has a room.

use std::sync::Arc;

use chrono::{Duration, Utc};
use diesel_async::SimpleAsyncConnection;
use reqwest::Method;
use seckill_common::api::{Goods, NewGoods};
use seckill_common::config::UpstreamSettings;
use seckill_common::room::{CameUp, RoomMarks, RoomRate, RoomRecord, WaitingRoom};
use seckill_common::trust::Peer;
use seckill_infra::stock_client::{StockClient, StockError};
use seckill_testkit::keys;
use serde_json::json;

use crate::helpers::{TestApp, spawn_app};

/// A sale opening in an hour, with a room when `room` is set.
async fn sale(app: &TestApp, room: Option<WaitingRoom>) -> Goods {
    let start_at = Utc::now() + Duration::hours(1);
    let new = NewGoods {
        name: "roomy phone".into(),
        price_cents: 100,
        seckill_price_cents: 50,
        stock_total: 5,
        start_at,
        end_at: start_at + Duration::hours(1),
        buckets: 1,
        waiting_room: room,
    };
    let res =
        app.signed(Peer::Seckill, Method::POST, "/internal/stock/goods").json(&new).send().await.unwrap();
    assert_eq!(res.status(), 201);
    res.json().await.unwrap()
}

const ROOM: WaitingRoom = WaitingRoom {
    rate: RoomRate::PerSec(100),
    opens_before_secs: 600,
    admission_secs: 120,
    pow_difficulty: 0,
};

fn path(g: &Goods) -> String {
    format!("/internal/stock/rooms/{}", g.id)
}

/// Raises `g`'s marks as seckill-service does; the answer when 200.
async fn raise(app: &TestApp, g: &Goods, marks: RoomMarks) -> RoomMarks {
    let (status, body) = app.post_as(Peer::Seckill, &path(g), serde_json::to_value(marks).unwrap()).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_value(body).unwrap()
}

#[tokio::test]
async fn room_marks_only_rise_and_drawn_is_set_once() {
    let app = spawn_app();
    let g = sale(&app, Some(ROOM)).await;
    let read = RoomMarks::default();
    assert_eq!(raise(&app, &g, read).await, read, "a room nobody joined yet reads as zeros");

    let high = RoomMarks {
        joins_before: 40,
        joins_after: 7,
        admitted: 12,
        admitted_at_ms: 1_700_000,
        ..RoomMarks::default()
    };
    assert_eq!(raise(&app, &g, high).await, high);
    let lower =
        RoomMarks { joins_before: 5, joins_after: 6, admitted: 1, admitted_at_ms: 9, ..RoomMarks::default() };
    assert_eq!(raise(&app, &g, lower).await, high, "a lower value leaves a mark where it is");
    assert_eq!(raise(&app, &g, read).await, high, "zeros read");

    // Each field on its own: one higher, the others left.
    let more = RoomMarks { joins_after: 8, ..lower };
    assert_eq!(raise(&app, &g, more).await, RoomMarks { joins_after: 8, ..high });

    let drawn = RoomMarks { drawn: Some(40), ..read };
    let now = RoomMarks { joins_after: 8, drawn: Some(40), ..high };
    assert_eq!(raise(&app, &g, drawn).await, now);
    for other in [Some(41), Some(0), None] {
        assert_eq!(
            raise(&app, &g, RoomMarks { drawn: other, ..read }).await,
            now,
            "drawn {other:?}: set once"
        );
    }

    // Kept in the database: another stock-service replica, or this one restarted, reads them.
    let again = crate::helpers::spawn_app_with(|s| s.database.url = Some(app.db.url().to_owned()));
    assert_eq!(raise(&again, &g, read).await, now);
}

#[tokio::test]
async fn concurrent_room_raises_end_at_the_largest_of_each() {
    let app = Arc::new(spawn_app());
    let g = sale(&app, Some(ROOM)).await;
    // Fields that rise in different orders across the tasks, so no one call holds every maximum.
    let sent = |i: u64| RoomMarks {
        joins_before: i,
        joins_after: 1_000 - i,
        drawn: Some(500 + i),
        admitted: (i * 37) % 101,
        admitted_at_ms: i64::try_from(i % 13).unwrap() * 1_000,
        came_up: None,
    };
    let tasks: Vec<_> = (1..=64)
        .map(|i| {
            let (app, g) = (app.clone(), g.clone());
            tokio::spawn(async move { (sent(i), raise(&app, &g, sent(i)).await) })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    let all: Vec<RoomMarks> = answers.iter().map(|(m, _)| *m).collect();
    let max = |f: fn(&RoomMarks) -> u64| all.iter().map(f).max().unwrap();
    let end = raise(&app, &g, RoomMarks::default()).await;
    assert_eq!(end.joins_before, max(|m| m.joins_before));
    assert_eq!(end.joins_after, max(|m| m.joins_after));
    assert_eq!(end.admitted, max(|m| m.admitted));
    assert_eq!(end.admitted_at_ms, all.iter().map(|m| m.admitted_at_ms).max().unwrap());
    // `drawn`: the first call's to arrive, and every answer agrees on it.
    assert!(all.iter().any(|m| m.drawn == end.drawn), "{end:?}");
    for (asked, answer) in &answers {
        assert_eq!(answer.drawn, end.drawn);
        assert!(answer.joins_before >= asked.joins_before && answer.joins_after >= asked.joins_after);
        assert!(answer.admitted >= asked.admitted && answer.admitted_at_ms >= asked.admitted_at_ms);
    }
}

#[tokio::test]
async fn room_marks_of_an_unknown_sale_or_one_without_a_room_are_404() {
    let app = spawn_app();
    let plain = sale(&app, None).await;
    let zeros = serde_json::to_value(RoomMarks::default()).unwrap();
    let (status, body) = app.post_as(Peer::Seckill, &path(&plain), zeros.clone()).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("NO_WAITING_ROOM")), "{body}");
    let (status, body) = app.post_as(Peer::Seckill, "/internal/stock/rooms/987654", zeros.clone()).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("GOODS_NOT_FOUND")), "{body}");
    let (status, body) = app.post_as(Peer::Seckill, "/internal/stock/rooms/0", zeros).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("INVALID_INPUT")), "{body}");
    assert_eq!(marks_rows(&app).await, 0, "no marks for a sale without a room");
}

#[tokio::test]
async fn room_marks_past_a_bigint_or_malformed_are_400_and_change_nothing() {
    let app = spawn_app();
    let g = sale(&app, Some(ROOM)).await;
    let base = RoomMarks { joins_before: 3, ..RoomMarks::default() };
    raise(&app, &g, base).await;
    let past = u64::try_from(i64::MAX).unwrap() + 1;
    for (field, value) in [
        ("joins_before", json!(past)),
        ("joins_after", json!(u64::MAX)),
        ("drawn", json!(past)),
        ("admitted", json!(past)),
    ] {
        let mut body = serde_json::to_value(RoomMarks::default()).unwrap();
        body[field] = value;
        let (status, err) = app.post_as(Peer::Seckill, &path(&g), body).await;
        assert_eq!((status, err["code"].as_str()), (400, Some("INVALID_INPUT")), "{field}: {err}");
        assert!(err["message"].as_str().unwrap().contains(field), "{field}: {err}");
    }
    let fit = RoomMarks { joins_before: u64::try_from(i64::MAX).unwrap(), ..base };
    assert_eq!(raise(&app, &g, fit).await.joins_before, fit.joins_before, "i64::MAX itself fits");
    for junk in [json!({"joins_before": -1}), json!({"joins_before": 1}), json!({"unknown": 1}), json!("x")] {
        let (status, err) = app.post_as(Peer::Seckill, &path(&g), junk.clone()).await;
        assert_eq!((status, err["code"].as_str()), (400, Some("INVALID_INPUT")), "{junk}: {err}");
    }
    assert_eq!(raise(&app, &g, RoomMarks::default()).await, fit);
}

#[tokio::test]
async fn only_seckill_service_raises_room_marks() {
    let app = spawn_app();
    let g = sale(&app, Some(ROOM)).await;
    let high = serde_json::to_value(RoomMarks { joins_before: 9, ..RoomMarks::default() }).unwrap();
    let res = app.http.post(app.url(&path(&g))).json(&high).send().await.unwrap();
    assert_eq!(res.status(), 401, "no credential");
    // The gateway never forwards /internal/...; order-service has a key, but not for this.
    assert_eq!(app.post_as(Peer::Gateway, &path(&g), high.clone()).await.0, 401);
    assert_eq!(app.post_as(Peer::Order, &path(&g), high.clone()).await.0, 403);
    assert_eq!(raise(&app, &g, RoomMarks::default()).await, RoomMarks::default(), "none of those raised");
    assert_eq!(raise(&app, &g, serde_json::from_value(high).unwrap()).await.joins_before, 9);
}

/// seckill-service's client: raises, reads, and tells the two 404s apart by their codes.
#[tokio::test]
async fn the_stock_client_raises_room_marks() {
    let app = spawn_app();
    let (room, plain) = (sale(&app, Some(ROOM)).await, sale(&app, None).await);
    let upstreams = UpstreamSettings { stock: app.service.url(), ..UpstreamSettings::default() };
    let client = StockClient::new(&upstreams, keys::trust(Peer::Seckill)).unwrap();
    let marks = RoomMarks { joins_before: 5, drawn: Some(5), ..RoomMarks::default() };
    assert_eq!(client.raise_room(room.id, &marks).await.unwrap(), marks);
    assert_eq!(client.raise_room(room.id, &RoomMarks::default()).await.unwrap(), marks);
    let code = |e: StockError| match e {
        StockError::Refused { status, body } => (status, body.code),
        other => panic!("{other}"),
    };
    let e = client.raise_room(plain.id, &marks).await.unwrap_err();
    assert_eq!(code(e), (404, "NO_WAITING_ROOM".to_owned()));
    let missing = seckill_common::GoodsId::new(987_654).unwrap();
    assert_eq!(
        code(client.raise_room(missing, &marks).await.unwrap_err()),
        (404, "GOODS_NOT_FOUND".to_owned())
    );
}

/// The leader's marks sent with the leases come back oldest first, the first of each count
/// standing, those older than the longest admission's life dropped; only seckill-service reads.
#[tokio::test]
async fn the_leaders_marks_of_places_come_up_are_kept_for_an_admissions_life() {
    let app = spawn_app();
    let (room, plain) = (sale(&app, Some(ROOM)).await, sale(&app, None).await);
    let upstreams = UpstreamSettings { stock: app.service.url(), ..UpstreamSettings::default() };
    let client = StockClient::new(&upstreams, keys::trust(Peer::Seckill)).unwrap();
    assert_eq!(client.room_record(room.id).await.unwrap(), RoomRecord::default(), "nothing raised yet");
    let lease = |admitted: u64, at_ms: i64| RoomMarks {
        admitted: admitted + 10,
        admitted_at_ms: at_ms + 1_000,
        came_up: Some(CameUp { at_ms, admitted }),
        ..RoomMarks::default()
    };
    let hour = 3_600_000;
    for (admitted, at_ms) in [(5, 1_000), (9, 2_000), (9, 2_500), (30, hour + 2_000), (40, hour + 11_500)] {
        let answer = client.raise_room(room.id, &lease(admitted, at_ms)).await.unwrap();
        assert_eq!(answer.came_up, None, "sent, never answered");
    }
    let record = client.room_record(room.id).await.unwrap();
    assert_eq!((record.marks.admitted, record.marks.admitted_at_ms), (50, hour + 12_500));
    // 5 by 1,000 is older than an hour and ten seconds before the newest: dropped.
    let kept = [CameUp { at_ms: 2_000, admitted: 9 }, CameUp { at_ms: hour + 2_000, admitted: 30 }];
    assert_eq!(record.came_up, [&kept[..], &[CameUp { at_ms: hour + 11_500, admitted: 40 }]].concat());
    let code = |e: StockError| match e {
        StockError::Refused { status, body } => (status, body.code),
        other => panic!("{other}"),
    };
    assert_eq!(code(client.room_record(plain.id).await.unwrap_err()), (404, "NO_WAITING_ROOM".to_owned()));
    let missing = seckill_common::GoodsId::new(987_654).unwrap();
    assert_eq!(code(client.room_record(missing).await.unwrap_err()), (404, "GOODS_NOT_FOUND".to_owned()));
    let res = app.signed(Peer::Order, Method::GET, &path(&room)).send().await.unwrap();
    assert_eq!(res.status(), 403, "order-service holds a key, not for this");
    let junk = json!({"admitted": 1, "came_up": {"at_ms": 1, "admitted": -1}});
    let (status, err) = app.post_as(Peer::Seckill, &path(&room), junk).await;
    assert_eq!((status, err["code"].as_str()), (400, Some("INVALID_INPUT")), "{err}");
}

/// The table's CHECKs refuse a room stored in part or out of bounds, whatever writes it.
#[tokio::test]
async fn the_table_keeps_a_room_whole_and_in_bounds() {
    let app = spawn_app();
    let g = sale(&app, Some(ROOM)).await;
    let mut conn = app.db.connect().await;
    for change in [
        "room_rate = NULL",
        "room_pow_difficulty = NULL",
        "room_rate = -1",
        "room_rate = 1000001",
        "room_admission_secs = 9",
        "room_opens_before_secs = 604801",
        "room_pow_difficulty = 25",
    ] {
        let sql = format!("UPDATE goods SET {change} WHERE id = {}", g.id);
        assert!(conn.batch_execute(&sql).await.is_err(), "{change} was stored");
    }
    let negative = format!("INSERT INTO room_marks (goods_id, admitted) VALUES ({}, -1)", g.id);
    assert!(conn.batch_execute(&negative).await.is_err(), "a negative mark was stored");
    assert_eq!(app.goods(&g).await.waiting_room, Some(ROOM));
}

async fn marks_rows(app: &TestApp) -> i64 {
    #[derive(diesel::QueryableByName)]
    struct Count {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let mut conn = app.db.connect().await;
    let count: Count = diesel_async::RunQueryDsl::get_result(
        diesel::sql_query("SELECT count(*) AS n FROM room_marks"),
        &mut conn,
    )
    .await
    .unwrap();
    count.n
}

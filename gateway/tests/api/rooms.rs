//! A waiting room's status polls answered by the gateway from its mirror of the room
//! (`GET /internal/gateway/rooms/{id}`, read every 100 ms with the gateway's credential): no
//! hop once the room is mirrored, an admission included; a ticket the room key does not open,
//! another user's ticket and a room seckill-service does not know are still seckill-service's
//! to answer.

use std::sync::atomic::Ordering;
use std::time::Duration;

use seckill_common::room::scripts::AFTER_BASE;
use seckill_common::room::{CameUpMarks, PlaceTicket, RoomKey, RoomSnapshot, RoomState};
use seckill_common::{GoodsId, UserId};
use seckill_testkit::keys;
use serde_json::Value;

use crate::helpers::{Echo, TestApp, metric, settings, user_token};

const SALE: i64 = 7;

/// How long an admission lives in the room described.
const LIFE_MS: i64 = 60_000;

/// The room seckill-service describes at `now`: 10 drawn, 20 joined after the opening, 15 come
/// up (the first 12 more than an admission's life ago, the last 3 a second ago), 5 a second.
fn room_snapshot(now: i64) -> RoomSnapshot {
    let state = RoomState {
        start_ms: now - 600_000,
        end_ms: now + 3_600_000,
        drawn: Some(10),
        after: 20,
        admitted: 15,
        rate: 5.0,
        sold_out: false,
    };
    let came_up = CameUpMarks::new(vec![(now - 2 * LIFE_MS, 12), (now - 1_000, 15)]);
    RoomSnapshot { state, admission_secs: (LIFE_MS / 1000) as u32, came_up }
}

/// A gateway whose seckill-service answers every call `status` with `body`.
fn gateway(status: u16, body: &'static str) -> (TestApp, Echo) {
    let seckill = Echo::new("seckill").status(status).body(body);
    let seen = seckill.clone();
    let (seckill, order, stock) = (seckill.start(), Echo::new("order").start(), Echo::new("stock").start());
    let mut s = settings(&seckill.url(), &order.url(), &stock.url());
    // Every take of the shared buckets a call to Redis: the calls count the takes.
    s.rate_limit.lease = 1;
    (TestApp::start(s, vec![seckill, order, stock]), seen)
}

/// The ticket of the user who joined `k`-th after the opening (place 10 + k, from 0).
fn ticket(key: &RoomKey, user: i64, k: u64) -> String {
    let sale = GoodsId::new(SALE).unwrap();
    PlaceTicket { sale, user: UserId::new(user).unwrap(), join: AFTER_BASE + k, issued_ms: 1 }.seal(key)
}

async fn poll(app: &TestApp, user: i64, ticket: &str) -> (u16, Value) {
    let res = app
        .get(&format!("/api/seckill/{SALE}/queue"))
        .bearer_auth(user_token(user))
        .header("x-room-ticket", ticket)
        .send()
        .await
        .unwrap();
    (res.status().as_u16(), res.json().await.unwrap_or(Value::Null))
}

/// Polls of the queue route that reached seckill-service, and reads of the room.
fn reached(seckill: &Echo) -> (usize, usize) {
    let seen = seckill.seen.lock().unwrap();
    let polls = seen.iter().filter(|s| s.path.ends_with("/queue")).count();
    let reads = seen.iter().filter(|s| s.path == format!("/internal/gateway/rooms/{SALE}")).count();
    (polls, reads)
}

#[tokio::test]
async fn once_mirrored_a_room_is_answered_here_admissions_included() {
    let now = chrono::Utc::now().timestamp_millis();
    let body: &'static str = Box::leak(serde_json::to_string(&room_snapshot(now)).unwrap().into_boxed_str());
    let (app, seckill) = gateway(200, body);
    let key = keys::room_key();
    let waiting = ticket(&key, 1, 10);

    // The first poll goes to seckill-service; its 200 starts the mirror.
    assert_eq!(poll(&app, 1, &waiting).await.0, 200);
    assert_eq!(reached(&seckill).0, 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(reached(&seckill).1 >= 1, "the room is read (with the gateway's credential: the echo checks it)");

    // Then: answered here, as seckill-service would (place 21 from 1, 5 ahead, 6 places at 5/s).
    for _ in 0..20 {
        let (status, status_body) = poll(&app, 1, &waiting).await;
        assert_eq!(status, 200, "{status_body}");
        assert_eq!(status_body["state"], "waiting");
        assert_eq!((status_body["place"].as_u64(), status_body["ahead"].as_u64()), (Some(21), Some(5)));
        assert_eq!(status_body["wait_secs"], 2);
        assert_eq!(status_body["poll_after_ms"], 500);
        assert_eq!(status_body["ticket"], waiting.as_str());
        assert_eq!(status_body["draw"]["joined_before"], 10);
        assert_eq!(status_body["draw"]["seed"].as_str().map(str::len), Some(64), "the seed, once drawn");
    }

    // A place come up a second ago (place 13 from 1): admitted here, with an admission that
    // opens with the room key and lives until an admission's life after that second.
    let (status, admitted) = poll(&app, 2, &ticket(&key, 2, 2)).await;
    assert_eq!((status, admitted["state"].as_str()), (200, Some("admitted")), "{admitted}");
    assert_eq!(admitted["place"], 13);
    let sealed = admitted["admission"].as_str().expect("an admission");
    let (sale, user) = (GoodsId::new(SALE).unwrap(), UserId::new(2).unwrap());
    let admission = key.open_admission(sealed, sale, user, now).expect("sealed with the room key");
    assert_eq!(admission.expires_ms, now - 1_000 + LIFE_MS, "from the mark of when the place came up");
    assert_eq!(admission.place, 12);
    // A place that came up before the oldest mark kept: its admission is over.
    let (status, closed) = poll(&app, 2, &ticket(&key, 2, 1)).await;
    assert_eq!((status, closed["state"].as_str(), closed["place"].as_u64()), (200, Some("closed"), Some(12)));
    assert!(closed["admission"].is_null());

    assert_eq!(reached(&seckill).0, 1, "no poll but the first reached seckill-service");
    assert_eq!(metric(&app, "gateway_room_answers_total").await, 22.0);
    // Answered from memory: this replica's poll bucket only, no call to the shared one.
    assert_eq!(metric(&app, "gateway_rate_limit_shared_asks_total").await, 1.0);

    // Left to seckill-service: a forged ticket, a ticket of another user, and no ticket.
    let forged = ticket(&RoomKey::new(b"0123456789abcdef0123456789abcdef-not-the-key").unwrap(), 3, 10);
    let someone_elses = ticket(&key, 4, 10);
    assert_eq!(poll(&app, 3, &forged).await.0, 200);
    assert_eq!(poll(&app, 5, &someone_elses).await.0, 200);
    let res = app.get(&format!("/api/seckill/{SALE}/queue")).bearer_auth(user_token(6)).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(reached(&seckill).0, 4, "each of those three went to seckill-service");
    assert_eq!(
        metric(&app, "gateway_rate_limit_shared_asks_total").await,
        4.0,
        "and took from the shared bucket"
    );
    assert_eq!(seckill.calls.load(Ordering::SeqCst), 4 + reached(&seckill).1);
}

#[tokio::test]
async fn a_room_seckill_service_does_not_know_is_never_mirrored() {
    let (app, seckill) = gateway(404, r#"{"code":"NO_WAITING_ROOM","message":"sale 7 has no waiting room"}"#);
    let waiting = ticket(&keys::room_key(), 1, 10);
    for _ in 0..3 {
        assert_eq!(poll(&app, 1, &waiting).await.0, 404);
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    assert_eq!(reached(&seckill), (3, 0), "every poll forwarded, the room never read");
}

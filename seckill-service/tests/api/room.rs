//! A sale's waiting room: places (drawn before the opening, in arrival order after), the
//! admissions at the room's rate, the buy routes asking for them, sold out told to everyone,
//! a loss of Redis changing nobody's place.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use reqwest::Method;
use seckill_common::api::{Goods, Role};
use seckill_common::room::{Admission, Challenge, Draw, RoomKey};
use seckill_common::trust::Peer;
use seckill_common::{GoodsId, UserId, headers};
use seckill_testkit::keys;
use serde_json::{Value, json};

use crate::helpers::{Answer, TestApp, answer, spawn_app, spawn_app_with};

fn room(rate: u32) -> Value {
    json!({"rate": rate, "opens_before_secs": 600, "admission_secs": 30})
}

/// The key the service seals room tokens with (`room.key`).
fn room_key() -> RoomKey {
    keys::room_key()
}

/// The join number a ticket carries (`v1.p.<sale>.<user>.<join>.<issued>.<tag>`).
fn join_of(ticket: &str) -> u64 {
    ticket.split('.').nth(4).unwrap().parse().unwrap()
}

/// The ticket with another join number, its tag left as it was.
fn forge_join(ticket: &str, join: u64) -> String {
    let mut fields: Vec<String> = ticket.split('.').map(str::to_owned).collect();
    fields[4] = (join_of(ticket) + 1 + join).to_string();
    fields.join(".")
}

async fn wait_until(at: chrono::DateTime<chrono::Utc>) {
    if let Ok(d) = (at - chrono::Utc::now()).to_std() {
        tokio::time::sleep(d).await;
    }
}

/// Joins each user, `in_flight` at a time; the tickets in user order.
async fn join_all(app: &TestApp, g: GoodsId, users: std::ops::Range<i64>, in_flight: usize) -> Vec<String> {
    futures_util::stream::iter(users)
        .map(|u| async move {
            let (status, body) = app.join(u, g, Value::Null).await;
            assert_eq!(status, 200, "join {u}: {body}");
            body["ticket"].as_str().unwrap().to_owned()
        })
        .buffered(in_flight)
        .collect()
        .await
}

/// Asks until `done` holds for the answer, for at most `within`.
async fn standing_until(
    app: &TestApp,
    u: i64,
    g: GoodsId,
    ticket: &str,
    within: Duration,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let (status, body) = app.standing(u, g, ticket).await;
        assert_eq!(status, 200, "{body}");
        if done(&body) || Instant::now() > deadline {
            return body;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn token_with(app: &TestApp, u: i64, g: GoodsId, admission: Option<&str>) -> Answer {
    let mut req = app.as_user(u, Role::User, Method::POST, &format!("/api/seckill/{g}/token"));
    if let Some(a) = admission {
        req = req.header(headers::ROOM_ADMISSION, a);
    }
    answer(req.send().await.unwrap()).await
}

#[tokio::test]
async fn joins_after_the_opening_are_admitted_in_arrival_order() {
    let app = spawn_app();
    let sale = app.room_sale(10, Duration::from_millis(1_500), room(10)).await;
    wait_until(sale.start_at).await;
    let mut tickets = Vec::new();
    for u in 100..120 {
        let (status, body) = app.join(u, sale.id, Value::Null).await;
        assert_eq!((status, body["state"].as_str()), (200, Some("waiting")), "{body}");
        tickets.push(body["ticket"].as_str().unwrap().to_owned());
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // The draw (of nobody) follows the opening within a tick of the leader's.
    standing_until(&app, 100, sale.id, &tickets[0], Duration::from_secs(2), |b| !b["place"].is_null()).await;
    // Every look: those admitted are the first ones in arrival order, the places 1, 2, 3, ...
    let deadline = Instant::now() + Duration::from_secs(6);
    let mut last_admitted = 0;
    while last_admitted < 20 && Instant::now() < deadline {
        let mut admitted = Vec::new();
        for (i, t) in tickets.iter().enumerate() {
            let (_, body) = app.standing(100 + i as i64, sale.id, t).await;
            assert_eq!(body["place"], json!(i + 1), "joined {i}th: {body}");
            admitted.push(body["state"] == "admitted");
        }
        let n = admitted.iter().filter(|a| **a).count();
        assert!(admitted.iter().take(n).all(|a| *a), "admitted out of order: {admitted:?}");
        last_admitted = n;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(last_admitted, 20, "all admitted at 10 a second within 6 s");
}

#[tokio::test]
async fn joins_before_the_opening_get_places_drawn_at_random_that_anyone_can_check() {
    let app = spawn_app();
    let n = 2_000;
    let sale = app.room_sale(10, Duration::from_secs(8), room(1_000)).await;
    let tickets = join_all(&app, sale.id, 1..n + 1, 32).await;
    assert!(chrono::Utc::now() < sale.start_at, "every join before the opening");
    let (_, before) = app.standing(1, sale.id, &tickets[0]).await;
    assert_eq!(before["place"], Value::Null, "no place before the draw: {before}");
    assert_eq!(before["draw"]["seed"], Value::Null, "the seed stays secret until the opening");
    let commitment = before["draw"]["commitment"].as_str().unwrap().to_owned();
    wait_until(sale.start_at).await;

    let drawn =
        standing_until(&app, 1, sale.id, &tickets[0], Duration::from_secs(3), |b| !b["place"].is_null())
            .await;
    let seed_hex = drawn["draw"]["seed"].as_str().unwrap();
    let seed: [u8; 32] = (0..32)
        .map(|i| u8::from_str_radix(&seed_hex[2 * i..2 * i + 2], 16).unwrap())
        .collect::<Vec<_>>()
        .try_into()
        .unwrap();
    assert_eq!(Draw::commitment(&seed), commitment, "the seed is the one committed to");
    assert_eq!(drawn["draw"]["joined_before"], json!(n));
    let draw = Draw::new(seed, u64::try_from(n).unwrap());

    let mut pairs = Vec::new();
    for (u, t) in tickets.iter().enumerate() {
        let (_, body) = app.standing(u as i64 + 1, sale.id, t).await;
        let place = body["place"].as_u64().unwrap();
        let join = join_of(t);
        assert_eq!(place, draw.place_of(join) + 1, "anyone recomputes the place from the seed");
        pairs.push((join as f64, place as f64));
    }
    let mut places: Vec<u64> = pairs.iter().map(|p| p.1 as u64).collect();
    places.sort_unstable();
    assert_eq!(places, (1..=n as u64).collect::<Vec<_>>(), "every place once");
    // Spearman's rank correlation of arrival and place (both are ranks already).
    let mean = (n as f64 + 1.0) / 2.0;
    let (mut cov, mut var_a, mut var_b) = (0.0, 0.0, 0.0);
    for (a, b) in &pairs {
        let (a, b) = (a + 1.0 - mean, b - mean);
        cov += a * b;
        var_a += a * a;
        var_b += b * b;
    }
    let rho = cov / (var_a.sqrt() * var_b.sqrt());
    assert!(rho.abs() < 0.1, "arrival and place correlate: rho = {rho}");
}

#[tokio::test]
async fn the_buy_routes_of_a_room_sale_ask_for_the_buyers_own_live_admission() {
    let app = spawn_app();
    let sale = app.room_sale(10, Duration::from_millis(1_500), room(100)).await;
    let other = app.room_sale(10, Duration::from_millis(1_500), room(100)).await;
    // Before the opening too, what a buyer without an admission hears is to join the room.
    let (status, body) = token_with(&app, 7, sale.id, None).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("NOT_ADMITTED")), "before the opening: {body}");
    wait_until(sale.start_at).await;
    let (_, joined) = app.join(7, sale.id, Value::Null).await;
    let ticket = joined["ticket"].as_str().unwrap().to_owned();
    let admitted =
        standing_until(&app, 7, sale.id, &ticket, Duration::from_secs(3), |b| b["state"] == "admitted").await;
    let admission = admitted["admission"].as_str().expect("admitted").to_owned();

    let (status, body) = token_with(&app, 7, sale.id, None).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("NOT_ADMITTED")), "{body}");
    let key = room_key();
    let now = chrono::Utc::now().timestamp_millis();
    let sealed = |sale: GoodsId, user: i64, expires_ms: i64| {
        Admission { sale, user: UserId::new(user).unwrap(), place: 0, expires_ms }.seal(&key)
    };
    let forged = RoomKey::new(b"0123456789abcdef0123456789abcdef-not-the-key").unwrap();
    let refused = [
        ("another user's", admission.clone(), 8),
        ("another sale's", sealed(other.id, 7, now + 60_000), 7),
        ("an expired one", sealed(sale.id, 7, now - 1), 7),
        (
            "a forged one",
            Admission { sale: sale.id, user: UserId::new(7).unwrap(), place: 0, expires_ms: now + 60_000 }
                .seal(&forged),
            7,
        ),
        ("garbage", "v1.a.1.2.3".to_owned(), 7),
    ];
    for (what, presented, user) in refused {
        let (status, body) = token_with(&app, user, sale.id, Some(&presented)).await;
        assert_eq!((status, body["code"].as_str()), (403, Some("NOT_ADMITTED")), "{what}: {body}");
    }
    // The order route asks too, path token or not.
    let res = app
        .as_user(7, Role::User, Method::POST, &format!("/api/seckill/{}/orders", sale.id))
        .send()
        .await
        .unwrap();
    let (status, body) = answer(res).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("NOT_ADMITTED")), "{body}");

    let (status, body) = token_with(&app, 7, sale.id, Some(&admission)).await;
    assert_eq!(status, 200, "{body}");
    let res = app
        .as_user(7, Role::User, Method::POST, &format!("/api/seckill/{}/orders", sale.id))
        .header(headers::SECKILL_TOKEN, body["token"].as_str().unwrap())
        .header(headers::ROOM_ADMISSION, &admission)
        .send()
        .await
        .unwrap();
    let (status, body) = answer(res).await;
    assert_eq!(status, 202, "the admitted buyer buys: {body}");
}

#[tokio::test]
async fn sold_out_reaches_every_waiter_within_a_second() {
    let app = spawn_app_with(|s| s.seckill.require_token = false);
    let sale = app.room_sale(1, Duration::from_millis(1_500), room(1)).await;
    wait_until(sale.start_at).await;
    // The first in line, then 49 behind.
    let mut tickets = join_all(&app, sale.id, 200..201, 1).await;
    tickets.extend(join_all(&app, sale.id, 201..250, 16).await);
    let first =
        standing_until(&app, 200, sale.id, &tickets[0], Duration::from_secs(3), |b| b["state"] == "admitted")
            .await;
    let res = app
        .as_user(200, Role::User, Method::POST, &format!("/api/seckill/{}/orders", sale.id))
        .header(headers::ROOM_ADMISSION, first["admission"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202);
    let sold = Instant::now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    for (i, t) in tickets.iter().enumerate().skip(1) {
        let (_, body) = app.standing(200 + i as i64, sale.id, t).await;
        assert_eq!(body["state"], "sold_out", "waiter {i}, {:?} after the last unit: {body}", sold.elapsed());
    }
    // Joining now, afresh or again with a ticket: sold out, as the gateway answers from memory.
    for (user, body) in [(300, Value::Null), (201, json!({"ticket": tickets[1]}))] {
        let (status, body) = app.join(user, sale.id, body).await;
        assert_eq!((status, body["code"].as_str()), (410, Some("SOLD_OUT")), "user {user}: {body}");
    }
}

/// Each ticket holder's place and state, in ticket order (user = index + 1).
async fn look(app: &TestApp, g: GoodsId, tickets: &[String]) -> Vec<(Option<u64>, String)> {
    let mut seen = Vec::new();
    for (u, t) in tickets.iter().enumerate() {
        let (_, body) = app.standing(u as i64 + 1, g, t).await;
        seen.push((body["place"].as_u64(), body["state"].as_str().unwrap().to_owned()));
    }
    seen
}

#[tokio::test]
async fn a_redis_loss_changes_no_place_and_admits_nobody_again() {
    let app = spawn_app();
    let sale = app.room_sale(10, Duration::from_secs(3), room(20)).await;
    let early = join_all(&app, sale.id, 1..101, 16).await;
    wait_until(sale.start_at).await;
    let late = join_all(&app, sale.id, 101..151, 16).await;
    let tickets: Vec<String> = early.into_iter().chain(late).collect();
    standing_until(&app, 150, sale.id, &tickets[149], Duration::from_secs(3), |b| !b["place"].is_null())
        .await;
    let before = look(&app, sale.id, &tickets).await;
    let admitted_before = before.iter().filter(|s| s.1 == "admitted").count();

    // Every key of this test's Redis prefix, gone.
    let mut redis = app.redis().await;
    let keys: Vec<String> =
        redis::cmd("KEYS").arg(app.redis_keys.all_pattern()).query_async(&mut redis).await.unwrap();
    let _: () = redis::cmd("DEL").arg(&keys).query_async(&mut redis).await.unwrap();
    let lost = Instant::now();
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Joining again with the ticket, or asking with it: the same place.
    for (u, t) in tickets.iter().enumerate().step_by(7) {
        let (status, body) = app.join(u as i64 + 1, sale.id, json!({"ticket": t})).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["place"].as_u64(), before[u].0, "user {u} kept their place: {body}");
    }
    let after = look(&app, sale.id, &tickets).await;
    for (u, (b, a)) in before.iter().zip(&after).enumerate() {
        assert_eq!(b.0, a.0, "user {u}'s place");
    }
    // The admissions went on from where they were, no faster than the rate allows: at most the
    // lease (one second of the rate) plus the rate over the time since.
    let admitted_after = after.iter().filter(|s| s.1 != "waiting").count();
    let allowed = admitted_before + 20 + (20.0 * lost.elapsed().as_secs_f64()).ceil() as usize + 2;
    assert!(admitted_after >= admitted_before, "{admitted_after} admitted after, {admitted_before} before");
    assert!(admitted_after <= allowed, "{admitted_after} admitted after the loss; at most {allowed}");
}

/// `GET /api/seckill/{g}/queue` asked of the replica at `base`.
async fn standing_at(app: &TestApp, base: &str, u: i64, g: GoodsId, ticket: &str) -> Value {
    let path = format!("/api/seckill/{g}/queue");
    let (name, value) = keys::as_user(Peer::Seckill, "GET", &path, u, Role::User);
    let req = app.http.get(format!("{base}{path}")).header(name, value).header(headers::ROOM_TICKET, ticket);
    let (status, body) = answer(req.send().await.unwrap()).await;
    assert_eq!(status, 200, "{body}");
    body
}

fn expires_ms(body: &Value) -> Option<i64> {
    let at = body["admission_expires_at"].as_str()?;
    Some(chrono::DateTime::parse_from_rfc3339(at).unwrap().timestamp_millis())
}

/// Redis lost, then a replica that never saw the room starts: the leader's marks kept at
/// stock-service tell it when each place came up, so it ends every admission when the first
/// replica does (a little later at most: the marks kept are the leases', not every tick's),
/// never an admission's life from its own start.
#[tokio::test]
async fn a_replica_started_after_a_redis_loss_ends_each_admission_when_the_others_do() {
    let app = spawn_app();
    let sale = app.room_sale(10, Duration::from_secs(1), room(20)).await;
    wait_until(sale.start_at).await;
    let tickets = join_all(&app, sale.id, 1..121, 16).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut before = Vec::new();
    for (u, t) in tickets.iter().enumerate() {
        before.push(expires_ms(&app.standing(u as i64 + 1, sale.id, t).await.1));
    }
    let admitted = before.iter().flatten().count();
    assert!((40..=100).contains(&admitted), "{admitted} admitted in three seconds at 20 a second");

    let mut redis = app.redis().await;
    let keys: Vec<String> =
        redis::cmd("KEYS").arg(app.redis_keys.all_pattern()).query_async(&mut redis).await.unwrap();
    let _: () = redis::cmd("DEL").arg(&keys).query_async(&mut redis).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let fresh = app.replica();
    for (u, (t, was)) in tickets.iter().zip(&before).enumerate() {
        let Some(was) = *was else { continue };
        let now = standing_at(&app, &fresh.url(), u as i64 + 1, sale.id, t).await;
        let is = expires_ms(&now).unwrap_or_else(|| panic!("user {u} admitted before: {now}"));
        assert!(
            (was..=was + 1_500).contains(&is),
            "user {u}'s admission ended at {was} on the first replica, at {is} on the new one"
        );
        let first = expires_ms(&app.standing(u as i64 + 1, sale.id, t).await.1);
        assert_eq!(first, Some(was), "user {u}'s admission on the first replica moved");
    }
}

/// A leader taking over after its predecessor died (a lease's time without an advance), or
/// whose ticks came late, is credited a few ticks at the rate, not the whole gap: no burst.
#[tokio::test]
async fn an_advance_after_a_gap_lets_in_no_burst() {
    let app = spawn_app();
    let mut redis = app.redis().await;
    let g = GoodsId::new(424_242).unwrap();
    let k = &app.redis_keys;
    let fields = [("drawn", 1_000), ("admitted_milli", 0), ("admitted_cap", 1_000), ("at", 10_000)];
    let _: () = redis::cmd("HSET").arg(k.room(g)).arg(&fields[..]).query_async(&mut redis).await.unwrap();
    let advance = |now: i64| {
        let mut redis = redis.clone();
        async move {
            let script = redis::Script::new(seckill_common::room::scripts::ADVANCE);
            let mut call = script.key(k.room(g));
            call.key(k.room_marks(g)).key(k.room_busy(g)).arg(now).arg("100").arg(10).arg(300);
            let [admitted, _, _]: [i64; 3] = call.invoke_async(&mut redis).await.unwrap();
            admitted
        }
    };
    // Two seconds since the last advance, at 100 a second: 0.3 s of it credited.
    assert_eq!(advance(12_000).await, 30);
    // The next tick, on time: its 0.1 s.
    assert_eq!(advance(12_100).await, 40);
}

#[tokio::test]
async fn two_replicas_admit_no_faster_than_the_rate() {
    let app = spawn_app();
    let second = app.replica();
    let sale = app.room_sale(10, Duration::from_millis(1_500), room(10)).await;
    wait_until(sale.start_at).await;
    let tickets = join_all(&app, sale.id, 1..101, 16).await;
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Asked of the second replica: its view agrees with the first one's.
    let mut admitted = 0;
    for (u, t) in tickets.iter().enumerate() {
        let body = standing_at(&app, &second.url(), u as i64 + 1, sale.id, t).await;
        admitted += usize::from(body["state"] == "admitted");
    }
    let allowed = (10.0 * started.elapsed().as_secs_f64()).ceil() as usize + 10;
    assert!(admitted <= allowed, "{admitted} admitted in {:?} at 10 a second", started.elapsed());
    assert!(admitted >= 20, "the room moves: {admitted} admitted");
}

#[tokio::test]
async fn bad_room_input_is_a_clean_4xx() {
    let app = spawn_app();
    let plain: Goods = app.open_sale(5).await;
    let (status, body) = app.join(3, plain.id, Value::Null).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("NO_WAITING_ROOM")), "{body}");

    let later =
        app.room_sale(5, Duration::from_secs(3_600), json!({"rate": "auto", "opens_before_secs": 60})).await;
    assert_eq!(later.waiting_room.unwrap().opens_before_secs, 60);
    let (status, body) = app.join(3, later.id, Value::Null).await;
    assert_eq!((status, body["code"].as_str()), (425, Some("NOT_STARTED")), "{body}");

    let sale = app.room_sale(5, Duration::from_secs(60), room(5)).await;
    let (status, joined) = app.join(3, sale.id, Value::Null).await;
    assert_eq!(status, 200, "{joined}");
    let ticket = joined["ticket"].as_str().unwrap();
    let (again_status, again) = app.join(3, sale.id, Value::Null).await;
    assert_eq!(
        (again_status, join_of(again["ticket"].as_str().unwrap())),
        (200, join_of(ticket)),
        "one place a user"
    );
    for (what, presented, user, code, status) in [
        ("another user's ticket", ticket.to_owned(), 4, "BAD_TOKEN", 403),
        ("a forged ticket (a better join)", forge_join(ticket, 0), 3, "BAD_TOKEN", 403),
        ("garbage", "nonsense".to_owned(), 3, "INVALID_INPUT", 400),
        ("a huge ticket", "v1.p.".to_owned() + &"9".repeat(10_000), 3, "INVALID_INPUT", 400),
    ] {
        let (s, body) = app.standing(user, sale.id, &presented).await;
        assert_eq!((s, body["code"].as_str()), (status, Some(code)), "{what}: {body}");
        let (s, body) = app.join(user, sale.id, json!({"ticket": presented})).await;
        assert_eq!((s, body["code"].as_str()), (status, Some(code)), "join with {what}: {body}");
    }
    let res = app
        .as_user(3, Role::User, Method::GET, &format!("/api/seckill/{}/queue", sale.id))
        .send()
        .await
        .unwrap();
    let (status, body) = answer(res).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("INVALID_INPUT")), "no ticket: {body}");
    for body in [json!({"ticket": 5}), json!({"tickets": "x"}), json!([1])] {
        let (status, answer) = app.join(3, sale.id, body.clone()).await;
        assert_eq!((status, answer["code"].as_str()), (400, Some("INVALID_INPUT")), "{body}: {answer}");
    }

    // A room on a sale already open: refused at creation.
    let now = chrono::Utc::now();
    let res = app
        .as_user(1, Role::Admin, Method::POST, "/api/admin/goods")
        .json(&json!({"name": "late", "price_cents": 1, "seckill_price_cents": 1, "stock_total": 1,
            "start_at": now - chrono::Duration::seconds(1), "end_at": now + chrono::Duration::hours(1),
            "waiting_room": room(5)}))
        .send()
        .await
        .unwrap();
    let (status, body) = answer(res).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("INVALID_INPUT")), "{body}");
    assert!(body["message"].as_str().unwrap().contains("waiting_room"), "{body}");
}

async fn challenge(app: &TestApp, u: i64, g: GoodsId) -> Value {
    let path = format!("/api/seckill/{g}/queue/challenge");
    let (status, body) = answer(app.as_user(u, Role::User, Method::POST, &path).send().await.unwrap()).await;
    assert_eq!(status, 200, "{body}");
    body
}

#[tokio::test]
async fn a_room_that_asks_for_proof_of_work_takes_each_solved_challenge_once() {
    let app = spawn_app();
    let difficulty = 8;
    let sale =
        app.room_sale(5, Duration::from_secs(60), json!({"rate": 5, "pow_difficulty": difficulty})).await;
    let refused = |(status, body): Answer, what: &str| {
        assert_eq!((status, body["code"].as_str()), (403, Some("CHALLENGE_REQUIRED")), "{what}: {body}");
    };
    refused(app.join(3, sale.id, Value::Null).await, "no work");

    let mine = challenge(&app, 3, sale.id).await;
    assert_eq!(mine["difficulty"], difficulty);
    let text = mine["challenge"].as_str().unwrap();
    let solved = Challenge::solve(text, difficulty);
    let wrong = (0..)
        .find(|a| Challenge::verify(&room_key(), text, *a, sale.id, UserId::new(3).unwrap(), 0).is_err())
        .unwrap();
    refused(app.join(3, sale.id, json!({"challenge": text, "answer": wrong})).await, "a wrong answer");
    let theirs = challenge(&app, 4, sale.id).await;
    let their_text = theirs["challenge"].as_str().unwrap();
    let their_answer = Challenge::solve(their_text, difficulty);
    refused(
        app.join(3, sale.id, json!({"challenge": their_text, "answer": their_answer})).await,
        "another user's",
    );
    let expired = Challenge::issue(
        &room_key(),
        sale.id,
        UserId::new(3).unwrap(),
        difficulty,
        0,
        Duration::from_secs(1),
    );
    let expired_answer = Challenge::solve(&expired, difficulty);
    refused(
        app.join(3, sale.id, json!({"challenge": expired, "answer": expired_answer})).await,
        "an expired one",
    );

    let (status, joined) = app.join(3, sale.id, json!({"challenge": text, "answer": solved})).await;
    assert_eq!(status, 200, "{joined}");
    // Joining again is answered the place held: no new work.
    let (status, again) = app.join(3, sale.id, Value::Null).await;
    assert_eq!(
        (status, &again["ticket"].as_str().map(join_of)),
        (200, &joined["ticket"].as_str().map(join_of))
    );
    // The same answer cannot make a second place: the user's place lost (as in a Redis loss
    // of its group), the used challenge is refused.
    let mut redis = app.redis().await;
    let _: () = redis::cmd("DEL")
        .arg(app.redis_keys.room_members(sale.id, UserId::new(3).unwrap()))
        .query_async(&mut redis)
        .await
        .unwrap();
    refused(app.join(3, sale.id, json!({"challenge": text, "answer": solved})).await, "a used one");
    // The ticket still keeps the place, without new work.
    let (status, kept) = app.join(3, sale.id, json!({"ticket": joined["ticket"]})).await;
    assert_eq!((status, kept["ticket"].as_str().map(join_of)), (200, joined["ticket"].as_str().map(join_of)));
}

/// `GET /internal/gateway/rooms/{id}`: what the gateway answers status polls from, read with
/// the gateway's own credential alone (never a user's request the gateway forwards, never
/// another service's).
#[tokio::test]
async fn the_room_state_is_the_gateways_to_read_alone() {
    let app = spawn_app();
    let sale = app.room_sale(5, Duration::from_secs(60), room(10)).await;
    let path = format!("/internal/gateway/rooms/{}", sale.id);
    let read = |credential: Option<(&'static str, String)>| {
        let mut req = app.http.get(app.url(&path));
        if let Some(header) = credential {
            req = req.header(header.0, header.1);
        }
        async move { answer(req.send().await.unwrap()).await }
    };
    let (status, snapshot) = read(Some(keys::as_service(Peer::Gateway, Peer::Seckill, "GET", &path))).await;
    assert_eq!(status, 200, "{snapshot}");
    let state = &snapshot["state"];
    assert_eq!(state["start_ms"], sale.start_at.timestamp_millis());
    assert_eq!(state["end_ms"], sale.end_at.timestamp_millis());
    assert_eq!(
        (state["drawn"].clone(), state["admitted"].clone(), state["rate"].clone()),
        (json!(null), json!(0), json!(10.0))
    );
    assert_eq!(snapshot["admission_secs"], room(10)["admission_secs"]);
    assert_eq!(snapshot["came_up"]["marks"], json!([]), "no place has come up");
    // Marks past a count of places: the query is read, and a bad one refused.
    let with = |query: &str| {
        let credential = keys::as_service(Peer::Gateway, Peer::Seckill, "GET", &path);
        let req = app.http.get(app.url(&format!("{path}?{query}"))).header(credential.0, credential.1);
        async move { answer(req.send().await.unwrap()).await }
    };
    assert_eq!(with("since=3").await.0, 200);
    let (status, body) = with("since=-1").await;
    assert_eq!((status, body["code"].as_str()), (400, Some("INVALID_INPUT")), "{body}");

    let as_user = keys::as_user(Peer::Seckill, "GET", &path, 7, Role::Admin);
    let as_stock = keys::as_service(Peer::Stock, Peer::Seckill, "GET", &path);
    for (who, credential) in [("a user's", Some(as_user)), ("stock-service's", Some(as_stock)), ("no", None)]
    {
        let (status, body) = read(credential).await;
        assert!([401, 403].contains(&status), "{who} credential: {status} {body}");
        assert!(body.get("state").is_none(), "{who} credential: {body}");
    }
    // A sale without a room, and no sale.
    let plain = app.open_sale(1).await;
    for g in [plain.id.get(), 999_999] {
        let path = format!("/internal/gateway/rooms/{g}");
        let credential = keys::as_service(Peer::Gateway, Peer::Seckill, "GET", &path);
        let res = app.http.get(app.url(&path)).header(credential.0, credential.1).send().await.unwrap();
        assert_eq!(res.status(), 404, "sale {g}");
    }
}

//! A sale's waiting room through the gateway, two seckill-service replicas behind it: joins
//! spread over both get one place each, in one order; the rate holds across the replicas
//! (both answer from the same count); nobody's admission is given twice.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use seckill_common::room::{RoomRate, WaitingRoom};
use serde_json::Value;

use crate::helpers::{Options, System, spawn_system_with};

const RATE: u32 = 20;

/// Where each user stands, asked through the gateway (which spreads the asks over both
/// replicas): place, state, and the admission's end when admitted.
async fn look(
    sys: &System,
    g: seckill_common::GoodsId,
    tickets: &HashMap<i64, (String, String)>,
) -> Vec<(i64, Value)> {
    futures_util::stream::iter(tickets.iter())
        .map(|(user, (token, ticket))| async move {
            let (status, body) = poll(sys, g, token, ticket).await;
            assert_eq!(status, 200, "{body}");
            (*user, body)
        })
        .buffer_unordered(32)
        .collect()
        .await
}

#[tokio::test]
async fn two_replicas_give_one_place_each_and_admit_at_one_rate() {
    let sys = spawn_system_with(Options { seckill_replicas: 2, ..Options::default() });
    let room = WaitingRoom {
        rate: RoomRate::PerSec(RATE),
        opens_before_secs: 60,
        admission_secs: 60,
        pow_difficulty: 0,
    };
    let sale = sys.create_room_sale(10, chrono::Duration::seconds(2), chrono::Duration::hours(1), room).await;
    let users: Vec<i64> = (1..=300).collect();
    let tokens = sys.dev_tokens(&users).await;
    // Half join before the opening (drawn), half after (in arrival order).
    let join = |users: Vec<i64>| {
        let (sys, tokens) = (&sys, &tokens);
        futures_util::stream::iter(users)
            .map(move |u| async move {
                let (status, body) = sys.join_room(&tokens[&u], sale.id).await;
                assert_eq!(status, 200, "user {u}: {body}");
                (u, (tokens[&u].clone(), body["ticket"].as_str().unwrap().to_owned()))
            })
            .buffer_unordered(32)
            .collect::<Vec<_>>()
    };
    let mut tickets: HashMap<i64, (String, String)> = join(users[..150].to_vec()).await.into_iter().collect();
    while chrono::Utc::now() < sale.start_at {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tickets.extend(join(users[150..].to_vec()).await);

    let opened = Instant::now();
    let mut ends: HashMap<i64, Value> = HashMap::new();
    let mut counts = Vec::new();
    while opened.elapsed() < Duration::from_secs(5) {
        let seen = look(&sys, sale.id, &tickets).await;
        let at = opened.elapsed();
        let mut places = BTreeMap::new();
        let mut admitted = 0;
        for (user, body) in &seen {
            if let Some(p) = body["place"].as_u64() {
                assert!(places.insert(p, *user).is_none(), "place {p} given twice: {body}");
            }
            if body["state"] == "admitted" {
                admitted += 1;
                let end = &body["admission_expires_at"];
                let first = ends.entry(*user).or_insert_with(|| end.clone());
                assert_eq!(first, end, "user {user}'s admission given again with another end");
            }
        }
        if places.len() == 300 {
            assert_eq!(
                places.keys().copied().collect::<Vec<_>>(),
                (1..=300).collect::<Vec<u64>>(),
                "every place once"
            );
        }
        counts.push((at, admitted));
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    // At most the rate since the opening, plus a tick's and a lease's worth; and it moved.
    for (at, admitted) in &counts {
        let allowed = (f64::from(RATE) * (at.as_secs_f64() + 1.0)).ceil() as usize + 2;
        assert!(*admitted <= allowed, "{admitted} admitted {at:?} after the opening: {counts:?}");
    }
    let last = counts.last().unwrap().1;
    assert!(last >= 60, "the room moved at about {RATE} a second: {counts:?}");
}

/// One status poll of `g` through the gateway: its status and body.
async fn poll(sys: &System, g: seckill_common::GoodsId, token: &str, ticket: &str) -> (u16, Value) {
    let res = sys
        .http
        .get(sys.url(&format!("/api/seckill/{g}/queue")))
        .bearer_auth(token)
        .header("x-room-ticket", ticket)
        .send()
        .await
        .unwrap();
    (res.status().as_u16(), res.json().await.unwrap_or(Value::Null))
}

/// The gateway answers status polls from its mirror of the room: the answers seckill-service
/// gives itself (admissions included), and none from a mirror seckill-service stopped feeding.
#[tokio::test]
async fn the_gateway_answers_polls_as_seckill_service_does_and_never_from_a_stale_mirror() {
    let mut sys = spawn_system_with(Options::default());
    let room = WaitingRoom {
        rate: RoomRate::PerSec(1),
        opens_before_secs: 60,
        admission_secs: 60,
        pow_difficulty: 0,
    };
    let sale = sys.create_room_sale(10, chrono::Duration::seconds(1), chrono::Duration::hours(1), room).await;
    let users: Vec<i64> = (1..=30).collect();
    let tokens = sys.dev_tokens(&users).await;
    let mut tickets = Vec::new();
    for u in &users {
        let (status, body) = sys.join_room(&tokens[u], sale.id).await;
        assert_eq!(status, 200, "user {u}: {body}");
        tickets.push((*u, tokens[u].clone(), body["ticket"].as_str().unwrap().to_owned()));
    }
    // Drawn at the opening; then every place is known, wherever it is answered.
    let drawn = Instant::now();
    loop {
        let (_, body) = poll(&sys, sale.id, &tickets[0].1, &tickets[0].2).await;
        if body["place"].is_u64() {
            break;
        }
        assert!(drawn.elapsed() < Duration::from_secs(10), "drawn: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // One place a second comes up: wait for the first admission the gateway gives.
    let admitting = Instant::now();
    'admitted: loop {
        for (_, token, ticket) in &tickets {
            if poll(&sys, sale.id, token, ticket).await.1["state"] == "admitted" {
                break 'admitted;
            }
        }
        assert!(admitting.elapsed() < Duration::from_secs(10), "nobody admitted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let replica = sys.seckill[0].url();
    let mut admitted = 0;
    for (user, token, ticket) in &tickets {
        let (status, through_gateway) = poll(&sys, sale.id, token, ticket).await;
        assert_eq!(status, 200, "{through_gateway}");
        let path = format!("/api/seckill/{}/queue", sale.id);
        let (name, credential) = seckill_testkit::keys::as_user(
            seckill_common::trust::Peer::Seckill,
            "GET",
            &path,
            *user,
            seckill_common::api::Role::User,
        );
        let itself: Value = sys
            .http
            .get(format!("{replica}{path}"))
            .header(name, credential)
            .header("x-room-ticket", ticket)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        for field in ["place", "draw", "ticket"] {
            assert_eq!(through_gateway[field], itself[field], "user {user}'s {field}");
        }
        // An admission ends at the same instant, whoever gives it.
        if through_gateway["state"] == "admitted" && itself["state"] == "admitted" {
            admitted += 1;
            for field in ["admission", "admission_expires_at"] {
                assert_eq!(through_gateway[field], itself[field], "user {user}'s {field}");
            }
        }
        // One a second comes up: the two answers may be a place apart.
        let ahead = |v: &Value| v["ahead"].as_i64().unwrap_or(-1);
        assert!((ahead(&through_gateway) - ahead(&itself)).abs() <= 1, "{through_gateway} vs {itself}");
    }
    assert!(admitted >= 1, "an admission was compared");

    // seckill-service stops: a second later the gateway answers 503, not what it last read.
    for replica in std::mem::take(&mut sys.seckill) {
        replica.stop().await;
    }
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let (user, token, ticket) = &tickets[tickets.len() - 1];
    let (status, body) = poll(&sys, sale.id, token, ticket).await;
    assert_eq!(status, 503, "user {user}: {body}");
}

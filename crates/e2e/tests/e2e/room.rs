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
            let res = sys
                .http
                .get(sys.url(&format!("/api/seckill/{g}/queue")))
                .bearer_auth(token)
                .header("x-room-ticket", ticket)
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), 200);
            (*user, res.json::<Value>().await.unwrap())
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

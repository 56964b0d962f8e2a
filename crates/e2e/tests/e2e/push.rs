//! Pushed answers: a buyer's event stream (`GET /api/seckill/{id}/events`) tells them their
//! own result, as it happens, and nothing of anyone else's; it is opened by its buyer alone.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::future::join_all;
use redis::AsyncCommands;
use seckill_common::api::{SeckillResult, SeckillStatus};
use seckill_common::push::{EventKind, SseEvent};
use seckill_common::room::{QueueState, QueueStatus, RoomRate, WaitingRoom};
use seckill_common::{GoodsId, UserId};
use serde_json::json;

use crate::helpers::{EventStream, System, spawn_system};

const WITHIN: Duration = Duration::from_secs(20);

fn result_of(event: &SseEvent) -> SeckillResult {
    assert_eq!(event.kind(), Some(EventKind::Result), "{event:?}");
    serde_json::from_str(&event.data).unwrap()
}

async fn open(sys: &System, token: &str, g: GoodsId) -> EventStream {
    match sys.open_stream(token, g, &[]).await {
        Ok(stream) => stream,
        Err(refused) => panic!("the stream was refused: {refused:?}"),
    }
}

/// Forty buyers watch their streams while they buy thirty units: each winner's stream ends on
/// `success` with the order the orders service holds for them, each loser's on `sold_out`,
/// and no stream tells of an order that is not its buyer's.
#[tokio::test]
async fn each_stream_is_told_its_own_buyers_order_and_nobody_elses() {
    let sys = spawn_system();
    let sale = sys.open_sale(30).await;
    let users: Vec<i64> = (1_000..1_040).collect();
    let tokens = sys.dev_tokens(&users).await;

    let mut streams = HashMap::new();
    for u in &users {
        let mut stream = open(&sys, &tokens[u], sale.id).await;
        // The current state first: nothing yet.
        let first = stream.next(WITHIN).await.expect("a first event");
        assert_eq!(result_of(&first).status, SeckillStatus::None);
        assert_eq!(first.id.as_deref(), Some("r.none"));
        streams.insert(*u, stream);
    }
    join_all(users.iter().map(|u| sys.buy(&tokens[u], sale.id))).await;

    let ends = join_all(streams.into_iter().map(|(u, s)| async move { (u, s.to_end(WITHIN).await) })).await;
    let mut winners = 0;
    for (u, events) in ends {
        let last = events.last().unwrap_or_else(|| panic!("user {u}: no event before the end"));
        match last.kind() {
            Some(EventKind::Result) => {
                let told = result_of(last);
                assert_eq!(told.status, SeckillStatus::Success, "user {u}: {events:?}");
                // The order id told is the one the authority holds for this buyer.
                let polled = sys.result(&tokens[&u], sale.id).await;
                assert_eq!(told, polled, "user {u}");
                let (status, order) = sys.order_by_id(&tokens[&u], told.order_id.unwrap().get()).await;
                assert_eq!(status, 200, "user {u}'s order: {order}");
                assert_eq!(order["user_id"], json!(u));
                assert_eq!(last.id, Some(format!("r.success.{}", told.order_id.unwrap())));
                winners += 1;
            }
            Some(EventKind::SoldOut) => {
                assert_eq!(sys.result(&tokens[&u], sale.id).await.status, SeckillStatus::None, "user {u}");
            }
            other => panic!("user {u}: the stream ended on {other:?}: {events:?}"),
        }
        // No stream tells another buyer's order.
        for event in events.iter().filter(|e| e.kind() == Some(EventKind::Result)) {
            if let Some(order) = result_of(event).order_id {
                let (status, _) = sys.order_by_id(&tokens[&u], order.get()).await;
                assert_eq!(status, 200, "user {u} was told order {order}");
            }
        }
    }
    assert_eq!(winners, 30);
    assert_eq!(sys.active_orders(sale.id).await, (30, 1));
}

/// A stream opened after the result is told it at once and ends; a reconnect whose last event
/// was that final answer is told `204`, nothing more; one whose last event was earlier is told
/// the answer.
#[tokio::test]
async fn a_reconnect_misses_nothing_and_is_not_told_twice() {
    let sys = spawn_system();
    let sale = sys.open_sale(3).await;
    let buyer = sys.dev_token(51, "user").await;
    let order = sys.buy_order(&buyer, sale.id).await;

    let events = open(&sys, &buyer, sale.id).await.to_end(WITHIN).await;
    assert_eq!(events.len(), 1, "{events:?}");
    let told = result_of(&events[0]);
    assert_eq!((told.status, told.order_id.map(|o| o.get())), (SeckillStatus::Success, Some(order)));

    let last = events[0].id.clone().unwrap();
    let again = sys.open_stream(&buyer, sale.id, &[("last-event-id", &last)]).await;
    assert!(matches!(again, Err((204, _))), "{:?}", again.err());
    let earlier = open_with(&sys, &buyer, sale.id, "r.queued").await.to_end(WITHIN).await;
    assert_eq!(earlier.iter().map(result_of).collect::<Vec<_>>(), [told]);
}

async fn open_with(sys: &System, token: &str, g: GoodsId, last: &str) -> EventStream {
    sys.open_stream(token, g, &[("last-event-id", last)]).await.unwrap_or_else(|e| panic!("{e:?}"))
}

/// A result whose notice was lost (written straight into Redis here, as if the publish had
/// not reached this gateway) still reaches the stream of a buyer with a request in flight: it
/// re-reads after a silence. (order-service is stopped, so nothing but the test writes it.)
#[tokio::test]
async fn a_lost_notice_is_made_up_for_by_a_re_read() {
    let sys = spawn_system();
    let sale = sys.open_sale(3).await;
    let buyer = sys.dev_token(61, "user").await;
    sys.stop_order().await;
    let (status, body) = sys.buy(&buyer, sale.id).await;
    assert_eq!(status, 202, "{body}");
    let mut stream = open(&sys, &buyer, sale.id).await;
    assert_eq!(result_of(&stream.next(WITHIN).await.unwrap()).status, SeckillStatus::Queued);

    let user = UserId::new(61).unwrap();
    let mut redis = sys.redis().await;
    let _: () = redis.set(sys.redis_keys.result(sale.id, user), "failed").await.unwrap();
    let events = stream.to_end(WITHIN).await;
    assert_eq!(events.iter().map(result_of).map(|r| r.status).collect::<Vec<_>>(), [SeckillStatus::Failed]);
}

/// A second stream of the same buyer and sale replaces the first, which is told so and ends.
#[tokio::test]
async fn a_second_stream_of_a_buyer_replaces_the_first() {
    let sys = spawn_system();
    let sale = sys.open_sale(3).await;
    let buyer = sys.dev_token(71, "user").await;
    let mut first = open(&sys, &buyer, sale.id).await;
    first.next(WITHIN).await.unwrap();
    let mut second = open(&sys, &buyer, sale.id).await;
    second.next(WITHIN).await.unwrap();
    let rest = first.to_end(WITHIN).await;
    assert_eq!(rest.iter().map(SseEvent::kind).collect::<Vec<_>>(), [Some(EventKind::Replaced)]);

    // The second still hears its buyer's result.
    let order = sys.buy_order(&buyer, sale.id).await;
    let told = second.to_end(WITHIN).await;
    assert_eq!(told.last().map(result_of).and_then(|r| r.order_id).map(|o| o.get()), Some(order));
}

/// A stream ticket opens its buyer's stream of its sale, once; a ticket spent, made for
/// another sale, or altered opens nothing; no credential, a bad one, an unknown sale and a
/// bad id are refused with their codes.
#[tokio::test]
async fn a_stream_opens_only_for_its_buyer_with_a_ticket_used_once() {
    let sys = spawn_system();
    let sale = sys.open_sale(3).await;
    let other_sale = sys.open_sale(3).await;
    let buyer = sys.dev_token(81, "user").await;

    let path = format!("/api/seckill/{}/events/ticket", sale.id);
    let (status, body) = sys.post(&path, Some(&buyer), json!({})).await;
    assert_eq!(status, 200, "{body}");
    let ticket = body["ticket"].as_str().unwrap().to_owned();
    assert_eq!(body["expires_in_secs"], 30);
    let mut stream = sys.stream_by_ticket(sale.id, &ticket).await.expect("the ticket opens the stream");
    assert_eq!(result_of(&stream.next(WITHIN).await.unwrap()).status, SeckillStatus::None);

    let refused = |answer: Result<EventStream, (u16, serde_json::Value)>| match answer {
        Ok(_) => panic!("a stream opened"),
        Err((status, body)) => (status, body["code"].as_str().unwrap_or_default().to_owned()),
    };
    let unauthorized = (401, "UNAUTHORIZED".to_owned());
    assert_eq!(refused(sys.stream_by_ticket(sale.id, &ticket).await), unauthorized, "spent");
    let (_, body) = sys.post(&path, Some(&buyer), json!({})).await;
    let fresh = body["ticket"].as_str().unwrap();
    assert_eq!(refused(sys.stream_by_ticket(other_sale.id, fresh).await), unauthorized, "another sale");
    let altered = fresh.replacen(".81.", ".82.", 1);
    assert_eq!(refused(sys.stream_by_ticket(sale.id, &altered).await), unauthorized, "another user");
    assert_eq!(refused(sys.stream_by_ticket(sale.id, "v1.s.junk").await), unauthorized);
    // The fresh ticket was not spent by those refusals.
    assert!(sys.stream_by_ticket(sale.id, fresh).await.is_ok());

    let events = |g: String| format!("/api/seckill/{g}/events");
    let (status, body) = sys.get(&events(sale.id.to_string()), None).await;
    assert_eq!((status, body["code"].as_str()), (401, Some("UNAUTHORIZED")));
    let (status, _) = sys.get(&events(sale.id.to_string()), Some("not-a-jwt")).await;
    assert_eq!(status, 401);
    let (status, body) = sys.get(&events("999999".into()), Some(&buyer)).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("GOODS_NOT_FOUND")));
    let (status, body) = sys.get(&events("abc".into()), Some(&buyer)).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("INVALID_INPUT")));
    let (status, body) = sys.post("/api/seckill/1/events/ticket", None, json!({})).await;
    assert_eq!((status, body["code"].as_str()), (401, Some("UNAUTHORIZED")));
}

/// Ten thousand connects from one user: the user's stream limit lets a few through and
/// answers the rest `429` at once.
#[tokio::test]
async fn ten_thousand_connects_from_one_user_are_limited() {
    let sys = spawn_system();
    let sale = sys.open_sale(3).await;
    let buyer = sys.dev_token(91, "user").await;
    let url = sys.url(&format!("/api/seckill/{}/events", sale.id));
    let started = std::time::Instant::now();
    let statuses: Vec<u16> = futures_util::StreamExt::collect(futures_util::StreamExt::buffer_unordered(
        futures_util::stream::iter((0..10_000).map(|_| {
            let req = sys.http.get(&url).bearer_auth(&buyer);
            async move { req.send().await.map(|r| r.status().as_u16()).unwrap_or(0) }
        })),
        100,
    ))
    .await;
    let elapsed = started.elapsed().as_secs_f64();
    let opened = statuses.iter().filter(|s| **s == 200).count();
    let limited = statuses.iter().filter(|s| **s == 429).count();
    // Burst 10, then one a second.
    assert!(opened as f64 <= 10.0 + elapsed + 1.0, "{opened} opened in {elapsed:.1} s");
    assert_eq!(opened + limited, 10_000, "every other answer is 429");
}

/// A buyer waiting in a sale's room follows their place on the stream (opened with a ticket
/// that carries their place, as a browser's EventSource would): the place as it moves, then
/// the admission, which buys.
#[tokio::test]
async fn a_waiting_buyers_stream_tells_the_place_then_the_admission() {
    let sys = spawn_system();
    let room = WaitingRoom {
        rate: RoomRate::PerSec(2),
        opens_before_secs: 60,
        admission_secs: 60,
        pow_difficulty: 0,
    };
    let sale = sys.create_room_sale(10, chrono::Duration::seconds(1), chrono::Duration::hours(1), room).await;
    let users: Vec<i64> = (2_001..=2_008).collect();
    let tokens = sys.dev_tokens(&users).await;
    // Joined after the opening: places in arrival order.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let mut place_ticket = String::new();
    for u in &users {
        let (status, body) = sys.join_room(&tokens[u], sale.id).await;
        assert_eq!(status, 200, "user {u}: {body}");
        place_ticket = body["ticket"].as_str().unwrap().to_owned();
    }
    // The last to join waits longest: about four seconds at two places a second.
    let last = &tokens[users.last().unwrap()];
    let path = format!("/api/seckill/{}/events/ticket", sale.id);
    let res = sys
        .http
        .post(sys.url(&path))
        .bearer_auth(last)
        .header("x-room-ticket", &place_ticket)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let ticket: serde_json::Value = res.json().await.unwrap();
    let mut stream =
        sys.stream_by_ticket(sale.id, ticket["ticket"].as_str().unwrap()).await.expect("a stream");

    let mut places = Vec::new();
    let admission = loop {
        let event = stream.next(WITHIN).await.expect("the stream goes on until the admission");
        if event.kind() != Some(EventKind::Queue) {
            continue;
        }
        let status: QueueStatus = serde_json::from_str(&event.data).unwrap();
        assert_eq!(status.ticket, place_ticket, "the stream tells this buyer's place");
        match status.state {
            QueueState::Waiting => places.push(status.ahead.unwrap()),
            QueueState::Admitted => break status.admission.expect("an admission with the admitted state"),
            other => panic!("{other:?} before the admission"),
        }
    };
    assert!(
        !places.is_empty() && places.windows(2).all(|w| w[0] > w[1]),
        "places ahead, told as they fell: {places:?}"
    );
    let admitted = [("x-room-admission", admission.as_str())];
    let res = sys
        .http
        .post(sys.url(&format!("/api/seckill/{}/token", sale.id)))
        .bearer_auth(last)
        .header(admitted[0].0, admitted[0].1)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "the admission from the stream lets the buyer buy");
}

/// A buyer holding nothing who opens a stream on a sale already sold out is told so at once,
/// and the stream ends: nothing is left to wait for. A winner's stream there tells the order.
#[tokio::test]
async fn a_stream_on_a_sold_out_sale_tells_a_buyer_with_nothing_at_once() {
    let sys = spawn_system();
    let sale = sys.open_sale(1).await;
    let (winner, late) = (sys.dev_token(3_001, "user").await, sys.dev_token(3_002, "user").await);
    let order = sys.buy_order(&winner, sale.id).await;
    let (status, body) = sys.buy(&late, sale.id).await;
    assert_eq!((status, body["code"].as_str()), (410, Some("SOLD_OUT")), "{body}");

    let events = open(&sys, &late, sale.id).await.to_end(Duration::from_secs(3)).await;
    let kinds: Vec<_> = events.iter().map(SseEvent::kind).collect();
    assert_eq!(kinds, [Some(EventKind::Result), Some(EventKind::SoldOut)], "{events:?}");
    assert_eq!(result_of(&events[0]).status, SeckillStatus::None);
    let told = open(&sys, &winner, sale.id).await.to_end(Duration::from_secs(3)).await;
    assert_eq!(
        told.iter().map(result_of).map(|r| r.order_id.map(|o| o.get())).collect::<Vec<_>>(),
        [Some(order)]
    );
}

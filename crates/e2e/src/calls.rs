//! The calls a buyer or an admin makes through the gateway (or what is in front of it): dev
//! tokens, sales and their waiting rooms, path tokens and orders, results, the buyer's orders,
//! pay and cancel, and the event streams (`EventStream`), each answered as an `Answer`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use seckill_common::GoodsId;
use seckill_common::api::{Goods, NewGoods, Order, SeckillResult, SeckillStatus, TokenResponse};
use seckill_common::room::WaitingRoom;
use seckill_harness::api::{self, SaleRoute, new_sale};
use serde_json::{Value, json};

use crate::System;

/// A response's status and JSON body (Null when it has none).
pub type Answer = (u16, Value);

async fn answer(res: reqwest::Response) -> Answer {
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

/// A buyer's open event stream, read as it arrives.
pub struct EventStream {
    res: reqwest::Response,
    reader: seckill_common::push::SseReader,
    ready: std::collections::VecDeque<seckill_common::push::SseEvent>,
}

impl EventStream {
    async fn of(res: reqwest::Response) -> Result<Self, Answer> {
        if res.status() != 200 {
            return Err(answer(res).await);
        }
        let kind = res.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default();
        assert!(kind.starts_with("text/event-stream"), "a stream's content type: {kind}");
        Ok(Self { res, reader: Default::default(), ready: Default::default() })
    }

    /// The next event; None when the stream ended. Panics after `within` without one.
    pub async fn next(&mut self, within: Duration) -> Option<seckill_common::push::SseEvent> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Some(event);
            }
            let chunk = tokio::time::timeout_at(deadline, self.res.chunk())
                .await
                .unwrap_or_else(|_| panic!("no event within {within:?}"));
            match chunk {
                Ok(Some(bytes)) => self.ready.extend(self.reader.push(&String::from_utf8_lossy(&bytes))),
                Ok(None) | Err(_) => return None,
            }
        }
    }

    /// Every event until the stream ends (panics if it has not within `within`).
    pub async fn to_end(mut self, within: Duration) -> Vec<seckill_common::push::SseEvent> {
        let deadline = tokio::time::Instant::now() + within;
        let mut events = Vec::new();
        while let Some(event) =
            self.next(deadline.saturating_duration_since(tokio::time::Instant::now())).await
        {
            events.push(event);
        }
        events
    }
}

impl System {
    /// A user token for each of `users`, a hundred minted at a time.
    pub async fn dev_tokens(&self, users: &[i64]) -> HashMap<i64, String> {
        use futures_util::StreamExt;
        futures_util::stream::iter(
            users.iter().map(|u| async move { (*u, self.dev_token(*u, "user").await) }),
        )
        .buffer_unordered(100)
        .collect()
        .await
    }

    pub async fn dev_token(&self, user: i64, role: &str) -> String {
        let (status, body) = self.post(api::DEV_TOKEN, None, json!({"user_id": user, "role": role})).await;
        assert_eq!(status, 200, "dev token: {body}");
        serde_json::from_value::<TokenResponse>(body).unwrap().token
    }

    pub async fn post(&self, path: &str, token: Option<&str>, body: Value) -> Answer {
        let mut req = self.http.post(self.url(path)).json(&body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        answer(req.send().await.unwrap()).await
    }

    pub async fn get(&self, path: &str, token: Option<&str>) -> Answer {
        let mut req = self.http.get(self.url(path));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        answer(req.send().await.unwrap()).await
    }

    /// Creates a sale through the gateway as an admin; `start`/`end` relative to now.
    pub async fn create_sale(&self, stock: i64, start: chrono::Duration, end: chrono::Duration) -> Goods {
        self.create_sale_in(stock, 1, start, end).await
    }

    /// As [`System::create_sale`], its stock split over `buckets` buckets.
    pub async fn create_sale_in(
        &self,
        stock: i64,
        buckets: u8,
        start: chrono::Duration,
        end: chrono::Duration,
    ) -> Goods {
        self.create_goods(new_sale(NAME.into(), stock, buckets, start, end, None)).await
    }

    /// As [`System::create_sale`], behind a waiting room.
    pub async fn create_room_sale(
        &self,
        stock: i64,
        start: chrono::Duration,
        end: chrono::Duration,
        room: WaitingRoom,
    ) -> Goods {
        self.create_goods(new_sale(NAME.into(), stock, 1, start, end, Some(room))).await
    }

    async fn create_goods(&self, body: NewGoods) -> Goods {
        let admin = self.dev_token(1, "admin").await;
        let body = serde_json::to_value(body).unwrap();
        let (status, body) = self.post(api::ADMIN_GOODS, Some(&admin), body).await;
        assert_eq!(status, 201, "create sale: {body}");
        serde_json::from_value(body).unwrap()
    }

    /// A sale open now for an hour, its stock split over `buckets` buckets.
    pub async fn open_sale_in(&self, stock: i64, buckets: u8) -> Goods {
        self.create_sale_in(stock, buckets, chrono::Duration::seconds(-5), chrono::Duration::hours(1)).await
    }

    /// A sale open now for an hour.
    pub async fn open_sale(&self, stock: i64) -> Goods {
        self.create_sale(stock, chrono::Duration::seconds(-5), chrono::Duration::hours(1)).await
    }

    /// Joins the sale's waiting room (`POST /api/seckill/{g}/queue`, no ticket), doing the
    /// proof of work first when the room asks for it.
    pub async fn join_room(&self, user_token: &str, g: GoodsId) -> Answer {
        let path = SaleRoute::Queue.path(g.get());
        let (status, body) = self.post(&path, Some(user_token), json!({})).await;
        if body["code"] != "CHALLENGE_REQUIRED" {
            return (status, body);
        }
        let (status, challenge) =
            self.post(&SaleRoute::QueueChallenge.path(g.get()), Some(user_token), Value::Null).await;
        assert_eq!(status, 200, "a challenge: {challenge}");
        let (Some(text), Some(difficulty)) =
            (challenge["challenge"].as_str(), challenge["difficulty"].as_u64())
        else {
            panic!("a challenge and its difficulty: {challenge}");
        };
        let answer =
            seckill_common::room::Challenge::solve(text, u8::try_from(difficulty).unwrap_or(u8::MAX));
        self.post(&path, Some(user_token), json!({"challenge": text, "answer": answer})).await
    }

    pub async fn path_token(&self, user_token: &str, g: GoodsId) -> Answer {
        self.post(&SaleRoute::Token.path(g.get()), Some(user_token), Value::Null).await
    }

    pub async fn order(&self, user_token: &str, g: GoodsId, path_token: Option<&str>) -> Answer {
        let mut req = self.http.post(self.url(&SaleRoute::Orders.path(g.get()))).bearer_auth(user_token);
        if let Some(t) = path_token {
            req = req.header(seckill_common::headers::SECKILL_TOKEN, t);
        }
        answer(req.send().await.unwrap()).await
    }

    /// Path token then order, as a buyer's client does.
    pub async fn buy(&self, user_token: &str, g: GoodsId) -> Answer {
        let (status, body) = self.path_token(user_token, g).await;
        if status != 200 {
            return (status, body);
        }
        self.order(user_token, g, body["token"].as_str()).await
    }

    /// Path token then order, again after a 503 (a dependency down or the sale being restored),
    /// as a buyer's client does, for up to `within`.
    pub async fn buy_retrying(&self, user_token: &str, g: GoodsId, within: Duration) -> Answer {
        let deadline = Instant::now() + within;
        loop {
            let (status, body) = self.buy(user_token, g).await;
            if status != 503 || Instant::now() > deadline {
                return (status, body);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The admin's audit of a sale.
    pub async fn audit(&self, g: GoodsId) -> seckill_common::api::SaleAudit {
        let admin = self.dev_token(1, "admin").await;
        let (status, body) = self.get(&api::audit_path(g.get()), Some(&admin)).await;
        assert_eq!(status, 200, "audit: {body}");
        serde_json::from_value(body).unwrap()
    }

    /// The buyer's result. A 503 (a dependency slow to answer on a loaded machine) is retried,
    /// as a client would; anything else but 200 fails the test.
    pub async fn result(&self, user_token: &str, g: GoodsId) -> SeckillResult {
        for _ in 0..20 {
            let (status, body) = self.get(&SaleRoute::Result.path(g.get()), Some(user_token)).await;
            match status {
                200 => return serde_json::from_value(body).unwrap(),
                503 => tokio::time::sleep(Duration::from_millis(250)).await,
                _ => panic!("result: {status} {body}"),
            }
        }
        panic!("result: 503 twenty times in a row");
    }

    /// Polls until the result is no longer `queued` (or `within` passes: then the last one).
    pub async fn final_result(&self, user_token: &str, g: GoodsId, within: Duration) -> SeckillResult {
        let deadline = Instant::now() + within;
        loop {
            let r = self.result(user_token, g).await;
            if r.status != SeckillStatus::Queued || Instant::now() > deadline {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Opens `user_token`'s event stream of `g` (with `headers` besides the bearer token: a
    /// place ticket, a `Last-Event-ID`); a refusal is its status and body.
    pub async fn open_stream(
        &self,
        user_token: &str,
        g: GoodsId,
        headers: &[(&str, &str)],
    ) -> Result<EventStream, Answer> {
        let mut req = self.http.get(self.url(&SaleRoute::Events.path(g.get()))).bearer_auth(user_token);
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        EventStream::of(req.send().await.unwrap()).await
    }

    /// Opens a stream with a ticket (`POST .../events/ticket` as `user_token`, then the stream
    /// without the token, as a browser's EventSource would).
    pub async fn open_stream_with_ticket(&self, user_token: &str, g: GoodsId) -> Result<EventStream, Answer> {
        let (status, body) =
            self.post(&SaleRoute::EventsTicket.path(g.get()), Some(user_token), json!({})).await;
        assert_eq!(status, 200, "stream ticket: {body}");
        self.stream_by_ticket(g, body["ticket"].as_str().unwrap()).await
    }

    pub async fn stream_by_ticket(&self, g: GoodsId, ticket: &str) -> Result<EventStream, Answer> {
        // A ticket is letters, digits, `.`, `-` and `_`: nothing to escape in a query.
        let url = self.url(&format!("{}?ticket={ticket}", SaleRoute::Events.path(g.get())));
        EventStream::of(self.http.get(url).send().await.unwrap()).await
    }

    pub async fn order_by_id(&self, user_token: &str, id: i64) -> Answer {
        self.get(&api::order_path(id), Some(user_token)).await
    }

    pub async fn goods(&self, g: GoodsId) -> Goods {
        let (status, body) = self.get(&api::goods_path(g.get()), None).await;
        assert_eq!(status, 200);
        serde_json::from_value(body).unwrap()
    }

    pub async fn pay(&self, user_token: &str, order_id: i64) -> Answer {
        self.post(&api::pay_path(order_id), Some(user_token), Value::Null).await
    }

    pub async fn cancel(&self, user_token: &str, order_id: i64) -> Answer {
        self.post(&api::cancel_path(order_id), Some(user_token), Value::Null).await
    }

    /// Buys and waits for the order: its id.
    pub async fn buy_order(&self, user_token: &str, g: GoodsId) -> i64 {
        let (status, body) = self.buy(user_token, g).await;
        assert_eq!(status, 202, "buy: {body}");
        let r = self.final_result(user_token, g, Duration::from_secs(20)).await;
        assert_eq!(r.status, SeckillStatus::Success, "{r:?}");
        r.order_id.unwrap().get()
    }

    pub async fn order_status(&self, user_token: &str, order_id: i64) -> String {
        let (status, body) = self.order_by_id(user_token, order_id).await;
        assert_eq!(status, 200, "{body}");
        body["status"].as_str().unwrap().to_owned()
    }
}

/// The name of every sale the tests create.
const NAME: &str = "flash phone";

pub fn order_of(body: &Value) -> Order {
    serde_json::from_value(body.clone()).unwrap()
}

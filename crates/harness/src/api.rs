//! The gateway's API as the tools and the end-to-end tests call it: every route named once
//! (the constants and `*_path` builders, [`SaleRoute`], and [`SalePaths`] built once per sale
//! for the load's loops), the headers a buyer presents ([`Req::path_token`] and the others),
//! what an answer says ([`Answer::json`], [`Answer::is_error`], [`Answer::path_token`]), and
//! the calls made outside the timed loops, decoded into seckill_common's types or [`Refused`].

use chrono::Utc;
use hyper::header::{HeaderName, HeaderValue};
use seckill_common::api::{Goods, NewGoods, Order, Role, SaleAudit, SeckillResult, TokenResponse};
use seckill_common::room::WaitingRoom;
use seckill_common::{ErrorBody, ErrorCode, headers};
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::client::{Answer, Conn, Req, bearer_header};

/// `POST`: a dev token (`auth.dev_tokens = true`).
pub const DEV_TOKEN: &str = "/api/auth/dev-token";
/// `POST`: a new sale, as an admin.
pub const ADMIN_GOODS: &str = "/api/admin/goods";
/// `GET`: the sales on the storefront's list.
pub const GOODS: &str = "/api/goods";
/// `GET`: the buyer's own orders.
pub const MY_ORDERS: &str = "/api/orders";

/// `GET`: one sale as the authority (stock-service) has it.
pub fn goods_path(g: i64) -> String {
    format!("{GOODS}/{g}")
}

/// `GET`: the admin's audit of a sale.
pub fn audit_path(g: i64) -> String {
    format!("{ADMIN_GOODS}/{g}/audit")
}

/// `GET`: one of the buyer's orders.
pub fn order_path(id: i64) -> String {
    format!("{MY_ORDERS}/{id}")
}

/// `POST`: pays one of the buyer's orders.
pub fn pay_path(id: i64) -> String {
    format!("{MY_ORDERS}/{id}/pay")
}

/// `POST`: cancels one of the buyer's orders.
pub fn cancel_path(id: i64) -> String {
    format!("{MY_ORDERS}/{id}/cancel")
}

/// A buyer's routes of one sale, under `/api/seckill/{id}/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaleRoute {
    /// `POST`: a path token.
    Token,
    /// `POST`: the order (202: queued).
    Orders,
    /// `GET`: the buyer's result.
    Result,
    /// `POST`: joins the waiting room; `GET` with the ticket: where one stands.
    Queue,
    /// `POST`: a proof-of-work challenge, when the room asks for one.
    QueueChallenge,
    /// `GET`: the buyer's event stream.
    Events,
    /// `POST`: a ticket to open the stream without the bearer token (a browser's EventSource).
    EventsTicket,
}

impl SaleRoute {
    pub fn path(self, g: i64) -> String {
        let tail = match self {
            Self::Token => "token",
            Self::Orders => "orders",
            Self::Result => "result",
            Self::Queue => "queue",
            Self::QueueChallenge => "queue/challenge",
            Self::Events => "events",
            Self::EventsTicket => "events/ticket",
        };
        format!("/api/seckill/{g}/{tail}")
    }
}

/// One sale's buyer paths, built once: the load's loops send on them with no formatting per
/// request.
#[derive(Debug, Clone)]
pub struct SalePaths {
    pub goods_id: i64,
    pub token: String,
    pub orders: String,
    pub result: String,
    pub queue: String,
    pub events: String,
}

impl SalePaths {
    pub fn new(g: i64) -> Self {
        Self {
            goods_id: g,
            token: SaleRoute::Token.path(g),
            orders: SaleRoute::Orders.path(g),
            result: SaleRoute::Result.path(g),
            queue: SaleRoute::Queue.path(g),
            events: SaleRoute::Events.path(g),
        }
    }
}

/// The headers a buyer presents besides its bearer token.
impl Req<'_> {
    /// `x-seckill-token`: the path token an order presents.
    pub fn path_token(self, token: HeaderValue) -> Self {
        self.header(HeaderName::from_static(headers::SECKILL_TOKEN), token)
    }

    /// `x-room-admission`: the admission a waiting room gave.
    pub fn admission(self, admission: HeaderValue) -> Self {
        self.header(HeaderName::from_static(headers::ROOM_ADMISSION), admission)
    }

    /// `x-room-ticket`: the place held in a waiting room.
    pub fn room_ticket(self, ticket: HeaderValue) -> Self {
        self.header(HeaderName::from_static(headers::ROOM_TICKET), ticket)
    }
}

/// What an answer of the gateway says.
impl Answer {
    /// A 2xx answer's body as a `T`; `None` for another status or a body that is not one.
    pub fn json<T: DeserializeOwned>(&self) -> Option<T> {
        (200..300).contains(&self.status).then(|| serde_json::from_slice(&self.body).ok()).flatten()
    }

    /// A refusal with this status and error code (`{"code": ...}`).
    pub fn is_error(&self, status: u16, code: ErrorCode) -> bool {
        self.status == status
            && serde_json::from_slice::<ErrorBody>(&self.body).is_ok_and(|b| b.code == code.as_str())
    }

    /// A path token's answer as the header an order presents; `None` when refused.
    pub fn path_token(&self) -> Option<HeaderValue> {
        self.json::<TokenResponse>().and_then(|t| HeaderValue::from_str(&t.token).ok())
    }
}

/// A call answered otherwise than wanted: another status, or a body not of the type.
#[derive(Debug)]
pub struct Refused {
    /// Method and path, for the message.
    pub request: String,
    pub answer: Answer,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let body: String = String::from_utf8_lossy(&self.answer.body).chars().take(200).collect();
        write!(f, "{} answered HTTP {}: {body}", self.request, self.answer.status)
    }
}

impl std::error::Error for Refused {}

/// Sends `req` and decodes a 2xx answer's body.
async fn call<T: DeserializeOwned>(conn: &mut Conn, req: Req<'_>) -> Result<T, Refused> {
    let request = format!("{} {}", req.method, req.path);
    let answer = conn.send(req).await;
    answer.json().ok_or(Refused { request, answer })
}

/// `user`'s bearer header with `role`, from a dev token (`POST /api/auth/dev-token`).
pub async fn dev_token(conn: &mut Conn, user: i64, role: Role) -> Result<HeaderValue, Refused> {
    let req = Req::post(DEV_TOKEN).json(&json!({"user_id": user, "role": role}));
    let request = format!("POST {DEV_TOKEN} (it needs the gateway's auth.dev_tokens = true)");
    let answer = conn.send(req).await;
    match answer.json::<TokenResponse>().and_then(|t| bearer_header(&t.token).ok()) {
        Some(bearer) => Ok(bearer),
        None => Err(Refused { request, answer }),
    }
}

/// A sale's body for [`ADMIN_GOODS`]: `units` over `buckets` stock buckets, from `start` to
/// `end` (both relative to now).
pub fn new_sale(
    name: String,
    units: i64,
    buckets: u8,
    start: chrono::Duration,
    end: chrono::Duration,
    waiting_room: Option<WaitingRoom>,
) -> NewGoods {
    let now = Utc::now();
    NewGoods {
        name,
        price_cents: 99_900,
        seckill_price_cents: 49_900,
        stock_total: units,
        start_at: now + start,
        end_at: now + end,
        buckets,
        waiting_room,
    }
}

/// Creates a sale of `units` over `buckets` stock buckets, named "<label> <time>", that opened
/// `opened_ago` before now and ends in two hours (`POST /api/admin/goods` as `admin`).
pub async fn create_sale(
    conn: &mut Conn,
    admin: &HeaderValue,
    label: &str,
    units: i64,
    buckets: u8,
    opened_ago: chrono::Duration,
    waiting_room: Option<WaitingRoom>,
) -> Result<Goods, Refused> {
    let name = format!("{label} {}", Utc::now().format("%H:%M:%S"));
    let body = new_sale(name, units, buckets, -opened_ago, chrono::Duration::hours(2), waiting_room);
    call(conn, Req::post(ADMIN_GOODS).bearer(admin).json(&body)).await
}

/// `GET /api/goods/{g}`: the sale as the authority (stock-service) has it.
pub async fn goods(conn: &mut Conn, g: i64) -> Result<Goods, Refused> {
    call(conn, Req::get(&goods_path(g))).await
}

/// The admin's audit of sale `g`.
pub async fn audit(conn: &mut Conn, admin: &HeaderValue, g: i64) -> Result<SaleAudit, Refused> {
    call(conn, Req::get(&audit_path(g)).bearer(admin)).await
}

/// The buyer's result in the sale of `paths`.
pub async fn result(
    conn: &mut Conn,
    paths: &SalePaths,
    bearer: &HeaderValue,
) -> Result<SeckillResult, Refused> {
    call(conn, Req::get(&paths.result).bearer(bearer)).await
}

/// One of the buyer's orders.
pub async fn order(conn: &mut Conn, bearer: &HeaderValue, id: i64) -> Result<Order, Refused> {
    call(conn, Req::get(&order_path(id)).bearer(bearer)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn routes_are_spelled_as_the_gateway_serves_them() {
        assert_eq!(goods_path(7), "/api/goods/7");
        assert_eq!(audit_path(7), "/api/admin/goods/7/audit");
        assert_eq!(order_path(3), "/api/orders/3");
        assert_eq!(pay_path(3), "/api/orders/3/pay");
        assert_eq!(cancel_path(3), "/api/orders/3/cancel");
        let p = SalePaths::new(7);
        assert_eq!(
            [&p.token, &p.orders, &p.result],
            ["/api/seckill/7/token", "/api/seckill/7/orders", "/api/seckill/7/result"]
        );
        assert_eq!([&p.queue, &p.events], ["/api/seckill/7/queue", "/api/seckill/7/events"]);
        assert_eq!(SaleRoute::QueueChallenge.path(7), "/api/seckill/7/queue/challenge");
        assert_eq!(SaleRoute::EventsTicket.path(7), "/api/seckill/7/events/ticket");
    }

    #[test]
    fn answers_are_read_as_the_types_they_carry() {
        let answer = |status, body: &str| Answer::new(status, Bytes::from(body.to_owned()));
        assert_eq!(answer(200, r#"{"token":"abc"}"#).path_token(), Some(HeaderValue::from_static("abc")));
        assert_eq!(answer(403, r#"{"token":"abc"}"#).path_token(), None);
        assert_eq!(answer(200, "not json").path_token(), None);
        let sold_out = answer(410, r#"{"code":"SOLD_OUT","message":"sold out"}"#);
        assert!(sold_out.is_error(410, ErrorCode::SoldOut));
        assert!(!sold_out.is_error(410, ErrorCode::Busy));
        assert!(!answer(410, "not json").is_error(410, ErrorCode::SoldOut));
        let refused = Refused { request: "GET /api/goods/1".into(), answer: answer(404, "gone") };
        assert_eq!(refused.to_string(), "GET /api/goods/1 answered HTTP 404: gone");
    }
}

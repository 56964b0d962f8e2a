//! The operations of the shop's JSON API, in a buyer's order: buying (the path token, the
//! buy, its result and its stream, the waiting room), the goods, the caller's orders, the
//! admin's sales, and the development tokens.
//!
//! Documentation only: each function exists for its `#[utoipa::path]`, which describes one
//! public route with the types its service really sends. Summaries and descriptions are the
//! doc comments.
#![allow(dead_code)]

use seckill_common::api::{
    DevTokenRequest, Goods, NewGoods, Order, OrderAccepted, SaleAudit, SaleRepair, SeckillResult,
    TokenResponse,
};
use seckill_common::push::StreamTicketResponse;
use seckill_common::room::{QueueChallenge, QueueJoin, QueueStatus};
use seckill_common::{GoodsId, OrderId};
use utoipa::ToSchema;

use super::errors::{
    AuditErrors, BuyErrors, CancelErrors, ChallengeErrors, CreateSaleErrors, DevTokenErrors, EventsErrors,
    GetGoodsErrors, GetOrderErrors, JoinErrors, ListGoodsErrors, ListOrdersErrors, PathTokenErrors,
    PayErrors, QueueStatusErrors, RepairErrors, ResultErrors, StreamTicketErrors,
};

/// One event of a stream (`GET /api/seckill/{goods_id}/events`), as its fields read; the
/// stream's `retry:` line and its heartbeat comments are no events.
#[derive(ToSchema)]
struct StreamEvent {
    /// Names the state the event tells (`r.success.41`, `q.waiting.120.37`): send it back
    /// as `Last-Event-ID` when reconnecting.
    id: String,
    event: seckill_common::push::EventKind,
    /// One line of JSON: a `SeckillResult` (`result`), a `QueueStatus` (`queue`), a
    /// `SoldOutEvent` (`sold_out`), `{}` (`replaced`).
    data: String,
}

/// Buy one unit
///
/// The hot path. One atomic step in Redis checks and consumes the path token, refuses a
/// repeat buyer, refuses when the stock is 0 and reserves a unit; the request is then put
/// on the order queue and, once the broker has confirmed it, answered 202. Nothing here
/// waits for the database: the order is written moments later, and the buyer polls the
/// result.
#[utoipa::path(
    post,
    path = "/api/seckill/{goods_id}/orders",
    tag = "buying",
    params(
        ("goods_id" = GoodsId, Path, description = "The sale.", example = 1),
        (
            "x-seckill-token" = String,
            Header,
            description = "The path token from `POST /api/seckill/{goods_id}/token` (up to 64 \
                characters; used once). Required unless seckill-service runs with \
                `seckill.require_token = false`."
        ),
        ("x-room-admission" = Option<String>, Header, description = ADMISSION_HEADER),
    ),
    responses(
        (status = 202, description = "Accepted and queued: poll the result.", body = OrderAccepted),
        BuyErrors,
    )
)]
fn buy() {}

/// Get a path token
///
/// The "hidden address" of a sale's buy: a token for this user and sale, to send as
/// `x-seckill-token` with the buy. The same unused token is answered while it lives
/// (`seckill.token_ttl_secs`); each buy consumes it. Answered only while the sale is open
/// and not sold out.
#[utoipa::path(
    post,
    path = "/api/seckill/{goods_id}/token",
    tag = "buying",
    params(
        ("goods_id" = GoodsId, Path, description = "The sale.", example = 1),
        ("x-room-admission" = Option<String>, Header, description = ADMISSION_HEADER),
    ),
    responses(
        (status = 200, description = "The path token.", body = TokenResponse),
        PathTokenErrors,
    )
)]
fn path_token() {}

/// Poll a buy's result
///
/// `queued` until the order is written, then `success` with the order id, or `failed` (the
/// unit was given back: the buyer may buy again). `none` when nothing is known of the
/// buyer in this sale. Answered from Redis, or, when Redis knows nothing of the buyer, from
/// the orders.
#[utoipa::path(
    get,
    path = "/api/seckill/{goods_id}/result",
    tag = "buying",
    params(("goods_id" = GoodsId, Path, description = "The sale.", example = 1)),
    responses(
        (status = 200, description = "Where the caller's buy stands.", body = SeckillResult),
        ResultErrors,
    )
)]
fn poll_result() {}

/// Follow a buy as it happens (server-sent events)
///
/// Instead of polling: a `text/event-stream` of what concerns the caller in this sale. It
/// begins with the current state, then tells each change as it happens: `result` (data: a
/// `SeckillResult`; `success` with the order id, or `failed`, ends the stream), `queue`
/// (with `x-room-ticket` on a sale with a waiting room, data: a `QueueStatus`: the place as
/// it moves, then the admission), `sold_out` (data: a `SoldOutEvent`; ends the stream of a
/// buyer who holds no request), `replaced` (the buyer opened another stream of this sale on
/// this replica: this one ends). Each event's `id` names the state it tells: reconnect with
/// `Last-Event-ID` (or `last_event_id`) and what was told last is not told again; `204` if
/// it was the final answer. A comment line every `push.heartbeat_secs`; a stream that told
/// nothing for `push.idle_secs` ends (reconnect). The gateway re-reads the result when a
/// stream opens and after a silence, so a lost notification delays an answer, never loses
/// it.
///
/// Authenticated by the bearer token, or, where no header can be sent (a browser's
/// EventSource), by a one-use `ticket` from `POST /api/seckill/{goods_id}/events/ticket`:
/// never put the bearer token in a URL.
#[utoipa::path(
    get,
    path = "/api/seckill/{goods_id}/events",
    tag = "buying",
    params(
        ("goods_id" = GoodsId, Path, description = "The sale.", example = 1),
        ("ticket" = Option<String>, Query, description = "A stream ticket, instead of the bearer token."),
        ("last_event_id" = Option<String>, Query, description = "As `Last-Event-ID`, for a client that cannot send it."),
        ("Last-Event-ID" = Option<String>, Header, description = "The id of the last event the client read."),
        (
            "x-room-ticket" = Option<String>,
            Header,
            description = "The buyer's place ticket (with the bearer token): the stream tells their place."
        ),
    ),
    responses(
        (
            status = 200,
            description = "The stream: its events, each as its fields read.",
            content_type = "text/event-stream",
            body = StreamEvent,
        ),
        (status = 204, description = "The client's last event was its final answer: nothing more will come."),
        EventsErrors,
    )
)]
fn events() {}

/// Get a stream ticket
///
/// A one-use ticket to open the caller's stream of this sale without the bearer token in
/// the URL: `GET /api/seckill/{goods_id}/events?ticket=...` within `expires_in_secs`. With
/// the buyer's place ticket in `x-room-ticket`, the stream also tells their place.
#[utoipa::path(
    post,
    path = "/api/seckill/{goods_id}/events/ticket",
    tag = "buying",
    params(
        ("goods_id" = GoodsId, Path, description = "The sale.", example = 1),
        ("x-room-ticket" = Option<String>, Header, description = "The buyer's place ticket, to carry into the stream."),
    ),
    responses(
        (status = 200, description = "The ticket.", body = StreamTicketResponse),
        StreamTicketErrors,
    )
)]
fn stream_ticket() {}

const ADMISSION_HEADER: &str = "On a sale with a waiting room: the admission from \
    `GET /api/seckill/{goods_id}/queue` once the buyer's place came up (bound to the buyer \
    and the sale, good until `admission_expires_at`). Required there, ignored elsewhere.";

/// Join a sale's waiting room
///
/// A place in the sale's line, once per user: joining again answers the same place. Who
/// joins before the sale opens (from `opens_before_secs` before it) gets a place drawn at
/// random at the opening, whenever they joined; who joins after goes to the back, in
/// arrival order. The answer's `ticket` says where the buyer stands when sent as
/// `x-room-ticket`; presented again in the body, it keeps the place even if the shop lost
/// track of it. The body is optional.
#[utoipa::path(
    post,
    path = "/api/seckill/{goods_id}/queue",
    tag = "buying",
    params(("goods_id" = GoodsId, Path, description = "The sale (one with a waiting room).", example = 1)),
    request_body(content = Option<QueueJoin>, description = "Optional: a ticket given before."),
    responses(
        (status = 200, description = "The buyer's place and where it stands.", body = QueueStatus),
        JoinErrors,
    )
)]
fn join_queue() {}

/// Where the buyer stands in the waiting room
///
/// Places ahead, the estimated wait and the state: `waiting`, `admitted` (with the
/// admission the sale's token and order routes ask for), `sold_out`, or `closed` (the sale
/// ended, or the admission's life did). Answered from the gateway's memory (its copy of the
/// room, a tick or two behind, which holds when each place came up): ask again
/// after `poll_after_ms` (sooner as the place nears). The `draw` shows the commitment to
/// the seed before the opening and the seed after, so anyone can recompute every early
/// joiner's place.
#[utoipa::path(
    get,
    path = "/api/seckill/{goods_id}/queue",
    tag = "buying",
    params(
        ("goods_id" = GoodsId, Path, description = "The sale.", example = 1),
        ("x-room-ticket" = String, Header, description = "The `ticket` the join answered."),
    ),
    responses(
        (status = 200, description = "Where the ticket's holder stands.", body = QueueStatus),
        QueueStatusErrors,
    )
)]
fn queue_status() {}

/// Get a proof-of-work challenge
///
/// Work to do before joining a room that asks for it (`waiting_room.pow_difficulty` above
/// 0): find `answer` such that SHA-256(the challenge's UTF-8 bytes, then `answer` as 8
/// bytes little-endian) starts with `difficulty` zero bits, then join with both. About
/// 2^difficulty hashes for the client, one for the server. Bound to the caller and the
/// sale, good for two minutes, taken once. A buyer who holds a place, or presents a ticket,
/// joins without it.
#[utoipa::path(
    post,
    path = "/api/seckill/{goods_id}/queue/challenge",
    tag = "buying",
    params(("goods_id" = GoodsId, Path, description = "The sale.", example = 1)),
    responses(
        (status = 200, description = "The challenge.", body = QueueChallenge),
        ChallengeErrors,
    )
)]
fn queue_challenge() {}

/// List the sales
///
/// The sales in the states asked (without `state`: the live and upcoming ones), with their
/// stock as the stock ledger counts it, a bounded page at a time. The live and upcoming
/// sales come soonest first (by `start_at`, then id); the ended ones alone, latest first
/// (by `end_at`, then id). While more may follow, the response carries the cursor to the
/// next page in `x-next-cursor` (and the next page's URL in `Link`); the last page has
/// neither. Walking the cursor meets every sale of those states once.
#[utoipa::path(
    get,
    path = "/api/goods",
    tag = "goods",
    params(
        (
            "state" = Option<String>,
            Query,
            description = "`upcoming`, `live` or `ended`, or several separated by commas \
                (default `upcoming,live`).",
            pattern = r"^(upcoming|live|ended)(,(upcoming|live|ended))*$",
            example = "live,upcoming"
        ),
        (
            "limit" = Option<u32>,
            Query,
            description = "Sales in the page, 1 to 200 (default 100).",
            minimum = 1,
            maximum = 200,
            example = 100
        ),
        (
            "cursor" = Option<String>,
            Query,
            description = "The previous page's `x-next-cursor`, for the page after it (the \
                same `state` as that page's).",
            max_length = 100,
            pattern = r"^[A-Za-z0-9_-]+$"
        ),
    ),
    responses(
        (
            status = 200,
            description = "A page of the sales.",
            body = Vec<Goods>,
            headers(
                ("x-next-cursor" = String, description = "The cursor to the next page; absent on the last."),
                ("link" = String, description = "`<the next page's URL>; rel=\"next\"`; absent on the last."),
            )
        ),
        ListGoodsErrors,
    )
)]
fn list_goods() {}

/// Get one sale
#[utoipa::path(
    get,
    path = "/api/goods/{id}",
    tag = "goods",
    params(("id" = GoodsId, Path, description = "The goods id.", example = 1)),
    responses(
        (status = 200, description = "The sale.", body = Goods),
        GetGoodsErrors,
    )
)]
fn get_goods() {}

/// List the caller's orders
#[utoipa::path(
    get,
    path = "/api/orders",
    tag = "orders",
    responses(
        (status = 200, description = "The caller's orders, every status.", body = Vec<Order>),
        ListOrdersErrors,
    )
)]
fn list_orders() {}

/// Get one of the caller's orders
#[utoipa::path(
    get,
    path = "/api/orders/{id}",
    tag = "orders",
    params(("id" = OrderId, Path, description = "The order id (from a `success` result).", example = 1)),
    responses(
        (status = 200, description = "The order.", body = Order),
        GetOrderErrors,
    )
)]
fn get_order() {}

/// Pay an order
///
/// A simulated payment: an unpaid order before its `expires_at` becomes `paid`. Paying a
/// paid order again changes nothing and answers 200.
#[utoipa::path(
    post,
    path = "/api/orders/{id}/pay",
    tag = "orders",
    params(("id" = OrderId, Path, description = "The order id.", example = 1)),
    responses(
        (status = 200, description = "The order, paid.", body = Order),
        PayErrors,
    )
)]
fn pay_order() {}

/// Cancel an order
///
/// An unpaid order becomes `cancelled` and its unit goes back on sale: the stock ledger
/// releases it, Redis sells it again, and the buyer may buy in this sale again.
#[utoipa::path(
    post,
    path = "/api/orders/{id}/cancel",
    tag = "orders",
    params(("id" = OrderId, Path, description = "The order id.", example = 1)),
    responses(
        (status = 200, description = "The order, cancelled.", body = Order),
        CancelErrors,
    )
)]
fn cancel_order() {}

/// Publish a sale
///
/// The goods are created at the stock ledger, then the stock is loaded into Redis before
/// the answer: the sale can sell from the moment this returns.
#[utoipa::path(
    post,
    path = "/api/admin/goods",
    tag = "admin",
    request_body = NewGoods,
    responses(
        (status = 201, description = "The sale, as `GET /api/goods/{id}` shows it.", body = Goods),
        CreateSaleErrors,
    )
)]
fn create_sale() {}

/// Audit a sale
///
/// Compares the sale's Redis data, the stock ledger, the orders and the buy queue. Requests
/// in flight make some comparisons differ for a moment: judge a sale whose queue is empty.
#[utoipa::path(
    get,
    path = "/api/admin/goods/{id}/audit",
    tag = "admin",
    params(("id" = GoodsId, Path, description = "The sale.", example = 1)),
    responses(
        (status = 200, description = "The comparison.", body = SaleAudit),
        AuditErrors,
    )
)]
fn audit_sale() {}

/// Repair a sale
///
/// Writes the active orders back into Redis and sets its stock from the authorities (a
/// sale missing in Redis is rebuilt), then audits it again.
#[utoipa::path(
    post,
    path = "/api/admin/goods/{id}/repair",
    tag = "admin",
    params(("id" = GoodsId, Path, description = "The sale.", example = 1)),
    responses(
        (status = 200, description = "What changed, and the audit after it.", body = SaleRepair),
        RepairErrors,
    )
)]
fn repair_sale() {}

/// Mint a token (development only)
///
/// A JWT for any user and role, living `dev_token.ttl_secs`. Only when the gateway runs
/// with `auth.dev_tokens = true` (local runs and tests); otherwise the route does not exist
/// and is not in this document.
#[utoipa::path(
    post,
    path = "/api/auth/dev-token",
    tag = "auth",
    request_body = DevTokenRequest,
    responses(
        (status = 200, description = "The token, to send as `Authorization: Bearer <token>`.", body = TokenResponse),
        DevTokenErrors,
    )
)]
fn dev_token() {}

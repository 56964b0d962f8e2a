//! The error responses of each operation: the codes it may answer, each with when, and the
//! responses built from them (the statuses from [`ErrorCode::status`], so the document cannot
//! disagree with the services).

use std::collections::BTreeMap;

use seckill_common::ErrorCode;
use utoipa::openapi::example::ExampleBuilder;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Response};

/// The error codes an operation may answer, each with when.
type Cases = &'static [(ErrorCode, &'static str)];

/// Builds an operation's error responses: one a status (from [`ErrorCode::status`], so the
/// document cannot disagree with the services), an example a code, and `Retry-After` on 429
/// and 503. A code listed twice has its texts joined.
fn error_responses(sets: &[Cases]) -> BTreeMap<String, RefOr<Response>> {
    let mut by_code: Vec<(ErrorCode, String)> = Vec::new();
    for &(code, when) in sets.iter().flat_map(|set| set.iter()) {
        match by_code.iter_mut().find(|(c, _)| *c == code) {
            Some((_, text)) => {
                text.push(' ');
                text.push_str(when);
            }
            None => by_code.push((code, when.to_owned())),
        }
    }
    let mut by_status: BTreeMap<u16, Vec<(ErrorCode, String)>> = BTreeMap::new();
    for (code, when) in by_code {
        by_status.entry(code.status()).or_default().push((code, when));
    }
    by_status
        .into_iter()
        .map(|(status, cases)| {
            let description =
                cases.iter().map(|(code, when)| format!("`{code}`: {when}")).collect::<Vec<_>>().join("\n\n");
            let examples = cases.iter().map(|(code, when)| {
                let example = ExampleBuilder::new()
                    .value(Some(serde_json::json!({"code": code.as_str(), "message": when})))
                    .build();
                (code.as_str().to_owned(), example)
            });
            let content = ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorBody")))
                .examples_from_iter(examples);
            let mut response =
                ResponseBuilder::new().description(description).content("application/json", content.build());
            if status == 429 || status == 503 {
                response = response.header("Retry-After", retry_after(status));
            }
            (status.to_string(), RefOr::T(response.build()))
        })
        .collect()
}

fn retry_after(status: u16) -> utoipa::openapi::header::Header {
    let when = if status == 429 {
        "Always sent: seconds until the limit lets the next request through."
    } else {
        "Sent with `BUSY` when a replica sheds load: seconds to wait before trying again, 1 to 10."
    };
    HeaderBuilder::new()
        .schema(ObjectBuilder::new().schema_type(Type::Integer).minimum(Some(1)))
        .description(Some(when))
        .build()
}

/// Declares a type whose `IntoResponses` are the error responses of these case lists.
macro_rules! errors {
    ($name:ident: $($set:expr),+ $(,)?) => {
        pub(super) struct $name;

        impl utoipa::IntoResponses for $name {
            fn responses() -> BTreeMap<String, RefOr<Response>> {
                error_responses(&[$($set),+])
            }
        }
    };
}

/// Any forwarded route: the hop's own failures, and what it refuses to forward.
const FORWARDED: Cases = &[
    (ErrorCode::UriTooLong, "The path and query are longer than 8 KiB."),
    (
        ErrorCode::HeadersTooLarge,
        "A header the service reads (`content-type`, `x-seckill-token`, `x-room-ticket`, \
         `x-room-admission`) is longer than 1 KiB.",
    ),
    (
        ErrorCode::UpstreamUnavailable,
        "No replica of the service behind this route answers: try again shortly.",
    ),
    (
        ErrorCode::UpstreamTimeout,
        "The service behind this route did not answer in time; the request may have been carried out.",
    ),
    (ErrorCode::Internal, "An unexpected failure, logged with its cause."),
];
const TOKEN: Cases = &[(
    ErrorCode::Unauthorized,
    "No bearer token, or one that is malformed, wrongly signed, expired or not yet valid.",
)];
const ADMIN: Cases = &[
    (
        ErrorCode::Unauthorized,
        "No bearer token, or one that is malformed, wrongly signed, expired or not yet valid.",
    ),
    (ErrorCode::Forbidden, "The token is not an admin's."),
];
/// Any POST: the gateway reads the body within `http.body_limit_bytes` and `http.read_timeout_ms`
/// before forwarding it.
const BODY_LIMIT: Cases = &[
    (ErrorCode::PayloadTooLarge, "The body is larger than `http.body_limit_bytes`."),
    (
        ErrorCode::RequestTimeout,
        "The body did not arrive whole within `http.read_timeout_ms`; the connection is closed.",
    ),
];
const BAD_GOODS_ID: Cases = &[(ErrorCode::InvalidInput, "The goods id is not a positive integer.")];
const BAD_ORDER_ID: Cases = &[(ErrorCode::InvalidInput, "The order id is not a positive integer.")];
const NO_SALE: Cases = &[(ErrorCode::GoodsNotFound, "No sale has this goods id.")];
const ANONYMOUS_LIMIT: Cases = &[(
    ErrorCode::RateLimited,
    "Over the client address's limit of the anonymous routes (`rate_limit.anonymous`).",
)];
const ORDERS_LIMIT: Cases =
    &[(ErrorCode::RateLimited, "Over the user's limit of the order routes (`rate_limit.orders`).")];
const ADMIN_LIMIT: Cases =
    &[(ErrorCode::RateLimited, "Over the admin's limit of the admin routes (`rate_limit.admin`).")];
/// A buy click's (path token or order) answers before and around the sale.
const BUY_CLICK: Cases = &[
    (
        ErrorCode::RateLimited,
        "Over the user's buy limit (`rate_limit.buy`, shared by every gateway replica): every click counts.",
    ),
    (
        ErrorCode::Busy,
        "More buy clicks in progress than this gateway replica or the seckill-service replica \
         takes right now: shed at once. Each replica's bound follows the latency of the requests \
         it lets through, up to `overload.max_in_flight` or `seckill.max_in_flight`; \
         `Retry-After` is 1 to 10 s, longer the more buyers the replica is refusing for each one \
         it serves.",
    ),
    (ErrorCode::NotStarted, "The sale has not started: the message says when it does."),
    (ErrorCode::Ended, "The sale has ended."),
    (
        ErrorCode::SoldOut,
        "Sold out. The gateway itself answers a sale's clicks this way for `sold_out.remember_ms` \
         after seckill-service did.",
    ),
    (ErrorCode::Unavailable, "Redis or stock-service did not answer: try again shortly."),
];
const ORDER_NOT_FOUND: Cases = &[(
    ErrorCode::OrderNotFound,
    "The caller has no order with this id (another user's order is answered the same way).",
)];
const DATABASE: Cases = &[(ErrorCode::Unavailable, "The database did not answer: try again shortly.")];

/// The buy routes of a sale with a waiting room.
const ROOM_ADMISSION: Cases = &[(
    ErrorCode::NotAdmitted,
    "The sale has a waiting room, and the request carries no `x-room-admission` (before the \
     opening too), or one of another user or sale, a forged one, or one past its life: join the \
     room and wait for the admission.",
)];
const ROOM_TICKET: Cases = &[
    (
        ErrorCode::BadToken,
        "The place ticket is not this shop's, or is another user's or another sale's: join again \
         without it.",
    ),
    (ErrorCode::NoWaitingRoom, "The sale has no waiting room: buy directly."),
];
errors!(BuyErrors: TOKEN, BUY_CLICK, ROOM_ADMISSION, BAD_GOODS_ID, NO_SALE, BODY_LIMIT, &[
    (ErrorCode::BadToken, "No `x-seckill-token`, or one that is wrong, used or expired: ask for a new one."),
    (ErrorCode::Repeated, "The buyer already holds a unit of this sale, whatever path token the click carries."),
    (
        ErrorCode::Busy,
        "The order queue did not take the request (its unit was given back), or the sale's Redis \
         data is being rebuilt: try again.",
    ),
], FORWARDED);
errors!(PathTokenErrors: TOKEN, BUY_CLICK, ROOM_ADMISSION, BAD_GOODS_ID, NO_SALE, BODY_LIMIT, FORWARDED);
errors!(JoinErrors: TOKEN, BAD_GOODS_ID, NO_SALE, BODY_LIMIT, ROOM_TICKET, &[
    (
        ErrorCode::RateLimited,
        "Over the user's buy limit (`rate_limit.buy`: a join counts as a click), or the client \
         address's join limit (`rate_limit.join`: how many accounts one address may line up).",
    ),
    (
        ErrorCode::Busy,
        "More buy clicks in progress than this gateway or seckill-service replica takes right \
         now: shed at once, with `Retry-After`.",
    ),
    (
        ErrorCode::NotStarted,
        "The room is not open yet (it opens `opens_before_secs` before the sale): the message says when.",
    ),
    (ErrorCode::Ended, "The sale has ended."),
    (
        ErrorCode::SoldOut,
        "Sold out: nothing is left to wait for, whether the buyer held a place or not (the \
         gateway answers a sale's clicks this way for `sold_out.remember_ms` after \
         seckill-service did).",
    ),
    (ErrorCode::InvalidInput, "The body is not a `QueueJoin`, or its ticket is malformed."),
    (
        ErrorCode::ChallengeRequired,
        "The room asks for proof of work and the join brought none for a new place, or a wrong \
         answer, another user's or sale's challenge, an expired or an already used one: solve a \
         new one from `POST /api/seckill/{goods_id}/queue/challenge`.",
    ),
    (ErrorCode::Unavailable, "Redis or stock-service did not answer: join again shortly."),
], FORWARDED);
errors!(ChallengeErrors: TOKEN, BUY_CLICK, BAD_GOODS_ID, NO_SALE, BODY_LIMIT, &[
    (ErrorCode::NoWaitingRoom, "The sale has no waiting room."),
], FORWARDED);
errors!(QueueStatusErrors: TOKEN, BAD_GOODS_ID, NO_SALE, ROOM_TICKET, &[
    (ErrorCode::RateLimited, "Over the user's polling limit (`rate_limit.poll`)."),
    (ErrorCode::InvalidInput, "No `x-room-ticket`, or a malformed one."),
    (
        ErrorCode::Unavailable,
        "Redis did not answer this replica's first look at the room (every later answer comes \
         from memory).",
    ),
], FORWARDED);
errors!(ResultErrors: TOKEN, BAD_GOODS_ID, NO_SALE, &[
    (ErrorCode::RateLimited, "Over the user's polling limit (`rate_limit.poll`)."),
    (
        ErrorCode::Busy,
        "More requests in progress than the seckill-service replica takes right now: shed at \
         once. Its bound follows the latency of the requests it lets through, up to \
         `seckill.max_in_flight`; `Retry-After` is 1 to 10 s, longer the more buyers it is \
         refusing for each one it serves.",
    ),
    (ErrorCode::Unavailable, "Redis, stock-service or order-service did not answer: try again shortly."),
], FORWARDED);
const STREAM_LIMIT: Cases = &[(
    ErrorCode::RateLimited,
    "Over the user's limit of streams opened (`rate_limit.stream`, with the tickets asked for).",
)];
errors!(EventsErrors: BAD_GOODS_ID, NO_SALE, STREAM_LIMIT, ROOM_TICKET, &[
    (
        ErrorCode::Unauthorized,
        "Neither a valid bearer token nor a valid stream ticket: the ticket is malformed, \
         altered, expired, for another sale, or was used already.",
    ),
    (
        ErrorCode::InvalidInput,
        "The query names `ticket` or `last_event_id` more than once.",
    ),
    (
        ErrorCode::Busy,
        "This gateway replica holds `push.max_streams` streams: poll the result instead, or \
         reconnect after `Retry-After`.",
    ),
    (ErrorCode::Unavailable, "Redis did not answer the ticket's one-use check."),
], FORWARDED);
errors!(StreamTicketErrors: TOKEN, BAD_GOODS_ID, STREAM_LIMIT, &[
    (ErrorCode::BadToken, "The `x-room-ticket` sent along is not this buyer's for this sale."),
], BODY_LIMIT);
errors!(ListGoodsErrors: ANONYMOUS_LIMIT, &[
    (ErrorCode::InvalidInput, "A `state`, `limit` or `cursor` that is not one of the above; the message names it."),
], DATABASE, FORWARDED);
errors!(GetGoodsErrors: ANONYMOUS_LIMIT, BAD_GOODS_ID, &[
    (ErrorCode::GoodsNotFound, "No goods have this id."),
], DATABASE, FORWARDED);
errors!(ListOrdersErrors: TOKEN, ORDERS_LIMIT, DATABASE, FORWARDED);
errors!(GetOrderErrors: TOKEN, ORDERS_LIMIT, BAD_ORDER_ID, ORDER_NOT_FOUND, DATABASE, FORWARDED);
errors!(PayErrors: TOKEN, ORDERS_LIMIT, BAD_ORDER_ID, ORDER_NOT_FOUND, BODY_LIMIT, &[
    (ErrorCode::OrderNotPayable, "The order is cancelled, expired, or unpaid past its payment deadline."),
], DATABASE, FORWARDED);
errors!(CancelErrors: TOKEN, ORDERS_LIMIT, BAD_ORDER_ID, ORDER_NOT_FOUND, BODY_LIMIT, &[
    (ErrorCode::OrderNotCancellable, "The order is not unpaid: it is paid, cancelled or expired."),
], DATABASE, FORWARDED);
errors!(CreateSaleErrors: ADMIN, ADMIN_LIMIT, BODY_LIMIT, &[
    (
        ErrorCode::InvalidInput,
        "The body is not a `NewGoods` (unknown fields are refused), a field breaks its rule (a \
         name that is not printable text of one line, a time that is not RFC 3339 or lies outside \
         1970 to 9999, a number past its bounds, a waiting room's rate that is neither 1 to \
         1,000,000 nor `auto`), or its fields disagree (a waiting room for a sale that has \
         started): the message names the field. Decided before anything is written.",
    ),
    (ErrorCode::Unavailable, "stock-service or Redis did not answer: try again shortly."),
], FORWARDED);
errors!(AuditErrors: ADMIN, ADMIN_LIMIT, BAD_GOODS_ID, NO_SALE, &[
    (ErrorCode::Unavailable, "Redis, the broker, stock-service or order-service did not answer."),
], FORWARDED);
errors!(RepairErrors: ADMIN, ADMIN_LIMIT, BAD_GOODS_ID, NO_SALE, BODY_LIMIT, &[
    (
        ErrorCode::Busy,
        "The sale's Redis data is being rebuilt, or changed during the repair: try again.",
    ),
    (ErrorCode::Unavailable, "Redis, the broker, stock-service or order-service did not answer."),
], FORWARDED);
errors!(DevTokenErrors: ANONYMOUS_LIMIT, BODY_LIMIT, &[
    (
        ErrorCode::InvalidInput,
        "The body is not a `DevTokenRequest`: a positive `user_id`, a `role` of `user` or \
         `admin`, no other field.",
    ),
    (ErrorCode::Internal, "The token could not be signed."),
]);
errors!(ReferenceErrors: ANONYMOUS_LIMIT);
errors!(SaleStateErrors: ANONYMOUS_LIMIT, BAD_GOODS_ID, NO_SALE, &[
    (ErrorCode::Unavailable, "stock-service did not answer for a sale seckill-service did not know yet."),
], FORWARDED);
errors!(RenderErrors: ADMIN, ADMIN_LIMIT, &[
    (ErrorCode::UpstreamUnavailable, "stock-service did not answer: the pages kept are served meanwhile."),
]);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_statuses_come_from_the_codes_and_429_and_503_say_retry_after() {
        let responses = error_responses(&[BUY_CLICK, TOKEN, FORWARDED]);
        let statuses: Vec<&str> = responses.keys().map(String::as_str).collect();
        assert_eq!(statuses, ["401", "410", "414", "425", "429", "431", "500", "503", "504"]);
        let json = serde_json::to_value(&responses).unwrap();
        assert!(json["429"]["headers"]["Retry-After"].is_object());
        assert!(json["503"]["headers"]["Retry-After"].is_object());
        assert!(json["410"]["headers"].is_null());
        let examples = json["503"]["content"]["application/json"]["examples"].as_object().unwrap();
        let codes: Vec<&str> = examples.keys().map(String::as_str).collect();
        assert_eq!(codes, ["BUSY", "UNAVAILABLE", "UPSTREAM_UNAVAILABLE"]);
        assert_eq!(examples["BUSY"]["value"]["code"], "BUSY");
    }

    #[test]
    fn a_code_listed_twice_is_one_example_with_both_texts() {
        let responses =
            serde_json::to_value(error_responses(&[BUY_CLICK, &[(ErrorCode::Busy, "Also this.")]])).unwrap();
        let description = responses["503"]["description"].as_str().unwrap();
        assert_eq!(description.matches("`BUSY`").count(), 1, "{description}");
        assert!(description.contains("Also this."));
    }
}

//! The public API as an OpenAPI 3.1 document, from the request and response types the
//! services really send (`seckill_common::api`, `ErrorBody`), and the reference page that
//! shows it. Both are built once per process, at the first worker's start, and served from
//! memory with an ETag (`GET /api/openapi.json`, `GET /api/docs`).
//!
//! The gateway's handlers are generic proxies, so each operation is described here, on a
//! function that exists only for its `#[utoipa::path]`. Who may call a route comes from
//! [`crate::routes::ROUTES`], the list that also registers them: the document cannot say
//! otherwise than the router does.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use actix_web::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, ETAG, HeaderValue, X_CONTENT_TYPE_OPTIONS,
};
use actix_web::web::Bytes;
use actix_web::{HttpRequest, HttpResponse, web};
use aws_lc_rs::digest::{SHA256, digest};
use base64::Engine;
use seckill_common::ErrorCode;
use utoipa::OpenApi;
use utoipa::openapi::example::ExampleBuilder;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::Operation;
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{ContentBuilder, InfoBuilder, LicenseBuilder, Ref, RefOr, Response};

use crate::routes::{Access, ROUTES};
use crate::tagged::Tagged;

/// The name of the bearer scheme in `components.securitySchemes`.
pub const BEARER: &str = "bearer";
/// The name of the stream ticket scheme: `GET .../events` takes it instead of the bearer token.
pub const STREAM_TICKET: &str = "streamTicket";
/// The role an admin route asks of the bearer token (OpenAPI 3.1 lets a non-OAuth
/// requirement name roles).
pub const ADMIN_ROLE: &str = "admin";

const DESCRIPTION: &str = "\
A flash-sale (\"seckill\") backend. A limited stock goes on sale at a set time and far more \
buyers than units press \"buy\" in the same second: every one of them is answered in \
milliseconds, exactly the stock is sold and never a unit more, at most one unit per buyer.

The gateway is the only public entry. It checks the bearer token (an HS256 JWT: `sub` is the \
user id, `role: \"admin\"` marks an admin), applies each route's rate limit, sheds load when a \
replica has too many buy clicks in progress, and forwards each route to the service that owns \
it.

One purchase: `POST /api/seckill/{goods_id}/token` for a path token, then \
`POST /api/seckill/{goods_id}/orders` with it in `x-seckill-token` (202: queued), then poll \
`GET /api/seckill/{goods_id}/result` until `success` (with the order id) or `failed`, or, instead \
of polling, follow `GET /api/seckill/{goods_id}/events` (server-sent events, told as it happens). \
The order is at `GET /api/orders/{id}`, to pay or cancel before it expires.

Every error is an `ErrorBody`, `{\"code\": \"UPPER_SNAKE\", \"message\": \"...\"}`; each \
operation lists the codes it may answer. A 429, and a 503 `BUSY` from a replica shedding \
load, carry `Retry-After` (seconds). Any path answers 404 `NOT_FOUND` when no route has it and \
405 `METHOD_NOT_ALLOWED` (with `Allow` naming the methods it takes) for a method its route does not \
take. Every answer carries an `x-request-id`: the client's own when it sent a plain one (up to \
128 of `A-Za-z0-9._:-`), else a new one.";

#[derive(OpenApi)]
#[openapi(
    // In a buyer's order: the document keeps it.
    paths(
        operations::path_token,
        operations::buy,
        operations::poll_result,
        operations::events,
        operations::stream_ticket,
        operations::join_queue,
        operations::queue_status,
        operations::queue_challenge,
        operations::list_goods,
        operations::get_goods,
        operations::list_orders,
        operations::get_order,
        operations::pay_order,
        operations::cancel_order,
        operations::create_sale,
        operations::audit_sale,
        operations::repair_sale,
        operations::dev_token,
        operations::readiness,
        operations::health,
        operations::openapi_document,
        operations::docs_page,
        operations::sale_state,
        operations::render_storefront,
        operations::list_page,
        operations::ended_page,
        operations::sale_page,
        operations::admin_page,
        operations::asset,
    ),
    // Not reached through a path's own types: the error responses are built by hand.
    components(schemas(
        seckill_common::ErrorBody,
        // The data of the events a stream sends (its body is text, not one JSON document).
        seckill_common::push::EventKind,
        seckill_common::push::SoldOutEvent,
        seckill_common::api::SeckillResult,
        seckill_common::room::QueueStatus,
    )),
    tags(
        (name = "buying", description = "A buyer's clicks: the waiting room, the path token, the buy, the result."),
        (name = "goods", description = "The sales, for anyone."),
        (name = "orders", description = "The caller's own orders: look up, pay, cancel."),
        (name = "admin", description = "Publishing a sale, and comparing and repairing its data."),
        (name = "auth", description = "Tokens for local runs and tests."),
        (name = "probes", description = "For load balancers and orchestrators."),
        (name = "reference", description = "This document and its page."),
        (name = "storefront", description = "The pages a buyer and a shop owner open in a browser, and what they ask."),
    )
)]
struct ApiDoc;

/// The document as the gateway serves it: `dev_tokens` says whether `POST /api/auth/dev-token`
/// exists, as it does in the router.
pub fn api_document(dev_tokens: bool) -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    doc.info = InfoBuilder::new()
        .title("seckill")
        .version(env!("CARGO_PKG_VERSION"))
        .description(Some(DESCRIPTION))
        .license(Some(LicenseBuilder::new().name(env!("CARGO_PKG_LICENSE")).build()))
        .build();
    doc.components.get_or_insert_default().security_schemes.insert(
        BEARER.to_owned(),
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .bearer_format("JWT")
                .description(Some(
                    "`Authorization: Bearer <jwt>`: HS256, `exp` required, `sub` the user id (a \
                     positive integer), `role: \"admin\"` for an admin. Operations that need an \
                     admin name the role `admin`.",
                ))
                .build(),
        ),
    );
    doc.components.get_or_insert_default().security_schemes.insert(
        STREAM_TICKET.to_owned(),
        SecurityScheme::ApiKey(utoipa::openapi::security::ApiKey::Query(
            utoipa::openapi::security::ApiKeyValue::with_description(
                "ticket",
                "A one-use stream ticket from `POST /api/seckill/{goods_id}/events/ticket`, for a \
                 client that cannot send `Authorization` (a browser's EventSource). Valid for \
                 `expires_in_secs`, for its buyer and sale, once.",
            ),
        )),
    );
    for route in ROUTES {
        let Some(operation) = operation_mut(&mut doc, route.path, route.method.as_str()) else {
            continue; // an undocumented route: the tests name it
        };
        operation.security = Some(vec![match route.access() {
            Access::Probe | Access::Page | Access::Anonymous => SecurityRequirement::default(),
            Access::User => SecurityRequirement::new(BEARER, Vec::<String>::new()),
            Access::Admin => SecurityRequirement::new(BEARER, [ADMIN_ROLE]),
        }]);
        if route.opens_with_stream_ticket()
            && let Some(security) = operation.security.as_mut()
        {
            security.push(SecurityRequirement::new(STREAM_TICKET, Vec::<String>::new()));
        }
    }
    if !dev_tokens {
        for route in ROUTES.iter().filter(|route| route.dev_only()) {
            doc.paths.paths.shift_remove(route.path);
        }
    }
    doc
}

fn operation_mut<'a>(
    doc: &'a mut utoipa::openapi::OpenApi,
    path: &str,
    method: &str,
) -> Option<&'a mut Operation> {
    let item = doc.paths.paths.get_mut(path)?;
    match method {
        "GET" => item.get.as_mut(),
        "POST" => item.post.as_mut(),
        "PUT" => item.put.as_mut(),
        "DELETE" => item.delete.as_mut(),
        "PATCH" => item.patch.as_mut(),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Serving

/// The reference page: one file, no resource from anywhere else.
const PAGE: &str = include_str!("../assets/docs.html");

/// What `GET /api/openapi.json` and `GET /api/docs` answer, built once.
pub struct Published {
    document: Asset,
    page: Asset,
}

struct Asset {
    body: Tagged,
    content_type: &'static str,
    /// The page's policy: nothing but its own inline script and style, and fetches to its origin.
    policy: Option<HeaderValue>,
}

/// Clients keep a copy but ask again each time: a 304 costs no body, and a new gateway
/// version is seen at once.
const CACHE: &str = "public, no-cache";

/// The document and page for a gateway with or without dev tokens, built on the first call.
pub fn published(dev_tokens: bool) -> Arc<Published> {
    static WITH_DEV_TOKENS: OnceLock<Arc<Published>> = OnceLock::new();
    static WITHOUT: OnceLock<Arc<Published>> = OnceLock::new();
    let cell = if dev_tokens { &WITH_DEV_TOKENS } else { &WITHOUT };
    cell.get_or_init(|| Arc::new(Published::build(dev_tokens))).clone()
}

impl Published {
    fn build(dev_tokens: bool) -> Self {
        // Maps of strings and numbers: serializing cannot fail.
        let json = serde_json::to_vec(&api_document(dev_tokens)).expect("the OpenAPI document serializes");
        Self {
            document: Asset::new(Bytes::from(json), "application/json", None),
            page: Asset::new(
                Bytes::from_static(PAGE.as_bytes()),
                "text/html; charset=utf-8",
                Some(page_policy(PAGE)),
            ),
        }
    }
}

impl Asset {
    fn new(body: Bytes, content_type: &'static str, policy: Option<String>) -> Self {
        Self {
            body: Tagged::new(body),
            content_type,
            policy: policy.and_then(|p| HeaderValue::from_str(&p).ok()),
        }
    }

    fn answer(&self, req: &HttpRequest) -> HttpResponse {
        let unchanged = self.body.held_by(req);
        let mut res = if unchanged { HttpResponse::NotModified() } else { HttpResponse::Ok() };
        res.insert_header((ETAG, self.body.etag().clone())).insert_header((CACHE_CONTROL, CACHE));
        if unchanged {
            return res.finish();
        }
        res.insert_header((X_CONTENT_TYPE_OPTIONS, "nosniff"));
        if let Some(policy) = &self.policy {
            res.insert_header((CONTENT_SECURITY_POLICY, policy.clone()));
        }
        res.content_type(self.content_type).body(self.body.body().clone())
    }
}

/// The page's Content-Security-Policy: its one inline `<script>` and `<style>` allowed by their
/// hashes, fetches to its own origin only, nothing else from anywhere.
fn page_policy(html: &str) -> String {
    let hash = |tag: &str| {
        let source = inline(html, tag).unwrap_or_default();
        base64::engine::general_purpose::STANDARD.encode(digest(&SHA256, source.as_bytes()))
    };
    format!(
        "default-src 'none'; script-src 'sha256-{}'; style-src 'sha256-{}'; connect-src 'self'; \
         base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        hash("script"),
        hash("style")
    )
}

/// The text of the first `<tag>...</tag>` (written without attributes).
fn inline<'a>(html: &'a str, tag: &str) -> Option<&'a str> {
    let open = format!("<{tag}>");
    let start = html.find(&open)? + open.len();
    let end = start + html[start..].find(&format!("</{tag}>"))?;
    Some(&html[start..end])
}

/// `GET /api/openapi.json`.
pub(crate) async fn document(req: HttpRequest, published: web::Data<Published>) -> HttpResponse {
    published.document.answer(&req)
}

/// `GET /api/docs`.
pub(crate) async fn page(req: HttpRequest, published: web::Data<Published>) -> HttpResponse {
    published.page.answer(&req)
}

// ---------------------------------------------------------------------------------------------
// Error responses

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
        struct $name;

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

/// Documentation only: each function exists for its `#[utoipa::path]`, which describes one
/// public route with the types its service really sends. Summaries and descriptions are the
/// doc comments.
#[allow(dead_code)]
mod operations {
    use seckill_common::api::{
        DevTokenRequest, Goods, NewGoods, Order, OrderAccepted, SaleAudit, SaleRepair, SaleState,
        SeckillResult, TokenResponse,
    };
    use seckill_common::push::StreamTicketResponse;
    use seckill_common::room::{QueueChallenge, QueueJoin, QueueStatus};
    use seckill_common::{GoodsId, OrderId};
    use utoipa::ToSchema;

    use super::*;

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

    /// The body of `GET /readyz`.
    #[derive(ToSchema)]
    struct Readiness {
        status: ReadyStatus,
    }

    /// `ready` while any service behind the gateway has a replica that answers, `unavailable`
    /// when none does.
    #[derive(ToSchema)]
    #[schema(rename_all = "lowercase")]
    enum ReadyStatus {
        Ready,
        Unavailable,
    }

    /// The body of `GET /healthz`.
    #[derive(ToSchema)]
    struct Health {
        /// Always `ok`.
        #[schema(pattern = "^ok$")]
        status: String,
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

    /// Readiness
    ///
    /// 200 while any service behind the gateway has a replica that answers, else 503: one
    /// service down is answered route by route (503 `UPSTREAM_UNAVAILABLE`), not by taking
    /// every gateway out of the load balancer. Says nothing of the inside; the admin listener
    /// has the details. Not rate limited; one round of checks a second at most.
    #[utoipa::path(
        get,
        path = "/readyz",
        tag = "probes",
        responses(
            (status = 200, description = "Ready: `{\"status\": \"ready\"}`.", body = Readiness),
            (status = 503, description = "No service answers: `{\"status\": \"unavailable\"}`.", body = Readiness),
        )
    )]
    fn readiness() {}

    /// Liveness
    ///
    /// 200 while the process serves requests. Not rate limited.
    #[utoipa::path(
        get,
        path = "/healthz",
        tag = "probes",
        security(()),
        responses((status = 200, description = "Alive.", body = Health))
    )]
    fn health() {}

    /// This document
    ///
    /// The OpenAPI 3.1 document of the public API, built once at start. Send the `ETag` back in
    /// `If-None-Match` to get a 304 without a body while it is unchanged.
    #[utoipa::path(
        get,
        path = "/api/openapi.json",
        tag = "reference",
        responses(
            (
                status = 200,
                description = "The document.",
                content_type = "application/json",
                body = Object,
                headers(("ETag" = String, description = "Names this version of the document."))
            ),
            (status = 304, description = "Unchanged since the `If-None-Match` tag."),
            ReferenceErrors,
        )
    )]
    fn openapi_document() {}

    /// The reference page
    ///
    /// This document as a page to read: every operation with its parameters, bodies and
    /// responses. One HTML file that loads nothing from anywhere else.
    #[utoipa::path(
        get,
        path = "/api/docs",
        tag = "reference",
        responses(
            (status = 200, description = "The page.", content_type = "text/html", body = String),
            (status = 304, description = "Unchanged since the `If-None-Match` tag."),
            ReferenceErrors,
        )
    )]
    fn docs_page() {}

    /// A sale's state
    ///
    /// What a sale page asks when it opens: the sale's window, whether it was found sold out a
    /// moment ago, and the server's clock (the countdown runs on it, whatever the buyer's clock
    /// says). Answered from memory: by the gateway while it remembers the sale sold out, else
    /// by seckill-service's sale book, never a database. `Cache-Control: no-store`.
    #[utoipa::path(
        get,
        path = "/api/seckill/{goods_id}/state",
        tag = "storefront",
        params(("goods_id" = GoodsId, Path, description = "The sale.", example = 1)),
        responses(
            (status = 200, description = "The sale's state now.", body = SaleState),
            SaleStateErrors,
        )
    )]
    fn sale_state() {}

    /// Render the storefront now
    ///
    /// Renders both list pages' first pages, the page of every live and upcoming sale and of
    /// the latest ended ones (those on the first ended page) from stock-service's figures at once (and
    /// writes them under `storefront.dir` when set); otherwise each page is rendered again at
    /// most every `storefront.refresh_secs`.
    #[utoipa::path(
        post,
        path = "/api/admin/storefront/render",
        tag = "admin",
        responses(
            (status = 200, description = "How many pages were rendered.", body = RenderedPages),
            RenderErrors,
        )
    )]
    fn render_storefront() {}

    /// The body of `POST /api/admin/storefront/render`.
    #[derive(ToSchema)]
    struct RenderedPages {
        /// The two list pages and one page per sale rendered.
        pages: u64,
    }

    /// The sales on now and to come (HTML)
    ///
    /// The live and upcoming sales (live first) with their prices, their stock when the page
    /// was rendered, and their window; a page of at most 100, with a link to the next and to
    /// the ended sales. The first page is rendered at most every `storefront.refresh_secs`
    /// and served from memory, with an ETag.
    #[utoipa::path(
        get,
        path = "/",
        tag = "storefront",
        params(StorePageQuery),
        responses(
            (status = 200, description = "The page.", content_type = "text/html", body = String),
            (status = 304, description = "Unchanged since the `If-None-Match` tag."),
            (status = 404, description = "A cursor the shop never gave: a short HTML page.", content_type = "text/html", body = String),
            (status = 503, description = "stock-service did not answer and no page was kept: a short HTML page.", content_type = "text/html", body = String),
            ReferenceErrors,
        )
    )]
    fn list_page() {}

    /// A list page's query: which page.
    #[derive(utoipa::IntoParams)]
    #[into_params(parameter_in = Query)]
    #[allow(dead_code)]
    struct StorePageQuery {
        /// The page after the one whose "more" link carried it (absent: the first page). A
        /// cursor the shop never gave is a 404 page.
        #[param(max_length = 100, pattern = r"^[A-Za-z0-9_-]+$")]
        cursor: Option<String>,
    }

    /// The ended sales (HTML)
    ///
    /// The ended sales, the latest first, a page of at most 100 with a link to the next. The
    /// first page is rendered at most every `storefront.refresh_secs` and served from memory,
    /// with an ETag; a later one is rendered for its request.
    #[utoipa::path(
        get,
        path = "/ended",
        tag = "storefront",
        params(StorePageQuery),
        responses(
            (status = 200, description = "The page.", content_type = "text/html", body = String),
            (status = 304, description = "Unchanged since the `If-None-Match` tag."),
            (status = 404, description = "A cursor the shop never gave: a short HTML page.", content_type = "text/html", body = String),
            (status = 503, description = "stock-service did not answer and no page was kept: a short HTML page.", content_type = "text/html", body = String),
            ReferenceErrors,
        )
    )]
    fn ended_page() {}

    /// A sale's page (HTML)
    ///
    /// The sale with its countdown and buy button; the page's script signs in, buys, polls the
    /// result and pays. Rendered at most every `storefront.refresh_secs` and served from
    /// memory, with an ETag.
    #[utoipa::path(
        get,
        path = "/sales/{id}",
        tag = "storefront",
        params(("id" = GoodsId, Path, description = "The sale.", example = 1)),
        responses(
            (status = 200, description = "The page.", content_type = "text/html", body = String),
            (status = 304, description = "Unchanged since the `If-None-Match` tag."),
            (status = 404, description = "No sale has this id: a short HTML page.", content_type = "text/html", body = String),
            (status = 503, description = "stock-service did not answer and no page was kept: a short HTML page.", content_type = "text/html", body = String),
            ReferenceErrors,
        )
    )]
    fn sale_page() {}

    /// The admin page (HTML)
    ///
    /// Create a sale and watch its figures; its data comes from the admin routes, with an
    /// admin's token.
    #[utoipa::path(
        get,
        path = "/admin",
        tag = "storefront",
        responses(
            (status = 200, description = "The page.", content_type = "text/html", body = String),
            (status = 304, description = "Unchanged since the `If-None-Match` tag."),
        )
    )]
    fn admin_page() {}

    /// The pages' script and style
    #[utoipa::path(
        get,
        path = "/static/{file}",
        tag = "storefront",
        params(("file" = String, Path, description = "`store.js`, `store.css` or `admin.js`.", example = "store.js")),
        responses(
            (
                status = 200,
                description = "The file (`immutable`: the pages name it with its hash): a script or a style sheet.",
                content((String = "text/javascript"), (String = "text/css"))
            ),
            (status = 304, description = "Unchanged since the `If-None-Match` tag."),
            (status = 404, description = "No such file: a short HTML page.", content_type = "text/html", body = String),
        )
    )]
    fn asset() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_policy_allows_exactly_its_own_script_and_style() {
        let script = inline(PAGE, "script").expect("the page has an inline <script>");
        let style = inline(PAGE, "style").expect("the page has an inline <style>");
        assert!(script.len() > 1000 && style.len() > 100);
        let policy = page_policy(PAGE);
        let hash = |s: &str| base64::engine::general_purpose::STANDARD.encode(digest(&SHA256, s.as_bytes()));
        assert!(policy.contains(&format!("script-src 'sha256-{}'", hash(script))), "{policy}");
        assert!(policy.contains(&format!("style-src 'sha256-{}'", hash(style))), "{policy}");
        // A second script or style, or attributes on them, would not be covered by the hashes.
        assert_eq!(PAGE.matches("<script").count(), 1);
        assert_eq!(PAGE.matches("<style").count(), 1);
        assert!(!PAGE.contains(" style="), "inline style attributes are refused by the policy");
    }

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

    #[test]
    fn without_dev_tokens_the_dev_token_route_is_not_documented() {
        assert!(api_document(true).paths.paths.contains_key("/api/auth/dev-token"));
        assert!(!api_document(false).paths.paths.contains_key("/api/auth/dev-token"));
    }
}

//! The public API as an OpenAPI 3.1 document, from the request and response types the
//! services really send (`seckill_common::api`, `ErrorBody`), and the reference page that
//! shows it. Both are built once per process, at the first worker's start, and served from
//! memory with an ETag (`GET /api/openapi.json`, `GET /api/docs`).
//!
//! The gateway's handlers are generic proxies, so each operation is described here, on a
//! function that exists only for its `#[utoipa::path]`. Who may call a route comes from
//! [`crate::routes::ROUTES`], the list that also registers them: the document cannot say
//! otherwise than the router does.
//!
//! Here the document's assembly: its description, tags and security schemes, and who may call
//! each route. The operations are described in `api_operations` (the shop's JSON API) and
//! `site_operations` (the probes, this reference and the storefront), their error responses
//! in `errors`; `serving` serves the document and its page.

mod api_operations;
mod errors;
mod serving;
mod site_operations;

use utoipa::OpenApi;
use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{InfoBuilder, LicenseBuilder};

use crate::routes::{Access, ROUTES};

pub use self::serving::{Published, published};
pub(crate) use self::serving::{document, page};

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
        api_operations::path_token,
        api_operations::buy,
        api_operations::poll_result,
        api_operations::events,
        api_operations::stream_ticket,
        api_operations::join_queue,
        api_operations::queue_status,
        api_operations::queue_challenge,
        api_operations::list_goods,
        api_operations::get_goods,
        api_operations::list_orders,
        api_operations::get_order,
        api_operations::pay_order,
        api_operations::cancel_order,
        api_operations::create_sale,
        api_operations::audit_sale,
        api_operations::repair_sale,
        api_operations::dev_token,
        site_operations::readiness,
        site_operations::health,
        site_operations::openapi_document,
        site_operations::docs_page,
        site_operations::sale_state,
        site_operations::render_storefront,
        site_operations::list_page,
        site_operations::ended_page,
        site_operations::sale_page,
        site_operations::admin_page,
        site_operations::asset,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_dev_tokens_the_dev_token_route_is_not_documented() {
        assert!(api_document(true).paths.paths.contains_key("/api/auth/dev-token"));
        assert!(!api_document(false).paths.paths.contains_key("/api/auth/dev-token"));
    }
}

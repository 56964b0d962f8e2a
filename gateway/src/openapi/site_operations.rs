//! The operations around the API: the probes, this document and its page, and the storefront
//! (a sale's state for its page, the render of every page, the pages and their assets).
//!
//! Documentation only: each function exists for its `#[utoipa::path]`, which describes one
//! public route with the types its service really sends. Summaries and descriptions are the
//! doc comments.
#![allow(dead_code)]

use seckill_common::GoodsId;
use seckill_common::api::SaleState;
use utoipa::ToSchema;

use super::errors::{ReferenceErrors, RenderErrors, SaleStateErrors};

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
/// the latest ended ones (those on the first ended page) from stock-service's figures at once;
/// otherwise each page is rendered again at most every `storefront.refresh_secs`.
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

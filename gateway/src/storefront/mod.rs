//! The storefront: the pages a buyer opens in a browser. A sale's page is static, rendered
//! once per sale every `storefront.refresh_secs` and cacheable at the edge, so a spike of page
//! views never reaches stock-service or its database; what moves on it (the countdown on the
//! server's clock, sold out, the buy and its result) comes from small JSON calls its script
//! makes (`assets/store/store.js`).
//!
//! Each page is kept in memory per replica. A fresh page is served as it is; a stale one is
//! served while one request renders it again; a page not rendered yet is rendered by one
//! request while those arriving meanwhile wait and share its outcome: a stampede on a cold or
//! stale page makes one upstream call, not one per request. This is the storefront's one
//! cache: a web server or CDN in front keeps the pages by their `Cache-Control` and `ETag`,
//! as HTTP caches do (deploy's nginx does, with `proxy_cache`).
//!
//! The list is bounded however many sales the shop has run: `/` shows the live and upcoming
//! sales (live first), `/ended` the ended ones (the latest first), each a page of at most
//! `listing::DEFAULT_PAGE` sales with a link to the next (`?cursor=`, stock-service's cursor).
//! The first pages are kept like a sale's; a later page is rendered for its request (one
//! indexed read at stock-service), limited per address like a sale's page.
//!
//! Here the storefront's parts and their assembly: the templates and assets, what every page
//! shares, the answer ([`Rendered`]) and the two lists. The pages are made in `render`, kept in
//! memory in `cache`, read from stock-service in
//! `stock`, and served by the routes in `routes`.

mod cache;
mod render;
mod routes;
mod stock;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use anyhow::Context;
use chrono::{DateTime, Utc};
use dashmap::DashMap;
use minijinja::value::Serde;
use minijinja::{Environment, UndefinedBehavior};
use seckill_common::GoodsId;
use seckill_common::api::Goods;
use seckill_common::listing::StateSet;
use serde::Serialize;
use serde_json::json;

use crate::configuration::StorefrontSettings;
use crate::tagged::Tagged;

use self::cache::{PageKey, Slot};
pub use self::routes::{admin, asset, ended, list, render_now, sale};

const LAYOUT: &str = include_str!("../../assets/store/layout.html");
const LIST: &str = include_str!("../../assets/store/index.html");
const SALE: &str = include_str!("../../assets/store/sale.html");
const ADMIN: &str = include_str!("../../assets/store/admin.html");
const NOT_FOUND: &str = include_str!("../../assets/store/not_found.html");
const UNAVAILABLE: &str = include_str!("../../assets/store/unavailable.html");
pub const STORE_JS: &str = include_str!("../../assets/store/store.js");
pub const STORE_CSS: &str = include_str!("../../assets/store/store.css");
pub const ADMIN_JS: &str = include_str!("../../assets/store/admin.js");
/// The Web Worker a sale's page does a waiting room's proof of work in.
pub const WORK_JS: &str = include_str!("../../assets/store/work.js");

/// The assets' URLs carry their hash (`?v=`), so a new build's pages ask for new copies and the
/// old ones may be kept for as long as a browser likes.
const ASSET_CACHE: &str = "public, max-age=31536000, immutable";
/// Error pages are of the moment: no cache keeps them.
pub(crate) const NO_STORE: &str = "no-store";
/// Scripts and styles from the gateway alone, no inline code, no framing.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// A page or asset ready to answer with: its body, a strong ETag of the body (the same bytes
/// give the same tag on every replica) and its caching rule.
#[derive(Debug)]
pub struct Rendered {
    status: StatusCode,
    content_type: &'static str,
    cache_control: String,
    body: Tagged,
}

impl Rendered {
    fn new(status: StatusCode, content_type: &'static str, cache_control: String, body: web::Bytes) -> Self {
        Self { status, content_type, cache_control, body: Tagged::new(body) }
    }

    pub fn body(&self) -> &[u8] {
        self.body.body()
    }

    pub fn etag(&self) -> &str {
        self.body.etag().to_str().unwrap_or_default()
    }

    /// The response to `req`: 304 when it already holds this very body.
    fn respond(&self, req: &HttpRequest) -> HttpResponse {
        let ok = self.status == StatusCode::OK;
        let not_modified = ok && self.body.held_by(req);
        let mut res = HttpResponse::build(if not_modified { StatusCode::NOT_MODIFIED } else { self.status });
        res.insert_header((header::CACHE_CONTROL, self.cache_control.as_str()))
            .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"));
        if ok {
            res.insert_header((header::ETAG, self.body.etag().clone()));
        }
        if not_modified {
            return res.finish();
        }
        if self.content_type.starts_with("text/html") {
            res.insert_header((header::CONTENT_SECURITY_POLICY, CSP));
        }
        res.insert_header((header::CONTENT_TYPE, self.content_type)).body(self.body.body().clone())
    }
}

/// The two lists of sales the storefront shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum ListKind {
    /// `/`: live and upcoming.
    Current,
    /// `/ended`.
    Ended,
}

impl ListKind {
    fn states(self) -> StateSet {
        match self {
            Self::Current => StateSet::CURRENT,
            Self::Ended => StateSet::ENDED,
        }
    }

    fn path(self) -> &'static str {
        match self {
            Self::Current => "/",
            Self::Ended => "/ended",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Self::Current => "Flash sales",
            Self::Ended => "Ended sales",
        }
    }
}

/// The asset URLs the pages link to.
#[derive(Debug, Serialize)]
struct AssetUrls {
    css: String,
    js: String,
    admin_js: String,
    work_js: String,
}

impl AssetUrls {
    /// Ours, so not escaped (the escaper writes every `/` as `&#x2f;`).
    fn value(&self) -> minijinja::Value {
        let safe = |url: &str| minijinja::Value::from_safe_string(url.to_owned());
        minijinja::context! {
            css => safe(&self.css),
            js => safe(&self.js),
            admin_js => safe(&self.admin_js),
            work_js => safe(&self.work_js),
        }
    }
}

/// The templates and what every page shares.
struct Templates {
    env: Environment<'static>,
    urls: minijinja::Value,
    dev_tokens: bool,
}

impl Templates {
    /// Renders `template` with `view` and what every page shares.
    fn html(
        &self,
        status: StatusCode,
        cache_control: String,
        template: &str,
        view: impl Serialize,
    ) -> anyhow::Result<Rendered> {
        let context = minijinja::context! {
            assets => self.urls.clone(),
            dev_tokens => self.dev_tokens,
            ..Serde(view)
        };
        let html = self.env.get_template(template)?.render(context)?;
        Ok(Rendered::new(status, "text/html; charset=utf-8", cache_control, html.into()))
    }
}

/// The pages, their assets and what is known of each sale's window.
pub struct Storefront {
    templates: Templates,
    refresh: Duration,
    pages: DashMap<PageKey, Arc<Slot>>,
    /// Each sale's start and end as seen in its goods (they never change), for the state
    /// route's own answers.
    windows: DashMap<GoodsId, (DateTime<Utc>, DateTime<Utc>)>,
    store_js: Rendered,
    store_css: Rendered,
    admin_js: Rendered,
    work_js: Rendered,
    admin: Rendered,
    not_found: Arc<Rendered>,
    unavailable: Arc<Rendered>,
    /// Numbers every render in the order it starts reading stock-service.
    renders: AtomicU64,
    /// A list rendered from a read numbered below this started before the latest sale was
    /// created: it lacks that sale, so it is not kept (a render of every page, begun before the
    /// creation and ending after it, would otherwise put the list without the new sale back
    /// for a whole `refresh_secs`).
    lists_valid_from: AtomicU64,
    /// Held while a list is checked against [`Self::lists_valid_from`] and kept, so a list
    /// found current cannot land after a newer one.
    list_keeps: tokio::sync::Mutex<()>,
}

impl Storefront {
    /// Loads the templates and renders the pages that hold no data (a template that does not
    /// render stops the start, not a buyer's request).
    pub fn new(settings: &StorefrontSettings, dev_tokens: bool) -> anyhow::Result<Self> {
        let mut env = Environment::new();
        // A name the template uses and the view lacks is a mistake to hear of, not a blank.
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        // No blank line for each block tag: a smaller page.
        env.set_syntax(
            minijinja::syntax::SyntaxConfig::builder().trim_blocks(true).lstrip_blocks(true).build()?,
        );
        for (name, source) in [
            ("layout.html", LAYOUT),
            ("index.html", LIST),
            ("sale.html", SALE),
            ("admin.html", ADMIN),
            ("not_found.html", NOT_FOUND),
            ("unavailable.html", UNAVAILABLE),
        ] {
            env.add_template(name, source).with_context(|| format!("storefront template {name}"))?;
        }
        let asset = |body: &'static str, content_type| {
            Rendered::new(
                StatusCode::OK,
                content_type,
                ASSET_CACHE.into(),
                web::Bytes::from_static(body.as_bytes()),
            )
        };
        let store_js = asset(STORE_JS, "text/javascript; charset=utf-8");
        let store_css = asset(STORE_CSS, "text/css; charset=utf-8");
        let admin_js = asset(ADMIN_JS, "text/javascript; charset=utf-8");
        let work_js = asset(WORK_JS, "text/javascript; charset=utf-8");
        let version = |r: &Rendered| r.body.version().to_owned();
        let urls = AssetUrls {
            css: format!("/static/store.css?v={}", version(&store_css)),
            js: format!("/static/store.js?v={}", version(&store_js)),
            admin_js: format!("/static/admin.js?v={}", version(&admin_js)),
            work_js: format!("/static/work.js?v={}", version(&work_js)),
        };
        let templates = Templates { env, urls: urls.value(), dev_tokens };
        let refresh = settings.refresh();
        let page_cache = format!("public, max-age={}", refresh.as_secs());
        let none = json!({});
        let admin = templates.html(StatusCode::OK, page_cache, "admin.html", &none)?;
        let not_found = templates.html(StatusCode::NOT_FOUND, NO_STORE.into(), "not_found.html", &none)?;
        let unavailable =
            templates.html(StatusCode::SERVICE_UNAVAILABLE, NO_STORE.into(), "unavailable.html", &none)?;
        Ok(Self {
            templates,
            refresh,
            pages: DashMap::new(),
            windows: DashMap::new(),
            store_js,
            store_css,
            admin_js,
            work_js,
            admin,
            not_found: Arc::new(not_found),
            unavailable: Arc::new(unavailable),
            renders: AtomicU64::new(0),
            lists_valid_from: AtomicU64::new(0),
            list_keeps: tokio::sync::Mutex::new(()),
        })
    }
    fn learn(&self, goods: &Goods) {
        self.learn_window(goods.id, goods.start_at, goods.end_at);
    }

    /// Sale `g` opens at `start_at` and ends at `end_at`: what `crate::sale_state` needs to
    /// answer for a sale gone, learnt from the pages rendered and from seckill-service's answers.
    pub fn learn_window(&self, g: GoodsId, start_at: DateTime<Utc>, end_at: DateTime<Utc>) {
        self.windows.insert(g, (start_at, end_at));
    }

    pub fn window(&self, g: GoodsId) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        self.windows.get(&g).map(|w| *w)
    }
}

#[cfg(test)]
mod tests {
    use seckill_common::ErrorCode;

    use super::*;

    #[test]
    fn the_buyers_script_has_a_sentence_for_every_error_code() {
        for code in ErrorCode::ALL {
            assert!(
                STORE_JS.contains(&format!("    {}: '", code.as_str())),
                "store.js says nothing for {code}"
            );
        }
    }
}

//! The storefront: the pages a buyer opens in a browser. A sale's page is static, rendered
//! once per sale every `storefront.refresh_secs` and cacheable at the edge, so a spike of page
//! views never reaches stock-service or its database; what moves on it (the countdown on the
//! server's clock, sold out, the buy and its result) comes from small JSON calls its script
//! makes (`assets/store/store.js`).
//!
//! Each page is kept in memory per replica. A fresh page is served as it is; a stale one is
//! served while one request renders it again; a page not rendered yet is rendered by one
//! request while those arriving meanwhile wait and share its outcome: a stampede on a cold or
//! stale page makes one upstream call, not one per request. With `storefront.dir` set, the
//! pages and their assets are also written there, so any web server or CDN can serve the same
//! files.
//!
//! The list is bounded however many sales the shop has run: `/` shows the live and upcoming
//! sales (live first), `/ended` the ended ones (the latest first), each a page of at most
//! `listing::DEFAULT_PAGE` sales with a link to the next (`?cursor=`, stock-service's cursor).
//! The first pages are kept like a sale's; a later page is rendered for its request (one
//! indexed read at stock-service), limited per address like a sale's page.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use actix_web::http::StatusCode;
use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use anyhow::Context;
use chrono::{DateTime, Utc};
use dashmap::DashMap;
use minijinja::value::Serde;
use minijinja::{Environment, UndefinedBehavior};
use seckill_common::api::{Goods, SaleWindow};
use seckill_common::listing::{GoodsQuery, RawGoodsQuery, StateSet};
use seckill_common::{ErrorCode, GoodsId};
use seckill_web::ApiError;
use serde::Serialize;
use serde_json::json;

use crate::configuration::StorefrontSettings;
use crate::proxy::{Proxy, Service};
use crate::rate_limit::{Class, Who};
use crate::state::Gateway;
use crate::tagged::Tagged;

const LAYOUT: &str = include_str!("../assets/store/layout.html");
const LIST: &str = include_str!("../assets/store/index.html");
const SALE: &str = include_str!("../assets/store/sale.html");
const ADMIN: &str = include_str!("../assets/store/admin.html");
const NOT_FOUND: &str = include_str!("../assets/store/not_found.html");
const UNAVAILABLE: &str = include_str!("../assets/store/unavailable.html");
pub const STORE_JS: &str = include_str!("../assets/store/store.js");
pub const STORE_CSS: &str = include_str!("../assets/store/store.css");
pub const ADMIN_JS: &str = include_str!("../assets/store/admin.js");
/// The Web Worker a sale's page does a waiting room's proof of work in.
pub const WORK_JS: &str = include_str!("../assets/store/work.js");

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

/// A page kept in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum PageKey {
    /// The first page of a list.
    List(ListKind),
    Sale(GoodsId),
}

impl PageKey {
    /// Its file under `storefront.dir`.
    fn file(self) -> String {
        match self {
            Self::List(ListKind::Current) => "index.html".into(),
            Self::List(ListKind::Ended) => "ended.html".into(),
            Self::Sale(g) => format!("sales/{g}.html"),
        }
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

/// A page of a list as stock-service gave it, and its cursor to the next.
struct ListPage {
    goods: Vec<Goods>,
    next: Option<String>,
}

/// One page's place in memory.
#[derive(Default)]
struct Slot {
    /// The page and until when it is fresh. A std mutex: held only to clone or swap an `Arc`.
    current: Mutex<Option<(Arc<Rendered>, Instant)>>,
    /// One render at a time, holding what the last render that kept no page answered (a 404 or
    /// a 503) and when it ended, for the requests that waited for it.
    render: tokio::sync::Mutex<Option<(Instant, Arc<Rendered>)>>,
}

impl Slot {
    fn current(&self) -> Option<(Arc<Rendered>, Instant)> {
        self.current.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Keeps `page` until `fresh_until`; true when its body differs from the one it replaces.
    fn keep(&self, page: Arc<Rendered>, fresh_until: Instant) -> bool {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        let changed = current.as_ref().is_none_or(|(old, _)| old.etag() != page.etag());
        *current = Some((page, fresh_until));
        changed
    }

    /// Serves the page it holds until `fresh_until` (stock-service failed to give a new one).
    fn extend(&self, fresh_until: Instant) {
        if let Some((_, until)) = self.current.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
            *until = fresh_until;
        }
    }
}

/// What a render came to.
enum Outcome {
    Page(Arc<Rendered>),
    NotFound,
    Unavailable,
}

/// A sale as the templates show it: every value formatted here, so the templates need no
/// filters.
#[derive(Debug, Serialize)]
struct SaleView {
    id: i64,
    name: String,
    price: String,
    sale_price: String,
    /// "50% off", or empty.
    discount: String,
    stock_available: i64,
    stock_total: i64,
    start_text: String,
    end_text: String,
    start_ms: i64,
    end_ms: i64,
    /// Where the sale stood when the page was made; the script keeps it current.
    window_text: &'static str,
    /// When the sale's waiting room opens (Unix ms): its page joins the room instead of
    /// buying at once. None for a sale without a room.
    room_opens_ms: Option<i64>,
}

impl SaleView {
    fn new(goods: &Goods, now: DateTime<Utc>) -> Self {
        let discount = if goods.price_cents > 0 && goods.seckill_price_cents < goods.price_cents {
            // In i128: any i64 price an admin may set times 100 fits (in i64 it overflowed).
            let price = i128::from(goods.price_cents);
            let cut = price - i128::from(goods.seckill_price_cents);
            // Rounded to the nearest percent: 499.00 for 999.00 is "50% off".
            let off = (cut * 100 + price / 2) / price;
            if off > 0 { format!("{off}% off") } else { String::new() }
        } else {
            String::new()
        };
        Self {
            id: goods.id.get(),
            name: goods.name.clone(),
            price: money(goods.price_cents),
            sale_price: money(goods.seckill_price_cents),
            discount,
            stock_available: goods.stock_available,
            stock_total: goods.stock_total,
            start_text: when(goods.start_at),
            end_text: when(goods.end_at),
            start_ms: goods.start_at.timestamp_millis(),
            end_ms: goods.end_at.timestamp_millis(),
            room_opens_ms: goods.waiting_room.map(|r| r.opens_at(goods.start_at).timestamp_millis()),
            window_text: match goods.window_at(now) {
                SaleWindow::NotStarted => "Opens soon",
                SaleWindow::Open => "On now",
                SaleWindow::Ended => "Ended",
            },
        }
    }
}

/// Cents as a price: `49900` is `499.00`.
fn money(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    let cents = cents.unsigned_abs();
    format!("{sign}{}.{:02}", cents / 100, cents % 100)
}

fn when(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M UTC").to_string()
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
    dir: Option<PathBuf>,
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
    /// created: it lacks that sale, so it is neither kept nor written (a render of every page,
    /// begun before the creation and ending after it, would otherwise put the list without
    /// the new sale back, in memory and in its file, for a whole `refresh_secs`).
    lists_valid_from: AtomicU64,
    /// Held while a list is checked against [`Self::lists_valid_from`], kept and written, so a
    /// list found current cannot land after a newer one.
    list_writes: tokio::sync::Mutex<()>,
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
            dir: settings.dir.clone(),
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
            list_writes: tokio::sync::Mutex::new(()),
        })
    }

    fn page_cache(&self) -> String {
        format!("public, max-age={}", self.refresh.as_secs())
    }

    /// A page of `kind`'s list; `next`, the cursor to the page after it.
    fn list_page(&self, kind: ListKind, goods: &[Goods], next: Option<&str>) -> anyhow::Result<Rendered> {
        let now = Utc::now();
        let mut sales: Vec<&Goods> = goods.iter().collect();
        // Open sales first, then those to come, soonest first; ended ones last, latest first.
        sales.sort_by_key(|g| match g.window_at(now) {
            SaleWindow::Open => (0, g.end_at.timestamp_millis()),
            SaleWindow::NotStarted => (1, g.start_at.timestamp_millis()),
            SaleWindow::Ended => (2, -g.end_at.timestamp_millis()),
        });
        let sales: Vec<SaleView> = sales.into_iter().map(|g| SaleView::new(g, now)).collect();
        // A cursor is URL-safe base64: nothing to escape in the link.
        let next = next.map(|c| minijinja::Value::from_safe_string(format!("{}?cursor={c}", kind.path())));
        let view = json!({
            "title": kind.title(),
            "ended": kind == ListKind::Ended,
            "sales": sales,
        });
        let context = minijinja::context! { next => next, ..Serde(view) };
        self.templates.html(StatusCode::OK, self.page_cache(), "index.html", context)
    }

    fn sale_page(&self, goods: &Goods) -> anyhow::Result<Rendered> {
        let view = SaleView::new(goods, Utc::now());
        self.templates.html(StatusCode::OK, self.page_cache(), "sale.html", json!({ "sale": view }))
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

    fn slot(&self, key: PageKey) -> Arc<Slot> {
        if let Some(slot) = self.pages.get(&key) {
            return slot.clone();
        }
        self.pages.entry(key).or_default().clone()
    }

    /// The page for `key`: from memory while fresh; stale, while one request renders it again;
    /// not rendered yet, rendered by one request, the others waiting for its outcome.
    async fn page(&self, proxy: &Proxy, key: PageKey) -> Arc<Rendered> {
        let asked = Instant::now();
        let slot = self.slot(key);
        if let Some((page, fresh_until)) = slot.current() {
            if fresh_until > asked {
                return page;
            }
            let Ok(mut last) = slot.render.try_lock() else {
                return page;
            };
            // Another request may have rendered it between the look and the lock.
            if let Some((newer, fresh_until)) = slot.current()
                && fresh_until > Instant::now()
            {
                return newer;
            }
            return self.render_into(proxy, key, &slot, &mut last).await;
        }
        let mut last = slot.render.lock().await;
        if let Some((page, _)) = slot.current() {
            return page;
        }
        // A render ended while this request waited and kept nothing: its answer is this
        // request's too, rather than one more call per waiting request, one after another.
        if let Some((at, answer)) = last.as_ref()
            && *at >= asked
        {
            return answer.clone();
        }
        self.render_into(proxy, key, &slot, &mut last).await
    }

    /// Renders `key` with `slot`'s render lock held, and keeps what came of it.
    async fn render_into(
        &self,
        proxy: &Proxy,
        key: PageKey,
        slot: &Arc<Slot>,
        last: &mut Option<(Instant, Arc<Rendered>)>,
    ) -> Arc<Rendered> {
        let read = self.renders.fetch_add(1, Ordering::SeqCst);
        let outcome = self.render(proxy, key).await;
        let name = match key {
            PageKey::List(_) => "list",
            PageKey::Sale(_) => "sale",
        };
        let label = match &outcome {
            Outcome::Page(_) => "rendered",
            Outcome::NotFound => "not_found",
            Outcome::Unavailable => "unavailable",
        };
        metrics::counter!("gateway_storefront_renders_total", "page" => name, "outcome" => label)
            .increment(1);
        let answer = match outcome {
            Outcome::Page(page) => {
                let _writing = match key {
                    PageKey::List(_) => Some(self.list_writes.lock().await),
                    PageKey::Sale(_) => None,
                };
                // A slot dropped meanwhile (a sale was created) holds a page older than the
                // one the next request renders: it must not overwrite that one's file.
                let current =
                    self.pages.get(&key).is_some_and(|s| Arc::ptr_eq(&s, slot)) && self.is_current(key, read);
                if slot.keep(page.clone(), Instant::now() + self.refresh) && current {
                    self.write_logged(&key.file(), page.body()).await;
                }
                return page;
            }
            Outcome::Unavailable => {
                if let Some((stale, _)) = slot.current() {
                    // The page held stays (stale beats an error), asked for again in a while.
                    slot.extend(Instant::now() + self.refresh);
                    return stale;
                }
                self.unavailable.clone()
            }
            Outcome::NotFound => self.not_found.clone(),
        };
        // Nothing to keep: the slot goes, so ids that name no sale leave nothing behind (the
        // requests that waited on it hold it and read the answer).
        if slot.current().is_none() {
            self.pages.remove_if(&key, |_, s| Arc::ptr_eq(s, slot));
        }
        *last = Some((Instant::now(), answer.clone()));
        answer
    }

    async fn render(&self, proxy: &Proxy, key: PageKey) -> Outcome {
        let rendered = match key {
            PageKey::List(kind) => match list_goods(proxy, &GoodsQuery::first(kind.states())).await {
                Ok(page) => {
                    page.goods.iter().for_each(|g| self.learn(g));
                    self.list_page(kind, &page.goods, page.next.as_deref())
                }
                Err(e) => return unavailable("the sales list", &e),
            },
            PageKey::Sale(g) => match one_goods(proxy, g).await {
                Ok(Some(goods)) => {
                    self.learn(&goods);
                    self.sale_page(&goods)
                }
                Ok(None) => return Outcome::NotFound,
                Err(e) => return unavailable("a sale", &e),
            },
        };
        match rendered {
            Ok(page) => Outcome::Page(Arc::new(page)),
            Err(e) => {
                tracing::error!(error.cause_chain = %format_args!("{e:#}"), "storefront: a page did not render");
                Outcome::Unavailable
            }
        }
    }

    /// Renders now both lists' first pages and the page of every live and upcoming sale and
    /// of each sale on the first page of the ended ones (the latest: their last render shows
    /// them ended), keeps them, and writes them all (with the assets) when `storefront.dir` is
    /// set. The number of pages. A sale that ended before those is left as it was last
    /// written: thousands of past sales cost nothing here.
    pub async fn render_all(&self, proxy: &Proxy) -> Result<usize, ApiError> {
        let read = self.renders.fetch_add(1, Ordering::SeqCst);
        let unread = |e: ApiError| {
            ApiError::new(ErrorCode::UpstreamUnavailable, "the sales could not be read; no page was rendered")
                .with_cause(anyhow::anyhow!("{e}"))
        };
        let mut rendered = Vec::new();
        let mut sales = Vec::new();
        for kind in [ListKind::Current, ListKind::Ended] {
            let mut query = GoodsQuery::first(kind.states());
            loop {
                let page = list_goods(proxy, &query).await.map_err(unread)?;
                if query.after.is_none() {
                    let list = self.list_page(kind, &page.goods, page.next.as_deref());
                    rendered.push((PageKey::List(kind), list.map_err(ApiError::internal)?));
                }
                let next = page.goods.last().map(|last| query.next(last));
                sales.extend(page.goods);
                match next {
                    // Every current sale; of the ended ones, the first page.
                    Some(next) if page.next.is_some() && kind == ListKind::Current => query = next,
                    _ => break,
                }
            }
        }
        for g in &sales {
            self.learn(g);
            rendered.push((PageKey::Sale(g.id), self.sale_page(g).map_err(ApiError::internal)?));
        }
        let pages = rendered.len();
        let fresh_until = Instant::now() + self.refresh;
        for (key, page) in rendered {
            let _writing = match key {
                PageKey::List(_) => Some(self.list_writes.lock().await),
                PageKey::Sale(_) => None,
            };
            if !self.is_current(key, read) {
                continue;
            }
            let page = Arc::new(page);
            self.slot(key).keep(page.clone(), fresh_until);
            self.write(&key.file(), page.body()).await.map_err(ApiError::internal)?;
        }
        self.write_static().await.map_err(ApiError::internal)?;
        metrics::counter!("gateway_storefront_renders_total", "page" => "all", "outcome" => "rendered")
            .increment(1);
        Ok(pages)
    }

    /// A sale was just created: the list is rendered anew on its next request (and written
    /// now, for the files' readers).
    pub fn sale_created(gateway: &web::Data<Gateway>) {
        let key = PageKey::List(ListKind::Current);
        let storefront = &gateway.storefront;
        // Every render numbered so far read the sales before this one existed.
        storefront
            .lists_valid_from
            .store(storefront.renders.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
        storefront.pages.remove(&key);
        if gateway.storefront.dir.is_some() {
            let gateway = gateway.clone();
            actix_web::rt::spawn(async move {
                gateway.storefront.page(&gateway.proxy, key).await;
            });
        }
    }

    /// Whether a page rendered from the read numbered `read` may be kept and written: a list
    /// read before the latest sale was created may not.
    fn is_current(&self, key: PageKey, read: u64) -> bool {
        match key {
            PageKey::List(_) => read >= self.lists_valid_from.load(Ordering::SeqCst),
            PageKey::Sale(_) => true,
        }
    }

    /// A page of `kind`'s list past the first (`cursor` from the page before): rendered for
    /// this request, not kept (a cursor is the client's to send, so keeping each would let
    /// anyone grow memory). A cursor stock-service refuses is a 404 page.
    async fn later_page(&self, proxy: &Proxy, kind: ListKind, cursor: &str) -> Arc<Rendered> {
        let query = match GoodsQuery::parse(&RawGoodsQuery {
            state: Some(kind.states().to_string()),
            limit: None,
            cursor: Some(cursor.to_owned()),
        }) {
            Ok(query) => query,
            Err(_) => return self.not_found.clone(),
        };
        let page = match list_goods(proxy, &query).await {
            Ok(page) => page,
            Err(e) => {
                tracing::warn!(error = %e, "storefront: stock-service did not give a page of the sales list");
                return self.unavailable.clone();
            }
        };
        page.goods.iter().for_each(|g| self.learn(g));
        match self.list_page(kind, &page.goods, page.next.as_deref()) {
            Ok(rendered) => Arc::new(rendered),
            Err(e) => {
                tracing::error!(error.cause_chain = %format_args!("{e:#}"), "storefront: a page did not render");
                self.unavailable.clone()
            }
        }
    }

    /// Creates `storefront.dir` and writes what holds no data (assets, the admin page); at
    /// start, so a directory that cannot be written stops the start.
    pub async fn prepare_dir(&self) -> anyhow::Result<()> {
        if let Some(dir) = &self.dir {
            tokio::fs::create_dir_all(dir)
                .await
                .with_context(|| format!("storefront.dir {}", dir.display()))?;
            self.write_static().await?;
        }
        Ok(())
    }

    /// The files that hold no data (under `storefront.dir`, when set).
    async fn write_static(&self) -> anyhow::Result<()> {
        self.write("static/store.js", self.store_js.body()).await?;
        self.write("static/store.css", self.store_css.body()).await?;
        self.write("static/admin.js", self.admin_js.body()).await?;
        self.write("static/work.js", self.work_js.body()).await?;
        self.write("admin.html", self.admin.body()).await
    }

    /// Writes `file` under `storefront.dir` (when set) whole or not at all: a temporary file
    /// renamed over it, so a web server reading it never sees half a page.
    async fn write(&self, file: &str, body: &[u8]) -> anyhow::Result<()> {
        let Some(dir) = &self.dir else { return Ok(()) };
        let path = dir.join(file);
        let parent = path.parent().unwrap_or(dir);
        tokio::fs::create_dir_all(parent).await.with_context(|| format!("create {}", parent.display()))?;
        let temp = temp_path(&path);
        tokio::fs::write(&temp, body).await.with_context(|| format!("write {}", temp.display()))?;
        if let Err(e) = tokio::fs::rename(&temp, &path).await {
            let _ = tokio::fs::remove_file(&temp).await;
            return Err(e).with_context(|| format!("rename onto {}", path.display()));
        }
        Ok(())
    }

    /// As `write`, for a page served anyway: a failure is logged, the buyer still gets it.
    async fn write_logged(&self, file: &str, body: &[u8]) {
        if let Err(e) = self.write(file, body).await {
            tracing::warn!(error.cause_chain = %format_args!("{e:#}"), "storefront: a page was not written to storefront.dir");
        }
    }
}

/// A temporary name next to `path`, unique to this write.
fn temp_path(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.{}.tmp", uuid::Uuid::new_v4().simple()))
}

fn unavailable(what: &str, e: &ApiError) -> Outcome {
    tracing::warn!(error = %e, "storefront: stock-service did not give {what}");
    Outcome::Unavailable
}

/// A page of `GET /api/goods` at stock-service, with its cursor to the next.
async fn list_goods(proxy: &Proxy, query: &GoodsQuery) -> Result<ListPage, ApiError> {
    let (status, next, body) =
        proxy.get_page(Service::Stock, &format!("/api/goods?{}", query.to_query_string())).await?;
    if status != 200 {
        return Err(ApiError::new(
            ErrorCode::UpstreamUnavailable,
            format!("GET /api/goods answered {status}"),
        ));
    }
    let goods = serde_json::from_slice(&body).map_err(ApiError::internal)?;
    Ok(ListPage { goods, next })
}

/// `GET /api/goods/{id}` at stock-service: None when it knows no such sale.
async fn one_goods(proxy: &Proxy, g: GoodsId) -> Result<Option<Goods>, ApiError> {
    let (status, body) = proxy.get(Service::Stock, &format!("/api/goods/{g}")).await?;
    match status {
        200 => serde_json::from_slice(&body).map(Some).map_err(ApiError::internal),
        404 => Ok(None),
        _ => Err(ApiError::new(
            ErrorCode::UpstreamUnavailable,
            format!("GET /api/goods/{g} answered {status}"),
        )),
    }
}

/// `GET /`: the live and upcoming sales, a page at a time.
pub async fn list(req: HttpRequest, gateway: web::Data<Gateway>) -> HttpResponse {
    list_of(ListKind::Current, req, gateway).await
}

/// `GET /ended`: the ended sales, the latest first, a page at a time.
pub async fn ended(req: HttpRequest, gateway: web::Data<Gateway>) -> HttpResponse {
    list_of(ListKind::Ended, req, gateway).await
}

async fn list_of(kind: ListKind, req: HttpRequest, gateway: web::Data<Gateway>) -> HttpResponse {
    let storefront = &gateway.storefront;
    let cursor = web::Query::<RawGoodsQuery>::from_query(req.query_string()).ok().and_then(|q| q.0.cursor);
    let Some(cursor) = cursor else {
        return storefront.page(&gateway.proxy, PageKey::List(kind)).await.respond(&req);
    };
    // A page past the first costs a call to stock-service: limited per address.
    let who = Who::address(crate::routes::client_ip(&req, gateway.proxy_hops));
    if let Err(limited) = gateway.limits.take(Class::Anonymous, who).await {
        return actix_web::ResponseError::error_response(&limited);
    }
    storefront.later_page(&gateway.proxy, kind, &cursor).await.respond(&req)
}

/// `GET /sales/{id}`: one sale.
pub async fn sale(req: HttpRequest, gateway: web::Data<Gateway>) -> HttpResponse {
    let storefront = &gateway.storefront;
    match req.match_info().get("id").and_then(|v| v.parse::<GoodsId>().ok()) {
        Some(g) => storefront.page(&gateway.proxy, PageKey::Sale(g)).await.respond(&req),
        None => storefront.not_found.respond(&req),
    }
}

/// `GET /admin`: the admin page (its data comes from the admin API, with an admin's token).
pub async fn admin(req: HttpRequest, gateway: web::Data<Gateway>) -> HttpResponse {
    gateway.storefront.admin.respond(&req)
}

/// `GET /static/{file}`: the pages' scripts (and the proof-of-work worker's) and style.
pub async fn asset(req: HttpRequest, gateway: web::Data<Gateway>) -> HttpResponse {
    let storefront = &gateway.storefront;
    match req.match_info().get("file") {
        Some("store.js") => storefront.store_js.respond(&req),
        Some("store.css") => storefront.store_css.respond(&req),
        Some("admin.js") => storefront.admin_js.respond(&req),
        Some("work.js") => storefront.work_js.respond(&req),
        _ => storefront.not_found.respond(&req),
    }
}

/// `POST /api/admin/storefront/render`: an admin renders every page now; `{"pages": n}`.
pub async fn render_now(req: HttpRequest, gateway: web::Data<Gateway>) -> Result<HttpResponse, ApiError> {
    let caller = gateway.auth.authenticate(&req)?;
    caller.require_admin()?;
    gateway.limits.take(Class::Admin, Who::user(caller.id)).await?;
    let pages = gateway.storefront.render_all(&gateway.proxy).await?;
    tracing::info!(pages, user_id = %caller.id, "storefront rendered");
    Ok(HttpResponse::Ok().json(json!({ "pages": pages })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn goods(id: i64, name: &str) -> Goods {
        let now = Utc::now();
        Goods {
            id: GoodsId::new(id).unwrap(),
            name: name.into(),
            price_cents: 99_900,
            seckill_price_cents: 49_900,
            stock_total: 100,
            stock_available: 37,
            start_at: now - chrono::Duration::minutes(1),
            end_at: now + chrono::Duration::hours(1),
            buckets: 1,
            waiting_room: None,
        }
    }

    fn storefront(dev_tokens: bool) -> Storefront {
        Storefront::new(&StorefrontSettings::default(), dev_tokens).unwrap()
    }

    fn text(r: &Rendered) -> &str {
        std::str::from_utf8(r.body()).unwrap()
    }

    #[test]
    fn a_sale_page_escapes_what_an_admin_typed_and_carries_the_ids_the_script_needs() {
        let page = storefront(true).sale_page(&goods(7, "<script>alert(1)</script> & co")).unwrap();
        let html = text(&page);
        assert!(!html.contains("<script>alert"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt; &amp; co"), "{html}");
        assert!(html.contains("data-dev-tokens=\"true\""));
        for id in [
            "signin-user",
            "signin-button",
            "signout",
            "countdown",
            "buy",
            "status",
            "order-id",
            "pay",
            "paid",
        ] {
            assert!(html.contains(&format!("id=\"{id}\"")), "no #{id}");
        }
        assert!(html.contains("499.00") && html.contains("999.00") && html.contains("50% off"), "{html}");
        assert!(html.contains("37 of 100 left"), "{html}");
        assert!(html.contains("data-goods-id=\"7\""));
    }

    #[test]
    fn without_dev_tokens_the_page_asks_for_a_token() {
        let html = text(&storefront(false).sale_page(&goods(7, "phone")).unwrap()).to_owned();
        assert!(html.contains("id=\"signin-token\"") && !html.contains("id=\"signin-user\""), "{html}");
        assert!(html.contains("data-dev-tokens=\"false\""));
    }

    #[test]
    fn the_same_goods_render_the_same_bytes_and_tag() {
        let (a, b) = (storefront(true), storefront(true));
        let list = [goods(1, "one"), goods(2, "two")];
        let page = |s: &Storefront, list: &[Goods]| s.list_page(ListKind::Current, list, None).unwrap();
        let (x, y) = (page(&a, &list), page(&b, &list));
        assert_eq!((x.body(), x.etag()), (y.body(), y.etag()));
        let mut other = list.clone();
        other[1].stock_available -= 1;
        assert_ne!(page(&a, &other).etag(), x.etag());
    }

    #[test]
    fn a_list_page_links_to_the_next_and_to_the_other_list() {
        let store = storefront(true);
        let current =
            text(&store.list_page(ListKind::Current, &[goods(1, "one")], Some("YzE6Mzox")).unwrap())
                .to_owned();
        assert!(current.contains("<h1>Flash sales</h1>"), "{current}");
        assert!(current.contains(r#"id="next-page" href="/?cursor=YzE6Mzox""#), "{current}");
        assert!(current.contains(r#"id="ended-sales" href="/ended""#), "{current}");
        let ended = text(&store.list_page(ListKind::Ended, &[], None).unwrap()).to_owned();
        assert!(ended.contains("<h1>Ended sales</h1>") && ended.contains("No sale has ended yet"), "{ended}");
        assert!(!ended.contains("next-page") && ended.contains(r#"id="current-sales" href="/""#), "{ended}");
    }

    #[test]
    fn money_and_discounts() {
        assert_eq!(money(49_900), "499.00");
        assert_eq!(money(5), "0.05");
        assert_eq!(money(0), "0.00");
        let mut g = goods(1, "x");
        g.seckill_price_cents = g.price_cents;
        assert_eq!(SaleView::new(&g, Utc::now()).discount, "");
        g.price_cents = 0;
        g.seckill_price_cents = 0;
        assert_eq!(SaleView::new(&g, Utc::now()).discount, "");
        // Any price the API accepts renders (schemathesis found the list page panicking on
        // these: `cut * 100` overflowed i64).
        g.price_cents = i64::MAX;
        g.seckill_price_cents = 0;
        assert_eq!(SaleView::new(&g, Utc::now()).discount, "100% off");
        g.seckill_price_cents = i64::MAX / 2;
        assert_eq!(SaleView::new(&g, Utc::now()).discount, "50% off");
        assert_eq!(money(i64::MAX), "92233720368547758.07");
        assert_eq!(money(i64::MIN), "-92233720368547758.08");
    }

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

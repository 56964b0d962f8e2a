//! The pages kept in memory: one slot a page, fresh for `storefront.refresh_secs`; a stale
//! page served while one request renders it again, a missing one rendered by one request for
//! all those waiting on it; and the render of every page at once.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use seckill_common::listing::{GoodsQuery, RawGoodsQuery};
use seckill_common::{ErrorCode, GoodsId};
use seckill_web::ApiError;

use crate::proxy::Proxy;

use super::stock::{list_goods, one_goods};
use super::{ListKind, Rendered, Storefront};

/// A page kept in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum PageKey {
    /// The first page of a list.
    List(ListKind),
    Sale(GoodsId),
}

/// One page's place in memory.
#[derive(Default)]
pub(super) struct Slot {
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

    /// Keeps `page` until `fresh_until`.
    fn keep(&self, page: Arc<Rendered>, fresh_until: Instant) {
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = Some((page, fresh_until));
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

impl Storefront {
    fn slot(&self, key: PageKey) -> Arc<Slot> {
        if let Some(slot) = self.pages.get(&key) {
            return slot.clone();
        }
        self.pages.entry(key).or_default().clone()
    }

    /// The page for `key`: from memory while fresh; stale, while one request renders it again;
    /// not rendered yet, rendered by one request, the others waiting for its outcome.
    pub(super) async fn page(&self, proxy: &Proxy, key: PageKey) -> Arc<Rendered> {
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
                slot.keep(page.clone(), Instant::now() + self.refresh);
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
    /// them ended), and keeps them. The number of pages. A sale that ended before those is left
    /// as it was last rendered: thousands of past sales cost nothing here.
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
                PageKey::List(_) => Some(self.list_keeps.lock().await),
                PageKey::Sale(_) => None,
            };
            if !self.is_current(key, read) {
                continue;
            }
            self.slot(key).keep(Arc::new(page), fresh_until);
        }
        metrics::counter!("gateway_storefront_renders_total", "page" => "all", "outcome" => "rendered")
            .increment(1);
        Ok(pages)
    }

    /// A sale was just created: the list is rendered anew on its next request.
    pub fn sale_created(&self) {
        // Every render numbered so far read the sales before this one existed.
        self.lists_valid_from.store(self.renders.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
        self.pages.remove(&PageKey::List(ListKind::Current));
    }

    /// Whether a page rendered from the read numbered `read` may be kept: a list
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
    pub(super) async fn later_page(&self, proxy: &Proxy, kind: ListKind, cursor: &str) -> Arc<Rendered> {
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
}

fn unavailable(what: &str, e: &ApiError) -> Outcome {
    tracing::warn!(error = %e, "storefront: stock-service did not give {what}");
    Outcome::Unavailable
}

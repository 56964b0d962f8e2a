//! `GET /api/goods`: listing sales by where they stand, a bounded page at a time.
//!
//! A shop that has run sales for years holds thousands of ended ones and a handful of live
//! ones, so the list is asked for by state (`upcoming`, `live`, `ended`; without `state`, the
//! live and upcoming ones) and answered a page at a time: at most [`MAX_PAGE`] sales, with an
//! opaque cursor to the next page (the `x-next-cursor` header, and a `Link: <...>; rel="next"`
//! to the same page) while there may be more. Walking the cursor meets every sale of the
//! states asked exactly once: a page ends at a sale's sort key, which never changes, and the
//! next page starts strictly after it. A sale that changes state during the walk (an upcoming
//! one opening, a live one ending) is met at most once.
//!
//! The order follows what a reader wants first: the live and upcoming ones by `start_at`, then
//! id (the soonest first); the ended ones alone by `end_at`, then id, the latest first.
//!
//! Everything here is parsed once, for stock-service (which answers), the gateway's storefront
//! and seckill-service (which page through it) and the OpenAPI document: a bad `state`,
//! `limit` or cursor is `400 INVALID_INPUT` naming the parameter.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Datelike, Utc};
use serde::Deserialize;

use crate::api::{Goods, SaleWindow};

/// Sales in a page when the caller names no `limit`.
pub const DEFAULT_PAGE: u32 = 100;
/// The most sales in one page (some 40 KB of JSON).
pub const MAX_PAGE: u32 = 200;
/// The response header carrying the cursor to the next page (absent on the last page).
pub const NEXT_CURSOR: &str = "x-next-cursor";

/// Where a sale stands now, as the list names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoodsState {
    Upcoming,
    Live,
    Ended,
}

impl GoodsState {
    pub const ALL: [Self; 3] = [Self::Upcoming, Self::Live, Self::Ended];

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Upcoming => "upcoming",
            Self::Live => "live",
            Self::Ended => "ended",
        }
    }

    const fn bit(self) -> u8 {
        match self {
            Self::Upcoming => 1,
            Self::Live => 2,
            Self::Ended => 4,
        }
    }

    pub fn of(window: SaleWindow) -> Self {
        match window {
            SaleWindow::NotStarted => Self::Upcoming,
            SaleWindow::Open => Self::Live,
            SaleWindow::Ended => Self::Ended,
        }
    }
}

/// The states a listing asks for: at least one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StateSet(u8);

impl StateSet {
    /// What `GET /api/goods` lists without `state`: the sales a buyer can still buy.
    pub const CURRENT: Self = Self(1 | 2);
    pub const ENDED: Self = Self(4);
    /// Every set there is, for a table indexed by [`StateSet::index`].
    pub const COUNT: usize = 7;

    pub fn contains(self, s: GoodsState) -> bool {
        self.0 & s.bit() != 0
    }

    /// 0 to `COUNT - 1`, one per set.
    pub fn index(self) -> usize {
        usize::from(self.0) - 1
    }

    /// The ended ones alone are listed latest first; any other set, soonest first.
    pub fn order(self) -> ListOrder {
        if self == Self::ENDED { ListOrder::EndDesc } else { ListOrder::StartAsc }
    }

    /// `live,upcoming`, or any of the three names, comma-separated, each once at most.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut bits = 0;
        for name in s.split(',').map(str::trim) {
            let state = GoodsState::ALL.into_iter().find(|st| st.as_str() == name).ok_or_else(|| {
                "state must be upcoming, live or ended, or several of them separated by commas".to_owned()
            })?;
            bits |= state.bit();
        }
        Ok(Self(bits))
    }

    fn from_bits(bits: u8) -> Option<Self> {
        (1..=7).contains(&bits).then_some(Self(bits))
    }
}

impl std::fmt::Display for StateSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> =
            GoodsState::ALL.into_iter().filter(|s| self.contains(*s)).map(GoodsState::as_str).collect();
        f.write_str(&names.join(","))
    }
}

/// How a listing is sorted; a page's cursor is the last sale's key in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListOrder {
    /// By `start_at`, then id, ascending.
    StartAsc,
    /// By `end_at`, then id, descending.
    EndDesc,
}

impl ListOrder {
    /// The key `goods` sorts by in this order.
    pub fn key(self, goods: &Goods) -> (DateTime<Utc>, i64) {
        match self {
            Self::StartAsc => (goods.start_at, goods.id.get()),
            Self::EndDesc => (goods.end_at, goods.id.get()),
        }
    }
}

/// Where the previous page ended: the last sale's sort key, and the states it listed (a cursor
/// is only good for the listing that gave it). Opaque to clients: base64url of a short text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GoodsCursor {
    states: StateSet,
    at: DateTime<Utc>,
    id: i64,
}

/// The version tag a cursor starts with, so a later form can be told apart.
const CURSOR_VERSION: &str = "c1";

/// The earliest time PostgreSQL stores (4713 BC): a cursor before it could never come from a
/// row, and binding it would be a database error rather than a client's.
const EARLIEST_YEAR: i32 = -4712;

impl GoodsCursor {
    /// The cursor after `last`, the last sale of a page listing `states`.
    pub fn after(states: StateSet, last: &Goods) -> Self {
        let (at, id) = states.order().key(last);
        Self { states, at, id }
    }

    /// The sort key the next page starts strictly after.
    pub fn key(&self) -> (DateTime<Utc>, i64) {
        (self.at, self.id)
    }

    pub fn encode(&self) -> String {
        let text = format!("{CURSOR_VERSION}:{}:{}:{}", self.states.0, self.at.timestamp_micros(), self.id);
        URL_SAFE_NO_PAD.encode(text)
    }

    /// A cursor this API gave, for a listing of `states`.
    pub fn decode(s: &str, states: StateSet) -> Result<Self, String> {
        let bad = || "cursor is not one this API gave (take it from x-next-cursor)".to_owned();
        if s.len() > 100 {
            return Err(bad());
        }
        let bytes = URL_SAFE_NO_PAD.decode(s).map_err(|_| bad())?;
        let text = std::str::from_utf8(&bytes).map_err(|_| bad())?;
        let mut parts = text.split(':');
        let (Some(CURSOR_VERSION), Some(bits), Some(micros), Some(id), None) =
            (parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        let bits: u8 = bits.parse().map_err(|_| bad())?;
        let cursor_states = StateSet::from_bits(bits).ok_or_else(bad)?;
        let at = micros
            .parse::<i64>()
            .ok()
            .and_then(DateTime::from_timestamp_micros)
            .filter(|at| at.year() >= EARLIEST_YEAR)
            .ok_or_else(bad)?;
        let id = id.parse::<i64>().ok().filter(|id| *id > 0).ok_or_else(bad)?;
        if cursor_states != states {
            return Err(format!("cursor belongs to a listing of state={cursor_states}, not state={states}"));
        }
        Ok(Self { states, at, id })
    }
}

/// `GET /api/goods`'s query as sent: each parameter checked by [`GoodsQuery::parse`], so its
/// error names it. Other parameters are ignored (a cache-busting `_=` breaks nothing).
#[derive(Debug, Default, Deserialize)]
pub struct RawGoodsQuery {
    pub state: Option<String>,
    pub limit: Option<String>,
    pub cursor: Option<String>,
}

/// A checked `GET /api/goods` query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GoodsQuery {
    pub states: StateSet,
    pub limit: u32,
    pub after: Option<GoodsCursor>,
}

impl GoodsQuery {
    /// The first page of `states`, at the default size.
    pub fn first(states: StateSet) -> Self {
        Self { states, limit: DEFAULT_PAGE, after: None }
    }

    pub fn parse(raw: &RawGoodsQuery) -> Result<Self, String> {
        let states = match raw.state.as_deref() {
            None => StateSet::CURRENT,
            Some(s) => StateSet::parse(s)?,
        };
        let limit = match raw.limit.as_deref() {
            None => DEFAULT_PAGE,
            Some(l) => l
                .trim()
                .parse::<u32>()
                .ok()
                .filter(|l| (1..=MAX_PAGE).contains(l))
                .ok_or_else(|| format!("limit must be a whole number from 1 to {MAX_PAGE}"))?,
        };
        let after = raw.cursor.as_deref().map(|c| GoodsCursor::decode(c, states)).transpose()?;
        Ok(Self { states, limit, after })
    }

    /// The query string that asks for this page (`state=...&limit=...[&cursor=...]`); every
    /// value is URL-safe as it is.
    pub fn to_query_string(&self) -> String {
        let mut q = format!("state={}&limit={}", self.states, self.limit);
        if let Some(after) = &self.after {
            q.push_str("&cursor=");
            q.push_str(&after.encode());
        }
        q
    }

    /// The query of the page after one that ended with `last`.
    pub fn next(&self, last: &Goods) -> Self {
        Self { after: Some(GoodsCursor::after(self.states, last)), ..*self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GoodsId;

    fn raw(state: Option<&str>, limit: Option<&str>, cursor: Option<&str>) -> RawGoodsQuery {
        RawGoodsQuery {
            state: state.map(Into::into),
            limit: limit.map(Into::into),
            cursor: cursor.map(Into::into),
        }
    }

    fn goods(id: i64, start_micros: i64) -> Goods {
        let start_at = DateTime::from_timestamp_micros(start_micros).unwrap();
        Goods {
            id: GoodsId::new(id).unwrap(),
            name: "x".into(),
            price_cents: 1,
            seckill_price_cents: 1,
            stock_total: 1,
            stock_available: 1,
            start_at,
            end_at: start_at + chrono::Duration::hours(1),
            buckets: 1,
            waiting_room: None,
        }
    }

    #[test]
    fn without_parameters_the_first_page_of_the_current_sales() {
        let q = GoodsQuery::parse(&RawGoodsQuery::default()).unwrap();
        assert_eq!(q, GoodsQuery::first(StateSet::CURRENT));
        assert_eq!(q.to_query_string(), "state=upcoming,live&limit=100");
        assert_eq!(q.states.order(), ListOrder::StartAsc);
        assert_eq!(StateSet::parse("ended").unwrap().order(), ListOrder::EndDesc);
        assert_eq!(StateSet::parse("live, ended,live").unwrap().to_string(), "live,ended");
    }

    #[test]
    fn bad_parameters_name_themselves() {
        for (r, names) in [
            (raw(Some(""), None, None), "state"),
            (raw(Some("open"), None, None), "state"),
            (raw(Some("live,"), None, None), "state"),
            (raw(None, Some("0"), None), "limit"),
            (raw(None, Some("201"), None), "limit"),
            (raw(None, Some("-1"), None), "limit"),
            (raw(None, Some("ten"), None), "limit"),
            (raw(None, Some("99999999999999999999"), None), "limit"),
            (raw(None, None, Some("")), "cursor"),
            (raw(None, None, Some("!!!")), "cursor"),
            (raw(None, None, Some(&URL_SAFE_NO_PAD.encode("c1:3:0"))), "cursor"),
            (raw(None, None, Some(&URL_SAFE_NO_PAD.encode("c1:0:0:1"))), "cursor"),
            (raw(None, None, Some(&URL_SAFE_NO_PAD.encode("c1:3:0:0"))), "cursor"),
            (raw(None, None, Some(&URL_SAFE_NO_PAD.encode("c1:3:0:1:2"))), "cursor"),
            (raw(None, None, Some(&URL_SAFE_NO_PAD.encode("c2:3:0:1"))), "cursor"),
            (raw(None, None, Some(&URL_SAFE_NO_PAD.encode(format!("c1:3:{}:1", i64::MIN)))), "cursor"),
            (raw(None, None, Some(&URL_SAFE_NO_PAD.encode(format!("c1:3:{}:1", i64::MAX)))), "cursor"),
            (raw(None, None, Some(&"A".repeat(10_000))), "cursor"),
        ] {
            let e = GoodsQuery::parse(&r).unwrap_err();
            assert!(e.starts_with(names), "{r:?}: {e}");
        }
    }

    #[test]
    fn a_cursor_round_trips_and_is_good_only_for_its_listing() {
        let last = goods(1_001, 1_700_000_000_123_456);
        let q = GoodsQuery::first(StateSet::CURRENT).next(&last);
        let text = q.after.unwrap().encode();
        assert!(text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'), "{text}");
        let back = GoodsQuery::parse(&raw(None, None, Some(&text))).unwrap();
        assert_eq!(back, q);
        assert_eq!(back.after.unwrap().key(), (last.start_at, 1_001));
        let e = GoodsQuery::parse(&raw(Some("ended"), None, Some(&text))).unwrap_err();
        assert!(e.contains("state=upcoming,live"), "{e}");
        // The ended ones page by their end.
        let ended = GoodsCursor::after(StateSet::ENDED, &last);
        assert_eq!(ended.key(), (last.end_at, 1_001));
    }
}

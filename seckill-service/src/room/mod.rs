//! The waiting rooms of the sales that have one, as this replica runs them.
//!
//! A buyer joins once (`store::RoomStore::join`: a join code from Redis, under caps leased from
//! stock-service) and keeps a signed [`PlaceTicket`] of it. Where they stand is answered from
//! this replica's memory alone ([`RoomView`]): the ticket says the code, the draw (from the
//! key and the sale) says the place, and the room's state, read from Redis every
//! [`ticker::TICK`] by every replica, says how far the admissions have come. One replica at a
//! time (a lease in Redis) moves the admissions on at the room's rate, so two replicas admit no
//! faster than one. A place that comes up gets an [`Admission`] ending the admission's life
//! after the instant the place came up (the same on every replica, from the room's marks): the
//! buy routes of the sale ask for it.

pub mod store;
pub mod ticker;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use dashmap::DashMap;
use seckill_common::api::Goods;
use seckill_common::room::scripts::AFTER_BASE;
use seckill_common::room::{Admission, Draw, QueueDraw, RoomKey, RoomRate, WaitingRoom};
use seckill_common::{GoodsId, UserId};

pub use store::RoomStore;

/// The bounds of the next poll a status answer asks for ([`RoomView::poll_after_ms`]).
pub const POLL_MIN_MS: u64 = 500;
pub const POLL_MAX_MS: u64 = 30_000;
pub const POLL_SPREAD_MS: u64 = 4_096;

/// The rooms this replica knows, by sale.
pub struct Rooms {
    pub key: RoomKey,
    pub store: RoomStore,
    views: DashMap<GoodsId, Arc<RoomView>>,
    /// Names this replica in the leader's lease.
    pub replica: String,
}

impl Rooms {
    pub fn new(key: RoomKey, store: RoomStore) -> Self {
        Self { key, store, views: DashMap::new(), replica: uuid::Uuid::new_v4().simple().to_string() }
    }

    /// The room of a sale that has one.
    pub fn view(&self, goods: &Goods) -> Option<Arc<RoomView>> {
        let room = goods.waiting_room?;
        if let Some(view) = self.views.get(&goods.id) {
            return Some(view.clone());
        }
        let seed = self.key.seed_of(goods.id);
        let view = Arc::new(RoomView::new(goods, room, seed));
        Some(self.views.entry(goods.id).or_insert(view).clone())
    }

    /// The rooms known, for the upkeep.
    pub fn all(&self) -> Vec<Arc<RoomView>> {
        self.views.iter().map(|v| v.value().clone()).collect()
    }

    /// A room whose sale left the book is forgotten.
    pub fn forget(&self, g: GoodsId) {
        self.views.remove(&g);
    }
}

/// One room as this replica last saw it.
pub struct RoomView {
    pub goods: GoodsId,
    pub room: WaitingRoom,
    pub start_ms: i64,
    pub end_ms: i64,
    pub opens_ms: i64,
    seed: [u8; 32],
    commitment: String,
    seen: RwLock<Seen>,
    /// Buys of the sale this replica refused `BUSY` since the last tick.
    busy: AtomicU64,
}

/// What the last reads of Redis said.
#[derive(Debug, Default)]
struct Seen {
    /// Read from Redis at least once.
    known: bool,
    drawn: Option<u64>,
    after: u64,
    admitted: u64,
    rate: f64,
    /// `(instant ms, places admitted)` each time a place came up, oldest first, for the last
    /// admission's life.
    marks: VecDeque<(i64, u64)>,
    /// Places below this came up before the oldest mark kept: their admission has ended.
    forgotten_below: u64,
    sold_out: bool,
}

/// Where one buyer stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Waiting; the place (from 0) and those ahead are unknown until the draw.
    Waiting {
        place: Option<u64>,
        ahead: Option<u64>,
        wait_secs: Option<u64>,
    },
    Admitted {
        place: u64,
        admission: Admission,
    },
    SoldOut {
        place: Option<u64>,
    },
    /// The sale ended, or the admission's life did.
    Closed {
        place: Option<u64>,
    },
}

impl RoomView {
    fn new(goods: &Goods, room: WaitingRoom, seed: [u8; 32]) -> Self {
        let start_ms = goods.start_at.timestamp_millis();
        Self {
            goods: goods.id,
            room,
            start_ms,
            end_ms: goods.end_at.timestamp_millis(),
            opens_ms: room.opens_at(goods.start_at).timestamp_millis(),
            seed,
            commitment: Draw::commitment(&seed),
            seen: RwLock::new(Seen::default()),
            busy: AtomicU64::new(0),
        }
    }

    fn seen(&self) -> std::sync::RwLockReadGuard<'_, Seen> {
        self.seen.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn seen_mut(&self) -> std::sync::RwLockWriteGuard<'_, Seen> {
        self.seen.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The draw as anyone may check it: the seed only once the sale has opened and drawn.
    pub fn draw(&self) -> QueueDraw {
        let drawn = self.seen().drawn;
        QueueDraw {
            commitment: self.commitment.clone(),
            seed: drawn.map(|_| self.seed.iter().map(|b| format!("{b:02x}")).collect()),
            joined_before: drawn,
        }
    }

    /// The place (from 0) of join `code`, once the draw is known.
    fn place(&self, code: u64, drawn: Option<u64>) -> Option<u64> {
        let n = drawn?;
        Some(if code >= AFTER_BASE {
            n + (code - AFTER_BASE)
        } else {
            Draw::new(self.seed, n).place_of(code)
        })
    }

    /// Where the holder of join `code` stands at `now_ms`: memory only.
    pub fn standing(&self, code: u64, user: UserId, now_ms: i64) -> Standing {
        let seen = self.seen();
        let place = self.place(code, seen.drawn);
        if now_ms >= self.end_ms {
            return Standing::Closed { place };
        }
        if seen.sold_out {
            return Standing::SoldOut { place };
        }
        let Some(p) = place else {
            return Standing::Waiting { place: None, ahead: None, wait_secs: None };
        };
        if p < seen.admitted {
            let Some(began) = seen.came_up(p) else {
                return Standing::Closed { place };
            };
            let expires_ms = began + i64::from(self.room.admission_secs) * 1000;
            if expires_ms < now_ms {
                return Standing::Closed { place };
            }
            let admission = Admission { sale: self.goods, user, place: p, expires_ms };
            return Standing::Admitted { place: p, admission };
        }
        let ahead = p - seen.admitted;
        let rate = match self.room.rate {
            RoomRate::PerSec(n) => f64::from(n),
            RoomRate::Auto(_) => seen.rate,
        };
        // The places ahead and the buyer's own come up before the admission.
        let wait_secs = (rate > 0.0).then(|| ((ahead + 1) as f64 / rate).ceil() as u64);
        Standing::Waiting { place: Some(p), ahead: Some(ahead), wait_secs }
    }

    /// When the holder of join `code` should ask again: a quarter of the estimated wait,
    /// between [`POLL_MIN_MS`] and [`POLL_MAX_MS`], so the polls of a whole queue grow with the
    /// log of its length, not with it. Before the draw, just after the opening, spread by the
    /// join code over [`POLL_SPREAD_MS`] so a crowd that joined early does not ask at once.
    pub fn poll_after_ms(&self, standing: &Standing, code: u64, now_ms: i64) -> Option<u64> {
        let Standing::Waiting { place, wait_secs, .. } = *standing else { return None };
        let ms = match (place, wait_secs) {
            (None, _) => {
                let to_opening = u64::try_from(self.start_ms - now_ms).unwrap_or(0);
                to_opening.min(POLL_MAX_MS) + POLL_MIN_MS + code % POLL_SPREAD_MS
            }
            (Some(_), Some(secs)) => (secs * 1000 / 4).clamp(POLL_MIN_MS, POLL_MAX_MS),
            // An `auto` room before its first rate: soon.
            (Some(_), None) => POLL_MIN_MS * 2,
        };
        Some(ms)
    }

    pub fn refused_busy(&self) {
        self.busy.fetch_add(1, Ordering::Relaxed);
    }

    /// The refusals counted since the last call.
    pub fn take_busy(&self) -> u64 {
        self.busy.swap(0, Ordering::Relaxed)
    }

    /// Places waiting (joined, not admitted), for the metrics.
    pub fn waiting(&self) -> u64 {
        let seen = self.seen();
        seen.drawn.map_or(0, |n| (n + seen.after).saturating_sub(seen.admitted))
    }

    pub fn admitted(&self) -> u64 {
        self.seen().admitted
    }

    /// The rate the room runs at, as Redis last said (0 before the first advance): an `auto`
    /// room's new leader goes on from it.
    pub fn rate(&self) -> f64 {
        self.seen().rate
    }

    pub fn sold_out(&self) -> bool {
        self.seen().sold_out
    }

    pub fn known(&self) -> bool {
        self.seen().known
    }

    /// A read of Redis: the state, and the leader's marks of the places that came up since the
    /// last read (the leader's instants, so every replica ends an admission at the same one).
    pub fn observed(&self, o: &store::Observed, sold_out: bool, now_ms: i64) {
        let mut seen = self.seen_mut();
        seen.known = true;
        seen.drawn = o.drawn;
        seen.after = o.after;
        if let Some(rate) = o.rate {
            seen.rate = rate;
        }
        seen.sold_out = sold_out;
        let last = seen.marks.back().map_or(0, |m| m.1);
        seen.marks.extend(o.marks.iter().filter(|m| m.1 > last));
        // Admitted past every mark read (none was kept: the leader's list is new): from now.
        let marked = seen.marks.back().map_or(0, |m| m.1);
        if o.admitted > marked {
            seen.marks.push_back((now_ms, o.admitted));
        }
        seen.admitted = seen.admitted.max(o.admitted).max(marked);
        let life_ms = i64::from(self.room.admission_secs) * 1000;
        seen.forget_before(now_ms - life_ms - 1000);
    }

    /// The marks Redis kept, read once as this replica meets the room: admissions that began
    /// before it started end when they would have.
    pub fn remember(&self, marks: Vec<(i64, u64)>) {
        let mut seen = self.seen_mut();
        if seen.marks.is_empty() {
            seen.marks = marks.into();
            seen.admitted = seen.admitted.max(seen.marks.back().map_or(0, |m| m.1));
        }
    }
}

impl Seen {
    /// When place `p` (admitted) came up: the first mark past it. `None` when that was before
    /// the marks kept (its admission has ended).
    fn came_up(&self, p: u64) -> Option<i64> {
        if p < self.forgotten_below {
            return None;
        }
        let i = self.marks.partition_point(|&(_, admitted)| admitted <= p);
        // Past every mark: admitted as this replica met the room, so from its first read.
        self.marks.get(i).or(self.marks.back()).map(|m| m.0)
    }

    fn forget_before(&mut self, t_ms: i64) {
        while self.marks.len() > 1 && self.marks.front().is_some_and(|m| m.0 < t_ms) {
            if let Some((_, admitted)) = self.marks.pop_front() {
                self.forgotten_below = admitted;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    fn view(admission_secs: u32) -> RoomView {
        let goods = Goods {
            id: GoodsId::new(7).unwrap(),
            name: "x".into(),
            price_cents: 1,
            seckill_price_cents: 1,
            stock_total: 10,
            stock_available: 10,
            start_at: Utc.timestamp_millis_opt(10_000).unwrap(),
            end_at: Utc.timestamp_millis_opt(1_000_000).unwrap(),
            buckets: 1,
            waiting_room: None,
        };
        let room = WaitingRoom {
            rate: RoomRate::PerSec(10),
            opens_before_secs: 5,
            admission_secs,
            pow_difficulty: 0,
        };
        RoomView::new(&goods, room, [3; 32])
    }

    /// A read with no marks of the leader's (a replica falls back on its own clock).
    fn observed(drawn: u64, after: u64, admitted: u64) -> store::Observed {
        with_marks(drawn, after, admitted, &[])
    }

    fn with_marks(drawn: u64, after: u64, admitted: u64, marks: &[(i64, u64)]) -> store::Observed {
        store::Observed { drawn: Some(drawn), after, admitted, rate: Some(10.0), marks: marks.to_vec() }
    }

    fn user() -> UserId {
        UserId::new(1).unwrap()
    }

    #[test]
    fn a_place_is_unknown_until_the_draw_then_moves_with_the_admissions() {
        let v = view(60);
        assert_eq!(
            v.standing(0, user(), 11_000),
            Standing::Waiting { place: None, ahead: None, wait_secs: None }
        );
        v.observed(&observed(100, 0, 0), false, 11_000);
        let Standing::Waiting { place: Some(p), ahead: Some(ahead), wait_secs: Some(wait) } =
            v.standing(0, user(), 11_000)
        else {
            panic!("waiting with a place");
        };
        assert_eq!((ahead, wait), (p, (p + 1).div_ceil(10)));
        // Joined after the opening: behind all 100 drawn, in arrival order.
        assert!(matches!(
            v.standing(AFTER_BASE + 4, user(), 11_000),
            Standing::Waiting { place: Some(104), .. }
        ));
        v.observed(&observed(100, 5, p + 1), false, 12_000);
        let Standing::Admitted { admission, .. } = v.standing(0, user(), 12_500) else { panic!("admitted") };
        assert_eq!(admission.expires_ms, 12_000 + 60_000, "from the instant the place came up");
        assert_eq!(v.standing(0, user(), 72_001), Standing::Closed { place: Some(p) }, "its life is over");
    }

    #[test]
    fn every_replica_ends_an_admission_at_the_same_instant_from_the_marks() {
        let (a, b, c) = (view(60), view(60), view(60));
        let marks = [(11_100, 3), (11_200, 6)];
        // a reads every tick, just after the leader; b misses a tick; c starts later and
        // reads the marks Redis kept first.
        a.observed(&with_marks(10, 0, 3, &marks[..1]), false, 11_150);
        a.observed(&with_marks(10, 0, 6, &marks), false, 11_260);
        b.observed(&with_marks(10, 0, 6, &marks), false, 11_290);
        c.remember(marks.to_vec());
        c.observed(&with_marks(10, 0, 6, &marks), false, 15_000);
        for code in 0..10 {
            let standing = a.standing(code, user(), 15_000);
            assert_eq!(standing, b.standing(code, user(), 15_000), "join {code}");
            assert_eq!(standing, c.standing(code, user(), 15_000), "join {code}");
        }
    }

    #[test]
    fn the_next_poll_nears_with_the_place_and_the_early_crowd_is_spread_after_the_opening() {
        let v = view(60);
        let before = v.standing(5, user(), 1_000);
        // Nine seconds to the opening: then 0.5 s and a spread by join code.
        assert_eq!(v.poll_after_ms(&before, 5, 1_000), Some(9_000 + POLL_MIN_MS + 5));
        assert_eq!(v.poll_after_ms(&before, 5 + POLL_SPREAD_MS, 1_000), Some(9_000 + POLL_MIN_MS + 5));
        let far = v.poll_after_ms(&before, 0, -1_000_000).unwrap();
        assert_eq!(far, POLL_MAX_MS + POLL_MIN_MS, "never more than the cap before the opening either");
        v.observed(&observed(100_000, 0, 0), false, 11_000);
        let after = |code| {
            let standing = v.standing(code, user(), 11_000);
            let Standing::Waiting { wait_secs: Some(secs), .. } = standing else { panic!("waiting") };
            (secs, v.poll_after_ms(&standing, code, 11_000).unwrap())
        };
        // Rate 10 a second: a quarter of the wait, bounded both ways.
        let samples: Vec<_> = (0..100_000).step_by(997).map(after).collect();
        for (secs, poll) in samples {
            assert_eq!(poll, (secs * 250).clamp(POLL_MIN_MS, POLL_MAX_MS), "{secs} s to wait");
        }
        v.observed(&observed(100_000, 0, 100_000), false, 12_000);
        let admitted = v.standing(0, user(), 12_000);
        assert_eq!(v.poll_after_ms(&admitted, 0, 12_000), None, "nothing left to wait for");
    }

    #[test]
    fn sold_out_and_the_end_are_told_to_everyone_waiting() {
        let v = view(60);
        v.observed(&observed(10, 0, 0), true, 11_000);
        assert!(matches!(v.standing(3, user(), 11_000), Standing::SoldOut { place: Some(_) }));
        assert!(matches!(v.standing(3, user(), 1_000_000), Standing::Closed { .. }));
    }

    #[test]
    fn marks_older_than_an_admissions_life_are_dropped_and_their_places_closed() {
        let v = view(10);
        v.observed(&observed(1_000, 0, 0), false, 11_000);
        for i in 1..=100 {
            v.observed(&observed(1_000, 0, i * 10), false, 11_000 + i64::try_from(i).unwrap() * 1_000);
        }
        assert!(v.seen().marks.len() <= 13, "{} marks kept", v.seen().marks.len());
        let p = |code| v.place(code, Some(1_000)).unwrap();
        let early = (0..1_000).find(|&c| p(c) < 50).unwrap();
        assert_eq!(v.standing(early, user(), 111_000), Standing::Closed { place: Some(p(early)) });
        let late = (0..1_000).find(|&c| (995..1_000).contains(&p(c))).unwrap();
        assert!(matches!(v.standing(late, user(), 111_000), Standing::Admitted { .. }));
    }
}

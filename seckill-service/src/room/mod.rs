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

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use dashmap::DashMap;
use seckill_common::api::Goods;
use seckill_common::room::{
    CameUpMarks, Draw, QueueDraw, RoomKey, RoomRate, RoomSnapshot, RoomState, Standing, WaitingRoom,
};
use seckill_common::{GoodsId, UserId};

pub use store::RoomStore;

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
    state: RoomState,
    /// When places came up, for the last admission's life.
    came_up: CameUpMarks,
}

impl RoomView {
    fn new(goods: &Goods, room: WaitingRoom, seed: [u8; 32]) -> Self {
        let state = RoomState {
            start_ms: goods.start_at.timestamp_millis(),
            end_ms: goods.end_at.timestamp_millis(),
            rate: match room.rate {
                RoomRate::PerSec(n) => f64::from(n),
                RoomRate::Auto(_) => 0.0,
            },
            ..RoomState::default()
        };
        Self {
            goods: goods.id,
            room,
            opens_ms: room.opens_at(goods.start_at).timestamp_millis(),
            seed,
            commitment: Draw::commitment(&seed),
            seen: RwLock::new(Seen { state, ..Seen::default() }),
            busy: AtomicU64::new(0),
        }
    }

    fn seen(&self) -> std::sync::RwLockReadGuard<'_, Seen> {
        self.seen.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn seen_mut(&self) -> std::sync::RwLockWriteGuard<'_, Seen> {
        self.seen.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The room as this replica last read it, with the marks past `since`: what the gateway
    /// mirrors.
    pub fn snapshot(&self, since: u64) -> RoomSnapshot {
        let seen = self.seen();
        RoomSnapshot {
            state: seen.state.clone(),
            admission_secs: self.room.admission_secs,
            came_up: seen.came_up.since(since),
        }
    }

    /// The draw as anyone may check it: the seed only once the sale has opened and drawn.
    pub fn draw(&self) -> QueueDraw {
        self.seen().state.draw(&self.seed, &self.commitment)
    }

    /// Where the holder of join `code` stands at `now_ms`: memory only.
    pub fn standing(&self, code: u64, user: UserId, now_ms: i64) -> Standing {
        let seen = self.seen();
        let standing = seen.state.standing(&self.seed, code, now_ms);
        seen.came_up.resolve(standing, self.goods, user, self.life_ms(), now_ms)
    }

    /// How long an admission lives.
    fn life_ms(&self) -> i64 {
        i64::from(self.room.admission_secs) * 1000
    }

    /// When the holder of join `code` should ask again ([`RoomState::poll_after_ms`]).
    pub fn poll_after_ms(&self, standing: &Standing, code: u64, now_ms: i64) -> Option<u64> {
        self.seen().state.poll_after_ms(standing, code, now_ms)
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
        self.seen().state.waiting()
    }

    pub fn admitted(&self) -> u64 {
        self.seen().state.admitted
    }

    /// The rate the room runs at: the configured one, or what Redis last said of an `auto`
    /// room's (0 before its first advance), which a new leader goes on from.
    pub fn rate(&self) -> f64 {
        self.seen().state.rate
    }

    pub fn sold_out(&self) -> bool {
        self.seen().state.sold_out
    }

    pub fn known(&self) -> bool {
        self.seen().known
    }

    /// A read of Redis: the state, and the leader's marks of the places that came up since the
    /// last read (the leader's instants, so every replica ends an admission at the same one).
    pub fn observed(&self, o: &store::Observed, sold_out: bool, now_ms: i64) {
        let mut seen = self.seen_mut();
        seen.known = true;
        seen.state.drawn = o.drawn;
        seen.state.after = o.after;
        if let (RoomRate::Auto(_), Some(rate)) = (self.room.rate, o.rate) {
            seen.state.rate = rate;
        }
        seen.state.sold_out = sold_out;
        seen.came_up.extend(o.marks.iter().copied());
        // Admitted past every mark read (none was kept: the leader's list is new): from now.
        let marked = seen.came_up.last();
        if o.admitted > marked {
            seen.came_up.extend([(now_ms, o.admitted)]);
        }
        seen.state.admitted = seen.state.admitted.max(o.admitted).max(marked);
        seen.came_up.forget_ended(self.life_ms(), now_ms);
    }

    /// The marks Redis kept, read once as this replica meets the room: admissions that began
    /// before it started end when they would have.
    pub fn remember(&self, marks: Vec<(i64, u64)>) {
        let mut seen = self.seen_mut();
        if seen.came_up.is_empty() {
            seen.came_up = CameUpMarks::new(marks);
            seen.state.admitted = seen.state.admitted.max(seen.came_up.last());
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
    fn an_admission_ends_its_life_after_the_instant_its_place_came_up() {
        let v = view(60);
        v.observed(&observed(100, 0, 0), false, 11_000);
        let Standing::Waiting { place: Some(p), .. } = v.standing(0, user(), 11_000) else {
            panic!("waiting")
        };
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
    fn marks_older_than_an_admissions_life_are_dropped_and_their_places_closed() {
        let v = view(10);
        v.observed(&observed(1_000, 0, 0), false, 11_000);
        for i in 1..=100 {
            v.observed(&observed(1_000, 0, i * 10), false, 11_000 + i64::try_from(i).unwrap() * 1_000);
        }
        assert!(v.seen().came_up.len() <= 13, "{} marks kept", v.seen().came_up.len());
        let p = |code| v.seen().state.place(&v.seed, code).unwrap();
        let early = (0..1_000).find(|&c| p(c) < 50).unwrap();
        assert_eq!(v.standing(early, user(), 111_000), Standing::Closed { place: Some(p(early)) });
        let late = (0..1_000).find(|&c| (995..1_000).contains(&p(c))).unwrap();
        assert!(matches!(v.standing(late, user(), 111_000), Standing::Admitted { .. }));
    }
}

//! Where a buyer stands in a sale's waiting room, from what every replica knows of the room
//! at an instant ([`RoomState`]) and of when places came up ([`CameUpMarks`]). seckill-service
//! reads both from Redis every tick; the gateway mirrors them from seckill-service
//! (`GET /internal/gateway/rooms/{id}`, a [`RoomSnapshot`]). Both answer a status poll with
//! this code, so the answer is the same whoever gives it.

use std::collections::VecDeque;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::scripts::AFTER_BASE;
use super::{Admission, Draw, QueueDraw, QueueState, QueueStatus, RoomKey};
use crate::{GoodsId, UserId};

/// The bounds of the next poll a status answer asks for ([`RoomState::poll_after_ms`]).
pub const POLL_MIN_MS: u64 = 500;
pub const POLL_MAX_MS: u64 = 30_000;
pub const POLL_SPREAD_MS: u64 = 4_096;

/// A room at an instant: the body of `GET /internal/gateway/rooms/{id}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RoomState {
    /// The sale's opening and end (ms since the epoch).
    pub start_ms: i64,
    pub end_ms: i64,
    /// How many joined before the opening, once drawn.
    pub drawn: Option<u64>,
    /// How many joined after the opening.
    pub after: u64,
    /// Places come up so far.
    pub admitted: u64,
    /// Places admitted a second: the room's fixed rate, or an `auto` room's current one (0
    /// before its first).
    pub rate: f64,
    pub sold_out: bool,
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
    /// The place has come up: admitted while its admission lives, which only the leader's
    /// marks tell ([`CameUpMarks::resolve`] turns this into `Admitted` or `Closed`).
    CameUp {
        place: u64,
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

impl RoomState {
    /// The place (from 0) of join `code`, once the draw is known.
    pub fn place(&self, seed: &[u8; 32], code: u64) -> Option<u64> {
        let n = self.drawn?;
        Some(if code >= AFTER_BASE { n + (code - AFTER_BASE) } else { Draw::new(*seed, n).place_of(code) })
    }

    /// Where the holder of join `code` stands at `now_ms`, short of an admission.
    pub fn standing(&self, seed: &[u8; 32], code: u64, now_ms: i64) -> Standing {
        let place = self.place(seed, code);
        if now_ms >= self.end_ms {
            return Standing::Closed { place };
        }
        if self.sold_out {
            return Standing::SoldOut { place };
        }
        let Some(p) = place else {
            return Standing::Waiting { place: None, ahead: None, wait_secs: None };
        };
        if p < self.admitted {
            return Standing::CameUp { place: p };
        }
        let ahead = p - self.admitted;
        // The places ahead and the buyer's own come up before the admission.
        let wait_secs = (self.rate > 0.0).then(|| ((ahead + 1) as f64 / self.rate).ceil() as u64);
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

    /// Places waiting (joined, not admitted).
    pub fn waiting(&self) -> u64 {
        self.drawn.map_or(0, |n| (n + self.after).saturating_sub(self.admitted))
    }

    /// The draw as anyone may check it: the seed only once the sale has opened and drawn.
    pub fn draw(&self, seed: &[u8; 32], commitment: &str) -> QueueDraw {
        QueueDraw {
            commitment: commitment.to_owned(),
            seed: self.drawn.map(|_| seed.iter().map(|b| format!("{b:02x}")).collect()),
            joined_before: self.drawn,
        }
    }
}

/// When places came up, over the last admission's life: the leader's marks `(instant ms,
/// places admitted by then)`, oldest first. An admission ends its life after the instant its
/// place came up by these marks, so every replica and every gateway ends it at the same one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CameUpMarks {
    marks: VecDeque<(i64, u64)>,
    /// Places below this came up before the oldest mark kept: their admission has ended.
    forgotten_below: u64,
}

impl CameUpMarks {
    pub fn new(marks: Vec<(i64, u64)>) -> Self {
        Self { marks: marks.into(), forgotten_below: 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.marks.is_empty()
    }

    pub fn len(&self) -> usize {
        self.marks.len()
    }

    /// Places come up by the last mark.
    pub fn last(&self) -> u64 {
        self.marks.back().map_or(0, |m| m.1)
    }

    /// The marks past the last one kept (the others are known already).
    pub fn extend(&mut self, marks: impl IntoIterator<Item = (i64, u64)>) {
        let last = self.last();
        self.marks.extend(marks.into_iter().filter(|m| m.1 > last));
    }

    /// What a copy holding the marks up to `admitted` lacks.
    pub fn since(&self, admitted: u64) -> Self {
        let marks = self.marks.iter().filter(|m| m.1 > admitted).copied().collect();
        Self { marks, forgotten_below: self.forgotten_below }
    }

    /// A newer copy's marks ([`CameUpMarks::since`] this one's last) taken in.
    pub fn merge(&mut self, newer: Self) {
        self.forgotten_below = self.forgotten_below.max(newer.forgotten_below);
        self.extend(newer.marks);
    }

    /// Drops the marks older than an admission's life (`life_ms`) and a second at `now_ms`:
    /// every admission their places were given has ended.
    pub fn forget_ended(&mut self, life_ms: i64, now_ms: i64) {
        self.forget_before(now_ms - life_ms - 1000);
    }

    /// Drops the marks older than `t_ms` (one is always kept): their places' admissions ended.
    fn forget_before(&mut self, t_ms: i64) {
        while self.marks.len() > 1 && self.marks.front().is_some_and(|m| m.0 < t_ms) {
            if let Some((_, admitted)) = self.marks.pop_front() {
                self.forgotten_below = admitted;
            }
        }
    }

    /// When place `p` (admitted) came up: the first mark past it. `None` when that was before
    /// the marks kept (its admission has ended).
    pub fn came_up(&self, p: u64) -> Option<i64> {
        if p < self.forgotten_below {
            return None;
        }
        let i = self.marks.partition_point(|&(_, admitted)| admitted <= p);
        // Past every mark: admitted as the marks' holder met the room, so from its first read.
        self.marks.get(i).or(self.marks.back()).map(|m| m.0)
    }

    /// `standing` once a place that came up is told its admission (while it lives, `life_ms`
    /// from the instant the place came up) or that it is closed.
    pub fn resolve(
        &self,
        standing: Standing,
        sale: GoodsId,
        user: UserId,
        life_ms: i64,
        now_ms: i64,
    ) -> Standing {
        let Standing::CameUp { place } = standing else { return standing };
        let Some(began) = self.came_up(place) else {
            return Standing::Closed { place: Some(place) };
        };
        let expires_ms = began + life_ms;
        if expires_ms < now_ms {
            return Standing::Closed { place: Some(place) };
        }
        Standing::Admitted { place, admission: Admission { sale, user, place, expires_ms } }
    }
}

/// The body of `GET /internal/gateway/rooms/{id}?since=N`: a room as a seckill-service replica
/// sees it, for the gateway to answer status polls from. The marks are those past `since`
/// (the places come up by the last mark the gateway holds): a room's marks over an hour's
/// admission life are tens of thousands, read every tick.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoomSnapshot {
    pub state: RoomState,
    /// How long an admission lives.
    pub admission_secs: u32,
    pub came_up: CameUpMarks,
}

impl QueueStatus {
    /// The answer to the holder of `ticket` who stands as `standing`; an admission is sealed
    /// with `key`. Places count from 1 for people.
    pub fn of(
        key: &RoomKey,
        ticket: String,
        standing: Standing,
        draw: QueueDraw,
        poll_after_ms: Option<u64>,
    ) -> Self {
        let mut status = Self {
            state: QueueState::Waiting,
            ticket,
            place: None,
            ahead: None,
            wait_secs: None,
            admission: None,
            admission_expires_at: None,
            draw,
            poll_after_ms,
        };
        let shown = |p: Option<u64>| p.map(|p| p + 1);
        match standing {
            Standing::Waiting { place, ahead, wait_secs } => {
                (status.place, status.ahead, status.wait_secs) = (shown(place), ahead, wait_secs);
            }
            // Its admission not known here: next in line.
            Standing::CameUp { place } => {
                (status.place, status.ahead, status.wait_secs) = (shown(Some(place)), Some(0), Some(0));
            }
            Standing::Admitted { place, admission } => {
                status.state = QueueState::Admitted;
                (status.place, status.ahead, status.wait_secs) = (shown(Some(place)), Some(0), Some(0));
                status.admission = Some(admission.seal(key));
                status.admission_expires_at = DateTime::<Utc>::from_timestamp_millis(admission.expires_ms);
            }
            Standing::SoldOut { place } => (status.state, status.place) = (QueueState::SoldOut, shown(place)),
            Standing::Closed { place } => (status.state, status.place) = (QueueState::Closed, shown(place)),
        }
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: [u8; 32] = [3; 32];

    fn state(drawn: Option<u64>, admitted: u64) -> RoomState {
        RoomState {
            start_ms: 10_000,
            end_ms: 1_000_000,
            drawn,
            after: 0,
            admitted,
            rate: 10.0,
            sold_out: false,
        }
    }

    #[test]
    fn a_place_is_unknown_until_the_draw_then_moves_with_the_admissions() {
        assert_eq!(
            state(None, 0).standing(&SEED, 0, 11_000),
            Standing::Waiting { place: None, ahead: None, wait_secs: None }
        );
        let drawn = state(Some(100), 0);
        let Standing::Waiting { place: Some(p), ahead: Some(ahead), wait_secs: Some(wait) } =
            drawn.standing(&SEED, 0, 11_000)
        else {
            panic!("waiting with a place");
        };
        assert_eq!((ahead, wait), (p, (p + 1).div_ceil(10)));
        // Joined after the opening: behind all 100 drawn, in arrival order.
        assert!(matches!(
            drawn.standing(&SEED, AFTER_BASE + 4, 11_000),
            Standing::Waiting { place: Some(104), .. }
        ));
        assert_eq!(state(Some(100), p + 1).standing(&SEED, 0, 12_000), Standing::CameUp { place: p });
    }

    #[test]
    fn the_next_poll_nears_with_the_place_and_the_early_crowd_is_spread_after_the_opening() {
        let before = state(None, 0);
        let waiting = before.standing(&SEED, 5, 1_000);
        // Nine seconds to the opening: then 0.5 s and a spread by join code.
        assert_eq!(before.poll_after_ms(&waiting, 5, 1_000), Some(9_000 + POLL_MIN_MS + 5));
        assert_eq!(before.poll_after_ms(&waiting, 5 + POLL_SPREAD_MS, 1_000), Some(9_000 + POLL_MIN_MS + 5));
        let far = before.poll_after_ms(&waiting, 0, -1_000_000).unwrap();
        assert_eq!(far, POLL_MAX_MS + POLL_MIN_MS, "never more than the cap before the opening either");
        let drawn = state(Some(100_000), 0);
        // Rate 10 a second: a quarter of the wait, bounded both ways.
        for code in (0..100_000).step_by(997) {
            let standing = drawn.standing(&SEED, code, 11_000);
            let Standing::Waiting { wait_secs: Some(secs), .. } = standing else { panic!("waiting") };
            let poll = drawn.poll_after_ms(&standing, code, 11_000).unwrap();
            assert_eq!(poll, (secs * 250).clamp(POLL_MIN_MS, POLL_MAX_MS), "{secs} s to wait");
        }
        let up = state(Some(100_000), 100_000).standing(&SEED, 0, 12_000);
        assert_eq!(drawn.poll_after_ms(&up, 0, 12_000), None, "nothing left to wait for");
    }

    #[test]
    fn sold_out_and_the_end_are_told_to_everyone_waiting() {
        let sold = RoomState { sold_out: true, ..state(Some(10), 0) };
        assert!(matches!(sold.standing(&SEED, 3, 11_000), Standing::SoldOut { place: Some(_) }));
        assert!(matches!(sold.standing(&SEED, 3, 1_000_000), Standing::Closed { .. }));
    }

    #[test]
    fn a_snapshot_crosses_the_wire_unchanged() {
        let mut came_up = CameUpMarks::new(vec![(11_000, 2), (11_100, 5)]);
        came_up.forget_before(11_050);
        let s = RoomSnapshot {
            state: RoomState { after: 7, rate: 12.5, ..state(Some(3), 5) },
            admission_secs: 60,
            came_up,
        };
        let back: RoomSnapshot = serde_json::from_slice(&serde_json::to_vec(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }

    fn user() -> UserId {
        UserId::new(1).unwrap()
    }

    fn sale() -> GoodsId {
        GoodsId::new(7).unwrap()
    }

    #[test]
    fn an_admission_ends_its_life_after_the_instant_its_place_came_up() {
        let marks = CameUpMarks::new(vec![(12_000, 5), (12_100, 9)]);
        let at = |place, now| marks.resolve(Standing::CameUp { place }, sale(), user(), 60_000, now);
        let Standing::Admitted { admission, .. } = at(4, 12_500) else { panic!("admitted") };
        assert_eq!(admission.expires_ms, 12_000 + 60_000, "from the first mark past the place");
        let Standing::Admitted { admission, .. } = at(5, 12_500) else { panic!("admitted") };
        assert_eq!(admission.expires_ms, 12_100 + 60_000);
        assert_eq!(at(4, 72_001), Standing::Closed { place: Some(4) }, "its life is over");
        let waiting = Standing::Waiting { place: Some(20), ahead: Some(11), wait_secs: Some(2) };
        assert_eq!(marks.resolve(waiting, sale(), user(), 60_000, 12_500), waiting, "only a place come up");
    }

    #[test]
    fn a_copy_kept_from_the_marks_past_its_last_ends_every_admission_as_the_original() {
        let mut original = CameUpMarks::new(vec![(11_000, 3)]);
        let mut copy = CameUpMarks::default();
        copy.merge(original.since(copy.last()));
        for (i, at) in (1..40).zip((11_100..).step_by(100)) {
            original.extend([(at, 3 + i * 2)]);
            original.forget_before(at - 1_000);
            // The copy reads every other tick.
            if i % 2 == 0 {
                copy.merge(original.since(copy.last()));
                copy.forget_before(at - 1_000);
            }
        }
        copy.merge(original.since(copy.last()));
        for place in 0..90 {
            let standing = Standing::CameUp { place };
            assert_eq!(
                copy.resolve(standing, sale(), user(), 1_000, 14_500),
                original.resolve(standing, sale(), user(), 1_000, 14_500),
                "place {place}"
            );
        }
        assert!(original.since(original.last()).is_empty(), "nothing past the last mark");
    }
}

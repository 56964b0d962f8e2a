//! The waiting-room cases: users join a sale's waiting room before its opening and after, and
//! poll where they stand as a page does, while the case's fault hits; one in every few buys
//! when admitted ([`buyers::buyer`] with the admission). Judged from their answers alone
//! ([`judge`]): every place the same in every answer, nobody admitted twice, the room's rate
//! held, and the room going on after the fault.
//!
//! Thousands of users wait at once, so they share [`LANES`] connections: a lane makes its
//! users' requests one at a time, in the order they fall due.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hyper::header::HeaderValue;
use seckill_common::api::Role;
use seckill_common::room::{QueueState, QueueStatus, RoomRate, WaitingRoom};
use serde_json::json;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::buyers::{self, BuyerLog, Load, Tally};
use super::verdict::{self, check};
use seckill_harness::api::dev_token;
use seckill_harness::client::{Answer, Conn, Req};
use seckill_harness::invariants::Check;

pub const PLACE_KEPT: &str = "room: every place the same in every answer";
pub const ADMITTED_ONCE: &str = "room: nobody admitted twice";
pub const RATE_HELD: &str = "room: admissions within the rate";
pub const ROOM_MOVES: &str = "room: admissions go on after the fault";
pub const ROOM_ANSWERS: &str = "room: no 5xx but 503/504";
/// The longest the room may admit nobody from the fault on while places wait.
pub const MAX_GAP_S: f64 = 10.0;

/// Connections the users share, and how long one of their requests may take.
const LANES: usize = 128;
const TIMEOUT: Duration = Duration::from_secs(3);
/// A failed request is made again this much later.
const RETRY: Duration = Duration::from_secs(1);
/// A waiting user polls again when `poll_after_ms` says; an admitted one at least this often.
const POLL_MIN: Duration = Duration::from_secs(1);
const POLL_MAX: Duration = Duration::from_secs(10);
/// Polls after `closed` (its admission over), this far apart: it must stay closed.
const CLOSED_POLLS: u8 = 2;
const CLOSED_EVERY: Duration = Duration::from_secs(5);
/// How long the users go on once every place came up.
const GRACE: Duration = Duration::from_secs(2);

/// A case's room and its users.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub users: usize,
    /// Places admitted a second.
    pub rate: u32,
    pub admission_secs: u32,
    /// Half the users join evenly over `before` up to the opening, half over `after` from it.
    pub before: Duration,
    pub after: Duration,
}

impl Plan {
    pub fn room(&self) -> WaitingRoom {
        WaitingRoom {
            rate: RoomRate::PerSec(self.rate),
            opens_before_secs: 600,
            admission_secs: self.admission_secs,
            pow_difficulty: 0,
        }
    }
}

/// One answer a user got about where it stands.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Seen {
    /// Seconds since the opening (0 before it).
    pub at_s: f64,
    pub state: QueueState,
    pub place: Option<u64>,
    /// `admission_expires_at`, Unix ms.
    pub expires_ms: Option<i64>,
}

/// Every answer one user got.
#[derive(Debug, Clone, Default)]
pub struct UserLog {
    pub user: i64,
    pub seen: Vec<Seen>,
}

/// What the room's users did: their answers, the buyers' logs, the answers no client should see.
pub struct Outcome {
    pub users: Vec<UserLog>,
    pub buyers: Vec<BuyerLog>,
    pub tally: Tally,
}

#[derive(Default)]
struct User {
    log: UserLog,
    buys: bool,
    bearer: Option<HeaderValue>,
    ticket: Option<HeaderValue>,
    closed_polls: u8,
    settled: bool,
}

/// When a user's next request is due (`None`: it is done), and its admission once admitted.
type Next = Option<(Duration, Option<HeaderValue>)>;

/// What every lane shares.
struct Room {
    load: Arc<Load>,
    settled: AtomicUsize,
}

/// `users` join the room of `load`'s sale (opening at `load.t0`), one in `buy_every` buying
/// once admitted, until every place came up (or far past when it should have).
pub async fn run(load: Arc<Load>, plan: Plan, users: &[i64], buy_every: usize) -> Outcome {
    let room = Arc::new(Room { load: load.clone(), settled: AtomicUsize::new(0) });
    let half = (users.len() / 2).max(1);
    let mut lanes: Vec<Vec<(Instant, User)>> = (0..LANES).map(|_| Vec::new()).collect();
    for (i, &user) in users.iter().enumerate() {
        let arrive = if i < half {
            load.t0 - plan.before + plan.before.mul_f64(i as f64 / half as f64)
        } else {
            load.t0 + plan.after.mul_f64((i - half) as f64 / (users.len() - half).max(1) as f64)
        };
        let log = UserLog { user, seen: Vec::new() };
        let u = User { log, buys: i % buy_every.max(1) == 0, ..User::default() };
        lanes[i % LANES].push((arrive, u));
    }
    let (stop, stopped) = watch::channel(false);
    let mut set = JoinSet::new();
    for (k, mine) in lanes.into_iter().enumerate() {
        set.spawn(lane(room.clone(), k, mine, stopped.clone()));
    }
    let due = plan.before + plan.after + Duration::from_secs_f64(users.len() as f64 / f64::from(plan.rate));
    let give_up = load.t0 + due * 2 + Duration::from_secs(30);
    while room.settled.load(Ordering::Relaxed) < users.len() && Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(GRACE).await;
    let _ = stop.send(true);
    let mut out = Outcome { users: Vec::new(), buyers: Vec::new(), tally: Tally::default() };
    while let Some(Ok((logs, buys, tally))) = set.join_next().await {
        out.users.extend(logs);
        out.tally.merge(&tally);
        out.buyers.extend(buys.join_all().await);
    }
    out
}

/// One connection's users, each request when it falls due, until `stop`.
async fn lane(
    room: Arc<Room>,
    k: usize,
    mut users: Vec<(Instant, User)>,
    mut stop: watch::Receiver<bool>,
) -> (Vec<UserLog>, JoinSet<BuyerLog>, Tally) {
    let endpoint = room.load.endpoint(k).clone();
    let mut conn = Conn::new(endpoint.clone(), TIMEOUT);
    let mut tally = Tally::default();
    let mut buys = JoinSet::new();
    let mut due: BinaryHeap<Reverse<(Instant, usize)>> =
        users.iter().enumerate().map(|(i, (at, _))| Reverse((*at, i))).collect();
    while let Some(Reverse((at, i))) = due.pop() {
        tokio::select! {
            () = tokio::time::sleep_until(at.into()) => {}
            _ = stop.wait_for(|s| *s) => break,
        }
        let u = &mut users[i].1;
        let Some((next, admission)) = u.act(&room, &mut conn, &mut tally).await else { continue };
        if let Some(a) = admission.filter(|_| std::mem::take(&mut u.buys)) {
            buys.spawn(buyers::buyer(room.load.clone(), endpoint.clone(), u.log.user, false, Some(a)));
        }
        due.push(Reverse((Instant::now() + next, i)));
    }
    (users.into_iter().map(|(_, u)| u.log).collect(), buys, tally)
}

impl User {
    /// The user's next request: a dev token, the join, or a poll.
    async fn act(&mut self, room: &Room, conn: &mut Conn, tally: &mut Tally) -> Next {
        let Some(bearer) = self.bearer.clone() else {
            // Refused only while the gateway is away.
            self.bearer = dev_token(conn, self.log.user, Role::User).await.ok();
            return Some((if self.bearer.is_some() { Duration::ZERO } else { RETRY }, None));
        };
        let (req, call) = match &self.ticket {
            None => (Req::post(&room.load.paths.queue).json(&json!({})), "POST .../queue"),
            Some(t) => (Req::get(&room.load.paths.queue).room_ticket(t.clone()), "GET .../queue"),
        };
        let a = conn.send(req.bearer(&bearer)).await;
        let Some(s) = a.json::<QueueStatus>() else {
            return self.failed(room, tally, call, &a);
        };
        if self.ticket.is_none() {
            self.ticket = Some(HeaderValue::from_str(&s.ticket).ok()?);
        }
        let at_s = room.load.secs();
        let expires_ms = s.admission_expires_at.map(|t| t.timestamp_millis());
        self.log.seen.push(Seen { at_s, state: s.state, place: s.place, expires_ms });
        if s.state != QueueState::Waiting {
            self.settle(room);
        }
        let next = match s.state {
            QueueState::Waiting => s.poll_after_ms.map_or(POLL_MIN, Duration::from_millis),
            // Again while admitted, and once its life is over.
            QueueState::Admitted => {
                let left = expires_ms.map_or(0, |e| e - chrono::Utc::now().timestamp_millis()) + 500;
                Duration::from_millis(u64::try_from(left).unwrap_or(0)).clamp(POLL_MIN, POLL_MAX)
            }
            QueueState::Closed if self.closed_polls < CLOSED_POLLS => {
                self.closed_polls += 1;
                CLOSED_EVERY
            }
            QueueState::Closed | QueueState::SoldOut => return None,
        };
        let admission = s.admission.and_then(|a| HeaderValue::from_str(&a).ok());
        Some((next, admission))
    }

    /// A refused or failed request: tried again after [`RETRY`] when a client would.
    fn failed(&mut self, room: &Room, tally: &mut Tally, call: &str, a: &Answer) -> Next {
        if !tally.retryable(a) {
            // A join after the sell-out (410 SOLD_OUT) has nothing to wait for: not amiss.
            if a.status != 410 {
                tally.bad(room.load.secs(), self.log.user, call, a);
            }
            if a.status < 500 {
                self.settle(room);
                return None;
            }
        }
        Some((RETRY, None))
    }

    fn settle(&mut self, room: &Room) {
        if !std::mem::replace(&mut self.settled, true) {
            room.settled.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The room's checks, from its users' answers; `opened_ms`: the opening (Unix ms), which
/// `fault_s` and `back_s` count from.
pub fn judge(
    out: &Outcome,
    plan: Plan,
    opened_ms: i64,
    fault_s: Option<f64>,
    back_s: Option<f64>,
) -> Vec<Check> {
    let users = &out.users;
    let (fault, back) = (fault_s.unwrap_or(f64::MAX), back_s.or(fault_s).unwrap_or(f64::MAX));
    let mut checks = vec![verdict::answers(ROOM_ANSWERS, &out.tally)];

    // Places.
    let mut moved = Vec::new();
    let (mut placed, mut across) = (0, 0);
    for u in users {
        let places: Vec<(f64, u64)> = u.seen.iter().filter_map(|s| Some((s.at_s, s.place?))).collect();
        let Some(&(_, first)) = places.first() else { continue };
        placed += 1;
        if places.iter().any(|&(_, p)| p != first) {
            moved.push((u.user, places.iter().map(|p| p.1).collect::<Vec<_>>()));
        }
        across += usize::from(places.iter().any(|p| p.0 < fault) && places.iter().any(|p| p.0 > back));
    }
    checks.push(check(
        PLACE_KEPT,
        moved.is_empty(),
        format!(
            "{placed} users shown a place, {across} of them both before the fault and after the return; \
             {} shown another place later{}",
            moved.len(),
            examples(&moved)
        ),
    ));

    // Admissions: when each began (the end it was given, less its life), and none given twice.
    let life_ms = i64::from(plan.admission_secs) * 1000;
    let (mut began, mut later, mut again) = (Vec::new(), Vec::new(), Vec::new());
    for u in users {
        let mut first: Option<i64> = None;
        let mut closed = false;
        for s in &u.seen {
            match (s.state, s.expires_ms) {
                (QueueState::Admitted, Some(e)) => {
                    if closed {
                        again.push((u.user, s.at_s));
                    }
                    match first {
                        None => first = Some(e),
                        Some(f) if e > f => later.push((u.user, f, e)),
                        Some(_) => {}
                    }
                }
                (QueueState::Closed, _) => closed = true,
                _ => {}
            }
        }
        began.extend(first.map(|e| (e - life_ms - opened_ms) as f64 / 1000.0));
    }
    checks.push(check(
        ADMITTED_ONCE,
        later.is_empty() && again.is_empty(),
        format!(
            "{} users admitted, {} of them later closed; an admission's end moved later: {}{}; \
             admitted again after closed: {}{}",
            began.len(),
            users.iter().filter(|u| u.seen.iter().any(|s| s.state == QueueState::Closed)).count(),
            later.len(),
            examples(&later),
            again.len(),
            examples(&again)
        ),
    ));

    // The rate: in any window (a, b], at most rate x (b - a) + a second's worth. Places that
    // came up at one instant were owed since the one before, hence windows open on the left.
    began.sort_by(f64::total_cmp);
    let rate = f64::from(plan.rate);
    // How many had come up by each instant, from the opening.
    let mut by: Vec<(f64, f64)> = vec![(began.first().map_or(0.0, |t| t.min(0.0)), 0.0)];
    for (k, &t) in began.iter().enumerate() {
        match by.last_mut() {
            Some(last) if last.0 == t => last.1 = (k + 1) as f64,
            _ => by.push((t, (k + 1) as f64)),
        }
    }
    // The excess of (a, b] is (n_b - rate t_b) + (rate t_a - n_a): the best a before b kept.
    let (mut worst, mut span, mut best) = (0.0, (0.0, 0.0, 0.0), (f64::MIN, 0));
    for (k, &(t, n)) in by.iter().enumerate() {
        let (a, n_a) = by[best.1];
        if k > 0 && n - rate * t + best.0 > worst {
            (worst, span) = (n - rate * t + best.0, (a, t, n - n_a));
        }
        if rate * t - n > best.0 {
            best = (rate * t - n, k);
        }
    }
    checks.push(check(
        RATE_HELD,
        worst <= rate + 1.0,
        format!(
            "{} admissions seen, {} a second; the window most over the rate: {} places after {:.2} s up to {:.2} s, \
             {worst:.0} over rate x its length (at most {} allowed: a second's worth)",
            began.len(),
            plan.rate,
            span.2,
            span.0,
            span.1,
            plan.rate
        ),
    ));

    // The room goes on: everybody's place came up, without a long pause from the fault on.
    let waiting: Vec<i64> = users
        .iter()
        .filter(|u| u.seen.last().is_some_and(|s| s.state == QueueState::Waiting))
        .map(|u| u.user)
        .collect();
    let gap = began.windows(2).filter(|w| w[1] >= fault).map(|w| w[1] - w[0]).fold(0.0, f64::max);
    let after = began.iter().filter(|&&t| t > back).count();
    checks.push(check(
        ROOM_MOVES,
        waiting.is_empty() && gap <= MAX_GAP_S && (fault_s.is_none() || after > 0),
        format!(
            "{after} admissions began after the return, the last {:.1} s after the opening; longest pause from \
             the fault on {gap:.1} s (at most {MAX_GAP_S} s); still waiting at the end: {}{}",
            began.last().copied().unwrap_or(0.0),
            waiting.len(),
            examples(&waiting)
        ),
    ));
    checks
}

fn examples<T: std::fmt::Debug>(items: &[T]) -> String {
    if items.is_empty() { String::new() } else { format!(" (e.g. {})", verdict::first(items)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAN: Plan = Plan {
        users: 4,
        rate: 10,
        admission_secs: 10,
        before: Duration::from_secs(1),
        after: Duration::from_secs(1),
    };

    fn seen(at_s: f64, state: QueueState, place: u64, began_s: Option<f64>) -> Seen {
        let expires_ms = began_s.map(|b| ((b + 10.0) * 1000.0) as i64);
        Seen { at_s, state, place: Some(place), expires_ms }
    }

    /// User `n` waits, is admitted at `n / 10` s (the rate), then closed.
    fn user(n: i64) -> UserLog {
        let b = n as f64 / 10.0;
        let p = n as u64;
        UserLog {
            user: n,
            seen: vec![
                seen(-1.0, QueueState::Waiting, p, None),
                seen(b + 0.1, QueueState::Admitted, p, Some(b)),
                seen(b + 11.0, QueueState::Closed, p, None),
            ],
        }
    }

    fn failed(users: &[UserLog], fault: Option<f64>) -> Vec<String> {
        let out = Outcome { users: users.to_vec(), buyers: Vec::new(), tally: Tally::default() };
        let checks = judge(&out, PLAN, 0, fault, fault.map(|f| f + 1.0));
        checks.into_iter().filter(|c| !c.ok).map(|c| c.name).collect()
    }

    #[test]
    fn a_moved_place_a_second_admission_a_burst_and_a_stall_are_named() {
        let mut users: Vec<UserLog> = (0..100).map(user).collect();
        assert_eq!(failed(&users, Some(3.0)), Vec::<String>::new(), "a room at its rate");
        users[1].seen[2].place = Some(7);
        users[2].seen.push(seen(20.0, QueueState::Admitted, 2, Some(19.0)));
        assert_eq!(failed(&users, Some(3.0)), [PLACE_KEPT, ADMITTED_ONCE]);
        // 30 admitted at 7 s, 0.1 s after the last: 29 over the rate (a long pause would
        // have made them owed).
        let mut users: Vec<UserLog> = (0..100).map(user).collect();
        for (k, u) in users.iter_mut().enumerate().skip(70) {
            u.seen[1] = seen(7.5, QueueState::Admitted, k as u64, Some(7.0));
        }
        assert_eq!(failed(&users, Some(3.0)), [RATE_HELD]);
        // Admitted by 10 s, nobody after the fault at 12 s, one left waiting.
        let mut users: Vec<UserLog> = (0..100).map(user).collect();
        users[99].seen.truncate(1);
        assert_eq!(failed(&users, Some(12.0)), [ROOM_MOVES]);
    }
}

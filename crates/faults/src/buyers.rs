//! The buyers of a fault case, each behaving as a real client does when the system misbehaves:
//! its own connection; a dev token, a path token, the order; 503, 504, 429 and connection
//! errors retried after a short backoff (0.1 s doubling to 1 s, with jitter), a fresh path
//! token on 403 BAD_TOKEN, a 409 REPEATED read as an earlier click of its own accepted although
//! its answer was lost; after a 202 (or that 409) the result polled until `success` or
//! `failed`, and after `failed` (the unit given back) another try, twice at most. Every answer
//! that no client should see (a 5xx other than 503 and 504, an unexpected status) is recorded
//! with when, who and what. On a sale with a waiting room a buyer brings its admission. In a
//! case with streams, the result is followed on the event stream instead (`streams`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use hyper::header::HeaderValue;
use seckill_common::ErrorCode;
use seckill_common::api::{OrderAccepted, Role, SeckillStatus};
use serde::de::DeserializeOwned;
use tokio::task::JoinSet;
use uuid::Uuid;

use seckill_harness::api::{self, SalePaths};
use seckill_harness::client::{Answer, Conn, Endpoint, Req, STATUS_ERROR, STATUS_TIMEOUT};
use seckill_harness::invariants::FinalState;

/// Connections the end of a case reads every buyer's result (and orders) on, at once.
const READERS: usize = 16;
/// Unexpected answers kept as examples per buyer and per case.
const EXAMPLES: usize = 20;
/// Tries after a `failed` result (the unit was given back: the buyer may buy again).
const TRIES_AFTER_FAILED: u32 = 2;

/// What every buyer of one case shares.
pub struct Load {
    /// Every gateway: buyer i of an arrival goes to gateway i % n.
    pub endpoints: Vec<Arc<Endpoint>>,
    /// The sale's routes.
    pub paths: SalePaths,
    /// The sale's opening: every time is counted from here, in seconds.
    pub t0: Instant,
    pub request_timeout: Duration,
    /// How long a buyer keeps retrying before it gives up.
    pub retry_budget: Duration,
    /// How long an accepted request's result is polled before it counts as lost.
    pub result_wait: Duration,
    /// How long `none` after a 202 may last before it counts as lost (`queued` gets the whole
    /// `result_wait`: a backlog is slow, a `none` is a request the system forgot).
    pub none_grace: Duration,
    /// Accepted requests are followed on the gateway's event stream, not polled (`streams`).
    pub streams: bool,
}

impl Load {
    /// `endpoints` must not be empty.
    pub fn new(endpoints: Vec<Arc<Endpoint>>, goods_id: i64, t0: Instant) -> Self {
        assert!(!endpoints.is_empty(), "a load needs a gateway");
        Self {
            endpoints,
            paths: SalePaths::new(goods_id),
            t0,
            request_timeout: Duration::from_secs(12),
            retry_budget: Duration::from_secs(90),
            result_wait: Duration::from_secs(150),
            none_grace: Duration::from_secs(15),
            streams: false,
        }
    }

    /// Seconds since the sale opened.
    pub fn secs(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    /// The gateway of the `i`th client (buyer, reader): spread evenly over all of them.
    pub fn endpoint(&self, i: usize) -> &Arc<Endpoint> {
        &self.endpoints[i % self.endpoints.len()]
    }
}

/// The answers a case's clients saw that were not the normal ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    pub s503: u64,
    pub s504: u64,
    pub s429: u64,
    pub conn_errors: u64,
    pub timeouts: u64,
    /// 5xx other than 503 and 504: never acceptable.
    pub other_5xx: u64,
    /// Other statuses no client should get here (e.g. 400, 404, 425).
    pub unexpected: u64,
    /// Examples of both, with when, who and what.
    pub examples: Vec<String>,
}

impl Tally {
    /// Counts a status a client retries; false for any other.
    pub(super) fn retryable(&mut self, a: &Answer) -> bool {
        match a.status {
            STATUS_ERROR => self.conn_errors += 1,
            STATUS_TIMEOUT => self.timeouts += 1,
            503 => self.s503 += 1,
            504 => self.s504 += 1,
            429 => self.s429 += 1,
            _ => return false,
        }
        true
    }

    /// Records an answer no client should see. A 5xx is still retried by the caller (a real
    /// client would), anything else ends the buyer.
    pub(crate) fn bad(&mut self, at_s: f64, user: i64, call: &str, a: &Answer) {
        if a.status >= 500 {
            self.other_5xx += 1;
        } else {
            self.unexpected += 1;
        }
        if self.examples.len() < EXAMPLES {
            let body = String::from_utf8_lossy(&a.body);
            let body: String = body.chars().take(200).collect();
            self.examples.push(format!("t={at_s:.2}s user {user} {call}: HTTP {} {body}", a.status));
        }
    }

    pub fn merge(&mut self, o: &Tally) {
        self.s503 += o.s503;
        self.s504 += o.s504;
        self.s429 += o.s429;
        self.conn_errors += o.conn_errors;
        self.timeouts += o.timeouts;
        self.other_5xx += o.other_5xx;
        self.unexpected += o.unexpected;
        for e in &o.examples {
            if self.examples.len() < EXAMPLES {
                self.examples.push(e.clone());
            }
        }
    }
}

/// One accepted request (a 202, or a 409 REPEATED standing for an earlier click whose answer
/// was lost) and what polling its result found.
#[derive(Debug, Clone, PartialEq)]
pub struct Accepted {
    /// From the 202's body; `None` for a 409 REPEATED.
    pub request_id: Option<Uuid>,
    pub sent_s: f64,
    pub at_s: f64,
    /// The last result seen: `Success` or `Failed` when final; `Queued` or `None` when polling
    /// gave up on it.
    pub state: FinalState,
    pub order_id: Option<i64>,
    pub final_s: Option<f64>,
}

impl Accepted {
    pub fn is_final(&self) -> bool {
        matches!(self.state, FinalState::Success | FinalState::Failed)
    }
}

/// Everything one buyer did and saw.
#[derive(Debug, Clone)]
pub struct BuyerLog {
    pub user_id: i64,
    /// Arrived after the main load, to buy units given back late.
    pub late: bool,
    pub bearer: Option<HeaderValue>,
    pub order_calls: u32,
    pub accepted: Vec<Accepted>,
    /// Ended with 410 SOLD_OUT.
    pub sold_out: bool,
    /// Ran out of its retry budget.
    pub gave_up: bool,
    /// `(sent, answered)` of each 202 and clean 410 SOLD_OUT: when the buy path answered.
    pub good: Vec<(f64, f64)>,
    pub tally: Tally,
}

impl BuyerLog {
    fn new(user_id: i64, late: bool) -> Self {
        Self {
            user_id,
            late,
            bearer: None,
            order_calls: 0,
            accepted: Vec::new(),
            sold_out: false,
            gave_up: false,
            good: Vec::new(),
            tally: Tally::default(),
        }
    }

    /// The buyer got as far as an answer about the sale.
    pub fn took_part(&self) -> bool {
        self.order_calls > 0 || self.sold_out || !self.accepted.is_empty()
    }
}

/// Backoff between retries: 0.1 s doubling to 1 s, plus up to half again of jitter (from the
/// user id and the try, so runs are alike and buyers spread).
pub(super) struct Backoff {
    next: Duration,
    seed: u64,
    tries: u64,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(100);
    const MAX: Duration = Duration::from_secs(1);

    pub(super) fn new(seed: i64) -> Self {
        Self { next: Self::FIRST, seed: seed.unsigned_abs(), tries: 0 }
    }

    /// The next pause, and the one after it doubled.
    fn delay(&mut self) -> Duration {
        self.tries += 1;
        let half = (self.next.as_millis() as u64 / 2).max(1);
        let jitter =
            self.seed.wrapping_mul(2_654_435_761).wrapping_add(self.tries.wrapping_mul(40_503)) % half;
        let d = self.next + Duration::from_millis(jitter);
        self.next = (self.next * 2).min(Self::MAX);
        d
    }

    pub(super) async fn wait(&mut self) {
        tokio::time::sleep(self.delay()).await;
    }

    pub(super) fn reset(&mut self) {
        self.next = Self::FIRST;
    }
}

/// `users` arrive evenly over `over`, each running [`buyer`] (the `i`th on gateway `i % n`);
/// returns their logs.
pub async fn arrive(load: Arc<Load>, users: Vec<i64>, over: Duration, late: bool) -> Vec<BuyerLog> {
    let n = users.len().max(1) as f64;
    let start = tokio::time::Instant::now();
    let mut set = JoinSet::new();
    for (i, user) in users.into_iter().enumerate() {
        tokio::time::sleep_until(start + over.mul_f64(i as f64 / n)).await;
        let endpoint = load.endpoint(i).clone();
        set.spawn(buyer(load.clone(), endpoint, user, late, None));
    }
    let mut logs = Vec::new();
    while let Some(done) = set.join_next().await {
        if let Ok(log) = done {
            logs.push(log);
        }
    }
    logs.sort_by_key(|l| l.user_id);
    logs
}

/// One buyer on one gateway, from its dev token to a final answer (or its retry budget spent);
/// `admission` (`x-room-admission`) sent with its buy requests.
pub async fn buyer(
    load: Arc<Load>,
    endpoint: Arc<Endpoint>,
    user_id: i64,
    late: bool,
    admission: Option<HeaderValue>,
) -> BuyerLog {
    let mut log = BuyerLog::new(user_id, late);
    let mut conn = Conn::new(endpoint, load.request_timeout);
    let give_up = Instant::now() + load.retry_budget;
    let mut backoff = Backoff::new(user_id);

    let bearer = loop {
        if Instant::now() >= give_up {
            log.gave_up = true;
            return log;
        }
        let a = match api::dev_token(&mut conn, user_id, Role::User).await {
            Ok(bearer) => break bearer,
            Err(refused) => refused.answer,
        };
        if !log.tally.retryable(&a) {
            log.tally.bad(load.secs(), user_id, "POST /api/auth/dev-token", &a);
            if a.status < 500 {
                return log;
            }
        }
        backoff.wait().await;
    };
    log.bearer = Some(bearer.clone());

    let mut token: Option<HeaderValue> = None;
    let mut tries_after_failed = 0;
    loop {
        if Instant::now() >= give_up {
            log.gave_up = true;
            break;
        }
        let Some(path_token) = token.clone() else {
            let sent = load.secs();
            let a =
                conn.send(admitted(Req::post(&load.paths.token).bearer(&bearer), admission.as_ref())).await;
            if a.status == 200 {
                match a.path_token() {
                    Some(t) => {
                        token = Some(t);
                        backoff.reset();
                        continue;
                    }
                    None => {
                        log.tally.bad(load.secs(), user_id, "POST .../token", &a);
                        break;
                    }
                }
            }
            if a.is_error(410, ErrorCode::SoldOut) {
                log.good.push((sent, load.secs()));
                log.sold_out = true;
                break;
            }
            if !log.tally.retryable(&a) {
                log.tally.bad(load.secs(), user_id, "POST .../token", &a);
                if a.status < 500 {
                    break;
                }
            }
            backoff.wait().await;
            continue;
        };

        let sent = load.secs();
        log.order_calls += 1;
        let a = conn
            .send(admitted(
                Req::post(&load.paths.orders).bearer(&bearer).path_token(path_token),
                admission.as_ref(),
            ))
            .await;
        let answered = load.secs();
        let request_id = if a.status == 202 {
            log.good.push((sent, answered));
            a.json::<OrderAccepted>().map(|b| b.request_id)
        } else if a.is_error(409, ErrorCode::Repeated) {
            None
        } else if a.is_error(403, ErrorCode::BadToken) {
            // Used by a click whose answer was lost, or expired: ask for a fresh one.
            token = None;
            continue;
        } else if a.is_error(410, ErrorCode::SoldOut) {
            log.good.push((sent, answered));
            log.sold_out = true;
            break;
        } else {
            if !log.tally.retryable(&a) {
                log.tally.bad(answered, user_id, "POST .../orders", &a);
                if a.status < 500 {
                    break;
                }
            }
            backoff.wait().await;
            continue;
        };
        token = None;
        backoff.reset();
        let accepted = Accepted {
            request_id,
            sent_s: sent,
            at_s: answered,
            state: FinalState::Queued,
            order_id: None,
            final_s: None,
        };
        let accepted = if load.streams {
            let own = load.endpoints.iter().position(|e| Arc::ptr_eq(e, conn.endpoint())).unwrap_or(0);
            super::streams::follow(&load, own, &bearer, accepted, &mut log.tally, user_id).await
        } else {
            poll(&load, &mut conn, &bearer, accepted, &mut log.tally, user_id).await
        };
        let failed = accepted.state == FinalState::Failed;
        log.accepted.push(accepted);
        if failed && tries_after_failed < TRIES_AFTER_FAILED {
            tries_after_failed += 1;
            continue;
        }
        break;
    }
    log
}

/// `req` with the buyer's admission to a sale's waiting room, if it has one.
fn admitted<'a>(req: Req<'a>, admission: Option<&HeaderValue>) -> Req<'a> {
    match admission {
        Some(a) => req.admission(a.clone()),
        None => req,
    }
}

/// Polls an accepted request's result until it is final, `none` for `none_grace`, or
/// `result_wait` has passed: every 0.25 s for the first 2 s, then every 0.5 s, then every 1 s
/// after 10 s (a long backlog is not worth a poll storm).
async fn poll(
    load: &Load,
    conn: &mut Conn,
    bearer: &HeaderValue,
    mut acc: Accepted,
    tally: &mut Tally,
    user_id: i64,
) -> Accepted {
    let start = Instant::now();
    let mut none_since: Option<Instant> = None;
    loop {
        let waited = start.elapsed();
        let pause = if waited < Duration::from_secs(2) {
            Duration::from_millis(250)
        } else if waited < Duration::from_secs(10) {
            Duration::from_millis(500)
        } else {
            Duration::from_secs(1)
        };
        tokio::time::sleep(pause).await;
        match api::result(conn, &load.paths, bearer).await {
            Ok(r) => {
                acc.state = r.status.into();
                match r.status {
                    SeckillStatus::Success | SeckillStatus::Failed => {
                        acc.order_id = r.order_id.map(|o| o.get());
                        acc.final_s = Some(load.secs());
                        return acc;
                    }
                    SeckillStatus::Queued => none_since = None,
                    SeckillStatus::None => {
                        if none_since.get_or_insert_with(Instant::now).elapsed() >= load.none_grace {
                            return acc;
                        }
                    }
                }
            }
            Err(refused) => {
                if !tally.retryable(&refused.answer) {
                    tally.bad(load.secs(), user_id, "GET .../result", &refused.answer);
                }
            }
        }
        if start.elapsed() >= load.result_wait {
            return acc;
        }
    }
}

/// GETs `path` (as `bearer`, when given) until a 2xx, retrying 503, 504, 429 and connection
/// errors until `deadline`: its body as a `T`, or `None`.
pub async fn read<T: DeserializeOwned>(
    conn: &mut Conn,
    path: &str,
    bearer: Option<&HeaderValue>,
    deadline: Instant,
) -> Option<T> {
    let mut backoff = Backoff::new(1);
    let mut scratch = Tally::default();
    loop {
        if Instant::now() >= deadline {
            return None;
        }
        let mut req = Req::get(path);
        if let Some(b) = bearer {
            req = req.bearer(b);
        }
        let a = conn.send(req).await;
        if (200..300).contains(&a.status) {
            return a.json();
        }
        if !scratch.retryable(&a) {
            return None;
        }
        backoff.wait().await;
    }
}

/// [`read`] as each of `users` (who has a bearer), on [`READERS`] connections at once, each a
/// user's `path` in turn: what each got.
pub async fn read_as_each<T: DeserializeOwned>(
    load: &Load,
    path: &str,
    users: &[i64],
    bearers: &HashMap<i64, HeaderValue>,
    deadline: Instant,
) -> Vec<(i64, Option<T>)> {
    let reads = join_all((0..READERS).map(|k| async move {
        let mut conn = Conn::new(load.endpoint(k).clone(), load.request_timeout);
        let mut got = Vec::new();
        for &u in users.iter().skip(k).step_by(READERS) {
            let read = match bearers.get(&u) {
                Some(b) => read(&mut conn, path, Some(b), deadline).await,
                None => None,
            };
            got.push((u, read));
        }
        got
    }))
    .await;
    reads.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn answer(status: u16, body: &str) -> Answer {
        Answer::new(status, Bytes::from(body.to_owned()))
    }

    #[test]
    fn retryable_answers_are_counted_and_others_recorded() {
        let mut t = Tally::default();
        for s in [503, 504, 429, STATUS_ERROR, STATUS_TIMEOUT] {
            assert!(t.retryable(&answer(s, "")));
        }
        assert!(!t.retryable(&answer(500, "")));
        assert!(!t.retryable(&answer(202, "")));
        assert_eq!((t.s503, t.s504, t.s429, t.conn_errors, t.timeouts), (1, 1, 1, 1, 1));
        t.bad(1.5, 7, "POST .../orders", &answer(502, r#"{"code":"X"}"#));
        t.bad(1.6, 8, "POST .../token", &answer(425, ""));
        assert_eq!((t.other_5xx, t.unexpected), (1, 1));
        assert_eq!(t.examples[0], r#"t=1.50s user 7 POST .../orders: HTTP 502 {"code":"X"}"#);
        let mut sum = Tally::default();
        sum.merge(&t);
        sum.merge(&t);
        assert_eq!((sum.s503, sum.other_5xx, sum.examples.len()), (2, 2, 4));
    }

    #[test]
    fn backoff_doubles_to_a_second_with_jitter() {
        let mut b = Backoff::new(42);
        for base in [100, 200, 400, 800, 1_000, 1_000] {
            let d = b.delay().as_millis() as u64;
            assert!((base..base + base / 2).contains(&d), "{d} ms for a {base} ms step");
        }
        b.reset();
        assert_eq!(b.next, Backoff::FIRST);
    }
}

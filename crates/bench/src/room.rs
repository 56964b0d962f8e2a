//! `room`: a sale behind a waiting room, driven through the gateway like its buyers. Every
//! user joins, half of them before the opening (their places drawn at it), the rest after (the
//! back of the queue), on the load's connections as fast as they are answered; then for
//! `--poll-secs` the same connections ask where the joined stand as fast as they are answered
//! (the status route's capacity, set against the sold-out answer's); then everyone polls as a
//! page does, when `poll_after_ms` says, and the admitted buy (path token and order,
//! presenting their admission), until each has an end.
//!
//! Apart from HTTP, the Redis memory a waiting user costs: the product's own join script run
//! directly, pipelined, for as many users and for `--memory-users` (joining a million over
//! HTTP would take minutes), on a fresh key prefix, `INFO memory` read before and after.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use chrono::Utc;
use clap::Args;
use hyper::header::HeaderValue;
use seckill_common::api::Role;
use seckill_common::keys::RedisKeys;
use seckill_common::room::scripts::JOIN;
use seckill_common::room::{QueueState, QueueStatus, RoomRate, WaitingRoom};
use seckill_common::{GoodsId, UserId};
use serde::Serialize;

use crate::api::SalePaths;
use crate::cli::Output;
use crate::client::{Answer, Conn, Endpoint, Req};
use crate::invariants::Check;
use crate::machine::{self, CpuReport, Involved, Watch};
use crate::progress::Progress;
use crate::record::{Call, Clock, Event};
use crate::report::{self, KIND_SCENARIO, LoadShape, Report, RoomMemory, RoomSummary};
use crate::{gate_load, scenario, stats};

const NAME: &str = "room";
/// Half the users join before the opening; an admission lives two minutes (the polls at
/// capacity run between the opening and the buys).
const BEFORE: f64 = 0.5;
const ADMISSION_SECS: u32 = 120;
/// How long a run polls with back-off before giving up the users without an end.
const FINAL_TIMEOUT: Duration = Duration::from_secs(90);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Args, Serialize)]
pub struct RoomArgs {
    /// The gateway's base URL (everything goes through it).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub gateway: String,
    #[arg(long, default_value_t = 20_000)]
    pub users: u64,
    /// Units on sale.
    #[arg(long, default_value_t = 5_000)]
    pub stock: i64,
    /// The room's rate: places admitted a second.
    #[arg(long, default_value_t = 500)]
    pub rate: u32,
    /// The sale opens this long after it is created: the joins before it must fit in.
    #[arg(long, default_value_t = 10.0)]
    pub opens_in_secs: f64,
    /// Keep-alive connections (every phase uses all of them).
    #[arg(long, short = 'c', default_value_t = 200)]
    pub connections: usize,
    /// Seconds of status polls as fast as they are answered, once everyone has joined.
    #[arg(long, default_value_t = 8.0)]
    pub poll_secs: f64,
    /// Order without a path token (for seckill.require_token=false).
    #[arg(long)]
    pub no_path_token: bool,
    /// The first user id (users are consecutive from it).
    #[arg(long, default_value_t = 30_000_000)]
    pub first_user: i64,
    /// Waiting users whose Redis memory is measured with the join script run directly,
    /// besides as many as --users (0: only those).
    #[arg(long, default_value_t = 1_000_000)]
    pub memory_users: u64,
    /// The Redis server of that measurement (not in the report: it may hold a password).
    #[arg(long, env = "SECKILL_REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    #[serde(skip)]
    pub redis_url: String,
    /// Its key prefix: every key under it is deleted before and after.
    #[arg(long, default_value = "seckill-bench-room-memory:")]
    pub memory_prefix: String,
    #[command(flatten)]
    #[serde(skip)]
    pub out: Output,
}

/// One user as the run last saw them.
struct Seen {
    ticket: HeaderValue,
    state: QueueState,
    place: Option<u64>,
    admission: Option<HeaderValue>,
    /// When a page would ask again (`poll_after_ms`).
    due: Instant,
    /// The buy's end: the order's status, or the path token's refusal.
    bought: Option<u16>,
}

/// What every connection works with.
struct Shared {
    paths: SalePaths,
    bearers: Vec<HeaderValue>,
    seen: Vec<Mutex<Option<Seen>>>,
    clock: Clock,
    path_token: bool,
    joins: Arc<AtomicU64>,
}

/// What one connection saw in one phase.
#[derive(Default)]
struct Out {
    events: Vec<Event>,
    /// `(µs, places admitted)`, implied by each waiting answer: place - 1 - ahead.
    admitted: Vec<(u32, u64)>,
    /// The draw's size, once an answer tells it.
    drawn: Option<u64>,
}

impl Out {
    fn add(&mut self, other: Self) {
        self.events.extend(other.events);
        self.admitted.extend(other.admitted);
        self.drawn = self.drawn.max(other.drawn);
    }
}

/// A failed request is made again this much later, as a page would.
const RETRY: Duration = Duration::from_secs(1);

impl Shared {
    fn user(&self, u: usize) -> std::sync::MutexGuard<'_, Option<Seen>> {
        self.seen[u].lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// When user `u` has something to do next: poll while waiting, buy once admitted.
    fn next(&self, u: usize) -> Option<Instant> {
        match self.user(u).as_ref()? {
            s if s.state == QueueState::Waiting => Some(s.due),
            s if s.state == QueueState::Admitted && s.bought.is_none() && s.admission.is_some() => {
                Some(Instant::now())
            }
            _ => None,
        }
    }

    /// A queue route's answer taken in; after a failed one the user asks again when a page
    /// would.
    fn took(&self, u: usize, a: &Answer, out: &mut Out) {
        let at = Instant::now();
        let Some((ticket, s)) =
            a.json::<QueueStatus>().and_then(|s| Some((HeaderValue::from_str(&s.ticket).ok()?, s)))
        else {
            if let Some(x) = self.user(u).as_mut() {
                x.due = at + RETRY;
            }
            return;
        };
        if let (QueueState::Waiting, Some(place), Some(ahead)) = (s.state, s.place, s.ahead) {
            out.admitted.push((self.clock.us(at), place.saturating_sub(ahead + 1)));
        }
        out.drawn = out.drawn.max(s.draw.joined_before);
        let admission = s.admission.as_deref().and_then(|a| HeaderValue::from_str(a).ok());
        *self.user(u) = Some(Seen {
            ticket,
            state: s.state,
            place: s.place,
            admission,
            due: at + s.poll_after_ms.map_or(RETRY, Duration::from_millis),
            bought: None,
        });
    }

    /// Sends `req`, its event recorded as `call`.
    async fn timed(&self, conn: &mut Conn, call: Call, req: Req<'_>, out: &mut Out) -> Answer {
        let start = Instant::now();
        let a = conn.send(req).await;
        out.events.push(self.clock.event(call, a.status, start, Instant::now()));
        a
    }

    /// A join (`Call::Join`), or where one stands, presenting the ticket.
    async fn ask(&self, conn: &mut Conn, u: usize, call: Call, out: &mut Out) {
        let mut req = Req::post(&self.paths.queue);
        if call != Call::Join {
            let Some(ticket) = self.user(u).as_ref().map(|s| s.ticket.clone()) else { return };
            req = Req::get(&self.paths.queue).room_ticket(ticket);
        }
        let a = self.timed(conn, call, req.bearer(&self.bearers[u]), out).await;
        self.took(u, &a, out);
        if call == Call::Join {
            self.joins.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Path token (when asked for) and order, each presenting the admission.
    async fn buy(&self, conn: &mut Conn, u: usize, out: &mut Out) {
        let Some(admission) = self.user(u).as_ref().and_then(|s| s.admission.clone()) else { return };
        let mut order = Req::post(&self.paths.orders).bearer(&self.bearers[u]).admission(admission.clone());
        let mut end = None;
        if self.path_token {
            let req = Req::post(&self.paths.token).bearer(&self.bearers[u]).admission(admission);
            let a = self.timed(conn, Call::PathToken, req, out).await;
            match a.path_token() {
                Some(t) => order = order.path_token(t),
                None => end = Some(a.status),
            }
        }
        if end.is_none() {
            end = Some(self.timed(conn, Call::Order, order, out).await.status);
        }
        if let Some(s) = self.user(u).as_mut() {
            s.bought = end;
        }
    }
}

/// Runs `work` on every connection at once, each in a task of its own; the connections come
/// back with what they saw.
async fn on_every_conn<F, Fut>(conns: Vec<Conn>, work: F) -> anyhow::Result<(Vec<Conn>, Out)>
where
    F: Fn(usize, Conn) -> Fut,
    Fut: Future<Output = (Conn, Out)> + Send + 'static,
{
    let tasks: Vec<_> = conns.into_iter().enumerate().map(|(k, c)| tokio::spawn(work(k, c))).collect();
    let (mut back, mut all) = (Vec::new(), Out::default());
    for t in tasks {
        let (conn, out) = t.await.context("a load worker panicked")?;
        back.push(conn);
        all.add(out);
    }
    Ok((back, all))
}

/// `call` (a join, or where one stands) for the users of `list` in turn, as fast as the
/// connections are answered: each once, or round and round until `until`.
async fn sweep(
    s: &Arc<Shared>,
    conns: Vec<Conn>,
    call: Call,
    list: Vec<usize>,
    until: Option<Instant>,
) -> anyhow::Result<(Vec<Conn>, Out)> {
    let (list, next) = (Arc::new(list), Arc::new(AtomicU64::new(0)));
    on_every_conn(conns, |_, mut conn| {
        let (s, list, next) = (s.clone(), list.clone(), next.clone());
        async move {
            let mut out = Out::default();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                let u = match until {
                    None if i < list.len() => list[i],
                    Some(t) if Instant::now() < t && !list.is_empty() => list[i % list.len()],
                    _ => break,
                };
                s.ask(&mut conn, u, call, &mut out).await;
            }
            (conn, out)
        }
    })
    .await
}

/// Everyone as a page: asks again when due, buys once admitted, until each has an end or
/// `timeout` has passed. Connection k serves users k, k + c, ...
async fn wait_phase(
    s: &Arc<Shared>,
    conns: Vec<Conn>,
    timeout: Duration,
) -> anyhow::Result<(Vec<Conn>, Out)> {
    let (c, deadline) = (conns.len(), Instant::now() + timeout);
    on_every_conn(conns, |k, mut conn| {
        let s = s.clone();
        async move {
            let mut out = Out::default();
            let mut due: BinaryHeap<_> =
                (k..s.seen.len()).step_by(c).filter_map(|u| Some(Reverse((s.next(u)?, u)))).collect();
            while let Some(Reverse((at, u))) = due.pop().filter(|Reverse((at, _))| *at <= deadline) {
                tokio::time::sleep_until(at.into()).await;
                if s.user(u).as_ref().is_some_and(|x| x.state == QueueState::Admitted) {
                    s.buy(&mut conn, u, &mut out).await;
                } else {
                    s.ask(&mut conn, u, Call::QueueWait, &mut out).await;
                }
                if let Some(at) = s.next(u) {
                    due.push(Reverse((at, u)));
                }
            }
            (conn, out)
        }
    })
    .await
}

/// The answers of 200 among `events`, and their latency.
fn answered(events: &[Event]) -> (usize, stats::Latency) {
    let ok: Vec<u64> = events.iter().filter(|e| e.status == 200).map(|e| u64::from(e.latency_us)).collect();
    (ok.len(), stats::latency_of(ok))
}

/// Seconds from the first start to the last end of `events`.
fn window_secs(events: &[Event]) -> f64 {
    let first = events.iter().map(Event::start_us).min().unwrap_or(0);
    f64::from(events.iter().map(|e| e.end_us).max().unwrap_or(0).saturating_sub(first)) / 1e6
}

/// CPU microseconds a request cost each process of the system (1 or more), over `phases` that
/// made `requests`.
fn us_per_request(phases: &[CpuReport], requests: usize) -> BTreeMap<String, f64> {
    let mut us = BTreeMap::new();
    for c in phases {
        for p in c.by_process.iter().filter(|p| p.ours) {
            *us.entry(p.name.clone()).or_default() += p.cores * c.wall_secs * 1e6 / requests.max(1) as f64;
        }
    }
    us.retain(|_, v| *v >= 1.0);
    us
}

/// The CPU of the whole system while `phase` runs.
async fn timed_cpu<T>(procs: &[crate::memory::ProcTarget], phase: impl Future<Output = T>) -> (T, CpuReport) {
    let before = machine::snapshot();
    let out = phase.await;
    (out, machine::cpu_between(&before, &machine::snapshot(), &Involved::system(procs.to_vec())))
}

pub async fn run(a: &RoomArgs) -> anyhow::Result<Report> {
    ensure!(
        a.users > 0 && a.connections > 0 && a.rate > 0,
        "--users, --connections and --rate must be at least 1"
    );
    let procs = a.out.procs();
    let progress = a.out.progress();
    let endpoint = Endpoint::parse(&a.gateway)?;
    let mut admin = Conn::new(endpoint.clone(), REQUEST_TIMEOUT);
    let admin_token = crate::api::dev_token(&mut admin, 1, Role::Admin).await?;
    let users: Vec<i64> = (0..a.users).map(|i| a.first_user + i as i64).collect();
    let bearers = scenario::mint_tokens(&endpoint, &users, a.connections, REQUEST_TIMEOUT, progress).await?;
    let room = WaitingRoom {
        rate: RoomRate::PerSec(a.rate),
        opens_before_secs: 600 + a.opens_in_secs as u32,
        admission_secs: ADMISSION_SECS,
        pow_difficulty: 0,
    };
    let opens_in = chrono::Duration::milliseconds((a.opens_in_secs * 1e3) as i64);
    let label = format!("bench {NAME}");
    let goods =
        crate::api::create_sale(&mut admin, &admin_token, &label, a.stock, 1, -opens_in, Some(room)).await?;
    let opens_at = Instant::now() + (goods.start_at - Utc::now()).to_std().unwrap_or_default();
    let conns = Conn::open_many(&endpoint, a.connections, REQUEST_TIMEOUT).await?;

    let g = goods.id.get();
    let joining = Progress::new(progress, Some(a.users), "joining");
    let s = Arc::new(Shared {
        paths: SalePaths::new(g),
        bearers,
        seen: (0..a.users).map(|_| Mutex::new(None)).collect(),
        clock: Clock::start(),
        path_token: !a.no_path_token,
        joins: joining.counter.clone(),
    });
    let (t0_wall, watch) = (Utc::now(), Watch::start(procs.clone(), Duration::from_millis(100)));
    let early = ((a.users as f64 * BEFORE).round() as usize).min(users.len());
    let (joined_early, before_cpu) =
        timed_cpu(&procs, sweep(&s, conns, Call::Join, (0..early).collect(), None)).await;
    let (conns, mut joins) = joined_early?;
    // After the opening by a margin: the service's clock says which side a join is on.
    tokio::time::sleep_until((opens_at + Duration::from_millis(100)).into()).await;
    let (joined_late, after_cpu) =
        timed_cpu(&procs, sweep(&s, conns, Call::Join, (early..users.len()).collect(), None)).await;
    joining.finish();
    let (conns, late) = joined_late?;
    let join_secs = window_secs(&joins.events) + window_secs(&late.events);
    joins.add(late);
    let joined: Vec<usize> = (0..users.len()).filter(|u| s.user(*u).is_some()).collect();
    let poll_until = Instant::now() + Duration::from_secs_f64(a.poll_secs);
    let (polled, poll_cpu) = timed_cpu(&procs, sweep(&s, conns, Call::Queue, joined, Some(poll_until))).await;
    let (conns, polls) = polled?;
    let (_, waits) = wait_phase(&s, conns, FINAL_TIMEOUT).await?;
    let end_us = s.clock.now_us();
    let cpu = watch.cpu(&Involved::system(procs.clone()));
    let memory_of_procs = watch.memory();

    let (joined, join_lat) = answered(&joins.events);
    let ((polled, poll_lat), poll_secs) = (answered(&polls.events), window_secs(&polls.events));
    let mut all = joins;
    all.add(polls);
    all.add(waits);
    let ends: Vec<Seen> =
        s.seen.iter().filter_map(|m| m.lock().unwrap_or_else(PoisonError::into_inner).take()).collect();
    let count = |f: &dyn Fn(&Seen) -> bool| ends.iter().filter(|x| f(x)).count() as u64;
    let mut summary = RoomSummary {
        goods_id: g,
        users: a.users,
        stock: a.stock,
        rate: a.rate,
        joined: ends.len() as u64,
        joined_before: all.drawn,
        joins_per_sec: stats::per_sec(joined as u64, join_secs),
        join_p50_ms: join_lat.p50_ms,
        join_p99_ms: join_lat.p99_ms,
        polls_per_sec: stats::per_sec(polled as u64, poll_secs),
        poll_p50_ms: poll_lat.p50_ms,
        poll_p99_ms: poll_lat.p99_ms,
        poll_secs: a.poll_secs,
        admitted_per_sec: admitted_rate(&all.admitted),
        admitted: all.admitted.iter().map(|x| x.1).max().unwrap_or(0),
        told_admitted: count(&|x| x.state == QueueState::Admitted),
        bought: count(&|x| x.bought == Some(202)),
        told_sold_out: count(&|x| x.state == QueueState::SoldOut),
        told_closed: count(&|x| x.state == QueueState::Closed),
        unfinished: count(&|x| {
            x.state == QueueState::Waiting || (x.state == QueueState::Admitted && x.bought.is_none())
        }),
        join_us: us_per_request(&[before_cpu, after_cpu], joined),
        poll_us: us_per_request(&[poll_cpu], polled),
        memory: Vec::new(),
    };
    for n in [a.users, a.memory_users].into_iter().filter(|n| *n > 0).collect::<BTreeSet<_>>() {
        summary.memory.push(join_memory(&a.redis_url, &a.memory_prefix, n).await?);
    }
    let open_us = s.clock.us(opens_at);
    let invariants = checks(&summary, &ends, &all.admitted, open_us);
    let params = serde_json::to_value(a)?;
    let notes = cpu.disturbed.then(|| cpu.disturbance()).into_iter().collect();
    let started_at = report::rfc3339(t0_wall);
    Ok(Report {
        load: LoadShape {
            connections: a.connections as u64,
            gateways: vec![a.gateway.clone()],
            ..LoadShape::default()
        },
        room: Some(summary),
        invariants,
        memory: memory_of_procs,
        cpu: Some(cpu),
        notes,
        ..Report::of_calls(KIND_SCENARIO, NAME, started_at, params, &all.events, end_us)
    })
}

/// Places admitted per second: the count the earliest and the latest waiting answers imply.
fn admitted_rate(samples: &[(u32, u64)]) -> Option<f64> {
    let first = samples.iter().min_by_key(|x| x.0)?;
    let last = samples.iter().max_by_key(|x| x.0)?;
    (last.0 > first.0).then(|| last.1.saturating_sub(first.1) as f64 / (f64::from(last.0 - first.0) / 1e6))
}

/// Everyone joined; no place given twice; no more buys than units; never more admitted than
/// the rate allows since the opening (plus a second's lease and a tick).
fn checks(r: &RoomSummary, ends: &[Seen], admitted: &[(u32, u64)], open_us: u32) -> Vec<Check> {
    let places: Vec<u64> = ends.iter().filter_map(|x| x.place).collect();
    let distinct = places.iter().collect::<HashSet<_>>().len();
    let ahead = admitted.iter().find(|(t, n)| {
        let since = f64::from(t.saturating_sub(open_us)) / 1e6;
        *n as f64 > (f64::from(r.rate) * (since + 1.0)).ceil() + 2.0
    });
    let check = |name: &str, ok: bool, detail: String| Check { name: name.into(), ok, detail };
    vec![
        check("every user joined", r.joined == r.users, format!("{} of {} users", r.joined, r.users)),
        check(
            "every place given once",
            distinct == places.len(),
            format!("{} places seen, {distinct} distinct", places.len()),
        ),
        check("no oversell", r.bought <= r.stock as u64, format!("{} buys of {} units", r.bought, r.stock)),
        check(
            "admitted no faster than the rate",
            ahead.is_none(),
            match ahead {
                Some((t, n)) => {
                    format!(
                        "{n} admitted {:.2} s after the opening",
                        f64::from(t.saturating_sub(open_us)) / 1e6
                    )
                }
                None => {
                    format!("{} answers, none ahead of {} a second since the opening", admitted.len(), r.rate)
                }
            },
        ),
    ]
}

/// Redis memory a waiting user costs: the join script run directly for `users` users of one
/// sale before its opening, pipelined, on the fresh prefix `prefix`; `INFO memory` before and
/// after, then every key under the prefix deleted.
async fn join_memory(url: &str, prefix: &str, users: u64) -> anyhow::Result<RoomMemory> {
    ensure!(!prefix.is_empty(), "--memory-prefix must not be empty: every key under it is deleted");
    let mut conn = redis::Client::open(url)?.get_multiplexed_async_connection().await?;
    seckill_infra::redis::delete_matching(url, &format!("{prefix}*")).await?;
    let (keys, g) = (RedisKeys::new(prefix), GoodsId::new(1).context("a goods id")?);
    let (room, now) = (keys.room(g), Utc::now().timestamp_millis());
    let cap = users.to_string();
    let _: () = redis::cmd("HSET")
        .arg(&room)
        .arg(&["before", "0", "before_cap", &cap])
        .query_async(&mut conn)
        .await?;
    let sha: String = redis::Script::new(JOIN).load_async(&mut conn).await?;
    let before = used_memory(&mut conn).await?;
    let (cpu_before, _) = gate_load::node_counters(url).await?;
    let started = Instant::now();
    for first in (1..=users).step_by(1_000) {
        let mut pipe = redis::pipe();
        for u in first..(first + 1_000).min(users + 1) {
            let member = keys.room_members(g, UserId::new(u as i64).context("a user id")?);
            // KEYS: room, member group, challenge (none: the room); ARGV: user, now, start, no
            // ticket, no work asked, no challenge.
            pipe.cmd("EVALSHA").arg(&sha).arg(3).arg(&room).arg(member).arg(&room);
            pipe.arg(u).arg(now).arg(now + 3_600_000).arg("").arg("0").arg("");
        }
        let codes: Vec<i64> = pipe.query_async(&mut conn).await?;
        ensure!(
            codes.iter().all(|c| *c >= 0),
            "the join script refused: {:?}",
            codes.iter().find(|c| **c < 0)
        );
    }
    let secs = started.elapsed().as_secs_f64();
    let (cpu_after, _) = gate_load::node_counters(url).await?;
    let after = used_memory(&mut conn).await?;
    seckill_infra::redis::delete_matching(url, &format!("{prefix}*")).await?;
    Ok(RoomMemory {
        users,
        bytes: after - before,
        bytes_per_user: (after - before) as f64 / users as f64,
        joins_per_sec: users as f64 / secs,
        redis_us_per_join: (cpu_after - cpu_before) * 1e6 / users as f64,
    })
}

/// Bytes Redis has allocated (`INFO memory`'s `used_memory`).
async fn used_memory(conn: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<i64> {
    let info: String = redis::cmd("INFO").arg("memory").query_async(conn).await?;
    info.lines().find_map(|l| l.strip_prefix("used_memory:")?.trim().parse().ok()).context("no used_memory")
}

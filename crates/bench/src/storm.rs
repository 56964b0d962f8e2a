//! The expiry storm, measured from outside. After a flash sale most winners never pay, and one
//! order TTL later every unpaid order expires at once: order-service expires them, stock-service
//! gives the units back in PostgreSQL, seckill-service puts them back in Redis.
//!
//! The run: a spike on the quiet system (the baseline); a sale of N units bought by N users, one
//! each; order-service stopped (SIGSTOP) just before the first of those orders comes due and
//! resumed (SIGCONT) once the last has, so every expiry waits in the broker at once; at the
//! resume a second spike starts on a sale of its own, while the sale's stock is polled at the
//! authority (`GET /api/goods/{id}`) and in Redis (the admin audit) until every unit is back.
//! Then the sale is checked (every unit back, the audit agreeing) and a sample of the expired
//! buyers buy again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use chrono::{DateTime, Utc};
use hyper::header::HeaderValue;
use seckill_common::api::{Goods, Order, Role, SaleAudit};
use serde_json::json;

use crate::api::{self, SalePaths};
use crate::busy::BusyRetry;
use crate::cli::{self, Output};
use crate::client::{Answer, Conn, Endpoint, Req};
use crate::invariants::{self, Rebuy};
use crate::machine::{CpuReport, Involved, Watch};
use crate::memory::ProcMemory;
use crate::progress::Progress;
use crate::record::{Clock, Event};
use crate::report::{self, KIND_SCENARIO, LoadShape, Report, SpikeFigures, StormSummary};
use crate::scenario::{self, Paused, Scenario, ScenarioConfig};
use crate::stats;

/// The sale's stock at the authority is a cheap public read: polled often.
const DB_POLL: Duration = Duration::from_millis(50);
/// The audit compares Redis, the ledger and the orders (three services): polled less often.
const AUDIT_POLL: Duration = Duration::from_millis(250);
/// order-service is stopped this long before the first order comes due.
const STOP_LEAD: Duration = Duration::from_secs(2);
/// Stopping later than this before the first order comes due is too late: its expiry may be
/// on its way already.
const MIN_LEAD: Duration = Duration::from_millis(500);
/// The spike during the storm is set up (sale, tokens) about this long before order-service is
/// stopped, not a whole TTL before: its tokens stay fresh whatever the TTL.
const PREPARE_LEAD: Duration = Duration::from_secs(30);
/// Its connections are opened again this long before the resume (the gateway drops one that
/// carried no request for a few seconds).
const REOPEN_LEAD: Duration = Duration::from_secs(1);
/// How far an order's lifetime (`expires_at - created_at`) may be from `--order-ttl-secs`:
/// order-service takes `expires_at` just before the insert.
const TTL_TOLERANCE_S: f64 = 2.0;

/// Everything a storm run needs: the `storm` subcommand's options.
#[derive(Debug, Clone, clap::Args)]
pub struct StormConfig {
    /// The gateway's base URL (everything goes through it).
    #[arg(long, default_value = "http://127.0.0.1:8080", value_parser = cli::one_gateway)]
    pub gateway: String,
    /// Buyers of the sale whose orders expire together, one unit each (the sale has as many).
    #[arg(long, default_value_t = 50_000)]
    pub users: u64,
    /// Keep-alive connections firing clicks (the sale's buyers, each spike, the buyers again).
    #[arg(long, short = 'c', default_value_t = 500)]
    pub connections: usize,
    /// Users of each spike (without the storm, and during it).
    #[arg(long, default_value_t = 20_000)]
    pub spike_users: u64,
    /// Units of each spike's sale.
    #[arg(long, default_value_t = 1_000)]
    pub spike_stock: i64,
    /// The order-service's pid (repeatable: every replica's): stopped (SIGSTOP) while the orders
    /// come due, resumed (SIGCONT) when the storm starts.
    #[arg(long = "pause-pid", required = true)]
    pub pause_pids: Vec<u32>,
    /// The order-service's `order.ttl_secs` (SECKILL__ORDER__TTL_SECS), checked against an
    /// order: the orders must not come due before every buyer has one.
    #[arg(long = "order-ttl-secs", value_name = "ORDER_TTL_SECS", value_parser = cli::secs)]
    pub order_ttl: Duration,
    /// Seconds after the last order came due before order-service is resumed.
    #[arg(long = "margin-secs", value_name = "MARGIN_SECS", default_value = "2", value_parser = cli::secs)]
    pub margin: Duration,
    /// Expired buyers who buy again after the storm (all must be accepted and end in success).
    #[arg(long, default_value_t = 1_000)]
    pub rebuy_sample: u64,
    /// Seconds to wait, from the resume, for every unit to be back.
    #[arg(long, default_value = "300", value_parser = cli::secs)]
    pub storm_timeout: Duration,
    /// Order without a path token (for seckill.require_token=false).
    #[arg(long = "no-path-token", action = clap::ArgAction::SetFalse)]
    pub path_token: bool,
    #[command(flatten)]
    pub busy: BusyRetry,
    /// The sale's first buyer (buyers are consecutive from it; each spike's users follow).
    #[arg(long, default_value_t = 8_000_000)]
    pub first_user: i64,
    /// Per-request timeout.
    #[arg(long = "timeout-ms", value_name = "TIMEOUT_MS", default_value = "10000", value_parser = cli::millis)]
    pub request_timeout: Duration,
    /// The report's name.
    #[arg(long, default_value = "storm")]
    pub name: String,
    #[command(flatten)]
    pub out: Output,
}

impl StormConfig {
    /// Refuses settings the run cannot work with, before anything is created.
    pub fn check(&self) -> anyhow::Result<()> {
        if self.users == 0 || self.connections == 0 || self.spike_users == 0 || self.spike_stock < 1 {
            bail!("--users, --connections, --spike-users and --spike-stock must be at least 1");
        }
        if self.pause_pids.is_empty() {
            bail!(
                "--pause-pid: the order-service's pid (every replica's) is needed, so that the expiries wait in \
                 the broker while the orders come due"
            );
        }
        if self.order_ttl.is_zero() {
            bail!("--order-ttl-secs must be at least 1 (order-service's order.ttl_secs)");
        }
        if self.rebuy_sample == 0 || self.rebuy_sample > self.users {
            bail!("--rebuy-sample {} must be between 1 and the {} buyers", self.rebuy_sample, self.users);
        }
        let last = u64::try_from(self.first_user)
            .ok()
            .and_then(|f| f.checked_add(self.users)?.checked_add(self.spike_users.checked_mul(2)?))
            .and_then(|l| i64::try_from(l).ok());
        if self.first_user < 1 || last.is_none() {
            bail!("--first-user {}: the users would not all be valid ids", self.first_user);
        }
        Ok(())
    }

    /// A sub-run: `name` after the storm's name, `users` from `first_user`.
    fn sub(&self, scenario: Scenario, name: &str, users: u64, stock: i64, first_user: i64) -> ScenarioConfig {
        ScenarioConfig {
            name: Some(format!("{} {name}", self.name)),
            users: Some(users),
            stock: Some(stock),
            connections: Some(self.connections),
            path_token: self.path_token,
            busy: self.busy,
            first_user,
            request_timeout: self.request_timeout,
            out: self.out.clone(),
            ..ScenarioConfig::new(scenario, self.gateway.clone())
        }
    }

    /// The sale whose orders expire: every buyer gets one unit (closed loop, as `drain`).
    fn sale(&self) -> ScenarioConfig {
        self.sub(Scenario::Drain, "sale", self.users, self.users as i64, self.first_user)
    }

    fn baseline_spike(&self) -> ScenarioConfig {
        let first = self.first_user + self.users as i64;
        self.sub(Scenario::Spike, "spike without the storm", self.spike_users, self.spike_stock, first)
    }

    fn storm_spike(&self) -> ScenarioConfig {
        let first = self.first_user + (self.users + self.spike_users) as i64;
        let mut c =
            self.sub(Scenario::Spike, "spike during the storm", self.spike_users, self.spike_stock, first);
        // Its orders queue behind nothing, but the consumer shares the cores with the storm.
        c.final_timeout = Some(c.final_timeout().max(self.storm_timeout));
        c
    }

    /// The first `rebuy_sample` buyers of the sale, buying on it again.
    fn rebuy(&self, goods_id: i64) -> ScenarioConfig {
        let mut c =
            self.sub(Scenario::Drain, "buying again", self.rebuy_sample, self.users as i64, self.first_user);
        c.sale = Some(goods_id);
        c.poll_during_load = Some(true);
        c
    }

    fn params(&self) -> serde_json::Value {
        json!({
            "scenario": "storm",
            "gateway": self.gateway,
            "users": self.users,
            "connections": self.connections,
            "spike_users": self.spike_users,
            "spike_stock": self.spike_stock,
            "order_ttl_secs": self.order_ttl.as_secs(),
            "margin_secs": self.margin.as_secs_f64(),
            "rebuy_sample": self.rebuy_sample,
            "path_token": self.path_token,
            "busy_retries": self.busy.retries,
            "first_user": self.first_user,
            "paused": self.pause_pids,
            "db_poll_ms": DB_POLL.as_millis() as u64,
            "audit_poll_ms": AUDIT_POLL.as_millis() as u64,
            "storm_timeout_secs": self.storm_timeout.as_secs_f64(),
        })
    }

    fn say(&self, what: &str) {
        if self.out.progress() {
            eprintln!("storm: {what}");
        }
    }
}

/// Runs the storm against a running system and returns its report.
pub async fn run(cfg: &StormConfig) -> anyhow::Result<Report> {
    cfg.check()?;
    cfg.say(&format!("a spike on the quiet system: {} users, {} units", cfg.spike_users, cfg.spike_stock));
    let baseline = scenario::run(&cfg.baseline_spike()).await.context("the spike without the storm")?;

    cfg.say(&format!("{0} buyers, one unit each, on a sale of {0} units", cfg.users));
    let sale = scenario::run(&cfg.sale()).await.context("the sale whose orders expire")?;
    let bought = Bought::of(&sale, cfg.users)?;
    let g = bought.goods_id;
    let mut admin = Conn::new(Endpoint::parse(&cfg.gateway)?, cfg.request_timeout);
    let admin_bearer = api::dev_token(&mut admin, 1, Role::Admin).await?;
    let order =
        some_order(&mut admin, g, cfg.first_user).await.context("reading one of the sale's orders back")?;
    ttl_matches(&order, cfg.order_ttl)?;

    let held = hold_expiries(cfg, &bought, &mut admin).await?;
    let storm = release(cfg, held, g, &admin_bearer).await?;

    let stock_available = api::goods(&mut admin, g).await.ok().map(|x| x.stock_available);
    let audit = agreeing_audit(&mut admin, &admin_bearer, g).await;
    cfg.say(&format!("{} expired buyers buying again", cfg.rebuy_sample));
    let rebuy = scenario::run(&cfg.rebuy(g)).await.context("the expired buyers buying again")?;
    let rebought = rebuy.buy.clone().unwrap_or_default();

    let mut checks = invariants::storm(
        cfg.users as i64,
        stock_available,
        audit.as_ref(),
        Rebuy { sample: cfg.rebuy_sample, accepted: rebought.accepted, success: rebought.success },
    );
    let mut notes = Vec::new();
    for (what, r) in [
        ("the spike without the storm", &baseline),
        ("the sale", &sale),
        ("the spike during the storm", &storm.during),
        ("buying again", &rebuy),
    ] {
        checks.extend(invariants::prefixed(what, &r.invariants));
        notes.extend(r.notes.iter().map(|n| format!("{what}: {n}")));
    }
    notes.push(format!(
        "order {} of the sale: created {}, expires {} (order.ttl_secs {} s, as --order-ttl-secs)",
        order.id,
        order.created_at.format("%H:%M:%S%.3f"),
        order.expires_at.format("%H:%M:%S%.3f"),
        cfg.order_ttl.as_secs()
    ));
    if storm.db.failed + storm.redis.failed > 0 {
        notes.push(format!(
            "polls without a figure during the storm: {} of the sale, {} audits",
            storm.db.failed, storm.redis.failed
        ));
    }
    if storm.cpu.disturbed {
        notes.push(storm.cpu.disturbance());
    }
    let summary = summary(
        cfg,
        &bought,
        storm.paused_secs,
        (&storm.db, &storm.redis),
        (&baseline, &storm.during),
        &rebuy,
    );
    let duration_secs = storm.redis.reached_s().or(storm.db.reached_s()).unwrap_or(storm.watched_secs);
    let timeline = storm_timeline(storm.t0_wall, &storm.during, storm.spike_events, &storm.db, &storm.redis);
    Ok(Report {
        kind: KIND_SCENARIO.into(),
        name: cfg.name.clone(),
        started_at: report::rfc3339(storm.t0_wall),
        command: report::this_command(),
        params: cfg.params(),
        load: LoadShape {
            connections: cfg.connections as u64,
            rate: None,
            gateways: vec![cfg.gateway.clone()],
            ..LoadShape::default()
        },
        duration_secs,
        calls: storm.during.calls.clone(),
        buy: None,
        drain: None,
        sync: None,
        storm: Some(summary),
        room: None,
        push: None,
        invariants: checks,
        memory: storm.memory,
        cpu: Some(storm.cpu),
        timeline,
        notes,
    })
}

/// order-service held stopped with every expiry waiting in the broker, and the spike ready.
struct Held {
    paused: Paused,
    stopped: Instant,
    resume_at: DateTime<Utc>,
    spike: ScenarioConfig,
    prepared: scenario::Prepared,
}

/// Sets the spike up while the orders are not yet due, stops order-service just before the
/// first comes due (checking that none has come back yet), and waits until the last has.
async fn hold_expiries(cfg: &StormConfig, bought: &Bought, admin: &mut Conn) -> anyhow::Result<Held> {
    let plan = Plan::new(bought.first_order, bought.last_final, cfg.order_ttl, cfg.margin)?;
    plan.in_time(Utc::now(), bought, cfg.order_ttl)?;
    sleep_until(plan.stop_at - chrono::Duration::from_std(PREPARE_LEAD)?).await;
    let spike = cfg.storm_spike();
    let mut prepared = scenario::prepare(&spike).await.context("setting up the spike during the storm")?;
    cfg.say(&format!(
        "every order written; order-service is stopped at {}, {} s before the first comes due, and resumed at {}",
        plan.stop_at.format("%H:%M:%S%.3f"),
        STOP_LEAD.as_secs(),
        plan.resume_at.format("%H:%M:%S%.3f")
    ));
    sleep_until(plan.stop_at).await;
    plan.in_time(Utc::now(), bought, cfg.order_ttl)?;
    let paused = Paused::stop(&cfg.pause_pids)?;
    let stopped = Instant::now();
    let g = bought.goods_id;
    let available = api::goods(admin, g).await.context("reading the sale before the storm")?;
    if available.stock_available != 0 {
        bail!(
            "{} units of sale {g} were back before order-service was stopped: some orders expired already; raise \
             --order-ttl-secs (and order-service's SECKILL__ORDER__TTL_SECS)",
            available.stock_available
        );
    }
    sleep_until(plan.resume_at - chrono::Duration::from_std(REOPEN_LEAD)?).await;
    prepared.reopen().await.context("opening the spike's connections")?;
    sleep_until(plan.resume_at).await;
    Ok(Held { paused, stopped, resume_at: plan.resume_at, spike, prepared })
}

/// What happened from the resume.
struct Storm {
    t0_wall: DateTime<Utc>,
    paused_secs: f64,
    db: Polled,
    redis: Polled,
    /// Where the CPU went from the resume until every unit was back (or the timeout), and
    /// how long that was.
    cpu: CpuReport,
    watched_secs: f64,
    /// The processes' memory from the resume until the spike's results were final too.
    memory: Vec<ProcMemory>,
    /// The spike's report, and its calls (times from its own clock's start).
    during: Report,
    spike_events: Vec<Event>,
}

/// Resumes order-service and starts the spike at the same instant, then follows the units
/// back until every one is, and the spike to its end.
async fn release(cfg: &StormConfig, held: Held, g: i64, admin: &HeaderValue) -> anyhow::Result<Storm> {
    let Held { mut paused, stopped, resume_at, spike, prepared } = held;
    cfg.say(&format!(
        "resuming order-service {:.1} s after the last order came due: {} expiries waiting, a spike starting",
        cfg.margin.as_secs_f64() + (Utc::now() - resume_at).num_milliseconds() as f64 / 1e3,
        cfg.users
    ));
    let procs = cfg.out.procs();
    let watch = Watch::start(procs.clone(), Duration::from_millis(100));
    let t0_wall = Utc::now();
    let clock = Clock::start();
    paused.resume();
    let paused_secs = stopped.elapsed().as_secs_f64();
    let spike = tokio::spawn(async move { scenario::run_prepared(&spike, prepared).await });
    let (db, redis) = follow_the_storm(cfg, g, admin, clock).await?;
    let cpu = watch.cpu(&Involved::system(procs));
    let watched_secs = f64::from(clock.now_us()) / 1e6;
    let (during, spike_events) = spike.await.context("the spike during the storm panicked")??;
    Ok(Storm {
        t0_wall,
        paused_secs,
        db,
        redis,
        cpu,
        watched_secs,
        memory: watch.memory(),
        during,
        spike_events,
    })
}

/// Polls the sale at the authority and in Redis, side by side, until every unit is back in
/// each (or the timeout); a bar follows the authority's figure.
async fn follow_the_storm(
    cfg: &StormConfig,
    g: i64,
    admin: &HeaderValue,
    clock: Clock,
) -> anyhow::Result<(Polled, Polled)> {
    let endpoint = Endpoint::parse(&cfg.gateway)?;
    let deadline = clock.t0() + cfg.storm_timeout;
    let units = cfg.users as i64;
    let progress = Progress::new(cfg.out.progress(), Some(cfg.users), "units back");
    let db = Poll {
        conn: Conn::new(endpoint.clone(), cfg.request_timeout),
        path: api::goods_path(g),
        bearer: None,
        every: DB_POLL,
        want: units,
        clock,
        deadline,
    };
    let audit = Poll {
        conn: Conn::new(endpoint, cfg.request_timeout),
        path: api::audit_path(g),
        bearer: Some(admin.clone()),
        every: AUDIT_POLL,
        want: units,
        clock,
        deadline,
    };
    let available = |a: &Answer| a.json::<Goods>().map(|x| x.stock_available);
    let in_redis = |a: &Answer| a.json::<SaleAudit>().and_then(|a| a.redis.stock);
    let out = tokio::join!(db.until(available, Some(&progress.counter)), audit.until(in_redis, None));
    progress.finish();
    Ok(out)
}

/// One figure polled until it reaches a value.
struct Poll {
    conn: Conn,
    path: String,
    bearer: Option<HeaderValue>,
    every: Duration,
    want: i64,
    clock: Clock,
    deadline: Instant,
}

/// What a [`Poll`] read.
#[derive(Debug, Default)]
struct Polled {
    /// `(µs since the resume, figure)` of every answer read.
    samples: Vec<(u32, i64)>,
    /// When an answer first showed the figure wanted.
    reached_us: Option<u32>,
    /// Polls without a figure (an error, a timeout, a body not understood).
    failed: u64,
}

impl Polled {
    fn reached_s(&self) -> Option<f64> {
        self.reached_us.map(|us| f64::from(us) / 1e6)
    }
}

impl Poll {
    /// Reads the figure every `every` until it is `want` or more, or the deadline passed;
    /// `seen` follows the latest figure.
    async fn until(
        mut self,
        read: impl Fn(&Answer) -> Option<i64>,
        seen: Option<&std::sync::Arc<AtomicU64>>,
    ) -> Polled {
        let mut out = Polled::default();
        loop {
            let start = Instant::now();
            if start >= self.deadline {
                break;
            }
            let mut req = Req::get(&self.path);
            if let Some(b) = &self.bearer {
                req = req.bearer(b);
            }
            let a = self.conn.send(req).await;
            let at = self.clock.now_us();
            match read(&a) {
                Some(v) => {
                    out.samples.push((at, v));
                    if let Some(seen) = seen {
                        seen.store(u64::try_from(v).unwrap_or(0), Ordering::Relaxed);
                    }
                    if v >= self.want {
                        out.reached_us = Some(at);
                        break;
                    }
                }
                None => out.failed += 1,
            }
            tokio::time::sleep_until((start + self.every).into()).await;
        }
        out
    }
}

/// The audit once the storm is over, read until it agrees (the last units' messages may still
/// be settling), for at most a few seconds; `None` when it never answered.
async fn agreeing_audit(conn: &mut Conn, admin: &HeaderValue, g: i64) -> Option<SaleAudit> {
    let mut last = None;
    for _ in 0..20 {
        if let Ok(audit) = api::audit(conn, admin, g).await {
            let agrees = audit.agrees;
            last = Some(audit);
            if agrees {
                break;
            }
        }
        tokio::time::sleep(AUDIT_POLL).await;
    }
    last
}

/// One order of the sale: `user`'s (a buyer of it), through their result.
async fn some_order(conn: &mut Conn, g: i64, user: i64) -> anyhow::Result<Order> {
    let bearer = api::dev_token(conn, user, Role::User).await?;
    let result = api::result(conn, &SalePaths::new(g), &bearer).await?;
    let id = result.order_id.with_context(|| format!("user {user} has no order: {:?}", result.status))?;
    Ok(api::order(conn, &bearer, id.get()).await?)
}

/// The orders live `ttl` (order-service's `order.ttl_secs`), or the timing would be wrong.
fn ttl_matches(order: &Order, ttl: Duration) -> anyhow::Result<()> {
    let lived = (order.expires_at - order.created_at).num_milliseconds() as f64 / 1e3;
    if (lived - ttl.as_secs_f64()).abs() > TTL_TOLERANCE_S {
        bail!(
            "order {} lives {lived:.1} s (created {}, expires {}), not --order-ttl-secs {}: pass the order-service's \
             order.ttl_secs (SECKILL__ORDER__TTL_SECS)",
            order.id,
            order.created_at,
            order.expires_at,
            ttl.as_secs()
        );
    }
    Ok(())
}

/// The sale whose orders expire, from its run's report.
#[derive(Debug, Clone, PartialEq)]
struct Bought {
    goods_id: i64,
    buyers: u64,
    /// The first order row written (its `created_at`): the first to come due.
    first_order: DateTime<Utc>,
    /// The last result seen final: every order and its expiry timer were written by then.
    last_final: DateTime<Utc>,
    accepted_per_sec: f64,
    /// First request to the last result seen final.
    secs: f64,
}

impl Bought {
    fn of(r: &Report, users: u64) -> anyhow::Result<Self> {
        let buy = r.buy.as_ref().context("the sale's run has no buyers' figures")?;
        let drain = r.drain.as_ref().context("the sale's run has no drain figures")?;
        if buy.success != users || !r.invariants_hold() {
            let broken: Vec<&str> = r.invariants.iter().filter(|c| !c.ok).map(|c| c.name.as_str()).collect();
            bail!(
                "the sale of {users} units ended with {} orders, not {users} (broken: {}): no storm to measure",
                buy.success,
                if broken.is_empty() { "none".into() } else { broken.join(", ") }
            );
        }
        let t0 = DateTime::parse_from_rfc3339(&r.started_at)
            .with_context(|| format!("the sale's start `{}`", r.started_at))?
            .with_timezone(&Utc);
        let at = |s: f64| t0 + chrono::Duration::microseconds((s * 1e6) as i64);
        let secs = drain.first_request_to_last_final_s.context("no result of the sale was seen final")?;
        Ok(Self {
            goods_id: buy.goods_id,
            buyers: users,
            // Without the order rows read back: the start, the earliest any order can be.
            first_order: at(drain.first_order_s.unwrap_or(0.0).max(0.0)),
            last_final: at(secs),
            accepted_per_sec: drain.accepted_per_sec,
            secs,
        })
    }
}

/// When order-service is stopped and resumed.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Plan {
    /// The first order comes due (its expiry timer cannot fire before).
    first_due: DateTime<Utc>,
    stop_at: DateTime<Utc>,
    /// The last order came due (its timer was set before its result turned final) `margin` ago.
    resume_at: DateTime<Utc>,
}

impl Plan {
    fn new(
        first_order: DateTime<Utc>,
        last_final: DateTime<Utc>,
        ttl: Duration,
        margin: Duration,
    ) -> anyhow::Result<Self> {
        let ttl = chrono::Duration::from_std(ttl)?;
        let first_due = first_order + ttl;
        Ok(Self {
            first_due,
            stop_at: first_due - chrono::Duration::from_std(STOP_LEAD)?,
            resume_at: last_final + ttl + chrono::Duration::from_std(margin)?,
        })
    }

    /// Order-service can still be stopped at `now` before any order comes due; else the TTL is
    /// too short for the load.
    fn in_time(&self, now: DateTime<Utc>, bought: &Bought, ttl: Duration) -> anyhow::Result<()> {
        let latest = self.first_due - chrono::Duration::from_std(MIN_LEAD)?;
        if now < latest {
            return Ok(());
        }
        let since_first = (now - bought.first_order).num_milliseconds() as f64 / 1e3;
        bail!(
            "the TTL is too short for this load: the sale's first order comes due at {} ({} s after it was written), \
             too soon to stop order-service before it ({:.1} s since that order; the {} buyers' results were all \
             final {:.1} s after the first request); raise --order-ttl-secs (and order-service's \
             SECKILL__ORDER__TTL_SECS) to {:.0} s or more",
            self.first_due.format("%H:%M:%S%.3f"),
            ttl.as_secs(),
            since_first,
            bought.buyers,
            bought.secs,
            (since_first + 15.0).ceil()
        )
    }
}

/// The storm's figures, with the spikes' and the buying again.
fn summary(
    cfg: &StormConfig,
    bought: &Bought,
    paused_secs: f64,
    (db, redis): (&Polled, &Polled),
    (baseline, during): (&Report, &Report),
    rebuy: &Report,
) -> StormSummary {
    let (base, dur) = (SpikeFigures::of(baseline), SpikeFigures::of(during));
    let rebought = rebuy.buy.clone().unwrap_or_default();
    StormSummary {
        goods_id: bought.goods_id,
        orders: cfg.users,
        order_ttl_secs: cfg.order_ttl.as_secs(),
        buy_accepted_per_sec: bought.accepted_per_sec,
        buy_secs: Some(bought.secs),
        paused_secs,
        margin_secs: cfg.margin.as_secs_f64(),
        db_secs: db.reached_s(),
        redis_secs: redis.reached_s(),
        db_per_sec: StormSummary::per_sec(cfg.users, db.reached_s()),
        redis_per_sec: StormSummary::per_sec(cfg.users, redis.reached_s()),
        accepted_ratio: StormSummary::ratio(dur.accepted_per_sec, base.accepted_per_sec),
        clicks_ratio: StormSummary::ratio(dur.clicks_per_sec, base.clicks_per_sec),
        baseline: base,
        during: dur,
        rebuy_sample: cfg.rebuy_sample,
        rebuy_accepted: rebought.accepted,
        rebuy_success: rebought.success,
    }
}

/// The spike's calls and the units coming back, on one time axis from the resume.
fn storm_timeline(
    t0_wall: DateTime<Utc>,
    during: &Report,
    mut events: Vec<Event>,
    db: &Polled,
    redis: &Polled,
) -> stats::Timeline {
    // The spike's clock started a moment after the resume.
    let offset = DateTime::parse_from_rfc3339(&during.started_at)
        .ok()
        .and_then(|s| (s.with_timezone(&Utc) - t0_wall).num_microseconds())
        .and_then(|us| u32::try_from(us).ok())
        .unwrap_or(0);
    for e in &mut events {
        e.end_us = e.end_us.saturating_add(offset);
    }
    let marks = vec![
        ("units back in PostgreSQL".to_owned(), arrivals(&db.samples)),
        ("units back in Redis".to_owned(), arrivals(&redis.samples)),
    ];
    let span = events.iter().map(|e| e.end_us).chain(marks.iter().flat_map(|m| m.1.iter().copied())).max();
    stats::timeline(&events, &marks, stats::bucket_ms_for(u64::from(span.unwrap_or(0))))
}

/// One time (µs) per unit back, from polls of how many are back: the units a poll found more
/// than the one before came back evenly between the two (none were back at time 0).
fn arrivals(samples: &[(u32, i64)]) -> Vec<u32> {
    let mut marks = Vec::new();
    let (mut t0, mut back) = (0u32, 0i64);
    for &(at, v) in samples {
        if v > back {
            let k = (v - back) as u64;
            let span = u64::from(at.saturating_sub(t0));
            marks.extend((1..=k).map(|j| t0 + (span * j / k) as u32));
            back = v;
        }
        t0 = at;
    }
    marks
}

/// Sleeps until the wall clock reads `at` (at once if it is past).
async fn sleep_until(at: DateTime<Utc>) {
    if let Ok(wait) = (at - Utc::now()).to_std() {
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invariants::Check;
    use crate::report::{BuySummary, DrainSummary};

    fn cfg() -> StormConfig {
        cli::parse_options(&["--pause-pid", "42", "--order-ttl-secs", "60"]).unwrap()
    }

    #[test]
    fn settings_the_run_cannot_work_with_are_refused() {
        cfg().check().unwrap();
        let bad: [fn(&mut StormConfig); 8] = [
            |c| c.pause_pids.clear(),
            |c| c.order_ttl = Duration::ZERO,
            |c| c.rebuy_sample = c.users + 1,
            |c| c.rebuy_sample = 0,
            |c| c.users = 0,
            |c| c.spike_stock = 0,
            |c| c.first_user = 0,
            |c| c.first_user = i64::MAX - 10,
        ];
        for (i, spoil) in bad.iter().enumerate() {
            let mut c = cfg();
            spoil(&mut c);
            assert!(c.check().is_err(), "case {i}: {c:?}");
        }
        let mut c = cfg();
        c.pause_pids.clear();
        assert!(c.check().unwrap_err().to_string().contains("--pause-pid"));
    }

    #[test]
    fn the_sub_runs_take_users_of_their_own() {
        let mut c = cfg();
        (c.users, c.spike_users, c.rebuy_sample, c.first_user, c.path_token) =
            (5_000, 2_000, 100, 1_000, false);
        let sale = c.sale();
        assert_eq!((sale.first_user, sale.users(), sale.stock(), sale.sale), (1_000, 5_000, 5_000, None));
        let base = c.baseline_spike();
        assert_eq!((base.first_user, base.users(), base.stock()), (6_000, 2_000, 1_000));
        let during = c.storm_spike();
        assert_eq!((during.first_user, during.users()), (8_000, 2_000));
        assert!(during.final_timeout() >= c.storm_timeout);
        let again = c.rebuy(77);
        assert_eq!(
            (again.first_user, again.users(), again.stock(), again.sale),
            (1_000, 100, 5_000, Some(77))
        );
        assert!(
            [&sale, &base, &during, &again].iter().all(|s| !s.path_token && s.name().starts_with("storm "))
        );
    }

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    /// The sale's report: its clock started at 12:00:00, the first order written 0.5 s later,
    /// the last result final at 20 s.
    fn sale_report(success: u64, ok: bool) -> Report {
        let mut r = Report::of_calls(
            KIND_SCENARIO,
            "storm sale",
            "2026-01-01T12:00:00.000Z".into(),
            json!({}),
            &[],
            0,
        );
        r.buy = Some(BuySummary { goods_id: 7, success, ..BuySummary::default() });
        r.drain = Some(DrainSummary {
            accepted_per_sec: 2_500.0,
            first_order_s: Some(0.5),
            first_request_to_last_final_s: Some(20.0),
            ..DrainSummary::default()
        });
        r.invariants = vec![Check { name: "no oversell".into(), ok, detail: String::new() }];
        r
    }

    #[test]
    fn the_orders_come_due_one_ttl_after_they_were_written() {
        let b = Bought::of(&sale_report(5_000, true), 5_000).unwrap();
        assert_eq!((b.goods_id, b.buyers, b.secs), (7, 5_000, 20.0));
        assert_eq!((b.first_order, b.last_final), (at("2026-01-01T12:00:00.5Z"), at("2026-01-01T12:00:20Z")));
        let plan =
            Plan::new(b.first_order, b.last_final, Duration::from_secs(60), Duration::from_secs(2)).unwrap();
        assert_eq!(plan.first_due, at("2026-01-01T12:01:00.5Z"));
        assert_eq!(plan.stop_at, at("2026-01-01T12:00:58.5Z"), "2 s before the first comes due");
        assert_eq!(plan.resume_at, at("2026-01-01T12:01:22Z"), "the last came due 2 s before");

        let ttl = Duration::from_secs(60);
        plan.in_time(at("2026-01-01T12:00:58.5Z"), &b, ttl).unwrap();
        plan.in_time(at("2026-01-01T12:00:59.9Z"), &b, ttl).unwrap();
        let e = plan.in_time(at("2026-01-01T12:01:00Z"), &b, ttl).unwrap_err().to_string();
        assert!(e.contains("raise --order-ttl-secs") && e.contains("to 75 s or more"), "{e}");

        // Without the order rows read back, the sale's start stands for the first order.
        let mut r = sale_report(5_000, true);
        r.drain.as_mut().unwrap().first_order_s = None;
        assert_eq!(Bought::of(&r, 5_000).unwrap().first_order, at("2026-01-01T12:00:00Z"));
    }

    #[test]
    fn a_sale_that_did_not_sell_every_unit_makes_no_storm() {
        let e = Bought::of(&sale_report(4_999, true), 5_000).unwrap_err().to_string();
        assert!(e.contains("ended with 4999 orders, not 5000"), "{e}");
        let e = Bought::of(&sale_report(5_000, false), 5_000).unwrap_err().to_string();
        assert!(e.contains("broken: no oversell"), "{e}");
        let mut r = sale_report(5_000, true);
        r.drain.as_mut().unwrap().first_request_to_last_final_s = None;
        assert!(Bought::of(&r, 5_000).is_err());
    }

    fn order(created: &str, expires: &str) -> Order {
        serde_json::from_value(json!({
            "id": 9, "user_id": 1000, "goods_id": 7, "price_cents": 49_900, "status": "unpaid",
            "created_at": created, "expires_at": expires,
        }))
        .unwrap()
    }

    #[test]
    fn the_ttl_given_must_be_the_order_services() {
        let o = order("2026-01-01T12:00:00.020Z", "2026-01-01T12:01:00Z");
        ttl_matches(&o, Duration::from_secs(60)).unwrap();
        let e = ttl_matches(&o, Duration::from_secs(1_800)).unwrap_err().to_string();
        assert!(e.contains("lives 60.0 s") && e.contains("not --order-ttl-secs 1800"), "{e}");
    }

    #[test]
    fn units_back_are_spread_between_the_polls_that_saw_them() {
        // Nothing back at 0; 4 back by 100 ms; still 4 at 150 ms; 6 by 250 ms.
        let marks = arrivals(&[(100_000, 4), (150_000, 4), (250_000, 6)]);
        assert_eq!(marks, [25_000, 50_000, 75_000, 100_000, 200_000, 250_000]);
        assert!(arrivals(&[(50_000, 0)]).is_empty());
        assert!(arrivals(&[]).is_empty());
    }

    #[test]
    fn the_storm_rate_is_the_units_over_the_time_they_took() {
        assert_eq!(StormSummary::per_sec(50_000, Some(5.0)), Some(10_000.0));
        assert_eq!(StormSummary::per_sec(50_000, None), None);
        assert_eq!(StormSummary::per_sec(50_000, Some(0.0)), None);
        assert_eq!(StormSummary::ratio(1_600.0, 2_000.0), Some(0.8));
        assert_eq!(StormSummary::ratio(1_600.0, 0.0), None);

        let mut c = cfg();
        c.users = 5_000;
        let b = Bought::of(&sale_report(5_000, true), 5_000).unwrap();
        let polled = |s: f64| Polled { reached_us: Some((s * 1e6) as u32), ..Polled::default() };
        let spike = |accepted: f64, clicks: u64| {
            let mut r = sale_report(0, true);
            r.duration_secs = 2.0;
            r.buy.as_mut().unwrap().clicks = clicks;
            r.drain.as_mut().unwrap().accepted_per_sec = accepted;
            r
        };
        let (base, during) = (spike(2_000.0, 8_000), spike(1_500.0, 6_000));
        let mut again = sale_report(0, true);
        again.buy.as_mut().unwrap().accepted = 100;
        let s = summary(&c, &b, 24.0, (&polled(2.0), &polled(2.5)), (&base, &during), &again);
        assert_eq!((s.db_per_sec, s.redis_per_sec), (Some(2_500.0), Some(2_000.0)));
        assert_eq!((s.accepted_ratio, s.clicks_ratio), (Some(0.75), Some(0.75)));
        assert_eq!((s.baseline.clicks_per_sec, s.during.accepted_per_sec), (4_000.0, 1_500.0));
        assert_eq!((s.rebuy_sample, s.rebuy_accepted, s.orders, s.order_ttl_secs), (1_000, 100, 5_000, 60));
    }
}

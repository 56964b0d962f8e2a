//! `seckill-faults`: the fault suite's driver (scripts/faults.sh builds and runs it), against
//! private servers it starts itself. It proves from outside that the system loses nothing when a part
//! of it dies.
//!
//! The driver starts the four release binaries itself, as many replicas of each as the case
//! wants ([`fleet`]). For each case ([`cases`]):
//! a fresh sale created by an admin through the gateway; buyers arriving evenly for several
//! seconds, each a real client that retries what real clients retry ([`buyers`]); the case's
//! fault injected mid-sale while they keep arriving, and the service or server brought back
//! (the suite's private servers, [`servers`]); every accepted buyer's result
//! awaited; late buyers while units are left (a unit given back must be sold); then figures and
//! checks from the gateway's answers and SQL on the private PostgreSQL ([`verdict`]), and those
//! only a replicated case can make ([`replicas`]). A case on a sale with a waiting room
//! ([`room`]) opens its sale some seconds after its creation: its users join before the opening
//! and after, poll where they stand, and buy once admitted; the room's checks come on top. The full
//! suite writes docs/RELIABILITY.md ([`doc`]). The process exits non-zero when a case broke an
//! invariant, each violation named.

pub mod buyers;
pub mod cases;
mod config;
pub mod doc;
pub mod replicas;
pub mod room;
pub mod servers;
pub mod streams;
pub mod transfers;
pub mod verdict;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use chrono::Utc;
use seckill_common::api::{Goods, Order, Role, SeckillResult};

use self::buyers::{BuyerLog, Load};
use self::cases::{Case, Extra, Step, Timing};
pub use self::config::Config;
use self::replicas::Consumed;
use self::servers::Servers;
use self::verdict::{Figures, OrderRow, Outside};
use seckill_harness::api::{self, create_sale, dev_token};
use seckill_harness::client::{Conn, Endpoint};
use seckill_harness::fleet::{self, Backends, Fleet, Svc, Unit};
use seckill_harness::invariants::{Check, FinalState};
use seckill_harness::ports;
use seckill_harness::signal::Signal;

/// How long the end-of-case reads may take in all (an endpoint that keeps failing must not
/// hold the suite for one timeout per buyer).
const READ_FOR: Duration = Duration::from_secs(60);
/// The end state is read this long after everything was back at the earliest: with the
/// services' timings here, the background repairs (the reconciler after 5 s, the end of a
/// Redis-loss recovery after the 3 s confirm timeout and two 1 s ticks, the sweeper's 5 s
/// grace) have all had their turn by then.
const SETTLE: Duration = Duration::from_secs(8);
/// Past the usual settling, how long a case on a sale of several buckets waits for a transfer
/// a killed process left half done (the reconciler's `seckill.reconcile_after_secs`, 5 s here,
/// and its tick).
const TRANSFERS_SETTLE: Duration = Duration::from_secs(10);
/// A result still `queued` at the end is read again for up to this long before it counts as
/// stuck: `queued` is not an end state.
const REQUEUED_FOR: Duration = Duration::from_secs(30);
/// Late buyers at most, and how long they may keep arriving.
const MAX_LATE: usize = 200;
const LATE_FOR: Duration = Duration::from_secs(20);

/// What the driver did during a case.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    pub fault_s: Option<f64>,
    pub back_s: Option<f64>,
    /// When the server a case stopped was back ([`Step::ServerBack`]).
    pub server_back_s: Option<f64>,
    /// `(seconds since the sale opened, what)`.
    pub events: Vec<(f64, String)>,
    pub error: Option<String>,
}

/// One case's outcome.
#[derive(Debug, Clone)]
pub struct CaseResult {
    pub name: String,
    pub fault: String,
    pub goods_id: Option<i64>,
    pub units: i64,
    pub buyers_planned: i64,
    pub arrive_over: Duration,
    pub timeline: Timeline,
    pub figures: Option<Figures>,
    pub checks: Vec<Check>,
    /// The case could not run to its end.
    pub error: Option<String>,
    pub took: Duration,
}

impl CaseResult {
    pub fn passed(&self) -> bool {
        self.error.is_none()
            && self.timeline.error.is_none()
            && !self.checks.is_empty()
            && self.checks.iter().all(|c| c.ok)
    }

    /// Each violation, named: failed checks, and a case that could not run.
    pub fn violations(&self) -> Vec<String> {
        let mut v: Vec<String> =
            self.checks.iter().filter(|c| !c.ok).map(|c| format!("{}: {}", c.name, c.detail)).collect();
        if let Some(e) = &self.timeline.error {
            v.push(format!("fault step failed: {e}"));
        }
        if let Some(e) = &self.error {
            v.push(format!("case did not run to its end: {e}"));
        }
        v
    }
}

/// Where an interrupted run's logs are kept.
const LOGS: &str = "run/faults-logs";

/// Stops what an interrupted run left in the scratch directory (its services by their pid
/// files, its servers), keeps its logs, and removes the directory.
pub async fn clean(cfg: &Config) -> anyhow::Result<()> {
    if !cfg.scratch.exists() {
        return Ok(());
    }
    // The driver first (`seckill-faults.pid`), then its services.
    for killed in fleet::stop_leftovers(&cfg.scratch)
        .into_iter()
        .chain(fleet::stop_leftovers(&cfg.scratch.join("services")))
    {
        println!("faults: an interrupted run left {killed}: killed");
    }
    let servers = Servers::new(&cfg.scratch, cfg.ports())?;
    servers.stop_all().await;
    remove_scratch(cfg, &servers)
}

/// The scratch directory removed, the services' and the servers' logs kept in [`LOGS`] first
/// (when there are any: the newest evidence there is).
fn remove_scratch(cfg: &Config, servers: &Servers) -> anyhow::Result<()> {
    if cfg.scratch.join("services").exists() {
        keep_logs(cfg, servers)?;
    }
    std::fs::remove_dir_all(&cfg.scratch).with_context(|| format!("removing {}", cfg.scratch.display()))
}

fn keep_logs(cfg: &Config, servers: &Servers) -> anyhow::Result<()> {
    let _ = std::fs::remove_dir_all(LOGS);
    std::fs::create_dir_all(LOGS)?;
    let services =
        std::fs::read_dir(cfg.scratch.join("services")).into_iter().flatten().flatten().map(|e| e.path());
    for log in
        services.chain(servers.logs()).filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "log"))
    {
        if let Some(name) = log.file_name() {
            std::fs::copy(&log, Path::new(LOGS).join(name))?;
        }
    }
    Ok(())
}

/// Starts the private servers, runs the selected cases, stops everything (keeping the logs in
/// run/faults-logs/) and returns the cases' results (written to [`Config::report_path`]).
pub async fn run(cfg: &Config) -> anyhow::Result<Vec<CaseResult>> {
    cfg.check_ports()?;
    let timing = Timing::new(cfg.quick);
    let cases = cases::select(timing, cfg.quick, &cfg.cases)?;
    let driver_pid = cfg.scratch.join("seckill-faults.pid");
    if let Some(pid) = fleet::running(&driver_pid, "seckill-faults") {
        bail!("a fault run is in progress (pid {pid}); `seckill-faults --clean` (scripts/down.sh) stops it");
    }
    println!("faults: removing what an interrupted run may have left ({})", cfg.scratch.display());
    clean(cfg).await?;
    std::fs::create_dir_all(&cfg.scratch)?;
    std::fs::write(&driver_pid, format!("{}\n", std::process::id()))?;
    let servers = Servers::new(&cfg.scratch, cfg.ports())?;
    for (port, what) in cfg.taken_ports() {
        if ports::port_open(port).await {
            bail!("port {port} ({what}) is in use; free it or choose another");
        }
    }
    // The report this suite writes is not a change to the code it tested.
    let (started_at, commit) = (Utc::now(), seckill_harness::git_commit(&["docs/RELIABILITY.md"]));
    let mut fleet = Fleet::new(
        &cfg.bin_dir,
        &cfg.scratch,
        cfg.http_port,
        Backends {
            pg_url: servers.pg_url(),
            redis_url: servers.redis_url(),
            amqp_url: servers.amqp_url(),
            prefix: None,
        },
    )?
    .with_tuned_settings();
    println!(
        "faults: {} case(s), {} units each, {} buyers per case; services on ports {}-{} (replica k: +{}k), logs in {}",
        cases.len(),
        cfg.units(),
        cfg.units() * 3,
        cfg.http_port,
        cfg.http_port + 4,
        fleet::PORT_STEP,
        cfg.scratch.join("services").display()
    );
    let mut results = Vec::new();
    let outcome = async {
        servers.start_all().await?;
        for what in fleet.ensure_all(cases.first().map_or(1, |c| c.replicas)).await? {
            println!("faults: {what}");
        }
        for (i, case) in cases.iter().enumerate() {
            let r = run_case(&mut fleet, &servers, cfg, case, i).await;
            print_case(&r);
            results.push(r);
        }
        anyhow::Ok(())
    };
    let outcome = tokio::select! {
        r = outcome => r,
        () = seckill_common::shutdown_signal() => Err(anyhow::anyhow!("interrupted")),
    };
    fleet.stop_all().await;
    servers.stop_all().await;
    remove_scratch(cfg, &servers)?;
    println!("faults: servers stopped, {} removed; the logs are in {LOGS}/", cfg.scratch.display());
    outcome?;

    println!("\n{}", doc::summary_text(&results));
    if let Some(out) = cfg.report_path() {
        let text = doc::render(&results, cfg, &commit, started_at, Utc::now())?;
        if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&out, text).with_context(|| format!("writing {}", out.display()))?;
        println!("faults: wrote {}", out.display());
    }
    Ok(results)
}

async fn run_case(
    fleet: &mut Fleet,
    servers: &Servers,
    cfg: &Config,
    case: &Case,
    index: usize,
) -> CaseResult {
    let started = Instant::now();
    let units = case.units.unwrap_or_else(|| cfg.units());
    let mut r = CaseResult {
        name: case.name.clone(),
        fault: case.fault.clone(),
        goods_id: None,
        units,
        buyers_planned: case.extra.iter().find_map(Extra::room).map_or(units * 3, |p| p.users as i64),
        arrive_over: case.arrive_over,
        timeline: Timeline::default(),
        figures: None,
        checks: Vec::new(),
        error: None,
        took: Duration::ZERO,
    };
    println!("\n== {}: {}", case.name, case.fault);
    if let Err(e) = run_sale(fleet, servers, case, index, &mut r).await {
        r.error = Some(format!("{e:#}"));
    }
    r.took = started.elapsed();
    r
}

async fn run_sale(
    fleet: &mut Fleet,
    servers: &Servers,
    case: &Case,
    index: usize,
    r: &mut CaseResult,
) -> anyhow::Result<()> {
    let restored = fleet.ensure_all(case.replicas).await?;
    let endpoints = fleet
        .units(Svc::Gateway)
        .into_iter()
        .map(|u| Endpoint::parse(&fleet.url(u)))
        .collect::<Result<Vec<_>, _>>()?;
    let endpoint = endpoints[0].clone();
    let mut admin = Conn::new(endpoint.clone(), Duration::from_secs(10));
    let admin_token = dev_token(&mut admin, 1, Role::Admin).await?;
    let label = format!("faults {}", case.name);
    let plan = case.extra.iter().find_map(Extra::room);
    // A room's users join before the opening too (a second more for the sale to be known).
    let opened_ago = plan.map_or(chrono::Duration::seconds(1), |p| {
        -chrono::Duration::from_std(p.before + Duration::from_secs(1)).unwrap_or_default()
    });
    let waiting_room = plan.map(|p| p.room());
    let goods =
        create_sale(&mut admin, &admin_token, &label, r.units, case.buckets, opened_ago, waiting_room)
            .await?;
    let g = goods.id.get();
    r.goods_id = Some(g);
    let opened_ms = goods.start_at.timestamp_millis();
    let t0 = Instant::now()
        + Duration::from_millis(u64::try_from(opened_ms - Utc::now().timestamp_millis()).unwrap_or(0));
    if !restored.is_empty() {
        let what = format!("before the sale: {}", restored.join("; "));
        println!("   {what}");
        r.timeline.events.push((0.0, what));
    }
    println!(
        "   sale {g}: {} units, {} buyers arriving over {:.0} s{}",
        r.units,
        r.buyers_planned,
        case.arrive_over.as_secs_f64(),
        if endpoints.len() > 1 {
            format!(", spread over {} gateways", endpoints.len())
        } else {
            String::new()
        }
    );

    // The load and the fault, side by side (and the hot user, when the case has one).
    let mut load = Load::new(endpoints.clone(), g, t0);
    load.streams = case.streams;
    let load = Arc::new(load);
    // Distinct users per case, so no case sees another's reservations or orders; the users
    // just below the buyers' are the case's own probes.
    let first = (index as i64 + 1) * 1_000_000;
    let users = case_users(first, r.buyers_planned, case.buckets);
    let (plain, room_users) = if plan.is_some() { (Vec::new(), users) } else { (users, Vec::new()) };
    let room_run = async {
        let p = plan?;
        // A buyer in every so many: half the units sold, so the room runs to its end.
        let buy_every = room_users.len() * 2 / usize::try_from(r.units).unwrap_or(1).max(1);
        Some(room::run(load.clone(), p, &room_users, buy_every).await)
    };
    let next_user = first + r.buyers_planned * i64::from(case.buckets);
    let mut consumed =
        if case.extra.contains(&Extra::ConsumersShare) { Some(Consumed::start(fleet).await) } else { None };
    let admins = (0..case.replicas)
        .map(|k| Endpoint::parse(&format!("http://127.0.0.1:{}", fleet.admin_port(k))))
        .collect::<Result<Vec<_>, _>>()?;
    let hot = async {
        if case.extra.contains(&Extra::OneLimit) {
            Some(replicas::hot_user(endpoints.clone(), admins.clone(), g, first - 1).await)
        } else {
            None
        }
    };
    let steps = async {
        tokio::time::sleep_until(t0.into()).await;
        run_steps(&case.steps, fleet, servers, t0, consumed.as_mut()).await
    };
    let (mut logs, timeline, hot, mut room_out) =
        tokio::join!(buyers::arrive(load.clone(), plain, case.arrive_over, false), steps, hot, room_run);
    r.timeline = timeline;
    if let Some(out) = &mut room_out {
        logs.append(&mut out.buyers);
    }
    if let Some(e) = &r.timeline.error {
        // Leave the next case a whole system even so.
        let _ = fleet.ensure_all(case.replicas).await;
        println!("   fault step failed: {e}");
    }

    // Units given back late (a reservation reconciled, a failed request) are sold to late buyers.
    let took_part = logs.iter().filter(|l| l.took_part()).count() as i64;
    if took_part > r.units {
        let since = t0.elapsed().as_secs_f64();
        let late = late_buyers(&endpoints, servers, g, t0, r.units, next_user).await?;
        if !late.is_empty() {
            let bought =
                late.iter().filter(|l| l.accepted.iter().any(|a| a.state == FinalState::Success)).count();
            let what = format!(
                "fewer orders than units once every result was final: {} late buyers arrived, {bought} of them bought",
                late.len()
            );
            println!("   t={since:6.2}s {what}");
            r.timeline.events.push((since, what));
        }
        logs.extend(late);
    }

    // Let the background repairs finish what is theirs before the end state is read.
    let back = r.timeline.back_s.map_or(Duration::ZERO, Duration::from_secs_f64);
    tokio::time::sleep_until((t0 + back + SETTLE).max(Instant::now() + Duration::from_secs(2)).into()).await;
    let outside = read_outside(&load, servers, g, &logs).await?;
    let (mut figures, mut checks) =
        verdict::judge(r.units, &logs, &outside, r.timeline.fault_s, r.timeline.back_s);
    if let (Some(p), Some(out)) = (plan, &room_out) {
        checks.extend(room::judge(out, p, opened_ms, r.timeline.fault_s, r.timeline.back_s));
        figures.tally.merge(&out.tally);
    }

    if let Some(at) = r.timeline.server_back_s {
        checks.push(verdict::back_after_server(&logs, r.timeline.fault_s, at));
    }
    if case.streams {
        checks.push(streams::judge(&logs, r.timeline.fault_s));
    }
    // What only a replicated case checks.
    if case.extra.contains(&Extra::SoldOutEverywhere) {
        checks.push(replicas::sold_out_everywhere(fleet, g, first - 10, sold_out_in_db(&outside)).await);
    }
    if let Some(c) = consumed {
        let (taken, errors) = c.finish(fleet).await;
        checks.push(replicas::consumers_share(fleet.replicas(), &taken, &errors));
    }
    if let Some(h) = &hot {
        checks.push(replicas::one_limit(h));
    }
    if case.buckets > 1 {
        checks.push(transfers::settled(fleet.redis_url(), g, case.buckets, TRANSFERS_SETTLE).await);
    }
    r.figures = Some(figures);
    r.checks = checks;
    Ok(())
}

/// Whether the database holds as many active orders as units, and what it holds.
fn sold_out_in_db(outside: &Outside) -> (bool, String) {
    let active = outside.orders.iter().filter(|o| o.active()).count() as i64;
    match outside.stock {
        Some((total, available)) => (
            active >= total && available == 0,
            format!("{active} active orders for {total} units, stock_available {available}"),
        ),
        None => (false, "the goods row could not be read".into()),
    }
}

/// Runs a case's steps from the sale's opening `t0`; stops at the first failed step. Before a
/// process is stopped or killed, `consumed` (if kept) reads what it consumed so far.
async fn run_steps(
    steps: &[Step],
    fleet: &mut Fleet,
    servers: &Servers,
    t0: Instant,
    mut consumed: Option<&mut Consumed>,
) -> Timeline {
    let mut tl = Timeline::default();
    let secs = || t0.elapsed().as_secs_f64();
    for step in steps {
        if let (Some(c), Step::Kill9(_) | Step::Term(_)) = (consumed.as_deref_mut(), step) {
            let units = match step {
                Step::Kill9(us) => us.clone(),
                Step::Term(u) => vec![*u],
                _ => Vec::new(),
            };
            for u in units {
                c.before_stop(fleet, u).await;
            }
        }
        let at = secs();
        let done: anyhow::Result<String> = match step {
            Step::Wait(d) => {
                tokio::time::sleep(*d).await;
                continue;
            }
            Step::Fault => {
                tl.fault_s = Some(at);
                continue;
            }
            Step::Back => {
                tl.back_s = Some(at);
                Ok("everything is running again".into())
            }
            Step::ServerBack => {
                tl.server_back_s = Some(at);
                continue;
            }
            Step::Kill9(us) => fleet.kill9(us).await.map(|()| {
                let names: Vec<String> = us.iter().map(Unit::to_string).collect();
                format!("kill -9 {}", names.join(" and "))
            }),
            Step::Term(u) => fleet.term(*u).await.map(|(took, status)| {
                format!("SIGTERM {u}: exited after {:.1} s ({status})", took.as_secs_f64())
            }),
            Step::Start(u) => fleet
                .start(*u)
                .await
                .map(|took| format!("{u} started, ready after {:.1} s", took.as_secs_f64())),
            Step::StartWaiting(u) => fleet.start_waiting(*u).await.map(|(took, readyz)| {
                format!(
                    "{u} started while its server is down, serving after {:.1} s: {readyz}",
                    took.as_secs_f64()
                )
            }),
            Step::AwaitReady(u) => fleet
                .await_ready(*u)
                .await
                .map(|took| format!("{u} ready {:.1} s later, not restarted", took.as_secs_f64())),
            Step::Pause(u) => fleet.signal(*u, Signal::STOP).map(|()| format!("SIGSTOP {u}")),
            Step::Resume(u) => fleet.signal(*u, Signal::CONT).map(|()| format!("SIGCONT {u}")),
            Step::Ctl(server, action) => servers
                .control(*server, *action)
                .await
                .map(|took| format!("{} {action} (took {:.1} s)", server.kind(), took.as_secs_f64())),
        };
        match done {
            Ok(what) => {
                println!("   t={at:6.2}s {what}");
                tl.events.push((at, what));
            }
            Err(e) => {
                let e = format!("{e:#}");
                tl.events.push((at, format!("FAILED: {e}")));
                tl.error = Some(e);
                break;
            }
        }
    }
    tl
}

/// Late buyers, four at a time, while the database has fewer active orders than units, for
/// up to [`LATE_FOR`].
/// The case's `count` buyers from user `first` on. A sale of `buckets` > 1: three in four
/// served by bucket 0 (user ids multiples of `buckets` from `first`, itself one), the fourth by
/// the others in turn.
fn case_users(first: i64, count: i64, buckets: u8) -> Vec<i64> {
    let n = i64::from(buckets.max(1));
    if n == 1 {
        return (first..first + count).collect();
    }
    (0..count).map(|i| first + n * i + if i % 4 == 3 { 1 + i % (n - 1) } else { 0 }).collect()
}

async fn late_buyers(
    endpoints: &[Arc<Endpoint>],
    servers: &Servers,
    g: i64,
    t0: Instant,
    units: i64,
    mut next_user: i64,
) -> anyhow::Result<Vec<BuyerLog>> {
    let mut load = Load::new(endpoints.to_vec(), g, t0);
    load.retry_budget = LATE_FOR;
    load.result_wait = Duration::from_secs(30);
    load.none_grace = Duration::from_secs(10);
    let load = Arc::new(load);
    let deadline = Instant::now() + LATE_FOR;
    let mut late = Vec::new();
    loop {
        let rows = servers
            .sql(
                "seckill_order",
                &format!("SELECT count(*) FROM orders WHERE goods_id = {g} AND status IN ('unpaid', 'paid')"),
            )
            .await?;
        let active: i64 = rows.first().and_then(|r| r.first()).and_then(|v| v.parse().ok()).unwrap_or(0);
        if active >= units || Instant::now() >= deadline || late.len() >= MAX_LATE {
            return Ok(late);
        }
        late.extend(
            buyers::arrive(load.clone(), (next_user..next_user + 4).collect(), Duration::ZERO, true).await,
        );
        next_user += 4;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A result as the verdict keeps it: its state and order.
fn final_of(r: SeckillResult) -> (FinalState, Option<i64>) {
    (r.status.into(), r.order_id.map(|o| o.get()))
}

/// The end state from outside: each buyer's result, the sale at the gateway and in both
/// databases, and the orders each concerned buyer sees.
async fn read_outside(load: &Load, servers: &Servers, g: i64, logs: &[BuyerLog]) -> anyhow::Result<Outside> {
    let bearers: HashMap<i64, _> =
        logs.iter().filter_map(|l| l.bearer.clone().map(|b| (l.user_id, b))).collect();
    let mut users: Vec<i64> = bearers.keys().copied().collect();
    users.sort_unstable();
    let deadline = Instant::now() + READ_FOR;

    // Every buyer's result, on a few connections at once.
    let reads = buyers::read_as_each(load, &load.paths.result, &users, &bearers, deadline).await;
    let mut end: HashMap<i64, Option<(FinalState, Option<i64>)>> =
        reads.into_iter().map(|(u, r)| (u, r.map(final_of))).collect();
    let again_until = Instant::now() + REQUEUED_FOR;
    let mut conn = Conn::new(load.endpoint(0).clone(), load.request_timeout);
    loop {
        let queued: Vec<i64> =
            end.iter().filter(|(_, r)| matches!(r, Some((FinalState::Queued, _)))).map(|(u, _)| *u).collect();
        if queued.is_empty() || Instant::now() >= again_until {
            break;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        for u in queued {
            let read = buyers::read(&mut conn, &load.paths.result, Some(&bearers[&u]), again_until).await;
            end.insert(u, read.map(final_of));
        }
    }

    let rows = servers
        .sql("seckill_stock", &format!("SELECT stock_total, stock_available FROM goods WHERE id = {g}"))
        .await?;
    let stock = rows.first().and_then(|r| Some((r.first()?.parse().ok()?, r.get(1)?.parse().ok()?)));
    let ledger = servers
        .sql(
            "seckill_stock",
            &format!("SELECT order_key, released_at IS NULL FROM stock_ledger WHERE goods_id = {g}"),
        )
        .await?
        .into_iter()
        .filter_map(|r| Some((r.first()?.parse().ok()?, r.get(1)? == "t")))
        .collect();
    let orders: Vec<OrderRow> = servers
        .sql(
            "seckill_order",
            &format!("SELECT id, request_id, user_id, status FROM orders WHERE goods_id = {g} ORDER BY id"),
        )
        .await?
        .into_iter()
        .filter_map(|r| {
            Some(OrderRow {
                id: r.first()?.parse().ok()?,
                request_id: r.get(1)?.parse().ok()?,
                user_id: r.get(2)?.parse().ok()?,
                status: r.get(3)?.clone(),
            })
        })
        .collect();

    let deadline = Instant::now() + READ_FOR;
    let mut conn = Conn::new(load.endpoint(0).clone(), load.request_timeout);
    let api_available = buyers::read::<Goods>(&mut conn, &api::goods_path(g), None, deadline)
        .await
        .map(|goods| goods.stock_available);

    // The orders each concerned buyer sees at the gateway.
    let concerned: Vec<i64> = Outside::users_to_compare(logs, &orders, &end).into_iter().collect();
    let lists =
        buyers::read_as_each::<Vec<Order>>(load, api::MY_ORDERS, &concerned, &bearers, deadline).await;
    let sale_orders = |orders: Vec<Order>| {
        let of_sale = orders.into_iter().filter(|o| o.goods_id.get() == g);
        of_sale.map(|o| (o.id.get(), o.status.as_str().to_owned())).collect()
    };
    let listed = lists.into_iter().map(|(u, list)| (u, list.map(sale_orders))).collect();
    Ok(Outside { stock, api_available, ledger, orders, end, listed })
}

fn secs(v: Option<f64>) -> String {
    v.map_or("never".into(), |s| format!("{s:.2} s"))
}

fn print_case(r: &CaseResult) {
    if let Some(f) = &r.figures {
        let t = &f.tally;
        println!(
            "   accepted {} (+{} via 409 REPEATED), orders {}, lost {}, failed after 202 {}, won without seeing a 202 {}, \
             sold out {}, late buyers {}, gave up {}",
            f.accepted,
            f.repeated,
            f.orders,
            f.lost,
            f.failed_after_202,
            f.won_unseen,
            f.sold_out,
            f.late_buyers,
            f.gave_up
        );
        println!(
            "   clients saw 503 x{}, 504 x{}, 429 x{}, connection errors x{}, timeouts x{}, other 5xx x{}, unexpected x{}",
            t.s503, t.s504, t.s429, t.conn_errors, t.timeouts, t.other_5xx, t.unexpected
        );
        println!(
            "   after the fault: buy path answering again {}, backlog drained (every request accepted until all was back final) {}",
            secs(f.buy_path_back_s),
            secs(f.drained_s)
        );
    }
    for c in &r.checks {
        println!("   [{}] {}: {}", if c.ok { "ok" } else { "FAIL" }, c.name, c.detail);
    }
    if r.passed() {
        println!("   PASS ({:.0} s)", r.took.as_secs_f64());
    } else {
        println!("   FAIL ({:.0} s): {} violation(s):", r.took.as_secs_f64(), r.violations().len());
        for v in r.violations() {
            println!("     - {v}");
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn a_bucket_case_sends_three_buyers_in_four_to_bucket_zero() {
        assert_eq!(case_users(1_000_000, 3, 1), [1_000_000, 1_000_001, 1_000_002]);
        let users = case_users(2_000_000, 400, 8);
        assert_eq!(users.iter().collect::<std::collections::BTreeSet<_>>().len(), 400, "distinct");
        assert_eq!(users.iter().filter(|u| *u % 8 == 0).count(), 300);
        let others: std::collections::BTreeSet<i64> =
            users.iter().map(|u| u % 8).filter(|b| *b != 0).collect();
        assert_eq!(others.len(), 7, "the fourth buyer spread over the other buckets");
        assert!(users.iter().all(|u| *u < 2_000_000 + 400 * 8), "below the late buyers");
    }

    pub(crate) fn config() -> Config {
        Config {
            bin_dir: "b".into(),
            scratch: "s".into(),
            pg_port: 25432,
            redis_port: 26379,
            amqp_port: 26672,
            rabbit_dist_port: 26682,
            http_port: 28080,
            clean: false,
            quick: false,
            list: false,
            cases: Vec::new(),
            units: None,
            out: None,
        }
    }

    #[test]
    fn the_systems_own_ports_are_refused() {
        config().check_ports().unwrap();
        for bad in [
            Config { pg_port: 5432, ..config() },
            Config { redis_port: 6379, ..config() },
            Config { amqp_port: 5672, ..config() },
            Config { http_port: 8078, ..config() },
            // Replica 1 of the gateway would take 8080.
            Config { http_port: 8070, ..config() },
        ] {
            assert!(bad.check_ports().is_err(), "{bad:?}");
        }
        // Every port the run takes, none twice: the four servers', five listeners a replica.
        let ports = config().taken_ports();
        assert_eq!(ports.len(), 4 + 5 * cases::MAX_REPLICAS);
        let distinct: std::collections::BTreeSet<u16> = ports.iter().map(|(p, _)| *p).collect();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
        assert!(ports.contains(&(28094, "FAULTS_HTTP_PORT")), "replica 1's admin listener: {ports:?}");
    }
}

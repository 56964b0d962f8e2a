//! The document and its targets, from hand-made reports and from the recorded run.

use crate::invariants::Check;
use crate::memory::ProcMemory;
use crate::push::PushSummary;
use crate::report::{BuySummary, DrainSummary, LimitCheck, RoomSummary, StormSummary};
use crate::sync::SyncSummary;

use super::*;
use crate::report::RoomMemory;
use crate::stats::{CallStats, Latency};

fn report(kind: &str, name: &str, call: &str, per_sec: f64) -> Report {
    Report {
        kind: kind.into(),
        name: name.into(),
        started_at: "2026-01-01T00:00:00Z".into(),
        command: format!("seckill-bench {name}"),
        params: serde_json::json!({"connections": 200}),
        load: crate::report::LoadShape { connections: 200, ..Default::default() },
        duration_secs: 1.0,
        calls: vec![CallStats {
            call: call.into(),
            outcome: "all".into(),
            count: per_sec as u64,
            per_sec,
            window_secs: 1.0,
            latency: Latency::default(),
        }],
        buy: None,
        drain: None,
        sync: None,
        storm: None,
        room: None,
        push: None,
        invariants: Vec::new(),
        memory: Vec::new(),
        cpu: None,
        timeline: Default::default(),
        notes: Vec::new(),
    }
}

#[test]
fn ratios_use_the_median_of_repeated_runs() {
    let mut c = Collected::default();
    for v in [9_000.0, 20_000.0, 10_000.0] {
        c.reports.entry(names::HOP.into()).or_default().push(report(KIND_HTTP, names::HOP, "get", v));
    }
    c.reports.entry(names::SOLD_OUT.into()).or_default().push(report(
        KIND_SCENARIO,
        names::SOLD_OUT,
        "order",
        8_500.0,
    ));
    let t = targets(&c);
    let sold = row(&t, "sold-out path through the gateway vs one plain hop");
    assert_eq!(sold.ratio, Some(0.85));
    assert_eq!(sold.met, Some(true));
    assert!(sold.against.contains("10,000"), "{sold:?}");
    assert!(sold.against.contains("runs: 9,000, 20,000, 10,000"), "{sold:?}");
    let md = render(&c).unwrap();
    assert!(md.contains("| sold-out path through the gateway vs one plain hop |"), "{md}");
}

fn targets(c: &Collected) -> Vec<Target> {
    super::targets(c).unwrap()
}

/// The target row whose text starts with `what`.
fn row<'t>(t: &'t [Target], what: &str) -> &'t Target {
    t.iter().find(|x| x.what.starts_with(what)).unwrap_or_else(|| panic!("no row {what:?} in {t:#?}"))
}

#[test]
fn the_targets_state_these_goals_and_no_others() {
    // Nothing measured: every goal is there, not measured, and no row without a goal.
    let t = targets(&Collected::default());
    let goals: Vec<&str> = t.iter().map(|x| x.goal.as_str()).collect();
    assert_eq!(
        goals,
        [
            ">= 0.5",
            "< 50 ms",
            "all 202 or 503 BUSY",
            "< 100 ms",
            ">= 0.9",
            "all",
            "all 202 or 503 BUSY",
            "< 100 ms",
            ">= 0.8",
            "all",
            ">= 0.8",
            ">= 0.5",
            ">= 10,000",
            ">= 10,000",
            ">= 0.8",
            ">= 0.5",
            ">= 0.83 (cost within 1.2 x)",
            "<= 64 B",
            "<= 10 KiB",
            "p99 < 50 ms",
            "<= 0.25 s",
            "<= 100 MiB"
        ],
        "{t:#?}"
    );
    assert!(t.iter().all(|x| x.measured == "not measured" && x.met.is_none()), "{t:#?}");
}

#[test]
fn the_room_is_set_against_the_hop_and_the_sold_out_answer() {
    let mut c = Collected::default();
    for (name, call, per_sec) in [(names::HOP, "get", 20_000.0), (names::SOLD_OUT, "order", 40_000.0)] {
        c.reports.insert(name.into(), vec![report(KIND_HTTP, name, call, per_sec)]);
    }
    let memory = |users, bytes_per_user| RoomMemory { users, bytes_per_user, ..RoomMemory::default() };
    let mut r = report(KIND_SCENARIO, names::ROOM, "join", 1_000.0);
    r.room = Some(RoomSummary {
        joins_per_sec: 12_000.0,
        polls_per_sec: 36_000.0,
        rate: 500,
        admitted_per_sec: Some(490.0),
        memory: vec![memory(20_000, 140.0), memory(1_000_000, 19.5)],
        ..RoomSummary::default()
    });
    c.reports.insert(names::ROOM.into(), vec![r]);
    let t = targets(&c);
    let ratio = |what| row(&t, what).ratio.map(|x| (x * 100.0).round() / 100.0);
    assert_eq!(ratio("waiting room: joins/s"), Some(0.6));
    assert_eq!(ratio("waiting room: status polls/s"), Some(0.9));
    assert_eq!(ratio("waiting room: places admitted"), Some(0.98));
    let memory = row(&t, "waiting room: Redis memory");
    assert_eq!(
        (memory.met, memory.measured.as_str()),
        (Some(true), "140.0 B at 20,000, 19.5 B at 1,000,000")
    );
    assert!(render(&c).unwrap().contains("**12,000 joins/s**"));
}

#[test]
fn the_streams_memory_and_latency_are_held_to_their_goals() {
    let mut r = report(KIND_SCENARIO, names::PUSH, "events", 1_000.0);
    let half = |per_accepted| crate::push::SpikeHalf { per_accepted, ..Default::default() };
    r.push = Some(PushSummary {
        opened: 20_000,
        gateway_kib_per_stream: 7.5,
        commit_to_event: Latency { p50_ms: 9.0, p99_ms: 61.0, ..Latency::default() },
        told: 20_000,
        stream_half: half(3.0),
        poll_half: half(6.0),
        ..PushSummary::default()
    });
    let mut c = Collected::default();
    c.reports.insert(names::PUSH.into(), vec![r]);
    let t = targets(&c);
    let memory = row(&t, "event streams: the gateway's memory per open stream");
    assert_eq!((memory.met, memory.goal.as_str()), (Some(true), "<= 10 KiB"));
    let latency = row(&t, "event streams: order commit");
    assert_eq!(
        (latency.met, latency.measured.as_str()),
        (Some(false), "p99 61.0 ms (p50 9.0 ms, 20,000 events)")
    );
    assert_eq!(row(&t, "event streams: requests per buyer").ratio, Some(0.5));
    assert!(render(&c).unwrap().contains("**7.50 KiB a stream**"));
}

/// A drain-like scenario run: `accepted` buys/s, order p99 `p99_ms`.
fn drain_report(name: &str, accepted: f64, p99_ms: f64) -> Report {
    let mut r = report(KIND_SCENARIO, name, "order", accepted);
    r.load.connections = 500;
    r.calls[0].latency.p99_ms = p99_ms;
    r.drain = Some(crate::report::DrainSummary { accepted_per_sec: accepted, ..Default::default() });
    r
}

#[test]
fn the_accept_path_alone_is_compared_to_one_plain_hop() {
    let mut c = Collected::default();
    let mut add = |r: Report| c.reports.entry(r.name.clone()).or_default().push(r);
    add(report(KIND_HTTP, names::HOP, "get", 20_000.0));
    add(report(KIND_AMQP, names::AMQP, "publish", 25_000.0));
    add(drain_report(names::DRAIN, 4_000.0, 180.0));
    let t = targets(&c);
    let alone = row(&t, "accepted buys/s, accept path alone (drain-backlog) vs one plain hop");
    assert_eq!((alone.measured.as_str(), alone.goal.as_str(), alone.met), ("not measured", ">= 0.5", None));
    assert!(
        !t.iter().any(|x| x.what.contains("vs RabbitMQ") && x.what.contains("accept path alone")),
        "{t:#?}"
    );

    c.reports.entry(names::DRAIN_BACKLOG.into()).or_default().push(drain_report(
        names::DRAIN_BACKLOG,
        13_000.0,
        95.25,
    ));
    let t = targets(&c);
    let a = row(&t, "accepted buys/s, accept path alone (drain-backlog: closed loop, 500 connections");
    assert_eq!((a.ratio, a.met, a.goal.as_str()), (Some(0.65), Some(true), ">= 0.5"));
    assert_eq!(a.measured, "13,000 /s (order p99 95.2 ms)");
    assert_eq!(a.against, "hop 20,000 req/s");
    assert!(a.what.contains("order-service paused") && a.what.ends_with("vs one plain hop"), "{a:?}");
    // RabbitMQ publish with confirms: context, no goal; the whole system beside it.
    let rabbit = row(&t, "accepted buys/s, accept path alone (drain-backlog) vs RabbitMQ");
    assert_eq!((rabbit.ratio, rabbit.goal.as_str(), rabbit.met), (Some(0.52), "", None));
    let whole = row(&t, "accepted buys/s, whole system");
    assert_eq!((whole.ratio, whole.goal.as_str(), whole.met), (Some(0.16), "", None));
    let md = render(&c).unwrap();
    assert!(
        md.contains("| 13,000 /s (order p99 95.2 ms) | hop 20,000 req/s | 0.65 | >= 0.5 | **yes** |"),
        "{md}"
    );
    assert!(md.contains("| 13,000 /s | 25,000 msg/s | 0.52 |  | - |"), "{md}");

    // Below half a hop: missed.
    c.reports.insert(names::DRAIN_BACKLOG.into(), vec![drain_report(names::DRAIN_BACKLOG, 9_999.0, 40.0)]);
    assert_eq!(row(&targets(&c), "accepted buys/s, accept path alone (drain-backlog:").met, Some(false));
}

#[test]
fn the_hop_is_compared_to_the_gateways_healthz() {
    let mut c = Collected::default();
    c.reports.entry(names::HOP.into()).or_default().push(report(KIND_HTTP, names::HOP, "get", 20_000.0));
    assert_eq!(row(&targets(&c), "one plain hop vs the gateway's /healthz").met, None);
    for v in [50_000.0, 40_000.0, 45_000.0] {
        c.reports.entry(names::HEALTHZ.into()).or_default().push(report(KIND_HTTP, names::HEALTHZ, "get", v));
    }
    let t = targets(&c);
    let hop = row(&t, "one plain hop (a second gateway");
    assert_eq!((hop.ratio.map(|r| (r * 1e3).round() / 1e3), hop.met), (Some(0.444), Some(false)));
    assert_eq!(hop.against, "/healthz 45,000 req/s (runs: 50,000, 40,000, 45,000)");
    assert_eq!(hop.goal, ">= 0.5");
    c.reports.insert(names::HOP.into(), vec![report(KIND_HTTP, names::HOP, "get", 22_500.0)]);
    assert_eq!(row(&targets(&c), "one plain hop (a second gateway").met, Some(true));
}

#[test]
fn the_consumer_drains_a_backlog_at_ten_thousand_orders_a_second() {
    let mut c = Collected::default();
    let mut b = drain_report(names::DRAIN_BACKLOG, 5_000.0, 90.0);
    b.drain.as_mut().unwrap().tail_orders_per_sec = Some(9_999.0);
    b.drain.as_mut().unwrap().backlog_at_load_end = 50_000;
    c.reports.insert(names::DRAIN_BACKLOG.into(), vec![b.clone()]);
    let t = targets(&c);
    let d = row(&t, "drain: the consumer on a backlog of 50,000");
    assert_eq!((d.measured.as_str(), d.goal.as_str(), d.met), ("9,999 orders/s", ">= 10,000", Some(false)));
    b.drain.as_mut().unwrap().tail_orders_per_sec = Some(10_000.0);
    c.reports.insert(names::DRAIN_BACKLOG.into(), vec![b]);
    assert_eq!(row(&targets(&c), "drain: the consumer on a backlog").met, Some(true));
}

#[test]
fn every_seed_user_is_final_within_a_quarter_second() {
    let mut c = Collected::default();
    let mut seed = report(KIND_SCENARIO, names::SEED, "order", 1_000.0);
    seed.buy = Some(BuySummary { users: 1_000, ..Default::default() });
    seed.drain = Some(DrainSummary { all_answered_within_s: Some(0.2501), ..Default::default() });
    c.reports.insert(names::SEED.into(), vec![seed.clone()]);
    let s = row(&targets(&c), "seed: every one of the 1,000 users").clone();
    assert_eq!((s.measured.as_str(), s.goal.as_str(), s.met), ("within 0.250 s", "<= 0.25 s", Some(false)));
    seed.drain.as_mut().unwrap().all_answered_within_s = Some(0.25);
    c.reports.insert(names::SEED.into(), vec![seed]);
    assert_eq!(row(&targets(&c), "seed:").met, Some(true));
}

fn memory(name: &str, peak_rss_mib: f64, vm_hwm_mib: f64) -> ProcMemory {
    ProcMemory {
        name: name.into(),
        pid: 1,
        peak_rss_mib,
        end_rss_mib: 0.0,
        vm_hwm_mib,
        samples: 10,
        alive_at_end: true,
    }
}

#[test]
fn the_largest_service_memory_of_the_whole_run_is_held_to_100_mib() {
    let what = "largest resident memory of any service process";
    let mut c = Collected::default();
    assert_eq!(row(&targets(&c), what).met, None);
    let mut spike = report(KIND_SCENARIO, names::SPIKE, "order", 1_000.0);
    spike.memory = vec![memory("gateway", 60.0, 61.0), memory("order-service", 90.0, 90.0)];
    let mut drain = drain_report(names::DRAIN, 4_000.0, 100.0);
    // The load tool's own upstream is no service, whatever it used.
    drain.memory = vec![memory("seckill-service", 95.0, 99.5), memory("upstream", 300.0, 300.0)];
    c.reports.insert(names::SPIKE.into(), vec![spike]);
    c.reports.insert(names::DRAIN.into(), vec![drain]);
    let t = targets(&c);
    let m = row(&t, what);
    assert_eq!(
        (m.measured.as_str(), m.goal.as_str(), m.met),
        ("99.5 MiB (seckill-service, drain: VmHWM)", "<= 100 MiB", Some(true))
    );
    // A replica, or one of the bench's extra gateways, is a service process too.
    let mut hop = report(KIND_SCENARIO, names::SOLD_OUT_PER_REPLICA, "order", 1_000.0);
    hop.memory = vec![memory("gateway-hop", 100.5, 80.0)];
    c.reports.insert(names::SOLD_OUT_PER_REPLICA.into(), vec![hop]);
    let t = targets(&c);
    let m = row(&t, what);
    assert_eq!((m.measured.as_str(), m.met), ("100.5 MiB (gateway-hop, sold-out-per-replica)", Some(false)));
}

/// An overload run: `answers` (outcome, count) of the order call, `busy` of the 503s BUSY,
/// order p99 `p99_ms`, invariants `ok`.
fn overload_report(answers: &[(&str, u64)], busy: u64, p99_ms: f64, ok: bool) -> Report {
    let mut r = drain_report(names::OVERLOAD, 4_400.0, p99_ms);
    r.load.rate = Some(8_878.0);
    for (outcome, count) in answers {
        r.calls.push(CallStats {
            call: "order".into(),
            outcome: (*outcome).into(),
            count: *count,
            per_sec: 0.0,
            window_secs: 1.0,
            latency: Latency::default(),
        });
    }
    r.buy = Some(BuySummary { busy_answers: busy, ended_busy: 7, busy_retries: 3, ..Default::default() });
    r.invariants = vec![
        Check { name: "no oversell".into(), ok: true, detail: String::new() },
        Check { name: "one order per user".into(), ok, detail: String::new() },
    ];
    r
}

#[test]
fn overload_is_answered_202_or_busy_within_100_ms_and_keeps_the_invariants() {
    let mut c = Collected::default();
    c.reports.insert(names::DRAIN.into(), vec![drain_report(names::DRAIN, 4_439.0, 200.0)]);
    let answers = "overload (open loop at 2 x the closed-loop accepted rate): every order call";
    assert_eq!(row(&targets(&c), answers).met, None);
    assert_eq!(row(&targets(&c), "overload: order p99").met, None);
    assert_eq!(row(&targets(&c), "overload: invariants").met, None);

    c.reports.insert(
        names::OVERLOAD.into(),
        vec![overload_report(&[("202", 40_000), ("503", 12_000)], 12_000, 60.0, true)],
    );
    let t = targets(&c);
    let a = row(
        &t,
        "overload: open loop at 8,878 buys/s (2.00 x the closed-loop accepted rate of drain, 4,439 /s), 500 connections, a 503 BUSY retried after its Retry-After (up to 3 retries a click)",
    );
    assert_eq!(
        a.measured,
        "52,000 order calls: 40,000 202, 12,000 503 BUSY, other: none; 7 clicks still BUSY after their retries; achieved 4,400 accepted/s"
    );
    assert_eq!((a.goal.as_str(), a.met), ("all 202 or 503 BUSY", Some(true)));
    let p99 = row(&t, "overload: order p99");
    assert_eq!((p99.measured.as_str(), p99.goal.as_str(), p99.met), ("60.0 ms", "< 100 ms", Some(true)));
    let inv = row(&t, "overload: invariants");
    assert_eq!((inv.measured.as_str(), inv.met), ("all 2 hold", Some(true)));
    let kept = row(&t, "overload: accepted buys/s vs the closed loop's");
    assert_eq!((kept.measured.as_str(), kept.goal.as_str(), kept.met), ("4,400 /s", ">= 0.9", Some(true)));
    // Five times the rate, accepting 0.75 of the closed loop's: short of its 0.8.
    assert_eq!(row(&t, "overload-5x: accepted buys/s").met, None, "not measured");
    let mut five = overload_report(&[("202", 40_000), ("503", 90_000)], 90_000, 80.0, true);
    five.name = names::OVERLOAD_5X.into();
    five.drain = Some(crate::report::DrainSummary { accepted_per_sec: 3_329.0, ..Default::default() });
    c.reports.insert(names::OVERLOAD_5X.into(), vec![five]);
    let t = targets(&c);
    assert_eq!(row(&t, "overload-5x: order p99").met, Some(true));
    let kept = row(&t, "overload-5x: accepted buys/s");
    assert_eq!(
        (kept.ratio.map(|r| (r * 100.0).round()), kept.goal.as_str(), kept.met),
        (Some(75.0), ">= 0.8", Some(false))
    );
    let md = render(&c).unwrap();
    assert!(
        md.find(
            "### drain
"
        ) < md.find(
            "### overload
"
        ),
        "{md}"
    );

    // A timeout, a 503 that was not BUSY, a 500: each breaks the first; slow; broken.
    c.reports.insert(
        names::OVERLOAD.into(),
        vec![overload_report(
            &[("202", 40_000), ("500", 2), ("503", 12_003), ("timeout", 1)],
            12_000,
            100.0,
            false,
        )],
    );
    let t = targets(&c);
    let a = row(&t, "overload: open loop");
    assert!(a.measured.contains("other: 500 x2, 503 not BUSY x3, timeout x1;"), "{a:?}");
    assert_eq!(a.met, Some(false));
    assert_eq!(row(&t, "overload: order p99").met, Some(false));
    let inv = row(&t, "overload: invariants");
    assert_eq!((inv.measured.as_str(), inv.met), ("broken: one order per user", Some(false)));
}

/// A storm run: every unit back in Redis after `redis_s` seconds, the spike during it at
/// `during` accepted/s against 2,000 without.
fn storm_report(redis_s: Option<f64>, during: f64) -> Report {
    use crate::report::SpikeFigures;
    let mut r = report(KIND_SCENARIO, names::STORM, "order", during);
    let spike = |accepted: f64, clicks: f64| SpikeFigures {
        goods_id: 3,
        users: 20_000,
        stock: 1_000,
        accepted_per_sec: accepted,
        clicks_per_sec: clicks,
        order_p99_ms: Some(80.0),
        load_secs: 5.0,
    };
    r.storm = Some(StormSummary {
        goods_id: 2,
        orders: 50_000,
        order_ttl_secs: 60,
        buy_accepted_per_sec: 3_000.0,
        buy_secs: Some(19.5),
        paused_secs: 21.0,
        margin_secs: 2.0,
        db_secs: redis_s.map(|s| s - 0.5),
        redis_secs: redis_s,
        db_per_sec: StormSummary::per_sec(50_000, redis_s.map(|s| s - 0.5)),
        redis_per_sec: StormSummary::per_sec(50_000, redis_s),
        baseline: spike(2_000.0, 4_000.0),
        during: spike(during, 3_000.0),
        accepted_ratio: StormSummary::ratio(during, 2_000.0),
        clicks_ratio: Some(0.75),
        rebuy_sample: 1_000,
        rebuy_accepted: 1_000,
        rebuy_success: 1_000,
    });
    r
}

#[test]
fn the_expiry_storm_is_held_to_ten_thousand_a_second_and_the_spike_to_four_fifths() {
    let mut c = Collected::default();
    let (rate, spike) = ("expiry storm:", "spike during the expiry storm");
    assert_eq!((row(&targets(&c), rate).met, row(&targets(&c), spike).met), (None, None));

    c.reports.insert(names::STORM.into(), vec![storm_report(Some(5.0), 1_600.0)]);
    let t = targets(&c);
    let r = row(&t, "expiry storm: 50,000 unpaid orders (TTL 60 s) all expiring at once");
    assert_eq!(
        (r.measured.as_str(), r.goal.as_str(), r.met),
        (
            "10,000 expiries/s (every unit back in Redis after 5.00 s, 10,000 /s; in PostgreSQL after 4.50 s, 11,111 /s)",
            ">= 10,000",
            Some(true)
        )
    );
    let s = row(&t, "spike during the expiry storm (20,000 users, 1,000 units");
    assert_eq!((s.ratio, s.goal.as_str(), s.met), (Some(0.8), ">= 0.8", Some(true)));
    assert_eq!(s.measured, "1,600 /s (clicks answered 3,000 /s, order p99 80.0 ms)");
    assert_eq!(s.against, "without 2,000 /s (clicks answered 4,000 /s, ratio 0.75)");
    // The median of repeated runs is by the storm's rate.
    assert_eq!(c.report(names::STORM).unwrap().0.primary(), 10_000.0);

    let md = render(&c).unwrap();
    assert!(md.contains("### storm\n"), "{md}");
    assert!(md.contains("after 5.000 s, **10,000 expiries/s**"), "{md}");
    assert!(md.contains("(**0.80 x** the accepted rate, 0.75 x the clicks)"), "{md}");
    assert!(
        md.contains("1,000 of the expired buyers bought again: 1,000 accepted (202), 1,000 success"),
        "{md}"
    );
    assert!(md.contains("phase C (storm) as phase B, with order-service restarted alone with `SECKILL__ORDER__TTL_SECS=60`"), "{md}");

    // Slower, or never done within the timeout; a spike slowed down more.
    c.reports.insert(names::STORM.into(), vec![storm_report(Some(71.0), 1_599.0)]);
    let t = targets(&c);
    assert!(row(&t, rate).measured.starts_with("704 expiries/s"), "{:?}", row(&t, rate));
    assert_eq!((row(&t, rate).met, row(&t, spike).met), (Some(false), Some(false)));
    c.reports.insert(names::STORM.into(), vec![storm_report(None, 1_600.0)]);
    let r = row(&targets(&c), rate).clone();
    assert_eq!(
        (r.measured.as_str(), r.met),
        (
            "units not all back in Redis within the timeout (in PostgreSQL not all within the timeout)",
            Some(false)
        )
    );
}

#[test]
fn busy_answers_are_told_with_the_buyers() {
    let mut c = Collected::default();
    let mut r = report(KIND_SCENARIO, names::SPIKE, "order", 5_000.0);
    r.buy = Some(BuySummary {
        users: 20_000,
        clicks: 20_000,
        busy_answers: 1_500,
        ended_busy: 12,
        busy_retries: 3,
        ..Default::default()
    });
    c.reports.entry(names::SPIKE.into()).or_default().push(r.clone());
    let md = render(&c).unwrap();
    assert!(
            md.contains("result polls. Shed (`503 BUSY`): 1,500 answers to buy calls, 1,488 of them retried after their `Retry-After` (up to 3 retries a click); 12 clicks still BUSY after them.\n"),
            "{md}"
        );
    // Nothing shed: nothing said.
    r.buy.as_mut().unwrap().busy_answers = 0;
    c.reports.insert(names::SPIKE.into(), vec![r]);
    assert!(!render(&c).unwrap().contains("Shed (`503 BUSY`)"));
}

#[test]
fn sync_stands_next_to_the_accept_path_with_a_ratio() {
    let mut c = Collected::default();
    let mut sync = report(KIND_SCENARIO, names::SYNC, "buy", 2_000.0);
    sync.calls.push(CallStats {
        call: "buy".into(),
        outcome: "200".into(),
        count: 2_000,
        per_sec: 2_000.0,
        window_secs: 1.0,
        latency: Latency { p50_ms: 200.0, p99_ms: 410.5, ..Latency::default() },
    });
    sync.sync = Some(SyncSummary {
        buys: 2_000,
        stock: 4_000,
        connections: 500,
        pool_size: 32,
        accepted: 2_000,
        accepted_per_sec: 2_000.0,
        orders: 2_000,
        distinct_users: 2_000,
        available: 2_000,
        total: 4_000,
        ..SyncSummary::default()
    });
    c.reports.entry(names::SYNC.into()).or_default().push(sync);
    let md = render(&c).unwrap();
    assert!(
            md.contains("| sync (one transaction per buy) | 2,000 accepted buys/s | 200.00 | 410.50 | the synchronous design"),
            "{md}"
        );
    assert!(md.contains("The accept path alone (drain-backlog) was not measured |"), "{md}");
    assert!(md.contains("### sync\n"), "{md}");
    assert!(md.contains("2,000 answered 200 (**2,000 accepted buys/s** while units lasted)"), "{md}");

    c.reports.entry(names::DRAIN_BACKLOG.into()).or_default().push(drain_report(
        names::DRAIN_BACKLOG,
        13_000.0,
        95.0,
    ));
    let md = render(&c).unwrap();
    assert!(
        md.contains("The accept path alone (drain-backlog): **13,000 accepted buys/s, 6.50 x** this |"),
        "{md}"
    );
    assert!(md.find("### drain-backlog") < md.find("### sync"), "{md}");
    // Repeated runs are ordered by their accepted buys/s.
    assert_eq!(c.report(names::SYNC).unwrap().0.primary(), 2_000.0);
}

#[test]
fn the_recorded_run_renders_every_section() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/bench");
    let md = render(&Collected::read(&dir).unwrap()).unwrap();
    for heading in [
        "# Benchmarks\n\nWritten by `scripts/bench.sh`",
        "\n## Targets\n\n| target |",
        "\n## Baselines: this machine's limits, same run\n\n",
        "\n## Scenarios\n\n### seed\n\n`seckill-bench seed",
        "\n## What a request costs\n\n",
        "\n## What stands in the way\n\n",
        "\n## Where the CPU went\n\n",
        "\n## The machine\n\n",
        "\n## Reproduce\n\n",
    ] {
        assert!(md.contains(heading), "{heading:?} missing from\n{md}");
    }
    assert!(!md.contains("{{") && !md.contains("{%") && !md.contains("\n\n\n"), "{md}");
    assert!(md.ends_with("```\n"));
}

/// A sold-out run through a gateway recorded with these settings.
fn sold_out(name: &str, per_sec: f64, settings: &[(&str, &str)]) -> Report {
    let mut r = report(KIND_SCENARIO, name, "order", per_sec);
    r.load.gateways = vec!["http://127.0.0.1:18080".into()];
    r.load.gateway_settings = settings.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
    r
}

#[test]
fn the_shared_limit_is_compared_to_a_per_replica_one() {
    let mut c = Collected::default();
    let mut add = |r: Report| c.reports.entry(r.name.clone()).or_default().push(r);
    for v in [9_000.0, 10_000.0, 11_000.0] {
        add(sold_out(names::SOLD_OUT_PER_REPLICA, v, &[("rate_limit.shared", "false")]));
    }
    for v in [8_000.0, 9_500.0, 8_800.0] {
        add(sold_out(names::SOLD_OUT, v, &[]));
    }
    add(sold_out(names::SOLD_OUT_FORWARDED, 7_900.0, &[("sold_out.remember_ms", "0")]));
    // Not a target any more: the section shows the ratios.
    assert!(!targets(&c).iter().any(|t| t.what.contains("per-replica")));
    let md = render(&c).unwrap();
    assert!(
        md.contains(
            "| sold-out | http://127.0.0.1:18080 | as configured | 8,800 (runs: 8,000, 9,500, 8,800) |"
        ),
        "{md}"
    );
    assert!(md.contains("| 0.88 |\n"), "{md}");
    assert!(md.contains("\n## Rate limits shared across gateways\n"), "{md}");
    assert!(
        md.contains("| sold-out-forwarded | http://127.0.0.1:18080 | sold_out.remember_ms=0 | 7,900 |"),
        "{md}"
    );
    assert!(
        md.contains(
            "| sold-out-per-replica | http://127.0.0.1:18080 | rate_limit.shared=false | 10,000 (runs:"
        ),
        "{md}"
    );
}

/// A hot-user run whose clicks went to `gateways`, `let_through` of them past the limit.
fn hot_user(name: &str, gateways: &[&str], let_through: u64, elapsed_s: f64) -> Report {
    let mut r = report(KIND_SCENARIO, name, "order", 1_000.0);
    let split = gateways.len() as u64;
    let limit = LimitCheck {
        per_sec: 5.0,
        burst: 10.0,
        users: 1,
        elapsed_s,
        allowance: 10.0 + 5.0 * elapsed_s,
        calls: 1_000,
        let_through,
        unanswered: 0,
    };
    r.buy = Some(BuySummary {
        users: 1,
        clicks: 1_000,
        by_gateway: gateways
            .iter()
            .map(|g| crate::report::GatewayClicks {
                gateway: (*g).into(),
                clicks: 1_000 / split,
                rate_limited: (1_000 - let_through) / split,
            })
            .collect(),
        limit: Some(limit),
        ..Default::default()
    });
    r
}

#[test]
fn two_gateways_let_one_user_through_no_more_than_the_limit_allows() {
    let mut c = Collected::default();
    let one = hot_user(names::HOT_USER, &["http://127.0.0.1:8080"], 11, 0.25);
    c.reports.entry(names::HOT_USER.into()).or_default().push(one);
    let two = hot_user(names::HOT_USER_TWO, &["http://127.0.0.1:8080", "http://127.0.0.1:18280"], 12, 0.4);
    c.reports.entry(names::HOT_USER_TWO.into()).or_default().push(two.clone());
    // Not a target any more: the section says whether the limit held.
    assert!(!targets(&c).iter().any(|t| t.what.contains("gateways sharing their limits")));
    let md = render(&c).unwrap();
    assert!(
            md.contains("| hot-user-two-gateways | http://127.0.0.1:8080, http://127.0.0.1:18280 | 1,000 | 12 | 0.400 s | 10 + 5 x 0.400 = 12.0 | **yes** | http://127.0.0.1:8080: 500 / 6; http://127.0.0.1:18280: 500 / 6 |"),
            "{md}"
        );
    assert!(
            md.contains(
                "| hot-user | http://127.0.0.1:8080 | 1,000 | 11 | 0.250 s | 10 + 5 x 0.250 = 11.2 | **yes** | - |"
            ),
            "{md}"
        );

    // One more call than the buckets hold: the limit did not hold across the gateways.
    let mut leaky = two;
    leaky.buy.as_mut().unwrap().limit.as_mut().unwrap().let_through = 13;
    c.reports.insert(names::HOT_USER_TWO.into(), vec![leaky]);
    let md = render(&c).unwrap();
    assert!(md.contains("| 10 + 5 x 0.400 = 12.0 | **no** |"), "{md}");
}

#[test]
fn numbers_get_thousands_separators() {
    assert_eq!(n0(1_234_567.4), "1,234,567");
    assert_eq!(n0(999.0), "999");
    assert_eq!(n0(-1_000.0), "-1,000");
}

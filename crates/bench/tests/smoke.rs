//! The tool's smoke test, the one CI runs: the whole system in-process on port 0 (the harness of
//! crates/e2e, against the real PostgreSQL, Redis and RabbitMQ), the `seed` scenario at a tiny
//! size through the library API, and its report: invariants hold, counts add up, JSON, chart
//! and markdown; `hot-user` at a small size: exactly one order accepted; and `room` at a tiny
//! size: everyone joins, the admitted buy every unit, the rest are told sold out.
//! Plus the `upstream` + `http` baseline pair, which needs no servers.

use std::time::Duration;

use seckill_bench::report::Report;
use seckill_bench::scenario::{self, Scenario, ScenarioConfig};
use seckill_bench::{baseline, chart, cli, markdown};

fn count(report: &Report, call: &str, outcome: &str) -> u64 {
    report.row(call, outcome).map_or(0, |r| r.count)
}

/// 60 users for 20 units on 10 connections: exactly 20 winners, everyone answered, the
/// invariants hold, and the report's counts add up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiny_seed_scenario_holds_its_invariants() {
    let sys = seckill_e2e::spawn_system();
    let mut cfg = ScenarioConfig::new(Scenario::Seed, sys.gateway.url());
    (cfg.users, cfg.stock, cfg.connections, cfg.poll_connections) = (Some(60), Some(20), Some(10), Some(4));
    cfg.out.no_progress = true;
    cfg.final_timeout = Some(Duration::from_secs(60));
    let report = scenario::run(&cfg).await.expect("the scenario runs");
    println!("{}", report.render());

    assert!(report.invariants_hold(), "{:#?}", report.invariants);
    assert_eq!(report.invariants.len(), 7);
    let buy = report.buy.as_ref().expect("a buy summary");
    assert_eq!((buy.users, buy.clicks), (60, 60));
    assert_eq!(buy.accepted, 20);
    assert_eq!((buy.success, buy.failed, buy.still_queued), (20, 0, 0));
    assert_eq!(buy.stock_available, Some(0));
    assert_eq!(buy.accepted + buy.refused.values().sum::<u64>(), buy.clicks);

    // Every click asked for a path token; those answered 200 went on to order.
    assert_eq!(count(&report, "path-token", "all"), 60);
    assert_eq!(count(&report, "order", "all"), count(&report, "path-token", "200"));
    assert_eq!(count(&report, "order", "202"), 20);
    for call in ["path-token", "order", "result"] {
        let outcomes: u64 =
            report.calls.iter().filter(|r| r.call == call && r.outcome != "all").map(|r| r.count).sum();
        assert_eq!(outcomes, count(&report, call, "all"), "{call}");
    }
    assert!(count(&report, "result", "200") >= 20);
    assert_eq!(buy.polls, count(&report, "result", "all"));

    let drain = report.drain.as_ref().expect("a drain summary");
    assert!(drain.all_answered_within_s.is_some(), "{drain:?}");
    assert!(drain.orders_per_sec.is_some_and(|v| v > 0.0), "{drain:?}");
    assert!(report.row("order", "all").unwrap().latency.p50_ms > 0.0);

    // JSON round trip, chart and markdown from the same report.
    let dir = std::env::temp_dir().join(format!("seckill-bench-smoke-{}", uuid::Uuid::new_v4()));
    report.write_json(&dir.join("seed.json")).unwrap();
    let back = Report::read_json(&dir.join("seed.json")).unwrap();
    let key =
        |r: &Report| r.calls.iter().map(|c| (c.call.clone(), c.outcome.clone(), c.count)).collect::<Vec<_>>();
    assert_eq!(key(&back), key(&report));
    assert_eq!(back.invariants, report.invariants);
    chart::write_svg(&report, &dir.join("seed.svg")).unwrap();
    let svg = std::fs::read_to_string(dir.join("seed.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("polyline"), "{}", &svg[..200.min(svg.len())]);
    markdown::write(&dir, &dir.join("BENCHMARKS.md")).unwrap();
    let md = std::fs::read_to_string(dir.join("BENCHMARKS.md")).unwrap();
    assert!(md.contains("### seed") && md.contains("bench/seed.svg"), "{md}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// One user hammering the buy button (path tokens required, the gateway's default per-user
/// limit, burst 40): the path token is asked for once before the clock, so every timed call is
/// an order; exactly one is accepted and ends in success, the others are refused (the used
/// token, the repeat, the rate limit), and the invariants hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_user_gets_exactly_one_order_accepted() {
    let sys = seckill_e2e::spawn_system();
    let mut cfg = ScenarioConfig::new(Scenario::HotUser, sys.gateway.url());
    (cfg.clicks, cfg.connections, cfg.poll_connections) = (200, Some(10), Some(2));
    cfg.out.no_progress = true;
    cfg.final_timeout = Some(Duration::from_secs(60));
    // The harness's gateway: rate_limit.buy 20/s, burst 40 (crates/e2e).
    cfg.buy_limit = Some(scenario::BuyLimit { per_sec: 20.0, burst: 40.0 });
    let report = scenario::run(&cfg).await.expect("the scenario runs");
    println!("{}", report.render());

    assert!(report.invariants_hold(), "{:#?}", report.invariants);
    let buy = report.buy.as_ref().expect("a buy summary");
    assert_eq!((buy.users, buy.clicks), (1, 200));
    assert_eq!(buy.accepted, 1, "{buy:?}");
    assert_eq!((buy.success, buy.failed, buy.still_queued), (1, 0, 0));
    assert_eq!(buy.stock_available, Some(buy.stock - 1));

    // No path token inside the clock: 200 order calls, 202 once, the rest refused.
    assert_eq!(count(&report, "path-token", "all"), 0);
    assert_eq!(count(&report, "order", "all"), 200);
    assert_eq!(count(&report, "order", "202"), 1);
    // The clicks after the first carry the token it used up: the buyer is told they hold a
    // unit (409 REPEATED) or to slow down (429), never that the token is bad.
    let refused: u64 = ["409", "429"].iter().map(|o| count(&report, "order", o)).sum();
    assert_eq!(refused, 199, "{:#?}", report.calls);
    assert!(count(&report, "order", "409") > 0, "no click was told REPEATED: {:#?}", report.calls);
    assert!(count(&report, "order", "429") > 0, "the rate limit never answered: {:#?}", report.calls);
    // What the limit let through, against what its bucket allows over the clicks.
    let limit = buy.limit.as_ref().expect("the limit was given");
    assert_eq!((limit.calls, limit.unanswered), (200, 0));
    assert_eq!(limit.let_through, 200 - count(&report, "order", "429"));
    assert!(limit.held(), "{limit:?}");
    assert_eq!(buy.by_gateway.len(), 1);
    assert_eq!((buy.by_gateway[0].clicks, buy.by_gateway[0].let_through()), (200, limit.let_through));
    assert_eq!(report.params["path_token_once"], true);
    assert!(report.notes.iter().any(|n| n.contains("path token once")), "{:?}", report.notes);
}

/// 60 users in a room admitting 50 a second in front of 20 units: half join before the
/// opening, everyone has an end, the admitted buy (path token and order with their admission).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiny_room_admits_at_its_rate_and_sells_out() {
    use clap::Parser;
    use seckill_bench::cli::{Cli, Command};
    let sys = seckill_e2e::spawn_system();
    let redis = std::env::var("SECKILL_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let prefix = format!("seckill-bench-room-smoke-{}:", uuid::Uuid::new_v4().simple());
    let args = [
        "seckill-bench",
        "room",
        "--gateway",
        &sys.gateway.url(),
        "--users",
        "60",
        "--stock",
        "20",
        "--rate",
        "50",
        "--opens-in-secs",
        "2",
        "-c",
        "10",
        "--poll-secs",
        "1",
        "--memory-users",
        "0",
        "--redis-url",
        &redis,
        "--memory-prefix",
        &prefix,
        "--no-progress",
    ];
    let Command::Room(a) = Cli::try_parse_from(args).unwrap().command else { panic!("not room") };
    let report = seckill_bench::room::run(&a).await.expect("the scenario runs");
    println!("{}", report.render());
    assert!(report.invariants_hold(), "{:#?}", report.invariants);
    let r = report.room.as_ref().expect("a room summary");
    assert_eq!((r.joined, r.joined_before, r.bought, r.unfinished), (60, Some(30), 20, 0), "{r:?}");
    assert_eq!(r.told_admitted + r.told_sold_out, 60, "{r:?}");
    assert_eq!((count(&report, "order", "202"), count(&report, "join", "200")), (20, 60));
    assert_eq!(r.memory.len(), 1);
}

/// The one-hop baseline's pieces: the trivial upstream answers, and `http` load counts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_load_against_the_trivial_upstream() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(baseline::serve_upstream(
        listener,
        bytes::Bytes::from_static(baseline::UPSTREAM_BODY.as_bytes()),
        async {
            let _ = stop_rx.await;
        },
    ));
    let url = format!("http://127.0.0.1:{port}/api/goods");
    let cfg: baseline::HttpConfig = cli::parse_options(&[
        "--url",
        &url,
        "-c",
        "4",
        "--duration",
        "0.5",
        "--timeout-ms",
        "5000",
        "--no-progress",
    ])
    .unwrap();
    let report = baseline::http_load(&cfg).await.unwrap();
    let ok = report.row("get", "200").expect("200s");
    assert!(ok.count > 100, "{ok:?}");
    assert_eq!(count(&report, "get", "all"), ok.count);
    assert!(report.load_per_sec() > 0.0);

    // Open loop: about rate x duration requests.
    let cfg = baseline::HttpConfig { rate: Some(200.0), ..cfg };
    let report = baseline::http_load(&cfg).await.unwrap();
    let n = count(&report, "get", "200");
    assert!((90..=101).contains(&n), "{n}");
    let _ = stop_tx.send(());
    server.await.unwrap();
}

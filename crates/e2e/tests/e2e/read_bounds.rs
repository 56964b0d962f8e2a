//! Slow senders against the whole system: a thousand connections that each send part of a
//! request and then nothing hold none of the gateway's capacity, and each is answered 408 and
//! closed at `http.read_timeout_ms`, while buyers buy through the same gateway as fast as ever.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use seckill_testkit::slow::{self, SLACK, SlowClient};

use crate::helpers::{Options, spawn_system_with};

/// Slow connections open at once.
const SLOW: usize = 1_000;
/// Long enough for the buyers to finish while every slow connection is still open.
const BOUND: Duration = Duration::from_secs(3);
/// The most a buyer's call may take with the slow connections open: a buyer the slow
/// connections held back would wait for them to be cut, at [`BOUND`]. Well under it, and well
/// over what a call takes on a loaded 2-core machine (one first call took 233 ms there while
/// the workspace was compiling beside the test).
const FAST: Duration = Duration::from_secs(1);
const BUYERS: i64 = 5;

/// Raises this process's soft limit on open files to `want` (or the hard limit, if lower):
/// both ends of every slow connection live in this process, and the gateway's keep-alive
/// watchdog holds a duplicate of its end (`seckill_web::keep_alive`).
fn allow_open_files(want: u64) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let Rlimit { current, maximum } = getrlimit(Resource::Nofile);
    if current.is_some_and(|now| now < want) {
        let raised = maximum.map_or(want, |max| max.min(want));
        setrlimit(Resource::Nofile, Rlimit { current: Some(raised), maximum })
            .unwrap_or_else(|e| panic!("cannot raise the open-file limit to {raised}: {e}"));
    }
    let now = getrlimit(Resource::Nofile).current;
    assert!(
        now.is_none_or(|now| now >= 4 * SLOW as u64),
        "the open-file limit is {now:?}: too low for this test"
    );
}

#[tokio::test]
async fn a_thousand_slow_senders_hold_nothing_while_buyers_buy_in_time() {
    allow_open_files(8 * SLOW as u64);
    let sys =
        spawn_system_with(Options { read_timeout_ms: Some(BOUND.as_millis() as u64), ..Options::default() });
    let sale = sys.open_sale(100).await;
    let buyers = sys.dev_tokens(&(1..=BUYERS).map(|u| 1_000 + u).collect::<Vec<_>>()).await;
    let gateway = SocketAddr::from(([127, 0, 0, 1], sys.gateway.port));

    // Every way to send slowly, on the buy route and the anonymous ones.
    let requests = [
        slow::partial_head("/api/goods"),
        slow::partial_body("POST", &format!("/api/seckill/{}/orders", sale.id)),
        slow::partial_body("POST", "/api/auth/dev-token"),
        slow::get_with_length("/api/goods"),
    ];
    let opened = Instant::now();
    let clients = join_all((0..SLOW).map(|i| SlowClient::open(gateway, &requests[i % requests.len()]))).await;
    let clients: Vec<SlowClient> = clients.into_iter().map(|c| c.expect("a slow connection")).collect();
    let opening = opened.elapsed();
    assert!(opening < BOUND / 2, "opening {SLOW} connections took {opening:?}: the buyers would be too late");
    let linger = seckill_web::server::CLIENT_DISCONNECT_TIMEOUT;
    let closing =
        tokio::spawn(join_all(clients.into_iter().map(|c| c.wait_closed(BOUND + linger + SLACK * 2))));

    // Each buyer clicks (path token, order) and reads the result, one after another, while
    // every slow connection is open.
    let mut took = Vec::new();
    for (user, token) in &buyers {
        let started = Instant::now();
        let (status, body) = sys.path_token(token, sale.id).await;
        assert_eq!(status, 200, "buyer {user}'s path token: {body}");
        took.push(("token", started.elapsed()));
        let started = Instant::now();
        let (status, body) = sys.order(token, sale.id, body["token"].as_str()).await;
        assert_eq!(status, 202, "buyer {user}'s order: {body}");
        took.push(("order", started.elapsed()));
        let started = Instant::now();
        sys.result(token, sale.id).await;
        took.push(("result", started.elapsed()));
    }
    assert!(opened.elapsed() < BOUND, "the buyers finished after the slow connections were cut: {took:?}");
    for (call, t) in &took {
        assert!(*t < FAST, "a {call} took {t:?} with {SLOW} slow connections open: {took:?}");
    }

    let seen = closing.await.unwrap();
    let heads = seen.iter().step_by(requests.len());
    for s in heads {
        s.assert_cut_at(BOUND, linger, "a slow head");
    }
    for (i, s) in seen.iter().enumerate().filter(|(i, _)| i % requests.len() != 0) {
        s.assert_body_cut_at(BOUND, linger, &format!("slow body {i}"));
    }
    let last = seen.iter().map(|s| s.closed).max().unwrap();
    let slowest = took.iter().map(|(_, t)| *t).max().unwrap();
    eprintln!(
        "{SLOW} slow connections opened in {opening:?}, the last closed after {last:?}; slowest buyer call {slowest:?}"
    );

    // Every buyer's click went through: each holds a unit.
    for (user, token) in &buyers {
        let result = sys.final_result(token, sale.id, Duration::from_secs(10)).await;
        assert_eq!(result.status, seckill_common::api::SeckillStatus::Success, "buyer {user}: {result:?}");
    }
}

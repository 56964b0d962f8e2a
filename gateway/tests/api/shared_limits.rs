//! The rate limit shared by gateway replicas through Redis: one user over two gateways gets one
//! limit; a Redis that is down or hangs leaves each replica limiting alone, never a 5xx.

use std::time::{Duration, Instant};

use gateway::configuration::Settings;
use seckill_testkit::{RunningService, TestNames};
use tokio::net::TcpListener;

use crate::helpers::{Echo, TestApp, assert_error, metric, refused_url, settings, user_token};

/// The limit every test here sets on the buy routes.
const PER_SEC: u32 = 2;
const BURST: u32 = 4;

fn buy_limit(s: &mut Settings) {
    s.rate_limit.buy.per_sec = Some(PER_SEC);
    s.rate_limit.buy.burst = Some(BURST);
}

/// Two gateways sharing `prefix` (the shared buckets' keys), in front of the same upstreams.
fn two_gateways(prefix: &str, change: impl Fn(&mut Settings)) -> (TestApp, TestApp, Vec<RunningService>) {
    let upstreams =
        vec![Echo::new("seckill").start(), Echo::new("order").start(), Echo::new("stock").start()];
    let gateway = || {
        let mut s = settings(&upstreams[0].url(), &upstreams[1].url(), &upstreams[2].url());
        s.redis.key_prefix = prefix.to_owned();
        buy_limit(&mut s);
        change(&mut s);
        TestApp::start(s, Vec::new())
    };
    (gateway(), gateway(), upstreams)
}

/// `clicks` buy requests of one user, alternating over `gateways`, as fast as they answer:
/// how many passed, and how long it took. Anything but 200 and 429 fails the test.
async fn hammer(gateways: &[&TestApp], clicks: usize) -> (usize, Duration) {
    let token = user_token(42);
    let started = Instant::now();
    let mut passed = 0;
    for k in 0..clicks {
        let app = gateways[k % gateways.len()];
        let res = app.post("/api/seckill/1/orders").bearer_auth(&token).send().await.unwrap();
        match res.status().as_u16() {
            200 => passed += 1,
            429 => assert!(res.headers().contains_key("retry-after")),
            other => panic!("click {k}: {other} {}", res.text().await.unwrap()),
        }
    }
    (passed, started.elapsed())
}

/// What one limit lets through in `elapsed`: the burst, then the rate (one more for a token
/// earned while the last request was on its way).
fn one_limit(elapsed: Duration) -> usize {
    BURST as usize + (elapsed.as_secs_f64() * f64::from(PER_SEC)).ceil() as usize + 1
}

#[tokio::test]
async fn one_user_over_two_gateways_gets_one_limit() {
    let names = TestNames::new();
    let (a, b, _upstreams) = two_gateways(&names.redis_prefix, |_| {});

    let (passed, elapsed) = hammer(&[&a, &b], 30).await;

    assert!(passed >= BURST as usize, "the burst passes: {passed}");
    assert!(passed <= one_limit(elapsed), "{passed} passed in {elapsed:?} over two gateways");
    // Another user has a bucket of its own on both.
    let res = b.post("/api/seckill/1/orders").bearer_auth(user_token(43)).send().await.unwrap();
    assert_eq!(res.status(), 200);
}

#[tokio::test]
async fn each_gateway_limits_alone_when_the_limit_is_not_shared() {
    // What the shared buckets prevent: two replicas, each with the whole limit.
    let names = TestNames::new();
    let (a, b, _upstreams) = two_gateways(&names.redis_prefix, |s| s.rate_limit.shared = false);

    let (passed, elapsed) = hammer(&[&a, &b], 30).await;

    assert!(passed >= 2 * BURST as usize, "{passed} passed in {elapsed:?}");
}

#[tokio::test]
async fn a_lease_never_lets_more_through_than_the_limit() {
    let names = TestNames::new();
    let (a, b, _upstreams) = two_gateways(&names.redis_prefix, |s| s.rate_limit.lease = 3);

    let (passed, elapsed) = hammer(&[&a, &b], 30).await;

    assert!(passed >= 2, "{passed}");
    assert!(passed <= one_limit(elapsed), "{passed} passed in {elapsed:?} with leases");
}

/// `gateway_rate_limit_shared_up` and `gateway_rate_limit_fallback_total` on the admin port.
async fn shared_state(app: &TestApp) -> (f64, f64) {
    (
        metric(app, "gateway_rate_limit_shared_up").await,
        metric(app, "gateway_rate_limit_fallback_total").await,
    )
}

#[tokio::test]
async fn concurrent_clicks_share_script_calls_and_one_user_still_gets_one_limit() {
    let names = TestNames::new();
    let (a, b, _upstreams) = two_gateways(&names.redis_prefix, |_| {});
    let gateways = [&a, &b];
    let click = |k: usize, user: i64| {
        let app = gateways[k % 2];
        let req = app.post("/api/seckill/1/orders").bearer_auth(user_token(user));
        async move { req.send().await.unwrap().status().as_u16() }
    };

    // 200 buyers once each and one user 40 times, all at once over both gateways.
    let started = Instant::now();
    let (buyers, hot) = tokio::join!(
        futures_util::future::join_all((0..200).map(|k| click(k, 1_000 + k as i64))),
        futures_util::future::join_all((0..40).map(|k| click(k, 42))),
    );
    let elapsed = started.elapsed();

    assert!(buyers.iter().all(|&s| s == 200), "every buyer within its limit: {buyers:?}");
    assert!(hot.iter().all(|&s| s == 200 || s == 429), "{hot:?}");
    let passed = hot.iter().filter(|&&s| s == 200).count();
    assert!(passed >= BURST as usize, "the burst passes: {passed}");
    assert!(passed <= one_limit(elapsed), "{passed} of 40 concurrent clicks passed in {elapsed:?}");
    // Every ask that reached the shared buckets went in a call with others waiting.
    let mut asks = 0.0;
    let mut calls = 0.0;
    for app in gateways {
        asks += metric(app, "gateway_rate_limit_shared_asks_total").await;
        calls += metric(app, "gateway_rate_limit_shared_calls_total").await;
    }
    // Each buyer asked once, the hot user at least once (a lease takes several tokens an ask).
    assert!(asks >= 201.0, "{asks} asks");
    assert!(calls < asks, "{calls} calls for {asks} asks: no call carried two");
    for app in gateways {
        assert_eq!(metric(app, "gateway_rate_limit_shared_up").await, 1.0, "no request decided alone");
    }
}

#[tokio::test]
async fn a_redis_that_is_down_leaves_each_replica_limiting_alone() {
    let upstreams =
        vec![Echo::new("seckill").start(), Echo::new("order").start(), Echo::new("stock").start()];
    let mut s = settings(&upstreams[0].url(), &upstreams[1].url(), &upstreams[2].url());
    s.redis.url = refused_url().replace("http://", "redis://");
    buy_limit(&mut s);
    let app = TestApp::start(s, upstreams);

    let (passed, elapsed) = hammer(&[&app], 12).await;

    // The replica's own bucket: the burst passes, then about the rate; nothing fails open.
    assert!(passed >= BURST as usize && passed <= one_limit(elapsed), "{passed} in {elapsed:?}");
    let (up, fallback) = shared_state(&app).await;
    assert_eq!(up, 0.0);
    assert!(fallback >= 1.0, "{fallback}");
    let res = app.post("/api/seckill/1/orders").bearer_auth(user_token(43)).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_error(
        app.post("/api/seckill/1/orders").bearer_auth(user_token(42)).send().await.unwrap(),
        429,
        "RATE_LIMITED",
    )
    .await;
}

#[tokio::test]
async fn a_redis_that_never_answers_costs_a_request_the_limit_timeout_not_a_hang() {
    // Accepts connections and never says a word.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("redis://{}", silent.local_addr().unwrap());
    let _held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            open.push(socket);
        }
    });
    let upstreams =
        vec![Echo::new("seckill").start(), Echo::new("order").start(), Echo::new("stock").start()];
    let mut s = settings(&upstreams[0].url(), &upstreams[1].url(), &upstreams[2].url());
    s.redis.url = url;
    // Without the limit's own timeout, a request would wait for this one.
    s.redis.timeout_ms = 30_000;
    s.rate_limit.shared_timeout_ms = 200;
    let app = TestApp::start(s, upstreams);

    let started = Instant::now();
    let res = app.post("/api/seckill/1/orders").bearer_auth(user_token(42)).send().await.unwrap();

    assert_eq!(res.status(), 200);
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    assert_eq!(shared_state(&app).await.0, 0.0);
}

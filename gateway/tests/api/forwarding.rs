//! Upstream answers passed back as they are, and upstream failures turned into gateway codes.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::helpers::{Echo, TestApp, assert_error, echoed, refused_url, settings, spawn_app, user_token};

#[tokio::test]
async fn an_upstream_status_and_body_pass_through_unchanged() {
    const BODY: &str = r#"{"code":"REPEATED","message":"you already hold an order for this sale"}"#;
    let seckill = Echo::new("seckill").status(409).body(BODY).start();
    let other = Echo::new("other").start();
    let app = TestApp::start(settings(&seckill.url(), &other.url(), &other.url()), vec![seckill, other]);

    let res = app.post("/api/seckill/1/orders").bearer_auth(user_token(5)).send().await.unwrap();

    assert_eq!(res.status(), 409);
    assert_eq!(res.headers()["content-type"], "application/json");
    assert_eq!(res.text().await.unwrap(), BODY);
}

#[tokio::test]
async fn an_upstream_that_refuses_connections_is_503_quickly() {
    let other = Echo::new("other").start();
    let app = TestApp::start(settings(&other.url(), &refused_url(), &other.url()), vec![other]);

    let started = Instant::now();
    let res = app.get("/api/orders").bearer_auth(user_token(5)).send().await.unwrap();

    assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());
    let message = assert_error(res, 503, "UPSTREAM_UNAVAILABLE").await;
    assert!(message.contains("order"), "{message}");
}

#[tokio::test]
async fn a_slow_upstream_is_504() {
    let slow = Echo::new("slow").delay(Duration::from_secs(5)).start();
    let other = Echo::new("other").start();
    let mut s = settings(&other.url(), &other.url(), &slow.url());
    s.upstreams.timeout_ms = 300;
    let app = TestApp::start(s, vec![slow, other]);

    let started = Instant::now();
    let res = app.get("/api/goods").send().await.unwrap();

    assert!(started.elapsed() < Duration::from_secs(4), "took {:?}", started.elapsed());
    assert_error(res, 504, "UPSTREAM_TIMEOUT").await;
}

#[tokio::test]
async fn the_next_replica_takes_the_request_when_one_refuses() {
    let live = Echo::new("order-live").start();
    let other = Echo::new("other").start();
    let replicas = format!("{}, {}", refused_url(), live.url());
    let app = TestApp::start(settings(&other.url(), &replicas, &other.url()), vec![live, other]);

    // Round-robin starts every other request at the dead replica.
    for _ in 0..4 {
        let res = app.get("/api/orders").bearer_auth(user_token(5)).send().await.unwrap();
        assert_eq!(echoed(res).await["upstream"], "order-live");
    }
}

#[tokio::test]
async fn requests_rotate_over_the_replicas() {
    let a = Echo::new("stock-a").start();
    let b = Echo::new("stock-b").start();
    let other = Echo::new("other").start();
    let replicas = format!("{},{}", a.url(), b.url());
    let app = TestApp::start(settings(&other.url(), &other.url(), &replicas), vec![a, b, other]);

    let mut seen = Vec::new();
    for _ in 0..4 {
        let res = app.get("/api/goods").send().await.unwrap();
        seen.push(echoed(res).await["upstream"].as_str().unwrap().to_owned());
    }

    assert!(seen.iter().any(|n| n == "stock-a"), "{seen:?}");
    assert!(seen.iter().any(|n| n == "stock-b"), "{seen:?}");
}

#[tokio::test]
async fn readyz_is_ready_when_every_upstream_has_a_live_replica() {
    let live = Echo::new("live").start();
    let with_a_dead_one = format!("{},{}", refused_url(), live.url());
    let app = TestApp::start(settings(&live.url(), &with_a_dead_one, &live.url()), vec![live]);

    let res = app.get("/readyz").send().await.unwrap();

    assert_eq!(res.status(), 200);
    assert_eq!(res.json::<Value>().await.unwrap(), json!({"status": "ready"}));
    let res = app.admin_get("/readyz").send().await.unwrap();
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["status"], "ready");
    assert_eq!(body["checks"]["order"], "ok");
}

#[tokio::test]
async fn readyz_stays_ready_with_an_upstream_down_and_only_the_admin_port_names_it() {
    let live = Echo::new("live").start();
    let dead = refused_url();
    let app = TestApp::start(settings(&live.url(), &live.url(), &dead), vec![live]);

    let res = app.get("/readyz").send().await.unwrap();

    assert_eq!(res.status(), 200, "one service down is answered per route, not by leaving the pool");
    let text = res.text().await.unwrap();
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), json!({"status": "ready"}));
    assert_tells_nothing_inside(&text, &dead);

    let res = app.admin_get("/readyz").send().await.unwrap();
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["status"], "degraded");
    assert_eq!(body["checks"]["seckill"], "ok");
    assert_eq!(body["checks"]["order"], "ok");
    assert!(body["checks"]["stock"].as_str().unwrap().contains(&dead), "{body}");
}

#[tokio::test]
async fn readyz_is_unavailable_when_no_upstream_answers() {
    let urls = [refused_url(), refused_url(), refused_url()];
    let app = TestApp::start(settings(&urls[0], &urls[1], &urls[2]), vec![]);

    let res = app.get("/readyz").send().await.unwrap();

    assert_eq!(res.status(), 503);
    let text = res.text().await.unwrap();
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), json!({"status": "unavailable"}));
    for url in &urls {
        assert_tells_nothing_inside(&text, url);
    }
    let res = app.admin_get("/readyz").send().await.unwrap();
    assert_eq!(res.status(), 503);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["status"], "unavailable");
    assert!(body["checks"]["order"].as_str().unwrap().contains(&urls[1]), "{body}");
}

/// No upstream's name, replica URL or error in a public answer.
fn assert_tells_nothing_inside(text: &str, replica: &str) {
    for inside in ["seckill", "order", "stock", "checks", "127.0.0.1", replica, "refused", "degraded"] {
        assert!(!text.contains(inside), "the public /readyz says {inside:?}: {text}");
    }
}

#[tokio::test]
async fn metrics_are_served_on_the_admin_port_only() {
    let app = spawn_app();
    // Something to count first.
    assert_eq!(app.get("/healthz").send().await.unwrap().status(), 200);

    assert_error(app.get("/metrics").send().await.unwrap(), 404, "NOT_FOUND").await;
    let res = app.admin_get("/metrics").send().await.unwrap();
    assert_eq!(res.status(), 200);
    let text = res.text().await.unwrap();
    assert!(text.contains("http_requests_total"), "{text}");
    // The admin listener answers its own routes and nothing of the public API.
    assert_eq!(app.admin_get("/healthz").send().await.unwrap().status(), 200);
    assert_error(app.admin_get("/api/goods").send().await.unwrap(), 404, "NOT_FOUND").await;
}

#[tokio::test]
async fn refused_connections_are_counted_in_the_metrics() {
    let other = Echo::new("other").start();
    let app = TestApp::start(settings(&refused_url(), &other.url(), &other.url()), vec![other]);
    let res = app.get("/api/seckill/1/result").bearer_auth(user_token(5)).send().await.unwrap();
    assert_eq!(res.status(), 503);

    let metrics = app.admin_get("/metrics").send().await.unwrap().text().await.unwrap();

    // The recorder is per process; other tests may add to the count, never remove the line.
    let line = metrics
        .lines()
        .find(|l| {
            l.starts_with("gateway_upstream_errors_total{")
                && l.contains(r#"upstream="seckill""#)
                && l.contains(r#"kind="connect""#)
        })
        .unwrap_or_else(|| panic!("no seckill connect errors counted:\n{metrics}"));
    let count: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(count >= 1.0, "{line}");
}

#[tokio::test]
async fn concurrent_requests_each_reach_the_upstream_as_their_own_user() {
    let app = spawn_app();
    let app = &app;

    // 200 requests, 20 in flight at a time, over both gateway workers and the shared pool.
    let results = futures_util::stream::iter(1..=200i64)
        .map(|user| async move {
            let res = app.get("/api/orders").bearer_auth(user_token(user)).send().await.unwrap();
            (user, echoed(res).await["user"]["id"].clone())
        })
        .buffer_unordered(20)
        .collect::<Vec<_>>()
        .await;

    assert_eq!(results.len(), 200);
    for (user, seen) in results {
        assert_eq!(seen, user, "user {user} reached the upstream as {seen}");
    }
}

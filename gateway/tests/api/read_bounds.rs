//! `http.read_timeout_ms` on both of the gateway's ports: a head sent in part, a body sent in
//! part (on the buy route the gateway forwards, and on a route it answers itself) and a GET
//! declaring a body it never sends are each answered 408 at the bound and closed. Between two
//! requests a connection is closed past `http.keep_alive_secs` and the bound, even while a next
//! head trickles in, and an honest client that pauses less keeps its connection.

use std::net::SocketAddr;
use std::time::Duration;

use seckill_testkit::slow;

use crate::helpers::{spawn_app_with, user_token};

const BOUND: Duration = Duration::from_millis(400);

/// The keep-alive of the tests between requests: short, so a test waits little past it.
const KEEP_ALIVE: Duration = Duration::from_secs(2);

fn addr(url: &str) -> SocketAddr {
    url.trim_start_matches("http://").parse().unwrap()
}

#[tokio::test]
async fn every_read_on_the_public_and_the_admin_port_is_bounded() {
    let app = spawn_app_with(|s| s.http.read_timeout_ms = BOUND.as_millis() as u64);
    let (public, admin) = (addr(&app.address), addr(&app.admin));

    tokio::join!(
        slow::assert_every_read_bounded(public, "/api/seckill/1/orders", "/api/goods", BOUND, "gateway"),
        slow::assert_every_read_bounded(public, "/api/auth/dev-token", "/api/goods/7", BOUND, "gateway"),
        slow::assert_every_read_bounded(admin, "/metrics", "/metrics", BOUND, "gateway's admin listener"),
    );

    // A client that sends in time is served as before, on both ports.
    let res =
        app.post("/api/seckill/1/orders").bearer_auth(user_token(5)).json(&serde_json::json!({})).send();
    assert_eq!(res.await.unwrap().status(), 200);
    assert_eq!(app.admin_get("/metrics").send().await.unwrap().status(), 200);
}

#[tokio::test]
async fn a_next_head_is_bounded_and_an_honest_client_kept_alive_on_both_ports() {
    let app = spawn_app_with(|s| {
        s.http.read_timeout_ms = BOUND.as_millis() as u64;
        s.http.keep_alive_secs = KEEP_ALIVE.as_secs();
    });
    let (public, admin) = (addr(&app.address), addr(&app.admin));
    tokio::join!(
        slow::assert_between_requests_bounded(public, "/api/goods", KEEP_ALIVE, BOUND, "gateway"),
        slow::assert_between_requests_bounded(
            admin,
            "/healthz",
            KEEP_ALIVE,
            BOUND,
            "gateway's admin listener"
        ),
    );
}

//! `http.read_timeout_ms` on the service's port: a head sent in part, a body sent in part and
//! a GET declaring a body it never sends are each answered 408 at the bound and closed, before
//! the credential is looked at (an unsigned slow sender is bounded as well). Between two requests
//! a connection is closed past `http.keep_alive_secs` and the bound, even while a next head
//! trickles in, and an honest client that pauses less keeps its connection.

use std::net::SocketAddr;
use std::time::Duration;

use seckill_testkit::slow;

use crate::helpers::spawn_app_with;

const BOUND: Duration = Duration::from_millis(400);

/// The keep-alive of the tests between requests: short, so a test waits little past it.
const KEEP_ALIVE: Duration = Duration::from_secs(2);

#[tokio::test]
async fn every_read_is_bounded() {
    let app = spawn_app_with(|s| s.http.read_timeout_ms = BOUND.as_millis() as u64);
    let addr = SocketAddr::from(([127, 0, 0, 1], app.service.port));
    slow::assert_every_read_bounded(
        addr,
        "/api/seckill/1/orders",
        "/api/seckill/1/result",
        BOUND,
        "seckill-service",
    )
    .await;
}

#[tokio::test]
async fn a_next_head_is_bounded_and_an_honest_client_kept_alive() {
    let app = spawn_app_with(|s| {
        s.http.read_timeout_ms = BOUND.as_millis() as u64;
        s.http.keep_alive_secs = KEEP_ALIVE.as_secs();
    });
    let addr = SocketAddr::from(([127, 0, 0, 1], app.service.port));
    slow::assert_between_requests_bounded(addr, "/healthz", KEEP_ALIVE, BOUND, "seckill-service").await;
}

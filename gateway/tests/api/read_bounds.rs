//! `http.read_timeout_ms` on both of the gateway's ports: a head sent in part, a body sent in
//! part (on the buy route the gateway forwards, and on a route it answers itself) and a GET
//! declaring a body it never sends are each answered 408 at the bound and closed.

use std::net::SocketAddr;
use std::time::Duration;

use seckill_testkit::slow;

use crate::helpers::{spawn_app_with, user_token};

const BOUND: Duration = Duration::from_millis(400);

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

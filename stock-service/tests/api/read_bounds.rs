//! `http.read_timeout_ms` on the service's port: a head sent in part, a body sent in part and
//! a GET declaring a body it never sends are each answered 408 at the bound and closed, before
//! the credential is looked at (an unsigned slow sender is bounded as well).

use std::net::SocketAddr;
use std::time::Duration;

use seckill_testkit::slow;

use crate::helpers::spawn_app_with;

const BOUND: Duration = Duration::from_millis(400);

#[tokio::test]
async fn every_read_is_bounded() {
    let app = spawn_app_with(|s| s.http.read_timeout_ms = BOUND.as_millis() as u64);
    let addr = SocketAddr::from(([127, 0, 0, 1], app.service.port));
    slow::assert_every_read_bounded(addr, "/internal/stock/goods", "/api/goods", BOUND, "stock-service")
        .await;
}

//! The security suite: what an attacker who reaches a service's port, or the broker, can do
//! (nothing), with the whole system running on the real servers.
//!
//! - Every service port refuses a missing, forged, stale or misdirected identity (401), also
//!   the identity headers older versions trusted (`x-user-id: 1`, `x-user-role: admin`).
//! - Internal routes refuse callers without a service credential (401), and services other
//!   than the one each route serves (403).
//! - Messages that move stock or orders, from anyone but their one producer, are refused:
//!   a forged release of a paid order's unit, a forged buy request, a forged expiry, a forged
//!   "sold out" broadcast.

use std::time::Duration;

use reqwest::Method;
use seckill_common::OrderId;
use seckill_common::UserId;
use seckill_common::amqp::{
    Broadcast, BroadcastKind, MESSAGE_VERSION, OrderExpiry, OrderRequest, Release, ReleaseReason, dead_queue,
};
use seckill_common::api::Role;
use seckill_common::trust::{AUTH_HEADER, Peer, RequestFacts, Trust, TrustSettings};
use seckill_testkit::keys;
use serde_json::json;
use uuid::Uuid;

use crate::helpers::{System, spawn_system};

const SETTLE: Duration = Duration::from_secs(15);

/// A key of the right length that belongs to no link: what an attacker can make up.
fn attacker() -> Trust {
    let key = "made-up-by-an-attacker-0123456789abcdef".to_owned();
    let settings = TrustSettings {
        send: Peer::ALL.iter().map(|p| (p.as_str().to_owned(), key.clone())).collect(),
        ..TrustSettings::default()
    };
    Trust::new(Peer::Gateway, &settings, &Peer::ALL, &[]).unwrap()
}

/// Every way to present an identity that must fail, for a request to `to` on a route that
/// wants a user.
fn bad_identities(to: Peer, method: &str, path: &str) -> Vec<(&'static str, Vec<(&'static str, String)>)> {
    let admin = Some((UserId::new(1).unwrap(), Role::Admin));
    let facts = RequestFacts { method, path, request_id: "" };
    let gateway = keys::trust(Peer::Gateway);
    let expired_ms = chrono::Utc::now().timestamp_millis() - 1_000;
    let other = if to == Peer::Order { Peer::Stock } else { Peer::Order };
    let headers = |v: String| vec![(AUTH_HEADER, v)];
    vec![
        ("none", vec![]),
        ("the old identity headers", vec![("x-user-id", "1".into()), ("x-user-role", "admin".into())]),
        ("a made-up key", headers(attacker().sign_request(to, &facts, admin))),
        ("a stale credential", headers(gateway.sign_request_expiring(to, &facts, admin, expired_ms))),
        ("another service's credential", headers(gateway.sign_request(other, &facts, admin))),
        (
            "another route's credential",
            headers(gateway.sign_request(to, &RequestFacts { path: "/x", ..facts }, admin)),
        ),
        (
            "another method's credential",
            headers(gateway.sign_request(to, &RequestFacts { method: "PUT", ..facts }, admin)),
        ),
        ("a service's own credential", headers(keys::trust(Peer::Seckill).sign_request(to, &facts, None))),
        ("garbage", headers("v1.gateway.1.admin.99999999999999.AAAA".into())),
    ]
}

async fn call(
    sys: &System,
    base: &str,
    method: Method,
    path: &str,
    headers: &[(&str, String)],
) -> (u16, String) {
    let mut req = sys.http.request(method, format!("{base}{path}")).json(&json!({}));
    for (name, value) in headers {
        req = req.header(*name, value);
    }
    let res = req.send().await.unwrap();
    let status = res.status().as_u16();
    (status, res.text().await.unwrap_or_default())
}

#[tokio::test]
async fn every_service_port_refuses_an_identity_the_gateway_did_not_sign_for_it() {
    let sys = spawn_system();
    let sale = sys.open_sale(5).await;
    let seckill = sys.seckill[0].url();
    let (order, stock) = (sys.order_url(), sys.stock.url());
    let targets = [
        (Peer::Seckill, seckill.as_str(), Method::POST, "/api/admin/goods".to_owned()),
        (Peer::Seckill, seckill.as_str(), Method::POST, format!("/api/seckill/{}/token", sale.id)),
        (Peer::Seckill, seckill.as_str(), Method::GET, format!("/api/admin/goods/{}/audit", sale.id)),
        (Peer::Order, order.as_str(), Method::GET, "/api/orders".to_owned()),
        (Peer::Order, order.as_str(), Method::POST, "/api/orders/1/pay".to_owned()),
        // Public, but only through the gateway (or to seckill-service and order-service, which
        // read goods): a service's own credential is good here.
        (Peer::Stock, stock.as_str(), Method::GET, format!("/api/goods/{}", sale.id)),
    ];
    for (to, base, method, path) in &targets {
        for (what, headers) in bad_identities(*to, method.as_str(), path) {
            if *to == Peer::Stock && what == "a service's own credential" {
                continue;
            }
            let (status, body) = call(&sys, base, method.clone(), path, &headers).await;
            assert_eq!(status, 401, "{method} {path} at {to} with {what}: {body}");
            assert!(body.contains("UNAUTHORIZED"), "{body}");
        }
    }
    // The control: the same request, signed as the gateway signs it, goes through.
    let path = format!("/api/seckill/{}/token", sale.id);
    let good = keys::as_user(Peer::Seckill, "POST", &path, 7, Role::User);
    assert_eq!(call(&sys, &seckill, Method::POST, &path, &[good]).await.0, 200);
    // Nothing was created by the forged admin.
    assert_eq!(sys.get("/api/goods", None).await.1.as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn internal_routes_take_only_the_credential_of_the_service_they_serve() {
    let sys = spawn_system();
    let sale = sys.open_sale(2).await;
    let buyer = sys.dev_token(21, "user").await;
    let order_id = sys.buy_order(&buyer, sale.id).await;
    assert_eq!(sys.pay(&buyer, order_id).await.0, 200);
    let key = sys.order_key_of(order_id).await;
    let (order, stock) = (sys.order_url(), sys.stock.url());
    let routes = [
        (Peer::Stock, stock.as_str(), Method::POST, "/internal/stock/release".to_owned(), Peer::Order),
        (Peer::Stock, stock.as_str(), Method::POST, "/internal/stock/deduct".to_owned(), Peer::Order),
        (Peer::Stock, stock.as_str(), Method::POST, "/internal/stock/deduct-batch".to_owned(), Peer::Order),
        (Peer::Stock, stock.as_str(), Method::POST, "/internal/stock/goods".to_owned(), Peer::Seckill),
        (
            Peer::Stock,
            stock.as_str(),
            Method::POST,
            format!("/internal/stock/{}/held", sale.id),
            Peer::Seckill,
        ),
        (
            Peer::Order,
            order.as_str(),
            Method::GET,
            format!("/internal/orders/active?goods_id={}", sale.id),
            Peer::Seckill,
        ),
        (
            Peer::Order,
            order.as_str(),
            Method::GET,
            format!("/internal/orders/count?goods_id={}", sale.id),
            Peer::Seckill,
        ),
    ];
    for (to, base, method, path, owner) in &routes {
        let bare = path.split_once('?').map_or(path.as_str(), |(p, _)| p);
        let (status, _) = call(&sys, base, method.clone(), path, &[]).await;
        assert_eq!(status, 401, "{path} without a credential");
        let gateway = keys::as_user(*to, method.as_str(), bare, 1, Role::Admin);
        assert_eq!(call(&sys, base, method.clone(), path, &[gateway]).await.0, 401, "{path} as the gateway");
        for from in [Peer::Seckill, Peer::Order, Peer::Stock] {
            if from == *owner || from == *to {
                continue;
            }
            let header = keys::as_service(from, *to, method.as_str(), bare);
            // A service with no link to this one is a stranger (401); one with a link of its
            // own, for other routes, is refused this one (403).
            let expected = if to.accepts_from().contains(&from) { 403 } else { 401 };
            let status = call(&sys, base, method.clone(), path, &[header]).await.0;
            assert_eq!(status, expected, "{path} as {from}");
        }
    }
    // The attack the old system allowed: releasing a paid order's key to sell its unit twice.
    let body = json!({"order_key": key});
    let res = sys.http.post(format!("{stock}/internal/stock/release")).json(&body).send().await.unwrap();
    assert_eq!(res.status(), 401);
    assert_eq!(sys.goods(sale.id).await.stock_available, 1);
    assert_eq!(sys.held_at_stock(sale.id).await, 1);
}

#[tokio::test]
async fn messages_from_anyone_but_their_producer_move_nothing() {
    let sys = spawn_system();
    let sale = sys.open_sale(3).await;
    let buyer = sys.dev_token(31, "user").await;
    let order_id = sys.buy_order(&buyer, sale.id).await;
    assert_eq!(sys.pay(&buyer, order_id).await.0, 200);
    let key: Uuid = sys.order_key_of(order_id).await.parse().unwrap();
    let names = &sys.amqp_names;

    // A release of the paid order's unit: unsigned, and signed by seckill-service's key.
    let release = Release {
        v: MESSAGE_VERSION,
        order_key: key,
        order_id: OrderId::new(order_id).unwrap(),
        user_id: UserId::new(31).unwrap(),
        goods_id: sale.id,
        reason: ReleaseReason::Cancelled,
    };
    let release = serde_json::to_vec(&release).unwrap();
    sys.publish_raw(&names.stock_release_queue(), &release).await;
    sys.publish_as(Peer::Seckill, Peer::Stock, &names.stock_release_queue(), &release).await;
    // A buy request for a user who never asked, bypassing the gate.
    let forged = OrderRequest::new(Uuid::new_v4(), UserId::new(32).unwrap(), sale.id, 0);
    let forged = serde_json::to_vec(&forged).unwrap();
    sys.publish_raw(&names.orders_queue(), &forged).await;
    sys.publish_as(Peer::Stock, Peer::Order, &names.orders_queue(), &forged).await;
    // An expiry of the paid order, and the restock of its unit, through the delay queue.
    let expiry = serde_json::to_vec(&OrderExpiry::new(vec![OrderId::new(order_id).unwrap()])).unwrap();
    sys.publish_raw(&names.order_expire_queue(), &expiry).await;
    sys.publish_as(Peer::Seckill, Peer::Order, &names.order_expire_queue(), &expiry).await;
    // "Sold out" for a sale with units left, to every seckill-service replica.
    let sold_out = serde_json::to_vec(&Broadcast::new(BroadcastKind::SoldOut, sale.id)).unwrap();
    publish_to_exchange(&names.broadcast_exchange(), &sold_out).await;

    for (queue, refused) in
        [(names.stock_release_queue(), 2), (names.orders_queue(), 2), (names.order_expire_queue(), 2)]
    {
        sys.eventually(&format!("{queue}: refused"), SETTLE, || async {
            sys.queue_depth(&dead_queue(&queue)).await == refused
        })
        .await;
    }
    // Nothing moved: the unit is still held, the order paid, no order for the forged buyer.
    assert_eq!(sys.held_at_stock(sale.id).await, 1);
    assert_eq!(sys.goods(sale.id).await.stock_available, 2);
    assert_eq!(sys.order_status(&buyer, order_id).await, "paid");
    assert_eq!(sys.active_orders(sale.id).await.0, 1);
    // The broadcast was refused too: the replica still sells.
    let other = sys.dev_token(33, "user").await;
    assert_eq!(sys.buy(&other, sale.id).await.0, 202);
    assert_eq!(sys.queue_depth(&names.restock_queue()).await, 0);
}

/// Publishes `body` unsigned to a fanout exchange.
async fn publish_to_exchange(exchange: &str, body: &[u8]) {
    let conn =
        lapin::Connection::connect(&seckill_testkit::amqp_url(), lapin::ConnectionProperties::default())
            .await
            .unwrap();
    let channel = conn.create_channel().await.unwrap();
    channel
        .basic_publish(
            exchange.into(),
            "".into(),
            Default::default(),
            body,
            lapin::BasicProperties::default(),
        )
        .await
        .unwrap();
    let _ = conn.close(200, "published".into()).await;
}

/// Series in the process's metrics (every service of the test shares the one recorder).
/// Label sets in the process's metrics: each line but comments and a histogram's buckets (a
/// histogram's label set counts once for its `_sum` and once for its `_count`, not once a
/// bucket, so one status a loaded machine gives late, a 504, weighs two, not sixteen).
fn series() -> usize {
    seckill_web::metrics::handle()
        .render()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty() && !l.contains("_bucket{"))
        .count()
}

/// Requests with random methods and random paths, `n` of them, 64 at a time.
async fn random_requests(sys: &System, buyer: &str, n: usize) {
    use futures_util::StreamExt;
    const CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~%";
    futures_util::stream::iter(0..n)
        .for_each_concurrent(64, |i| async move {
            let word = |len: usize, seed: u128| -> String {
                (0..len)
                    .map(|k| CHARS[((seed >> (k * 6 % 120)) % CHARS.len() as u128) as usize] as char)
                    .collect()
            };
            let seed = Uuid::new_v4().as_u128();
            let method =
                Method::from_bytes(word(3 + i % 9, seed).to_uppercase().as_bytes()).unwrap_or(Method::PATCH);
            let path = match i % 4 {
                0 => format!("/{}/{}", word(8, seed >> 3), word(5, seed >> 7)),
                1 => format!("/api/goods/{}", word(6, seed >> 11)),
                2 => format!("/api/seckill/{}/result", seed % 1_000_000_000),
                _ => format!("/api/{}", word(10, seed >> 13)),
            };
            let _ = sys.http.request(method, sys.url(&path)).bearer_auth(buyer).send().await;
        })
        .await;
}

#[tokio::test]
async fn random_methods_and_paths_leave_the_metric_series_flat() {
    let sys = spawn_system();
    let buyer = sys.dev_token(41, "user").await;
    // Every status and label value random input can reach, once.
    random_requests(&sys, &buyer, 2_000).await;
    let before = series();
    let n: usize =
        std::env::var("SECKILL_SECURITY_RANDOM_REQUESTS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    random_requests(&sys, &buyer, n).await;
    let after = series();
    eprintln!("metric series: {before} before, {after} after {n} random requests");
    // Other tests in this process may add their own series meanwhile; a few, not thousands.
    assert!(after <= before + 20, "{n} random requests grew the series from {before} to {after}");
}

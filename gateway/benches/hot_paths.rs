//! The gateway's own work on every protected request, without the network: the JWT check, the
//! per-user rate limit, and the header handling each way across the hop.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use actix_web::HttpResponse;
use actix_web::test::TestRequest;
use actix_web::web::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use gateway::auth::Authenticator;
use gateway::closed::ClosedSales;
use gateway::configuration::Quota;
use gateway::headers;
use gateway::rate_limit::{KeyedRateLimiter, Who};
use reqwest::header::{HeaderMap, HeaderValue};
use seckill_common::api::Role;
use seckill_common::{GoodsId, UserId};

fn jwt(c: &mut Criterion) {
    let auth = Authenticator::new("a-bench-secret-of-reasonable-length", Duration::from_secs(3600)).unwrap();
    let token = auth.issue(UserId::new(1_234_567).unwrap(), Role::User).unwrap();
    let header = format!("Bearer {token}");
    let req = TestRequest::post().insert_header(("authorization", header)).to_http_request();
    c.bench_function("jwt/authenticate", |b| b.iter(|| auth.authenticate(black_box(&req)).unwrap()));
}

fn rate_limit(c: &mut Criterion) {
    let quota = Quota { per_sec: NonZeroU32::new(20).unwrap(), burst: NonZeroU32::new(40).unwrap() };
    let limiter = KeyedRateLimiter::new(quota);
    // A spike: every call another user, so each is a fresh entry in the keyed store until the
    // ids wrap; the store then holds 100,000 users, like the gateway during a big sale.
    let mut next = 0_i64;
    c.bench_function("rate_limit/check_many_users", |b| {
        b.iter(|| {
            next = next % 100_000 + 1;
            // Users come back every 100,000 calls, many times a second here, so some calls
            // are refused: both answers cost the same lookup and update.
            black_box(limiter.take(&Who::user(UserId::new(next).unwrap())).is_ok())
        })
    });
}

/// What a browser or a load tool sends on `POST /api/seckill/{id}/orders`.
fn buy_request() -> actix_web::HttpRequest {
    TestRequest::post()
        .uri("/api/seckill/42/orders")
        .insert_header(("host", "shop.example.com"))
        .insert_header(("authorization", "Bearer eyJhbGciOiJIUzI1NiJ9.e30.c2lnbmF0dXJl"))
        .insert_header(("content-type", "application/json"))
        .insert_header(("content-length", "0"))
        .insert_header(("accept", "application/json"))
        .insert_header(("user-agent", "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36"))
        .insert_header(("x-seckill-token", "0123456789abcdef0123456789abcdef"))
        .insert_header(("connection", "keep-alive"))
        // Forged identity: must be dropped.
        .insert_header(("x-user-id", "1"))
        .to_http_request()
}

fn header_handling(c: &mut Criterion) {
    let req = buy_request();
    let request_id = "0b6f2e0e-3a43-4a6a-9a8f-6a3e8f2f4c1d";
    c.bench_function("headers/to_upstream", |b| {
        b.iter(|| headers::to_upstream(black_box(req.headers()), Some(request_id)))
    });

    // seckill-service's 202: what comes back through the hop.
    let mut upstream = HeaderMap::new();
    upstream.insert("content-type", HeaderValue::from_static("application/json"));
    upstream.insert("content-length", HeaderValue::from_static("71"));
    upstream.insert("x-request-id", HeaderValue::from_static("0b6f2e0e-3a43-4a6a-9a8f-6a3e8f2f4c1d"));
    upstream.insert("date", HeaderValue::from_static("Sun, 29 Nov 2026 10:00:00 GMT"));
    c.bench_function("headers/to_client", |b| {
        b.iter(|| {
            let mut response = HttpResponse::Accepted();
            headers::to_client(black_box(&upstream), &mut response);
            response.finish()
        })
    });
}

/// A click on a sale seckill-service just answered `410` for: the lookup and the answer the
/// gateway gives itself (`gateway::closed`), among 1,000 sales remembered.
fn closed_sale(c: &mut Criterion) {
    let closed = ClosedSales::new(Duration::from_secs(3600));
    for id in 1..=1_000 {
        closed.remember(
            GoodsId::new(id).unwrap(),
            Bytes::from_static(br#"{"code":"SOLD_OUT","message":"sold out"}"#),
        );
    }
    let g = GoodsId::new(500).unwrap();
    c.bench_function("closed/answer", |b| b.iter(|| closed.answer(black_box(g)).is_some()));
}

criterion_group!(benches, jwt, rate_limit, header_handling, closed_sale);
criterion_main!(benches);

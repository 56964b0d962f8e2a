//! What trust between services costs per request and per message: the gateway signs every
//! forwarded request and the service verifies it; every message is signed and verified once.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use seckill_common::UserId;
use seckill_common::api::Role;
use seckill_common::trust::{Peer, RequestFacts, Trust, TrustSettings};

const KEY: &str = "a-bench-link-key-of-forty-eight-bytes-0123456789";

fn trust(me: Peer, to: Peer, from: Peer) -> Trust {
    let settings = TrustSettings {
        send: [(to.as_str().to_owned(), KEY.to_owned())].into(),
        accept: [(from.as_str().to_owned(), KEY.to_owned())].into(),
        ..TrustSettings::default()
    };
    Trust::new(me, &settings, &[to], &[from]).unwrap()
}

fn requests(c: &mut Criterion) {
    let gateway = trust(Peer::Gateway, Peer::Seckill, Peer::Stock);
    let seckill = trust(Peer::Seckill, Peer::Order, Peer::Gateway);
    let facts = RequestFacts {
        method: "POST",
        path: "/api/seckill/42/orders",
        request_id: "0b6f2e0e-3a43-4a6a-9a8f-6a3e8f2f4c1d",
    };
    let user = Some((UserId::new(1_234_567).unwrap(), Role::User));
    c.bench_function("trust/sign_request", |b| {
        b.iter(|| gateway.sign_request(Peer::Seckill, black_box(&facts), user))
    });
    let value = gateway.sign_request(Peer::Seckill, &facts, user);
    c.bench_function("trust/verify_request", |b| {
        b.iter(|| seckill.verify_request(Some(black_box(value.as_bytes())), &facts).unwrap())
    });
}

fn messages(c: &mut Criterion) {
    let seckill = trust(Peer::Seckill, Peer::Order, Peer::Stock);
    let order = trust(Peer::Order, Peer::Stock, Peer::Seckill);
    // A batch of 50 buy requests, as one message.
    let body = br#"{"v":1,"request_id":"0b6f2e0e-3a43-4a6a-9a8f-6a3e8f2f4c1d","user_id":1234567,"goods_id":42,"ts":1764500000000}"#
        .repeat(50);
    c.bench_function("trust/sign_message_batch_of_50", |b| {
        b.iter(|| seckill.sign_message(Peer::Order, black_box(&body)))
    });
    let sig = seckill.sign_message(Peer::Order, &body);
    c.bench_function("trust/verify_message_batch_of_50", |b| {
        b.iter(|| order.verify_message(Peer::Seckill, Some(black_box(sig.as_bytes())), &body).unwrap())
    });
}

criterion_group!(benches, requests, messages);
criterion_main!(benches);

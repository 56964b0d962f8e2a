//! Encoding on the buy path, per accepted buy: the order request seckill-service publishes and
//! order-service decodes, the five Redis key names of the gate call, and the stored result a
//! poll reads back.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use seckill_common::amqp::{self, OrderRequest};
use seckill_common::keys::RedisKeys;
use seckill_common::scripts::StoredResult;
use seckill_common::{GoodsId, UserId};
use uuid::Uuid;

fn order_request(c: &mut Criterion) {
    let msg = OrderRequest::new(
        Uuid::new_v4(),
        UserId::new(1_234_567).unwrap(),
        GoodsId::new(42).unwrap(),
        1_764_400_000_000,
    );
    let body = serde_json::to_vec(&msg).unwrap();
    let mut group = c.benchmark_group("order_request");
    group.bench_function("encode", |b| b.iter(|| serde_json::to_vec(black_box(&msg)).unwrap()));
    group.bench_function("decode", |b| b.iter(|| amqp::decode::<OrderRequest>(black_box(&body)).unwrap()));
    group.finish();
}

fn gate_keys(c: &mut Criterion) {
    let keys = RedisKeys::new("shop-a:");
    let (g, u) = (GoodsId::new(42).unwrap(), UserId::new(1_234_567).unwrap());
    c.bench_function("redis_keys/gate_call", |b| {
        b.iter(|| {
            let (g, u) = (black_box(g), black_box(u));
            [keys.stock(g), keys.users(g), keys.pending(g), keys.result(g, u), keys.token(g, u)]
        })
    });
}

fn stored_result(c: &mut Criterion) {
    let raw = StoredResult::Success(9_876_543).encode();
    c.bench_function("stored_result/parse", |b| b.iter(|| StoredResult::parse(black_box(&raw)).unwrap()));
}

criterion_group!(benches, order_request, gate_keys, stored_result);
criterion_main!(benches);

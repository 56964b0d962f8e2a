//! The gate call: one EVALSHA of the reserve script against the real Redis
//! (`SECKILL_TEST_REDIS_URL`, default loopback), as seckill-service makes it for every buy
//! that gets past the sold-out flag, plus the message built for an accepted one. Keys live
//! under a prefix of their own and are removed at the end.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures_util::future::join_all;
use seckill_common::amqp::OrderRequest;
use seckill_common::config::RedisSettings;
use seckill_common::keys::RedisKeys;
use seckill_common::scripts::Epoch;
use seckill_common::{GoodsId, UserId};
use seckill_service::gate::{Gate, Reserve};
use seckill_service::routes::buy::order_message;
use seckill_testkit::TestNames;
use uuid::Uuid;

fn gate_call(c: &mut Criterion) {
    let names = TestNames::new();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let settings = RedisSettings { url: seckill_testkit::redis_url(), ..RedisSettings::default() };
    let redis = runtime.block_on(async { seckill_infra::redis::connect(&settings) }).unwrap();
    let gate = Gate::new(redis, RedisKeys::new(names.redis_prefix.clone()));
    let g = GoodsId::new(1).unwrap();
    let ready = runtime.block_on(async {
        gate.load_scripts().await?;
        gate.load(g, i64::MAX / 2, Epoch::new(1_764_400_000_000), None).await?;
        anyhow::Ok(())
    });
    if let Err(e) = ready {
        eprintln!("gate benchmarks skipped: Redis at {} did not answer: {e:#}", settings.url);
        return;
    }

    let mut next_user = 0_i64;
    let mut group = c.benchmark_group("gate");
    // Every call a new user on a big stock: the path an accepted buy takes.
    group.bench_function("reserve_accepted", |b| {
        b.to_async(&runtime).iter(|| {
            next_user += 1;
            let u = UserId::new(next_user).unwrap();
            let gate = &gate;
            async move {
                let (outcome, _) = gate.reserve(g, u, Uuid::new_v4(), 1_764_400_000_000, None).await.unwrap();
                assert!(matches!(outcome, Reserve::Reserved { .. }));
            }
        })
    });
    // A spike: 100 buyers at once share the one connection, their calls pipelined.
    group.throughput(Throughput::Elements(100));
    group.bench_function("reserve_accepted_100_at_once", |b| {
        b.to_async(&runtime).iter(|| {
            let first = next_user;
            next_user += 100;
            let gate = &gate;
            join_all((1..=100).map(move |i| async move {
                let u = UserId::new(first + i).unwrap();
                let (outcome, _) = gate.reserve(g, u, Uuid::new_v4(), 1_764_400_000_000, None).await.unwrap();
                assert!(matches!(outcome, Reserve::Reserved { .. }));
            }))
        })
    });
    group.throughput(Throughput::Elements(1));
    // The same user again: the script's early answer.
    group.bench_function("reserve_repeated", |b| {
        let u = UserId::new(1).unwrap();
        b.to_async(&runtime).iter(|| async {
            let (outcome, _) = gate.reserve(g, u, Uuid::new_v4(), 1_764_400_000_000, None).await.unwrap();
            assert_eq!(outcome, Reserve::Repeated);
        })
    });
    group.finish();
    drop(gate);
    drop(runtime);
    drop(names);
}

fn order_message_building(c: &mut Criterion) {
    let msg =
        OrderRequest::new(Uuid::new_v4(), UserId::new(1_234_567).unwrap(), GoodsId::new(42).unwrap(), 1);
    let trace_id = "0b6f2e0e-3a43-4a6a-9a8f-6a3e8f2f4c1d";
    c.bench_function("order_message/build", |b| {
        b.iter(|| order_message(black_box(&msg), black_box(trace_id)).unwrap())
    });
}

/// The load-shedding check every request that reaches Redis makes: take a slot, give it back.
/// `full` is the refusal, counted in its metric, that a replica past its bound answers with.
fn shedding_check(c: &mut Criterion) {
    let bound = seckill_web::shed::InFlight::new(1_024, "bench_shed_total");
    c.bench_function("shed/enter_and_leave", |b| b.iter(|| drop(black_box(bound.enter("order")))));
    let full = seckill_web::shed::InFlight::new(1, "bench_shed_total");
    let _held = full.enter("order");
    c.bench_function("shed/refused", |b| b.iter(|| black_box(full.enter("order")).is_err()));
}

criterion_group!(benches, gate_call, order_message_building, shedding_check);
criterion_main!(benches);

//! The gate call: one EVALSHA of the reserve script against the real Redis
//! (`SECKILL_TEST_REDIS_URL`, default loopback), as seckill-service makes it for every buy
//! that gets past the sold-out flag; the message built for accepted ones; and the batcher
//! against the real RabbitMQ (`SECKILL_TEST_AMQP_URL`): a hundred accepted requests published
//! one message each, then through the batcher. Keys and queues live under a prefix of their
//! own and are removed at the end.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures_util::future::join_all;
use seckill_common::amqp::AmqpNames;
use seckill_common::amqp::OrderRequest;
use seckill_common::config::AmqpSettings;
use seckill_common::config::RedisSettings;
use seckill_common::keys::{RedisKeys, SaleBucket};
use seckill_common::scripts::Epoch;
use seckill_common::trust::Peer;
use seckill_common::{GoodsId, UserId};
use seckill_service::batcher::{BatchSettings, Batcher, Enqueued, order_message};
use seckill_service::confirmations::Confirmations;
use seckill_service::gate::{Gate, Reserve};
use seckill_testkit::TestNames;
use seckill_web::shed::Limits;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

fn gate_call(c: &mut Criterion) {
    let names = TestNames::new();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let settings = RedisSettings { url: seckill_testkit::redis_url(), ..RedisSettings::default() };
    let redis = runtime.block_on(async { seckill_infra::redis::connect(&settings) }).unwrap();
    let gate = Gate::new(redis, RedisKeys::new(names.redis_prefix.clone()));
    let g = SaleBucket::new(GoodsId::new(1).unwrap(), 0);
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
    let request = |n: i64| {
        OrderRequest::new(Uuid::new_v4(), UserId::new(1_234_567 + n).unwrap(), GoodsId::new(42).unwrap(), 1)
    };
    let one = [request(0)];
    c.bench_function("order_message/build_one", |b| b.iter(|| order_message(black_box(&one)).unwrap()));
    let fifty: Vec<OrderRequest> = (0..50).map(request).collect();
    let mut group = c.benchmark_group("order_message");
    group.throughput(Throughput::Elements(50));
    group.bench_function("build_batch_of_50", |b| b.iter(|| order_message(black_box(&fifty)).unwrap()));
    group.finish();
}

/// A hundred accepted requests at once, each answered after its confirm: one message each (as
/// before batching), then through the batcher (window 0: the requests waiting at that moment
/// share a message; and 1 ms, the default).
fn batching(c: &mut Criterion) {
    let mut names = TestNames::new();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let amqp = AmqpSettings {
        url: seckill_testkit::amqp_url(),
        prefix: names.amqp_prefix.clone(),
        ..Default::default()
    };
    let amqp_names = AmqpNames::new(amqp.prefix.clone());
    names.cleanup_amqp(
        amqp_names.all_queues(1_800, amqp.retry_delay_ms),
        vec![amqp_names.broadcast_exchange()],
    );
    let redis_settings = RedisSettings { url: seckill_testkit::redis_url(), ..RedisSettings::default() };
    let ready = runtime.block_on(async {
        let trust = seckill_testkit::keys::trust(Peer::Seckill);
        let broker = seckill_service::startup::broker_use(&amqp_names);
        let publisher = Arc::new(broker.publisher(&amqp, "bench", trust).await?);
        let redis = seckill_infra::redis::connect(&redis_settings)?;
        let gate = Arc::new(Gate::new(redis, RedisKeys::new(names.redis_prefix.clone())));
        gate.load_scripts().await?;
        anyhow::Ok((publisher, gate))
    });
    let (publisher, gate) = match ready {
        Ok(ready) => ready,
        Err(e) => return eprintln!("batcher benchmarks skipped: the broker or Redis did not answer: {e:#}"),
    };
    let cancel = CancellationToken::new();
    let (confirmations, clearing) = Confirmations::start(gate.clone(), cancel.clone());
    runtime.spawn(clearing);
    let batcher_of = |window_ms: u64| {
        let settings =
            BatchSettings { window: Duration::from_millis(window_ms), max_requests: 50, capacity: 1_024 };
        let (batcher, gathering) = Batcher::start(
            publisher.clone(),
            gate.clone(),
            confirmations.clone(),
            amqp_names.orders_queue(),
            settings,
            cancel.clone(),
        );
        runtime.spawn(gathering);
        batcher
    };
    let (no_window, one_ms) = (batcher_of(0), batcher_of(1));
    let request =
        |n: i64| OrderRequest::new(Uuid::new_v4(), UserId::new(n).unwrap(), GoodsId::new(42).unwrap(), 1);

    let mut group = c.benchmark_group("batcher");
    group.sample_size(20).measurement_time(Duration::from_secs(5)).throughput(Throughput::Elements(100));
    group.bench_function("100_requests_one_message_each", |b| {
        b.to_async(&runtime).iter(|| {
            let (publisher, queue) = (&publisher, amqp_names.orders_queue());
            join_all((1..=100).map(move |n| {
                let queue = queue.clone();
                async move {
                    let (body, properties) = order_message(&[request(n)]).unwrap();
                    publisher.publish(Peer::Order, &queue, &body, properties).await.unwrap();
                }
            }))
        })
    });
    for (name, batcher) in
        [("100_requests_batched_window_0", &no_window), ("100_requests_batched_window_1ms", &one_ms)]
    {
        group.bench_function(name, |b| {
            b.to_async(&runtime).iter(|| {
                join_all((1..=100).map(|n| async move {
                    assert_eq!(batcher.enqueue(request(n)).await, Enqueued::Accepted);
                }))
            })
        });
    }
    group.finish();
    cancel.cancel();
    runtime.block_on(async { publisher.close().await });
    drop(runtime);
    drop(names);
}

/// The load-shedding check every request that reaches Redis makes: take a slot, give it back.
/// `full` is the refusal, counted in its metric, that a replica past its bound answers with;
/// `refuse_if_full` the gateway's look before a click's token and limit, with and without room.
fn shedding_check(c: &mut Criterion) {
    let bound = seckill_web::shed::InFlight::new(
        Limits { min: 32, max: 1_024, latency_target: Duration::from_millis(30) },
        "bench",
        "bench_shed_total",
    );
    c.bench_function("shed/enter_and_leave", |b| b.iter(|| drop(black_box(bound.enter("order")))));
    let full = seckill_web::shed::InFlight::new(Limits::fixed(1), "bench", "bench_shed_total");
    let _held = full.enter("order");
    c.bench_function("shed/refused", |b| b.iter(|| black_box(full.enter("order")).is_err()));
    c.bench_function("shed/refuse_if_full_with_room", |b| {
        b.iter(|| black_box(bound.refuse_if_full("buy")).is_ok())
    });
    c.bench_function("shed/refuse_if_full_when_full", |b| {
        b.iter(|| black_box(full.refuse_if_full("buy")).is_err())
    });
}

criterion_group!(benches, gate_call, order_message_building, batching, shedding_check);
criterion_main!(benches);

//! This machine's limits, measured in the same run as the scenarios: plain GET load at a URL
//! (`http`), a trivial upstream to put behind the gateway for a one-hop baseline (`upstream`),
//! and persistent AMQP publishing with many confirms in flight (`amqp-publish`).

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Confirmation, Connection, ConnectionProperties};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::cli::{self, Output};
use crate::client::{Conn, Endpoint, Req};
use crate::machine::{Involved, Watch};
use crate::progress::Progress;
use crate::record::{Call, Clock, Event, PUBLISH_ACK, PUBLISH_NACK};
use crate::report::{self, KIND_AMQP, KIND_HTTP, LoadShape, Report};

/// `http`: GET `url` on `connections` keep-alive connections for `duration`; the
/// subcommand's options.
#[derive(Debug, Clone, clap::Args)]
pub struct HttpConfig {
    /// The URL to GET (plain http).
    #[arg(long)]
    pub url: String,
    #[arg(long, short = 'c', default_value_t = 200)]
    pub connections: usize,
    /// Seconds of load.
    #[arg(long, default_value = "10", value_parser = cli::secs)]
    pub duration: Duration,
    /// Open loop at this many requests per second (latency from the scheduled start).
    #[arg(long, value_parser = cli::per_sec)]
    pub rate: Option<f64>,
    #[arg(long = "timeout-ms", value_name = "TIMEOUT_MS", default_value = "10000", value_parser = cli::millis)]
    pub request_timeout: Duration,
    /// The report's name.
    #[arg(long, default_value = "http")]
    pub name: String,
    #[command(flatten)]
    pub out: Output,
}

pub async fn http_load(cfg: &HttpConfig) -> anyhow::Result<Report> {
    let endpoint = Endpoint::parse(&cfg.url)?;
    let conns = Conn::open_many(&endpoint, cfg.connections.max(1), cfg.request_timeout).await?;
    let progress =
        Progress::new(cfg.out.progress() && cfg.duration >= Duration::from_secs(3), None, &cfg.name);
    let procs = cfg.out.procs();
    let watch = Watch::start(procs.clone(), Duration::from_millis(100));
    let started_at = report::now_rfc3339();
    let clock = Clock::start();
    let deadline = clock.t0() + cfg.duration;
    let seq = Arc::new(AtomicU64::new(0));
    let mut workers = JoinSet::new();
    for mut conn in conns {
        let (seq, counter, rate) = (seq.clone(), progress.counter.clone(), cfg.rate);
        workers.spawn(async move {
            let mut events = Vec::new();
            loop {
                let scheduled = rate.map(|r| {
                    clock.t0() + Duration::from_secs_f64(seq.fetch_add(1, Ordering::Relaxed) as f64 / r)
                });
                if scheduled.unwrap_or_else(Instant::now) >= deadline {
                    break;
                }
                if let Some(at) = scheduled {
                    tokio::time::sleep_until(at.into()).await;
                }
                let start = scheduled.unwrap_or_else(Instant::now);
                let a = conn.send(Req::get("")).await;
                events.push(clock.event(Call::Get, a.status, start, Instant::now()));
                counter.fetch_add(1, Ordering::Relaxed);
            }
            (events, conn.reconnects)
        });
    }
    let mut events: Vec<Event> = Vec::new();
    let mut reconnects = 0;
    while let Some(done) = workers.join_next().await {
        let (e, r) = done.context("a load worker panicked")?;
        events.extend(e);
        reconnects += r;
    }
    let end_us = clock.now_us();
    progress.finish();
    let cpu = watch.cpu(&Involved::only(&["gateway", "seckill-bench", "seckill_bench-"], procs));
    let memory = watch.memory();
    let mut notes = Vec::new();
    if reconnects > 0 {
        notes.push(format!("{reconnects} connections were re-opened after an error or a close"));
    }
    if cpu.disturbed {
        notes.push(cpu.disturbance());
    }
    let params = json!({
        "url": cfg.url,
        "connections": cfg.connections,
        "duration_secs": cfg.duration.as_secs_f64(),
        "rate": cfg.rate,
    });
    Ok(Report {
        load: LoadShape {
            connections: cfg.connections as u64,
            rate: cfg.rate,
            gateways: Vec::new(),
            ..LoadShape::default()
        },
        memory,
        cpu: Some(cpu),
        notes,
        ..Report::of_calls(KIND_HTTP, &cfg.name, started_at, params, &events, end_us)
    })
}

/// The body the trivial upstream answers to any request.
pub const UPSTREAM_BODY: &str = r#"[{"id":1,"name":"baseline","stock_available":0}]"#;

/// `upstream`: answers `body` (JSON) to any request on `listener`, keep-alive, until
/// `shutdown` resolves.
pub async fn serve_upstream(listener: TcpListener, body: Bytes, shutdown: impl Future<Output = ()>) {
    let json = HeaderValue::from_static("application/json");
    serve_http1(listener, shutdown, move |_req| {
        let mut res = Response::new(Full::new(body.clone()));
        res.headers_mut().insert(CONTENT_TYPE, json.clone());
        async move { Ok(res) }
    })
    .await;
}

/// Serves HTTP/1.1 keep-alive connections on `listener`, each request answered by `answer`,
/// until `shutdown` resolves (open connections end with their clients). A failed accept (out
/// of file descriptors, say) is the client's to see: the server goes on.
pub async fn serve_http1<F, Fut>(listener: TcpListener, shutdown: impl Future<Output = ()>, answer: F)
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<Response<Full<Bytes>>, Infallible>> + Send + 'static,
{
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            () = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => continue,
            },
        };
        let _ = stream.set_nodelay(true);
        let answer = answer.clone();
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service_fn(answer))
                .await;
        });
    }
}

/// `amqp-publish`: `messages` persistent publishes with confirms, `in_flight` unconfirmed at
/// most, to a scratch durable queue deleted afterwards; the subcommand's options.
#[derive(Debug, Clone, clap::Args)]
pub struct AmqpConfig {
    #[arg(
        long = "amqp-url",
        value_name = "AMQP_URL",
        env = "SECKILL_AMQP_URL",
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f"
    )]
    pub url: String,
    #[arg(long, default_value_t = 20_000)]
    pub messages: u64,
    /// Publishes waiting for their confirm at most.
    #[arg(long, default_value_t = 1_000)]
    pub in_flight: usize,
    /// Message size (an order request message is about 150 bytes).
    #[arg(long, default_value_t = 150)]
    pub body_bytes: usize,
    #[arg(long, default_value = "amqp-publish")]
    pub name: String,
    /// The scratch queue's name (default: `seckill-bench.scratch.<random>`).
    #[arg(long)]
    pub queue: Option<String>,
    #[command(flatten)]
    pub out: Output,
}

pub async fn amqp_publish(cfg: &AmqpConfig) -> anyhow::Result<Report> {
    let conn = Connection::connect(
        &cfg.url,
        ConnectionProperties::default().with_connection_name("seckill-bench".into()),
    )
    .await
    .with_context(|| format!("connecting to RabbitMQ at {}", redact(&cfg.url)))?;
    let channel = conn.create_channel().await?;
    channel.confirm_select(ConfirmSelectOptions::default()).await?;
    let queue = cfg.queue.clone().unwrap_or_else(|| {
        format!("seckill-bench.scratch.{}", &uuid::Uuid::new_v4().simple().to_string()[..12])
    });
    channel
        .queue_declare(
            queue.as_str().into(),
            QueueDeclareOptions { durable: true, ..QueueDeclareOptions::default() },
            FieldTable::default(),
        )
        .await?;
    let result = publish_all(&channel, &queue, cfg).await;
    let deleted = channel.queue_delete(queue.as_str().into(), QueueDeleteOptions::default()).await;
    let _ = conn.close(200, "bench done".into()).await;
    let mut report = result?;
    if let Err(e) = deleted {
        report.notes.push(format!("could not delete the scratch queue {queue}: {e}"));
    }
    Ok(report)
}

async fn publish_all(channel: &lapin::Channel, queue: &str, cfg: &AmqpConfig) -> anyhow::Result<Report> {
    // A body the size of an order request message.
    let mut body =
        br#"{"v":1,"request_id":"00000000-0000-0000-0000-000000000000","user_id":1,"goods_id":1,"ts":0}"#
            .to_vec();
    body.resize(cfg.body_bytes.max(1), b' ');
    let progress = Progress::new(cfg.out.progress(), Some(cfg.messages), "publishing");
    let procs = cfg.out.procs();
    let watch = Watch::start(procs.clone(), Duration::from_millis(100));
    let started_at = report::now_rfc3339();
    let clock = Clock::start();
    let mut events = Vec::with_capacity(usize::try_from(cfg.messages).unwrap_or(0));
    let mut waiting = FuturesUnordered::new();
    let record = |events: &mut Vec<Event>, (start, confirmed): (Instant, lapin::Result<Confirmation>)| {
        let status = match confirmed {
            Ok(Confirmation::Ack(None) | Confirmation::NotRequested) => PUBLISH_ACK,
            Ok(_) => PUBLISH_NACK,
            Err(_) => crate::client::STATUS_ERROR,
        };
        events.push(clock.event(Call::Publish, status, start, Instant::now()));
        progress.inc(1);
    };
    for _ in 0..cfg.messages {
        while waiting.len() >= cfg.in_flight.max(1) {
            if let Some(done) = waiting.next().await {
                record(&mut events, done);
            }
        }
        let start = Instant::now();
        let confirm = channel
            .basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions::default(),
                &body,
                BasicProperties::default().with_delivery_mode(2),
            )
            .await?;
        waiting.push(async move { (start, confirm.await) });
    }
    while let Some(done) = waiting.next().await {
        record(&mut events, done);
    }
    let end_us = clock.now_us();
    progress.finish();
    let cpu = watch.cpu(&Involved::only(
        &["beam.smp", "erl_child_setup", "inet_gethost", "epmd", "seckill-bench", "seckill_bench-"],
        procs,
    ));
    let memory = watch.memory();
    let mut notes = Vec::new();
    if cpu.disturbed {
        notes.push(cpu.disturbance());
    }
    let params = json!({
        "url": redact(&cfg.url),
        "messages": cfg.messages,
        "in_flight": cfg.in_flight,
        "body_bytes": body.len(),
        "persistent": true,
        "queue": "durable scratch queue, deleted afterwards",
    });
    Ok(Report {
        memory,
        cpu: Some(cpu),
        notes,
        ..Report::of_calls(KIND_AMQP, &cfg.name, started_at, params, &events, end_us)
    })
}

/// A URL with its password replaced by `***`.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact("amqp://guest:guest@127.0.0.1:5672/%2f"), "amqp://guest:***@127.0.0.1:5672/%2f");
        assert_eq!(redact("http://127.0.0.1:8080"), "http://127.0.0.1:8080");
    }
}

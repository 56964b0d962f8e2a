//! The replica's one pub/sub connection to Redis: subscribed to the channel of each sale it
//! holds streams of, handing each notice to [`Push::deliver`]. Reconnects on its own; once
//! back, every stream re-reads its result (what was published meanwhile is lost). A ping
//! every few seconds finds a connection that died without closing.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::PubSubSink;
use seckill_common::GoodsId;
use seckill_common::config::{ConfigError, RedisSettings};
use seckill_common::keys::RedisKeys;
use seckill_common::push::Notice;
use seckill_web::Lifecycle;

use super::Push;

/// How often the connection is checked, and sales without streams unsubscribed.
const CHECK: Duration = Duration::from_secs(5);
/// How long a subscribe, a ping or a connect may take.
const ANSWER: Duration = Duration::from_secs(2);
/// The longest pause between two connection attempts.
const MAX_RETRY: Duration = Duration::from_secs(5);

pub struct Channel {
    /// Where to connect: one server, or a cluster's first node (a publish on a cluster
    /// reaches the subscribers of every node).
    client: redis::Client,
    /// The commands side of the connection, while it is up.
    sink: Mutex<Option<PubSubSink>>,
    subscribed: Mutex<HashSet<GoodsId>>,
    keys: RedisKeys,
    /// Connections made so far: one while Redis stays up.
    connects: AtomicU64,
}

impl Channel {
    pub fn new(settings: &RedisSettings, keys: RedisKeys) -> anyhow::Result<Self> {
        let url =
            settings.urls().into_iter().next().ok_or_else(|| ConfigError::at("redis.url", "is empty"))?;
        let client = redis::Client::open(url).map_err(|e| ConfigError::at("redis.url", e.to_string()))?;
        Ok(Self {
            client,
            sink: Mutex::default(),
            subscribed: Mutex::default(),
            keys,
            connects: AtomicU64::new(0),
        })
    }

    /// How many times the connection was made: more than once, it was lost (or refused) between.
    pub fn connects(&self) -> u64 {
        self.connects.load(Ordering::Relaxed)
    }

    fn sink(&self) -> Option<PubSubSink> {
        self.sink.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn subscribed(&self) -> std::sync::MutexGuard<'_, HashSet<GoodsId>> {
        self.subscribed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Subscribes to `g`'s channel and waits for Redis to confirm, unless it is already.
    /// Without a connection nothing happens: the stream's own re-reads cover it.
    pub async fn subscribe(&self, g: GoodsId) {
        if self.subscribed().contains(&g) {
            return;
        }
        let Some(mut sink) = self.sink() else {
            return;
        };
        match tokio::time::timeout(ANSWER, sink.subscribe(self.keys.sale_events(g))).await {
            Ok(Ok(())) => {
                self.subscribed().insert(g);
            }
            Ok(Err(e)) => {
                tracing::warn!(goods_id = %g, error = %e, "push: subscribing to a sale's channel failed")
            }
            Err(_) => tracing::warn!(goods_id = %g, "push: subscribing to a sale's channel timed out"),
        }
    }

    /// Subscriptions follow the streams: the sales this replica holds streams of and is not
    /// subscribed to (a stream opened while the connection came up) are subscribed, those it
    /// no longer holds streams of unsubscribed (a stream opened for one meanwhile is
    /// subscribed again at the next check, and re-reads until then).
    async fn reconcile(&self, push: &Push) {
        let live: HashSet<GoodsId> = push.sales().into_iter().collect();
        let missing: Vec<GoodsId> = live.iter().filter(|g| !self.subscribed().contains(g)).copied().collect();
        for g in missing {
            self.subscribe(g).await;
        }
        let gone: Vec<GoodsId> = self.subscribed().iter().filter(|g| !live.contains(g)).copied().collect();
        let Some(mut sink) = self.sink() else {
            return;
        };
        for g in gone {
            if let Ok(Ok(())) = tokio::time::timeout(ANSWER, sink.unsubscribe(self.keys.sale_events(g))).await
            {
                self.subscribed().remove(&g);
            }
        }
    }

    /// One connection's life: subscribes to every sale with streams, then hands on notices
    /// until the connection fails or the gateway stops (true).
    async fn serve(
        &self,
        push: &Push,
        client: &redis::Client,
        lifecycle: &Lifecycle,
    ) -> anyhow::Result<bool> {
        let pubsub = tokio::time::timeout(ANSWER, client.get_async_pubsub()).await??;
        let (mut sink, mut notices) = pubsub.split();
        let sales = push.sales();
        if !sales.is_empty() {
            let channels: Vec<String> = sales.iter().map(|g| self.keys.sale_events(*g)).collect();
            tokio::time::timeout(ANSWER, sink.subscribe(channels)).await??;
        }
        *self.subscribed() = sales.into_iter().collect();
        *self.sink.lock().unwrap_or_else(PoisonError::into_inner) = Some(sink.clone());
        metrics::gauge!("gateway_push_channel_up").set(1.0);
        self.connects.fetch_add(1, Ordering::Relaxed);
        tracing::info!("push: listening for notices on Redis");
        // Notices published while no connection was up are lost: read again.
        push.reread_all();
        let mut check = tokio::time::interval(CHECK);
        check.tick().await;
        loop {
            tokio::select! {
                notice = notices.next() => match notice {
                    Some(msg) => self.hand_on(push, msg.get_channel_name(), msg.get_payload_bytes()),
                    None => anyhow::bail!("the connection closed"),
                },
                _ = check.tick() => {
                    // In subscriber mode Redis answers a PING with ["pong", ""], not a string.
                    tokio::time::timeout(ANSWER, sink.ping::<redis::Value>()).await??;
                    self.reconcile(push).await;
                }
                () = lifecycle.cancel.cancelled() => return Ok(true),
            }
        }
    }

    fn hand_on(&self, push: &Push, channel: &str, payload: &[u8]) {
        match (self.keys.sale_of_events(channel), Notice::parse(payload)) {
            (Some(g), Some(notice)) => {
                metrics::counter!("gateway_push_notices_total").increment(1);
                push.deliver(g, notice);
            }
            _ => {
                metrics::counter!("gateway_push_notices_unread_total").increment(1);
                tracing::debug!(channel, "push: a message that is no notice, ignored");
            }
        }
    }

    fn down(&self) {
        *self.sink.lock().unwrap_or_else(PoisonError::into_inner) = None;
        self.subscribed().clear();
        metrics::gauge!("gateway_push_channel_up").set(0.0);
    }
}

/// Keeps the connection up until the gateway stops, retrying with a growing pause.
pub fn spawn(lifecycle: &Lifecycle, push: Arc<Push>) {
    let life = lifecycle.clone();
    lifecycle.spawn(async move {
        let first = Duration::from_millis(100);
        let mut pause = first;
        loop {
            let started = std::time::Instant::now();
            match push.channel.serve(&push, &push.channel.client, &life).await {
                Ok(true) => return,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "push: the notice channel to Redis is down; streams re-read")
                }
            }
            if started.elapsed() > MAX_RETRY {
                pause = first;
            }
            push.channel.down();
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = life.cancel.cancelled() => return,
            }
            pause = (pause * 2).min(MAX_RETRY);
        }
    });
}

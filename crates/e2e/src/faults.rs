//! What a test does to the system rather than through it, and the plumbing under that: faults
//! (order-service stopped and started again behind its `Relay`, Redis data or one bucket lost,
//! broker connections closed), where the helpers' requests go (`serve_through`), and waiting
//! for a condition (`eventually`).

use std::time::{Duration, Instant};

use redis::AsyncCommands;
use seckill_common::keys::SaleBucket;
use seckill_testkit::RunningService;

use crate::System;

/// A TCP relay on a loopback port of its own, forwarding each connection to the port it points
/// at now (0: none, and the connection is closed, as a service that is down). It lets a test
/// restart a service on a new port while the others keep its address: reusing the old port
/// could race with other tests' services taking it.
pub struct Relay {
    pub port: u16,
    target: std::sync::Arc<std::sync::atomic::AtomicU16>,
}

impl Relay {
    pub(crate) fn start() -> Self {
        use std::sync::atomic::{AtomicU16, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a relay port");
        listener.set_nonblocking(true).expect("a non-blocking relay");
        let port = listener.local_addr().expect("the relay's address").port();
        let target = std::sync::Arc::new(AtomicU16::new(0));
        let to = target.clone();
        // Its own thread and runtime, like the services; it ends with the test process.
        std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
            rt.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else { return };
                while let Ok((mut inbound, _)) = listener.accept().await {
                    let port = AtomicU16::load(&to, Ordering::Relaxed);
                    tokio::spawn(async move {
                        if port == 0 {
                            return;
                        }
                        if let Ok(mut outbound) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
                            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        }
                    });
                }
            });
        });
        Self { port, target }
    }

    pub(crate) fn point_at(&self, port: u16) {
        self.target.store(port, std::sync::atomic::Ordering::Relaxed);
    }
}

impl System {
    /// Stops order-service gracefully (as on SIGTERM): buy requests then wait in the queue.
    pub async fn stop_order(&self) {
        let running = self.order.lock().unwrap().take();
        if let Some(order) = running {
            self.order_relay.point_at(0);
            order.stop().await;
        }
    }

    /// Starts order-service again, with the same databases, behind the same address.
    pub fn start_order(&self) {
        let s = self.order_settings.clone();
        let mut slot = self.order.lock().unwrap();
        assert!(slot.is_none(), "order-service is running");
        let order = RunningService::start(move || order_service::startup::build(s));
        self.order_relay.point_at(order.port);
        *slot = Some(order);
    }

    /// What a Redis restart without persistence does to this system: every key gone (only this
    /// test's keys; the connections stay, as other tests share the server).
    pub async fn lose_redis_data(&self) {
        let mut conn = self.redis().await;
        let keys: Vec<String> = conn.keys(format!("{}*", self.redis_keys.prefix())).await.unwrap();
        if !keys.is_empty() {
            let _: () = conn.del(keys).await.unwrap();
        }
    }

    /// What a Redis Cluster node restarted empty does to the buckets on it: every key of one
    /// bucket of a sale gone (its stock, reservations, results, transfers), the others kept.
    pub async fn lose_bucket(&self, at: SaleBucket) {
        let probe = self.redis_keys.bucket_stock(at);
        let pattern = format!("{}*", probe.strip_suffix("stock").expect("a stock key ends so"));
        for node in self.redis_settings.url.split(',') {
            seckill_infra::redis::delete_matching(node.trim(), &pattern).await.unwrap();
        }
    }

    /// Closes, from the broker's side, every connection of this test whose name contains
    /// `part` (as `rabbitmqctl close_connection` does for an operator). Returns how many.
    pub fn close_connections(&self, part: &str) -> usize {
        let out = std::process::Command::new("rabbitmqctl")
            .args(["list_connections", "pid", "client_properties", "-q"])
            .output()
            .expect("rabbitmqctl runs");
        // One line a connection: the pid, a tab, the client properties, among them
        // {"connection_name","<name>"}.
        let wanted = self.amqp_names.prefix().to_owned();
        let mut closed = 0;
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Some((pid, properties)) = line.split_once('\t') else { continue };
            let name = properties
                .split_once("{\"connection_name\",\"")
                .and_then(|(_, rest)| rest.split('"').next())
                .unwrap_or_default();
            let named = name.starts_with(&wanted) && name.contains(part);
            if named {
                let status = std::process::Command::new("rabbitmqctl")
                    .args(["close_connection", pid, "test closes it", "-q"])
                    .status()
                    .unwrap();
                assert!(status.success(), "close_connection {pid}");
                closed += 1;
            }
        }
        closed
    }

    /// The URL of `path` where the helpers send requests: the gateway, or what is in front.
    pub fn url(&self, path: &str) -> String {
        match &self.front {
            Some(front) => format!("{front}{path}"),
            None => format!("{}{path}", self.gateway.url()),
        }
    }

    /// From now on the helpers go through `base` (`http://host:port`), which passes to the
    /// gateway what it does not answer itself.
    pub fn serve_through(&mut self, base: String) {
        self.front = Some(base);
    }

    /// order-service's own address (through the relay that outlives its restarts).
    pub fn order_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.order_relay.port)
    }

    /// Waits until `check` holds (polling every 100 ms), or panics naming `what` after `within`.
    pub async fn eventually<F, Fut>(&self, what: &str, within: Duration, check: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        eventually(what, within, Duration::from_millis(100), check).await;
    }
}

/// Waits until `check` holds (asking every `every`), or panics naming `what` after `within`.
pub async fn eventually<F, Fut>(what: &str, within: Duration, every: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(every).await;
    }
}

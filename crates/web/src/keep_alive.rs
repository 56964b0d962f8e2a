//! Between two requests a connection holds its socket at most `http.keep_alive_secs` plus
//! `http.read_timeout_ms`, silent or sending, on every server this crate builds
//! ([`crate::serve`], [`crate::admin::serve_admin`]).
//!
//! actix-http times a connection's first head only (its request timer starts with the
//! connection and is never armed again), and its keep-alive timer, armed after each answer,
//! is cleared by the first byte that comes. So after one request a client may send one byte
//! of the next head and then nothing, or the rest a byte at a time, and hold the connection for
//! ever. Here each connection is watched from outside: [`Watchdog::on_connect`] keeps a
//! duplicate of its socket and two counters, requests begun and requests ended (an answer's
//! body written to its end, or dropped), which [`Serving::begin`] moves, from
//! `crate::read_bound::middleware`: two atomic increments a request, no lock, no allocation.
//! A thread per server looks at every connection each [`TICK`]: one where no request is being
//! served and none has begun or ended for longer than the keep-alive plus the read bound is
//! shut down (a FIN; the client is sent nothing else). actix closes an honest idle connection
//! at the keep-alive itself, so one still open past it is sending a head too slowly, and a
//! head begun just before the keep-alive ended still had the read bound to arrive in. A
//! request being served is never cut, however long its handler or its streamed answer takes.
//!
//! The price: a second descriptor per open connection, for as long as it is open.

use std::any::Any;
use std::net::Shutdown;
use std::os::fd::AsFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use actix_web::body::{BodySize, MessageBody};
use actix_web::dev::{Extensions, ServiceRequest};
use actix_web::web::Bytes;

/// How often the watchdog looks: a connection is closed at most this late past its bound.
/// Each look reads every open connection's counters, one cache miss each (perf: with 9,000
/// event streams open at rest, a look every 250 ms was half the gateway's CPU), so once a
/// second: a slow head's socket is held at most a second longer.
pub const TICK: Duration = Duration::from_secs(1);

/// One connection as the watchdog sees it: a duplicate of its socket, to shut it down from
/// outside actix, and the requests begun and ended on it.
#[derive(Debug)]
struct Connection {
    socket: std::net::TcpStream,
    begun: AtomicU64,
    ended: AtomicU64,
}

/// What a connection's extensions hold: readable by the middleware through `conn_data`.
#[derive(Debug, Clone)]
struct Watched(Arc<Connection>);

/// The watchdog's note on one connection: the last count of ended requests it saw, and since
/// when no request was begun or ended (as far as it could tell from its ticks).
#[derive(Debug)]
struct Entry {
    connection: Weak<Connection>,
    ended: u64,
    quiet_since: Instant,
}

#[derive(Debug, Default)]
struct Registry {
    entries: Mutex<Vec<Entry>>,
}

impl Registry {
    fn add(&self, connection: &Arc<Connection>) {
        let entry = Entry { connection: Arc::downgrade(connection), ended: 0, quiet_since: Instant::now() };
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).push(entry);
    }

    /// Forgets closed connections and shuts down those quiet between requests past `limit`.
    fn sweep(&self, now: Instant, limit: Duration) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain_mut(|entry| {
            let Some(connection) = entry.connection.upgrade() else {
                return false;
            };
            // `ended` first: a request that begins and ends between the two loads reads as one
            // being served, which errs towards keeping the connection.
            let ended = connection.ended.load(Ordering::Relaxed);
            let begun = connection.begun.load(Ordering::Relaxed);
            if begun != ended || ended != entry.ended {
                entry.ended = ended;
                entry.quiet_since = now;
                return true;
            }
            if now.saturating_duration_since(entry.quiet_since) <= limit {
                return true;
            }
            tracing::debug!(
                quiet_ms = %now.saturating_duration_since(entry.quiet_since).as_millis(),
                "connection quiet between requests past the keep-alive and the read bound: closed"
            );
            // Wakes actix's reader with the end of the stream, and it drops the connection. An
            // error means the connection is gone already.
            let _ = connection.socket.shutdown(Shutdown::Both);
            false
        });
    }
}

/// Watches the connections of one server. Install with
/// `HttpServer::on_connect(watchdog.on_connect())` before binding; its thread ends once the
/// server, and with it the last handle on the connections, is dropped.
#[derive(Debug, Clone)]
pub struct Watchdog {
    registry: Arc<Registry>,
}

impl Watchdog {
    /// Starts the watchdog's thread: a connection quiet between requests for longer than
    /// `keep_alive + read_bound` is shut down.
    pub fn start(keep_alive: Duration, read_bound: Duration) -> std::io::Result<Self> {
        let registry = Arc::new(Registry::default());
        let watched = Arc::downgrade(&registry);
        let limit = keep_alive + read_bound;
        std::thread::Builder::new().name("keep-alive-watchdog".into()).spawn(move || {
            loop {
                std::thread::sleep(TICK);
                let Some(registry) = watched.upgrade() else {
                    return;
                };
                registry.sweep(Instant::now(), limit);
            }
        })?;
        Ok(Self { registry })
    }

    /// For `HttpServer::on_connect`: watches each new TCP connection.
    pub fn on_connect(&self) -> impl Fn(&dyn Any, &mut Extensions) + Send + Sync + 'static {
        let registry = self.registry.clone();
        move |io, extensions| {
            let Some(stream) = io.downcast_ref::<actix_web::rt::net::TcpStream>() else {
                return;
            };
            let socket = match stream.as_fd().try_clone_to_owned() {
                Ok(fd) => std::net::TcpStream::from(fd),
                Err(e) => {
                    // Out of descriptors: the connection is served, only not watched between
                    // requests (its first head and every body are still bounded).
                    tracing::warn!(error = %e, "cannot watch a new connection");
                    return;
                }
            };
            let connection =
                Arc::new(Connection { socket, begun: AtomicU64::new(0), ended: AtomicU64::new(0) });
            registry.add(&connection);
            extensions.insert(Watched(connection));
        }
    }
}

/// A request being served on a watched connection, from its head until its answer's body is
/// written to its end or dropped: the watchdog leaves the connection alone meanwhile.
#[derive(Debug)]
pub struct Serving(Option<Arc<Connection>>);

impl Serving {
    /// Counts the request begun on its connection (nothing for an unwatched one).
    pub fn begin(req: &ServiceRequest) -> Self {
        Self(req.conn_data::<Watched>().map(|Watched(connection)| {
            connection.begun.fetch_add(1, Ordering::Relaxed);
            connection.clone()
        }))
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        if let Some(connection) = &self.0 {
            connection.ended.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// An answer's body that ends its request's [`Serving`] when written to its end or dropped.
#[derive(Debug)]
pub struct ServedBody<B> {
    body: B,
    serving: Option<Serving>,
}

impl<B> ServedBody<B> {
    pub fn new(body: B, serving: Serving) -> Self {
        Self { body, serving: Some(serving) }
    }
}

impl<B: MessageBody + Unpin> MessageBody for ServedBody<B> {
    type Error = B::Error;

    #[inline]
    fn size(&self) -> BodySize {
        self.body.size()
    }

    #[inline]
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Self::Error>>> {
        let next = Pin::new(&mut self.body).poll_next(cx);
        if let Poll::Ready(None | Some(Err(_))) = next {
            // Written to its end (or broken off): the next head is the keep-alive's.
            self.serving = None;
        }
        next
    }

    #[inline]
    fn try_into_bytes(self) -> Result<Bytes, Self> {
        // All in memory already: nothing left to wait for.
        let Self { body, serving } = self;
        body.try_into_bytes().map_err(|body| Self { body, serving })
    }
}

#[cfg(test)]
mod tests {
    use actix_web::{App, HttpResponse, HttpServer, web};
    use futures_util::stream;
    use seckill_common::config::HttpSettings;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;
    use crate::Door;

    const KEEP_ALIVE: Duration = Duration::from_secs(1);
    const BOUND: Duration = Duration::from_millis(300);
    /// Longer than the keep-alive, the bound and a tick together: the watchdog would have cut
    /// a connection quiet this long.
    const LONG: Duration = Duration::from_millis(2_500);
    const CHUNKS: u32 = 10;

    /// A server as `crate::serve` builds them, with `GET /stream` (an answer streamed in
    /// `CHUNKS` pieces over `LONG`) and `GET /slow` (a handler that takes `LONG`).
    fn start() -> (actix_web::dev::ServerHandle, u16) {
        let settings = HttpSettings {
            port: Some(0),
            workers: 1,
            shutdown_timeout_secs: 1,
            read_timeout_ms: BOUND.as_millis() as u64,
            keep_alive_secs: KEEP_ALIVE.as_secs(),
            ..HttpSettings::default()
        };
        let (server, port) = crate::serve(&settings, 0, Door::Public, |cfg| {
            cfg.route(
                "/stream",
                web::get().to(|| async {
                    let chunks = stream::unfold(0, |n| async move {
                        if n == CHUNKS {
                            return None;
                        }
                        tokio::time::sleep(LONG / CHUNKS).await;
                        Some((Ok::<_, actix_web::Error>(Bytes::from(format!("chunk {n};"))), n + 1))
                    });
                    HttpResponse::Ok().streaming(chunks)
                }),
            )
            .route(
                "/slow",
                web::get().to(|| async {
                    tokio::time::sleep(LONG).await;
                    HttpResponse::Ok().body("slow")
                }),
            );
        })
        .unwrap();
        let handle = server.handle();
        actix_web::rt::spawn(server);
        (handle, port)
    }

    /// Sends `GET path` and reads until the raw answer holds `end`; None when the server closed
    /// the connection first.
    async fn ask(stream: &mut TcpStream, path: &str, end: &str) -> Option<String> {
        let request = format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut raw = Vec::new();
        let mut buf = [0; 4096];
        while !String::from_utf8_lossy(&raw).contains(end) {
            match tokio::time::timeout(LONG * 2, stream.read(&mut buf)).await {
                Err(_) => panic!("no whole answer: {}", String::from_utf8_lossy(&raw)),
                Ok(Ok(0) | Err(_)) => return None,
                Ok(Ok(n)) => raw.extend_from_slice(&buf[..n]),
            }
        }
        Some(String::from_utf8_lossy(&raw).into_owned())
    }

    /// Fails when the request's `Serving` ends with its answer's head instead of its body: the
    /// stream is cut about `KEEP_ALIVE + BOUND` in.
    #[actix_web::test]
    async fn a_slowly_streamed_answer_is_not_cut_and_its_connection_serves_the_next_request() {
        let (server, port) = start();
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        // A first request, so the watchdog's keep-alive applies to what follows.
        let first = ask(&mut stream, "/healthz", "\r\n\r\n").await.expect("answered");
        assert!(first.starts_with("HTTP/1.1 200"), "{first}");
        let started = Instant::now();
        let streamed = ask(&mut stream, "/stream", "0\r\n\r\n").await.expect("streamed to its end");
        assert!(started.elapsed() >= LONG, "streamed in {:?}", started.elapsed());
        for n in 0..CHUNKS {
            assert!(streamed.contains(&format!("chunk {n};")), "{streamed}");
        }
        let next = ask(&mut stream, "/slow", "slow").await.expect("a slow handler answered");
        assert!(next.starts_with("HTTP/1.1 200"), "{next}");
        server.stop(false).await;
    }

    #[actix_web::test]
    async fn the_watchdog_ends_with_its_server() {
        let watchdog = Watchdog::start(KEEP_ALIVE, BOUND).unwrap();
        let registry = Arc::downgrade(&watchdog.registry);
        let server = HttpServer::new(|| App::new().route("/", web::get().to(HttpResponse::Ok)))
            .workers(1)
            .disable_signals()
            .on_connect(watchdog.on_connect())
            .bind(("127.0.0.1", 0))
            .unwrap();
        drop(watchdog);
        let port = server.addrs()[0].port();
        let server = server.run();
        let handle = server.handle();
        let running = actix_web::rt::spawn(server);
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        assert!(ask(&mut stream, "/", "\r\n\r\n").await.is_some());
        let watched = registry.upgrade().expect("the server holds the registry");
        assert_eq!(watched.entries.lock().unwrap().len(), 1, "the connection is watched");
        drop(watched);
        drop(stream);
        handle.stop(false).await;
        running.await.unwrap().unwrap();
        // Gone with the server: the thread finds nothing to watch at its next tick and ends.
        let deadline = Instant::now() + Duration::from_secs(2);
        while registry.upgrade().is_some() {
            assert!(Instant::now() < deadline, "the registry outlived its server");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

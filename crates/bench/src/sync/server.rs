//! The synchronous design behind a minimal HTTP/1.1 server, so that its figure includes a hop
//! like the real system's: `POST /buy/{user_id}` runs one buy transaction on a pooled
//! connection and answers 200 with the order, 410 sold out or 409 repeated.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use seckill_common::{ErrorBody, ErrorCode};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::db::{self, Bought, PgPool};
use crate::baseline::serve_http1;

/// The running server; [`Server::stop`] ends it.
pub struct Server {
    addr: SocketAddr,
    state: Arc<State>,
    stop: oneshot::Sender<()>,
    accept: JoinHandle<()>,
}

struct State {
    pool: PgPool,
    goods: i64,
    /// Buys begun and not finished (their transactions run on even if the client left).
    in_flight: AtomicUsize,
}

/// Serves buys of sale `goods` on a loopback port of its own.
pub async fn start(pool: PgPool, goods: i64) -> anyhow::Result<Server> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let state = Arc::new(State { pool, goods, in_flight: AtomicUsize::new(0) });
    let (stop, stopped) = oneshot::channel();
    let accept = tokio::spawn(accept_loop(listener, state.clone(), stopped));
    Ok(Server { addr, state, stop, accept })
}

impl Server {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Waits until no buy is in flight (at most `timeout`); false if some still were.
    pub async fn settle(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.state.in_flight.load(Ordering::SeqCst) > 0 {
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }

    /// Stops accepting; open connections end with their clients.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.accept.await;
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<State>, stopped: oneshot::Receiver<()>) {
    let shutdown = async {
        let _ = stopped.await;
    };
    serve_http1(listener, shutdown, move |req| answer(req, state.clone())).await;
}

/// Counts a buy in flight while it lives.
struct InFlight(Arc<State>);

impl InFlight {
    fn enter(state: &Arc<State>) -> Self {
        state.in_flight.fetch_add(1, Ordering::SeqCst);
        Self(state.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn answer(req: Request<Incoming>, state: Arc<State>) -> Result<Response<Full<Bytes>>, Infallible> {
    let user = req.uri().path().strip_prefix("/buy/").and_then(|u| u.parse::<i64>().ok());
    let Some(user) = user.filter(|_| req.method() == Method::POST) else {
        return Ok(error(ErrorCode::NotFound, "POST /buy/{user_id}"));
    };
    // In a task of its own: a client that gives up does not cut a transaction short.
    let guard = InFlight::enter(&state);
    let bought = tokio::spawn(async move {
        let _guard = guard;
        let mut conn = state.pool.get().await.map_err(|e| (ErrorCode::Unavailable, e.to_string()))?;
        db::buy(&mut conn, state.goods, user).await.map_err(|e| (ErrorCode::Internal, e.to_string()))
    })
    .await;
    Ok(match bought {
        Ok(Ok(Bought::Order(id))) => ok(json!({"status": "success", "order_id": id})),
        Ok(Ok(Bought::SoldOut)) => error(ErrorCode::SoldOut, "sold out"),
        Ok(Ok(Bought::Repeated)) => error(ErrorCode::Repeated, "you already hold a unit of this sale"),
        Ok(Err((code, message))) => error(code, &message),
        Err(e) => error(ErrorCode::Internal, &e.to_string()),
    })
}

fn ok(body: serde_json::Value) -> Response<Full<Bytes>> {
    json_response(StatusCode::OK, serde_json::to_vec(&body).unwrap_or_default())
}

/// The services' error body with the status its code is answered with.
fn error(code: ErrorCode, message: &str) -> Response<Full<Bytes>> {
    let status = StatusCode::from_u16(code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(status, serde_json::to_vec(&ErrorBody::new(code, message)).unwrap_or_default())
}

fn json_response(status: StatusCode, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut res = Response::new(Full::new(Bytes::from(body)));
    *res.status_mut() = status;
    res.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    res
}

//! The upstream services and the hop to them: a pooled HTTP client per worker thread,
//! round-robin over each service's replicas, the next replica when one refuses the connection, and upstream failures
//! turned into `UPSTREAM_UNAVAILABLE` (503) or `UPSTREAM_TIMEOUT` (504).
//!
//! This hop bounds the throughput of the whole system, so per request it does one pass over
//! the headers, no copy of a body it does not have to copy, and clones the request parts only
//! when another replica is left to try. Each worker thread has a client of its own: a pooled
//! connection's task runs on the thread that opened it, so with one client shared by every
//! worker, most requests would hand their bytes to another thread and wait to be woken from
//! there; with one per worker, the request and its connection stay on one thread.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use actix_web::web::Bytes;
use actix_web::{HttpMessage, HttpRequest, HttpResponse};
use futures_util::future::join_all;
use seckill_common::api::Role;
use seckill_common::config::{CLIENT_POOL_IDLE, UpstreamSettings, split_urls};
use seckill_common::headers::REQUEST_ID;
use seckill_common::trust::{AUTH_HEADER, Peer, RequestFacts, Trust};
use seckill_common::{ErrorCode, UserId};
use seckill_web::health::Check;
use seckill_web::request_id::RequestId;
use seckill_web::{ApiError, AuthUser};

use crate::headers;

/// The services behind the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    Seckill,
    Order,
    Stock,
}

impl Service {
    /// The peer whose key signs what is sent to this service.
    const fn peer(self) -> Peer {
        match self {
            Self::Seckill => Peer::Seckill,
            Self::Order => Peer::Order,
            Self::Stock => Peer::Stock,
        }
    }

    /// The name in logs, metrics and readiness checks (as in `upstreams.<name>`).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Seckill => "seckill",
            Self::Order => "order",
            Self::Stock => "stock",
        }
    }
}

/// Longest a readiness probe waits for one replica: probes have short deadlines of their own.
const READINESS_TIMEOUT: Duration = Duration::from_secs(2);

/// The replicas of one service and where the round-robin stands.
#[derive(Debug)]
struct Upstream {
    service: Service,
    /// Base URLs without a trailing slash; the client's path is appended as is.
    replicas: Vec<String>,
    next: AtomicUsize,
}

impl Upstream {
    fn new(service: Service, list: &str) -> anyhow::Result<Self> {
        let replicas = split_urls(list);
        anyhow::ensure!(!replicas.is_empty(), "upstreams.{} lists no replica", service.name());
        Ok(Self { service, replicas, next: AtomicUsize::new(0) })
    }

    /// Every replica once, starting at the next in turn.
    fn rotation(&self) -> impl Iterator<Item = &str> {
        let n = self.replicas.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..n).map(move |i| self.replicas[start.wrapping_add(i) % n].as_str())
    }
}

/// Tells apart the proxies of one process (tests run several gateways), whose per-thread
/// clients must not mix.
static NEXT_PROXY: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// This thread's client of each proxy it has forwarded for.
    static CLIENTS: RefCell<Vec<(u64, reqwest::Client)>> = const { RefCell::new(Vec::new()) };
}

/// A client's request as it will be sent upstream (see [`Proxy::outgoing`]).
#[derive(Debug)]
pub struct Outgoing<'a> {
    method: reqwest::Method,
    path: &'a str,
    headers: reqwest::header::HeaderMap,
}

/// Forwards requests to the upstream services.
#[derive(Debug)]
pub struct Proxy {
    id: u64,
    settings: UpstreamSettings,
    /// For a thread whose own client cannot be built (never expected: the same settings built
    /// this one), and for the readiness probes.
    shared: reqwest::Client,
    /// Signs the identity (or its absence) of every forwarded request.
    trust: Arc<Trust>,
    upstreams: [Upstream; 3],
    timeout: Duration,
}

impl Proxy {
    pub fn new(settings: &UpstreamSettings, trust: Arc<Trust>) -> anyhow::Result<Self> {
        Ok(Self {
            id: NEXT_PROXY.fetch_add(1, Ordering::Relaxed),
            settings: settings.clone(),
            shared: build_client(settings)?,
            trust,
            upstreams: [
                Upstream::new(Service::Seckill, &settings.seckill)?,
                Upstream::new(Service::Order, &settings.order)?,
                Upstream::new(Service::Stock, &settings.stock)?,
            ],
            timeout: Duration::from_millis(settings.timeout_ms),
        })
    }

    /// The calling thread's client (built on its first request).
    fn client(&self) -> reqwest::Client {
        CLIENTS.with_borrow_mut(|clients| {
            if let Some((_, client)) = clients.iter().find(|(id, _)| *id == self.id) {
                return client.clone();
            }
            let client = build_client(&self.settings).unwrap_or_else(|e| {
                tracing::warn!(error = %e, "no upstream client of this thread's own: using the shared one");
                self.shared.clone()
            });
            clients.push((self.id, client.clone()));
            client
        })
    }

    fn upstream(&self, service: Service) -> &Upstream {
        match service {
            Service::Seckill => &self.upstreams[0],
            Service::Order => &self.upstreams[1],
            Service::Stock => &self.upstreams[2],
        }
    }

    /// What of the client's request goes upstream: method, path and query, the allowed
    /// headers ([`headers`]). Refused here, before its body is read, when sending it on could
    /// change the route it names or would be a service's 431 rather than the client's 4xx.
    pub fn outgoing(req: &HttpRequest) -> Result<Outgoing<'_>, ApiError> {
        let target = req.uri().path_and_query().map_or("/", |pq| pq.as_str());
        headers::check_target(target)?;
        let path = forwardable_target(target)?;
        let method = reqwest::Method::from_bytes(req.method().as_str().as_bytes())
            .map_err(|_| ApiError::invalid("unsupported method"))?;
        let headers = {
            let extensions = req.extensions();
            let request_id = extensions.get::<RequestId>().map(|id| id.0.as_str());
            headers::to_upstream(req.headers(), request_id)?
        };
        Ok(Outgoing { method, path, headers })
    }

    /// Sends the client's request (`outgoing`, `body`) to a replica of `service` as `caller`,
    /// and answers with what the replica answered.
    pub async fn forward(
        &self,
        service: Service,
        outgoing: Outgoing<'_>,
        body: Bytes,
        caller: Option<AuthUser>,
    ) -> Result<HttpResponse, ApiError> {
        let Outgoing { method, path, headers } = outgoing;
        let upstream = self.upstream(service);

        let user = caller.map(|c| (c.id, c.role));
        let response = self.send(upstream, method, path, headers, body, user).await?;
        let status =
            actix_web::http::StatusCode::from_u16(response.status().as_u16()).map_err(ApiError::internal)?;
        let mut builder = HttpResponse::build(status);
        headers::to_client(response.headers(), &mut builder);
        // Upstream bodies are small JSON documents: buffering them keeps a known length (and
        // keep-alive) on the client's response and lets a stalled body end in a 504.
        let body = response.bytes().await.map_err(|e| failure(upstream.service, e))?;
        Ok(builder.body(body))
    }

    /// A GET of `path` at `service` as no user, for the gateway's own reads (the storefront's
    /// goods): the status and the whole body. A request id of its own, so the upstream's log
    /// lines of the read can be found.
    pub async fn get(&self, service: Service, path: &str) -> Result<(u16, Bytes), ApiError> {
        let (status, _, body) = self.get_page(service, path).await?;
        Ok((status, body))
    }

    /// As [`Proxy::get`], with the page's cursor to the next (`x-next-cursor`, on a list).
    pub async fn get_page(
        &self,
        service: Service,
        path: &str,
    ) -> Result<(u16, Option<String>, Bytes), ApiError> {
        self.read(service, path, None, None).await
    }

    /// A GET of `path` at `service` as `user`, with one more header when `extra`: the gateway's
    /// own reads for a buyer (a stream's result and place). The status and the whole body.
    pub async fn get_as(
        &self,
        service: Service,
        path: &str,
        user: &AuthUser,
        extra: Option<(&'static str, &str)>,
    ) -> Result<(u16, Bytes), ApiError> {
        let (status, _, body) = self.read(service, path, Some((user.id, user.role)), extra).await?;
        Ok((status, body))
    }

    async fn read(
        &self,
        service: Service,
        path: &str,
        user: Option<(UserId, Role)>,
        extra: Option<(&'static str, &str)>,
    ) -> Result<(u16, Option<String>, Bytes), ApiError> {
        let upstream = self.upstream(service);
        let mut headers = reqwest::header::HeaderMap::with_capacity(3);
        headers
            .insert(reqwest::header::ACCEPT, reqwest::header::HeaderValue::from_static("application/json"));
        if let Ok(id) = reqwest::header::HeaderValue::from_str(&uuid::Uuid::new_v4().to_string()) {
            headers.insert(REQUEST_ID, id);
        }
        if let Some((name, value)) = extra {
            let value = reqwest::header::HeaderValue::from_str(value)
                .map_err(|_| ApiError::invalid(format!("{name} is not a valid header value")))?;
            headers.insert(name, value);
        }
        let response = self.send(upstream, reqwest::Method::GET, path, headers, Bytes::new(), user).await?;
        let status = response.status().as_u16();
        let next = response
            .headers()
            .get(seckill_common::listing::NEXT_CURSOR)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = response.bytes().await.map_err(|e| failure(upstream.service, e))?;
        Ok((status, next, body))
    }

    async fn send(
        &self,
        upstream: &Upstream,
        method: reqwest::Method,
        path: &str,
        headers: reqwest::header::HeaderMap,
        body: Bytes,
        user: Option<(UserId, Role)>,
    ) -> Result<reqwest::Response, ApiError> {
        let name = upstream.service.name();
        let tries = upstream.replicas.len();
        let client = self.client();
        let mut headers = Some(headers);
        let mut refused = Vec::new();
        for (i, base) in upstream.rotation().enumerate() {
            let last = i + 1 == tries;
            let headers = if last { headers.take() } else { headers.clone() }.unwrap_or_default();
            let mut request = client
                .request(method.clone(), format!("{base}{path}"))
                .body(body.clone())
                .build()
                .map_err(|e| failure(upstream.service, e))?;
            // The map is ready: put it in whole rather than re-inserting it entry by entry.
            *request.headers_mut() = headers;
            self.sign(upstream.service, &mut request, user);
            match client.execute(request).await {
                Ok(response) => return Ok(response),
                // Refused (or not opened in time): the request never left, so another replica
                // may take it without risk of doing it twice. Logged at debug level: with a
                // replica down this happens on every request it would have served; the metric
                // counts it, and the case where all refuse is logged as an error.
                Err(e) if e.is_connect() => {
                    count_error(name, "connect");
                    tracing::debug!(upstream = name, replica = base, error = %e, "replica refused the connection");
                    refused.push(base);
                }
                Err(e) => return Err(failure(upstream.service, e)),
            }
        }
        Err(ApiError::new(
            ErrorCode::UpstreamUnavailable,
            format!("the {name} service is unavailable, try again shortly"),
        )
        .with_cause(anyhow::anyhow!(
            "upstream `{name}`: every replica refused the connection ({})",
            refused.join(", ")
        )))
    }

    /// Vouches for `user` (or for no user) on this very request: the path as the URL parser
    /// left it, the method, the request id, for the next few seconds.
    fn sign(&self, service: Service, request: &mut reqwest::Request, user: Option<(UserId, Role)>) {
        let request_id = request.headers().get(REQUEST_ID).and_then(|v| v.to_str().ok()).unwrap_or_default();
        let facts =
            RequestFacts { method: request.method().as_str(), path: request.url().path(), request_id };
        let credential = self.trust.sign_request(service.peer(), &facts, user);
        // Base64url, digits, letters and dots: always a valid header value.
        if let Ok(value) = reqwest::header::HeaderValue::from_str(&credential) {
            request.headers_mut().insert(AUTH_HEADER, value);
        }
    }

    /// One check per service: ready when at least one of its replicas answers `GET /healthz`
    /// with a 2xx. All replicas are asked at once.
    pub async fn readiness(&self) -> Vec<Check> {
        let timeout = self.timeout.min(READINESS_TIMEOUT);
        let checks = self.upstreams.iter().map(|upstream| async move {
            let probes = upstream.replicas.iter().map(|base| self.probe(base, timeout));
            let results = join_all(probes).await;
            let result = if results.iter().any(Result::is_ok) {
                Ok(())
            } else {
                Err(results.into_iter().filter_map(Result::err).collect::<Vec<_>>().join("; "))
            };
            (upstream.service.name(), result)
        });
        join_all(checks).await
    }

    async fn probe(&self, base: &str, timeout: Duration) -> Result<(), String> {
        let response = self
            .shared
            .get(format!("{base}/healthz"))
            .timeout(timeout)
            .send()
            .await
            // The whole chain: reqwest's own message does not say why ("connection refused").
            .map_err(|e| format!("{base}: {:#}", anyhow::Error::new(e)))?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(format!("{base}: /healthz answered {}", response.status()))
        }
    }
}

/// The client's path and query, if sending them on cannot change which route they name.
///
/// The router matched `/api/orders/{id}/pay` with `id` = `..`, but the URL parser on the way
/// upstream resolves dot segments (also when written `%2e%2e`), reads `\` as `/` and cuts at
/// `#`: `/api/orders/../pay` would reach the service as `/api/pay`. No valid id looks like
/// that, so such requests are refused here rather than rewritten.
fn forwardable_target(target: &str) -> Result<&str, ApiError> {
    let path = target.split_once('?').map_or(target, |(path, _)| path);
    if target.contains(['\\', '#']) || path.split('/').any(is_dot_segment) {
        return Err(ApiError::invalid("invalid path"));
    }
    Ok(target)
}

fn is_dot_segment(segment: &str) -> bool {
    const DOTS: [&str; 6] = [".", "..", "%2e", ".%2e", "%2e.", "%2e%2e"];
    segment.len() <= 6 && DOTS.iter().any(|dots| segment.eq_ignore_ascii_case(dots))
}

/// The client of the hop (one per worker thread, see the module's doc).
fn build_client(settings: &UpstreamSettings) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_millis(settings.connect_timeout_ms))
        .timeout(Duration::from_millis(settings.timeout_ms))
        // Upstreams are addressed directly: an HTTP(S)_PROXY in the environment must not
        // put another hop in between.
        .no_proxy()
        // Keep enough warm connections for a spike; opening one per request is what would
        // cost most.
        .pool_max_idle_per_host(1024)
        // Dropped before the upstream closes it (see `CLIENT_POOL_IDLE`).
        .pool_idle_timeout(CLIENT_POOL_IDLE)
        .tcp_nodelay(true)
        .redirect(reqwest::redirect::Policy::none())
        .build()
}

/// A failure after the request may have reached the replica: no retry (a buy must not be
/// sent twice), a 504 if it ran out of time, else a 503.
fn failure(service: Service, e: reqwest::Error) -> ApiError {
    let name = service.name();
    if e.is_timeout() {
        count_error(name, "timeout");
        ApiError::new(ErrorCode::UpstreamTimeout, format!("the {name} service did not answer in time"))
            .with_cause(anyhow::Error::new(e).context(format!("upstream `{name}` timed out")))
    } else {
        count_error(name, "other");
        ApiError::new(
            ErrorCode::UpstreamUnavailable,
            format!("the {name} service is unavailable, try again shortly"),
        )
        .with_cause(anyhow::Error::new(e).context(format!("upstream `{name}` failed")))
    }
}

fn count_error(upstream: &'static str, kind: &'static str) {
    metrics::counter!("gateway_upstream_errors_total", "upstream" => upstream, "kind" => kind).increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_that_a_url_parser_would_rewrite_are_refused() {
        for ok in ["/api/goods", "/api/goods/12?x=../y", "/api/orders/1/pay", "/api/goods/.hidden", "/"] {
            assert_eq!(forwardable_target(ok).unwrap(), ok);
        }
        for bad in [
            "/api/orders/../pay",
            "/api/orders/%2E%2E/pay",
            "/api/orders/.%2e/pay",
            "/api/goods/.",
            "/api/goods/..\\..\\internal",
            "/api/goods/1#/x",
        ] {
            assert_eq!(forwardable_target(bad).unwrap_err().code, ErrorCode::InvalidInput, "{bad}");
        }
    }

    #[test]
    fn the_rotation_visits_every_replica_once_from_the_next_in_turn() {
        let upstream = Upstream::new(Service::Order, "http://a:1,http://b:2,http://c:3").unwrap();
        let first: Vec<_> = upstream.rotation().collect();
        let second: Vec<_> = upstream.rotation().collect();
        assert_eq!(first, ["http://a:1", "http://b:2", "http://c:3"]);
        assert_eq!(second, ["http://b:2", "http://c:3", "http://a:1"]);
    }
}

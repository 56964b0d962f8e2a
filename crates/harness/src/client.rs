//! One HTTP/1.1 keep-alive connection per load worker, on hyper's connection API: "N
//! connections" means exactly N sockets, opened before the clock starts, and the generator spends
//! as little CPU per request as it can (it shares the cores with the system it measures).

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{
    AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HOST, HeaderName, HeaderValue, RETRY_AFTER,
};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Status recorded when the connection failed (refused, reset, closed mid-answer).
pub const STATUS_ERROR: u16 = 0;
/// Status recorded when no full answer came within the request timeout.
pub const STATUS_TIMEOUT: u16 = 1;

/// Where requests go: a socket address, the `Host` header, and a path prefix.
#[derive(Debug)]
pub struct Endpoint {
    addr: SocketAddr,
    host: HeaderValue,
    base: String,
}

impl Endpoint {
    /// Parses `http://host:port[/path]` (plain HTTP only) and resolves the host once.
    pub fn parse(url: &str) -> anyhow::Result<Arc<Self>> {
        let rest = url
            .strip_prefix("http://")
            .with_context(|| format!("`{url}`: only http:// URLs are supported"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        if authority.is_empty() {
            bail!("`{url}` has no host");
        }
        let with_port = if authority.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) {
            authority.to_owned()
        } else {
            format!("{authority}:80")
        };
        let addr = with_port
            .to_socket_addrs()
            .with_context(|| format!("resolving {authority}"))?
            .next()
            .with_context(|| format!("{authority} resolves to no address"))?;
        Ok(Arc::new(Self {
            addr,
            host: HeaderValue::from_str(authority)?,
            base: path.trim_end_matches('/').to_owned(),
        }))
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The request path for `path` under this endpoint's prefix ("/" when both are empty).
    pub fn path(&self, path: &str) -> String {
        let p = format!("{}{path}", self.base);
        if p.is_empty() { "/".into() } else { p }
    }
}

/// The base URLs of a comma-separated list (`http://a:8080,http://b:8090`), each checked to
/// be a plain `http://` URL with a host, none twice: the gateways a load's connections are
/// spread over.
pub fn split_gateways(list: &str) -> anyhow::Result<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for item in list.split(',').map(str::trim) {
        let host = item.strip_prefix("http://").with_context(|| {
            format!("`{item}` in `{list}`: each gateway is a http:// URL, the list comma-separated")
        })?;
        if host.split('/').next().is_none_or(str::is_empty) {
            bail!("`{item}` in `{list}` has no host");
        }
        let url = item.trim_end_matches('/').to_owned();
        if out.contains(&url) {
            bail!("`{url}` is twice in `{list}`");
        }
        out.push(url);
    }
    Ok(out)
}

/// One request. Header values are prepared by the caller once (a user's bearer header is
/// built when its token is minted, not on every click).
pub struct Req<'a> {
    pub method: Method,
    pub path: &'a str,
    pub bearer: Option<&'a HeaderValue>,
    /// The first extra header, kept inline: most requests have at most one.
    pub header: Option<(HeaderName, HeaderValue)>,
    /// Extra headers beyond the first (rare: an order with both an admission and a path token).
    pub more_headers: Vec<(HeaderName, HeaderValue)>,
    pub json: Option<Bytes>,
}

impl<'a> Req<'a> {
    pub fn get(path: &'a str) -> Self {
        Self { method: Method::GET, path, bearer: None, header: None, more_headers: Vec::new(), json: None }
    }

    pub fn post(path: &'a str) -> Self {
        Self { method: Method::POST, ..Self::get(path) }
    }

    pub fn bearer(mut self, value: &'a HeaderValue) -> Self {
        self.bearer = Some(value);
        self
    }

    /// Adds a header (the typed ones are in [`crate::api`]: path token, admission, ticket).
    pub fn header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        match self.header {
            None => self.header = Some((name, value)),
            Some(_) => self.more_headers.push((name, value)),
        }
        self
    }

    pub fn json(mut self, body: &impl serde::Serialize) -> Self {
        self.json = serde_json::to_vec(body).ok().map(Bytes::from);
        self
    }
}

/// `Authorization: Bearer <token>`, built once per user.
pub fn bearer_header(token: &str) -> anyhow::Result<HeaderValue> {
    Ok(HeaderValue::from_str(&format!("Bearer {token}"))?)
}

/// A status (or [`STATUS_ERROR`] / [`STATUS_TIMEOUT`]) and the whole body.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub body: Bytes,
    /// A 503's `Retry-After`, when it is delay-seconds (read on 503s only: the shed answer).
    pub retry_after: Option<Duration>,
}

impl Answer {
    /// An answer without headers worth keeping.
    pub fn new(status: u16, body: Bytes) -> Self {
        Self { status, body, retry_after: None }
    }

    pub fn failed(status: u16) -> Self {
        Self::new(status, Bytes::new())
    }
}

/// A keep-alive connection that reconnects on the next request after a failure.
pub struct Conn {
    endpoint: Arc<Endpoint>,
    timeout: Duration,
    sender: Option<SendRequest<Full<Bytes>>>,
    /// Connections opened after the first one (a closed or failed connection is replaced).
    pub reconnects: u64,
    opened: bool,
}

impl Conn {
    pub fn new(endpoint: Arc<Endpoint>, timeout: Duration) -> Self {
        Self { endpoint, timeout, sender: None, reconnects: 0, opened: false }
    }

    /// Opens `n` connections, all before any request is timed.
    pub async fn open_many(
        endpoint: &Arc<Endpoint>,
        n: usize,
        timeout: Duration,
    ) -> anyhow::Result<Vec<Self>> {
        let mut conns = Vec::with_capacity(n);
        for _ in 0..n {
            let mut c = Self::new(endpoint.clone(), timeout);
            c.connect().await.with_context(|| format!("connecting to {}", endpoint.addr))?;
            conns.push(c);
        }
        Ok(conns)
    }

    pub fn endpoint(&self) -> &Arc<Endpoint> {
        &self.endpoint
    }

    /// Opens the socket now (otherwise the first request does).
    pub async fn connect(&mut self) -> anyhow::Result<()> {
        let stream = TcpStream::connect(self.endpoint.addr).await?;
        stream.set_nodelay(true)?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            // Ends when the sender is dropped or the peer closes; errors show on the next send.
            let _ = connection.await;
        });
        if self.opened {
            self.reconnects += 1;
        }
        self.opened = true;
        self.sender = Some(sender);
        Ok(())
    }

    /// Sends one request and reads the whole answer, within the timeout. Never fails: a broken
    /// exchange is an answer with [`STATUS_ERROR`] or [`STATUS_TIMEOUT`], and the connection is
    /// replaced on the next call.
    pub async fn send(&mut self, req: Req<'_>) -> Answer {
        match tokio::time::timeout(self.timeout, self.exchange(req)).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => {
                self.sender = None;
                Answer::failed(STATUS_ERROR)
            }
            Err(_) => {
                self.sender = None;
                Answer::failed(STATUS_TIMEOUT)
            }
        }
    }

    async fn exchange(&mut self, req: Req<'_>) -> anyhow::Result<Answer> {
        if self.sender.as_ref().is_none_or(SendRequest::is_closed) {
            self.connect().await?;
        }
        let Some(sender) = self.sender.as_mut() else {
            bail!("not connected");
        };
        let path = self.endpoint.path(req.path);
        let body = req.json.unwrap_or_default();
        let mut builder =
            Request::builder().method(req.method).uri(path).header(HOST, self.endpoint.host.clone());
        if !body.is_empty() {
            builder = builder.header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        if builder.method_ref() != Some(&Method::GET) {
            builder = builder.header(CONTENT_LENGTH, body.len());
        }
        if let Some(b) = req.bearer {
            builder = builder.header(AUTHORIZATION, b.clone());
        }
        for (name, value) in req.header.into_iter().chain(req.more_headers) {
            builder = builder.header(name, value);
        }
        let request = builder.body(Full::new(body))?;
        sender.ready().await?;
        let response = sender.send_request(request).await?;
        let status = response.status().as_u16();
        let retry_after = if status == 503 {
            response.headers().get(RETRY_AFTER).and_then(parse_retry_after)
        } else {
            None
        };
        let body = response.into_body().collect().await?.to_bytes();
        Ok(Answer { status, body, retry_after })
    }
}

/// Opens a buyer's event stream (`path`, `GET .../events`) on a connection of its own, with
/// `Last-Event-ID` when given: its body once answered 200, else the answer
/// ([`STATUS_ERROR`] when none came).
pub async fn open_events(
    endpoint: &Endpoint,
    path: &str,
    bearer: &HeaderValue,
    last_event_id: Option<&str>,
) -> Result<hyper::body::Incoming, Answer> {
    fn failed<E>(_: E) -> Answer {
        Answer::failed(STATUS_ERROR)
    }
    let socket = TcpStream::connect(endpoint.addr).await.map_err(failed)?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(socket)).await.map_err(failed)?;
    tokio::spawn(connection);
    let mut request = Request::get(endpoint.path(path))
        .header(HOST, endpoint.host.clone())
        .header(AUTHORIZATION, bearer.clone())
        .header(hyper::header::ACCEPT, "text/event-stream");
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id);
    }
    let request = request.body(http_body_util::Empty::<Bytes>::new()).map_err(failed)?;
    let response = sender.send_request(request).await.map_err(failed)?;
    let status = response.status().as_u16();
    if status == 200 {
        return Ok(response.into_body());
    }
    let body = response.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    Err(Answer::new(status, body))
}

/// `Retry-After` as delay-seconds (RFC 9110 §10.2.3). The HTTP-date form is not used by the
/// services; it reads as nothing, and the caller waits as it would without one.
pub fn parse_retry_after(value: &HeaderValue) -> Option<Duration> {
    let text = value.to_str().ok()?.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Digits only: an overflow is the one way left to fail, and means "very long".
    Some(text.parse::<u64>().map_or(Duration::MAX, Duration::from_secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_read_as_seconds() {
        let parse = |s: &str| parse_retry_after(&HeaderValue::from_str(s).unwrap());
        assert_eq!(parse("1"), Some(Duration::from_secs(1)));
        assert_eq!(parse(" 0 "), Some(Duration::ZERO));
        assert_eq!(parse("120"), Some(Duration::from_secs(120)));
        assert_eq!(parse("99999999999999999999999"), Some(Duration::MAX));
        for unreadable in ["", "-1", "1.5", "soon", "Wed, 21 Oct 2015 07:28:00 GMT"] {
            assert_eq!(parse(unreadable), None, "{unreadable:?}");
        }
    }

    #[test]
    fn urls_are_parsed_with_their_prefix() {
        let e = Endpoint::parse("http://127.0.0.1:8080").unwrap();
        assert_eq!(e.addr().port(), 8080);
        assert_eq!(e.path("/api/goods"), "/api/goods");
        assert_eq!(e.path(""), "/");
        let e = Endpoint::parse("http://127.0.0.1:18080/api/goods/").unwrap();
        assert_eq!(e.path(""), "/api/goods");
        assert!(Endpoint::parse("https://example.com").is_err());
        assert!(Endpoint::parse("http://").is_err());
    }

    #[test]
    fn a_gateway_list_is_split_and_checked() {
        assert_eq!(split_gateways("http://127.0.0.1:8080").unwrap(), ["http://127.0.0.1:8080"]);
        assert_eq!(
            split_gateways("http://127.0.0.1:8080, http://127.0.0.1:18280/").unwrap(),
            ["http://127.0.0.1:8080", "http://127.0.0.1:18280"]
        );
        let err = |list: &str| split_gateways(list).unwrap_err().to_string();
        assert!(
            err("http://a:1,,http://b:2").contains("each gateway is a http:// URL"),
            "{}",
            err("http://a:1,,")
        );
        assert!(err("http://a:1,https://b:2").contains("`https://b:2`"));
        assert!(err("http://a:1,http://").contains("has no host"));
        assert!(err("http://a:1,http://a:1/").contains("is twice"));
        assert!(err("").contains("each gateway is a http:// URL"));
    }
}

//! Every read of a request bounded in time (`http.read_timeout_ms`), on every server this crate
//! builds ([`crate::serve`], [`crate::admin::serve_admin`]).
//!
//! The head is actix's: its request timer (`client_request_timeout`, set by the servers) answers
//! 408 and closes a connection whose first request's head is not whole within the bound (the
//! heads after it are bounded by [`crate::keep_alive`]'s watchdog). The body is ours: actix
//! has no timer for it, so a client that declares a length and sends less holds the connection,
//! its socket and its buffers for as long as it likes; and a handler that never reads its body
//! (a `GET` sent with `Content-Length: 1000`) answers, then leaves the connection waiting for the
//! rest. So [`middleware`] reads every body itself, before the credential check or any handler,
//! within the bound and `http.body_limit_bytes`, and hands the handler the body it buffered.
//! A body not whole in time is 408 `REQUEST_TIMEOUT`, one past the limit 413
//! `PAYLOAD_TOO_LARGE`, one that breaks off 400: each with `Connection: close`, since what is
//! left of it may still be on the wire and nothing else could be read after it.
//!
//! Buffering costs nothing extra: every handler here reads its whole body anyway (JSON
//! documents of a few hundred bytes, which mostly arrive with the head, in one chunk).

use std::time::Duration;

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::http::ConnectionType;
use actix_web::http::header::{CONTENT_LENGTH, HeaderMap, TRANSFER_ENCODING};
use actix_web::middleware::Next;
use actix_web::web::{Bytes, BytesMut};
use actix_web::{Error, HttpMessage, ResponseError};
use futures_util::StreamExt;
use seckill_common::ErrorCode;
use seckill_common::config::HttpSettings;

use crate::ApiError;
use crate::keep_alive::{ServedBody, Serving};

/// How long a request may take to arrive, and how large its body may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadBound {
    pub timeout: Duration,
    pub body_limit: usize,
}

impl ReadBound {
    pub fn new(settings: &HttpSettings) -> Self {
        Self { timeout: settings.read_timeout(), body_limit: settings.body_limit_bytes }
    }
}

/// What a request's head says of its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Declared {
    /// None to read: no length (or 0) and no transfer coding. Such a request's payload is not
    /// touched: for an upgrade, actix makes it the rest of the connection.
    Nothing,
    /// A length past the limit: refused before a byte of it is read.
    TooLarge,
    /// A body to read: its declared length, if any (a chunked one has none).
    Body(Option<usize>),
}

fn declared(headers: &HeaderMap, limit: usize) -> Declared {
    let length =
        headers.get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<usize>().ok());
    if !headers.contains_key(TRANSFER_ENCODING) && length.unwrap_or(0) == 0 {
        Declared::Nothing
    } else if length.is_some_and(|len| len > limit) {
        Declared::TooLarge
    } else {
        Declared::Body(length)
    }
}

/// Reads the request's body within `bound` before anything else looks at the request (see the
/// module's doc). Install with `from_fn(move |req, next| read_bound::middleware(bound, req, next))`.
pub async fn middleware(
    bound: ReadBound,
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<ServedBody<EitherBody<impl MessageBody>>>, Error> {
    // Until its answer is written, the request holds its connection open against the
    // keep-alive watchdog (`crate::keep_alive`).
    let serving = Serving::begin(&req);
    let response = bounded(bound, req, next).await?;
    Ok(response.map_body(|_, body| ServedBody::new(body, serving)))
}

async fn bounded(
    bound: ReadBound,
    mut req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, Error> {
    let length = match declared(req.headers(), bound.body_limit) {
        Declared::Nothing => return next.call(req).await.map(ServiceResponse::map_into_left_body),
        Declared::TooLarge => return Ok(refuse(req, too_large(bound.body_limit))),
        Declared::Body(length) => length,
    };
    let payload = req.take_payload();
    let body = match tokio::time::timeout(bound.timeout, read(payload, bound.body_limit, length)).await {
        Ok(Ok(body)) => body,
        Ok(Err(refused)) => return Ok(refuse(req, refused)),
        Err(_elapsed) => {
            let millis = bound.timeout.as_millis();
            tracing::debug!(timeout_ms = %millis, "request body not received in time: 408, connection closed");
            return Ok(refuse(
                req,
                ApiError::new(
                    ErrorCode::RequestTimeout,
                    format!("the request body was not received within {millis} ms"),
                ),
            ));
        }
    };
    req.set_payload(Payload::from(body));
    next.call(req).await.map(ServiceResponse::map_into_left_body)
}

/// The whole body, or why not: past `limit` bytes (413 `PAYLOAD_TOO_LARGE`), or broken off
/// (400). `length` is the declared one, if any: the buffer's size when the body comes in pieces.
pub async fn read(mut payload: Payload, limit: usize, length: Option<usize>) -> Result<Bytes, ApiError> {
    // Most bodies arrive as one chunk: keep it as is and copy only when a second one comes.
    let mut first: Option<Bytes> = None;
    let mut rest: Option<BytesMut> = None;
    let mut total = 0usize;
    while let Some(chunk) = payload.next().await {
        let chunk =
            chunk.map_err(|e| ApiError::invalid(format!("the request body could not be read: {e}")))?;
        total += chunk.len();
        if total > limit {
            return Err(too_large(limit));
        }
        match (&mut rest, &first) {
            (Some(buf), _) => buf.extend_from_slice(&chunk),
            (None, None) => first = Some(chunk),
            (None, Some(head)) => {
                let mut buf = BytesMut::with_capacity(length.unwrap_or(total).max(total));
                buf.extend_from_slice(head);
                buf.extend_from_slice(&chunk);
                rest = Some(buf);
            }
        }
    }
    Ok(match rest {
        Some(buf) => buf.freeze(),
        None => first.unwrap_or_default(),
    })
}

fn too_large(limit: usize) -> ApiError {
    ApiError::new(ErrorCode::PayloadTooLarge, format!("request body is larger than {limit} bytes"))
}

/// Answers `error` and closes the connection: the body was not read to its end.
fn refuse<B>(req: ServiceRequest, error: ApiError) -> ServiceResponse<EitherBody<B>> {
    let mut response = error.error_response();
    response.head_mut().set_connection_type(ConnectionType::Close);
    req.into_response(response).map_into_right_body()
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use actix_web::http::header::HeaderValue;
    use actix_web::{HttpResponse, web};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;
    use crate::Door;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(name.parse().unwrap(), HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn a_body_is_read_when_the_head_declares_one() {
        assert_eq!(declared(&headers(&[]), 10), Declared::Nothing);
        assert_eq!(declared(&headers(&[("content-length", "0")]), 10), Declared::Nothing);
        assert_eq!(declared(&headers(&[("content-length", "10")]), 10), Declared::Body(Some(10)));
        assert_eq!(declared(&headers(&[("content-length", "11")]), 10), Declared::TooLarge);
        assert_eq!(declared(&headers(&[("transfer-encoding", "chunked")]), 10), Declared::Body(None));
    }

    /// The bound of these tests: short, so a test waits little past it.
    const BOUND: Duration = Duration::from_millis(400);
    /// How late past the bound a connection may still be closed (a loaded test machine).
    const SLACK: Duration = Duration::from_millis(1_500);

    /// A server as `crate::serve` builds them, with `POST /echo` (answers the JSON body it was
    /// given) and `GET /ignore` (never looks at its body).
    fn start() -> (actix_web::dev::ServerHandle, u16) {
        let settings = HttpSettings {
            port: Some(0),
            workers: 1,
            body_limit_bytes: 1024,
            shutdown_timeout_secs: 1,
            read_timeout_ms: BOUND.as_millis() as u64,
            ..HttpSettings::default()
        };
        let (server, port) = crate::serve(&settings, 0, Door::Public, |cfg| {
            cfg.route(
                "/echo",
                web::post().to(|body: web::Json<serde_json::Value>| async move {
                    HttpResponse::Ok().json(body.into_inner())
                }),
            )
            .route("/ignore", web::get().to(|| async { HttpResponse::Ok().body("ignored") }));
        })
        .unwrap();
        let handle = server.handle();
        actix_web::rt::spawn(server);
        (handle, port)
    }

    /// What a raw exchange saw: the answer, when its first byte came and when the server closed
    /// the connection, both counted from the first byte sent.
    struct Seen {
        answer: String,
        answered: Duration,
        closed: Duration,
    }

    /// Sends `parts` (waiting `pause` after each), then reads until the server closes the
    /// connection.
    async fn exchange(port: u16, parts: &[&[u8]], pause: Duration) -> Seen {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let started = Instant::now();
        for part in parts {
            // A server that closed already refuses the rest: what it answered is still there.
            if stream.write_all(part).await.is_err() {
                break;
            }
            tokio::time::sleep(pause).await;
        }
        let mut raw = Vec::new();
        let mut answered = None;
        let mut buf = [0; 4096];
        loop {
            let read = tokio::time::timeout(BOUND + CLOSE + SLACK * 2, stream.read(&mut buf)).await;
            let Ok(read) = read else {
                panic!("the connection was still open {:?} later", started.elapsed())
            };
            match read {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    answered.get_or_insert_with(|| started.elapsed());
                    raw.extend_from_slice(&buf[..n]);
                }
            }
        }
        let closed = started.elapsed();
        Seen {
            answer: String::from_utf8_lossy(&raw).into_owned(),
            answered: answered.unwrap_or(closed),
            closed,
        }
    }

    /// How long after its answer a refused request's connection may linger: the server's
    /// disconnect timeout, while it drains what is left of the body.
    const CLOSE: Duration = crate::server::CLIENT_DISCONNECT_TIMEOUT;

    /// Answered at the bound, closed at most `CLOSE` later.
    fn assert_cut_at_the_bound(seen: &Seen) {
        let Seen { answer, answered, closed } = seen;
        assert!(*answered >= BOUND, "answered after {answered:?}, before the bound: {answer}");
        assert!(*answered < BOUND + SLACK, "answered after {answered:?}: {answer}");
        assert!(*closed < BOUND + CLOSE + SLACK, "closed after {closed:?}: {answer}");
    }

    fn assert_timed_out(answer: &str) {
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.to_ascii_lowercase().contains("connection: close"), "{answer}");
        assert!(answer.contains(r#""code":"REQUEST_TIMEOUT""#), "{answer}");
    }

    #[actix_web::test]
    async fn a_head_not_whole_in_time_is_408_and_closed() {
        let (server, port) = start();
        let seen = exchange(port, &[b"GET /ignore HTTP/1.1\r\nhost: x\r\n"], Duration::ZERO).await;
        // actix's own answer, without a body, counted from a clock that ticks every half
        // second: it may come that much before the bound, never after.
        assert!(seen.answer.starts_with("HTTP/1.1 408"), "{}", seen.answer);
        assert!(seen.answered < BOUND + SLACK, "answered after {:?}", seen.answered);
        assert!(seen.closed < BOUND + CLOSE + SLACK, "closed after {:?}", seen.closed);
        server.stop(false).await;
    }

    #[actix_web::test]
    async fn a_body_not_whole_in_time_is_408_and_closed() {
        let (server, port) = start();
        let head = b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n";
        let seen = exchange(port, &[head, b"{\"a\": "], Duration::ZERO).await;
        assert_timed_out(&seen.answer);
        assert_cut_at_the_bound(&seen);
        server.stop(false).await;
    }

    #[actix_web::test]
    async fn a_body_trickled_a_byte_at_a_time_is_cut_at_the_bound() {
        let (server, port) = start();
        let mut parts: Vec<&[u8]> = vec![
            b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 40\r\n\r\n",
        ];
        parts.extend(std::iter::repeat_n(&b" "[..], 40));
        // Each byte comes well within the bound of the one before: only a bound on the whole
        // body ends this.
        let seen = exchange(port, &parts, BOUND / 8).await;
        assert_timed_out(&seen.answer);
        assert_cut_at_the_bound(&seen);
        server.stop(false).await;
    }

    #[actix_web::test]
    async fn a_get_declaring_a_body_it_never_sends_is_408_and_closed() {
        let (server, port) = start();
        let seen = exchange(
            port,
            &[b"GET /ignore HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\n"],
            Duration::ZERO,
        )
        .await;
        assert_timed_out(&seen.answer);
        assert_cut_at_the_bound(&seen);
        server.stop(false).await;
    }

    #[actix_web::test]
    async fn a_declared_length_past_the_limit_is_413_and_closed_at_once() {
        let (server, port) = start();
        let Seen { answer, answered, closed } = exchange(
            port,
            &[b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 5000\r\n\r\n"],
            Duration::ZERO,
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
        assert!(answer.to_ascii_lowercase().contains("connection: close"), "{answer}");
        assert!(answer.contains(r#""code":"PAYLOAD_TOO_LARGE""#), "{answer}");
        assert!(answered < BOUND, "answered after {answered:?}");
        assert!(closed < CLOSE + SLACK, "closed after {closed:?}");
        server.stop(false).await;
    }

    #[actix_web::test]
    async fn a_body_on_time_reaches_the_handler_whole_and_the_connection_stays_open() {
        let (server, port) = start();
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let request = |body: &str| {
            format!(
                "POST /echo HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
        };
        // In two pieces, the second inside the bound: buffered and handed on as one.
        let first = request(r#"{"a": [1, 2, 3], "b": "xyz"}"#);
        let (head, tail) = first.split_at(first.len() - 10);
        stream.write_all(head.as_bytes()).await.unwrap();
        tokio::time::sleep(BOUND / 4).await;
        stream.write_all(tail.as_bytes()).await.unwrap();
        let mut buf = vec![0; 4096];
        let n = stream.read(&mut buf).await.unwrap();
        let answer = String::from_utf8_lossy(&buf[..n]).into_owned();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with(r#"{"a":[1,2,3],"b":"xyz"}"#), "{answer}");
        // Kept alive: a second request on the same connection, past the first one's bound.
        tokio::time::sleep(BOUND).await;
        stream.write_all(request("7").as_bytes()).await.unwrap();
        let n = stream.read(&mut buf).await.unwrap();
        let answer = String::from_utf8_lossy(&buf[..n]).into_owned();
        assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("\r\n\r\n7"), "{answer}");
        server.stop(false).await;
    }
}

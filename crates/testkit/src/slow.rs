//! Slow clients, by hand over raw TCP (an HTTP client library always sends what it promised):
//! a head sent in part, a body declared and sent in part, a GET declaring a body it never sends.
//! Each sends its part, then nothing, and reads until the server closes the connection; the
//! tests of `http.read_timeout_ms` hold what they see against the bound.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How late past the bound a connection may be answered on a loaded test machine.
pub const SLACK: Duration = Duration::from_millis(1_500);

/// What a slow client saw, counted from its first byte sent.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Everything the server sent before it closed.
    pub answer: String,
    /// When the first byte of the answer came.
    pub answered: Duration,
    /// When the server closed the connection.
    pub closed: Duration,
}

impl Seen {
    /// The answer's status code (0 when there was none).
    pub fn status(&self) -> u16 {
        self.answer.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0)
    }

    /// Answered 408 by the bound, and closed at most `linger` after the answer. A head's 408
    /// is the server's own, bodiless, and may come up to half a second early: actix counts it
    /// from a clock that ticks every half second.
    pub fn assert_cut_at(&self, bound: Duration, linger: Duration, what: &str) {
        let Self { answer, answered, closed } = self;
        assert_eq!(self.status(), 408, "{what}: answered {answer:?}");
        assert!(*answered < bound + SLACK, "{what}: answered after {answered:?}, the bound is {bound:?}");
        assert!(*closed < bound + linger + SLACK, "{what}: closed after {closed:?}, the bound is {bound:?}");
    }

    /// As [`Seen::assert_cut_at`], for a body: not before the bound, the project's error and
    /// `Connection: close`.
    pub fn assert_body_cut_at(&self, bound: Duration, linger: Duration, what: &str) {
        self.assert_cut_at(bound, linger, what);
        let answered = self.answered;
        assert!(answered >= bound, "{what}: answered after {answered:?}, before the bound {bound:?}");
        assert!(self.answer.contains(r#""code":"REQUEST_TIMEOUT""#), "{what}: {}", self.answer);
        assert!(self.answer.to_ascii_lowercase().contains("connection: close"), "{what}: {}", self.answer);
    }
}

/// A head cut off before its blank line.
pub fn partial_head(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nhost: slow\r\nuser-agent: slow\r\n").into_bytes()
}

/// A whole head declaring a JSON body of 1,000 bytes, and 10 of them.
pub fn partial_body(method: &str, path: &str) -> Vec<u8> {
    format!(
        "{method} {path} HTTP/1.1\r\nhost: slow\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{{\"a\": \"bc\""
    )
    .into_bytes()
}

/// A whole GET head declaring a body of 1,000 bytes, and none of it.
pub fn get_with_length(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nhost: slow\r\ncontent-length: 1000\r\n\r\n").into_bytes()
}

/// A connection that sent its part and sends nothing more.
#[derive(Debug)]
pub struct SlowClient {
    stream: TcpStream,
    started: Instant,
}

impl SlowClient {
    /// Connects and sends `bytes`.
    pub async fn open(addr: SocketAddr, bytes: &[u8]) -> std::io::Result<Self> {
        let mut stream = TcpStream::connect(addr).await?;
        let started = Instant::now();
        stream.write_all(bytes).await?;
        Ok(Self { stream, started })
    }

    /// Reads until the server closes the connection, or panics once `give_up` has passed
    /// since the first byte was sent: the connection was held open.
    pub async fn wait_closed(mut self, give_up: Duration) -> Seen {
        let mut raw = Vec::new();
        let mut answered = None;
        let mut buf = [0; 4096];
        loop {
            let Some(left) = give_up.checked_sub(self.started.elapsed()) else {
                panic!(
                    "still open after {:?}; answered so far {:?}",
                    self.started.elapsed(),
                    String::from_utf8_lossy(&raw)
                );
            };
            match tokio::time::timeout(left, self.stream.read(&mut buf)).await {
                Err(_) => continue,
                // Closed, or reset (a server dropping a connection with unread bytes resets it).
                Ok(Ok(0) | Err(_)) => break,
                Ok(Ok(n)) => {
                    answered.get_or_insert_with(|| self.started.elapsed());
                    raw.extend_from_slice(&buf[..n]);
                }
            }
        }
        let closed = self.started.elapsed();
        Seen {
            answer: String::from_utf8_lossy(&raw).into_owned(),
            answered: answered.unwrap_or(closed),
            closed,
        }
    }
}

/// [`SlowClient::open`], then [`SlowClient::wait_closed`].
pub async fn send_and_wait(addr: SocketAddr, bytes: &[u8], give_up: Duration) -> Seen {
    let client = SlowClient::open(addr, bytes).await.unwrap_or_else(|e| panic!("{addr}: {e}"));
    client.wait_closed(give_up).await
}

/// The three slow clients at once against `addr` (`post` a route taking a body, `get` one
/// taking none), each checked against `bound`; `what` names the port in failures.
pub async fn assert_every_read_bounded(addr: SocketAddr, post: &str, get: &str, bound: Duration, what: &str) {
    let linger = seckill_web::server::CLIENT_DISCONNECT_TIMEOUT;
    let give_up = bound + linger + SLACK * 2;
    let (head, body, length) = (partial_head(get), partial_body("POST", post), get_with_length(get));
    let (head, body, length) = tokio::join!(
        send_and_wait(addr, &head, give_up),
        send_and_wait(addr, &body, give_up),
        send_and_wait(addr, &length, give_up),
    );
    head.assert_cut_at(bound, linger, &format!("{what}: a slow head"));
    body.assert_body_cut_at(bound, linger, &format!("{what}: a slow body on POST {post}"));
    length.assert_body_cut_at(bound, linger, &format!("{what}: GET {get} declaring a body it never sends"));
}

/// How often [`assert_next_head_bounded`] sends a byte of its head: far more often than any
/// bound, so only a bound on the whole wait between requests ends it.
pub const TRICKLE: Duration = Duration::from_millis(200);

/// A whole `GET path` asking to keep the connection.
fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nhost: slow\r\nuser-agent: slow\r\n\r\n").into_bytes()
}

/// Reads one answer off `stream` (its head and its `Content-Length` body): its text, or None
/// when the server closed the connection first. Panics past `give_up`.
pub async fn read_answer(stream: &mut TcpStream, give_up: Duration) -> Option<String> {
    let mut raw = Vec::new();
    let mut buf = [0; 4096];
    loop {
        let text = String::from_utf8_lossy(&raw);
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length").then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or_else(|| panic!("an answer without Content-Length: {text}"));
            if raw.len() >= end + 4 + length {
                return Some(text.into_owned());
            }
        }
        match tokio::time::timeout(give_up, stream.read(&mut buf)).await {
            Err(_) => panic!("no whole answer within {give_up:?}: {text}"),
            Ok(Ok(0) | Err(_)) => return None,
            Ok(Ok(n)) => raw.extend_from_slice(&buf[..n]),
        }
    }
}

/// Between two requests, both sides of the keep-alive at once: a next head trickled is cut
/// ([`assert_next_head_bounded`]) while an honest client pausing within the keep-alive keeps
/// its connection ([`assert_kept_alive`]).
pub async fn assert_between_requests_bounded(
    addr: SocketAddr,
    path: &str,
    keep_alive: Duration,
    bound: Duration,
    what: &str,
) {
    tokio::join!(
        assert_next_head_bounded(addr, path, keep_alive, bound, what),
        assert_kept_alive(addr, path, keep_alive, bound, what),
    );
}

/// One whole `GET path` on a new connection, answered; then the next head begun and sent a
/// byte every [`TRICKLE`], never finished. The server must close the connection no sooner than
/// its `keep_alive` after the answer (an honest client may wait that long) and no later than
/// `keep_alive + bound`, the watchdog's tick and [`SLACK`].
pub async fn assert_next_head_bounded(
    addr: SocketAddr,
    path: &str,
    keep_alive: Duration,
    bound: Duration,
    what: &str,
) {
    let give_up = keep_alive + bound + SLACK * 3;
    let mut stream = TcpStream::connect(addr).await.unwrap_or_else(|e| panic!("{what}: {addr}: {e}"));
    stream.write_all(&get(path)).await.unwrap();
    let answer = read_answer(&mut stream, give_up).await;
    let answer = answer.unwrap_or_else(|| panic!("{what}: closed before the first answer"));
    assert!(answer.starts_with("HTTP/1.1 200"), "{what}: {answer}");
    let answered = Instant::now();
    let next = format!("GET {path} HTTP/1.1\r\nhost: slow\r\nx-slow: ");
    let (mut reader, mut writer) = stream.into_split();
    let trickle = async {
        for byte in next.bytes().chain(std::iter::repeat(b'a')) {
            if writer.write_all(&[byte]).await.is_err() {
                // Refused: the server is gone.
                return;
            }
            tokio::time::sleep(TRICKLE).await;
        }
    };
    let closed = async {
        // The end of the stream (or a reset), and nothing before it.
        let mut buf = [0; 4096];
        if let Ok(n @ 1..) = reader.read(&mut buf).await {
            panic!("{what}: answered a head never finished: {}", String::from_utf8_lossy(&buf[..n]))
        }
    };
    let cut = tokio::time::timeout(give_up, async {
        tokio::pin!(trickle, closed);
        let mut trickling = true;
        loop {
            tokio::select! {
                () = &mut closed => return,
                // A write refused: the server is gone, its end of the stream still to be read.
                () = &mut trickle, if trickling => trickling = false,
            }
        }
    })
    .await;
    let after = answered.elapsed();
    assert!(cut.is_ok(), "{what}: the next head sent a byte every {TRICKLE:?} still open after {after:?}");
    assert!(
        after >= keep_alive,
        "{what}: closed {after:?} after the answer, before the keep-alive {keep_alive:?}"
    );
    let most = keep_alive + bound + seckill_web::keep_alive::TICK + SLACK;
    assert!(after < most, "{what}: closed {after:?} after the answer, the bound is {most:?}");
}

/// An honest client: `GET path` `requests` times on one connection, a pause of three quarters
/// of `keep_alive` before each after the first; altogether longer than `keep_alive + bound`,
/// so only requests served keep the connection. Every one must be answered on it.
pub async fn assert_kept_alive(
    addr: SocketAddr,
    path: &str,
    keep_alive: Duration,
    bound: Duration,
    what: &str,
) {
    let pause = keep_alive * 3 / 4;
    let requests = ((keep_alive + bound).as_millis() / pause.as_millis()) as u32 + 2;
    let mut stream = TcpStream::connect(addr).await.unwrap_or_else(|e| panic!("{what}: {addr}: {e}"));
    let started = Instant::now();
    for n in 0..requests {
        if n > 0 {
            tokio::time::sleep(pause).await;
        }
        let sent = stream.write_all(&get(path)).await;
        let answer = match sent {
            Ok(()) => read_answer(&mut stream, pause + SLACK).await,
            Err(_) => None,
        };
        let Some(answer) = answer else {
            panic!(
                "{what}: request {n} of {requests} found the connection closed, {:?} in",
                started.elapsed()
            )
        };
        assert!(answer.starts_with("HTTP/1.1 200"), "{what}: request {n}: {answer}");
    }
    assert!(started.elapsed() > keep_alive + bound, "{what}: over in {:?}", started.elapsed());
}

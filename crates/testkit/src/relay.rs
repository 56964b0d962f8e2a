//! A TCP relay a test controls, in front of one of the shared servers: while it refuses, every
//! connection is reset at once (the server is away, as far as the service behind it can tell);
//! while it forwards, bytes go both ways untouched. A test makes PostgreSQL, Redis or RabbitMQ
//! go away for its own service without stopping the servers every other test uses.
//!
//! The relay runs on a thread and runtime of its own: a test's runtime blocked (a service
//! stopping in `Drop`, which joins its thread) must not stall the connections the service is
//! closing through the relay.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};

pub struct Relay {
    port: u16,
    forwarding: Arc<watch::Sender<bool>>,
    /// Dropped to stop the relay's thread (and every connection it carries).
    _stop: oneshot::Sender<()>,
}

impl Relay {
    /// A relay to the server of `url` (`scheme://[user@]host:port/...`), refusing or forwarding
    /// from the start, and `url` rewritten to go through it.
    pub async fn in_front_of(url: &str, forwarding: bool) -> (Self, String) {
        let relay = Self::to_server_of(url, forwarding).await;
        let through = relay.route(url);
        (relay, through)
    }

    /// A relay to the server of `url`; URLs go through it with [`Relay::route`].
    pub async fn to_server_of(url: &str, forwarding: bool) -> Self {
        let (_, authority, _) = split_authority(url);
        let server = authority.rsplit_once('@').map_or(authority, |(_, s)| s);
        let target = tokio::net::lookup_host(server)
            .await
            .ok()
            .and_then(|mut addrs| addrs.next())
            .unwrap_or_else(|| panic!("relay: cannot resolve {server}"));
        Self::start(target, forwarding).await
    }

    /// `url` (`scheme://[user@]host:port/...`) through this relay: its server replaced by the
    /// relay's address, the rest kept.
    pub fn route(&self, url: &str) -> String {
        let (head, authority, tail) = split_authority(url);
        let at = authority.rsplit_once('@').map_or(String::new(), |(userinfo, _)| format!("{userinfo}@"));
        format!("{head}{at}127.0.0.1:{}{tail}", self.port)
    }

    /// A relay to `target` on a free loopback port.
    pub async fn start(target: SocketAddr, forwarding: bool) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("relay: bind a loopback port");
        listener.set_nonblocking(true).expect("relay: a non-blocking listener");
        let port = listener.local_addr().expect("relay: its port").port();
        let forwarding = Arc::new(watch::Sender::new(forwarding));
        let (stop, stopped) = oneshot::channel::<()>();
        let state = forwarding.clone();
        std::thread::spawn(move || {
            let rt =
                tokio::runtime::Builder::new_current_thread().enable_all().build().expect("relay: a runtime");
            rt.block_on(async move {
                let listener = TcpListener::from_std(listener).expect("relay: its listener");
                let accepting = async {
                    while let Ok((client, _)) = listener.accept().await {
                        if *state.borrow() {
                            tokio::spawn(carry(client, target, state.subscribe()));
                        } else {
                            reset(&client);
                        }
                    }
                };
                tokio::select! {
                    () = accepting => {}
                    _ = stopped => {}
                }
            });
            // Dropping the runtime drops every connection it carries.
        });
        Self { port, forwarding, _stop: stop }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// From now on, connections reach the server.
    pub fn forward(&self) {
        self.forwarding.send_replace(true);
    }

    /// From now on, connections are reset at once, and those it carries are cut.
    pub fn refuse(&self) {
        self.forwarding.send_replace(false);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.refuse();
    }
}

/// Carries one connection until either side closes it or the relay stops forwarding.
async fn carry(mut client: TcpStream, target: SocketAddr, mut forwarding: watch::Receiver<bool>) {
    let Ok(mut server) = TcpStream::connect(target).await else {
        reset(&client);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
        _ = forwarding.wait_for(|on| !*on) => reset(&client),
    }
}

/// Closes with a reset (no FIN, no wait): the client's next read fails at once.
fn reset(stream: &TcpStream) {
    let _ = stream.set_zero_linger();
}

/// `scheme://authority/rest` -> (`scheme://`, `authority`, `/rest`); the rest keeps its query.
fn split_authority(url: &str) -> (&str, &str, &str) {
    let start = url.find("://").map_or(0, |at| at + 3);
    let end = url[start..].find(['/', '?']).map_or(url.len(), |at| start + at);
    (&url[..start], &url[start..end], &url[end..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_split_around_their_server() {
        assert_eq!(
            split_authority("amqp://guest:guest@127.0.0.1:5672/%2f"),
            ("amqp://", "guest:guest@127.0.0.1:5672", "/%2f")
        );
        assert_eq!(split_authority("redis://127.0.0.1:6379"), ("redis://", "127.0.0.1:6379", ""));
        assert_eq!(
            split_authority("postgres://postgres:postgres@localhost:5432/db?sslmode=disable"),
            ("postgres://", "postgres:postgres@localhost:5432", "/db?sslmode=disable")
        );
    }
}

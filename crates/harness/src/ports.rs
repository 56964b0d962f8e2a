//! Loopback ports of the tools' own processes and servers: is one taken, wait until one opens
//! or closes.

use std::time::{Duration, Instant};

use anyhow::bail;

/// Does something accept connections on the loopback port?
pub async fn port_open(port: u16) -> bool {
    tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(("127.0.0.1", port)))
        .await
        .is_ok_and(|c| c.is_ok())
}

/// Waits until the port accepts connections (`open`) or refuses them.
pub async fn await_port(port: u16, open: bool, within: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    while port_open(port).await != open {
        if Instant::now() > deadline {
            bail!("port {port} still {} after {} s", if open { "closed" } else { "open" }, within.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

//! The admin listener: a second, small HTTP server on a port of its own for what only the
//! cluster should read (Prometheus metrics, a detailed readiness), so a public port need not
//! serve it. Run it next to the main server with `Application::with_extra_server`.

use actix_web::dev::Server;
use actix_web::middleware::from_fn;
use actix_web::{App, HttpResponse, HttpServer, web};
use seckill_common::ErrorCode;
use seckill_common::config::HttpSettings;

use crate::keep_alive::Watchdog;
use crate::read_bound::{self, ReadBound};
use crate::{ApiError, health, metrics};

/// How long a stopping admin server waits for a scrape in flight.
const SHUTDOWN_TIMEOUT_SECS: u64 = 1;

/// Binds `GET /metrics` and `GET /healthz`, plus the routes `configure` adds (e.g. a detailed
/// `/readyz`), on `host:port` (port 0 asks the OS). Returns the server unstarted and the port
/// it got. One worker: a scrape every few seconds needs no more. Its reads are bounded as the
/// main server's (`http.read_timeout_ms`, `http.body_limit_bytes`, `http.keep_alive_secs`,
/// [`crate::read_bound`], [`crate::keep_alive`]).
pub fn serve_admin<F>(
    host: &str,
    port: u16,
    http: &HttpSettings,
    configure: F,
) -> std::io::Result<(Server, u16)>
where
    F: Fn(&mut web::ServiceConfig) + Send + Clone + 'static,
{
    metrics::handle();
    let bound = ReadBound::new(http);
    let watchdog = Watchdog::start(http.keep_alive(), bound.timeout)?;
    let server = HttpServer::new(move || {
        App::new()
            .wrap(from_fn(move |req, next| read_bound::middleware(bound, req, next)))
            .configure(health::routes)
            .configure(metrics::routes)
            .configure(configure.clone())
            .default_service(web::to(not_found))
    })
    // Stopped by `Application::run_until_stopped`, after the main server.
    .disable_signals()
    .keep_alive(http.keep_alive())
    .client_request_timeout(bound.timeout)
    .on_connect(watchdog.on_connect())
    .client_disconnect_timeout(crate::server::CLIENT_DISCONNECT_TIMEOUT)
    .workers(1)
    .shutdown_timeout(SHUTDOWN_TIMEOUT_SECS)
    .bind((host, port))?;
    let port = server.addrs().first().map(|a| a.port()).unwrap_or_default();
    Ok((server.run(), port))
}

async fn not_found() -> Result<HttpResponse, ApiError> {
    Err(ApiError::new(ErrorCode::NotFound, "no such route"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[actix_web::test]
    async fn serves_metrics_health_and_the_extra_routes_only() {
        let (server, port) = serve_admin("127.0.0.1", 0, &HttpSettings::default(), |cfg| {
            cfg.route("/extra", web::get().to(|| async { HttpResponse::Ok().body("extra") }));
        })
        .unwrap();
        assert_ne!(port, 0);
        let handle = server.handle();
        let running = actix_web::rt::spawn(server);

        let get = |path: &str| {
            let addr = format!("127.0.0.1:{port}");
            let request = format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
            async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
                stream.write_all(request.as_bytes()).await.unwrap();
                let mut raw = String::new();
                stream.read_to_string(&mut raw).await.unwrap();
                raw
            }
        };
        assert!(get("/metrics").await.starts_with("HTTP/1.1 200"));
        assert!(get("/healthz").await.starts_with("HTTP/1.1 200"));
        assert!(get("/extra").await.ends_with("extra"));
        let missing = get("/api/goods").await;
        assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
        assert!(missing.contains("NOT_FOUND"), "{missing}");

        handle.stop(true).await;
        running.await.unwrap().unwrap();
    }
}

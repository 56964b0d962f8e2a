//! Prometheus metrics: one recorder per process, HTTP counters and latencies by route.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::Method;
use actix_web::middleware::Next;
use actix_web::{Error, HttpResponse, web};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// How often recorded histogram samples are folded into their buckets.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Installs the process-wide recorder on first use (several services may share a test process).
pub fn handle() -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| {
        let handle = PrometheusBuilder::new()
            .set_buckets(&[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0])
            .expect("static buckets are valid")
            .install_recorder()
            .expect("the Prometheus recorder is installed once per process");
        spawn_upkeep(handle.clone());
        handle
    })
}

/// The recorder keeps every histogram sample until upkeep folds them into buckets; only a
/// scrape of `/metrics` would do that otherwise, so a process nobody scrapes would grow by
/// every request's latency forever. A plain thread: the recorder outlives any one runtime.
fn spawn_upkeep(handle: PrometheusHandle) {
    let spawned = std::thread::Builder::new().name("metrics-upkeep".into()).spawn(move || {
        loop {
            std::thread::sleep(UPKEEP_EVERY);
            handle.run_upkeep();
        }
    });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "metrics upkeep thread not started: histograms fold only when scraped");
    }
}

/// `GET /metrics`.
pub async fn render() -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain; version=0.0.4").body(handle().render())
}

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/metrics", web::get().to(render));
}

/// Counts requests and records their latency, labelled by method, route pattern and status.
/// Every label comes from a bounded set, never from the client's text: a client that could mint
/// label values (a raw path, a made-up method) would grow the series without end.
pub async fn middleware(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, Error> {
    let started = Instant::now();
    let method = method_label(req.method()).to_owned();
    let res = next.call(req).await?;
    // The registered pattern (`/api/orders/{id}`), not the path; "unmatched" for the rest.
    let route = res.request().match_pattern().unwrap_or_else(|| "unmatched".into());
    let status = res.status().as_u16().to_string();
    let labels = [("method", method), ("route", route), ("status", status)];
    metrics::counter!("http_requests_total", &labels).increment(1);
    metrics::histogram!("http_request_duration_seconds", &labels).record(started.elapsed().as_secs_f64());
    Ok(res)
}

/// The standard methods by name; any other (HTTP allows custom ones) is "OTHER".
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "OTHER",
    }
}

#[cfg(test)]
mod tests {
    use actix_web::test::{self, TestRequest};
    use actix_web::{App, HttpResponse, middleware::from_fn, web};

    use super::*;

    #[test]
    fn methods_outside_the_standard_set_are_other() {
        for m in ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"] {
            assert_eq!(method_label(&Method::from_bytes(m.as_bytes()).unwrap()), m);
        }
        for m in ["TRACE", "CONNECT", "PROPFIND", "X-RANDOM-123", "get"] {
            assert_eq!(method_label(&Method::from_bytes(m.as_bytes()).unwrap()), "OTHER", "{m}");
        }
    }

    #[actix_web::test]
    async fn labels_are_the_pattern_and_a_known_method() {
        let app = test::init_service(
            App::new()
                .wrap(from_fn(middleware))
                .route("/items/{id}", web::get().to(HttpResponse::Ok))
                .default_service(web::to(HttpResponse::NotFound)),
        )
        .await;
        handle();
        let tag = uuid::Uuid::new_v4().simple().to_string();
        let req = TestRequest::get().uri(&format!("/items/{tag}")).to_request();
        assert_eq!(test::call_service(&app, req).await.status(), 200);
        let req = TestRequest::default()
            .method(Method::from_bytes(format!("M{tag}").as_bytes()).unwrap())
            .uri(&format!("/nowhere/{tag}"))
            .to_request();
        assert_eq!(test::call_service(&app, req).await.status(), 404);

        let text = handle().render();
        assert!(!text.contains(&tag), "a client-chosen value became a label");
        assert!(text.contains(r#"method="GET",route="/items/{id}",status="200""#), "{text}");
        assert!(text.contains(r#"method="OTHER",route="unmatched",status="404""#), "{text}");
    }
}

//! `/healthz` (the process is alive) and the body of `/readyz` (its dependencies answer).

use actix_web::{HttpResponse, web};
use serde_json::{Map, Value, json};

pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

/// One dependency's answer: its name and, if it failed, why.
pub type Check = (&'static str, Result<(), String>);

/// 200 when every check passed, else 503 with each failure named.
pub fn readiness(checks: &[Check]) -> HttpResponse {
    report(checks, checks.iter().all(|(_, r)| r.is_ok()))
}

/// 200 while at least one check passes (`"degraded"` when some fail), 503 when none does: for
/// a service that still serves part of its work without some dependencies.
pub fn readiness_any(checks: &[Check]) -> HttpResponse {
    report(checks, checks.iter().any(|(_, r)| r.is_ok()))
}

fn report(checks: &[Check], ready: bool) -> HttpResponse {
    let mut details = Map::new();
    let mut all_ok = true;
    for (name, result) in checks {
        let value = match result {
            Ok(()) => Value::from("ok"),
            Err(why) => {
                all_ok = false;
                tracing::warn!(dependency = name, error = %why, "dependency not answering");
                Value::from(why.as_str())
            }
        };
        details.insert((*name).to_owned(), value);
    }
    let status = match (ready, all_ok) {
        (true, true) => "ready",
        (true, false) => "degraded",
        (false, _) => "unavailable",
    };
    let body = json!({"status": status, "checks": details});
    if ready { HttpResponse::Ok().json(body) } else { HttpResponse::ServiceUnavailable().json(body) }
}

/// `GET /healthz`; any other method is a 405, as on every other route.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(web::resource("/healthz").get(healthz).default_service(web::to(|| async {
        crate::method_not_allowed(actix_web::http::header::HeaderValue::from_static("GET"))
    })));
}

#[cfg(test)]
mod tests {
    use actix_web::http::Method;
    use actix_web::{App, test};

    use super::*;

    #[actix_web::test]
    async fn healthz_takes_get_and_answers_other_methods_405_with_allow() {
        let app = test::init_service(App::new().configure(routes)).await;

        let ok = test::call_service(&app, test::TestRequest::get().uri("/healthz").to_request()).await;
        assert_eq!(ok.status(), 200);
        for method in [Method::POST, Method::TRACE, Method::DELETE] {
            let req = test::TestRequest::default().method(method.clone()).uri("/healthz").to_request();
            let res = test::call_service(&app, req).await;
            assert_eq!(res.status(), 405, "{method}");
            assert_eq!(res.headers().get("allow").and_then(|v| v.to_str().ok()), Some("GET"), "{method}");
            let body: Value = test::read_body_json(res).await;
            assert_eq!(body["code"], "METHOD_NOT_ALLOWED", "{method}");
        }
    }
}

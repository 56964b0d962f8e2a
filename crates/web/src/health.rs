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
    let mut details = Map::new();
    let mut ready = true;
    for (name, result) in checks {
        let value = match result {
            Ok(()) => Value::from("ok"),
            Err(why) => {
                ready = false;
                tracing::warn!(dependency = name, error = %why, "not ready");
                Value::from(why.as_str())
            }
        };
        details.insert((*name).to_owned(), value);
    }
    let body = json!({"status": if ready { "ready" } else { "unavailable" }, "checks": details});
    if ready { HttpResponse::Ok().json(body) } else { HttpResponse::ServiceUnavailable().json(body) }
}

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/healthz", web::get().to(healthz));
}

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

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/healthz", web::get().to(healthz));
}

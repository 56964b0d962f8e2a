//! deploy/compose.yaml as compose reads it: images built by deploy/docker/Dockerfile or
//! official server or web server images, health checks and sound `depends_on`, each service at
//! its port and its data stores depended on, the gateway's admin port unpublished and
//! X-Forwarded-For believed only behind a proxy of this file, with the gateway's own port then
//! unpublished. (Credentials: tests/credentials.rs; each
//! service's variables through its settings loader: tests/settings.rs.)

use std::collections::BTreeMap;

use regex::Regex;
use seckill_common::trust::MIN_KEY_BYTES;
use seckill_deploy_check::{Failures, SERVICES, compose, environment, items, read, root, scalar};
use serde_yaml::Value;

const SERVERS: [&str; 3] = ["postgres", "redis", "rabbitmq"];
/// Official images that may stand in front of the gateway (the storefront's files, the API).
const WEB_SERVERS: [&str; 1] = ["nginx"];
const GATEWAY_ADMIN_PORT: u16 = 9080;

fn port_of(binary: &str) -> Option<u16> {
    match binary {
        "gateway" => Some(8080),
        "seckill-service" => Some(8081),
        "order-service" => Some(8082),
        "stock-service" => Some(8083),
        _ => None,
    }
}

/// The Dockerfile's stage names (`FROM image AS name`), lower-cased.
fn dockerfile_stages() -> Vec<String> {
    read("deploy/docker/Dockerfile")
        .lines()
        .filter_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            match words.as_slice() {
                [from, _, r#as, name, ..]
                    if from.eq_ignore_ascii_case("FROM") && r#as.eq_ignore_ascii_case("AS") =>
                {
                    Some(name.to_lowercase())
                }
                _ => None,
            }
        })
        .collect()
}

fn has_health_check(service: &Value) -> bool {
    !service["healthcheck"]["test"].is_null()
}

/// `depends_on` as a map (service -> condition); the list form means "started".
fn depends_on(service: &Value) -> BTreeMap<String, String> {
    match &service["depends_on"] {
        Value::Sequence(list) => list.iter().map(|d| (scalar(d), "service_started".into())).collect(),
        Value::Mapping(m) => m
            .iter()
            .map(|(k, v)| (scalar(k), v["condition"].as_str().unwrap_or("service_started").to_owned()))
            .collect(),
        _ => BTreeMap::new(),
    }
}

fn check_compose(f: &mut Failures, compose: &Value) {
    let empty = serde_yaml::Mapping::new();
    let services = compose["services"].as_mapping().unwrap_or(&empty);
    let get = |n: &str| services.get(n);
    if services.is_empty() {
        f.fail("compose.yaml", "no services");
    }
    let stages = dockerfile_stages();
    for server in SERVERS {
        match get(server) {
            None => f.fail("compose.yaml", format!("no `{server}` service")),
            Some(s) if !has_health_check(s) => {
                f.fail("compose.yaml", format!("`{server}` has no health check"))
            }
            Some(s) if !s["depends_on"].is_null() => {
                f.fail("compose.yaml", format!("`{server}` must start alone (no depends_on)"))
            }
            Some(_) => {}
        }
    }
    let upstream = Regex::new(r"^https?://([\w.-]+):(\d+)/?$").unwrap();
    for (service_name, s) in services {
        let service_name = scalar(service_name);
        let at = format!("compose.yaml services.{service_name}");
        let (image, build) = (s["image"].as_str(), &s["build"]);
        let target = build["target"].as_str();
        if !build.is_null() {
            if build.is_string() || build["dockerfile"].as_str() != Some("deploy/docker/Dockerfile") {
                f.fail(&at, "builds with something other than deploy/docker/Dockerfile");
            } else {
                let context = root().join("deploy").join(build["context"].as_str().unwrap_or("."));
                if context.canonicalize().ok() != root().canonicalize().ok() {
                    f.fail(&at, "build context must be the repository root");
                }
            }
            if !target.is_some_and(|t| port_of(t).is_some() && stages.iter().any(|s| s == t)) {
                f.fail(&at, format!("build target {target:?} is not a service target of the Dockerfile"));
            }
            let tagged =
                Regex::new(&format!(r"^seckill/{}(:[\w.-]+)?$", regex::escape(target.unwrap_or_default())))
                    .unwrap();
            if let Some(image) = image.filter(|i| !tagged.is_match(i)) {
                f.fail(
                    &at,
                    format!("image {image:?} should be seckill/{}:<tag>", target.unwrap_or_default()),
                );
            }
        } else if let Some(image) = image {
            let last = image.rsplit('/').next().unwrap_or_default();
            let repo = if last.contains(':') {
                let without_digest = image.split('@').next().unwrap_or_default();
                without_digest.rsplit_once(':').map_or(without_digest, |(r, _)| r)
            } else {
                image
            };
            if !SERVERS.contains(&repo) && !WEB_SERVERS.contains(&repo) {
                f.fail(
                    &at,
                    format!(
                        "image {image:?} is neither built by the Dockerfile nor an official server or web \
                         server image"
                    ),
                );
            }
        } else {
            f.fail(&at, "neither image nor build");
        }
        for (dep, condition) in depends_on(s) {
            match get(&dep) {
                None => f.fail(&at, format!("depends_on unknown service {dep}")),
                Some(d) if condition == "service_healthy" && !has_health_check(d) => {
                    f.fail(&at, format!("waits for {dep} to be healthy, which has no health check"))
                }
                Some(_)
                    if !["service_healthy", "service_completed_successfully", "service_started"]
                        .contains(&condition.as_str()) =>
                {
                    f.fail(&at, format!("unknown depends_on condition {condition}"))
                }
                Some(_) => {}
            }
        }
        let env = environment(s);
        let var = |k: &str| env.get(k).cloned().flatten();
        match target.and_then(port_of) {
            Some(port) => {
                if var("SECKILL__HTTP__PORT").is_some_and(|p| p != port.to_string()) {
                    f.fail(&at, format!("SECKILL__HTTP__PORT should be {port}"));
                }
                if var("SECKILL__HTTP__HOST").as_deref() != Some("0.0.0.0") {
                    f.fail(&at, "SECKILL__HTTP__HOST must be 0.0.0.0 in a container");
                }
                if !has_health_check(s) {
                    f.fail(&at, "no health check (the services wait on each other's)");
                }
                for (k, v) in env.iter().filter(|(k, _)| k.starts_with("SECKILL__UPSTREAMS__")) {
                    let Some(v) = v.as_deref().filter(|v| v.starts_with("http")) else { continue };
                    for url in v.split(',').map(str::trim) {
                        let at_its_port = upstream
                            .captures(url)
                            .is_some_and(|c| port_of(&c[1]).is_some_and(|p| c[2] == *p.to_string()));
                        if !at_its_port {
                            f.fail(&at, format!("{k}={url:?} is not a compose service at its port"));
                        }
                    }
                }
            }
            None if env.keys().any(|k| k.starts_with("SECKILL__")) => {
                f.fail(&at, "SECKILL__ variables on a service that is not one of the four binaries")
            }
            None => {}
        }
    }
    for (binary, _) in SERVICES {
        let Some(s) = get(binary) else {
            f.fail("compose.yaml", format!("services missing: {binary}"));
            continue;
        };
        let env = environment(s);
        let deps = depends_on(s);
        for (store, server) in [("DATABASE", "postgres"), ("REDIS", "redis"), ("AMQP", "rabbitmq")] {
            if env.contains_key(&format!("SECKILL__{store}__URL")) && !deps.contains_key(server) {
                f.fail(
                    &format!("compose.yaml services.{binary}"),
                    format!(
                        "uses {server} (its `{}` section) but does not depend on it",
                        store.to_lowercase()
                    ),
                );
            }
        }
    }
    check_gateway(f, services);
}

/// The gateway's admin listener: reachable on the compose network, published only for a
/// Prometheus of this file; X-Forwarded-For believed only behind a proxy of this file.
fn check_gateway(f: &mut Failures, services: &serde_yaml::Mapping) {
    let at = "compose.yaml services.gateway";
    let Some(gateway) = services.get("gateway") else { return };
    let env = environment(gateway);
    let var = |k: &str| env.get(k).cloned().flatten();
    match var("SECKILL__AUTH__JWT_SECRET").filter(|v| !v.is_empty()) {
        None => f.fail(at, "SECKILL__AUTH__JWT_SECRET is required"),
        Some(jwt) => {
            // The value or the default of `${VAR:-default}`: the gateway refuses a shorter secret.
            let default = Regex::new(r"^\$\{\w+:-(.*)\}$").unwrap();
            let value = default.captures(&jwt).map_or(jwt.clone(), |c| c[1].to_owned());
            if value.len() < MIN_KEY_BYTES {
                f.fail(at, "SECKILL__AUTH__JWT_SECRET (or its default) is shorter than 32 bytes");
            }
        }
    }
    if var("SECKILL__ADMIN__HOST").as_deref() != Some("0.0.0.0") {
        f.fail(
            at,
            "SECKILL__ADMIN__HOST must be 0.0.0.0 (the admin listener, reachable on the compose network)",
        );
    }
    let admin = var("SECKILL__ADMIN__PORT").unwrap_or_else(|| GATEWAY_ADMIN_PORT.to_string());
    if admin == var("SECKILL__HTTP__PORT").unwrap_or_else(|| "8080".into()) {
        f.fail(at, "SECKILL__ADMIN__PORT must differ from the public port");
    }
    let named = |pattern: &str| {
        let re = Regex::new(&format!("(?i){pattern}")).unwrap();
        services.iter().any(|(n, s)| re.is_match(&format!("{} {}", scalar(n), scalar(&s["image"]))))
    };
    let monitoring = named("prometheus|grafana-agent|alloy|otel|vmagent");
    let proxy = named("nginx|traefik|envoy|haproxy|caddy");
    let hops = var("SECKILL__RATE_LIMIT__TRUSTED_PROXY_HOPS").unwrap_or_else(|| "0".into());
    let public = var("SECKILL__HTTP__PORT").unwrap_or_else(|| "8080".into());
    for spec in items(&gateway["ports"]) {
        let target = match spec {
            Value::Mapping(_) => scalar(&spec["target"]),
            other => scalar(other).rsplit(':').next().unwrap_or_default().to_owned(),
        };
        let target = target.split('/').next().unwrap_or_default();
        if target == admin && !monitoring {
            f.fail(at, format!("publishes the admin port {admin} (/metrics, detailed /readyz) with no Prometheus in compose"));
        }
        if target == public && hops != "0" {
            f.fail(
                at,
                format!(
                    "publishes its public port {public} while it believes X-Forwarded-For \
                     (TRUSTED_PROXY_HOPS={hops}): a client could go round the proxy and pick its own \
                     rate-limit bucket"
                ),
            );
        }
    }
    if hops != "0" && !proxy {
        f.fail(
            at,
            format!(
                "SECKILL__RATE_LIMIT__TRUSTED_PROXY_HOPS={hops} with no proxy in front: any client could pick its \
                 own rate-limit bucket with X-Forwarded-For"
            ),
        );
    }
}

#[test]
fn compose_builds_here_or_runs_official_servers_each_at_its_port_after_its_stores() {
    let mut f = Failures::default();
    check_compose(&mut f, &compose());
    f.assert_none();
}

#[test]
fn a_published_admin_port_or_a_trusted_hop_without_proxy_is_refused() {
    let mut compose = compose();
    let gateway = &mut compose["services"]["gateway"];
    gateway["ports"] = serde_yaml::from_str(r#"["8080:8080", "9080:9080"]"#).unwrap();
    let mut f = Failures::default();
    check_compose(&mut f, &compose);
    let all = f.messages().join("\n");
    assert!(all.contains("publishes the admin port 9080"), "{all}");
    assert!(all.contains("publishes its public port 8080 while it believes X-Forwarded-For"), "{all}");

    let services = compose["services"].as_mapping_mut().unwrap();
    services.remove("storefront");
    services["gateway"]["ports"] = Value::Null;
    let mut f = Failures::default();
    check_compose(&mut f, &compose);
    let all = f.messages().join("\n");
    assert!(all.contains("TRUSTED_PROXY_HOPS=1 with no proxy"), "{all}");
}

#[test]
fn only_official_images_or_the_dockerfiles_run() {
    let mut compose = compose();
    compose["services"]["storefront"]["image"] = "someone/nginx:latest".into();
    let mut f = Failures::default();
    check_compose(&mut f, &compose);
    let all = f.messages().join("\n");
    assert!(all.contains("\"someone/nginx:latest\" is neither built by the Dockerfile"), "{all}");
}

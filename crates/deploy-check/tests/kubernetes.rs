//! The rendered overlays (`kubectl kustomize deploy/k8s/overlays/<overlay>`; every test skips
//! with a printed reason where kubectl is missing): each service's Deployment (image, port,
//! probes, graceful shutdown, security context, resources, its Service, one autoscaler, a
//! PodDisruptionBudget); where /metrics is scraped, and the gateway's admin port (9080: /metrics
//! and the detailed /readyz) reachable from the namespace monitoring only, in no Service and
//! behind no Ingress; the storefront's nginx next to the gateway, where an overlay has it
//! (components/storefront-nginx): locked down, reading the gateway's files, and counted as a
//! hop of X-Forwarded-For. Schemas: scripts/check-deploy.sh; custom resources: custom_resources.rs.

use std::collections::{BTreeMap, BTreeSet};

use regex::Regex;

use seckill_deploy_check::{
    Failures, OVERLAYS, SERVICES, by_name, container_env, have, items, labels_match, render, scalar,
};
use serde_yaml::Value;

/// The gateway's admin listener (admin.port): /metrics and the detailed /readyz, never public.
const GATEWAY_ADMIN_PORT: u64 = 9080;
const MONITORING_NAMESPACE: &str = "monitoring";
/// The services' drain (http.shutdown_timeout_secs) and the pods' grace period by default, in seconds.
const DEFAULT_SHUTDOWN_SECS: u64 = 20;
const DEFAULT_GRACE_SECS: u64 = 30;
/// The container serving the storefront's files next to the gateway, and its port.
const STOREFRONT: &str = "storefront";
const STOREFRONT_PORT: u64 = 8088;
/// nginx.conf's `proxy_cache_path ... max_size=64m`: what its /tmp must hold, and more.
const NGINX_CACHE_MIB: u64 = 64;

/// Each service's public port, where the other services serve /metrics.
fn port_of(binary: &str) -> u64 {
    match binary {
        "gateway" => 8080,
        "seckill-service" => 8081,
        "order-service" => 8082,
        _ => 8083,
    }
}

/// Whether a port reference (a name or a number) is `name` or `number`.
fn is_port(port: &Value, name: &str, number: u64) -> bool {
    port.as_str() == Some(name) || port.as_u64() == Some(number)
}

/// Whether a NetworkPolicy ingress rule opens the container port `name`/`number`.
fn rule_covers_port(rule: &Value, name: &str, number: u64) -> bool {
    let ports = items(&rule["ports"]);
    ports.is_empty()
        || ports.iter().any(|p| {
            let port = &p["port"];
            port.is_null()
                || is_port(port, name, number)
                || port
                    .as_u64()
                    .zip(p["endPort"].as_u64())
                    .is_some_and(|(lo, hi)| (lo..=hi).contains(&number))
        })
}

/// Who an ingress rule admits: "*" (anyone), "ns:<name>" (a whole namespace) or "other".
fn sources_of(rule: &Value) -> Vec<String> {
    let sources = items(&rule["from"]);
    if sources.is_empty() {
        return vec!["*".into()];
    }
    sources
        .iter()
        .map(|s| {
            let ns = s["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"].as_str();
            match ns {
                Some(ns) if s.get("podSelector").is_none() && s.get("ipBlock").is_none() => {
                    format!("ns:{ns}")
                }
                _ => "other".into(),
            }
        })
        .collect()
}

fn check_metrics_and_admin(f: &mut Failures, overlay: &str, docs: &[Value]) {
    let deployments = by_name(docs, "Deployment");
    let services = by_name(docs, "Service");
    let ingresses = by_name(docs, "Ingress");
    let policies = by_name(docs, "NetworkPolicy");
    let at = format!("overlay {overlay}: Deployment/gateway");
    let Some(gateway) = deployments.get("gateway") else {
        f.fail(&format!("overlay {overlay}"), "no Deployment gateway");
        return;
    };
    let c = &gateway["spec"]["template"]["spec"]["containers"][0];
    let env = container_env(docs, c);
    let var = |k: &str| env.get(k).cloned().flatten();
    let admin = items(&c["ports"]).iter().find(|p| p["name"].as_str() == Some("admin"));
    if admin.and_then(|p| p["containerPort"].as_u64()) != Some(GATEWAY_ADMIN_PORT) {
        f.fail(&at, format!("no containerPort {GATEWAY_ADMIN_PORT} named admin (the admin listener)"));
    }
    if var("SECKILL__ADMIN__PORT") != Some(GATEWAY_ADMIN_PORT.to_string()) {
        f.fail(
            &at,
            format!("SECKILL__ADMIN__PORT must be {GATEWAY_ADMIN_PORT} (the container port named admin)"),
        );
    }
    if var("SECKILL__ADMIN__HOST").as_deref() != Some("0.0.0.0") {
        f.fail(&at, "SECKILL__ADMIN__HOST must be 0.0.0.0 (Prometheus scrapes the pod address)");
    }
    for probe in ["startupProbe", "readinessProbe", "livenessProbe"] {
        if is_port(&c[probe]["httpGet"]["port"], "admin", GATEWAY_ADMIN_PORT) {
            f.fail(
                &at,
                format!(
                    "{probe} on the admin port: probe the public port (its /readyz keeps the status codes)"
                ),
            );
        }
    }
    // The proxies in front: the Ingress controller, and the storefront's nginx when it is there.
    let storefront = items(&gateway["spec"]["template"]["spec"]["containers"])
        .iter()
        .any(|c| c["name"].as_str() == Some(STOREFRONT));
    let proxies = u64::from(!ingresses.is_empty()) + u64::from(storefront);
    let hops: u64 = var("SECKILL__RATE_LIMIT__TRUSTED_PROXY_HOPS").and_then(|h| h.parse().ok()).unwrap_or(0);
    if hops != proxies {
        f.fail(
            &format!("overlay {overlay}: gateway"),
            format!(
                "SECKILL__RATE_LIMIT__TRUSTED_PROXY_HOPS is {hops}, but {proxies} proxies stand in front (the \
                 Ingress controller, the storefront's nginx): fewer puts every client in a proxy's bucket, \
                 more lets a client pick its own with X-Forwarded-For"
            ),
        );
    }

    // Scrape annotations: the port that serves /metrics.
    for (binary, _) in SERVICES {
        let Some(d) = deployments.get(binary) else { continue };
        let annotations = &d["spec"]["template"]["metadata"]["annotations"];
        let want = if binary == "gateway" { GATEWAY_ADMIN_PORT } else { port_of(binary) };
        let ann = |k: &str| annotations[k].as_str().map(str::to_owned);
        if ann("prometheus.io/scrape").as_deref() != Some("true")
            || ann("prometheus.io/path").as_deref() != Some("/metrics")
            || ann("prometheus.io/port") != Some(want.to_string())
        {
            f.fail(
                &format!("overlay {overlay}: Deployment/{binary}"),
                format!("prometheus.io annotations must scrape /metrics on port {want}"),
            );
        }
    }

    // No Service selecting the gateway's pods carries the admin port.
    let labels = &gateway["spec"]["template"]["metadata"]["labels"];
    for (svc_name, svc) in &services {
        if svc["spec"]["selector"].is_null() || !labels_match(&match_labels(&svc["spec"]["selector"]), labels)
        {
            continue;
        }
        for p in items(&svc["spec"]["ports"]) {
            let target = if p["targetPort"].is_null() { &p["port"] } else { &p["targetPort"] };
            if is_port(target, "admin", GATEWAY_ADMIN_PORT) || p["port"].as_u64() == Some(GATEWAY_ADMIN_PORT)
            {
                f.fail(
                    &format!("overlay {overlay}: Service/{svc_name}"),
                    format!("exposes the gateway's admin port {GATEWAY_ADMIN_PORT}"),
                );
            }
        }
    }
    // The Ingress routes to the gateway Service's public port only.
    let gateway_ports = services.get("gateway").map(|s| items(&s["spec"]["ports"])).unwrap_or_default();
    for (ing_name, ing) in &ingresses {
        let mut backends: Vec<&Value> = items(&ing["spec"]["rules"])
            .iter()
            .flat_map(|r| items(&r["http"]["paths"]).iter().map(|p| &p["backend"]))
            .collect();
        if !ing["spec"]["defaultBackend"].is_null() {
            backends.push(&ing["spec"]["defaultBackend"]);
        }
        for b in backends {
            let port = &b["service"]["port"];
            let svc_port = gateway_ports.iter().find(|p| match port.get("name") {
                Some(n) => &p["name"] == n,
                None => p["port"] == port["number"],
            });
            // The gateway's public port, or nginx's in front of it.
            let routed = svc_port.is_some_and(|p| {
                let target = if p["targetPort"].is_null() { &p["port"] } else { &p["targetPort"] };
                if storefront {
                    is_port(target, "web", STOREFRONT_PORT)
                } else {
                    is_port(target, "http", port_of("gateway"))
                }
            });
            if b["service"]["name"].as_str() != Some("gateway") || !routed {
                f.fail(
                    &format!("overlay {overlay}: Ingress/{ing_name}"),
                    "must route to the gateway Service's public port only (the gateway's http, or the \
                     storefront's web when nginx stands in front)",
                );
            }
        }
    }

    // NetworkPolicies: the namespace monitoring reaches each service's metrics port; nobody
    // else reaches the gateway's admin port.
    let monitoring = format!("ns:{MONITORING_NAMESPACE}");
    for (binary, _) in SERVICES {
        let Some(d) = deployments.get(binary) else { continue };
        let labels = &d["spec"]["template"]["metadata"]["labels"];
        let (port_name, number) =
            if binary == "gateway" { ("admin", GATEWAY_ADMIN_PORT) } else { ("http", port_of(binary)) };
        let mut reach: Vec<String> = policies
            .values()
            .filter(|p| labels_match(&p["spec"]["podSelector"], labels))
            .flat_map(|p| items(&p["spec"]["ingress"]))
            .filter(|rule| rule_covers_port(rule, port_name, number))
            .flat_map(sources_of)
            .collect();
        reach.sort();
        reach.dedup();
        if !reach.contains(&monitoring) && !reach.iter().any(|r| r == "*") {
            f.fail(
                &format!("overlay {overlay}: NetworkPolicy"),
                format!(
                    "the namespace {MONITORING_NAMESPACE} cannot reach {binary}'s /metrics (port {number})"
                ),
            );
        }
        if binary == "gateway" && reach.iter().any(|r| *r != monitoring) {
            f.fail(
                &format!("overlay {overlay}: NetworkPolicy"),
                format!("the gateway's admin port {number} admits {reach:?}; only the namespace {MONITORING_NAMESPACE}"),
            );
        }
    }
}

/// A selector of `matchLabels` only, as a Service's `spec.selector` is.
fn match_labels(labels: &Value) -> Value {
    let mut selector = serde_yaml::Mapping::new();
    selector.insert("matchLabels".into(), labels.clone());
    Value::Mapping(selector)
}

fn check_deployments(f: &mut Failures, overlay: &str, docs: &[Value]) {
    let deployments = by_name(docs, "Deployment");
    let services = by_name(docs, "Service");
    let hpas = by_name(docs, "HorizontalPodAutoscaler");
    let scaled = by_name(docs, "ScaledObject");
    let pdbs = by_name(docs, "PodDisruptionBudget");
    let quantity = Regex::new(r"^\d+(\.\d+)?([KMGTPE]i?|m)?$").unwrap();
    for (binary, _) in SERVICES {
        let port = port_of(binary);
        let at = format!("overlay {overlay}: Deployment/{binary}");
        let Some(d) = deployments.get(binary) else {
            f.fail(&format!("overlay {overlay}"), format!("no Deployment {binary}"));
            continue;
        };
        if d["spec"].get("replicas").is_some() {
            f.fail(&at, "sets spec.replicas, which its autoscaler owns (an apply would reset it)");
        }
        let pod = &d["spec"]["template"]["spec"];
        let labels = &d["spec"]["template"]["metadata"]["labels"];
        if !labels_match(&d["spec"]["selector"], labels) {
            f.fail(&at, "selector does not match the pod labels");
        }
        let containers = items(&pod["containers"]);
        let c = &pod["containers"][0];
        match containers.get(1..).unwrap_or_default() {
            [] => {}
            [side] if binary == "gateway" && side["name"].as_str() == Some(STOREFRONT) => {
                check_storefront(f, &at, pod, side);
            }
            _ => f.fail(&at, "expected one container (the gateway: or its `storefront` beside it)"),
        }
        let image = c["image"].as_str().unwrap_or_default();
        let image_re = Regex::new(&format!(r"^(.+/)?seckill/{}(:[\w.-]+)?$", regex::escape(binary))).unwrap();
        if !image_re.is_match(image) {
            f.fail(&at, format!("image {image} is not seckill/{binary}"));
        }
        let env = container_env(docs, c);
        let var = |k: &str| env.get(k).cloned().flatten().filter(|v| !v.is_empty());
        if var("SECKILL__HTTP__HOST").is_some_and(|h| h != "0.0.0.0") {
            f.fail(&at, "SECKILL__HTTP__HOST must be 0.0.0.0");
        }
        if var("SECKILL__HTTP__PORT").is_some_and(|p| p != port.to_string()) {
            f.fail(&at, format!("SECKILL__HTTP__PORT must be {port}"));
        }
        if !items(&c["ports"])
            .iter()
            .any(|p| p["containerPort"].as_u64() == Some(port) && p["name"].as_str() == Some("http"))
        {
            f.fail(&at, format!("no containerPort {port} named http"));
        }
        for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
            let got = c[probe]["httpGet"]["path"].as_str();
            if got != Some(path) {
                f.fail(&at, format!("{probe} must GET {path}, has {}", got.unwrap_or("none")));
            }
        }
        // Graceful shutdown: the pod outlives the preStop pause and the drain.
        let pre_stop = items(&c["lifecycle"]["preStop"]["exec"]["command"]);
        let pause = if pre_stop.first().and_then(Value::as_str) == Some("sleep") {
            pre_stop.get(1).map(scalar).and_then(|s| s.parse().ok()).unwrap_or(0)
        } else {
            f.fail(&at, "preStop must pause with exec sleep (the image has /bin/sleep)");
            0
        };
        let drain: u64 = var("SECKILL__HTTP__SHUTDOWN_TIMEOUT_SECS")
            .and_then(|s| s.parse().ok())
            .unwrap_or(DEFAULT_SHUTDOWN_SECS);
        let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap_or(DEFAULT_GRACE_SECS);
        if grace <= pause + drain {
            f.fail(
                &at,
                format!(
                    "terminationGracePeriodSeconds {grace} must exceed preStop {pause} s + drain {drain} s"
                ),
            );
        }
        // Security.
        let (psc, csc) = (&pod["securityContext"], &c["securityContext"]);
        if psc["runAsNonRoot"].as_bool() != Some(true) && csc["runAsNonRoot"].as_bool() != Some(true) {
            f.fail(&at, "runAsNonRoot is not set");
        }
        if csc["readOnlyRootFilesystem"].as_bool() != Some(true) {
            f.fail(&at, "readOnlyRootFilesystem is not set");
        }
        if csc["allowPrivilegeEscalation"].as_bool() != Some(false) {
            f.fail(&at, "allowPrivilegeEscalation must be false");
        }
        if pod["enableServiceLinks"].as_bool() != Some(false) {
            f.fail(&at, "enableServiceLinks must be false (keeps the environment to what is set)");
        }
        for kind in ["requests", "limits"] {
            for r in ["cpu", "memory"] {
                if !quantity.is_match(&scalar(&c["resources"][kind][r])) {
                    f.fail(&at, format!("resources.{kind}.{r} missing"));
                }
            }
        }
        // Its Service.
        match services.get(binary) {
            None => f.fail(&at, "no Service of the same name"),
            Some(svc) => {
                if !labels_match(&match_labels(&svc["spec"]["selector"]), labels)
                    || !items(&svc["spec"]["ports"]).iter().any(|p| p["port"].as_u64() == Some(port))
                {
                    f.fail(
                        &format!("overlay {overlay}: Service/{binary}"),
                        format!("must select the pods and serve port {port}"),
                    );
                }
            }
        }
        // Exactly one autoscaler.
        let target = |o: &Value| o["spec"]["scaleTargetRef"]["name"].as_str() == Some(binary);
        let mut owners: Vec<String> = hpas
            .iter()
            .filter(|(_, h)| target(h) && h["spec"]["scaleTargetRef"]["kind"].as_str() == Some("Deployment"))
            .map(|(n, _)| format!("HorizontalPodAutoscaler/{n}"))
            .collect();
        owners.extend(scaled.iter().filter(|(_, s)| target(s)).map(|(n, _)| format!("ScaledObject/{n}")));
        if owners.len() != 1 {
            f.fail(&at, format!("needs exactly one autoscaler, has {owners:?}"));
        }
        for h in hpas.values().filter(|h| target(h)) {
            let hpa = format!("overlay {overlay}: HorizontalPodAutoscaler/{binary}");
            let cpu = items(&h["spec"]["metrics"]).iter().any(|m| {
                m["type"].as_str() == Some("Resource") && m["resource"]["name"].as_str() == Some("cpu")
            });
            if !cpu {
                f.fail(&hpa, "no CPU metric");
            }
            let busy = binary == "gateway" || binary == "seckill-service";
            if overlay == "prod" && busy && h["spec"]["minReplicas"].as_u64().unwrap_or(1) < 2 {
                f.fail(&hpa, "prod needs minReplicas >= 2");
            }
        }
        if !pdbs.values().any(|p| labels_match(&p["spec"]["selector"], labels)) {
            f.fail(&at, "no PodDisruptionBudget selects its pods");
        }
    }
}

/// The storefront's nginx beside the gateway: the official image, locked down as the gateway
/// is, probed, caching the gateway's pages on a bounded /tmp, with the nginx.conf of the
/// component.
fn check_storefront(f: &mut Failures, at: &str, pod: &Value, side: &Value) {
    let at = format!("{at}: container {STOREFRONT}");
    let image = side["image"].as_str().unwrap_or_default();
    if !Regex::new(r"^nginx(:[\w.-]+)?$").unwrap().is_match(image) {
        f.fail(&at, format!("image {image} is not the official nginx"));
    }
    let (psc, csc) = (&pod["securityContext"], &side["securityContext"]);
    if psc["runAsNonRoot"].as_bool() != Some(true) && csc["runAsNonRoot"].as_bool() != Some(true) {
        f.fail(&at, "runAsNonRoot is not set");
    }
    if csc["readOnlyRootFilesystem"].as_bool() != Some(true)
        || csc["allowPrivilegeEscalation"].as_bool() != Some(false)
    {
        f.fail(&at, "needs readOnlyRootFilesystem and no privilege escalation");
    }
    if !items(&csc["capabilities"]["drop"]).iter().any(|c| c.as_str() == Some("ALL")) {
        f.fail(&at, "must drop ALL capabilities");
    }
    let port_ok = items(&side["ports"])
        .iter()
        .any(|p| p["name"].as_str() == Some("web") && p["containerPort"].as_u64() == Some(STOREFRONT_PORT));
    if !port_ok {
        f.fail(&at, format!("no containerPort {STOREFRONT_PORT} named web (nginx.conf listens there)"));
    }
    if !is_port(&side["readinessProbe"]["httpGet"]["port"], "web", STOREFRONT_PORT) {
        f.fail(&at, "no readinessProbe on its port");
    }
    for kind in ["requests", "limits"] {
        for r in ["cpu", "memory"] {
            if side["resources"][kind][r].is_null() {
                f.fail(&at, format!("resources.{kind}.{r} missing"));
            }
        }
    }
    let mount = |c: &Value, path: &str| {
        items(&c["volumeMounts"])
            .iter()
            .find(|m| m["mountPath"].as_str() == Some(path))
            .map(|m| (scalar(&m["name"]), m["readOnly"].as_bool().unwrap_or(false)))
    };
    // Its cache: on a read-only root, /tmp must be a writable emptyDir of bounded size, larger
    // than nginx.conf's proxy_cache_path max_size.
    let cache = mount(side, "/tmp").filter(|(_, read_only)| !read_only).and_then(|(name, _)| {
        items(&pod["volumes"]).iter().find(|v| scalar(&v["name"]) == name).map(|v| v["emptyDir"].clone())
    });
    let bounded = cache.as_ref().and_then(|d| d["sizeLimit"].as_str()).and_then(mebibytes);
    if bounded.is_none_or(|size| size <= NGINX_CACHE_MIB) {
        f.fail(
            &at,
            format!(
                "/tmp (nginx's cache) must be a writable emptyDir with a sizeLimit above {NGINX_CACHE_MIB}Mi"
            ),
        );
    }
    let config = mount(side, "/etc/nginx/nginx.conf").map(|(name, _)| name);
    let from_map = items(&pod["volumes"])
        .iter()
        .find(|v| config.as_deref() == Some(scalar(&v["name"]).as_str()))
        .and_then(|v| v["configMap"]["name"].as_str())
        .is_some_and(|n| n.starts_with("storefront-nginx"));
    if !from_map {
        f.fail(&at, "/etc/nginx/nginx.conf must come from the ConfigMap storefront-nginx");
    }
    let resolves = items(&pod["hostAliases"]).iter().any(|a| {
        a["ip"].as_str() == Some("127.0.0.1")
            && items(&a["hostnames"]).iter().any(|h| h.as_str() == Some("gateway"))
    });
    if !resolves {
        f.fail(&at, "nginx.conf reaches `gateway:8080`: the pod needs hostAliases gateway -> 127.0.0.1");
    }
}

/// The settings that differ between the overlays, the Ingress (to the gateway only) and the
/// NetworkPolicies between the services (deny by default, then who may call whom).
fn check_overlay_settings(f: &mut Failures, overlay: &str, docs: &[Value]) {
    let deployments = by_name(docs, "Deployment");
    let env_of = |binary: &str| {
        deployments.get(binary).map(|d| container_env(docs, &d["spec"]["template"]["spec"]["containers"][0]))
    };
    let gw = env_of("gateway").unwrap_or_default();
    let at = format!("overlay {overlay}: gateway");
    if !gw.contains_key("SECKILL__AUTH__JWT_SECRET") {
        f.fail(&at, "SECKILL__AUTH__JWT_SECRET is not set (from a Secret)");
    }
    let dev_tokens =
        gw.get("SECKILL__AUTH__DEV_TOKENS").cloned().flatten().unwrap_or_default().to_lowercase();
    if overlay == "prod" && dev_tokens != "false" {
        f.fail(&at, "SECKILL__AUTH__DEV_TOKENS must be set to false explicitly");
    }
    if overlay == "dev" && dev_tokens != "true" {
        f.fail(&at, "dev overlay should turn dev tokens on");
    }
    let upstream = Regex::new(r"^http://([\w-]+):(\d+)$").unwrap();
    for (var, value) in gw.iter().filter(|(k, _)| k.starts_with("SECKILL__UPSTREAMS__")) {
        let Some(value) = value.as_deref().filter(|v| v.starts_with("http")) else { continue };
        let known = |name: &str| SERVICES.iter().any(|(b, _)| *b == name);
        if !upstream.captures(value).is_some_and(|c| known(&c[1]) && c[2] == *port_of(&c[1]).to_string()) {
            f.fail(&at, format!("{var}={value} is not a Service at its port"));
        }
    }
    // Every service with an `amqp` section declares queues another one declares too, and a
    // queue keeps the type it was first declared with: all must agree.
    let quorum: BTreeMap<&str, String> = SERVICES
        .iter()
        .filter_map(|(b, _)| {
            env_of(b).filter(|env| env.contains_key("SECKILL__AMQP__URL")).map(|env| (*b, env))
        })
        .map(|(b, env)| {
            let q = env.get("SECKILL__AMQP__QUORUM_QUEUES").cloned().flatten();
            (b, q.unwrap_or_else(|| "false".into()).to_lowercase())
        })
        .collect();
    let kinds: BTreeSet<&String> = quorum.values().collect();
    if kinds.len() > 1 {
        f.fail(
            &format!("overlay {overlay}"),
            format!("the services with an amqp section must agree on amqp.quorum_queues: {quorum:?}"),
        );
    }
    if overlay == "prod" && kinds.iter().any(|q| *q != "true") {
        let names: Vec<&str> = quorum.keys().copied().collect();
        f.fail(
            &format!("overlay {overlay}"),
            format!("prod needs SECKILL__AMQP__QUORUM_QUEUES=true for {}", names.join(", ")),
        );
    }
    if overlay == "prod" {
        for r in by_name(docs, "RabbitmqCluster").values() {
            if r["spec"]["replicas"].as_u64().unwrap_or(1) < 3 {
                f.fail(
                    &format!("overlay {overlay}"),
                    "prod RabbitmqCluster needs 3 replicas for quorum queues",
                );
            }
        }
    }
    // The Ingress: the gateway only.
    let ingresses = by_name(docs, "Ingress");
    if ingresses.is_empty() {
        f.fail(&format!("overlay {overlay}"), "no Ingress for the gateway");
    }
    for (ing_name, ing) in &ingresses {
        let others = items(&ing["spec"]["rules"])
            .iter()
            .flat_map(|r| items(&r["http"]["paths"]))
            .any(|p| p["backend"]["service"]["name"].as_str() != Some("gateway"));
        if others {
            f.fail(
                &format!("overlay {overlay}: Ingress/{ing_name}"),
                "routes to something other than the gateway",
            );
        }
    }
    // NetworkPolicies: deny by default, then who may reach each service.
    let policies = by_name(docs, "NetworkPolicy");
    let labels_of =
        |binary: &str| deployments.get(binary).map(|d| &d["spec"]["template"]["metadata"]["labels"]);
    for (binary, _) in SERVICES {
        let Some(labels) = labels_of(binary) else { continue };
        let selecting: Vec<&&Value> =
            policies.values().filter(|p| labels_match(&p["spec"]["podSelector"], labels)).collect();
        let both_ways = selecting.iter().any(|p| {
            let types: Vec<String> = items(&p["spec"]["policyTypes"]).iter().map(scalar).collect();
            types.iter().any(|t| t == "Ingress") && types.iter().any(|t| t == "Egress")
        });
        let at = format!("overlay {overlay}: NetworkPolicy");
        if !both_ways {
            f.fail(&at, format!("no policy isolates {binary} in both directions"));
        }
        let mut admitted = BTreeSet::new();
        for rule in selecting.iter().flat_map(|p| items(&p["spec"]["ingress"])) {
            let sources = items(&rule["from"]);
            if sources.is_empty() {
                admitted.insert("*");
            }
            for src in sources.iter().filter(|s| s.get("podSelector").is_some()) {
                for (other, _) in SERVICES {
                    if labels_of(other).is_some_and(|l| labels_match(&src["podSelector"], l)) {
                        admitted.insert(other);
                    }
                }
            }
        }
        let expected: BTreeSet<&str> = match binary {
            "gateway" => ["*"].into(),
            "seckill-service" => ["gateway"].into(),
            "order-service" => ["gateway", "seckill-service"].into(),
            _ => ["gateway", "seckill-service", "order-service"].into(),
        };
        if admitted != expected {
            f.fail(&at, format!("{binary} admits {admitted:?}, expected {expected:?}"));
        }
    }
}

#[test]
fn the_overlays_settings_ingress_and_network_policies_hold() {
    if !have("kubectl", "it renders deploy/k8s/overlays/*") {
        return;
    }
    let mut f = Failures::default();
    for overlay in OVERLAYS {
        check_overlay_settings(&mut f, overlay, &render(overlay));
    }
    f.assert_none();
}

#[test]
fn each_deployment_probes_drains_runs_locked_down_and_has_its_service_autoscaler_and_budget() {
    if !have("kubectl", "it renders deploy/k8s/overlays/*") {
        return;
    }
    let mut f = Failures::default();
    for overlay in OVERLAYS {
        check_deployments(&mut f, overlay, &render(overlay));
    }
    f.assert_none();
}

#[test]
fn metrics_are_scraped_and_the_gateway_admin_port_is_reachable_from_monitoring_only() {
    if !have("kubectl", "it renders deploy/k8s/overlays/*") {
        return;
    }
    let mut f = Failures::default();
    for overlay in OVERLAYS {
        check_metrics_and_admin(&mut f, overlay, &render(overlay));
    }
    f.assert_none();
}

#[test]
fn a_policy_rule_admits_its_sources_on_its_ports() {
    let rule: Value = serde_yaml::from_str(
        "ports: [{port: 9000, endPort: 9100}]\nfrom: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]",
    )
    .unwrap();
    assert!(rule_covers_port(&rule, "admin", 9080));
    assert!(!rule_covers_port(&rule, "http", 8080));
    assert_eq!(sources_of(&rule), ["ns:monitoring"]);
    assert_eq!(sources_of(&Value::Null), ["*"]);
}

#[test]
fn a_writable_root_an_unbounded_cache_or_miscounted_hops_is_refused() {
    if !have("kubectl", "it renders deploy/k8s/overlays/*") {
        return;
    }
    let mut docs = render("dev");
    for d in docs.iter_mut() {
        match (d["kind"].as_str(), d["metadata"]["name"].as_str()) {
            (Some("Deployment"), Some("gateway")) => {
                let pod = &mut d["spec"]["template"]["spec"];
                pod["hostAliases"] = Value::Null;
                let side = &mut pod["containers"][1];
                assert_eq!(side["name"].as_str(), Some(STOREFRONT), "the dev overlay has the storefront");
                side["securityContext"]["readOnlyRootFilesystem"] = false.into();
                for v in pod["volumes"].as_sequence_mut().unwrap() {
                    if v["name"].as_str() == Some("storefront-tmp") {
                        v["emptyDir"]["sizeLimit"] = Value::Null;
                    }
                }
            }
            // One hop fewer than the Ingress and nginx make.
            (Some("ConfigMap"), Some(n)) if n.starts_with("gateway-config") => {
                d["data"]["SECKILL__RATE_LIMIT__TRUSTED_PROXY_HOPS"] = "1".into();
            }
            _ => {}
        }
    }
    let mut f = Failures::default();
    check_deployments(&mut f, "dev", &docs);
    check_metrics_and_admin(&mut f, "dev", &docs);
    let all = f.messages().join("\n");
    for expected in [
        "needs readOnlyRootFilesystem",
        "/tmp (nginx's cache) must be a writable emptyDir with a sizeLimit",
        "needs hostAliases gateway -> 127.0.0.1",
        "TRUSTED_PROXY_HOPS is 1, but 2 proxies stand in front",
    ] {
        assert!(all.contains(expected), "{expected:?} not in:\n{all}");
    }
}

/// A Kubernetes quantity in Mi or Gi as mebibytes; anything else is not a size this check reads.
fn mebibytes(quantity: &str) -> Option<u64> {
    let (number, unit) = quantity.split_at(quantity.find(|c: char| !c.is_ascii_digit())?);
    let number: u64 = number.parse().ok()?;
    match unit {
        "Mi" => Some(number),
        "Gi" => number.checked_mul(1024),
        _ => None,
    }
}

#[test]
fn the_nginx_cache_bound_is_the_one_nginx_conf_sets() {
    let conf = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../deploy/k8s/components/storefront-nginx/nginx.conf"),
    )
    .unwrap();
    assert!(
        conf.contains(&format!("max_size={NGINX_CACHE_MIB}m")),
        "nginx.conf's proxy_cache_path max_size changed"
    );
    assert_eq!(
        (mebibytes("96Mi"), mebibytes("1Gi"), mebibytes("96M"), mebibytes("Mi")),
        (Some(96), Some(1024), None, None)
    );
}

//! Every environment the deployment files give a service, read by that service's own settings
//! loader (`seckill_common::config::load_from`) and checked by its own validation, as at start:
//! every settings struct refuses unknown keys, so a misspelt variable or one of another
//! section fails here instead of stopping a pod or a container.
//!
//! The sources: deploy/docker/Dockerfile's `ENV` (under everything else), the ConfigMap files
//! deploy/k8s/base/config/<service>.env, each Deployment of the rendered overlays
//! (`kubectl kustomize`; skipped with a printed reason where kubectl is missing) and
//! deploy/compose.yaml. Values that come from Secrets or from deploy/.env are filled with dummy
//! values of the right shape (a URL with a password, or a 48-byte key).

use std::collections::{BTreeMap, HashMap};
use std::process::Command;

use seckill_common::config::{self, AmqpSettings, ConfigError, ConfigFile, RedisSettings, ServiceSettings};
use seckill_common::trust::{Peer, Trust, TrustSettings};
use seckill_deploy_check::{SERVICES, read, root, scalar};
use serde::de::DeserializeOwned;
use serde_yaml::Value;

type Env = HashMap<String, String>;

/// Stands in for every key and password: 48 bytes, longer than any minimum.
const DUMMY_SECRET: &str = "Dummy0Secret0For0Deployment0Checks0Only0xxxxxxxx";

/// Loads `env` as `service` does at start (no config file in the image) and validates it.
fn check(service: &str, env: &Env) -> Result<(), ConfigError> {
    fn load<T: DeserializeOwned>(env: &Env) -> Result<T, ConfigError> {
        config::load_from(ConfigFile::None, Some(env.clone()))
    }
    match service {
        "gateway" => {
            let s: gateway::configuration::Settings = load(env)?;
            s.validate()?;
            // Without it every status poll of a waiting room would cost a hop.
            s.room.required_key()?;
            own_links_only(Peer::Gateway, &s.trust)?;
            Trust::for_service(Peer::Gateway, &s.trust).map(drop)
        }
        "seckill-service" => {
            let s: seckill_service::configuration::Settings = load(env)?;
            s.validate()?;
            s.room.required_key()?;
            given(Store::Redis, s.redis.url != RedisSettings::default().url)?;
            given(Store::Amqp, s.amqp.url != AmqpSettings::default().url)?;
            own_links_only(Peer::Seckill, &s.trust)?;
            Trust::for_service(Peer::Seckill, &s.trust).map(drop)
        }
        "order-service" => {
            let s: order_service::configuration::Settings = load(env)?;
            s.validate()?;
            given(Store::Database, s.database.url.is_some())?;
            given(Store::Redis, s.redis.url != RedisSettings::default().url)?;
            given(Store::Amqp, s.amqp.url != AmqpSettings::default().url)?;
            own_links_only(Peer::Order, &s.trust)?;
            Trust::for_service(Peer::Order, &s.trust).map(drop)
        }
        "stock-service" => {
            let s: stock_service::configuration::Settings = load(env)?;
            s.validate()?;
            given(Store::Database, s.database.url.is_some())?;
            given(Store::Amqp, s.amqp.url != AmqpSettings::default().url)?;
            own_links_only(Peer::Stock, &s.trust)?;
            Trust::for_service(Peer::Stock, &s.trust).map(drop)
        }
        other => panic!("unknown service {other}"),
    }
}

/// A data store a service has a section for.
enum Store {
    Database,
    Redis,
    Amqp,
}

/// A data store's URL must be given: the built-in one is loopback, no server in a container.
/// (tests/permissions.rs counts on it: it takes the URLs compose gives as the stores used.)
fn given(store: Store, given: bool) -> Result<(), ConfigError> {
    let (key, env) = match store {
        Store::Database => ("database.url", "SECKILL__DATABASE__URL"),
        Store::Redis => ("redis.url", "SECKILL__REDIS__URL"),
        Store::Amqp => ("amqp.url", "SECKILL__AMQP__URL"),
    };
    if given {
        Ok(())
    } else {
        Err(ConfigError::invalid(key, env, "not given; the built-in one is loopback"))
    }
}

/// The keys of `peer`'s own links and no other: a key of someone else's link is a secret
/// spread further than it needs to be. (tests/credentials.rs checks which Secret key or
/// deploy/.env variable each one is.) Missing ones are `Trust::for_service`'s to refuse.
fn own_links_only(peer: Peer, trust: &TrustSettings) -> Result<(), ConfigError> {
    let tables = [("send", &trust.send, peer.sends_to()), ("accept", &trust.accept, peer.accepts_from())];
    for (kind, given, links) in tables {
        if let Some(name) = given.keys().find(|name| !links.iter().any(|p| p.as_str() == name.as_str())) {
            return Err(ConfigError::invalid(
                "trust",
                "SECKILL__TRUST__*",
                format!("trust.{kind}.{name}: not a link of {peer}"),
            ));
        }
    }
    Ok(())
}

/// Checks every environment, then fails once listing every one refused.
fn check_all(envs: Vec<(String, &str, Env)>) {
    let failures: Vec<String> = envs
        .iter()
        .filter_map(|(place, service, env)| check(service, env).err().map(|e| format!("{place}: {e}")))
        .collect();
    assert!(failures.is_empty(), "refused:\n  {}", failures.join("\n  "));
}

/// A value of the right shape for a variable whose value is a secret.
fn dummy_for(var: &str) -> String {
    match var {
        "SECKILL__DATABASE__URL" => format!("postgres://service:{DUMMY_SECRET}@postgres:5432/seckill"),
        "SECKILL__REDIS__URL" => format!("redis://service:{DUMMY_SECRET}@redis:6379"),
        "SECKILL__AMQP__URL" => format!("amqp://service:{DUMMY_SECRET}@rabbitmq:5672/%2f"),
        _ => DUMMY_SECRET.to_owned(),
    }
}

/// `KEY=VALUE` lines; `#` comments and blank lines skipped (a ConfigMap generator's env file).
fn parse_env_file(text: &str) -> Env {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (k, v) = l.split_once('=').unwrap_or_else(|| panic!("not KEY=VALUE: {l}"));
            (k.trim().to_owned(), v.to_owned())
        })
        .collect()
}

/// The `ENV` of deploy/docker/Dockerfile (`ENV A=1 \` continued lines, unquoted values): every
/// image starts from these.
fn dockerfile_env() -> Env {
    let text = read("deploy/docker/Dockerfile");
    let mut env = Env::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(rest) = line.strip_prefix("ENV ") else { continue };
        let mut instruction = rest.to_owned();
        while instruction.trim_end().ends_with('\\') {
            let cut = instruction.trim_end().trim_end_matches('\\').to_owned();
            instruction = format!("{cut} {}", lines.next().unwrap_or_default());
        }
        for pair in instruction.split_whitespace() {
            let (k, v) = pair.split_once('=').unwrap_or_else(|| panic!("Dockerfile: ENV {pair} is not K=V"));
            env.insert(k.to_owned(), v.to_owned());
        }
    }
    assert!(!env.is_empty(), "Dockerfile: no ENV found");
    env
}

/// The secrets `peer` reads, named by their variables: its links' keys and, for the gateway,
/// the JWT secrets; the data stores' URLs (they carry passwords) where it uses them.
fn secret_vars(service: &str, peer: Peer) -> Vec<String> {
    let mut vars: Vec<String> = peer
        .sends_to()
        .iter()
        .map(|p| format!("SECKILL__TRUST__SEND__{}", p.as_str().to_uppercase()))
        .chain(
            peer.accepts_from()
                .iter()
                .map(|p| format!("SECKILL__TRUST__ACCEPT__{}", p.as_str().to_uppercase())),
        )
        .collect();
    let urls: &[&str] = match service {
        "gateway" => {
            &["SECKILL__AUTH__JWT_SECRET", "SECKILL__AUTH__JWT_PREVIOUS_SECRET", "SECKILL__ROOM__KEY"]
        }
        "seckill-service" => &["SECKILL__REDIS__URL", "SECKILL__AMQP__URL", "SECKILL__ROOM__KEY"],
        "order-service" => &["SECKILL__DATABASE__URL", "SECKILL__REDIS__URL", "SECKILL__AMQP__URL"],
        _ => &["SECKILL__DATABASE__URL", "SECKILL__AMQP__URL"],
    };
    vars.extend(urls.iter().map(|v| (*v).to_owned()));
    vars
}

/// A ConfigMap file with its service's secrets filled in.
fn configmap_env(service: &str, peer: Peer) -> Env {
    let mut env = dockerfile_env();
    env.extend(parse_env_file(&read(&format!("deploy/k8s/base/config/{service}.env"))));
    for var in secret_vars(service, peer) {
        env.entry(var.clone()).or_insert_with(|| dummy_for(&var));
    }
    env
}

#[test]
fn the_configmap_files_are_read_by_their_services() {
    let envs = SERVICES
        .iter()
        .map(|&(service, peer)| {
            (format!("deploy/k8s/base/config/{service}.env"), service, configmap_env(service, peer))
        })
        .collect();
    check_all(envs);
}

#[test]
fn a_misspelt_foreign_or_missing_variable_is_refused() {
    let env = configmap_env("gateway", Peer::Gateway);
    check("gateway", &env).unwrap();
    for (var, value, named) in [
        ("SECKILL__RATE_LIMIT__PER_USER", "3", "`per_user`"),
        ("SECKILL__UPSTREAMS__TIMEOUT", "5", "`timeout`"),
        ("SECKILL__DATABASE__URL", "postgres://db:5432/x", "`database`"),
        ("SECKILL__RATE_LIMIT__BUY__BURST", "0", "rate_limit.buy.burst"),
        ("SECKILL__LOG__FORMAT", "yaml", "yaml"),
        ("SECKILL__TRUST__ACCEPT__ORDER", DUMMY_SECRET, "trust.accept.order"),
    ] {
        let mut bad = env.clone();
        bad.insert(var.into(), value.into());
        let err = check("gateway", &bad).expect_err(var).to_string();
        assert!(err.contains(named), "{var}: {err}");
    }
    for (service, peer, var) in [
        ("gateway", Peer::Gateway, "SECKILL__TRUST__SEND__ORDER"),
        ("stock-service", Peer::Stock, "SECKILL__TRUST__ACCEPT__GATEWAY"),
        ("stock-service", Peer::Stock, "SECKILL__AMQP__URL"),
        ("order-service", Peer::Order, "SECKILL__DATABASE__URL"),
        ("seckill-service", Peer::Seckill, "SECKILL__ROOM__KEY"),
        ("gateway", Peer::Gateway, "SECKILL__ROOM__KEY"),
    ] {
        let mut bad = configmap_env(service, peer);
        check(service, &bad).unwrap();
        bad.remove(var);
        let err = check(service, &bad).expect_err(var).to_string();
        assert!(err.contains(var), "{service} without {var}: {err}");
    }
}

/// Each Deployment's environment in a rendered overlay: the image's, then its ConfigMaps
/// (`envFrom`), then `env` (a Secret's value as a dummy).
fn deployment_envs(overlay: &str, rendered: &str) -> Vec<(String, &'static str, Env)> {
    let docs: Vec<Value> = serde_yaml::Deserializer::from_str(rendered)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap_or_else(|e| panic!("{overlay}: {e}")))
        .collect();
    let kind_of = |d: &Value| d["kind"].as_str().unwrap_or_default().to_owned();
    let name_of = |d: &Value| d["metadata"]["name"].as_str().unwrap_or_default().to_owned();
    let config_maps: HashMap<String, &Value> =
        docs.iter().filter(|d| kind_of(d) == "ConfigMap").map(|d| (name_of(d), &d["data"])).collect();
    let mut found = Vec::new();
    for deployment in docs.iter().filter(|d| kind_of(d) == "Deployment") {
        let name = name_of(deployment);
        let Some(&(service, _)) = SERVICES.iter().find(|(s, _)| *s == name) else { continue };
        let place = format!("overlay {overlay}, Deployment {name}");
        let containers =
            deployment["spec"]["template"]["spec"]["containers"].as_sequence().cloned().unwrap_or_default();
        let container = containers
            .iter()
            .find(|c| c["name"].as_str() == Some(service))
            .unwrap_or_else(|| panic!("{place}: no container named {service}"));
        let mut env = dockerfile_env();
        for source in container["envFrom"].as_sequence().cloned().unwrap_or_default() {
            let map = source["configMapRef"]["name"]
                .as_str()
                .unwrap_or_else(|| panic!("{place}: envFrom other than a ConfigMap: {source:?}"));
            let data =
                config_maps.get(map).unwrap_or_else(|| panic!("{place}: ConfigMap {map} not rendered"));
            let prefix = source["prefix"].as_str().unwrap_or_default();
            for (k, v) in data.as_mapping().cloned().unwrap_or_default() {
                env.insert(format!("{prefix}{}", scalar(&k)), scalar(&v));
            }
        }
        for var in container["env"].as_sequence().cloned().unwrap_or_default() {
            let key = var["name"]
                .as_str()
                .unwrap_or_else(|| panic!("{place}: env entry without a name"))
                .to_owned();
            let value = if let Some(v) = var.get("value") {
                scalar(v)
            } else if var["valueFrom"].get("secretKeyRef").is_some() {
                dummy_for(&key)
            } else if let Some(r) = var["valueFrom"].get("configMapKeyRef") {
                let (map, k) =
                    (r["name"].as_str().unwrap_or_default(), r["key"].as_str().unwrap_or_default());
                config_maps
                    .get(map)
                    .map(|d| scalar(&d[k]))
                    .unwrap_or_else(|| panic!("{place}: {key} from {map}.{k}"))
            } else {
                panic!("{place}: {key} has a source these checks do not read: {var:?}")
            };
            env.insert(key, value);
        }
        found.push((place, service, env));
    }
    let mut names: Vec<_> = found.iter().map(|(_, s, _)| *s).collect();
    names.sort_unstable();
    let mut all: Vec<_> = SERVICES.iter().map(|(s, _)| *s).collect();
    all.sort_unstable();
    assert_eq!(names, all, "overlay {overlay}: one Deployment per service");
    found
}

#[test]
fn every_deployment_of_every_overlay_is_read_by_its_service() {
    if Command::new("kubectl").arg("version").arg("--client").output().is_err() {
        println!("skipped: kubectl is not installed (it renders deploy/k8s/overlays/*)");
        return;
    }
    for overlay in ["dev", "prod"] {
        let dir = root().join("deploy/k8s/overlays").join(overlay);
        let out = Command::new("kubectl").arg("kustomize").arg(&dir).output().expect("kubectl kustomize");
        assert!(
            out.status.success(),
            "kubectl kustomize {overlay}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rendered = String::from_utf8(out.stdout).expect("UTF-8 manifests");
        check_all(deployment_envs(overlay, &rendered));
    }
}

/// Renders `overlay` with `component` added, as an operator's overlay would (a kustomization
/// in a directory of its own that names both by relative path).
fn render_with_component(overlay: &str, component: &str) -> String {
    let dir = std::env::temp_dir().join(format!("seckill-kustomize-{}", scratch_tag()));
    std::fs::create_dir_all(&dir).unwrap();
    // Up to / from the directory, then down to the repository (kustomize wants relative paths).
    let up = "../".repeat(dir.components().count() - 1);
    let repo = root().canonicalize().unwrap();
    let at = |p: &str| format!("{up}{}/deploy/k8s/{p}", repo.display().to_string().trim_start_matches('/'));
    std::fs::write(
        dir.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {}\ncomponents:\n  - {}\n",
            at(&format!("overlays/{overlay}")),
            at(&format!("components/{component}"))
        ),
    )
    .unwrap();
    let out = Command::new("kubectl").arg("kustomize").arg(&dir).output().expect("kubectl kustomize");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{overlay} + {component}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("UTF-8 manifests")
}

/// A tag unique to this call, for a scratch directory.
fn scratch_tag() -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos();
    format!("{}-{nanos}", std::process::id())
}

#[test]
fn every_component_added_to_either_overlay_is_read_by_the_services() {
    if Command::new("kubectl").arg("version").arg("--client").output().is_err() {
        println!("skipped: kubectl is not installed (it renders deploy/k8s/overlays/*)");
        return;
    }
    let components: Vec<String> = std::fs::read_dir(root().join("deploy/k8s/components"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(components.iter().any(|c| c == "redis-cluster"), "{components:?}");
    for overlay in ["dev", "prod"] {
        // An overlay that has a component already is not given it twice.
        let own = std::fs::read_to_string(
            root().join("deploy/k8s/overlays").join(overlay).join("kustomization.yaml"),
        )
        .unwrap();
        for component in components.iter().filter(|c| !own.contains(&format!("components/{c}"))) {
            let rendered = render_with_component(overlay, component);
            let place = format!("{overlay} + {component}");
            let envs = deployment_envs(&place, &rendered);
            if component == "redis-cluster" {
                for (place, service, env) in &envs {
                    let on = env.get("SECKILL__REDIS__CLUSTER").map(String::as_str);
                    let uses_redis = env.contains_key("SECKILL__REDIS__URL");
                    assert_eq!(on == Some("true"), uses_redis, "{place}: {service} and redis.cluster");
                }
            }
            check_all(envs);
        }
    }
}

/// A compose value with `deploy/.env`'s variables filled in: `$$` is a `$`, and every `${NAME}`,
/// `${NAME:?message}` or `$NAME` a dummy secret (they are all credentials).
fn interpolate(value: &str) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(body) = after.strip_prefix('{') {
            let end = body.find('}').unwrap_or_else(|| panic!("compose: unclosed ${{ in {value}"));
            out.push_str(DUMMY_SECRET);
            rest = &body[end + 1..];
        } else {
            let end = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len());
            out.push_str(DUMMY_SECRET);
            rest = &after[end..];
        }
    }
    out.push_str(rest);
    out
}

#[test]
fn every_compose_service_is_read_by_its_service() {
    let mut compose: Value = serde_yaml::from_str(&read("deploy/compose.yaml")).expect("compose.yaml parses");
    compose.apply_merge().expect("compose.yaml: merge keys");
    let envs = SERVICES
        .iter()
        .map(|&(service, _)| {
            let block = &compose["services"][service]["environment"];
            assert!(!block.is_null(), "compose.yaml: services.{service} has no environment");
            let pairs: BTreeMap<String, String> = match block {
                Value::Mapping(m) => m.iter().map(|(k, v)| (scalar(k), scalar(v))).collect(),
                Value::Sequence(list) => list
                    .iter()
                    .map(|item| {
                        let line = scalar(item);
                        let (k, v) = line.split_once('=').unwrap_or((&line, ""));
                        (k.to_owned(), v.to_owned())
                    })
                    .collect(),
                other => panic!("compose.yaml: services.{service}.environment: {other:?}"),
            };
            let mut env = dockerfile_env();
            env.extend(pairs.into_iter().map(|(k, v)| (k, interpolate(&v))));
            (format!("compose.yaml services.{service}"), service, env)
        })
        .collect();
    check_all(envs);
}

#[test]
fn compose_interpolation_fills_secrets_and_keeps_dollars() {
    assert_eq!(interpolate("a$$b"), "a$b");
    assert_eq!(interpolate("redis://u:${P:?run it}@r:1"), format!("redis://u:{DUMMY_SECRET}@r:1"));
    assert_eq!(interpolate("$KEY"), DUMMY_SECRET);
}

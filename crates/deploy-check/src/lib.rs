//! Reading the deployment files for the checks in `tests/`: the repository (or a scratch copy
//! named by `SECKILL_DEPLOY_ROOT`, to see a check fail on a broken manifest), compose, the
//! rendered overlays, and the links every service holds keys of (from `Peer`, not a copy).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use seckill_common::trust::Peer;
use serde_yaml::Value;

/// The four services: binary (Deployment, compose service, ConfigMap file) and link name.
pub const SERVICES: [(&str, Peer); 4] = [
    ("gateway", Peer::Gateway),
    ("seckill-service", Peer::Seckill),
    ("order-service", Peer::Order),
    ("stock-service", Peer::Stock),
];

/// The Secret holding every link key (`<sender>-<receiver>` and its `.accept` list).
pub const LINK_SECRET: &str = "seckill-link-keys";
pub const OVERLAYS: [&str; 2] = ["dev", "prod"];

pub fn root() -> PathBuf {
    match std::env::var_os("SECKILL_DEPLOY_ROOT") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")),
    }
}

pub fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Whether `tool` runs; prints why the calling test skips when it does not.
pub fn have(tool: &str, why: &str) -> bool {
    let arg = if tool == "kubectl" { "version --client" } else { "--version" };
    let found = Command::new(tool).args(arg.split(' ')).output().is_ok();
    if !found {
        println!("skipped: {tool} is not installed ({why})");
    }
    found
}

/// `bash scripts/gen-secrets.sh <args>`'s output.
pub fn gen_secrets(args: &[&str]) -> String {
    let out = Command::new("bash")
        .arg(root().join("scripts/gen-secrets.sh"))
        .args(args)
        .output()
        .expect("bash scripts/gen-secrets.sh");
    assert!(
        out.status.success(),
        "scripts/gen-secrets.sh {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// The Secrets of `gen-secrets.sh --k8s`'s output: name -> `stringData`.
pub fn secrets_of(what: &str, text: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    documents(what, text)
        .iter()
        .map(|d| {
            let data = d["stringData"]
                .as_mapping()
                .into_iter()
                .flatten()
                .map(|(k, v)| (scalar(k), scalar(v)))
                .collect();
            (name(d).to_owned(), data)
        })
        .collect()
}

/// Whether a compose service is given the URL of a data store (`database`, `redis`, `amqp`):
/// the stores it uses (each service's loader refuses a URL of a section it does not have).
pub fn uses_store(service: &Value, store: &str) -> bool {
    environment(service).contains_key(&format!("SECKILL__{}__URL", store.to_uppercase()))
}

/// deploy/compose.yaml, merge keys applied.
pub fn compose() -> Value {
    let mut compose: Value = serde_yaml::from_str(&read("deploy/compose.yaml")).expect("compose.yaml parses");
    compose.apply_merge().expect("compose.yaml: merge keys");
    compose
}

/// Every YAML document of a stream, empty ones left out.
pub fn documents(what: &str, text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap_or_else(|e| panic!("{what}: {e}")))
        .filter(|d: &Value| !d.is_null())
        .collect()
}

/// The objects of `kubectl kustomize deploy/k8s/overlays/<overlay>`.
pub fn render(overlay: &str) -> Vec<Value> {
    let dir = root().join("deploy/k8s/overlays").join(overlay);
    let out = Command::new("kubectl").arg("kustomize").arg(&dir).output().expect("kubectl kustomize");
    assert!(out.status.success(), "kubectl kustomize {overlay}: {}", String::from_utf8_lossy(&out.stderr));
    documents(overlay, &String::from_utf8(out.stdout).expect("UTF-8 manifests"))
}

pub fn kind(d: &Value) -> &str {
    d["kind"].as_str().unwrap_or_default()
}

pub fn name(d: &Value) -> &str {
    d["metadata"]["name"].as_str().unwrap_or_default()
}

/// A sequence's items (none when absent).
pub fn items(v: &Value) -> &[Value] {
    v.as_sequence().map(Vec::as_slice).unwrap_or_default()
}

pub fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => String::new(),
        other => format!("{other:?}"),
    }
}

/// A compose service's `environment`, as a map or a `K=V` list (`None`: passed through).
pub fn environment(service: &Value) -> BTreeMap<String, Option<String>> {
    match &service["environment"] {
        Value::Mapping(m) => m.iter().map(|(k, v)| (scalar(k), (!v.is_null()).then(|| scalar(v)))).collect(),
        Value::Sequence(list) => list
            .iter()
            .map(|item| {
                let line = scalar(item);
                match line.split_once('=') {
                    Some((k, v)) => (k.to_owned(), Some(v.to_owned())),
                    None => (line, None),
                }
            })
            .collect(),
        _ => BTreeMap::new(),
    }
}

/// Every (path, string) of a YAML document, keys included.
pub fn strings_of(node: &Value, path: &str, out: &mut Vec<(String, String)>) {
    match node {
        Value::Mapping(m) => {
            for (k, v) in m {
                let at = format!("{path}.{}", scalar(k));
                out.push((at.clone(), scalar(k)));
                strings_of(v, &at, out);
            }
        }
        Value::Sequence(list) => {
            for (i, v) in list.iter().enumerate() {
                strings_of(v, &format!("{path}[{i}]"), out);
            }
        }
        Value::String(s) => out.push((path.to_owned(), s.clone())),
        Value::Tagged(t) => strings_of(&t.value, path, out),
        _ => {}
    }
}

/// A link's name, as in the Secret's keys and deploy/.env: `<sender>-<receiver>`.
pub fn link(from: Peer, to: Peer) -> String {
    format!("{}-{}", from.as_str(), to.as_str())
}

/// Every link of the system, sorted.
pub fn links() -> Vec<String> {
    let mut all: Vec<String> =
        Peer::ALL.iter().flat_map(|&p| p.sends_to().iter().map(move |&to| link(p, to))).collect();
    all.sort();
    all
}

/// The trust variables `peer` must be given, each with its link, and no other.
pub fn wanted_trust_vars(peer: Peer) -> BTreeMap<String, String> {
    let upper = |p: Peer| p.as_str().to_uppercase();
    let send =
        peer.sends_to().iter().map(|&to| (format!("SECKILL__TRUST__SEND__{}", upper(to)), link(peer, to)));
    let accept = peer
        .accepts_from()
        .iter()
        .map(|&from| (format!("SECKILL__TRUST__ACCEPT__{}", upper(from)), link(from, peer)));
    send.chain(accept).collect()
}

/// The deploy/.env variable holding a link's key: `SECKILL_LINK_<SENDER>_<RECEIVER>`.
pub fn link_env_var(link: &str) -> String {
    format!("SECKILL_LINK_{}", link.to_uppercase().replace('-', "_"))
}

/// Problems found, each with where it is; the test fails once listing them all.
#[derive(Default)]
pub struct Failures(Vec<String>);

impl Failures {
    pub fn fail(&mut self, place: &str, msg: impl std::fmt::Display) {
        self.0.push(format!("{place}: {msg}"));
    }

    pub fn messages(&self) -> &[String] {
        &self.0
    }

    #[track_caller]
    pub fn assert_none(self) {
        assert!(self.0.is_empty(), "{} problem(s):\n  {}", self.0.len(), self.0.join("\n  "));
    }
}

/// A rendered overlay's objects of one kind, by name.
pub fn by_name<'a>(docs: &'a [Value], of_kind: &str) -> BTreeMap<String, &'a Value> {
    docs.iter().filter(|d| kind(d) == of_kind).map(|d| (name(d).to_owned(), d)).collect()
}

/// Whether a label selector (`matchLabels`, `matchExpressions`) selects `labels`.
pub fn labels_match(selector: &Value, labels: &Value) -> bool {
    let label = |k: &Value| labels.get(k).filter(|v| !v.is_null()).map(scalar);
    let plain = selector["matchLabels"]
        .as_mapping()
        .into_iter()
        .flatten()
        .all(|(k, v)| label(k).as_deref() == Some(scalar(v).as_str()));
    plain
        && items(&selector["matchExpressions"]).iter().all(|e| {
            let value = label(&e["key"]);
            let listed = value.as_ref().is_some_and(|v| items(&e["values"]).iter().any(|x| &scalar(x) == v));
            match e["operator"].as_str().unwrap_or_default() {
                "In" => listed,
                "NotIn" => !listed,
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        })
}

/// A container's variables in a rendered overlay: its ConfigMaps' (`envFrom`), then `env`;
/// `None` for a value from a Secret or another reference.
pub fn container_env(docs: &[Value], container: &Value) -> BTreeMap<String, Option<String>> {
    let maps = by_name(docs, "ConfigMap");
    let mut env = BTreeMap::new();
    for source in items(&container["envFrom"]) {
        let Some(map) = source["configMapRef"]["name"].as_str().and_then(|m| maps.get(m)) else { continue };
        let prefix = source["prefix"].as_str().unwrap_or_default();
        for (k, v) in map["data"].as_mapping().into_iter().flatten() {
            env.insert(format!("{prefix}{}", scalar(k)), Some(scalar(v)));
        }
    }
    for var in items(&container["env"]) {
        env.insert(scalar(&var["name"]), var.get("value").map(scalar));
    }
    env
}

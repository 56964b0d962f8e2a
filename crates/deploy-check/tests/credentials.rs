//! Credentials (docs/DEPLOY.md, "Secrets and credentials"), in deploy/compose.yaml and every
//! rendered overlay: nothing secret is written (no Secret object, no credential in a ConfigMap,
//! an env value or a URL, no fallback value for a secret variable, nothing that looks like a
//! key), no `guest`; each Deployment and compose service reads only its own Secrets and the
//! keys of its own links (`Peer::sends_to` / `Peer::accepts_from`); scripts/gen-secrets.sh
//! makes every key and variable they read. What the broker's and Redis' users may do:
//! tests/permissions.rs.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use regex::Regex;
use seckill_common::trust::{MIN_KEY_BYTES, Peer};
use seckill_deploy_check::{
    Failures, LINK_SECRET, OVERLAYS, SERVICES, compose, environment, gen_secrets, have, items, kind,
    link_env_var, links, name, read, render, scalar, secrets_of, strings_of, wanted_trust_vars,
};
use serde_yaml::Value;

static DEV_MARKER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)dev-only|change-?me|not-for-production|replace[_-]?me").unwrap());
static URL_USERINFO: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b([a-z][a-z0-9+.-]*)://([^\s:/@]*):([^\s@]*)@").unwrap());
/// Variables whose value is a credential.
static SECRET_VAR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"JWT_SECRET$|__TRUST__(SEND|ACCEPT)__|__ROOM__KEY$|(SECRET|PASSWORD|PASSWD)$|(^|_)PASS$|^REDISCLI_AUTH$|^RABBITMQ_DEFAULT_(USER|PASS)$|^RABBITMQ_ERLANG_COOKIE$",
    )
    .unwrap()
});
/// A compose interpolation with no fallback value: `${NAME}`, `${NAME:?message}`, `${NAME?message}`.
static REQUIRED_VAR: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\$\{([A-Z][A-Z0-9_]*)(?::?\?[^}]*)?\}").unwrap());
static DEFAULTED_VAR: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\$\{([A-Z][A-Z0-9_]*):?-([^}]*)\}").unwrap());
static CREDENTIAL_NAME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"SECRET|PASSWORD|PASS$|LINK|KEY|TOKEN").unwrap());

/// `$$` is a literal `$` in compose: hidden before looking for interpolations.
fn unescaped(text: &str) -> String {
    text.replace("$$", "\u{0}\u{0}")
}

/// The variable of a value that is exactly one required interpolation.
fn required_var(value: &str) -> Option<String> {
    let text = unescaped(value);
    let m = REQUIRED_VAR.captures(&text)?;
    (m[0].len() == text.len()).then(|| m[1].to_owned())
}

/// A run of 32 or more letters of both cases and digits (and `_+/-`, `=` padding): a key or password.
fn random_looking(text: &str) -> Option<&str> {
    let word = |c: char| c.is_alphanumeric() || "_+/-".contains(c);
    let mut rest = text;
    let mut offset = 0;
    while let Some(start) = rest.find(word) {
        let run_len = rest[start..].find(|c| !word(c)).unwrap_or(rest.len() - start);
        let run = &rest[start..start + run_len];
        let after = &rest[start + run_len..];
        let padding = after.len() - after.trim_start_matches('=').len();
        let ends_clean = padding <= 2;
        if run.chars().count() >= 32
            && ends_clean
            && run.contains(|c: char| c.is_lowercase())
            && run.contains(|c: char| c.is_uppercase())
            && run.contains(|c: char| c.is_ascii_digit())
        {
            return Some(&text[offset + start..offset + start + run_len]);
        }
        offset += start + run_len;
        rest = &rest[start + run_len..];
    }
    None
}

/// `guest`, development markers, key-like strings, credentials in URLs, fallbacks of secrets.
fn scan_literals(f: &mut Failures, place: &str, doc: &Value, compose: bool) {
    let mut strings = Vec::new();
    strings_of(doc, "", &mut strings);
    for (path, text) in strings {
        if text.to_lowercase().contains("guest") {
            f.fail(place, format!("{path}: mentions `guest` (no well-known broker user anywhere)"));
        }
        if let Some(m) = DEV_MARKER.find(&text) {
            f.fail(place, format!("{path}: a development or placeholder credential ({:?})", m.as_str()));
        }
        if let Some(key) = random_looking(&text) {
            f.fail(place, format!("{path}: {}... looks like a key or password", &key[..6]));
        }
        for m in URL_USERINFO.captures_iter(&text) {
            if !compose {
                f.fail(
                    place,
                    format!("{path}: a URL with a password; URLs with credentials come from a Secret"),
                );
            } else if required_var(&m[3]).is_none() {
                f.fail(
                    place,
                    format!(
                        "{path}: the password of {}://{}:...@ is written out; use ${{VARIABLE:?...}} from deploy/.env",
                        &m[1], &m[2]
                    ),
                );
            }
        }
        for m in DEFAULTED_VAR.captures_iter(&unescaped(&text)) {
            if CREDENTIAL_NAME.is_match(&m[1]) {
                f.fail(place, format!("{path}: ${{{}}} has a fallback value; a credential has none", &m[1]));
            }
        }
    }
}

/// The data stores a compose service or Deployment uses: those whose URL it is given.
fn uses(env: &BTreeMap<String, Option<String>>, store: &str) -> bool {
    env.contains_key(&format!("SECKILL__{}__URL", store.to_uppercase()))
}

fn check_compose(f: &mut Failures, compose: &Value) {
    let place = "compose.yaml";
    let mut without_configs = compose.clone();
    if let Some(m) = without_configs.as_mapping_mut() {
        m.remove("configs");
    }
    scan_literals(f, place, &without_configs, true);
    for (config, body) in compose["configs"].as_mapping().into_iter().flatten() {
        let at = format!("{place} configs.{}", scalar(config));
        let content = scalar(&body["content"]);
        if content.to_lowercase().contains("guest") {
            f.fail(&at, "mentions `guest`");
        }
        if DEV_MARKER.is_match(&content) {
            f.fail(&at, "holds a development or placeholder credential");
        }
        if content.contains("SECKILL_LINK_") || content.contains("JWT") {
            f.fail(&at, "a server's configuration holds a link key or the JWT secret");
        }
    }
    let link_var = Regex::new(r"SECKILL_LINK_([A-Z]+)_([A-Z]+)").unwrap();
    for (service_name, service) in compose["services"].as_mapping().into_iter().flatten() {
        let service_name = scalar(service_name);
        let at = format!("{place} services.{service_name}");
        let peer = SERVICES.iter().find(|(s, _)| *s == service_name).map(|&(_, p)| p);
        let env = environment(service);
        for (var, value) in &env {
            let value = value.as_deref().unwrap_or_default();
            if SECRET_VAR.is_match(var) && required_var(value).is_none() {
                f.fail(
                    &at,
                    format!("{var} must be exactly ${{VARIABLE:?...}} from deploy/.env, not a written value"),
                );
            }
            for m in link_var.captures_iter(value) {
                let (from, to) = (m[1].to_lowercase(), m[2].to_lowercase());
                if !peer.is_some_and(|p| p.as_str() == from || p.as_str() == to) {
                    f.fail(&at, format!("{var} gets the key of link {from}-{to}, which is not one of {service_name}'s links"));
                }
            }
        }
        let Some(peer) = peer else { continue };
        let want = wanted_trust_vars(peer);
        let have: BTreeSet<&String> = env.keys().filter(|v| v.starts_with("SECKILL__TRUST__")).collect();
        for (var, link) in &want {
            match env.get(var) {
                None => {
                    f.fail(&at, format!("{var} is missing (link {link}); the service would refuse to start"))
                }
                Some(value) => {
                    let expected = link_env_var(link);
                    if required_var(value.as_deref().unwrap_or_default()).as_deref() != Some(&expected) {
                        f.fail(&at, format!("{var} must be ${{{expected}:?...}} (link {link})"));
                    }
                }
            }
        }
        for var in have.iter().filter(|v| !want.contains_key(**v)) {
            f.fail(&at, format!("{var}: not a key of {service_name}'s own links"));
        }
        let user = peer.as_str();
        for (store, scheme, host, prefix_var) in [
            ("amqp", "amqp", r"rabbitmq:5672/%2f", "SECKILL__AMQP__PREFIX"),
            ("redis", "redis", r"redis:6379/?", "SECKILL__REDIS__PREFIX"),
        ] {
            if !uses(&env, store) {
                continue;
            }
            let var = format!("SECKILL_{}_PASSWORD_{}", store.to_uppercase(), user.to_uppercase());
            let url_var = format!("SECKILL__{}__URL", store.to_uppercase());
            let pattern = Regex::new(&format!(
                r"^{scheme}://{user}:\$\{{{var}(:?\?[^}}]*)?\}}@{}$",
                host.replace('.', r"\.")
            ))
            .unwrap();
            if !pattern.is_match(env[&url_var].as_deref().unwrap_or_default()) {
                f.fail(&at, format!("{url_var} must log in as {user} with ${{{var}:?...}}"));
            }
            if env.contains_key(prefix_var) {
                f.fail(&at, format!("{prefix_var}: the broker and Redis users are for the unprefixed names"));
            }
        }
    }
}

#[test]
fn compose_writes_no_credential_and_gives_each_service_its_own_link_keys() {
    let mut f = Failures::default();
    check_compose(&mut f, &compose());
    f.assert_none();
}

/// Who may read which Secret; any other reference fails.
fn secret_readers(secret: &str) -> Vec<String> {
    match secret {
        "gateway-auth" => vec!["Deployment/gateway".into()],
        "seckill-room-key" => vec!["Deployment/gateway".into(), "Deployment/seckill-service".into()],
        LINK_SECRET => SERVICES.iter().map(|(s, _)| format!("Deployment/{s}")).collect(),
        "seckill-pg-credentials" => vec!["Cluster/seckill-pg".into()],
        "seckill-redis-acl" => vec!["StatefulSet/seckill-redis".into()],
        "keda-rabbitmq" => vec!["TriggerAuthentication/order-service-rabbitmq".into()],
        other => match other.strip_suffix("-urls") {
            Some(s) if SERVICES.iter().any(|(b, _)| *b == s) => {
                vec![format!("Deployment/{s}")]
            }
            _ => Vec::new(),
        },
    }
}

/// One read of a Secret by an object.
struct SecretRead {
    container: Option<String>,
    init: bool,
    var: Option<String>,
    secret: String,
    /// None: the whole Secret, or an optional key (one present only during a rotation).
    key: Option<String>,
}

fn pod_spec(d: &Value) -> &Value {
    match kind(d) {
        "Pod" => &d["spec"],
        "CronJob" => &d["spec"]["jobTemplate"]["spec"]["template"]["spec"],
        _ => &d["spec"]["template"]["spec"],
    }
}

fn secret_reads(d: &Value) -> Vec<SecretRead> {
    let mut found = Vec::new();
    let read = |container: Option<&Value>, init, var: Option<&str>, secret: &Value, key: Option<String>| {
        SecretRead {
            container: container.map(|c| scalar(&c["name"])),
            init,
            var: var.map(str::to_owned),
            secret: scalar(secret),
            key,
        }
    };
    match kind(d) {
        "Deployment" | "StatefulSet" | "DaemonSet" | "Job" | "ReplicaSet" | "Pod" | "CronJob" => {
            let spec = pod_spec(d);
            for (init, list) in [(true, &spec["initContainers"]), (false, &spec["containers"])] {
                for c in items(list) {
                    for e in items(&c["env"]) {
                        let r = &e["valueFrom"]["secretKeyRef"];
                        if !r.is_null() {
                            let optional = r["optional"].as_bool() == Some(true);
                            let key = (!optional).then(|| scalar(&r["key"]));
                            found.push(read(Some(c), init, e["name"].as_str(), &r["name"], key));
                        }
                    }
                    for src in items(&c["envFrom"]) {
                        if !src["secretRef"].is_null() {
                            found.push(read(Some(c), init, None, &src["secretRef"]["name"], None));
                        }
                    }
                }
            }
            for v in items(&spec["volumes"]) {
                let sources: Vec<&Value> = if v["secret"].is_null() {
                    items(&v["projected"]["sources"])
                        .iter()
                        .map(|s| &s["secret"])
                        .filter(|s| !s.is_null())
                        .collect()
                } else {
                    vec![&v["secret"]]
                };
                for s in sources {
                    let secret = if s["secretName"].is_null() { &s["name"] } else { &s["secretName"] };
                    let keys: Vec<Option<String>> =
                        items(&s["items"]).iter().map(|i| Some(scalar(&i["key"]))).collect();
                    for key in if keys.is_empty() { vec![None] } else { keys } {
                        found.push(read(None, false, None, secret, key));
                    }
                }
            }
        }
        "TriggerAuthentication" => {
            for r in items(&d["spec"]["secretTargetRef"]) {
                found.push(read(None, false, None, &r["name"], Some(scalar(&r["key"]))));
            }
        }
        "Cluster" => {
            let s = &d["spec"]["bootstrap"]["initdb"]["secret"]["name"];
            if !s.is_null() {
                for key in ["username", "password"] {
                    found.push(read(None, false, None, s, Some(key.into())));
                }
            }
        }
        _ => {}
    }
    found
}

/// Checks one rendered overlay; returns the keys it reads, by Secret (for gen-secrets.sh).
fn check_overlay(f: &mut Failures, overlay: &str, docs: &[Value]) -> BTreeMap<String, BTreeSet<String>> {
    let mut reads: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for d in docs {
        let ident = format!("{}/{}", kind(d), name(d));
        let at = format!("overlay {overlay}: {ident}");
        scan_literals(f, &at, d, false);
        match kind(d) {
            "Secret" => f.fail(
                &at,
                "a Secret in the manifests; Secrets are made by scripts/gen-secrets.sh and never committed",
            ),
            "ConfigMap" => {
                for (var, _) in d["data"].as_mapping().into_iter().flatten() {
                    let var = scalar(var);
                    if SECRET_VAR.is_match(&var) {
                        f.fail(
                            &at,
                            format!("{var} is a credential: it belongs in a Secret, not a ConfigMap"),
                        );
                    }
                    if var == "SECKILL__AMQP__PREFIX" || var == "SECKILL__REDIS__PREFIX" {
                        f.fail(
                            &at,
                            format!("{var}: the broker and Redis users are for the unprefixed names"),
                        );
                    }
                }
            }
            "RabbitmqCluster" => {
                let conf = scalar(&d["spec"]["rabbitmq"]["additionalConfig"]);
                if conf.lines().map(str::trim_start).any(|l| {
                    l.starts_with("default_user")
                        || l.starts_with("default_pass")
                        || l.starts_with("default_users.")
                }) {
                    f.fail(&at, "additionalConfig sets a default user; the operator generates it, the services have their own");
                }
            }
            _ => {}
        }
        let found = secret_reads(d);
        for r in &found {
            let readers = secret_readers(&r.secret);
            if !readers.contains(&ident) {
                let list =
                    if readers.is_empty() { "none: unknown Secret".to_owned() } else { readers.join(", ") };
                let what = r.var.as_deref().or(r.container.as_deref()).unwrap_or("a volume");
                f.fail(
                    &at,
                    format!("{what} reads Secret {}, which is not for it (readers: {list})", r.secret),
                );
            }
            match (&r.key, &r.var) {
                (None, None) => f.fail(
                    &at,
                    format!("takes Secret {} whole; take single keys (secretKeyRef or items)", r.secret),
                ),
                (Some(key), _) => {
                    reads.entry(r.secret.clone()).or_default().insert(key.clone());
                }
                (None, Some(_)) => {}
            }
        }
        let Some(&(binary, peer)) = SERVICES.iter().find(|(b, _)| kind(d) == "Deployment" && *b == name(d))
        else {
            continue;
        };
        let want = wanted_trust_vars(peer);
        let mut got = BTreeSet::new();
        for r in found.iter().filter(|r| r.secret == LINK_SECRET) {
            let var = r.var.clone().unwrap_or_else(|| "a volume".into());
            let link = r.key.as_deref().unwrap_or_default().trim_end_matches(".accept");
            if !link.split('-').any(|p| p == peer.as_str()) {
                f.fail(
                    &at,
                    format!("{var} gets the key of link {link}, which is not one of {binary}'s links"),
                );
            } else if r.init {
                let c = r.container.as_deref().unwrap_or_default();
                f.fail(&at, format!("init container {c}: needs no link key (it only migrates)"));
            } else if want.get(&var).map(String::as_str) != Some(link) {
                f.fail(
                    &at,
                    format!(
                        "{var}: Secret key {} is the link {link}, not this variable's",
                        r.key.as_deref().unwrap_or("?")
                    ),
                );
            } else {
                let expected = format!("{link}{}", if var.contains("__ACCEPT__") { ".accept" } else { "" });
                if r.key.as_deref() != Some(&expected) {
                    f.fail(
                        &at,
                        format!("{var} must read {expected} (receivers read the .accept list, for rotation)"),
                    );
                }
                got.insert(var);
            }
        }
        let spec = pod_spec(d);
        for c in items(&spec["initContainers"]).iter().chain(items(&spec["containers"])) {
            for e in items(&c["env"]) {
                let var = scalar(&e["name"]);
                if SECRET_VAR.is_match(&var) && e["valueFrom"].is_null() {
                    f.fail(&at, format!("{var} is written in the manifest; it comes from a Secret"));
                }
            }
        }
        for (var, link) in want.iter().filter(|(v, _)| !got.contains(*v)) {
            f.fail(&at, format!("{var} is missing (link {link}); the service would refuse to start"));
        }
    }
    reads
}

fn rendered_overlays() -> Option<Vec<(&'static str, Vec<Value>)>> {
    have("kubectl", "it renders deploy/k8s/overlays/*")
        .then(|| OVERLAYS.iter().map(|&o| (o, render(o))).collect())
}

#[test]
fn the_overlays_write_no_credential_and_each_deployment_reads_its_own_secrets_and_links() {
    let Some(overlays) = rendered_overlays() else { return };
    let mut f = Failures::default();
    for (overlay, docs) in &overlays {
        check_overlay(&mut f, overlay, docs);
    }
    f.assert_none();
}

#[test]
fn gen_secrets_env_sets_every_variable_compose_reads() {
    if !have("bash", "it runs scripts/gen-secrets.sh") {
        return;
    }
    let place = "scripts/gen-secrets.sh --env";
    let out = gen_secrets(&["--env"]);
    let env: BTreeMap<&str, &str> = out
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .collect();
    let compose_text = unescaped(&read("deploy/compose.yaml"));
    let compose_vars: BTreeSet<&str> =
        REQUIRED_VAR.captures_iter(&compose_text).map(|m| m.get(1).unwrap().as_str()).collect();
    let mut f = Failures::default();
    for var in compose_vars.iter().filter(|v| !env.contains_key(**v)) {
        f.fail(place, format!("does not set {var}, which deploy/compose.yaml needs"));
    }
    for (var, value) in &env {
        if value.is_empty() || value.contains('$') || value.contains(' ') {
            f.fail(place, format!("{var}: empty, or a character compose would interpolate"));
        }
        if (var.starts_with("SECKILL_LINK_") || var.starts_with("SECKILL_JWT")) && value.len() < MIN_KEY_BYTES
        {
            f.fail(place, format!("{var}: shorter than {MIN_KEY_BYTES} bytes"));
        }
    }
    let wanted: BTreeSet<String> = links().iter().map(|l| link_env_var(l)).collect();
    let given: BTreeSet<String> =
        env.keys().filter(|v| v.starts_with("SECKILL_LINK_")).map(|v| (*v).to_owned()).collect();
    if given != wanted {
        f.fail(place, format!("the link keys {given:?} differ from the links {:?}", links()));
    }
    f.assert_none();
}

#[test]
fn gen_secrets_k8s_makes_every_key_the_overlays_read() {
    if !have("bash", "it runs scripts/gen-secrets.sh") {
        return;
    }
    let Some(overlays) = rendered_overlays() else { return };
    let place = "scripts/gen-secrets.sh --k8s";
    let out = gen_secrets(&["--k8s", "--namespace", "seckill"]);
    let again = gen_secrets(&["--k8s"]);
    let secrets = secrets_of(place, &out);
    let mut f = Failures::default();
    if out == again || secrets.is_empty() {
        f.fail(place, "two runs gave the same output");
    }
    for (overlay, docs) in &overlays {
        let mut ignored = Failures::default();
        for (secret, keys) in check_overlay(&mut ignored, overlay, docs) {
            let made = secrets.get(&secret);
            let missing: Vec<_> = keys.iter().filter(|k| !made.is_some_and(|m| m.contains_key(*k))).collect();
            if !missing.is_empty() {
                f.fail(
                    place,
                    format!(
                        "overlay {overlay} reads Secret {secret} keys {missing:?}, which it does not make"
                    ),
                );
            }
        }
    }
    let empty = BTreeMap::new();
    let link_keys = secrets.get(LINK_SECRET).unwrap_or(&empty);
    let mut values = BTreeSet::new();
    for link in links() {
        let key = link_keys.get(&link).map(String::as_str).unwrap_or_default();
        if key.len() < MIN_KEY_BYTES || key.contains(',') {
            f.fail(place, format!("link key {link}: at least {MIN_KEY_BYTES} bytes and no comma"));
        }
        if link_keys.get(&format!("{link}.accept")).map(String::as_str) != Some(key) {
            f.fail(place, format!("{link}.accept must start equal to {link}"));
        }
        values.insert(key);
    }
    let wanted: BTreeSet<String> = links().into_iter().flat_map(|l| [format!("{l}.accept"), l]).collect();
    if link_keys.keys().cloned().collect::<BTreeSet<_>>() != wanted {
        f.fail(place, format!("{LINK_SECRET} keys differ from the links {:?}", links()));
    }
    let jwt =
        secrets.get("gateway-auth").and_then(|s| s.get("jwt-secret")).map(String::as_str).unwrap_or_default();
    if jwt.len() < MIN_KEY_BYTES {
        f.fail(place, "jwt-secret shorter than 32 bytes");
    }
    if !values.insert(jwt) || values.len() != links().len() + 1 {
        f.fail(place, "two keys are equal");
    }
    let pg = secrets.get("seckill-pg-credentials").unwrap_or(&empty);
    let compose = compose();
    let amqp_url = Regex::new(r"^amqp://([^:@]+):([^@]+)@seckill-rabbitmq:5672/%2f$").unwrap();
    let database_url = Regex::new(r"^postgres://([^:@]+):([^@]+)@seckill-pg-rw:5432/(\w+)$").unwrap();
    for (binary, peer) in SERVICES {
        let env = environment(&compose["services"][binary]);
        let urls = secrets.get(&format!("{binary}-urls")).unwrap_or(&empty);
        let url = |k: &str| urls.get(k).cloned().unwrap_or_default();
        let user = peer.as_str();
        let amqp = url("amqp-url");
        if uses(&env, "amqp") && amqp_url.captures(&amqp).is_none_or(|c| &c[1] != user || c[2].len() < 32) {
            f.fail(
                place,
                format!("{binary}-urls amqp-url must log in as {user} with a long random password"),
            );
        }
        if uses(&env, "database") {
            let role = (pg.get("username").map(String::as_str), pg.get("password").map(String::as_str));
            let url = url("database-url");
            if database_url
                .captures(&url)
                .is_none_or(|c| (c.get(1).map(|m| m.as_str()), c.get(2).map(|m| m.as_str())) != role)
            {
                f.fail(
                    place,
                    format!("{binary}-urls database-url must use the role of seckill-pg-credentials"),
                );
            }
        }
    }
    let keda = secrets.get("keda-rabbitmq").and_then(|s| s.get("host")).cloned().unwrap_or_default();
    if !Regex::new(r"^amqp://keda:([^@]+)@seckill-rabbitmq:5672/%2f$").unwrap().is_match(&keda) {
        f.fail(place, "keda-rabbitmq host must log in as keda");
    }
    f.assert_none();
}

/// The scanners catch what they are for, in a compose file and in a manifest.
#[test]
fn the_literal_scanners_catch_written_credentials() {
    assert_eq!(
        random_looking("k: aB3dEfGhIjKlMnOpQrStUvWxYz0123456789=="),
        Some("aB3dEfGhIjKlMnOpQrStUvWxYz0123456789")
    );
    assert_eq!(random_looking("seckill-service-seckill-service-seckill-service"), None);
    assert_eq!(required_var("${SECKILL_LINK_A_B:?run gen-secrets}").as_deref(), Some("SECKILL_LINK_A_B"));
    assert_eq!(required_var("$${X}"), None);
    let doc: Value = serde_yaml::from_str(
        "a: amqp://guest:guest@rabbitmq:5672\nb: ${SECKILL_JWT_SECRET:-change-me}\nc: redis://u:${P:?x}@r:1\n",
    )
    .unwrap();
    let mut f = Failures::default();
    scan_literals(&mut f, "doc", &doc, true);
    let all = f.messages().join("\n");
    for expected in ["`guest`", "\"change-me\"", "password of amqp://guest", "has a fallback value"] {
        assert!(all.contains(expected), "{expected} not in:\n{all}");
    }
    assert!(!all.contains(".c:"), "{all}");
    let mut f = Failures::default();
    scan_literals(&mut f, "doc", &doc, false);
    assert!(f.messages().iter().any(|m| m.contains(".c: a URL with a password")), "{:?}", f.messages());
}

/// Every link of `Peer` is held at both ends: the sender signs, the receiver accepts.
#[test]
fn every_link_has_a_sender_and_a_receiver() {
    for l in links() {
        let (from, to) = l.split_once('-').unwrap();
        let (from, to) = (Peer::parse(from).unwrap(), Peer::parse(to).unwrap());
        assert!(to.accepts_from().contains(&from), "link {l}: {to} does not accept {from}");
    }
}

/// A compose service's `configs` entry of `config`: where it is mounted.
fn mounted(service: &Value, config: &str) -> Option<String> {
    items(&service["configs"])
        .iter()
        .find(|c| c["source"].as_str() == Some(config))
        .map(|c| scalar(&c["target"]))
}

/// compose's Redis and RabbitMQ load their users from configs mounted for them, each user's
/// password from deploy/.env; one broker user per service with an `amqp` section, no tags.
/// (What each user may do: tests/permissions.rs.)
fn check_compose_servers(f: &mut Failures, compose: &Value) {
    let services = &compose["services"];
    let content =
        |config: &str| unescaped(&scalar(&compose["configs"][config]["content"])).replace("\0\0", "$");
    // Redis: the ACL file, mounted and loaded; each user's password from deploy/.env.
    let redis = &services["redis"];
    let at = "compose.yaml services.redis";
    let command: Vec<String> = items(&redis["command"]).iter().map(scalar).collect();
    let acl_file = command.iter().position(|a| a == "--aclfile").and_then(|i| command.get(i + 1));
    if mounted(redis, "redis-acl").is_none_or(|target| acl_file != Some(&target)) {
        f.fail(at, "must run with --aclfile pointing at the mounted configs.redis-acl");
    }
    if environment(redis).get("REDISCLI_AUTH").cloned().flatten().and_then(|v| required_var(&v)).is_none() {
        f.fail(at, "REDISCLI_AUTH (the health check's login) must come from deploy/.env");
    }
    let acl = REQUIRED_VAR.replace_all(&content("redis-acl"), "$${${1}}").into_owned();
    for line in acl.lines().map(str::trim).filter(|l| l.starts_with("user ")) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let user = words.get(1).copied().unwrap_or_default();
        let passwords: Vec<&str> =
            words.iter().skip(2).copied().filter(|r| r.starts_with(['>', '#'])).collect();
        let var = if user == "default" { "ADMIN".to_owned() } else { user.to_uppercase() };
        if passwords != [format!(">${{SECKILL_REDIS_PASSWORD_{var}}}")] {
            f.fail(
                "compose.yaml configs.redis-acl",
                format!("user {user}: the password must be ${{SECKILL_REDIS_PASSWORD_{var}:?...}}"),
            );
        }
    }
    // RabbitMQ: the definitions, mounted and loaded at start; one user per service.
    let rabbitmq = &services["rabbitmq"];
    let definitions_at = mounted(rabbitmq, "rabbitmq-definitions");
    let conf_at = mounted(rabbitmq, "rabbitmq-conf");
    let loaded = definitions_at.as_ref().is_some_and(|target| {
        content("rabbitmq-conf").lines().any(|l| {
            l.split_once('=').is_some_and(|(k, v)| k.trim() == "load_definitions" && v.trim() == target)
        })
    });
    if !loaded || !conf_at.is_some_and(|c| c.starts_with("/etc/rabbitmq/conf.d/")) {
        f.fail(
            "compose.yaml services.rabbitmq",
            "must mount configs.rabbitmq-conf in /etc/rabbitmq/conf.d/ with load_definitions = the mounted \
             configs.rabbitmq-definitions",
        );
    }
    let at = "compose.yaml configs.rabbitmq-definitions";
    let json = REQUIRED_VAR.replace_all(&content("rabbitmq-definitions"), "VAR:${1}").into_owned();
    let definitions: Value = match serde_yaml::from_str(&json) {
        Ok(d) => d,
        Err(e) => return f.fail(at, format!("not a definitions document: {e}")),
    };
    let mut users: Vec<String> = items(&definitions["users"]).iter().map(|u| scalar(&u["name"])).collect();
    users.sort();
    let mut expected: Vec<String> = SERVICES
        .iter()
        .filter(|(b, _)| uses(&environment(&services[*b]), "amqp"))
        .map(|(_, p)| p.as_str().to_owned())
        .chain(["admin".to_owned()])
        .collect();
    expected.sort();
    if users != expected {
        f.fail(at, format!("users {users:?}: expected admin and one per service with an amqp section"));
    }
    for u in items(&definitions["users"]) {
        let user = scalar(&u["name"]);
        let var = format!("SECKILL_AMQP_PASSWORD_{}", user.to_uppercase());
        if u["password"].as_str() != Some(&format!("VAR:{var}")) || u.get("password_hash").is_some() {
            f.fail(at, format!("user {user}: password must be ${{{var}:?...}}"));
        }
        if user != "admin" && !scalar(&u["tags"]).is_empty() && u["tags"] != Value::Sequence(Vec::new()) {
            f.fail(at, format!("user {user}: a service's user has no tags (no management access)"));
        }
    }
    for p in items(&definitions["permissions"]) {
        if p["vhost"].as_str() != Some("/") {
            f.fail(at, format!("user {}: vhost must be / (the services' %2f)", scalar(&p["user"])));
        }
    }
}

#[test]
fn compose_servers_load_their_users_with_passwords_from_deploy_env() {
    let mut f = Failures::default();
    check_compose_servers(&mut f, &compose());
    f.assert_none();
}

//! What each service's broker user and Redis user may do (docs/DEPLOY.md, "Secrets and
//! credentials"): exactly what the service uses, as its own code describes it. The broker: its
//! `startup::broker_use` (its startup builds its publisher and consumers from that value, and
//! the publisher refuses any destination it does not list), with the names of `AmqpNames`; in
//! deploy/compose.yaml's definitions and deploy/k8s/rabbitmq-users.sh, whose `keda` user may do
//! nothing. Redis: its `REDIS_USE` (the scripts it loads, whose `redis.call`s Redis checks too,
//! and the commands it sends), in compose's ACL and scripts/gen-secrets.sh --k8s's, whose
//! passwords agree with the services' URLs.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use regex::Regex;
use seckill_common::amqp::{AmqpNames, dead_queue, retry_queue};
use seckill_common::trust::Peer;
use seckill_deploy_check::{
    Failures, SERVICES, compose, gen_secrets, have, items, read, scalar, secrets_of, uses_store,
};
use seckill_infra::amqp::{Declare, Destination};
use seckill_infra::broker_use::BrokerUse;
use seckill_infra::consumer::Source;
use seckill_infra::redis::{BASE_COMMANDS, RedisUse};
use serde_yaml::Value;

/// The deployed names: no prefix; the order TTL of the settings' default (any TTL and retry
/// delay give the same answers: the permissions take `\d+s` and `\d+ms`).
const ORDER_TTL_SECS: u64 = 1800;
const RETRY_MS: u64 = 5000;
/// An exclusive, server-named queue (a fanout consumer's).
const SERVER_NAMED: &str = "amq.gen-JhKz9bX0cQw";
const KINDS: [&str; 3] = ["configure", "write", "read"];

/// A compose interpolation with no fallback value: `${NAME}`, `${NAME:?message}`, `${NAME?message}`.
static REQUIRED_VAR: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\$\{([A-Z][A-Z0-9_]*)(?::?\?[^}]*)?\}").unwrap());

/// A permission: (configure | write | read, queue or exchange).
type Need = (&'static str, String);
/// A broker user's patterns: configure, write, read.
type Patterns = BTreeMap<String, String>;

fn names() -> AmqpNames {
    AmqpNames::new("")
}

/// What a service does on the broker (None: it has no broker).
fn broker_use(binary: &str) -> Option<BrokerUse> {
    let names = names();
    match binary {
        "seckill-service" => Some(seckill_service::startup::broker_use(&names)),
        "order-service" => Some(order_service::startup::broker_use(&names, ORDER_TTL_SECS)),
        "stock-service" => Some(stock_service::startup::broker_use(&names)),
        _ => None,
    }
}

/// What a service runs on Redis (None: it has no Redis).
fn redis_use(binary: &str) -> Option<RedisUse> {
    match binary {
        "seckill-service" => Some(seckill_service::gate::REDIS_USE),
        "order-service" => Some(order_service::results::REDIS_USE),
        "gateway" => Some(gateway::startup::REDIS_USE),
        _ => None,
    }
}

/// The permissions a broker use needs (what crates/infra's amqp.rs and consumer.rs do).
fn amqp_needs(broker: &BrokerUse, names: &AmqpNames) -> BTreeSet<Need> {
    let mut need = BTreeSet::new();
    let default = || ("write", "amq.default".to_owned());
    // A work queue, its .dead and .retry; the two that dead-letter need read on themselves and
    // write on the exchange they dead-letter through.
    let work_queue = |need: &mut BTreeSet<Need>, q: &str| {
        let retry = retry_queue(q, RETRY_MS);
        need.extend([
            ("configure", q.to_owned()),
            ("configure", dead_queue(q)),
            ("configure", retry.clone()),
            ("read", q.to_owned()),
            ("read", retry),
            default(),
        ]);
    };
    let declares = broker.publisher_declares.iter().chain(broker.consumers.iter().flat_map(|(_, d)| d));
    for d in declares {
        match d {
            Declare::WorkQueue(q) => work_queue(&mut need, q),
            Declare::OrderDelay { ttl_secs } => {
                work_queue(&mut need, &names.order_expire_queue());
                let delay = names.order_delay_queue(*ttl_secs);
                need.extend([("configure", delay.clone()), ("read", delay), default()]);
            }
            Declare::Broadcast => {
                need.insert(("configure", names.broadcast_exchange()));
            }
        }
    }
    for (source, _) in &broker.consumers {
        match source {
            // Consuming; a retry goes to the retry queue through the default exchange.
            Source::Queue(q) => need.extend([("read", q.clone()), default()]),
            // Its own server-named queue, bound to the exchange.
            Source::Fanout(exchange) => need.extend([
                ("configure", SERVER_NAMED.to_owned()),
                ("write", SERVER_NAMED.to_owned()),
                ("read", SERVER_NAMED.to_owned()),
                ("read", exchange.clone()),
            ]),
        }
    }
    for p in &broker.publishes {
        need.insert(match p {
            Destination::Queue(_) => default(),
            Destination::Exchange { exchange, .. } => ("write", exchange.clone()),
        });
    }
    need
}

/// Every name of `AmqpNames` and the system's, plus names a pattern must refuse: others, and
/// look-alikes that catch a pattern that is not anchored (RabbitMQ searches, it does not match
/// the whole name).
fn amqp_universe(names: &AmqpNames) -> BTreeSet<Need> {
    let mut res: BTreeSet<String> = names.all_queues(ORDER_TTL_SECS, RETRY_MS).into_iter().collect();
    res.insert(names.broadcast_exchange());
    res.extend(["amq.default", SERVER_NAMED, "amq.topic", "evil", "seckill.evil"].map(str::to_owned));
    let look_alikes: Vec<String> = res
        .iter()
        .flat_map(|r| {
            let suffixed = (!r.starts_with("amq.gen-")).then(|| format!("{r}.x"));
            std::iter::once(format!("x{r}")).chain(suffixed)
        })
        .collect();
    res.extend(look_alikes);
    KINDS.iter().flat_map(|&k| res.iter().map(move |r| (k, r.clone()))).collect()
}

/// A user's patterns allow exactly `needs` among `universe`; RabbitMQ matches each pattern
/// unanchored (re:run), as `Regex::is_match` does. A missing pattern allows nothing.
fn check_permissions(
    f: &mut Failures,
    place: &str,
    user: &str,
    patterns: &Patterns,
    needs: &BTreeSet<Need>,
    universe: &BTreeSet<Need>,
) {
    let mut compiled = BTreeMap::new();
    for kind in KINDS {
        let pattern = patterns.get(kind).map_or("^$", String::as_str);
        match Regex::new(pattern) {
            Ok(re) => compiled.insert(kind, re),
            Err(e) => {
                return f
                    .fail(place, format!("user {user}: {kind} pattern is not a regular expression: {e}"));
            }
        };
    }
    let all: BTreeSet<&Need> = universe.iter().chain(needs).collect();
    for need in all {
        let (kind, resource) = need;
        let pattern = &compiled[kind];
        let allowed = pattern.is_match(resource);
        if needs.contains(need) && !allowed {
            f.fail(
                place,
                format!("user {user} needs {kind} on {resource:?} and {:?} refuses it", pattern.as_str()),
            );
        } else if !needs.contains(need) && allowed {
            f.fail(place, format!("user {user} may {kind} {resource:?}, which its service does not use"));
        }
    }
}

/// A compose config's text, `$$` unescaped, each required interpolation replaced by `with`
/// (`$1` the variable).
fn compose_config(compose: &Value, config: &str, with: &str) -> String {
    let content = scalar(&compose["configs"][config]["content"]).replace("$$", "\u{0}");
    REQUIRED_VAR.replace_all(&content, with).replace('\u{0}', "$")
}

/// Compose's broker users' patterns, by user (admin left out).
fn compose_permissions(f: &mut Failures, compose: &Value) -> BTreeMap<String, Patterns> {
    let place = "compose.yaml configs.rabbitmq-definitions";
    let json = compose_config(compose, "rabbitmq-definitions", "VAR:${1}");
    let definitions: Value = match serde_yaml::from_str(&json) {
        Ok(d) => d,
        Err(e) => {
            f.fail(place, format!("not a definitions document: {e}"));
            return BTreeMap::new();
        }
    };
    permissions_of(&definitions["permissions"]).into_iter().filter(|(u, _)| u != "admin").collect()
}

fn permissions_of(list: &Value) -> BTreeMap<String, Patterns> {
    items(list)
        .iter()
        .map(|p| {
            let patterns = KINDS
                .iter()
                .filter(|k| !p[**k].is_null())
                .map(|k| ((*k).to_owned(), scalar(&p[*k])))
                .collect();
            (scalar(&p["user"]), patterns)
        })
        .collect()
}

/// The services with a store in compose, with their user (the link name).
fn store_users(compose: &Value, store: &str) -> Vec<(&'static str, Peer)> {
    SERVICES.iter().copied().filter(|(b, _)| uses_store(&compose["services"][*b], store)).collect()
}

fn check_broker_users(
    f: &mut Failures,
    place: &str,
    compose: &Value,
    permissions: &BTreeMap<String, Patterns>,
) {
    let names = names();
    let universe = amqp_universe(&names);
    for (binary, peer) in store_users(compose, "amqp") {
        let user = peer.as_str();
        let Some(broker) = broker_use(binary) else {
            f.fail(
                place,
                format!("{binary} is given a broker but has no broker_use to say what it does there"),
            );
            continue;
        };
        match permissions.get(user) {
            None => f.fail(place, format!("no permissions for user {user}")),
            Some(patterns) => {
                check_permissions(f, place, user, patterns, &amqp_needs(&broker, &names), &universe)
            }
        }
    }
}

#[test]
fn compose_broker_users_may_do_exactly_what_their_services_do() {
    let compose = compose();
    let mut f = Failures::default();
    let permissions = compose_permissions(&mut f, &compose);
    check_broker_users(&mut f, "compose.yaml configs.rabbitmq-definitions", &compose, &permissions);
    f.assert_none();
}

#[test]
fn rabbitmq_users_sh_has_composes_permissions_and_keda_may_do_nothing() {
    let place = "deploy/k8s/rabbitmq-users.sh";
    let sh = read(place);
    let mut f = Failures::default();
    let compose = compose_permissions(&mut f, &compose());
    let block =
        sh.split_once("cat <<'JSON'\n").and_then(|(_, rest)| rest.split_once("\nJSON\n")).map(|(b, _)| b);
    match block.map(|b| serde_yaml::from_str::<Value>(&format!("[{b}]"))) {
        Some(Ok(list)) if permissions_of(&list) == compose => {}
        Some(Ok(_)) => f.fail(place, "its permissions differ from deploy/compose.yaml's"),
        Some(Err(e)) => f.fail(place, format!("its permissions are not JSON: {e}")),
        None => f.fail(place, "no cat <<'JSON' ... JSON block of permissions"),
    }
    let keda = Regex::new(r"(?m)^KEDA_PERMISSIONS='(.*)'$").unwrap();
    match keda.captures(&sh).map(|c| serde_yaml::from_str::<Value>(&c[1])) {
        Some(Ok(keda)) => {
            let patterns = permissions_of(&Value::Sequence(vec![keda.clone()]));
            let all_empty = KINDS.iter().all(|k| keda[*k].as_str() == Some("^$"));
            if keda["user"].as_str() != Some("keda") || !all_empty {
                f.fail(place, "user keda may do nothing but count (^$ everywhere)");
            }
            let universe = amqp_universe(&names());
            check_permissions(&mut f, place, "keda", &patterns["keda"], &BTreeSet::new(), &universe);
        }
        Some(Err(e)) => f.fail(place, format!("KEDA_PERMISSIONS is not JSON: {e}")),
        None => f.fail(place, "no KEDA_PERMISSIONS='...' line"),
    }
    f.assert_none();
}

/// The commands a script runs (Redis checks each `redis.call` against the ACL).
fn script_commands(source: &str) -> BTreeSet<String> {
    static CALL: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r#"redis\.p?call\(\s*['"](\w+)['"]"#).unwrap());
    CALL.captures_iter(source).map(|c| c[1].to_lowercase()).collect()
}

/// Every command a service's Redis user must run.
fn redis_needs(redis: &RedisUse) -> BTreeSet<String> {
    let own = BASE_COMMANDS.iter().chain(redis.commands).map(|c| (*c).to_owned());
    own.chain(redis.scripts.iter().flat_map(|s| script_commands(s))).collect()
}

type Acl = BTreeMap<String, Vec<String>>;

fn parse_acl(f: &mut Failures, place: &str, text: &str) -> Acl {
    let mut users = Acl::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["user", name, rules @ ..] => {
                users.insert((*name).to_owned(), rules.iter().map(|r| (*r).to_owned()).collect());
            }
            _ => f.fail(
                place,
                format!("not an ACL user line: {:?}", line.chars().take(40).collect::<String>()),
            ),
        }
    }
    users
}

fn passwords(rules: &[String]) -> Vec<&String> {
    rules.iter().filter(|r| r.starts_with(['>', '#'])).collect()
}

/// The users: `default` off or with one password; one per service with Redis, with one
/// password, keys `seckill:*` only, no channels, `-@all` then exactly its commands.
fn check_acl(f: &mut Failures, place: &str, users: &Acl, services: &[(&str, Peer)]) {
    let expected: BTreeSet<&str> = services.iter().map(|(_, p)| p.as_str()).chain(["default"]).collect();
    if users.keys().map(String::as_str).collect::<BTreeSet<_>>() != expected {
        f.fail(
            place,
            format!("users {:?}: expected default and one per service with a redis section", users.keys()),
        );
    }
    let default = users.get("default").map(Vec::as_slice).unwrap_or_default();
    let off = default.iter().any(|r| r == "off");
    if default.iter().any(|r| r == "nopass") || (!off && passwords(default).len() != 1) {
        f.fail(place, "the default user must be off or have one password (not nopass)");
    }
    for &(binary, peer) in services {
        let user = peer.as_str();
        let rules = users.get(user).map(Vec::as_slice).unwrap_or_default();
        let has = |rule: &str| rules.iter().any(|r| r == rule);
        if passwords(rules).len() != 1 || has("nopass") || !has("on") {
            f.fail(place, format!("user {user}: needs `on` and exactly one password"));
        }
        let keys: Vec<&String> =
            rules.iter().filter(|r| r.starts_with(['~', '%']) || *r == "allkeys").collect();
        if keys != ["~seckill:*"] {
            f.fail(place, format!("user {user}: keys {keys:?}, expected only ~seckill:*"));
        }
        let channels: Vec<&String> =
            rules.iter().filter(|r| r.starts_with('&') || *r == "allchannels").collect();
        let expected: &[&str] =
            if redis_use(binary).is_some_and(|r| r.channels) { &["&seckill:*"] } else { &[] };
        if !has("resetchannels") || channels != expected {
            f.fail(
                place,
                format!("user {user}: channels {channels:?}, expected resetchannels then {expected:?}"),
            );
        }
        let cmds: Vec<&String> = rules
            .iter()
            .filter(|r| r.starts_with(['+', '-']) || *r == "allcommands" || *r == "nocommands")
            .collect();
        if cmds.first().is_none_or(|c| *c != "-@all")
            || cmds.iter().any(|r| r.starts_with("+@") || *r == "allcommands")
        {
            f.fail(place, format!("user {user}: start from -@all and allow single commands, no categories"));
        }
        let Some(redis) = redis_use(binary) else {
            f.fail(place, format!("{binary} is given Redis but has no RedisUse to say what it runs there"));
            continue;
        };
        let have: BTreeSet<String> =
            cmds.iter().filter_map(|r| r.strip_prefix('+')).map(str::to_lowercase).collect();
        let need = redis_needs(&redis);
        let lacks: Vec<&String> = need.difference(&have).collect();
        if !lacks.is_empty() {
            f.fail(place, format!("user {user} lacks {lacks:?}, which {binary} runs"));
        }
        let extra: Vec<&String> = have.difference(&need).collect();
        if !extra.is_empty() {
            f.fail(place, format!("user {user} may run {extra:?}, which {binary} does not"));
        }
    }
}

fn compose_acl(f: &mut Failures, compose: &Value) -> Acl {
    // The interpolations' messages hold spaces: ${VAR:?message} counts as ${VAR}.
    parse_acl(f, "compose.yaml configs.redis-acl", &compose_config(compose, "redis-acl", "$${${1}}"))
}

#[test]
fn compose_redis_users_run_exactly_their_services_commands() {
    let compose = compose();
    let mut f = Failures::default();
    let acl = compose_acl(&mut f, &compose);
    check_acl(&mut f, "compose.yaml configs.redis-acl", &acl, &store_users(&compose, "redis"));
    f.assert_none();
}

fn without_passwords(users: &Acl) -> Acl {
    users
        .iter()
        .map(|(u, rules)| (u.clone(), rules.iter().filter(|r| !r.starts_with(['>', '#'])).cloned().collect()))
        .collect()
}

fn sha256_hex(text: &str) -> String {
    aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, text.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn gen_secrets_k8s_redis_users_are_composes_and_match_the_services_urls() {
    if !have("bash", "it runs scripts/gen-secrets.sh") {
        return;
    }
    let place = "scripts/gen-secrets.sh --k8s";
    let secrets = secrets_of(place, &gen_secrets(&["--k8s", "--namespace", "seckill"]));
    let compose = compose();
    let mut f = Failures::default();
    let empty = BTreeMap::new();
    let acl_secret = secrets.get("seckill-redis-acl").unwrap_or(&empty);
    let acl_place = format!("{place} seckill-redis-acl");
    let acl = parse_acl(&mut f, &acl_place, acl_secret.get("users.acl").map_or("", String::as_str));
    let services = store_users(&compose, "redis");
    check_acl(&mut f, &acl_place, &acl, &services);
    if without_passwords(&acl) != without_passwords(&compose_acl(&mut Failures::default(), &compose)) {
        f.fail(place, "the Redis users differ from deploy/compose.yaml's configs.redis-acl");
    }
    let hashed = |user: &str, password: &str| {
        passwords(acl.get(user).map(Vec::as_slice).unwrap_or_default())
            == [&format!("#{}", sha256_hex(password))]
    };
    if !hashed("default", acl_secret.get("admin-password").map_or("", String::as_str)) {
        f.fail(place, "seckill-redis-acl admin-password does not match the default user's hash");
    }
    let url = Regex::new(r"^redis://([^:@]+):([^@]+)@[\w.-]+:\d+$").unwrap();
    for (binary, peer) in services {
        let user = peer.as_str();
        let redis_url = secrets.get(&format!("{binary}-urls")).and_then(|s| s.get("redis-url"));
        let login = redis_url.and_then(|u| url.captures(u));
        if login.is_none_or(|c| &c[1] != user || !hashed(user, &c[2])) {
            f.fail(
                place,
                format!("{binary}-urls redis-url must log in as {user} with the password of its ACL user"),
            );
        }
    }
    f.assert_none();
}

/// The checks catch a pattern that allows too much (unanchored, or a name the service does not
/// use) or too little, and an ACL user with a command too many or too few.
#[test]
fn the_checks_catch_too_wide_and_too_narrow_permissions() {
    let names = names();
    let universe = amqp_universe(&names);
    let stock = amqp_needs(&broker_use("stock-service").unwrap(), &names);
    let patterns = |configure: &str, write: &str, read: &str| -> Patterns {
        KINDS.iter().zip([configure, write, read]).map(|(k, p)| ((*k).to_owned(), p.to_owned())).collect()
    };
    let right = patterns(
        r"^seckill\.(restock|stock\.release)(\.dead|\.retry\.\d+ms)?$",
        r"^amq\.default$",
        r"^seckill\.(restock|stock\.release)(\.retry\.\d+ms)?$",
    );
    let mut f = Failures::default();
    check_permissions(&mut f, "here", "stock", &right, &stock, &universe);
    assert!(f.messages().is_empty(), "{:?}", f.messages());

    let wrong = patterns(
        r"^seckill\.(restock|stock\.release)(\.dead|\.retry\.\d+ms)?",
        r"^amq\.default$|^seckill\.broadcast$",
        r"^seckill\.restock(\.retry\.\d+ms)?$",
    );
    let mut f = Failures::default();
    check_permissions(&mut f, "here", "stock", &wrong, &stock, &universe);
    let all = f.messages().join("\n");
    for expected in [
        r#"here: user stock may configure "seckill.restock.x""#,
        r#"user stock may write "seckill.broadcast", which its service does not use"#,
        r#"user stock needs read on "seckill.stock.release" and"#,
    ] {
        assert!(all.contains(expected), "{expected} not in:\n{all}");
    }

    let order = redis_needs(&order_service::results::REDIS_USE);
    let mut rules = vec!["on", "#00", "resetchannels", "&seckill:*", "~seckill:*", "-@all"];
    let plus: Vec<String> =
        order.iter().filter(|c| *c != "hdel").map(|c| format!("+{c}")).chain(["+keys".into()]).collect();
    rules.extend(plus.iter().map(String::as_str));
    let mut f = Failures::default();
    let acl = parse_acl(&mut f, "acl", &format!("user default off\nuser order {}", rules.join(" ")));
    check_acl(&mut f, "acl", &acl, &[("order-service", Peer::Order)]);
    let all = f.messages().join("\n");
    for expected in [r#"acl: user order lacks ["hdel"]"#, r#"user order may run ["keys"]"#] {
        assert!(all.contains(expected), "{expected} not in:\n{all}");
    }
}

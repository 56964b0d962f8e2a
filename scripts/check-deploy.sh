#!/usr/bin/env bash
# scripts/check-deploy.sh: the deployment checks that need no cluster and no Docker engine.
# scripts/test.sh runs it after the tests (deployment_checks); it also runs alone:
#
#   bash scripts/check-deploy.sh
#
#   1. Each overlay of deploy/k8s renders with `kubectl kustomize`; the built-in objects
#      validate against the Kubernetes schemas (kubernetes-validate, pinned, offline, strict).
#      Without kubectl this part is skipped with one line.
#   2. Credentials (docs/DEPLOY.md, "Secrets and credentials"): each service's broker user may do
#      exactly what its code declares, consumes and publishes (the names from AmqpNames), the
#      same in compose and deploy/k8s/rabbitmq-users.sh; each Redis ACL user runs exactly the
#      commands of its service and its Lua scripts, on seckill:* only, the same in compose and
#      gen-secrets.sh, whose Secrets validate. `docker compose config` too, where the Compose v2
#      plugin is installed. (Both read the code with regular expressions.)
#
# The rest is Rust tests in crates/deploy-check (`cargo test -p seckill-deploy-check`, part of
# scripts/test.sh):
#   tests/settings.rs          the SECKILL__ variables (Dockerfile, ConfigMap files, every
#                              Deployment, compose) read by each service's own settings loader;
#   tests/dockerfile.rs        one non-root target per service;
#   tests/compose.rs           images, health checks, depends_on, ports, the gateway's admin
#                              port and proxy hops;
#   tests/credentials.rs       no written credential, no `guest`, no committed Secret; each
#                              Deployment and compose service reads only its own Secrets and its
#                              own links' keys (Peer::sends_to/accepts_from); compose's Redis and
#                              RabbitMQ load their users, passwords from deploy/.env;
#                              gen-secrets.sh makes every key and variable read;
#   tests/kubernetes.rs        each Deployment's image, port, probes, graceful shutdown, security
#                              context, resources, Service, autoscaler and PodDisruptionBudget;
#                              per-overlay settings, Ingress, NetworkPolicies; the gateway's
#                              admin port (9080) scraped, reachable from monitoring only;
#   tests/custom_resources.rs  the CloudNativePG, RabbitMQ and KEDA resources' fields.
#
# Python tools live in a venv under ${XDG_CACHE_HOME:-~/.cache}/seckill/, made on first use
# (PyPI); later runs are offline and take a few seconds.
# Exit status: 0 when everything holds, 1 otherwise.
set -euo pipefail

ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

# Pinned tools: the validator (it bundles the Kubernetes JSON schemas) and the Kubernetes
# version the manifests are validated against.
KUBERNETES_VALIDATE_VERSION=1.34.1
PYYAML_VERSION=6.0.2
K8S_VERSION=${SECKILL_K8S_VERSION:-1.32.0}
OVERLAYS=(dev prod)

CACHE_DIR=${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/seckill
VENV=$CACHE_DIR/venv-deploy-kv$KUBERNETES_VALIDATE_VERSION

say() { printf 'check-deploy: %s\n' "$*" >&2; }

ensure_venv() {
    local python
    if [[ -x $VENV/bin/python && -e $VENV/.complete ]]; then
        return 0
    fi
    if ! python=$(command -v python3); then
        say "python3 not found: install it (apt-get install -y python3 python3-venv)"
        return 1
    fi
    say "making the tools venv $VENV (kubernetes-validate==$KUBERNETES_VALIDATE_VERSION, once)"
    rm -rf "$VENV"
    mkdir -p "$CACHE_DIR"
    if ! "$python" -m venv "$VENV" >/dev/null 2>&1; then
        say "python3 -m venv failed: install python3-venv (apt-get install -y python3-venv)"
        return 1
    fi
    if ! "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" "PyYAML==$PYYAML_VERSION" >&2; then
        say "pip install kubernetes-validate==$KUBERNETES_VALIDATE_VERSION failed (PyPI unreachable?)"
        return 1
    fi
    touch "$VENV/.complete"
}

ensure_venv

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

render_args=()
if command -v kubectl >/dev/null 2>&1; then
    for overlay in "${OVERLAYS[@]}"; do
        if ! kubectl kustomize "deploy/k8s/overlays/$overlay" >"$WORK/$overlay.yaml" 2>"$WORK/$overlay.err"; then
            say "FAIL: kubectl kustomize deploy/k8s/overlays/$overlay:"
            cat "$WORK/$overlay.err" >&2
            exit 1
        fi
        say "rendered overlay $overlay: $(grep -c '^kind:' "$WORK/$overlay.yaml") objects"
        render_args+=("$overlay=$WORK/$overlay.yaml")
    done
else
    say "kubectl not found: skipping the Kubernetes checks (install kubectl to run them)"
fi

# Compose's own reading of the file (interpolation, configs), with fresh credentials: only
# where the Docker Compose v2 plugin is installed (it needs no engine for this).
if docker compose version >/dev/null 2>&1; then
    bash scripts/gen-secrets.sh --env >"$WORK/compose.env"
    if ! docker compose -f deploy/compose.yaml --env-file "$WORK/compose.env" config -q 2>"$WORK/compose.err"; then
        say "FAIL: docker compose config:"
        cat "$WORK/compose.err" >&2
        exit 1
    fi
    say "docker compose config: deploy/compose.yaml is valid with the variables of gen-secrets.sh --env"
else
    say "docker compose (v2) not found: skipping \`docker compose config\` (the file is still checked below)"
fi

exec "$VENV/bin/python" - "$ROOT" "$K8S_VERSION" "${render_args[@]}" <<'PY'
"""The checks of scripts/check-deploy.sh (see there)."""

import re
import sys
from pathlib import Path

import yaml

ROOT = Path(sys.argv[1])
K8S_VERSION = sys.argv[2]
RENDERED = dict(arg.split("=", 1) for arg in sys.argv[3:])

SERVICES = ["gateway", "seckill-service", "order-service", "stock-service"]

errors = []


def fail(where, msg):
    errors.append(f"{where}: {msg}")


def ok(msg):
    print(f"check-deploy: ok: {msg}", file=sys.stderr)


# ------------------------------------------------------------------------------------------
# compose: its services' own checks are crates/deploy-check tests/compose.rs; here the
# servers' users, which need the stores each service uses.

COMPOSE = ROOT / "deploy/compose.yaml"
try:
    compose = yaml.safe_load(COMPOSE.read_text())
except yaml.YAMLError as e:
    fail("compose.yaml", f"does not parse: {e}")
    compose = {}
services = (compose or {}).get("services") or {}
if not services:
    fail("compose.yaml", "no services")

# The data stores each service uses: those whose URL compose gives it. The Rust tests of
# crates/deploy-check make that exact: each service's own loader refuses a URL of a section it
# does not have, and they fail a service with such a section but no URL for it.
URL_SECTIONS = {"database": "SECKILL__DATABASE__URL", "redis": "SECKILL__REDIS__URL",
                "amqp": "SECKILL__AMQP__URL"}


def env_dict(service):
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(e.split("=", 1) if "=" in e else (e, None) for e in env)
    return env


USES = {b: {section for section, var in URL_SECTIONS.items() if var in env_dict(services.get(b) or {})}
        for b in SERVICES}
AMQP_SERVICES = [b for b in SERVICES if "amqp" in USES[b]]


# ------------------------------------------------------------------------------------------
# The broker's and Redis' users (docs/DEPLOY.md, "Secrets and credentials"): one of each per
# service, allowed only what its code uses. Written credentials, `guest`, Secrets, link keys,
# the users' passwords and mounts: crates/deploy-check tests/credentials.rs.

import hashlib
import json
import subprocess

PEER = {"gateway": "gateway", "seckill-service": "seckill", "order-service": "order", "stock-service": "stock"}
# A compose interpolation with no fallback value: ${NAME}, ${NAME:?message}, ${NAME?message}.
REQUIRED_VAR = re.compile(r"(?<!\$)\$\{([A-Z][A-Z0-9_]*)(?::?\?[^}]*)?\}")


# --- What the services need from RabbitMQ and Redis, read from the code. ---

def amqp_queue_names():
    """AmqpNames method -> name (empty prefix, as deployed; the order TTL as configured)."""
    text = (ROOT / "crates/common/src/amqp.rs").read_text()
    out = {}
    for name, fmt in re.findall(r"pub fn (\w+)\(&self[^)]*\)\s*->\s*String\s*\{\s*format!\(\s*\"\{\}([^\"]+)\"", text):
        out[name] = fmt.replace("{ttl_secs}", "1800")
    if not {"orders_queue", "broadcast_exchange"} <= set(out):
        raise ValueError("crates/common/src/amqp.rs: AmqpNames methods not found")
    return out


def service_text(binary):
    return "\n".join(f.read_text() for f in sorted((ROOT / binary / "src").rglob("*.rs")))


RETRY = ".retry.5000ms"  # any delay: the permissions take \d+ms


def amqp_needs(binary, names):
    """{(permission, resource)} the service's broker user must have, from what its code declares,
    consumes and publishes (crates/infra/src/amqp.rs and consumer.rs say what each needs)."""
    text = service_text(binary)
    need = set()

    def work_queue(q):  # the queue, its .dead and .retry; the two that dead-letter need read
        need.update({("configure", q), ("configure", q + ".dead"), ("configure", q + RETRY),
                     ("read", q), ("read", q + RETRY), ("write", "amq.default")})

    for m in re.findall(r"Declare::WorkQueue\(\s*names\.(\w+)\(\)\s*\)", text):
        work_queue(names[m])
    if "Declare::OrderDelay" in text:
        work_queue(names["order_expire_queue"])
        delay = names["order_delay_queue"]
        need.update({("configure", delay), ("read", delay), ("write", "amq.default")})
    if "Declare::Broadcast" in text:
        need.add(("configure", names["broadcast_exchange"]))
    for m in re.findall(r"Source::Queue\(\s*names\.(\w+)\(\)\s*\)", text):
        need.update({("read", names[m]), ("write", "amq.default")})  # consume; retries go back
    for m in re.findall(r"Source::Fanout\(\s*names\.(\w+)\(\)\s*\)", text):
        gen = "amq.gen-JhKz9bX0cQw"  # an exclusive, server-named queue bound to the exchange
        need.update({("configure", gen), ("write", gen), ("read", gen), ("read", names[m])})
    if re.search(r"\.publish\(\s*Peer::", text):
        need.add(("write", "amq.default"))
    for m in re.findall(r"\.publish_to\(\s*Peer::\w+\s*,\s*&[\w.]*names\.(\w+)\(\)", text):
        need.add(("write", names[m]))
    return need


def amqp_universe(names):
    res = {"amq.default", "amq.gen-JhKz9bX0cQw", "amq.topic", "evil", "seckill.evil"}
    for method, name in names.items():
        res.add(name)
        if method.endswith("_queue") and "delay" not in method:
            res.update({name + ".dead", name + RETRY})
    # Look-alikes catch a pattern that is not anchored (RabbitMQ searches, it does not match).
    res |= {"x" + r for r in res} | {r + ".x" for r in res if not r.startswith("amq.gen-")}
    return {(p, r) for p in ("configure", "write", "read") for r in res}


def check_permissions(where, user, perm, needs, universe):
    """RabbitMQ matches each pattern unanchored (re:run): so does re.search."""
    for kind, resource in sorted(universe):
        try:
            allowed = re.search(perm.get(kind, "^$"), resource) is not None
        except re.error as e:
            fail(where, f"user {user}: {kind} pattern is not a regular expression: {e}")
            return
        if (kind, resource) in needs and not allowed:
            fail(where, f"user {user} needs {kind} on {resource!r} and {perm[kind]!r} refuses it")
        elif (kind, resource) not in needs and allowed:
            fail(where, f"user {user} may {kind} {resource!r}, which its service does not use")


def redis_needs(binary):
    """Redis commands the service runs: its Lua scripts' calls (Redis checks each) and its own."""
    scripts_rs = (ROOT / "crates/common/src/scripts.rs").read_text()
    calls = {name: {c.lower() for c in re.findall(r"redis\.call\('(\w+)'", body)}
             for name, body in re.findall(r'pub const (\w+): &str = r#*"(.*?)"#*;', scripts_rs, re.S)}
    fields = dict(re.findall(r"(\w+): Script::new\(scripts::(\w+)\)", (ROOT / "crates/infra/src/redis.rs").read_text()))
    used = set(re.findall(r"\.scripts\s*\.\s*(\w+)\b(?!\s*\()", service_text(binary)))
    need = {"ping", "script|load", "evalsha"}  # readiness; scripts are loaded, then run by hash
    for f in used:
        if f not in fields or fields[f] not in calls:
            fail("redis", f"{binary} uses script `{f}`, not found in crates/infra/src/redis.rs / scripts.rs")
            continue
        need |= calls[fields[f]]
    # What the service sends itself, outside scripts (seckill-service/src/gate.rs).
    need |= {"seckill-service": {"get", "set", "del", "exists", "zrem", "zrangebyscore", "hsetnx"}}.get(binary, set())
    return need


def parse_acl(where, text):
    users = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if parts[0] != "user" or len(parts) < 2:
            fail(where, f"not an ACL user line: {line[:40]!r}")
            continue
        users[parts[1]] = parts[2:]
    return users


def acl_password(rules):
    return [r for r in rules if r[:1] in (">", "#")]


def check_acl(where, users):
    if set(users) != {"default"} | {PEER[b] for b in SERVICES if "redis" in USES[b]}:
        fail(where, f"users {sorted(users)}: expected default and one per service with a redis section")
    d = users.get("default", [])
    if "nopass" in d or ("off" not in d and len(acl_password(d)) != 1):
        fail(where, "the default user must be off or have one password (not nopass)")
    for b in SERVICES:
        if "redis" not in USES[b]:
            continue
        user, rules = PEER[b], users.get(PEER[b], [])
        if len(acl_password(rules)) != 1 or "nopass" in rules or "on" not in rules:
            fail(where, f"user {user}: needs `on` and exactly one password")
        keys = [r for r in rules if r.startswith(("~", "%")) or r in ("allkeys",)]
        if keys != ["~seckill:*"]:
            fail(where, f"user {user}: keys {keys}, expected only ~seckill:*")
        if "resetchannels" not in rules or any(r.startswith("&") or r == "allchannels" for r in rules):
            fail(where, f"user {user}: no pub/sub channels (resetchannels)")
        cmds = [r for r in rules if r[:1] in "+-" or r in ("allcommands", "nocommands")]
        if not cmds or cmds[0] != "-@all" or any(r.startswith("+@") or r == "allcommands" for r in cmds):
            fail(where, f"user {user}: start from -@all and allow single commands, no categories")
        have = {r[1:].lower() for r in cmds if r.startswith("+")}
        need = redis_needs(b)
        if need - have:
            fail(where, f"user {user} lacks {sorted(need - have)}, which {b} runs")
        if have - need:
            fail(where, f"user {user} may run {sorted(have - need)}, which {b} does not")


def acl_without_passwords(users):
    return {u: [r for r in rules if r[:1] not in (">", "#")] for u, rules in users.items()}


try:
    AMQP_NAMES = amqp_queue_names()
except (OSError, ValueError) as e:
    fail("amqp", str(e))
    AMQP_NAMES = {}
AMQP_UNIVERSE = amqp_universe(AMQP_NAMES)
AMQP_NEEDS = {b: amqp_needs(b, AMQP_NAMES) for b in AMQP_SERVICES} if AMQP_NAMES else {}

# --- compose ---

where = "compose.yaml"
compose_configs = (compose or {}).get("configs") or {}


# Redis: the ACL file's users (its mount and passwords: crates/deploy-check).
# The interpolations' messages hold spaces: ${VAR:?message} counts as ${VAR}.
COMPOSE_ACL = parse_acl(f"{where} configs.redis-acl", REQUIRED_VAR.sub(
    lambda m: "${" + m.group(1) + "}", str((compose_configs.get("redis-acl") or {}).get("content", ""))))
check_acl(f"{where} configs.redis-acl", COMPOSE_ACL)

# RabbitMQ: each service's user's permissions (users, passwords, mounts: crates/deploy-check).
COMPOSE_PERMS = {}
try:
    raw = str((compose_configs.get("rabbitmq-definitions") or {}).get("content", ""))
    defs = json.loads(REQUIRED_VAR.sub(lambda m: "VAR:" + m.group(1), raw.replace("$$", "$")))
    for perm in defs.get("permissions", []):
        if perm.get("user") != "admin":
            COMPOSE_PERMS[perm["user"]] = {k: perm.get(k) for k in ("configure", "write", "read")}
    for b in AMQP_SERVICES:
        if PEER[b] not in COMPOSE_PERMS:
            fail(f"{where} configs.rabbitmq-definitions", f"no permissions for user {PEER[b]}")
        elif b in AMQP_NEEDS:
            check_permissions(f"{where} configs.rabbitmq-definitions", PEER[b], COMPOSE_PERMS[PEER[b]],
                              AMQP_NEEDS[b], AMQP_UNIVERSE)
except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
    fail(f"{where} configs.rabbitmq-definitions", f"not a definitions document: {e}")

# The Kubernetes broker users (deploy/k8s/rabbitmq-users.sh) are the same.
USERS_SH = ROOT / "deploy/k8s/rabbitmq-users.sh"
try:
    sh = USERS_SH.read_text()
    block = re.search(r"cat <<'JSON'\n(.*?)\nJSON\n", sh, re.S).group(1)
    sh_perms = {p["user"]: {k: p[k] for k in ("configure", "write", "read")} for p in json.loads(f"[{block}]")}
    keda = json.loads(re.search(r"^KEDA_PERMISSIONS='(.*)'$", sh, re.M).group(1))
    if sh_perms != COMPOSE_PERMS:
        fail("deploy/k8s/rabbitmq-users.sh", "its permissions differ from deploy/compose.yaml's")
    if keda.get("user") != "keda" or any(keda.get(k) != "^$" for k in ("configure", "write", "read")):
        fail("deploy/k8s/rabbitmq-users.sh", "the keda user may do nothing but count (^$ everywhere)")
    check_permissions("deploy/k8s/rabbitmq-users.sh", "keda", keda, set(), AMQP_UNIVERSE)
except (OSError, AttributeError, json.JSONDecodeError, KeyError) as e:
    fail("deploy/k8s/rabbitmq-users.sh", f"cannot read its permissions: {e}")
ok("compose.yaml: each service's broker user and Redis user allowed only what its code uses")


# ------------------------------------------------------------------------------------------
# Kubernetes

CR_GROUPS = {"postgresql.cnpg.io", "rabbitmq.com", "keda.sh"}
def group_of(api_version):
    return api_version.split("/")[0] if "/" in api_version else ""


def check_overlay(ov, path):
    import kubernetes_validate

    docs = [d for d in yaml.safe_load_all(Path(path).read_text()) if d]

    # Schemas of the built-in kinds.
    checked = 0
    for d in docs:
        if group_of(d["apiVersion"]) in CR_GROUPS:
            continue
        try:
            kubernetes_validate.validate(d, K8S_VERSION, strict=True)
            checked += 1
        except kubernetes_validate.ValidationError as e:
            fail(f"{ov}: {d['kind']}/{d['metadata']['name']}",
                 f"schema (Kubernetes {K8S_VERSION}): {e.message} at {'.'.join(map(str, e.path))}")
        except kubernetes_validate.SchemaNotFoundError:
            fail(f"{ov}: {d['kind']}/{d['metadata']['name']}",
                 f"no Kubernetes {K8S_VERSION} schema for {d['apiVersion']} {d['kind']}")
    crs = [d for d in docs if group_of(d["apiVersion"]) in CR_GROUPS]

    ok(f"overlay {ov}: {checked} objects valid for Kubernetes {K8S_VERSION} (strict); "
       f"{len(crs)} custom resources left to crates/deploy-check ({', '.join(sorted({d['kind'] for d in crs}))})")


for ov, path in RENDERED.items():
    check_overlay(ov, path)

# --- Kubernetes ---

def check_generated_secrets():
    """scripts/gen-secrets.sh --k8s: valid Secrets; its Redis users those of compose, passwords
    consistent. (Its keys, link keys and URLs: crates/deploy-check tests/credentials.rs.)"""
    import kubernetes_validate

    where = "scripts/gen-secrets.sh --k8s"
    try:
        out = subprocess.run(["bash", str(ROOT / "scripts/gen-secrets.sh"), "--k8s", "--namespace", "seckill"],
                             capture_output=True, text=True, check=True).stdout
    except subprocess.CalledProcessError as e:
        fail(where, f"exit {e.returncode}: {e.stderr.strip()[:300]}")
        return
    docs = {}
    for d in yaml.safe_load_all(out):
        if not d:
            continue
        try:
            kubernetes_validate.validate(d, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            fail(where, f"Secret {d.get('metadata', {}).get('name')}: {e.message}")
        docs[d["metadata"]["name"]] = d.get("stringData") or {}
    acl = parse_acl(f"{where} seckill-redis-acl", docs.get("seckill-redis-acl", {}).get("users.acl", ""))
    check_acl(f"{where} seckill-redis-acl", acl)
    if acl_without_passwords(acl) != acl_without_passwords(COMPOSE_ACL):
        fail(where, "the Redis users differ from deploy/compose.yaml's configs.redis-acl")

    def hashed(user, password):
        pw = acl_password(acl.get(user, []))
        return pw == ["#" + hashlib.sha256(password.encode()).hexdigest()]

    if not hashed("default", docs.get("seckill-redis-acl", {}).get("admin-password", "")):
        fail(where, "admin-password does not match the default user's hash")
    for b in SERVICES:
        urls = docs.get(f"{b}-urls", {})
        user = PEER[b]
        if "redis" in USES[b]:
            m = re.fullmatch(r"redis://([^:@]+):([^@]+)@[\w.-]+:\d+", urls.get("redis-url", ""))
            if not m or m.group(1) != user or not hashed(user, m.group(2)):
                fail(where, f"{b}-urls redis-url must log in as {user} with the password of its ACL user")
    ok(f"{where}: {len(docs)} valid Secrets; Redis users and passwords consistent")


if RENDERED:
    check_generated_secrets()

if errors:
    for e in errors:
        print(f"check-deploy: FAIL: {e}", file=sys.stderr)
    print(f"check-deploy: {len(errors)} problem(s)", file=sys.stderr)
    sys.exit(1)
print("check-deploy: all deployment checks passed", file=sys.stderr)
PY

#!/usr/bin/env bash
# scripts/check-deploy.sh: the deployment checks that need no cluster and no Docker engine.
# scripts/test.sh runs it after the tests (deployment_checks); it also runs alone:
#
#   bash scripts/check-deploy.sh
#
#   1. deploy/docker/Dockerfile: one target per service, non-root numeric user.
#   2. deploy/compose.yaml parses; names only images the Dockerfile builds or official server
#      images; servers have health checks; depends_on conditions are sound; the gateway's
#      admin port is not published and X-Forwarded-For not trusted (no proxy there).
#   3. Each overlay of deploy/k8s renders with `kubectl kustomize`; the built-in objects
#      validate against the Kubernetes schemas (kubernetes-validate, pinned, offline, strict);
#      the custom resources (CloudNativePG Cluster and Database, RabbitmqCluster, KEDA
#      ScaledObject and TriggerAuthentication) are checked for the fields set here;
#      probes, graceful shutdown, security context, autoscalers, PDBs, Services, Ingress,
#      NetworkPolicies and the per-overlay settings (dev tokens, quorum queues) are checked;
#      the gateway's admin port (9080: /metrics, detailed /readyz) is declared, scraped by the
#      prometheus.io annotations, reachable from the namespace monitoring only and in no
#      Service or Ingress, and behind the Ingress it trusts at least one X-Forwarded-For hop.
#      Without kubectl this part is skipped with one line.
#   4. Credentials (docs/DEPLOY.md, "Secrets and credentials"), in compose and every overlay:
#      nothing secret is written (no Secret object, no credential in a ConfigMap, env value or
#      URL, no fallback value for a secret variable, nothing that looks like a key), no
#      `guest`; each Deployment and compose service holds the keys of its own links only (the
#      links as compose gives them, which crates/deploy-check holds to the code), receivers
#      from the .accept entries, init containers none, and reads only its own Secrets; each service's broker user may do
#      exactly what its code declares, consumes and publishes (the names from AmqpNames), the
#      same in compose and deploy/k8s/rabbitmq-users.sh; each Redis ACL user runs exactly the
#      commands of its service and its Lua scripts, on seckill:* only, the same in compose and
#      gen-secrets.sh; scripts/gen-secrets.sh makes valid, consistent Secrets with every key
#      the overlays read, and every variable compose reads. `docker compose config` too, where
#      the Compose v2 plugin is installed.
#
# The SECKILL__ variables themselves (Dockerfile, the ConfigMap files, every Deployment,
# compose) are read by each service's own settings loader and validation in the Rust tests of
# crates/deploy-check (`cargo test -p seckill-deploy-check`, part of scripts/test.sh), not here.
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

SERVICES = {  # binary -> standard port
    "gateway": 8080,
    "seckill-service": 8081,
    "order-service": 8082,
    "stock-service": 8083,
}
PRESTOP_SECS = 5
# The gateway's admin listener (admin.port): /metrics and the detailed /readyz, never public.
GATEWAY_ADMIN_PORT = 9080
MONITORING_NAMESPACE = "monitoring"
DEFAULT_SHUTDOWN_SECS = 20
ORDERS_QUEUE = "seckill.orders"

errors = []


def fail(where, msg):
    errors.append(f"{where}: {msg}")


def ok(msg):
    print(f"check-deploy: ok: {msg}", file=sys.stderr)


# ------------------------------------------------------------------------------------------
# Dockerfile

DOCKERFILE = ROOT / "deploy/docker/Dockerfile"
docker_text = DOCKERFILE.read_text()
stages = {}  # name -> lines
current = None
for line in docker_text.splitlines():
    m = re.match(r"^FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.I)
    if m:
        current = (m.group(2) or m.group(1)).lower()
        stages[current] = {"from": m.group(1), "lines": []}
        continue
    if current:
        stages[current]["lines"].append(line)

for binary, port in SERVICES.items():
    st = stages.get(binary)
    if not st:
        fail("Dockerfile", f"no target `{binary}`")
        continue
    body = "\n".join(st["lines"])
    if f"ENTRYPOINT [\"/usr/local/bin/{binary}\"]" not in body:
        fail("Dockerfile", f"target {binary} does not run /usr/local/bin/{binary}")
    if f"EXPOSE {port}" not in body:
        fail("Dockerfile", f"target {binary} does not expose {port}")
    # Walk the stage chain for USER (its ENV is read by crates/deploy-check).
    chain, name = [], binary
    while name in stages:
        chain.append(name)
        name = stages[name]["from"].lower()
    user = None
    for name in reversed(chain):
        for m in re.finditer(r"^USER\s+(\S+)", "\n".join(stages[name]["lines"]), re.M):
            user = m.group(1)
    if not user or not re.fullmatch(r"[1-9]\d*(:\d+)?", user):
        fail("Dockerfile", f"target {binary} must end with a numeric non-root USER, has {user!r}")
if not re.search(r"^FROM rust:1\.95-bookworm|^FROM rust:\$\{RUST_VERSION\}-bookworm", docker_text, re.M) \
        or "ARG RUST_VERSION=1.95" not in docker_text:
    fail("Dockerfile", "the builder must be rust:1.95-bookworm")
if "cargo chef cook" not in docker_text:
    fail("Dockerfile", "no cached dependency layer (cargo chef cook)")
ok(f"Dockerfile: targets {', '.join(SERVICES)}; non-root")

# ------------------------------------------------------------------------------------------
# compose

OFFICIAL_SERVER_IMAGES = {"postgres", "redis", "rabbitmq"}
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
for server in ("postgres", "redis", "rabbitmq"):
    s = services.get(server)
    if not s:
        fail("compose.yaml", f"no `{server}` service")
    elif not (s.get("healthcheck") or {}).get("test"):
        fail("compose.yaml", f"`{server}` has no health check")
    elif s.get("depends_on"):
        fail("compose.yaml", f"`{server}` must start alone (no depends_on)")
for name, s in services.items():
    where = f"compose.yaml services.{name}"
    image, build = s.get("image"), s.get("build")
    if build:
        if isinstance(build, str) or build.get("dockerfile") != "deploy/docker/Dockerfile":
            fail(where, "builds with something other than deploy/docker/Dockerfile")
        elif (COMPOSE.parent / build.get("context", ".")).resolve() != ROOT:
            fail(where, "build context must be the repository root")
        target = build.get("target") if isinstance(build, dict) else None
        if target not in SERVICES or target not in stages:
            fail(where, f"build target {target!r} is not a service target of the Dockerfile")
        if image and not re.fullmatch(rf"seckill/{re.escape(str(target))}(:[\w.-]+)?", image):
            fail(where, f"image {image!r} should be seckill/{target}:<tag>")
    elif image:
        repo = image.split("@")[0].rsplit(":", 1)[0] if ":" in image.split("/")[-1] else image
        if repo not in OFFICIAL_SERVER_IMAGES:
            fail(where, f"image {image!r} is neither built by the Dockerfile nor an official server image")
    else:
        fail(where, "neither image nor build")
    deps = s.get("depends_on") or {}
    if isinstance(deps, list):
        deps = {d: {"condition": "service_started"} for d in deps}
    for dep, spec in deps.items():
        cond = (spec or {}).get("condition", "service_started")
        if dep not in services:
            fail(where, f"depends_on unknown service {dep}")
        elif cond == "service_healthy" and not (services[dep].get("healthcheck") or {}).get("test"):
            fail(where, f"waits for {dep} to be healthy, which has no health check")
        elif cond not in {"service_healthy", "service_completed_successfully", "service_started"}:
            fail(where, f"unknown depends_on condition {cond}")
    env = env_dict(s)
    binary = (build or {}).get("target") if isinstance(build, dict) else None
    if binary in SERVICES:
        if str(env.get("SECKILL__HTTP__PORT", SERVICES[binary])) != str(SERVICES[binary]):
            fail(where, f"SECKILL__HTTP__PORT should be {SERVICES[binary]}")
        if env.get("SECKILL__HTTP__HOST") != "0.0.0.0":
            fail(where, "SECKILL__HTTP__HOST must be 0.0.0.0 in a container")
        if not (s.get("healthcheck") or {}).get("test"):
            fail(where, "no health check (the services wait on each other's)")
        for var, val in env.items():
            if var.startswith("SECKILL__UPSTREAMS__") and isinstance(val, str) and val.startswith("http"):
                for url in val.split(","):
                    m = re.fullmatch(r"https?://([\w.-]+):(\d+)/?", url.strip())
                    if not m or m.group(1) not in SERVICES or int(m.group(2)) != SERVICES[m.group(1)]:
                        fail(where, f"{var}={url!r} is not a compose service at its port")
    elif any(k.startswith("SECKILL__") for k in env):
        fail(where, "SECKILL__ variables on a service that is not one of the four binaries")
for binary in SERVICES:
    s = services.get(binary) or {}
    deps = s.get("depends_on") or {}
    for section, server in (("database", "postgres"), ("redis", "redis"), ("amqp", "rabbitmq")):
        if section in USES[binary] and server not in deps:
            fail(f"compose.yaml services.{binary}", f"uses {server} (its `{section}` section) but does not depend on it")
gw_env = (services.get("gateway") or {}).get("environment") or {}
if not gw_env.get("SECKILL__AUTH__JWT_SECRET"):
    fail("compose.yaml services.gateway", "SECKILL__AUTH__JWT_SECRET is required")
else:
    # The value or the default of `${VAR:-default}`: the gateway refuses a shorter secret.
    jwt = str(gw_env["SECKILL__AUTH__JWT_SECRET"])
    m = re.fullmatch(r"\$\{\w+:-(.*)\}", jwt)
    if len((m.group(1) if m else jwt).encode()) < 32:
        fail("compose.yaml services.gateway", "SECKILL__AUTH__JWT_SECRET (or its default) is shorter than 32 bytes")
# The gateway's admin listener: reachable on the compose network, published only for a
# Prometheus of this file; X-Forwarded-For believed only behind a proxy of this file.
where = "compose.yaml services.gateway"
if gw_env.get("SECKILL__ADMIN__HOST") != "0.0.0.0":
    fail(where, "SECKILL__ADMIN__HOST must be 0.0.0.0 (the admin listener, reachable on the compose network)")
gw_admin = str(gw_env.get("SECKILL__ADMIN__PORT", GATEWAY_ADMIN_PORT))
if gw_admin == str(gw_env.get("SECKILL__HTTP__PORT", SERVICES["gateway"])):
    fail(where, "SECKILL__ADMIN__PORT must differ from the public port")
monitoring = [n for n, s in services.items() if re.search(r"prometheus|grafana-agent|alloy|otel|vmagent",
                                                          f"{n} {s.get('image', '')}", re.I)]
proxies = [n for n, s in services.items() if re.search(r"nginx|traefik|envoy|haproxy|caddy",
                                                       f"{n} {s.get('image', '')}", re.I)]
for spec in (services.get("gateway") or {}).get("ports") or []:
    target = str(spec.get("target") if isinstance(spec, dict) else str(spec).split(":")[-1]).split("/")[0]
    if target == gw_admin and not monitoring:
        fail(where, f"publishes the admin port {gw_admin} (/metrics, detailed /readyz) with no Prometheus in compose")
hops = str(gw_env.get("SECKILL__RATE_LIMIT__TRUSTED_PROXY_HOPS", "0"))
if hops != "0" and not proxies:
    fail(where, f"SECKILL__RATE_LIMIT__TRUSTED_PROXY_HOPS={hops} with no proxy in front: any client "
                "could pick its own rate-limit bucket with X-Forwarded-For")
missing = set(SERVICES) - set(services)
if missing:
    fail("compose.yaml", f"services missing: {', '.join(sorted(missing))}")
ok("compose.yaml: parses; images built here or official; health checks; data stores depended on; "
   "the gateway's admin port unpublished")

# ------------------------------------------------------------------------------------------
# Credentials (docs/DEPLOY.md, "Secrets and credentials"): nothing secret in any manifest or
# in compose.yaml; no `guest`; each service holds the keys of its own links only; one broker
# user and one Redis user per service, allowed only what its code uses; and what
# scripts/gen-secrets.sh makes fits all of it.

import hashlib
import json
import subprocess

PEER = {"gateway": "gateway", "seckill-service": "seckill", "order-service": "order", "stock-service": "stock"}
BINARY_OF = {p: b for b, p in PEER.items()}
LINK_SECRET = "seckill-link-keys"
MIN_KEY_BYTES = 32
# The links each service holds: the SECKILL__TRUST__ variables compose gives it. The Rust tests
# of crates/deploy-check make that exact: each service is given the keys of Peer::sends_to and
# Peer::accepts_from (crates/common/src/trust.rs) and no other, in compose and every overlay.
def trust_of(binary):
    env = env_dict(services.get(binary) or {})
    return {kind: {v.rsplit("__", 1)[-1].lower() for v in env if v.startswith(f"SECKILL__TRUST__{kind.upper()}__")}
            for kind in ("send", "accept")}


TRUST = {b: trust_of(b) for b in SERVICES}
LINKS = sorted({f"{PEER[b]}-{p}" for b, t in TRUST.items() for p in t["send"]}
               | {f"{p}-{PEER[b]}" for b, t in TRUST.items() for p in t["accept"]})
for link in LINKS:
    sender, receiver = link.split("-")
    if receiver not in TRUST[BINARY_OF[sender]]["send"] or sender not in TRUST[BINARY_OF[receiver]]["accept"]:
        fail("trust", f"link {link}: {sender} must sign for {receiver} and {receiver} accept {sender} "
                      "(the services' Trust::new calls disagree)")


def wanted_trust_vars(binary):
    """{variable: link} this service must be given, and nothing else."""
    me, t = PEER[binary], TRUST[binary]
    out = {f"SECKILL__TRUST__SEND__{p.upper()}": f"{me}-{p}" for p in t["send"]}
    out.update({f"SECKILL__TRUST__ACCEPT__{p.upper()}": f"{p}-{me}" for p in t["accept"]})
    return out


def strings_of(node, path=""):
    """Every (path, string) of a parsed YAML document, keys included."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield f"{path}.{k}", str(k)
            yield from strings_of(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from strings_of(v, f"{path}[{i}]")
    elif isinstance(node, str):
        yield path, node


GUEST = re.compile(r"guest", re.I)
# A long run of random-looking characters (letters of both cases and digits): a key or password.
RANDOM_LOOKING = re.compile(r"(?<![\w+/-])(?=[\w+/-]*[a-z])(?=[\w+/-]*[A-Z])(?=[\w+/-]*\d)[\w+/-]{32,}={0,2}(?![\w+/=-])")
DEV_MARKER = re.compile(r"dev-only|change-?me|not-for-production|replace[_-]?me", re.I)
URL_USERINFO = re.compile(r"\b([a-z][a-z0-9+.-]*)://([^\s:/@]*):([^\s@]*)@")
# Variables whose value is a credential.
SECRET_VAR = re.compile(r"JWT_SECRET$|__TRUST__(SEND|ACCEPT)__|(SECRET|PASSWORD|PASSWD)$|(^|_)PASS$"
                        r"|^REDISCLI_AUTH$|^RABBITMQ_DEFAULT_(USER|PASS)$|^RABBITMQ_ERLANG_COOKIE$")
# A compose interpolation with no fallback value: ${NAME}, ${NAME:?message}, ${NAME?message}.
REQUIRED_VAR = re.compile(r"(?<!\$)\$\{([A-Z][A-Z0-9_]*)(?::?\?[^}]*)?\}")
DEFAULTED_VAR = re.compile(r"(?<!\$)\$\{([A-Z][A-Z0-9_]*):?-([^}]*)\}")


def scan_literals(where, doc, compose=False):
    """guest, development markers, credentials in URLs, defaults of secret variables."""
    for path, text in strings_of(doc):
        if GUEST.search(text):
            fail(where, f"{path}: mentions `guest` (no well-known broker user anywhere)")
        if DEV_MARKER.search(text):
            fail(where, f"{path}: a development or placeholder credential ({DEV_MARKER.search(text).group(0)!r})")
        if RANDOM_LOOKING.search(text):
            fail(where, f"{path}: {RANDOM_LOOKING.search(text).group(0)[:6]}... looks like a key or password")
        for m in URL_USERINFO.finditer(text):
            if not compose:
                fail(where, f"{path}: a URL with a password; URLs with credentials come from a Secret")
            elif not REQUIRED_VAR.fullmatch(m.group(3)):
                fail(where, f"{path}: the password of {m.group(1)}://{m.group(2)}:...@ is written out; "
                            "use ${VARIABLE:?...} from deploy/.env")
        for m in DEFAULTED_VAR.finditer(text):
            if re.search(r"SECRET|PASSWORD|PASS$|LINK|KEY|TOKEN", m.group(1)):
                fail(where, f"{path}: ${{{m.group(1)}}} has a fallback value; a credential has none")


def compose_interpolation(value):
    """The variable of a value that is exactly one required interpolation, else None."""
    m = REQUIRED_VAR.fullmatch(str(value or ""))
    return m.group(1) if m else None


def env_of(service):
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(e.split("=", 1) if "=" in e else (e, None) for e in env)
    return env


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
scan_literals(where, {k: v for k, v in (compose or {}).items() if k != "configs"}, compose=True)
compose_configs = (compose or {}).get("configs") or {}
for name, cfg in compose_configs.items():
    content = str((cfg or {}).get("content", ""))
    if GUEST.search(content):
        fail(f"{where} configs.{name}", "mentions `guest`")
    if DEV_MARKER.search(content):
        fail(f"{where} configs.{name}", "holds a development or placeholder credential")
    if "SECKILL_LINK_" in content or "JWT" in content:
        fail(f"{where} configs.{name}", "a server's configuration holds a link key or the JWT secret")
compose_vars = set(REQUIRED_VAR.findall(COMPOSE.read_text()))
for name, svc in services.items():
    sw = f"{where} services.{name}"
    env = env_of(svc)
    for var, value in env.items():
        if SECRET_VAR.search(var) and not compose_interpolation(value):
            fail(sw, f"{var} must be exactly ${{VARIABLE:?...}} from deploy/.env, not a written value")
        for m in re.finditer(r"SECKILL_LINK_([A-Z]+)_([A-Z]+)", str(value)):
            link = f"{m.group(1).lower()}-{m.group(2).lower()}"
            if PEER.get(name) not in link.split("-"):
                fail(sw, f"{var} gets the key of link {link}, which is not one of {name}'s links")
    if name in SERVICES:
        want = wanted_trust_vars(name)
        have = {v for v in env if v.startswith("SECKILL__TRUST__")}
        for var in sorted(set(want) - have):
            fail(sw, f"{var} is missing (link {want[var]}); the service would refuse to start")
        for var in sorted(have - set(want)):
            fail(sw, f"{var}: not a key of {name}'s own links")
        for var in sorted(set(want) & have):
            link = want[var]
            expected = "SECKILL_LINK_" + link.upper().replace("-", "_")
            if compose_interpolation(env[var]) != expected:
                fail(sw, f"{var} must be ${{{expected}:?...}} (link {link})")
        if "amqp" in USES[name]:
            url = str(env.get("SECKILL__AMQP__URL", ""))
            user = PEER[name]
            if not re.fullmatch(rf"amqp://{user}:\$\{{SECKILL_AMQP_PASSWORD_{user.upper()}(:?\?[^}}]*)?\}}@rabbitmq:5672/%2f", url):
                fail(sw, f"SECKILL__AMQP__URL must log in as {user} with ${{SECKILL_AMQP_PASSWORD_{user.upper()}:?...}}")
            if "SECKILL__AMQP__PREFIX" in env:
                fail(sw, "SECKILL__AMQP__PREFIX: the broker users' permissions are for the unprefixed names")
        if "redis" in USES[name]:
            url = str(env.get("SECKILL__REDIS__URL", ""))
            user = PEER[name]
            if not re.fullmatch(rf"redis://{user}:\$\{{SECKILL_REDIS_PASSWORD_{user.upper()}(:?\?[^}}]*)?\}}@redis:6379/?", url):
                fail(sw, f"SECKILL__REDIS__URL must log in as {user} with ${{SECKILL_REDIS_PASSWORD_{user.upper()}:?...}}")
            if "SECKILL__REDIS__PREFIX" in env:
                fail(sw, "SECKILL__REDIS__PREFIX: the Redis users may touch seckill:* keys only")


def mounted_config(server, config):
    for c in (services.get(server) or {}).get("configs") or []:
        if isinstance(c, dict) and c.get("source") == config:
            return c.get("target")
    return None


# Redis: the ACL file, mounted and loaded; the default user guarded.
acl_target = mounted_config("redis", "redis-acl")
redis_cmd = (services.get("redis") or {}).get("command") or []
if not acl_target or "--aclfile" not in redis_cmd or redis_cmd[redis_cmd.index("--aclfile") + 1] != acl_target:
    fail(f"{where} services.redis", "must run with --aclfile pointing at the mounted configs.redis-acl")
# The interpolations' messages hold spaces: ${VAR:?message} counts as ${VAR}.
COMPOSE_ACL = parse_acl(f"{where} configs.redis-acl", REQUIRED_VAR.sub(
    lambda m: "${" + m.group(1) + "}", str((compose_configs.get("redis-acl") or {}).get("content", ""))))
check_acl(f"{where} configs.redis-acl", COMPOSE_ACL)
for user, rules in COMPOSE_ACL.items():
    pw = acl_password(rules)
    if pw != [">${SECKILL_REDIS_PASSWORD_" + ("ADMIN" if user == "default" else user.upper()) + "}"]:
        fail(f"{where} configs.redis-acl", f"user {user}: the password must be ${{SECKILL_REDIS_PASSWORD_...:?...}}")
if not compose_interpolation(env_of(services.get("redis") or {}).get("REDISCLI_AUTH")):
    fail(f"{where} services.redis", "REDISCLI_AUTH (the health check's login) must come from deploy/.env")

# RabbitMQ: the definitions, mounted and loaded at start; no guest; one user per service.
defs_target = mounted_config("rabbitmq", "rabbitmq-definitions")
conf_target = mounted_config("rabbitmq", "rabbitmq-conf")
conf_text = str((compose_configs.get("rabbitmq-conf") or {}).get("content", ""))
if not defs_target or not conf_target or not conf_target.startswith("/etc/rabbitmq/conf.d/") \
        or not re.search(rf"^load_definitions\s*=\s*{re.escape(defs_target or '-')}\s*$", conf_text, re.M):
    fail(f"{where} services.rabbitmq", "must mount configs.rabbitmq-conf in /etc/rabbitmq/conf.d/ "
                                       "with load_definitions = the mounted configs.rabbitmq-definitions")
COMPOSE_PERMS = {}
try:
    raw = str((compose_configs.get("rabbitmq-definitions") or {}).get("content", ""))
    defs = json.loads(REQUIRED_VAR.sub(lambda m: "VAR:" + m.group(1), raw.replace("$$", "$")))
    users = {u["name"]: u for u in defs.get("users", [])}
    if set(users) != {"admin"} | {PEER[b] for b in AMQP_SERVICES}:
        fail(f"{where} configs.rabbitmq-definitions", f"users {sorted(users)}: expected admin and one per service with an amqp section")
    for name, u in users.items():
        if u.get("password") != f"VAR:SECKILL_AMQP_PASSWORD_{name.upper()}" or "password_hash" in u:
            fail(f"{where} configs.rabbitmq-definitions", f"user {name}: password must be ${{SECKILL_AMQP_PASSWORD_{name.upper()}:?...}}")
        if name != "admin" and u.get("tags"):
            fail(f"{where} configs.rabbitmq-definitions", f"user {name}: a service's user has no tags (no management access)")
    for perm in defs.get("permissions", []):
        if perm.get("vhost") != "/":
            fail(f"{where} configs.rabbitmq-definitions", f"user {perm.get('user')}: vhost must be / (the services' %2f)")
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
ok("compose.yaml: no written credential, no guest; each service its own link keys, broker "
   "user and Redis user, each allowed only what its code uses")


# ------------------------------------------------------------------------------------------
# Kubernetes

CR_GROUPS = {"postgresql.cnpg.io", "rabbitmq.com", "keda.sh"}
# Real top-level spec fields of the custom resources (a subset of each CRD), to catch typos.
CR_SPEC_FIELDS = {
    ("postgresql.cnpg.io/v1", "Cluster"): {
        "instances", "imageName", "imageCatalogRef", "primaryUpdateStrategy",
        "primaryUpdateMethod", "storage", "walStorage", "bootstrap", "postgresql", "resources",
        "affinity", "monitoring", "backup", "managed", "description", "enableSuperuserAccess",
        "superuserSecret", "inheritedMetadata", "minSyncReplicas", "maxSyncReplicas",
        "startDelay", "stopDelay", "smartShutdownTimeout", "switchoverDelay",
        "failoverDelay", "topologySpreadConstraints", "priorityClassName", "logLevel",
        "certificates", "externalClusters", "replica", "env", "envFrom", "enablePDB",
        "plugins", "probes", "tablespaces", "serviceAccountTemplate", "projectedVolumeTemplate",
        "ephemeralVolumeSource", "ephemeralVolumesSizeLimit", "seccompProfile",
        "nodeMaintenanceWindow", "livenessProbeTimeout", "imagePullPolicy", "imagePullSecrets",
        "postgresGID", "postgresUID", "replicationSlots",
    },
    ("postgresql.cnpg.io/v1", "Database"): {
        "name", "owner", "cluster", "ensure", "databaseReclaimPolicy", "template", "encoding",
        "locale", "localeProvider", "localeCollate", "localeCType", "icuLocale", "icuRules",
        "builtinLocale", "collationVersion", "isTemplate", "allowConnections",
        "connectionLimit", "tablespace", "extensions", "schemas",
    },
    ("rabbitmq.com/v1beta1", "RabbitmqCluster"): {
        "replicas", "image", "imagePullSecrets", "service", "persistence", "resources",
        "affinity", "tolerations", "rabbitmq", "tls", "override", "skipPostDeploySteps",
        "terminationGracePeriodSeconds", "delayStartSeconds", "secretBackend",
    },
    ("keda.sh/v1alpha1", "ScaledObject"): {
        "scaleTargetRef", "minReplicaCount", "maxReplicaCount", "idleReplicaCount",
        "pollingInterval", "cooldownPeriod", "initialCooldownPeriod", "advanced", "triggers",
        "fallback",
    },
    ("keda.sh/v1alpha1", "TriggerAuthentication"): {
        "secretTargetRef", "env", "podIdentity", "hashiCorpVault", "azureKeyVault",
        "awsSecretManager", "gcpSecretManager", "configMapTargetRef", "boundServiceAccountToken",
    },
}
QUANTITY = re.compile(r"^\d+(\.\d+)?([KMGTPE]i?|m)?$")


def group_of(api_version):
    return api_version.split("/")[0] if "/" in api_version else ""


def labels_match(selector, labels):
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or []:
        val = labels.get(expr["key"])
        op = expr["operator"]
        if op == "In" and val not in expr["values"]:
            return False
        if op == "NotIn" and val in expr["values"]:
            return False
        if op == "Exists" and val is None:
            return False
        if op == "DoesNotExist" and val is not None:
            return False
    return True


def check_custom_resources(ov, docs, by_kind):
    for d in docs:
        key = (d["apiVersion"], d["kind"])
        if group_of(d["apiVersion"]) not in CR_GROUPS:
            continue
        where = f"{ov}: {d['kind']}/{d['metadata']['name']}"
        if key not in CR_SPEC_FIELDS:
            fail(where, f"no check for {d['apiVersion']} {d['kind']}: add one to scripts/check-deploy.sh")
            continue
        spec = d.get("spec") or {}
        unknown = set(spec) - CR_SPEC_FIELDS[key]
        if unknown:
            fail(where, f"unknown spec fields {sorted(unknown)}")
    clusters = {c["metadata"]["name"]: c for c in by_kind.get("Cluster", [])}
    if not clusters:
        fail(ov, "no CloudNativePG Cluster")
    for name, c in clusters.items():
        where = f"{ov}: Cluster/{name}"
        spec = c["spec"]
        if not isinstance(spec.get("instances"), int) or spec["instances"] < 1:
            fail(where, "spec.instances must be an integer >= 1")
        if not QUANTITY.match(str((spec.get("storage") or {}).get("size", ""))):
            fail(where, "spec.storage.size must be a quantity")
        initdb = ((spec.get("bootstrap") or {}).get("initdb")) or {}
        if initdb.get("database") != "seckill_stock" or not initdb.get("owner"):
            fail(where, "bootstrap.initdb must create seckill_stock with an owner")
        params = (spec.get("postgresql") or {}).get("parameters") or {}
        if any(not isinstance(v, str) for v in params.values()):
            fail(where, "postgresql.parameters values must be strings")
    dbs = {d["spec"].get("name"): d for d in by_kind.get("Database", [])}
    for name, d in dbs.items():
        where = f"{ov}: Database/{d['metadata']['name']}"
        cl = clusters.get((d["spec"].get("cluster") or {}).get("name"))
        if not cl:
            fail(where, "spec.cluster.name is not a Cluster of this overlay")
        elif d["spec"].get("owner") != cl["spec"]["bootstrap"]["initdb"].get("owner"):
            fail(where, "owner differs from the cluster's application role")
    if "seckill_order" not in dbs:
        fail(ov, "no CloudNativePG Database seckill_order")
    rabbits = by_kind.get("RabbitmqCluster", [])
    if len(rabbits) != 1:
        fail(ov, "expected one RabbitmqCluster")
    for r in rabbits:
        where = f"{ov}: RabbitmqCluster/{r['metadata']['name']}"
        spec = r["spec"]
        if not isinstance(spec.get("replicas"), int) or spec["replicas"] % 2 == 0:
            fail(where, "spec.replicas must be an odd integer (quorum queues need a majority)")
        if not QUANTITY.match(str((spec.get("persistence") or {}).get("storage", ""))):
            fail(where, "spec.persistence.storage must be a quantity")
        if not isinstance((spec.get("rabbitmq") or {}).get("additionalConfig", ""), str):
            fail(where, "rabbitmq.additionalConfig must be a string")
    auths = {t["metadata"]["name"]: t for t in by_kind.get("TriggerAuthentication", [])}
    for t in auths.values():
        for ref in t["spec"].get("secretTargetRef") or []:
            if not all(ref.get(k) for k in ("parameter", "name", "key")):
                fail(f"{ov}: TriggerAuthentication/{t['metadata']['name']}",
                     "secretTargetRef entries need parameter, name and key")
    deployments = {d["metadata"]["name"] for d in by_kind.get("Deployment", [])}
    for so in by_kind.get("ScaledObject", []):
        where = f"{ov}: ScaledObject/{so['metadata']['name']}"
        spec = so["spec"]
        if spec["scaleTargetRef"].get("name") not in deployments:
            fail(where, "scaleTargetRef is not a Deployment of this overlay")
        lo, hi = spec.get("minReplicaCount", 0), spec.get("maxReplicaCount", 100)
        if not (isinstance(lo, int) and isinstance(hi, int) and 1 <= lo <= hi):
            fail(where, "needs 1 <= minReplicaCount <= maxReplicaCount")
        rabbit = [t for t in spec.get("triggers") or [] if t.get("type") == "rabbitmq"]
        if not rabbit:
            fail(where, "no rabbitmq trigger")
        for t in rabbit:
            md = t.get("metadata") or {}
            if md.get("queueName") != ORDERS_QUEUE:
                fail(where, f"rabbitmq trigger queueName must be {ORDERS_QUEUE}")
            if md.get("mode") not in {"QueueLength", "MessageRate"} or not re.fullmatch(r"\d+(\.\d+)?", str(md.get("value", ""))):
                fail(where, "rabbitmq trigger needs mode QueueLength|MessageRate and a numeric string value")
            if md.get("protocol", "auto") not in {"amqp", "http", "auto"}:
                fail(where, "rabbitmq trigger protocol must be amqp, http or auto")
            if (t.get("authenticationRef") or {}).get("name") not in auths and not md.get("host"):
                fail(where, "rabbitmq trigger has no host and no TriggerAuthentication of this overlay")
        for t in spec.get("triggers") or []:
            if t.get("type") == "cpu" and t.get("metricType") not in {"Utilization", "AverageValue"}:
                fail(where, "cpu trigger needs metricType Utilization or AverageValue")


def env_of_container(ov, c, configmaps, secrets):
    """The container's variables: {name: value, or None when it comes from a Secret}."""
    env = {}
    for src in c.get("envFrom") or []:
        if "configMapRef" in src:
            cm = configmaps.get(src["configMapRef"]["name"])
            if cm is None:
                fail(ov, f"container {c['name']}: ConfigMap {src['configMapRef']['name']} is not rendered")
                continue
            env.update(cm.get("data") or {})
        elif "secretRef" in src:
            sec = secrets.get(src["secretRef"]["name"])
            if sec is None:
                fail(ov, f"container {c['name']}: envFrom Secret {src['secretRef']['name']} cannot be checked; use secretKeyRef per variable")
                continue
            env.update({k: None for k in {**(sec.get("data") or {}), **(sec.get("stringData") or {})}})
    for e in c.get("env") or []:
        env[e["name"]] = e.get("value")
    return env


def secret_refs(c):
    for e in c.get("env") or []:
        ref = ((e.get("valueFrom") or {}).get("secretKeyRef")) or None
        if ref:
            yield e["name"], ref["name"], ref["key"]


def rule_covers_port(rule, name, number):
    """Whether a NetworkPolicy ingress rule opens the container port `name`/`number`."""
    ports = rule.get("ports")
    if not ports:
        return True  # no ports: all of them
    for p in ports:
        port, end = p.get("port"), p.get("endPort")
        if port is None or port == name or port == number:
            return True
        if isinstance(port, int) and end is not None and port <= number <= end:
            return True
    return False


def sources_of(rule):
    """Who an ingress rule admits, by name: "*" (anyone), "ns:<name>", or "other"."""
    srcs = rule.get("from")
    if not srcs:
        return {"*"}
    out = set()
    for src in srcs:
        ns = ((src.get("namespaceSelector") or {}).get("matchLabels") or {}).get("kubernetes.io/metadata.name")
        if ns and "podSelector" not in src and "ipBlock" not in src:
            out.add(f"ns:{ns}")
        else:
            out.add("other")
    return out


def check_metrics_and_admin(ov, deployments, services_, ingresses, pols, app_config):
    """The scrape annotations point at the port serving /metrics (the gateway's admin port), the
    namespace monitoring may reach it, and the gateway's admin port is in no Service, no Ingress
    and admitted to nobody else. Behind the Ingress the gateway trusts one proxy hop."""
    gw = app_config.get("gateway", {})
    where = f"{ov}: Deployment/gateway"
    dep = deployments.get("gateway")
    if not dep:
        return
    c = dep["spec"]["template"]["spec"]["containers"][0]
    admin = [p for p in c.get("ports") or [] if p.get("name") == "admin"]
    if not admin or admin[0].get("containerPort") != GATEWAY_ADMIN_PORT:
        fail(where, f"no containerPort {GATEWAY_ADMIN_PORT} named admin (the admin listener)")
    if str(gw.get("SECKILL__ADMIN__PORT", "")) != str(GATEWAY_ADMIN_PORT):
        fail(where, f"SECKILL__ADMIN__PORT must be {GATEWAY_ADMIN_PORT} (the container port named admin)")
    if gw.get("SECKILL__ADMIN__HOST") != "0.0.0.0":
        fail(where, "SECKILL__ADMIN__HOST must be 0.0.0.0 (Prometheus scrapes the pod address)")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        port = ((c.get(probe) or {}).get("httpGet") or {}).get("port")
        if port in ("admin", GATEWAY_ADMIN_PORT):
            fail(where, f"{probe} on the admin port: probe the public port (its /readyz keeps the status codes)")
    try:
        hops = int(gw.get("SECKILL__RATE_LIMIT__TRUSTED_PROXY_HOPS", 0))
    except ValueError:
        hops = 0
    if ingresses and hops < 1:
        fail(f"{ov}: gateway", "behind the Ingress SECKILL__RATE_LIMIT__TRUSTED_PROXY_HOPS must be at least 1 "
                               "(with 0 every client shares the controller's address, one rate-limit bucket)")

    # Scrape annotations: the port that serves /metrics.
    for binary, port in SERVICES.items():
        d = deployments.get(binary)
        if not d:
            continue
        ann = d["spec"]["template"]["metadata"].get("annotations") or {}
        want = GATEWAY_ADMIN_PORT if binary == "gateway" else port
        if ann.get("prometheus.io/scrape") != "true" or ann.get("prometheus.io/path") != "/metrics" \
                or ann.get("prometheus.io/port") != str(want):
            fail(f"{ov}: Deployment/{binary}", f"prometheus.io annotations must scrape /metrics on port {want}")

    # No Service selecting the gateway's pods carries the admin port.
    labels = dep["spec"]["template"]["metadata"].get("labels") or {}
    for name, svc in services_.items():
        if not labels_match({"matchLabels": svc["spec"].get("selector") or {}}, labels):
            continue
        for p in svc["spec"].get("ports") or []:
            target = p.get("targetPort", p.get("port"))
            if target in ("admin", GATEWAY_ADMIN_PORT) or p.get("port") == GATEWAY_ADMIN_PORT:
                fail(f"{ov}: Service/{name}", f"exposes the gateway's admin port {GATEWAY_ADMIN_PORT}")
    # The Ingress routes to the gateway Service's public port only.
    gw_svc_ports = {p.get("name"): p for p in (services_.get("gateway") or {"spec": {}})["spec"].get("ports") or []}
    for ing in ingresses:
        backends = [p["backend"] for r in ing["spec"].get("rules") or [] for p in (r.get("http") or {}).get("paths") or []]
        if ing["spec"].get("defaultBackend"):
            backends.append(ing["spec"]["defaultBackend"])
        for b in backends:
            port = (b.get("service") or {}).get("port") or {}
            svc_port = gw_svc_ports.get(port.get("name")) if "name" in port else \
                next((p for p in gw_svc_ports.values() if p.get("port") == port.get("number")), None)
            if not svc_port or svc_port.get("targetPort", svc_port.get("port")) not in ("http", SERVICES["gateway"]):
                fail(f"{ov}: Ingress/{ing['metadata']['name']}", "must route to the gateway Service's http port only")

    # NetworkPolicies: the namespace monitoring reaches each service's metrics port; nobody
    # else reaches the gateway's admin port.
    monitoring = f"ns:{MONITORING_NAMESPACE}"
    for binary, port in SERVICES.items():
        d = deployments.get(binary)
        if not d:
            continue
        lbl = d["spec"]["template"]["metadata"].get("labels") or {}
        name, number = ("admin", GATEWAY_ADMIN_PORT) if binary == "gateway" else ("http", port)
        reach = set()
        for p in pols:
            if labels_match(p["spec"]["podSelector"], lbl):
                for rule in p["spec"].get("ingress") or []:
                    if rule_covers_port(rule, name, number):
                        reach |= sources_of(rule)
        if monitoring not in reach and "*" not in reach:
            fail(f"{ov}: NetworkPolicy", f"the namespace {MONITORING_NAMESPACE} cannot reach {binary}'s "
                                         f"/metrics (port {number})")
        if binary == "gateway" and reach - {monitoring}:
            fail(f"{ov}: NetworkPolicy", f"the gateway's admin port {number} admits {sorted(reach)}; "
                                         f"only the namespace {MONITORING_NAMESPACE}")


def check_overlay(ov, path):
    import kubernetes_validate

    docs = [d for d in yaml.safe_load_all(Path(path).read_text()) if d]
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)

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
    check_custom_resources(ov, docs, by_kind)

    configmaps = {c["metadata"]["name"]: c for c in by_kind.get("ConfigMap", [])}
    secrets = {s["metadata"]["name"]: s for s in by_kind.get("Secret", [])}
    deployments = {d["metadata"]["name"]: d for d in by_kind.get("Deployment", [])}
    services_ = {s["metadata"]["name"]: s for s in by_kind.get("Service", [])}
    hpas = by_kind.get("HorizontalPodAutoscaler", [])
    scaled = by_kind.get("ScaledObject", [])
    pdbs = by_kind.get("PodDisruptionBudget", [])
    used_secret_keys = {}
    app_config = {}

    for binary, port in SERVICES.items():
        where = f"{ov}: Deployment/{binary}"
        dep = deployments.get(binary)
        if not dep:
            fail(ov, f"no Deployment {binary}")
            continue
        if "replicas" in dep["spec"]:
            fail(where, "sets spec.replicas, which its autoscaler owns (an apply would reset it)")
        pod = dep["spec"]["template"]
        pspec = pod["spec"]
        labels = pod["metadata"].get("labels") or {}
        if not labels_match(dep["spec"]["selector"], labels):
            fail(where, "selector does not match the pod labels")
        containers = pspec["containers"]
        if len(containers) != 1:
            fail(where, "expected one container")
        c = containers[0]
        if not re.fullmatch(rf"(.+/)?seckill/{binary}(:[\w.-]+)?|seckill/{binary}(:[\w.-]+)?", c["image"]):
            fail(where, f"image {c['image']} is not seckill/{binary}")
        env = env_of_container(where, c, configmaps, secrets)
        app_config[binary] = env
        for var, name, key in secret_refs(c):
            used_secret_keys.setdefault(name, set()).add(key)
            sec = secrets.get(name)
            if sec is not None and key not in {**(sec.get("data") or {}), **(sec.get("stringData") or {})}:
                fail(where, f"{var}: Secret {name} has no key {key}")
        if env.get("SECKILL__HTTP__HOST", "0.0.0.0") != "0.0.0.0":
            fail(where, "SECKILL__HTTP__HOST must be 0.0.0.0")
        if int(env.get("SECKILL__HTTP__PORT") or port) != port:
            fail(where, f"SECKILL__HTTP__PORT must be {port}")
        if not any(p.get("containerPort") == port and p.get("name") == "http" for p in c.get("ports") or []):
            fail(where, f"no containerPort {port} named http")
        # Probes.
        for probe, path_ in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
            got = ((c.get(probe) or {}).get("httpGet") or {}).get("path")
            if got != path_:
                fail(where, f"{probe} must GET {path_}, has {got}")
        # Graceful shutdown.
        pre = (((c.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {}).get("command")
        if not pre or pre[0] != "sleep":
            fail(where, "preStop must pause with exec sleep (the image has /bin/sleep)")
            pause = 0
        else:
            pause = int(pre[1])
        drain = int(env.get("SECKILL__HTTP__SHUTDOWN_TIMEOUT_SECS") or DEFAULT_SHUTDOWN_SECS)
        grace = pspec.get("terminationGracePeriodSeconds", 30)
        if grace <= pause + drain:
            fail(where, f"terminationGracePeriodSeconds {grace} must exceed preStop {pause} s + drain {drain} s")
        # Security.
        psc, csc = pspec.get("securityContext") or {}, c.get("securityContext") or {}
        if not (psc.get("runAsNonRoot") or csc.get("runAsNonRoot")):
            fail(where, "runAsNonRoot is not set")
        if not csc.get("readOnlyRootFilesystem"):
            fail(where, "readOnlyRootFilesystem is not set")
        if csc.get("allowPrivilegeEscalation") is not False:
            fail(where, "allowPrivilegeEscalation must be false")
        if pspec.get("enableServiceLinks") is not False:
            fail(where, "enableServiceLinks must be false (keeps the environment to what is set)")
        res = c.get("resources") or {}
        for kind_ in ("requests", "limits"):
            for r in ("cpu", "memory"):
                if not QUANTITY.match(str((res.get(kind_) or {}).get(r, ""))):
                    fail(where, f"resources.{kind_}.{r} missing")
        # Service.
        svc = services_.get(binary)
        if not svc:
            fail(where, "no Service of the same name")
        elif not labels_match({"matchLabels": svc["spec"]["selector"]}, labels) \
                or not any(p.get("port") == port for p in svc["spec"]["ports"]):
            fail(f"{ov}: Service/{binary}", f"must select the pods and serve port {port}")
        # Autoscaling: exactly one autoscaler.
        owners = [f"HorizontalPodAutoscaler/{h['metadata']['name']}" for h in hpas
                  if h["spec"]["scaleTargetRef"]["kind"] == "Deployment"
                  and h["spec"]["scaleTargetRef"]["name"] == binary]
        owners += [f"ScaledObject/{s['metadata']['name']}" for s in scaled
                   if s["spec"]["scaleTargetRef"]["name"] == binary]
        if len(owners) != 1:
            fail(where, f"needs exactly one autoscaler, has {owners or 'none'}")
        for h in hpas:
            if h["spec"]["scaleTargetRef"]["name"] == binary:
                if not any(m.get("type") == "Resource" and m["resource"]["name"] == "cpu"
                           for m in h["spec"].get("metrics") or []):
                    fail(f"{ov}: HorizontalPodAutoscaler/{binary}", "no CPU metric")
                if ov == "prod" and binary in ("gateway", "seckill-service") and h["spec"].get("minReplicas", 1) < 2:
                    fail(f"{ov}: HorizontalPodAutoscaler/{binary}", "prod needs minReplicas >= 2")
        if not any(labels_match(p["spec"]["selector"], labels) for p in pdbs):
            fail(where, "no PodDisruptionBudget selects its pods")

    # gateway essentials, per overlay.
    gw = app_config.get("gateway", {})
    if "SECKILL__AUTH__JWT_SECRET" not in gw:
        fail(f"{ov}: gateway", "SECKILL__AUTH__JWT_SECRET is not set (from a Secret)")
    dev_tokens = str(gw.get("SECKILL__AUTH__DEV_TOKENS", "")).lower()
    if ov == "prod" and dev_tokens != "false":
        fail(f"{ov}: gateway", "SECKILL__AUTH__DEV_TOKENS must be set to false explicitly")
    if ov == "dev" and dev_tokens != "true":
        fail(f"{ov}: gateway", "dev overlay should turn dev tokens on")
    for var, val in gw.items():
        if var.startswith("SECKILL__UPSTREAMS__") and isinstance(val, str) and val.startswith("http"):
            m = re.fullmatch(r"http://([\w-]+):(\d+)", val)
            if not m or m.group(1) not in SERVICES or int(m.group(2)) != SERVICES[m.group(1)]:
                fail(f"{ov}: gateway", f"{var}={val} is not a Service at its port")
    # Every service with an `amqp` section declares queues another one declares too, and a
    # queue keeps the type it was first declared with: all must agree.
    quorum = {b: str(app_config.get(b, {}).get("SECKILL__AMQP__QUORUM_QUEUES", "false")).lower()
              for b in AMQP_SERVICES}
    if len(set(quorum.values())) > 1:
        fail(ov, f"the services with an amqp section must agree on amqp.quorum_queues: {quorum}")
    if ov == "prod" and set(quorum.values()) != {"true"}:
        fail(ov, f"prod needs SECKILL__AMQP__QUORUM_QUEUES=true for {', '.join(AMQP_SERVICES)}")
    if ov == "prod":
        for r in by_kind.get("RabbitmqCluster", []):
            if r["spec"].get("replicas", 1) < 3:
                fail(ov, "prod RabbitmqCluster needs 3 replicas for quorum queues")
    # Secrets: rendered ones have the keys; KEDA's reference too.
    for t in by_kind.get("TriggerAuthentication", []):
        for ref in t["spec"].get("secretTargetRef") or []:
            used_secret_keys.setdefault(ref["name"], set()).add(ref["key"])
    for name, keys in used_secret_keys.items():
        sec = secrets.get(name)
        if sec is not None:
            have = {**(sec.get("data") or {}), **(sec.get("stringData") or {})}
            for k in keys - set(have):
                fail(f"{ov}: Secret/{name}", f"no key {k}")
    # Ingress: the gateway only.
    for ing in by_kind.get("Ingress", []):
        for rule in ing["spec"].get("rules") or []:
            for p in (rule.get("http") or {}).get("paths") or []:
                if p["backend"]["service"]["name"] != "gateway":
                    fail(f"{ov}: Ingress/{ing['metadata']['name']}", "routes to something other than the gateway")
    if not by_kind.get("Ingress"):
        fail(ov, "no Ingress for the gateway")
    # NetworkPolicies: deny by default, then who may reach each service.
    pols = by_kind.get("NetworkPolicy", [])

    def pod_labels(binary):
        return deployments[binary]["spec"]["template"]["metadata"].get("labels") or {}

    for binary in SERVICES:
        if binary not in deployments:
            continue
        lbl = pod_labels(binary)
        selecting = [p for p in pols if labels_match(p["spec"]["podSelector"], lbl)]
        if not any(set(p["spec"].get("policyTypes") or []) >= {"Ingress", "Egress"} for p in selecting):
            fail(f"{ov}: NetworkPolicy", f"no policy isolates {binary} in both directions")
        admitted = set()
        for p in selecting:
            for rule in p["spec"].get("ingress") or []:
                srcs = rule.get("from")
                if not srcs:
                    admitted.add("*")
                for src in srcs or []:
                    if "namespaceSelector" in src and "podSelector" not in src:
                        continue  # monitoring namespace
                    for other in SERVICES:
                        if other in deployments and "podSelector" in src and labels_match(src["podSelector"], pod_labels(other)):
                            admitted.add(other)
        expected = {
            "gateway": {"*"},
            "seckill-service": {"gateway"},
            "order-service": {"gateway", "seckill-service"},
            "stock-service": {"gateway", "seckill-service", "order-service"},
        }[binary]
        if admitted != expected:
            fail(f"{ov}: NetworkPolicy", f"{binary} admits {sorted(admitted)}, expected {sorted(expected)}")
    check_metrics_and_admin(ov, deployments, services_, by_kind.get("Ingress", []), pols, app_config)
    ok(f"overlay {ov}: {checked} objects valid for Kubernetes {K8S_VERSION} (strict); "
       f"{len(crs)} custom resources checked ({', '.join(sorted({d['kind'] for d in crs}))}); "
       "services' variables, probes, shutdown, security, autoscalers, PDBs, Ingress, NetworkPolicies; "
       "the gateway's admin port scraped, never exposed; trusted proxy hops behind the Ingress")
    return used_secret_keys


used_by_overlay = {}
for ov, path in RENDERED.items():
    used_by_overlay[ov] = check_overlay(ov, path)

# --- Kubernetes ---

# Who may read which Secret; any other reference fails.
SECRET_READERS = {
    "gateway-auth": {"Deployment/gateway"},
    LINK_SECRET: {f"Deployment/{b}" for b in SERVICES},
    **{f"{b}-urls": {f"Deployment/{b}"} for b in SERVICES if b != "gateway"},
    "seckill-pg-credentials": {"Cluster/seckill-pg"},
    "seckill-redis-acl": {"StatefulSet/seckill-redis"},
    "keda-rabbitmq": {"TriggerAuthentication/order-service-rabbitmq"},
}
# Secrets of SECRET_READERS made by something else than scripts/gen-secrets.sh (cert-manager,
# an operator): their readers are checked, their keys are not expected from gen-secrets.sh.
MADE_ELSEWHERE = set()
POD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet", "Pod", "CronJob"}


def pod_spec(d):
    if d["kind"] == "Pod":
        return d.get("spec") or {}
    if d["kind"] == "CronJob":
        return d["spec"]["jobTemplate"]["spec"]["template"].get("spec") or {}
    return ((d.get("spec") or {}).get("template") or {}).get("spec") or {}


def secret_reads(d):
    """(container or None, init?, variable or None, secret, key or None) for each read of a Secret."""
    spec = pod_spec(d)
    for init, cs in ((True, spec.get("initContainers") or []), (False, spec.get("containers") or [])):
        for c in cs:
            for e in c.get("env") or []:
                ref = (e.get("valueFrom") or {}).get("secretKeyRef")
                if ref:
                    # An optional key (absent but during a rotation) is not one to generate.
                    yield c["name"], init, e["name"], ref["name"], None if ref.get("optional") else ref.get("key")
            for src in c.get("envFrom") or []:
                if "secretRef" in src:
                    yield c["name"], init, None, src["secretRef"]["name"], None
    for v in spec.get("volumes") or []:
        sources = [v["secret"]] if "secret" in v else [s["secret"] for s in (v.get("projected") or {}).get("sources") or [] if "secret" in s]
        for s in sources:
            keys = [i["key"] for i in s.get("items") or []] or [None]
            for k in keys:
                yield None, False, None, s.get("secretName") or s.get("name"), k


def check_overlay_credentials(ov, path):
    """Returns {secret: {keys}} the overlay reads (for the gen-secrets check)."""
    docs = [d for d in yaml.safe_load_all(Path(path).read_text()) if d]
    reads = {}
    for d in docs:
        ident = f"{d['kind']}/{d['metadata']['name']}"
        where = f"{ov}: {ident}"
        scan_literals(where, d)
        if d["kind"] == "Secret":
            fail(where, "a Secret in the manifests; Secrets are made by scripts/gen-secrets.sh and never committed")
        if d["kind"] == "ConfigMap":
            for var in (d.get("data") or {}):
                if SECRET_VAR.search(var):
                    fail(where, f"{var} is a credential: it belongs in a Secret, not a ConfigMap")
                if var in ("SECKILL__AMQP__PREFIX", "SECKILL__REDIS__PREFIX"):
                    fail(where, f"{var}: the broker and Redis users are for the unprefixed names")
        if d["kind"] == "RabbitmqCluster":
            conf = str(((d.get("spec") or {}).get("rabbitmq") or {}).get("additionalConfig", ""))
            if re.search(r"^\s*(default_user|default_pass|default_users\.)", conf, re.M):
                fail(where, "additionalConfig sets a default user; the operator generates it, the services have their own")
        found = []
        if d["kind"] in POD_KINDS:
            found = list(secret_reads(d))
        elif d["kind"] == "TriggerAuthentication":
            found = [(None, False, None, r["name"], r["key"]) for r in d["spec"].get("secretTargetRef") or []]
        elif d["kind"] == "Cluster":
            s = (((d.get("spec") or {}).get("bootstrap") or {}).get("initdb") or {}).get("secret")
            if s:
                found = [(None, False, None, s["name"], "username"), (None, False, None, s["name"], "password")]
        for container, init, var, secret, key in found:
            if ident not in SECRET_READERS.get(secret, set()):
                fail(where, f"reads Secret {secret}, which is not for it "
                            f"(readers: {', '.join(sorted(SECRET_READERS.get(secret, []))) or 'none: unknown Secret'})")
            if key is None and var is None:
                fail(where, f"takes Secret {secret} whole; take single keys (secretKeyRef or items)")
            elif key is not None:
                reads.setdefault(secret, set()).add(key)
        if d["kind"] != "Deployment" or d["metadata"]["name"] not in SERVICES:
            continue
        binary = d["metadata"]["name"]
        me = PEER[binary]
        want = wanted_trust_vars(binary)
        got = {}
        for container, init, var, secret, key in found:
            if secret != LINK_SECRET:
                continue
            link = (key or "").removesuffix(".accept")
            if me not in link.split("-"):
                fail(where, f"{var or 'a volume'} gets the key of link {link}, which is not one of {binary}'s links")
                continue
            if init:
                fail(where, f"init container {container}: needs no link key (it only migrates)")
                continue
            if var not in want or want[var] != link:
                fail(where, f"{var}: Secret key {key} is the link {link}, not this variable's")
                continue
            expected_key = link + (".accept" if "__ACCEPT__" in var else "")
            if key != expected_key:
                fail(where, f"{var} must read {expected_key} (receivers read the .accept list, for rotation)")
            got[var] = key
        for c in pod_spec(d).get("initContainers", []) + pod_spec(d).get("containers", []):
            for e in c.get("env") or []:
                if SECRET_VAR.search(e["name"]) and "valueFrom" not in e:
                    fail(where, f"{e['name']} is written in the manifest; it comes from a Secret")
        for var in sorted(set(want) - set(got)):
            fail(where, f"{var} is missing (link {want[var]}); the service would refuse to start")
    return reads


def check_generated_secrets(reads_by_overlay):
    """scripts/gen-secrets.sh: valid Secrets, every key the overlays read, consistent values."""
    import kubernetes_validate

    where = "scripts/gen-secrets.sh --k8s"
    try:
        out = subprocess.run(["bash", str(ROOT / "scripts/gen-secrets.sh"), "--k8s", "--namespace", "seckill"],
                             capture_output=True, text=True, check=True).stdout
        again = subprocess.run(["bash", str(ROOT / "scripts/gen-secrets.sh"), "--k8s"],
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
    if out == again or not docs:
        fail(where, "two runs gave the same output")
    for ov, reads in reads_by_overlay.items():
        for secret, keys in reads.items():
            if secret in MADE_ELSEWHERE:
                continue
            missing = keys - set(docs.get(secret, {}))
            if missing:
                fail(where, f"{ov} reads Secret {secret} keys {sorted(missing)}, which it does not make")
    links = docs.get(LINK_SECRET, {})
    values = []
    for link in LINKS:
        k, acc = links.get(link, ""), links.get(link + ".accept")
        if len(k.encode()) < MIN_KEY_BYTES or "," in k:
            fail(where, f"link key {link}: at least {MIN_KEY_BYTES} bytes and no comma")
        if acc != k:
            fail(where, f"{link}.accept must start equal to {link}")
        values.append(k)
    if set(links) != set(LINKS) | {f"{l}.accept" for l in LINKS}:
        fail(where, f"{LINK_SECRET} keys differ from the links {LINKS}")
    jwt = docs.get("gateway-auth", {}).get("jwt-secret", "")
    if len(jwt.encode()) < MIN_KEY_BYTES:
        fail(where, "jwt-secret shorter than 32 bytes")
    if len(set(values + [jwt])) != len(values) + 1:
        fail(where, "two keys are equal")
    acl = parse_acl(f"{where} seckill-redis-acl", docs.get("seckill-redis-acl", {}).get("users.acl", ""))
    check_acl(f"{where} seckill-redis-acl", acl)
    if acl_without_passwords(acl) != acl_without_passwords(COMPOSE_ACL):
        fail(where, "the Redis users differ from deploy/compose.yaml's configs.redis-acl")

    def hashed(user, password):
        pw = acl_password(acl.get(user, []))
        return pw == ["#" + hashlib.sha256(password.encode()).hexdigest()]

    if not hashed("default", docs.get("seckill-redis-acl", {}).get("admin-password", "")):
        fail(where, "admin-password does not match the default user's hash")
    pg = docs.get("seckill-pg-credentials", {})
    for b in SERVICES:
        urls = docs.get(f"{b}-urls", {})
        user = PEER[b]
        if "amqp" in USES[b]:
            m = re.fullmatch(r"amqp://([^:@]+):([^@]+)@seckill-rabbitmq:5672/%2f", urls.get("amqp-url", ""))
            if not m or m.group(1) != user or len(m.group(2)) < 32:
                fail(where, f"{b}-urls amqp-url must log in as {user} with a long random password")
        if "redis" in USES[b]:
            m = re.fullmatch(r"redis://([^:@]+):([^@]+)@[\w.-]+:\d+", urls.get("redis-url", ""))
            if not m or m.group(1) != user or not hashed(user, m.group(2)):
                fail(where, f"{b}-urls redis-url must log in as {user} with the password of its ACL user")
        if "database" in USES[b]:
            m = re.fullmatch(r"postgres://([^:@]+):([^@]+)@seckill-pg-rw:5432/(\w+)", urls.get("database-url", ""))
            if not m or (m.group(1), m.group(2)) != (pg.get("username"), pg.get("password")):
                fail(where, f"{b}-urls database-url must use the role of seckill-pg-credentials")
    m = re.fullmatch(r"amqp://keda:([^@]+)@seckill-rabbitmq:5672/%2f", docs.get("keda-rabbitmq", {}).get("host", ""))
    if not m:
        fail(where, "keda-rabbitmq host must log in as keda")
    ok(f"{where}: {len(docs)} valid Secrets with every key the overlays read; "
       f"{len(LINKS)} link keys, users and passwords consistent")


def check_generated_env():
    where = "scripts/gen-secrets.sh --env"
    try:
        out = subprocess.run(["bash", str(ROOT / "scripts/gen-secrets.sh"), "--env"],
                             capture_output=True, text=True, check=True).stdout
    except subprocess.CalledProcessError as e:
        fail(where, f"exit {e.returncode}: {e.stderr.strip()[:300]}")
        return
    env = dict(line.split("=", 1) for line in out.splitlines() if line and not line.startswith("#"))
    for var in sorted(compose_vars - set(env)):
        fail(where, f"does not set {var}, which deploy/compose.yaml needs")
    for var, value in env.items():
        if "$" in value or " " in value or not value:
            fail(where, f"{var}: empty, or a character compose would interpolate")
        if var.startswith(("SECKILL_LINK_", "SECKILL_JWT")) and len(value.encode()) < MIN_KEY_BYTES:
            fail(where, f"{var}: shorter than {MIN_KEY_BYTES} bytes")
    links = {f"SECKILL_LINK_{l.upper().replace('-', '_')}" for l in LINKS}
    if {v for v in env if v.startswith("SECKILL_LINK_")} != links:
        fail(where, f"the link keys differ from the links {LINKS}")
    ok(f"{where}: sets every variable deploy/compose.yaml reads ({len(compose_vars)})")


reads_by_overlay = {}
for ov, path in RENDERED.items():
    reads_by_overlay[ov] = check_overlay_credentials(ov, path)
    ok(f"overlay {ov}: no Secret or written credential, no guest; each Deployment reads its own "
       "Secrets and only the keys of its own links")
if RENDERED:
    check_generated_secrets(reads_by_overlay)
check_generated_env()


if errors:
    for e in errors:
        print(f"check-deploy: FAIL: {e}", file=sys.stderr)
    print(f"check-deploy: {len(errors)} problem(s)", file=sys.stderr)
    sys.exit(1)
print("check-deploy: all deployment checks passed", file=sys.stderr)
PY

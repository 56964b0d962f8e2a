#!/usr/bin/env bash
# scripts/check-deploy.sh: the deployment checks that need no cluster and no Docker engine.
# scripts/test.sh runs it after the tests (deployment_checks); it also runs alone:
#
#   bash scripts/check-deploy.sh
#
#   1. deploy/docker/Dockerfile: one target per service, non-root numeric user, and only
#      SECKILL__ variables every service accepts.
#   2. deploy/compose.yaml parses; names only images the Dockerfile builds or official server
#      images; servers have health checks; depends_on conditions are sound; every SECKILL__
#      variable given to a service is a key of a configuration section that service has.
#   3. Each overlay of deploy/k8s renders with `kubectl kustomize`; the built-in objects
#      validate against the Kubernetes schemas (kubernetes-validate, pinned, offline, strict);
#      the custom resources (CloudNativePG Cluster and Database, RabbitmqCluster, KEDA
#      ScaledObject and TriggerAuthentication) are checked for the fields set here; the
#      SECKILL__ variables of every Deployment (ConfigMaps and env) belong to its service;
#      probes, graceful shutdown, security context, autoscalers, PDBs, Services, Ingress,
#      NetworkPolicies and the per-overlay settings (dev tokens, quorum queues) are checked.
#      Without kubectl this part is skipped with one line.
#
# The settings each service accepts are read from the Rust sources (its Settings struct and
# the section structs), because every struct has deny_unknown_fields: one wrong variable stops
# a service at start.
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
# What the brief of issue 5 lists; used only if the Rust sources cannot be read.
FALLBACK_SECTIONS = {
    "gateway": {"http", "log", "auth", "dev_token", "upstreams", "rate_limit"},
    "seckill-service": {"http", "log", "redis", "amqp", "upstreams", "seckill"},
    "order-service": {"http", "log", "database", "redis", "amqp", "upstreams", "order"},
    "stock-service": {"http", "log", "database"},
}
PRESTOP_SECS = 5
DEFAULT_SHUTDOWN_SECS = 20
ORDERS_QUEUE = "seckill.orders"

errors = []


def fail(where, msg):
    errors.append(f"{where}: {msg}")


def ok(msg):
    print(f"check-deploy: ok: {msg}", file=sys.stderr)


# ------------------------------------------------------------------------------------------
# What each service accepts, from its Settings struct.

STRUCT_RE = re.compile(r"pub struct (\w+)\s*\{(.*?)\n\}", re.S)
FIELD_RE = re.compile(r"^\s*pub\s+(\w+)\s*:\s*([^,]+?)\s*,\s*$", re.M)
ENUM_RE = re.compile(r"pub enum (\w+)\s*\{(.*?)\n\}", re.S)


def structs_of(text):
    out = {}
    for name, body in STRUCT_RE.findall(text):
        if "#[serde(flatten" in body or "#[serde(rename" in body or "#[serde(alias" in body:
            raise ValueError(f"struct {name} renames or flattens fields")
        out[name] = dict(FIELD_RE.findall(body))
    return out


def enums_of(text):
    out = {}
    for name, body in ENUM_RE.findall(text):
        variants = re.findall(r"^\s*(\w+)\s*,?\s*$", body, re.M)
        out[name] = {v.lower() for v in variants}
    return out


def load_settings():
    """binary -> {section: {key: rust type}}, and the enums (for value checks)."""
    common = (ROOT / "crates/common/src/config.rs").read_text()
    accepted, enums = {}, enums_of(common)
    for binary in SERVICES:
        text = (ROOT / binary / "src/configuration.rs").read_text()
        structs = {**structs_of(common), **structs_of(text)}
        enums.update(enums_of(text))
        top = structs.get("Settings")
        if not top:
            raise ValueError(f"{binary}: no `pub struct Settings`")
        sections = {}
        for section, ty in top.items():
            if ty not in structs:
                raise ValueError(f"{binary}: section {section} has unknown type {ty}")
            sections[section] = structs[ty]
        accepted[binary] = sections
    return accepted, enums


try:
    ACCEPTED, ENUMS = load_settings()
    ok("settings read from the Rust sources: " + "; ".join(
        f"{b} [{', '.join(s)}]" for b, s in ACCEPTED.items()))
except (OSError, ValueError) as e:
    print(f"check-deploy: note: cannot read the settings structs ({e}); checking sections only",
          file=sys.stderr)
    ACCEPTED, ENUMS = {b: {s: None for s in secs} for b, secs in FALLBACK_SECTIONS.items()}, {}


def check_value(where, var, ty, value):
    value = str(value)
    base = ty.removeprefix("Option<").removesuffix(">")
    if base in {"u16", "u32", "u64", "usize"}:
        if not re.fullmatch(r"\d+", value):
            fail(where, f"{var}={value!r} must be a non-negative integer")
    elif base == "bool":
        if value.lower() not in {"true", "false"}:
            fail(where, f"{var}={value!r} must be true or false")
    elif base in ENUMS:
        if value.lower() not in ENUMS[base]:
            fail(where, f"{var}={value!r} must be one of {sorted(ENUMS[base])}")


AMQP_SERVICES = [b for b in SERVICES if "amqp" in ACCEPTED[b]]
# Sections whose built-in URL points at loopback: in a container the URL must be given.
URL_SECTIONS = {"database": "SECKILL__DATABASE__URL", "redis": "SECKILL__REDIS__URL",
                "amqp": "SECKILL__AMQP__URL"}


def check_urls_given(where, binary, env):
    for section, var in URL_SECTIONS.items():
        if section in ACCEPTED[binary] and var not in env:
            fail(where, f"{binary} has a `{section}` section but {var} is not set "
                        "(the built-in default is loopback, so it would not start)")


def check_env(where, binary, env):
    """env: {name: value or None (from a Secret)}. Checks every SECKILL__ name."""
    sections = ACCEPTED[binary]
    for var, value in env.items():
        if not var.startswith("SECKILL"):
            continue
        if not var.startswith("SECKILL__"):
            fail(where, f"{var}: the services read SECKILL__SECTION__KEY (two underscores)")
            continue
        parts = var[len("SECKILL__"):].lower().split("__")
        if len(parts) != 2 or not all(parts):
            fail(where, f"{var}: expected SECKILL__SECTION__KEY")
            continue
        section, key = parts
        if section not in sections:
            fail(where, f"{var}: {binary} has no section `{section}` "
                        f"(it has {', '.join(sorted(sections))}); it would refuse to start")
            continue
        fields = sections[section]
        if fields is None:
            continue
        if key not in fields:
            fail(where, f"{var}: section `{section}` of {binary} has no key `{key}` "
                        f"(it has {', '.join(sorted(fields))}); it would refuse to start")
            continue
        if value is not None:
            check_value(where, var, fields[key], value)


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
    # Walk the stage chain for USER and ENV.
    chain, name = [], binary
    while name in stages:
        chain.append(name)
        name = stages[name]["from"].lower()
    user = None
    env = {}
    for name in reversed(chain):
        text = "\n".join(stages[name]["lines"]).replace("\\\n", " ")
        for m in re.finditer(r"^USER\s+(\S+)", text, re.M):
            user = m.group(1)
        for m in re.finditer(r"^ENV\s+(.*)$", text, re.M):
            for k, v in re.findall(r"(\w+)=(\S+)", m.group(1)):
                env[k] = v
    if not user or not re.fullmatch(r"[1-9]\d*(:\d+)?", user):
        fail("Dockerfile", f"target {binary} must end with a numeric non-root USER, has {user!r}")
    check_env(f"Dockerfile (target {binary})", binary, env)
if not re.search(r"^FROM rust:1\.95-bookworm|^FROM rust:\$\{RUST_VERSION\}-bookworm", docker_text, re.M) \
        or "ARG RUST_VERSION=1.95" not in docker_text:
    fail("Dockerfile", "the builder must be rust:1.95-bookworm")
if "cargo chef cook" not in docker_text:
    fail("Dockerfile", "no cached dependency layer (cargo chef cook)")
ok(f"Dockerfile: targets {', '.join(SERVICES)}; non-root; SECKILL__ variables accepted")

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
    env = s.get("environment") or {}
    if isinstance(env, list):
        env = dict(e.split("=", 1) if "=" in e else (e, None) for e in env)
    binary = (build or {}).get("target") if isinstance(build, dict) else None
    if binary in SERVICES:
        check_env(where, binary, env)
        check_urls_given(where, binary, env)
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
        if section in ACCEPTED[binary] and server not in deps:
            fail(f"compose.yaml services.{binary}", f"uses {server} (its `{section}` section) but does not depend on it")
gw_env = (services.get("gateway") or {}).get("environment") or {}
if not gw_env.get("SECKILL__AUTH__JWT_SECRET"):
    fail("compose.yaml services.gateway", "SECKILL__AUTH__JWT_SECRET is required")
missing = set(SERVICES) - set(services)
if missing:
    fail("compose.yaml", f"services missing: {', '.join(sorted(missing))}")
ok("compose.yaml: parses; images built here or official; health checks; SECKILL__ variables accepted")

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
        check_env(where, binary, env)
        check_urls_given(where, binary, env)
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
    ok(f"overlay {ov}: {checked} objects valid for Kubernetes {K8S_VERSION} (strict); "
       f"{len(crs)} custom resources checked ({', '.join(sorted({d['kind'] for d in crs}))}); "
       "services' variables, probes, shutdown, security, autoscalers, PDBs, Ingress, NetworkPolicies")
    return used_secret_keys


used_by_overlay = {}
for ov, path in RENDERED.items():
    used_by_overlay[ov] = check_overlay(ov, path)

# The prod Secret template: valid, and it has every key the prod overlay reads.
example = ROOT / "deploy/k8s/overlays/prod/secrets.example.yaml"
if "prod" in used_by_overlay:
    import kubernetes_validate

    have = {}
    for d in yaml.safe_load_all(example.read_text()):
        if not d:
            continue
        try:
            kubernetes_validate.validate(d, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            fail("overlays/prod/secrets.example.yaml", e.message)
        have[d["metadata"]["name"]] = set((d.get("stringData") or {}) | (d.get("data") or {}))
    for name, keys in used_by_overlay["prod"].items():
        if not keys <= have.get(name, set()):
            fail("overlays/prod/secrets.example.yaml", f"Secret {name} lacks {sorted(keys - have.get(name, set()))}")
    ok("overlays/prod/secrets.example.yaml has every Secret key prod reads")

if errors:
    for e in errors:
        print(f"check-deploy: FAIL: {e}", file=sys.stderr)
    print(f"check-deploy: {len(errors)} problem(s)", file=sys.stderr)
    sys.exit(1)
print("check-deploy: all deployment checks passed", file=sys.stderr)
PY

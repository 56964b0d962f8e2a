#!/usr/bin/env bash
# scripts/check-deploy.sh: the deployment checks that need no cluster and no Docker engine.
# scripts/test.sh runs it after the tests (deployment_checks); it also runs alone:
#
#   bash scripts/check-deploy.sh
#
#   1. Each overlay of deploy/k8s renders with `kubectl kustomize`; the built-in objects
#      validate against the Kubernetes schemas (kubernetes-validate, pinned, offline, strict).
#      Without kubectl this part is skipped with one line.
#   2. `docker compose config`, where the Compose v2 plugin is installed.
#   3. The Secrets of `scripts/gen-secrets.sh --k8s` validate against the same schemas.
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
#   tests/custom_resources.rs  the CloudNativePG, RabbitMQ and KEDA resources' fields;
#   tests/grafana.rs           deploy/grafana/seckill.json (and docs/OPERATIONS.md's PromQL)
#                              names only metrics the services export, and each has a panel;
#   tests/permissions.rs       each service's broker user may do exactly what its code's
#                              broker_use declares, consumes and publishes (compose and
#                              deploy/k8s/rabbitmq-users.sh, whose keda user may do nothing);
#                              each Redis user runs exactly its service's REDIS_USE (its
#                              commands, its Lua scripts' calls), on seckill:* only (compose and
#                              gen-secrets.sh --k8s, passwords consistent with the URLs).
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
    say "docker compose (v2) not found: skipping \`docker compose config\` (crates/deploy-check still reads the file)"
fi

# The Secrets gen-secrets.sh makes for a cluster, validated below with the manifests.
if ! bash scripts/gen-secrets.sh --k8s --namespace seckill >"$WORK/secrets.yaml" 2>"$WORK/secrets.err"; then
    say "FAIL: scripts/gen-secrets.sh --k8s:"
    cat "$WORK/secrets.err" >&2
    exit 1
fi

exec "$VENV/bin/python" - "$K8S_VERSION" "$WORK/secrets.yaml" "${render_args[@]}" <<'PY'
"""Strict schema validation (kubernetes-validate) for scripts/check-deploy.sh (see there)."""

import sys
from pathlib import Path

import kubernetes_validate
import yaml

K8S_VERSION = sys.argv[1]
SECRETS = sys.argv[2]
RENDERED = dict(arg.split("=", 1) for arg in sys.argv[3:])
# Custom resources have no schema here: crates/deploy-check tests/custom_resources.rs.
CR_GROUPS = {"postgresql.cnpg.io", "rabbitmq.com", "keda.sh"}

errors = []


def validate(where, doc):
    """True when `doc` is valid for Kubernetes K8S_VERSION (strict: no unknown field)."""
    name = f"{where}: {doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        return True
    except kubernetes_validate.ValidationError as e:
        errors.append(f"{name}: schema (Kubernetes {K8S_VERSION}): {e.message} at {'.'.join(map(str, e.path))}")
    except kubernetes_validate.SchemaNotFoundError:
        errors.append(f"{name}: no Kubernetes {K8S_VERSION} schema for {doc.get('apiVersion')} {doc.get('kind')}")
    return False


def ok(msg):
    print(f"check-deploy: ok: {msg}", file=sys.stderr)


for ov, path in RENDERED.items():
    docs = [d for d in yaml.safe_load_all(Path(path).read_text()) if d]
    crs = [d for d in docs if d["apiVersion"].split("/")[0] in CR_GROUPS]
    checked = sum(validate(ov, d) for d in docs if d not in crs)
    ok(f"overlay {ov}: {checked} objects valid for Kubernetes {K8S_VERSION} (strict); "
       f"{len(crs)} custom resources left to crates/deploy-check ({', '.join(sorted({d['kind'] for d in crs}))})")

secrets = [d for d in yaml.safe_load_all(Path(SECRETS).read_text()) if d]
valid = sum(validate("scripts/gen-secrets.sh --k8s", d) for d in secrets)
ok(f"scripts/gen-secrets.sh --k8s: {valid} of {len(secrets)} Secrets valid for Kubernetes {K8S_VERSION} (strict)")

if errors:
    for e in errors:
        print(f"check-deploy: FAIL: {e}", file=sys.stderr)
    print(f"check-deploy: {len(errors)} problem(s)", file=sys.stderr)
    sys.exit(1)
print("check-deploy: all deployment checks passed", file=sys.stderr)
PY

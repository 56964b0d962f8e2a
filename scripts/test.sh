#!/usr/bin/env bash
# scripts/test.sh: run the whole test suite against real servers.
#
#   1. ensure_servers (scripts/lib.sh): PostgreSQL, Redis, RabbitMQ answer; ensure_browser:
#      Chromium and ChromeDriver for the browser tests (crates/e2e/tests/browser), installed
#      from Debian's chromium and chromium-driver when missing (SECKILL_SKIP_BROWSER_TESTS=1
#      skips them); ensure_schemathesis: schemathesis for the API check against the OpenAPI
#      document (crates/e2e/tests/api_check.rs), in a venv outside the clone with the pins of
#      scripts/requirements-api-check.txt (SECKILL_SKIP_API_CHECK=1 skips it); ensure_nginx:
#      nginx for the web-server test, from Debian's nginx-light when missing
#      (SECKILL_SKIP_WEB_SERVER_TEST=1 skips it); ensure_redis_cluster: a local Redis Cluster of
#      three primaries for the cluster tests (SECKILL_SKIP_REDIS_CLUSTER_TESTS=1 skips them);
#   2. exports SECKILL_TEST_DATABASE_URL (a server URL without a database name; each test makes
#      its own databases), SECKILL_TEST_REDIS_URL and SECKILL_TEST_AMQP_URL;
#   3. cargo nextest run --workspace --no-fail-fast (with --profile ci when CI is set) when
#      cargo-nextest is installed, else cargo test --workspace --no-fail-fast.
#      SECKILL_TEST_RUNNER=cargo-test forces cargo test. The workspace includes
#      crates/deploy-check: every environment the deployment files give a service, read by that
#      service's own settings loader and validation.
#   4. the deployment checks (scripts/check-deploy.sh), then the fast cases of the fault suite
#      (scripts/faults.sh --quick on the debug binaries: private servers, kill -9 of
#      order-service, a Redis FLUSHALL with requests queued and with a waiting room, replicas
#      killed); the fault cases only on a whole run, not when arguments select tests.
# Extra arguments go to the test runner unchanged, e.g.
#   scripts/test.sh -p stock-service            (either runner)
#   scripts/test.sh -E 'test(oversell)'         (nextest filter)
# Exits with the test runner's status.
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"
cd "$SECKILL_ROOT"

# Deployment checks run after the tests pass: the Dockerfile, deploy/compose.yaml and the
# Kubernetes overlays (rendered with kubectl kustomize, validated against the Kubernetes
# schemas); see scripts/check-deploy.sh. Returns non-zero on failure.
deployment_checks() {
    seckill_say "bash scripts/check-deploy.sh"
    bash "$SECKILL_ROOT/scripts/check-deploy.sh"
}

run_tests() {
    local -a profile=()
    if [[ ${SECKILL_TEST_RUNNER:-} != cargo-test ]] && cargo nextest --version >/dev/null 2>&1; then
        if [[ -n ${CI:-} && ${CI:-} != false && ${CI:-} != 0 ]]; then
            profile=(--profile ci)
        fi
        seckill_say "cargo nextest run --workspace --no-fail-fast ${profile[*]} $*"
        cargo nextest run --workspace --no-fail-fast "${profile[@]}" "$@"
    else
        seckill_say "cargo test --workspace --no-fail-fast $* (cargo-nextest not used)"
        cargo test --workspace --no-fail-fast "$@"
    fi
}

ensure_servers || exit 1
require_cargo || exit 1
# Exports SECKILL_CHROMIUM and SECKILL_CHROMEDRIVER for the browser tests.
ensure_browser || exit 1
# Exports SECKILL_SCHEMATHESIS for the API check.
ensure_schemathesis || exit 1
# Exports SECKILL_NGINX for the web-server test.
ensure_nginx || exit 1
# Exports SECKILL_TEST_REDIS_CLUSTER_URL for the tests on a Redis Cluster.
ensure_redis_cluster || exit 1

export SECKILL_TEST_DATABASE_URL=$SECKILL_PG_URL
export SECKILL_TEST_REDIS_URL=$SECKILL_REDIS_URL
export SECKILL_TEST_AMQP_URL=$SECKILL_AMQP_URL

# The fault suite's fast cases: scripts/faults.sh --quick (its own private servers; the ones above
# are not touched), on the debug binaries the tests just built (what they check is what
# survives a failure, not speed; a release build would add minutes to every run, and
# scripts/faults.sh run alone uses one). FAULTS_BIN_DIR set by the caller wins. Returns
# non-zero when a case broke an invariant.
fault_checks() {
    if [[ -z ${FAULTS_BIN_DIR:-} ]]; then
        seckill_say "cargo build --bins (the fault suite's binaries)"
        cargo build --bins || return 1
        local dir=${CARGO_TARGET_DIR:-target}/debug
        [[ $dir == /* ]] || dir=$SECKILL_ROOT/$dir
        export FAULTS_BIN_DIR=$dir
    fi
    seckill_say "FAULTS_BIN_DIR=$FAULTS_BIN_DIR bash scripts/faults.sh --quick"
    bash "$SECKILL_ROOT/scripts/faults.sh" --quick
}

# Each step says how long it took: a slow CI run shows where its minutes went.
timed() { # timed LABEL COMMAND...
    local label=$1 started=$SECONDS rc=0
    shift
    "$@" || rc=$?
    seckill_say "$label: $((SECONDS - started)) s"
    return "$rc"
}

status=0
timed "tests (build and run)" run_tests "$@" || status=$?
if ((status == 0)); then
    timed "deployment checks" deployment_checks || status=$?
fi
if ((status == 0 && $# == 0)); then
    timed "fault suite (quick)" fault_checks || status=$?
fi
exit "$status"

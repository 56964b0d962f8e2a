#!/usr/bin/env bash
# scripts/faults.sh: the fault suite. It proves from outside that the system loses nothing when
# a service or a server dies: for each fault case a fresh sale, buyers arriving for several
# seconds (retrying 503, 504 and connection errors as real clients do), the fault injected
# mid-sale, the service or server brought back, then every accepted buyer's result awaited and
# checked against the gateway's answers and the databases.
#
#   scripts/faults.sh                every case (about 11 minutes after the build); writes
#                                    docs/RELIABILITY.md
#   scripts/faults.sh --quick        the CI subset (`seckill-faults --list --quick`), small
#                                    sales; writes nothing
#   scripts/faults.sh CASE...        the named cases (`seckill-faults --list` names them)
#   scripts/faults.sh clean          stops what an interrupted run left, keeps its logs in
#                                    run/faults-logs/ and removes run/faults/ (down.sh calls it)
#
# The driver, `seckill-faults` (crates/faults), does the work: it never touches the user's
# servers or data, but starts its OWN PostgreSQL (initdb, port 25432), Redis (26379, no
# persistence) and RabbitMQ (a second node, AMQP 26672), all in run/faults/, and the four
# binaries on 28080-28084 (+10k for replica k); at the end everything is stopped, the logs
# are kept in run/faults-logs/ and run/faults/ is removed. This script installs the servers'
# programs when they are missing (Debian packages, as root), builds the release binaries (or
# uses FAULTS_BIN_DIR's), and runs it. FAULTS_PG_PORT, FAULTS_REDIS_PORT, FAULTS_AMQP_PORT,
# FAULTS_RABBITMQ_DIST_PORT and FAULTS_HTTP_PORT move the ports (`seckill-faults --help`).
# Exits non-zero when a case broke an invariant (each violation is named) or the suite could
# not run.
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"
cd "$SECKILL_ROOT"

say() { printf 'faults: %s\n' "$*" >&2; }

# The driver: FAULTS_BIN_DIR's, else a release build.
binaries() {
    if [[ -n ${FAULTS_BIN_DIR:-} ]]; then
        SECKILL_BIN_DIR=$(cd -- "$FAULTS_BIN_DIR" && pwd)
        say "using the binaries in $SECKILL_BIN_DIR (FAULTS_BIN_DIR), no build"
    else
        build_release || exit 1
    fi
    DRIVER=$SECKILL_BIN_DIR/seckill-faults
}

if [[ ${1:-} == clean ]]; then
    [[ -d run/faults ]] || exit 0
    SECKILL_BIN_DIR=${FAULTS_BIN_DIR:-${CARGO_TARGET_DIR:-target}/release}
    for driver in "$SECKILL_BIN_DIR/seckill-faults" "${SECKILL_BIN_DIR%/release}/debug/seckill-faults"; do
        [[ -x $driver ]] && exec "$driver" --clean
    done
    say "run/faults/ is there but no seckill-faults binary to clean it; build it (cargo build --release --bins)"
    exit 1
fi

# The servers' programs: installed from Debian packages when missing and possible.
need_program() { # need_program PROGRAM PACKAGE
    if compgen -G "/usr/lib/postgresql/*/bin/$1" >/dev/null || [[ -x /usr/lib/rabbitmq/bin/$1 ]] ||
        _seckill_bin "$1" >/dev/null; then
        return 0
    fi
    if _seckill_can_install; then
        _seckill_apt_install "$2" || { say "could not install $2 (see run/apt.log)" && exit 1; }
    else
        say "$1 not found: install it as root with: apt-get install -y $2"
        exit 1
    fi
}
listing=0
for arg in "$@"; do
    if [[ $arg == --list || $arg == -h || $arg == --help ]]; then listing=1; fi
done
if ((listing == 0)); then
    need_program pg_ctl postgresql
    need_program psql postgresql-client
    need_program redis-server redis-server
    need_program rabbitmq-server rabbitmq-server
    if ((EUID == 0)) && ! id postgres >/dev/null 2>&1; then
        say "there is no postgres OS user to run the private PostgreSQL as; install the postgresql package (apt-get install -y postgresql)"
        exit 1
    fi
fi
binaries
exec "$DRIVER" --bin-dir "$SECKILL_BIN_DIR" "$@"

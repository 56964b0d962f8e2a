# shellcheck shell=bash
# scripts/lib.sh: functions shared by up.sh, down.sh, test.sh and bench.sh. Source it, don't run it.
#
#   ensure_servers         make sure PostgreSQL, Redis and RabbitMQ answer: use a running server,
#                          else start an installed one, else install it (Debian/Ubuntu, apt-get,
#                          as root or with passwordless sudo) and start it; else print one line
#                          saying what to run and return non-zero.
#   stop_started_servers   stop exactly the servers that ensure_servers started (down.sh).
#   require_cargo          find cargo (also in ~/.cargo/bin) or say how to install Rust.
#   ensure_browser         make sure Chromium and ChromeDriver are there for the browser tests
#                          (crates/e2e/tests/browser): use them, else install Debian's chromium
#                          and chromium-driver (apt-get, as root or with passwordless sudo);
#                          else print one line saying what to run and return non-zero. Exports
#                          SECKILL_CHROMIUM and SECKILL_CHROMEDRIVER. SECKILL_SKIP_BROWSER_TESTS=1
#                          skips all this (and the tests skip themselves).
#   ensure_schemathesis    schemathesis for the API check (crates/e2e/tests/api_check.rs): a venv
#                          under ${XDG_CACHE_HOME:-~/.cache}/seckill/ with the versions pinned in
#                          scripts/requirements-api-check.txt, made on first use (python3 -m venv,
#                          pip from PyPI; Debian's python3-venv installed when missing and
#                          possible) and reused after; else one line saying what to run. Exports
#                          SECKILL_SCHEMATHESIS (one set by the user wins). SECKILL_SKIP_API_CHECK=1
#                          skips all this (and the test skips itself).
#   ensure_nginx           nginx for the web-server test (crates/e2e/tests/e2e/web_server.rs, the
#                          deployments' nginx.conf in front of a real gateway): use it, else
#                          install Debian's nginx-light (as for the browser); else one line
#                          saying what to run. Exports SECKILL_NGINX. SECKILL_SKIP_WEB_SERVER_TEST=1
#                          skips all this (and the test skips itself).
#   ensure_redis_cluster   a local Redis Cluster of three primaries for the cluster tests: the one
#                          at SECKILL_REDIS_CLUSTER_PORTS (default "7001 7002 7003") when it
#                          answers and is whole, else three redis-server --cluster-enabled on
#                          those loopback ports (under run/redis-cluster/, recorded for down.sh)
#                          joined by redis-cli --cluster create. Exports
#                          SECKILL_TEST_REDIS_CLUSTER_URL (its nodes, comma-separated).
#                          SECKILL_SKIP_REDIS_CLUSTER_TESTS=1 skips all this (and those tests
#                          skip themselves).
#   build_release          cargo build --release --bins; sets SECKILL_BIN_DIR (up.sh, bench.sh).
#
# Exported for callers (values already set by the user are kept):
#   SECKILL_PG_URL     PostgreSQL server URL without a database name
#                      (default postgres://postgres:postgres@127.0.0.1:5432)
#   SECKILL_REDIS_URL  (default $SECKILL__REDIS__URL, else redis://127.0.0.1:6379)
#   SECKILL_AMQP_URL   (default $SECKILL__AMQP__URL, else amqp://guest:guest@127.0.0.1:5672/%2f)
#
# The servers are probed with their own clients, which read the URLs themselves: pg_isready and
# psql, redis-cli, rabbitmq-diagnostics. A server is started (or installed) here only where a
# developer's machine needs one: PostgreSQL on a loopback address of SECKILL_PG_URL, Redis and
# RabbitMQ at their built-in URLs; any other is the user's, and this file says what does not
# answer. Servers this file starts are started on loopback only and without systemd; each is
# recorded in run/servers.started so that down.sh stops those and nothing else. This file sets
# no shell options and never exits: its functions return non-zero, so it is safe to source.

SECKILL_ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
SECKILL_RUN_DIR=$SECKILL_ROOT/run
SECKILL_STARTED_FILE=$SECKILL_RUN_DIR/servers.started

SECKILL_PG_URL=${SECKILL_PG_URL:-postgres://postgres:postgres@127.0.0.1:5432}
SECKILL_PG_URL=${SECKILL_PG_URL%/}
SECKILL_REDIS_URL=${SECKILL_REDIS_URL:-${SECKILL__REDIS__URL:-redis://127.0.0.1:6379}}
SECKILL_AMQP_URL=${SECKILL_AMQP_URL:-${SECKILL__AMQP__URL:-amqp://guest:guest@127.0.0.1:5672/%2f}}
export SECKILL_PG_URL SECKILL_REDIS_URL SECKILL_AMQP_URL

# Bounded waits, in seconds, for a server this file starts.
SECKILL_PG_START_TIMEOUT=${SECKILL_PG_START_TIMEOUT:-60}
SECKILL_REDIS_START_TIMEOUT=${SECKILL_REDIS_START_TIMEOUT:-30}
SECKILL_RABBITMQ_START_TIMEOUT=${SECKILL_RABBITMQ_START_TIMEOUT:-120}

_seckill_apt_updated=
_seckill_pg_installed=

# ---------------------------------------------------------------------------------------------
# Small helpers

seckill_say() { printf 'seckill: %s\n' "$*" >&2; }

# A URL with its password replaced by ***, for messages.
seckill_redact() { printf '%s' "$1" | sed -E 's#^([a-z+]+://[^:/@]*:)[^@/]*@#\1***@#'; }

# Path of a program, also looking in the sbin folders a normal user's PATH lacks.
_seckill_bin() {
    local d
    if command -v "$1" 2>/dev/null; then return 0; fi
    for d in /usr/local/sbin /usr/sbin /sbin; do
        if [[ -x $d/$1 ]]; then
            printf '%s\n' "$d/$1"
            return 0
        fi
    done
    return 1
}

_seckill_can_root() {
    [[ $EUID -eq 0 ]] && return 0
    command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null
}

_seckill_as_root() {
    if [[ $EUID -eq 0 ]]; then "$@"; else sudo -n "$@"; fi
}

# Runs a command as another OS user (root: runuser or su; others: sudo -n -u).
_seckill_as_user() {
    local user=$1
    shift
    if [[ $EUID -ne 0 ]]; then
        sudo -n -u "$user" "$@"
    elif command -v runuser >/dev/null 2>&1 || [[ -x /usr/sbin/runuser || -x /sbin/runuser ]]; then
        "$(_seckill_bin runuser)" -u "$user" -- "$@"
    else
        su "$user" -s /bin/sh -c "$(printf '%q ' "$@")"
    fi
}

# Is a TCP port open?
_seckill_tcp_open() {
    # shellcheck disable=SC2016 # $1 and $2 belong to the inner bash
    timeout 3 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$1" "$2" 2>/dev/null
}

_seckill_tcp_closed() { ! _seckill_tcp_open "$@"; }

# Runs "$@" once a second until it succeeds or $1 seconds have passed.
_seckill_wait_for() {
    local secs=$1 deadline
    shift
    deadline=$((SECONDS + secs))
    until "$@"; do
        ((SECONDS >= deadline)) && return 1
        sleep 1
    done
}

# As _seckill_wait_for $1 "${@:3}", saying $2 when the time runs out: a server just started.
_seckill_await() {
    local secs=$1 failure=$2
    shift 2
    _seckill_wait_for "$secs" "$@" && return 0
    seckill_say "$failure"
    return 1
}

_seckill_record_started() {
    mkdir -p "$SECKILL_RUN_DIR" || return 1
    if ! grep -qxF -- "$1" "$SECKILL_STARTED_FILE" 2>/dev/null; then
        printf '%s\n' "$1" >>"$SECKILL_STARTED_FILE"
    fi
}

# One line for a server that does not answer and that this script cannot provide.
_seckill_cannot_provide() {
    local what=$1 pkg=$2 var=$3 hint
    if command -v docker >/dev/null 2>&1; then
        hint="start the servers with: docker compose -f deploy/compose.yaml up -d postgres redis rabbitmq"
    elif command -v apt-get >/dev/null 2>&1; then
        hint="install and start it as root (sudo apt-get install -y $pkg, then run this script again)"
    else
        hint="install and start $what (Debian/Ubuntu package $pkg)"
    fi
    seckill_say "$what does not answer at $(seckill_redact "${!var}") and this script cannot start or install it: $hint, or export $var to point at a running server."
}

_seckill_can_install() {
    command -v apt-get >/dev/null 2>&1 && _seckill_can_root
}

# Installs server $1's Debian package $2 (unless command $4 is there already), or says why
# this script cannot ($3: the variable with the server's URL).
_seckill_install_server() {
    [[ -n ${4:-} ]] && _seckill_bin "$4" >/dev/null && return 0
    if ! _seckill_can_install; then
        _seckill_cannot_provide "$1" "$2" "$3"
        return 1
    fi
    _seckill_apt_install "$2"
}

_seckill_policy_cleanup() {
    _seckill_as_root rm -f /usr/sbin/policy-rc.d
}

# apt-get update (once per shell), then installs one Debian package without starting its
# service: a temporary /usr/sbin/policy-rc.d (only when none exists) denies service starts,
# so the package never starts anything (with or without systemd) and we start it ourselves.
_seckill_apt_install() {
    local pkg=$1 rc=0 made_policy='' log=$SECKILL_RUN_DIR/apt.log
    mkdir -p "$SECKILL_RUN_DIR" || return 1
    if [[ -z $_seckill_apt_updated ]]; then
        seckill_say "apt-get update (log: run/apt.log)"
        if ! _seckill_as_root env DEBIAN_FRONTEND=noninteractive apt-get -q \
            -o DPkg::Lock::Timeout=300 update >>"$log" 2>&1; then
            seckill_say "apt-get update failed; see $log"
            return 1
        fi
        _seckill_apt_updated=1
    fi
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        if printf '#!/bin/sh\n# temporary, from seckill scripts/lib.sh: no service starts during apt-get install\nexit 101\n' |
            _seckill_as_root tee /usr/sbin/policy-rc.d >/dev/null &&
            _seckill_as_root chmod 755 /usr/sbin/policy-rc.d; then
            made_policy=1
            trap '_seckill_policy_cleanup; exit 130' INT TERM
        fi
    fi
    seckill_say "installing the Debian package $pkg (log: run/apt.log)"
    _seckill_as_root env DEBIAN_FRONTEND=noninteractive apt-get -q -y --no-install-recommends \
        -o DPkg::Lock::Timeout=300 -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
        install "$pkg" >>"$log" 2>&1 || rc=$?
    if [[ -n $made_policy ]]; then
        _seckill_policy_cleanup
        trap - INT TERM
    fi
    if ((rc != 0)); then
        seckill_say "apt-get install $pkg failed (exit $rc); see $log"
        return 1
    fi
}

# ---------------------------------------------------------------------------------------------
# PostgreSQL

# Probes SECKILL_PG_URL with pg_isready, which also prints the address libpq read from it: sets
# _SK_PG_HOST and _SK_PG_PORT. Returns pg_isready's status: 0 accepting connections, 1
# rejecting them (starting up), 2 no answer, 3 no attempt (a URL libpq does not accept).
_seckill_pg_probe() {
    local out rc=0 addr
    out=$(timeout 10 "$(_seckill_bin pg_isready)" -d "$SECKILL_PG_URL" -t 3 2>&1) || rc=$?
    addr=${out%% - *}
    _SK_PG_HOST=${addr%:*}
    _SK_PG_PORT=${addr##*:}
    case $rc in 0 | 1 | 3) return "$rc" ;; *) return 2 ;; esac
}

# A loopback address or a local socket directory: a server this file may start.
_seckill_pg_local() {
    case $_SK_PG_HOST in
        /* | localhost | 127.* | ::1) return 0 ;;
        *) return 1 ;;
    esac
}

_seckill_pg_server_installed() {
    _seckill_bin pg_ctlcluster >/dev/null && compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null
}

# Prints "version name status" of the local cluster on port $1 (pg_lsclusters), if any.
_seckill_pg_cluster_on_port() {
    local lsclusters ver name port status rest
    lsclusters=$(_seckill_bin pg_lsclusters) || return 1
    while read -r ver name port status rest; do
        if [[ $port == "$1" ]]; then
            printf '%s %s %s\n' "$ver" "$name" "$status"
            return 0
        fi
    done < <("$lsclusters" -h 2>/dev/null)
    return 1
}

# Prints the status (online, down, ...) of local cluster $1/$2.
_seckill_pg_cluster_status() {
    local lsclusters ver name port status rest
    lsclusters=$(_seckill_bin pg_lsclusters) || return 1
    while read -r ver name port status rest; do
        if [[ $ver == "$1" && $name == "$2" ]]; then
            printf '%s\n' "$status"
            return 0
        fi
    done < <("$lsclusters" -h 2>/dev/null)
    return 1
}

_seckill_pg_start() {
    local port=$1 cluster ver name status other
    if ! _seckill_can_root; then
        seckill_say "PostgreSQL is installed but does not answer on port $port; start it as root (pg_ctlcluster --skip-systemctl-redirect <version> main start) or export SECKILL_PG_URL to point at a running server."
        return 1
    fi
    if ! cluster=$(_seckill_pg_cluster_on_port "$port"); then
        other=$("$(_seckill_bin pg_lsclusters)" -h 2>/dev/null | head -n 1)
        if [[ -n $other ]]; then
            seckill_say "the local PostgreSQL cluster ($other) does not use port $port; export SECKILL_PG_URL with its port, or start a server on $port."
            return 1
        fi
        ver=$(compgen -G '/usr/lib/postgresql/*/bin/postgres' | sed -E 's#^/usr/lib/postgresql/([^/]+)/.*#\1#' | sort -V | tail -n 1)
        seckill_say "creating PostgreSQL cluster $ver/main on port $port"
        if ! _seckill_as_root "$(_seckill_bin pg_createcluster)" --port "$port" "$ver" main >>"$SECKILL_RUN_DIR/postgresql.log" 2>&1; then
            seckill_say "pg_createcluster $ver main failed; see run/postgresql.log"
            return 1
        fi
        _seckill_pg_installed=1
        cluster="$ver main down"
    fi
    read -r ver name status <<<"$cluster"
    if [[ $status == online* ]]; then
        seckill_say "PostgreSQL cluster $ver/$name is running but does not answer at $_SK_PG_HOST:$port (check listen_addresses in /etc/postgresql/$ver/$name/postgresql.conf), or export SECKILL_PG_URL to point at a running server."
        return 1
    fi
    seckill_say "starting PostgreSQL cluster $ver/$name (port $port, loopback only)"
    if ! _seckill_as_root "$(_seckill_bin pg_ctlcluster)" --skip-systemctl-redirect "$ver" "$name" start \
        -- -o "-c listen_addresses=localhost" >>"$SECKILL_RUN_DIR/postgresql.log" 2>&1; then
        seckill_say "pg_ctlcluster $ver $name start failed; see run/postgresql.log and /var/log/postgresql/postgresql-$ver-$name.log"
        return 1
    fi
    _seckill_record_started "postgresql $ver $name"
}

# Logs in with psql as the services will; prints psql's error on failure.
_seckill_pg_login() {
    # shellcheck disable=SC2069 # on purpose: stderr to the caller, stdout dropped
    PGCONNECT_TIMEOUT=5 "$1" -w -X -q -At -d "$SECKILL_PG_URL/postgres" -c 'select 1' 2>&1 >/dev/null
}

_seckill_pg_check_login() {
    local psql err port=$_SK_PG_PORT
    if ! psql=$(_seckill_bin psql); then
        seckill_say "psql not found: PostgreSQL answers at $_SK_PG_HOST:$port, login not checked"
        return 0
    fi
    err=$(_seckill_pg_login "$psql") && return 0
    # The server asks for a password and ours is wrong. For the built-in credentials on a local
    # cluster that this script created, or when we are root here, set the password of the
    # postgres user to "postgres" (local development) through the local socket.
    if [[ $err == *password* || $err == *authentication* ]] &&
        [[ $SECKILL_PG_URL == postgres://postgres:postgres@* || $SECKILL_PG_URL == postgresql://postgres:postgres@* ]] &&
        _seckill_pg_local && _seckill_pg_cluster_on_port "$port" >/dev/null &&
        { [[ -n $_seckill_pg_installed ]] || _seckill_can_root; }; then
        seckill_say "PostgreSQL refused the password of user postgres; setting it to 'postgres' (local development)"
        if _seckill_as_user postgres "$psql" -X -q -p "$port" \
            -c "ALTER USER postgres PASSWORD 'postgres'" >/dev/null 2>>"$SECKILL_RUN_DIR/postgresql.log" &&
            err=$(_seckill_pg_login "$psql"); then
            return 0
        fi
    fi
    seckill_say "cannot log in to PostgreSQL at $_SK_PG_HOST:$port (${err%%$'\n'*}): export SECKILL_PG_URL=postgres://USER:PASSWORD@HOST:PORT with a login that can create databases."
    return 1
}

_seckill_ensure_postgres() {
    local state=0
    # pg_isready reads the URL: the client comes first (the server package brings it too).
    if ! _seckill_bin pg_isready >/dev/null; then
        if ! _seckill_can_install; then
            seckill_say "pg_isready not found: install the PostgreSQL client (Debian/Ubuntu package postgresql-client), or run this script as root to have it installed."
            return 1
        fi
        _seckill_apt_install postgresql-client || return 1
    fi
    _seckill_pg_probe || state=$?
    if ((state == 3)); then
        seckill_say "SECKILL_PG_URL=$(seckill_redact "$SECKILL_PG_URL") is not a URL PostgreSQL's client accepts"
        return 1
    fi
    if ((state != 0)); then
        if ((state == 1)); then
            seckill_say "PostgreSQL at $_SK_PG_HOST:$_SK_PG_PORT is not accepting connections yet; waiting up to ${SECKILL_PG_START_TIMEOUT}s"
        elif ! _seckill_pg_local; then
            seckill_say "PostgreSQL does not answer at $_SK_PG_HOST:$_SK_PG_PORT (SECKILL_PG_URL=$(seckill_redact "$SECKILL_PG_URL")): start it or export SECKILL_PG_URL to point at a running server."
            return 1
        else
            if ! _seckill_pg_server_installed; then
                _seckill_install_server PostgreSQL postgresql SECKILL_PG_URL || return 1
                _seckill_pg_installed=1
            fi
            _seckill_pg_start "$_SK_PG_PORT" || return 1
        fi
        _seckill_await "$SECKILL_PG_START_TIMEOUT" \
            "PostgreSQL did not answer at $_SK_PG_HOST:$_SK_PG_PORT within ${SECKILL_PG_START_TIMEOUT}s; see /var/log/postgresql/ and run/postgresql.log" \
            _seckill_pg_probe || return 1
    fi
    _seckill_pg_check_login
}

# ---------------------------------------------------------------------------------------------
# Redis

# The Redis this file may start: the built-in URL's, on loopback port 6379, without a password.
_seckill_redis_local() {
    case $SECKILL_REDIS_URL in
        redis://127.0.0.1:6379 | redis://127.0.0.1:6379/* | redis://localhost:6379 | redis://localhost:6379/*) return 0 ;;
        *) return 1 ;;
    esac
}

# redis-cli with SECKILL_REDIS_URL (it reads the URL, password and all; rediss:// is TLS).
_seckill_redis_cli() {
    local cli
    local -a tls=()
    cli=$(_seckill_bin redis-cli) || return 127
    [[ $SECKILL_REDIS_URL == rediss://* ]] && tls=(--tls)
    timeout 5 "$cli" "${tls[@]}" --no-auth-warning -u "$SECKILL_REDIS_URL" "$@"
}

# redis-cli exits 0 on an error reply too: only PONG counts.
_seckill_redis_up() { [[ $(_seckill_redis_cli ping 2>/dev/null) == PONG* ]]; }

_seckill_redis_start() {
    local server major
    local -a args
    server=$(_seckill_bin redis-server) || return 1
    major=$("$server" --version 2>/dev/null | sed -nE 's/.*v=([0-9]+)\..*/\1/p')
    # "-::1" (an optional address) needs Redis 7; older ones bind IPv4 loopback only.
    if [[ ${major:-0} -ge 7 ]]; then args=(--bind 127.0.0.1 -::1); else args=(--bind 127.0.0.1); fi
    args+=(--port 6379 --save "" --appendonly no --daemonize yes
        --dir "$SECKILL_RUN_DIR" --logfile "$SECKILL_RUN_DIR/redis-server.log"
        --pidfile "$SECKILL_RUN_DIR/redis-server.pid")
    seckill_say "starting redis-server on port 6379 (loopback only, no persistence)"
    if ! "$server" "${args[@]}" >>"$SECKILL_RUN_DIR/redis-server.log" 2>&1; then
        seckill_say "redis-server failed to start; see run/redis-server.log"
        return 1
    fi
    _seckill_record_started "redis 6379"
}

_seckill_ensure_redis() {
    local err pkg=redis-tools
    # The server package brings redis-cli too; elsewhere only the client is needed.
    _seckill_redis_local && pkg=redis-server
    _seckill_install_server Redis "$pkg" SECKILL_REDIS_URL redis-cli || return 1
    _seckill_redis_up && return 0
    if ! _seckill_redis_local; then
        err=$(_seckill_redis_cli ping 2>&1)
        seckill_say "Redis does not answer a PING at $(seckill_redact "$SECKILL_REDIS_URL") (${err%%$'\n'*}): start it, or export SECKILL_REDIS_URL to point at a running server."
        return 1
    fi
    if _seckill_tcp_open 127.0.0.1 6379; then
        seckill_say "something listens on 127.0.0.1:6379 but does not answer a Redis PING without a password (a Redis with users? not Redis?): export SECKILL_REDIS_URL with its login, or free the port."
        return 1
    fi
    _seckill_install_server Redis redis-server SECKILL_REDIS_URL redis-server || return 1
    _seckill_redis_start || return 1
    _seckill_await "$SECKILL_REDIS_START_TIMEOUT" \
        "Redis did not answer at 127.0.0.1:6379 within ${SECKILL_REDIS_START_TIMEOUT}s; see run/redis-server.log" \
        _seckill_redis_up
}

# ---------------------------------------------------------------------------------------------
# A local Redis Cluster, for the cluster tests

SECKILL_REDIS_CLUSTER_PORTS=${SECKILL_REDIS_CLUSTER_PORTS:-7001 7002 7003}

_seckill_cluster_cli() { # port, then redis-cli arguments
    local port=$1
    shift
    timeout 10 "$(_seckill_bin redis-cli)" -h 127.0.0.1 -p "$port" "$@"
}

_seckill_cluster_node_up() { [[ $(_seckill_cluster_cli "$1" ping 2>/dev/null) == PONG* ]]; }

# Every node answers and sees the whole cluster: all slots served, state ok.
_seckill_cluster_ok() {
    local port info
    for port in $SECKILL_REDIS_CLUSTER_PORTS; do
        info=$(_seckill_cluster_cli "$port" cluster info 2>/dev/null) || return 1
        [[ $info == *cluster_state:ok* && $info == *cluster_slots_assigned:16384* ]] || return 1
    done
}

ensure_redis_cluster() {
    local port dir server major url='' nodes=()
    local -a bind
    if [[ -n ${SECKILL_SKIP_REDIS_CLUSTER_TESTS:-} && $SECKILL_SKIP_REDIS_CLUSTER_TESTS != 0 ]]; then
        seckill_say "SECKILL_SKIP_REDIS_CLUSTER_TESTS is set: the Redis Cluster tests skip themselves"
        return 0
    fi
    for port in $SECKILL_REDIS_CLUSTER_PORTS; do
        nodes+=("127.0.0.1:$port")
        url+="${url:+,}redis://127.0.0.1:$port"
    done
    if ! _seckill_cluster_ok; then
        _seckill_install_server Redis redis-server SECKILL_REDIS_URL redis-server || return 1
        server=$(_seckill_bin redis-server) || return 1
        major=$("$server" --version 2>/dev/null | sed -nE 's/.*v=([0-9]+)\..*/\1/p')
        if [[ ${major:-0} -ge 7 ]]; then bind=(--bind 127.0.0.1 -::1); else bind=(--bind 127.0.0.1); fi
        for port in $SECKILL_REDIS_CLUSTER_PORTS; do
            _seckill_cluster_node_up "$port" && continue
            if _seckill_tcp_open 127.0.0.1 "$port"; then
                seckill_say "something that is not a Redis node listens on 127.0.0.1:$port: free it, or export SECKILL_REDIS_CLUSTER_PORTS with three free ports, or SECKILL_SKIP_REDIS_CLUSTER_TESTS=1."
                return 1
            fi
            # A fresh node: no cluster state kept from an earlier run.
            dir=$SECKILL_RUN_DIR/redis-cluster/$port
            rm -rf "$dir" && mkdir -p "$dir" || return 1
            seckill_say "starting a Redis Cluster node on port $port (loopback only, no persistence)"
            if ! "$server" "${bind[@]}" --port "$port" --cluster-enabled yes --cluster-config-file nodes.conf \
                --cluster-node-timeout 2000 --save "" --appendonly no --daemonize yes --dir "$dir" \
                --logfile "$dir/redis.log" --pidfile "$dir/redis.pid" >>"$dir/redis.log" 2>&1; then
                seckill_say "redis-server failed to start on port $port; see run/redis-cluster/$port/redis.log"
                return 1
            fi
            _seckill_record_started "redis $port"
            _seckill_await 20 "the Redis node on port $port did not answer within 20s" \
                _seckill_cluster_node_up "$port" || return 1
        done
        # Only nodes that serve no slot yet can be joined; anything else is somebody's cluster.
        for port in $SECKILL_REDIS_CLUSTER_PORTS; do
            if [[ $(_seckill_cluster_cli "$port" cluster info 2>/dev/null) != *cluster_slots_assigned:0* ]]; then
                seckill_say "the Redis nodes on ports $SECKILL_REDIS_CLUSTER_PORTS answer but are not one whole cluster: stop them (bash scripts/down.sh stops those this project started), or export SECKILL_REDIS_CLUSTER_PORTS with three free ports."
                return 1
            fi
        done
        seckill_say "joining ${nodes[*]} into a Redis Cluster (three primaries)"
        mkdir -p "$SECKILL_RUN_DIR/redis-cluster" || return 1
        if ! _seckill_cluster_cli "${SECKILL_REDIS_CLUSTER_PORTS%% *}" --cluster create "${nodes[@]}" \
            --cluster-replicas 0 --cluster-yes >>"$SECKILL_RUN_DIR/redis-cluster/create.log" 2>&1; then
            seckill_say "redis-cli --cluster create failed; see run/redis-cluster/create.log"
            return 1
        fi
        _seckill_await 30 "the Redis Cluster on ports $SECKILL_REDIS_CLUSTER_PORTS was not whole within 30s" \
            _seckill_cluster_ok || return 1
    fi
    SECKILL_TEST_REDIS_CLUSTER_URL=$url
    export SECKILL_TEST_REDIS_CLUSTER_URL
    seckill_say "Redis Cluster ready: $url"
}

# ---------------------------------------------------------------------------------------------
# RabbitMQ

# The broker this file may start: the built-in URL's, guest on loopback port 5672.
_seckill_amqp_local() {
    case $SECKILL_AMQP_URL in
        amqp://guest:guest@127.0.0.1:5672/%2[fF] | amqp://guest:guest@localhost:5672/%2[fF]) return 0 ;;
        *) return 1 ;;
    esac
}

# The node name to give a RabbitMQ we start: the configured one, else rabbit@<host> when this
# host name resolves, else rabbit@localhost (a container's random host name often does not).
_seckill_rabbitmq_nodename() {
    if [[ -n ${RABBITMQ_NODENAME:-} ]]; then
        printf '%s\n' "$RABBITMQ_NODENAME"
    elif grep -qE '^[[:space:]]*(export[[:space:]]+)?(RABBITMQ_)?NODENAME=' /etc/rabbitmq/rabbitmq-env.conf 2>/dev/null; then
        printf '%s\n' -
    elif getent hosts "$(hostname -s 2>/dev/null || hostname)" >/dev/null 2>&1; then
        printf '%s\n' -
    else
        printf '%s\n' rabbit@localhost
    fi
}

# A RabbitMQ CLI tool $2 (as root) against node $1 ("-": the configured default), bounded to 90 s.
_seckill_rabbitmq_cli() {
    local node=$1 tool
    tool=$(_seckill_bin "$2") || return 1
    shift 2
    if [[ $node == - ]]; then
        _seckill_as_root timeout 90 "$tool" "$@"
    else
        _seckill_as_root timeout 90 "$tool" -n "$node" "$@"
    fi
}

# The node this file started accepts AMQP connections (rabbitmq-diagnostics connects to its
# listeners).
_seckill_rabbitmq_serving() {
    _seckill_rabbitmq_cli "$_SK_RABBIT_NODE" rabbitmq-diagnostics -q check_port_connectivity >/dev/null 2>&1
}

_seckill_rabbitmq_start() {
    local server node
    local -a envs
    server=$(_seckill_bin rabbitmq-server) || return 1
    if ! _seckill_can_root; then
        seckill_say "RabbitMQ is installed but does not answer on port 5672; start it as root (rabbitmq-server -detached) or export SECKILL_AMQP_URL to point at a running server."
        return 1
    fi
    node=$(_seckill_rabbitmq_nodename)
    envs=(RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT=5672 ERL_EPMD_ADDRESS=127.0.0.1)
    [[ $node != - ]] && envs+=("RABBITMQ_NODENAME=$node")
    [[ -z ${RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS:-} ]] &&
        envs+=("RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}")
    seckill_say "starting rabbitmq-server on port 5672 (loopback only); this can take a minute"
    if ! _seckill_as_root env "${envs[@]}" "$server" -detached >>"$SECKILL_RUN_DIR/rabbitmq.log" 2>&1; then
        seckill_say "rabbitmq-server -detached failed; see run/rabbitmq.log and /var/log/rabbitmq/"
        return 1
    fi
    _seckill_record_started "rabbitmq 5672 $node"
    _SK_RABBIT_NODE=$node
}

_seckill_ensure_rabbitmq() {
    # There is no AMQP client in the shell: a broker at another URL is the user's, and the
    # services say at start if it does not answer. The built-in one is up when its port is
    # open; rabbitmq-diagnostics is only asked about a node this script started (a broker in
    # Docker is not the local node the CLI knows).
    if ! _seckill_amqp_local; then
        seckill_say "RabbitMQ at $(seckill_redact "$SECKILL_AMQP_URL") is not probed here (a broker of your own); the services report it if it does not answer"
        return 0
    fi
    _seckill_tcp_open 127.0.0.1 5672 && return 0
    _seckill_install_server RabbitMQ rabbitmq-server SECKILL_AMQP_URL rabbitmq-server || return 1
    _seckill_rabbitmq_start || return 1
    _seckill_await "$SECKILL_RABBITMQ_START_TIMEOUT" \
        "RabbitMQ did not accept connections on 127.0.0.1:5672 within ${SECKILL_RABBITMQ_START_TIMEOUT}s; see /var/log/rabbitmq/ and run/rabbitmq.log" \
        _seckill_rabbitmq_serving
}

# ---------------------------------------------------------------------------------------------
# Chromium and ChromeDriver, for the browser tests

# One line for a browser binary that is missing and that this script cannot install.
_seckill_browser_missing() {
    local what=$1 path=$2 var=$3 hint
    if command -v apt-get >/dev/null 2>&1; then
        hint="install them as root (apt-get install -y --no-install-recommends chromium chromium-driver)"
    else
        hint="install Chromium and its ChromeDriver (Debian/Ubuntu packages chromium and chromium-driver)"
    fi
    seckill_say "$what for the browser tests is not at $path and this script cannot install it: $hint, or export $var with its path, or export SECKILL_SKIP_BROWSER_TESTS=1 to skip those tests."
}

# ---------------------------------------------------------------------------------------------
# schemathesis, for the API check

# One line for what the API check lacks ($1) and what to do about it ($2).
_seckill_api_check_missing() {
    seckill_say "$1, which the API check (schemathesis) needs: $2, or export SECKILL_SKIP_API_CHECK=1 to skip that test."
}

# python3 with a working venv module (which brings pip): the machine's, else Debian's python3-venv
# installed (as root or with passwordless sudo). Prints its path.
_seckill_python_with_venv() {
    local python
    if python=$(command -v python3) && "$python" -c 'import ensurepip, venv' >/dev/null 2>&1; then
        printf '%s\n' "$python"
        return 0
    fi
    if ! _seckill_can_install; then
        if [[ -z $python ]]; then
            _seckill_api_check_missing "python3 not found" "install it as root (apt-get install -y python3 python3-venv)"
        else
            _seckill_api_check_missing "$python has no venv or pip" "install python3-venv as root (apt-get install -y python3-venv)"
        fi
        return 1
    fi
    _seckill_apt_install python3-venv >&2 || return 1
    python=$(command -v python3) || return 1
    printf '%s\n' "$python"
}

# ---------------------------------------------------------------------------------------------
# Public functions

ensure_servers() {
    mkdir -p "$SECKILL_RUN_DIR" || return 1
    _seckill_ensure_postgres || return 1
    _seckill_ensure_redis || return 1
    _seckill_ensure_rabbitmq || return 1
    seckill_say "servers ready: PostgreSQL $(seckill_redact "$SECKILL_PG_URL"), Redis $(seckill_redact "$SECKILL_REDIS_URL"), RabbitMQ $(seckill_redact "$SECKILL_AMQP_URL")"
}

# Chromium and ChromeDriver at the paths of Debian's packages chromium and chromium-driver, or
# where SECKILL_CHROMIUM and SECKILL_CHROMEDRIVER say (then nothing is installed for them).
ensure_browser() {
    local chromium=${SECKILL_CHROMIUM:-/usr/bin/chromium} driver=${SECKILL_CHROMEDRIVER:-/usr/bin/chromedriver}
    if [[ -n ${SECKILL_SKIP_BROWSER_TESTS:-} && $SECKILL_SKIP_BROWSER_TESTS != 0 ]]; then
        seckill_say "SECKILL_SKIP_BROWSER_TESTS is set: the browser tests skip themselves"
        return 0
    fi
    if [[ ! -x $chromium || ! -x $driver ]]; then
        if [[ -n ${SECKILL_CHROMIUM:-} && ! -x $chromium ]]; then
            seckill_say "SECKILL_CHROMIUM=$chromium is not an executable: point it at Chromium, or unset it to use Debian's chromium."
            return 1
        fi
        if [[ -n ${SECKILL_CHROMEDRIVER:-} && ! -x $driver ]]; then
            seckill_say "SECKILL_CHROMEDRIVER=$driver is not an executable: point it at ChromeDriver, or unset it to use Debian's chromium-driver."
            return 1
        fi
        if ! _seckill_can_install; then
            if [[ ! -x $chromium ]]; then
                _seckill_browser_missing Chromium "$chromium" SECKILL_CHROMIUM
            else
                _seckill_browser_missing ChromeDriver "$driver" SECKILL_CHROMEDRIVER
            fi
            return 1
        fi
        # chromium first: an older one installed by hand is upgraded to the version the driver
        # requires.
        _seckill_apt_install chromium || return 1
        _seckill_apt_install chromium-driver || return 1
        if [[ ! -x $chromium || ! -x $driver ]]; then
            seckill_say "chromium and chromium-driver are installed but $chromium or $driver is missing; see run/apt.log"
            return 1
        fi
    fi
    SECKILL_CHROMIUM=$chromium
    SECKILL_CHROMEDRIVER=$driver
    export SECKILL_CHROMIUM SECKILL_CHROMEDRIVER
    seckill_say "browser ready: $("$driver" --version 2>/dev/null | head -n 1)"
}

# nginx for the web-server test; see the list of functions at the top.
ensure_nginx() {
    local nginx=${SECKILL_NGINX:-/usr/sbin/nginx} hint
    if [[ -n ${SECKILL_SKIP_WEB_SERVER_TEST:-} && $SECKILL_SKIP_WEB_SERVER_TEST != 0 ]]; then
        seckill_say "SECKILL_SKIP_WEB_SERVER_TEST is set: the web-server test skips itself"
        return 0
    fi
    if [[ ! -x $nginx ]]; then
        if [[ -n ${SECKILL_NGINX:-} ]]; then
            seckill_say "SECKILL_NGINX=$nginx is not an executable: point it at nginx, or unset it to use Debian's nginx-light."
            return 1
        fi
        if ! _seckill_can_install; then
            if command -v apt-get >/dev/null 2>&1; then
                hint="install it as root (apt-get install -y --no-install-recommends nginx-light)"
            else
                hint="install nginx"
            fi
            seckill_say "nginx for the web-server test is not at $nginx and this script cannot install it: $hint, or export SECKILL_NGINX with its path, or export SECKILL_SKIP_WEB_SERVER_TEST=1 to skip that test."
            return 1
        fi
        # The package's own server is not started (no service starts during the install).
        _seckill_apt_install nginx-light || return 1
        if [[ ! -x $nginx ]]; then
            seckill_say "nginx-light is installed but $nginx is missing; see run/apt.log"
            return 1
        fi
    fi
    SECKILL_NGINX=$nginx
    export SECKILL_NGINX
    seckill_say "web server ready: $("$nginx" -v 2>&1 | head -n 1)"
}

# Stops the servers recorded in run/servers.started (newest first) and forgets them.
stop_started_servers() {
    local kind a b rc=0 cli line i
    local -a lines=()
    [[ -s $SECKILL_STARTED_FILE ]] || return 0
    mapfile -t lines <"$SECKILL_STARTED_FILE"
    for ((i = ${#lines[@]} - 1; i >= 0; i--)); do
        line=${lines[i]}
        read -r kind a b <<<"$line"
        case $kind in
            postgresql)
                seckill_say "stopping PostgreSQL cluster $a/$b"
                if ! _seckill_as_root "$(_seckill_bin pg_ctlcluster)" --skip-systemctl-redirect "$a" "$b" stop &&
                    [[ $(_seckill_pg_cluster_status "$a" "$b") != down ]]; then
                    rc=1
                fi
                ;;
            redis)
                seckill_say "stopping redis-server on port $a"
                if cli=$(_seckill_bin redis-cli); then
                    timeout 10 "$cli" -h 127.0.0.1 -p "$a" shutdown nosave >/dev/null 2>&1 || true
                fi
                if _seckill_tcp_open 127.0.0.1 "$a"; then
                    seckill_say "redis-server on port $a still answers"
                    rc=1
                fi
                ;;
            rabbitmq)
                seckill_say "stopping RabbitMQ (port $a)"
                _seckill_rabbitmq_cli "${b:--}" rabbitmqctl stop >/dev/null 2>&1 || true
                if ! _seckill_wait_for 30 _seckill_tcp_closed 127.0.0.1 "$a"; then
                    seckill_say "RabbitMQ on port $a still answers"
                    rc=1
                fi
                ;;
            *) seckill_say "ignoring unknown line in run/servers.started: $line" ;;
        esac
    done
    if ((rc == 0)); then rm -f "$SECKILL_STARTED_FILE"; fi
    return "$rc"
}

# Is pid $1 alive (not a zombie) and, when $2 is given, running the binary $2? The name check
# keeps a stale pid file from pointing at an unrelated process that reused the pid.
seckill_pid_alive() {
    local pid=$1 name=${2:-} comm state
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    if [[ -r /proc/$pid/stat ]]; then
        state=$(sed -E 's/^[0-9]+ \(.*\) (.).*/\1/' "/proc/$pid/stat" 2>/dev/null || true)
        [[ $state == Z ]] && return 1
    fi
    if [[ -n $name ]] && comm=$(cat "/proc/$pid/comm" 2>/dev/null); then
        [[ $comm == "${name:0:15}" ]] || return 1 # the kernel keeps 15 characters of the name
    fi
    return 0
}

# The pid files of service $1 that scripts/up.sh writes, relative to the repo root:
# run/<name>.pid (replica 0) and run/<name>-<k>.pid (replica k), whichever exist.
service_pidfiles() {
    local f
    for f in "run/$1.pid" "run/$1"-*.pid; do
        [[ -f $f && ($f == "run/$1.pid" || $f =~ ^run/$1-[0-9]+\.pid$) ]] && printf '%s\n' "$f"
    done
    return 0
}

# Makes cargo reachable (rustup installs it in ~/.cargo/bin, which a fresh shell may lack).
require_cargo() {
    if ! command -v cargo >/dev/null 2>&1 && [[ -x ${CARGO_HOME:-${HOME:-/root}/.cargo}/bin/cargo ]]; then
        PATH=${CARGO_HOME:-${HOME:-/root}/.cargo}/bin:$PATH
        export PATH
    fi
    if ! command -v cargo >/dev/null 2>&1; then
        seckill_say "cargo not found: install Rust with rustup (curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh), then open a new shell."
        return 1
    fi
}

# The venv is named by the requirements' hash: a changed pin makes a new one (and the old goes).
ensure_schemathesis() {
    local req=$SECKILL_ROOT/scripts/requirements-api-check.txt cache venv old python
    if [[ -n ${SECKILL_SKIP_API_CHECK:-} && $SECKILL_SKIP_API_CHECK != 0 ]]; then
        seckill_say "SECKILL_SKIP_API_CHECK is set: the API check skips itself"
        return 0
    fi
    if [[ -n ${SECKILL_SCHEMATHESIS:-} ]]; then
        if [[ ! -x $SECKILL_SCHEMATHESIS ]]; then
            seckill_say "SECKILL_SCHEMATHESIS=$SECKILL_SCHEMATHESIS is not an executable: point it at schemathesis, or unset it to have a venv made."
            return 1
        fi
        export SECKILL_SCHEMATHESIS
        return 0
    fi
    cache=${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/seckill
    venv=$cache/venv-api-check-$(sha256sum "$req" | cut -c1-12)
    if [[ ! -x $venv/bin/schemathesis || ! -e $venv/.complete ]]; then
        python=$(_seckill_python_with_venv) || return 1
        seckill_say "making the venv $venv for schemathesis (scripts/requirements-api-check.txt, once)"
        rm -rf "$venv"
        mkdir -p "$cache" || return 1
        if ! "$python" -m venv "$venv" >/dev/null 2>&1; then
            rm -rf "$venv"
            _seckill_api_check_missing "$python -m venv failed" "install python3-venv as root (apt-get install -y python3-venv)"
            return 1
        fi
        if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req" >&2; then
            rm -rf "$venv"
            _seckill_api_check_missing "pip install -r scripts/requirements-api-check.txt failed (is PyPI reachable?)" "see pip's message above"
            return 1
        fi
        touch "$venv/.complete"
        for old in "$cache"/venv-api-check-*; do
            if [[ $old != "$venv" ]]; then rm -rf "$old"; fi
        done
    fi
    SECKILL_SCHEMATHESIS=$venv/bin/schemathesis
    export SECKILL_SCHEMATHESIS
    seckill_say "schemathesis ready: $("$SECKILL_SCHEMATHESIS" --version 2>/dev/null | head -n 1)"
}

# Builds the workspace's binaries in release mode and sets SECKILL_BIN_DIR to where they are
# (CARGO_TARGET_DIR if set, else target/, as an absolute path).
build_release() {
    require_cargo || return 1
    seckill_say "cargo build --release --bins"
    cargo build --release --bins || return 1
    SECKILL_BIN_DIR=${CARGO_TARGET_DIR:-target}/release
    [[ $SECKILL_BIN_DIR == /* ]] || SECKILL_BIN_DIR=$SECKILL_ROOT/$SECKILL_BIN_DIR
}

# shellcheck shell=bash
# scripts/lib.sh: functions shared by up.sh, down.sh, test.sh and bench.sh. Source it, don't run it.
#
#   ensure_servers         make sure PostgreSQL, Redis and RabbitMQ answer: use a running server,
#                          else start an installed one, else install it (Debian/Ubuntu, apt-get,
#                          as root or with passwordless sudo) and start it; else print one line
#                          saying what to run and return non-zero.
#   stop_started_servers   stop exactly the servers that ensure_servers started (down.sh).
#   require_cargo          find cargo (also in ~/.cargo/bin) or say how to install Rust.
#   build_release          cargo build --release --bins; sets SECKILL_BIN_DIR (up.sh, bench.sh).
#
# Exported for callers (values already set by the user are kept):
#   SECKILL_PG_URL     PostgreSQL server URL without a database name
#                      (default postgres://postgres:postgres@127.0.0.1:5432)
#   SECKILL_REDIS_URL  (default $SECKILL__REDIS__URL, else redis://127.0.0.1:6379)
#   SECKILL_AMQP_URL   (default $SECKILL__AMQP__URL, else amqp://guest:guest@127.0.0.1:5672/%2f)
#
# Servers this file starts are started on loopback only and without systemd; each is recorded
# in run/servers.started so that down.sh stops those and nothing else. This file sets no shell
# options and never exits: its functions return non-zero, so it is safe to source in a shell.

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

_seckill_is_loopback() {
    case $1 in
        localhost | 127.* | ::1 | 0:0:0:0:0:0:0:1) return 0 ;;
        *) return 1 ;;
    esac
}

# Splits scheme://[user[:password]@]host[:port][/path] into _SK_USER _SK_PASS _SK_HOST _SK_PORT.
_seckill_url_split() {
    local rest=${1#*://} default_port=$2 auth=
    rest=${rest%%/*}
    rest=${rest%%\?*}
    if [[ $rest == *@* ]]; then
        auth=${rest%@*}
        rest=${rest##*@}
    fi
    _SK_USER=${auth%%:*}
    _SK_PASS=
    [[ $auth == *:* ]] && _SK_PASS=${auth#*:}
    if [[ $rest == \[* ]]; then
        _SK_HOST=${rest%%]*}
        _SK_HOST=${_SK_HOST#[}
        _SK_PORT=${rest#*]}
        _SK_PORT=${_SK_PORT#:}
    else
        _SK_HOST=${rest%%:*}
        _SK_PORT=${rest#"$_SK_HOST"}
        _SK_PORT=${_SK_PORT#:}
    fi
    _SK_HOST=${_SK_HOST:-127.0.0.1}
    _SK_PORT=${_SK_PORT:-$default_port}
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
    seckill_say "$what does not answer at $_SK_HOST:$_SK_PORT and this script cannot start or install it: $hint, or export $var to point at a running server."
}

_seckill_can_install() {
    command -v apt-get >/dev/null 2>&1 && _seckill_can_root
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

# 0: PostgreSQL accepts connections; 1: it answers but rejects them (starting up); 2: no answer.
_seckill_pg_state() {
    local isready rc=0
    if isready=$(_seckill_bin pg_isready); then
        "$isready" -q -h "$1" -p "$2" -t 3 || rc=$?
        case $rc in 0 | 1) return "$rc" ;; *) return 2 ;; esac
    fi
    _seckill_tcp_open "$1" "$2" || return 2
}

_seckill_pg_up() { _seckill_pg_state "$@"; }

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
        seckill_say "PostgreSQL cluster $ver/$name is running but does not answer at $_SK_HOST:$port (check listen_addresses in /etc/postgresql/$ver/$name/postgresql.conf), or export SECKILL_PG_URL to point at a running server."
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
    local host=$1 port=$2 psql err
    if ! psql=$(_seckill_bin psql); then
        seckill_say "psql not found: PostgreSQL answers at $host:$port, login not checked"
        return 0
    fi
    err=$(_seckill_pg_login "$psql") && return 0
    # The server asks for a password and ours is wrong. For the default credentials on a local
    # cluster that this script created, or when we are root here, set the password of the
    # postgres user to "postgres" (local development) through the local socket.
    if [[ $err == *password* || $err == *authentication* ]] &&
        [[ $_SK_USER == postgres && $_SK_PASS == postgres ]] &&
        _seckill_is_loopback "$host" && _seckill_pg_cluster_on_port "$port" >/dev/null &&
        { [[ -n $_seckill_pg_installed ]] || _seckill_can_root; }; then
        seckill_say "PostgreSQL refused the password of user postgres; setting it to 'postgres' (local development)"
        if _seckill_as_user postgres "$psql" -X -q -p "$port" \
            -c "ALTER USER postgres PASSWORD 'postgres'" >/dev/null 2>>"$SECKILL_RUN_DIR/postgresql.log" &&
            err=$(_seckill_pg_login "$psql"); then
            return 0
        fi
    fi
    seckill_say "cannot log in to PostgreSQL at $host:$port as ${_SK_USER:-?} (${err%%$'\n'*}): export SECKILL_PG_URL=postgres://USER:PASSWORD@HOST:PORT with a login that can create databases."
    return 1
}

_seckill_ensure_postgres() {
    _seckill_url_split "$SECKILL_PG_URL" 5432
    local host=$_SK_HOST port=$_SK_PORT state=0
    _seckill_pg_state "$host" "$port" || state=$?
    if ((state != 0)); then
        if ((state == 1)); then
            seckill_say "PostgreSQL at $host:$port is not accepting connections yet; waiting up to ${SECKILL_PG_START_TIMEOUT}s"
        elif ! _seckill_is_loopback "$host"; then
            seckill_say "PostgreSQL does not answer at $host:$port (SECKILL_PG_URL=$(seckill_redact "$SECKILL_PG_URL")): start it or export SECKILL_PG_URL to point at a running server."
            return 1
        else
            if ! _seckill_pg_server_installed; then
                if ! _seckill_can_install; then
                    _seckill_cannot_provide PostgreSQL postgresql SECKILL_PG_URL
                    return 1
                fi
                _seckill_apt_install postgresql || return 1
                _seckill_pg_installed=1
            fi
            _seckill_pg_start "$port" || return 1
        fi
        if ! _seckill_wait_for "$SECKILL_PG_START_TIMEOUT" _seckill_pg_up "$host" "$port"; then
            seckill_say "PostgreSQL did not answer at $host:$port within ${SECKILL_PG_START_TIMEOUT}s; see /var/log/postgresql/ and run/postgresql.log"
            return 1
        fi
    fi
    _seckill_pg_check_login "$host" "$port"
}

# ---------------------------------------------------------------------------------------------
# Redis

# PING over a bare socket (RESP), with AUTH first when the URL has a password.
_seckill_redis_ping_raw() {
    # shellcheck disable=SC2016 # the script is for the inner bash
    timeout 5 bash -c '
        exec 3<>"/dev/tcp/$1/$2" || exit 1
        if [[ -n $4 ]]; then
            if [[ -n $3 && $3 != default ]]; then
                printf "*3\r\n\$4\r\nAUTH\r\n\$%d\r\n%s\r\n\$%d\r\n%s\r\n" "${#3}" "$3" "${#4}" "$4" >&3
            else
                printf "*2\r\n\$4\r\nAUTH\r\n\$%d\r\n%s\r\n" "${#4}" "$4" >&3
            fi
            IFS= read -r line <&3 || exit 1
        fi
        printf "*1\r\n\$4\r\nPING\r\n" >&3
        IFS= read -r line <&3 || exit 1
        [[ $line == "+PONG"* ]]' _ "$1" "$2" "$3" "$4" 2>/dev/null
}

_seckill_redis_up() {
    local cli
    if cli=$(_seckill_bin redis-cli) && [[ $SECKILL_REDIS_URL == redis://* ]]; then
        [[ $(timeout 5 "$cli" -u "$SECKILL_REDIS_URL" ping 2>/dev/null) == PONG* ]]
    else
        _seckill_redis_ping_raw "$_SK_HOST" "$_SK_PORT" "$_SK_USER" "$_SK_PASS"
    fi
}

_seckill_redis_start() {
    local port=$1 server major
    local -a args
    server=$(_seckill_bin redis-server) || return 1
    major=$("$server" --version 2>/dev/null | sed -nE 's/.*v=([0-9]+)\..*/\1/p')
    # "-::1" (an optional address) needs Redis 7; older ones bind IPv4 loopback only.
    if [[ ${major:-0} -ge 7 ]]; then args=(--bind 127.0.0.1 -::1); else args=(--bind 127.0.0.1); fi
    args+=(--port "$port" --save "" --appendonly no --daemonize yes
        --dir "$SECKILL_RUN_DIR" --logfile "$SECKILL_RUN_DIR/redis-server.log"
        --pidfile "$SECKILL_RUN_DIR/redis-server.pid")
    [[ -n $_SK_PASS ]] && args+=(--requirepass "$_SK_PASS")
    seckill_say "starting redis-server on port $port (loopback only, no persistence)"
    if ! "$server" "${args[@]}" >>"$SECKILL_RUN_DIR/redis-server.log" 2>&1; then
        seckill_say "redis-server failed to start; see run/redis-server.log"
        return 1
    fi
    _seckill_record_started "redis $port"
}

_seckill_ensure_redis() {
    _seckill_url_split "$SECKILL_REDIS_URL" 6379
    local host=$_SK_HOST port=$_SK_PORT
    _seckill_redis_up && return 0
    if ! _seckill_is_loopback "$host"; then
        seckill_say "Redis does not answer a PING at $host:$port (SECKILL_REDIS_URL=$(seckill_redact "$SECKILL_REDIS_URL")): start it, or export SECKILL_REDIS_URL to point at a running server."
        return 1
    fi
    if _seckill_tcp_open "$host" "$port"; then
        seckill_say "something listens on $host:$port but does not answer a Redis PING as SECKILL_REDIS_URL=$(seckill_redact "$SECKILL_REDIS_URL") asks (wrong password? not Redis?): fix SECKILL_REDIS_URL or free the port."
        return 1
    fi
    if ! _seckill_bin redis-server >/dev/null; then
        if ! _seckill_can_install; then
            _seckill_cannot_provide Redis redis-server SECKILL_REDIS_URL
            return 1
        fi
        _seckill_apt_install redis-server || return 1
    fi
    _seckill_redis_start "$port" || return 1
    if ! _seckill_wait_for "$SECKILL_REDIS_START_TIMEOUT" _seckill_redis_up; then
        seckill_say "Redis did not answer at $host:$port within ${SECKILL_REDIS_START_TIMEOUT}s; see run/redis-server.log"
        return 1
    fi
}

# ---------------------------------------------------------------------------------------------
# RabbitMQ

# Sends the AMQP 0-9-1 protocol header; a broker answers with a method frame (type byte 1).
_seckill_amqp_greets() {
    # shellcheck disable=SC2016 # the script is for the inner bash
    [[ $(timeout 5 bash -c '
        exec 3<>"/dev/tcp/$1/$2" || exit 1
        printf "AMQP\0\0\x09\x01" >&3
        head -c 1 <&3' _ "$1" "$2" 2>/dev/null | od -An -tx1 | tr -d ' \n') == 01 ]]
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

# rabbitmqctl (as root) against node $1 ("-": the configured default), bounded to 90 s.
_seckill_rabbitmqctl() {
    local node=$1 ctl
    shift
    ctl=$(_seckill_bin rabbitmqctl) || return 1
    if [[ $node == - ]]; then
        _seckill_as_root timeout 90 "$ctl" "$@"
    else
        _seckill_as_root timeout 90 "$ctl" -n "$node" "$@"
    fi
}

_seckill_rabbitmq_start() {
    local port=$1 server node
    local -a envs
    server=$(_seckill_bin rabbitmq-server) || return 1
    if ! _seckill_can_root; then
        seckill_say "RabbitMQ is installed but does not answer on port $port; start it as root (rabbitmq-server -detached) or export SECKILL_AMQP_URL to point at a running server."
        return 1
    fi
    node=$(_seckill_rabbitmq_nodename)
    envs=(RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 "RABBITMQ_NODE_PORT=$port" ERL_EPMD_ADDRESS=127.0.0.1)
    [[ $node != - ]] && envs+=("RABBITMQ_NODENAME=$node")
    [[ -z ${RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS:-} ]] &&
        envs+=("RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}")
    seckill_say "starting rabbitmq-server on port $port (loopback only); this can take a minute"
    if ! _seckill_as_root env "${envs[@]}" "$server" -detached >>"$SECKILL_RUN_DIR/rabbitmq.log" 2>&1; then
        seckill_say "rabbitmq-server -detached failed; see run/rabbitmq.log and /var/log/rabbitmq/"
        return 1
    fi
    _seckill_record_started "rabbitmq $port $node"
    _SK_RABBIT_NODE=$node
}

_seckill_ensure_rabbitmq() {
    _seckill_url_split "$SECKILL_AMQP_URL" 5672
    local host=$_SK_HOST port=$_SK_PORT
    # A broker that sends its AMQP greeting is up; rabbitmqctl is only asked about a node this
    # script started (a broker in Docker or elsewhere is not the local node rabbitmqctl knows).
    _seckill_amqp_greets "$host" "$port" && return 0
    if ! _seckill_is_loopback "$host"; then
        seckill_say "RabbitMQ does not answer AMQP at $host:$port (SECKILL_AMQP_URL=$(seckill_redact "$SECKILL_AMQP_URL")): start it, or export SECKILL_AMQP_URL to point at a running server."
        return 1
    fi
    if _seckill_tcp_open "$host" "$port"; then
        seckill_say "something listens on $host:$port but does not speak AMQP (SECKILL_AMQP_URL=$(seckill_redact "$SECKILL_AMQP_URL")): fix SECKILL_AMQP_URL or free the port."
        return 1
    fi
    if ! _seckill_bin rabbitmq-server >/dev/null; then
        if ! _seckill_can_install; then
            _seckill_cannot_provide RabbitMQ rabbitmq-server SECKILL_AMQP_URL
            return 1
        fi
        _seckill_apt_install rabbitmq-server || return 1
    fi
    _seckill_rabbitmq_start "$port" || return 1
    if ! _seckill_wait_for "$SECKILL_RABBITMQ_START_TIMEOUT" _seckill_amqp_greets "$host" "$port"; then
        seckill_say "RabbitMQ did not answer at $host:$port within ${SECKILL_RABBITMQ_START_TIMEOUT}s; see /var/log/rabbitmq/ and run/rabbitmq.log"
        return 1
    fi
    if _seckill_bin rabbitmqctl >/dev/null; then
        _seckill_rabbitmqctl "$_SK_RABBIT_NODE" -q await_startup >>"$SECKILL_RUN_DIR/rabbitmq.log" 2>&1 ||
            seckill_say "note: rabbitmqctl await_startup failed (see run/rabbitmq.log), but the broker answers AMQP"
    fi
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
                    _seckill_url_split "$SECKILL_REDIS_URL" 6379
                    local -a auth=()
                    [[ -n $_SK_PASS ]] && auth=(env "REDISCLI_AUTH=$_SK_PASS")
                    "${auth[@]}" timeout 10 "$cli" -h 127.0.0.1 -p "$a" shutdown nosave >/dev/null 2>&1 || true
                fi
                if _seckill_tcp_open 127.0.0.1 "$a"; then
                    seckill_say "redis-server on port $a still answers"
                    rc=1
                fi
                ;;
            rabbitmq)
                seckill_say "stopping RabbitMQ (port $a)"
                _seckill_rabbitmqctl "${b:--}" stop >/dev/null 2>&1 || true
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

# Builds the workspace's binaries in release mode and sets SECKILL_BIN_DIR to where they are
# (CARGO_TARGET_DIR if set, else target/, as an absolute path).
build_release() {
    require_cargo || return 1
    seckill_say "cargo build --release --bins"
    cargo build --release --bins || return 1
    SECKILL_BIN_DIR=${CARGO_TARGET_DIR:-target}/release
    [[ $SECKILL_BIN_DIR == /* ]] || SECKILL_BIN_DIR=$SECKILL_ROOT/$SECKILL_BIN_DIR
}

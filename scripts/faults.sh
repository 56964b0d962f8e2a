#!/usr/bin/env bash
# scripts/faults.sh: the fault suite. It proves from outside that the system loses nothing when
# a service or a server dies: for each fault case a fresh sale, buyers arriving for several
# seconds (retrying 503, 504 and connection errors as real clients do), the fault injected
# mid-sale, the service or server brought back, then every accepted buyer's result awaited and
# checked against the gateway's answers and the databases (`seckill-faults`, crates/faults).
#
#   scripts/faults.sh                every case (about 11 minutes after the build; the room-*
#                                    cases fault a sale's waiting room of 10,000); writes
#                                    docs/RELIABILITY.md
#   scripts/faults.sh --quick        the CI subset (kill -9 of order-service; kill -9 of
#                                    seckill-service on a sale split over 8 stock buckets;
#                                    kill -9 of order-service started again while RabbitMQ is
#                                    down; Redis FLUSHALL + CLIENT KILL with requests queued, and
#                                    with 2,000 in a waiting room; kill -9 of a gateway holding
#                                    the buyers' event streams; two replicas of every service
#                                    with one of seckill- and order-service killed),
#                                    small sales; writes nothing
#   scripts/faults.sh CASE...        the named cases (`seckill-faults --list` names them)
#   scripts/faults.sh server KIND ACTION
#                                    controls one private server; the driver calls it.
#                                    KIND: pg | redis | rabbitmq; ACTION: start | stop | restart,
#                                    and for redis flush-kill (FLUSHALL, then CLIENT KILL TYPE
#                                    normal: what a restart without persistence, or a failover to
#                                    a replica that missed writes, does to the clients), for
#                                    rabbitmq stop-app | start-app (the broker refuses
#                                    connections while its node stays up: back in seconds)
#   scripts/faults.sh clean          stops what an interrupted run left, keeps its logs in
#                                    run/faults-logs/ and removes run/faults/ (scripts/down.sh
#                                    calls it)
#
# It never touches the user's own servers or data: it runs its OWN PostgreSQL (initdb, port
# 25432, trust on loopback, run as the postgres OS user when root), Redis (26379, no
# persistence) and RabbitMQ (a second node, seckill-faults@localhost, AMQP 26672, its own
# Erlang cookie), all in run/faults/ (gitignored), because it restarts them, FLUSHALLs Redis and
# kills connections; and the driver starts the four release binaries on 28080-28083 (gateway,
# seckill-, order-, stock-service; the gateway's admin listener on 28084) from run/faults/,
# where no config/ directory is read; a case with replicas runs replica k of each on its port
# + 10k (pid and log files run/faults/services/<name>.pid for replica 0, <name>-<k>.pid for
# replica k). At the end (trap) everything is stopped, the logs are kept in run/faults-logs/
# and run/faults/ is removed.
#
# Environment: FAULTS_PG_PORT (25432), FAULTS_REDIS_PORT (26379), FAULTS_AMQP_PORT (26672),
# FAULTS_RABBITMQ_DIST_PORT (26682; rabbitmqctl uses the ten ports after it), FAULTS_HTTP_PORT
# (28080: the gateway, the next three the other services, then the gateway's admin listener;
# replica k of each on its port + 10k, for k up to FAULTS_MAX_REPLICAS - 1);
# every default below 32768, outside Linux's range for outgoing connections' local ports, so a
# service restarted mid-case never finds its port taken by a buyer's connection;
# FAULTS_BIN_DIR: use the binaries already built there instead of cargo build --release. Exits
# non-zero when a case broke an invariant (each violation is named in the output) or the suite
# could not run.
# shellcheck disable=SC2317 # functions run through trap and _seckill_wait_for look unreachable
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"
cd "$SECKILL_ROOT"

FAULTS_DIR=$SECKILL_RUN_DIR/faults
FAULTS_LOGS=$SECKILL_RUN_DIR/faults-logs
export FAULTS_PG_PORT=${FAULTS_PG_PORT:-25432}
export FAULTS_REDIS_PORT=${FAULTS_REDIS_PORT:-26379}
export FAULTS_AMQP_PORT=${FAULTS_AMQP_PORT:-26672}
export FAULTS_RABBITMQ_DIST_PORT=${FAULTS_RABBITMQ_DIST_PORT:-26682}
export FAULTS_HTTP_PORT=${FAULTS_HTTP_PORT:-28080}
RABBIT_NODE=seckill-faults@localhost
PG_DIR=$FAULTS_DIR/pg
PG_DATA=$PG_DIR/data
REDIS_DIR=$FAULTS_DIR/redis
RABBIT_DIR=$FAULTS_DIR/rabbitmq
DRIVER_PID=$FAULTS_DIR/driver.pid
SERVICES=(gateway seckill-service order-service stock-service)
# Replica k of a service listens on its port + REPLICA_STEP*k (as with scripts/up.sh); the
# suite's cases run at most FAULTS_MAX_REPLICAS (crates/faults/src/cases.rs: MAX_REPLICAS).
REPLICA_STEP=10
FAULTS_MAX_REPLICAS=2

say() { printf 'faults: %s\n' "$*" >&2; }
die() {
    say "$*"
    exit 1
}

# ---------------------------------------------------------------------------------------------
# PostgreSQL: a cluster of its own in run/faults/pg, owned by the postgres OS user when root
# (PostgreSQL refuses to run as root).

# The newest /usr/lib/postgresql/<version>/bin (Debian), else where pg_ctl is on the PATH.
pg_bindir() {
    local d
    d=$(compgen -G '/usr/lib/postgresql/*/bin/pg_ctl' | sort -V | tail -n 1 || true)
    if [[ -n $d ]]; then
        dirname -- "$d"
    elif d=$(command -v pg_ctl); then
        dirname -- "$d"
    else
        return 1
    fi
}

as_pg() {
    if ((EUID == 0)); then
        "$(_seckill_bin runuser)" -u postgres -- "$@"
    else
        "$@"
    fi
}

pg_ctl_() { as_pg "$(pg_bindir)/pg_ctl" -D "$PG_DATA" "$@"; }

pg_init() {
    local bin
    bin=$(pg_bindir)
    mkdir -p "$PG_DIR"
    if ((EUID == 0)); then chown postgres: "$PG_DIR"; fi
    if ! as_pg test -w "$PG_DIR"; then
        die "the postgres OS user cannot write $PG_DIR (a parent directory not searchable by it?); run from a checkout it can reach."
    fi
    say "initdb: a private PostgreSQL cluster in $PG_DATA (port $FAULTS_PG_PORT, trust on loopback)"
    as_pg "$bin/initdb" -D "$PG_DATA" -U postgres -A trust -E UTF8 --no-sync >"$FAULTS_DIR/initdb.log" 2>&1 ||
        die "initdb failed; see $FAULTS_DIR/initdb.log"
    # TCP on loopback only, no Unix socket (nothing else can reach it by accident).
    cat >>"$PG_DATA/postgresql.conf" <<EOF

# scripts/faults.sh: a private server for the fault suite
listen_addresses = '127.0.0.1'
port = $FAULTS_PG_PORT
unix_socket_directories = ''
max_connections = 200
EOF
}

pg_start() { pg_ctl_ -l "$PG_DIR/postgres.log" -w -t 60 start >/dev/null; }
pg_stop() { pg_ctl_ -m fast -w -t 60 stop >/dev/null; }

# ---------------------------------------------------------------------------------------------
# Redis: no persistence, so a restart loses every key.

redis_cli() { timeout 10 redis-cli -h 127.0.0.1 -p "$FAULTS_REDIS_PORT" "$@"; }
redis_up() { [[ $(redis_cli ping 2>/dev/null) == PONG ]]; }

redis_start() {
    mkdir -p "$REDIS_DIR"
    redis-server --port "$FAULTS_REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes \
        --dir "$REDIS_DIR" --pidfile "$REDIS_DIR/redis.pid" --logfile "$REDIS_DIR/redis.log" >/dev/null
    _seckill_wait_for 30 redis_up || die "redis-server did not answer on port $FAULTS_REDIS_PORT; see $REDIS_DIR/redis.log"
}

redis_stop() {
    redis_cli shutdown nosave >/dev/null 2>&1 || true
    _seckill_wait_for 30 _seckill_tcp_closed 127.0.0.1 "$FAULTS_REDIS_PORT" ||
        die "redis-server on port $FAULTS_REDIS_PORT did not stop"
}

redis_flush_kill() {
    redis_cli FLUSHALL >/dev/null
    redis_cli CLIENT KILL TYPE normal >/dev/null
}

# ---------------------------------------------------------------------------------------------
# RabbitMQ: a second node with its own name, ports, data, logs, configuration files and Erlang
# cookie (HOME), so neither the system's node nor /etc/rabbitmq is involved. The scripts in
# /usr/lib/rabbitmq/bin are called directly: Debian's /usr/sbin wrappers switch to the rabbitmq
# user (HOME /var/lib/rabbitmq) and write /var/log/rabbitmq.

rabbit_bin() {
    if [[ -x /usr/lib/rabbitmq/bin/$1 ]]; then
        printf '%s\n' "/usr/lib/rabbitmq/bin/$1"
    else
        _seckill_bin "$1"
    fi
}

RABBIT_ENV=(
    "HOME=$RABBIT_DIR/home"
    "RABBITMQ_NODENAME=$RABBIT_NODE"
    RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
    "RABBITMQ_NODE_PORT=$FAULTS_AMQP_PORT"
    "RABBITMQ_DIST_PORT=$FAULTS_RABBITMQ_DIST_PORT"
    "RABBITMQ_CTL_DIST_PORT_MIN=$((FAULTS_RABBITMQ_DIST_PORT + 1))"
    "RABBITMQ_CTL_DIST_PORT_MAX=$((FAULTS_RABBITMQ_DIST_PORT + 10))"
    "RABBITMQ_MNESIA_BASE=$RABBIT_DIR/mnesia"
    "RABBITMQ_LOG_BASE=$RABBIT_DIR/log"
    "RABBITMQ_PID_FILE=$RABBIT_DIR/rabbit.pid"
    "RABBITMQ_ENABLED_PLUGINS_FILE=$RABBIT_DIR/enabled_plugins"
    "RABBITMQ_CONFIG_FILE=$RABBIT_DIR/rabbitmq.conf"
    "RABBITMQ_ADVANCED_CONFIG_FILE=$RABBIT_DIR/advanced.config"
    "RABBITMQ_CONF_ENV_FILE=$RABBIT_DIR/rabbitmq-env.conf"
    ERL_EPMD_ADDRESS=127.0.0.1
    "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}"
)

rabbitmqctl_() { env "${RABBIT_ENV[@]}" timeout 90 "$(rabbit_bin rabbitmqctl)" -n "$RABBIT_NODE" "$@"; }

rabbit_up() {
    rabbitmqctl_ -q await_startup >/dev/null 2>&1 &&
        env "${RABBIT_ENV[@]}" timeout 90 "$(rabbit_bin rabbitmq-diagnostics)" -n "$RABBIT_NODE" -q check_port_connectivity >/dev/null 2>&1
}

rabbit_wait_up() {
    _seckill_wait_for 120 rabbit_up ||
        die "RabbitMQ node $RABBIT_NODE did not start within 120 s; see $RABBIT_DIR/log/ and $RABBIT_DIR/start.log"
}

rabbit_init() {
    mkdir -p "$RABBIT_DIR/home" "$RABBIT_DIR/mnesia" "$RABBIT_DIR/log"
    # The node's own cookie: the CLI finds it in the same HOME.
    printf 'SECKILLFAULTS%s' "$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n' | tr a-f A-F)" >"$RABBIT_DIR/home/.erlang.cookie"
    chmod 400 "$RABBIT_DIR/home/.erlang.cookie"
    printf '[].\n' >"$RABBIT_DIR/enabled_plugins"
    printf '[].\n' >"$RABBIT_DIR/advanced.config"
    printf '# scripts/faults.sh: no settings from /etc/rabbitmq/rabbitmq-env.conf\n' >"$RABBIT_DIR/rabbitmq-env.conf"
    cat >"$RABBIT_DIR/rabbitmq.conf" <<EOF
# scripts/faults.sh: a private node for the fault suite, on loopback only
listeners.tcp.default = 127.0.0.1:$FAULTS_AMQP_PORT
log.console = false
log.file.level = info
EOF
}

rabbit_start() {
    say "starting RabbitMQ node $RABBIT_NODE (AMQP port $FAULTS_AMQP_PORT); this can take a minute"
    env "${RABBIT_ENV[@]}" "$(rabbit_bin rabbitmq-server)" -detached >>"$RABBIT_DIR/start.log" 2>&1 ||
        die "rabbitmq-server -detached failed; see $RABBIT_DIR/start.log"
    rabbit_wait_up
}

rabbit_stop() {
    rabbitmqctl_ shutdown >/dev/null 2>&1 || true
    _seckill_wait_for 30 _seckill_tcp_closed 127.0.0.1 "$FAULTS_AMQP_PORT" ||
        die "RabbitMQ node $RABBIT_NODE still answers on port $FAULTS_AMQP_PORT"
}

# A broker restart as the clients see it: every connection closed, durable queues and their
# persistent messages recovered from disk.
rabbit_restart() {
    rabbitmqctl_ -q stop_app >/dev/null
    rabbitmqctl_ -q start_app >/dev/null
    rabbit_wait_up
}

# ---------------------------------------------------------------------------------------------
# The `server` subcommand (called by the driver) and clean-up.

server_cmd() { # server_cmd KIND ACTION
    case $1:$2 in
        pg:start) pg_start ;;
        pg:stop) pg_stop ;;
        pg:restart) pg_stop && pg_start ;;
        redis:start) redis_start ;;
        redis:stop) redis_stop ;;
        redis:restart) redis_stop && redis_start ;;
        redis:flush-kill) redis_flush_kill ;;
        rabbitmq:start) rabbit_start ;;
        rabbitmq:stop) rabbit_stop ;;
        rabbitmq:restart) rabbit_restart ;;
        rabbitmq:stop-app) rabbitmqctl_ -q stop_app >/dev/null ;;
        rabbitmq:start-app) rabbitmqctl_ -q start_app >/dev/null ;;
        *) die "unknown server command: $1 $2 (KIND pg|redis|rabbitmq, ACTION start|stop|restart, redis flush-kill, rabbitmq stop-app|start-app)" ;;
    esac
}

pid_gone() { ! seckill_pid_alive "$@"; }

# Stops a process of ours by its pid file (checking the binary's name, so a reused pid is left
# alone): SIGCONT (a paused one), SIGTERM, then SIGKILL after 15 s.
stop_pidfile() { # stop_pidfile FILE NAME
    local pid
    [[ -f $1 ]] || return 0
    pid=$(cat "$1" 2>/dev/null || true)
    if seckill_pid_alive "$pid" "$2"; then
        say "stopping $2 (pid $pid)"
        kill -CONT "$pid" 2>/dev/null || true
        kill -TERM "$pid" 2>/dev/null || true
        _seckill_wait_for 15 pid_gone "$pid" "$2" || kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$1"
}

# Everything a run (or an interrupted one) left: the driver, every replica of the services
# (gateways first), the three servers.
stop_all() {
    local name pid f rc=0
    stop_pidfile "$DRIVER_PID" seckill-faults
    for name in "${SERVICES[@]}"; do
        for f in "$FAULTS_DIR/services/$name.pid" "$FAULTS_DIR/services/$name"-[0-9]*.pid; do
            if [[ -f $f ]]; then stop_pidfile "$f" "$name"; fi
        done
    done
    if [[ -f $REDIS_DIR/redis.pid ]] && seckill_pid_alive "$(cat "$REDIS_DIR/redis.pid")" redis-server; then
        say "stopping the private redis-server (port $FAULTS_REDIS_PORT)"
        redis_stop || rc=1
    fi
    if [[ -f $PG_DATA/postmaster.pid ]] && pg_bindir >/dev/null; then
        say "stopping the private PostgreSQL (port $FAULTS_PG_PORT)"
        pg_ctl_ -m fast -w -t 60 stop >/dev/null 2>&1 || rc=1
    fi
    if [[ -f $RABBIT_DIR/rabbit.pid ]]; then
        pid=$(cat "$RABBIT_DIR/rabbit.pid" 2>/dev/null || true)
        if seckill_pid_alive "$pid" beam.smp; then
            say "stopping the private RabbitMQ node $RABBIT_NODE"
            rabbitmqctl_ shutdown >/dev/null 2>&1 || true
            if seckill_pid_alive "$pid" beam.smp; then kill -KILL "$pid" 2>/dev/null || true; fi
        fi
    fi
    return "$rc"
}

keep_logs() {
    local f
    rm -rf "$FAULTS_LOGS"
    mkdir -p "$FAULTS_LOGS"
    for f in "$FAULTS_DIR"/services/*.log "$FAULTS_DIR"/*.log "$PG_DIR/postgres.log" "$REDIS_DIR/redis.log" \
        "$RABBIT_DIR"/log/*.log "$RABBIT_DIR/start.log"; do
        if [[ -f $f ]]; then cp -- "$f" "$FAULTS_LOGS/"; fi
    done
}

clean() {
    local rc=0
    [[ -d $FAULTS_DIR ]] || return 0
    stop_all || rc=1
    # The interrupted run's logs are the newest evidence there is.
    if compgen -G "$FAULTS_DIR/services/*.log" >/dev/null; then keep_logs; fi
    if ((rc == 0)); then rm -rf "$FAULTS_DIR"; fi
    return "$rc"
}

# ---------------------------------------------------------------------------------------------

case ${1:-} in
    server)
        (($# == 3)) || die "usage: scripts/faults.sh server pg|redis|rabbitmq start|stop|restart|flush-kill"
        server_cmd "$2" "$3"
        exit 0
        ;;
    clean)
        clean
        exit
        ;;
esac

# The run.
QUICK=0
CASES=0
ONLY_PRINT=0
for arg in "$@"; do
    case $arg in
        --quick) QUICK=1 ;;
        --list | -h | --help) ONLY_PRINT=1 ;;
        -*) ;;
        *) CASES=1 ;;
    esac
done

# The binaries: FAULTS_BIN_DIR, else a release build.
binaries() {
    if [[ -n ${FAULTS_BIN_DIR:-} ]]; then
        SECKILL_BIN_DIR=$(cd -- "$FAULTS_BIN_DIR" && pwd)
        say "using the binaries in $SECKILL_BIN_DIR (FAULTS_BIN_DIR), no build"
    else
        build_release || exit 1
    fi
    DRIVER=$SECKILL_BIN_DIR/seckill-faults
}

if ((ONLY_PRINT)); then
    binaries
    exec "$DRIVER" "$@"
fi

if [[ -f $DRIVER_PID ]] && seckill_pid_alive "$(cat "$DRIVER_PID")" seckill-faults; then
    die "a fault run is in progress (pid $(cat "$DRIVER_PID")); scripts/faults.sh clean stops it."
fi

# The servers' programs: installed from Debian packages when missing and possible.
need_program() { # need_program PROGRAM PACKAGE
    if [[ $1 == pg_ctl ]] && pg_bindir >/dev/null; then return 0; fi
    if [[ $1 != pg_ctl ]] && { _seckill_bin "$1" >/dev/null || [[ -x /usr/lib/rabbitmq/bin/$1 ]]; }; then return 0; fi
    if _seckill_can_install; then
        _seckill_apt_install "$2" || die "could not install $2 (see run/apt.log)"
    else
        die "$1 not found: install it as root with: apt-get install -y $2"
    fi
}
need_program pg_ctl postgresql
need_program redis-server redis-server
need_program redis-cli redis-tools
need_program rabbitmq-server rabbitmq-server
command -v psql >/dev/null 2>&1 || [[ -x $(pg_bindir)/psql ]] || need_program psql postgresql-client
if ((EUID == 0)) && ! id postgres >/dev/null 2>&1; then
    die "there is no postgres OS user to run the private PostgreSQL as; install the postgresql package (apt-get install -y postgresql)"
fi

say "removing what an interrupted run may have left (scripts/faults.sh clean)"
clean || die "could not stop what an earlier run left in $FAULTS_DIR; stop it by hand, then remove the directory"

port_free() { # port_free PORT WHAT
    if _seckill_tcp_open 127.0.0.1 "$1"; then
        die "port $1 ($2) is in use; free it or choose another with the FAULTS_*_PORT variables (see the header)"
    fi
}
port_free "$FAULTS_PG_PORT" "private PostgreSQL, FAULTS_PG_PORT"
port_free "$FAULTS_REDIS_PORT" "private Redis, FAULTS_REDIS_PORT"
port_free "$FAULTS_AMQP_PORT" "private RabbitMQ, FAULTS_AMQP_PORT"
port_free "$FAULTS_RABBITMQ_DIST_PORT" "private RabbitMQ distribution, FAULTS_RABBITMQ_DIST_PORT"
for ((k = 0; k < FAULTS_MAX_REPLICAS; k++)); do
    for i in 0 1 2 3 4; do port_free $((FAULTS_HTTP_PORT + REPLICA_STEP * k + i)) "services, FAULTS_HTTP_PORT"; done
done

binaries
"$DRIVER" --list "$@" >/dev/null || die "see above: nothing was started"
for name in "${SERVICES[@]}" seckill-faults; do
    [[ -x $SECKILL_BIN_DIR/$name ]] || die "$SECKILL_BIN_DIR/$name was not built"
done

on_exit() {
    local rc=$?
    trap - EXIT INT TERM
    stop_all || rc=1
    keep_logs
    rm -rf "$FAULTS_DIR"
    say "servers stopped, run/faults/ removed; the logs are in run/faults-logs/"
    exit "$rc"
}
mkdir -p "$FAULTS_DIR/services"
trap on_exit EXIT
trap 'exit 130' INT TERM

pg_init
pg_start
say "private PostgreSQL up on 127.0.0.1:$FAULTS_PG_PORT"
redis_start
say "private Redis up on 127.0.0.1:$FAULTS_REDIS_PORT"
rabbit_init
rabbit_start
say "private RabbitMQ up on 127.0.0.1:$FAULTS_AMQP_PORT (node $RABBIT_NODE)"

PSQL=$(pg_bindir)/psql
[[ -x $PSQL ]] || PSQL=$(command -v psql)
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
# The report this suite writes is not a change to the code it tested.
git diff --quiet HEAD -- . ':(exclude)docs/RELIABILITY.md' 2>/dev/null || COMMIT="$COMMIT (with local changes)"
ARGS=(--bin-dir "$SECKILL_BIN_DIR" --scratch "$FAULTS_DIR" --server-ctl "$SECKILL_ROOT/scripts/faults.sh"
    --pg-url "postgres://postgres:postgres@127.0.0.1:$FAULTS_PG_PORT"
    --redis-url "redis://127.0.0.1:$FAULTS_REDIS_PORT"
    --amqp-url "amqp://guest:guest@127.0.0.1:$FAULTS_AMQP_PORT/%2f"
    --http-port "$FAULTS_HTTP_PORT" --psql "$PSQL" --commit "$COMMIT")
if ((QUICK == 0 && CASES == 0)); then ARGS+=(--out docs/RELIABILITY.md); fi

rc=0
"$DRIVER" "${ARGS[@]}" "$@" &
echo $! >"$DRIVER_PID"
wait $! || rc=$?
rm -f "$DRIVER_PID"
exit "$rc"

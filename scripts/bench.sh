#!/usr/bin/env bash
# scripts/bench.sh: measure the flash sale side by side with this machine's limits, in ONE run,
# and write docs/BENCHMARKS.md (tables, ratios, targets, the machine, how to reproduce) and
# docs/bench/ (one JSON file per measurement, SVG charts of the scenarios).
#
#   0. The run leaves the user's system alone: every service it starts works under scratch
#      names, removed at its start (what an interrupted run left) and at its end (in the EXIT
#      trap, once the services are stopped): the databases seckill_bench_stock and
#      seckill_bench_order (SECKILL_STOCK_DB / SECKILL_ORDER_DB for up.sh), plus
#      seckill_bench_scratch for pgbench; the Redis key prefix seckill-bench:
#      (SECKILL__REDIS__KEY_PREFIX; keys deleted with SCAN + UNLINK); the AMQP prefix
#      seckill-bench. (SECKILL__AMQP__PREFIX; the queues and the exchange the services declare
#      are deleted with `seckill-bench amqp-cleanup`, the delay queues' names from the order
#      TTLs in effect: SECKILL__ORDER__TTL_SECS, else config/order-service.toml, else 1800; and
#      the storm's, STORM_TTLS). `seckill-bench push` runs a system of its own under the prefix
#      seckill_bench_push (databases seckill_bench_push_stock and _order, Redis keys
#      seckill_bench_push:*, queues seckill_bench_push.*), which it removes itself before and
#      after.
#   1. The servers (lib.sh's ensure_servers), the release build, the clean-up above, then
#      scripts/up.sh: the four services (as configured: seckill.require_token = true). Then,
#      for the one-hop baseline, a trivial upstream (seckill-bench upstream, :18083) and a
#      second gateway (:18080, same binary and config file) whose stock upstream is that
#      trivial server; its limits stay in its own memory (SECKILL__RATE_LIMIT__SHARED=false),
#      it forwards every buy click (SECKILL__SOLD_OUT__REMEMBER_MS=0), and its seckill
#      upstream is the system's seckill-service, so the sold-out scenario clicks through it
#      too: the gateway before shared limits, which the system's is compared with. Then two
#      gateways with the system gateway's settings (its Redis and key prefix, limits shared):
#      :18180 forwarding every buy click (SECKILL__SOLD_OUT__REMEMBER_MS=0), for the shared
#      limit's cost on a forwarded click, and :18280 as it is, the system gateway's twin, for
#      one user clicking over two gateways.
#   2. Phase A, the system exactly as up.sh started it (path tokens required):
#      seed, spike, hot-user (600 clicks at 200/s through :8080), hot-user-two-gateways (the same user's clicks
#      spread over :8080 and the twin :18280; both told the buy class's limit, so the report
#      sets what got through against burst + rate x elapsed).
#   3. Phase B: seckill-service alone is restarted with SECKILL__SECKILL__REQUIRE_TOKEN=false
#      (same binary, config file and servers; its pid goes to run/seckill-service.pid, so
#      down.sh stops it). Then BENCH_REPEAT times, interleaved so drift hits all alike: the
#      gateway's /healthz, the trivial upstream alone, the hop, the sold-out scenario (orders
#      without a path token) through the system gateway, through the hop gateway
#      (sold-out-per-replica; the sale created through :8080) and through the forwarding
#      gateway (sold-out-forwarded); then room (a sale behind a waiting room: joins, status
#      polls, admissions, buys; Redis memory per waiting user from the join script run directly
#      on a million users under the scratch prefix); then push (buyers' event streams, on a
#      system of its own: the four release binaries started by seckill-bench, its gateway on
#      BENCH_PUSH_PORT; 20,000 streams held on one gateway replica (quick 5,000): memory per
#      stream, CPU at rest; their buyers buying at 5,000/s asked: order commit to the `success`
#      event; a spike followed half on streams, half polling: requests per buyer); then
#      RabbitMQ persistent publishing with confirms, redis-benchmark
#      EVALSHA of the gate script, pgbench one order per transaction on one hot row; then drain
#      (closed loop, 500 connections), accept-at-rate (open loop at 0.6 x the RabbitMQ figure,
#      500 connections), accept-sustained (open loop at 0.8 x drain's accepted rate) and
#      overload and overload-5x (open loop at 2 x and 5 x drain's accepted rate, 2,000
#      connections: past capacity, shed with 503 BUSY);
#      drain-backlog is drain with the order-service stopped (SIGSTOP) during the load and
#      resumed at its end, so the consumer's own throughput shows on the backlog.
#   4. Phase C, the expiry storm: order-service alone is restarted with a short order TTL,
#      SECKILL__ORDER__TTL_SECS=STORM_TTL (60 s, quick 30; same binary, config file and
#      servers; its pid goes to run/order-service.pid), then `seckill-bench storm`: a spike, a
#      sale of STORM_USERS units bought one each, order-service stopped while their orders come
#      due and resumed with a second spike, the units timed back, the expired buyers buying
#      again.
#   5. seckill-bench markdown writes docs/BENCHMARKS.md; the upstream and the extra gateways are
#      stopped by their pids (run/bench/*.pid), the services by SECKILL_KEEP_SERVERS=1
#      scripts/down.sh, the scratch data is removed, then scripts/down.sh stops the servers
#      ensure_servers started (if any). After an interrupted run, scripts/down.sh stops
#      everything it left running; its scratch data goes at the next run's start.
#
# Environment: BENCH_QUICK=1 smaller sizes and one run of each baseline; BENCH_REPEAT (default
# 3, quick 1); BENCH_SECS (seconds of each http and sold-out run: default 8, quick 3);
# BENCH_UPSTREAM_PORT (18083), BENCH_HOP_PORT (18080), BENCH_HOP_ADMIN_PORT (19080: the hop
# gateway's admin listener, away from the system gateway's 9080); BENCH_FORWARD_PORT (18180),
# BENCH_FORWARD_ADMIN_PORT (19180) (the forwarding gateway),
# BENCH_TWIN_PORT (18280), BENCH_TWIN_ADMIN_PORT (19280); BENCH_PUSH_PORT (29180: the push
# scenario's gateway; its services take the next four ports); SECKILL_PG_URL,
# SECKILL_REDIS_URL, SECKILL_AMQP_URL as for up.sh. It needs psql and redis-cli (for the
# clean-up). It refuses to start while the system is already up (it needs the configuration it
# sets). A full run takes about 8 minutes after the build.
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"
cd "$SECKILL_ROOT"

QUICK=${BENCH_QUICK:-0}
[[ $QUICK == 0 || $QUICK == false ]] && QUICK=0 || QUICK=1
if ((QUICK)); then
    REPEAT=${BENCH_REPEAT:-1} SECS=${BENCH_SECS:-3}
    SPIKE_USERS=5000 SOLD_USERS=5000 DRAIN_USERS=10000 RATE_USERS=5000 STORM_USERS=10000 ROOM_USERS=5000
    PUSH_STREAMS=5000
    AMQP_MESSAGES=20000 REDIS_N=50000 PG_SECS=4
else
    REPEAT=${BENCH_REPEAT:-3} SECS=${BENCH_SECS:-8}
    SPIKE_USERS=20000 SOLD_USERS=10000 DRAIN_USERS=50000 RATE_USERS=20000 STORM_USERS=50000 ROOM_USERS=20000
    PUSH_STREAMS=20000
    AMQP_MESSAGES=100000 REDIS_N=200000 PG_SECS=10
fi
UPSTREAM_PORT=${BENCH_UPSTREAM_PORT:-18083}
HOP_PORT=${BENCH_HOP_PORT:-18080}
HOP_ADMIN_PORT=${BENCH_HOP_ADMIN_PORT:-19080}
FORWARD_PORT=${BENCH_FORWARD_PORT:-18180}
FORWARD_ADMIN_PORT=${BENCH_FORWARD_ADMIN_PORT:-19180}
TWIN_PORT=${BENCH_TWIN_PORT:-18280}
TWIN_ADMIN_PORT=${BENCH_TWIN_ADMIN_PORT:-19280}
PUSH_PORT=${BENCH_PUSH_PORT:-29180}
GW=http://127.0.0.1:8080
OUT=docs/bench
BDIR=run/bench
SERVICES=(gateway seckill-service order-service stock-service)
# The scratch names (see the header). Fixed, so that a run removes what an interrupted one left.
STOCK_DB=seckill_bench_stock
ORDER_DB=seckill_bench_order
PG_SCRATCH_DB=seckill_bench_scratch
REDIS_PREFIX=seckill-bench:
AMQP_PREFIX=seckill-bench.
AMQP_SCRATCH_QUEUE=${AMQP_PREFIX}scratch.amqp-publish
SCRATCH=0
NOTES=()
STARTED_AT=$(date -u +%Y-%m-%dT%H:%M:%SZ)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
SYSTEM_UP=0

say() { printf '\nbench: %s\n' "$*" >&2; }
die() {
    say "$*"
    exit 1
}

# ---------------------------------------------------------------------------------------------
# Clean-up: whatever this script started, whatever happens.

stop_pidfile() { # stop_pidfile FILE NAME
    local pid
    [[ -f $1 ]] || return 0
    pid=$(cat "$1" 2>/dev/null || true)
    if seckill_pid_alive "$pid" "$2"; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 40); do
            seckill_pid_alive "$pid" "$2" || break
            sleep 0.25
        done
        if seckill_pid_alive "$pid" "$2"; then kill -KILL "$pid" 2>/dev/null || true; fi
    fi
    rm -f "$1"
}

# Value of KEY in [SECTION] of a TOML file (a number or a bare word), or nothing.
toml_value() { # toml_value FILE SECTION KEY
    awk -v want="[$2]" -v key="$3" '
        /^[[:space:]]*\[/ { section = $0; gsub(/[[:space:]]/, "", section); next }
        section == want && $0 ~ "^[[:space:]]*" key "[[:space:]]*=" {
            sub(/^[^=]*=[[:space:]]*/, ""); sub(/[^0-9A-Za-z_.].*$/, ""); print; exit
        }' "$1" 2>/dev/null || true
}

# The names the delay and retry queues get depend on these settings: as the services see them.
ORDER_TTL=${SECKILL__ORDER__TTL_SECS:-$(toml_value config/order-service.toml order ttl_secs)}
ORDER_TTL=${ORDER_TTL:-1800}
# The storm's order TTL (phase C; full run, quick run): long enough for STORM_USERS orders to be
# written before the first comes due (50,000 took about 20 s here), short enough not to wait
# long after. The clean-up deletes the delay queues of both, whatever run was interrupted.
STORM_TTLS=(60 30)
STORM_TTL=${STORM_TTLS[QUICK]}
RETRY_DELAYS=()
for name in seckill-service order-service stock-service; do
    d=${SECKILL__AMQP__RETRY_DELAY_MS:-$(toml_value "config/$name.toml" amqp retry_delay_ms)}
    d=${d:-1000}
    [[ " ${RETRY_DELAYS[*]} " == *" $d "* ]] || RETRY_DELAYS+=("$d")
done

drop_scratch_dbs() {
    local db rc=0
    for db in "$STOCK_DB" "$ORDER_DB" "$PG_SCRATCH_DB"; do
        PGOPTIONS='-c client_min_messages=warning' psql -X -q -v ON_ERROR_STOP=1 "$SECKILL_PG_URL/postgres" \
            -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null || rc=1
    done
    return "$rc"
}

# SCAN for the prefix, UNLINK in batches of 500; again until a scan finds nothing (3 rounds).
delete_redis_keys() {
    local -a cli=(redis-cli -u "$SECKILL_REDIS_URL" --no-auth-warning)
    local round n total=0
    for round in 1 2 3; do
        n=$("${cli[@]}" --scan --pattern "${REDIS_PREFIX}*" |
            xargs -r -d '\n' -n 500 "${cli[@]}" UNLINK | awk '{ s += $1 } END { print s + 0 }') || return 1
        total=$((total + n))
        if [[ -z $("${cli[@]}" --scan --pattern "${REDIS_PREFIX}*" | head -n 1) ]]; then
            say "Redis: $total keys ${REDIS_PREFIX}* deleted"
            return 0
        fi
    done
    say "Redis: keys ${REDIS_PREFIX}* are still there after $round rounds"
    return 1
}

amqp_cleanup() {
    local d
    local -a args=(--amqp-url "$SECKILL_AMQP_URL" --prefix "$AMQP_PREFIX" --order-ttl-secs "$ORDER_TTL"
        --queue "$AMQP_SCRATCH_QUEUE")
    for d in "${STORM_TTLS[@]}"; do args+=(--order-ttl-secs "$d"); done
    for d in "${RETRY_DELAYS[@]}"; do args+=(--retry-delay-ms "$d"); done
    "$BENCH" amqp-cleanup "${args[@]}" >&2
}

# The run's scratch data, with the services stopped: databases, Redis keys, queues.
remove_scratch() {
    local rc=0
    drop_scratch_dbs || {
        say "could not drop the databases $STOCK_DB, $ORDER_DB, $PG_SCRATCH_DB"
        rc=1
    }
    delete_redis_keys || rc=1
    amqp_cleanup || {
        say "could not delete the queues ${AMQP_PREFIX}* (seckill-bench amqp-cleanup failed)"
        rc=1
    }
    return "$rc"
}

cleanup() {
    local rc=$?
    stop_pidfile "$BDIR/gateway-hop.pid" gateway
    stop_pidfile "$BDIR/gateway-forwarded.pid" gateway
    stop_pidfile "$BDIR/gateway-twin.pid" gateway
    stop_pidfile "$BDIR/upstream.pid" seckill-bench
    if ((SYSTEM_UP)); then
        # drain-backlog and storm stop the order-service for a while: never leave it stopped.
        if [[ -f run/order-service.pid ]]; then kill -CONT "$(cat run/order-service.pid)" 2>/dev/null || true; fi
        say "stopping the services (scripts/down.sh)"
        SECKILL_KEEP_SERVERS=1 scripts/down.sh || rc=1
        if ((SCRATCH)); then
            say "removing the scratch data: databases $STOCK_DB $ORDER_DB $PG_SCRATCH_DB, Redis keys ${REDIS_PREFIX}*, queues ${AMQP_PREFIX}*"
            remove_scratch || rc=1
        fi
        if [[ -s $SECKILL_STARTED_FILE ]]; then
            say "stopping the servers this run started (scripts/down.sh)"
            scripts/down.sh || rc=1
        fi
    fi
    exit "$rc"
}

# ---------------------------------------------------------------------------------------------
# Checks, then the system.

for name in "${SERVICES[@]}"; do
    if [[ -f run/$name.pid ]] && seckill_pid_alive "$(cat "run/$name.pid")" "$name"; then
        die "$name is already running (run/$name.pid): bench.sh starts the system itself with its own settings; stop it first with scripts/down.sh."
    fi
done
for port in "$UPSTREAM_PORT" "$HOP_PORT" "$HOP_ADMIN_PORT" "$FORWARD_PORT" "$FORWARD_ADMIN_PORT" "$TWIN_PORT" "$TWIN_ADMIN_PORT" \
    "$PUSH_PORT" "$((PUSH_PORT + 1))" "$((PUSH_PORT + 2))" "$((PUSH_PORT + 3))" "$((PUSH_PORT + 4))"; do
    if _seckill_tcp_open 127.0.0.1 "$port"; then
        die "port $port is in use; free it or set BENCH_UPSTREAM_PORT / BENCH_HOP_PORT / BENCH_HOP_ADMIN_PORT / BENCH_FORWARD_PORT / BENCH_FORWARD_ADMIN_PORT / BENCH_TWIN_PORT / BENCH_TWIN_ADMIN_PORT / BENCH_PUSH_PORT."
    fi
done
for tool in psql redis-cli; do
    command -v "$tool" >/dev/null 2>&1 ||
        die "$tool not found: bench.sh needs it to remove its scratch data (postgresql-client, redis-tools)."
done
mkdir -p run "$BDIR" "$OUT"
rm -f "$OUT"/*.json "$OUT"/*.svg
trap cleanup EXIT

# Every service up.sh starts (and the seckill-service restarted in phase B) works under these.
export SECKILL_STOCK_DB=$STOCK_DB SECKILL_ORDER_DB=$ORDER_DB
export SECKILL__REDIS__KEY_PREFIX=$REDIS_PREFIX SECKILL__AMQP__PREFIX=$AMQP_PREFIX
# The load tool mints every buyer's token and reads the goods from one address: the gateways'
# per-address limits on the anonymous routes (50/s by default) and on joining a waiting room
# (10/s) would be all it measured. Only the gateways take this section (up.sh and foreign_env
# drop it for the others).
export SECKILL__RATE_LIMIT__ANONYMOUS__PER_SEC=1000000 SECKILL__RATE_LIMIT__ANONYMOUS__BURST=1000000
export SECKILL__RATE_LIMIT__JOIN__PER_SEC=1000000 SECKILL__RATE_LIMIT__JOIN__BURST=1000000

UP_START=$SECONDS
SYSTEM_UP=1 # from here on the trap stops what was started (ensure_servers may start servers)
ensure_servers || exit 1
build_release || exit 1
BIN_DIR=$SECKILL_BIN_DIR
BENCH=$BIN_DIR/seckill-bench
[[ -x $BENCH ]] || die "$BENCH was not built (is crates/bench a workspace member?)"
SCRATCH=1
say "removing what an interrupted run may have left under the scratch names"
remove_scratch || die "could not remove an earlier run's scratch data (see above); nothing was started"

say "scripts/up.sh (the four services, databases $STOCK_DB and $ORDER_DB, Redis prefix $REDIS_PREFIX, AMQP prefix $AMQP_PREFIX)"
# One replica of each: phase B restarts seckill-service and pauses order-service by their pids.
env -u SECKILL_REPLICAS_GATEWAY -u SECKILL_REPLICAS_SECKILL -u SECKILL_REPLICAS_ORDER -u SECKILL_REPLICAS_STOCK \
    SECKILL_REPLICAS=1 scripts/up.sh
NOTES+=("The release build and scripts/up.sh took $((SECONDS - UP_START)) s before the first measurement.")
NOTES+=("The run used scratch names, removed by scripts/bench.sh when it ends (and at its start, should an interrupted run have left them): databases $STOCK_DB and $ORDER_DB ($PG_SCRATCH_DB for pgbench), Redis keys ${REDIS_PREFIX}*, queues and exchange ${AMQP_PREFIX}*; orders kept their configured TTL (order.ttl_secs = $ORDER_TTL s) until the storm (order.ttl_secs = $STORM_TTL s). The system's own databases, keys and queues were not touched.")

# SECKILL__<SECTION>__* variables of the caller that binary $1 does not have would stop it at
# start (its settings deny unknown sections): prints "-u VAR" for each, for env(1).
foreign_env() {
    local sections=$1 var section
    while IFS= read -r var; do
        [[ $var == SECKILL__*__* ]] || continue
        section=${var#SECKILL__}
        section=${section%%__*}
        section=${section,,}
        [[ " $sections " == *" $section "* ]] || printf -- '-u\n%s\n' "$var"
    done < <(compgen -e)
}

wait_http() { # wait_http URL PID NAME
    local deadline=$((SECONDS + 60))
    until curl -fsS -m 2 -o /dev/null "$1" 2>/dev/null; do
        seckill_pid_alive "$2" || die "$3 exited during start-up; see its log in run/"
        ((SECONDS < deadline)) || die "$3 is not ready after 60 s ($1)"
        sleep 0.5
    done
}

say "the one-hop baseline: upstream on :$UPSTREAM_PORT, a second gateway on :$HOP_PORT"
nohup "$BENCH" upstream --port "$UPSTREAM_PORT" </dev/null >"$BDIR/upstream.log" 2>&1 &
echo $! >"$BDIR/upstream.pid"
wait_http "http://127.0.0.1:$UPSTREAM_PORT/" "$(cat "$BDIR/upstream.pid")" "the trivial upstream"
mapfile -t UNSET < <(foreign_env "http log auth dev_token upstreams rate_limit admin storefront")
# A plain hop: its limits stay in its own memory (no Redis call per request), and it forwards
# every buy click (no answers of its own for a sale seckill-service called gone).
nohup env -u SECKILL_CONFIG "${UNSET[@]}" "SECKILL__HTTP__PORT=$HOP_PORT" "SECKILL__ADMIN__PORT=$HOP_ADMIN_PORT" \
    "SECKILL__UPSTREAMS__STOCK=http://127.0.0.1:$UPSTREAM_PORT" SECKILL__RATE_LIMIT__SHARED=false \
    SECKILL__SOLD_OUT__REMEMBER_MS=0 \
    "$BIN_DIR/gateway" </dev/null >"$BDIR/gateway-hop.log" 2>&1 &
echo $! >"$BDIR/gateway-hop.pid"
wait_http "http://127.0.0.1:$HOP_PORT/healthz" "$(cat "$BDIR/gateway-hop.pid")" "the hop gateway"
HOP_PIDS=(--pid "gateway-hop=$(cat "$BDIR/gateway-hop.pid")" --pid "upstream=$(cat "$BDIR/upstream.pid")")

# Gateways with the system gateway's settings, as up.sh starts it (its Redis, the key prefix
# exported above: their limits share the system gateway's buckets), on their own ports.
# Restarts one of up.sh's services alone with extra settings (VAR=value...): the same binary,
# config file, servers and scratch names; its pid goes back to run/NAME.pid and its old log to
# run/NAME.log.1. SECTIONS are its settings' sections: the caller's other SECKILL__* variables
# would stop it at start (foreign_env).
restart_service() { # restart_service NAME "SECTIONS" DEFAULT_PORT VAR=value...
    local name=$1 sections=$2 default_port=$3 port
    local -a unset shown=()
    shift 3
    local a
    for a in "$@"; do shown+=("${a%%=*}=$(seckill_redact "${a#*=}")"); done
    say "restarting $name with ${shown[*]}"
    stop_pidfile "run/$name.pid" "$name"
    mapfile -t unset < <(foreign_env "$sections")
    [[ -e run/$name.log ]] && mv -f "run/$name.log" "run/$name.log.1"
    nohup env -u SECKILL_CONFIG -u SECKILL__HTTP__PORT "${unset[@]}" \
        "SECKILL__REDIS__URL=$SECKILL_REDIS_URL" "SECKILL__AMQP__URL=$SECKILL_AMQP_URL" \
        "SECKILL__REDIS__KEY_PREFIX=$REDIS_PREFIX" "SECKILL__AMQP__PREFIX=$AMQP_PREFIX" "$@" \
        "$BIN_DIR/$name" </dev/null >"run/$name.log" 2>&1 &
    echo $! >"run/$name.pid"
    port=$(toml_value "config/$name.toml" http port)
    wait_http "http://127.0.0.1:${port:-$default_port}/readyz" "$(cat "run/$name.pid")" "$name"
}

start_shared_gateway() { # start_shared_gateway NAME PORT ADMIN_PORT [VAR=value...]
    local name=$1 port=$2 admin=$3
    shift 3
    local -a unset
    mapfile -t unset < <(foreign_env "http log auth dev_token upstreams rate_limit sold_out overload redis admin trust storefront")
    nohup env -u SECKILL_CONFIG "${unset[@]}" "SECKILL__HTTP__PORT=$port" "SECKILL__ADMIN__PORT=$admin" \
        "SECKILL__REDIS__URL=$SECKILL_REDIS_URL" "$@" \
        "$BIN_DIR/gateway" </dev/null >"$BDIR/gateway-$name.log" 2>&1 &
    echo $! >"$BDIR/gateway-$name.pid"
    wait_http "http://127.0.0.1:$port/healthz" "$(cat "$BDIR/gateway-$name.pid")" "the $name gateway"
}
say "gateways sharing the system gateway's limits: :$FORWARD_PORT forwarding every buy click, :$TWIN_PORT as configured"
start_shared_gateway forwarded "$FORWARD_PORT" "$FORWARD_ADMIN_PORT" SECKILL__SOLD_OUT__REMEMBER_MS=0
start_shared_gateway twin "$TWIN_PORT" "$TWIN_ADMIN_PORT"
FORWARD_GW=http://127.0.0.1:$FORWARD_PORT
TWIN_GW=http://127.0.0.1:$TWIN_PORT

# A gateway setting as the system's gateways see it: the environment, else
# config/gateway.toml, else the gateway's default (gateway/src/configuration.rs).
gateway_setting() { # gateway_setting SECTION KEY DEFAULT
    local var=SECKILL__${1^^}__${2^^}
    var=${var//./__}
    local v=${!var:-$(toml_value config/gateway.toml "$1" "$2")}
    printf '%s\n' "${v:-$3}"
}
BUY_LIMIT=(--buy-per-sec "$(gateway_setting rate_limit.buy per_sec 5)" --buy-burst "$(gateway_setting rate_limit.buy burst 10)")
SHARED_SETTINGS=(--gateway-setting "rate_limit.shared=$(gateway_setting rate_limit shared true)"
    --gateway-setting "rate_limit.lease=$(gateway_setting rate_limit lease 1)"
    --gateway-setting "sold_out.remember_ms=$(gateway_setting sold_out remember_ms 1000)")

# ---------------------------------------------------------------------------------------------
# Measurements. Each writes docs/bench/<name>[.<run>].json; a failed one is noted, not fatal.

measure() { # measure LABEL seckill-bench-args...
    local label=$1
    shift
    say "$label: seckill-bench $*"
    local rc=0
    "$BENCH" "$@" || rc=$?
    if ((rc == 3)); then
        NOTES+=("$label: an invariant broke (see its section).")
    elif ((rc != 0)); then
        NOTES+=("$label: seckill-bench failed (exit $rc); its figure is missing.")
    fi
}

external() { "$BENCH" external "$@"; }

# Phase A: path tokens required, as up.sh starts the system.
measure seed seed --gateway "$GW" --json "$OUT/seed.json" --chart "$OUT/seed.svg"
measure spike spike --gateway "$GW" --users "$SPIKE_USERS" --json "$OUT/spike.json" --chart "$OUT/spike.svg"
# 600 clicks at 200/s (40 times the default buy limit) for 3 s: long enough that the bucket's
# refill, not only its burst, is in what the limit lets through.
HOT=(--clicks 600 --rate 200 "${BUY_LIMIT[@]}" "${SHARED_SETTINGS[@]}")
measure hot-user hot-user --gateway "$GW" --first-user 900000 "${HOT[@]}" \
    --json "$OUT/hot-user.json" --chart "$OUT/hot-user.svg"
# The same clicks over two gateways sharing their limits (another user: a bucket of its own).
measure hot-user-two-gateways hot-user --name hot-user-two-gateways --gateway "$GW,$TWIN_GW" --first-user 900001 \
    "${HOT[@]}" --pid "gateway-twin=$(cat "$BDIR/gateway-twin.pid")" \
    --json "$OUT/hot-user-two-gateways.json"

# Phase B: seckill-service without path tokens (the accepted-buys figures need it).
restart_service seckill-service "http log redis amqp upstreams seckill" 8081 SECKILL__SECKILL__REQUIRE_TOKEN=false

for i in $(seq 1 "$REPEAT"); do
    measure "gateway-healthz #$i" http --name gateway-healthz --url "$GW/healthz" -c 200 --duration "$SECS" \
        --json "$OUT/gateway-healthz.$i.json"
    measure "upstream-direct #$i" http --name upstream-direct --url "http://127.0.0.1:$UPSTREAM_PORT/api/goods" \
        -c 200 --duration "$SECS" "${HOP_PIDS[@]}" --json "$OUT/upstream-direct.$i.json"
    chart=()
    ((i == 1)) && chart=(--chart "$OUT/hop.svg")
    measure "hop #$i" http --name hop --url "http://127.0.0.1:$HOP_PORT/api/goods" -c 200 --duration "$SECS" \
        "${HOP_PIDS[@]}" --json "$OUT/hop.$i.json" "${chart[@]}"
    chart=()
    ((i == 1)) && chart=(--chart "$OUT/sold-out.svg")
    measure "sold-out #$i" sold-out --gateway "$GW" --no-path-token -c 200 --users "$SOLD_USERS" \
        --duration "$SECS" --first-user $((200000 + i * 20000)) "${SHARED_SETTINGS[@]}" \
        --json "$OUT/sold-out.$i.json" "${chart[@]}"
    # The same clicks through the hop gateway, whose limits stay in its own memory (its stock
    # upstream is the trivial server: the sale is created and read back through :8080).
    measure "sold-out-per-replica #$i" sold-out --name sold-out-per-replica --gateway "http://127.0.0.1:$HOP_PORT" \
        --admin-gateway "$GW" --no-path-token -c 200 --users "$SOLD_USERS" --duration "$SECS" \
        --first-user $((5000000 + i * 20000)) --gateway-setting rate_limit.shared=false \
        --gateway-setting sold_out.remember_ms=0 \
        --pid "gateway-hop=$(cat "$BDIR/gateway-hop.pid")" --json "$OUT/sold-out-per-replica.$i.json"
    measure "sold-out-forwarded #$i" sold-out --name sold-out-forwarded --gateway "$FORWARD_GW" --no-path-token -c 200 \
        --users "$SOLD_USERS" --duration "$SECS" --first-user $((6000000 + i * 20000)) \
        --gateway-setting rate_limit.shared=true --gateway-setting sold_out.remember_ms=0 \
        --pid "gateway-forwarded=$(cat "$BDIR/gateway-forwarded.pid")" --json "$OUT/sold-out-forwarded.$i.json"
done

# A waiting room: its joins set against the hop, its polls (200 connections, SECS s) against
# sold-out; a quarter of the users buy (at 500 admitted a second), the rest are told sold out.
# Its Redis memory per waiting user comes from SECKILL_REDIS_URL (read from the environment,
# so a password stays out of the recorded command).
measure room room --gateway "$GW" --no-path-token --users "$ROOM_USERS" --stock $((ROOM_USERS / 4)) -c 200 \
    --poll-secs "$SECS" --first-user 30000000 --memory-prefix "${REDIS_PREFIX}room-memory:" \
    --json "$OUT/room.json" --chart "$OUT/room.svg"

# Buyers' event streams, on a system of its own (the release binaries under the prefix
# seckill_bench_push on the same servers, their URLs read from the environment): PUSH_STREAMS
# streams on one gateway replica, their buyers buying at 5,000/s asked, a spike of 4,000
# followed half on streams, half polling.
measure push push --bin-dir "$BIN_DIR" --scratch "$BDIR/push" --prefix seckill_bench_push --http-port "$PUSH_PORT" \
    --streams "$PUSH_STREAMS" --rate 5000 --spike-buyers 4000 --json "$OUT/push.json"

for i in $(seq 1 "$REPEAT"); do
    measure "amqp-publish #$i" amqp-publish --amqp-url "$SECKILL_AMQP_URL" --messages "$AMQP_MESSAGES" \
        --in-flight 1000 --queue "$AMQP_SCRATCH_QUEUE" --json "$OUT/amqp-publish.$i.json"
done

# Redis: EVALSHA of the gate script (seckill_common::scripts::RESERVE) on a scratch sale with
# a big stock; users random in 1..10^9, so nearly every call takes the decrement path.
redis_baseline() {
    local sha out i pl name csv
    # Both read the URL, password and all.
    local -a cli=(redis-cli --no-auth-warning -u "$SECKILL_REDIS_URL")
    local prefix="${REDIS_PREFIX}scratch:seckill:{0}:"
    # The script's KEYS, in its order (seckill_common::scripts::RESERVE).
    local -a keys=("${prefix}stock" "${prefix}users" "${prefix}pending" "${prefix}result" "${prefix}token"
        "${prefix}epoch")
    if ! command -v redis-benchmark >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
        for name in redis-evalsha redis-evalsha-p16; do
            external --name "$name" --skipped "redis-benchmark or redis-cli not installed (they come with redis-server / redis-tools)" \
                --out "$OUT/$name.json"
        done
        return 0
    fi
    sha=$("${cli[@]}" SCRIPT LOAD "$("$BENCH" gate-script)")
    for i in $(seq 1 "$REPEAT"); do
        for pl in 1 16; do
            name=redis-evalsha
            ((pl > 1)) && name=redis-evalsha-p$pl
            "${cli[@]}" DEL "${keys[@]}" >/dev/null
            "${cli[@]}" SET "${prefix}stock" 1000000000 >/dev/null
            local -a cmd=(redis-benchmark -u "$SECKILL_REDIS_URL" -c 50 -n "$REDIS_N" -r 1000000000 -P "$pl" --csv
                EVALSHA "$sha" "${#keys[@]}" "${keys[@]}" __rand_int__ __rand_int__ 0 "")
            say "$name #$i: ${cmd[*]}"
            out=$("${cmd[@]}" 2>/dev/null | tail -n 1) || out=
            # "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
            csv=$(printf '%s' "$out" | awk -F'","' '{gsub(/"/, "", $NF); print $2, $5, $7}')
            if [[ -n $csv && $csv != *[!0-9.\ ]* ]]; then
                read -r rps p50 p99 <<<"$csv"
                external --name "$name" --value "$rps" --unit "calls/s" --p50-ms "$p50" --p99-ms "$p99" \
                    --detail "redis-benchmark, 50 clients, pipeline $pl: EVALSHA of the gate script, decrement path on a big stock" \
                    --command "${cmd[*]//$sha/\$SHA}" --out "$OUT/$name.$i.json"
            else
                external --name "$name" --skipped "redis-benchmark gave no figure: $out" --out "$OUT/$name.$i.json"
            fi
        done
    done
    "${cli[@]}" DEL "${keys[@]}" >/dev/null
}
redis_baseline || NOTES+=("the Redis baseline failed")

# PostgreSQL: one order per transaction on one hot stock row, in a scratch database.
pg_baseline() {
    if ! command -v pgbench >/dev/null 2>&1; then
        say "pgbench not found (it comes with the PostgreSQL server package): the PostgreSQL baseline is skipped"
        external --name pg-hot-row --skipped "pgbench not installed (it comes with the PostgreSQL server package)" \
            --out "$OUT/pg-hot-row.json"
        return 0
    fi
    local db=$PG_SCRATCH_DB script=$BDIR/pg-order.sql out tps lat i
    PGOPTIONS='-c client_min_messages=warning' psql -q -v ON_ERROR_STOP=1 "$SECKILL_PG_URL/postgres" \
        -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db" >/dev/null
    # The order-service's orders table and a stock row like stock-service's goods.
    psql -q -v ON_ERROR_STOP=1 "$SECKILL_PG_URL/$db" >/dev/null <<'SQL'
CREATE TABLE goods (
    id BIGINT PRIMARY KEY,
    stock_total BIGINT NOT NULL,
    stock_available BIGINT NOT NULL CHECK (stock_available >= 0)
);
INSERT INTO goods VALUES (1, 1000000000, 1000000000);
CREATE TABLE orders (
    id BIGSERIAL PRIMARY KEY,
    request_id UUID NOT NULL UNIQUE,
    user_id BIGINT NOT NULL,
    goods_id BIGINT NOT NULL,
    price_cents BIGINT NOT NULL,
    status TEXT NOT NULL DEFAULT 'unpaid',
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX orders_one_active_per_user ON orders (user_id, goods_id) WHERE status IN ('unpaid', 'paid');
CREATE INDEX orders_by_user ON orders (user_id, id DESC);
SQL
    cat >"$script" <<'SQL'
\set u random(1, 1000000000)
BEGIN;
UPDATE goods SET stock_available = stock_available - 1 WHERE id = 1 AND stock_available > 0;
INSERT INTO orders (request_id, user_id, goods_id, price_cents, expires_at)
    VALUES (gen_random_uuid(), :u, 1, 49900, now() + interval '30 minutes') ON CONFLICT DO NOTHING;
END;
SQL
    for i in $(seq 1 "$REPEAT"); do
        local -a cmd=(pgbench -n -M prepared -c 16 -j 2 -T "$PG_SECS" -f "$script")
        say "pg-hot-row #$i: ${cmd[*]} <scratch database>"
        out=$("${cmd[@]}" "$SECKILL_PG_URL/$db" 2>&1) || true
        tps=$(printf '%s\n' "$out" | sed -nE 's/^tps = ([0-9.]+).*/\1/p' | head -n 1)
        lat=$(printf '%s\n' "$out" | sed -nE 's/^latency average = ([0-9.]+) ms.*/\1/p' | head -n 1)
        if [[ -n $tps ]]; then
            external --name pg-hot-row --value "$tps" --unit "orders/s" \
                --detail "pgbench, 16 clients, $PG_SECS s: one order per transaction (UPDATE goods ... WHERE stock_available > 0 on one row + INSERT INTO orders); average latency ${lat:-?} ms" \
                --command "${cmd[*]} \$SECKILL_PG_URL/<scratch db>  # script: scripts/bench.sh pg_baseline" \
                --out "$OUT/pg-hot-row.$i.json"
        else
            external --name pg-hot-row --skipped "pgbench failed: $(printf '%s' "$out" | tail -n 2 | tr '\n' ' ')" \
                --out "$OUT/pg-hot-row.$i.json"
        fi
    done
    psql -q "$SECKILL_PG_URL/postgres" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null || true
}
pg_baseline || NOTES+=("the PostgreSQL baseline failed")

measure drain drain --gateway "$GW" --no-path-token --users "$DRAIN_USERS" --stock $((DRAIN_USERS * 2)) -c 500 \
    --first-user 1000000 --json "$OUT/drain.json" --chart "$OUT/drain.svg"

# The consumer alone: order-service stopped (SIGSTOP) while the orders are accepted, resumed
# (SIGCONT) when the load ends, so it drains the whole backlog with nothing else arriving.
if [[ -f run/order-service.pid ]]; then
    measure drain-backlog drain --name drain-backlog --gateway "$GW" --no-path-token --users "$DRAIN_USERS" \
        --stock $((DRAIN_USERS * 2)) -c 500 --first-user 4000000 --pause-pid "$(cat run/order-service.pid)" \
        --json "$OUT/drain-backlog.json" --chart "$OUT/drain-backlog.svg"
fi

# ---------------------------------------------------------------------------------------------
# The synchronous design, beside the accept path alone (drain-backlog): one transaction per buy
# (conditional stock update + order insert under a unique (goods_id, user_id) index, commit)
# behind a minimal HTTP server inside seckill-bench, same buys, stock and connections, on the
# same PostgreSQL, in a throw-away database (seckill_bench_sync: created, dropped at the end;
# one an interrupted run left is dropped first).
measure sync sync --pg-url "$SECKILL_PG_URL" --buys "$DRAIN_USERS" --stock $((DRAIN_USERS * 2)) -c 500 \
    --json "$OUT/sync.json" --chart "$OUT/sync.svg"

# The p99 target at a rate the system should hold: 0.6 x the RabbitMQ confirm baseline.
AMQP_RATE=$("$BENCH" figure --dir "$OUT" amqp-publish 2>/dev/null || echo 0)
RATE=$(awk -v r="$AMQP_RATE" 'BEGIN { printf "%.0f", r * 0.6 }')
if ((RATE > 0)); then
    measure accept-at-rate drain --name accept-at-rate --gateway "$GW" --no-path-token --users "$RATE_USERS" \
        --stock $((RATE_USERS * 2)) -c 500 --rate "$RATE" --first-user 2000000 \
        --json "$OUT/accept-at-rate.json" --chart "$OUT/accept-at-rate.svg"
else
    NOTES+=("accept-at-rate skipped: no RabbitMQ figure to set its rate from.")
fi
# And at a rate this system sustains: 0.8 x the closed-loop accepted rate of drain.
DRAIN_RATE=$("$BENCH" figure --dir "$OUT" drain --metric accepted 2>/dev/null || echo 0)
RATE=$(awk -v r="$DRAIN_RATE" 'BEGIN { printf "%.0f", r * 0.8 }')
if ((RATE > 0)); then
    measure accept-sustained drain --name accept-sustained --gateway "$GW" --no-path-token --users "$RATE_USERS" \
        --stock $((RATE_USERS * 2)) -c 500 --rate "$RATE" --first-user 3000000 \
        --json "$OUT/accept-sustained.json" --chart "$OUT/accept-sustained.svg"
fi
# Past what it sustains: 2 x and 5 x drain's accepted rate, open loop, each for as long as
# accept-sustained lasted (clicks / rate). What is past capacity should be shed with 503 BUSY;
# the load tool retries such a click after its Retry-After (--busy-retries, 3 by default).
# 2,000 connections: at 500 the clicks would wait for the load tool's own connections, where
# no bound of the system's can see them; with more, the system's answers are what is timed.
for times in 2 5; do
    name=overload
    ((times == 2)) || name=overload-${times}x
    RATE=$(awk -v r="$DRAIN_RATE" -v t="$times" 'BEGIN { printf "%.0f", r * t }')
    OVERLOAD_USERS=$((RATE_USERS * 5 * times / 4))
    if ((RATE > 0)); then
        measure "$name" drain --name "$name" --gateway "$GW" --no-path-token --users "$OVERLOAD_USERS" \
            --stock $((OVERLOAD_USERS * 2)) -c 2000 --rate "$RATE" --first-user $((7000000 + times * 1000000)) \
            --json "$OUT/$name.json" --chart "$OUT/$name.svg"
    else
        NOTES+=("$name skipped: no drain figure to set its rate from.")
    fi
done

# ---------------------------------------------------------------------------------------------
# Phase C: the expiry storm, last (it changes the order TTL). order-service alone is restarted
# with a short one, so the storm's orders come due a minute after they were bought, not half an
# hour; seckill-service keeps phase B's settings (no path tokens). The storm stops order-service
# (SIGSTOP) while those orders come due and resumes it: the clean-up's kill -CONT covers an
# interrupted run, and its amqp-cleanup deletes the delay queue of this TTL too.
restart_service order-service "http log database redis amqp upstreams order trust" 8082 \
    "SECKILL__DATABASE__URL=$SECKILL_PG_URL/$ORDER_DB" "SECKILL__ORDER__TTL_SECS=$STORM_TTL"
measure storm storm --gateway "$GW" --no-path-token --users "$STORM_USERS" --spike-users "$SPIKE_USERS" \
    --order-ttl-secs "$STORM_TTL" --pause-pid "$(cat run/order-service.pid)" --first-user 8000000 \
    --json "$OUT/storm.json" --chart "$OUT/storm.svg"

# ---------------------------------------------------------------------------------------------
# The document.

version() { "$@" 2>/dev/null | head -n 1 || true; }
PG_SERVER=$(psql -At "$SECKILL_PG_URL/postgres" -c 'SHOW server_version' 2>/dev/null || true)
RABBIT=$(dpkg-query -W -f '${Version}' rabbitmq-server 2>/dev/null || true)
REDIS_V=$(redis-cli -u "$SECKILL_REDIS_URL" INFO server 2>/dev/null | sed -nE 's/^redis_version:([^\r]*).*/\1/p' || true)
LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
NOTES+=("Load average (1, 5, 15 min) at the start of the run: $LOAD_START; at the end: $LOAD (this machine has $(nproc) cores).")
QUICK_FLAG=()
((QUICK)) && QUICK_FLAG=(--quick)
"$BENCH" machine --out "$OUT/machine.json" "${QUICK_FLAG[@]}" --repeat "$REPEAT" \
    --started-at "$STARTED_AT" \
    --version-of "rustc=$(version rustc --version)" \
    --version-of "PostgreSQL server=${PG_SERVER:-unknown}" \
    --version-of "Redis server=${REDIS_V:-unknown}" \
    --version-of "RabbitMQ (Debian package)=${RABBIT:-unknown}" \
    --version-of "git commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')" \
    "${NOTES[@]/#/--note=}"
"$BENCH" markdown --dir "$OUT" --out docs/BENCHMARKS.md
say "done: docs/BENCHMARKS.md, docs/bench/"

#!/usr/bin/env bash
# scripts/up.sh: run the whole system locally, from a fresh clone, with no step before it.
#
#   1. ensure_servers (scripts/lib.sh): PostgreSQL, Redis, RabbitMQ answer (started or
#      installed when needed);
#   2. cargo build --release --bins;
#   3. starts stock-service, seckill-service, order-service, gateway (in that order, every
#      replica of one before the next) in the background from the repo root, each waiting for
#      the previous one's /readyz; each reads config/<name>.toml, logs to run/<name>.log, and
#      its pid goes to run/<name>.pid (replica k > 0: run/<name>-<k>.log, run/<name>-<k>.pid);
#   4. creates a demo sale through the gateway and prints curl lines for one purchase.
#
# Replicas: SECKILL_REPLICAS=N (default 1, at most 99) runs N replicas of every service;
# SECKILL_REPLICAS_GATEWAY, _SECKILL, _ORDER, _STOCK set one service's count (default
# SECKILL_REPLICAS). Replica k listens on its service's port + 10*k (gateways 8080, 8090, ...;
# seckill-service 8081, 8091, ...; order-service 8082, ...; stock-service 8083, ...), a gateway's
# admin listener on its admin port + 10*k (9080, 9090, ...); so no two collide below 100
# replicas. Every caller gets the list of all its callee's replicas (SECKILL__UPSTREAMS__*),
# and every gateway the same Redis, so a user's rate limit holds across the gateways.
#
# Environment: SECKILL_PG_URL, SECKILL_REDIS_URL, SECKILL_AMQP_URL (see lib.sh) choose the
# servers; SECKILL_STOCK_DB and SECKILL_ORDER_DB the databases of stock-service and
# order-service on SECKILL_PG_URL (default seckill_stock and seckill_order; created if missing);
# other SECKILL__SECTION__KEY variables reach the services that have that section (e.g.
# SECKILL__REDIS__KEY_PREFIX, SECKILL__AMQP__PREFIX: scripts/bench.sh runs the system under
# scratch names this way). SECKILL_READY_TIMEOUT (default 60) bounds each service's start.
# scripts/down.sh stops it all.
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"
cd "$SECKILL_ROOT"

SERVICES=(stock-service seckill-service order-service gateway)
# Standard ports (the config files may set others; the file wins).
declare -A STANDARD_PORT=([gateway]=8080 [seckill-service]=8081 [order-service]=8082 [stock-service]=8083)
# The config sections each binary accepts. Every settings struct denies unknown fields, so a
# SECKILL__<SECTION>__* variable may only reach a service that has that section.
# (Each binary's Settings struct; crates/deploy-check's tests read every deployment file
# through them.)
declare -A SECTIONS=(
    [gateway]="http log auth dev_token upstreams rate_limit sold_out overload redis admin trust storefront room"
    [seckill-service]="http log redis amqp upstreams seckill trust room"
    [order-service]="http log database redis amqp upstreams order trust"
    [stock-service]="http log database amqp stock trust"
)
# The upstreams.* keys each binary calls, by callee (order-service only calls stock-service).
declare -A CALLEES=(
    [gateway]="seckill-service order-service stock-service"
    [seckill-service]="order-service stock-service"
    [order-service]="stock-service"
    [stock-service]=""
)
# Replica k of a service listens on its port + REPLICA_STEP*k: the four standard ports differ in
# their last digit, so the replicas of different services never meet.
REPLICA_STEP=10
ADMIN_STANDARD_PORT=9080
READY_TIMEOUT=${SECKILL_READY_TIMEOUT:-60}
STOCK_DB=${SECKILL_STOCK_DB:-seckill_stock}
ORDER_DB=${SECKILL_ORDER_DB:-seckill_order}

die() {
    seckill_say "$*"
    exit 1
}

# config_port NAME [SECTION]: SECTION.port (default http) from config/<name>.toml, else empty.
config_port() {
    awk -v want="[${2:-http}]" '
        /^[[:space:]]*\[/ { section = $0; gsub(/[[:space:]]/, "", section); next }
        section == want && /^[[:space:]]*port[[:space:]]*=/ {
            sub(/^[^=]*=[[:space:]]*/, ""); sub(/[^0-9].*$/, ""); print; exit
        }' "config/$1.toml" 2>/dev/null || true
}

# The file name stem of replica $2 of service $1: run/<stem>.log, run/<stem>.pid.
replica_stem() {
    if (($2 == 0)); then printf '%s\n' "$1"; else printf '%s\n' "$1-$2"; fi
}

replica_port() { printf '%s\n' $((PORT[$1] + REPLICA_STEP * $2)); }

# The comma-separated URLs of every replica of service $1 (an upstreams.* value).
replica_urls() {
    local k urls=""
    for ((k = 0; k < REPLICAS[$1]; k++)); do
        urls+=${urls:+,}http://127.0.0.1:$(replica_port "$1" "$k")
    done
    printf '%s\n' "$urls"
}

# SECKILL_REPLICAS_<SERVICE> (gateway: GATEWAY, seckill-service: SECKILL, ...).
replicas_var() {
    local short=${1%-service}
    printf 'SECKILL_REPLICAS_%s\n' "${short^^}"
}

# Prints field $1 of the JSON object on stdin.
json_field() {
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import json,sys; v=json.load(sys.stdin)[sys.argv[1]]; print("" if v is None else v)' "$1"
    else
        sed -nE 's/.*"'"$1"'"[[:space:]]*:[[:space:]]*"?([^",}]*)"?.*/\1/p' | head -n 1
    fi
}

# api METHOD PATH [TOKEN] [BODY]: sets API_STATUS and API_BODY.
api() {
    local method=$1 path=$2 token=${3:-} body=${4:-} out
    local -a args=(-sS -m 15 -X "$method" -H 'content-type: application/json' -w '\n%{http_code}')
    [[ -n $token ]] && args+=(-H "authorization: Bearer $token")
    [[ -n $body ]] && args+=(--data "$body")
    out=$(curl "${args[@]}" "$GATEWAY$path") || die "$method $path failed: gateway at $GATEWAY not reachable"
    API_STATUS=${out##*$'\n'}
    API_BODY=${out%$'\n'*}
}

# start_service NAME K [VAR=value...]: starts replica K of NAME and waits for its /readyz.
start_service() {
    local name=$1 k=$2 bin var section pid stem port callee key
    shift 2 # the rest: VAR=value settings for this service
    stem=$(replica_stem "$name" "$k")
    port=$(replica_port "$name" "$k")
    local -a env_args=()
    bin=$BIN_DIR/$name
    # One config file per binary: SECKILL_CONFIG would make all four read the same file, and a
    # SECKILL__HTTP__PORT would give all four the same port.
    env_args+=(-u SECKILL_CONFIG -u SECKILL__HTTP__PORT)
    while IFS= read -r var; do
        [[ $var == SECKILL__*__* ]] || continue
        section=${var#SECKILL__}
        section=${section%%__*}
        section=${section,,}
        # Drop a section this binary lacks when another binary has it (SECKILL__REDIS__URL is
        # for seckill-service and order-service); a section none has stays, so that a typo
        # fails at start with the key named.
        if [[ " ${SECTIONS[$name]} " != *" $section "* && " ${SECTIONS[*]} " == *" $section "* ]]; then
            env_args+=(-u "$var")
        fi
    done < <(compgen -e)
    # Replica 0 runs exactly as a single instance does; the others get their own ports.
    if ((k > 0)); then
        env_args+=("SECKILL__HTTP__PORT=$port")
        [[ $name == gateway ]] && env_args+=("SECKILL__ADMIN__PORT=$((ADMIN_BASE + REPLICA_STEP * k))")
    fi
    # A replicated callee: every replica, so the caller spreads its calls over all of them.
    for callee in ${CALLEES[$name]}; do
        if ((REPLICAS[$callee] > 1)); then
            key=${callee%-service}
            env_args+=("SECKILL__UPSTREAMS__${key^^}=$(replica_urls "$callee")")
        fi
    done

    if [[ -e run/$stem.log ]]; then mv -f "run/$stem.log" "run/$stem.log.1"; fi
    seckill_say "starting $stem on port $port (log: run/$stem.log)"
    nohup env "${env_args[@]}" "$@" "$bin" </dev/null >"run/$stem.log" 2>&1 &
    pid=$!
    printf '%s\n' "$pid" >"run/$stem.pid"
    wait_ready "$stem" "$port" "$pid"
}

# start_replicas NAME [VAR=value...]: every replica of NAME, one after the other.
start_replicas() {
    local name=$1 k
    shift
    for ((k = 0; k < REPLICAS[$name]; k++)); do
        start_service "$name" "$k" "$@"
    done
}

fail_start() {
    local stem=$1
    seckill_say "$2; last 20 lines of run/$stem.log:"
    tail -n 20 "run/$stem.log" >&2 || true
    die "up.sh stopped; scripts/down.sh stops the services already started."
}

wait_ready() {
    local stem=$1 port=$2 pid=$3 deadline
    deadline=$((SECONDS + READY_TIMEOUT))
    while :; do
        if ! seckill_pid_alive "$pid"; then
            fail_start "$stem" "$stem exited during start-up"
        fi
        if curl -fsS -m 2 -o /dev/null "http://127.0.0.1:$port/readyz" 2>/dev/null; then
            seckill_say "$stem is ready (pid $pid)"
            return 0
        fi
        if ((SECONDS >= deadline)); then
            fail_start "$stem" "$stem is not ready after ${READY_TIMEOUT}s (http://127.0.0.1:$port/readyz)"
        fi
        sleep 1
    done
}

# ---------------------------------------------------------------------------------------------
# Checks that cost nothing come first.

command -v curl >/dev/null 2>&1 || die "curl not found: install it (apt-get install -y curl)."
for db in "$STOCK_DB" "$ORDER_DB"; do
    [[ $db =~ ^[a-z_][a-z0-9_]*$ ]] ||
        die "database name '$db' (SECKILL_STOCK_DB / SECKILL_ORDER_DB): use lower-case letters, digits and _"
done
[[ $STOCK_DB != "$ORDER_DB" ]] || die "SECKILL_STOCK_DB and SECKILL_ORDER_DB must differ (both $STOCK_DB)"
command -v python3 >/dev/null 2>&1 || seckill_say "note: python3 not found; using sed to read JSON, and the printed curl lines need python3"
mkdir -p run

[[ ${SECKILL_REPLICAS:-1} =~ ^[1-9][0-9]?$ ]] ||
    die "SECKILL_REPLICAS=${SECKILL_REPLICAS}: use a whole number from 1 to 99"
declare -A PORT REPLICAS LISTENER
ADMIN_BASE=${SECKILL__ADMIN__PORT:-$(config_port gateway admin)}
ADMIN_BASE=${ADMIN_BASE:-$ADMIN_STANDARD_PORT}
for name in "${SERVICES[@]}"; do
    var=$(replicas_var "$name")
    REPLICAS[$name]=${!var:-${SECKILL_REPLICAS:-1}}
    [[ ${REPLICAS[$name]} =~ ^[1-9][0-9]?$ ]] ||
        die "$var=${REPLICAS[$name]}: use a whole number from 1 to 99"
    PORT[$name]=$(config_port "$name")
    PORT[$name]=${PORT[$name]:-${STANDARD_PORT[$name]}}
    while IFS= read -r pidfile; do
        if seckill_pid_alive "$(cat "$pidfile")" "$name"; then
            die "$name is already running (pid $(cat "$pidfile"), $pidfile); stop it first with scripts/down.sh."
        fi
    done < <(service_pidfiles "$name")
done
# Every listener of every replica: distinct, and free.
for name in "${SERVICES[@]}"; do
    for ((k = 0; k < REPLICAS[$name]; k++)); do
        stem=$(replica_stem "$name" "$k")
        ports=("$(replica_port "$name" "$k")")
        [[ $name == gateway ]] && ports+=("$((ADMIN_BASE + REPLICA_STEP * k))")
        for port in "${ports[@]}"; do
            ((port <= 65535)) || die "$stem would listen on port $port: fewer replicas, or lower ports in config/$name.toml"
            [[ -z ${LISTENER[$port]:-} ]] ||
                die "$stem and ${LISTENER[$port]} would both listen on port $port: fewer replicas, or other ports in config/"
            LISTENER[$port]=$stem
            if _seckill_tcp_open 127.0.0.1 "$port"; then
                die "port $port ($stem) is already in use by a process up.sh did not start; stop it, or scripts/down.sh if it is ours."
            fi
        done
    done
done
GATEWAY=http://127.0.0.1:${PORT[gateway]}
GATEWAYS=()
for ((k = 0; k < REPLICAS[gateway]; k++)); do GATEWAYS+=("http://127.0.0.1:$(replica_port gateway "$k")"); done
if [[ -n ${SECKILL_CONFIG:-} ]]; then
    seckill_say "note: SECKILL_CONFIG is ignored here; each service reads config/<name>.toml"
fi
if [[ -n ${SECKILL__HTTP__PORT:-} ]]; then
    seckill_say "note: SECKILL__HTTP__PORT is ignored here; the ports come from config/<name>.toml"
fi
for name in "${SERVICES[@]}"; do
    key=${name%-service}
    var=SECKILL__UPSTREAMS__${key^^}
    if ((REPLICAS[$name] > 1)) && [[ -n ${!var:-} ]]; then
        seckill_say "note: $var is replaced here by the ${REPLICAS[$name]} replicas of $name"
    fi
done
if [[ -n ${SECKILL__DATABASE__URL:-} ]]; then
    seckill_say "note: SECKILL__DATABASE__URL is ignored here; set SECKILL_PG_URL (a server URL without a database name)"
fi

ensure_servers || exit 1
build_release || exit 1
BIN_DIR=$SECKILL_BIN_DIR
for name in "${SERVICES[@]}"; do
    [[ -x $BIN_DIR/$name ]] || die "$BIN_DIR/$name was not built (is $name a binary of the workspace?)"
done

start_replicas stock-service \
    "SECKILL__DATABASE__URL=$SECKILL_PG_URL/$STOCK_DB" "SECKILL__AMQP__URL=$SECKILL_AMQP_URL"
start_replicas seckill-service \
    "SECKILL__REDIS__URL=$SECKILL_REDIS_URL" "SECKILL__AMQP__URL=$SECKILL_AMQP_URL"
start_replicas order-service \
    "SECKILL__DATABASE__URL=$SECKILL_PG_URL/$ORDER_DB" \
    "SECKILL__REDIS__URL=$SECKILL_REDIS_URL" "SECKILL__AMQP__URL=$SECKILL_AMQP_URL"
# The gateway keeps its users' rate-limit buckets in Redis, shared with every gateway replica.
start_replicas gateway "SECKILL__REDIS__URL=$SECKILL_REDIS_URL"

# ---------------------------------------------------------------------------------------------
# A demo sale: 100 units, on sale from now for two hours.

api POST /api/auth/dev-token "" '{"user_id": 1, "role": "admin"}'
[[ $API_STATUS == 200 ]] ||
    die "could not get an admin dev token (HTTP $API_STATUS: $API_BODY); is auth.dev_tokens = true in config/gateway.toml?"
ADMIN_TOKEN=$(printf '%s' "$API_BODY" | json_field token) || die "no token in the dev-token answer: $API_BODY"

START_AT=$(date -u +%Y-%m-%dT%H:%M:%SZ)
END_AT=$(date -u -d '+2 hours' +%Y-%m-%dT%H:%M:%SZ)
api POST /api/admin/goods "$ADMIN_TOKEN" \
    "{\"name\": \"Demo phone\", \"price_cents\": 99900, \"seckill_price_cents\": 19900, \"stock_total\": 100, \"start_at\": \"$START_AT\", \"end_at\": \"$END_AT\"}"
[[ $API_STATUS == 201 ]] || die "could not create the demo sale (HTTP $API_STATUS: $API_BODY)"
GOODS_ID=$(printf '%s' "$API_BODY" | json_field id) || die "no id in the demo sale answer: $API_BODY"
[[ -n $GOODS_ID ]] || die "the demo sale answer has no id: $API_BODY"

PY_TOKEN="python3 -c 'import json,sys; print(json.load(sys.stdin)[\"token\"])'"
PY_ORDER="python3 -c 'import json,sys; print(json.load(sys.stdin)[\"order_id\"])'"
if ((${#GATEWAYS[@]} == 1)); then
    UP_LINE="gateway $GATEWAY"
    GW_NOTE=""
else
    UP_LINE="gateways ${GATEWAYS[*]} (replicas: gateway ${REPLICAS[gateway]}, seckill-service ${REPLICAS[seckill-service]}, order-service ${REPLICAS[order-service]}, stock-service ${REPLICAS[stock-service]})"
    GW_NOTE=" GW may be any gateway: ${GATEWAYS[*]}"
fi
cat <<EOF

Seckill is up: $UP_LINE; logs and pids in run/; stop everything with scripts/down.sh.
Demo sale: goods id $GOODS_ID, 100 units, on sale from $START_AT until $END_AT.
In a browser: $GATEWAY/ (the sales; buy on $GATEWAY/sales/$GOODS_ID), $GATEWAY/admin (create
sales, watch their figures), $GATEWAY/api/docs (the API).

One purchase (paste into bash; user 42 may buy once, another user_id buys again).$GW_NOTE

GW=$GATEWAY
TOKEN=\$(curl -s -X POST \$GW/api/auth/dev-token -H 'content-type: application/json' -d '{"user_id": 42, "role": "user"}' | $PY_TOKEN)
SALE_TOKEN=\$(curl -s -X POST \$GW/api/seckill/$GOODS_ID/token -H "authorization: Bearer \$TOKEN" | $PY_TOKEN)
curl -s -X POST \$GW/api/seckill/$GOODS_ID/orders -H "authorization: Bearer \$TOKEN" -H "x-seckill-token: \$SALE_TOKEN"; echo
sleep 1  # the order is written asynchronously: give the consumer a moment
curl -s \$GW/api/seckill/$GOODS_ID/result -H "authorization: Bearer \$TOKEN"; echo
ORDER_ID=\$(curl -s \$GW/api/seckill/$GOODS_ID/result -H "authorization: Bearer \$TOKEN" | $PY_ORDER)
curl -s \$GW/api/orders/\$ORDER_ID -H "authorization: Bearer \$TOKEN"; echo
EOF

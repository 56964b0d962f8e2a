#!/usr/bin/env bash
# scripts/bench-scaling.sh: the gate's throughput for one hot sale as Redis grows, in ONE run:
# one Redis server, then Redis Clusters of 1, 2 and 3 primaries, each with the sale's stock in
# 1, 2, 4 and 8 buckets (`seckill-bench gate`: the reserve script alone, as seckill-service calls
# it, on the release build). Prints a Markdown table (calls/s, and the ratio to one server with
# one bucket, the run's own baseline) and the CPU a call costs a Redis node; docs/SCALING.md
# holds a run's table and the arithmetic for a real cluster.
#
# Private servers on loopback, none of the user's touched: one Redis on port 7400 and the
# clusters' nodes on 7410, 7420-7421, 7430-7432 (their cluster buses at +10000), no
# persistence, under run/bench-scaling/, all stopped and removed at the end (also on Ctrl-C).
#
# Environment: BENCH_SECS (seconds of each run, default 5), BENCH_CONNECTIONS (calls in flight,
# default 64), BENCH_BUCKETS (default "1 2 4 8").
#
# On a machine with fewer cores than primaries the nodes share the cores with each other and
# with the load tool: the table shows how a sale spreads over the shards (each node's share of
# the calls), and docs/SCALING.md turns the per-call CPU into what each shard on a core of its
# own would add.
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

SECS=${BENCH_SECS:-5}
CONNECTIONS=${BENCH_CONNECTIONS:-64}
BUCKETS=${BENCH_BUCKETS:-1 2 4 8}
DIR=$SECKILL_RUN_DIR/bench-scaling
SINGLE_PORT=7400
declare -A CLUSTER_PORTS=([1]="7410" [2]="7420 7421" [3]="7430 7431 7432")
STARTED=()

say() { printf 'bench-scaling: %s\n' "$*" >&2; }

stop_all() {
    local port
    for port in "${STARTED[@]}"; do
        timeout 10 redis-cli -h 127.0.0.1 -p "$port" shutdown nosave >/dev/null 2>&1 || true
    done
    rm -rf "$DIR"
}
trap stop_all EXIT
trap 'exit 130' INT TERM

start_node() { # port [cluster]
    local port=$1 cluster=${2:-} dir=$DIR/$1
    local -a args=(--bind 127.0.0.1 --port "$port" --save "" --appendonly no --daemonize yes --dir "$dir"
        --logfile "$dir/redis.log" --pidfile "$dir/redis.pid")
    [[ -n $cluster ]] && args+=(--cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 2000)
    if _seckill_tcp_open 127.0.0.1 "$port"; then
        say "port $port is taken: free ports 7400-7432 (and 17410-17432) for this run"
        exit 1
    fi
    mkdir -p "$dir"
    redis-server "${args[@]}"
    STARTED+=("$port")
    _seckill_await 20 "the Redis node on port $port did not answer" _seckill_cluster_node_up "$port"
}

# A cluster of the given ports, the 16384 slots split evenly: CLUSTER ADDSLOTSRANGE and MEET by
# hand, as `redis-cli --cluster create` wants at least three primaries.
make_cluster() {
    local -a ports=("$@")
    local n=${#ports[@]} i lo hi
    for ((i = 0; i < n; i++)); do
        start_node "${ports[i]}" cluster
        lo=$((16384 * i / n))
        hi=$((16384 * (i + 1) / n - 1))
        redis-cli -p "${ports[i]}" cluster addslotsrange "$lo" "$hi" >/dev/null
    done
    for ((i = 1; i < n; i++)); do
        redis-cli -p "${ports[0]}" cluster meet 127.0.0.1 "${ports[i]}" >/dev/null
    done
    # lib.sh's check reads the ports from this variable.
    SECKILL_REDIS_CLUSTER_PORTS="${ports[*]}"
    _seckill_await 30 "the cluster ${ports[*]} did not form" _seckill_cluster_ok
}

urls() { # ports...
    local p out=''
    for p in "$@"; do out+="${out:+,}redis://127.0.0.1:$p"; done
    printf '%s' "$out"
}

_seckill_install_server Redis redis-server SECKILL_REDIS_URL redis-server || exit 1
build_release || exit 1
BENCH=$SECKILL_BIN_DIR/seckill-bench
rm -rf "$DIR" && mkdir -p "$DIR"

start_node "$SINGLE_PORT"
for n in 1 2 3; do
    # shellcheck disable=SC2086 # the ports are words
    make_cluster ${CLUSTER_PORTS[$n]}
done
say "servers ready: one Redis on $SINGLE_PORT; clusters of 1, 2 and 3 primaries"

RESULTS=$DIR/results.jsonl
: >"$RESULTS"
run() { # label buckets url [--cluster]
    local label=$1 buckets=$2 url=$3
    shift 3
    say "$label, $buckets bucket(s)"
    "$BENCH" gate --redis "$url" "$@" --buckets "$buckets" --connections "$CONNECTIONS" --secs "$SECS" \
        --label "$label" >>"$RESULTS"
}
for b in $BUCKETS; do
    run "one server" "$b" "$(urls "$SINGLE_PORT")"
    for n in 1 2 3; do
        # shellcheck disable=SC2086
        run "cluster of $n" "$b" "$(urls ${CLUSTER_PORTS[$n]})" --cluster
    done
done

python3 - "$RESULTS" "$SECS" "$CONNECTIONS" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
labels = ["one server", "cluster of 1", "cluster of 2", "cluster of 3"]
base = next(r["calls_per_sec"] for r in rows if r["label"] == "one server" and r["buckets"] == 1)
print(f"Gate calls/s for one hot sale ({sys.argv[3]} calls in flight, {sys.argv[2]} s each; ratio to one server, one bucket):\n")
print("| buckets | " + " | ".join(labels) + " |")
print("|---|" + "---|" * len(labels))
for b in sorted({r["buckets"] for r in rows}):
    cells = []
    for l in labels:
        r = next((r for r in rows if r["label"] == l and r["buckets"] == b), None)
        cells.append("-" if r is None else f'{r["calls_per_sec"]:,.0f} ({r["calls_per_sec"] / base:.2f})')
    print(f"| {b} | " + " | ".join(cells) + " |")
print("\nEach node's share of the calls, and the Redis CPU (main thread) per call:\n")
print("| run | buckets | calls per node | µs of CPU a call | p50 ms | p99 ms |")
print("|---|---|---|---|---|---|")
for r in rows:
    share = " / ".join(f"{c:,}" for c in r["calls_per_node"])
    print(f'| {r["label"]} | {r["buckets"]} | {share} | {r["cpu_us_per_call"]:.1f} | {r["p50_ms"]:.2f} | {r["p99_ms"]:.2f} |')
EOF

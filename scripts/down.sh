#!/usr/bin/env bash
# scripts/down.sh: stop exactly what up.sh (and lib.sh's ensure_servers) started, nothing else.
#
#   1. the four services, gateway first, by the pids in run/<name>.pid and, for the replicas
#      of SECKILL_REPLICAS (see up.sh), run/<name>-<k>.pid, and what an interrupted
#      scripts/bench.sh left running (run/bench/**/*.pid):
#      SIGTERM (and SIGCONT, for an order-service bench.sh had paused) to every replica of a
#      service at once, up to SECKILL_STOP_TIMEOUT (default 30) seconds for a graceful exit,
#      then SIGKILL;
#   2. the servers recorded in run/servers.started (PostgreSQL via pg_ctlcluster stop, Redis via
#      redis-cli shutdown nosave, RabbitMQ via rabbitmqctl stop); servers that were already
#      running before are left alone. SECKILL_KEEP_SERVERS=1 skips this step and the next;
#   3. what an interrupted scripts/faults.sh left (its driver, its services, its private
#      PostgreSQL, Redis and RabbitMQ, and run/faults/): scripts/faults.sh clean.
# Idempotent: with nothing recorded it only says so. A bench run's scratch databases, Redis keys
# and queues are not touched here: bench.sh removes them at its end, or at its next start.
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"
cd "$SECKILL_ROOT"

STOP_TIMEOUT=${SECKILL_STOP_TIMEOUT:-30}
stopped=0
rc=0

# True while any of the pids (of binary $1) is alive.
any_alive() {
    local name=$1 pid
    shift
    for pid in "$@"; do
        seckill_pid_alive "$pid" "$name" && return 0
    done
    return 1
}

# stop_service NAME PIDFILE...: stops the processes of binary NAME in those files together,
# then removes each file whose process is gone.
stop_service() {
    local name=$1 pidfile pid deadline i
    shift
    local -a pids=() files=()
    for pidfile in "$@"; do
        [[ -f $pidfile ]] || continue
        pid=$(cat "$pidfile" 2>/dev/null || true)
        if ! seckill_pid_alive "$pid" "$name"; then
            rm -f "$pidfile"
            continue
        fi
        if [[ $pidfile == "run/$name.pid" ]]; then
            seckill_say "stopping $name (pid $pid)"
        else
            seckill_say "stopping $name (pid $pid, $pidfile)"
        fi
        pids+=("$pid")
        files+=("$pidfile")
    done
    ((${#pids[@]})) || return 0
    stopped=1
    for pid in "${pids[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
        kill -CONT "$pid" 2>/dev/null || true
    done
    deadline=$((SECONDS + STOP_TIMEOUT))
    while any_alive "$name" "${pids[@]}" && ((SECONDS < deadline)); do
        sleep 0.5
    done
    if any_alive "$name" "${pids[@]}"; then
        seckill_say "$name did not exit within ${STOP_TIMEOUT}s; sending SIGKILL"
        for pid in "${pids[@]}"; do
            seckill_pid_alive "$pid" "$name" && { kill -KILL "$pid" 2>/dev/null || true; }
        done
        sleep 1
    fi
    for i in "${!pids[@]}"; do
        if seckill_pid_alive "${pids[i]}" "$name"; then
            seckill_say "$name (pid ${pids[i]}) is still alive"
            rc=1
        else
            rm -f "${files[i]}"
        fi
    done
}

# An interrupted bench run's: <name>.pid or <name>-<k>.pid, the binary's name before the -<k>.
for f in run/bench/upstream.pid run/bench/services/*.pid run/bench/*/services/*.pid; do
    [[ -f $f ]] || continue
    name=$(basename "$f" .pid)
    [[ $f == */upstream.pid ]] && name=seckill-bench
    stop_service "${name%-[0-9]*}" "$f"
done
for name in gateway order-service seckill-service stock-service; do
    mapfile -t pidfiles < <(service_pidfiles "$name")
    stop_service "$name" "${pidfiles[@]}"
done

if [[ ${SECKILL_KEEP_SERVERS:-0} == 1 ]]; then
    ((stopped)) || seckill_say "no service to stop"
    exit "$rc"
fi
if [[ -s $SECKILL_STARTED_FILE ]]; then
    stopped=1
    stop_started_servers || rc=1
fi
if [[ -d run/faults ]]; then
    stopped=1
    bash scripts/faults.sh clean || rc=1
fi

if ((stopped == 0)); then
    seckill_say "nothing to stop"
fi
exit "$rc"

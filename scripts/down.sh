#!/usr/bin/env bash
# scripts/down.sh: stop exactly what up.sh (and lib.sh's ensure_servers) started, nothing else.
#
#   1. the four services, gateway first, by the pids in run/<name>.pid: SIGTERM, up to
#      SECKILL_STOP_TIMEOUT (default 30) seconds for a graceful exit, then SIGKILL;
#   2. the servers recorded in run/servers.started (PostgreSQL via pg_ctlcluster stop, Redis via
#      redis-cli shutdown nosave, RabbitMQ via rabbitmqctl stop); servers that were already
#      running before are left alone.
# Idempotent: with nothing recorded it only says so.
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"
cd "$SECKILL_ROOT"

STOP_TIMEOUT=${SECKILL_STOP_TIMEOUT:-30}
stopped=0
rc=0

stop_service() {
    local name=$1 pidfile=run/$1.pid pid deadline
    [[ -f $pidfile ]] || return 0
    pid=$(cat "$pidfile" 2>/dev/null || true)
    if ! seckill_pid_alive "$pid" "$name"; then
        rm -f "$pidfile"
        return 0
    fi
    seckill_say "stopping $name (pid $pid)"
    stopped=1
    kill -TERM "$pid" 2>/dev/null || true
    deadline=$((SECONDS + STOP_TIMEOUT))
    while seckill_pid_alive "$pid" "$name" && ((SECONDS < deadline)); do
        sleep 0.5
    done
    if seckill_pid_alive "$pid" "$name"; then
        seckill_say "$name did not exit within ${STOP_TIMEOUT}s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        sleep 1
        if seckill_pid_alive "$pid" "$name"; then
            seckill_say "$name (pid $pid) is still alive"
            rc=1
            return 0
        fi
    fi
    rm -f "$pidfile"
}

for name in gateway order-service seckill-service stock-service; do
    stop_service "$name"
done

if [[ -s $SECKILL_STARTED_FILE ]]; then
    stopped=1
    stop_started_servers || rc=1
fi

if ((stopped == 0)); then
    seckill_say "nothing to stop"
fi
exit "$rc"

#!/usr/bin/env bash
# scripts/bench.sh: measure the flash sale side by side with this machine's limits, in ONE run,
# and write docs/BENCHMARKS.md (tables, ratios, targets, the machine, how to reproduce) and
# docs/bench/ (one JSON file per measurement, SVG charts of the scenarios).
#
# It makes sure PostgreSQL, Redis and RabbitMQ answer (lib.sh's ensure_servers: started or
# installed when needed), builds the release binaries, then runs `seckill-bench suite`
# (crates/bench/src/suite), which starts the system itself under scratch names of its own
# (databases seckill_bench_*, Redis keys seckill_bench:*, queues seckill_bench.*; removed at
# its start and end, the user's own data untouched), measures, and writes the documents. At
# the end the servers this script started, if any, are stopped again. A full run takes about
# 12 minutes after the build.
#
# Environment: BENCH_QUICK=1 smaller sizes and one run of each baseline; BENCH_REPEAT (runs of
# each baseline, default 3); BENCH_SECS (seconds of each http and sold-out run, default 8);
# BENCH_PORT (18080: the system's gateway; the others follow it, see `seckill-bench suite
# --help`); BENCH_PUSH_PORT (29180); SECKILL_PG_URL, SECKILL_REDIS_URL, SECKILL_AMQP_URL as for
# up.sh. Arguments go to `seckill-bench suite` unchanged. redis-benchmark and pgbench measure
# the servers' own limits; without them those baselines are marked not measured.
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"
cd "$SECKILL_ROOT"

trap 'stop_started_servers || true' EXIT
ensure_servers || exit 1
build_release || exit 1
export SECKILL_PG_URL SECKILL_REDIS_URL SECKILL_AMQP_URL
"$SECKILL_BIN_DIR/seckill-bench" suite --bin-dir "$SECKILL_BIN_DIR" "$@"

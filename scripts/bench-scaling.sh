#!/usr/bin/env bash
# scripts/bench-scaling.sh: the gate's throughput for one hot sale as Redis grows: one Redis
# server, then Redis Clusters of 1, 2 and 3 primaries, the sale's stock in 1, 2, 4 and 8
# buckets, on private redis-servers on loopback (ports 7400 to 7432, none of the user's
# touched). It installs redis-server when missing (Debian package, as root), builds the release
# binaries and runs `seckill-bench scaling`, which prints Markdown tables (docs/SCALING.md
# holds a run's). Environment: BENCH_SECS (seconds of each run, default 5), BENCH_CONNECTIONS
# (calls in flight, default 64); arguments go to `seckill-bench scaling` (see its --help).
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"
cd "$SECKILL_ROOT"

_seckill_install_server Redis redis-server SECKILL_REDIS_URL redis-server || exit 1
build_release || exit 1
exec "$SECKILL_BIN_DIR/seckill-bench" scaling "$@"

#!/usr/bin/env bash
# walpost's benchmark on the local stack: backlog drain, one big transaction
# and steady rates, each with ~200-byte and ~2 KB payloads, against
# pg_recvlogical, the decode ceiling (pg_recvlogical through a publication
# whose row filter emits nothing), a raw producer (walpost's sink, no
# PostgreSQL), walpost's stream alone (no Kafka) and Debezium, in one run.
# Run by `make bench` (which builds bin/walpost and starts the stack
# first). See bench/README.md for what is measured.
#
# Environment (defaults in parentheses; `go run ./bench/drain -h` lists the
# matching flags):
#   BENCH_WORKLOADS (drain,bigtxn,steady)  BENCH_PAYLOADS (200,2048)
#   BENCH_EVENTS (1000000)  BENCH_ROUNDS (3)  BENCH_WRITERS (4)  BENCH_TXN_SIZE (100)
#   BENCH_BIGTXN_EVENTS (200000)
#   BENCH_RATES (2000,10000,30000)  BENCH_STEADY_SECONDS (60)
#   BENCH_STEADY_WRITERS (8)  BENCH_STEADY_TXN_SIZE (10)
#   BENCH_DEBEZIUM (1; 0 skips it)  BENCH_RAW_PRODUCE (1; 0 skips it)
#   BENCH_STREAM_ALONE (1; 0 skips it)
#   BENCH_PARTITIONS (3)  BENCH_WALPOST (bin/walpost)  BENCH_PERF (off)
#   BENCH_OUT (bench/results; empty writes no file)
# Any other WALPOST_* variable (e.g. WALPOST_KAFKA_LINGER=10ms) is passed to
# walpost (and to the raw producer's settings) and noted in the result.
# A smoke run (about two minutes, no result file):
#   BENCH_EVENTS=20000 BENCH_BIGTXN_EVENTS=20000 BENCH_ROUNDS=1 \
#   BENCH_STEADY_SECONDS=5 BENCH_RATES=2000 BENCH_DEBEZIUM=0 BENCH_OUT= scripts/bench.sh
# Extra arguments go to the harness.
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
ROOT=$(cd -- "$SCRIPT_DIR/.." && pwd -P)
cd "$ROOT"

"$SCRIPT_DIR/stack.sh" up
# shellcheck disable=SC1091
. .stack/env

if [[ ! -x ${BENCH_WALPOST:-bin/walpost} ]]; then
	echo "bench: ${BENCH_WALPOST:-bin/walpost} missing: run make build (or make bench)" >&2
	exit 1
fi

# Build the harness first so its compile time never overlaps a measurement.
harness=$(mktemp -d)
trap 'rm -rf "$harness"' EXIT
${GO:-go} build -o "$harness/drain" ./bench/drain
"$harness/drain" "$@"

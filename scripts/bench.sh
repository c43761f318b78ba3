#!/usr/bin/env bash
# Backlog-drain benchmark: walpost vs pg_recvlogical on the local stack.
# Run by `make bench` (which builds bin/walpost and starts the stack first).
# See bench/README.md.
#
# Environment: BENCH_EVENTS (200000), BENCH_WRITERS (4), BENCH_TXN_SIZE (100),
# BENCH_PAYLOAD_BYTES (200), BENCH_PARTITIONS (3), BENCH_WALPOST (bin/walpost),
# BENCH_OUT (bench/results; empty writes no file). Any other WALPOST_* variable
# (e.g. WALPOST_KAFKA_LINGER=10ms) is passed to walpost and noted in the result.
# Extra arguments go to the harness (go run ./bench/drain -h lists them).
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

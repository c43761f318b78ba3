#!/usr/bin/env bash
# The failover test (make test-failover, and part of make test, on its
# second stack):
# a fresh primary and standby of PostgreSQL MAJOR (PG_VERSION=MAJOR
# PG_STANDBY=1 scripts/stack.sh up), TestFailoverPromotedStandby, which
# kills the primary and promotes the standby, then the stack down and both
# data directories removed (the old primary's has diverged).
#
# Usage: scripts/test-failover.sh [MAJOR]   (17 by default; 17 or 18)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
GO="${GO:-go}"
v=${1:-17}
unset PG_VERSION PG_STANDBY
# The stack's directory: .stack, or WALPOST_STACK_DIR for a second stack.
STACK_DIR="${WALPOST_STACK_DIR:-.stack}"
t0=$(date +%s)
reset() {
	scripts/stack.sh down
	rm -rf "$STACK_DIR/pg$v" "$STACK_DIR/standby$v"
}
reset
trap reset EXIT
PG_VERSION=$v PG_STANDBY=1 scripts/stack.sh up
# shellcheck disable=SC1091
. "$STACK_DIR/env"
# With TEST_REPORT_DIR (scripts/test.sh) through gotestsum, its -json kept
# for the slowest-tests report.
gotest=($GO test)
if [[ -n ${TEST_REPORT_DIR:-} ]]; then
	gotest=($GO run gotest.tools/gotestsum --format standard-quiet --hide-summary=skipped --jsonfile "$TEST_REPORT_DIR/failover$v.json" --)
fi
PG_VERSION=$v WALPOST_REQUIRE_STACK=1 "${gotest[@]}" -count=1 -timeout 15m -run '^(TestStandbySlotSyncReported|TestFailoverPromotedStandby)$' ./integration
printf '== failover test on PostgreSQL %s: ok (%ss)\n' "$v" "$(($(date +%s) - t0))" >&2

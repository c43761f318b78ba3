#!/usr/bin/env bash
# The core integration tests on other PostgreSQL majors (make test-pg,
# and part of make test, on its second stack). For each MAJOR: the stack's main
# PostgreSQL is stopped, PG_VERSION=MAJOR scripts/stack.sh up starts that
# major (Kafka keeps running), and the core subset runs against it. The
# stack is left running on the last major; scripts/stack.sh down stops it.
#
# Usage: scripts/test-pg.sh MAJOR...   (e.g. 14 16 17 18)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
GO="${GO:-go}"
# Each major is chosen per command below; one from make's command line
# (make test-pg PG_VERSION=17) must not pick the cluster pg-stop stops.
unset PG_VERSION
# The stack's directory: .stack, or WALPOST_STACK_DIR for a second stack
# (scripts/test.sh runs these tests on one beside the main suite).
STACK_DIR="${WALPOST_STACK_DIR:-.stack}"
(($#)) || { echo "usage: scripts/test-pg.sh MAJOR... (14 15 16 17 18)" >&2; exit 2; }

# Delivery in commit order, kill -9, PostgreSQL restart and crash, the idle
# slot (quiet outbox on a busy database, heartbeat), a big transaction,
# poison and replay, check, the failover slot reporting and the stack's
# version itself.
CORE='^(TestStackPostgresVersion|TestTransactionTimeoutOfTheRole|TestFailoverSlot|TestFailoverSlotConverted|TestCheck|TestDeliveryConcurrentWriters|TestKill9MidStream|TestPostgresRestartDuringLoad|TestQuietOutboxBusyOtherTable|TestHeartbeatAdvancesIdleSlot|TestBigTransaction|TestPoisonOversizedAndReplay|TestEmptyTransactionsDuringKafkaOutage)$'

rc=0
for v in "$@"; do
	printf '\n== core integration tests on PostgreSQL %s\n' "$v" >&2
	t0=$(date +%s)
	scripts/stack.sh pg-stop
	PG_VERSION=$v scripts/stack.sh up
	# shellcheck disable=SC1091
	. "$STACK_DIR/env"
	# With TEST_REPORT_DIR (scripts/test.sh) through gotestsum, its
	# -json kept for the slowest-tests report.
	gotest=($GO test)
	if [[ -n ${TEST_REPORT_DIR:-} ]]; then
		gotest=($GO run gotest.tools/gotestsum --format standard-quiet --hide-summary=skipped --jsonfile "$TEST_REPORT_DIR/pg$v.json" --)
	fi
	if PG_VERSION=$v WALPOST_REQUIRE_STACK=1 "${gotest[@]}" -count=1 -parallel "${TEST_PARALLEL:-6}" -timeout 20m -run "$CORE" ./integration; then
		printf '== PostgreSQL %s: ok (%ss)\n' "$v" "$(($(date +%s) - t0))" >&2
	else
		printf '== PostgreSQL %s: FAILED (%ss)\n' "$v" "$(($(date +%s) - t0))" >&2
		rc=1
	fi
done
exit "$rc"

#!/usr/bin/env bash
# The whole test suite (make test, .ci/run). Starts the local stack, runs
# static checks, unit tests with the race detector, short fuzz runs and the
# integration tests on PostgreSQL 15, then the core integration tests on
# each of WALPOST_TEST_PG_VERSIONS (14 16 17 18; empty skips them), the
# failover test on WALPOST_TEST_FAILOVER_VERSION (17; empty skips it), and
# stops the stack even when a step fails.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
GO="${GO:-go}"
# A count per fuzz target, never a duration (scripts/fuzz.sh says why).
FUZZ_EXECS="${FUZZ_EXECS:-300000x}"
PG_VERSIONS="${WALPOST_TEST_PG_VERSIONS-14 16 17 18}"
FAILOVER_VERSION="${WALPOST_TEST_FAILOVER_VERSION-17}"
if ! [[ $FUZZ_EXECS =~ ^[0-9]+x$ ]]; then
	echo "test: FUZZ_EXECS=\"$FUZZ_EXECS\" must be a count such as 300000x; a duration makes the fuzz runs fail at random (use make fuzz FUZZTIME=… for timed runs)" >&2
	exit 2
fi

step() { printf '\n== %s\n' "$*" >&2; }

step "go vet"
$GO vet ./...
step "staticcheck"
$GO run honnef.co/go/tools/cmd/staticcheck ./...

step "unit tests (-race)"
# shellcheck disable=SC2046
$GO test -race -count=1 $($GO list ./... | grep -v /integration)

step "fuzz (short)"
scripts/fuzz.sh "$FUZZ_EXECS"
step "walpost lint migrations/"
$GO run ./cmd/walpost lint migrations/

step "stack up"
trap 'step "stack down"; scripts/stack.sh down || true' EXIT
scripts/stack.sh up
# shellcheck disable=SC1091
. .stack/env

step "unit tests on the stack's PostgreSQL (writer, poison)"
# These packages test against a real server and skip without
# WALPOST_POSTGRES_URL, which the unit step above does not have; the poison
# store's tests use the migrated schema.
$GO run ./cmd/walpost migrate
WALPOST_REQUIRE_STACK=1 $GO test -count=1 ./writer ./poison

step "deploy: Helm chart, plain manifests (module deploy/)"
(cd deploy && $GO test -count=1 ./...)

step "integration tests"
WALPOST_REQUIRE_STACK=1 $GO test -count=1 -timeout 45m ./integration

step "Debezium-compatible records and the cutover against the real Debezium (TestDebeziumBytes, TestDebeziumCutover)"
WALPOST_DEBEZIUM=1 WALPOST_REQUIRE_STACK=1 $GO test -count=1 -timeout 20m -run '^(TestDebeziumBytes|TestDebeziumCutover)$' ./integration

if [[ -n $PG_VERSIONS ]]; then
	step "core integration tests on PostgreSQL $PG_VERSIONS"
	# shellcheck disable=SC2086
	scripts/test-pg.sh $PG_VERSIONS
fi
if [[ -n $FAILOVER_VERSION ]]; then
	step "failover test on PostgreSQL $FAILOVER_VERSION"
	scripts/test-failover.sh "$FAILOVER_VERSION"
fi

#!/usr/bin/env bash
# The whole test suite (make test, .ci/run). Starts the local stack, runs
# static checks, unit tests with the race detector, short fuzz runs and the
# integration tests on PostgreSQL 15, then the core integration tests on
# each of WALPOST_TEST_PG_VERSIONS (14 16 17 18; empty skips them), the
# failover test on WALPOST_TEST_FAILOVER_VERSION (17; empty skips it), and
# stops the stack even when a step fails. At the end, also on failure, it
# prints each step's time and the 20 slowest tests of the steps that run
# through gotestsum (their go test -json in TEST_REPORT_DIR,
# .test-report/ by default).
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

REPORT_DIR="${TEST_REPORT_DIR:-$ROOT/.test-report}"
rm -rf "$REPORT_DIR"
mkdir -p "$REPORT_DIR"
export TEST_REPORT_DIR="$REPORT_DIR"

# Step times: step closes the running step and starts the next.
step_names=()
step_secs=()
step_now=""
step_t0=0
close_step() {
	if [[ -n $step_now ]]; then
		step_names+=("$step_now")
		step_secs+=($((SECONDS - step_t0)))
		step_now=""
	fi
}
step() {
	close_step
	step_now="$*"
	step_t0=$SECONDS
	printf '\n== %s\n' "$*" >&2
}
# gotest NAME ARGS... runs go test ARGS through gotestsum, its output as
# go test's, its -json kept as NAME.json for the slowest-tests report.
gotest() {
	local name=$1
	shift
	$GO run gotest.tools/gotestsum --format standard-quiet --hide-summary=skipped --jsonfile "$REPORT_DIR/$name.json" -- "$@"
}
report() {
	close_step
	printf '\n== step times\n' >&2
	local i total=0
	for i in "${!step_names[@]}"; do
		printf '%6ss  %s\n' "${step_secs[$i]}" "${step_names[$i]}" >&2
		total=$((total + step_secs[i]))
	done
	printf '%6ss  total\n' "$total" >&2
	if compgen -G "$REPORT_DIR/*.json" >/dev/null; then
		printf '\n== the 20 slowest tests\n' >&2
		cat "$REPORT_DIR"/*.json | $GO run gotest.tools/gotestsum tool slowest --threshold 0s --num 20 >&2 || true
	fi
}
stack_started=""
on_exit() {
	local rc=$?
	if [[ -n $stack_started ]]; then
		step "stack down"
		scripts/stack.sh down || true
	fi
	report
	exit "$rc"
}
trap on_exit EXIT

step "go vet"
$GO vet ./...
step "staticcheck"
$GO run honnef.co/go/tools/cmd/staticcheck ./...

step "unit tests (-race)"
# shellcheck disable=SC2046
gotest unit -race -count=1 $($GO list ./... | grep -v /integration)

step "fuzz (short)"
scripts/fuzz.sh "$FUZZ_EXECS"
step "walpost lint migrations/"
$GO run ./cmd/walpost lint migrations/

step "stack up"
stack_started=1
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
WALPOST_REQUIRE_STACK=1 gotest integration -count=1 -timeout 45m ./integration

step "Debezium-compatible records and the cutover against the real Debezium (TestDebeziumBytes, TestDebeziumCutover)"
WALPOST_DEBEZIUM=1 WALPOST_REQUIRE_STACK=1 gotest debezium -count=1 -timeout 20m -run '^(TestDebeziumBytes|TestDebeziumCutover)$' ./integration

if [[ -n $PG_VERSIONS ]]; then
	step "core integration tests on PostgreSQL $PG_VERSIONS"
	# shellcheck disable=SC2086
	scripts/test-pg.sh $PG_VERSIONS
fi
if [[ -n $FAILOVER_VERSION ]]; then
	step "failover test on PostgreSQL $FAILOVER_VERSION"
	scripts/test-failover.sh "$FAILOVER_VERSION"
fi

#!/usr/bin/env bash
# The whole test suite (make test, .ci/run). Starts the local stack, runs
# static checks, unit tests with the race detector and the allocation
# gates without it (scripts/allocs.sh), short fuzz runs and the
# integration tests on PostgreSQL 15 (with Debezium's and a schema
# registry's: WALPOST_STACK_REGISTRY=1); beside those, on a
# second stack (scripts/stack.sh with WALPOST_STACK_DIR=.stack/second and
# its own ports, 25439-25440 and 29192-29203, WALPOST_TEST_SECOND_*_PORT
# to move them), the TestKafkaCluster* tests and a slice of the seeded
# nemesis (TestNemesisCluster: NEMESIS_SEED, 1; make nemesis runs the whole)
# on three Kafka nodes (KAFKA_NODES=3), the core integration tests on
# each of WALPOST_TEST_PG_VERSIONS (14 16 17 18; empty skips them) and the
# failover test on WALPOST_TEST_FAILOVER_VERSION (17; empty skips it). It
# stops both stacks even when a step fails. At the end, also on failure, it
# prints each step's time and the 20 slowest tests of the steps that run
# through gotestsum (their go test -json in TEST_REPORT_DIR,
# .test-report/ by default). TEST_PARALLEL (6) is go test's -parallel.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
GO="${GO:-go}"
# A count per fuzz target, never a duration (scripts/fuzz.sh says why).
FUZZ_EXECS="${FUZZ_EXECS:-300000x}"
PG_VERSIONS="${WALPOST_TEST_PG_VERSIONS-14 16 17 18}"
FAILOVER_VERSION="${WALPOST_TEST_FAILOVER_VERSION-17}"
# How many integration tests run at once. The tests that stop, restart or
# reconfigure the stack run alone, first; the others (t.Parallel) after
# them, this many at a time. Most of their time is waiting for walpost,
# so more than the cores.
PARALLEL="${TEST_PARALLEL:-6}"
export TEST_PARALLEL="$PARALLEL"
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
		failures
	fi
}
# failures repeats, last, each failed test's own messages (its
# file_test.go:line lines, not the logs and stacks it printed after them),
# so that the end of a long output still says what failed.
failures() {
	command -v python3 >/dev/null || return 0
	python3 - "$REPORT_DIR"/*.json >&2 <<'PY' || true
import json, re, sys
failed, out = [], {}
for path in sys.argv[1:]:
    for line in open(path, errors="replace"):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        t = e.get("Test")
        if not t:
            continue
        if e.get("Action") == "fail":
            failed.append(t)
        elif e.get("Action") == "output":
            out.setdefault(t, []).append(e.get("Output", ""))
if failed:
    print("\n== failed tests, their own messages")
    for t in failed:
        print("--- " + t)
        keep = [l.rstrip() for l in out.get(t, []) if re.match(r"\s+\w+_test\.go:\d+: ", l)]
        for l in keep[:8]:
            print(l[:400])
PY
}
stack_started=""
# The PostgreSQL majors, the failover test and the three Kafka nodes run on a second
# stack (WALPOST_STACK_DIR, other ports) beside the main integration tests:
# they stop and restart their own PostgreSQL and Kafka, never the main
# ones. Its ports are below the kernel's ephemeral range (32768-60999), so
# no test's freePort takes one while its server is down. (The main stack
# is the one in .stack: a WALPOST_STACK_DIR from a sourced second env must
# not redirect it.)
unset WALPOST_STACK_DIR
SECOND_STACK="$ROOT/.stack/second"
second_env=(
	WALPOST_STACK_DIR="$SECOND_STACK"
	WALPOST_STACK_PG_PORT="${WALPOST_TEST_SECOND_PG_PORT:-25439}"
	WALPOST_STACK_KAFKA_PORT="${WALPOST_TEST_SECOND_KAFKA_PORT:-29192}"
	WALPOST_STACK_KAFKA_CONTROLLER_PORT="${WALPOST_TEST_SECOND_KAFKA_CONTROLLER_PORT:-29193}"
	WALPOST_STACK_KAFKA_PROXIED_PORT="${WALPOST_TEST_SECOND_KAFKA_PROXIED_PORT:-29194}"
	WALPOST_STACK_KAFKA_PROXY_PORT="${WALPOST_TEST_SECOND_KAFKA_PROXY_PORT:-29195}"
)
second_pid=""
on_exit() {
	local rc=$?
	if [[ -n $second_pid ]]; then
		# The job runs in its own process group: stop all of it (go test,
		# test-pg.sh's loop) before its stack goes down.
		kill -TERM -- "-$second_pid" 2>/dev/null || true
		wait "$second_pid" 2>/dev/null || true
	fi
	if [[ -n $stack_started ]]; then
		step "stack down"
		scripts/stack.sh down || true
		env "${second_env[@]}" scripts/stack.sh down || true
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
step "allocation gates (without -race)"
# They skip under the race detector, so the run above does not gate them.
ALLOCS_JSON="$REPORT_DIR/allocs.json" GO="$GO" scripts/allocs.sh

step "fuzz (short)"
scripts/fuzz.sh "$FUZZ_EXECS"
step "walpost lint migrations/"
$GO run ./cmd/walpost lint migrations/

step "stack up"
stack_started=1
# With the schema registry (TestSchemaRegistryFormats): its JVM boots
# while PostgreSQL and Kafka start.
WALPOST_STACK_REGISTRY=1 scripts/stack.sh up
# shellcheck disable=SC1091
. .stack/env

step "unit tests on the stack's PostgreSQL (writer, poison)"
# These packages test against a real server and skip without
# WALPOST_POSTGRES_URL, which the unit step above does not have; the poison
# store's tests use the migrated schema.
$GO run ./cmd/walpost migrate
WALPOST_REQUIRE_STACK=1 $GO test -count=1 ./writer ./poison

step "deploy: Helm chart, plain manifests, image, alert rules, release workflow (module deploy/)"
(cd deploy && $GO test -count=1 ./...)
# The release workflow, checked as GitHub runs it (actionlint; with
# shellcheck when it is installed).
(cd deploy && $GO tool actionlint)

step "integration tests with Debezium's (PostgreSQL 15); beside them on a second stack the core tests on PostgreSQL ${PG_VERSIONS:-(none)}, the failover test on ${FAILOVER_VERSION:-(none)}, the three-node Kafka tests and a slice of the nemesis"
second_log="$REPORT_DIR/second-stack.log"
# Its own process group (job control on for the launch), so on_exit can
# stop the whole job; at a lower priority than the main run, whose serial
# tests have timing bounds.
set -m
(
	renice -n 10 -p "$BASHPID" >/dev/null || true
	export "${second_env[@]}"
	rc=0
	t0=$SECONDS
	if [[ -n $PG_VERSIONS ]]; then
		# shellcheck disable=SC2086
		scripts/test-pg.sh $PG_VERSIONS || rc=1
	fi
	if [[ -n $FAILOVER_VERSION ]]; then
		scripts/test-failover.sh "$FAILOVER_VERSION" || rc=1
	fi
	# The guarantees on three brokers (KAFKA_NODES=3): a partition leader
	# and the transaction coordinator killed under load, then a slice of
	# the seeded nemesis (make nemesis runs the whole): one seed in each
	# delivery mode, three faults each, the writers at a quarter of make
	# nemesis's pace (the main run shares the CPUs).
	scripts/stack.sh down || true
	KAFKA_NODES=3 scripts/stack.sh up
	# shellcheck disable=SC1091
	. "$SECOND_STACK/env"
	WALPOST_REQUIRE_STACK=1 WALPOST_NEMESIS_SEED="${NEMESIS_SEED:-1}" WALPOST_NEMESIS_SCHEDULES=1 WALPOST_NEMESIS_FAULTS=3 WALPOST_NEMESIS_EVENTS=5000 WALPOST_NEMESIS_PAUSE=400ms \
		gotest kafka3 -count=1 -timeout 15m -run '^(TestKafkaCluster.*|TestNemesisCluster)$' ./integration || rc=1
	scripts/stack.sh down || true
	printf '== second stack: PostgreSQL %s, failover on %s, three Kafka nodes and the nemesis slice took %ss (exit %s)\n' "${PG_VERSIONS:-(none)}" "${FAILOVER_VERSION:-(none)}" $((SECONDS - t0)) "$rc" >&2
	exit "$rc"
) >"$second_log" 2>&1 &
second_pid=$!
set +m
main_rc=0
WALPOST_DEBEZIUM=1 WALPOST_REQUIRE_STACK=1 WALPOST_REQUIRE_REGISTRY=1 gotest integration -count=1 -parallel "$PARALLEL" -timeout 45m -skip '^TestNemesis$' ./integration || main_rc=$?
second_rc=0
wait "$second_pid" || second_rc=$?
second_pid=""
printf '\n== the second stack (%s)\n' "$second_log" >&2
cat "$second_log" >&2
if ((main_rc != 0 || second_rc != 0)); then
	echo "test: integration tests failed (main stack exit $main_rc, second stack exit $second_rc)" >&2
	exit 1
fi

#!/usr/bin/env bash
# The whole test suite (make test, .ci/run). Starts the local stack (in
# the background, while the static checks run), runs static checks, unit
# tests with the race detector (lint's without it) and the allocation
# gates without it (scripts/allocs.sh), short fuzz runs and the
# integration tests on PostgreSQL 15 (with Debezium's and a schema
# registry's: WALPOST_STACK_REGISTRY=1). Beside those, two lanes, each on
# a stack of its own (scripts/stack.sh with WALPOST_STACK_DIR=.stack/NAME
# and its own ports; WALPOST_TEST_{SECOND,FOURTH}_{PG,KAFKA}_PORT move
# them): "second" (25439-25440, 29192-29203) runs the core integration
# tests on each of WALPOST_TEST_PG_VERSIONS (14 16 17 18; empty skips
# them), the failover test on WALPOST_TEST_FAILOVER_VERSION (17; empty
# skips it), then the TestKafkaCluster* tests and a slice of the seeded
# nemesis (TestNemesisCluster: NEMESIS_SEED, 1; make nemesis runs the
# whole) on three Kafka nodes (KAFKA_NODES=3); with
# WALPOST_TEST_SERIAL_LANE=1, "fourth" (25459, 29392-29395) the main
# suite's serial tests (SERIAL_TESTS below), which stop and restart
# their stack's servers. It stops every stack even when a step fails. At
# the end, also on failure, it prints each step's time, the 20 slowest
# tests of the steps that run through gotestsum (their go test -json in
# TEST_REPORT_DIR, .test-report/ by default) and each failed test's own
# messages. TEST_PARALLEL (6) is go test's -parallel.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
GO="${GO:-go}"
# A count per fuzz target, never a duration (scripts/fuzz.sh says why).
FUZZ_EXECS="${FUZZ_EXECS:-100000x}"
PG_VERSIONS="${WALPOST_TEST_PG_VERSIONS-14 16 17 18}"
FAILOVER_VERSION="${WALPOST_TEST_FAILOVER_VERSION-17}"
# The suite's brokers (every stack's, and those the tests restart through
# scripts/stack.sh) run on the client compiler only and the serial
# collector: they live minutes, under tests that keep both cores busy,
# and so spend about a third less CPU than with C2 and G1 (a broker's
# start 2.1-2.5 against 4.3-4.4 CPU s, four integration tests 7.4-8.0
# against 11.0-12.0 CPU s). make run and the benchmarks keep stack.sh's
# default.
export KAFKA_JVM_PERFORMANCE_OPTS="${KAFKA_JVM_PERFORMANCE_OPTS:--XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true}"
# How many integration tests run at once. The tests that stop, restart or
# reconfigure the stack run alone, first; the others (t.Parallel) after
# them, this many at a time. Most of their time is waiting for walpost,
# so more than the cores.
PARALLEL="${TEST_PARALLEL:-6}"
export TEST_PARALLEL="$PARALLEL"
if ! [[ $FUZZ_EXECS =~ ^[0-9]+x$ ]]; then
	echo "test: FUZZ_EXECS=\"$FUZZ_EXECS\" must be a count such as 100000x; a duration makes the fuzz runs fail at random (use make fuzz FUZZTIME=… for timed runs)" >&2
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
            failed.append((path, t))
        elif e.get("Action") == "output":
            out.setdefault((path, t), []).append(e.get("Output", ""))
if failed:
    print("\n== failed tests, their own messages")
    for path, t in failed:
        print("--- %s (%s)" % (t, path.rsplit("/", 1)[-1]))
        shown, follow = 0, 0
        for l in out.get((path, t), []):
            if re.match(r"\s+\w+_test\.go:\d+: ", l):
                # the harness's walpost log and goroutines are not the message
                follow = 0 if re.match(r"\s+harness_test\.go:", l) else 3
                if follow:
                    print(l.rstrip()[:400])
                    shown += 1
            elif follow > 0 and l.startswith("        "):
                print(l.rstrip()[:400])
                follow -= 1
            else:
                follow = 0
            if shown >= 8:
                break
PY
}
stack_started=""
# Beside the main integration run, a second stack and, with
# WALPOST_TEST_SERIAL_LANE=1, a fourth (WALPOST_STACK_DIR, other ports),
# each a lane of its own: "second" runs the core tests on
# the other PostgreSQL majors, then the failover test and the three-node
# Kafka tests with a slice of the nemesis; "fourth" (WALPOST_TEST_SERIAL_LANE=1) the main
# suite's serial tests (they stop and restart their stack's Kafka or
# PostgreSQL, so on the main stack they ran one at a time while nothing
# else did). A lane stops and restarts only its own servers. Their ports
# are below the kernel's ephemeral range (32768-60999), so no test's
# freePort takes one while its server is down. (The main stack is the one
# in .stack: a WALPOST_STACK_DIR from a sourced lane env must not redirect
# it.)
unset WALPOST_STACK_DIR
# lane_env NAME PG_PORT KAFKA_PORT: a lane's stack variables (Kafka's
# controller, proxied and proxy ports follow its port; a three-node
# cluster's nodes take the next blocks of four).
lane_env() {
	printf '%s\n' "WALPOST_STACK_DIR=$ROOT/.stack/$1" "WALPOST_STACK_PG_PORT=$2" \
		"WALPOST_STACK_KAFKA_PORT=$3" "WALPOST_STACK_KAFKA_CONTROLLER_PORT=$(($3 + 1))" \
		"WALPOST_STACK_KAFKA_PROXIED_PORT=$(($3 + 2))" "WALPOST_STACK_KAFKA_PROXY_PORT=$(($3 + 3))"
}
mapfile -t second_env < <(lane_env second "${WALPOST_TEST_SECOND_PG_PORT:-25439}" "${WALPOST_TEST_SECOND_KAFKA_PORT:-29192}")
mapfile -t fourth_env < <(lane_env fourth "${WALPOST_TEST_FOURTH_PG_PORT:-25459}" "${WALPOST_TEST_FOURTH_KAFKA_PORT:-29392}")
# The main suite's serial tests that need no Debezium (those stay on the
# main stack, which runs Kafka Connect): the fourth lane runs them, the
# main run skips them. A serial test missing here still runs, on the main
# stack, alone.
SERIAL_TESTS='TestExactlyOnceEveryFault|TestEmptyTransactionsDuringKafkaOutage|TestExactlyOnceKafkaRestart|TestBrokerDownLongerThanWalSenderTimeout|TestMetricsAndReadiness|TestStopDrainsWithinFlushTimeout|TestPostgresFastShutdownWhileKafkaUnreachable|TestStopDuringIsolation|TestSIGTERMMidStream|TestCheckRDSReplicationRole|TestFailoverSlot|TestCheck'
lane_pids=()
lane_names=()
on_exit() {
	local rc=$?
	local pid
	# A stack still starting finishes before it is stopped.
	if [[ -n ${stack_up_pid:-} ]]; then wait "$stack_up_pid" 2>/dev/null || true; fi
	for pid in "${lane_pids[@]}"; do
		# A lane runs in its own process group: stop all of it (go test,
		# test-pg.sh's loop) before its stack goes down.
		kill -TERM -- "-$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	if [[ -n $stack_started ]]; then
		step "stack down"
		scripts/stack.sh down || true
		env "${second_env[@]}" scripts/stack.sh down || true
		env "${fourth_env[@]}" scripts/stack.sh down || true
	fi
	report
	exit "$rc"
}
trap on_exit EXIT

# The main stack boots in the background while the steps before the
# integration tests run (its JVMs take most of a minute to start).
stack_started=1
WALPOST_STACK_REGISTRY=1 scripts/stack.sh up >"$REPORT_DIR/stack-up.log" 2>&1 &
stack_up_pid=$!

step "go vet"
$GO vet ./...
step "staticcheck"
$GO run honnef.co/go/tools/cmd/staticcheck ./...

step "unit tests (-race)"
# lint's tests run below without the race detector: the linter runs no
# goroutines of its own, and its parser (WebAssembly under wazero) is
# four times slower with -race.
# shellcheck disable=SC2046
gotest unit -race -count=1 $($GO list ./... | grep -v -e /integration -e /lint$)
step "lint's tests and the allocation gates (without -race)"
gotest unit-lint -count=1 ./lint
# The gates skip under the race detector, so the run above does not gate them.
ALLOCS_JSON="$REPORT_DIR/allocs.json" GO="$GO" scripts/allocs.sh

step "fuzz (short)"
scripts/fuzz.sh "$FUZZ_EXECS"
step "walpost lint migrations/"
$GO run ./cmd/walpost lint migrations/

step "stack up (waiting for the background start)"
# With the schema registry (TestSchemaRegistryFormats): its JVM boots
# while PostgreSQL and Kafka start.
stack_up_rc=0
wait "$stack_up_pid" || stack_up_rc=$?
stack_up_pid=""
cat "$REPORT_DIR/stack-up.log" >&2
((stack_up_rc == 0)) || { echo "test: scripts/stack.sh up failed (exit $stack_up_rc)" >&2; exit 1; }
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
# The release workflow, checked as GitHub runs it (actionlint, which
# also runs shellcheck on its steps when that is installed).
(cd deploy && $GO tool actionlint)

serial_lane_note=""
[[ ${WALPOST_TEST_SERIAL_LANE:-0} == 1 ]] && serial_lane_note="; the serial tests on a stack of their own"
step "integration tests with Debezium's (PostgreSQL 15); beside them on a second stack the core tests on PostgreSQL ${PG_VERSIONS:-(none)}, the failover test on ${FAILOVER_VERSION:-(none)}, the three-node Kafka tests and a slice of the nemesis${serial_lane_note}"
# lane NAME NICE ENV-ARRAY-NAME FUNCTION: FUNCTION in the background, in
# its own process group (job control on for the launch, so on_exit can
# stop all of it), with the lane's stack variables, its output in
# $REPORT_DIR/NAME-lane.log.
lane() {
	local name=$1 nice=$2 envname="$3[@]" fn=$4
	local -a lenv=("${!envname}")
	set -m
	(
		renice -n "$nice" -p "$BASHPID" >/dev/null || true
		export "${lenv[@]}"
		t0=$SECONDS
		rc=0
		"$fn" || rc=$?
		printf '== %s lane took %ss (exit %s)\n' "$name" $((SECONDS - t0)) "$rc" >&2
		exit "$rc"
	) >"$REPORT_DIR/$name-lane.log" 2>&1 &
	lane_pids+=($!)
	lane_names+=("$name")
	set +m
}
# The second lane: the core tests on each other PostgreSQL major, then
# failover_and_cluster (in a lane of their own, three Kafka JVMs
# restarting beside every other lane overloaded two cores).
second_lane() {
	local rc=0
	if [[ -n $PG_VERSIONS ]]; then
		# shellcheck disable=SC2086
		scripts/test-pg.sh $PG_VERSIONS || rc=1
	fi
	failover_and_cluster || rc=1
	return "$rc"
}
# failover_and_cluster: the failover test, then the guarantees on three brokers
# (KAFKA_NODES=3): a partition leader and the transaction coordinator
# killed under load, then a slice of the seeded nemesis (make nemesis runs
# the whole): one seed in each delivery mode, three faults each, the
# writers at a quarter of make nemesis's pace (the other lanes share the
# CPUs).
failover_and_cluster() {
	local rc=0
	if [[ -n $FAILOVER_VERSION ]]; then
		scripts/test-failover.sh "$FAILOVER_VERSION" || rc=1
	fi
	scripts/stack.sh down || true
	if ! KAFKA_NODES=3 scripts/stack.sh up; then
		scripts/stack.sh down || true # the nodes that did start
		return 1
	fi
	# shellcheck disable=SC1091
	. "$WALPOST_STACK_DIR/env"
	WALPOST_REQUIRE_STACK=1 WALPOST_NEMESIS_SEED="${NEMESIS_SEED:-1}" WALPOST_NEMESIS_SCHEDULES=1 WALPOST_NEMESIS_FAULTS=3 WALPOST_NEMESIS_EVENTS=5000 WALPOST_NEMESIS_PAUSE=400ms \
		gotest kafka3 -count=1 -timeout 15m -run '^(TestKafkaCluster.*|TestNemesisCluster)$' ./integration || rc=1
	scripts/stack.sh down || true
	return "$rc"
}
# The fourth lane: the main suite's serial tests, on PostgreSQL 15 and one
# broker of their own.
fourth_lane() {
	local rc=0
	if ! scripts/stack.sh up; then
		scripts/stack.sh down || true
		return 1
	fi
	# shellcheck disable=SC1091
	. "$WALPOST_STACK_DIR/env"
	WALPOST_REQUIRE_STACK=1 gotest serial -count=1 -timeout 30m -run "^($SERIAL_TESTS)\$" ./integration || rc=1
	scripts/stack.sh down || true
	return "$rc"
}
lane second 10 second_env second_lane
# The fourth lane only with WALPOST_TEST_SERIAL_LANE=1: on two busy cores
# a third set of servers made the timing-bound tests of every lane flaky.
main_skip="TestNemesis"
if [[ ${WALPOST_TEST_SERIAL_LANE:-0} == 1 ]]; then
	lane fourth 0 fourth_env fourth_lane
	main_skip="TestNemesis|$SERIAL_TESTS"
fi
main_rc=0
WALPOST_DEBEZIUM=1 WALPOST_REQUIRE_STACK=1 WALPOST_REQUIRE_REGISTRY=1 gotest integration -count=1 -parallel "$PARALLEL" -timeout 45m -skip "^($main_skip)\$" ./integration || main_rc=$?
# The main stack's JVMs (Kafka, Connect, the registry) would go on taking
# CPU from the lanes still running.
scripts/stack.sh down >"$REPORT_DIR/main-stack-down.log" 2>&1 || true
failed_lanes=()
for i in "${!lane_pids[@]}"; do
	lane_rc=0
	wait "${lane_pids[$i]}" || lane_rc=$?
	printf '\n== the %s lane (%s)\n' "${lane_names[$i]}" "$REPORT_DIR/${lane_names[$i]}-lane.log" >&2
	cat "$REPORT_DIR/${lane_names[$i]}-lane.log" >&2
	((lane_rc == 0)) || failed_lanes+=("${lane_names[$i]} (exit $lane_rc)")
done
lane_pids=()
if ((main_rc != 0 || ${#failed_lanes[@]} > 0)); then
	echo "test: integration tests failed (main stack exit $main_rc; lanes failed: ${failed_lanes[*]:-none})" >&2
	exit 1
fi

#!/usr/bin/env bash
# The seeded nemesis on three Kafka nodes (make nemesis): stacks of its own
# (KAFKA_NODES=3, in .stack/nemesis-<mode>, on their own ports, so a running
# `make stack-up` is left alone), integration.TestNemesisCluster over the
# seeds, then the report bench/results/nemesis-<date>.md with its chart
# (.svg) and the raw results (.jsonl) beside it.
#
# Environment (make variables of the same names):
#   SEED       first seed (1)
#   SCHEDULES  seeds per delivery mode (50)
#   MODES      at-least-once,exactly-once (both)
#   FAULTS     faults per schedule (4)
#   EVENTS     events written per schedule at least (52000)
#   PAUSE      each of the eight writers' pause between transactions (100ms:
#              about 2,400 events/s)
#   PARALLEL   1: the modes one after the other on one stack; 2 (default):
#              each mode on its own stack, at the same time
#   REPORT     the report's path (bench/results/nemesis-<date>.md)
#
# One schedule again: make nemesis SEED=17 SCHEDULES=1 MODES=exactly-once
# A failed schedule leaves its history in .stack/nemesis-<mode>/out.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
GO=${GO:-go}
SEED=${SEED:-1}
SCHEDULES=${SCHEDULES:-50}
MODES=${MODES:-at-least-once,exactly-once}
FAULTS=${FAULTS:-4}
EVENTS=${EVENTS:-52000}
PARALLEL=${PARALLEL:-2}
PAUSE=${PAUSE:-100ms}
DATE=$(date -u +%F)
REPORT=${REPORT:-bench/results/nemesis-$DATE.md}
case $PARALLEL in 1 | 2) ;; *)
	echo "nemesis: PARALLEL=$PARALLEL: use 1 (one stack) or 2 (a stack per mode)" >&2
	exit 2
	;;
esac
for v in SEED SCHEDULES FAULTS EVENTS; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || {
		echo "nemesis: $v=${!v}: want a positive number" >&2
		exit 2
	}
done
IFS=, read -r -a modes <<<"$MODES"
for m in "${modes[@]}"; do
	[[ $m == at-least-once || $m == exactly-once ]] || {
		echo "nemesis: MODES=$MODES: want at-least-once, exactly-once or both, comma-separated" >&2
		exit 2
	}
done

# The commit under test (the tests build walpost from the tree once, at
# their start).
REV=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || REV="$REV+changes"
$GO build -o bin/walpost ./cmd/walpost

# stack_env DIR PORT_BASE: the variables of a stack in DIR whose ports
# start at PORT_BASE (PostgreSQL) and PORT_BASE+1000.. (Kafka's three
# nodes: 4 ports each). Below the kernel's ephemeral range.
stack_env() {
	local k=$(($2 + 1000))
	echo WALPOST_STACK_DIR="$ROOT/$1" WALPOST_STACK_PG_PORT="$2" WALPOST_STACK_KAFKA_PORT="$k" \
		WALPOST_STACK_KAFKA_CONTROLLER_PORT=$((k + 1)) WALPOST_STACK_KAFKA_PROXIED_PORT=$((k + 2)) \
		WALPOST_STACK_KAFKA_PROXY_PORT=$((k + 3))
}

pids=()
dirs=()
cleanup() {
	local d
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	for d in "${dirs[@]}"; do
		# shellcheck disable=SC2046
		env $(stack_env "$d" 0) scripts/stack.sh down >/dev/null 2>&1 || true
	done
}
trap cleanup EXIT

# run MODES DIR PORT_BASE: one stack, the given modes' schedules on it.
run() {
	local modes=$1 dir=$2 base=$3 rc=0
	# shellcheck disable=SC2046
	export $(stack_env "$dir" "$base")
	KAFKA_NODES=3 scripts/stack.sh up
	# shellcheck disable=SC1091
	. "$ROOT/$dir/env"
	mkdir -p "$ROOT/$dir/out"
	rm -f "$ROOT/$dir/out/results.jsonl"
	WALPOST_REQUIRE_STACK=1 WALPOST_NEMESIS_SEED=$SEED WALPOST_NEMESIS_SCHEDULES=$SCHEDULES \
		WALPOST_NEMESIS_MODES=$modes WALPOST_NEMESIS_FAULTS=$FAULTS WALPOST_NEMESIS_EVENTS=$EVENTS \
		WALPOST_NEMESIS_PAUSE=$PAUSE WALPOST_NEMESIS_OUT="$ROOT/$dir/out" \
		$GO test -count=1 -timeout 0 -run '^TestNemesisCluster$' -v ./integration || rc=$?
	scripts/stack.sh down || true
	return "$rc"
}

results=()
rc=0
if ((PARALLEL == 2 && ${#modes[@]} == 2)); then
	base=25460
	for m in "${modes[@]}"; do
		dir=.stack/nemesis-$m
		dirs+=("$dir")
		results+=("$dir/out/results.jsonl")
		(run "$m" "$dir" "$base" >"$dir.log" 2>&1) &
		pids+=($!)
		echo "nemesis: $m on $dir (log $dir.log)" >&2
		base=$((base + 20))
	done
	for p in "${pids[@]}"; do wait "$p" || rc=1; done
	pids=()
	for dir in "${dirs[@]}"; do grep -E '^(--- |=== RUN|ok|FAIL|PASS)|nemesis: .*seed [0-9]+, ' "$dir.log" >&2 || true; done
else
	dir=.stack/nemesis-all
	dirs+=("$dir")
	results+=("$dir/out/results.jsonl")
	run "$MODES" "$dir" 25460 || rc=1
fi

jsonl=${REPORT%.md}.jsonl
cat "${results[@]}" >"$jsonl"
$GO run ./bench/nemesis -in "$jsonl" -out "$REPORT" -rev "$REV" \
	-note "SEED=$SEED SCHEDULES=$SCHEDULES MODES=$MODES FAULTS=$FAULTS EVENTS=$EVENTS PAUSE=$PAUSE PARALLEL=$PARALLEL"
if ((rc != 0)); then
	echo "nemesis: a schedule failed: see $REPORT (Failures) and the history files in .stack/nemesis-*/out" >&2
fi
exit "$rc"

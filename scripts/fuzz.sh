#!/usr/bin/env bash
# Runs every fuzz target of walpost with one budget each.
#
# Usage: scripts/fuzz.sh BUDGET
#   BUDGET is go test's -fuzztime: a count such as 100000x (what make test
#   uses) or a duration such as 10m (make fuzz FUZZTIME=10m).
#
# A count budget has no wall-clock deadline, so its outcome does not depend
# on how loaded the machine is: a duration budget can fail with a bare
# "context deadline exceeded" and no input when a worker is mid-input at
# the deadline (golang/go#75804, fixed in Go 1.27). make test therefore
# passes a count; pass a duration only for deliberate longer runs.
# A crasher fails the run and is written under the package's
# testdata/fuzz/<Target>/, as go test -fuzz always does.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
GO="${GO:-go}"
BUDGET="${1:?usage: scripts/fuzz.sh BUDGET (e.g. 100000x or 10m)}"
if ! [[ $BUDGET =~ ^[0-9]+x$ || $BUDGET =~ ^[0-9]+(ns|us|ms|s|m|h)$ ]]; then
	echo "fuzz: budget \"$BUDGET\" is neither a count (e.g. 100000x) nor a duration (e.g. 10m)" >&2
	exit 2
fi

# A count budget that hangs must still end the run (20 minutes is far above
# what 100000x takes on a loaded 2-core machine); a deliberate duration run
# has no test timeout, since go test's default (10m) would fail it at its end.
TIMEOUT=20m
[[ $BUDGET =~ x$ ]] || TIMEOUT=0

# target package divisor: one line each. A count budget is divided by the
# target's divisor, so each target runs for about the same time: FuzzLint
# parses with libpg_query compiled to WebAssembly, about 8 times slower per
# input than the decoders (300000 inputs took 81 s against their ~10 s).
TARGETS=(
	"FuzzDecode ./replication 1"
	"FuzzInsert ./replication 1"
	"FuzzAppendRFC3339 ./outbox 1"
	"FuzzLint ./lint 8"
)
for t in "${TARGETS[@]}"; do
	read -r name pkg div <<<"$t"
	budget=$BUDGET
	if [[ $BUDGET =~ ^([0-9]+)x$ ]]; then
		budget="$(( BASH_REMATCH[1] / div > 0 ? BASH_REMATCH[1] / div : 1 ))x"
	fi
	$GO test -run='^$' -fuzz="^${name}\$" -fuzztime="$budget" -timeout="$TIMEOUT" "$pkg"
done

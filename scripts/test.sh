#!/usr/bin/env bash
# The whole test suite (make test, .ci/run). Starts the local stack, runs
# static checks, unit tests with the race detector, short fuzz runs and the
# integration tests, and stops the stack even when a step fails.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
GO="${GO:-go}"
FUZZTIME="${FUZZTIME:-10s}"

step() { printf '\n== %s\n' "$*" >&2; }

step "go vet"
$GO vet ./...
step "staticcheck"
$GO run honnef.co/go/tools/cmd/staticcheck ./...

step "unit tests (-race)"
# shellcheck disable=SC2046
$GO test -race -count=1 $($GO list ./... | grep -v /integration)

step "fuzz (short)"
$GO test -run='^$' -fuzz='^FuzzDecode$' -fuzztime="$FUZZTIME" ./replication
$GO test -run='^$' -fuzz='^FuzzInsert$' -fuzztime="$FUZZTIME" ./replication
$GO test -run='^$' -fuzz='^FuzzAppendRFC3339$' -fuzztime="$FUZZTIME" ./outbox
if [ -d lint ]; then
  $GO test -run='^$' -fuzz=FuzzLint -fuzztime="$FUZZTIME" ./lint
  step "walpost lint migrations/"
  $GO run ./cmd/walpost lint migrations/
fi

step "stack up"
trap 'step "stack down"; scripts/stack.sh down || true' EXIT
scripts/stack.sh up
# shellcheck disable=SC1091
. .stack/env

step "integration tests"
WALPOST_REQUIRE_STACK=1 $GO test -count=1 -timeout 45m ./integration

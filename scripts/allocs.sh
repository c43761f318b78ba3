#!/usr/bin/env bash
# Runs walpost's allocation gates without the race detector (make test's
# unit step, make unit). The gates (Test*Allocs, and the isolator's
# TestIsolatorReusesPending) skip under -race, which drops sync.Pool items
# at random and allocates on its own, so the -race run of the unit tests
# does not gate allocations: this run does. A gate fails when its stage's
# per-event path allocates more than its budget, a constant beside the
# test (issue 33); each logs its count (-v). A new gate is a test named
# Test…Allocs in a package listed here.
#
# ALLOCS_JSON, when set, runs the tests through gotestsum and keeps their
# go test -json there (scripts/test.sh's report). Other arguments go to
# go test.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
GO="${GO:-go}"
PACKAGES=(./replication ./checkpoint ./sink/kafka ./forwarder)
args=(-count=1 -run '^(Test[A-Za-z]*Allocs|TestIsolatorReusesPending)$' -v "$@" "${PACKAGES[@]}")
if [[ -n ${ALLOCS_JSON:-} ]]; then
	exec $GO run gotest.tools/gotestsum --format standard-verbose --hide-summary=skipped --jsonfile "$ALLOCS_JSON" -- "${args[@]}"
fi
exec $GO test "${args[@]}"

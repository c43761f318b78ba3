//go:build race

package checkpoint_test

// raceEnabled: the race detector adds allocations of its own, so the
// allocation gates run without it (scripts/test.sh, unit step).
const raceEnabled = true

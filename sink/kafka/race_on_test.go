//go:build race

package kafka

// raceEnabled: the race detector makes sync.Pool drop items at random
// and adds allocations of its own, so the allocation gates run without
// it (scripts/test.sh, unit step).
const raceEnabled = true

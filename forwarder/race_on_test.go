//go:build race

package forwarder_test

// raceEnabled: the race detector makes sync.Pool drop items at random.
const raceEnabled = true

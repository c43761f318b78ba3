//go:build race

package forwarder

// raceEnabled: the race detector makes sync.Pool drop items at random.
const raceEnabled = true

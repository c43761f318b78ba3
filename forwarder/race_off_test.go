//go:build !race

package forwarder

const raceEnabled = false

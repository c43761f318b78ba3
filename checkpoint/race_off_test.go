//go:build !race

package checkpoint_test

const raceEnabled = false

//go:build !race

package poison_test

const raceEnabled = false

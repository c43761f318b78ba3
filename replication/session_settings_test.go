package replication

import "testing"

// The major version transactionTimeoutOff decides on, from the
// server_version forms servers report.
func TestMajorOf(t *testing.T) {
	for v, want := range map[string]int{
		"17.6": 17, "18beta1": 18, "17devel": 17, "15.18 (Debian 15.18-0+deb12u1)": 15,
		"16.4": 16, "10.23": 10, "9.6.24": 9, "15.2-YB-2.20.0.0-b0": 15, "": 0, "x17": 0,
	} {
		if got := majorOf(v); got != want {
			t.Errorf("majorOf(%q) = %d, want %d", v, got, want)
		}
	}
}

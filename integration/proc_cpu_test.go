package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// cpuByCommand is the CPU time (user and system) the processes of each
// command name have used so far, from /proc/<pid>/stat: the processes
// alive now, children already reaped counted in their parent's totals.
// The test's own process is "self".
func cpuByCommand(names ...string) map[string]time.Duration {
	out := map[string]time.Duration{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	self := fmt.Sprintf("/proc/%d/stat", os.Getpid())
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
		if open < 0 || end < open {
			continue
		}
		comm := string(b[open+1 : end])
		if p == self {
			comm = "self"
		}
		for _, n := range append(names, "self") {
			if comm != n {
				continue
			}
			f := bytes.Fields(b[end+1:])
			// Fields after the command: state is 0; utime 11, stime 12,
			// cutime 13, cstime 14 (proc(5) numbers 14-17).
			var ticks int64
			for _, i := range []int{11, 12, 13, 14} {
				v, _ := strconv.ParseInt(string(f[i]), 10, 64)
				ticks += v
			}
			out[n] += time.Duration(ticks) * time.Second / 100
		}
	}
	return out
}

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// clkTck is USER_HZ, the unit of CPU times in /proc (100 on every Linux
// architecture Go supports).
const clkTck = 100

// procCPU returns utime+stime of pid in seconds.
func procCPU(pid int) (float64, error) {
	total, _, err := procCPUSplit(pid)
	return total, err
}

// procCPUSplit returns utime+stime and utime of pid in seconds.
func procCPUSplit(pid int) (total, user float64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// comm (field 2) may contain spaces: split after its closing paren.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("unexpected /proc/%d/stat: %q", pid, s)
	}
	fields := strings.Fields(s[i+1:])
	// fields[0] is field 3 (state); utime is field 14, stime field 15.
	if len(fields) < 13 {
		return 0, 0, fmt.Errorf("short /proc/%d/stat: %q", pid, s)
	}
	ut, err1 := strconv.ParseInt(fields[11], 10, 64)
	st, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, err
	}
	return float64(ut+st) / clkTck, float64(ut) / clkTck, nil
}

// procMem returns VmRSS and VmHWM of pid in KiB.
func procMem(pid int) (rss, hwm int64, err error) {
	fh, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		var dst *int64
		switch k {
		case "VmRSS":
			dst = &rss
		case "VmHWM":
			dst = &hwm
		default:
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, 0, err
		}
		*dst = n
	}
	return rss, hwm, sc.Err()
}

// machineBusy returns the CPU seconds all CPUs spent outside idle and
// iowait since boot (the "cpu" line of /proc/stat), or 0.
func machineBusy() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0
	}
	var busy int64
	// user nice system idle iowait irq softirq steal: skip idle and iowait.
	for i, v := range f[1:8] {
		if i == 3 || i == 4 {
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		busy += n
	}
	return float64(busy) / clkTck
}

// loadAvg returns the 1-, 5- and 15-minute load averages.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// startPerf samples pid's stacks with `perf record` into out (an optional
// aid: walpost has no pprof endpoint) and returns a function that stops it
// and waits for the file; calling it again does nothing.
func startPerf(out string, pid int) func() {
	cmd := exec.Command("perf", "record", "-e", "cpu-clock", "-F", "999", "-g", "-o", out, "-p", strconv.Itoa(pid))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		logf("perf record: %v (continuing without a profile)", err)
		return func() {}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			_ = cmd.Process.Signal(os.Interrupt)
			_ = cmd.Wait()
			logf("perf profile of walpost in %s (perf report -i %s --no-children)", out, out)
		})
	}
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

type machine struct {
	nproc    int
	cpuModel string
	memory   string
	kernel   string
	pg       string
	kafka    string
	commit   string
	goVer    string
}

func describeMachine(ctx context.Context, f *fixture) machine {
	m := machine{nproc: runtime.NumCPU(), cpuModel: "unknown", memory: "unknown", goVer: runtime.Version()}
	if out, err := exec.Command("nproc").Output(); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil {
			m.nproc = n
		}
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.cpuModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && k == "MemTotal" {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				m.memory = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.kernel = strings.TrimSpace(string(b))
	}
	_ = f.pool.QueryRow(ctx, `SHOW server_version`).Scan(&m.pg)
	m.kafka = kafkaVersion(ctx, f)
	m.commit = gitCommit()
	return m
}

// kafkaVersion reads the version from the local stack's jars, else guesses
// it from the broker's API versions.
func kafkaVersion(ctx context.Context, f *fixture) string {
	if jars, _ := filepath.Glob(".stack/kafka/libs/kafka-server-[0-9]*.jar"); len(jars) == 1 {
		v := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(jars[0]), "kafka-server-"), ".jar")
		return v + " (KRaft, 1 broker)"
	}
	if vs, err := f.adm.ApiVersions(ctx); err == nil {
		for _, v := range vs.Sorted() {
			if v.Err == nil {
				return v.VersionGuess() + " (guessed from API versions)"
			}
		}
	}
	return "unknown"
}

func gitCommit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		c += " (dirty: uncommitted changes to tracked files)"
	}
	return c
}

// writeResult writes r to dir/bench-<date>.md, or bench-<date>-N.md when
// that file exists, and its charts beside it (writeCharts), linked from the
// Markdown. It returns the Markdown's path and text. A chart that cannot be
// drawn is left out with a warning: the numbers are worth keeping without
// it.
func writeResult(dir string, r report) (path, md string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", r.markdown(), err
	}
	fh, path, err := createResultFile(dir)
	if err != nil {
		return "", r.markdown(), err
	}
	base := strings.TrimSuffix(filepath.Base(path), ".md")
	r.charts, err = writeCharts(dir, base, r.cases)
	if err != nil {
		logf("WARNING: %v", err)
	}
	for _, name := range []string{r.charts.throughput, r.charts.latency} {
		if name != "" {
			logf("wrote %s", filepath.Join(dir, name))
		}
	}
	md = r.markdown()
	_, err = fh.WriteString(md)
	return path, md, errors.Join(err, fh.Close())
}

// createResultFile creates dir/bench-<date>.md, or bench-<date>-N.md when
// that file exists.
func createResultFile(dir string) (*os.File, string, error) {
	date := time.Now().UTC().Format("2006-01-02")
	path := filepath.Join(dir, "bench-"+date+".md")
	for i := 2; ; i++ {
		fh, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, os.ErrExist) {
			path = filepath.Join(dir, fmt.Sprintf("bench-%s-%d.md", date, i))
			continue
		}
		return fh, path, err
	}
}

package forwarder

import (
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/walpost/walpost/config"
)

// memoryHeadroom is what walpost needs beside its in-flight events: the
// Kafka client's batch and request buffers, the replication read buffer,
// the connections and the runtime.
const memoryHeadroom = 24 << 20

// ApplyMemoryLimit sets Go's soft memory limit to the in-flight bound plus
// headroom, unless GOMEMLIMIT is set. Without it the collector lets the
// heap grow to twice the live data, so a full pipeline doubled the process
// size; with it the heap stays near what the pipeline bounds. The live
// data never exceeds the limit by design (the pipeline pauses first), so
// the collector does not thrash. It returns the limit set, or -1.
func ApplyMemoryLimit(cfg *config.Config, log *slog.Logger) int64 {
	if v, ok := os.LookupEnv("GOMEMLIMIT"); ok && v != "" {
		log.Debug("memory limit from GOMEMLIMIT", "GOMEMLIMIT", v)
		return -1
	}
	limit := cfg.Pipeline.MaxInFlightBytes + memoryHeadroom
	debug.SetMemoryLimit(limit)
	log.Debug("soft memory limit", "bytes", limit)
	return limit
}

// ApplyProcs runs walpost's goroutines on one CPU unless GOMAXPROCS is
// set. The pipeline is one stream: PostgreSQL decodes a slot in a single
// walsender process, which spends more CPU per event than walpost does, so
// one CPU keeps up with it. On more than one, every hand-off between the
// reader and the Kafka client's goroutines wakes another thread; on one
// they run in turn, which costs less CPU per event and leaves the other
// cores to the walsender and the broker. It returns the value set, or -1.
func ApplyProcs(log *slog.Logger) int {
	if v, ok := os.LookupEnv("GOMAXPROCS"); ok && v != "" {
		log.Debug("CPUs from GOMAXPROCS", "GOMAXPROCS", v)
		return -1
	}
	runtime.GOMAXPROCS(1)
	log.Debug("running on one CPU; set GOMAXPROCS to use more")
	return 1
}

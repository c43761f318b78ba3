package main

import (
	"log/slog"
	"os"
	"runtime/debug"
)

// memoryHeadroom is what walpost needs beside its in-flight events: the
// Kafka client's batch and request buffers, the replication read buffer,
// the connections and the runtime.
const memoryHeadroom = 24 << 20

// applyMemoryLimit sets Go's soft memory limit to the in-flight bound plus
// headroom, unless GOMEMLIMIT is set. Without it the collector lets the
// heap grow to twice the live data, so a full pipeline doubled the process
// size; with it the heap stays near what the pipeline bounds. The live
// data never exceeds the limit by design (the pipeline pauses first), so
// the collector does not thrash. It returns the limit set, or -1.
func applyMemoryLimit(cfg *Config, log *slog.Logger) int64 {
	if v, ok := os.LookupEnv("GOMEMLIMIT"); ok && v != "" {
		log.Debug("memory limit from GOMEMLIMIT", "GOMEMLIMIT", v)
		return -1
	}
	limit := cfg.Pipeline.MaxInFlightBytes + memoryHeadroom
	debug.SetMemoryLimit(limit)
	log.Debug("soft memory limit", "bytes", limit)
	return limit
}

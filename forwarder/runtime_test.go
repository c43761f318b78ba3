package forwarder

import (
	"log/slog"
	"math"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/walpost/walpost/config"
)

func TestApplyMemoryLimit(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	log := slog.New(slog.DiscardHandler)
	cfg := &config.Config{}
	cfg.Pipeline.MaxInFlightBytes = 16 << 20

	t.Setenv("GOMEMLIMIT", "")
	debug.SetMemoryLimit(math.MaxInt64)
	if got := ApplyMemoryLimit(cfg, log); got != 40<<20 {
		t.Fatalf("limit %d, want %d (in-flight bytes + headroom)", got, 40<<20)
	}
	if cur := debug.SetMemoryLimit(-1); cur != 40<<20 {
		t.Fatalf("runtime limit %d, want %d", cur, 40<<20)
	}

	// An operator's GOMEMLIMIT wins.
	t.Setenv("GOMEMLIMIT", "100MiB")
	debug.SetMemoryLimit(math.MaxInt64)
	if got := ApplyMemoryLimit(cfg, log); got != -1 {
		t.Fatalf("with GOMEMLIMIT set: %d, want -1", got)
	}
	if cur := debug.SetMemoryLimit(-1); cur != math.MaxInt64 {
		t.Fatalf("with GOMEMLIMIT set the runtime limit changed to %d", cur)
	}
}

func TestApplyProcs(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(before) })
	log := slog.New(slog.DiscardHandler)

	t.Setenv("GOMAXPROCS", "")
	runtime.GOMAXPROCS(4)
	if got := ApplyProcs(log); got != 1 {
		t.Fatalf("applyProcs = %d, want 1", got)
	}
	if cur := runtime.GOMAXPROCS(0); cur != 1 {
		t.Fatalf("GOMAXPROCS is %d, want 1", cur)
	}

	// An operator's GOMAXPROCS wins.
	t.Setenv("GOMAXPROCS", "3")
	runtime.GOMAXPROCS(3)
	if got := ApplyProcs(log); got != -1 {
		t.Fatalf("with GOMAXPROCS set: %d, want -1", got)
	}
	if cur := runtime.GOMAXPROCS(0); cur != 3 {
		t.Fatalf("with GOMAXPROCS set it changed to %d", cur)
	}
}

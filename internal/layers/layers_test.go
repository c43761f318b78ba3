// Package layers holds the test of walpost's import rules (DESIGN.md,
// "Layers"): which walpost packages each package may import, and which
// third-party clients stay out of which layers.
package layers

import (
	"bufio"
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/walpost/walpost"

// allowed lists, per package (relative to the module), the walpost packages
// its production code may import. A package missing here fails the test, so
// a new package states its place.
var allowed = map[string][]string{
	"outbox":             {},
	"checkpoint":         {"outbox"},
	"internal/redact":    {},
	"internal/leak":      {},
	"internal/buildinfo": {},
	"config":             {"internal/redact"},
	"replication":        {"checkpoint", "outbox"},
	"sink":               {"outbox"},
	"sink/kafka":         {"sink", "outbox"},
	// sink/kafka's options built from walpost's configuration, and the
	// mapping's views walpost run and walpost check share.
	"internal/kafkaconf": {"config", "replication", "sink", "sink/kafka"},
	"poison":             {"outbox", "sink"},
	"migrations":         {},
	"position":           {},
	"lint":               {},
	// recovery builds the slot's transactional producer in exactly-once
	// mode, as forwarder does (recovery/exactly.go).
	"recovery":        {"config", "replication", "position", "sink", "sink/kafka", "internal/kafkaconf", "outbox", "internal/redact"},
	"prune":           {"config", "replication", "position", "internal/redact"},
	"forwarder":       {"config", "replication", "checkpoint", "sink", "sink/kafka", "internal/kafkaconf", "poison", "position", "prune", "outbox", "internal/redact", "internal/buildinfo", "internal/otlphttp"},
	"status":          {"config", "replication", "sink/kafka", "internal/kafkaconf", "internal/redact", "poison", "checkpoint", "outbox"},
	"preflight":       {"config", "replication", "sink/kafka", "internal/kafkaconf", "internal/redact", "poison", "position", "outbox"},
	"verify":          {"config", "replication", "sink/kafka", "internal/redact", "outbox"},
	"integration":     {"config", "replication", "sink", "sink/kafka", "verify", "status", "outbox", "checkpoint", "position", "internal/redact", "writer", "inbox"},
	"bench/drain":     {"config", "forwarder", "outbox", "sink", "sink/kafka", "internal/kafkaconf", "replication", "checkpoint"},
	"bench/nemesis":   {},
	"cmd/walpost":     {"config", "forwarder", "status", "preflight", "verify", "poison", "recovery", "prune", "resend", "migrations", "lint", "sink/kafka", "internal/kafkaconf", "replication", "internal/redact", "internal/buildinfo"},
	"internal/layers": {},
	"writer":          {},
	// The consumer's half: a public package like writer, on pgx and
	// franz-go only.
	"inbox": {},
	// walpost resend re-produces outbox rows still in the table, beside a
	// running walpost, as recover produces a gap.
	"resend": {"config", "replication", "position", "sink", "sink/kafka", "internal/kafkaconf", "outbox", "internal/redact"},

	// walpost's OTLP/HTTP trace client (otel.enabled): the protobuf
	// runtime and the OTLP messages, no gRPC.
	"internal/otlphttp": {},

	// A test helper: a fake PostgreSQL speaking the wire protocol, which
	// replication's own tests import.
	"replication/replicationtest": {},
}

// banned lists, per package, third-party import prefixes its production
// code must not use: the contract layers stay free of the Kafka client, and
// only cmd/ reads flags.
var banned = map[string][]string{
	"sink":        {"github.com/twmb/franz-go"},
	"poison":      {"github.com/twmb/franz-go"},
	"replication": {"github.com/twmb/franz-go"},
	"checkpoint":  {"github.com/twmb/franz-go", "github.com/jackc/pgx"},
	"outbox":      {"github.com/twmb/franz-go", "github.com/jackc/pgx"},
	"forwarder":   {"github.com/spf13/cobra", "github.com/spf13/viper"},
	"sink/kafka":  {"github.com/jackc/pgx", "github.com/spf13/viper"},
	"recovery":    {"github.com/twmb/franz-go", "github.com/spf13/cobra", "github.com/spf13/viper"},
	"prune":       {"github.com/twmb/franz-go", "github.com/spf13/cobra", "github.com/spf13/viper"},
	"resend":      {"github.com/spf13/cobra", "github.com/spf13/viper"},
	"inbox":       {"github.com/spf13/cobra", "github.com/spf13/viper"},

	// The configuration's adapter to sink/kafka reads no database and no
	// flags.
	"internal/kafkaconf": {"github.com/jackc/pgx", "github.com/spf13/cobra", "github.com/spf13/viper"},
}

func TestImportEdges(t *testing.T) {
	out := goList(t, "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"/...")
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	seen := 0
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		pkg := strings.TrimPrefix(strings.TrimPrefix(fields[0], module), "/")
		if pkg == "" { // tools.go: build-tagged, no production code
			continue
		}
		seen++
		allow, known := allowed[pkg]
		if !known {
			t.Errorf("package %s has no entry in allowed: add one (DESIGN.md, Layers)", pkg)
			continue
		}
		for _, imp := range fields[1:] {
			if rel, ours := strings.CutPrefix(imp, module+"/"); ours {
				if !slices.Contains(allow, rel) {
					t.Errorf("%s imports %s, which its layer does not allow (DESIGN.md, Layers)", pkg, rel)
				}
				continue
			}
			for _, b := range banned[pkg] {
				if strings.HasPrefix(imp, b) {
					t.Errorf("%s imports %s; that client stays out of this layer (DESIGN.md, Layers)", pkg, imp)
				}
			}
		}
	}
	if seen < 10 {
		t.Fatalf("go list saw %d packages, want the whole module", seen)
	}
}

// TestNoGRPC: walpost speaks no gRPC, so the binary links none (the OTLP
// exporter of otel.enabled is internal/otlphttp, not otlptracehttp, whose
// collector package pulls gRPC and grpc-gateway in: megabytes of binary
// and of resident memory).
func TestNoGRPC(t *testing.T) {
	out := goList(t, "-deps", module+"/cmd/walpost")
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "google.golang.org/grpc") || strings.HasPrefix(pkg, "github.com/grpc-ecosystem/") {
			t.Errorf("cmd/walpost links %s", pkg)
		}
	}
}

// goList runs go list with args at the module's root and returns its
// standard output.
func goList(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	return out
}

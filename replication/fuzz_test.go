package replication

import (
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/metrics"
	"slices"
	"strconv"
	"testing"

	"github.com/jackc/pglogrepl"
)

var updateCorpus = flag.Bool("update-corpus", false, "rewrite the seed files of testdata/fuzz/FuzzDecode from fuzzSeeds")

type fuzzSeed struct {
	name string
	data []byte
	lsn  uint64
}

// fuzzSeeds are a valid message of each type and interesting truncations and
// corruptions of them.
func fuzzSeeds() []fuzzSeed {
	seeds := []fuzzSeed{
		{"empty", nil, 0},
		{"type-byte-only-insert", []byte{'I'}, 0x16B3748},
		{"unknown-type", []byte("Z\x00\x00\x00\x00"), 1},
		{"stream-start-v2", wire{'S'}.u32(771).u8(1), 2},
		{"insert-binary-and-empty-text", msgInsert(7, []tupleCol{{'b', "\x00\x01\xff"}, text("")}), 3},
		{"insert-tuple-type-K", tuple(wire{'I'}.u32(1).u8('K'), outboxRow[:1]), 4},
		{"relation-required-columns-shuffled", msgRelation(9, "app", "outbox", []relCol{{name: "payload"}, {name: "created_at"}, {name: "id"}, {name: "idempotency_key"}}), 5},
		{"relation-missing-created-at", msgRelation(9, "app", "outbox", []relCol{{name: "payload"}, {name: "id"}, {name: "idempotency_key"}}), 6},
		{"relation-no-columns", msgRelation(9, "public", "outbox", nil), 7},
		{"message-transactional", msgLogical(true, 0x10, "app", "hello"), 8},
		{"column-longer-than-message", wire{'I'}.u32(1).u8('N').u16(1).u8('t').u32(100).u8('x'), 9},
		{"more-columns-than-message", wire{'I'}.u32(1).u8('N').u16(3).u8('n'), 10},
		{"message-content-past-end", wire{'M'}.u8(0).u64(1).str("p").u32(50), 11},
		{"message-prefix-unterminated", append(wire{'M'}.u8(0).u64(1), "walpost-heartbeat"...), 12},
		{"truncate-more-relations-than-held", wire{'T'}.u32(3).u8(0).u32(1), 13},
	}
	msgs := validMessages()
	names := make([]string, 0, len(msgs))
	for name := range msgs {
		names = append(names, name)
	}
	slices.Sort(names)
	for i, name := range names {
		data := msgs[name]
		seeds = append(seeds, fuzzSeed{"valid-" + name, data, 0x16B3700 + uint64(i)})
		// Interesting cuts: the type byte alone, one byte short, half.
		for _, n := range []int{1, len(data) / 2, len(data) - 1} {
			seeds = append(seeds, fuzzSeed{fmt.Sprintf("truncated-%s-%d", name, n), data[:n:n], 0xFFFFFFFF00000000 + uint64(n)})
		}
	}
	return seeds
}

// heapAllocs is the process's cumulative heap allocation in bytes.
func heapAllocs() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// FuzzDecode: Decode never panics, fails only with a *DecodeError carrying
// the LSN, returns a message of the type its first byte names, allocates in
// proportion to the message (an out-of-memory kill is a crash recover cannot
// turn into an error), and the outbox column mapping accepts whatever
// relation it decodes.
//
// Run: go test -run='^$' -fuzz=FuzzDecode -fuzztime=60s ./replication
func FuzzDecode(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s.data, s.lsn)
	}
	f.Fuzz(func(t *testing.T, data []byte, lsn uint64) {
		before := heapAllocs()
		msg, err := Decode(data, pglogrepl.LSN(lsn))
		allocated := heapAllocs() - before
		if limit := uint64(1<<20 + 256*len(data)); allocated > limit {
			t.Fatalf("Decode of %d bytes (type %q) allocated %d bytes, more than %d", len(data), firstByte(data), allocated, limit)
		}
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %v is %T, want *DecodeError", err, err)
			}
			if de.LSN != pglogrepl.LSN(lsn) {
				t.Fatalf("DecodeError.LSN = %s, want %s", de.LSN, pglogrepl.LSN(lsn))
			}
			if msg != nil {
				t.Fatalf("message %T returned with error %v", msg, err)
			}
			if !IsTerminal(err) {
				t.Fatalf("IsTerminal(%v) = false", err)
			}
			return
		}
		if msg == nil {
			t.Fatal("nil message and nil error")
		}
		if got, want := msg.Type(), pglogrepl.MessageType(data[0]); got != want {
			t.Fatalf("Type() = %s, first byte %q", got, data[0])
		}
		switch m := msg.(type) {
		case *pglogrepl.RelationMessage:
			if len(m.Columns) != int(m.ColumnNum) {
				t.Fatalf("relation with ColumnNum %d has %d columns", m.ColumnNum, len(m.Columns))
			}
			r := newRelation(m)
			if err := r.check(); err != nil && !errors.Is(err, ErrSchema) {
				t.Fatalf("check() = %v, want nil or ErrSchema", err)
			}
			for j, p := range r.pos {
				if p < -1 || p >= len(m.Columns) || (p >= 0 && m.Columns[p].Name != colNames[j]) {
					t.Fatalf("column %q mapped to %d of %d", colNames[j], p, len(m.Columns))
				}
			}
		case *pglogrepl.InsertMessage:
			if m.Tuple == nil || len(m.Tuple.Columns) != int(m.Tuple.ColumnNum) {
				t.Fatalf("insert tuple %+v", m.Tuple)
			}
			for i, c := range m.Tuple.Columns {
				if (c.DataType == pglogrepl.TupleDataTypeText || c.DataType == pglogrepl.TupleDataTypeBinary) && len(c.Data) != int(c.Length) {
					t.Fatalf("column %d: length %d, %d bytes of data", i, c.Length, len(c.Data))
				}
			}
		}
	})
}

func firstByte(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return string(b[:1])
}

// TestWriteFuzzCorpus writes the seeds as files of the committed corpus
// (go test fuzz v1), with -update-corpus.
func TestWriteFuzzCorpus(t *testing.T) {
	if !*updateCorpus {
		t.Skip("run with -update-corpus to rewrite testdata/fuzz/FuzzDecode seeds")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecode")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, s := range fuzzSeeds() {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\nuint64(%d)\n", strconv.Quote(string(s.data)), s.lsn)
		sum := sha256.Sum256([]byte(body))
		name := fmt.Sprintf("seed-%s-%x", s.name, sum[:4])
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

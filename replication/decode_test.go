package replication

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walpost/walpost/replication/replicationtest"
)

// pgoutput protocol version 1 messages, built by hand from
// https://www.postgresql.org/docs/15/protocol-logicalrep-message-formats.html

type wire []byte

func (w wire) u8(v byte) wire    { return append(w, v) }
func (w wire) u16(v uint16) wire { return binary.BigEndian.AppendUint16(w, v) }
func (w wire) u32(v uint32) wire { return binary.BigEndian.AppendUint32(w, v) }
func (w wire) u64(v uint64) wire { return binary.BigEndian.AppendUint64(w, v) }
func (w wire) str(s string) wire { return append(append(w, s...), 0) }

// Begin and Commit are the fake walsender's.
var (
	msgBegin  = replicationtest.Begin
	msgCommit = replicationtest.Commit
)

type relCol struct {
	name  string
	oid   uint32
	flags byte
}

// Byte1('R') Int32 relation id, String namespace, String name, Int8 replica
// identity, Int16 columns, then per column Int8 flags, String name, Int32
// type oid, Int32 type modifier.
func msgRelation(id uint32, ns, name string, cols []relCol) []byte {
	w := wire{'R'}.u32(id).str(ns).str(name).u8('d').u16(uint16(len(cols)))
	for _, c := range cols {
		w = w.u8(c.flags).str(c.name).u32(c.oid).u32(0xFFFFFFFF) // typmod -1
	}
	return w
}

// tupleCol is one TupleData column: kind 'n' (NULL), 'u' (unchanged TOAST),
// 't' (text) or 'b' (binary).
type tupleCol struct {
	kind byte
	data string
}

func text(s string) tupleCol { return tupleCol{'t', s} }

var null = tupleCol{kind: 'n'}

func tuple(w wire, cols []tupleCol) wire {
	w = w.u16(uint16(len(cols)))
	for _, c := range cols {
		w = w.u8(c.kind)
		if c.kind == 't' || c.kind == 'b' {
			w = append(w.u32(uint32(len(c.data))), c.data...)
		}
	}
	return w
}

// Byte1('I') Int32 relation id, Byte1('N'), TupleData.
func msgInsert(rel uint32, cols []tupleCol) []byte {
	return tuple(wire{'I'}.u32(rel).u8('N'), cols)
}

// Byte1('U') Int32 relation id, Byte1('N'), TupleData (no old tuple).
func msgUpdate(rel uint32, cols []tupleCol) []byte {
	return tuple(wire{'U'}.u32(rel).u8('N'), cols)
}

// Byte1('D') Int32 relation id, Byte1('K'), TupleData.
func msgDelete(rel uint32, cols []tupleCol) []byte {
	return tuple(wire{'D'}.u32(rel).u8('K'), cols)
}

// Byte1('T') Int32 relations, Int8 options, Int32 relation id...
func msgTruncate(opts byte, rels ...uint32) []byte {
	w := wire{'T'}.u32(uint32(len(rels))).u8(opts)
	for _, r := range rels {
		w = w.u32(r)
	}
	return w
}

// Byte1('Y') Int32 type oid, String namespace, String name.
func msgType(oid uint32, ns, name string) []byte {
	return wire{'Y'}.u32(oid).str(ns).str(name)
}

// Byte1('O') Int64 commit LSN on the origin, String origin name.
func msgOrigin(lsn pglogrepl.LSN, name string) []byte {
	return wire{'O'}.u64(uint64(lsn)).str(name)
}

// Byte1('M') Int8 flags (1 = transactional), Int64 LSN, String prefix,
// Int32 length, Byte(n) content.
func msgLogical(transactional bool, lsn pglogrepl.LSN, prefix, content string) []byte {
	var flags byte
	if transactional {
		flags = 1
	}
	return append(wire{'M'}.u8(flags).u64(uint64(lsn)).str(prefix).u32(uint32(len(content))), content...)
}

// The outbox table of migrations/, as pgoutput describes it.
var outboxCols = []relCol{
	{name: "id", oid: 2950, flags: 1},
	{name: "idempotency_key", oid: 25},
	{name: "payload", oid: 3802},
	{name: "created_at", oid: 1184},
	{name: "sent_at", oid: 1184},
	{name: "attempts", oid: 23},
	{name: "last_error", oid: 25},
	{name: "topic", oid: 25},
	{name: "partition_key", oid: 25},
	{name: "event_type", oid: 25},
	{name: "headers", oid: 3802},
}

var outboxRow = []tupleCol{
	text("5f0c6c8e-2d3b-4c1a-9a57-0d5e1c8b7a11"),
	text("order-42-created"),
	text(`{"id": 42, "total": "19.99"}`),
	text("2026-11-29 22:50:51.123456+00"),
	null,
	text("0"),
	null,
	text("orders"),
	text("customer-7"),
	text("OrderCreated"),
	{kind: 'u'}, // unchanged TOAST: never in an insert, but legal on the wire
}

var (
	commitTime = time.Date(2026, 11, 29, 22, 50, 51, 123456000, time.UTC)
	beginMsg   = msgBegin(0x16B3748, commitTime, 771)
	commitMsg  = msgCommit(0x16B3748, 0x16B3778, commitTime)
	relMsg     = msgRelation(16394, "public", "outbox", outboxCols)
	insertMsg  = msgInsert(16394, outboxRow)
)

func TestDecodeValid(t *testing.T) {
	const lsn = pglogrepl.LSN(0x16B3700)
	tests := []struct {
		name  string
		data  []byte
		check func(t *testing.T, m pglogrepl.Message)
	}{
		{
			name: "begin", data: beginMsg,
			check: func(t *testing.T, m pglogrepl.Message) {
				b := m.(*pglogrepl.BeginMessage)
				if b.FinalLSN != 0x16B3748 || b.Xid != 771 || !b.CommitTime.Equal(commitTime) {
					t.Errorf("got FinalLSN %s, Xid %d, CommitTime %s", b.FinalLSN, b.Xid, b.CommitTime.UTC())
				}
			},
		},
		{
			name: "commit", data: commitMsg,
			check: func(t *testing.T, m pglogrepl.Message) {
				c := m.(*pglogrepl.CommitMessage)
				if c.CommitLSN != 0x16B3748 || c.TransactionEndLSN != 0x16B3778 || !c.CommitTime.Equal(commitTime) || c.Flags != 0 {
					t.Errorf("got CommitLSN %s, TransactionEndLSN %s, CommitTime %s, Flags %d",
						c.CommitLSN, c.TransactionEndLSN, c.CommitTime.UTC(), c.Flags)
				}
			},
		},
		{
			name: "relation", data: relMsg,
			check: func(t *testing.T, m pglogrepl.Message) {
				r := m.(*pglogrepl.RelationMessage)
				if r.RelationID != 16394 || r.Namespace != "public" || r.RelationName != "outbox" || int(r.ColumnNum) != len(outboxCols) {
					t.Fatalf("got relation %d %s.%s with %d columns", r.RelationID, r.Namespace, r.RelationName, r.ColumnNum)
				}
				for i, c := range r.Columns {
					w := outboxCols[i]
					if c.Name != w.name || c.DataType != w.oid || c.Flags != w.flags || c.TypeModifier != -1 {
						t.Errorf("column %d = %+v, want %+v", i, *c, w)
					}
				}
			},
		},
		{
			name: "insert", data: insertMsg,
			check: func(t *testing.T, m pglogrepl.Message) {
				in := m.(*pglogrepl.InsertMessage)
				if in.RelationID != 16394 || len(in.Tuple.Columns) != len(outboxRow) {
					t.Fatalf("got relation %d with %d columns", in.RelationID, len(in.Tuple.Columns))
				}
				for i, c := range in.Tuple.Columns {
					w := outboxRow[i]
					if c.DataType != w.kind || string(c.Data) != w.data {
						t.Errorf("column %d = %c %q, want %c %q", i, c.DataType, c.Data, w.kind, w.data)
					}
				}
			},
		},
		{
			name: "insert with a binary column and an empty text",
			data: msgInsert(7, []tupleCol{{'b', "\x00\x01\xff"}, text("")}),
			check: func(t *testing.T, m pglogrepl.Message) {
				cs := m.(*pglogrepl.InsertMessage).Tuple.Columns
				if cs[0].DataType != 'b' || string(cs[0].Data) != "\x00\x01\xff" || cs[1].DataType != 't' || len(cs[1].Data) != 0 {
					t.Errorf("got %+v, %+v", *cs[0], *cs[1])
				}
			},
		},
		{
			name: "heartbeat message", data: msgLogical(false, 0x16B3790, "walpost-heartbeat", ""),
			check: func(t *testing.T, m pglogrepl.Message) {
				l := m.(*pglogrepl.LogicalDecodingMessage)
				if l.Transactional || l.LSN != 0x16B3790 || l.Prefix != "walpost-heartbeat" || len(l.Content) != 0 {
					t.Errorf("got %+v", *l)
				}
			},
		},
		{
			name: "transactional message with content", data: msgLogical(true, 0x10, "app", "hello"),
			check: func(t *testing.T, m pglogrepl.Message) {
				l := m.(*pglogrepl.LogicalDecodingMessage)
				if !l.Transactional || l.Prefix != "app" || string(l.Content) != "hello" {
					t.Errorf("got %+v", *l)
				}
			},
		},
		{
			name: "type", data: msgType(16400, "public", "mood"),
			check: func(t *testing.T, m pglogrepl.Message) {
				y := m.(*pglogrepl.TypeMessage)
				if y.DataType != 16400 || y.Namespace != "public" || y.Name != "mood" {
					t.Errorf("got %+v", *y)
				}
			},
		},
		{
			name: "origin", data: msgOrigin(0x99, "node_a"),
			check: func(t *testing.T, m pglogrepl.Message) {
				o := m.(*pglogrepl.OriginMessage)
				if o.CommitLSN != 0x99 || o.Name != "node_a" {
					t.Errorf("got %+v", *o)
				}
			},
		},
		{
			name: "update", data: msgUpdate(16394, outboxRow[:2]),
			check: func(t *testing.T, m pglogrepl.Message) {
				if u := m.(*pglogrepl.UpdateMessage); u.RelationID != 16394 || len(u.NewTuple.Columns) != 2 {
					t.Errorf("got %+v", *u)
				}
			},
		},
		{
			name: "delete", data: msgDelete(16394, outboxRow[:1]),
			check: func(t *testing.T, m pglogrepl.Message) {
				if d := m.(*pglogrepl.DeleteMessage); d.RelationID != 16394 || d.OldTupleType != 'K' || len(d.OldTuple.Columns) != 1 {
					t.Errorf("got %+v", *d)
				}
			},
		},
		{
			name: "truncate", data: msgTruncate(1, 16394, 16400),
			check: func(t *testing.T, m pglogrepl.Message) {
				if tr := m.(*pglogrepl.TruncateMessage); !slices.Equal(tr.RelationIDs, []uint32{16394, 16400}) || tr.Option != 1 {
					t.Errorf("got %+v", *tr)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Decode(tc.data, lsn)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if got, want := m.Type(), pglogrepl.MessageType(tc.data[0]); got != want {
				t.Fatalf("Type() = %s, want %s", got, want)
			}
			tc.check(t, m)
		})
	}
}

// wantDecodeError fails unless err is a *DecodeError carrying lsn and m is
// nil.
func wantDecodeError(t *testing.T, m pglogrepl.Message, err error, lsn pglogrepl.LSN) {
	t.Helper()
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("err = %v (%T), want *DecodeError (message %T)", err, err, m)
	}
	if de.LSN != lsn {
		t.Errorf("DecodeError.LSN = %s, want %s", de.LSN, lsn)
	}
	if !strings.Contains(err.Error(), lsn.String()) {
		t.Errorf("error %q does not name the LSN %s", err, lsn)
	}
	if m != nil {
		t.Errorf("message %T returned with the error", m)
	}
	if !IsTerminal(err) {
		t.Errorf("IsTerminal(%v) = false, want true", err)
	}
}

func TestDecodeErrors(t *testing.T) {
	const lsn = pglogrepl.LSN(0x2A000028)
	tests := []struct {
		name string
		data []byte
	}{
		{"nil", nil},
		{"empty", []byte{}},
		{"unknown type", []byte("Z\x00\x00\x00\x00")},
		{"stream start (protocol 2) is not protocol 1", wire{'S'}.u32(771).u8(1)},
		{"stream abort (protocol 2) is not protocol 1", wire{'A'}.u32(771).u32(772)},
		{"insert with tuple type K", tuple(wire{'I'}.u32(1).u8('K'), outboxRow[:1])},
		{"delete with tuple type N", tuple(wire{'D'}.u32(1).u8('N'), outboxRow[:1])},
		{"relation without string terminators", append(wire{'R'}.u32(1), "publicoutboxxxxx"...)},
		{"column longer than the message", wire{'I'}.u32(1).u8('N').u16(1).u8('t').u32(100).u8('x')},
		{"more columns than the message holds", wire{'I'}.u32(1).u8('N').u16(3).u8('n')},
		{"message content longer than the message", wire{'M'}.u8(0).u64(1).str("p").u32(50)},
		{"message prefix without terminator", append(wire{'M'}.u8(0).u64(1), "walpost-heartbeat"...)},
		{"truncate listing more relations than it holds", wire{'T'}.u32(3).u8(0).u32(1)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Decode(tc.data, lsn)
			wantDecodeError(t, m, err, lsn)
		})
	}
}

// validMessages are one valid message of each kind walpost may receive.
func validMessages() map[string][]byte {
	return map[string][]byte{
		"begin":    beginMsg,
		"commit":   commitMsg,
		"relation": relMsg,
		"insert":   insertMsg,
		"type":     msgType(16400, "public", "mood"),
		"origin":   msgOrigin(0x99, "node_a"),
		"message":  msgLogical(false, 0x16B3790, "walpost-heartbeat", "{}"),
		"update":   msgUpdate(16394, outboxRow),
		"delete":   msgDelete(16394, outboxRow[:1]),
		"truncate": msgTruncate(0, 16394, 16400),
	}
}

// Every proper prefix of a valid message is a *DecodeError with the LSN,
// never a panic and never a half-decoded message.
func TestDecodeTruncated(t *testing.T) {
	const lsn = pglogrepl.LSN(0x1_0000_0001)
	for name, data := range validMessages() {
		t.Run(name, func(t *testing.T) {
			for n := range len(data) {
				m, err := Decode(data[:n:n], lsn)
				if err == nil {
					t.Errorf("Decode(first %d of %d bytes) = %T, nil; want a DecodeError", n, len(data), m)
					continue
				}
				wantDecodeError(t, m, err, lsn)
			}
		})
	}
}

// The message Decode gets is usually a window of a larger receive buffer
// (pgconn's read buffer, then XLogData.WALData): a message cut short must
// still fail, not borrow the bytes that follow it. pglogrepl slices the
// content of a logical decoding message ('M') with src[low:low+n], which Go
// allows up to the capacity, so Decode has to hand it a slice whose capacity
// ends at its length.
func TestDecodeDoesNotReadPastTheMessage(t *testing.T) {
	const lsn = pglogrepl.LSN(0x16B3790)
	full := msgLogical(false, 0x16B3790, "walpost-heartbeat", "{}")
	buf := append(slices.Clone(full), "next message in the buffer"...)
	for n := len(full) - 2; n < len(full); n++ {
		m, err := Decode(buf[:n], lsn)
		if err == nil {
			t.Errorf("Decode(first %d of %d bytes, more bytes in the buffer) = %T with content %q, want a DecodeError",
				n, len(full), m, m.(*pglogrepl.LogicalDecodingMessage).Content)
			continue
		}
		wantDecodeError(t, m, err, lsn)
	}
}

// heapAllocated returns the bytes f allocated on the heap.
func heapAllocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A length or count field must never make Decode allocate more than the
// message could hold: pglogrepl allocates what the field claims before it
// checks the bounds (make([]uint32, RelationNum) for Truncate,
// make([]byte, Length) for a tuple column), so a 10-byte message can ask for
// 16 GiB, and an out-of-memory kill is not a panic recover can catch.
// These inputs use moderate counts (64 MiB) so the test stays safe to run.
func TestDecodeAllocationIsBounded(t *testing.T) {
	const lsn = pglogrepl.LSN(0x16B3748)
	const claimed = 1 << 26 // 64 MiB
	tests := []struct {
		name string
		data []byte
	}{
		{"truncate claiming 16M relations", wire{'T'}.u32(claimed / 4).u8(0).u32(1)},
		{"insert column claiming 64 MiB", wire{'I'}.u32(1).u8('N').u16(1).u8('t').u32(claimed).u8('x')},
		{"update column claiming 64 MiB", wire{'U'}.u32(1).u8('N').u16(1).u8('t').u32(claimed).u8('x')},
		{"delete key column claiming 64 MiB", wire{'D'}.u32(1).u8('K').u16(1).u8('b').u32(claimed).u8('x')},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var m pglogrepl.Message
			var err error
			n := heapAllocated(func() { m, err = Decode(tc.data, lsn) })
			wantDecodeError(t, m, err, lsn)
			if limit := uint64(1 << 20); n > limit {
				t.Errorf("Decode of a %d-byte %q message allocated %d MiB (limit 1 MiB); with the count at 0xFFFFFFFF it asks for %s and the process is killed",
					len(tc.data), tc.data[0], n>>20, map[byte]string{'T': "16 GiB", 'I': "4 GiB", 'U': "4 GiB", 'D': "4 GiB"}[tc.data[0]])
			}
		})
	}
}

func relationOf(cols ...string) *pglogrepl.RelationMessage {
	m := &pglogrepl.RelationMessage{RelationID: 16394, Namespace: "public", RelationName: "outbox"}
	for _, c := range cols {
		m.Columns = append(m.Columns, &pglogrepl.RelationMessageColumn{Name: c})
	}
	m.ColumnNum = uint16(len(m.Columns))
	return m
}

func TestRelationColumns(t *testing.T) {
	tests := []struct {
		name    string
		cols    []string
		want    map[string]int // column → tuple position; others -1
		missing string         // required column check must name; "" when valid
	}{
		{
			name: "migration order",
			cols: []string{"id", "idempotency_key", "payload", "created_at", "sent_at", "attempts", "last_error", "topic", "partition_key", "event_type", "headers"},
			want: map[string]int{"id": 0, "idempotency_key": 1, "payload": 2, "created_at": 3, "topic": 7, "partition_key": 8, "event_type": 9, "headers": 10},
		},
		{
			name: "any order",
			cols: []string{"headers", "created_at", "event_type", "payload", "partition_key", "idempotency_key", "topic", "id"},
			want: map[string]int{"headers": 0, "created_at": 1, "event_type": 2, "payload": 3, "partition_key": 4, "idempotency_key": 5, "topic": 6, "id": 7},
		},
		{
			name: "required only, extra columns in between",
			cols: []string{"tenant", "payload", "x", "id", "created_at", "idempotency_key", "y"},
			want: map[string]int{"payload": 1, "id": 3, "created_at": 4, "idempotency_key": 5},
		},
		{
			name: "column added by DDL mid-stream",
			cols: []string{"id", "idempotency_key", "payload", "created_at", "topic", "trace_id"},
			want: map[string]int{"id": 0, "idempotency_key": 1, "payload": 2, "created_at": 3, "topic": 4},
		},
		{name: "no id", cols: []string{"idempotency_key", "payload", "created_at", "topic"}, missing: "id"},
		{name: "no idempotency_key", cols: []string{"id", "payload", "created_at"}, missing: "idempotency_key"},
		{name: "no payload", cols: []string{"id", "idempotency_key", "created_at"}, missing: "payload"},
		{name: "no created_at", cols: []string{"created_at_", "id", "idempotency_key", "payload"}, missing: "created_at"},
		{name: "names are exact (a quoted \"ID\" is not id)", cols: []string{"ID", "idempotency_key", "payload", "created_at"}, missing: "id"},
		{name: "no column at all", cols: nil, missing: "id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRelation(relationOf(tc.cols...))
			if r.namespace != "public" || r.name != "outbox" || r.ncols != len(tc.cols) {
				t.Errorf("relation %s.%s with %d columns, want public.outbox with %d", r.namespace, r.name, r.ncols, len(tc.cols))
			}
			err := r.check()
			if tc.missing != "" {
				if !errors.Is(err, ErrSchema) {
					t.Fatalf("check() = %v, want ErrSchema", err)
				}
				if !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.missing)) || !strings.Contains(err.Error(), "public.outbox") {
					t.Errorf("check() = %q, want it to name column %q and table public.outbox", err, tc.missing)
				}
				if !IsTerminal(err) {
					t.Errorf("IsTerminal(%v) = false", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("check() = %v", err)
			}
			for j, name := range colNames {
				want, ok := tc.want[name]
				if !ok {
					want = -1
				}
				if r.pos[j] != want {
					t.Errorf("column %q at %d, want %d", name, r.pos[j], want)
				}
			}
		})
	}
}

// The relation decoded from the wire maps the same way.
func TestRelationFromWire(t *testing.T) {
	m, err := Decode(msgRelation(1, "app", "events", []relCol{
		{name: "payload"}, {name: "note"}, {name: "created_at"}, {name: "idempotency_key"}, {name: "id"},
	}), 0)
	if err != nil {
		t.Fatal(err)
	}
	r := newRelation(m.(*pglogrepl.RelationMessage))
	if err := r.check(); err != nil {
		t.Fatal(err)
	}
	if r.namespace != "app" || r.name != "events" {
		t.Errorf("table %s.%s", r.namespace, r.name)
	}
	want := [numCols]int{colID: 4, colKey: 3, colPayload: 0, colCreatedAt: 2, colTopic: -1, colPartitionKey: -1, colEventType: -1, colHeaders: -1}
	if r.pos != want {
		t.Errorf("positions %v, want %v", r.pos, want)
	}
}

func pgErr(code, msg string) *pgconn.PgError {
	return &pgconn.PgError{Severity: "FATAL", Code: code, Message: msg}
}

func TestExplainAndIsTerminal(t *testing.T) {
	const slot, pub = "walpost", "walpost_pub"
	tests := []struct {
		name     string
		err      error
		terminal bool
		is       error    // sentinel Explain's result must match, if any
		mentions []string // substrings of Explain's message
	}{
		{
			name: "55006 slot active elsewhere: retryable",
			err:  pgErr("55006", `replication slot "walpost" is active for PID 4242`),
			is:   ErrSlotActive, mentions: []string{"active for PID 4242"},
		},
		{
			name:     "42501 role without REPLICATION",
			err:      pgErr("42501", "must be superuser or replication role to start walsender"),
			terminal: true, mentions: []string{"ALTER ROLE", "REPLICATION"},
		},
		{
			name:     "55000 wal_level (PG15 wording)",
			err:      pgErr("55000", "logical decoding requires wal_level >= logical"),
			terminal: true, mentions: []string{"wal_level = logical", "restart"},
		},
		{
			name:     "55000 wal_level (PG16+ wording)",
			err:      pgErr("55000", `logical decoding requires "wal_level" >= "logical"`),
			terminal: true, mentions: []string{"wal_level = logical"},
		},
		{
			name:     "28P01 bad password",
			err:      pgErr("28P01", `password authentication failed for user "walpost"`),
			terminal: true, mentions: []string{"password", "WALPOST_POSTGRES_URL"},
		},
		{
			name:     "28000 pg_hba",
			err:      pgErr("28000", `no pg_hba.conf entry for replication connection from host "10.0.0.1"`),
			terminal: true, mentions: []string{"pg_hba.conf", "host replication"},
		},
		{
			name:     "42704 slot missing",
			err:      pgErr("42704", `replication slot "walpost" does not exist`),
			terminal: true, mentions: []string{`slot "walpost" does not exist`},
		},
		{
			name:     "42704 publication missing",
			err:      pgErr("42704", `publication "walpost_pub" does not exist`),
			terminal: true, mentions: []string{"CREATE PUBLICATION walpost_pub", "publish = 'insert'"},
		},
		{
			name:     "3D000 database missing",
			err:      pgErr("3D000", `database "shop" does not exist`),
			terminal: true, mentions: []string{"postgres.url"},
		},
		{
			name:     "53400 too many slots: retryable",
			err:      pgErr("53400", "all replication slots are in use"),
			mentions: []string{"max_replication_slots"},
		},
		{
			name:     "0A000 standby",
			err:      pgErr("0A000", "logical decoding cannot be used while in recovery"),
			mentions: []string{"primary"},
		},
		{
			name:     "wrapped PgError keeps its class",
			err:      fmt.Errorf("start replication: %w", pgErr("42501", "must be superuser or replication role to start walsender")),
			terminal: true, mentions: []string{"REPLICATION", "start replication"},
		},
		{
			name: "not a PgError: unchanged, retryable",
			err:  errors.New("read tcp 127.0.0.1:5432: connection reset by peer"),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsTerminal(tc.err); got != tc.terminal {
				t.Errorf("IsTerminal(%v) = %v, want %v", tc.err, got, tc.terminal)
			}
			got := Explain(tc.err, slot, pub)
			if got == nil {
				t.Fatal("Explain returned nil")
			}
			if IsTerminal(got) != tc.terminal {
				t.Errorf("IsTerminal(Explain(err)) = %v, want %v", !tc.terminal, tc.terminal)
			}
			if !errors.Is(got, tc.err) {
				t.Errorf("Explain(err) = %v does not wrap the original error", got)
			}
			var pe *pgconn.PgError
			if errors.As(tc.err, &pe) {
				var pe2 *pgconn.PgError
				if !errors.As(got, &pe2) || pe2.Code != pe.Code {
					t.Errorf("Explain(err) lost the *pgconn.PgError %s", pe.Code)
				}
			} else if got != tc.err {
				t.Errorf("Explain(non-PgError) = %v, want it unchanged", got)
			}
			if tc.is != nil && !errors.Is(got, tc.is) {
				t.Errorf("Explain(err) = %v, want errors.Is %v", got, tc.is)
			}
			for _, s := range tc.mentions {
				if !strings.Contains(got.Error(), s) {
					t.Errorf("Explain(err) = %q, want it to mention %q", got, s)
				}
			}
		})
	}
}

// A slot invalidated by max_slot_wal_keep_size fails START_REPLICATION with
// SQLSTATE 55000; PostgreSQL 13–17 put the reason in the detail, not the
// message (logical.c, CreateDecodingContext):
//
//	ERROR:  cannot read from logical replication slot "walpost"
//	DETAIL:  This slot has been invalidated because it exceeded the maximum reserved size.
//
// (PG16/17 replication: "can no longer get changes from replication slot").
// Explain must classify it as ErrSlotLost with the recovery steps, not leave
// it as a bare 55000.
func TestExplainSlotInvalidated(t *testing.T) {
	for _, msg := range []string{
		`cannot read from logical replication slot "walpost"`,
		`can no longer get changes from replication slot "walpost"`,
	} {
		t.Run(msg, func(t *testing.T) {
			err := &pgconn.PgError{
				Severity: "ERROR", Code: "55000", Message: msg,
				Detail: "This slot has been invalidated because it exceeded the maximum reserved size.",
			}
			got := Explain(err, "walpost", "walpost_pub")
			if !errors.Is(got, ErrSlotLost) {
				t.Errorf("Explain(%q + invalidated detail) = %q, want ErrSlotLost", msg, got)
			}
			if !IsTerminal(got) {
				t.Errorf("IsTerminal(%v) = false", got)
			}
		})
	}
	t.Run("reason in the message", func(t *testing.T) {
		got := Explain(pgErr("55000", `replication slot "walpost" was invalidated: wal_status lost`), "walpost", "walpost_pub")
		if !errors.Is(got, ErrSlotLost) || !strings.Contains(got.Error(), "pg_drop_replication_slot('walpost')") {
			t.Errorf("Explain = %q, want ErrSlotLost with the drop instruction", got)
		}
	})
}

func TestDecodeErrorUnwrap(t *testing.T) {
	inner := errors.New("boom")
	err := fmt.Errorf("stream: %w", &DecodeError{LSN: 0x16B3748, Err: inner})
	if !errors.Is(err, inner) {
		t.Error("DecodeError does not unwrap to its cause")
	}
	if want := "stream: decode pgoutput message at 0/16B3748: boom"; err.Error() != want {
		t.Errorf("Error() = %q, want %q", err, want)
	}
	if !IsTerminal(err) {
		t.Error("a wrapped DecodeError is not terminal")
	}
}

package replicationtest

import (
	"encoding/binary"
	"time"

	"github.com/jackc/pglogrepl"
)

// pgoutput protocol version 1 messages, built by hand from
// https://www.postgresql.org/docs/current/protocol-logicalrep-message-formats.html,
// and the replication protocol's CopyData payloads that carry them.

// pgEpoch is the origin of PostgreSQL timestamps (microseconds since
// 2000-01-01 00:00:00 UTC).
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

type wire []byte

func (w wire) u8(v byte) wire    { return append(w, v) }
func (w wire) u16(v uint16) wire { return binary.BigEndian.AppendUint16(w, v) }
func (w wire) u32(v uint32) wire { return binary.BigEndian.AppendUint32(w, v) }
func (w wire) u64(v uint64) wire { return binary.BigEndian.AppendUint64(w, v) }
func (w wire) str(s string) wire { return append(append(w, s...), 0) }
func (w wire) ts(t time.Time) wire {
	return w.u64(uint64(t.Sub(pgEpoch).Microseconds()))
}

// Begin is pgoutput's Begin: Byte1('B') Int64 final (commit) LSN, Int64
// commit timestamp, Int32 xid.
func Begin(final pglogrepl.LSN, commit time.Time, xid uint32) []byte {
	return wire{'B'}.u64(uint64(final)).ts(commit).u32(xid)
}

// Commit is pgoutput's Commit: Byte1('C') Int8 flags, Int64 commit LSN,
// Int64 end LSN, Int64 commit timestamp.
func Commit(commitLSN, end pglogrepl.LSN, commit time.Time) []byte {
	return wire{'C'}.u8(0).u64(uint64(commitLSN)).u64(uint64(end)).ts(commit)
}

// Column is one column of a Relation message.
type Column struct {
	Name string
	OID  uint32 // the type's oid: 25 text, 2950 uuid, 3802 jsonb, 1184 timestamptz
	Key  bool   // part of the replica identity
}

// Relation is pgoutput's Relation: Byte1('R') Int32 relation id, String
// namespace, String name, Int8 replica identity, Int16 columns, then per
// column Int8 flags, String name, Int32 type oid, Int32 type modifier.
func Relation(id uint32, namespace, name string, cols []Column) []byte {
	w := wire{'R'}.u32(id).str(namespace).str(name).u8('d').u16(uint16(len(cols)))
	for _, c := range cols {
		var flags byte
		if c.Key {
			flags = 1
		}
		w = w.u8(flags).str(c.Name).u32(c.OID).u32(0xFFFFFFFF) // typmod -1
	}
	return w
}

// Value is one TupleData column: Text, Null or a raw kind.
type Value struct {
	Kind byte // 'n' NULL, 'u' unchanged TOAST, 't' text, 'b' binary
	Data string
}

// Text is a column in text format.
func Text(s string) Value { return Value{Kind: 't', Data: s} }

// Null is a NULL column.
var Null = Value{Kind: 'n'}

// Insert is pgoutput's Insert: Byte1('I') Int32 relation id, Byte1('N'),
// TupleData.
func Insert(relation uint32, values []Value) []byte {
	w := wire{'I'}.u32(relation).u8('N').u16(uint16(len(values)))
	for _, v := range values {
		w = w.u8(v.Kind)
		if v.Kind == 't' || v.Kind == 'b' {
			w = append(w.u32(uint32(len(v.Data))), v.Data...)
		}
	}
	return w
}

// XLogData wraps a pgoutput message in the replication protocol's
// XLogData: Byte1('w') Int64 WAL start, Int64 server WAL end, Int64
// send time (0 here), then the message. The server WAL end is the start.
func XLogData(start pglogrepl.LSN, msg []byte) []byte {
	return XLogDataEnd(start, start, msg)
}

// XLogDataEnd is XLogData with the server's WAL end.
func XLogDataEnd(start, walEnd pglogrepl.LSN, msg []byte) []byte {
	return XLogDataSent(start, walEnd, time.Time{}, msg)
}

// XLogDataSent is XLogDataEnd with the send time sent (zero: 0, which a
// client reads as 2000-01-01).
func XLogDataSent(start, walEnd pglogrepl.LSN, sent time.Time, msg []byte) []byte {
	w := wire{'w'}.u64(uint64(start)).u64(uint64(walEnd))
	if sent.IsZero() {
		w = w.u64(0)
	} else {
		w = w.ts(sent)
	}
	return append(w, msg...)
}

// Keepalive is the replication protocol's primary keepalive: Byte1('k')
// Int64 server WAL end, Int64 send time, Byte1 reply requested.
func Keepalive(walEnd pglogrepl.LSN, at time.Time, reply bool) []byte {
	var r byte
	if reply {
		r = 1
	}
	return wire{'k'}.u64(uint64(walEnd)).ts(at).u8(r)
}

// Status is one standby status update a client sent: Byte1('r') Int64
// write, Int64 flush, Int64 apply, Int64 client time, Byte1 reply.
type Status struct {
	PID                 uint32 // the walsender (connection) it came to
	Write, Flush, Apply pglogrepl.LSN
	Reply               bool
	At                  time.Time // when the server received it
}

// parseStatus reads a standby status update; ok is false for another
// CopyData.
func parseStatus(b []byte) (s Status, ok bool) {
	if len(b) < 34 || b[0] != 'r' {
		return s, false
	}
	s.Write = pglogrepl.LSN(binary.BigEndian.Uint64(b[1:]))
	s.Flush = pglogrepl.LSN(binary.BigEndian.Uint64(b[9:]))
	s.Apply = pglogrepl.LSN(binary.BigEndian.Uint64(b[17:]))
	s.Reply = b[33] != 0
	return s, true
}

package replication

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/outbox"
)

// The hot path: an Insert message ('I') of the outbox is decoded straight
// into an Event, its column bytes copied into one buffer, instead of
// pglogrepl's message, tuple and per-column allocations. Every length is
// checked against the message before use; a malformed message is a
// *DecodeError, never a panic.

var errInsert = errors.New("malformed insert message")

type span struct{ start, end int }

// decodeInsert parses data (an 'I' message) with the relation of its id,
// looked up through rel.
func decodeInsert(data []byte, rel func(uint32) *relation) (*relation, [numCols]span, [numCols]bool, error) {
	var spans [numCols]span
	var present [numCols]bool
	if len(data) < 8 || data[0] != 'I' || data[5] != 'N' {
		return nil, spans, present, errInsert
	}
	relID := binary.BigEndian.Uint32(data[1:5])
	r := rel(relID)
	if r == nil {
		return nil, spans, present, fmt.Errorf("insert for unknown relation %d", relID)
	}
	n := int(binary.BigEndian.Uint16(data[6:8]))
	// A column missing from the tuple would read as NULL: an event
	// forwarded without its topic or partition key, or refused for a
	// missing payload far from the cause.
	if n != r.ncols {
		return nil, spans, present, fmt.Errorf("insert into %s.%s has %d columns, its relation message %d: walpost stopped without confirming this event", r.namespace, r.name, n, r.ncols)
	}
	off := 8
	for i := 0; i < n; i++ {
		if off >= len(data) {
			return nil, spans, present, errInsert
		}
		kind := data[off]
		off++
		start, end := off, off
		switch kind {
		case 't', 'b':
			if off+4 > len(data) {
				return nil, spans, present, errInsert
			}
			l := int(binary.BigEndian.Uint32(data[off:]))
			off += 4
			if l < 0 || l > len(data)-off {
				return nil, spans, present, errInsert
			}
			start, end = off, off+l
			off += l
		case 'n':
			continue
		case 'u':
			// Never silently NULL: pgoutput sends 'u' only in an update's
			// new tuple, for a TOASTed column the update left unchanged.
			return nil, spans, present, fmt.Errorf("insert into %s.%s: column %q is an unchanged TOAST value ('u'), which an insert never carries: walpost stopped without confirming this event", r.namespace, r.name, r.names[i])
		default:
			return nil, spans, present, errInsert
		}
		if kind == 'b' {
			// walpost reads text format only and never asks for binary.
			return nil, spans, present, fmt.Errorf("insert into %s.%s: column %q is in binary format ('b'); walpost reads pgoutput's text format only: stream the slot without the binary option", r.namespace, r.name, r.names[i])
		}
		for c := 0; c < numCols; c++ {
			if r.pos[c] == i {
				spans[c], present[c] = span{start, end}, true
			}
		}
	}
	if off != len(data) {
		return nil, spans, present, errInsert
	}
	return r, spans, present, nil
}

// insertEvent builds the event of an Insert message: one allocation for
// the event and one for its bytes.
func (s *Stream) insertEvent(data []byte, lsn pglogrepl.LSN) (*outbox.Event, error) {
	r, spans, present, err := decodeInsert(data, func(id uint32) *relation { return s.rels[id] })
	if err != nil {
		return nil, &DecodeError{LSN: lsn, Err: err}
	}
	size := 0
	for c := 0; c < numCols; c++ {
		size += spans[c].end - spans[c].start
	}
	var extra []span // nil: NULL or absent
	if len(r.extra) > 0 {
		extra = extraSpans(data, r.extra)
		for _, sp := range extra {
			size += sp.end - sp.start
		}
	}
	created := spans[colCreatedAt]
	size += created.end - created.start + 8 // room for the RFC 3339 rewrite
	buf := make([]byte, 0, size)
	str := func(c int) string {
		if !present[c] || spans[c].end == spans[c].start {
			return ""
		}
		a := len(buf)
		buf = append(buf, data[spans[c].start:spans[c].end]...)
		return unsafe.String(&buf[a], len(buf)-a)
	}
	bytes := func(c int) []byte {
		if !present[c] {
			return nil
		}
		a := len(buf)
		buf = append(buf, data[spans[c].start:spans[c].end]...)
		return buf[a:len(buf):len(buf)]
	}
	// Bytes a string points to are never written again: later appends go
	// to the unused tail of buf.
	ev := &outbox.Event{
		ID:             str(colID),
		IdempotencyKey: str(colKey),
		CreatedAt:      str(colCreatedAt),
		Topic:          str(colTopic),
		EventType:      str(colEventType),
		XID:            s.begin.Xid,
		CommitLSN:      s.begin.FinalLSN,
		CommitTime:     s.begin.CommitTime,
		CommitLSNText:  s.commitText,
		Seq:            s.seq,
		ReceivedAt:     s.recvAt,
		SentAt:         s.sentAt,
	}
	ev.Payload = bytes(colPayload)
	ev.Headers = bytes(colHeaders)
	if present[colPartitionKey] {
		ev.PartitionKey, ev.HasPartition = str(colPartitionKey), true
	}
	if ev.CreatedAt != "" {
		// Appends into the unused tail (or a new array): never over the
		// bytes the strings above point to.
		a := len(buf)
		buf = outbox.AppendRFC3339(buf, data[created.start:created.end])
		ev.CreatedAtRFC3339 = unsafe.String(&buf[a], len(buf)-a)
	}
	if extra != nil {
		l := r.layout
		nh := len(l.extra)
		if l.hasTS {
			nh--
		}
		trace := -1 // index of the tracing column in extra
		if l.hasTrace {
			nh--
			trace = nh
		}
		ev.Placed = &outbox.Placed{}
		if nh > 0 {
			ev.Placed.HeaderValues = make([][]byte, nh)
		}
		for i, sp := range extra {
			if sp.start < 0 {
				continue
			}
			a := len(buf)
			buf = append(buf, data[sp.start:sp.end]...)
			v := buf[a:len(buf):len(buf)]
			switch {
			case i < nh:
				ev.Placed.HeaderValues[i] = v
			case i == trace:
				ev.Placed.Trace = v
			default:
				ev.Placed.Timestamp = outbox.ParseTimestamp(v)
			}
		}
	}
	s.seq++
	return ev, nil
}

// extraSpans returns the span of each column at positions pos of an insert
// message decodeInsert accepted (start -1: NULL or absent). Only a mapping
// with extra columns (mapping.header_columns, mapping.timestamp_column)
// walks the tuple a second time.
func extraSpans(data []byte, pos []int) []span {
	out := make([]span, len(pos))
	for i := range out {
		out[i] = span{-1, -1}
	}
	n := int(binary.BigEndian.Uint16(data[6:8]))
	off := 8
	for i := 0; i < n; i++ {
		kind := data[off]
		off++
		if kind != 't' {
			continue // 'n': NULL ('u' and 'b' were refused)
		}
		l := int(binary.BigEndian.Uint32(data[off:]))
		off += 4
		for j, p := range pos {
			if p == i {
				out[j] = span{off, off + l}
			}
		}
		off += l
	}
	return out
}

package replication

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pglogrepl"
)

var errEmpty = errors.New("empty message")

// Decode parses one pgoutput message (protocol version 1). It never
// panics: pglogrepl panics on empty or truncated input, and this boundary
// turns such a panic into a *DecodeError carrying lsn (DESIGN.md, Decoding hostile input).
func Decode(data []byte, lsn pglogrepl.LSN) (msg pglogrepl.Message, err error) {
	if len(data) == 0 {
		return nil, &DecodeError{LSN: lsn, Err: errEmpty}
	}
	defer func() {
		if r := recover(); r != nil {
			msg = nil
			err = &DecodeError{LSN: lsn, Err: fmt.Errorf("malformed %q message: %v", rune(data[0]), r)}
		}
	}()
	// Bound what the parser may allocate: pglogrepl trusts length fields
	// before checking them against the message.
	if err := checkLengths(data); err != nil {
		return nil, &DecodeError{LSN: lsn, Err: err}
	}
	// A full slice expression, so no decoder reads past the message into
	// the rest of the receive buffer.
	msg, err = pglogrepl.Parse(data[:len(data):len(data)])
	if err != nil {
		return nil, &DecodeError{LSN: lsn, Err: err}
	}
	return msg, nil
}

// Columns of the outbox row, mapped by name (DESIGN.md, PostgreSQL facts): a relation message
// may carry them in any order and with extra columns.
const (
	colID = iota
	colKey
	colPayload
	colCreatedAt
	colTopic
	colPartitionKey
	colEventType
	colHeaders
	numCols
)

var colNames = [numCols]string{"id", "idempotency_key", "payload", "created_at", "topic", "partition_key", "event_type", "headers"}

// RequiredColumns must be present in walpost's outbox table (Columns{});
// Columns.Required lists them for a mapping.
var RequiredColumns = []string{"id", "idempotency_key", "payload", "created_at"}

// relation maps a pgoutput relation to outbox column positions.
type relation struct {
	namespace, name string
	pos             [numCols]int // index in the tuple, -1 when absent
	ncols           int
	names           []string // column names in tuple order, for errors
	layout          *layout
	extra           []int // tuple index of each layout.extra column, -1 when absent
}

// newRelation maps m with walpost's default column names.
func newRelation(m *pglogrepl.RelationMessage) *relation { return newRelationFor(m, &walpostLayout) }

func newRelationFor(m *pglogrepl.RelationMessage, l *layout) *relation {
	r := &relation{namespace: m.Namespace, name: m.RelationName, ncols: len(m.Columns), names: make([]string, len(m.Columns)), layout: l}
	for i := range r.pos {
		r.pos[i] = -1
	}
	if len(l.extra) > 0 {
		r.extra = make([]int, len(l.extra))
		for i := range r.extra {
			r.extra[i] = -1
		}
	}
	for i, c := range m.Columns {
		r.names[i] = c.Name
		for j, n := range l.names {
			if c.Name == n && n != "" {
				r.pos[j] = i
			}
		}
		for j, n := range l.extra {
			if c.Name == n {
				r.extra[j] = i
			}
		}
	}
	return r
}

// check reports a required column missing from the relation.
func (r *relation) check() error {
	col, key, missing := r.layout.missing(func(n string) bool { return slices.Contains(r.names, n) })
	if missing {
		var req []string
		for j := 0; j < numCols; j++ {
			if r.layout.required[j] && !slices.Contains(req, r.layout.names[j]) {
				req = append(req, r.layout.names[j])
			}
		}
		req = append(req, r.layout.extra...)
		return fmt.Errorf("%w: %s; walpost stopped here and confirmed nothing past the last complete event. Events written without the column cannot be forwarded: restore the column for new writes, re-insert the affected events under their keys, then move the slot past this transaction (README runbook, \"required column dropped\")",
			ErrSchema, missingText(r.namespace+"."+r.name, col, key, req))
	}
	return nil
}

var errLength = errors.New("length field exceeds the message")

// checkLengths verifies the length and count fields of the messages whose
// decoders allocate by them (Insert, Update, Delete tuples; Truncate).
func checkLengths(data []byte) error {
	body := data[1:]
	switch data[0] {
	case 'I':
		if len(body) < 5 {
			return errLength
		}
		_, err := tupleEnd(body[5:])
		return err
	case 'U':
		if len(body) < 5 {
			return errLength
		}
		rest := body[4:]
		if rest[0] == 'K' || rest[0] == 'O' {
			n, err := tupleEnd(rest[1:])
			if err != nil {
				return err
			}
			rest = rest[1+n:]
			if len(rest) < 1 {
				return errLength
			}
		}
		_, err := tupleEnd(rest[1:])
		return err
	case 'D':
		if len(body) < 5 {
			return errLength
		}
		_, err := tupleEnd(body[5:])
		return err
	case 'T':
		if len(body) < 5 {
			return errLength
		}
		n := int(binary.BigEndian.Uint32(body))
		if n < 0 || n > (len(body)-5)/4 {
			return errLength
		}
	}
	return nil
}

// tupleEnd returns the length of the TupleData at the start of b.
func tupleEnd(b []byte) (int, error) {
	if len(b) < 2 {
		return 0, errLength
	}
	n := int(binary.BigEndian.Uint16(b))
	off := 2
	for i := 0; i < n; i++ {
		if off >= len(b) {
			return 0, errLength
		}
		kind := b[off]
		off++
		switch kind {
		case 't', 'b':
			if off+4 > len(b) {
				return 0, errLength
			}
			l := int(binary.BigEndian.Uint32(b[off:]))
			off += 4
			if l < 0 || l > len(b)-off {
				return 0, errLength
			}
			off += l
		}
	}
	return off, nil
}

package replication

import (
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
)

var errEmpty = errors.New("empty message")

// Decode parses one pgoutput message (protocol version 1). It never
// panics: pglogrepl panics on empty or truncated input, and this boundary
// turns such a panic into a *DecodeError carrying lsn (STYLE point 8).
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
	msg, err = pglogrepl.Parse(data)
	if err != nil {
		return nil, &DecodeError{LSN: lsn, Err: err}
	}
	return msg, nil
}

// Columns of the outbox row, mapped by name (DESIGN §3): a relation message
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

// RequiredColumns must be present in the outbox table.
var RequiredColumns = []string{"id", "idempotency_key", "payload", "created_at"}

// OptionalColumns route a record when present.
var OptionalColumns = []string{"topic", "partition_key", "event_type", "headers"}

// relation maps a pgoutput relation to outbox column positions.
type relation struct {
	namespace, name string
	pos             [numCols]int // index in the tuple, -1 when absent
	ncols           int
}

func newRelation(m *pglogrepl.RelationMessage) *relation {
	r := &relation{namespace: m.Namespace, name: m.RelationName, ncols: len(m.Columns)}
	for i := range r.pos {
		r.pos[i] = -1
	}
	for i, c := range m.Columns {
		for j, n := range colNames {
			if c.Name == n {
				r.pos[j] = i
			}
		}
	}
	return r
}

// check reports a required column missing from the relation.
func (r *relation) check() error {
	for j := colID; j <= colCreatedAt; j++ {
		if r.pos[j] < 0 {
			return fmt.Errorf("%w: table %s.%s has no column %q (required: %v); restore the column, walpost confirmed nothing past the last complete event",
				ErrSchema, r.namespace, r.name, colNames[j], RequiredColumns)
		}
	}
	return nil
}

package kafka

import (
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrBinaryText: a bytea payload's text is not PostgreSQL's hex form
// (\x followed by two hex digits per byte). walpost's connections ask for
// bytea_output = hex, so PostgreSQL never sends another; a record that
// still has one is quarantined, never sent as text.
var ErrBinaryText = errors.New("the bytea payload is not PostgreSQL's hex text (\\x…)")

// decodeBytea returns the bytes of a bytea value's hex text. The event
// keeps its text (the poison table and a replay need it); the bytes are
// a new slice.
func decodeBytea(text []byte) ([]byte, error) {
	if len(text) < 2 || text[0] != '\\' || text[1] != 'x' {
		return nil, fmt.Errorf("%w: it starts with %q", ErrBinaryText, text[:min(len(text), 8)])
	}
	out := make([]byte, hex.DecodedLen(len(text)-2))
	if _, err := hex.Decode(out, text[2:]); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBinaryText, err)
	}
	return out, nil
}

// binaryValue replaces r's value (a bytea payload's text) by its bytes
// when types says the payload column is bytea; a NULL payload (a
// tombstone) stays nil.
func binaryValue(r *kgo.Record, types *[2]ColumnType) error {
	if types == nil || !types[1].Binary || r.Value == nil {
		return nil
	}
	b, err := decodeBytea(r.Value)
	if err != nil {
		return err
	}
	r.Value = b
	return nil
}

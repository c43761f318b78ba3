package inbox

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Header names of walpost's record contract that the inbox reads.
const (
	HeaderIdempotencyKey = "idempotency_key"
	HeaderCommitLSN      = "commit_lsn"
	HeaderReplayed       = "replayed_from_poison"
	HeaderRecovered      = "walpost_recovered"
	// HeaderResent marks a record walpost resend re-drove from the outbox
	// table: decided by the key table, like a recovered one.
	HeaderResent = "walpost_resent"
	// HeaderID is the Debezium layout's event id (the outbox row's id),
	// the key of a Debezium-profile record, which has no idempotency_key.
	HeaderID = "id"
)

// ErrInvalidRecord is matched (errors.Is) by every *RecordError: a record
// the inbox cannot place, so it refuses to decide whether it is new.
var ErrInvalidRecord = errors.New("record the inbox cannot place")

// RecordError is a record refused before anything was written.
type RecordError struct {
	Topic     string
	Partition int32
	Offset    int64
	Reason    string
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("inbox: record %s/%d@%d: %s", e.Topic, e.Partition, e.Offset, e.Reason)
}

// Is reports whether target is ErrInvalidRecord.
func (e *RecordError) Is(target error) bool { return target == ErrInvalidRecord }

// LSN is a PostgreSQL write-ahead log position, the commit_lsn header.
type LSN uint64

// ParseLSN reads PostgreSQL's text form of an LSN, "16/B374D848".
func ParseLSN(s string) (LSN, error) {
	l, ok := parseLSN([]byte(s))
	if !ok {
		return 0, fmt.Errorf("LSN %q: want X/Y in hexadecimal", s)
	}
	return l, nil
}

// parseLSN is ParseLSN on a header's bytes, without allocating.
func parseLSN(b []byte) (LSN, bool) {
	var half [2]uint64
	h, digits := 0, 0
	for _, c := range b {
		var d byte
		switch {
		case c == '/' && h == 0 && digits > 0:
			h, digits = 1, 0
			continue
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		if digits == 8 {
			return 0, false
		}
		half[h] = half[h]<<4 | uint64(d)
		digits++
	}
	if h != 1 || digits == 0 {
		return 0, false
	}
	return LSN(half[0]<<32 | half[1]), true
}

// String is PostgreSQL's text form.
func (l LSN) String() string { return fmt.Sprintf("%X/%X", uint32(l>>32), uint32(l)) }

// kind says which state decides whether a record is new.
type kind uint8

const (
	// ordered: a first send of walpost (commit_lsn, neither replayed nor
	// recovered); the partition's watermark decides.
	ordered kind = iota
	// keyed: replayed from poison, recovered, resent, or without commit_lsn
	// (Debezium profile, another producer); the key table decides.
	keyed
)

// event is what the inbox reads of a record.
type event struct {
	rec    *kgo.Record
	keyB   []byte // the dedup key, a view of the record's bytes
	key    string // keyB as a string, once needed (keyString)
	lsn    LSN
	hasLSN bool
	kind   kind
}

// keyString is the dedup key as a string, made once.
func (ev *event) keyString() string {
	if ev.key == "" {
		ev.key = string(ev.keyB)
	}
	return ev.key
}

// parse reads the headers the inbox needs. The dedup key is the
// idempotency_key header, else the Debezium layout's id header, else the
// record key.
func parse(r *kgo.Record) (event, error) {
	var ev event
	err := parseInto(&ev, r)
	return ev, err
}

// parseInto is parse into *ev (a batch's events are read in place).
func parseInto(ev *event, r *kgo.Record) error {
	*ev = event{rec: r}
	bad := func(reason string) error {
		*ev = event{}
		return &RecordError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Reason: reason}
	}
	if r.Topic == "" {
		return bad("no topic")
	}
	var id []byte
	var flagged bool
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderIdempotencyKey:
			ev.keyB = h.Value
		case HeaderID:
			id = h.Value
		case HeaderCommitLSN:
			l, ok := parseLSN(h.Value)
			if !ok {
				return bad(fmt.Sprintf("commit_lsn header %q: want X/Y in hexadecimal", h.Value))
			}
			ev.lsn, ev.hasLSN = l, true
		case HeaderReplayed, HeaderRecovered, HeaderResent:
			flagged = flagged || string(h.Value) == "true"
		}
	}
	if len(ev.keyB) == 0 {
		ev.keyB = id
	}
	if len(ev.keyB) == 0 {
		ev.keyB = r.Key
	}
	if len(ev.keyB) == 0 {
		return bad("no idempotency_key header, no id header and an empty key: nothing to deduplicate by")
	}
	if flagged || !ev.hasLSN {
		ev.kind = keyed
	}
	return nil
}

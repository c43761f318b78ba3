package inbox

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

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
	hi, lo, ok := strings.Cut(s, "/")
	if !ok || hi == "" || lo == "" || len(hi) > 8 || len(lo) > 8 {
		return 0, fmt.Errorf("LSN %q: want X/Y in hexadecimal", s)
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("LSN %q: want X/Y in hexadecimal", s)
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("LSN %q: want X/Y in hexadecimal", s)
	}
	return LSN(h<<32 | l), nil
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
	key    string
	lsn    LSN
	hasLSN bool
	kind   kind
}

// parse reads the headers the inbox needs. The dedup key is the
// idempotency_key header, else the Debezium layout's id header, else the
// record key.
func parse(r *kgo.Record) (event, error) {
	ev := event{rec: r}
	bad := func(reason string) (event, error) {
		return event{}, &RecordError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Reason: reason}
	}
	if r.Topic == "" {
		return bad("no topic")
	}
	var id string
	var flagged bool
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderIdempotencyKey:
			ev.key = string(h.Value)
		case HeaderID:
			id = string(h.Value)
		case HeaderCommitLSN:
			l, err := ParseLSN(string(h.Value))
			if err != nil {
				return bad("commit_lsn header: " + err.Error())
			}
			ev.lsn, ev.hasLSN = l, true
		case HeaderReplayed, HeaderRecovered, HeaderResent:
			flagged = flagged || string(h.Value) == "true"
		}
	}
	if ev.key == "" {
		ev.key = id
	}
	if ev.key == "" {
		ev.key = string(r.Key)
	}
	if ev.key == "" {
		return bad("no idempotency_key header, no id header and an empty key: nothing to deduplicate by")
	}
	if flagged || !ev.hasLSN {
		ev.kind = keyed
	}
	return ev, nil
}

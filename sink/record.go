package sink

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/outbox"
)

// ErrInvalidHeaders: the row's headers column is not a JSON object whose
// values are all strings. Such a record cannot be built; it is a poison
// candidate.
var ErrInvalidHeaders = errors.New("outbox headers must be a JSON object of strings")

// ErrEmptyKey: the row has no idempotency_key.
var ErrEmptyKey = errors.New("outbox row has an empty idempotency_key")

// ErrNullPayload: the row's payload is NULL. Its record would be a
// tombstone, which deletes the key from a compacted topic; walpost
// quarantines it instead.
var ErrNullPayload = errors.New("outbox row has a NULL payload (its record would be a tombstone)")

// Header names of the record contract (DESIGN §5).
const (
	HeaderIdempotencyKey = "idempotency_key"
	HeaderOutboxID       = "outbox_id"
	HeaderCommitLSN      = "commit_lsn"
	HeaderCreatedAt      = "created_at"
	HeaderEventType      = "event_type"
)

// BuildRecord turns an event into its Kafka record (DESIGN §5): topic = the
// row's topic or defaultTopic; key = idempotency_key; value = payload bytes
// exactly as PostgreSQL rendered the jsonb; headers idempotency_key,
// outbox_id, commit_lsn (X/X), created_at (RFC 3339), event_type when set,
// then each entry of the row's headers object; timestamp = commit time.
func BuildRecord(ev *outbox.Event, defaultTopic string) (*kgo.Record, error) {
	if ev.IdempotencyKey == "" {
		return nil, ErrEmptyKey
	}
	if ev.Payload == nil {
		return nil, ErrNullPayload
	}
	topic := ev.Topic
	if topic == "" {
		topic = defaultTopic
	}
	n := 4
	if ev.EventType != "" {
		n++
	}
	var extra map[string]any
	if len(ev.Headers) > 0 && string(ev.Headers) != "null" {
		if err := json.Unmarshal(ev.Headers, &extra); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidHeaders, err)
		}
		for k, v := range extra {
			if _, ok := v.(string); !ok {
				return nil, fmt.Errorf("%w: header %q is %T", ErrInvalidHeaders, k, v)
			}
		}
		n += len(extra)
	}
	hs := make([]kgo.RecordHeader, 0, n)
	hs = append(hs,
		kgo.RecordHeader{Key: HeaderIdempotencyKey, Value: []byte(ev.IdempotencyKey)},
		kgo.RecordHeader{Key: HeaderOutboxID, Value: []byte(ev.ID)},
		kgo.RecordHeader{Key: HeaderCommitLSN, Value: []byte(ev.CommitLSN.String())},
		kgo.RecordHeader{Key: HeaderCreatedAt, Value: []byte(RFC3339(ev.CreatedAt))},
	)
	if ev.EventType != "" {
		hs = append(hs, kgo.RecordHeader{Key: HeaderEventType, Value: []byte(ev.EventType)})
	}
	if len(extra) > 0 {
		// Keep the row's order stable: sort keys.
		keys := make([]string, 0, len(extra))
		for k := range extra {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if reserved(k, ev.EventType != "") {
				// The contract's own headers are not overridden by the row:
				// consumers deduplicate by idempotency_key.
				continue
			}
			hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(extra[k].(string))})
		}
	}
	return &kgo.Record{
		Topic:     topic,
		Key:       []byte(ev.IdempotencyKey),
		Value:     ev.Payload,
		Headers:   hs,
		Timestamp: ev.CommitTime,
	}, nil
}

var pgLayouts = []string{
	"2006-01-02 15:04:05.999999999-07",
	"2006-01-02 15:04:05.999999999-07:00",
	"2006-01-02 15:04:05.999999999-07:00:00",
}

// RFC3339 converts PostgreSQL's ISO text rendering of a timestamptz to RFC
// 3339; a value it cannot parse is returned unchanged.
func RFC3339(pg string) string {
	for _, l := range pgLayouts {
		if t, err := time.Parse(l, pg); err == nil {
			return t.Format(time.RFC3339Nano)
		}
	}
	return pg
}

// reserved reports whether a row header name is one of the contract's.
func reserved(name string, hasEventType bool) bool {
	switch name {
	case HeaderIdempotencyKey, HeaderOutboxID, HeaderCommitLSN, HeaderCreatedAt:
		return true
	case HeaderEventType:
		return hasEventType
	}
	return false
}

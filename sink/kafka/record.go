package kafka

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"unsafe"

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
// quarantines it instead, unless mapping.tombstone_on_empty_payload asks
// for the tombstone.
var ErrNullPayload = errors.New("outbox row has a NULL payload (its record would be a tombstone; set mapping.tombstone_on_empty_payload = true to send it as one)")

// Header names of the record contract (DESIGN.md, Contracts).
const (
	HeaderIdempotencyKey = "idempotency_key"
	HeaderOutboxID       = "outbox_id"
	HeaderCommitLSN      = "commit_lsn"
	HeaderCreatedAt      = "created_at"
	HeaderEventType      = "event_type"
	// HeaderReplayed ("true") marks a record re-sent from the poison table
	// (outbox.Event.Replayed); it comes after every other header.
	HeaderReplayed = "replayed_from_poison"
	// HeaderRecovered ("true") marks a record walpost recover read from the
	// outbox table over a lost slot's gap (outbox.Event.Recovered); it
	// comes after every other header.
	HeaderRecovered = "walpost_recovered"
	// HeaderResent ("true") marks a record walpost resend read from the
	// outbox table (outbox.Event.Resent); it comes after every other
	// header.
	HeaderResent = "walpost_resent"
)

// BuildRecord turns an event into its Kafka record (DESIGN.md, Contracts): topic = the
// row's topic or defaultTopic; key = idempotency_key; value = payload bytes
// exactly as PostgreSQL rendered the jsonb; headers idempotency_key,
// outbox_id, commit_lsn (X/X), created_at (RFC 3339), event_type when set,
// then each entry of the row's headers object; timestamp = commit time.
func BuildRecord(ev *outbox.Event, defaultTopic string) (*kgo.Record, error) {
	r := new(kgo.Record)
	if err := buildInto(r, nil, ev, defaultTopic, false); err != nil {
		return nil, err
	}
	return r, nil
}

// buildInto fills r for ev, appending its headers to hs[:0] (a buffer the
// caller may reuse). Keys and header values are read-only views of the
// event's strings: kgo never writes to them. A NULL payload is
// ErrNullPayload, or with tombstones a tombstone (value nil) with the
// usual key and headers.
//
// parseHeaders decodes the row's headers column: a JSON object of strings.
// (A function of its own, so the map escapes only for rows that have
// headers.)
func parseHeaders(b []byte) (map[string]any, error) {
	var extra map[string]any
	if err := json.Unmarshal(b, &extra); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidHeaders, err)
	}
	for k, v := range extra {
		if _, ok := v.(string); !ok {
			return nil, fmt.Errorf("%w: header %q is %T", ErrInvalidHeaders, k, v)
		}
	}
	return extra, nil
}

func buildInto(r *kgo.Record, hs []kgo.RecordHeader, ev *outbox.Event, defaultTopic string, tombstones bool) error {
	if ev.IdempotencyKey == "" {
		return ErrEmptyKey
	}
	if ev.Payload == nil && !tombstones {
		return ErrNullPayload
	}
	topic := ev.Topic
	if topic == "" {
		topic = defaultTopic
	}
	var extra map[string]any
	if len(ev.Headers) > 0 && string(ev.Headers) != "null" {
		var err error
		if extra, err = parseHeaders(ev.Headers); err != nil {
			return err
		}
	}
	commit := ev.CommitLSNText
	if commit == "" {
		commit = ev.CommitLSN.String()
	}
	created := ev.CreatedAtRFC3339
	if created == "" {
		created = RFC3339(ev.CreatedAt)
	}
	hs = append(hs[:0],
		kgo.RecordHeader{Key: HeaderIdempotencyKey, Value: view(ev.IdempotencyKey)},
		kgo.RecordHeader{Key: HeaderOutboxID, Value: view(ev.ID)},
		kgo.RecordHeader{Key: HeaderCommitLSN, Value: view(commit)},
		kgo.RecordHeader{Key: HeaderCreatedAt, Value: view(created)},
	)
	if ev.EventType != "" {
		hs = append(hs, kgo.RecordHeader{Key: HeaderEventType, Value: view(ev.EventType)})
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
			hs = append(hs, kgo.RecordHeader{Key: k, Value: view(extra[k].(string))})
		}
	}
	if ev.Replayed {
		hs = append(hs, kgo.RecordHeader{Key: HeaderReplayed, Value: []byte("true")})
	}
	if ev.Recovered {
		hs = append(hs, kgo.RecordHeader{Key: HeaderRecovered, Value: []byte("true")})
	}
	if ev.Resent {
		hs = append(hs, kgo.RecordHeader{Key: HeaderResent, Value: []byte("true")})
	}
	r.Topic = topic
	r.Key = view(ev.IdempotencyKey)
	r.Value = ev.Payload
	r.Headers = hs
	r.Timestamp = ev.CommitTime
	return nil
}

// view is a read-only []byte of s without a copy.
func view(s string) []byte {
	if s == "" {
		return []byte{}
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// RFC3339 converts PostgreSQL's ISO text rendering of a timestamptz to RFC
// 3339; a value it cannot parse is returned unchanged.
func RFC3339(pg string) string {
	return string(outbox.AppendRFC3339(nil, []byte(pg)))
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

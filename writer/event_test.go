package writer

import (
	"errors"
	"strings"
	"testing"
)

func TestEncodeRefuses(t *testing.T) {
	ok := Event{Key: "k", Payload: []byte(`{"a":1}`)}
	with := func(f func(*Event)) Event { e := ok; f(&e); return e }
	for _, tc := range []struct {
		name   string
		ev     Event
		field  string
		reason string
	}{
		{"empty key", with(func(e *Event) { e.Key = "" }), "idempotency_key", "empty"},
		{"key not UTF-8", with(func(e *Event) { e.Key = "k\xff" }), "idempotency_key", "UTF-8"},
		{"key with NUL", with(func(e *Event) { e.Key = "k\x00" }), "idempotency_key", "NUL"},
		{"empty payload", with(func(e *Event) { e.Payload = nil }), "payload", "empty"},
		{"payload not JSON", with(func(e *Event) { e.Payload = []byte(`{"a":}`) }), "payload", "at byte 6"},
		{"payload two values", with(func(e *Event) { e.Payload = []byte(`{} {}`) }), "payload", "not valid JSON"},
		{"payload not UTF-8", with(func(e *Event) { e.Payload = []byte("\"\xff\"") }), "payload", "UTF-8"},
		{"topic with NUL", with(func(e *Event) { e.Topic = "a\x00" }), "topic", "NUL"},
		{"partition key not UTF-8", with(func(e *Event) { e.PartitionKey = "\xc3" }), "partition_key", "UTF-8"},
		{"event type with NUL", with(func(e *Event) { e.EventType = "\x00" }), "event_type", "NUL"},
		{"header empty name", with(func(e *Event) { e.Headers = map[string]string{"": "v"} }), "headers", "empty name"},
		{"header reserved", with(func(e *Event) { e.Headers = map[string]string{"idempotency_key": "x"} }), "headers", "set by walpost"},
		{"header event_type", with(func(e *Event) { e.Headers = map[string]string{"event_type": "x"} }), "headers", "set by walpost"},
		{"header value not UTF-8", with(func(e *Event) { e.Headers = map[string]string{"h": "\xff"} }), "headers", "UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := encode(3, tc.ev)
			var ee *EventError
			if !errors.As(err, &ee) || !errors.Is(err, ErrInvalidEvent) {
				t.Fatalf("err = %v, want an *EventError matching ErrInvalidEvent", err)
			}
			if ee.Field != tc.field || ee.Index != 3 || ee.Key != tc.ev.Key || !strings.Contains(ee.Reason, tc.reason) {
				t.Fatalf("error %+v, want field %s, index 3, key %q, reason containing %q", ee, tc.field, tc.ev.Key, tc.reason)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("message %q does not name the field", err)
			}
		})
	}
}

func TestEncodeNeverQuotesPayload(t *testing.T) {
	_, err := encode(0, Event{Key: "k", Payload: []byte(`{"card":"4111111111111111",}`)})
	if err == nil || strings.Contains(err.Error(), "4111") {
		t.Fatalf("err = %v: want a refusal that does not quote the payload", err)
	}
}

func TestEncodeColumns(t *testing.T) {
	r, err := encode(0, Event{Key: "k", Payload: []byte(`[1]`)})
	if err != nil {
		t.Fatal(err)
	}
	if r[0] != "k" || r[1] != "[1]" || r[2] != nil || r[3] != nil || r[4] != nil || r[5] != nil {
		t.Fatalf("minimal event = %#v: want key, payload and four NULLs", r)
	}
	r, err = encode(0, Event{Key: "k", Payload: []byte(`{}`), Topic: "t", PartitionKey: "p", EventType: "e",
		Headers: map[string]string{"b": "2", "a": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	if r[2] != "t" || r[3] != "p" || r[4] != "e" || r[5] != `{"a":"1","b":"2"}` {
		t.Fatalf("full event = %#v", r)
	}
	if r, _ := encode(0, Event{Key: "k", Payload: []byte(`{}`), Headers: map[string]string{}}); r[5] != nil {
		t.Fatalf("empty headers = %#v, want NULL", r[5])
	}
}

func TestEncodeBatchRefusesKeyTwice(t *testing.T) {
	evs := []Event{{Key: "a", Payload: []byte(`1`)}, {Key: "b", Payload: []byte(`2`)}, {Key: "a", Payload: []byte(`3`)}}
	_, err := encodeBatch(nil, evs)
	var ee *EventError
	if !errors.As(err, &ee) || ee.Index != 2 || ee.Key != "a" || ee.Field != "idempotency_key" || !strings.Contains(ee.Reason, "event 0") {
		t.Fatalf("err = %v, want event 2 refused as the same key as event 0", err)
	}
	if errors.Is(err, ErrDuplicateKey) {
		t.Fatal("a key twice in one batch must not read as already written")
	}
	rows, err := encodeBatch(nil, evs[:2])
	if err != nil || len(rows) != 2 || rows[1][0] != "b" {
		t.Fatalf("distinct keys: rows %v, err %v", rows, err)
	}
}

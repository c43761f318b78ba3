package poison_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/poison"
	"github.com/walpost/walpost/sink/kafka"
)

func strPtr(s string) *string { return &s }

type header struct{ k, v string }

func headersOf(r *kgo.Record) []header {
	out := make([]header, len(r.Headers))
	for i, h := range r.Headers {
		out[i] = header{h.Key, string(h.Value)}
	}
	return out
}

// TestRecord: the replayed record of a poison row has the row's topic, the
// original key and value, the contract headers in order (idempotency_key,
// outbox_id, commit_lsn, created_at in RFC 3339, event_type, the row's own
// headers sorted by key), then replayed_from_poison=true.
func TestRecord(t *testing.T) {
	created := time.Date(2026, 11, 29, 23, 50, 51, 123456000, time.FixedZone("CET", 3600))
	tests := []struct {
		name        string
		row         poison.Row
		wantHeaders []header
		wantPK      string
		wantHasPK   bool
	}{
		{
			name: "every column set",
			row: poison.Row{
				IdempotencyKey: "order-42-created",
				OutboxID:       "5f0c6c8e-2d3b-4c1a-9a57-0d5e1c8b7a11",
				Topic:          "orders.v1",
				PartitionKey:   strPtr("customer-7"),
				EventType:      strPtr("OrderCreated"),
				Payload:        `{"id": 42, "total": "19.99"}`,
				Headers:        strPtr(`{"trace": "abc", "tenant": "acme"}`),
				CreatedAt:      created,
				Attempts:       5,
				LastError:      "INVALID_RECORD: This record has failed the validation on broker and hence will be rejected.",
				ErrorClass:     "INVALID_RECORD",
				CommitLSN:      "16/B374D848",
				PoisonedAt:     created.Add(time.Minute),
			},
			wantHeaders: []header{
				{"idempotency_key", "order-42-created"},
				{"outbox_id", "5f0c6c8e-2d3b-4c1a-9a57-0d5e1c8b7a11"},
				{"commit_lsn", "16/B374D848"},
				{"created_at", "2026-11-29T22:50:51.123456Z"},
				{"event_type", "OrderCreated"},
				{"tenant", "acme"},
				{"trace", "abc"},
				{"replayed_from_poison", "true"},
			},
			wantPK:    "customer-7",
			wantHasPK: true,
		},
		{
			name: "optional columns NULL",
			row: poison.Row{
				IdempotencyKey: "k-2",
				OutboxID:       "6a1d7d9f-3e4c-4d2b-8b68-1e6f2d9c8b22",
				Topic:          "walpost.events",
				Payload:        `[1, 2]`,
				CreatedAt:      created,
				CommitLSN:      "0/16B3748",
			},
			wantHeaders: []header{
				{"idempotency_key", "k-2"},
				{"outbox_id", "6a1d7d9f-3e4c-4d2b-8b68-1e6f2d9c8b22"},
				{"commit_lsn", "0/16B3748"},
				{"created_at", "2026-11-29T22:50:51.123456Z"},
				{"replayed_from_poison", "true"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := time.Now()
			rec, ev, err := record(tt.row)
			if err != nil {
				t.Fatalf("Record: %v", err)
			}
			if rec.Topic != tt.row.Topic || string(rec.Key) != tt.row.IdempotencyKey || string(rec.Value) != tt.row.Payload {
				t.Errorf("record topic %q key %q value %q; want %q %q %q", rec.Topic, rec.Key, rec.Value, tt.row.Topic, tt.row.IdempotencyKey, tt.row.Payload)
			}
			got := headersOf(rec)
			if len(got) != len(tt.wantHeaders) {
				t.Fatalf("headers\n got %v\nwant %v", got, tt.wantHeaders)
			}
			for i := range got {
				if got[i] != tt.wantHeaders[i] {
					t.Errorf("header %d = %v, want %v", i, got[i], tt.wantHeaders[i])
				}
			}
			if ev.PartitionKey != tt.wantPK || ev.HasPartition != tt.wantHasPK {
				t.Errorf("event partition key %q (set %v), want %q (set %v): the replay must land on the original partition",
					ev.PartitionKey, ev.HasPartition, tt.wantPK, tt.wantHasPK)
			}
			if rec.Timestamp.Before(before) || rec.Timestamp.After(time.Now()) {
				t.Errorf("record timestamp %s, want the replay time", rec.Timestamp)
			}
		})
	}
}

// TestRecordMatchesOriginal: an event quarantined and read back as a poison
// row (as Store.Put writes it and Store.List reads it) is replayed as the
// record the stream would have produced, plus replayed_from_poison.
func TestRecordMatchesOriginal(t *testing.T) {
	ev := &outbox.Event{
		ID:             "5f0c6c8e-2d3b-4c1a-9a57-0d5e1c8b7a11",
		IdempotencyKey: "order-42-created",
		Payload:        []byte(`{"id": 42}`),
		CreatedAt:      "2026-11-29 22:50:51.123456+00",
		Topic:          "",
		PartitionKey:   "customer-7",
		HasPartition:   true,
		EventType:      "OrderCreated",
		Headers:        []byte(`{"b": "2", "a": "1"}`),
		CommitLSN:      pglogrepl.LSN(0x16B374D848),
		CommitTime:     time.Date(2026, 11, 29, 22, 50, 52, 0, time.UTC),
	}
	const defaultTopic = "walpost.events"
	orig, err := kafka.BuildRecord(ev, defaultTopic)
	if err != nil {
		t.Fatal(err)
	}
	created, err := time.Parse("2006-01-02 15:04:05.999999999-07", ev.CreatedAt)
	if err != nil {
		t.Fatal(err)
	}
	row := poison.Row{
		IdempotencyKey: ev.IdempotencyKey, OutboxID: ev.ID, Topic: defaultTopic,
		PartitionKey: &ev.PartitionKey, EventType: &ev.EventType, Payload: string(ev.Payload),
		Headers: strPtr(string(ev.Headers)), CreatedAt: created, CommitLSN: ev.CommitLSN.String(),
	}
	rec, back, err := record(row)
	if err != nil {
		t.Fatal(err)
	}
	want := append(headersOf(orig), header{kafka.HeaderReplayed, "true"})
	got := headersOf(rec)
	if rec.Topic != orig.Topic || string(rec.Key) != string(orig.Key) || string(rec.Value) != string(orig.Value) || len(got) != len(want) {
		t.Fatalf("replayed %s/%s=%s %v\nwant     %s/%s=%s %v", rec.Topic, rec.Key, rec.Value, got, orig.Topic, orig.Key, orig.Value, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("header %d = %v, want %v", i, got[i], want[i])
		}
	}
	if back.PartitionKey != ev.PartitionKey || !back.HasPartition {
		t.Errorf("partition key %q (set %v), want %q", back.PartitionKey, back.HasPartition, ev.PartitionKey)
	}
}

// A row whose headers are not a JSON object of strings cannot be replayed:
// Record says why, and classifies as INVALID_HEADERS.
func TestRecordInvalidHeaders(t *testing.T) {
	row := poison.Row{IdempotencyKey: "k", Topic: "t", Payload: "{}", Headers: strPtr(`{"a": 1}`), CommitLSN: "0/1"}
	rec, ev, err := record(row)
	if !errors.Is(err, kafka.ErrInvalidHeaders) || rec != nil {
		t.Fatalf("Record = %v, %v; want no record and ErrInvalidHeaders", rec, err)
	}
	if ev == nil || ev.IdempotencyKey != "k" {
		t.Errorf("event %+v, want the row's event for the error report", ev)
	}
	if _, class := kafka.Classify(err); class != "INVALID_HEADERS" {
		t.Errorf("class %q, want INVALID_HEADERS", class)
	}
}

// record is the Kafka record a replay of r sends: the event of the row,
// built by the Kafka sink.
func record(r poison.Row) (*kgo.Record, *outbox.Event, error) {
	ev := poison.Event(r)
	rec, err := kafka.BuildRecord(ev, r.Topic)
	return rec, ev, err
}

// TestEventNullPayload: a poison row whose payload is NULL (List reads
// Payload "null" and PayloadNull) gives an event with a nil payload, so
// the replay treats it as the stream did (NULL_PAYLOAD, or a tombstone
// with mapping.tombstone_on_empty_payload), never as the JSON null; a
// JSON null payload stays the 4 bytes.
func TestEventNullPayload(t *testing.T) {
	row := poison.Row{IdempotencyKey: "k", Topic: "t", Payload: "null", PayloadNull: true, CommitLSN: "0/1"}
	if ev := poison.Event(row); ev.Payload != nil {
		t.Errorf("NULL payload: event payload %q, want nil", ev.Payload)
	}
	if _, _, err := record(row); !errors.Is(err, kafka.ErrNullPayload) {
		t.Errorf("NULL payload: %v, want ErrNullPayload", err)
	}
	row.PayloadNull = false
	if ev := poison.Event(row); string(ev.Payload) != "null" {
		t.Errorf("JSON null payload: event payload %q, want null", ev.Payload)
	}
}

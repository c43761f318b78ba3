package kafka_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/sink"
	"github.com/walpost/walpost/sink/kafka"
)

// binaryPayload is a value no text encoding survives: every byte value,
// NUL and invalid UTF-8 included.
func binaryPayload() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

// hexText is PostgreSQL's text of a bytea value (bytea_output = hex).
func hexText(b []byte) []byte {
	const digits = "0123456789abcdef"
	out := []byte(`\x`)
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return out
}

// TestBinaryPayloadRecord: once the sink knows the payload column is
// bytea (SetColumnTypes, as each session start gives it), a payload
// produced as PostgreSQL's hex text reaches Kafka as the bytes it stands
// for, in the walpost layout and in the Debezium layout's string format
// (Debezium's BinaryDataConverter); before, and for a text column, the
// text goes as it is. A text that is not hex is a record-level
// BINARY_TEXT failure (quarantined), never sent as text. Mutation:
// dropping binaryValue from Sink.build sends the \x text.
func TestBinaryPayloadRecord(t *testing.T) {
	want := binaryPayload()
	for _, profile := range []string{"walpost", "debezium"} {
		t.Run(profile, func(t *testing.T) {
			c := newCluster(t)
			kcfg := kafka.Config{}
			if profile == "debezium" {
				kcfg.Layout = debeziumLayout(kafka.FormatString, kafka.FormatString)
			}
			k := newKafka(t, c, kcfg)
			ev := func(key string, payload []byte) *outbox.Event {
				return &outbox.Event{ID: "5f0c6c8e-2d3b-4c1a-9a57-0d5e1c8b7a11", IdempotencyKey: key, Payload: payload,
					PartitionKey: key, HasPartition: true, CommitTime: time.Now()} // no topic: the default topic
			}
			if err := produceWait(t, k, ev("before", hexText(want))); err != nil {
				t.Fatal(err)
			}
			k.SetColumnTypes(sink.ColumnType{}, sink.ColumnType{Binary: true})
			if err := produceWait(t, k, ev("bytes", hexText(want))); err != nil {
				t.Fatal(err)
			}
			err := produceWait(t, k, ev("escape", []byte(`\000\001`)))
			if kind, class := sink.KindOf(err); !errors.Is(err, kafka.ErrBinaryText) || kind != sink.Record || class != "BINARY_TEXT" {
				t.Errorf("escape-format text: %v (%s/%s), want ErrBinaryText, record/BINARY_TEXT", err, kind, class)
			}
			got := map[string][]byte{}
			for _, rs := range consumeAll(t, c, testTopic, 2) {
				for _, r := range rs {
					got[string(r.Key)] = r.Value
				}
			}
			if v := got["before"]; !bytes.Equal(v, hexText(want)) {
				t.Errorf("payload before SetColumnTypes: %q, want the text as it is", v)
			}
			if v := got["bytes"]; !bytes.Equal(v, want) {
				t.Errorf("bytea payload: value %q, want the 256 bytes", v)
			}
		})
	}
}

// TestBinaryPayloadJSON: in the json formats a bytea payload is Connect
// bytes, base64 in the JSON, as Debezium's JsonConverter writes it.
func TestBinaryPayloadJSON(t *testing.T) {
	l := debeziumLayout(kafka.FormatString, kafka.FormatJSONSchema)
	vt, err := kafka.ConnectType("bytea", true)
	if err != nil {
		t.Fatal(err)
	}
	l.ValueType = vt
	e := debeziumEvent()
	e.Payload = hexText([]byte("\x00\xffhi"))
	r, err := kafka.BuildRecordWith(&e, testTopic, l)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"schema":{"type":"bytes","optional":false},"payload":"AP9oaQ=="}`; string(r.Value) != want {
		t.Errorf("value %s, want %s", r.Value, want)
	}
}

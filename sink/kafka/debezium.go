package kafka

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/sink"
)

// The Debezium layout (config mapping.profile = debezium; README,
// Debezium-compatible mode): the record Debezium's Outbox Event Router
// emits for the same row under its defaults, in the bytes of the Kafka
// Connect converter named by mapping.key_format and mapping.value_format.

// Formats of Layout.KeyFormat and ValueFormat: the bytes Kafka Connect's
// converter writes.
const (
	FormatString     = "string"      // StringConverter: the column's text as it is
	FormatJSON       = "json"        // JsonConverter, schemas.enable=false: a JSON string
	FormatJSONSchema = "json_schema" // JsonConverter, schemas.enable=true: {"schema":…,"payload":…}
)

// RoutedByValue is the placeholder of a topic template (NewLayout) that
// the row's topic column replaces (Debezium route.topic.replacement).
const RoutedByValue = "${routedByValue}"

// HeaderID is the Debezium layout's header of the event id
// (table.field.event.id).
const HeaderID = "id"

// ErrNullKey: the row's key column (mapping.key_column) is NULL. Debezium
// would send a record without a key, partitioned round-robin, outside the
// order of its aggregate; walpost quarantines it.
var ErrNullKey = errors.New("outbox row has a NULL key column (mapping.key_column)")

// ErrEmptyID: the row's id column (mapping.id_column) is NULL or empty:
// consumers deduplicate on the id header.
var ErrEmptyID = errors.New("outbox row has no id (mapping.id_column)")

// ErrInvalidTopic: the topic the template gives for the row's topic
// column is not a Kafka topic name.
var ErrInvalidTopic = errors.New("the row's topic column gives an invalid Kafka topic name")

// Layout is the record format of the mapping; nil (Config.Layout) is
// walpost's own record.
type Layout struct {
	// Debezium selects the Debezium record: key = the key column, value =
	// the payload, header id, the header columns; no walpost headers.
	Debezium bool
	// KeyFormat and ValueFormat: FormatString, FormatJSON or
	// FormatJSONSchema.
	KeyFormat, ValueFormat string
	// HeaderNames name the event's HeaderValues.
	HeaderNames []string
	// KeyType and ValueType describe the key and payload columns for the
	// json formats (ConnectType); Sink.SetColumnTypes replaces them once
	// the table was read. The zero value is a string column that may be
	// NULL.
	KeyType, ValueType ColumnType
	// Tombstones is mapping.tombstone_on_empty_payload: a NULL payload
	// (Debezium: or a blank one) is sent as a tombstone.
	Tombstones bool
	// Tracing is mapping.tracing_column set: the event's Placed.Trace
	// becomes the headers traceparent and tracestate, ahead of the others
	// (ParseTraceContext).
	Tracing bool
	// OnInvalidTrace is told of an event whose tracing column holds a
	// malformed trace context (err matches ErrInvalidTraceContext); the
	// record goes without it (a malformed tracestate only: without the
	// tracestate). It is called on the producing goroutine and must not
	// block; nil ignores them.
	OnInvalidTrace func(ev *outbox.Event, err error)

	topics *topicTemplate
}

// NewLayout is l routing each record by template: the row's topic column
// replaces RoutedByValue in it (Debezium route.topic.replacement). "" or
// RoutedByValue alone keeps the column's value as the topic.
func NewLayout(l Layout, template string) *Layout {
	l.topics = nil
	if template != "" && template != RoutedByValue {
		l.topics = &topicTemplate{tmpl: template, cache: map[string]string{}}
	}
	return &l
}

// BuildRecordWith is BuildRecord in layout l (nil: walpost's record).
func BuildRecordWith(ev *outbox.Event, defaultTopic string, l *Layout) (*kgo.Record, error) {
	r := new(kgo.Record)
	var err error
	if l == nil {
		err = buildInto(r, nil, ev, defaultTopic, false)
	} else {
		err = l.build(r, nil, ev, defaultTopic, &[2]ColumnType{l.KeyType, l.ValueType})
	}
	if err != nil {
		return nil, err
	}
	return r, nil
}

// build fills r for ev: the Debezium record, or walpost's with the
// topic template applied.
func (l *Layout) build(r *kgo.Record, hs []kgo.RecordHeader, ev *outbox.Event, defaultTopic string, types *[2]ColumnType) error {
	if l.Debezium {
		return l.buildDebezium(r, hs, ev, defaultTopic, types[0], types[1])
	}
	if err := buildInto(r, hs, ev, defaultTopic, l.Tombstones); err != nil {
		return err
	}
	r.Topic = l.topic(ev, defaultTopic)
	return binaryValue(r, types)
}

// topicTemplate is mapping.topic_template with the topics it gave, so a
// routed event costs a lookup, not a new string.
type topicTemplate struct {
	tmpl  string
	mu    sync.Mutex
	cache map[string]string
}

const maxCachedTopics = 4096

func (t *topicTemplate) of(v string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, ok := t.cache[v]; ok {
		return s
	}
	s := strings.ReplaceAll(t.tmpl, RoutedByValue, v)
	if len(t.cache) < maxCachedTopics {
		t.cache[strings.Clone(v)] = s
	}
	return s
}

// topic is the record topic of ev: the template applied to the row's
// topic column, or defaultTopic when it is NULL.
func (l *Layout) topic(ev *outbox.Event, defaultTopic string) string {
	if ev.Topic == "" {
		return defaultTopic
	}
	if l == nil || l.topics == nil {
		return ev.Topic
	}
	return l.topics.of(ev.Topic)
}

// ColumnType is what the json formats need of a column
// (sink.ColumnType): its Kafka Connect schema as Debezium's PostgreSQL
// connector derives it (ConnectType), as JSON, and whether its values are
// JSON numbers.
type ColumnType = sink.ColumnType

// ConnectType is the Connect schema Debezium's PostgreSQL connector gives
// a column of PostgreSQL type pgType (pg_type.typname) with its
// default settings; notNull makes it not optional. Types the json formats
// do not reproduce are an error.
func ConnectType(pgType string, notNull bool) (ColumnType, error) {
	opt := strconv.FormatBool(!notNull)
	var typ, name string
	number, binary := false, false
	switch pgType {
	case "text", "varchar", "bpchar", "name":
		typ = "string"
	case "uuid":
		typ, name = "string", "io.debezium.data.Uuid"
	case "json", "jsonb":
		typ, name = "string", "io.debezium.data.Json"
	case "int2":
		typ, number = "int16", true
	case "int4":
		typ, number = "int32", true
	case "int8":
		typ, number = "int64", true
	case "bytea":
		// binary.handling.mode = bytes (the default): base64 in JSON.
		typ, binary = "bytes", true
	default:
		return ColumnType{}, fmt.Errorf("type %s: the json formats reproduce text, varchar, char, uuid, json, jsonb, smallint, integer, bigint and bytea columns", pgType)
	}
	s := `{"type":"` + typ + `","optional":` + opt
	if name != "" {
		s += `,"name":"` + name + `","version":1`
	}
	return ColumnType{Schema: s + "}", Number: number, Binary: binary}, nil
}

// defaultColumnType is a nullable text column's.
var defaultColumnType = ColumnType{Schema: `{"type":"string","optional":true}`}

// orDefault is c, or defaultColumnType for the zero value.
func orDefault(c ColumnType) ColumnType {
	if c.Schema == "" {
		return defaultColumnType
	}
	return c
}

// encode writes text in format for a column of type c.
func encode(format string, c ColumnType, text []byte) []byte {
	switch format {
	case FormatJSON:
		// Sized as json_schema's below: the quotes and a few escapes.
		return appendJSON(make([]byte, 0, len(text)+32), orDefault(c), text)
	case FormatJSONSchema:
		c = orDefault(c)
		b := make([]byte, 0, len(text)+len(c.Schema)+32)
		b = append(b, `{"schema":`...)
		b = append(b, c.Schema...)
		b = append(b, `,"payload":`...)
		b = appendJSON(b, c, text)
		return append(b, '}')
	}
	return text
}

// appendJSON appends the JSON value of text (a binary column's text
// already decoded to its bytes: JsonConverter writes them in base64).
func appendJSON(dst []byte, c ColumnType, text []byte) []byte {
	switch {
	case c.Number:
		return append(dst, text...)
	case c.Binary:
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, text)
		return append(dst, '"')
	}
	return AppendJacksonString(dst, text)
}

const hexUpper = "0123456789ABCDEF"

// AppendJacksonString appends s as a JSON string the way Jackson (Kafka
// Connect's JsonConverter) writes it: `"` and `\` escaped, \b \t \n \f \r
// short, other control characters as \u00XX with upper-case hex, and
// the characters beyond U+FFFF as their UTF-16 surrogates, each \uXXXX
// with upper-case hex (Jackson's default, COMBINE_UNICODE_SURROGATES_IN_UTF8
// off: 😀 is \uD83D\uDE00), everything else (<, >, &, U+2028, U+2029,
// the rest of non-ASCII) as it is. Go's
// encoding/json escapes <, >, & and U+2028/2029 and cannot be told not
// to for the last two, hence an encoder of its own. Invalid UTF-8 (which
// PostgreSQL's text never is) becomes U+FFFD, as a Java String would.
func AppendJacksonString(dst, s []byte) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, n := utf8.DecodeRune(s[i:])
			switch {
			case r == utf8.RuneError && n == 1:
				dst = append(dst, s[start:i]...)
				dst = append(dst, "\uFFFD"...)
			case r > 0xFFFF:
				dst = append(dst, s[start:i]...)
				hi, lo := utf16.EncodeRune(r)
				dst = appendUEscape(appendUEscape(dst, hi), lo)
			default:
				i += n
				continue
			}
			i += n
			start = i
			continue
		}
		if c >= 0x20 && c != '"' && c != '\\' {
			i++
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\r':
			dst = append(dst, '\\', 'r')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexUpper[c>>4], hexUpper[c&0xF])
		}
		i++
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendUEscape appends the escape \uXXXX of the UTF-16 code unit u.
func appendUEscape(dst []byte, u rune) []byte {
	return append(dst, '\\', 'u', hexUpper[u>>12&0xF], hexUpper[u>>8&0xF], hexUpper[u>>4&0xF], hexUpper[u&0xF])
}

// encodeNull is what the converter writes for a null value of a column
// of type c (Connect's converters, the value's schema that column's):
// nothing (a tombstone) for StringConverter, the JSON null without
// schemas, the envelope with a null payload with them.
func encodeNull(format string, c ColumnType) []byte {
	switch format {
	case FormatJSON:
		return []byte("null")
	case FormatJSONSchema:
		return []byte(`{"schema":` + orDefault(c).Schema + `,"payload":null}`)
	}
	return nil
}

// blank reports whether payload is NULL or, as Debezium's router tests it
// for route.tombstone.on.empty.payload (payload.toString().trim()
// .isEmpty()), made only of characters up to U+0020, which Java's
// String.trim removes.
func blank(payload []byte) bool {
	for _, c := range payload {
		if c > ' ' {
			return false
		}
	}
	return true
}

// appendTrace appends the headers of ev's trace context to hs:
// traceparent and tracestate, first, as Debezium's router has its tracing
// write them before it adds the id header. A malformed context is left
// out and reported to OnInvalidTrace.
func (l *Layout) appendTrace(hs []kgo.RecordHeader, ev *outbox.Event) []kgo.RecordHeader {
	tc, err := ParseTraceContext(ev.Placed.Trace)
	if err != nil && l.OnInvalidTrace != nil {
		l.OnInvalidTrace(ev, err)
	}
	if tc.Traceparent != "" {
		hs = append(hs, kgo.RecordHeader{Key: HeaderTraceparent, Value: view(tc.Traceparent)})
	}
	if tc.Tracestate != "" {
		hs = append(hs, kgo.RecordHeader{Key: HeaderTracestate, Value: view(tc.Tracestate)})
	}
	return hs
}

// buildDebezium fills r with the Debezium record of ev: topic from the
// template, key = the key column (Event.PartitionKey), value = the
// payload, headers traceparent and tracestate of the tracing column
// (appendTrace), id and the header columns (SimpleHeaderConverter:
// the text; NULL a null header), replayed_from_poison on a replay;
// timestamp = the timestamp column, else the commit time. A NULL payload
// is the router's record of it: with Tombstones (and then also for a
// blank payload) a tombstone, the value nil in every format (the router
// drops the value's schema, and the converters write nothing for a null
// without a schema); without, the null value through the value format
// (encodeNull), as the router sends it under its defaults.
func (l *Layout) buildDebezium(r *kgo.Record, hs []kgo.RecordHeader, ev *outbox.Event, defaultTopic string, key, value ColumnType) error {
	if ev.IdempotencyKey == "" {
		return ErrEmptyID
	}
	if !ev.HasPartition {
		return ErrNullKey
	}
	topic := l.topic(ev, defaultTopic)
	if !validTopic(topic) {
		return fmt.Errorf("%w: %q (from the topic column's %q)", ErrInvalidTopic, topic, ev.Topic)
	}
	hs = hs[:0]
	if l.Tracing && ev.Placed != nil && ev.Placed.Trace != nil {
		hs = l.appendTrace(hs, ev)
	}
	hs = append(hs, kgo.RecordHeader{Key: HeaderID, Value: view(ev.ID)})
	if ev.Placed != nil {
		for i, v := range ev.Placed.HeaderValues {
			if i < len(l.HeaderNames) {
				hs = append(hs, kgo.RecordHeader{Key: l.HeaderNames[i], Value: v})
			}
		}
	}
	if ev.Replayed {
		hs = append(hs, kgo.RecordHeader{Key: HeaderReplayed, Value: []byte("true")})
	}
	r.Topic = topic
	r.Key = encode(l.KeyFormat, key, view(ev.PartitionKey))
	switch {
	case l.Tombstones && blank(ev.Payload):
		r.Value = nil
	case ev.Payload == nil:
		r.Value = encodeNull(l.ValueFormat, value)
	case value.Binary:
		b, err := decodeBytea(ev.Payload)
		if err != nil {
			return err
		}
		r.Value = encode(l.ValueFormat, value, b)
	default:
		r.Value = encode(l.ValueFormat, value, ev.Payload)
	}
	r.Headers = hs
	r.Timestamp = ev.CommitTime
	if ev.Placed != nil && !ev.Placed.Timestamp.IsZero() {
		r.Timestamp = ev.Placed.Timestamp
	}
	return nil
}

func validTopic(t string) bool {
	if t == "" || len(t) > 249 || t == "." || t == ".." {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Encoding says how the record carries a column of PostgreSQL type
// pgType and sink type c in format (FormatString, FormatJSON,
// FormatJSONSchema), for walpost check.
func Encoding(pgType, format string, c ColumnType) string {
	switch {
	case format == FormatString && c.Binary:
		return "its raw bytes (" + pgType + ", not its \\x text)"
	case format == FormatString:
		return "its PostgreSQL text (" + pgType + ")"
	case c.Binary:
		return format + ", its bytes in base64 (" + pgType + ")"
	case c.Number:
		return format + ", a JSON number (" + pgType + ")"
	}
	return format + ", a JSON string (" + pgType + ")"
}

package kafka

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bufbuild/protocompile"
	"github.com/google/jsonschema-go/jsonschema"
	"github.com/linkedin/goavro/v2"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"
)

// ErrSchema: the row's payload does not fit the schema that frames its
// record (schema_registry.value_format): it is not the JSON its format
// reads, or it breaks the schema. A record-level failure (class "schema"):
// quarantined, never sent.
var ErrSchema = errors.New("payload does not match its registry schema")

// ErrSchemaRegistry: the registry did not answer (network, timeout, a 5xx
// reply). Transient: the session restarts and the record is framed again.
var ErrSchemaRegistry = errors.New("schema registry unreachable")

// ErrSchemaSubject: the registry has no usable schema for the record's
// subject (no such subject, a schema of another type, or one walpost
// cannot compile). A destination failure: forwarding stops with this
// error until the subject is registered.
var ErrSchemaSubject = errors.New("no usable schema in the registry")

// confluent writes the Confluent wire format's header.
var confluent sr.ConfluentHeader

// Error classes of the schema registry framing: a payload (or key) its
// schema refuses (record), a subject without a usable schema or refused
// credentials (destination), a registry that does not answer (transient).
const (
	ClassSchema         = "schema"
	ClassSchemaSubject  = "SCHEMA_SUBJECT"
	ClassSchemaRegistry = "SCHEMA_REGISTRY"
)

// Schema frames record values in the Confluent wire format with the latest
// schema of each record's subject, looked up in a Confluent-compatible
// registry through franz-go's sr client and kept for RefreshInterval. It
// is safe for concurrent use.
type Schema struct {
	cl       *sr.Client
	format   string
	strategy string
	timeout  time.Duration
	refresh  time.Duration

	idHeader string
	key      bool // frames keys: subject <topic>-key, the key text as a JSON string

	mu       sync.Mutex
	subjects map[string]*subjectSchema // by subject, refreshed
	ids      map[int]*subjectSchema    // by the id a record names; ids never change
}

// subjectSchema is a subject's schema as last looked up.
type subjectSchema struct {
	id      int
	version int
	at      time.Time
	encode  func(payload []byte) ([]byte, error) // the payload's bytes after the header
	index   []int                                // the Protobuf message index
}

// Registry formats (SchemaOptions.Format).
const (
	SchemaNone       = "none"
	SchemaAvro       = "avro"
	SchemaJSONSchema = "json_schema"
	SchemaProtobuf   = "protobuf"
)

// Subject strategies (SchemaOptions.SubjectStrategy): the subject whose
// latest schema frames a record.
const (
	SubjectTopicName       = "topic_name"        // <topic>-value
	SubjectRecordName      = "record_name"       // the row's event_type
	SubjectTopicRecordName = "topic_record_name" // <topic>-<event_type>
)

// SchemaOptions configure a Schema.
type SchemaOptions struct {
	// Format is the registry format: SchemaAvro, SchemaJSONSchema or
	// SchemaProtobuf; "" or SchemaNone frames nothing (NewSchema is nil).
	Format string
	// Key frames record keys (the key text as a string value, subject
	// <topic>-key, no SchemaIDHeader) instead of values.
	Key bool
	// URL is the registry's base URL.
	URL string
	// Username and Password, when Username is set, are basic auth.
	Username, Password string
	// TLS, when not nil, is the TLS configuration of the registry's
	// transport; nil uses Go's default.
	TLS *tls.Config
	// SubjectStrategy: SubjectTopicName (also ""), SubjectRecordName or
	// SubjectTopicRecordName.
	SubjectStrategy string
	// SchemaIDHeader names the record header whose schema id picks the
	// schema; "" always uses the subject's latest.
	SchemaIDHeader string
	// Timeout bounds each registry request; RefreshInterval is how long a
	// subject's latest schema is kept.
	Timeout, RefreshInterval time.Duration
}

// NewSchema is the framing of o; nil when o.Format is "" or SchemaNone.
// Its only error is the registry client's refusal of o (the URL).
func NewSchema(o SchemaOptions) (*Schema, error) {
	if o.Format == "" || o.Format == SchemaNone {
		return nil, nil
	}
	opts := []sr.ClientOpt{sr.URLs(o.URL), sr.UserAgent("walpost")}
	if o.Username != "" {
		opts = append(opts, sr.BasicAuth(o.Username, o.Password))
	}
	if o.TLS != nil {
		opts = append(opts, sr.HTTPClient(&http.Client{Timeout: o.Timeout, Transport: &http.Transport{TLSClientConfig: o.TLS, Proxy: http.ProxyFromEnvironment}}))
	} else {
		opts = append(opts, sr.HTTPClient(&http.Client{Timeout: o.Timeout}))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	s := &Schema{cl: cl, format: o.Format, strategy: o.SubjectStrategy, timeout: o.Timeout, refresh: o.RefreshInterval,
		idHeader: o.SchemaIDHeader, key: o.Key, subjects: map[string]*subjectSchema{}, ids: map[int]*subjectSchema{}}
	if o.Key {
		s.strategy, s.idHeader = SubjectTopicName, ""
	}
	return s, nil
}

// Subject is the subject of a record on topic whose row has eventType,
// by the subject strategy; an empty event type under the record
// strategies is ErrSchema.
func (s *Schema) Subject(topic, eventType string) (string, error) {
	switch s.strategy {
	case SubjectRecordName, SubjectTopicRecordName:
		if eventType == "" {
			return "", fmt.Errorf("%w: subject strategy %s names the subject after the row's event_type, which is NULL", ErrSchema, s.strategy)
		}
		if s.strategy == SubjectRecordName {
			return eventType, nil
		}
		return topic + "-" + eventType, nil
	}
	if s.key {
		return topic + "-key", nil
	}
	return topic + "-value", nil
}

// Frame returns payload framed for a record on topic: the Confluent header
// (magic byte, schema id, for Protobuf the message index) and the payload
// in the schema's encoding. The schema is the one whose id the record's
// header SchemaIDHeader names, or without it the latest of the record's
// subject. A payload that does not fit, or a header that names no schema,
// is ErrSchema; a registry that does not answer ErrSchemaRegistry; a
// subject without a usable schema ErrSchemaSubject.
func (s *Schema) Frame(topic, eventType string, headers []kgo.RecordHeader, payload []byte) ([]byte, error) {
	ss, where, err := s.schemaOf(topic, eventType, headers)
	if err != nil {
		return nil, err
	}
	if s.key {
		payload, _ = json.Marshal(string(payload)) // the key text as a string value
	}
	body, err := ss.encode(payload)
	if err != nil {
		return nil, fmt.Errorf("%w (%s, schema id %d): %v", ErrSchema, where, ss.id, err)
	}
	out, _ := confluent.AppendEncode(make([]byte, 0, 6+len(ss.index)+len(body)), ss.id, ss.index)
	return append(out, body...), nil
}

// schemaOf is the schema that frames a record, and where it came from
// (for errors).
func (s *Schema) schemaOf(topic, eventType string, headers []kgo.RecordHeader) (*subjectSchema, string, error) {
	id, ok, err := s.headerID(headers)
	if err != nil {
		return nil, "", err
	}
	if ok {
		ss, err := s.byID(id)
		return ss, "header " + s.idHeader, err
	}
	subject, err := s.Subject(topic, eventType)
	if err != nil {
		return nil, "", err
	}
	ss, err := s.lookup(subject)
	return ss, "subject " + subject, err
}

// headerID reads the schema id of the record's SchemaIDHeader: ok is false
// without the setting or the header; a value that is not a positive
// integer is ErrSchema.
func (s *Schema) headerID(headers []kgo.RecordHeader) (id int, ok bool, err error) {
	if s.idHeader == "" {
		return 0, false, nil
	}
	for _, h := range headers {
		if h.Key != s.idHeader || h.Value == nil {
			continue
		}
		id, err := strconv.Atoi(strings.TrimSpace(string(h.Value)))
		if err != nil || id <= 0 {
			return 0, false, fmt.Errorf("%w: header %s = %q is not a schema id (a positive integer)", ErrSchema, s.idHeader, h.Value)
		}
		return id, true, nil
	}
	return 0, false, nil
}

// byID returns the schema of id, looked up once: a schema id names the
// same schema for ever. An id the registry does not know is the row's
// error (ErrSchema).
func (s *Schema) byID(id int) (*subjectSchema, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.ids[id]; ss != nil {
		return ss, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	got, err := s.cl.SchemaByID(ctx, id)
	if err != nil {
		if registryRefused(err) {
			return nil, fmt.Errorf("%w: schema id %d: the registry refused walpost (%v): check schema_registry.username and schema_registry.password (or password_file)", ErrSchemaSubject, id, err)
		}
		var re *sr.ResponseError
		if errors.As(err, &re) && re.StatusCode >= 400 && re.StatusCode < 500 {
			return nil, fmt.Errorf("%w: header %s names schema id %d: %v", ErrSchema, s.idHeader, id, err)
		}
		return nil, fmt.Errorf("%w: schema id %d: %v", ErrSchemaRegistry, id, err)
	}
	ss, err := s.compile(got, fmt.Sprintf("schema id %d", id))
	if err != nil {
		// The row names a schema walpost cannot use: the row's error.
		return nil, fmt.Errorf("%w: header %s: %w", ErrSchema, s.idHeader, err)
	}
	ss.id = id
	s.ids[id] = ss
	return ss, nil
}

// Check is walpost check's look at the registry: under the topic strategy
// the latest schema of topic's subject must be usable (the default topic's:
// other topics are named by rows); under the record strategies, whose
// subjects rows name, the registry must answer.
func (s *Schema) Check(topic string) (string, error) {
	if s.strategy == SubjectTopicName {
		subject, _ := s.Subject(topic, "")
		ss, err := s.fetch(subject)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("subject %s: %s schema id %d (version %d)", subject, s.format, ss.id, ss.version), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	subjects, err := s.cl.Subjects(ctx)
	if err != nil {
		if registryRefused(err) {
			return "", fmt.Errorf("%w: the registry refused walpost (%v): check schema_registry.username and schema_registry.password (or password_file)", ErrSchemaSubject, err)
		}
		return "", fmt.Errorf("%w: %v", ErrSchemaRegistry, err)
	}
	return fmt.Sprintf("the registry answers (%d subjects); %s subjects are named by each row's event_type", len(subjects), s.strategy), nil
}

// lookup returns subject's schema, looked up again when older than the
// refresh interval (a failed refresh keeps the one in use).
func (s *Schema) lookup(subject string) (*subjectSchema, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.subjects[subject]
	if cur != nil && time.Since(cur.at) < s.refresh {
		return cur, nil
	}
	next, err := s.fetch(subject)
	if err != nil {
		if cur != nil && errors.Is(err, ErrSchemaRegistry) {
			cur.at = time.Now() // try again after another interval
			return cur, nil
		}
		return nil, err
	}
	s.subjects[subject] = next
	return next, nil
}

// fetch reads subject's latest schema and compiles its encoder.
func (s *Schema) fetch(subject string) (*subjectSchema, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	got, err := s.cl.SchemaByVersion(ctx, subject, -1)
	if err != nil {
		if registryRefused(err) {
			return nil, fmt.Errorf("%w: subject %s: the registry refused walpost (%v): check schema_registry.username and schema_registry.password (or password_file)", ErrSchemaSubject, subject, err)
		}
		var re *sr.ResponseError
		if errors.As(err, &re) && re.StatusCode >= 400 && re.StatusCode < 500 {
			return nil, fmt.Errorf("%w: subject %s: %v: register the subject's schema, or fix schema_registry.subject_strategy", ErrSchemaSubject, subject, err)
		}
		return nil, fmt.Errorf("%w: subject %s: %v", ErrSchemaRegistry, subject, err)
	}
	ss, err := s.compile(got.Schema, "subject "+subject)
	if errors.Is(err, errUnusable) {
		return nil, fmt.Errorf("%w: %w", ErrSchemaSubject, err)
	}
	if err != nil {
		return nil, err
	}
	ss.id, ss.version, ss.at = got.ID, got.Version, time.Now()
	return ss, nil
}

// registryRefused says whether the registry refused walpost's credentials (401,
// 403): a destination failure to fix, never the row's.
func registryRefused(err error) bool {
	var re *sr.ResponseError
	return errors.As(err, &re) && (re.StatusCode == http.StatusUnauthorized || re.StatusCode == http.StatusForbidden)
}

// errUnusable: a schema walpost cannot frame with (another type, references,
// text that does not compile).
var errUnusable = errors.New("unusable schema")

// compile builds the encoder of a schema of the configured format.
func (s *Schema) compile(got sr.Schema, what string) (*subjectSchema, error) {
	want := map[string]sr.SchemaType{SchemaAvro: sr.TypeAvro, SchemaJSONSchema: sr.TypeJSON, SchemaProtobuf: sr.TypeProtobuf}[s.format]
	if got.Type != want {
		return nil, fmt.Errorf("%w: %s is a %s schema, schema_registry.value_format is %s", errUnusable, what, got.Type, s.format)
	}
	if len(got.References) > 0 {
		return nil, fmt.Errorf("%w: %s references other schemas, which walpost does not resolve", errUnusable, what)
	}
	ss := &subjectSchema{}
	var err error
	switch s.format {
	case SchemaAvro:
		ss.encode, err = avroEncoder(got.Schema)
	case SchemaJSONSchema:
		ss.encode, err = jsonSchemaEncoder(got.Schema)
	case SchemaProtobuf:
		ss.encode, err = protobufEncoder(got.Schema)
		ss.index = []int{0}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errUnusable, what, err)
	}
	return ss, nil
}

// avroEncoder reads a payload in Avro's JSON encoding (unions as
// {"type": value}) and writes Avro binary, with goavro: the encoding the
// Avro specification defines, which hand-written JSON mapping would only
// approximate.
func avroEncoder(schema string) (func([]byte) ([]byte, error), error) {
	codec, err := goavro.NewCodec(schema)
	if err != nil {
		return nil, fmt.Errorf("avro schema: %w", err)
	}
	return func(payload []byte) ([]byte, error) {
		native, rest, err := codec.NativeFromTextual(payload)
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(rest)) > 0 {
			return nil, fmt.Errorf("%d bytes after the record", len(rest))
		}
		return codec.BinaryFromNative(nil, native)
	}, nil
}

// jsonSchemaEncoder validates a payload against the JSON Schema (draft-07
// or 2020-12, Google's jsonschema-go) and writes it as it is. A schema
// that declares another draft is refused: its keywords would be read with
// another draft's meaning.
func jsonSchemaEncoder(schema string) (func([]byte) ([]byte, error), error) {
	var sch jsonschema.Schema
	if err := json.Unmarshal([]byte(schema), &sch); err != nil {
		return nil, fmt.Errorf("json schema: %w", err)
	}
	switch strings.TrimSuffix(strings.Replace(sch.Schema, "https://", "http://", 1), "#") {
	case "", "http://json-schema.org/draft-07/schema", "http://json-schema.org/draft/2020-12/schema":
	default:
		return nil, fmt.Errorf("json schema: $schema %q: walpost validates drafts 07 and 2020-12; register the subject's schema in one of them", sch.Schema)
	}
	rs, err := sch.Resolve(nil)
	if err != nil {
		return nil, fmt.Errorf("json schema: %w", err)
	}
	return func(payload []byte) ([]byte, error) {
		var v any
		d := json.NewDecoder(bytes.NewReader(payload))
		if err := d.Decode(&v); err != nil {
			return nil, fmt.Errorf("not JSON: %w", err)
		}
		if len(bytes.TrimSpace(payload[d.InputOffset():])) > 0 {
			return nil, errors.New("not JSON: data after the document")
		}
		if err := rs.Validate(v); err != nil {
			return nil, errors.New(strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; "))
		}
		return payload, nil
	}, nil
}

// protobufEncoder reads a payload in Protobuf's JSON mapping (protojson)
// into the schema's first message and writes its binary encoding. The
// .proto text is compiled with bufbuild/protocompile, the Go compiler of
// .proto files that buf uses (google/protobuf imports resolved from the
// standard set); walpost writes message index [0].
func protobufEncoder(schema string) (func([]byte) ([]byte, error), error) {
	const name = "registry.proto"
	comp := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
		Accessor: protocompile.SourceAccessorFromMap(map[string]string{name: schema}),
	})}
	files, err := comp.Compile(context.Background(), name)
	if err != nil {
		return nil, fmt.Errorf("protobuf schema: %w", err)
	}
	msgs := files[0].Messages()
	if msgs.Len() == 0 {
		return nil, errors.New("protobuf schema: no message")
	}
	md := msgs.Get(0)
	return func(payload []byte) ([]byte, error) {
		m := dynamicpb.NewMessage(md)
		if err := protojson.Unmarshal(payload, m); err != nil {
			return nil, err
		}
		return proto.MarshalOptions{Deterministic: true}.Marshal(m)
	}, nil
}

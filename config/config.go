// Package config is walpost's typed configuration: every key with its
// default, unit and environment variable (WALPOST_*), loaded from defaults,
// an optional file, the environment and command-line flags (in rising
// precedence) by Load, and checked by Validate. Defaults are applied once,
// here: the packages that take a *Config (forwarder, sink/kafka, status,
// preflight, verify) read its fields as they are.
package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/walpost/walpost/internal/redact"
)

// Config is walpost's whole configuration. Every field carries its key, its
// default and its unit; the README's configuration table is checked against
// this struct by TestREADMEConfigTable.
type Config struct {
	Postgres Postgres `mapstructure:"postgres"`
	Kafka    Kafka    `mapstructure:"kafka"`
	Mapping  Mapping  `mapstructure:"mapping"`
	Schema   Schema   `mapstructure:"schema_registry"`
	Pipeline Pipeline `mapstructure:"pipeline"`
	Delivery Delivery `mapstructure:"delivery"`
	Poison   Poison   `mapstructure:"poison"`
	Recover  Recover  `mapstructure:"recover"`
	Outbox   Outbox   `mapstructure:"outbox"`
	HTTP     HTTP     `mapstructure:"http"`
	Log      Log      `mapstructure:"log"`
	Lint     Lint     `mapstructure:"lint"`
	OTel     OTel     `mapstructure:"otel"`
}

// OTel turns on walpost's own OpenTelemetry spans (docs/tracing.md): one
// span per forwarded transaction, linked to the spans whose trace context
// its rows carry, exported over OTLP/HTTP to the endpoint of the standard
// OTEL_EXPORTER_OTLP_* variables. Off, no tracer exists.
type OTel struct {
	// Enabled starts the tracer and its exporter.
	Enabled bool `mapstructure:"enabled" doc:"Export a span per forwarded transaction, linked to the trace contexts of its rows (docs/tracing.md), as OTLP/HTTP protobuf to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (as is) or OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces (default http://localhost:4318/v1/traces), configured by OTEL_EXPORTER_OTLP_[TRACES_]HEADERS, TIMEOUT, COMPRESSION, CERTIFICATE, CLIENT_CERTIFICATE, CLIENT_KEY and PROTOCOL (docs/tracing.md); an invalid value stops walpost at start, naming the variable; false: no tracer, no cost." default:"false"`
	// ServiceName is the resource's service.name.
	ServiceName string `mapstructure:"service_name" doc:"service.name of the spans (with otel.enabled)." default:"walpost"`
}

// Postgres is the source side.
type Postgres struct {
	// URL is the connection string (postgres://user:pass@host:port/db?sslmode=…).
	// The role needs REPLICATION and SELECT on the outbox table. Required.
	URL string `mapstructure:"url" doc:"PostgreSQL connection URL; the role needs REPLICATION. TLS via sslmode/sslrootcert in the URL. Required unless postgres.url_file is set." default:"(required)"`
	// URLFile names a file holding the connection URL (a mounted secret);
	// Load reads it, trimming one trailing newline. Setting both URL and
	// URLFile is an error.
	URLFile string `mapstructure:"url_file" doc:"File holding postgres.url (a mounted secret), one trailing newline trimmed; not together with postgres.url." default:""`
	// Slot is the logical replication slot walpost owns. Default "walpost".
	Slot string `mapstructure:"slot" doc:"Logical replication slot (pgoutput); created when missing on a first install (no walpost_position row for it), never over a recorded position." default:"walpost"`
	// Publication covers exactly the outbox table, inserts only. Default "walpost_outbox".
	Publication string `mapstructure:"publication" doc:"Publication that covers exactly the outbox table with publish = 'insert'." default:"walpost_outbox"`
	// Table is the outbox table, optionally schema-qualified. Default "outbox".
	Table string `mapstructure:"table" doc:"Outbox table (schema-qualified or in the search_path)." default:"outbox"`
	// PoisonTable receives records Kafka keeps refusing. Default "poison_outbox".
	PoisonTable string `mapstructure:"poison_table" doc:"Quarantine table for records Kafka keeps refusing." default:"poison_outbox"`
	// PositionInterval is the most often walpost writes its confirmed
	// position to walpost_position (synchronous_commit = on), and how far
	// behind the slot's in-memory position the stored one can be; after a
	// PostgreSQL ≤ 16 crash at most the events confirmed in this interval
	// are sent again. Default 200ms.
	PositionInterval time.Duration `mapstructure:"position_interval" doc:"Write the confirmed position to walpost_position at most this often; after a PostgreSQL crash at most the events confirmed in this interval are sent again (duration)." default:"200ms"`
	// HeartbeatInterval, when above 0, emits pg_logical_emit_message on the
	// side connection so the slot advances on a database without writes.
	HeartbeatInterval time.Duration `mapstructure:"heartbeat_interval" doc:"Emit a logical heartbeat message this often so the slot advances on an idle database (duration); 0 disables." default:"0s"`
	// ReceiveTimeout ends a replication session that heard nothing from
	// the server for this long (a half-open connection).
	ReceiveTimeout time.Duration `mapstructure:"receive_timeout" doc:"Reconnect when the server sent nothing for this long although asked to reply (duration, above postgres.status_interval); raised to the server's wal_sender_timeout + 10s when that is longer." default:"30s"`
	// StatusInterval is the longest time between two standby status updates.
	// Must stay below the server's wal_sender_timeout. Default 10s.
	StatusInterval time.Duration `mapstructure:"status_interval" doc:"Longest interval between standby status updates (duration, ≤ 10s)." default:"10s"`
	// OutageBudget is how long walpost may be stopped without losing its
	// slot; walpost check warns when PostgreSQL 18's
	// idle_replication_slot_timeout would invalidate the slot sooner.
	OutageBudget time.Duration `mapstructure:"outage_budget" doc:"How long walpost may be stopped without losing its slot (duration); walpost check warns when idle_replication_slot_timeout (PostgreSQL 18) is shorter." default:"1h"`
}

// Kafka is the destination side.
type Kafka struct {
	// Brokers are the seed brokers, host:port, comma-separated in the
	// environment. Required.
	Brokers []string `mapstructure:"brokers" doc:"Seed brokers, host:port, comma-separated in the environment." default:"(required)"`
	// Topic receives rows whose topic column is NULL. Default "outbox".
	Topic string `mapstructure:"topic" doc:"Topic for rows whose topic column is NULL." default:"outbox"`
	// CreateTopicPartitions, when above 0, makes walpost run create the
	// default topic with that many partitions if it is missing.
	CreateTopicPartitions int `mapstructure:"create_topic_partitions" doc:"Create kafka.topic with this many partitions when missing; 0 never creates it." default:"0"`
	// ClientID is the Kafka client id. Default "walpost".
	ClientID string `mapstructure:"client_id" doc:"Kafka client.id." default:"walpost"`
	// Linger is how long the producer waits to fill a batch. Default 5ms.
	Linger time.Duration `mapstructure:"linger" doc:"Producer linger per partition batch (duration)." default:"5ms"`
	// Compression is none, gzip, snappy, lz4 or zstd. Default "snappy":
	// of Kafka's fast codecs it compresses outbox rows as well as lz4 at
	// about 1.5 times the speed (franz-go's snappy is assembly).
	Compression string `mapstructure:"compression" doc:"Batch compression: none, gzip, snappy, lz4 or zstd." default:"snappy"`
	// Partitioner is how a record's partition follows from its partition
	// key (the row's partition_key, else the record key): murmur2 (the
	// Java client's default partitioner), consistent_random (librdkafka's
	// default: CRC32) or fnv1a (librdkafka's fnv1a, Sarama's default). A
	// topic that other producers write too keeps each key on one
	// partition only when all of them hash alike. Default "murmur2".
	Partitioner string `mapstructure:"partitioner" doc:"How the partition follows from the partition key: murmur2 (Java partitioner.class default: toPositive(murmur2(key)) % partitions), consistent_random (librdkafka partitioner default: CRC32(key) % partitions) or fnv1a (librdkafka partitioner=fnv1a, Sarama's default: abs(FNV-1a 32(key)) % partitions); choose what the topic's other producers use." default:"murmur2"`
	// RequestTimeout is how long a broker may take to answer a produce
	// request (franz-go ProduceRequestTimeout: the request's timeout
	// field; Java and librdkafka request.timeout.ms). Default 10s.
	RequestTimeout time.Duration `mapstructure:"request_timeout" doc:"How long a broker may take to answer a produce request before it replies with a timeout and the batch is retried (duration; Java/librdkafka request.timeout.ms)." default:"10s"`
	// MetadataMaxAge is the longest walpost's clients keep the cluster's
	// metadata before reading it again (franz-go MetadataMaxAge; Java and
	// librdkafka metadata.max.age.ms). Default 5m.
	MetadataMaxAge time.Duration `mapstructure:"metadata_max_age" doc:"Read the cluster's metadata (new partitions, moved leaders) at least this often (duration; Java/librdkafka metadata.max.age.ms)." default:"5m"`
	// ClientRack is the rack (availability zone) walpost runs in (franz-go
	// Rack; Java and librdkafka client.rack): walpost verify fetches from
	// a replica in that rack when the brokers have a rack-aware replica
	// selector. Producing, and the exactly-once checkpoint read at start
	// (which must see what the leader acknowledged), always go to the
	// leader.
	ClientRack string `mapstructure:"client_rack" doc:"Rack (availability zone) walpost runs in: walpost verify fetches from a replica there when the brokers set replica.selector.class; producing, and the exactly-once checkpoint read at start, always go to the leader (Java/librdkafka client.rack)." default:""`
	// MaxMessageBytes bounds one record batch; a record larger than this is
	// refused before it is sent. 0 reads the topic's max.message.bytes.
	MaxMessageBytes int `mapstructure:"max_message_bytes" doc:"Largest record batch in bytes; 0 uses the topic's max.message.bytes." default:"0"`
	// FlushTimeout bounds a clean stop: reading to the open transaction's
	// commit, finishing a running isolation, waiting for acks and the final
	// flush share one deadline, FlushTimeout after the stop. Default 30s.
	// CheckpointTopic holds, per slot, the position of the last committed
	// Kafka transaction in exactly-once mode (DESIGN.md, "Exactly-once
	// delivery").
	CheckpointTopic string        `mapstructure:"checkpoint_topic" doc:"Compacted topic (one partition, cleanup.policy=compact) holding each slot's last committed position in delivery.mode exactly-once; created when kafka.create_topic_partitions > 0, else it must exist. Unused in at-least-once." default:"walpost_checkpoints"`
	FlushTimeout    time.Duration `mapstructure:"flush_timeout" doc:"How long a clean stop may take, in total, to finish the open transaction and a running isolation and wait for outstanding acks (duration)." default:"30s"`
	TLS             TLS           `mapstructure:"tls"`
	SASL            SASL          `mapstructure:"sasl"`
}

// TLS configures TLS to the brokers.
type TLS struct {
	Enabled  bool   `mapstructure:"enabled" doc:"Connect to the brokers over TLS." default:"false"`
	CAFile   string `mapstructure:"ca_file" doc:"PEM file of the CA that signed the brokers' certificates; empty uses the system roots." default:""`
	CertFile string `mapstructure:"cert_file" doc:"PEM client certificate for mutual TLS." default:""`
	KeyFile  string `mapstructure:"key_file" doc:"PEM key of the client certificate; an encrypted PKCS#8 key (BEGIN ENCRYPTED PRIVATE KEY) needs kafka.tls.key_password (Java/librdkafka ssl.key.location)." default:""`
	// KeyPassword decrypts an encrypted PKCS#8 KeyFile (Java and
	// librdkafka ssl.key.password).
	KeyPassword string `mapstructure:"key_password" doc:"Password of an encrypted PKCS#8 kafka.tls.key_file (never logged; Java/librdkafka ssl.key.password)." default:""`
	// KeyPasswordFile names a file holding KeyPassword (a mounted secret).
	KeyPasswordFile string `mapstructure:"key_password_file" doc:"File holding kafka.tls.key_password (a mounted secret), one trailing newline trimmed; not together with kafka.tls.key_password." default:""`
	// KeystoreFile is a PKCS#12 bundle of the client certificate, its key
	// and its chain, instead of CertFile and KeyFile (Java
	// ssl.keystore.location with ssl.keystore.type=PKCS12; librdkafka
	// ssl.keystore.location).
	KeystoreFile string `mapstructure:"keystore_file" doc:"PKCS#12 bundle (.p12/.pfx) of the client certificate, its key and chain, instead of kafka.tls.cert_file and key_file (Java ssl.keystore.location with ssl.keystore.type=PKCS12; librdkafka ssl.keystore.location)." default:""`
	// KeystorePassword decrypts KeystoreFile (Java and librdkafka
	// ssl.keystore.password).
	KeystorePassword string `mapstructure:"keystore_password" doc:"Password of kafka.tls.keystore_file (never logged; Java/librdkafka ssl.keystore.password)." default:""`
	// KeystorePasswordFile names a file holding KeystorePassword.
	KeystorePasswordFile string `mapstructure:"keystore_password_file" doc:"File holding kafka.tls.keystore_password (a mounted secret), one trailing newline trimmed; not together with kafka.tls.keystore_password." default:""`
	ServerName           string `mapstructure:"server_name" doc:"Expected server name, when it differs from the broker host." default:""`
	InsecureSkipVerify   bool   `mapstructure:"insecure_skip_verify" doc:"Skip certificate verification (testing only)." default:"false"`
}

// SASL configures SASL authentication to the brokers.
type SASL struct {
	Mechanism string `mapstructure:"mechanism" doc:"Empty (none), PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER (kafka.sasl.oauth_token) or AWS_MSK_IAM (kafka.sasl.aws_*; needs kafka.tls.enabled)." default:""`
	Username  string `mapstructure:"username" doc:"SASL user." default:""`
	Password  string `mapstructure:"password" doc:"SASL password (never logged)." default:""`
	// PasswordFile names a file holding the password (a mounted secret);
	// Load reads it, trimming one trailing newline. Not together with
	// Password.
	PasswordFile string `mapstructure:"password_file" doc:"File holding kafka.sasl.password (a mounted secret), one trailing newline trimmed; not together with kafka.sasl.password." default:""`
	// OAuthToken is the bearer token of OAUTHBEARER, sent as is (walpost
	// fetches and refreshes no token). With OAuthTokenFile the file is
	// read again at every connection, so a token a sidecar rotates in the
	// file is picked up by the next connection.
	OAuthToken     string `mapstructure:"oauth_token" doc:"OAUTHBEARER token, sent as is (never logged)." default:""`
	OAuthTokenFile string `mapstructure:"oauth_token_file" doc:"File holding kafka.sasl.oauth_token (a mounted secret), one trailing newline trimmed, read again at every connection so a rotated token is used; not together with kafka.sasl.oauth_token." default:""`
	// AWS credentials of AWS_MSK_IAM. Empty AWSAccessKeyID: the credentials
	// come from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
	// AWS_SESSION_TOKEN, read at every connection. The region comes from the
	// broker host name (b-1.NAME.kafka.REGION.amazonaws.com), else
	// AWS_REGION or AWS_DEFAULT_REGION.
	AWSAccessKeyID         string `mapstructure:"aws_access_key_id" doc:"AWS_MSK_IAM access key id; empty takes AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN from the environment at every connection." default:""`
	AWSSecretAccessKey     string `mapstructure:"aws_secret_access_key" doc:"AWS_MSK_IAM secret access key (never logged); with kafka.sasl.aws_access_key_id." default:""`
	AWSSecretAccessKeyFile string `mapstructure:"aws_secret_access_key_file" doc:"File holding kafka.sasl.aws_secret_access_key (a mounted secret), one trailing newline trimmed; not together with kafka.sasl.aws_secret_access_key." default:""`
	AWSSessionToken        string `mapstructure:"aws_session_token" doc:"AWS_MSK_IAM session token of temporary credentials (never logged); optional." default:""`
}

// Partitioners of kafka.partitioner.
const (
	// PartitionerMurmur2 is the Java client's default partitioner for a
	// keyed record: toPositive(murmur2(key)) % partitions.
	PartitionerMurmur2 = "murmur2"
	// PartitionerConsistentRandom is librdkafka's default partitioner
	// for a keyed record: CRC32(key) % partitions.
	PartitionerConsistentRandom = "consistent_random"
	// PartitionerFNV1a is librdkafka's fnv1a partitioner (Sarama's
	// default): abs(int32(FNV-1a 32(key))) % partitions.
	PartitionerFNV1a = "fnv1a"
)

// Profiles of mapping.profile.
const (
	// ProfileWalpost is walpost's own outbox table and record (README,
	// Schema and Kafka record).
	ProfileWalpost = "walpost"
	// ProfileDebezium is the table and record of Debezium's Outbox Event
	// Router under its defaults (README, Debezium-compatible mode).
	ProfileDebezium = "debezium"
)

// Formats of mapping.key_format and mapping.value_format: what Kafka
// Connect's converter would have written.
const (
	FormatString     = "string"      // StringConverter: the column's text as it is
	FormatJSON       = "json"        // JsonConverter, schemas.enable=false: a JSON string
	FormatJSONSchema = "json_schema" // JsonConverter, schemas.enable=true: {"schema":…,"payload":…}
)

// RoutedByValue is the placeholder of mapping.topic_template (Debezium's
// route.topic.replacement): the topic column's value.
const RoutedByValue = "${routedByValue}"

// MaxHeaderColumns bounds mapping.header_columns.
const MaxHeaderColumns = 16

// Mapping maps the outbox table's columns to the Kafka record. Keys marked
// "(profile)" take mapping.profile's value when empty (applied once, in
// Load and Default: readers see the effective value).
type Mapping struct {
	// Profile picks the layout: walpost (the default) or debezium.
	Profile string `mapstructure:"profile" doc:"Outbox layout and record format: walpost (Schema, Kafka record) or debezium (Debezium's Outbox Event Router defaults: see Debezium-compatible mode); the (profile) keys below default to its column names." default:"walpost"`
	// IDColumn is the event id (Debezium table.field.event.id): the
	// outbox_id header, or the id header and idempotency key in the
	// debezium profile.
	IDColumn string `mapstructure:"id_column" doc:"Column of the event id (Debezium table.field.event.id): walpost id, debezium id (the id header and the idempotency key)." default:"(profile)"`
	// KeyColumn is the record key (Debezium table.field.event.key).
	KeyColumn string `mapstructure:"key_column" doc:"Column of the record key (Debezium table.field.event.key): walpost idempotency_key, debezium aggregateid." default:"(profile)"`
	// PayloadColumn is the record value (Debezium table.field.event.payload).
	PayloadColumn string `mapstructure:"payload_column" doc:"Column of the record value (Debezium table.field.event.payload): payload in both profiles." default:"(profile)"`
	// TopicColumn routes the record (Debezium route.by.field).
	TopicColumn string `mapstructure:"topic_column" doc:"Column whose value routes the record (Debezium route.by.field): walpost topic (optional; NULL goes to kafka.topic), debezium aggregatetype (required)." default:"(profile)"`
	// TopicTemplate is the topic, ${routedByValue} replaced by the topic
	// column's value (Debezium route.topic.replacement).
	TopicTemplate string `mapstructure:"topic_template" doc:"Topic name with ${routedByValue} replaced by the topic column's value (Debezium route.topic.replacement): walpost ${routedByValue}, debezium outbox.event.${routedByValue}." default:"(profile)"`
	// HeaderColumns are Debezium's table.fields.additional.placement
	// entries of kind header: column:header[:name].
	HeaderColumns []string `mapstructure:"header_columns" doc:"More columns as headers, Debezium's table.fields.additional.placement syntax with header entries only: column:header[:name], comma-separated in the environment; the value is the column's PostgreSQL text, NULL a null header." default:"[]"`
	// TracingColumn is Debezium's tracing.span.context.field: a text
	// column holding the application's W3C trace context, either as
	// java.util.Properties text ("traceparent=00-…\ntracestate=…", what
	// Debezium's tracing reads) or as a plain traceparent value
	// ("00-…-…-01"). Its traceparent and tracestate become the record's
	// first headers (docs/tracing.md); empty reads no such column.
	TracingColumn string `mapstructure:"tracing_column" doc:"Text column with the application's W3C trace context (Debezium tracing.span.context.field, whose default is tracingspancontext): java.util.Properties text (traceparent=00-…) or a plain traceparent value; its traceparent and tracestate become the record's first headers, a malformed one is left out, counted and logged (docs/tracing.md); debezium profile only (the walpost profile carries them in the headers column); empty: none." default:""`
	// TimestampColumn gives the record timestamp (Debezium
	// table.field.event.timestamp); empty: the commit time.
	TimestampColumn string `mapstructure:"timestamp_column" doc:"timestamptz column whose value is the record timestamp (Debezium table.field.event.timestamp); empty: the transaction's commit time." default:""`
	// KeyFormat and ValueFormat are the bytes Kafka Connect's converter
	// would write: string, json or json_schema.
	KeyFormat   string `mapstructure:"key_format" doc:"Key bytes as Kafka Connect's key.converter writes them: string (StringConverter: the text), json (JsonConverter, schemas.enable=false), json_schema (JsonConverter with schemas); json formats need the debezium profile." default:"string"`
	ValueFormat string `mapstructure:"value_format" doc:"Value bytes as value.converter writes them: string (the payload text), json or json_schema, as for mapping.key_format." default:"string"`
	// TombstoneOnEmptyPayload is Debezium's route.tombstone.on.empty.payload
	// (its default, false, in both profiles): true sends a row whose
	// payload is NULL (debezium profile: or text that is empty after
	// Java's trim, as the router tests) as a tombstone, the key and the
	// usual headers with a null value. False: the walpost profile
	// quarantines a NULL payload (NULL_PAYLOAD); the debezium profile
	// sends what the router sends, a null value through the converter.
	TombstoneOnEmptyPayload bool `mapstructure:"tombstone_on_empty_payload" doc:"Debezium route.tombstone.on.empty.payload: true sends a row with a NULL payload (debezium profile: or a blank text payload) as a tombstone (the key and the usual headers, value null); false: the walpost profile quarantines it (NULL_PAYLOAD), the debezium profile sends the router's record (a null value through value_format: a tombstone with string, null or the schema envelope with json formats)." default:"false"`
}

// Schema registry value formats (schema_registry.value_format).
const (
	SchemaNone       = "none"
	SchemaAvro       = "avro"
	SchemaJSONSchema = "json_schema"
	SchemaProtobuf   = "protobuf"
)

// Subject name strategies (schema_registry.subject_strategy), as
// Confluent's serializers name them.
const (
	SubjectTopicName       = "topic_name"
	SubjectRecordName      = "record_name"
	SubjectTopicRecordName = "topic_record_name"
)

// Schema frames record values in the Confluent wire format (magic byte 0,
// the schema id, for Protobuf the message index, then the encoded payload)
// with a schema from a Confluent-compatible schema registry. The payload
// column holds the record as JSON: Avro's JSON encoding for avro, the
// document itself for json_schema, Protobuf's JSON mapping for protobuf.
type Schema struct {
	ValueFormat     string        `mapstructure:"value_format" doc:"Frame each record value with a registry schema: none (the payload as mapping.value_format writes it), avro (the payload is the record in Avro's JSON encoding, sent as Avro binary), json_schema (the payload, validated against the JSON Schema, sent as is) or protobuf (the payload in Protobuf's JSON mapping, sent as the schema's first message in binary); a payload that does not fit its schema is quarantined with error class schema. Needs mapping.value_format = string." default:"none"`
	KeyFormat       string        `mapstructure:"key_format" doc:"Frame each record key the same way: none (the key text), avro or json_schema (the key text as a string value, validated against the latest schema of subject <topic>-key, which must accept a string: Avro \"string\", JSON Schema {\"type\": \"string\"}); records are then partitioned by the framed key bytes, as Confluent's producers do. Needs mapping.key_format = string." default:"none"`
	URL             string        `mapstructure:"url" doc:"Base URL of the Confluent-compatible registry API, e.g. http://registry:8081 (Apicurio: .../apis/ccompat/v7); required with schema_registry.value_format." default:""`
	SubjectStrategy string        `mapstructure:"subject_strategy" doc:"Subject whose latest schema frames a record: topic_name (<topic>-value), record_name (the row's event_type, a fully-qualified record name) or topic_record_name (<topic>-<event_type>)." default:"topic_name"`
	SchemaIDHeader  string        `mapstructure:"schema_id_header" doc:"Record header whose value, a schema id, names the schema that frames the record instead of its subject's latest: from the row's headers object (walpost profile) or a column placed with mapping.header_columns (debezium profile, e.g. schema_id:header); a row without it uses its subject. An id the registry does not know, or of another type, quarantines the row (class schema). Empty: always the subject's latest." default:""`
	Username        string        `mapstructure:"username" doc:"Registry basic-auth user." default:""`
	Password        string        `mapstructure:"password" doc:"Registry basic-auth password (never logged)." default:""`
	PasswordFile    string        `mapstructure:"password_file" doc:"File holding schema_registry.password (a mounted secret), one trailing newline trimmed; not together with schema_registry.password." default:""`
	TLSCAFile       string        `mapstructure:"tls_ca_file" doc:"PEM file of the CA that signed the registry's certificate (an https URL); empty uses the system roots." default:""`
	TLSCertFile     string        `mapstructure:"tls_cert_file" doc:"PEM client certificate for mutual TLS with the registry." default:""`
	TLSKeyFile      string        `mapstructure:"tls_key_file" doc:"PEM key of schema_registry.tls_cert_file (a mounted secret)." default:""`
	Timeout         time.Duration `mapstructure:"timeout" doc:"Longest wait for one registry request (duration); a registry that does not answer is a transient failure: the session restarts." default:"10s"`
	RefreshInterval time.Duration `mapstructure:"refresh_interval" doc:"Look a subject's latest schema up again when the one in use is older than this (duration); a failed refresh keeps the schema in use." default:"5m"`
}

// validate checks the schema_registry keys.
func (s *Schema) validate(m Mapping, bad func(key, value, allowed string)) {
	switch s.KeyFormat {
	case SchemaNone, SchemaAvro, SchemaJSONSchema:
	default:
		bad("schema_registry.key_format", s.KeyFormat, "none, avro or json_schema (a key is framed as a string value)")
	}
	if s.KeyFormat != SchemaNone && m.KeyFormat != FormatString {
		bad("mapping.key_format", m.KeyFormat, "string with schema_registry.key_format = "+s.KeyFormat+" (the registry's format replaces the converter's)")
	}
	on := "schema_registry.value_format = " + s.ValueFormat
	switch s.ValueFormat {
	case SchemaNone:
		if s.KeyFormat == SchemaNone {
			return
		}
		on = "schema_registry.key_format = " + s.KeyFormat
	case SchemaAvro, SchemaJSONSchema, SchemaProtobuf:
		if m.ValueFormat != FormatString {
			bad("mapping.value_format", m.ValueFormat, "string with schema_registry.value_format = "+s.ValueFormat+" (the registry's format replaces the converter's)")
		}
	default:
		bad("schema_registry.value_format", s.ValueFormat, "none, avro, json_schema or protobuf")
		return
	}
	if s.URL == "" {
		bad("schema_registry.url", "", "required with "+on+": the registry's base URL, e.g. http://registry:8081")
	} else if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("schema_registry.url", redact.String(s.URL), "an http:// or https:// URL with a host, e.g. http://registry:8081")
	}
	switch s.SubjectStrategy {
	case SubjectTopicName, SubjectRecordName, SubjectTopicRecordName:
	default:
		bad("schema_registry.subject_strategy", s.SubjectStrategy, "topic_name, record_name or topic_record_name")
	}
	if (s.TLSCertFile == "") != (s.TLSKeyFile == "") {
		bad("schema_registry.tls_cert_file", s.TLSCertFile, "tls_cert_file and tls_key_file go together")
	}
	if s.Password != "" && s.Username == "" {
		bad("schema_registry.username", "", "required with schema_registry.password (or schema_registry.password_file)")
	}
	if s.Timeout <= 0 {
		bad("schema_registry.timeout", s.Timeout.String(), "a positive duration")
	}
	if s.RefreshInterval <= 0 {
		bad("schema_registry.refresh_interval", s.RefreshInterval.String(), "a positive duration")
	}
}

// HeaderColumn is one entry of mapping.header_columns.
type HeaderColumn struct{ Column, Header string }

// Headers parses mapping.header_columns (validated by Validate).
func (m Mapping) Headers() []HeaderColumn {
	out := make([]HeaderColumn, 0, len(m.HeaderColumns))
	for _, e := range m.HeaderColumns {
		h, _ := parsePlacement(e)
		out = append(out, h)
	}
	return out
}

// parsePlacement parses column:header[:name].
func parsePlacement(e string) (HeaderColumn, error) {
	parts := strings.Split(strings.TrimSpace(e), ":")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" {
		return HeaderColumn{}, errors.New("an entry column:header[:name], e.g. type:header:eventType")
	}
	if parts[1] != "header" {
		return HeaderColumn{}, fmt.Errorf("placement %q is not supported: walpost places columns as headers only (column:header[:name]); Debezium's envelope and partition placements have no equivalent", parts[1])
	}
	h := HeaderColumn{Column: parts[0], Header: parts[0]}
	if len(parts) == 3 {
		if parts[2] == "" {
			return HeaderColumn{}, errors.New("an empty header name: write column:header or column:header:name")
		}
		h.Header = parts[2]
	}
	return h, nil
}

// profileColumns are each profile's defaults of the (profile) keys.
var profileColumns = map[string]Mapping{
	ProfileWalpost:  {IDColumn: "id", KeyColumn: "idempotency_key", PayloadColumn: "payload", TopicColumn: "topic", TopicTemplate: RoutedByValue},
	ProfileDebezium: {IDColumn: "id", KeyColumn: "aggregateid", PayloadColumn: "payload", TopicColumn: "aggregatetype", TopicTemplate: "outbox.event." + RoutedByValue},
}

// applyProfile fills the empty (profile) keys from m.Profile; an unknown
// profile is left for Validate.
func (m *Mapping) applyProfile() {
	d, ok := profileColumns[m.Profile]
	if !ok {
		return
	}
	for _, f := range []struct {
		v *string
		d string
	}{
		{&m.IDColumn, d.IDColumn}, {&m.KeyColumn, d.KeyColumn}, {&m.PayloadColumn, d.PayloadColumn},
		{&m.TopicColumn, d.TopicColumn}, {&m.TopicTemplate, d.TopicTemplate},
	} {
		if *f.v == "" {
			*f.v = f.d
		}
	}
}

func (m *Mapping) validate(bad func(key, value, allowed string)) {
	if _, ok := profileColumns[m.Profile]; !ok {
		bad("mapping.profile", m.Profile, "walpost or debezium")
		return
	}
	for _, c := range []struct{ key, v string }{
		{"mapping.id_column", m.IDColumn}, {"mapping.key_column", m.KeyColumn}, {"mapping.payload_column", m.PayloadColumn},
		{"mapping.topic_column", m.TopicColumn},
	} {
		if !columnRE.MatchString(c.v) {
			bad(c.key, c.v, "a column name (letters, digits, _ and $, at most 63, not starting with a digit)")
		}
	}
	if m.TimestampColumn != "" && !columnRE.MatchString(m.TimestampColumn) {
		bad("mapping.timestamp_column", m.TimestampColumn, "empty (the commit time) or a timestamptz column's name")
	}
	if m.TracingColumn != "" && !columnRE.MatchString(m.TracingColumn) {
		bad("mapping.tracing_column", m.TracingColumn, "empty (no trace context) or a text column's name, e.g. tracingspancontext")
	}
	if t := strings.ReplaceAll(m.TopicTemplate, RoutedByValue, "x"); !validTopic(t) {
		bad("mapping.topic_template", m.TopicTemplate, "a Kafka topic name of [a-zA-Z0-9._-] in which "+RoutedByValue+" stands for the topic column's value, e.g. outbox.event."+RoutedByValue)
	}
	if len(m.HeaderColumns) > MaxHeaderColumns {
		bad("mapping.header_columns", strings.Join(m.HeaderColumns, ","), fmt.Sprintf("at most %d entries", MaxHeaderColumns))
	}
	seen := map[string]bool{}
	for _, e := range m.HeaderColumns {
		h, err := parsePlacement(e)
		switch {
		case err != nil:
			bad("mapping.header_columns", e, err.Error())
		case !columnRE.MatchString(h.Column):
			bad("mapping.header_columns", e, "column:header[:name] with a column name (letters, digits, _ and $)")
		case seen[h.Header] || (m.Profile == ProfileDebezium && h.Header == "id"):
			bad("mapping.header_columns", e, fmt.Sprintf("a header name used once: %q is taken; give it another name (column:header:name)", h.Header))
		}
		seen[h.Header] = true
	}
	for _, f := range []struct{ key, v string }{{"mapping.key_format", m.KeyFormat}, {"mapping.value_format", m.ValueFormat}} {
		switch f.v {
		case FormatString:
		case FormatJSON, FormatJSONSchema:
			if m.Profile != ProfileDebezium {
				bad(f.key, f.v, "string with mapping.profile = walpost; the json formats reproduce Kafka Connect's JsonConverter and need mapping.profile = debezium")
			}
		default:
			bad(f.key, f.v, "string (StringConverter), json (JsonConverter, schemas.enable=false) or json_schema (JsonConverter with schemas)")
		}
	}
	if m.Profile == ProfileWalpost && (len(m.HeaderColumns) > 0 || m.TimestampColumn != "") {
		key, v := "mapping.header_columns", strings.Join(m.HeaderColumns, ",")
		if len(m.HeaderColumns) == 0 {
			key, v = "mapping.timestamp_column", m.TimestampColumn
		}
		bad(key, v, "empty with mapping.profile = walpost (its rows carry headers in the headers column and the commit time); set mapping.profile = debezium to place columns")
	}
	if m.Profile == ProfileWalpost && m.TracingColumn != "" {
		bad("mapping.tracing_column", m.TracingColumn, "empty with mapping.profile = walpost: its rows carry traceparent and tracestate in the headers column (writer.WithTraceContext writes them there); set mapping.profile = debezium to read a tracing column")
	}
}

var columnRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]{0,62}$`)

// Pipeline bounds memory between the slot and the broker.
type Pipeline struct {
	// MaxInFlightEvents caps events read from the slot and not yet handled.
	MaxInFlightEvents int `mapstructure:"max_inflight_events" doc:"Events read but not yet acked or quarantined before the reader pauses." default:"10000"`
	// MaxInFlightBytes caps their payload bytes.
	MaxInFlightBytes int64 `mapstructure:"max_inflight_bytes" doc:"Bytes of those events before the reader pauses (bytes)." default:"16777216"`
}

// Delivery modes (delivery.mode).
const (
	AtLeastOnce = "at-least-once"
	ExactlyOnce = "exactly-once"
)

// Delivery chooses the delivery guarantee and, in exactly-once mode, the
// size of Kafka transactions (DESIGN.md, "Exactly-once delivery").
type Delivery struct {
	// Mode is AtLeastOnce (an idempotent producer; consumers deduplicate
	// by idempotency_key) or ExactlyOnce (a transactional producer and a
	// checkpoint topic; read_committed consumers see each event once).
	Mode string `mapstructure:"mode" doc:"at-least-once (idempotent producer; consumers deduplicate by idempotency_key) or exactly-once (transactions plus kafka.checkpoint_topic; consumers must read with isolation.level=read_committed)." default:"at-least-once"`
	// TransactionInterval is the longest a Kafka transaction stays open.
	TransactionInterval time.Duration `mapstructure:"transaction_interval" doc:"Exactly-once: while walpost drains a backlog, commit the open Kafka transaction once it is this old (duration, above 0 and below delivery.transaction_timeout). Once it follows the writers (the server sent the events less than this after their commit) it commits at each PostgreSQL transaction end instead, and what arrives during a commit makes the next transaction." default:"100ms"`
	// TransactionRecords caps the records of one Kafka transaction.
	TransactionRecords int `mapstructure:"transaction_records" doc:"Exactly-once: commit the open Kafka transaction once it holds this many records (at least 1, below pipeline.max_inflight_events)." default:"5000"`
	// TransactionTimeout is franz-go's TransactionTimeout (Java
	// transaction.timeout.ms): the coordinator aborts a transaction open
	// longer. At most the broker's transaction.max.timeout.ms.
	TransactionTimeout time.Duration `mapstructure:"transaction_timeout" doc:"Exactly-once: the producer's transaction.timeout.ms: the broker aborts a transaction left open longer (duration, above delivery.transaction_interval, at most the broker's transaction.max.timeout.ms, 15m by default)." default:"1m"`
}

// MaxTransactionTimeout is Kafka's default transaction.max.timeout.ms.
const MaxTransactionTimeout = 15 * time.Minute

// Poison governs quarantine of records Kafka keeps refusing.
type Poison struct {
	// MaxAttempts is how many times a record-level failure is tried before
	// the record goes to the poison table. Default 5.
	MaxAttempts int `mapstructure:"max_attempts" doc:"Produce attempts for a record-level failure before quarantine (≥ 1)." default:"5"`
	// Backoff is the pause before re-sending a record that failed alone; it
	// doubles each time, up to PoisonBackoffCap. The first re-send after a
	// failure goes at once. Above 0 and at most PoisonBackoffCap.
	Backoff time.Duration `mapstructure:"backoff" doc:"Pause before re-sending a record that failed alone, doubled each time up to 30s; the first re-send after a failure goes at once (duration, above 0 and ≤ 30s)." default:"200ms"`
	// MaxRate is the number of quarantined records within RateWindow that
	// stops walpost (a systematic failure must not drain the outbox).
	MaxRate int `mapstructure:"max_rate" doc:"Quarantined records within poison.rate_window that stop walpost." default:"100"`
	// RateWindow is the window of MaxRate.
	RateWindow time.Duration `mapstructure:"rate_window" doc:"Window for poison.max_rate (duration)." default:"1m"`
}

// Recover governs walpost recover and walpost prune (README, Runbook,
// "Slot lost").
type Recover struct {
	// Margin widens the window of rows chosen by created_at (when
	// track_commit_timestamp is off, or a row's commit timestamp is not
	// known): created_at is when the inserting transaction started, so a
	// transaction that ran longer than Margin and committed after the last
	// confirmed one could be missed by recover, and deleted by prune.
	// Recover re-sends the rows of the margin (consumers deduplicate);
	// prune keeps them. Default 10m.
	Margin time.Duration `mapstructure:"margin" doc:"How far before the last confirmed commit walpost recover reads and walpost prune stops when rows are chosen by created_at (track_commit_timestamp off): longer than your longest transaction (duration)." default:"10m"`
}

// Outbox governs what walpost run does to the outbox table itself: the
// background prune (README, Runbook, "Outbox growing").
type Outbox struct {
	// Retention, above 0, makes walpost run delete outbox rows created
	// more than Retention ago whose transactions it confirmed, every
	// PruneInterval over the side pool, with the bounds of walpost prune
	// --older-than Retention: never past the position recorded in
	// walpost_position, and, for rows chosen by created_at
	// (track_commit_timestamp off), never within recover.margin before its
	// last confirmed commit, so a shorter Retention deletes no row walpost
	// recover could need. 0 (the default) deletes nothing. The role needs
	// DELETE on the outbox.
	Retention time.Duration `mapstructure:"retention" doc:"walpost run deletes outbox rows created more than this long ago whose transactions it confirmed, as walpost prune --older-than does (never past the recorded position; rows chosen by created_at also stay for recover.margin before the last confirmed commit); needs DELETE on the outbox (duration); 0 disables." default:"0s"`
	// PruneInterval is the pause between two prune passes. Default 1m.
	PruneInterval time.Duration `mapstructure:"prune_interval" doc:"Pause between two prune passes of outbox.retention (duration, above 0)." default:"1m"`
	// PruneBatch is the most rows one delete transaction of a pass takes
	// (walpost prune --batch). Default 1000.
	PruneBatch int `mapstructure:"prune_batch" doc:"Rows per delete transaction of a prune pass of outbox.retention (1 to 100000), as walpost prune --batch." default:"1000"`
}

// HTTP serves metrics and health.
type HTTP struct {
	// Listen is the address of /metrics, /healthz and /readyz; empty turns
	// the server off.
	Listen string `mapstructure:"listen" doc:"Address for /metrics, /healthz and /readyz; empty disables." default:":9187"`
	// ReadyStallTimeout: /readyz fails when events are pending and the
	// confirmed LSN has not moved for this long.
	ReadyStallTimeout time.Duration `mapstructure:"ready_stall_timeout" doc:"/readyz fails when events are pending and the confirmed LSN has not moved for this long (duration)." default:"60s"`
	// ReadyMaxRetainedBytes: /readyz fails when the slot retains more WAL.
	ReadyMaxRetainedBytes int64 `mapstructure:"ready_max_retained_bytes" doc:"/readyz fails when the slot retains more WAL than this (bytes); 0 disables the check." default:"0"`
	// PProf serves Go's profiler under /debug/pprof/ on the same listener
	// (never the process command line, which may hold a password).
	PProf bool `mapstructure:"pprof" doc:"Serve Go's profiler under /debug/pprof/ on http.listen (the command line is never served)." default:"false"`
}

// Log shapes the logs.
type Log struct {
	Level  string `mapstructure:"level" doc:"debug, info, warn or error." default:"info"`
	Format string `mapstructure:"format" doc:"text or json." default:"text"`
}

// Lint configures `walpost lint`.
type Lint struct {
	Disable []string `mapstructure:"disable" doc:"Lint rules to skip (id or name)." default:"[]"`
}

// PoisonBackoffCap is the longest pause between two attempts of a record
// Kafka refused (poison.backoff doubles up to it).
const PoisonBackoffCap = 30 * time.Second

// FlagGroup is a set of the shortcut flags AddFlagsFor adds: a command
// has the flags of the settings it uses (a command that never connects
// has no connection flag).
type FlagGroup int

// The flag groups.
const (
	FlagsPostgres FlagGroup = 1 << iota // --postgres-url, --slot, --publication
	FlagsKafka                          // --kafka-brokers, --kafka-topic
	FlagsHTTP                           // --http-listen
	FlagsLog                            // --log-level, --log-format
	FlagsNone     FlagGroup = 0
	FlagsAll                = FlagsPostgres | FlagsKafka | FlagsHTTP | FlagsLog
)

// shortcut is a flag that sets one key.
type shortcut struct {
	flag, key, usage string
	group            FlagGroup
}

// shortcuts are the flags that set a key, in the order help lists them;
// flags win over the environment, which wins over the file.
var shortcuts = []shortcut{
	{"postgres-url", "postgres.url", "PostgreSQL URL", FlagsPostgres},
	{"slot", "postgres.slot", "replication slot", FlagsPostgres},
	{"publication", "postgres.publication", "publication", FlagsPostgres},
	{"kafka-brokers", "kafka.brokers", "comma-separated brokers, host:port", FlagsKafka},
	{"kafka-topic", "kafka.topic", "default topic", FlagsKafka},
	{"http-listen", "http.listen", "metrics/health address", FlagsHTTP},
	{"log-level", "log.level", "log level: debug, info, warn or error", FlagsLog},
	{"log-format", "log.format", "log format: text or json", FlagsLog},
}

// flagKeys maps command-line flags to config keys.
var flagKeys = func() map[string]string {
	m := map[string]string{}
	for _, s := range shortcuts {
		m[s.flag] = s.key
	}
	return m
}()

// AddFlags adds --config and every shortcut flag to fs.
func AddFlags(fs *pflag.FlagSet) { AddFlagsFor(fs, FlagsAll) }

// AddFlagsFor adds --config and the shortcut flags of groups to fs. Each
// flag's usage names its key and variable, and its default is the key's
// (a flag left unset does not override the file or the environment).
func AddFlagsFor(fs *pflag.FlagSet, groups FlagGroup) {
	fs.String("config", "", "config file: .yaml, .yml, .toml or .json (the environment and flags override it)")
	defaults := map[string]string{}
	for _, k := range Keys() {
		defaults[k.Key] = k.Default
	}
	for _, s := range shortcuts {
		if s.group&groups == 0 {
			continue
		}
		def, usage := defaults[s.key], fmt.Sprintf("%s (%s, %s)", s.usage, s.key, envName(s.key))
		if def == "(required)" {
			def, usage = "", fmt.Sprintf("%s (%s, %s; no default)", s.usage, s.key, envName(s.key))
		}
		fs.String(s.flag, def, usage)
	}
	fs.StringArray("set", nil, "set any key, KEY=VALUE, e.g. --set kafka.compression=zstd (repeatable; wins over the file, the environment and the other flags)")
}

// setValues are the --set KEY=VALUE entries of fs by key (the last one of
// a key wins), and the errors of entries that are not KEY=VALUE of a key.
func setValues(fs *pflag.FlagSet) (map[string]string, []error) {
	out := map[string]string{}
	if fs == nil || fs.Lookup("set") == nil {
		return out, nil
	}
	entries, _ := fs.GetStringArray("set")
	known := map[string]bool{}
	for _, k := range Keys() {
		known[k.Key] = true
	}
	var errs []error
	for _, e := range entries {
		key, value, ok := strings.Cut(e, "=")
		key = strings.ToLower(strings.TrimSpace(key))
		switch {
		case !ok || key == "":
			errs = append(errs, fmt.Errorf("invalid config: --set %q: want KEY=VALUE, e.g. --set kafka.compression=zstd", e))
		case known[key]:
			out[key] = value
		default:
			head := fmt.Sprintf("invalid config: --set %s: unknown key %s: ", e, key)
			if why, ok := notKeys[key]; ok {
				errs = append(errs, fmt.Errorf("%s%s; remove it", head, why))
			} else if k, ok := closestKey(key, func(k Key) string { return k.Key }); ok {
				errs = append(errs, fmt.Errorf("%sdid you mean %s (%s)? walpost config --reference lists the keys", head, k.Key, k.Env))
			} else {
				errs = append(errs, fmt.Errorf("%sno key is close to it; walpost config --reference lists the keys", head))
			}
		}
	}
	return out, errs
}

// Enumerations are the allowed values of the keys that take one of a
// list (shell completion; Validate refuses anything else).
func Enumerations() map[string][]string {
	return map[string][]string{
		"log.level":                        {"debug", "info", "warn", "error"},
		"log.format":                       {"text", "json"},
		"kafka.compression":                {"none", "gzip", "snappy", "lz4", "zstd"},
		"kafka.partitioner":                {PartitionerMurmur2, PartitionerConsistentRandom, PartitionerFNV1a},
		"kafka.sasl.mechanism":             {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "AWS_MSK_IAM"},
		"mapping.profile":                  {ProfileWalpost, ProfileDebezium},
		"mapping.key_format":               {FormatString, FormatJSON, FormatJSONSchema},
		"mapping.value_format":             {FormatString, FormatJSON, FormatJSONSchema},
		"schema_registry.value_format":     {SchemaNone, SchemaAvro, SchemaJSONSchema, SchemaProtobuf},
		"schema_registry.key_format":       {SchemaNone, SchemaAvro, SchemaJSONSchema},
		"schema_registry.subject_strategy": {SubjectTopicName, SubjectRecordName, SubjectTopicRecordName},
		"delivery.mode":                    {AtLeastOnce, ExactlyOnce},
	}
}

// Key is one configuration key: its dotted name, its WALPOST_* variable,
// its default and its documentation.
type Key struct {
	Key, Env, Default, Doc string
	Type                   reflect.Type
}

// Keys walks Config and returns every key with its default and doc, in
// declaration order.
func Keys() []Key {
	var out []Key
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			key := f.Tag.Get("mapstructure")
			if prefix != "" {
				key = prefix + "." + key
			}
			if f.Type.Kind() == reflect.Struct {
				walk(f.Type, key)
				continue
			}
			out = append(out, Key{
				Key:     key,
				Env:     "WALPOST_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_")),
				Default: f.Tag.Get("default"),
				Doc:     f.Tag.Get("doc"),
				Type:    f.Type,
			})
		}
	}
	walk(reflect.TypeOf(Config{}), "")
	return out
}

// newViper builds the one viper instance of a command: defaults, then the
// file, then WALPOST_* variables, then flags.
func newViper(fs *pflag.FlagSet, env bool) (*viper.Viper, error) {
	v := viper.New()
	for _, k := range Keys() {
		switch {
		case k.Default == "(required)", k.Default == "(profile)":
			v.SetDefault(k.Key, "")
		case k.Type.Kind() == reflect.Slice:
			v.SetDefault(k.Key, []string{})
		default:
			v.SetDefault(k.Key, k.Default)
		}
	}
	// An empty variable is a value (WALPOST_HTTP_LISTEN= turns the server
	// off), not an absent one.
	if env {
		v.AllowEmptyEnv(true)
		v.SetEnvPrefix("WALPOST")
		v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
		v.AutomaticEnv()
	}
	if fs != nil {
		for flag, key := range flagKeys {
			if f := fs.Lookup(flag); f != nil {
				if err := v.BindPFlag(key, f); err != nil {
					return nil, err
				}
			}
		}
		var errs []error
		if f := fs.Lookup("config"); f != nil && f.Value.String() != "" {
			if err := readFile(v, f.Value.String()); err != nil {
				errs = append(errs, err)
			}
		}
		set, setErrs := setValues(fs)
		for key, value := range set {
			v.Set(key, value)
		}
		if err := errors.Join(append(errs, setErrs...)...); err != nil {
			return v, err
		}
	}
	return v, nil
}

// Needs says which connection settings a command requires.
type Needs int

const (
	NeedPostgres Needs = 1 << iota
	NeedKafka
	NeedNothing Needs = 0
	NeedAll           = NeedPostgres | NeedKafka
)

// Load reads, decodes and validates the configuration: defaults, then the
// file named by the --config flag of fs, then WALPOST_* variables, then the
// flags of fs (AddFlags) that were set. fs may be nil (defaults and
// environment only). need says which connection settings are required.
//
// Every problem of one load is reported at once, each naming the key, its
// variable, the value, what is allowed and where the value came from: the
// unknown WALPOST_* variables, an unreadable file, the file's unknown keys,
// values of the wrong type, and the invalid values.
func Load(fs *pflag.FlagSet, need Needs) (*Config, error) {
	errs := checkEnvironment(os.Environ())
	v, err := newViper(fs, true)
	errs = append(errs, flatten(err)...)
	errs = append(errs, checkUnknownKeys(v, fs)...)
	errs = append(errs, checkTypes(v, fs)...)
	cfg, err := decode(v, need)
	for _, e := range flatten(err) {
		var ce *Error
		if errors.As(e, &ce) && ce.Source == "" {
			ce.Source = source(v, keyOf(ce.Key), fs)
		}
		errs = append(errs, e)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return cfg, nil
}

// flatten returns the errors err joins (errors.Join), or err alone.
func flatten(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// Default returns the configuration of the documented defaults, ignoring
// the environment; postgres.url and kafka.brokers are empty. Library users
// start from it and set what they need, then call Validate.
func Default() *Config {
	v, err := newViper(nil, false)
	if err != nil {
		panic(err) // no file, no flags: cannot fail
	}
	cfg, err := decode(v, NeedNothing)
	if err != nil {
		panic(fmt.Sprintf("config: the documented defaults do not validate: %v", err))
	}
	return cfg
}

func decode(v *viper.Viper, need Needs) (*Config, error) {
	var cfg Config
	var md mapstructure.Metadata
	err := v.Unmarshal(&cfg, func(dc *mapstructure.DecoderConfig) {
		dc.ErrorUnused = false // checkUnknownKeys names them, with a suggestion
		dc.Metadata = &md
		dc.DecodeHook = mapstructure.ComposeDecodeHookFunc(durationNeedsUnit, dc.DecodeHook)
	})
	if err != nil {
		return nil, fmt.Errorf("invalid config: %s", describeDecodeError(err))
	}
	// Env variables arrive as strings; a comma-separated broker list must
	// become several entries.
	brokers := splitList(cfg.Kafka.Brokers)
	cfg.Kafka.Brokers = brokers
	cfg.Mapping.HeaderColumns = splitList(cfg.Mapping.HeaderColumns)
	cfg.normalizeCase()
	cfg.Mapping.applyProfile()
	err = errors.Join(cfg.ReadSecretFiles(), cfg.ValidateFor(need))
	if err != nil {
		return nil, err
	}
	return &cfg, nil
}

// splitList splits comma-separated entries (how a list arrives from the
// environment) and drops empty ones.
func splitList(in []string) []string {
	var out []string
	for _, b := range in {
		for _, p := range strings.Split(b, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// ReadSecretFiles sets postgres.url from postgres.url_file,
// kafka.sasl.password from kafka.sasl.password_file (and the same for
// kafka.sasl.oauth_token and kafka.sasl.aws_secret_access_key), each file's content
// with one trailing newline (\n or \r\n) trimmed. A value set together
// with its file is an error naming both keys; a file that cannot be read
// is an error naming the key, its variable and the path. Load calls it;
// a library user who sets a *File field calls it before Validate. The
// file names stay in the Config (walpost config prints them, not the
// secret).
func (c *Config) ReadSecretFiles() error {
	var errs []error
	for _, s := range []struct {
		key, fileKey string
		value        *string
		file         string
	}{
		{"postgres.url", "postgres.url_file", &c.Postgres.URL, c.Postgres.URLFile},
		{"kafka.sasl.password", "kafka.sasl.password_file", &c.Kafka.SASL.Password, c.Kafka.SASL.PasswordFile},
		{"kafka.sasl.oauth_token", "kafka.sasl.oauth_token_file", &c.Kafka.SASL.OAuthToken, c.Kafka.SASL.OAuthTokenFile},
		{"kafka.sasl.aws_secret_access_key", "kafka.sasl.aws_secret_access_key_file", &c.Kafka.SASL.AWSSecretAccessKey, c.Kafka.SASL.AWSSecretAccessKeyFile},
		{"kafka.tls.key_password", "kafka.tls.key_password_file", &c.Kafka.TLS.KeyPassword, c.Kafka.TLS.KeyPasswordFile},
		{"kafka.tls.keystore_password", "kafka.tls.keystore_password_file", &c.Kafka.TLS.KeystorePassword, c.Kafka.TLS.KeystorePasswordFile},
		{"schema_registry.password", "schema_registry.password_file", &c.Schema.Password, c.Schema.PasswordFile},
	} {
		if s.file == "" {
			continue
		}
		if *s.value != "" {
			errs = append(errs, fmt.Errorf("invalid config: %s (%s) and %s (%s) are both set: set one of them", s.key, envName(s.key), s.fileKey, envName(s.fileKey)))
			continue
		}
		b, err := os.ReadFile(s.file)
		if err != nil {
			errs = append(errs, fmt.Errorf("invalid config: %s (%s) = %q: cannot read the file: %w", s.fileKey, envName(s.fileKey), s.file, err))
			continue
		}
		v := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		if v == "" {
			errs = append(errs, fmt.Errorf("invalid config: %s (%s) = %q: the file is empty", s.fileKey, envName(s.fileKey), s.file))
			continue
		}
		*s.value = v
	}
	return errors.Join(errs...)
}

// envName is the WALPOST_* variable of a key.
func envName(key string) string {
	return "WALPOST_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

var unusedKeyRE = regexp.MustCompile(`(?:'([^']*)' )?has invalid keys: ([^\n]*)`)

// durationNeedsUnit refuses a bare number for a duration ("10" would be
// 10ns); durations are written with a unit, e.g. "10s".
func durationNeedsUnit(from, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeOf(time.Duration(0)) {
		return data, nil
	}
	switch from.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return nil, fmt.Errorf("duration %v Needs a unit, e.g. \"10s\" or \"200ms\"", data)
	}
	return data, nil
}

func describeDecodeError(err error) string {
	msg := err.Error()
	ms := unusedKeyRE.FindAllStringSubmatch(msg, -1)
	if ms == nil {
		return msg
	}
	var unknown []string
	for _, m := range ms {
		for _, k := range strings.Split(m[2], ",") {
			k = strings.TrimSpace(k)
			if m[1] != "" {
				k = m[1] + "." + k
			}
			unknown = append(unknown, k)
		}
	}
	known := make([]string, 0)
	for _, k := range Keys() {
		known = append(known, k.Key)
	}
	sort.Strings(known)
	return fmt.Sprintf("unknown key(s) %s in the config file; known keys: %s", strings.Join(unknown, ", "), strings.Join(known, ", "))
}

// Error names the key, the offending value and what is allowed.
type Error struct {
	Key, Value, Allowed string
	// Source, when known, is where the value came from: "environment",
	// "flag --name" or "config file PATH".
	Source string
}

func (e *Error) Error() string {
	env := "WALPOST_" + strings.ToUpper(strings.ReplaceAll(e.Key, ".", "_"))
	if e.Source != "" {
		return fmt.Sprintf("invalid config: %s (%s) = %q from the %s: %s", e.Key, env, e.Value, e.Source, e.Allowed)
	}
	return fmt.Sprintf("invalid config: %s (%s) = %q: %s", e.Key, env, e.Value, e.Allowed)
}

// Validate checks every value, requiring postgres.url and kafka.brokers,
// and returns all problems at once.
func (c *Config) Validate() error { return c.ValidateFor(NeedAll) }

// ValidateFor checks every value, requiring the connection settings in
// need, and returns all problems at once (each an *Error).
func (c *Config) ValidateFor(need Needs) error {
	var errs []error
	bad := func(key, value, allowed string) {
		errs = append(errs, &Error{Key: key, Value: value, Allowed: allowed})
	}
	c.validatePostgres(need, bad)
	c.validateKafkaTarget(need, bad)
	c.Mapping.validate(bad)
	if c.OTel.Enabled && strings.TrimSpace(c.OTel.ServiceName) == "" {
		bad("otel.service_name", c.OTel.ServiceName, "a service name for the spans, e.g. walpost")
	}
	c.Schema.validate(c.Mapping, bad)
	c.validateIntervals(bad)
	c.validateKafkaProducer(bad)
	c.validateKafkaSASL(bad)
	c.validateKafkaTLS(bad)
	c.validateDelivery(bad)
	c.validatePoisonAndOutbox(bad)
	c.validateHTTPAndLog(bad)
	return errors.Join(errs...)
}

// validatePostgres checks the connection, slot, publication and table settings.
func (c *Config) validatePostgres(need Needs, bad func(key, value, allowed string)) {
	if c.Postgres.URL == "" {
		if need&NeedPostgres != 0 {
			bad("postgres.url", "", "required: a PostgreSQL URL such as postgres://user:pass@host:5432/db")
		}
	} else if _, err := pgconn.ParseConfig(c.Postgres.URL); err != nil {
		bad("postgres.url", redact.String(c.Postgres.URL), "not a valid PostgreSQL connection string: "+redact.String(err.Error()))
	}
	if !slotRE.MatchString(c.Postgres.Slot) {
		bad("postgres.slot", c.Postgres.Slot, "a slot name: lower-case letters, digits and _ (at most 63)")
	}
	if !qident.MatchString(c.Postgres.Publication) {
		bad("postgres.publication", c.Postgres.Publication, "an unquoted identifier")
	}
	if !qident.MatchString(c.Postgres.Table) {
		bad("postgres.table", c.Postgres.Table, "a table name, optionally schema-qualified")
	}
	if !qident.MatchString(c.Postgres.PoisonTable) {
		bad("postgres.poison_table", c.Postgres.PoisonTable, "a table name, optionally schema-qualified")
	}
	if c.Postgres.StatusInterval <= 0 || c.Postgres.StatusInterval > 10*time.Second {
		bad("postgres.status_interval", c.Postgres.StatusInterval.String(), "a duration above 0 and at most 10s")
	}
}

// validateKafkaTarget checks the brokers and the topic the events go to.
func (c *Config) validateKafkaTarget(need Needs, bad func(key, value, allowed string)) {
	if len(c.Kafka.Brokers) == 0 && need&NeedKafka != 0 {
		bad("kafka.brokers", "", "required: at least one host:port")
	}
	for _, b := range c.Kafka.Brokers {
		if scheme, rest, ok := strings.Cut(b, "://"); ok {
			bad("kafka.brokers", b, fmt.Sprintf("host:port without a scheme: drop the scheme %q (a listener name is the broker's setting, not the client's), e.g. %s", scheme+"://", rest))
			continue
		}
		host, port, err := net.SplitHostPort(b)
		if err != nil && !strings.Contains(b, ":") && b != "" {
			bad("kafka.brokers", b, "host:port with the port: walpost does not assume 9092, write "+b+":9092")
			continue
		}
		if err != nil || host == "" {
			bad("kafka.brokers", b, "host:port, e.g. 127.0.0.1:9092")
			continue
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			bad("kafka.brokers", b, "a port between 1 and 65535")
		}
	}
	if !validTopic(c.Kafka.Topic) {
		bad("kafka.topic", c.Kafka.Topic, "a Kafka topic name: 1-249 characters of [a-zA-Z0-9._-]")
	}
}

// validateIntervals checks the replication timers and the readiness limits.
func (c *Config) validateIntervals(bad func(key, value, allowed string)) {
	if c.Postgres.ReceiveTimeout <= c.Postgres.StatusInterval {
		bad("postgres.receive_timeout", c.Postgres.ReceiveTimeout.String(), "a duration above postgres.status_interval ("+c.Postgres.StatusInterval.String()+")")
	}
	if c.Postgres.PositionInterval <= 0 {
		bad("postgres.position_interval", c.Postgres.PositionInterval.String(), "a positive duration")
	}
	if c.Postgres.HeartbeatInterval < 0 {
		bad("postgres.heartbeat_interval", c.Postgres.HeartbeatInterval.String(), "0 (off) or a positive duration")
	}
	if c.HTTP.ReadyStallTimeout <= 0 {
		bad("http.ready_stall_timeout", c.HTTP.ReadyStallTimeout.String(), "a positive duration")
	}
	if c.HTTP.ReadyMaxRetainedBytes < 0 {
		bad("http.ready_max_retained_bytes", strconv.FormatInt(c.HTTP.ReadyMaxRetainedBytes, 10), "0 (off) or a byte count")
	}
}

// validateKafkaProducer checks the producer's client, batching and timeout settings.
func (c *Config) validateKafkaProducer(bad func(key, value, allowed string)) {
	if c.Kafka.CreateTopicPartitions < 0 {
		bad("kafka.create_topic_partitions", strconv.Itoa(c.Kafka.CreateTopicPartitions), "0 (never create) or a partition count")
	}
	if c.Kafka.ClientID == "" {
		bad("kafka.client_id", "", "a non-empty client id")
	}
	if c.Kafka.Linger < 0 || c.Kafka.Linger > time.Minute {
		bad("kafka.linger", c.Kafka.Linger.String(), "a duration between 0 and 1m")
	}
	switch c.Kafka.Compression {
	case "none", "gzip", "snappy", "lz4", "zstd":
	default:
		bad("kafka.compression", c.Kafka.Compression, "one of none, gzip, snappy, lz4, zstd")
	}
	if c.Kafka.MaxMessageBytes < 0 {
		bad("kafka.max_message_bytes", strconv.Itoa(c.Kafka.MaxMessageBytes), "0 (use the topic's max.message.bytes) or a positive byte count")
	}
	if c.Kafka.FlushTimeout <= 0 {
		bad("kafka.flush_timeout", c.Kafka.FlushTimeout.String(), "a positive duration")
	}
	switch c.Kafka.Partitioner {
	case PartitionerMurmur2, PartitionerConsistentRandom, PartitionerFNV1a:
	default:
		bad("kafka.partitioner", c.Kafka.Partitioner, "murmur2 (the Java client's default), consistent_random (librdkafka's default) or fnv1a")
	}
	if c.Kafka.RequestTimeout < time.Second || c.Kafka.RequestTimeout > 5*time.Minute {
		bad("kafka.request_timeout", c.Kafka.RequestTimeout.String(), "a duration between 1s and 5m, e.g. 30s (Java's request.timeout.ms default)")
	}
	if c.Kafka.MetadataMaxAge < time.Second {
		bad("kafka.metadata_max_age", c.Kafka.MetadataMaxAge.String(), "a duration of at least 1s, e.g. 5m")
	}
}

// validateKafkaSASL checks that the SASL mechanism has the credentials it needs.
func (c *Config) validateKafkaSASL(bad func(key, value, allowed string)) {
	switch sa := c.Kafka.SASL; strings.ToUpper(sa.Mechanism) {
	case "":
	case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		if sa.Username == "" {
			bad("kafka.sasl.username", "", "required with kafka.sasl.mechanism")
		}
	case "OAUTHBEARER":
		if sa.OAuthToken == "" {
			bad("kafka.sasl.oauth_token", "", "required with kafka.sasl.mechanism OAUTHBEARER (or kafka.sasl.oauth_token_file)")
		}
	case "AWS_MSK_IAM":
		if !c.Kafka.TLS.Enabled {
			bad("kafka.tls.enabled", "false", "true with kafka.sasl.mechanism AWS_MSK_IAM (MSK's IAM listeners take TLS only)")
		}
		switch {
		case sa.AWSAccessKeyID != "" && sa.AWSSecretAccessKey == "":
			bad("kafka.sasl.aws_secret_access_key", "", "required with kafka.sasl.aws_access_key_id (or kafka.sasl.aws_secret_access_key_file)")
		case sa.AWSAccessKeyID == "" && (sa.AWSSecretAccessKey != "" || sa.AWSSessionToken != ""):
			bad("kafka.sasl.aws_access_key_id", "", "required with kafka.sasl.aws_secret_access_key and kafka.sasl.aws_session_token")
		case sa.AWSAccessKeyID == "" && (os.Getenv("AWS_ACCESS_KEY_ID") == "" || os.Getenv("AWS_SECRET_ACCESS_KEY") == "") &&
			(os.Getenv("AWS_ROLE_ARN") == "" || os.Getenv("AWS_WEB_IDENTITY_TOKEN_FILE") == ""):
			bad("kafka.sasl.aws_access_key_id", "", "set it and kafka.sasl.aws_secret_access_key, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment, or AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE (a ServiceAccount's role: IRSA)")
		}
	default:
		bad("kafka.sasl.mechanism", c.Kafka.SASL.Mechanism, "empty, PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM")
	}
}

// validateKafkaTLS checks that the TLS key material comes in consistent pairs.
func (c *Config) validateKafkaTLS(bad func(key, value, allowed string)) {
	tl := c.Kafka.TLS
	if (tl.CertFile == "") != (tl.KeyFile == "") {
		bad("kafka.tls.cert_file", tl.CertFile, "cert_file and key_file go together")
	}
	if tl.KeystoreFile != "" && tl.CertFile != "" {
		bad("kafka.tls.keystore_file", tl.KeystoreFile, "either a PKCS#12 keystore or kafka.tls.cert_file and key_file, not both")
	}
	if tl.KeyPassword != "" && tl.KeyFile == "" {
		bad("kafka.tls.key_password", RedactedValue, "only with kafka.tls.key_file (an encrypted PKCS#8 key); a PKCS#12 bundle's password is kafka.tls.keystore_password")
	}
	if tl.KeystorePassword != "" && tl.KeystoreFile == "" {
		bad("kafka.tls.keystore_password", RedactedValue, "only with kafka.tls.keystore_file")
	}
}

// validateDelivery checks the in-flight limits and the delivery mode's transaction settings.
func (c *Config) validateDelivery(bad func(key, value, allowed string)) {
	if c.Pipeline.MaxInFlightEvents < 1 {
		bad("pipeline.max_inflight_events", strconv.Itoa(c.Pipeline.MaxInFlightEvents), "at least 1")
	}
	if c.Pipeline.MaxInFlightBytes < 1024 {
		bad("pipeline.max_inflight_bytes", strconv.FormatInt(c.Pipeline.MaxInFlightBytes, 10), "at least 1024 bytes")
	}
	switch c.Delivery.Mode {
	case AtLeastOnce:
	case ExactlyOnce:
		if !validTopic(c.Kafka.CheckpointTopic) {
			bad("kafka.checkpoint_topic", c.Kafka.CheckpointTopic, "a Kafka topic name: 1-249 characters of [a-zA-Z0-9._-]")
		} else if c.Kafka.CheckpointTopic == c.Kafka.Topic {
			bad("kafka.checkpoint_topic", c.Kafka.CheckpointTopic, "a topic of its own, not kafka.topic")
		}
		d := c.Delivery
		if d.TransactionTimeout <= 0 || d.TransactionTimeout > MaxTransactionTimeout {
			bad("delivery.transaction_timeout", d.TransactionTimeout.String(), "a duration above 0 and at most the broker's transaction.max.timeout.ms (15m by default)")
		}
		if d.TransactionInterval <= 0 || d.TransactionInterval >= d.TransactionTimeout {
			bad("delivery.transaction_interval", d.TransactionInterval.String(), "a duration above 0 and below delivery.transaction_timeout ("+d.TransactionTimeout.String()+")")
		}
		if d.TransactionRecords < 1 || d.TransactionRecords >= c.Pipeline.MaxInFlightEvents {
			bad("delivery.transaction_records", strconv.Itoa(d.TransactionRecords), "at least 1 and below pipeline.max_inflight_events ("+strconv.Itoa(c.Pipeline.MaxInFlightEvents)+"): a transaction must commit before the reader pauses")
		}
	default:
		bad("delivery.mode", c.Delivery.Mode, "at-least-once or exactly-once")
	}
}

// validatePoisonAndOutbox checks the poison-row, recovery and outbox-pruning settings.
func (c *Config) validatePoisonAndOutbox(bad func(key, value, allowed string)) {
	if c.Poison.MaxAttempts < 1 {
		bad("poison.max_attempts", strconv.Itoa(c.Poison.MaxAttempts), "at least 1")
	}
	// 0 is refused rather than honoured: a record Kafka refused is always
	// retried after a pause, and the poison-row retry doubles the same pause.
	if c.Poison.Backoff <= 0 || c.Poison.Backoff > PoisonBackoffCap {
		bad("poison.backoff", c.Poison.Backoff.String(), "a duration above 0 and at most "+PoisonBackoffCap.String()+" (the pause doubles up to "+PoisonBackoffCap.String()+"); use e.g. 1ms for the shortest pause")
	}
	if c.Poison.MaxRate < 1 {
		bad("poison.max_rate", strconv.Itoa(c.Poison.MaxRate), "at least 1")
	}
	if c.Poison.RateWindow <= 0 {
		bad("poison.rate_window", c.Poison.RateWindow.String(), "a positive duration")
	}
	if c.Recover.Margin < 0 {
		bad("recover.margin", c.Recover.Margin.String(), "0 or a positive duration, longer than the longest transaction that writes the outbox")
	}
	if c.Outbox.Retention < 0 {
		bad("outbox.retention", c.Outbox.Retention.String(), "0 (off) or a positive duration, e.g. 168h to keep the rows of 7 days")
	}
	if c.Outbox.PruneInterval <= 0 {
		bad("outbox.prune_interval", c.Outbox.PruneInterval.String(), "a positive duration, e.g. 1m")
	}
	if c.Outbox.PruneBatch < 1 || c.Outbox.PruneBatch > 100000 {
		bad("outbox.prune_batch", strconv.Itoa(c.Outbox.PruneBatch), "1 to 100000 rows per delete transaction")
	}
}

// validateHTTPAndLog checks the listen address and the log settings.
func (c *Config) validateHTTPAndLog(bad func(key, value, allowed string)) {
	if c.HTTP.Listen != "" {
		if _, _, err := net.SplitHostPort(c.HTTP.Listen); err != nil {
			bad("http.listen", c.HTTP.Listen, "host:port or :port, or empty to disable")
		}
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", c.Log.Level, "one of debug, info, warn, error")
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		bad("log.format", c.Log.Format, "text or json")
	}
}

var (
	slotRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)
	qident = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_$]{0,62}\.)?[A-Za-z_][A-Za-z0-9_$]{0,62}$`)
)

var topicRE = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

func validTopic(t string) bool { return topicRE.MatchString(t) && t != "." && t != ".." }

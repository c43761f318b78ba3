// Package kafkaconf builds sink/kafka's options from walpost's
// configuration: the connection of every Kafka client (Connection,
// ClientOpts, NewClient: kafka.tls.*, kafka.sasl.*), the producer's
// configuration (ConfigFrom), the record layout of mapping.* (LayoutFrom,
// MappingTypes, SetTableTypes) and the registry framing of
// schema_registry.* (SchemaFrom, KeySchemaFrom). It also holds the other
// views of the mapping that walpost run and walpost check share: the
// columns the stream reads (Columns) and the column types read from the
// outbox table (TableTypes).
//
// sink/kafka knows its own options only; the configuration keys that
// errors name (an unreadable kafka.tls.ca_file, a column of
// mapping.key_column walpost cannot encode) are named here.
package kafkaconf

"""Read a topic with librdkafka (confluent-kafka) and print each record.

A client walpost did not write reads what walpost produced: one JSON line
per record on stdout ({"topic", "partition", "offset", "key", "headers",
"value"}; key, header values and value as UTF-8 with invalid bytes
replaced, null when absent), then a summary line on stderr. It reads from
the beginning of every partition until --expect records arrived or no
record came for --idle seconds after the last one (or --timeout in all);
with --linger S it goes on after --expect records until none came for S
seconds (to see records beyond those expected: duplicates). It exits 0
when --expect records were read (or --expect is 0), else 1.

With --registry URL --format avro|json_schema|protobuf each value is
decoded by confluent-kafka's own Schema Registry deserializer
(AvroDeserializer, JSONDeserializer, ProtobufDeserializer), which reads
the Confluent wire format's schema id and fetches that schema from the
registry; "value" is then the decoded record as JSON and "schema_id" the
id the record carries. --key-format avro|json_schema decodes keys the
same way ("key" the decoded string, "key_schema_id" its id). A record a
deserializer refuses stops the consumer with an error (exit 2). The Protobuf deserializer takes a
generated message class: the registry's .proto text of the first
record's schema id is compiled with grpcio-tools' protoc.

Usage: consume.py --brokers HOST:PORT --topic T [--isolation read_committed]
                  [--expect N] [--linger S] [--idle S] [--timeout S]
                  [--registry URL --format avro|json_schema|protobuf]
                  [--key-format avro|json_schema]
"""

import argparse
import importlib
import json
import os
import struct
import sys
import tempfile
import time
import uuid

from confluent_kafka import Consumer, KafkaException


def text(b):
    return None if b is None else b.decode("utf-8", "replace")


def protobuf_class(registry, schema_id):
    """The generated class of the first message of the registry's schema."""
    from grpc_tools import protoc
    text = registry.get_schema(schema_id).schema_str
    d = tempfile.mkdtemp(prefix="walpost-proto-")
    name = "registry_%d" % schema_id
    with open(os.path.join(d, name + ".proto"), "w") as f:
        f.write(text)
    if protoc.main(["protoc", "-I" + d, "--python_out=" + d, name + ".proto"]) != 0:
        raise RuntimeError("protoc could not compile schema id %d" % schema_id)
    sys.path.insert(0, d)
    mod = importlib.import_module(name + "_pb2")
    first = list(mod.DESCRIPTOR.message_types_by_name)[0]
    return getattr(mod, first)


class Decoder:
    """Decodes keys or values with confluent-kafka's Schema Registry deserializers."""

    def __init__(self, registry, fmt, field):
        self.registry = registry
        self.fmt = fmt
        self.field = field
        self.des = None
        if fmt == "avro":
            from confluent_kafka.schema_registry.avro import AvroDeserializer
            self.des = AvroDeserializer(self.registry)
        elif fmt == "json_schema":
            from confluent_kafka.schema_registry.json_schema import JSONDeserializer
            self.des = JSONDeserializer(None, schema_registry_client=self.registry)

    def decode(self, msg, v):
        from confluent_kafka.serialization import SerializationContext
        from google.protobuf.json_format import MessageToDict
        if v is None:
            return None, None
        schema_id = struct.unpack(">bI", v[:5])[1] if len(v) >= 5 else None
        if self.des is None:  # protobuf: the class comes from the first record's schema
            from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
            self.des = ProtobufDeserializer(protobuf_class(self.registry, schema_id),
                                            {"use.deprecated.format": False})
        obj = self.des(v, SerializationContext(msg.topic(), self.field, msg.headers()))
        if self.fmt == "protobuf":
            obj = MessageToDict(obj, preserving_proto_field_name=True)
        return obj, schema_id


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--isolation", default="read_committed",
                    choices=["read_committed", "read_uncommitted"])
    ap.add_argument("--expect", type=int, default=0)
    ap.add_argument("--linger", type=float, default=0.0)
    ap.add_argument("--idle", type=float, default=10.0)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--registry", default="")
    ap.add_argument("--format", default="", choices=["", "avro", "json_schema", "protobuf"])
    ap.add_argument("--key-format", default="", choices=["", "avro", "json_schema"])
    a = ap.parse_args()
    dec = kdec = None
    if a.registry:
        from confluent_kafka.schema_registry import SchemaRegistryClient
        from confluent_kafka.serialization import MessageField
        # A request timeout (the client's default is none): a registry that
        # stops answering is retried, then fails the read, instead of
        # hanging it past --timeout.
        registry = SchemaRegistryClient({"url": a.registry, "timeout": 10})
        if a.format:
            dec = Decoder(registry, a.format, MessageField.VALUE)
        if a.key_format:
            kdec = Decoder(registry, a.key_format, MessageField.KEY)

    c = Consumer({
        "bootstrap.servers": a.brokers,
        "group.id": "walpost-rdkafka-" + uuid.uuid4().hex,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "isolation.level": a.isolation,
        "enable.partition.eof": False,
    })
    c.subscribe([a.topic])
    n = 0
    start = last = time.monotonic()
    try:
        while True:
            now = time.monotonic()
            if a.expect and n >= a.expect and now - last >= a.linger:
                break
            if now - start > a.timeout or (n > 0 and now - last > a.idle):
                break
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                raise KafkaException(m.error())
            n += 1
            last = time.monotonic()
            headers = {}
            for k, v in m.headers() or []:
                headers[k] = text(v)
            out = {
                "topic": m.topic(), "partition": m.partition(), "offset": m.offset(),
                "key": text(m.key()), "headers": headers, "value": text(m.value()),
            }
            try:
                if dec is not None:
                    obj, out["schema_id"] = dec.decode(m, m.value())
                    out["value"] = None if obj is None else json.dumps(obj, sort_keys=True)
                if kdec is not None:
                    out["key"], out["key_schema_id"] = kdec.decode(m, m.key())
            except Exception as e:  # a deserializer refused the record
                print(f"rdkafka-consume: deserializer refused offset {m.offset()}: {e!r}", file=sys.stderr)
                return 2
            print(json.dumps(out), flush=True)
    finally:
        c.close()
    print(f"rdkafka-consume: {n} records from {a.topic} ({a.isolation})", file=sys.stderr)
    return 0 if (a.expect == 0 or n >= a.expect) else 1


if __name__ == "__main__":
    sys.exit(main())

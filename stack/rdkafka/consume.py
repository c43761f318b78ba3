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

Usage: consume.py --brokers HOST:PORT --topic T [--isolation read_committed]
                  [--expect N] [--linger S] [--idle S] [--timeout S]
"""

import argparse
import json
import sys
import time
import uuid

from confluent_kafka import Consumer, KafkaException


def text(b):
    return None if b is None else b.decode("utf-8", "replace")


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
    a = ap.parse_args()

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
            print(json.dumps({
                "topic": m.topic(), "partition": m.partition(), "offset": m.offset(),
                "key": text(m.key()), "headers": headers, "value": text(m.value()),
            }), flush=True)
    finally:
        c.close()
    print(f"rdkafka-consume: {n} records from {a.topic} ({a.isolation})", file=sys.stderr)
    return 0 if (a.expect == 0 or n >= a.expect) else 1


if __name__ == "__main__":
    sys.exit(main())

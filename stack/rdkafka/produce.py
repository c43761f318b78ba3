"""Produce keyed records with librdkafka (confluent-kafka).

A client walpost did not write places keys on partitions with one of
librdkafka's partitioners: each line of stdin (UTF-8, without its line
end) is one record's key, the value empty. It waits until every record
is acknowledged and prints a summary line on stderr; it exits 1 when a
record failed.

Usage: produce.py --brokers HOST:PORT --topic T --partitioner NAME
       (NAME: librdkafka's partitioner setting, e.g. murmur2,
       consistent_random, fnv1a)
"""

import argparse
import sys

from confluent_kafka import Producer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitioner", required=True)
    a = ap.parse_args()

    p = Producer({
        "bootstrap.servers": a.brokers,
        "partitioner": a.partitioner,
        "enable.idempotence": True,
        "linger.ms": 5,
    })
    failed = []

    def report(err, msg):
        if err is not None:
            failed.append(err)

    n = 0
    for line in sys.stdin.buffer:
        key = line.rstrip(b"\n")
        while True:
            try:
                p.produce(a.topic, key=key, value=b"", on_delivery=report)
                break
            except BufferError:
                p.poll(0.1)
        n += 1
    left = p.flush(30)
    print("librdkafka producer (partitioner=%s): %d records, %d failed, %d unsent"
          % (a.partitioner, n, len(failed), left), file=sys.stderr)
    if failed:
        print("first failure: %s" % failed[0], file=sys.stderr)
    sys.exit(1 if failed or left else 0)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Checks that the broker at $KAFKA_BOOTSTRAP and the independent clients agree, before any
Weir code is trusted against them.

Two independent clients take part: confluent-kafka (librdkafka) writes and reads, and
kafka-python reads the same records again. For every codec it checks that keys, values
(binary, empty and null), headers (order, duplicates, null values), timestamps, partitions
and offsets read back exactly as written; that librdkafka's murmur2 partitioner matches
the Java formula; that a committed transaction is visible to read_committed; and whether
read_committed hides an aborted transaction. tansu 0.6 is known not to (shared/NOTES.md
§1), so that check reports KNOWN rather than FAIL when the broker gets it wrong, and PASS
on a broker that gets it right; with --strict (for weir-testkit, which must get it right)
it FAILs.

Run with the python from scripts/pyenv.sh. Exit status 0 unless a check FAILs.
"""

import argparse
import os
import sys
import time
import uuid

from kafka import KafkaConsumer, TopicPartition as KpTopicPartition
from kafka.partitioner.default import murmur2

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kafka_tool  # noqa: E402  (sibling module, found through the path set above)

PARTITIONS = 3
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


class Probe:
    def __init__(self):
        self.failed = 0
        self.passed = 0

    def check(self, ok, what, detail=""):
        if ok:
            self.passed += 1
            print(f"PASS  {what}")
        else:
            self.failed += 1
            print(f"FAIL  {what}: {detail}")
        return ok


def sample_records(codec):
    """Records covering the awkward cases; distinct per codec so mixups show."""
    base_ts = 1_700_000_000_000
    records = []
    for i in range(12):
        key = None if i % 4 == 3 else f"{codec}-key-{i}".encode()
        if i % 5 == 4:
            value = None
        elif i % 5 == 2:
            value = b""
        else:
            # Non-UTF-8 and repetitive bytes: the codecs must get both right.
            value = bytes([0xFF, 0x00, i]) + f"{codec}-value-{i}-".encode() * (i + 1)
        headers = [("h", f"first-{i}".encode()), ("h", None), ("bin", bytes([0xFE, i]))]
        record = {"key": key, "value": value, "headers": headers, "timestamp": base_ts + i}
        if i % 6 == 5:
            record["partition"] = i % PARTITIONS  # explicit partition beats the partitioner
        records.append(record)
    return records


def java_partition(key, partitions):
    """Kafka's DefaultPartitioner for a keyed record: toPositive(murmur2(key)) % n."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def read_with_kafka_python(bootstrap, topic, want, timeout):
    """Reads every partition from the start with kafka-python until `want` records."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False, fetch_max_wait_ms=100,
                             client_id="weir-interop-probe-kafka-python")
    try:
        tps = [KpTopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got = []
        deadline = time.monotonic() + timeout
        while len(got) < want and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=200).values():
                got.extend(batch)
        return got
    finally:
        consumer.close()


def check_codec(probe, bootstrap, codec, timeout):
    topic = f"weir-probe-{codec}-{uuid.uuid4().hex[:8]}"
    kafka_tool.create_topic(bootstrap, topic, partitions=PARTITIONS)
    records = sample_records(codec)
    reports = kafka_tool.produce_records(bootstrap, topic, records, compression=codec)
    errors = [r["error"] for r in reports if "error" in r]
    if not probe.check(not errors, f"[{codec}] produce {len(records)} records", errors[:3]):
        return
    expected = {}
    wrong_partition = []
    for record, report in zip(records, reports):
        expected[(report["partition"], report["offset"])] = record
        if "partition" in record:
            want_p = record["partition"]
        elif record["key"] is not None:
            want_p = java_partition(record["key"], PARTITIONS)
        else:
            continue  # null key: murmur2_random picks any partition
        if report["partition"] != want_p:
            wrong_partition.append((record["key"], report["partition"], want_p))
    probe.check(not wrong_partition, f"[{codec}] partitions match Java's murmur2 formula",
                wrong_partition[:3])

    got, timed_out = kafka_tool.consume_records(bootstrap, topic, from_beginning=True,
                                                until_eof=True, timeout=timeout)
    seen = {(m.partition(), m.offset()): m for m in got}
    mismatches = []
    for position, record in expected.items():
        msg = seen.get(position)
        actual = None if msg is None else {
            "key": msg.key(), "value": msg.value(), "headers": msg.headers() or [],
            "timestamp": msg.timestamp()[1]}
        want = {"key": record["key"], "value": record["value"], "headers": record["headers"],
                "timestamp": record["timestamp"]}
        if actual != want:
            mismatches.append((position, want, actual))
    probe.check(not timed_out and len(got) == len(records) and not mismatches,
                f"[{codec}] confluent-kafka reads back all fields",
                f"timed_out={timed_out} got={len(got)} first mismatches={mismatches[:2]}")

    kp = read_with_kafka_python(bootstrap, topic, len(records), timeout)
    kp_mismatches = []
    for rec in kp:
        record = expected.get((rec.partition, rec.offset))
        actual = (rec.key, rec.value, [(k, v) for k, v in rec.headers], rec.timestamp)
        want = None if record is None else (
            record["key"], record["value"], record["headers"], record["timestamp"])
        if actual != want:
            kp_mismatches.append(((rec.partition, rec.offset), want, actual))
    probe.check(len(kp) == len(records) and not kp_mismatches,
                f"[{codec}] kafka-python reads back all fields",
                f"got={len(kp)} first mismatches={kp_mismatches[:2]}")


def check_transactions(probe, bootstrap, timeout, strict):
    topic = f"weir-probe-txn-{uuid.uuid4().hex[:8]}"
    kafka_tool.create_topic(bootstrap, topic, partitions=1)
    txn_id = f"weir-probe-{uuid.uuid4().hex[:8]}"
    committed = [{"key": b"c", "value": f"committed-{i}".encode()} for i in range(3)]
    aborted = [{"key": b"a", "value": f"aborted-{i}".encode()} for i in range(2)]
    kafka_tool.produce_records(bootstrap, topic, committed, transactional_id=txn_id)
    kafka_tool.produce_records(bootstrap, topic, aborted, transactional_id=txn_id,
                               commit=False)
    after = [{"key": b"c", "value": b"after-abort"}]
    kafka_tool.produce_records(bootstrap, topic, after, transactional_id=txn_id)

    def values(isolation):
        got, timed_out = kafka_tool.consume_records(
            bootstrap, topic, from_beginning=True, until_eof=True, isolation=isolation,
            timeout=timeout)
        return [m.value() for m in got], timed_out

    all_values, timed_out = values("read_uncommitted")
    probe.check(not timed_out and len(all_values) == 6,
                "read_uncommitted sees committed and aborted records, no control records",
                f"timed_out={timed_out} values={all_values}")
    rc_values, timed_out = values("read_committed")
    want = [r["value"] for r in committed + after]
    if rc_values == want and not timed_out:
        probe.check(True, "read_committed hides the aborted transaction")
    elif (not strict and set(rc_values) >= set(want)
          and any(v.startswith(b"aborted") for v in rc_values)):
        print("KNOWN read_committed returned aborted records: this broker sends an empty "
              "aborted-transactions list (tansu 0.6, shared/NOTES.md §1)")
    else:
        probe.check(False, "read_committed", f"timed_out={timed_out} values={rc_values}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-b", "--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP"))
    parser.add_argument("--timeout", type=float, default=15.0)
    parser.add_argument("--strict", action="store_true",
                        help="no KNOWN allowance: read_committed must hide aborted records")
    args = parser.parse_args()
    if not args.bootstrap:
        print("probe_tansu: set KAFKA_BOOTSTRAP or pass -b HOST:PORT", file=sys.stderr)
        return 1
    probe = Probe()
    started = time.monotonic()
    try:
        for codec in CODECS:
            check_codec(probe, args.bootstrap, codec, args.timeout)
        check_transactions(probe, args.bootstrap, args.timeout, args.strict)
    except kafka_tool.ToolError as err:
        probe.check(False, "probe", str(err))
    print(f"probe: {probe.passed} checks passed, {probe.failed} failed against "
          f"{args.bootstrap} in {time.monotonic() - started:.1f}s")
    return 1 if probe.failed else 0


if __name__ == "__main__":
    sys.exit(main())

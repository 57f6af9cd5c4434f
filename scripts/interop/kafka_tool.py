#!/usr/bin/env python3
"""A small CLI around confluent-kafka (librdkafka), so Weir's Rust tests can drive an
independent Kafka client and compare what it sees with what Weir sees.

Run it with the python from scripts/pyenv.sh ($WEIR_PYTHON). Records travel as JSON lines.

  produce      stdin: one record per line; stdout: one delivery report per record, in order
  txn-produce  the same inside one transaction, then --commit or --abort
  consume      stdout: one record per line (--client kafka-python: read by kafka-python)
  create-topic create a topic with partitions and configs
  offsets      stdout: low and high watermark per partition

A record (produce input and consume output):

  {"key": "k", "value": "v", "headers": [["name", "value"], ["n2", null]],
   "timestamp": 1700000000000, "partition": 0}

key, value and header values are strings in the chosen --encoding (utf8, or base64 for
arbitrary bytes), or null. Header names are always plain strings; headers keep their order
and duplicates. On input every field is optional (no partition: librdkafka's murmur2_random
partitioner, the same as Java's for keyed records; no timestamp: now). consume adds
"topic", "offset" and "timestamp_type" ("create" or "log_append"); a delivery report is
{"topic", "partition", "offset", "timestamp"} or {"error": "..."}.

Exit status: 0 success; 1 a Kafka or input error (message on stderr); 3 consume timed out
before --count records arrived or before --until-eof reached the end (the records it got
are still printed).
"""

import argparse
import base64
import json
import os
import sys
import threading
import time

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
EXIT_KAFKA_ERROR = 1
EXIT_TIMED_OUT = 3


class ToolError(Exception):
    """An error worth one line on stderr and exit status 1."""


# ---- bytes <-> JSON -------------------------------------------------------------------


def decode_field(text, encoding, what):
    """JSON string (or null) -> bytes (or None)."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise ToolError(f"{what} must be a string or null, got {type(text).__name__}")
    if encoding == "base64":
        try:
            return base64.b64decode(text, validate=True)
        except ValueError as err:
            raise ToolError(f"{what} is not valid base64: {err}") from err
    return text.encode("utf-8")


def encode_field(data, encoding, what):
    """bytes (or None) -> JSON string (or null). Never lossy: bad UTF-8 is an error."""
    if data is None:
        return None
    if encoding == "base64":
        return base64.b64encode(data).decode("ascii")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ToolError(f"{what} is not valid UTF-8 ({err}); use --encoding base64") from err


def parse_record(line, encoding, lineno):
    """One input JSON line -> dict of produce() keyword arguments."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as err:
        raise ToolError(f"stdin line {lineno}: not JSON: {err}") from err
    if not isinstance(obj, dict):
        raise ToolError(f"stdin line {lineno}: expected a JSON object")
    where = f"stdin line {lineno}"
    record = {
        "key": decode_field(obj.get("key"), encoding, f"{where}: key"),
        "value": decode_field(obj.get("value"), encoding, f"{where}: value"),
    }
    headers = obj.get("headers") or []
    if isinstance(headers, dict):  # convenience form; a list keeps order and duplicates
        headers = list(headers.items())
    record["headers"] = []
    for pair in headers:
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)):
            raise ToolError(f"{where}: each header must be [name, value], got {pair!r}")
        value = decode_field(pair[1], encoding, f"{where}: header {pair[0]!r}")
        record["headers"].append((pair[0], value))
    for field in ("timestamp", "partition"):
        if obj.get(field) is not None:
            if not isinstance(obj[field], int):
                raise ToolError(f"{where}: {field} must be an integer")
            record[field] = obj[field]
    return record


def read_records(stream, encoding):
    records = []
    for lineno, line in enumerate(stream, start=1):
        if line.strip():
            records.append(parse_record(line, encoding, lineno))
    return records


def message_to_json(msg, encoding):
    where = f"{msg.topic()}/{msg.partition()}@{msg.offset()}"
    ts_type, ts = msg.timestamp()
    headers = [
        [name, encode_field(value, encoding, f"{where} header {name!r}")]
        for name, value in (msg.headers() or [])
    ]
    return {
        "topic": msg.topic(),
        "partition": msg.partition(),
        "offset": msg.offset(),
        "key": encode_field(msg.key(), encoding, f"{where} key"),
        "value": encode_field(msg.value(), encoding, f"{where} value"),
        "headers": headers,
        "timestamp": None if ts_type == TIMESTAMP_NOT_AVAILABLE else ts,
        "timestamp_type": "log_append" if ts_type == TIMESTAMP_LOG_APPEND_TIME else "create",
    }


# ---- clients ----------------------------------------------------------------------------


def base_config(bootstrap, extra):
    config = {
        "bootstrap.servers": bootstrap,
        "client.id": "weir-interop-kafka-tool",
        # Warnings and errors only: librdkafka's info lines would clutter test output.
        "log_level": 4,
    }
    config.update(extra or {})
    return config


def produce_records(bootstrap, topic, records, *, compression="none", acks="all",
                    idempotence=True, linger_ms=5, transactional_id=None, commit=True,
                    timeout=30.0, extra=None):
    """Produces records in order; returns one delivery report dict per record.

    With transactional_id, all records go into one transaction that is then committed
    (commit=True) or aborted. Raises ToolError if the transaction itself fails.
    """
    config = base_config(bootstrap, {
        "compression.type": compression,
        "acks": acks,
        "enable.idempotence": idempotence,
        "linger.ms": linger_ms,
        # librdkafka's default (consistent_random, CRC32) differs from Java's partitioner.
        "partitioner": "murmur2_random",
        # The default of 300 s would let a test hang long after `timeout`.
        "message.timeout.ms": max(1000, int(timeout * 1000)),
    })
    if transactional_id is not None:
        config["transactional.id"] = transactional_id
        # librdkafka requires message.timeout.ms <= transaction.timeout.ms.
        config["transaction.timeout.ms"] = max(60000, config["message.timeout.ms"])
    config.update(extra or {})
    producer = Producer(config)
    reports = [None] * len(records)

    def on_delivery(index):
        def report(err, msg):
            if err is not None:
                reports[index] = {"error": str(err)}
            else:
                reports[index] = {
                    "topic": msg.topic(),
                    "partition": msg.partition(),
                    "offset": msg.offset(),
                    "timestamp": msg.timestamp()[1],
                }
        return report

    try:
        if transactional_id is not None:
            producer.init_transactions(timeout)
            producer.begin_transaction()
        for index, record in enumerate(records):
            kwargs = {"key": record.get("key"), "value": record.get("value"),
                      "headers": record.get("headers") or None, "on_delivery": on_delivery(index)}
            for field in ("timestamp", "partition"):
                if field in record:
                    kwargs[field] = record[field]
            while True:
                try:
                    producer.produce(topic, **kwargs)
                    break
                except BufferError:  # local queue full: serve callbacks, then retry
                    producer.poll(0.1)
        if transactional_id is not None:
            # Flush before ending the transaction: abort_transaction would otherwise purge
            # records still lingering locally, and an abort test needs them on the broker.
            remaining = producer.flush(timeout)
            if remaining:
                raise ToolError(f"producer: {remaining} records undelivered after {timeout}s")
            if commit:
                producer.commit_transaction(timeout)
            else:
                producer.abort_transaction(timeout)
        remaining = producer.flush(timeout)
    except KafkaException as err:
        raise ToolError(f"producer: {err.args[0]}") from err
    if remaining:
        raise ToolError(f"producer: {remaining} records still undelivered after {timeout}s")
    return [r if r is not None else {"error": "no delivery report"} for r in reports]


def topic_partitions(client, topic, timeout):
    metadata = client.list_topics(topic, timeout=timeout)
    info = metadata.topics.get(topic)
    if info is None:
        raise ToolError(f"topic {topic!r} not in metadata")
    if info.error is not None:
        raise ToolError(f"topic {topic!r}: {info.error}")
    return sorted(info.partitions)


def consume_records(bootstrap, topic, *, count=None, isolation="read_uncommitted",
                    from_beginning=False, group_id=None, partitions=None, timeout=10.0,
                    until_eof=False, commit=False, extra=None, on_record=None):
    """Consumes records; returns (records, timed_out).

    Without group_id the partitions (all, or the given ones) are assigned directly. Stops
    after `count` records, at the end of every assigned partition (until_eof), or when
    `timeout` seconds have passed, whichever comes first. `on_record(msg)` sees each record
    as it arrives and returns what to keep (default: the raw message).
    """
    config = base_config(bootstrap, {
        "isolation.level": isolation,
        "auto.offset.reset": "earliest" if from_beginning else "latest",
        "enable.auto.commit": False,
        "enable.partition.eof": until_eof,
        # tansu always waits the full max wait before answering a fetch.
        "fetch.wait.max.ms": 100,
        "group.id": group_id or "weir-interop-unused",
        # tansu holds a group's first JoinGroup for about half the session timeout; the
        # 45 s default would eat the whole consume timeout.
        "session.timeout.ms": 6000,
    })
    config.update(extra or {})
    consumer = Consumer(config)
    deadline = time.monotonic() + timeout
    records = []
    try:
        if group_id is None:
            wanted = partitions if partitions else topic_partitions(consumer, topic, timeout)
            start = OFFSET_BEGINNING if from_beginning else OFFSET_END
            consumer.assign([TopicPartition(topic, p, start) for p in wanted])
            pending_eof = set(wanted)
        else:
            consumer.subscribe([topic])
            pending_eof = None  # the assignment is only known after the rebalance
        while count is None or len(records) < count:
            left = deadline - time.monotonic()
            if left <= 0:
                return records, True
            msg = consumer.poll(min(left, 0.5))
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    if pending_eof is None:
                        pending_eof = {tp.partition for tp in consumer.assignment()}
                    pending_eof.discard(msg.partition())
                    if until_eof and not pending_eof:
                        break
                    continue
                if err.fatal() or not err.retriable():
                    raise ToolError(f"consumer: {err}")
                print(f"kafka_tool: consumer: {err} (retrying)", file=sys.stderr)
                continue
            records.append(on_record(msg) if on_record else msg)
        if commit and group_id is not None and records:
            consumer.commit(asynchronous=False)
        return records, False
    except KafkaException as err:
        raise ToolError(f"consumer: {err.args[0]}") from err
    finally:
        consumer.close()


def create_topic(bootstrap, topic, *, partitions=1, configs=None, if_not_exists=False,
                 timeout=30.0, extra=None):
    admin = AdminClient(base_config(bootstrap, extra))
    new = NewTopic(topic, num_partitions=partitions, replication_factor=1, config=configs or {})
    future = admin.create_topics([new], operation_timeout=timeout)[topic]
    try:
        future.result(timeout)
    except KafkaException as err:
        kerr = err.args[0]
        if if_not_exists and kerr.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return
        raise ToolError(f"create topic {topic!r}: {kerr}") from err


def watermarks(bootstrap, topic, *, timeout=10.0, extra=None):
    consumer = Consumer(base_config(bootstrap, {"group.id": "weir-interop-unused", **(extra or {})}))
    try:
        result = []
        for p in topic_partitions(consumer, topic, timeout):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout)
            result.append({"partition": p, "low": low, "high": high})
        return result
    except KafkaException as err:
        raise ToolError(f"offsets: {err.args[0]}") from err
    finally:
        consumer.close()


def kafka_python_record_to_json(record, encoding):
    """A kafka-python ConsumerRecord -> the same JSON shape as message_to_json."""
    where = f"{record.topic}/{record.partition}@{record.offset}"
    headers = [
        [name, encode_field(value, encoding, f"{where} header {name!r}")]
        for name, value in (record.headers or [])
    ]
    return {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "key": encode_field(record.key, encoding, f"{where} key"),
        "value": encode_field(record.value, encoding, f"{where} value"),
        "headers": headers,
        "timestamp": None if record.timestamp is None or record.timestamp < 0 else record.timestamp,
        "timestamp_type": "log_append" if record.timestamp_type == 1 else "create",
    }


def consume_records_kafka_python(bootstrap, topic, *, count=None, isolation="read_uncommitted",
                                 from_beginning=False, partitions=None, timeout=10.0,
                                 until_eof=False, on_record=None):
    """consume_records with kafka-python (a pure-Python client) instead of librdkafka.

    Partitions are always assigned directly (no group). The end of a partition is where the
    position reaches the high watermark of the last fetch response, not a ListOffsets answer
    (tansu's "latest" is wrong, see shared/NOTES.md). Returns (records, timed_out).
    """
    # Imported here so that the librdkafka commands work without kafka-python installed.
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTopicPartition
    from kafka.errors import KafkaError as KpKafkaError

    deadline = time.monotonic() + timeout
    try:
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap.split(","), group_id=None, enable_auto_commit=False,
            client_id="weir-interop-kafka-tool-kafka-python", isolation_level=isolation,
            auto_offset_reset="earliest" if from_beginning else "latest",
            # tansu always waits the full max wait before answering a fetch.
            fetch_max_wait_ms=100, request_timeout_ms=max(1000, int(timeout * 1000)) + 5000)
    except KpKafkaError as err:
        raise ToolError(f"kafka-python consumer: {err}") from err
    records = []
    try:
        if partitions:
            wanted = sorted(partitions)
        else:
            wanted = None
            while wanted is None:
                found = consumer.partitions_for_topic(topic)
                if found:
                    wanted = sorted(found)
                elif time.monotonic() >= deadline:
                    raise ToolError(f"topic {topic!r} not in kafka-python's metadata")
                else:
                    time.sleep(0.1)  # poll interval of a bounded metadata wait
        tps = [KpTopicPartition(topic, p) for p in wanted]
        consumer.assign(tps)
        if from_beginning:
            consumer.seek_to_beginning(*tps)
        else:
            consumer.seek_to_end(*tps)
        while count is None or len(records) < count:
            left = deadline - time.monotonic()
            if left <= 0:
                return records, True
            polled = consumer.poll(timeout_ms=int(min(left, 0.5) * 1000))
            for tp in sorted(polled, key=lambda tp: tp.partition):
                for record in polled[tp]:
                    records.append(on_record(record) if on_record else record)
            if until_eof:
                at_end = True
                for tp in tps:
                    high = consumer.highwater(tp)
                    if high is None or consumer.position(tp) < high:
                        at_end = False
                        break
                if at_end:
                    break
        return records, False
    except KpKafkaError as err:
        raise ToolError(f"kafka-python consumer: {err}") from err
    finally:
        consumer.close()


# ---- command line -----------------------------------------------------------------------


def parse_extra(pairs):
    extra = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ToolError(f"-X expects key=value, got {pair!r}")
        extra[key] = value
    return extra


def emit(obj):
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def cmd_produce(args, extra):
    records = read_records(sys.stdin, args.encoding)
    txn = getattr(args, "transactional_id", None)
    reports = produce_records(
        args.bootstrap, args.topic, records, compression=args.compression, acks=args.acks,
        idempotence=not args.no_idempotence, linger_ms=args.linger_ms, transactional_id=txn,
        commit=getattr(args, "commit", True), timeout=args.timeout, extra=extra)
    for report in reports:
        emit(report)
    failed = sum(1 for r in reports if "error" in r)
    if failed:
        raise ToolError(f"{failed} of {len(reports)} records failed")


def cmd_consume(args, extra):
    def print_record(msg):
        emit(message_to_json(msg, args.encoding))
        return None

    if args.client == "kafka-python":
        if args.group_id or args.commit or extra:
            raise ToolError("--client kafka-python supports neither --group-id, --commit nor -X")

        def print_kafka_python_record(record):
            emit(kafka_python_record_to_json(record, args.encoding))
            return None

        records, timed_out = consume_records_kafka_python(
            args.bootstrap, args.topic, count=args.count, isolation=args.isolation,
            from_beginning=args.from_beginning, partitions=args.partition,
            timeout=args.timeout, until_eof=args.until_eof,
            on_record=print_kafka_python_record)
    else:
        records, timed_out = consume_records(
            args.bootstrap, args.topic, count=args.count, isolation=args.isolation,
            from_beginning=args.from_beginning, group_id=args.group_id,
            partitions=args.partition, timeout=args.timeout, until_eof=args.until_eof,
            commit=args.commit, extra=extra, on_record=print_record)
    if timed_out and args.count is not None:
        print(f"kafka_tool: timed out after {args.timeout}s with {len(records)} of "
              f"{args.count} records", file=sys.stderr)
        return EXIT_TIMED_OUT
    if timed_out and args.until_eof:
        print(f"kafka_tool: timed out after {args.timeout}s before the end of every "
              f"partition ({len(records)} records)", file=sys.stderr)
        return EXIT_TIMED_OUT
    return 0


def cmd_group_consume(args, extra):
    """Consumes as a member of a group for `--run-for` seconds (or until stdin closes, with
    `--until-stdin-closes`), printing every assignment
    change as {"event": "assigned"|"revoked"|"lost", "partitions": [...], "ts": wall
    seconds} (revoked is printed when the callback returns, after its commit) and every
    record as {"partition": p, "offset": o, "ts": ...}. For mixed-group tests."""
    config = base_config(args.bootstrap, {
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "fetch.wait.max.ms": 100,
        "group.id": args.group_id,
        "session.timeout.ms": 6000,
        "partition.assignment.strategy": args.strategy,
    })
    config.update(extra or {})
    consumer = Consumer(config)

    def parts(partitions):
        return sorted(tp.partition for tp in partitions)

    def on_assign(c, partitions):
        emit({"event": "assigned", "partitions": parts(partitions), "ts": time.time()})

    def on_revoke(c, partitions):
        try:
            c.commit(asynchronous=False)
        except KafkaException:
            pass  # nothing consumed yet, or the generation is gone
        emit({"event": "revoked", "partitions": parts(partitions), "ts": time.time()})

    def on_lost(c, partitions):
        emit({"event": "lost", "partitions": parts(partitions), "ts": time.time()})

    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke,
                       on_lost=on_lost)
    deadline = time.monotonic() + args.run_for
    stop = threading.Event()
    if args.until_stdin_closes:
        # The caller decides when this member leaves: it closes our stdin.
        def wait_for_eof():
            for _ in sys.stdin:
                pass
            stop.set()
        threading.Thread(target=wait_for_eof, daemon=True).start()
    try:
        while time.monotonic() < deadline and not stop.is_set():
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().fatal():
                    raise ToolError(f"consumer: {msg.error()}")
                continue
            emit({"partition": msg.partition(), "offset": msg.offset(), "ts": time.time()})
    finally:
        consumer.close()
        emit({"event": "closed", "ts": time.time()})
    return 0


def cmd_create_topic(args, extra):
    create_topic(args.bootstrap, args.topic, partitions=args.partitions,
                 configs=parse_extra(args.config), if_not_exists=args.if_not_exists,
                 timeout=args.timeout, extra=extra)


def cmd_offsets(args, extra):
    for row in watermarks(args.bootstrap, args.topic, timeout=args.timeout, extra=extra):
        emit(row)


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    def common_args(p, defaults):
        # Accepted before or after the subcommand; SUPPRESS keeps a subcommand's parser from
        # overwriting a value given before it.
        def default(value):
            return value if defaults else argparse.SUPPRESS

        p.add_argument("-b", "--bootstrap", default=default(os.environ.get("KAFKA_BOOTSTRAP")),
                       help="HOST:PORT[,...] (default: $KAFKA_BOOTSTRAP)")
        p.add_argument("--encoding", choices=("utf8", "base64"), default=default("utf8"),
                       help="how keys, values and header values are written in JSON")
        p.add_argument("-X", dest="extra", action="append", metavar="KEY=VALUE",
                       default=default(None), help="extra librdkafka property (repeatable)")

    common_args(parser, defaults=True)
    sub_common = argparse.ArgumentParser(add_help=False)
    common_args(sub_common, defaults=False)
    subparsers = parser.add_subparsers(dest="command", required=True)

    class Sub:
        """add_parser with the common options attached."""

        @staticmethod
        def add_parser(name, **kwargs):
            return subparsers.add_parser(name, parents=[sub_common], **kwargs)

    sub = Sub()

    def producer_args(p):
        p.add_argument("-t", "--topic", required=True)
        p.add_argument("-z", "--compression", choices=CODECS, default="none")
        p.add_argument("--acks", choices=("0", "1", "all"), default="all")
        p.add_argument("--no-idempotence", action="store_true")
        p.add_argument("--linger-ms", type=int, default=5)
        p.add_argument("--timeout", type=float, default=30.0, help="seconds (default 30)")

    producer_args(sub.add_parser("produce", help="produce JSON-line records from stdin"))
    txn = sub.add_parser("txn-produce", help="produce stdin records in one transaction")
    producer_args(txn)
    txn.add_argument("--transactional-id", required=True)
    outcome = txn.add_mutually_exclusive_group(required=True)
    outcome.add_argument("--commit", dest="commit", action="store_true")
    outcome.add_argument("--abort", dest="commit", action="store_false")

    consume = sub.add_parser("consume", help="print records as JSON lines")
    consume.add_argument("-t", "--topic", required=True)
    consume.add_argument("-c", "--count", type=int, help="stop after this many records")
    consume.add_argument("--isolation", choices=("read_uncommitted", "read_committed"),
                         default="read_uncommitted")
    consume.add_argument("--from-beginning", action="store_true")
    consume.add_argument("-g", "--group-id", help="join this group (default: assign directly)")
    consume.add_argument("--commit", action="store_true", help="commit offsets at the end (group)")
    consume.add_argument("-p", "--partition", type=int, action="append",
                         help="only this partition (repeatable; not with --group-id)")
    consume.add_argument("--until-eof", action="store_true",
                         help="stop at the end of every assigned partition")
    consume.add_argument("--timeout", type=float, default=10.0, help="seconds (default 10)")
    consume.add_argument("--client", choices=("confluent-kafka", "kafka-python"),
                         default="confluent-kafka",
                         help="the client that reads: librdkafka (default) or kafka-python "
                              "(direct assignment only: no --group-id, --commit or -X)")

    group_consume = sub.add_parser(
        "group-consume", help="consume in a group, printing assignment events and records")
    group_consume.add_argument("-t", "--topic", required=True)
    group_consume.add_argument("-g", "--group-id", required=True)
    group_consume.add_argument("--strategy", default="cooperative-sticky",
                               help="partition.assignment.strategy (default cooperative-sticky)")
    group_consume.add_argument("--run-for", type=float, default=20.0,
                               help="seconds to stay in the group (default 20)")
    group_consume.add_argument("--until-stdin-closes", action="store_true",
                               help="leave the group when stdin closes (--run-for still "
                                    "caps the stay)")

    create = sub.add_parser("create-topic", help="create a topic")
    create.add_argument("-t", "--topic", required=True)
    create.add_argument("--partitions", type=int, default=1)
    create.add_argument("--config", action="append", metavar="KEY=VALUE")
    create.add_argument("--if-not-exists", action="store_true")
    create.add_argument("--timeout", type=float, default=30.0)

    offsets = sub.add_parser("offsets", help="print low/high watermarks per partition")
    offsets.add_argument("-t", "--topic", required=True)
    offsets.add_argument("--timeout", type=float, default=10.0)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    if not args.bootstrap:
        print("kafka_tool: no broker: pass -b HOST:PORT or set KAFKA_BOOTSTRAP", file=sys.stderr)
        return EXIT_KAFKA_ERROR
    if args.command == "consume" and args.group_id and args.partition:
        print("kafka_tool: --partition and --group-id exclude each other", file=sys.stderr)
        return EXIT_KAFKA_ERROR
    commands = {"produce": cmd_produce, "txn-produce": cmd_produce, "consume": cmd_consume,
                "create-topic": cmd_create_topic, "offsets": cmd_offsets,
                "group-consume": cmd_group_consume}
    try:
        return commands[args.command](args, parse_extra(args.extra)) or 0
    except ToolError as err:
        print(f"kafka_tool: {err}", file=sys.stderr)
        return EXIT_KAFKA_ERROR


if __name__ == "__main__":
    sys.exit(main())

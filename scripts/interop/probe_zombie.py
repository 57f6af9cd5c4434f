#!/usr/bin/env python3
"""Checks that a broker fences a zombie transactional producer the way Apache Kafka does,
as librdkafka (confluent-kafka) sees it.

  probe_zombie.py --bootstrap HOST:PORT [--invert]

1. Producer A (transactional.id T): init_transactions, begin_transaction, produce one
   record and flush it, so the transaction is open on the broker with A's epoch.
2. Producer B (the same T): init_transactions. The coordinator bumps the epoch and aborts
   A's open transaction (KIP-447 / KIP-588).
3. A, now a zombie: produce one more record, then commit_transaction.

Passes if A's produce or commit fails with a FATAL error (KafkaError.fatal() true, and
not retriable, not txn_requires_abort), whose code is _FENCED, PRODUCER_FENCED or
INVALID_PRODUCER_EPOCH; B can still run a transaction of its own and commit it; and a
read_committed consumer then sees B's record only (A's transaction was aborted).
A commit that succeeds, or an abortable (non-fatal) error, is a FAIL: a zombie must never
be told it may abort and carry on.

--invert asserts the opposite (A's commit succeeds), to show what a failure looks like.
Run it with the python from scripts/pyenv.sh. Exit status 0 pass, 1 fail.
"""

import argparse
import os
import sys
import time
import uuid

from confluent_kafka import KafkaError, KafkaException, Producer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kafka_tool  # noqa: E402  (sibling module, found through the path set above)

FENCED_CODES = {
    KafkaError._FENCED: "_FENCED",
    KafkaError.PRODUCER_FENCED: "PRODUCER_FENCED",
    KafkaError.INVALID_PRODUCER_EPOCH: "INVALID_PRODUCER_EPOCH",
}


def describe(err):
    return (f"{err.name()} (code {err.code()}) fatal={err.fatal()} "
            f"retriable={err.retriable()} txn_requires_abort={err.txn_requires_abort()}: "
            f"{err.str()}")


def producer(bootstrap, txn_id, name):
    return Producer({
        "bootstrap.servers": bootstrap,
        "client.id": f"weir-zombie-probe-{name}",
        "transactional.id": txn_id,
        "transaction.timeout.ms": 60000,
        "linger.ms": 0,
        "message.timeout.ms": 10000,
    })


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-b", "--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP"))
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--invert", action="store_true",
                        help="expect the zombie's commit to succeed (shows the FAIL output)")
    args = parser.parse_args()
    if not args.bootstrap:
        print("probe_zombie: set KAFKA_BOOTSTRAP or pass -b HOST:PORT", file=sys.stderr)
        return 1
    started = time.monotonic()
    topic = f"weir-zombie-{uuid.uuid4().hex[:8]}"
    txn_id = f"weir-zombie-{uuid.uuid4().hex[:8]}"
    kafka_tool.create_topic(args.bootstrap, topic, partitions=1)

    delivery_errors = []

    def on_delivery(err, _msg):
        if err is not None:
            delivery_errors.append(err)

    a = producer(args.bootstrap, txn_id, "a")
    a.init_transactions(args.timeout)
    a.begin_transaction()
    a.produce(topic, b"from-a-before-fence", on_delivery=on_delivery)
    left = a.flush(args.timeout)
    if left or delivery_errors:
        print(f"FAIL  setup: A's first record not delivered (left={left}, "
              f"errors={[describe(e) for e in delivery_errors]})")
        return 1
    print(f"ok    A (transactional.id {txn_id}) has an open transaction on {topic}")

    b = producer(args.bootstrap, txn_id, "b")
    b.init_transactions(args.timeout)
    print("ok    B initialised the same transactional.id (epoch bumped)")

    # A is a zombie now. Its next write or its commit must be fenced, fatally.
    zombie_error = None
    stage = None
    try:
        # No delivery callback here: commit_transaction flushes and reports the error. (A
        # Python delivery callback run by flush() while the fatal error is raised becomes a
        # SystemError in confluent-kafka 2.16.)
        a.produce(topic, b"from-a-after-fence")
        stage = "produce"
        a.commit_transaction(args.timeout)
        stage = "commit"
    except KafkaException as exc:
        zombie_error = exc.args[0]
        stage = "produce" if stage is None else "commit_transaction"
    for err in delivery_errors:
        print(f"info  A's delivery report: {describe(err)}")

    failures = []
    if zombie_error is None:
        outcome = "A's commit_transaction SUCCEEDED after B's init_transactions"
        if not args.invert:
            failures.append(outcome + ": the zombie was not fenced")
    else:
        outcome = f"A's {stage} failed: {describe(zombie_error)}"
        if args.invert:
            failures.append(outcome + " (--invert expects the commit to succeed)")
        else:
            if not zombie_error.fatal():
                failures.append(outcome + ": expected a FATAL error (fatal() true); "
                                "an abortable error would let the zombie abort and go on")
            if zombie_error.retriable():
                failures.append(outcome + ": a fence must not be retriable")
            if zombie_error.txn_requires_abort():
                failures.append(outcome + ": txn_requires_abort must be false for a fence")
            if zombie_error.code() not in FENCED_CODES:
                failures.append(outcome + f": code must be one of "
                                f"{sorted(FENCED_CODES.values())}")
    print(("ok    " if not failures else "info  ") + outcome)

    # The new owner must be unaffected: its own transaction commits.
    try:
        b.begin_transaction()
        b.produce(topic, b"from-b", on_delivery=on_delivery)
        b.commit_transaction(args.timeout)
        print("ok    B committed a transaction of its own")
    except KafkaException as exc:
        failures.append(f"B's transaction failed: {describe(exc.args[0])}")
    b.flush(1)

    # The fence aborted A's open transaction: read_committed sees only B's record.
    got, timed_out = kafka_tool.consume_records(args.bootstrap, topic, from_beginning=True,
                                                until_eof=True, isolation="read_committed",
                                                timeout=args.timeout)
    values = [m.value() for m in got]
    if timed_out or values != [b"from-b"]:
        failures.append(f"read_committed after the fence: want [b'from-b'], got {values} "
                        f"(timed_out={timed_out})")
    else:
        print("ok    read_committed sees only B's record: A's transaction was aborted")

    for failure in failures:
        print(f"FAIL  {failure}")
    verdict = "FAILED" if failures else "passed"
    print(f"probe_zombie: {verdict} against {args.bootstrap} in "
          f"{time.monotonic() - started:.1f}s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

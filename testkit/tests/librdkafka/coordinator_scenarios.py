"""librdkafka (confluent-kafka) scenarios against the weir-testkit binary that
need several clients alive at once, which kafka_tool.py's one-shot commands
cannot express. Each prints one JSON object on stdout; the Rust test
(testkit/tests/librdkafka_coordinators.rs) asserts on it.

  fence  BOOTSTRAP TOPIC  a second producer with the same transactional id
                          fences the first, whose open transaction is aborted
  group  BOOTSTRAP TOPIC  a group of 3 static members with cooperative-sticky:
                          forms, survives a static restart without a
                          rebalance, and rebalances incrementally when a
                          member leaves for good and when a new one joins
"""

import json
import sys
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition


def base(bootstrap):
    # Warnings and errors only; info lines would clutter the test output.
    return {"bootstrap.servers": bootstrap, "log_level": 4}


def read_all(bootstrap, topic, isolation, timeout=20.0):
    """Values of partition 0 from the beginning to the end, as `isolation` sees them."""
    c = Consumer({**base(bootstrap), "group.id": "reader-" + isolation,
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "isolation.level": isolation})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    values, deadline = [], time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    return values
                raise KafkaException(msg.error())
            values.append(msg.value().decode())
        raise RuntimeError(f"no end of partition within {timeout}s ({values})")
    finally:
        c.close()


def fence(bootstrap, topic):
    conf = {**base(bootstrap), "transactional.id": "fence-tx", "transaction.timeout.ms": 60000}
    first = Producer(conf)
    first.init_transactions(30)
    first.begin_transaction()
    for i in range(3):
        first.produce(topic, value=f"zombie-{i}", partition=0)
    first.flush(30)  # the records are in the log; the transaction stays open

    second = Producer(conf)
    second.init_transactions(30)  # fences the first and aborts its transaction

    out = {}
    try:
        first.commit_transaction(30)
        out["first_commit"] = "ok"
    except KafkaException as e:
        err = e.args[0]
        out["first_commit"] = err.name()
        out["first_commit_fatal"] = err.fatal()

    second.begin_transaction()
    second.produce(topic, value="fresh", partition=0)
    second.commit_transaction(30)
    second.flush(10)
    out["read_committed"] = read_all(bootstrap, topic, "read_committed")
    out["read_uncommitted"] = read_all(bootstrap, topic, "read_uncommitted")
    return out


class Member:
    """One static consumer and what its rebalance callbacks saw."""

    def __init__(self, bootstrap, topic, instance):
        self.instance = instance
        self.assigned = set()
        self.assign_calls = 0
        self.revoked = 0
        self.lost = 0
        self.seen = set()
        self.consumer = Consumer({
            **base(bootstrap),
            "group.id": "static-group",
            "group.instance.id": instance,
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        })
        self.consumer.subscribe([topic], on_assign=self.on_assign, on_revoke=self.on_revoke,
                                on_lost=self.on_lost)

    def on_assign(self, _consumer, parts):
        self.assign_calls += 1
        self.assigned |= {p.partition for p in parts}

    def on_revoke(self, _consumer, parts):
        self.revoked += len(parts)
        self.assigned -= {p.partition for p in parts}

    def on_lost(self, _consumer, parts):
        self.lost += len(parts)
        self.assigned -= {p.partition for p in parts}

    def poll(self):
        msg = self.consumer.poll(0.05)
        if msg is not None and not msg.error():
            self.seen.add(msg.value().decode())

    def snapshot(self):
        return {"instance": self.instance, "assigned": sorted(self.assigned),
                "assign_calls": self.assign_calls, "revoked": self.revoked, "lost": self.lost}


def settle(members, partitions, per_member, timeout, quiet=2.0):
    """Polls until every member holds `per_member` partitions, together all of
    them exactly once, and no callback fired for `quiet` seconds."""
    deadline = time.monotonic() + timeout
    last_change, last = time.monotonic(), None
    while time.monotonic() < deadline:
        for m in members:
            m.poll()
        state = [(sorted(m.assigned), m.assign_calls, m.revoked, m.lost) for m in members]
        if state != last:
            last, last_change = state, time.monotonic()
        owned = [p for m in members for p in m.assigned]
        good = sorted(owned) == list(range(partitions)) and all(
            len(m.assigned) == per_member for m in members)
        if good and time.monotonic() - last_change >= quiet:
            return True
    return False


def group(bootstrap, topic, partitions=6):
    producer = Producer(base(bootstrap))
    expected = set()
    for p in range(partitions):
        for i in range(5):
            value = f"p{p}-{i}"
            producer.produce(topic, value=value, partition=p)
            expected.add(value)
    producer.flush(30)

    members = [Member(bootstrap, topic, f"instance-{i}") for i in range(3)]
    out = {"formed": settle(members, partitions, 2, 60)}
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and set().union(*(m.seen for m in members)) != expected:
        for m in members:
            m.poll()
    out["all_records_consumed"] = set().union(*(m.seen for m in members)) == expected
    out["after_forming"] = [m.snapshot() for m in members]

    # A static restart: close (a static member sends no LeaveGroup) and come
    # back with the same instance id within the session timeout.
    restarted = members[1]
    before = {m.instance: m.snapshot() for m in members}
    restarted.consumer.close()
    members[1] = Member(bootstrap, topic, restarted.instance)
    out["after_restart_settled"] = settle(members, partitions, 2, 30, quiet=3.0)
    out["after_restart"] = [m.snapshot() for m in members]
    out["restart_kept_assignment"] = sorted(members[1].assigned) == before[restarted.instance]["assigned"]
    out["others_untouched"] = all(
        members[i].snapshot() == before[members[i].instance] for i in (0, 2))

    # A member leaves for good: after its session times out, the others take
    # its partitions incrementally, without giving up their own.
    gone = members.pop(2)
    gone.consumer.close()
    revoked_before = [m.revoked + m.lost for m in members]
    owned_before = [set(m.assigned) for m in members]
    out["after_leave_settled"] = settle(members, partitions, 3, 40)
    out["after_leave"] = [m.snapshot() for m in members]
    out["survivors_kept_theirs"] = all(
        owned_before[i] <= members[i].assigned for i in range(len(members)))
    out["survivors_revoked"] = [m.revoked + m.lost - r for m, r in zip(members, revoked_before)]

    # A new member joins: cooperative-sticky moves one partition from each
    # survivor to it over two rebalances (revoke, then assign), and nothing
    # else moves.
    revoked_before = [m.revoked + m.lost for m in members]
    owned_before = [set(m.assigned) for m in members]
    members.append(Member(bootstrap, topic, "instance-new"))
    out["after_join_settled"] = settle(members, partitions, 2, 40)
    out["after_join"] = [m.snapshot() for m in members]
    out["join_revoked"] = [m.revoked + m.lost - r for m, r in zip(members, revoked_before)]
    out["join_kept_the_rest"] = all(
        members[i].assigned <= owned_before[i] for i in range(len(owned_before)))
    for m in members:
        m.consumer.close()
    return out


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("fence", "group"):
        print(__doc__, file=sys.stderr)
        return 2
    scenario, bootstrap, topic = sys.argv[1:]
    result = fence(bootstrap, topic) if scenario == "fence" else group(bootstrap, topic)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
